//! Where the time of a lookup goes, piece by piece, against sbbf-rs.
//!
//! One block array on huge pages (the engine's layout, driven with the
//! engine's own kernels), the same keys, one thread; each row adds one piece
//! of a lookup to the bare memory loop:
//!
//! 1. prefetch 16 ahead + probe, block addresses computed beforehand;
//! 2. the same + XXH3-128 of a key that is in cache (hashing work only);
//!    2b. the same with XXH3-64 (what a 64-bit hash id would save);
//! 3. the same + XXH3-128 of the lookup's own key (hashing + key traffic);
//! 4. the full lookup (hash → prefetch 16 ahead → probe), as `Filter::contains_batch` does it;
//!    4b. the same work in groups: hash and prefetch 32, then probe the 32;
//!    4c. row 4 with XXH3-64 instead of XXH3-128 (a 64-bit hash id: block
//!    from the whole hash by multiply-shift, probes from its low 32 bits),
//!    on its own block array filled that way;
//!    4e. the engine itself: `Filter::contains_batch` on a `Filter` with the
//!    same bits, k and seed (what `filters` times), answers counted;
//!    4k. row 4 on each other SIMD kernel (AVX2 beside AVX-512);
//!    4m / 5m. rows 4e and 5 on keys that were never inserted (misses);
//! 5. sbbf-rs (xxh3-64, 32-byte buckets) behind the `filters` harness's
//!    hash-32-then-probe-32 pipeline, on its own huge-page buffer;
//! 6. one lookup at a time (hash → probe, no prefetch), as `Filter::contains`;
//!    6c. row 6 with XXH3-64 (the 64-bit hash id of row 4c);
//!    6e. the engine itself: `Filter::contains`, one call per key;
//! 7. sbbf-rs one at a time (xxh3-64 → `contains`).
//!
//! Every row checks its answers: every inserted key found, and for misses
//! no more than 1 % "present". The single rows (6, 6c, 6e, 7) and the
//! batched rows run twice, alternating, so drift on a shared machine shows.
//! `--gib 0.0009765625 --keys 380000` gives the in-cache picture (1 MiB, as
//! `filters`' in-cache rows).
//!
//! ```text
//! cargo run --release -p bloomgate-bench --bin lookup_breakdown -- [--gib 2] [--keys 2000000] [--reps 5]
//!     [--hash-id 1|2|3]   the engine filter's hash (rows 4e, 6e, 4m; default: a new filter's)
//!     [--paired [--shuffled] [--passes N] [--sbbf-4k]]
//! ```
//!
//! `--paired` times only the engine (`contains_batch`, `contains`) against
//! sbbf-rs (groups of 32, one at a time), repetition by repetition
//! alternating as the `filters` harness pairs them, and can take that
//! harness's other conditions one at a time: `--shuffled` looks the keys
//! up in another order than they were inserted (a strided walk, as
//! `filters`' hit set), `--passes N` walks the keys N times per timed
//! repetition (`filters` walks its in-cache set about ten times), and
//! `--sbbf-4k` gives sbbf-rs an allocator buffer on 4 KiB pages (what
//! `filters` gives it below 4 MiB). It is how the two harnesses'
//! disagreement on batched lookups was tracked down (BENCHMARKS.md).

use std::time::Instant;

use bloomgate_bench::{anon_huge_bytes, cpu_model, median, num_arg, sample_ids, AlignedBuf, Keys};
use bloomgate_engine::arch::{self, Block, Kernel, Probes};
use bloomgate_engine::{Filter, HashId, Layout, Params};
use xxhash_rust::xxh3::{xxh3_128_with_seed, xxh3_64_with_seed};

const SEED: u64 = 0x5EED;
const K: u32 = 12;
/// How the harness's own block arrays place an item's probes: as hash ids
/// 1 and 2 do (the rows compare hashes and pipelines on one layout); the
/// engine's filter (rows 4e, 6e, 4m) takes its hash id's own.
const PROBES: Probes = Probes::Anywhere;
const AHEAD: usize = 16;

/// Block index and 32-bit in-block hash, exactly as the engine derives them.
#[inline(always)]
fn locate(blocks: usize, key: &[u8]) -> (usize, u32) {
    let h = xxh3_128_with_seed(key, SEED);
    (
        (((h >> 64) as u64 as u128 * blocks as u128) >> 64) as usize,
        h as u32 | 1,
    )
}

