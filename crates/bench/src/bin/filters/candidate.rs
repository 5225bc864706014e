//! Candidate in-block kernels: what bloomgate-blocked's 512-bit block would
//! cost if its probes were placed the way sbbf-rs places its own, one per
//! 32-bit word. Not a format bloomgate writes: kernels timed beside the
//! engine's on the same pre-placed items (`kernels.rs`), so that "which part
//! of the gap is the price of the lower rate" is a row of every run.
//!
//! The candidate keeps the blocked layout's shape and in-block hash `h` and
//! changes only the probes: probe `i < k ≤ 16` is bit `(h · G^(i+1)) >> 27`
//! of the 32-bit word `(s + i) mod 16`, `s = (h >> 1) mod 16`: the `k`
//! probes lie in `k` consecutive words (mod 16) from a start word the hash
//! picks. No two probes share a word, so
//!
//! * an insert's mask is one multiply, two shifts, a variable shift and one
//!   permute (`vpermd`) for all probes, where bloomgate's probes may share a
//!   word: about three vector operations per probe
//!   (`arch::x86_64::mask_avx512`);
//! * a lookup is bloomgate's kernel with another permute index (`s + i`
//!   instead of `x_i >> 28`) and shift (27 instead of 23).
//!
//! With `k = 16` every word is probed: sbbf-rs's layout at 512 bits, whose
//! rate at bloomgate's 22.03 bits per item is 1.43·10⁻⁴ (bloomgate's
//! 1.00·10⁻⁴ by the planner's formula; [`rate`]). With `k = 12`, the
//! planner's k at 10⁻⁴, it is 1.045·10⁻⁴, 4.5 % above bloomgate's (a
//! simulation of 8·10⁷ queries: 1.057·10⁻⁴ against 1.000·10⁻⁴), but the
//! lanes taking part depend on `h`.
//!
//! Each kernel is written twice: portable Rust over sixteen `u32` lanes (the
//! reference), and AVX-512 (a `vpmulld`, a `vpsrld`, a `vpsllvd`, an and-not
//! and a test; an insert adds an or and a store), which the tests compare
//! with it.

use bloomgate_engine::arch::{self, Kernel};

/// 2³²/φ rounded to odd, the engine's probe multiplier; lane `i` uses its
/// power `i + 1`.
const G: u32 = 0x9E37_79B9;

/// `G^(i+1) mod 2³²` for the sixteen lanes.
const POWERS: [u32; 16] = {
    let mut t = [0u32; 16];
    let mut x: u32 = 1;
    let mut i = 0;
    while i < 16 {
        x = x.wrapping_mul(G);
        t[i] = x;
        i += 1;
    }
    t
};

/// One 64-byte block as sixteen 32-bit words, on its own cache line.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
pub(crate) struct Block16(pub(crate) [u32; 16]);

impl Block16 {
    /// The block of eight little-endian 64-bit words (word `j`'s low half
    /// is lane `2j`, as the engine's kernels read a block).
    pub(crate) fn from_words(words: [u64; 8]) -> Block16 {
        let mut b = Block16::default();
        for (j, w) in words.into_iter().enumerate() {
            b.0[2 * j] = w as u32;
            b.0[2 * j + 1] = (w >> 32) as u32;
        }
        b
    }
}

/// The probe mask of in-block hash `h`: probe `i`'s bit in word
/// `(s + i) mod 16`, 0 in the words the `k` probes skip.
///
/// Plain loops: `std::array::from_fn` is not inlined into the dispatched
/// kernel, so it would run without the kernel's instruction set.
#[inline(always)]
fn mask(h: u32, k: u32) -> [u32; 16] {
    let start = (h >> 1) as usize;
    let mut m = [0u32; 16];
    for (i, g) in POWERS.iter().enumerate().take(k as usize) {
        m[(start + i) & 15] = 1 << (h.wrapping_mul(*g) >> 27);
    }
    m
}

/// True when every probe of `h` finds its bit set in `block`.
#[inline(always)]
fn test(block: &Block16, h: u32, k: u32) -> bool {
    let m = mask(h, k);
    (0..16).fold(0, |acc, i| acc | (m[i] & !block.0[i])) == 0
}

/// Sets the probes' bits; whether one was new (what bloomgate's inserts
/// return, and how they skip writing a block that has them all).
#[inline(always)]
fn set(block: &mut Block16, h: u32, k: u32) -> bool {
    let m = mask(h, k);
    if (0..16).fold(0, |acc, i| acc | (m[i] & !block.0[i])) == 0 {
        return false;
    }
    for (w, m) in block.0.iter_mut().zip(m) {
        *w |= m;
    }
    true
}

/// How many of the pre-placed `(block, h)` pairs the candidate finds, in a
/// loop compiled for `kernel` (as `kernels::count_kernel` times the
/// engine's): the AVX-512 kernel where `kernel` is AVX-512, the portable one
/// otherwise.
pub(crate) fn count(kernel: Kernel, blocks: &[Block16], pairs: &[(usize, u32)], k: u32) -> u64 {
    arch::dispatch(
        kernel,
        #[inline(always)]
        |kernel| {
            let mut c = 0u64;
            for &(b, h) in pairs {
                c += contains_with(kernel, &blocks[b], h, k) as u64;
            }
            c
        },
    )
}

