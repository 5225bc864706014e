//! The x86-64 kernels (AVX2, AVX-512F) and the wrappers that compile a whole
//! loop for them.
//!
//! Both kernels follow the scalar reference exactly: probe `i` of block hash
//! `h` is bit `x_i >> 23` of the block, with `x_i = h · G^(i+1) mod 2³²`, i.e.
//! bit `(x_i >> 23) & 31` of 32-bit word `x_i >> 28` (little-endian, so the
//! same bit the scalar kernel tests in its 64-bit words); with
//! [`Probes::Words`] it is bit `x_i >> 27` of word `(h + i) mod 16`. The
//! two schemes' kernels differ only in those two vectors (the word each
//! lane permutes in, the bit it rotates down) and, for the insert mask, in
//! how the probes are merged.
//!
//! Neither gathers: the block is loaded once into registers and the probed
//! words are picked out of them with a permute (`vpermd`), one instruction for
//! eight or sixteen probes. (The first AVX2 kernel used `vpgatherdd` on a stack
//! copy of the block; gathers are many micro-ops and the copy stalled on
//! store forwarding: the permute version is ~1.5× faster per lookup.) Misses
//! do not exit early: hits and misses mix unpredictably in real traffic, and
//! a branch that mispredicts costs more than the second round it would skip.
//!
//! # Reading blocks other threads are writing
//!
//! Writers set bits under a region lock while readers never lock (see
//! `filter`). A plain Rust read of a word that another thread is storing to
//! would be a data race, so the kernels load the block with one `asm!`
//! instruction instead: x86 performs each naturally aligned 8-byte part of a
//! vector load as a single access, so every word is read as its old or its new
//! value, exactly like eight `Relaxed` atomic loads. Bits are never cleared, so
//! either value answers correctly for every insertion that completed before
//! the lookup began.

use std::arch::asm;
use std::arch::x86_64::*;

use super::{Block, Kernel, Probes, POWERS};

/// Runs `f` compiled with AVX-512F enabled (`f` and what it calls inline here).
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f,avx2")]
pub(super) unsafe fn run_avx512<R>(f: impl FnOnce(Kernel) -> R) -> R {
    f(Kernel(super::Isa::Avx512))
}

/// Runs `f` compiled with AVX2 enabled.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn run_avx2<R>(f: impl FnOnce(Kernel) -> R) -> R {
    f(Kernel(super::Isa::Avx2))
}

/// Eight 1s then eight 0s: a window of eight starting at `8 − live` has
/// `live` leading 1s (one load instead of building the lane mask from `k`).
static WANT: [i32; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0];

/// Sixteen 0s then sixteen 32s: the sixteen shift counts starting at
/// `16 − k` leave the first `k` lanes' counts as they are and push the
/// others to 32, which `vpsllvd` turns into 0.
static PAST_K: [u32; 32] = {
    let mut t = [0u32; 32];
    let mut i = 16;
    while i < 32 {
        t[i] = 32;
        i += 1;
    }
    t
};

