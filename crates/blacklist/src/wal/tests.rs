//! The log format's tests: golden bytes, readers, salvage and strays.

use std::ops::Range;
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_64;

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
