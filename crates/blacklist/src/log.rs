//! The record format of the write-ahead log and of the live-add journals.
//!
//! A data directory served by `bloomgate serve` keeps every acknowledged
//! live add in a log before it reaches a filter file. Anything that reads a
//! filter from such a directory — the server at startup, the CLI's `check`
//! or `info` — must read these records too, or it answers from a state that
//! lacks an acknowledged add. This module is the one definition of their
//! format; the writer (group commit, rotation) is the server's.
//!
//! # Format
//!
//! The log lives in `DIR/.bloomgate-wal/` as numbered segments
//! `wal-00000001.log`, … Each segment starts with the 8-byte magic
//! `BGWAL001` and then holds records:
//!
//! ```text
//! u32 LE  payload length (≤ 64 MiB)
//! u64 LE  xxh3-64 of the payload
//! payload:
//!   u8      kind (1 = add key, 2 = OR a chunk of bits, 3 = lineage marker,
//!                 4 = cuckoo filter change)
//!   u16 LE  filter name length, then the name
//!   u64 LE  seed of the filter's first layer (identifies this incarnation);
//!           for kind 4 the cuckoo filter's incarnation id
//!   kind 1: the normalized key bytes
//!   kind 2: u32 LE layer, u64 LE byte offset, then the bytes
//!   kind 3: u8 key kind, u8 match mode (only in live-add journals)
//!   kind 4: u64 LE sequence number, u8 operation (1 = add, 2 = delete),
//!           then the item bytes
//! ```
//!
//! # Cuckoo filter changes (kind 4)
//!
//! A cuckoo filter deletes, and a delete is not idempotent: replaying one
//! twice removes a second copy of the item (or another item's equal
//! fingerprint), which is a false negative. So its records are not replayed
//! "at least once" like Bloom adds but *exactly once*: every change of one
//! filter incarnation gets the next sequence number (1, 2, …) under the
//! filter's write lock, in the order the log receives it; the filter's
//! snapshot file stores the sequence number of the last change it contains,
//! and replay applies only the records after it, in log order. A crash
//! between writing a snapshot and trimming the log replays nothing twice.
//!
//! Readers that only know Bloom filters ([`read_segment`], [`read_bytes`])
//! step over kind 4 records (they are intact records, not damage);
//! [`read_segment_all`] and [`read_bytes_all`] yield them too.
//!
//! The same segment format (magic and records) is used by the per-filter
//! journals of live adds, `NAME.live` ([`crate::journal`]).
//!
//! Records carry the *normalized* key, so replay needs no URL parsing, and
//! the seed of the filter they were made against. A record is replayed onto
//! a filter only if that seed is in the filter's *lineage* (the seeds of the
//! files it has served since it was created, kept in its journal, see
//! [`crate::journal`]): records made before a reload still apply after it,
//! records of a filter that was since deleted or recreated do not.
//!
//! A record whose length is impossible, whose bytes end early or whose
//! checksum does not match ends its segment: the intact prefix is kept and
//! the loss is reported ([`SegmentReport`]).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_64;

/// The log's directory inside a data directory.
pub const WAL_DIR: &str = ".bloomgate-wal";

/// Segment file magic.
pub const MAGIC: &[u8; 8] = b"BGWAL001";
/// Largest payload accepted when reading (anything larger is corruption).
pub const MAX_RECORD: usize = 64 << 20;
const KIND_ADD: u8 = 1;
const KIND_CHUNK: u8 = 2;
const KIND_LINEAGE: u8 = 3;
const KIND_CUCKOO: u8 = 4;
const CUCKOO_ADD: u8 = 1;
const CUCKOO_DELETE: u8 = 2;

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

fn decode_payload(p: &[u8]) -> Option<AnyRecord> {
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

/// What reading one segment found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SegmentReport {
    /// Intact records.
    pub records: u64,
    /// Bytes after the intact prefix that were discarded.
    pub lost_bytes: u64,
    /// Why reading stopped early, if it did.
    pub problem: Option<String>,
}

/// Reads a segment's Bloom filter records (stepping over cuckoo filter
/// changes). Stops at the first damaged record.
pub fn read_segment(path: &Path, f: impl FnMut(Record)) -> std::io::Result<SegmentReport> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    Ok(read_bytes(&bytes, f))
}

/// Reads a segment's records of every kind. Stops at the first damaged record.
pub fn read_segment_all(path: &Path, f: impl FnMut(AnyRecord)) -> std::io::Result<SegmentReport> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    Ok(read_bytes_all(&bytes, f))
}