/// Block index and in-block hash under a 64-bit hash id: one XXH3-64, the
/// block from the whole value by multiply-shift (its high bits), the probes
/// from its low 32 bits, as RocksDB's cache-local filter splits one hash.
#[inline(always)]
fn locate64(blocks: usize, key: &[u8]) -> (usize, u32) {
    let h = xxh3_64_with_seed(key, SEED);
    (((h as u128 * blocks as u128) >> 64) as usize, h as u32 | 1)
}

/// The rolling-window pipeline of `Filter::contains_batch` over `mem`,
/// with `locate` deriving each key's place; how many keys it found.
#[inline(always)]
fn rolling(
    kernel: Kernel,
    mem: &[Block],
    keys: &[&[u8]],
    locate: impl Fn(usize, &[u8]) -> (usize, u32),
) -> u64 {
    let n = keys.len();
    let mut ring = [(0usize, 0u32); AHEAD];
    for (slot, k) in ring.iter_mut().zip(keys) {
        *slot = locate(mem.len(), k);
        arch::prefetch(mem.as_ptr().wrapping_add(slot.0));
    }
    let mut hits = 0;
    for i in 0..n {
        let (b, h) = ring[i % AHEAD];
        if let Some(k) = keys.get(i + AHEAD) {
            ring[i % AHEAD] = locate(mem.len(), k);
            arch::prefetch(mem.as_ptr().wrapping_add(ring[i % AHEAD].0));
        }
        hits += arch::block_contains(kernel, PROBES, &mem[b], h, K) as u64;
    }
    hits
}

/// One lookup at a time over `mem` (hash → probe, no prefetch), compiled
/// for `kernel`; how many keys it found.
fn one_at_a_time(
    kernel: Kernel,
    mem: &[Block],
    keys: &[&[u8]],
    locate: impl Fn(usize, &[u8]) -> (usize, u32),
) -> u64 {
    arch::dispatch(
        kernel,
        #[inline(always)]
        |kk| {
            keys.iter()
                .map(|k| {
                    let (b, h) = locate(mem.len(), std::hint::black_box(k));
                    arch::block_contains(kk, PROBES, &mem[b], h, K) as u64
                })
                .sum()
        },
    )
}