/// [`words_mask_avx512`] on AVX2 (`k ≤ 16`): the sixteen words of the
/// mask in two 256-bit halves. Probe `i`'s bit in lane `i` (one `vpsllvd`
/// per half, the lanes past `k` shifted out), then word `w` takes lane
/// `(w − h) mod 16`: one `vpermd` from each half and a blend on bit 3 of the
/// index, per half of the result.
///
/// # Safety
/// The CPU must support AVX2, and `k ≤ 16`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn words_mask_avx2(h: u32, k: u32) -> (__m256i, __m256i) {
    let hv = _mm256_set1_epi32(h as i32);
    let one = _mm256_set1_epi32(1);
    let past = 16 - k as usize;
    // SAFETY: POWERS has 64 entries, so POWERS[0..16] is in bounds; `past`
    // is in 0..=16 (k ≤ 16, this function's contract), so PAST_K[past..past
    // + 16] is in bounds of its 32 entries.
    let (bits_lo, bits_hi) = unsafe {
        let x_lo = _mm256_mullo_epi32(hv, _mm256_loadu_si256(POWERS.as_ptr().cast()));
        let x_hi = _mm256_mullo_epi32(hv, _mm256_loadu_si256(POWERS.as_ptr().add(8).cast()));
        let c_lo = _mm256_loadu_si256(PAST_K.as_ptr().add(past).cast());
        let c_hi = _mm256_loadu_si256(PAST_K.as_ptr().add(past + 8).cast());
        (
            _mm256_sllv_epi32(one, _mm256_or_si256(_mm256_srli_epi32::<27>(x_lo), c_lo)),
            _mm256_sllv_epi32(one, _mm256_or_si256(_mm256_srli_epi32::<27>(x_hi), c_hi)),
        )
    };
    let rotate = |word: __m256i| {
        // The lane word `word` takes: (word − h) mod 16; `vpermd` reads its
        // low 3 bits, bit 3 picks the half.
        let from = _mm256_sub_epi32(word, hv);
        let pick_hi = _mm256_castsi256_ps(_mm256_slli_epi32::<28>(from));
        _mm256_castps_si256(_mm256_blendv_ps(
            _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(bits_lo, from)),
            _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(bits_hi, from)),
            pick_hi,
        ))
    };
    (
        rotate(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
        rotate(_mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15)),
    )
}

/// AVX2 twin of [`super::scalar::block_contains`]: eight probes per round.
///
/// Each round multiplies `h` by eight powers of `G` at once (`vpmulld`), takes
/// the word index (top 4 bits), picks that word from the low or the high half
/// of the block (two `vpermd` and a blend on bit 3 of the index), shifts the
/// probed bit down (`vpsrlvd`) and records lanes whose bit is 0. `k > 8` takes
/// further rounds; lanes past `k` are masked out.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn block_contains_avx2(probes: Probes, block: &Block, h: u32, k: u32) -> bool {
    // SAFETY: the CPU has AVX2 (this function's contract).
    let (lo, hi) = unsafe { load_avx2(block) };
    let k = probes.clamp(k) as usize;
    let hv = _mm256_set1_epi32(h as i32);
    let low5 = _mm256_set1_epi32(31);
    // Probes::Words: lane j of the round at i probes word h + i + j (the
    // permute and the blend read its low 4 bits).
    let first_word = _mm256_add_epi32(hv, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    let mut missing = _mm256_setzero_si256();
    let mut i = 0;
    while i < k {
        // SAFETY: POWERS has 64 entries and here 0 ≤ i ≤ 56 (k ≤ 64, i steps
        // by 8), so the unaligned 32-byte load reads POWERS[i..i+8], in bounds.
        let mults = unsafe { _mm256_loadu_si256(POWERS.as_ptr().add(i).cast()) };
        let x = _mm256_mullo_epi32(hv, mults);
        // The word (its low 4 bits count) and the bit of each lane's probe.
        let (word, bit) = match probes {
            Probes::Anywhere => (
                _mm256_srli_epi32::<28>(x),
                _mm256_and_si256(_mm256_srli_epi32::<23>(x), low5),
            ),
            Probes::Words => (
                _mm256_add_epi32(first_word, _mm256_set1_epi32(i as i32)),
                _mm256_srli_epi32::<27>(x),
            ),
        };
        let from_lo = _mm256_permutevar8x32_epi32(lo, word);
        let from_hi = _mm256_permutevar8x32_epi32(hi, word);
        // Bit 3 of the word index, moved to the sign bit, picks the half.
        let pick_hi = _mm256_castsi256_ps(_mm256_slli_epi32::<28>(word));
        let probed = _mm256_castps_si256(_mm256_blendv_ps(
            _mm256_castsi256_ps(from_lo),
            _mm256_castsi256_ps(from_hi),
            pick_hi,
        ));
        let got = _mm256_srlv_epi32(probed, bit);
        // Lanes i+j with j < k − i are probes (want bit 0), the rest are
        // ignored: eight words of WANT starting at 8 − min(k − i, 8).
        // SAFETY: that start is in 0..8, so WANT[start..start+8] is in bounds.
        let want = unsafe { _mm256_loadu_si256(WANT.as_ptr().add(8 - (k - i).min(8)).cast()) };
        missing = _mm256_or_si256(missing, _mm256_andnot_si256(got, want));
        i += 8;
    }
    _mm256_testz_si256(missing, missing) != 0
}

