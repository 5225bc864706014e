//! This machine's random-read limit: random 64-byte (cache-line) reads from a
//! buffer far larger than the caches, with 1..32 independent dependent-load
//! chains (latency and memory-level parallelism) and with a prefetch-driven
//! stream of independent random reads (what a batched filter lookup does),
//! on one thread and on every core, with 4 KiB pages and with transparent
//! huge pages (a 2 MiB-aligned mapping advised MADV_HUGEPAGE before its
//! first touch; measured first, and its huge-page coverage is printed with a
//! warning below 90 %).
//!
//! ```text
//! cargo run --release -p bloomgate-bench --bin memlimit -- [--gib 4] [--reps 5] [--reads 20000000]
//! ```

use std::hint::black_box;
use std::time::Instant;

use bloomgate_bench::{anon_huge_bytes, cpu_model, median, mix64, num_arg, thp_policy, AlignedBuf};
use bloomgate_engine::arch::prefetch;
use rayon::prelude::*;

#[inline(always)]
fn reduce(x: u64, n: u64) -> u64 {
    ((x as u128 * n as u128) >> 64) as u64
}

/// `S` independent pointer-chasing chains, interleaved; each load's address
/// depends on the previous load of the same chain. Returns ns per read.
fn chains<const S: usize>(words: &[u64], reads: usize) -> f64 {
    let lines = (words.len() / 8) as u64;
    let mut idx = [0u64; S];
    for (s, i) in idx.iter_mut().enumerate() {
        *i = reduce(mix64(s as u64 + 1), lines);
    }
    let rounds = reads / S;
    let t = Instant::now();
    for r in 0..rounds {
        for s in 0..S {
            let v = words[(idx[s] * 8) as usize];
            // Mixing in the step number keeps the walk from falling into a
            // short cycle (a fixed random map on n lines cycles after ~√n steps).
            let salt = ((r * S + s) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            idx[s] = reduce((v ^ salt).wrapping_mul(0xD6E8_FEB8_6659_FD93), lines);
        }
    }
    black_box(idx);
    t.elapsed().as_nanos() as f64 / (rounds * S) as f64
}

/// Independent random reads, each prefetched `dist` reads ahead (addresses
/// from a counter-based hash, so they do not depend on loaded data).
fn prefetched(words: &[u64], reads: usize, dist: usize, seed: u64) -> f64 {
    let lines = (words.len() / 8) as u64;
    let addr = |i: usize| (reduce(mix64(seed.wrapping_add(i as u64)), lines) * 8) as usize;
    let t = Instant::now();
    let mut acc = 0u64;
    for i in 0..dist {
        prefetch(words.as_ptr().wrapping_add(addr(i)));
    }
    for i in 0..reads {
        prefetch(words.as_ptr().wrapping_add(addr(i + dist)));
        acc ^= words[addr(i)];
    }
    black_box(acc);
    t.elapsed().as_nanos() as f64 / reads as f64
}

fn run(label: &str, buf: &AlignedBuf, reads: usize, reps: usize) -> (f64, f64, f64) {
    let words = buf.words();
    println!(
        "\n**{label}** (median of {reps} reps of {reads} reads; Mreads/s = 1000 / ns per read)\n"
    );
    println!("| access pattern | ns/read (median) | Mreads/s | GB/s of lines |");
    println!("|---|---:|---:|---:|");
    let row = |name: String, v: Vec<f64>| -> f64 {
        let m = median(&v);
        println!("| {name} | {m:.2} | {:.1} | {:.2} |", 1e3 / m, 64.0 / m);
        m
    };
    macro_rules! chain {
        ($s:literal) => {{
            let v: Vec<f64> = (0..reps).map(|_| chains::<$s>(words, reads)).collect();
            row(format!("{} dependent chain(s)", $s), v)
        }};
    }
    let latency = chain!(1);
    chain!(2);
    chain!(4);
    chain!(8);
    chain!(16);
    let mut best_single = chain!(32);
    for dist in [8usize, 16, 32, 64] {
        let v: Vec<f64> = (0..reps)
            .map(|r| prefetched(words, reads, dist, r as u64 * 7919))
            .collect();
        best_single = best_single.min(row(format!("prefetch-driven, distance {dist}"), v));
    }
    // Every core, prefetch-driven at distance 32.
    let threads = rayon::current_num_threads();
    let v: Vec<f64> = (0..reps)
        .map(|r| {
            let t = Instant::now();
            (0..threads).into_par_iter().for_each(|th| {
                prefetched(words, reads, 32, (r * 1000 + th) as u64 * 104729);
            });
            t.elapsed().as_nanos() as f64 / (reads * threads) as f64
        })
        .collect();
    let all = row(
        format!("prefetch-driven, distance 32, {threads} threads (total)"),
        v,
    );
    (latency, best_single, all)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |name: &str, d: f64| num_arg(&args, name).unwrap_or(d);
    let gib = get("--gib", 4.0);
    let reps = get("--reps", 5.0) as usize;
    let reads = get("--reads", 20_000_000.0) as usize;
    let bytes = (gib * (1u64 << 30) as f64) as usize;
    println!("## memory random-read limit\n");
    println!(
        "CPU: {}, {} threads, THP policy: {}, buffer {gib} GiB",
        cpu_model(),
        rayon::current_num_threads(),
        thp_policy()
    );
    let mut summary = vec![];
    // Huge pages first, before the 4 KiB buffer exists, so that the huge-page
    // faults find as much unfragmented free memory as possible.
    for thp in [true, false] {
        let mut buf = if thp {
            let b = AlignedBuf::zeroed_huge(bytes);
            assert!(b.huge_advised(), "madvise(MADV_HUGEPAGE) failed");
            b
        } else {
            AlignedBuf::zeroed(bytes)
        };
        // Touch every page with random contents (parallel), so no read hits the zero page.
        buf.words_mut()
            .par_chunks_mut(1 << 16)
            .enumerate()
            .for_each(|(c, ch)| {
                for (i, w) in ch.iter_mut().enumerate() {
                    *w = mix64(((c as u64) << 16) + i as u64);
                }
            });
        let huge = anon_huge_bytes(buf.as_ptr(), buf.len());
        let coverage = huge.map(|h| h as f64 / buf.len() as f64);
        let backed = match (huge, coverage) {
            (Some(h), Some(c)) => format!(
                "AnonHugePages of this buffer: {} MiB = {:.1} %",
                h >> 20,
                c * 100.0
            ),
            _ => "AnonHugePages of this buffer: unknown (no /proc/self/smaps)".to_string(),
        };
        let label = if thp {
            format!(
                "{gib} GiB buffer, 2 MiB aligned, MADV_HUGEPAGE before first touch, as the engine allocates filters of 4 MiB and more ({backed})"
            )
        } else {
            format!(
                "{gib} GiB buffer, no MADV_HUGEPAGE (4 KiB pages unless THP is `always`; {backed})"
            )
        };
        println!(
            "\nhuge-page coverage, {}: {backed}",
            if thp {
                "huge-page buffer"
            } else {
                "4 KiB buffer"
            }
        );
        let short = if thp && !coverage.is_some_and(|c| c >= 0.9) {
            println!(
                "\n**WARNING: only {} of the huge-page buffer is backed by huge pages (< 90 %); the `huge pages` rows below are NOT representative of huge pages.**",
                coverage.map_or("an unknown part".into(), |c| format!("{:.1} %", c * 100.0))
            );
            "huge pages (NOT representative: < 90 % THP)".to_string()
        } else if thp {
            format!("huge pages ({:.0} % THP)", coverage.unwrap_or(0.0) * 100.0)
        } else {
            "4 KiB pages".to_string()
        };
        summary.push((short, run(&label, &buf, reads, reps)));
    }
    println!("\n**Summary**\n");
    println!("| pages | latency (1 chain) ns | best 1-thread ns/read | 1-thread Mreads/s | all-core ns/read | all-core Mreads/s |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, (lat, best, all)) in summary {
        println!(
            "| {name} | {lat:.1} | {best:.2} | {:.1} | {all:.2} | {:.1} |",
            1e3 / best,
            1e3 / all
        );
    }
}
