//! Reading a segment: every intact record from the start up to the first
//! that is not, and what stopped the reading ([`SegmentReport`], [`Fault`]).
//!
//! Whether what follows the first bad record is a torn tail or damage is
//! decided here, by looking for an intact record after it ([`resync`]; see
//! the parent module's "Damage"). A reader that must not lose acknowledged
//! records turns damage into the error [`DamagedFile`].

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_64;

use super::dir::data_dir_of;
use super::record::{decode_payload, AnyRecord, Record, KIND_ADD, KIND_CUCKOO};
use super::{MAGIC, MAX_RECORD};

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
pub(super) fn record_at(bytes: &[u8], pos: usize) -> Result<(AnyRecord, usize), &'static str> {
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
pub(super) fn intact_at(bytes: &[u8], pos: usize) -> bool {
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
pub(super) fn check_magic(bytes: &[u8]) -> Result<(), Fault> {
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
