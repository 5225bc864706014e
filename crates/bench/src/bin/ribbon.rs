//! The static ribbon layout against the blocked and classic Bloom layouts,
//! sbbf-rs and xorf's BinaryFuse16, in one process, on the same synthetic
//! URL keys at the same target rate (1e-4; sbbf-rs sized for it by its own
//! formula, `bloomgate_bench::sbbf`; BinaryFuse16 is fixed at 2⁻¹⁶).
//!
//! ```text
//! cargo build --release -p bloomgate-bench --bin ribbon
//! target/release/ribbon --items 500000              # in cache (under 1 MiB of ribbon)
//! target/release/ribbon --items 780000000 --reps 1  # DRAM size: the blocked filter is 2 GiB
//! options: --items N  --reps R (default 3)  --lookups N (default 2,000,000)
//! ```
//!
//! Per layout: bits per item, the rate measured on `10⁷` never-inserted
//! keys against the predicted one, build ns per key (the Bloom layouts'
//! batched inserts and sbbf-rs's on one thread; the ribbon's hashing and
//! solving on all cores, and per core), lookup ns per key, one at a time and
//! batched, over random inserted keys. Medians of `reps` runs. Every
//! looked-up inserted key must be found (panic otherwise).
//!
//! The inserted keys are generated `2²⁰` at a time outside the timings, so
//! any number of them fits in memory; the ribbon is looked up from a copy
//! in memory of its own (`Ribbon::open_in_memory`, as `serve` holds it).
//! BinaryFuse16 is built only up to `2·10⁸` keys: its construction needs
//! about 25 bytes per key beside the 8-byte hashes (20 GB at DRAM size).

use std::hint::black_box;
use std::time::{Duration, Instant};

use bloomgate_bench::sbbf::Sbbf;
use bloomgate_bench::{cpu_model, median, mix64, num_arg, Keys};
use bloomgate_engine::arch;
use bloomgate_engine::ribbon::{build, key_hash, Ribbon, RibbonSpec};
use bloomgate_engine::{plan, Filter, Layout};
use rayon::prelude::*;
use xorf::Filter as _;
use xxhash_rust::xxh3::xxh3_64_with_seed;

const FP: f64 = 1e-4;
const SEED: u64 = 0x5EED_B100;
/// Inserted keys generated at a time.
const CHUNK: u64 = 1 << 20;
/// Most keys BinaryFuse16 is built for (see the module documentation).
const FUSE_MAX: u64 = 200_000_000;
/// sbbf-rs's batches: hashes computed and buckets prefetched this many
/// keys ahead, as in the `filters` bench.
const PIPE: usize = 16;

/// Calls `f` with the inserted keys `0..n`, [`CHUNK`] at a time, generated
/// outside the timing; returns the ns per key spent in `f`.
fn timed_chunks(n: u64, mut f: impl FnMut(&[&[u8]])) -> f64 {
    let mut spent = Duration::ZERO;
    let mut lo = 0;
    while lo < n {
        let hi = (lo + CHUNK).min(n);
        let keys = Keys::from_ids(lo..hi);
        let slices = keys.slices();
        let t = Instant::now();
        f(&slices);
        spent += t.elapsed();
        lo = hi;
    }
    spent.as_secs_f64() * 1e9 / n.max(1) as f64
}

/// The median of `reps` runs of `f`, each returning its ns per key.
fn median_of(reps: usize, mut f: impl FnMut() -> f64) -> f64 {
    let t: Vec<f64> = (0..reps.max(1)).map(|_| f()).collect();
    median(&t)
}