/// Inserts the pre-placed pairs; how many were new.
pub(crate) fn insert(
    kernel: Kernel,
    blocks: &mut [Block16],
    pairs: &[(usize, u32)],
    k: u32,
) -> u64 {
    arch::dispatch(
        kernel,
        #[inline(always)]
        |kernel| {
            let mut c = 0u64;
            for &(b, h) in pairs {
                c += insert_with(kernel, &mut blocks[b], h, k) as u64;
            }
            c
        },
    )
}

#[inline(always)]
fn contains_with(kernel: Kernel, block: &Block16, h: u32, k: u32) -> bool {
    #[cfg(target_arch = "x86_64")]
    if kernel.name() == "avx512" {
        // SAFETY: `Kernel::best` names AVX-512 only on a CPU that has it.
        return unsafe { avx512::contains(block, h, k) };
    }
    let _ = kernel;
    test(block, h, k)
}

#[inline(always)]
fn insert_with(kernel: Kernel, block: &mut Block16, h: u32, k: u32) -> bool {
    #[cfg(target_arch = "x86_64")]
    if kernel.name() == "avx512" {
        // SAFETY: as in `contains_with`.
        return unsafe { avx512::insert(block, h, k) };
    }
    let _ = kernel;
    set(block, h, k)
}

/// The candidate's AVX-512 twins of [`test`] and [`set`]. Written out
/// because the compiler vectorizes the portable ones across the loop over
/// items (gathers) instead of across the sixteen lanes of one item.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Block16, POWERS};

    /// The probe mask of `h` (the portable [`super::mask`]): probe `i`'s bit
    /// in lane `i`, then the lanes moved to their words, word `w` taking
    /// lane `(w − s) mod 16` (one `vpermd`).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn mask(h: u32, k: u32) -> __m512i {
        // SAFETY: POWERS and IOTA are 64 readable bytes each.
        let (g, iota) = unsafe {
            (
                _mm512_loadu_si512(POWERS.as_ptr().cast()),
                _mm512_loadu_si512(IOTA.as_ptr().cast()),
            )
        };
        let hv = _mm512_set1_epi32(h as i32);
        let x = _mm512_mullo_epi32(hv, g);
        let lanes = if k >= 16 {
            0xFFFF
        } else {
            ((1u32 << k) - 1) as __mmask16
        };
        let bits = _mm512_maskz_sllv_epi32(lanes, _mm512_set1_epi32(1), _mm512_srli_epi32::<27>(x));
        let from = _mm512_sub_epi32(iota, _mm512_srli_epi32::<1>(hv));
        _mm512_permutexvar_epi32(from, bits)
    }

    /// `0, 1, …, 15`: lane `i`'s offset from the start word.
    static IOTA: [u32; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

    /// The lookup as the engine's kernel does it: the block's words permuted
    /// so that lane `i` holds word `(s + i) mod 16` (`vpermd` reads the low
    /// 4 bits of each index), each rotated so the probed bit is bit 0, and
    /// the low `k` lanes tested, a constant lane mask.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) unsafe fn contains(block: &Block16, h: u32, k: u32) -> bool {
        // SAFETY: `block` and IOTA and POWERS are 64 readable bytes each.
        let (words, iota, g) = unsafe {
            (
                _mm512_loadu_si512(block.0.as_ptr().cast()),
                _mm512_loadu_si512(IOTA.as_ptr().cast()),
                _mm512_loadu_si512(POWERS.as_ptr().cast()),
            )
        };
        let hv = _mm512_set1_epi32(h as i32);
        let x = _mm512_mullo_epi32(hv, g);
        let idx = _mm512_add_epi32(_mm512_srli_epi32::<1>(hv), iota);
        let probed = _mm512_permutexvar_epi32(idx, words);
        let got = _mm512_rorv_epi32(probed, _mm512_srli_epi32::<27>(x));
        let lanes = if k >= 16 {
            0xFFFF
        } else {
            ((1u32 << k) - 1) as __mmask16
        };
        _mm512_mask_testn_epi32_mask(lanes, got, _mm512_set1_epi32(1)) == 0
    }

    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) unsafe fn insert(block: &mut Block16, h: u32, k: u32) -> bool {
        let m = mask(h, k);
        // SAFETY: `block` is 64 bytes held exclusively (`&mut`).
        unsafe {
            let cur = _mm512_loadu_si512(block.0.as_ptr().cast());
            let missing = _mm512_andnot_si512(cur, m);
            if _mm512_test_epi32_mask(missing, missing) == 0 {
                return false;
            }
            _mm512_storeu_si512(block.0.as_mut_ptr().cast(), _mm512_or_si512(cur, m));
        }
        true
    }
}