/// Reads the Bloom filter records of a segment's contents (stepping over
/// cuckoo filter changes, which count as intact records). Stops at the
/// first damaged record; the intact prefix is `bytes.len() - lost_bytes`
/// long.
pub fn read_bytes(bytes: &[u8], mut f: impl FnMut(Record)) -> SegmentReport {
    read_bytes_all(bytes, |r| {
        if let AnyRecord::Bloom(r) = r {
            f(r)
        }
    })
}

/// Reads the records of every kind of a segment's contents. Stops at the
/// first damaged record; the intact prefix is `bytes.len() - lost_bytes`
/// long.
pub fn read_bytes_all(bytes: &[u8], mut f: impl FnMut(AnyRecord)) -> SegmentReport {
    let mut rep = SegmentReport::default();
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        rep.lost_bytes = bytes.len() as u64;
        if !bytes.is_empty() {
            rep.problem = Some("bad segment magic".into());
        }
        return rep;
    }
    let mut pos = MAGIC.len();
    while pos < bytes.len() {
        let problem = (|| {
            let head = bytes.get(pos..pos + 12).ok_or("truncated record header")?;
            let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
            if len > MAX_RECORD {
                return Err("impossible record length");
            }
            let sum = u64::from_le_bytes(head[4..12].try_into().expect("8 bytes"));
            let payload = bytes
                .get(pos + 12..pos + 12 + len)
                .ok_or("truncated record")?;
            if xxh3_64(payload) != sum {
                return Err("record checksum mismatch");
            }
            let rec = decode_payload(payload).ok_or("undecodable record")?;
            Ok((rec, 12 + len))
        })();
        match problem {
            Ok((rec, n)) => {
                f(rec);
                rep.records += 1;
                pos += n;
            }
            Err(why) => {
                rep.lost_bytes = (bytes.len() - pos) as u64;
                rep.problem = Some(format!("{why} at byte {pos}"));
                break;
            }
        }
    }
    rep
}

/// Segment paths in `dir`, sorted by number.
pub fn segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = name
            .strip_prefix("wal-")
            .and_then(|s| s.strip_suffix(".log"))
            .and_then(|s| s.parse::<u64>().ok())
        {
            out.push((n, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// The path of segment number `n` in the log directory `dir`.
pub fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("wal-{n:08}.log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kind 4 record's bytes, literally: a format change cannot slip in.
    #[test]
    fn cuckoo_record_golden_bytes() {
        let mut b = Vec::new();
        encode_cuckoo(&mut b, "cf", 7, 2, CuckooOp::Delete, b"x");
        let payload: &[u8] = &[
            4, 2, 0, b'c', b'f', 7, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, b'x',
        ];
        assert_eq!(&b[..4], &(payload.len() as u32).to_le_bytes());
        assert_eq!(&b[4..12], &xxh3_64(payload).to_le_bytes());
        assert_eq!(&b[12..], payload);
    }

    /// Cuckoo records are yielded by the `_all` readers, stepped over (as
    /// intact records, not damage) by the Bloom-only ones, and the Bloom
    /// records around them are kept.
    #[test]
    fn cuckoo_records_between_bloom_records() {
        let mut b = MAGIC.to_vec();
        encode_add(&mut b, "a", 1, b"k1");
        encode_cuckoo(&mut b, "c", 9, 1, CuckooOp::Add, b"item");
        encode_cuckoo(&mut b, "c", 9, 2, CuckooOp::Delete, b"item");
        encode_add(&mut b, "a", 1, b"k2");
        let mut all = Vec::new();
        let rep = read_bytes_all(&b, |r| all.push(r));
        assert_eq!((rep.records, rep.lost_bytes), (4, 0));
        assert_eq!(
            all[2],
            AnyRecord::Cuckoo(CuckooRecord {
                name: "c".into(),
                id: 9,
                seq: 2,
                op: CuckooOp::Delete,
                item: b"item".to_vec(),
            })
        );
        let mut bloom = Vec::new();
        let rep = read_bytes(&b, |r| bloom.push(r));
        assert_eq!((rep.records, rep.lost_bytes, rep.problem), (4, 0, None));
        assert_eq!(bloom.len(), 2);
        assert!(matches!(&bloom[1], Record::Add { key, .. } if key == b"k2"));
        // An unknown operation code is damage, not a silently skipped record.
        let mut bad = MAGIC.to_vec();
        encode_cuckoo(&mut bad, "c", 9, 1, CuckooOp::Add, b"");
        let op_at = bad.len() - 1;
        bad[op_at] = 9;
        let payload_at = MAGIC.len() + 12;
        let sum = xxh3_64(&bad[payload_at..]);
        bad[MAGIC.len() + 4..payload_at].copy_from_slice(&sum.to_le_bytes());
        let rep = read_bytes_all(&bad, |_| {});
        assert_eq!(rep.records, 0);
        assert!(rep.problem.unwrap().contains("undecodable"));
    }
}
