//! Per-filter journals of live adds: `DIR/NAME.live`.
//!
//! The write-ahead log ([`crate::wal`]) is trimmed by every snapshot, and the
//! snapshot's copy of a filter is replaced wholesale by a reload. So that an
//! acknowledged add is never lost, even when the filter file is swapped for
//! a rebuilt one, every add record a snapshot trims from the log is first
//! appended to the filter's journal, and a reload (HTTP, SIGHUP, startup)
//! inserts the whole journal plus the not-yet-trimmed log records into the
//! new file before it serves it.
//!
//! # Format
//!
//! A journal is a log segment: the magic `BGWAL001`, then records in the
//! log's format (length, xxh3-64, payload), appended with `fdatasync`:
//!
//! * *lineage markers* (kind 3): "a file whose layer 0 has this seed is this
//!   filter, and its keys were normalized with this key kind and match mode".
//!   One is written when the filter is created, first served, or reloaded.
//!   The seeds of a journal's markers are the filter's **lineage**: log
//!   records carrying one of them belong to the filter, even across reloads
//!   and restarts with a replaced file. A deleted or recreated filter starts
//!   a new journal, so records of an older incarnation are not resurrected.
//! * *adds* (kind 1), copied verbatim from the log: the normalized key and
//!   the seed it was added under (whose marker gives its key kind and mode).
//!
//! Appending a record twice (a crash between journaling and trimming the
//! log) is harmless: insertion is idempotent. A torn tail (a crash during
//! an append, see [`crate::wal`]) is cut off when the journal is read by its
//! owner (the server, [`Repair::Truncate`]): the intact prefix is kept and
//! the loss is reported ([`Loaded::report`]). Read-only readers
//! ([`Repair::No`]) leave the file as it is. Damage anywhere else (intact
//! records follow it, or the magic is wrong) is never cut off or rewritten
//! by anyone but `bloomgate repair`: [`load`] reports it
//! ([`SegmentReport::damage`]) and leaves the file alone, [`compact`]
//! refuses, and the server stops with [`crate::wal::DamagedFile`].

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use bloomgate_engine::atomic::sync_parent;

use crate::wal::{self, FaultKind, Record, SegmentReport, MAGIC};

/// One lineage marker: a layer-0 seed and the key rules of that file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lineage {
    /// Seed of the file's first layer.
    pub seed: u64,
    /// Key kind code.
    pub key_kind: u8,
    /// Match mode code.
    pub match_mode: u8,
}

/// `DIR/NAME.live`.
pub fn path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.live"))
}

/// A journal's contents.
#[derive(Default)]
pub struct Contents {
    /// Lineage markers, oldest first.
    pub lineage: Vec<Lineage>,
    /// Journaled adds: (seed added under, normalized key).
    pub adds: Vec<(u64, Vec<u8>)>,
}

/// What to do with a damaged tail when reading a journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repair {
    /// Cut the file back to its intact prefix, so later appends stay
    /// readable (only the journal's owner, the server, may do this).
    Truncate,
    /// Leave the file untouched (tools that only read a data directory).
    No,
}

/// A journal's contents and what reading it found.
#[derive(Default)]
pub struct Loaded {
    /// The intact records.
    pub contents: Contents,
    /// Records read and bytes of damaged tail discarded.
    pub report: SegmentReport,
    /// The file's length when it was read (0 if missing).
    pub len: u64,
}

/// Reads a journal (a missing one is empty). Reading stops at the first
/// record that is not intact, and [`Loaded::report`] says why; with
/// [`Repair::Truncate`] a torn tail is also cut off the file. Damage with
/// intact records after it is left in place (check
/// [`SegmentReport::damage`]: the contents are then only a prefix).
pub fn load(path: &Path, repair: Repair) -> std::io::Result<Loaded> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
        Err(e) => return Err(e),
    };
    let mut c = Contents::default();
    let rep = wal::read_bytes(&bytes, |rec| match rec {
        Record::Add { seed, key, .. } => c.adds.push((seed, key)),
        Record::Lineage {
            seed,
            key_kind,
            match_mode,
            ..
        } => c.lineage.push(Lineage {
            seed,
            key_kind,
            match_mode,
        }),
        Record::Chunk { .. } => {}
    });
    let torn = rep
        .fault
        .as_ref()
        .is_some_and(|f| f.kind == FaultKind::TornTail);
    if torn && repair == Repair::Truncate {
        let keep = bytes.len() as u64 - rep.lost_bytes;
        if keep < MAGIC.len() as u64 {
            // Not even the magic is intact: nothing was kept; start over.
            write_new(path, MAGIC)?;
        } else {
            let f = OpenOptions::new().write(true).open(path)?;
            f.set_len(keep)?;
            f.sync_all()?;
        }
    }
    Ok(Loaded {
        contents: c,
        report: rep,
        len: bytes.len() as u64,
    })
}

