use super::*;

fn hashes(n: u64, salt: u64) -> Vec<u64> {
    (0..n).map(|i| key_hash(salt, &i.to_le_bytes())).collect()
}

fn built(dir: &Path, spec: &RibbonSpec, keys: &[u64]) -> Ribbon {
    let path = dir.join("r.bgf");
    build(&path, spec, keys.len() as u64, keys.to_vec()).unwrap();
    Ribbon::open(&path).unwrap()
}

#[test]
fn every_key_is_found_and_strangers_mostly_not() {
    let dir = tempfile::tempdir().unwrap();
    let keys = hashes(300_000, 1);
    let r = built(dir.path(), &RibbonSpec::new(1e-3, 7), &keys);
    assert!(keys.iter().all(|&g| r.contains_hash(g)));
    assert_eq!(r.items(), 300_000);
    assert_eq!(r.header().shards, 2);
    let fp = hashes(1_000_000, 2)
        .iter()
        .filter(|&&g| r.contains_hash(g))
        .count() as f64
        / 1e6;
    let want = r.predicted_fp();
    assert!((fp - want).abs() < 0.15 * want, "{fp} vs {want}");
    r.verify().unwrap();
}

#[test]
fn duplicates_and_empty_shards_are_fine() {
    let dir = tempfile::tempdir().unwrap();
    let mut keys = hashes(1000, 3);
    keys.extend_from_within(..);
    keys.extend_from_within(..500);
    let r = built(dir.path(), &RibbonSpec::new(1e-2, 9), &keys);
    assert_eq!(r.items(), 1000);
    assert!(keys.iter().all(|&g| r.contains_hash(g)));
    let empty = built(dir.path(), &RibbonSpec::new(1e-2, 9), &[]);
    assert_eq!(empty.items(), 0);
    assert!(!empty.contains(b"anything"));
}

#[test]
fn a_tiny_overhead_is_retried_until_solved() {
    let dir = tempfile::tempdir().unwrap();
    let keys = hashes(200_000, 4);
    let mut spec = RibbonSpec::new(1e-3, 11);
    spec.overhead = 0.0;
    let r = built(dir.path(), &spec, &keys);
    assert!(
        r.entries().iter().all(|e| e.attempt >= 1),
        "{:?}",
        r.entries()
    );
    assert!(r.entries().iter().any(|e| e.attempt >= GROW_FROM));
    assert!(keys.iter().all(|&g| r.contains_hash(g)));
}

#[test]
fn the_solution_does_not_depend_on_key_order() {
    let mut keys = hashes(5000, 5);
    let a = solve_shard(&keys, 7, 1 << 31, RIBBON_OVERHEAD).unwrap();
    keys.reverse();
    keys.rotate_left(1234);
    let b = solve_shard(&keys, 7, 1 << 31, RIBBON_OVERHEAD).unwrap();
    assert_eq!(a.entry, b.entry);
    assert_eq!(a.words, b.words);
}

#[test]
fn batched_answers_equal_single_ones() {
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<Vec<u8>> = (0..20_000u32)
        .map(|i| format!("k{i}").into_bytes())
        .collect();
    let spec = RibbonSpec::new(0.01, 3);
    let hs: Vec<u64> = keys.iter().map(|k| key_hash(3, k)).collect();
    let r = built(dir.path(), &spec, &hs);
    let probes: Vec<Vec<u8>> = (0..40_000u32)
        .map(|i| format!("k{i}").into_bytes())
        .collect();
    let mut out = Vec::new();
    r.contains_many(&probes, &mut out);
    let single: Vec<bool> = probes.iter().map(|p| r.contains(p)).collect();
    assert_eq!(out, single);
    assert!(out[..20_000].iter().all(|&b| b));
}

/// Measures how often a shard's first attempt fails, by overhead (run with
/// `--ignored --nocapture`; the numbers are in `math/ribbon.rs`).
#[test]
#[ignore]
fn ribbon_overhead_failure_rates() {
    for eps in [0.01, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05] {
        let mut failed = 0;
        let runs = 100;
        for s in 0..runs {
            let keys = hashes(200_000, 1000 + s);
            let solved = solve_shard(&keys, 1, 0, eps).unwrap();
            failed += (solved.entry.attempt > 0) as u32;
        }
        println!("overhead {eps}: {failed}/{runs} first attempts failed");
    }
}

