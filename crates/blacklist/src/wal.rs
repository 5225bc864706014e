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
//! # Damage: a torn tail, or damage in the middle
//!
//! Records have no per-record magic: a record is *intact* when its length
//! is possible, its bytes are all there, its checksum matches and its
//! payload decodes. Reading stops at the first record that is not intact,
//! and what follows is classified ([`Fault`]):
//!
//! * a **torn tail** ([`FaultKind::TornTail`]) when no intact record starts
//!   anywhere after the damaged one (or the file is a strict prefix of the
//!   magic): what a crash during an append, or a segment abandoned after a
//!   failed write, leaves behind. Nothing in it was acknowledged (every
//!   acknowledged record was synced whole before its acknowledgement, and
//!   the writer never appends after an unsynced one), so it may be cut off.
//! * **damage** ([`FaultKind::Damaged`]) otherwise: a wrong magic, or any
//!   damaged record after which an intact one can be found. Records after
//!   the damage were acknowledged, and the damaged stretch may hold more,
//!   of any filter (its name is among the damaged bytes). Readers never cut
//!   such a file short silently: the server refuses to start on it, naming
//!   file and offset ([`DamagedFile`]), and keeps it byte for byte;
//!   [`salvage`] (used by `bloomgate repair`) recovers every intact record
//!   before and after it and says what was lost.
//!
//! Finding the next intact record (*resynchronising*, [`resync`]) first
//! tries where the damaged record's own length says the next one starts
//! (a flipped payload byte leaves the framing intact), then every later
//! byte offset. A candidate must pass cheap checks (a known kind, a
//! filter-name-like name of 1–200 printable ASCII bytes) before its
//! checksum is computed, so scanning garbage costs about one hash per
//! 10⁵ offsets. The classification errs towards damage: a torn tail whose
//! garbage happens to contain an intact record (a chunk's data may embed
//! one) is reported as damage, never the other way round. A single damaged
//! byte in the *last* record of a file, with nothing after it, cannot be
//! told from a torn write and counts as a torn tail.

use std::fs::File;
use std::io::Read;
use std::ops::Range;
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
    /// Bytes after the intact prefix that were not read.
    pub lost_bytes: u64,
    /// Why reading stopped early, if it did.
    pub fault: Option<Fault>,
}

impl SegmentReport {
    /// The fault, if it is damage rather than a torn tail.
    pub fn damage(&self) -> Option<&Fault> {
        self.fault.as_ref().filter(|f| f.kind == FaultKind::Damaged)
    }

    /// [`SegmentReport::damage`] as an error naming the file `path`.
    pub fn check(&self, path: &Path) -> Result<(), DamagedFile> {
        match self.damage() {
            Some(f) => Err(DamagedFile::new(path, f)),
            None => Ok(()),
        }
    }
}

/// Where and why reading a segment stopped early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// Byte offset of the first record (or magic) that is not intact.
    pub offset: u64,
    /// A torn tail, or damage with intact records after it.
    pub kind: FaultKind,
    /// What is wrong with the record at `offset`.
    pub problem: String,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            FaultKind::TornTail => write!(f, "torn tail at byte {}: {}", self.offset, self.problem),
            FaultKind::Damaged => write!(
                f,
                "damaged at byte {}: {}, and intact records follow",
                self.offset, self.problem
            ),
        }
    }
}

/// The two kinds of [`Fault`] (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// An incomplete last record (or magic) with nothing intact after it.
    TornTail,
    /// Damage after which intact records follow, or a wrong magic.
    Damaged,
}

/// A log segment or journal that is damaged other than at its tail: the
/// error that stops whatever reads it (nothing of it is cut or removed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {fault}; the file is kept as it is, and records in and after the damage may belong to any filter. Stop the server and run `bloomgate repair {}` to salvage every intact record (it reports what is lost and keeps the original)", path.display(), data_dir_of(path).display())]
pub struct DamagedFile {
    /// The segment or journal.
    pub path: PathBuf,
    /// Where and what.
    pub fault: Fault,
}