fn ns_per(reps: usize, n: usize, mut f: impl FnMut() -> u64) -> (f64, u64) {
    // One untimed run first: the first pass over a freshly filled buffer
    // measured up to 1.5× slower here (the host still settling its pages).
    let mut answer = std::hint::black_box(f());
    let mut v = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        answer = std::hint::black_box(f());
        v.push(t.elapsed().as_nanos() as f64 / n as f64);
    }
    (median(&v), answer)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |name: &str, d: f64| num_arg(&args, name).unwrap_or(d);
    let bytes = (get("--gib", 2.0) * (1u64 << 30) as f64) as usize / 64 * 64;
    let n = get("--keys", 2_000_000.0) as usize;
    let reps = get("--reps", 5.0) as usize;

    let buf = AlignedBuf::zeroed_huge(bytes);
    let mem: &[Block] = buf.blocks();
    let buf64 = AlignedBuf::zeroed_huge(bytes);
    let mem64: &[Block] = buf64.blocks();
    let keys = Keys::from_ids(0..n as u64);
    let ks = keys.slices();
    let absent = Keys::from_ids(n as u64..2 * n as u64);
    let ms = absent.slices();
    let kernel = Kernel::best();
    // Every key inserted, so the hit rows answer "yes" for every key.
    let fill = |mem: &[Block], locate: fn(usize, &[u8]) -> (usize, u32)| {
        for k in &ks {
            let (b, h) = locate(mem.len(), k);
            for (w, m) in mem[b].iter().zip(arch::block_mask(PROBES, h, K)) {
                w.fetch_or(m, std::sync::atomic::Ordering::Relaxed);
            }
        }
    };
    fill(mem, locate);
    fill(mem64, locate64);
    // The engine's own filter over the same bits, k and seed: the same
    // blocks as `mem` under hash ids 1 and 2 (the harness's own arrays are
    // probed as those are, `PROBES`), reached through the public API.
    let bits = bytes as u64 * 8;
    let hash = match num_arg(&args, "--hash-id") {
        Some(id) => HashId::from_code(id as u8).expect("--hash-id: 1, 2 or 3"),
        None => HashId::for_filter(Layout::Blocked, bits, K),
    };
    let filter = Filter::new(Params {
        layout: Layout::Blocked,
        bits,
        k: K,
        seed: SEED,
        hash,
        key_kind: 0,
        match_mode: 0,
        planned_items: n as u64,
        target_fp: 1e-4,
    })
    .expect("filter");
    filter.insert_batch(&ks);
    let pre: Vec<(usize, u32)> = ks.iter().map(|k| locate(mem.len(), k)).collect();
    let sbbf_4k = args.iter().any(|a| a == "--sbbf-4k");
    let mut sb = if sbbf_4k {
        AlignedBuf::zeroed(bytes)
    } else {
        AlignedBuf::zeroed_huge(bytes)
    };
    let buckets = bytes / sbbf_rs::BUCKET_SIZE;
    let sbbf = sbbf_rs::FilterFn::new();
    for k in &ks {
        // SAFETY: 64-byte aligned buffer of `buckets` buckets.
        unsafe { sbbf.insert(sb.as_mut_ptr(), buckets, xxh3_64_with_seed(k, SEED)) };
    }
    let sb_ptr = sb.as_ptr();

    println!("## lookup breakdown: {} MiB per filter, {n} keys (mean {:.1} bytes), kernel {kernel}, {reps} reps, engine filter hashed with {hash}", bytes >> 20, keys.mean_len());
    println!("CPU: {}", cpu_model());
    if args.iter().any(|a| a == "--paired") {
        let shuffled = args.iter().any(|a| a == "--shuffled");
        let passes = num_arg(&args, "--passes").map_or(1, |p| p as usize).max(1);
        // The `filters` harness's hit set: every inserted key, in a strided order.
        let order = Keys::from_ids(sample_ids(n, n as u64, 99).into_iter());
        let looked = if shuffled { order.slices() } else { ks.clone() };
        println!(
            "paired: keys {}, {passes} passes per repetition, sbbf-rs on {}",
            if shuffled {
                "shuffled"
            } else {
                "in insertion order"
            },
            if sbbf_4k {
                "4 KiB pages (allocator)"
            } else {
                "huge pages"
            }
        );
        let mut out = Vec::with_capacity(n);
        let ours_batch = |out: &mut Vec<bool>| {
            let mut c = 0;
            for _ in 0..passes {
                filter.contains_batch(&looked, out);
                c = out.iter().filter(|&&b| b).count() as u64;
            }
            c
        };
        let sbbf_batch = || {
            let mut c = 0;
            for _ in 0..passes {
                c = 0;
                let mut hs = [0u64; 32];
                for chunk in looked.chunks(32) {
                    for (h, k) in hs.iter_mut().zip(chunk) {
                        *h = xxh3_64_with_seed(k, SEED);
                        let idx =
                            ((h.rotate_left(32) as u32 as u64 * buckets as u64) >> 32) as usize;
                        arch::prefetch(sb_ptr.wrapping_add(idx * sbbf_rs::BUCKET_SIZE));
                    }
                    for &h in &hs[..chunk.len()] {
                        // SAFETY: 64-byte aligned buffer of `buckets` buckets.
                        c += unsafe { sbbf.contains(sb_ptr, buckets, h) } as u64;
                    }
                }
            }
            c
        };
        let ours_single = || {
            let mut c = 0;
            for _ in 0..passes {
                c = looked
                    .iter()
                    .map(|k| filter.contains(std::hint::black_box(k)) as u64)
                    .sum();
            }
            c
        };
        let sbbf_single = || {
            let mut c = 0;
            for _ in 0..passes {
                c = looked
                    .iter()
                    .map(|k| {
                        let h = xxh3_64_with_seed(std::hint::black_box(k), SEED);
                        // SAFETY: as above.
                        unsafe { sbbf.contains(sb_ptr, buckets, h) as u64 }
                    })
                    .sum();
            }
            c
        };
        let time = |f: &mut dyn FnMut() -> u64| {
            let t = Instant::now();
            let c = std::hint::black_box(f());
            assert_eq!(c, n as u64, "every key was inserted");
            t.elapsed().as_nanos() as f64 / (n * passes) as f64
        };
        println!("| pair | engine ns | sbbf-rs ns | engine ÷ sbbf-rs (median of per-rep ratios) |");
        println!("|---|---:|---:|---:|");
        for round in 0..2 {
            let (mut a, mut b, mut r) = (vec![], vec![], vec![]);
            let mut f1 = || ours_batch(&mut out);
            let mut f2 = sbbf_batch;
            time(&mut f1);
            time(&mut f2);
            for _ in 0..reps {
                let x = time(&mut f1);
                let y = time(&mut f2);
                a.push(x);
                b.push(y);
                r.push(x / y);
            }
            println!(
                "| batched ({round}) | {:.2} | {:.2} | {:.3} |",
                median(&a),
                median(&b),
                median(&r)
            );
            let (mut a, mut b, mut r) = (vec![], vec![], vec![]);
            let mut f1 = ours_single;
            let mut f2 = sbbf_single;
            for _ in 0..reps {
                let x = time(&mut f1);
                let y = time(&mut f2);
                a.push(x);
                b.push(y);
                r.push(x / y);
            }
            println!(
                "| single ({round}) | {:.2} | {:.2} | {:.3} |",
                median(&a),
                median(&b),
                median(&r)
            );
        }
        return;
    }
    let fb = filter.as_bytes();
    for (name, ptr, len) in [
        ("bloomgate blocks", buf.as_ptr(), buf.len()),
        ("bloomgate blocks, 64-bit id", buf64.as_ptr(), buf64.len()),
        ("bloomgate Filter", fb.as_ptr(), fb.len()),
        ("sbbf-rs buffer", sb.as_ptr(), sb.len()),
    ] {
        let huge = anon_huge_bytes(ptr, len).unwrap_or(0);
        let pct = 100.0 * huge as f64 / len as f64;
        println!("{name}: {:.0} % on huge pages", pct);
        if pct < 90.0 && len >= 4 << 20 {
            println!("**WARNING: {name} is not on huge pages; its row is not comparable**");
        }
    }
    println!();
    println!("| loop | ns per lookup (median) |");
    println!("|---|---:|");
    let row = |name: &str, (ns, answer): (f64, u64)| {
        assert_eq!(answer, n as u64, "{name}: every key was inserted");
        println!("| {name} | {ns:.1} |");
    };
    let miss_row = |name: &str, (ns, answer): (f64, u64)| {
        assert!(
            answer <= n as u64 / 100,
            "{name}: {answer} of {n} absent keys \"present\""
        );
        println!("| {name} | {ns:.1} |");
    };
    let probe = |i: usize, kernel: Kernel| {
        if let Some(&(b, _)) = pre.get(i + AHEAD) {
            arch::prefetch(mem.as_ptr().wrapping_add(b));
        }
        let (b, h) = pre[i];
        arch::block_contains(kernel, PROBES, &mem[b], h, K) as u64
    };
    row(
        "1. prefetch + probe, addresses known (no hashing)",
        ns_per(reps, n, || {
            arch::dispatch(kernel, |kk| (0..n).map(|i| probe(i, kk)).sum())
        }),
    );
    row(
        "2. 1 + XXH3-128 of an in-cache key",
        ns_per(reps, n, || {
            arch::dispatch(kernel, |kk| {
                let mut x = 0u64;
                let hits = (0..n)
                    .map(|i| {
                        x ^= xxh3_128_with_seed(ks[i % 1024], SEED) as u64;
                        probe(i, kk)
                    })
                    .sum();
                std::hint::black_box(x);
                hits
            })
        }),
    );
    row(
        "2b. 1 + XXH3-64 of an in-cache key (a 64-bit hash id's cost)",
        ns_per(reps, n, || {
            arch::dispatch(kernel, |kk| {
                let mut x = 0u64;
                let hits = (0..n)
                    .map(|i| {
                        x ^= xxh3_64_with_seed(ks[i % 1024], SEED);
                        probe(i, kk)
                    })
                    .sum();
                std::hint::black_box(x);
                hits
            })
        }),
    );
    row(
        "3. 1 + XXH3-128 of the lookup's own key",
        ns_per(reps, n, || {
            arch::dispatch(kernel, |kk| {
                let mut x = 0u64;
                let hits = (0..n)
                    .map(|i| {
                        x ^= xxh3_128_with_seed(ks[i], SEED) as u64;
                        probe(i, kk)
                    })
                    .sum();
                std::hint::black_box(x);
                hits
            })
        }),
    );
    for _ in 0..2 {
        row(
            "6. one at a time: hash → probe (no prefetch)",
            ns_per(reps, n, || one_at_a_time(kernel, mem, &ks, locate)),
        );
        row(
            "6e. one at a time: the engine's `Filter::contains`",
            ns_per(reps, n, || {
                ks.iter()
                    .map(|k| filter.contains(std::hint::black_box(k)) as u64)
                    .sum()
            }),
        );
        row(
            "6c. one at a time, XXH3-64 (a 64-bit hash id)",
            ns_per(reps, n, || one_at_a_time(kernel, mem64, &ks, locate64)),
        );
        row(
            "7. sbbf-rs one at a time: xxh3-64 → probe",
            ns_per(reps, n, || {
                ks.iter()
                    .map(|k| {
                        let h = xxh3_64_with_seed(std::hint::black_box(k), SEED);
                        // SAFETY: as above.
                        unsafe { sbbf.contains(sb_ptr, buckets, h) as u64 }
                    })
                    .sum()
            }),
        );
    }
    let sbbf_groups = |keys: &[&[u8]]| {
        let mut hits = 0;
        let mut hs = [0u64; 32];
        for chunk in keys.chunks(32) {
            for (h, k) in hs.iter_mut().zip(chunk) {
                *h = xxh3_64_with_seed(k, SEED);
                let idx = ((h.rotate_left(32) as u32 as u64 * buckets as u64) >> 32) as usize;
                arch::prefetch(sb_ptr.wrapping_add(idx * sbbf_rs::BUCKET_SIZE));
            }
            for &h in &hs[..chunk.len()] {
                // SAFETY: as above.
                hits += unsafe { sbbf.contains(sb_ptr, buckets, h) } as u64;
            }
        }
        hits
    };
    let mut out = Vec::with_capacity(n);
    let mut engine_batch = |keys: &[&[u8]]| {
        filter.contains_batch(keys, &mut out);
        out.iter().filter(|&&b| b).count() as u64
    };
    for _ in 0..2 {
        row(
            "4. full lookup: hash → prefetch 16 ahead → probe",
            ns_per(reps, n, || {
                arch::dispatch(kernel, |kk| rolling(kk, mem, &ks, locate))
            }),
        );
        row(
            "4e. the engine's `Filter::contains_batch` (answers counted)",
            ns_per(reps, n, || engine_batch(&ks)),
        );
        row(
            "4c. row 4 with XXH3-64 (a 64-bit hash id)",
            ns_per(reps, n, || {
                arch::dispatch(kernel, |kk| rolling(kk, mem64, &ks, locate64))
            }),
        );
        for other in Kernel::supported() {
            if other == kernel || other == Kernel::SCALAR {
                continue;
            }
            row(
                &format!("4k. row 4 on the {other} kernel"),
                ns_per(reps, n, || {
                    arch::dispatch(other, |kk| rolling(kk, mem, &ks, locate))
                }),
            );
        }
        row(
            "4b. groups: hash + prefetch 32, then probe 32",
            ns_per(reps, n, || {
                arch::dispatch(kernel, |kk| {
                    let mut hits = 0;
                    let mut ring = [(0usize, 0u32); 32];
                    for chunk in ks.chunks(32) {
                        for (slot, k) in ring.iter_mut().zip(chunk) {
                            *slot = locate(mem.len(), k);
                            arch::prefetch(mem.as_ptr().wrapping_add(slot.0));
                        }
                        for &(b, h) in &ring[..chunk.len()] {
                            hits += arch::block_contains(kk, PROBES, &mem[b], h, K) as u64;
                        }
                    }
                    hits
                })
            }),
        );
        row(
            "5. sbbf-rs: xxh3-64 + prefetch 32, then probe 32",
            ns_per(reps, n, || sbbf_groups(&ks)),
        );
        miss_row(
            "4m. misses: the engine's `Filter::contains_batch`",
            ns_per(reps, n, || engine_batch(&ms)),
        );
        miss_row(
            "5m. misses: sbbf-rs, groups of 32",
            ns_per(reps, n, || sbbf_groups(&ms)),
        );
    }
}