/// The lookup as first written, kept as the reference: each column's two
/// words shifted into place, then the parity of the 128-bit product.
fn reference_contains(r: &Ribbon, g: u64) -> bool {
    let e = &r.entries[shard_of(g, r.header.shard_bits()) as usize];
    if e.blocks == 0 {
        return false;
    }
    let row = row(g, e.attempt, e.blocks);
    let lower = r.header.columns;
    let block = (row.start / 128) as u32;
    let shift = (row.start % 128) as u32;
    let cols = if block < e.upper_start {
        lower
    } else {
        lower + 1
    };
    let here = e.offset + block_offset(block, e.upper_start, lower) as u64;
    let next = here + cols as u64;
    let word = |i: u64| {
        let at = r.solution + i as usize * 16;
        u128::from_le_bytes(r.map[at..at + 16].try_into().unwrap())
    };
    for j in 0..cols as u64 {
        let mut w = word(here + j) >> shift;
        if shift != 0 {
            w |= word(next + j) << (128 - shift);
        }
        if (w & row.coeff).count_ones() & 1 != (row.fp >> j) & 1 {
            return false;
        }
    }
    true
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    #[test]
    fn lookups_match_the_reference(
        n in 1u64..3000,
        fp_at in 0usize..5,
        salt in 0u64..1000,
    ) {
        let fp = [0.5, 1e-2, 3e-3, 1e-4, 7.7e-6][fp_at];
        let dir = tempfile::tempdir().unwrap();
        let items: Vec<Vec<u8>> = (0..n).map(|i| format!("k{salt}-{i}").into_bytes()).collect();
        let spec = RibbonSpec::new(fp, salt);
        let keys: Vec<u64> = items.iter().map(|k| key_hash(spec.seed, k)).collect();
        let r = built(dir.path(), &spec, &keys);
        let strangers: Vec<Vec<u8>> = (0..20_000).map(|i| format!("s{salt}-{i}").into_bytes()).collect();
        let mut batched = Vec::new();
        for set in [&items, &strangers] {
            r.contains_many(set, &mut batched);
            for (k, &b) in set.iter().zip(&batched) {
                let g = key_hash(spec.seed, k);
                let want = reference_contains(&r, g);
                proptest::prop_assert_eq!(r.contains_hash(g), want);
                proptest::prop_assert_eq!(b, want);
            }
        }
        proptest::prop_assert!(batched.len() == strangers.len());
    }
}

#[test]
fn in_memory_copy_answers_as_the_mapped_file_and_batches_beyond_the_caches_too() {
    // Large enough for batches to prefetch every line (PREFETCH_ALL_FROM).
    let dir = tempfile::tempdir().unwrap();
    let spec = RibbonSpec::new(1e-4, 21);
    let items: Vec<[u8; 8]> = (0..5_000_000u64).map(|i| i.to_le_bytes()).collect();
    let keys: Vec<u64> = items.iter().map(|k| key_hash(spec.seed, k)).collect();
    let path = dir.path().join("big.bgf");
    build(&path, &spec, keys.len() as u64, keys).unwrap();
    let mapped = Ribbon::open(&path).unwrap();
    assert!(mapped.header().data_len >= PREFETCH_ALL_FROM);
    let copy = Ribbon::open_in_memory(&path).unwrap();
    copy.verify().unwrap();
    assert_eq!(copy.header(), mapped.header());
    assert_eq!(copy.entries(), mapped.entries());
    let strangers: Vec<[u8; 8]> = (1u64 << 40..(1u64 << 40) + 200_000)
        .map(|i| i.to_le_bytes())
        .collect();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    copy.contains_many(&items, &mut a);
    assert!(a.iter().all(|&x| x), "a member answered absent");
    copy.contains_many(&strangers, &mut a);
    mapped.contains_many(&strangers, &mut b);
    let one: Vec<bool> = strangers.iter().map(|k| mapped.contains(k)).collect();
    assert_eq!(a, b);
    assert_eq!(a, one);
    assert!(a.iter().any(|&x| x) && a.iter().filter(|&&x| x).count() < 200);
}

#[test]
fn in_memory_open_refuses_what_open_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let r = built(dir.path(), &RibbonSpec::new(1e-3, 5), &hashes(50_000, 6));
    let path = r.path().to_path_buf();
    drop(r);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
    let (a, b) = (Ribbon::open(&path), Ribbon::open_in_memory(&path));
    assert!(a.is_err() && b.is_err(), "{a:?} / {b:?}");
    assert_eq!(a.unwrap_err().to_string(), b.unwrap_err().to_string());
}

#[test]
fn in_memory_copy_no_longer_reads_the_file() {
    // Bytes overwritten in place after the open: a mapping would see them
    // (and lose members), the copy must not.
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let keys = hashes(50_000, 8);
    let r = built(dir.path(), &RibbonSpec::new(1e-3, 13), &keys);
    let path = r.path().to_path_buf();
    drop(r);
    let copy = Ribbon::open_in_memory(&path).unwrap();
    let mapped = Ribbon::open(&path).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    let data = HEADER_LEN as u64 + copy.header().directory_len();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&vec![0u8; (len - data) as usize], data)
        .unwrap();
    assert!(keys.iter().all(|&g| copy.contains_hash(g)));
    copy.verify().unwrap();
    assert!(mapped.verify().is_err(), "the mapping sees the zeroed data");
}

