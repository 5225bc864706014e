//! Measured false-positive rates of the deletable filters against `math`,
//! and their behaviour under threads: exactly one "new" among concurrent
//! inserters of an item, and no false negative for readers racing deletes
//! and cuckoo kick chains. Run in release mode (`cargo test --release`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;

use bloomgate_engine::math::cuckoo_fp;
use bloomgate_engine::{
    plan_counting, plan_cuckoo, CountingFilter, CuckooFilter, CuckooParams, Removal,
};

/// Queries `queries` never-inserted keys; returns the measured rate.
fn measured(queries: u64, contains: impl Fn(&[u8]) -> bool) -> f64 {
    let hits = (0..queries)
        .filter(|i| contains(&(i | 1 << 63).to_le_bytes()))
        .count();
    hits as f64 / queries as f64
}

fn check(name: &str, measured: f64, predicted: f64) {
    let rel = (measured - predicted) / predicted;
    eprintln!(
        "{name}: measured {measured:.3e}, predicted {predicted:.3e} ({:+.1} %)",
        rel * 100.0
    );
    assert!(
        rel.abs() <= 0.15,
        "{name}: measured {measured} vs predicted {predicted}"
    );
}

#[test]
fn counting_fp_matches_prediction() {
    // ~1000 false positives expected at 1e-4: ±15 % is > 4 σ.
    for (n, p, queries) in [
        (200_000u64, 1e-4, 10_000_000u64),
        (100_000, 1e-2, 1_000_000),
    ] {
        let plan = plan_counting(n, p).unwrap();
        let f = CountingFilter::with_plan(&plan, 0x5eed).unwrap();
        for i in 0..n {
            f.insert(&i.to_le_bytes());
        }
        assert!(plan.predicted_fp <= p);
        assert_eq!(f.predicted_fp(), plan.predicted_fp);
        check(
            &format!("counting n={n} p={p}"),
            measured(queries, |k| f.contains(k)),
            plan.predicted_fp,
        );
        // Deleting half and re-measuring: the prediction follows the count.
        for i in 0..n / 2 {
            assert_eq!(f.remove(&i.to_le_bytes()), Removal::Removed);
        }
        for i in n / 2..n {
            assert!(f.contains(&i.to_le_bytes()), "false negative");
        }
        if p >= 1e-2 {
            check(
                &format!("counting n={n}/2 p={p}"),
                measured(queries, |k| f.contains(k)),
                f.predicted_fp(),
            );
        }
    }
}

#[test]
fn cuckoo_fp_matches_prediction_at_95_percent_load() {
    for (p, queries) in [(1e-4, 10_000_000u64), (1e-2, 1_000_000)] {
        // Any item count plans a table 95 % full at that count (the bucket
        // count is exact, here not a power of two).
        let n = 250_000u64;
        let plan = plan_cuckoo(n, p, 4).unwrap();
        assert_eq!(plan.buckets, 65_790);
        let f = CuckooFilter::with_plan(&plan, 0x5eed).unwrap();
        for i in 0..n {
            f.insert(&i.to_le_bytes()).expect("95 % load fits");
        }
        assert!((f.load() - 0.95).abs() < 1e-3);
        let predicted = cuckoo_fp(plan.fingerprint_bits, 4, f.load());
        assert!(predicted <= p);
        check(
            &format!("cuckoo n={n} p={p} f={}", plan.fingerprint_bits),
            measured(queries, |k| f.contains(k)),
            predicted,
        );
        for i in 0..n {
            assert!(f.contains(&i.to_le_bytes()), "false negative");
        }
    }
}

/// How full a b = 4 table gets with 500 kicks before the first failure:
/// Fan et al. report ~95 %.
#[test]
fn cuckoo_fills_to_95_percent() {
    let params = CuckooParams::from_plan(&plan_cuckoo(1 << 18, 1e-4, 4).unwrap(), 1);
    let f = CuckooFilter::new(params).unwrap();
    let mut i = 0u64;
    while f.insert(&i.to_le_bytes()).is_ok() {
        i += 1;
    }
    eprintln!("first failure at load {:.4}", f.load());
    assert!(f.load() > 0.94, "load {}", f.load());
    for j in 0..i {
        assert!(f.contains(&j.to_le_bytes()), "false negative");
    }
}

/// Four: a plain cuckoo insert of one item by every thread stores one copy
/// per thread, and an item's two buckets hold at most 2b = 8 copies.
const THREADS: usize = 4;