/// AVX-512F twin of [`super::scalar::block_contains`]: sixteen probes per
/// round, so the usual `k ≤ 16` is one round: one multiply, one permute of
/// the whole block (`vpermd` on a 512-bit register), one variable rotate and
/// one masked test.
///
/// The rotate (`vprorvd`) takes its count modulo 32, so `x >> 23` (the bit's
/// position in the block, 0..511) rotates the probed word's bit
/// `(x >> 23) & 31` down to bit 0 without the `& 31` a shift needs; and
/// `vpermd` reads only the low 4 bits of each index, so `x >> 28` needs no
/// mask either. (Rotating 1 up to the probed bit instead, from h alone
/// before the block arrives, takes the rotate off the chain after the load
/// but adds a load of the constant: no gain above the noise, BENCHMARKS.md,
/// "Single lookups and the owned insert's mask, fifth pass".)
///
/// `k ≤ 16` (the planner's k at p = 10⁻⁴ is 12) takes one round with no
/// loop, whose lane mask the compiler keeps out of a lookup loop; larger
/// `k` loops over rounds of sixteen.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn block_contains_avx512(probes: Probes, block: &Block, h: u32, k: u32) -> bool {
    // SAFETY: the CPU has AVX-512F (this function's contract).
    let words = unsafe { load_avx512(block) };
    let hv = _mm512_set1_epi32(h as i32);
    if k <= 16 || probes == Probes::Words {
        // SAFETY: the CPU has AVX-512F (this function's contract); round 0.
        return unsafe { round_avx512(probes, words, hv, 0, probes.clamp(k).min(16)) } == 0;
    }
    let k = probes.clamp(k);
    let mut missing: __mmask16 = 0;
    let mut i = 0;
    while i < k {
        // SAFETY: as above; here 0 ≤ i ≤ 48 (k ≤ 64, i steps by 16).
        missing |= unsafe { round_avx512(probes, words, hv, i, k - i) };
        i += 16;
    }
    missing == 0
}

/// The block in one 512-bit register, read as eight word-sized accesses
/// (see the module comment).
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load_avx512(block: &Block) -> __m512i {
    let words: __m512i;
    // SAFETY: `block` is a reference to 64 readable bytes; `vmovdqu64` needs no
    // alignment. Concurrent writers: see the module comment.
    unsafe {
        asm!(
            "vmovdqu64 {w}, zmmword ptr [{p}]",
            p = in(reg) block.as_ptr(),
            w = out(zmm_reg) words,
            options(nostack, preserves_flags, readonly),
        );
    }
    words
}

/// [`super::block_contains_at`] on AVX-512F, one function per probe scheme
/// (`WORDS`: [`Probes::Words`]).
///
/// With [`Probes::Words`] the probe mask is built as an insert builds it
/// ([`words_mask_avx512`]: multiply, shift, permute), from `h` alone, while
/// the block's load is in flight; once the block arrives one masked
/// `vptestnmd` finds the probed words whose bit is 0 (the lanes to test
/// are the mask's nonzero ones: each probed word holds exactly one of its
/// bits). [`block_contains_avx512`] instead permutes the block, then
/// rotates and tests it: two more steps after the load, one vector
/// operation fewer in all, which the batched loops (their lookups overlap)
/// measured faster with and a single lookup slower.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn contains_at_avx512<const WORDS: bool>(
    blocks: &[Block],
    i: usize,
    h: u32,
    k: u32,
) -> bool {
    let block = &blocks[i];
    if !WORDS {
        // SAFETY: the CPU has AVX-512F (this function's contract).
        return unsafe { block_contains_avx512(Probes::Anywhere, block, h, k) };
    }
    // SAFETY: the CPU has AVX-512F (this function's contract).
    let (words, mask) = unsafe {
        (
            load_avx512(block),
            words_mask_avx512(h, Probes::Words.clamp(k)),
        )
    };
    let probed = _mm512_test_epi32_mask(mask, mask);
    _mm512_mask_testn_epi32_mask(probed, words, mask) == 0
}

