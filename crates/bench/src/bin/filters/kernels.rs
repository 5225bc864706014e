//! The in-block kernels alone, fed pre-placed items: on the in-cache
//! filter beside its lookups (with sbbf-rs's kernel, lookups and inserts),
//! and on a DRAM-sized random bit array (`filters kernel-dram`).

use std::hint::black_box;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use bloomgate_bench::{median, mix64};
use bloomgate_engine::arch::{self, Kernel, Probes};
use bloomgate_engine::hash::{hash_item, hash_item64, reduce};
use bloomgate_engine::place::Locator;
use bloomgate_engine::{HashId, Layout};

use bloomgate_bench::sbbf::Sbbf;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::measure::{expect_all, LookupSets};
use crate::ours::Ours;
use crate::peers::random_words;
use crate::report::{Op, Report};
use crate::subject::{Subject, SEED};

/// SIMD vs scalar in-block kernel on the in-cache blocked filter, fed
/// pre-hashed (block, h) pairs so only the kernel + block load is timed;
/// beside them sbbf-rs's kernel on the same items, pre-hashed (lookups and
/// inserts).
pub(crate) fn kernel_comparison(
    rep: &mut Report,
    blocked: &dyn Subject,
    sets: &LookupSets,
    reps: usize,
    n: u64,
) {
    // Rebuild an identical blocked filter we can reach the bytes of.
    let bits = blocked.bits();
    let f = Ours::new(Layout::Blocked, bits, n, false);
    f.f.insert_batch(&sets.hits);
    let k = f.f.params().k;
    // The engine's one derivation of places, for the filter's hash id.
    let locator = Locator::new(f.f.params());
    let probes = locator.probes();
    let words: Vec<AtomicU64> =
        f.f.as_bytes()
            .chunks_exact(8)
            .map(|b| AtomicU64::new(u64::from_le_bytes(b.try_into().unwrap())))
            .collect();
    let prep = |keys: &[&[u8]]| -> Vec<(usize, u32)> {
        keys.iter()
            .map(|key| {
                let (block, h) = locator.block(key);
                (block * 8, h)
            })
            .collect()
    };
    let hp = prep(&sets.hits);
    let mp = prep(&sets.misses);
    let kernels = Kernel::supported();
    // Cross-check our derivation (and every kernel) against the filter itself.
    for (set, p) in [(&sets.hits, &hp), (&sets.misses, &mp)] {
        for (key, &(w, h)) in set.iter().zip(p.iter()).take(200_000) {
            let want = f.f.contains(key);
            for &kernel in &kernels {
                assert_eq!(
                    arch::block_contains(kernel, probes, block_at(&words, w), h, k),
                    want,
                    "kernel {kernel} disagrees with the filter"
                );
            }
        }
    }
    // Beside the engine's kernels on these blocks: sbbf-rs's own,
    // pre-hashed, on an sbbf-rs filter of the same bits holding the same
    // items. Every row times the same items in the same repetitions.
    let best = Kernel::best();
    let sbbf_hash = |keys: &[&[u8]]| -> Vec<u64> {
        keys.iter()
            .map(|key| xxh3_64_with_seed(key, SEED))
            .collect()
    };
    let (sh, sm) = (sbbf_hash(&sets.hits), sbbf_hash(&sets.misses));
    let mut sbbf = Sbbf::new(bits);
    for &h in &sh {
        sbbf.insert_hash(h);
    }
    let mut names: Vec<String> = kernels
        .iter()
        .map(|k| format!("kernel: {}", kernel_label(*k)))
        .collect();
    names.push("kernel: mask-and-compare (harness candidate)".into());
    let engine_rows = names.len();
    names.push("kernel: sbbf-rs (256-bit bucket, 8 lanes; pre-hashed)".into());
    for (op, p, sp) in [(Op::HitSingle, &hp, &sh), (Op::MissSingle, &mp, &sm)] {
        let inner = (4_000_000 / p.len()).max(1);
        let run = |which: usize| -> u64 {
            if let Some(&kernel) = kernels.get(which) {
                count_kernel(kernel, probes, black_box(&words), black_box(p), k)
            } else if which == kernels.len() {
                count_mask_compare(probes, black_box(&words), black_box(p), k)
            } else {
                black_box(sp)
                    .iter()
                    .map(|&h| sbbf.contains_hash(h) as u64)
                    .sum()
            }
        };
        let mut samples = vec![vec![]; names.len()];
        let mut counts = vec![0u64; names.len()];
        for _ in 0..reps {
            for which in 0..names.len() {
                let t = Instant::now();
                for _ in 0..inner {
                    counts[which] = run(which);
                }
                samples[which].push(t.elapsed().as_nanos() as f64 / (p.len() * inner) as f64);
            }
        }
        let engine = &counts[..engine_rows];
        assert!(
            engine.iter().all(|&c| c == counts[0]),
            "kernels disagree: {engine:?}"
        );
        if op == Op::HitSingle {
            expect_all("kernels", "hits", counts[0], p.len());
            expect_all("sbbf-rs kernel", "hits", counts[names.len() - 1], p.len());
        }
        for (i, s) in samples.into_iter().enumerate() {
            rep.add(&names[i], op, s, None);
        }
    }
    // Inserts alone: the same items, pre-placed, into zeroed blocks (the
    // zeroing untimed): the engine's single-writer kernel (`block_insert`,
    // what `insert_owned` runs) and sbbf-rs's.
    let owned_pairs = by_block(&hp);
    let ins_names = [
        format!("kernel: {} insert (the owned path's)", best.name()),
        "kernel: sbbf-rs insert (pre-hashed)".to_string(),
    ];
    let mut ins_samples = vec![vec![]; ins_names.len()];
    let blocks = words.len() / 8;
    for _ in 0..reps {
        for (which, samples) in ins_samples.iter_mut().enumerate() {
            let mut owned = vec![[0u64; 8]; blocks];
            let mut sb = Sbbf::new(bits);
            let t = Instant::now();
            let new = if which == 0 {
                insert_owned(best, probes, &mut owned, black_box(&owned_pairs), k)
            } else {
                for &h in black_box(&sh) {
                    sb.insert_hash(h);
                }
                sh.len() as u64
            };
            samples.push(t.elapsed().as_nanos() as f64 / hp.len() as f64);
            // Almost every item is new (a few share all their bits).
            assert!(
                new * 100 >= hp.len() as u64 * 99,
                "{}: {new} new",
                ins_names[which]
            );
        }
    }
    for (name, s) in ins_names.iter().zip(ins_samples) {
        rep.add(name, Op::Insert, s, None);
    }
    // Hash cost alone (the filter's hash), to decompose a lookup.
    let hash = f.f.params().hash;
    let mut hs = vec![];
    for _ in 0..reps {
        let t = Instant::now();
        let mut acc = 0u64;
        for key in &sets.misses {
            acc ^= match hash {
                HashId::Xxh3_64 | HashId::Xxh3_64Words => hash_item64(SEED, black_box(key)),
                HashId::Xxh3_128 => hash_item(SEED, black_box(key)).hi,
            };
        }
        black_box(acc);
        hs.push(t.elapsed().as_nanos() as f64 / sets.misses.len() as f64);
    }
    rep.add(
        &format!("hash only: {hash} of the key"),
        Op::MissSingle,
        hs,
        None,
    );
}

