//! The in-block probe kernels of the blocked layout, with their SIMD twins.
//!
//! This is the only module with `unsafe` code besides `storage`. The rest of the
//! engine calls the safe dispatchers here ([`block_contains`], [`block_mask`],
//! [`prefetch`]), which pick the AVX2 kernel once the CPU has been checked
//! (`is_x86_feature_detected!` caches its answer in an atomic) and otherwise
//! the portable scalar kernel in [`scalar`]. The scalar kernel is the
//! reference: the tests run both on the same inputs and require equal answers.
//!
//! # Probe derivation inside a block
//!
//! A block is 512 bits = sixteen 32-bit words. From a 32-bit value `h` (taken
//! from the item's hash, with its low bit forced to 1) probe `i` (0-based) is
//!
//! ```text
//! x_i = h · G^(i+1)  (mod 2³²),   G = 0x9E3779B9 (2³²/φ, odd)
//! position_i = x_i >> 23           (the top 9 bits: 0..511)
//! ```
//!
//! Multiplying by an odd constant is a bijection of the 32-bit integers whose
//! top bits depend on all the bits of `h`, so successive probes are close to
//! independent and uniform over the 512 positions, which is what the Putze
//! formula in `math` assumes (RocksDB's FastLocalBloom uses the same scheme and
//! measured FP within noise of the formula; our own measurement is in
//! BENCHMARKS.md and `tests/fp_rate.rs`). The powers `G^(i+1)` are a table, so
//! the probes are independent multiplications that the CPU (or 8 AVX2 lanes)
//! computes in parallel.
//!
//! Why deriving all probes from 32 bits does not raise the FP rate: a query
//! collides with an item of its block *through the derivation* only when their
//! `h` values are equal, probability 2⁻³¹ per item in the block. With ~23 items
//! per block at p = 10⁻⁴ that adds about 10⁻⁸, a 0.01 % relative increase.
//! Plain double hashing modulo 512 (`h1 + i·h2`) would have only 9+8 bits of
//! pattern entropy: 23/2¹⁷ ≈ 1.8·10⁻⁴, more than the target rate itself —
//! the reason that scheme was rejected. Forcing the low bit to 1 avoids the
//! degenerate `h` with ≥ 23 trailing zeros, whose probes would all coincide.

pub mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86_64;

/// `G^(i+1) mod 2³²` for `i` in `0..64`: the multipliers of the probes.
pub(crate) const POWERS: [u32; 64] = {
    let mut t = [0u32; 64];
    let mut x: u32 = 1;
    let mut i = 0;
    while i < 64 {
        x = x.wrapping_mul(scalar::GOLDEN32);
        t[i] = x;
        i += 1;
    }
    t
};

/// True when every probe of `h` finds its bit set in `block`.
#[inline]
pub fn block_contains(block: &[u64; 8], h: u32, k: u32) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { x86_64::block_contains_avx2(block, h, k) };
        }
    }
    scalar::block_contains(block, h, k)
}

/// The 512-bit mask of the probes of `h`, as eight 64-bit words.
#[inline]
pub fn block_mask(h: u32, k: u32) -> [u64; 8] {
    scalar::block_mask(h, k)
}

/// Hints the CPU to start loading the cache line at `ptr`. Never faults,
/// whatever the address: a prefetch is only a hint.
#[inline(always)]
pub fn prefetch<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: PREFETCHT0 is part of SSE, which every x86_64 CPU has, and
        // it never faults nor reads memory architecturally, for any address.
        #[allow(unused_unsafe)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(ptr as *const i8)
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn simd_matches_scalar(words in proptest::array::uniform8(any::<u64>()), h in any::<u32>(), k in 1u32..=64, sparse in any::<bool>()) {
            // Dense random blocks say "yes" rarely; AND-ing two makes "yes" common too.
            let mut block = words;
            if sparse { block.iter_mut().for_each(|w| *w = !*w | w.rotate_left(7)); }
            let h = h | 1;
            prop_assert_eq!(block_contains(&block, h, k), scalar::block_contains(&block, h, k));
            // A block holding exactly the mask always contains it.
            let mask = block_mask(h, k);
            prop_assert!(block_contains(&mask, h, k));
            prop_assert!(scalar::block_contains(&mask, h, k));
        }
    }

    #[test]
    fn mask_has_at_most_k_bits() {
        for h in [1u32, 3, 0xdead_beef | 1, u32::MAX] {
            for k in [1u32, 8, 12, 16, 64] {
                let ones: u32 = block_mask(h, k).iter().map(|w| w.count_ones()).sum();
                assert!(ones >= 1 && ones <= k);
            }
        }
    }
}