/// The solver as first written, kept as the reference: keys sorted and
/// deduplicated, rows sorted by start with a comparison sort, banded, and
/// solved back one slot and one column at a time.
fn reference_solve(keys: &[u64], r: u32, upper: u32, overhead: f64) -> SolvedShard {
    use crate::math::{ribbon_shard_blocks, ribbon_upper_blocks};
    let mut keys = keys.to_vec();
    keys.sort_unstable();
    keys.dedup();
    let n = keys.len();
    let base = ribbon_shard_blocks(n as u64, overhead);
    if n == 0 {
        return SolvedShard {
            entry: ShardEntry::empty(),
            words: Vec::new(),
        };
    }
    for t in 0..MAX_ATTEMPTS {
        let blocks = attempt_blocks(base, t) as u32;
        let m = blocks as usize * 128;
        let mut rows: Vec<Row> = keys.iter().map(|&k| row(k, t, blocks)).collect();
        rows.sort_unstable_by_key(|r| r.start);
        let (mut coeff, mut rhs) = (vec![0u128; m], vec![0u32; m]);
        let mut ok = true;
        'rows: for row in &rows {
            let (mut i, mut c, mut f) = (row.start as usize, row.coeff, row.fp);
            loop {
                if coeff[i] == 0 {
                    coeff[i] = c;
                    rhs[i] = f;
                    break;
                }
                c ^= coeff[i];
                f ^= rhs[i];
                if c == 0 {
                    if f != 0 {
                        ok = false;
                        break 'rows;
                    }
                    break;
                }
                let tz = c.trailing_zeros();
                c >>= tz;
                i += tz as usize;
            }
        }
        if !ok {
            continue;
        }
        let upper_start = blocks - ribbon_upper_blocks(blocks, upper);
        let lower = upper_start as usize;
        let mut words = vec![0u128; block_offset(blocks, upper_start, r)];
        let mut state = [0u128; 33];
        for i in (0..m).rev() {
            let c = coeff[i];
            let block = i / 128;
            let ncols = r as usize + (block >= lower) as usize;
            for (j, s) in state.iter_mut().enumerate().take(ncols) {
                let bit = if c == 0 {
                    0
                } else {
                    ((rhs[i] >> j) & 1) ^ (((c >> 1) & *s).count_ones() & 1)
                };
                *s = (*s << 1) | bit as u128;
            }
            if i % 128 == 0 {
                let at = block_offset(block as u32, upper_start, r);
                words[at..at + ncols].copy_from_slice(&state[..ncols]);
            }
        }
        return SolvedShard {
            entry: ShardEntry {
                offset: 0,
                blocks,
                upper_start,
                attempt: t,
                keys: n as u32,
            },
            words,
        };
    }
    panic!("unsolvable");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(40))]
    /// The solver gives the reference solver's entry and words bit for
    /// bit: any number of keys, repeats, any result bits, overheads low
    /// enough that attempts fail and are retried.
    #[test]
    fn solver_equals_the_reference(
        n in 0u64..20_000,
        salt in proptest::prelude::any::<u64>(),
        repeats in 0usize..50,
        r in 1u32..=32,
        upper in proptest::prelude::any::<u32>(),
        overhead in proptest::sample::select(vec![0.0, 0.005, 0.01, 0.03, 0.2]),
    ) {
        let upper = if r == 32 { 0 } else { upper };
        let mut keys = hashes(n, salt);
        for i in 0..repeats.min(keys.len()) {
            let k = keys[(i * 7919) % keys.len()];
            keys.push(k);
        }
        let third = keys.len() / 3;
        keys.rotate_left(third);
        let want = reference_solve(&keys, r, upper, overhead);
        let got = solve_shard(&keys, r, upper, overhead).unwrap();
        proptest::prop_assert_eq!(got.entry, want.entry);
        proptest::prop_assert!(got.words == want.words);
    }
}

/// Shards of the size a large build solves (about 150,000 keys), at the
/// planned overhead and below it: the solver equals the reference.
#[test]
fn full_size_shards_equal_the_reference() {
    for (salt, overhead) in [(21, RIBBON_OVERHEAD), (22, RIBBON_OVERHEAD), (23, 0.01)] {
        let keys = hashes(152_000, salt);
        let want = reference_solve(&keys, 13, 1 << 31, overhead);
        let got = solve_shard(&keys, 13, 1 << 31, overhead).unwrap();
        assert_eq!(got.entry, want.entry);
        assert!(got.words == want.words);
    }
}