/// `(word, h)` pairs as `(block, h)`.
fn by_block(pairs: &[(usize, u32)]) -> Vec<(usize, u32)> {
    pairs.iter().map(|&(w, h)| (w / 8, h)).collect()
}

/// Inserts the pre-placed `(block, h)` pairs with the engine's
/// single-writer kernel, in a loop compiled for `kernel`; how many were new.
fn insert_owned(
    kernel: Kernel,
    probes: Probes,
    blocks: &mut [[u64; 8]],
    pairs: &[(usize, u32)],
    k: u32,
) -> u64 {
    match probes {
        Probes::Words => insert_owned_as(kernel, Probes::Words, blocks, pairs, k),
        Probes::Anywhere => insert_owned_as(kernel, Probes::Anywhere, blocks, pairs, k),
    }
}

#[inline(always)]
fn insert_owned_as(
    kernel: Kernel,
    probes: Probes,
    blocks: &mut [[u64; 8]],
    pairs: &[(usize, u32)],
    k: u32,
) -> u64 {
    arch::dispatch(
        kernel,
        #[inline(always)]
        |kernel| {
            let mut c = 0u64;
            for &(b, h) in pairs {
                c += arch::block_insert(kernel, probes, &mut blocks[b], h, k) as u64;
            }
            c
        },
    )
}

pub(crate) fn block_at(words: &[AtomicU64], w: usize) -> &arch::Block {
    words[w..w + 8].try_into().unwrap()
}