impl DamagedFile {
    /// The damage `fault` of the file `path`.
    pub fn new(path: &Path, fault: &Fault) -> DamagedFile {
        DamagedFile {
            path: path.to_path_buf(),
            fault: fault.clone(),
        }
    }
}

/// The data directory a segment (`DIR/.bloomgate-wal/wal-N.log`) or a
/// journal (`DIR/NAME.live`) belongs to.
pub fn data_dir_of(path: &Path) -> PathBuf {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if parent.file_name().is_some_and(|n| n == WAL_DIR) {
        match parent.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        }
    } else {
        parent.to_path_buf()
    }
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

/// The record at `pos`, and its length with its header, if it is intact.
fn record_at(bytes: &[u8], pos: usize) -> Result<(AnyRecord, usize), &'static str> {
    let head = bytes
        .get(pos..pos.saturating_add(12))
        .ok_or("truncated record header")?;
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
}

/// Whether an intact record starts at `pos`; cheap checks of the kind and
/// the name come before the checksum, so that scanning garbage is fast.
/// Every record the server writes passes them (filter names are 1–200
/// bytes of `A-Z a-z 0-9 _ - . :`).
fn intact_at(bytes: &[u8], pos: usize) -> bool {
    let Some(head) = bytes.get(pos..pos.saturating_add(15)) else {
        return false;
    };
    let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
    let kind = head[12];
    let nlen = u16::from_le_bytes([head[13], head[14]]) as usize;
    if len > MAX_RECORD
        || !(KIND_ADD..=KIND_CUCKOO).contains(&kind)
        || !(1..=200).contains(&nlen)
        || len < 3 + nlen + 8
        || bytes.len() - pos - 12 < len
    {
        return false;
    }
    let name = &bytes[pos + 15..pos + 15 + nlen];
    if !name.iter().all(|b| (0x21..0x7f).contains(b)) {
        return false;
    }
    record_at(bytes, pos).is_ok()
}

/// The offset of the first intact record after a damaged one at `damaged`
/// (see the module docs), if there is one.
pub fn resync(bytes: &[u8], damaged: usize) -> Option<usize> {
    // Where the damaged record's length says the next one starts.
    if let Some(head) = bytes.get(damaged..damaged.saturating_add(4)) {
        let len = u32::from_le_bytes(head.try_into().expect("4 bytes")) as usize;
        let next = damaged + 12 + len.min(MAX_RECORD);
        if len <= MAX_RECORD && next < bytes.len() && intact_at(bytes, next) {
            return Some(next);
        }
    }
    (damaged + 1..bytes.len()).find(|&p| intact_at(bytes, p))
}

/// Checks the magic: `Ok` if present, else the fault at offset 0.
fn check_magic(bytes: &[u8]) -> Result<(), Fault> {
    if bytes.len() >= MAGIC.len() && &bytes[..MAGIC.len()] == MAGIC {
        return Ok(());
    }
    if bytes.len() < MAGIC.len() && MAGIC.starts_with(bytes) {
        // A crash while the file was being started.
        return Err(Fault {
            offset: 0,
            kind: FaultKind::TornTail,
            problem: "incomplete segment magic".into(),
        });
    }
    Err(Fault {
        offset: 0,
        kind: FaultKind::Damaged,
        problem: "bad segment magic".into(),
    })
}

/// Reads the records of every kind of a segment's contents. Stops at the
/// first damaged record; the intact prefix is `bytes.len() - lost_bytes`
/// long, and [`SegmentReport::fault`] says whether the rest is a torn tail.
pub fn read_bytes_all(bytes: &[u8], mut f: impl FnMut(AnyRecord)) -> SegmentReport {
    let mut rep = SegmentReport::default();
    if bytes.is_empty() {
        return rep;
    }
    if let Err(fault) = check_magic(bytes) {
        rep.lost_bytes = bytes.len() as u64;
        rep.fault = Some(fault);
        return rep;
    }
    let mut pos = MAGIC.len();
    while pos < bytes.len() {
        match record_at(bytes, pos) {
            Ok((rec, n)) => {
                f(rec);
                rep.records += 1;
                pos += n;
            }
            Err(why) => {
                rep.lost_bytes = (bytes.len() - pos) as u64;
                let kind = if resync(bytes, pos).is_some() {
                    FaultKind::Damaged
                } else {
                    FaultKind::TornTail
                };
                rep.fault = Some(Fault {
                    offset: pos as u64,
                    kind,
                    problem: why.into(),
                });
                break;
            }
        }
    }
    rep
}