/// Appends encoded records (fsynced). Creates the journal if missing. On a
/// failed write the file is cut back to its previous length.
pub fn append(path: &Path, records: &[u8]) -> std::io::Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    let len = f.metadata()?.len();
    let mut buf = Vec::with_capacity(records.len() + MAGIC.len());
    if len == 0 {
        buf.extend_from_slice(MAGIC);
    }
    buf.extend_from_slice(records);
    let res = f.write_all(&buf).and_then(|_| f.sync_data());
    if let Err(e) = res {
        let _ = f.set_len(len);
        return Err(e);
    }
    if len == 0 {
        sync_parent(path);
    }
    Ok(())
}

/// Atomically replaces the journal with one holding only `records`.
pub fn reset(path: &Path, records: &[u8]) -> std::io::Result<()> {
    let mut buf = MAGIC.to_vec();
    buf.extend_from_slice(records);
    write_new(path, &buf)
}

/// What [`compact`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Bytes before.
    pub before: u64,
    /// Bytes after.
    pub after: u64,
}

/// Rewrites the journal atomically with each lineage marker once and each
/// live add once: an add is a duplicate of an earlier one when its key is
/// the same and was normalized under the same key rules (the markers of the
/// seeds they were added under), as replaying either inserts the same key.
/// Replaying the compacted journal therefore inserts exactly what replaying
/// the original did. A torn tail is left out (as every reader does); a
/// journal damaged elsewhere is refused (an [`std::io::ErrorKind::InvalidData`]
/// error naming file and offset) and left as it is.
/// `name` is the filter's, written into the records.
pub fn compact(path: &Path, name: &str) -> std::io::Result<Compacted> {
    use std::collections::HashSet;
    let loaded = load(path, Repair::No)?;
    if let Err(e) = loaded.report.check(path) {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e));
    }
    let c = &loaded.contents;
    let mut out = Vec::with_capacity(loaded.len as usize);
    let mut markers = HashSet::new();
    for l in &c.lineage {
        if markers.insert(*l) {
            marker(&mut out, name, *l);
        }
    }
    let rules = |seed: u64| {
        c.lineage
            .iter()
            .find(|l| l.seed == seed)
            .map(|l| (l.key_kind, l.match_mode))
    };
    let mut seen = HashSet::new();
    for (seed, key) in &c.adds {
        // Adds under a seed no marker claims are never replayed; kept as
        // they were, once per (seed, key).
        let class = rules(*seed).map_or((1, *seed), |(k, m)| (0, (k as u64) << 8 | m as u64));
        if seen.insert((class, key.as_slice())) {
            wal::encode_add(&mut out, name, *seed, key);
        }
    }
    reset(path, &out)?;
    Ok(Compacted {
        before: loaded.len,
        after: (MAGIC.len() + out.len()) as u64,
    })
}

/// Removes the journal (durably).
pub fn remove(path: &Path) {
    if std::fs::remove_file(path).is_ok() {
        sync_parent(path);
    }
}

/// Encodes a lineage marker.
pub fn marker(out: &mut Vec<u8>, name: &str, l: Lineage) {
    wal::encode_lineage(out, name, l.seed, l.key_kind, l.match_mode);
}

fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    Ok(bloomgate_engine::atomic::write_atomic(path, bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adds(p: &Path, repair: Repair) -> (Vec<(u64, Vec<u8>)>, SegmentReport) {
        let l = load(p, repair).unwrap();
        (l.contents.adds, l.report)
    }

    #[test]
    fn append_load_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "f");
        assert!(adds(&p, Repair::Truncate).0.is_empty());
        let l = Lineage {
            seed: 7,
            key_kind: 0,
            match_mode: 0,
        };
        let mut b = Vec::new();
        marker(&mut b, "f", l);
        append(&p, &b).unwrap();
        let mut b = Vec::new();
        wal::encode_add(&mut b, "f", 7, b"one");
        wal::encode_add(&mut b, "f", 7, b"two");
        append(&p, &b).unwrap();
        let c = load(&p, Repair::Truncate).unwrap().contents;
        assert_eq!(c.lineage, vec![l]);
        assert_eq!(c.adds.len(), 2);
        // Tear the last record: a read-only reader sees the prefix and
        // leaves the file alone; the owner's read repairs it, so later
        // appends are readable.
        let full = std::fs::read(&p).unwrap();
        std::fs::write(&p, &full[..full.len() - 2]).unwrap();
        let (a, rep) = adds(&p, Repair::No);
        assert_eq!(a, vec![(7, b"one".to_vec())]);
        assert_eq!(rep.fault.unwrap().kind, FaultKind::TornTail);
        assert_eq!(std::fs::read(&p).unwrap().len(), full.len() - 2);
        let (a, rep) = adds(&p, Repair::Truncate);
        assert_eq!(a, vec![(7, b"one".to_vec())]);
        assert!(rep.lost_bytes > 0);
        let mut b = Vec::new();
        wal::encode_add(&mut b, "f", 7, b"three");
        append(&p, &b).unwrap();
        let (a, rep) = adds(&p, Repair::Truncate);
        assert_eq!(a.len(), 2);
        assert_eq!(rep.fault, None);
        // Garbage magic is damage, not a torn tail: reported, and the file
        // is left exactly as it is, even by its owner.
        std::fs::write(&p, b"garbage!garbage").unwrap();
        let (a, rep) = adds(&p, Repair::Truncate);
        assert!(a.is_empty());
        assert_eq!(rep.damage().unwrap().offset, 0);
        assert_eq!(std::fs::read(&p).unwrap(), b"garbage!garbage");
        // A strict prefix of the magic is a torn start: repaired.
        std::fs::write(&p, &MAGIC[..5]).unwrap();
        let (a, rep) = adds(&p, Repair::Truncate);
        assert!(a.is_empty());
        assert_eq!(rep.fault.unwrap().kind, FaultKind::TornTail);
        append(&p, &b).unwrap();
        assert_eq!(adds(&p, Repair::Truncate).0.len(), 1);
        reset(&p, &[]).unwrap();
        assert!(adds(&p, Repair::Truncate).0.is_empty());
        remove(&p);
        assert!(!p.exists());
    }

    #[test]
    fn compact_keeps_each_distinct_add_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "f");
        let (a, b, c) = (
            Lineage {
                seed: 1,
                key_kind: 0,
                match_mode: 0,
            },
            // Same key rules as `a`: its adds of the same key are duplicates.
            Lineage {
                seed: 2,
                key_kind: 0,
                match_mode: 0,
            },
            // Other key rules: the same bytes are another key.
            Lineage {
                seed: 3,
                key_kind: 1,
                match_mode: 0,
            },
        );
        let mut buf = Vec::new();
        for l in [a, b, c, a] {
            marker(&mut buf, "f", l);
        }
        for round in 0..50 {
            for i in 0..100u32 {
                let seed = [1, 2, 3][(round + i as usize) % 3];
                wal::encode_add(&mut buf, "f", seed, format!("k{i}").as_bytes());
            }
        }
        // An add under a seed no marker claims, twice.
        wal::encode_add(&mut buf, "f", 99, b"orphan");
        wal::encode_add(&mut buf, "f", 99, b"orphan");
        append(&p, &buf).unwrap();
        let got = compact(&p, "f").unwrap();
        assert!(got.after < got.before / 10, "{got:?}");
        assert_eq!(std::fs::metadata(&p).unwrap().len(), got.after);
        let c2 = load(&p, Repair::No).unwrap().contents;
        assert_eq!(c2.lineage, vec![a, b, c]);
        // Each key once per key rules (kinds 0 and 1), the orphan once.
        let mut keys: Vec<(u8, Vec<u8>)> = c2
            .adds
            .iter()
            .map(|(seed, k)| {
                (
                    if *seed == 3 {
                        1
                    } else if *seed == 99 {
                        9
                    } else {
                        0
                    },
                    k.clone(),
                )
            })
            .collect();
        keys.sort();
        let mut want: Vec<(u8, Vec<u8>)> = (0..100u32)
            .flat_map(|i| {
                [
                    (0, format!("k{i}").into_bytes()),
                    (1, format!("k{i}").into_bytes()),
                ]
            })
            .collect();
        want.push((9, b"orphan".to_vec()));
        want.sort();
        assert_eq!(keys, want);
        // Compacting again changes nothing; appends go on after it.
        assert_eq!(compact(&p, "f").unwrap().after, got.after);
        let mut more = Vec::new();
        wal::encode_add(&mut more, "f", 1, b"new");
        append(&p, &more).unwrap();
        assert_eq!(load(&p, Repair::No).unwrap().contents.adds.len(), 202);
    }
}
