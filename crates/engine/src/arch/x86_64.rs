//! AVX2 kernels: eight probes per instruction sequence.

use std::arch::x86_64::*;

use super::POWERS;

/// AVX2 twin of [`super::scalar::block_contains`].
///
/// Eight lanes compute `h · G^(i+1)` at once (`vpmulld`), take the top 9 bits
/// as positions, gather the eight 32-bit words they fall in from the block, and
/// test the bits with one compare. `k > 8` takes further rounds of eight.
///
/// # Safety
/// The caller must ensure the CPU supports AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn block_contains_avx2(block: &[u64; 8], h: u32, k: u32) -> bool {
    let k = k.min(64) as usize;
    let hv = _mm256_set1_epi32(h as i32);
    let ones = _mm256_set1_epi32(1);
    let low5 = _mm256_set1_epi32(31);
    let base = block.as_ptr() as *const i32;
    let mut i = 0;
    while i < k {
        // SAFETY: POWERS has 64 entries and i ≤ 56 here (k ≤ 64, i steps by 8),
        // so the unaligned 32-byte load reads POWERS[i..i+8], in bounds.
        let mults = unsafe { _mm256_loadu_si256(POWERS.as_ptr().add(i) as *const __m256i) };
        let x = _mm256_mullo_epi32(hv, mults);
        let pos = _mm256_srli_epi32::<23>(x);
        let word = _mm256_srli_epi32::<5>(pos);
        let bit = _mm256_and_si256(pos, low5);
        // SAFETY: every lane of `word` is in 0..16 (a 9-bit value shifted right
        // by 5), and `base` points at the 16 u32 words (64 bytes) of `block`, a
        // local `[u64; 8]` reference, so every gathered 4-byte read is in bounds.
        // Little-endian: u32 word w, bit b is u64 word w/2, bit 32·(w%2)+b,
        // the same bit the scalar kernel tests.
        let words = unsafe { _mm256_i32gather_epi32::<4>(base, word) };
        let bitmask = _mm256_sllv_epi32(ones, bit);
        let hit = _mm256_cmpeq_epi32(_mm256_and_si256(words, bitmask), bitmask);
        let lanes_hit = _mm256_movemask_ps(_mm256_castsi256_ps(hit)) as u32;
        let live = k - i;
        let want: u32 = if live >= 8 { 0xFF } else { (1u32 << live) - 1 };
        if lanes_hit & want != want {
            return false;
        }
        i += 8;
    }
    true
}