/// [`super::block_contains_at`] on AVX2, one function per probe scheme;
/// with [`Probes::Words`] the mask is built while the block loads, as in
/// [`contains_at_avx512`], and each half of the block is tested against
/// its half of the mask with one `vptest`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn contains_at_avx2<const WORDS: bool>(
    blocks: &[Block],
    i: usize,
    h: u32,
    k: u32,
) -> bool {
    let block = &blocks[i];
    if !WORDS {
        // SAFETY: the CPU has AVX2 (this function's contract).
        return unsafe { block_contains_avx2(Probes::Anywhere, block, h, k) };
    }
    // SAFETY: the CPU has AVX2 (this function's contract); the clamped k
    // is at most 16.
    let ((lo, hi), (m_lo, m_hi)) =
        unsafe { (load_avx2(block), words_mask_avx2(h, Probes::Words.clamp(k))) };
    // `vptest`'s carry: no bit of the mask is missing from the words.
    _mm256_testc_si256(lo, m_lo) & _mm256_testc_si256(hi, m_hi) != 0
}

/// [`super::WordsItem`] on AVX-512F: the item located by `at` (inlined
/// here) and its block tested by [`contains_at_avx512`], in this one
/// function.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn words_item_avx512<L: super::Locate>(
    blocks: &[Block],
    k: u32,
    item: &[u8],
    at: &L,
) -> bool {
    let (i, h) = at.locate(item);
    // SAFETY: the CPU has AVX-512F (this function's contract).
    unsafe { contains_at_avx512::<true>(blocks, i, h, k) }
}

/// [`super::WordsItem`] on AVX2, as [`words_item_avx512`].
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn words_item_avx2<L: super::Locate>(
    blocks: &[Block],
    k: u32,
    item: &[u8],
    at: &L,
) -> bool {
    let (i, h) = at.locate(item);
    // SAFETY: the CPU has AVX2 (this function's contract).
    unsafe { contains_at_avx2::<true>(blocks, i, h, k) }
}

/// The block in two 256-bit registers, read as eight word-sized accesses
/// (see the module comment).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn load_avx2(block: &Block) -> (__m256i, __m256i) {
    let (lo, hi): (__m256i, __m256i);
    // SAFETY: `block` is a reference to 64 readable bytes; `vmovdqu` needs no
    // alignment. Concurrent writers: see the module comment.
    unsafe {
        asm!(
            "vmovdqu {lo}, ymmword ptr [{p}]",
            "vmovdqu {hi}, ymmword ptr [{p} + 32]",
            p = in(reg) block.as_ptr(),
            lo = out(ymm_reg) lo,
            hi = out(ymm_reg) hi,
            options(nostack, preserves_flags, readonly),
        );
    }
    (lo, hi)
}

/// [`super::block_mask_with`] on AVX2 for [`Probes::Words`]: the mask of
/// [`words_mask_avx2`] stored once.
///
/// # Safety
/// The CPU must support AVX2, and `k ≤ 16`.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn words_block_mask_avx2(h: u32, k: u32) -> [u64; 8] {
    let mut out = [0u64; 8];
    // SAFETY: the CPU has AVX2 and k ≤ 16 (this function's contract); `out`
    // is 64 writable bytes and unaligned stores need no alignment.
    unsafe {
        let (lo, hi) = words_mask_avx2(h, k);
        _mm256_storeu_si256(out.as_mut_ptr().cast(), lo);
        _mm256_storeu_si256(out.as_mut_ptr().add(4).cast(), hi);
    }
    out
}