#[test]
fn exactly_one_inserter_is_told_new() {
    let c = CountingFilter::with_plan(&plan_counting(100_000, 1e-4).unwrap(), 3).unwrap();
    let q = CuckooFilter::with_plan(&plan_cuckoo(200_000, 1e-4, 4).unwrap(), 3).unwrap();
    let items = 10_000u64;
    for only_if_absent in [false, true] {
        let key = |i: u64| (i + if only_if_absent { 1 << 40 } else { 0 }).to_le_bytes();
        // How many threads were told "new", per item and filter.
        let told: Vec<[AtomicU64; 2]> = (0..items).map(|_| Default::default()).collect();
        let before = (c.items(), q.items());
        let barrier = Barrier::new(THREADS);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    barrier.wait();
                    for i in 0..items {
                        let k = key(i);
                        let (a, b) = if only_if_absent {
                            (c.insert_if_absent(&k), q.insert_if_absent(&k).unwrap())
                        } else {
                            (c.insert(&k), q.insert(&k).unwrap())
                        };
                        told[i as usize][0].fetch_add(a as u64, Ordering::Relaxed);
                        told[i as usize][1].fetch_add(b as u64, Ordering::Relaxed);
                    }
                });
            }
        });
        for (filter, name) in [(0, "counting"), (1, "cuckoo")] {
            let per_item: Vec<u64> = told
                .iter()
                .map(|t| t[filter].load(Ordering::Relaxed))
                .collect();
            assert!(
                per_item.iter().all(|&n| n <= 1),
                "{name}: an item was new to two threads"
            );
            // An item that tested present before its first insert (a false
            // positive, rate <= 1e-4) is new to no one.
            let none = per_item.iter().filter(|&&n| n == 0).count();
            eprintln!("{name} only_if_absent={only_if_absent}: {none} of {items} new to no thread");
            assert!(none <= 5, "{name}: {none} items new to no thread");
        }
        let news = |f: usize| {
            told.iter()
                .map(|t| t[f].load(Ordering::Relaxed))
                .sum::<u64>()
        };
        let expect = |f: usize| {
            if only_if_absent {
                news(f)
            } else {
                THREADS as u64 * items
            }
        };
        assert_eq!(c.items() - before.0, expect(0));
        assert_eq!(q.items() - before.1, expect(1));
        for i in 0..items {
            assert!(c.contains(&key(i)) && q.contains(&key(i)));
        }
    }
}

/// Readers racing writers that insert, delete and (in a nearly full cuckoo
/// table) run long kick chains never miss an item that stays stored.
#[test]
fn readers_never_miss_stable_items_under_concurrent_writes() {
    let c = CountingFilter::with_plan(&plan_counting(20_000, 1e-3).unwrap(), 9).unwrap();
    // A small table near 95 % load: most churn inserts kick.
    let plan = plan_cuckoo(3_800, 1e-3, 4).unwrap();
    let q = CuckooFilter::with_plan(&plan, 9).unwrap();
    let stable: Vec<[u8; 8]> = (0..3_000u64).map(|i| i.to_le_bytes()).collect();
    for k in &stable {
        c.insert(k);
        q.insert(k).unwrap();
    }
    let stop = AtomicBool::new(false);
    let checks = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (c, q, stop) = (&c, &q, &stop);
            s.spawn(move || {
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let churn: Vec<[u8; 8]> = (0..700u64)
                        .map(|i| (1 << 50 | t << 40 | round << 20 | i).to_le_bytes())
                        .collect();
                    let mut placed = Vec::new();
                    for k in &churn {
                        c.insert(k);
                        if q.insert(k).is_ok() {
                            placed.push(k);
                        }
                    }
                    for k in &churn {
                        assert_eq!(c.remove(k), Removal::Removed);
                    }
                    for k in placed {
                        assert_eq!(q.remove(k), Removal::Removed);
                    }
                    round += 1;
                }
            });
        }
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (c, q, stable, checks) = (&c, &q, &stable, &checks);
                s.spawn(move || {
                    for _ in 0..30 {
                        for k in stable {
                            assert!(c.contains(k), "counting: false negative under concurrency");
                            assert!(q.contains(k), "cuckoo: false negative under concurrency");
                        }
                        checks.fetch_add(stable.len() as u64, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        // Writers stop once the readers are done (or have failed).
        let results: Vec<_> = readers.into_iter().map(|h| h.join()).collect();
        stop.store(true, Ordering::Relaxed);
        for r in results {
            if let Err(panic) = r {
                std::panic::resume_unwind(panic);
            }
        }
    });
    assert_eq!(checks.into_inner(), 2 * 30 * stable.len() as u64);
    assert_eq!(c.items(), stable.len() as u64);
    assert_eq!(q.items(), stable.len() as u64);
}
