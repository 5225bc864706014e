//! The deletable filters' files: golden bytes, bit-identical round trips,
//! and corruption caught with the same errors as Bloom filter files.

use bloomgate_engine::format::{
    data_checksum, DeletableHeader, Geometry, FLAG_CUCKOO_EXACT, FLAG_CUCKOO_SHIFT, FORMAT_VERSION,
    HEADER_LEN,
};
use bloomgate_engine::{
    plan_counting, plan_cuckoo, CountingFilter, CuckooFilter, Error, FormatProblem,
};

fn counting() -> CountingFilter {
    let f = CountingFilter::with_plan(&plan_counting(100, 0.01).unwrap(), 42).unwrap();
    for c in b'a'..=b'z' {
        f.insert(&[c]);
    }
    f.insert(b"q");
    f.remove(b"z");
    f
}

fn cuckoo() -> CuckooFilter {
    let f = CuckooFilter::with_plan(&plan_cuckoo(100, 0.01, 4).unwrap(), 42).unwrap();
    for c in b'a'..=b'z' {
        f.insert(&[c]).unwrap();
    }
    f.insert(b"q").unwrap();
    f.remove(b"z");
    f
}

/// Pins the hash, the counter and slot derivations, the nibble and bit
/// order and the header encoding: the same items and seed must give the
/// same file bytes forever. The values are literals, computed once.
#[test]
fn golden_file_bytes() {
    let c = counting().to_bytes();
    let q = cuckoo().to_bytes();
    let (ch, cd) = (
        data_checksum(&c[..HEADER_LEN]),
        data_checksum(&c[HEADER_LEN..]),
    );
    let (qh, qd) = (
        data_checksum(&q[..HEADER_LEN]),
        data_checksum(&q[HEADER_LEN..]),
    );
    eprintln!("counting header {ch:#x} data {cd:#x}; cuckoo header {qh:#x} data {qd:#x}");
    assert_eq!(c.len(), HEADER_LEN + 576);
    assert_eq!(q.len(), HEADER_LEN + 192);
    assert_eq!(cd, GOLDEN_COUNTING_DATA, "counting data changed: {cd:#x}");
    assert_eq!(
        ch, GOLDEN_COUNTING_HEADER,
        "counting header changed: {ch:#x}"
    );
    assert_eq!(qd, GOLDEN_CUCKOO_DATA, "cuckoo data changed: {qd:#x}");
    assert_eq!(qh, GOLDEN_CUCKOO_HEADER, "cuckoo header changed: {qh:#x}");
    // The fields docs/file-format.md documents, at their offsets.
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    assert_eq!(&c[..8], b"BLOOMGT\x01");
    assert_eq!((c[16], u32_at(&c, 20), u32_at(&c, 24)), (3, 6, 128));
    assert_eq!(
        (u64_at(&c, 32), u64_at(&c, 48), u64_at(&c, 72)),
        (576 * 8, 26, 576)
    );
    assert_eq!((q[16], u32_at(&q, 20), u32_at(&q, 24)), (4, 10, 4));
    // 27 buckets = ⌈100 / (4 · 0.95)⌉; flags = FLAG_CUCKOO_EXACT.
    assert_eq!((u64_at(&q, 96), u32_at(&q, 104)), (27, 500));
    assert_eq!(u32_at(&q, 28), FLAG_CUCKOO_EXACT);
    assert_eq!((u64_at(&q, 48), u64_at(&q, 72)), (26, 192));
}

/// A later table of a chain (the fixture's table, every bucket split in
/// 4: [`bloomgate_engine::CuckooParams::next_in_chain`]): its second
/// buckets and header are pinned like the first table's; the shift is at
/// offset 108 and the flags are `FLAG_CUCKOO_EXACT | FLAG_CUCKOO_SHIFT`.
#[test]
fn golden_split_table_bytes() {
    let p = cuckoo().params().next_in_chain(2).unwrap();
    let f = CuckooFilter::new(p).unwrap();
    for c in b'a'..=b'z' {
        f.insert(&[c]).unwrap();
        f.insert(&[c, c]).unwrap();
    }
    f.remove(b"z");
    let q = f.to_bytes();
    let (qh, qd) = (
        data_checksum(&q[..HEADER_LEN]),
        data_checksum(&q[HEADER_LEN..]),
    );
    eprintln!("split cuckoo header {qh:#x} data {qd:#x}");
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    // 27 buckets · 4 = 108; 108 · 4 slots · 10 bits = 4320 bits → 9 lines.
    assert_eq!(
        (u64_at(&q, 96), u32_at(&q, 104), u32_at(&q, 108)),
        (108, 500, 2)
    );
    assert_eq!(u32_at(&q, 28), FLAG_CUCKOO_EXACT | FLAG_CUCKOO_SHIFT);
    assert_eq!((u64_at(&q, 48), u64_at(&q, 72)), (51, 576));
    assert_eq!(qd, GOLDEN_SPLIT_DATA, "split cuckoo data changed: {qd:#x}");
    assert_eq!(
        qh, GOLDEN_SPLIT_HEADER,
        "split cuckoo header changed: {qh:#x}"
    );
    let back = CuckooFilter::from_bytes(&q).unwrap();
    assert_eq!(back.to_bytes(), q);
    // A shift without its flag, the flag without a shift, or a shift on a
    // table whose buckets it does not divide: refused, never misread.
    for (at, value, want) in [
        (28, FLAG_CUCKOO_EXACT, "bucket shift 2 with flags 0x1"),
        (108, 0, "bucket shift 0 with flags 0x3"),
        (108, 3, "not a multiple of 2^3"),
        (108, 64, "bucket shift 0..=63"),
        (28, FLAG_CUCKOO_SHIFT, "not a power of two"),
    ] {
        let mut bad = q.clone();
        bad[at..at + 4].copy_from_slice(&value.to_le_bytes());
        // Re-seal the header checksum: the field itself must be refused.
        bad[120..128].fill(0);
        let sum = xxhash_rust::xxh3::xxh3_64(&bad[..HEADER_LEN]);
        bad[120..128].copy_from_slice(&sum.to_le_bytes());
        match CuckooFilter::from_bytes(&bad) {
            Err(Error::Format {
                problem: FormatProblem::BadField(msg),
                ..
            }) => assert!(msg.contains(want), "{msg} lacks {want}"),
            other => panic!("offset {at} = {value}: {other:?}"),
        }
    }
}