/// The predicted rate of `blocks` blocks holding `n` items, exact for
/// uniform hashes (inclusion–exclusion over the probed words).
///
/// A query with start word 0 probes the words `Q = {0, …, k−1}`; an item
/// with start `s` (uniform over 16) probes `W_s = {s, …, s+k−1} mod 16`, one
/// uniform bit in each. Given how many items probed each word, the query's
/// bits are set independently, word `w`'s with probability `1 − a^{c_w}`,
/// `a = 31/32`. Expanding `∏_{w∈Q} (1 − a^{c_w})` over the subsets `S` of
/// `Q`, each item contributes a factor `g(S) = (1/16) Σ_s a^{|S ∩ W_s|}` to
/// `E[a^{Σ_{w∈S} c_w}]`, and a Poisson(λ) number of items per block turns
/// `g(S)^n` into `e^{−λ(1−g(S))}`:
///
/// `fp = Σ_{S⊆Q} (−1)^{|S|} · e^{−λ(1 − g(S))}`, with `λ = n / blocks`.
///
/// For `k = 16` every `W_s` is all sixteen words and this is sbbf-rs's
/// formula with sixteen words, `Σ_j P(j) · (1 − a^j)^16`. The alternating
/// sum of up to 2¹⁶ terms of size at most 1 loses up to about 10⁻¹¹
/// (absolute) to rounding: nothing at the rates compared here (10⁻⁴), but
/// not a formula for rates near 10⁻¹⁰.
pub(crate) fn rate(n: u64, blocks: u64, k: u32) -> f64 {
    assert!((1..=16).contains(&k));
    let lambda = n as f64 / blocks as f64;
    let a_pow: Vec<f64> = (0..=16).map(|j| (31.0f64 / 32.0).powi(j)).collect();
    let low = (1u32 << k) - 1;
    let windows: Vec<u32> = (0..16)
        .map(|s| ((low | low << 16) >> (16 - s)) & 0xFFFF)
        .collect();
    let mut fp = 0.0;
    for subset in 0..=low {
        let g = windows
            .iter()
            .map(|w| a_pow[(subset & w).count_ones() as usize])
            .sum::<f64>()
            / 16.0;
        let term = (-lambda * (1.0 - g)).exp();
        fp += if subset.count_ones() % 2 == 0 {
            term
        } else {
            -term
        };
    }
    fp.max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_bench::mix64;

    #[test]
    fn probes_are_k_distinct_words_one_bit_each() {
        for k in [1, 12, 16] {
            for i in 0..10_000u64 {
                let h = mix64(i) as u32 | 1;
                let m = mask(h, k);
                assert_eq!(m.iter().filter(|&&w| w != 0).count() as u32, k);
                assert!(m.iter().all(|w| w.count_ones() <= 1));
            }
        }
    }

    #[test]
    fn with_every_word_probed_the_rate_is_sbbf_rs_formula_with_sixteen_words() {
        for (n, blocks) in [(23_000u64, 1000u64), (10_000, 1000), (40_000, 1000)] {
            let lambda = n as f64 / blocks as f64;
            let mut p = (-lambda).exp();
            let mut want = 0.0;
            for j in 0..400 {
                if j > 0 {
                    p *= lambda / j as f64;
                }
                want += p * (1.0 - (31.0f64 / 32.0).powi(j)).powi(16);
            }
            let got = rate(n, blocks, 16);
            // The alternating sum's rounding (see `rate`).
            assert!((got - want).abs() <= 1e-11, "{got} vs {want}");
        }
    }

    #[test]
    fn every_inserted_item_is_found_and_the_rate_is_as_predicted() {
        let (n, nblocks) = (20_000u64, 800usize);
        let place = |i: u64| {
            let x = mix64(i ^ 0x5eed);
            ((((x >> 32) * nblocks as u64) >> 32) as usize, x as u32 | 1)
        };
        for k in [12, 16] {
            let kernel = Kernel::best();
            let mut blocks = vec![Block16::default(); nblocks];
            let added: Vec<_> = (0..n).map(place).collect();
            insert(kernel, &mut blocks, &added, k);
            let mut portable = vec![Block16::default(); nblocks];
            insert(Kernel::SCALAR, &mut portable, &added, k);
            assert!(blocks.iter().zip(&portable).all(|(a, b)| a.0 == b.0));
            assert_eq!(count(kernel, &blocks, &added, k), n);
            // The machine's kernel agrees with the portable one.
            let probes: Vec<_> = (n..n + 400_000).map(place).collect();
            let fps = count(kernel, &blocks, &probes, k);
            assert_eq!(fps, count(Kernel::SCALAR, &blocks, &probes, k));
            let want = rate(n, nblocks as u64, k) * probes.len() as f64;
            // A Poisson count: within 5 standard deviations of the prediction.
            let fps = fps as f64;
            assert!(
                (fps - want).abs() <= 5.0 * want.sqrt(),
                "k = {k}: {fps} false positives, predicted {want:.0}"
            );
        }
    }
}
