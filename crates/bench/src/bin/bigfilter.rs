//! What a lookup costs in a filter file larger than RAM: cold (nothing in
//! the page cache), and warm (the page cache holding as much of the file as
//! it can), one query at a time and batched on every core — through the
//! path `bloomgate check` and the server use (the library's `List`, a
//! memory-mapped file, URL canonicalization included).
//!
//! ```text
//! target/release/scale --items 1e10 --memory 12G --keep --dir /work/scale
//! target/release/bigfilter --filter /work/scale/scale-blocked.bgf --items 1e10
//! ```
//!
//! Options: `--lookups` per phase (20,000 one at a time; ten times as many
//! batched), `--skip-cold`, `--in-memory` (then the same file read into
//! memory of its own: static files only). Cold phases drop the page cache first (`sync`,
//! then `3` into `/proc/sys/vm/drop_caches`: needs root; without it they are
//! skipped and say so). Every query is a URL the filter holds (from the
//! `scale` generator, numbers drawn at random below `--items`), so every
//! lookup reads its block, and every answer must be a hit.

use std::time::Instant;

use bloomgate_bench::urls::url;
use bloomgate_bench::{cpu_model, median, mix64, num_arg};
use bloomgate_list::{CheckScratch, List};
use rayon::prelude::*;

/// Empties the page cache; false if this process may not.
fn drop_caches() -> bool {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// Fraction of the file's pages in the page cache (mincore(2) over a
/// mapping of our own, which shares the page cache with the filter's).
fn resident(path: &str) -> f64 {
    let file = std::fs::File::open(path).expect("open");
    // SAFETY: a read-only shared mapping that we only pass to mincore.
    let map = unsafe { memmap2::Mmap::map(&file) }.expect("map");
    let page = 4096usize;
    let pages = map.len().div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `map` is a live mapping of `map.len()` bytes starting at a
    // page boundary; `vec` has one byte per page of it.
    let r = unsafe { libc::mincore(map.as_ptr() as *mut _, map.len(), vec.as_mut_ptr()) };
    assert_eq!(r, 0, "mincore");
    vec.iter().filter(|&&b| b & 1 == 1).count() as f64 / pages as f64
}

/// Queries `i` of the positive stream for `n` numbers from `seed`.
fn queries(items: u64, n: usize, seed: u64) -> Vec<Vec<u8>> {
    (0..n as u64)
        .map(|j| {
            let i = ((mix64(seed ^ j) as u128 * items as u128) >> 64) as u64;
            let mut q = Vec::with_capacity(80);
            url(&mut q, b'p', i);
            q.pop(); // the newline
            q
        })
        .collect()
}

/// One query at a time: (mean µs, median µs, p99 µs).
fn single(list: &List, qs: &[Vec<u8>]) -> (f64, f64, f64) {
    let mut scratch = CheckScratch::default();
    let mut out = Vec::with_capacity(1);
    let mut us = Vec::with_capacity(qs.len());
    for q in qs {
        let t = Instant::now();
        list.check_many([q.as_slice()], &mut scratch, &mut out)
            .expect("the file answers");
        us.push(t.elapsed().as_nanos() as f64 / 1e3);
        let hit = out[0].as_ref().expect("valid query").hit();
        assert!(hit, "false negative: {}", String::from_utf8_lossy(q));
    }
    let mean = us.iter().sum::<f64>() / us.len() as f64;
    us.sort_by(f64::total_cmp);
    (mean, median(&us), us[us.len() * 99 / 100])
}

/// Batches of 1,024 queries on every core: lookups per second.
fn batched(list: &List, qs: &[Vec<u8>]) -> f64 {
    let t = Instant::now();
    qs.par_chunks(1024).for_each_init(
        || (CheckScratch::default(), Vec::new()),
        |(scratch, out), chunk| {
            list.check_many(chunk.iter().map(Vec::as_slice), scratch, out)
                .expect("the file answers");
            assert!(out.iter().all(|v| v.as_ref().is_ok_and(|v| v.hit())));
        },
    );
    qs.len() as f64 / t.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let path = opt("--filter").expect("--filter PATH");
    let items = num_arg(&args, "--items").expect("--items N (what the scale run built)") as u64;
    let n = num_arg(&args, "--lookups").unwrap_or(20_000.0) as usize;
    let size = std::fs::metadata(&path).expect("stat").len();
    println!(
        "bigfilter: {path}, {:.2} GB; {}, {} cores, {:.1} GiB RAM ({:.1} GiB available)",
        size as f64 / 1e9,
        cpu_model(),
        rayon::current_num_threads(),
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| t
                .lines()
                .next()?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok())
            .unwrap_or(0.0)
            / (1u64 << 20) as f64,
        bloomgate_engine::mem_available().unwrap_or(0) as f64 / (1u64 << 30) as f64,
    );
    println!(
        "\n| state | resident before | one at a time: mean / median / p99 | batched, all cores |"
    );
    println!("|---|---|---|---|");
    let open = || List::open(&path).expect("open");
    let mut seed = 1u64;
    let mut row = |state: &str, list: &List| {
        let before = resident(&path);
        let (mean, med, p99) = single(list, &queries(items, n, seed));
        let rate = batched(list, &queries(items, 10 * n, seed + 1));
        seed += 2;
        println!(
            "| {state} | {:.1} % | {mean:.1} / {med:.1} / {p99:.1} µs | {:.0} lookups/s ({:.1} µs each) |",
            before * 100.0,
            rate,
            1e6 / rate
        );
    };
    if args.iter().any(|a| a == "--skip-cold") {
        println!("| cold | – | skipped (--skip-cold) | |");
    } else if drop_caches() {
        row("cold (page cache dropped)", &open());
    } else {
        println!("| cold | – | not measured: dropping the page cache needs root | |");
    }
    // Warm: read the file through once, in order, so the page cache keeps
    // as much of it as it can; then look up as a long-running server would.
    let t = Instant::now();
    {
        use std::io::Read;
        let mut f = std::fs::File::open(&path).expect("open");
        let mut buf = vec![0u8; 16 << 20];
        while f.read(&mut buf).expect("read") > 0 {}
    }
    println!(
        "| (read through in {:.0} s) | | | |",
        t.elapsed().as_secs_f64()
    );
    let list = open();
    row("warm", &list);
    row("warm, again", &list);
    if args.iter().any(|a| a == "--in-memory") {
        // The same file read into memory of its own, on huge pages where
        // the kernel gives them (`OpenOptions::in_memory`; static files only).
        drop(list);
        let t = Instant::now();
        let options = bloomgate_list::OpenOptions {
            in_memory: true,
            ..Default::default()
        };
        let list = List::open_with(&path, &options).expect("open in memory");
        println!(
            "| (read into memory in {:.0} s; {} MiB of it on huge pages) | | | |",
            t.elapsed().as_secs_f64(),
            anon_huge_mib()
        );
        row("in memory", &list);
        row("in memory, again", &list);
    }
}

/// `AnonHugePages` of this process, in MiB (`/proc/self/smaps_rollup`).
fn anon_huge_mib() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("AnonHugePages:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0)
        / 1024
}