/// What [`salvage`] found in a segment or journal.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Salvage {
    /// The byte ranges of the intact records, in file order.
    pub kept: Vec<Range<usize>>,
    /// The stretches that are not intact records, in file order.
    pub lost: Vec<Lost>,
}

/// One stretch of a file that [`salvage`] could not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// Where it starts.
    pub offset: u64,
    /// How long it is.
    pub len: u64,
    /// What was wrong at its start.
    pub problem: String,
    /// Whether it is the file's torn tail (no intact record after it).
    pub tail: bool,
}

impl Salvage {
    /// Bytes kept (the records, without the magic).
    pub fn kept_bytes(&self) -> u64 {
        self.kept.iter().map(|r| r.len() as u64).sum()
    }

    /// Bytes lost.
    pub fn lost_bytes(&self) -> u64 {
        self.lost.iter().map(|l| l.len).sum()
    }

    /// Whether anything but a torn tail was lost.
    pub fn damaged(&self) -> bool {
        self.lost.iter().any(|l| !l.tail)
    }

    /// The repaired file: the magic, then every intact record as it was.
    pub fn repaired(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAGIC.len() + self.kept_bytes() as usize);
        out.extend_from_slice(MAGIC);
        for r in &self.kept {
            out.extend_from_slice(&bytes[r.clone()]);
        }
        out
    }
}

/// Finds every intact record of a segment's or journal's contents, also
/// after damage (resynchronising, see the module docs), and every stretch
/// that is not one.
pub fn salvage(bytes: &[u8]) -> Salvage {
    let mut s = Salvage::default();
    if bytes.is_empty() {
        return s;
    }
    let mut pos = match check_magic(bytes) {
        Ok(()) => MAGIC.len(),
        Err(fault) => {
            // Records may follow a damaged magic.
            let next = if fault.kind == FaultKind::Damaged {
                (0..bytes.len()).find(|&p| intact_at(bytes, p))
            } else {
                None
            };
            let end = next.unwrap_or(bytes.len());
            s.lost.push(Lost {
                offset: 0,
                len: end as u64,
                problem: fault.problem,
                tail: fault.kind == FaultKind::TornTail,
            });
            end
        }
    };
    while pos < bytes.len() {
        match record_at(bytes, pos) {
            Ok((_, n)) => {
                s.kept.push(pos..pos + n);
                pos += n;
            }
            Err(why) => {
                let next = resync(bytes, pos);
                let end = next.unwrap_or(bytes.len());
                s.lost.push(Lost {
                    offset: pos as u64,
                    len: (end - pos) as u64,
                    problem: why.into(),
                    tail: next.is_none(),
                });
                pos = end;
            }
        }
    }
    s
}

/// Decodes one intact record's bytes (a range from [`Salvage::kept`]).
pub fn decode_record(bytes: &[u8]) -> Option<AnyRecord> {
    record_at(bytes, 0).ok().map(|(r, _)| r)
}