const GOLDEN_SPLIT_DATA: u64 = 0xbf4a_b7c3_5631_e4ba;
const GOLDEN_SPLIT_HEADER: u64 = 0x64dc_d8b9_44e9_e796;
const GOLDEN_COUNTING_DATA: u64 = 0xa401_ecee_2073_6c81;
const GOLDEN_COUNTING_HEADER: u64 = 0x1617_ea7f_e3dd_7e6f;
const GOLDEN_CUCKOO_DATA: u64 = 0x692f_e7e7_ec01_a7e3;
const GOLDEN_CUCKOO_HEADER: u64 = 0x4717_2c8d_fbc4_9a4e;

#[test]
fn round_trips_are_bit_identical() {
    let dir = tempfile::tempdir().unwrap();
    let (c, q) = (counting(), cuckoo());
    let (cp, qp) = (dir.path().join("c.bgf"), dir.path().join("q.bgf"));
    c.save(&cp).unwrap();
    q.save(&qp).unwrap();
    let (c2, q2) = (
        CountingFilter::open(&cp).unwrap(),
        CuckooFilter::open(&qp).unwrap(),
    );
    c2.verify().unwrap();
    q2.verify().unwrap();
    assert_eq!(c2.to_bytes(), c.to_bytes());
    assert_eq!(q2.to_bytes(), q.to_bytes());
    assert_eq!(c2.params(), c.params());
    assert_eq!(q2.params(), q.params());
    // Saved again from the opened copy: the same file.
    let cp2 = dir.path().join("c2.bgf");
    c2.save(&cp2).unwrap();
    assert_eq!(std::fs::read(&cp).unwrap(), std::fs::read(&cp2).unwrap());
    // Changes to an opened file stay in memory until saved.
    c2.insert(b"new");
    assert!(!CountingFilter::open(&cp).unwrap().contains(b"new") || c.contains(b"new"));
    assert_eq!(std::fs::read(&cp).unwrap(), c.to_bytes());
    // No temporaries left.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
}

fn problem(e: Error) -> FormatProblem {
    match e {
        Error::Format { problem, .. } => problem,
        e => panic!("not a format error: {e}"),
    }
}

#[test]
fn corruption_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        ("counting", counting().to_bytes()),
        ("cuckoo", cuckoo().to_bytes()),
    ] {
        let open = |b: &[u8]| -> Result<(), Error> {
            let p = dir.path().join(name);
            std::fs::write(&p, b).unwrap();
            if name == "counting" {
                CountingFilter::open(&p)?.verify()
            } else {
                CuckooFilter::open(&p)?.verify()
            }
        };
        let from_bytes = |b: &[u8]| -> Result<(), Error> {
            if name == "counting" {
                CountingFilter::from_bytes(b).map(drop)
            } else {
                CuckooFilter::from_bytes(b).map(drop)
            }
        };
        open(&bytes).unwrap();
        from_bytes(&bytes).unwrap();
        // Any flipped bit of the header.
        for at in [12usize, 16, 20, 33, 50, 97, 2000, 4095] {
            let mut b = bytes.clone();
            b[at] ^= 0x10;
            assert_eq!(
                problem(open(&b).unwrap_err()),
                FormatProblem::HeaderChecksum,
                "{name} @{at}"
            );
            assert_eq!(
                problem(from_bytes(&b).unwrap_err()),
                FormatProblem::HeaderChecksum
            );
        }
        // A flipped bit of the data: caught by verify and by from_bytes.
        let mut b = bytes.clone();
        b[HEADER_LEN + 3] ^= 1;
        assert!(
            matches!(
                problem(open(&b).unwrap_err()),
                FormatProblem::DataChecksum { .. }
            ),
            "{name}"
        );
        assert!(matches!(
            problem(from_bytes(&b).unwrap_err()),
            FormatProblem::DataChecksum { .. }
        ));
        // Truncated and trailing.
        assert!(matches!(
            problem(open(&bytes[..bytes.len() - 64]).unwrap_err()),
            FormatProblem::Truncated { .. }
        ));
        let mut b = bytes.clone();
        b.push(0);
        assert_eq!(
            problem(open(&b).unwrap_err()),
            FormatProblem::Trailing { extra: 1 }
        );
        assert!(matches!(
            problem(open(&bytes[..100]).unwrap_err()),
            FormatProblem::TooShort(100)
        ));
        let mut b = bytes.clone();
        b[0] = b'X';
        assert_eq!(problem(open(&b).unwrap_err()), FormatProblem::BadMagic);
    }
}