/// Where a shard's solve goes, in ns per key (run with `--ignored
/// --nocapture` on a quiet machine; the numbers are in BENCHMARKS.md,
/// "Ribbon build"): the reference's key sort and comparison sort of rows
/// against the counting sort, the banding (and how far rows travel), the
/// back substitution, for shards of about 152,600 keys (a 10¹⁰ build's)
/// at `p = 10⁻⁴` (13 result bits, 36 % of blocks with 14).
#[test]
#[ignore]
fn solve_phase_times() {
    use super::solve::{back_substitute_for_test, band_for_test, sort_rows_for_test};
    use crate::math::{ribbon_columns, ribbon_shard_blocks, ribbon_upper_blocks};
    use std::time::Instant;
    let (r, upper) = ribbon_columns(1e-4 * (1.0 - 1.0 / 32.0)).unwrap();
    let n = 152_600u64;
    let shards = 20u64;
    let mut t = [0f64; 10];
    let (mut steps, mut failed) = (0u64, 0u32);
    for salt in 0..shards {
        let keys = hashes(n, 500 + salt);
        let blocks = ribbon_shard_blocks(n, RIBBON_OVERHEAD) as u32;
        let starts = start_slots(blocks);
        let m = blocks as usize * 128;
        // The reference's sorts.
        let s = Instant::now();
        let mut sorted_keys = keys.clone();
        sorted_keys.sort_unstable();
        sorted_keys.dedup();
        t[0] += s.elapsed().as_secs_f64();
        let s = Instant::now();
        let mut rows: Vec<Row> = sorted_keys.iter().map(|&k| row(k, 0, blocks)).collect();
        rows.sort_unstable_by_key(|r| r.start);
        t[1] += s.elapsed().as_secs_f64();
        std::hint::black_box(&rows);
        // The counting sort (with the repeat check of a first attempt).
        let s = Instant::now();
        let sorted = sort_rows_for_test(&keys, 0, starts, true);
        t[2] += s.elapsed().as_secs_f64();
        let s = Instant::now();
        let sorted2 = sort_rows_for_test(&keys, 0, starts, false);
        t[3] += s.elapsed().as_secs_f64();
        assert_eq!(sorted.len(), sorted2.len());
        let (mut coeff, mut rhs) = (vec![0u128; m], vec![0u32; m]);
        let s = Instant::now();
        let (ok, st) = band_for_test(&sorted, starts, &mut coeff, &mut rhs);
        t[4] += s.elapsed().as_secs_f64();
        steps += st;
        if !ok {
            failed += 1;
            continue;
        }
        let (mut c2, mut r2) = (vec![0u128; m], vec![0u32; m]);
        let s = Instant::now();
        assert!(super::solve::band_split(&sorted, starts, &mut c2, &mut r2));
        t[8] += s.elapsed().as_secs_f64();
        assert!(c2 == coeff && r2 == rhs);
        let (mut c3, mut r3) = (vec![0u128; m], vec![0u32; m]);
        let s = Instant::now();
        assert!(super::solve::band_two(&sorted, starts, &mut c3, &mut r3));
        t[9] += s.elapsed().as_secs_f64();
        let upper_start = blocks - ribbon_upper_blocks(blocks, upper);
        let s = Instant::now();
        let words = back_substitute_for_test(&coeff, &rhs, blocks, upper_start, r);
        t[5] += s.elapsed().as_secs_f64();
        assert!(back_substitute_for_test(&c3, &r3, blocks, upper_start, r) == words);
        std::hint::black_box(words);
        let s = Instant::now();
        let whole = solve_shard(&keys, r, upper, RIBBON_OVERHEAD).unwrap();
        t[6] += s.elapsed().as_secs_f64();
        let s = Instant::now();
        let reference = reference_solve(&keys, r, upper, RIBBON_OVERHEAD);
        t[7] += s.elapsed().as_secs_f64();
        assert!(whole.words == reference.words);
    }
    let per = |x: f64| x * 1e9 / (n * shards) as f64;
    println!(
        "{} shards of {n} keys, r = {r}, {failed} first attempts failed",
        shards
    );
    println!(
        "reference: key sort {:.1} ns/key, rows + comparison sort {:.1}",
        per(t[0]),
        per(t[1])
    );
    println!(
        "counting sort of rows {:.1} ns/key ({:.1} without the repeat check)",
        per(t[2]),
        per(t[3])
    );
    println!(
        "banding {:.1} ns/key, {:.2} steps per row",
        per(t[4]),
        steps as f64 / (n * shards) as f64
    );
    println!(
        "banding with 64-bit halves {:.1} ns/key, two rows in flight {:.1}",
        per(t[8]),
        per(t[9])
    );
    println!("back substitution {:.1} ns/key", per(t[5]));
    println!(
        "solve_shard {:.1} ns/key, reference {:.1}",
        per(t[6]),
        per(t[7])
    );
}