pub(crate) fn kernel_label(kernel: Kernel) -> &'static str {
    match kernel.name() {
        "avx512" => "avx512 (one vpermd of the block, 16 lanes)",
        "avx2" => "avx2 (2 vpermd + blend, 8 lanes)",
        _ => "scalar (early exit)",
    }
}

/// How many of the pre-hashed `(word, h)` pairs `kernel` finds, in a loop
/// compiled for the kernel (as the engine's own loops are).
pub(crate) fn count_kernel(
    kernel: Kernel,
    probes: Probes,
    words: &[AtomicU64],
    pairs: &[(usize, u32)],
    k: u32,
) -> u64 {
    // One loop per probe scheme, as the engine compiles its own.
    match probes {
        Probes::Words => count_kernel_as(kernel, Probes::Words, words, pairs, k),
        Probes::Anywhere => count_kernel_as(kernel, Probes::Anywhere, words, pairs, k),
    }
}

#[inline(always)]
fn count_kernel_as(
    kernel: Kernel,
    probes: Probes,
    words: &[AtomicU64],
    pairs: &[(usize, u32)],
    k: u32,
) -> u64 {
    arch::dispatch(
        kernel,
        #[inline(always)]
        |kernel| {
            let mut c = 0u64;
            for &(w, h) in pairs {
                c += arch::block_contains(kernel, probes, block_at(words, w), h, k) as u64;
            }
            c
        },
    )
}

/// Candidate: build the mask (as insert does) and compare all 8 words.
/// Out of line, so its code does not depend on the loop it is timed in.
#[inline(never)]
pub(crate) fn count_mask_compare(
    probes: Probes,
    words: &[AtomicU64],
    pairs: &[(usize, u32)],
    k: u32,
) -> u64 {
    let mut c = 0u64;
    for &(w, h) in pairs {
        let block = arch::load_block(block_at(words, w));
        let m = arch::block_mask(probes, h, k);
        let mut missing = 0u64;
        for i in 0..8 {
            missing |= m[i] & !block[i];
        }
        c += (missing == 0) as u64;
    }
    c
}

/// `filters kernel-dram [--dram-mib N]`: the in-block kernels on random
/// blocks of a DRAM-sized bit array (random bits, ~half set), one lookup at a
/// time without prefetch: shows how much memory-level parallelism each
/// kernel lets the out-of-order core extract.
pub(crate) fn kernel_dram(bytes: u64, reps: usize) {
    let words: Vec<AtomicU64> = random_words((bytes / 8) as usize, 0.55, 3)
        .into_iter()
        .map(AtomicU64::new)
        .collect();
    let blocks = (words.len() / 8) as u64;
    let k = 12u32;
    // The probes a new filter of this size gets.
    let probes = HashId::for_filter(Layout::Blocked, blocks * 512, k).probes();
    let pairs: Vec<(usize, u32)> = (0..10_000_000u64)
        .map(|i| {
            let h = mix64(i ^ 0xABCDEF);
            ((reduce(h, blocks) * 8) as usize, (h >> 32) as u32 | 1)
        })
        .collect();
    println!("\n### In-block kernels on a {} MiB random bit array (DRAM), 10 M random blocks, k = {k}, no prefetch\n", bytes >> 20);
    println!("| kernel | ns/lookup (median of {reps}) | min–max |");
    println!("|---|---:|---:|");
    let kernels = Kernel::supported();
    let mut samples = vec![vec![]; kernels.len()];
    let mut counts = vec![0u64; kernels.len()];
    for _ in 0..reps {
        for (i, &kernel) in kernels.iter().enumerate() {
            let t = Instant::now();
            counts[i] = count_kernel(kernel, probes, &words, black_box(&pairs), k);
            samples[i].push(t.elapsed().as_nanos() as f64 / pairs.len() as f64);
        }
    }
    assert!(
        counts.iter().all(|&c| c == counts[0]),
        "kernels disagree: {counts:?}"
    );
    for (i, s) in samples.iter().enumerate() {
        let lo = s.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = s.iter().cloned().fold(0.0, f64::max);
        println!(
            "| {} | {:.2} | {lo:.2}–{hi:.2} |",
            kernel_label(kernels[i]),
            median(s)
        );
    }
    println!(
        "\n({} of {} random probes reported present)",
        counts[0],
        pairs.len()
    );
}
