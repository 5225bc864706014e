//! The static ribbon layout against the blocked and classic Bloom layouts
//! and xorf's BinaryFuse16, in one process, on the same synthetic URL keys
//! at the same target rate (1e-4; BinaryFuse16 is fixed at 2⁻¹⁶).
//!
//! ```text
//! cargo build --release -p bloomgate-bench --bin ribbon
//! target/release/ribbon --items 500000            # in cache (under 1 MiB of ribbon)
//! target/release/ribbon --items 50000000          # beyond the caches (86 MB of ribbon)
//! options: --items N  --reps R (default 3)  --lookups N (default 2,000,000)
//! ```
//!
//! Per layout: bits per item, the rate measured on `10⁷` never-inserted
//! keys against the predicted one, build ns per key (single-threaded for
//! the Bloom layouts' inserts, the ribbon's solve on all cores and per
//! core), lookup ns per key, one at a time and batched, over random
//! inserted keys. Medians of `reps` runs. Every looked-up inserted key must
//! be found (panic otherwise).

use std::hint::black_box;
use std::time::Instant;

use bloomgate_bench::{cpu_model, median, num_arg, push_key};
use bloomgate_engine::ribbon::{build, key_hash, Ribbon, RibbonSpec};
use bloomgate_engine::{plan, Filter, Layout};
use rayon::prelude::*;
use xorf::Filter as _;
use xxhash_rust::xxh3::xxh3_64_with_seed;

const FP: f64 = 1e-4;
const SEED: u64 = 0x5EED_B100;

fn keys(range: std::ops::Range<u64>) -> Vec<Vec<u8>> {
    range
        .into_par_iter()
        .map(|i| {
            let mut v = Vec::with_capacity(64);
            push_key(&mut v, i);
            v
        })
        .collect()
}

/// ns per key of `f` over `n` keys, median of `reps`.
fn ns(reps: usize, n: usize, mut f: impl FnMut() -> u64) -> f64 {
    let mut t = Vec::new();
    for _ in 0..reps {
        let s = Instant::now();
        black_box(f());
        t.push(s.elapsed().as_secs_f64() * 1e9 / n as f64);
    }
    median(&t)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n = num_arg(&args, "--items").unwrap_or(500_000.0) as u64;
    let reps = num_arg(&args, "--reps").unwrap_or(3.0) as usize;
    let lookups = num_arg(&args, "--lookups").unwrap_or(2e6) as usize;
    let strangers = 10_000_000u64;
    println!(
        "ribbon bench: {n} keys, p = {FP}, {} ({} threads)",
        cpu_model(),
        rayon::current_num_threads()
    );
    let ins = keys(0..n);
    let probe: Vec<&[u8]> = (0..lookups)
        .map(|i| ins[(bloomgate_bench::mix64(i as u64) % n) as usize].as_slice())
        .collect();
    let outs = keys(1u64 << 40..(1u64 << 40) + strangers);
    println!(
        "{:<18} {:>9} {:>11} {:>11} {:>10} {:>12} {:>11} {:>11}",
        "layout",
        "bits/key",
        "fp meas.",
        "fp pred.",
        "build ns",
        "build ns/cpu",
        "lookup ns",
        "batched ns"
    );
    let row = |name: &str, bpk: f64, meas: f64, pred: f64, b: f64, bc: f64, l: f64, lb: f64| {
        println!(
            "{name:<18} {bpk:>9.2} {meas:>11.3e} {pred:>11.3e} {b:>10.1} {bc:>12.1} {l:>11.1} {lb:>11.1}"
        );
    };

    // Ribbon: hash and solve on all cores into a file in the temp dir.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("r.bgf");
    let spec = RibbonSpec::new(FP, SEED);
    let threads = rayon::current_num_threads() as f64;
    let b = ns(reps, n as usize, || {
        let hashes: Vec<u64> = ins.par_iter().map(|k| key_hash(SEED, k)).collect();
        build(&path, &spec, n, hashes).expect("ribbon build").items
    });
    let r = Ribbon::open(&path).expect("open");
    let fp = outs.par_iter().filter(|k| r.contains(k)).count() as f64 / strangers as f64;
    let l = ns(reps, lookups, || {
        probe.iter().filter(|k| r.contains(k)).count() as u64
    });
    let mut out = Vec::new();
    let lb = ns(reps, lookups, || {
        r.contains_many(&probe, &mut out);
        out.iter().filter(|&&x| x).count() as u64
    });
    assert!(out.iter().all(|&x| x), "ribbon lost a key");
    row(
        "ribbon",
        r.file_len() as f64 * 8.0 / n as f64,
        fp,
        r.predicted_fp(),
        b,
        b * threads,
        l,
        lb,
    );

    for layout in [Layout::Blocked, Layout::Classic] {
        let pl = plan(layout, n, FP).expect("plan");
        let mut f = Filter::with_plan(&pl).expect("filter");
        let b = ns(reps, n as usize, || {
            f = Filter::with_plan(&pl).expect("filter");
            f.insert_batch(&ins)
        });
        let fp = outs.par_iter().filter(|k| f.contains(k)).count() as f64 / strangers as f64;
        let l = ns(reps, lookups, || {
            probe.iter().filter(|k| f.contains(k)).count() as u64
        });
        let mut out = Vec::new();
        let lb = ns(reps, lookups, || {
            f.contains_batch(&probe, &mut out);
            out.iter().filter(|&&x| x).count() as u64
        });
        assert!(out.iter().all(|&x| x), "{layout} lost a key");
        row(
            layout.name(),
            pl.bits_per_item(),
            fp,
            f.predicted_fp(),
            b,
            b,
            l,
            lb,
        );
    }

    let mut fuse = None;
    let b = ns(reps, n as usize, || {
        let hashes: Vec<u64> = ins.iter().map(|k| xxh3_64_with_seed(k, SEED)).collect();
        fuse = Some(xorf::BinaryFuse16::try_from(&hashes).expect("BinaryFuse16"));
        n
    });
    let fuse = fuse.expect("built");
    let has = |k: &[u8]| fuse.contains(&xxh3_64_with_seed(k, SEED));
    let fp = outs.par_iter().filter(|k| has(k)).count() as f64 / strangers as f64;
    let l = ns(reps, lookups, || {
        probe.iter().filter(|k| has(k)).count() as u64
    });
    row(
        "xorf BinaryFuse16",
        fuse.fingerprints.len() as f64 * 16.0 / n as f64,
        fp,
        1.0 / 65536.0,
        b,
        b,
        l,
        f64::NAN,
    );
}