/// Headers whose checksum is right but whose fields are impossible are
/// refused with a message naming the field, never read.
#[test]
fn impossible_fields_are_refused() {
    let base = DeletableHeader {
        version: FORMAT_VERSION,
        geometry: Geometry::Cuckoo {
            buckets: 32,
            bucket_size: 4,
            fingerprint_bits: 10,
            max_kicks: 500,
            bucket_shift: 0,
        },
        hash_id: 1,
        key_kind: 0,
        match_mode: 0,
        flags: 0,
        seed: 1,
        items: 0,
        planned_items: 100,
        target_fp: 0.01,
        data_len: 192,
        data_checksum: 0,
    };
    let len = |h: &DeletableHeader| HEADER_LEN as u64 + h.data_len;
    assert_eq!(
        DeletableHeader::decode(&base.encode(), len(&base)).unwrap(),
        base
    );
    let bad = |g: Geometry, data_len: u64, want: &str| {
        let h = DeletableHeader {
            geometry: g,
            data_len,
            ..base.clone()
        };
        match DeletableHeader::decode(&h.encode(), len(&h)) {
            Err(FormatProblem::BadField(msg)) => assert!(msg.contains(want), "{msg} lacks {want}"),
            other => panic!("{other:?}"),
        }
    };
    let cuckoo = |buckets, bucket_size, fingerprint_bits, max_kicks| Geometry::Cuckoo {
        buckets,
        bucket_size,
        fingerprint_bits,
        max_kicks,
        bucket_shift: 0,
    };
    // Without the exact-size flag the second bucket is `first XOR H(fp)`,
    // which needs a power of two; with it any count is a table.
    bad(cuckoo(33, 4, 10, 500), 192, "not a power of two");
    bad(cuckoo(0, 4, 10, 500), 0, "bucket count 0");
    let exact = DeletableHeader {
        geometry: cuckoo(33, 4, 10, 500),
        flags: FLAG_CUCKOO_EXACT,
        ..base.clone()
    };
    assert_eq!(
        DeletableHeader::decode(&exact.encode(), len(&exact)).unwrap(),
        exact
    );
    // (Bit 1 is `FLAG_CUCKOO_SHIFT`: `golden_split_table_bytes`.)
    let unknown = DeletableHeader {
        flags: FLAG_CUCKOO_EXACT | 4,
        ..exact.clone()
    };
    match DeletableHeader::decode(&unknown.encode(), len(&unknown)) {
        Err(FormatProblem::BadField(msg)) => assert!(msg.contains("flags 0x5"), "{msg}"),
        other => panic!("{other:?}"),
    }
    bad(cuckoo(32, 9, 10, 500), 192, "bucket size 9");
    bad(cuckoo(32, 4, 33, 500), 192, "fingerprint width 33");
    bad(cuckoo(32, 4, 1, 500), 192, "fingerprint width 1");
    bad(cuckoo(32, 4, 10, 70_000), 192, "max kicks");
    bad(cuckoo(32, 4, 10, 500), 256, "data length");
    bad(
        Geometry::Counting {
            counters: 1280,
            k: 0,
        },
        640,
        "k = 0",
    );
    bad(
        Geometry::Counting {
            counters: 1280,
            k: 33,
        },
        640,
        "k = 33",
    );
    let h = DeletableHeader {
        flags: 1 << 31,
        ..base.clone()
    };
    assert!(matches!(
        DeletableHeader::decode(&h.encode(), len(&h)),
        Err(FormatProblem::BadField(_))
    ));
    let h = DeletableHeader {
        hash_id: 2,
        ..base.clone()
    };
    assert!(matches!(
        DeletableHeader::decode(&h.encode(), len(&h)),
        Err(FormatProblem::BadField(_))
    ));
    let h = DeletableHeader {
        version: 2,
        ..base.clone()
    };
    assert!(matches!(
        DeletableHeader::decode(&h.encode(), len(&h)),
        Err(FormatProblem::NewerVersion { .. })
    ));
}
