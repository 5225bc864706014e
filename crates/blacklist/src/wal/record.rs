//! A log record: its kinds ([`Record`] for Bloom filters, [`CuckooRecord`]
//! for cuckoo filters, both as [`AnyRecord`]), and its bytes.
//!
//! The encoders append one framed record (length, checksum, payload; see
//! the parent module's "Format") to a buffer the writer owns, so a batch of
//! records is one write. [`decode_payload`] is their inverse on a payload
//! whose checksum already matched; it refuses a payload that does not
//! decode (an unknown kind, a short field) rather than guess.

use xxhash_rust::xxh3::xxh3_64;

pub(super) const KIND_ADD: u8 = 1;
pub(super) const KIND_CHUNK: u8 = 2;
pub(super) const KIND_LINEAGE: u8 = 3;
pub(super) const KIND_CUCKOO: u8 = 4;
pub(super) const CUCKOO_ADD: u8 = 1;
pub(super) const CUCKOO_DELETE: u8 = 2;

/// One decoded log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A key was added to a filter.
    Add {
        /// Filter name.
        name: String,
        /// Seed of the filter's first layer.
        seed: u64,
        /// Normalized key.
        key: Vec<u8>,
    },
    /// Bits were OR-ed into a layer (`BF.LOADCHUNK`).
    Chunk {
        /// Filter name.
        name: String,
        /// Seed of the filter's first layer.
        seed: u64,
        /// Layer index.
        layer: u32,
        /// Byte offset in the layer's bit array.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// A live-add journal's marker: filter files with this layer-0 seed
    /// belong to the journal's filter, and their keys were normalized with
    /// this key kind and match mode.
    Lineage {
        /// Filter name.
        name: String,
        /// Seed of the filter's first layer.
        seed: u64,
        /// Key kind code.
        key_kind: u8,
        /// Match mode code.
        match_mode: u8,
    },
}

/// A change of a cuckoo filter (record kind 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CuckooRecord {
    /// Filter name.
    pub name: String,
    /// The filter incarnation's id (a new filter of the same name has another).
    pub id: u64,
    /// The change's sequence number within the incarnation (1, 2, …).
    pub seq: u64,
    /// What changed.
    pub op: CuckooOp,
    /// The item (raw bytes, as the client sent it).
    pub item: Vec<u8>,
}

/// The change a [`CuckooRecord`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CuckooOp {
    /// One copy of the item was added.
    Add,
    /// One copy of the item was deleted.
    Delete,
}

/// Any record of a segment: the Bloom filters' or a cuckoo filter's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyRecord {
    /// A record about a Bloom filter.
    Bloom(Record),
    /// A change of a cuckoo filter.
    Cuckoo(CuckooRecord),
}

fn header(out: &mut Vec<u8>, kind: u8, name: &str, seed: u64) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; 12]);
    out.push(kind);
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&seed.to_le_bytes());
    start
}

fn seal(out: &mut [u8], start: usize) {
    let payload_len = out.len() - start - 12;
    let sum = xxh3_64(&out[start + 12..]);
    out[start..start + 4].copy_from_slice(&(payload_len as u32).to_le_bytes());
    out[start + 4..start + 12].copy_from_slice(&sum.to_le_bytes());
}

/// Appends an encoded add record to `out`.
pub fn encode_add(out: &mut Vec<u8>, name: &str, seed: u64, key: &[u8]) {
    let start = header(out, KIND_ADD, name, seed);
    out.extend_from_slice(key);
    seal(out, start);
}

/// Appends an encoded chunk record to `out`.
pub fn encode_chunk(
    out: &mut Vec<u8>,
    name: &str,
    seed: u64,
    layer: u32,
    offset: u64,
    data: &[u8],
) {
    let start = header(out, KIND_CHUNK, name, seed);
    out.extend_from_slice(&layer.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(data);
    seal(out, start);
}

/// Appends an encoded lineage marker to `out`.
pub fn encode_lineage(out: &mut Vec<u8>, name: &str, seed: u64, key_kind: u8, match_mode: u8) {
    let start = header(out, KIND_LINEAGE, name, seed);
    out.push(key_kind);
    out.push(match_mode);
    seal(out, start);
}

/// Appends an encoded cuckoo filter change to `out`.
pub fn encode_cuckoo(out: &mut Vec<u8>, name: &str, id: u64, seq: u64, op: CuckooOp, item: &[u8]) {
    let start = header(out, KIND_CUCKOO, name, id);
    out.extend_from_slice(&seq.to_le_bytes());
    out.push(match op {
        CuckooOp::Add => CUCKOO_ADD,
        CuckooOp::Delete => CUCKOO_DELETE,
    });
    out.extend_from_slice(item);
    seal(out, start);
}

pub(super) fn decode_payload(p: &[u8]) -> Option<AnyRecord> {
    let kind = *p.first()?;
    let nlen = u16::from_le_bytes(p.get(1..3)?.try_into().ok()?) as usize;
    let name = std::str::from_utf8(p.get(3..3 + nlen)?).ok()?.to_owned();
    let rest = p.get(3 + nlen..)?;
    let seed = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
    let body = &rest[8..];
    let bloom = match kind {
        KIND_CUCKOO => {
            let seq = u64::from_le_bytes(body.get(..8)?.try_into().ok()?);
            let op = match *body.get(8)? {
                CUCKOO_ADD => CuckooOp::Add,
                CUCKOO_DELETE => CuckooOp::Delete,
                _ => return None,
            };
            return Some(AnyRecord::Cuckoo(CuckooRecord {
                name,
                id: seed,
                seq,
                op,
                item: body[9..].to_vec(),
            }));
        }
        KIND_ADD => Some(Record::Add {
            name,
            seed,
            key: body.to_vec(),
        }),
        KIND_CHUNK => Some(Record::Chunk {
            name,
            seed,
            layer: u32::from_le_bytes(body.get(..4)?.try_into().ok()?),
            offset: u64::from_le_bytes(body.get(4..12)?.try_into().ok()?),
            data: body.get(12..)?.to_vec(),
        }),
        KIND_LINEAGE if body.len() == 2 => Some(Record::Lineage {
            name,
            seed,
            key_kind: body[0],
            match_mode: body[1],
        }),
        _ => None,
    };
    bloom.map(AnyRecord::Bloom)
}