/// ns per key of `f` over `n` keys, median of `reps`.
fn ns(reps: usize, n: usize, mut f: impl FnMut() -> u64) -> f64 {
    median_of(reps, || {
        let s = Instant::now();
        black_box(f());
        s.elapsed().as_secs_f64() * 1e9 / n as f64
    })
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
    let probe_keys = Keys::from_ids((0..lookups as u64).map(|i| mix64(i) % n));
    let probe = probe_keys.slices();
    let out_keys = Keys::from_ids(1u64 << 40..(1u64 << 40) + strangers);
    let outs = out_keys.slices();
    let rate = |has: &(dyn Fn(&[u8]) -> bool + Sync)| {
        outs.par_iter().filter(|k| has(k)).count() as f64 / strangers as f64
    };
    println!(
        "{:<26} {:>9} {:>11} {:>11} {:>10} {:>12} {:>11} {:>11}",
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
            "{name:<26} {bpk:>9.2} {meas:>11.3e} {pred:>11.3e} {b:>10.1} {bc:>12.1} {l:>11.1} {lb:>11.1}"
        );
    };

    // Ribbon: hash and solve on all cores into a file in the temp dir.
    {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("r.bgf");
        let spec = RibbonSpec::new(FP, SEED);
        let threads = rayon::current_num_threads() as f64;
        let b = median_of(reps, || {
            let mut hashes = Vec::with_capacity(n as usize);
            let hashing = timed_chunks(n, |c| {
                hashes.par_extend(c.par_iter().map(|k| key_hash(SEED, k)));
            });
            let t = Instant::now();
            build(&path, &spec, n, hashes).expect("ribbon build");
            hashing + t.elapsed().as_secs_f64() * 1e9 / n as f64
        });
        let r = Ribbon::open_in_memory(&path).expect("open");
        let fp = rate(&|k| r.contains(k));
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
    }

    for layout in [Layout::Blocked, Layout::Classic] {
        let pl = plan(layout, n, FP).expect("plan");
        let mut kept = None;
        let b = median_of(reps, || {
            kept = None;
            let f = Filter::with_plan(&pl).expect("filter");
            let t = timed_chunks(n, |c| {
                f.insert_batch(c);
            });
            kept = Some(f);
            t
        });
        let f = kept.expect("built");
        let fp = rate(&|k| f.contains(k));
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

    // sbbf-rs, sized for the same rate (more bits than at equal size).
    {
        let hash = |k: &[u8]| xxh3_64_with_seed(k, SEED);
        let mut kept = None;
        let b = median_of(reps, || {
            kept = None;
            let mut s = Sbbf::for_rate(n, FP);
            let t = timed_chunks(n, |c| {
                let mut hs = [0u64; PIPE];
                for chunk in c.chunks(PIPE) {
                    for (h, k) in hs.iter_mut().zip(chunk) {
                        *h = hash(k);
                        arch::prefetch(s.bucket_ptr(*h));
                    }
                    for &h in &hs[..chunk.len()] {
                        s.insert_hash(h);
                    }
                }
            });
            kept = Some(s);
            t
        });
        let s = kept.expect("built");
        // (sbbf-rs's kernel handle is not `Sync`: counted on one thread.)
        let fp = outs.iter().filter(|k| s.contains_hash(hash(k))).count() as f64 / strangers as f64;
        let l = ns(reps, lookups, || {
            probe.iter().filter(|k| s.contains_hash(hash(k))).count() as u64
        });
        let lb = ns(reps, lookups, || {
            let mut hs = [0u64; PIPE];
            let mut found = 0;
            for chunk in probe.chunks(PIPE) {
                for (h, k) in hs.iter_mut().zip(chunk) {
                    *h = hash(k);
                    arch::prefetch(s.bucket_ptr(*h));
                }
                for &h in &hs[..chunk.len()] {
                    found += s.contains_hash(h) as u64;
                }
            }
            assert_eq!(found, probe.len() as u64, "sbbf-rs lost a key");
            found
        });
        row(
            &s.name(),
            s.bits() as f64 / n as f64,
            fp,
            s.predicted_fp(n),
            b,
            b,
            l,
            lb,
        );
    }

    if n > FUSE_MAX {
        println!("xorf BinaryFuse16: not built above {FUSE_MAX} keys (about 25 bytes per key to build, beside its hashes)");
        return;
    }
    let mut fuse = None;
    let b = median_of(reps, || {
        fuse = None;
        let mut hashes = Vec::with_capacity(n as usize);
        let hashing = timed_chunks(n, |c| {
            hashes.extend(c.iter().map(|k| xxh3_64_with_seed(k, SEED)));
        });
        let t = Instant::now();
        fuse = Some(xorf::BinaryFuse16::try_from(&hashes).expect("BinaryFuse16"));
        hashing + t.elapsed().as_secs_f64() * 1e9 / n as f64
    });
    let fuse = fuse.expect("built");
    let has = |k: &[u8]| fuse.contains(&xxh3_64_with_seed(k, SEED));
    let fp = rate(&has);
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