/// Segment paths in `dir`, sorted by number.
pub fn segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = segment_number(name) {
            out.push((n, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// The number of a segment file called `name` (`wal-N.log`), if it is one.
fn segment_number(name: &str) -> Option<u64> {
    name.strip_prefix("wal-")
        .and_then(|s| s.strip_suffix(".log"))
        .and_then(|s| s.parse::<u64>().ok())
}

/// Files in the log directory `dir` that look like log segments but are
/// not named like one (`wal-N.log`), so that no reader reads their records:
/// a name starting with `wal-` or ending in `.log`, or contents starting
/// with the segment magic. Not counted: the lock file, a segment that
/// `bloomgate repair` kept aside (`….damaged-TIME`) and an atomic write's
/// temporary (`….tmp-PID`).
pub fn strays(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let path = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if segment_number(&name).is_some()
            || name == crate::datadir::LOCK_FILE
            || name.contains(".damaged-")
            || name.contains(".tmp-")
            || !path.is_file()
        {
            continue;
        }
        let looks = name.starts_with("wal-") || name.ends_with(".log") || {
            let mut head = [0u8; 8];
            File::open(&path)
                .and_then(|mut f| f.read_exact(&mut head))
                .is_ok()
                && &head == MAGIC
        };
        if looks {
            out.push(path);
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
        assert_eq!((rep.records, rep.lost_bytes, rep.fault), (4, 0, None));
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
        assert!(rep.fault.unwrap().problem.contains("undecodable"));
    }

    /// A stream of records of every kind, and each record's byte range.
    fn stream(recs: &[(u8, u8, Vec<u8>)]) -> (Vec<u8>, Vec<Range<usize>>) {
        let mut b = MAGIC.to_vec();
        let mut ranges = Vec::new();
        for (kind, name, data) in recs {
            let start = b.len();
            let name = format!("f{name}");
            match kind % 4 {
                0 => encode_add(&mut b, &name, 7, data),
                1 => encode_chunk(&mut b, &name, 7, 1, 64, data),
                2 => encode_lineage(&mut b, &name, 7, 0, 1),
                _ => encode_cuckoo(&mut b, &name, 9, 3, CuckooOp::Delete, data),
            }
            ranges.push(start..b.len());
        }
        (b, ranges)
    }

    /// Checks what `salvage` and `read_bytes_all` make of `bad`, a copy of
    /// the record stream with `ranges` damaged in `hit` (a byte range).
    fn check_damage(bad: &[u8], ranges: &[Range<usize>], hit: Range<usize>) {
        let touched = |r: &Range<usize>| r.start < hit.end && hit.start < r.end;
        let s = salvage(bad);
        // Every record the damage did not touch is recovered, exactly, and
        // nothing else is.
        let want: Vec<Range<usize>> = ranges
            .iter()
            .filter(|r| !touched(r) && r.end <= bad.len())
            .cloned()
            .collect();
        assert_eq!(s.kept, want);
        // Kept and lost stretches tile the file after the magic.
        let mut spans: Vec<(usize, usize)> = s.kept.iter().map(|r| (r.start, r.end)).collect();
        spans.extend(
            s.lost
                .iter()
                .map(|l| (l.offset as usize, (l.offset + l.len) as usize)),
        );
        spans.sort();
        let mut at = MAGIC.len().min(bad.len());
        for (a, b) in spans {
            assert_eq!(a, at);
            at = b;
        }
        assert_eq!(at, bad.len());
        // The repaired file reads whole, with the same records.
        let repaired = s.repaired(bad);
        let rep = read_bytes_all(&repaired, |_| {});
        assert_eq!((rep.records, rep.fault), (want.len() as u64, None));
        // A reader stops at the first touched record; it is damage exactly
        // when an untouched record follows it.
        let rep = read_bytes_all(bad, |_| {});
        let first = ranges
            .iter()
            .position(|r| r.start < bad.len() && (touched(r) || r.end > bad.len()));
        match first {
            None => assert_eq!(rep.fault, None),
            Some(i) => {
                let fault = rep.fault.expect("a fault");
                assert_eq!(fault.offset, ranges[i].start as u64);
                let after = ranges[i + 1..]
                    .iter()
                    .any(|r| !touched(r) && r.end <= bad.len());
                let kind = if after {
                    FaultKind::Damaged
                } else {
                    FaultKind::TornTail
                };
                assert_eq!(fault.kind, kind);
                assert_eq!(rep.records, i as u64);
            }
        }
    }

    fn records() -> impl proptest::strategy::Strategy<Value = Vec<(u8, u8, Vec<u8>)>> {
        use proptest::prelude::*;
        proptest::collection::vec(
            (
                any::<u8>(),
                0u8..4,
                proptest::collection::vec(any::<u8>(), 0..40),
            ),
            1..30,
        )
    }

    proptest::proptest! {
        /// One flipped byte anywhere after the magic.
        #[test]
        fn salvage_after_a_flipped_byte(
            recs in records(),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            bits in 1u8..=255,
        ) {
            let (mut b, ranges) = stream(&recs);
            let i = MAGIC.len() + at.index(b.len() - MAGIC.len());
            b[i] ^= bits;
            check_damage(&b, &ranges, i..i + 1);
        }

        /// A stretch overwritten with garbage, then perhaps a truncation.
        #[test]
        fn salvage_after_garbage_and_truncation(
            recs in records(),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            garbage in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..50),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
            truncate in proptest::prelude::any::<bool>(),
        ) {
            let (mut b, ranges) = stream(&recs);
            let i = MAGIC.len() + at.index(b.len() - MAGIC.len());
            let end = (i + garbage.len()).min(b.len());
            let mut changed: Option<Range<usize>> = None;
            for (j, g) in (i..end).zip(&garbage) {
                if b[j] != *g {
                    b[j] = *g;
                    changed = Some(changed.map_or(j..j + 1, |c| c.start..j + 1));
                }
            }
            let mut hit = changed.unwrap_or(i..i);
            if truncate {
                let len = MAGIC.len() + cut.index(b.len() - MAGIC.len() + 1);
                b.truncate(len);
                hit = hit.start.min(len)..hit.end.min(len);
            }
            check_damage(&b, &ranges, hit);
        }
    }

    /// Damage in the middle is told from a torn tail, and the framing of the
    /// damaged record is used to resynchronise.
    #[test]
    fn torn_tail_and_damage_are_told_apart() {
        let recs: Vec<(u8, u8, Vec<u8>)> = (0..5).map(|i| (0, i, vec![b'k'; 20])).collect();
        let (b, ranges) = stream(&recs);
        // A flipped payload byte in the first record: damage at its start.
        let mut bad = b.clone();
        bad[ranges[0].start + 20] ^= 1;
        let rep = read_bytes_all(&bad, |_| {});
        let f = rep.fault.clone().unwrap();
        assert_eq!(
            (f.kind, f.offset),
            (FaultKind::Damaged, ranges[0].start as u64)
        );
        let e = rep
            .check(Path::new("/d/.bloomgate-wal/wal-00000001.log"))
            .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("wal-00000001.log") && msg.contains("byte 8"),
            "{msg}"
        );
        assert!(msg.contains("bloomgate repair /d"), "{msg}");
        assert_eq!(resync(&bad, ranges[0].start), Some(ranges[1].start));
        let s = salvage(&bad);
        assert_eq!(s.kept, ranges[1..].to_vec());
        assert!(s.damaged());
        // Cut inside the last record: a torn tail.
        let rep = read_bytes_all(&b[..b.len() - 3], |_| {});
        assert_eq!(rep.fault.unwrap().kind, FaultKind::TornTail);
        assert!(!salvage(&b[..b.len() - 3]).damaged());
        // A wrong magic is damage; the records after it are salvaged.
        let mut bad = b.clone();
        bad[0] = b'X';
        assert_eq!(read_bytes_all(&bad, |_| {}).damage().unwrap().offset, 0);
        assert_eq!(salvage(&bad).kept, ranges);
        assert_eq!(data_dir_of(Path::new("x.live")), PathBuf::from("."));
        assert_eq!(data_dir_of(Path::new("/a/b.live")), PathBuf::from("/a"));
    }

    /// Files that look like segments but are not named like one.
    #[test]
    fn strays_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for n in [
            "wal-00000001.log",
            "lock",
            "wal-00000001.log.damaged-20260101T000000Z",
            "notes.txt",
        ] {
            std::fs::write(d.join(n), MAGIC).unwrap();
        }
        std::fs::write(d.join("notes.txt"), b"hello").unwrap();
        std::fs::write(d.join("wal-x1.log"), b"").unwrap();
        std::fs::write(d.join("copy.bin"), MAGIC).unwrap();
        std::fs::write(d.join("old.log"), b"").unwrap();
        let got: Vec<String> = strays(d)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(got, ["copy.bin", "old.log", "wal-x1.log"]);
    }
}
