//! The static ribbon layout through its public API and its files: zero
//! false negatives against a `HashSet`, the measured rate against the
//! predicted one, the same bytes whatever the thread count, golden bytes,
//! and damaged files refused with typed errors.

use std::collections::HashSet;
use std::path::Path;

use bloomgate_engine::format::{data_checksum, HEADER_LEN};
use bloomgate_engine::ribbon::{build, key_hash, Ribbon, RibbonSpec};
use bloomgate_engine::{Error, Filter, FormatProblem};
use proptest::prelude::*;

fn make(path: &Path, spec: &RibbonSpec, items: &[Vec<u8>]) -> Ribbon {
    let hashes = items.iter().map(|i| key_hash(spec.seed, i)).collect();
    build(path, spec, items.len() as u64, hashes).unwrap();
    Ribbon::open(path).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Every inserted item is found, whatever the items (duplicates,
    /// empty strings, few or many), the rate and the seed.
    #[test]
    fn no_false_negatives(
        items in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..3000),
        rate_exp in 1.0f64..9.0,
        seed in any::<u64>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let spec = RibbonSpec::new(10f64.powf(-rate_exp), seed);
        let r = make(&dir.path().join("p.bgf"), &spec, &items);
        let set: HashSet<&Vec<u8>> = items.iter().collect();
        prop_assert_eq!(r.items(), set.len() as u64);
        for item in &set {
            prop_assert!(r.contains(item));
        }
        let mut out = Vec::new();
        r.contains_many(&items, &mut out);
        prop_assert!(out.iter().all(|&b| b));
    }
}

/// 10⁶ items at 10⁻³ and at 3·10⁻³ (neither a power of two): the rate
/// measured on 10⁷ strangers (10⁴ and 3·10⁴ expected hits, so ±10 % is
/// over 10 standard deviations) is within ±10 % of the predicted one.
#[test]
fn ribbon_fp_within_ten_percent_at_a_million() {
    let dir = tempfile::tempdir().unwrap();
    for (p, seed) in [(1e-3, 5u64), (3e-3, 6)] {
        let items: Vec<Vec<u8>> = (0..1_000_000u32)
            .map(|i| format!("https://example.com/in/{i}").into_bytes())
            .collect();
        let spec = RibbonSpec::new(p, seed);
        let r = make(&dir.path().join("fp.bgf"), &spec, &items);
        let predicted = r.predicted_fp();
        assert!(predicted <= p && predicted > 0.97 * p, "{predicted}");
        let tries = 10_000_000u32;
        let hits = (0..tries)
            .filter(|i| r.contains(format!("https://example.com/out/{i}").as_bytes()))
            .count();
        let measured = hits as f64 / tries as f64;
        eprintln!(
            "p {p}: measured {measured:.3e}, predicted {predicted:.3e}, {:.3} bits/item",
            r.bits_per_item()
        );
        assert!(
            (measured - predicted).abs() <= 0.1 * predicted,
            "measured {measured}, predicted {predicted}"
        );
        assert!(r.bits_per_item() < 1.045 * -p.log2() + 0.2);
    }
}

/// The same keys and seed give the same file with 1 and with 2 threads.
#[test]
fn same_bytes_for_any_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let items: Vec<Vec<u8>> = (0..700_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
    let spec = RibbonSpec::new(1e-4, 42);
    let mut files = Vec::new();
    for threads in [1, 2, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let path = dir.path().join(format!("t{threads}.bgf"));
        pool.install(|| make(&path, &spec, &items));
        files.push(std::fs::read(&path).unwrap());
    }
    assert!(files.windows(2).all(|w| w[0] == w[1]));
}