/// [`super::block_insert`] on AVX2 for [`Probes::Words`]: the mask in two
/// registers ([`words_mask_avx2`]), one test and, if a bit is new, two
/// stores of the whole block.
///
/// # Safety
/// The CPU must support AVX2, and `k ≤ 16`.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn words_block_insert_avx2(block: &mut [u64; 8], h: u32, k: u32) -> bool {
    // SAFETY: the CPU has AVX2 and k ≤ 16 (this function's contract);
    // `block` is 64 bytes the caller holds exclusively (`&mut`); unaligned
    // vector loads and stores need no alignment.
    unsafe {
        let (m_lo, m_hi) = words_mask_avx2(h, k);
        let lo = _mm256_loadu_si256(block.as_ptr().cast());
        let hi = _mm256_loadu_si256(block.as_ptr().add(4).cast());
        if _mm256_testc_si256(lo, m_lo) & _mm256_testc_si256(hi, m_hi) != 0 {
            return false;
        }
        _mm256_storeu_si256(block.as_mut_ptr().cast(), _mm256_or_si256(lo, m_lo));
        _mm256_storeu_si256(block.as_mut_ptr().add(4).cast(), _mm256_or_si256(hi, m_hi));
    }
    true
}

/// One round of [`block_contains_avx512`]: probes `i..i + 16` of the block
/// hash broadcast in `hv`; the lanes among the `live` lowest whose probed
/// bit of `words` is 0.
///
/// # Safety
/// The CPU must support AVX-512F, and `i ≤ 48`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn round_avx512(
    probes: Probes,
    words: __m512i,
    hv: __m512i,
    i: u32,
    live: u32,
) -> __mmask16 {
    // SAFETY: POWERS has 64 entries and i ≤ 48 (this function's contract),
    // so the unaligned 64-byte load reads POWERS[i..i+16], in bounds.
    let mults = unsafe { _mm512_loadu_si512(POWERS.as_ptr().add(i as usize).cast()) };
    let x = _mm512_mullo_epi32(hv, mults);
    let got = match probes {
        Probes::Anywhere => {
            let probed = _mm512_permutexvar_epi32(_mm512_srli_epi32::<28>(x), words);
            _mm512_rorv_epi32(probed, _mm512_srli_epi32::<23>(x))
        }
        Probes::Words => {
            // Lane j reads word h + j (`vpermd` reads the low 4 bits): an
            // index that does not wait for the multiply.
            let word = _mm512_add_epi32(hv, iota16());
            let probed = _mm512_permutexvar_epi32(word, words);
            _mm512_rorv_epi32(probed, _mm512_srli_epi32::<27>(x))
        }
    };
    let lanes: __mmask16 = if live >= 16 {
        0xFFFF
    } else {
        ((1u32 << live) - 1) as __mmask16
    };
    _mm512_mask_testn_epi32_mask(lanes, got, _mm512_set1_epi32(1))
}

/// The probe mask of `h` in one 512-bit register: the same bits as
/// [`super::scalar::block_mask`].
///
/// The sixteen positions of a round come from one multiply (`vpmulld`) and
/// a shift, stored once; then each probe is broadcast to the sixteen 32-bit
/// lanes of the block, the lane's first bit subtracted, and `vpsllvd` of 1
/// by the difference gives the probe's bit in its own lane and 0 in every
/// other (a count that is negative, read as unsigned, or above 31 shifts
/// everything out).
///
/// This is what an insert pays for probes that may share a word: three
/// vector operations per probe, where sbbf-rs's eight probes, one per word,
/// take one shift for all of them. Merging two probes per `vpternlogd`
/// measured no faster; a lane selector from a table, a `kmov` mask per
/// probe, 64-bit lanes, a register broadcast by `vpermd` and a scalar mask
/// measured slower (BENCHMARKS.md, "Single lookups and the owned insert's
/// mask, fifth pass").
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn mask_avx512(probes: Probes, h: u32, k: u32) -> __m512i {
    if probes == Probes::Words {
        // SAFETY: the CPU has AVX-512F (this function's contract).
        return unsafe { words_mask_avx512(h, probes.clamp(k)) };
    }
    let first_bit = _mm512_setr_epi32(
        0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448, 480,
    );
    let ones = _mm512_set1_epi32(1);
    let hv = _mm512_set1_epi32(h as i32);
    let k = k.min(64) as usize;
    let mut mask = _mm512_setzero_si512();
    let mut positions = [0u32; 16];
    let mut i = 0;
    while i < k {
        // SAFETY: POWERS has 64 entries and here 0 ≤ i ≤ 48 (k ≤ 64, i steps
        // by 16), so the unaligned 64-byte load reads POWERS[i..i+16], in
        // bounds; `positions` is 64 writable bytes.
        unsafe {
            let mults = _mm512_loadu_si512(POWERS.as_ptr().add(i).cast());
            let x = _mm512_mullo_epi32(hv, mults);
            _mm512_storeu_si512(positions.as_mut_ptr().cast(), _mm512_srli_epi32::<23>(x));
        }
        for &pos in &positions[..(k - i).min(16)] {
            let shift = _mm512_sub_epi32(_mm512_set1_epi32(pos as i32), first_bit);
            mask = _mm512_or_si512(mask, _mm512_sllv_epi32(ones, shift));
        }
        i += 16;
    }
    mask
}

/// `0, 1, …, 15` in the sixteen lanes.
#[target_feature(enable = "avx512f")]
#[inline]
fn iota16() -> __m512i {
    _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
}

/// [`mask_avx512`] for [`Probes::Words`] (`k ≤ 16`): probe `i`'s bit in lane
/// `i` (one `vpsllvd`, the lanes past `k` zeroed), then one `vpermd` that
/// gives word `w` lane `(w − h) mod 16`, i.e. moves lane `i` to word `h + i`.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn words_mask_avx512(h: u32, k: u32) -> __m512i {
    let hv = _mm512_set1_epi32(h as i32);
    // SAFETY: POWERS has 64 entries, so the 64-byte load of POWERS[0..16] is
    // in bounds.
    let mults = unsafe { _mm512_loadu_si512(POWERS.as_ptr().cast()) };
    let x = _mm512_mullo_epi32(hv, mults);
    // k is at most 16 here, so the shift stays inside the word.
    let lanes = ((1u32 << k.min(16)) - 1) as __mmask16;
    let bits = _mm512_maskz_sllv_epi32(lanes, _mm512_set1_epi32(1), _mm512_srli_epi32::<27>(x));
    let from = _mm512_sub_epi32(iota16(), hv);
    _mm512_permutexvar_epi32(from, bits)
}

/// AVX-512F twin of [`super::scalar::block_mask`], for writers that must
/// store word by word (the shared path's atomic stores): the mask is built
/// in a register ([`mask_avx512`]) and written out with one 64-byte store,
/// which the eight 8-byte loads that follow read by store forwarding (the
/// scalar mask's twelve small read-modify-writes of stack words cost
/// about 100 instructions).
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn block_mask_avx512(probes: Probes, h: u32, k: u32) -> [u64; 8] {
    let mut out = [0u64; 8];
    // SAFETY: the CPU has AVX-512F (this function's contract); `out` is 64
    // writable bytes and an unaligned store needs no alignment.
    unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), mask_avx512(probes, h, k)) };
    out
}

/// AVX-512F twin of [`super::scalar::block_insert`]: builds the probe mask in
/// one 512-bit register ([`mask_avx512`]) instead of eight words on the
/// stack. The test and the merge are one `vpandnd`, one test and one store
/// of the whole block. Measured in cache (`insert_profile`-style loop,
/// k = 12): 39 ns against 52–55 ns for the scalar mask, whose eight stack
/// words are then reloaded as vectors before their stores retire.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn block_insert_avx512(
    probes: Probes,
    block: &mut [u64; 8],
    h: u32,
    k: u32,
) -> bool {
    // SAFETY: the CPU has AVX-512F (this function's contract).
    let mask = unsafe { mask_avx512(probes, h, k) };
    // SAFETY: `block` is 64 bytes the caller holds exclusively (`&mut`);
    // unaligned vector loads and stores need no alignment.
    unsafe {
        let cur = _mm512_loadu_si512(block.as_ptr().cast());
        let missing = _mm512_andnot_si512(cur, mask);
        if _mm512_test_epi32_mask(missing, missing) == 0 {
            return false;
        }
        _mm512_storeu_si512(block.as_mut_ptr().cast(), _mm512_or_si512(cur, mask));
    }
    true
}