/// Pins the hash, the rows, the solution's layout and the header: the same
/// items and seed must give the same bytes forever.
#[test]
fn golden_ribbon_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.bgf");
    let items: Vec<Vec<u8>> = ["evil.example/", "phish.example/login", "a", "b", "c"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    let mut spec = RibbonSpec::new(0.01, 0x5eed);
    spec.key_kind = 1;
    let r = make(&path, &spec, &items);
    let bytes = std::fs::read(&path).unwrap();
    let (h, d) = (
        data_checksum(&bytes[..HEADER_LEN]),
        data_checksum(&bytes[HEADER_LEN..]),
    );
    eprintln!("ribbon header {h:#x} data {d:#x}");
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    assert_eq!(&bytes[..8], b"BLOOMGT\x01");
    // Layout 5, hash 1, key kind 1; k 0, width 128.
    assert_eq!((bytes[16], bytes[17], bytes[18]), (5, 1, 1));
    assert_eq!((u32_at(20), u32_at(24)), (0, 128));
    // One shard of one block: 6 result bits (0.01 = 2^-6 · (1 − a/2),
    // a = 0.72: the one block has 7); 4096 bytes of directory, 7 words.
    assert_eq!((u64_at(96), u32_at(104), u64_at(112)), (1, 6, 7));
    assert_eq!((u64_at(48), u64_at(56), u64_at(72)), (5, 5, 4096 + 7 * 16));
    assert_eq!(bytes.len(), HEADER_LEN + 4096 + 112);
    assert_eq!(d, GOLDEN_DATA, "ribbon data changed: {d:#x}");
    assert_eq!(h, GOLDEN_HEADER, "ribbon header changed: {h:#x}");
    assert!(items.iter().all(|i| r.contains(i)));
}

const GOLDEN_DATA: u64 = 0xc43b01765a64769b;
const GOLDEN_HEADER: u64 = 0xbbee4ad1ae4480f6;

fn assert_problem(e: Error, want: fn(&FormatProblem) -> bool) {
    match e {
        Error::Format { problem, .. } if want(&problem) => {}
        e => panic!("unexpected error: {e}"),
    }
}

/// A flipped header bit, a flipped data bit, a truncated or extended file,
/// a damaged directory: each refused with its typed error, and a ribbon
/// file opened as a Bloom filter names what it holds.
#[test]
fn damaged_ribbon_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.bgf");
    let items: Vec<Vec<u8>> = (0..300_000u32).map(|i| i.to_le_bytes().to_vec()).collect();
    make(&path, &RibbonSpec::new(1e-3, 1), &items);
    let good = std::fs::read(&path).unwrap();
    let damaged = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        f(&mut b);
        let p = dir.path().join("bad.bgf");
        std::fs::write(&p, &b).unwrap();
        p
    };
    let p = damaged(&|b| b[40] ^= 1);
    assert_problem(Ribbon::open(&p).unwrap_err(), |p| {
        *p == FormatProblem::HeaderChecksum
    });
    let p = damaged(&|b| b.truncate(b.len() - 1));
    assert_problem(Ribbon::open(&p).unwrap_err(), |p| {
        matches!(p, FormatProblem::Truncated { .. })
    });
    let p = damaged(&|b| b.truncate(HEADER_LEN + 100));
    assert_problem(Ribbon::open(&p).unwrap_err(), |p| {
        matches!(p, FormatProblem::Truncated { .. })
    });
    let p = damaged(&|b| b.push(0));
    assert_problem(Ribbon::open(&p).unwrap_err(), |p| {
        matches!(p, FormatProblem::Trailing { .. })
    });
    let p = damaged(&|b| b.truncate(100));
    assert_problem(Ribbon::open(&p).unwrap_err(), |p| {
        matches!(p, FormatProblem::TooShort(100))
    });
    // A directory entry's block count: refused on open.
    let p = damaged(&|b| b[HEADER_LEN + 8] ^= 1);
    assert_problem(Ribbon::open(&p).unwrap_err(), |p| {
        matches!(p, FormatProblem::BadField(_))
    });
    // A solution bit: found by verify.
    let p = damaged(&|b| {
        let at = b.len() - 1000;
        b[at] ^= 0x10
    });
    let r = Ribbon::open(&p).unwrap();
    assert_problem(r.verify().unwrap_err(), |p| {
        matches!(p, FormatProblem::DataChecksum { .. })
    });
    assert_problem(
        Filter::open(&path, bloomgate_engine::Access::ReadOnly).unwrap_err(),
        |p| {
            matches!(
                p,
                FormatProblem::WrongKind {
                    found: "ribbon",
                    ..
                }
            )
        },
    );
    Ribbon::open(&path).unwrap().verify().unwrap();
}
