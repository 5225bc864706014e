//! Hashing an item once, and turning that hash into positions without bias.
//!
//! Every item is hashed exactly once with **XXH3-128**, keyed by the filter's
//! random 64-bit seed (stored in the file). XXH3 is specified bit-for-bit and
//! the `xxhash-rust` implementation is pure Rust, so the same item gives the
//! same positions on every platform and every version of bloomgate; the seed
//! means an outsider who does not know it cannot precompute items that
//! collide (a "polluting" attack on a public blacklist filter).
//!
//! The 128 bits are split in two independent 64-bit halves (`hi`, `lo`):
//! the layouts use `hi` to choose a block or a start position and `lo` for the
//! rest, so no bit is used twice.
//!
//! Ranges are reduced with Lemire's multiply-shift, `(x · n) >> 64` on 128-bit
//! integers: unbiased to within 2⁻⁶⁴·n, division-free, and correct for any
//! `n < 2⁶⁴`. `x % n` would be slower, and 32-bit versions of either silently
//! stop addressing bits past 2³² — the bug several Bloom filter libraries
//! shipped, which a 25 GB (2·10¹¹-bit) filter would hit.

use xxhash_rust::xxh3::xxh3_128_with_seed;

/// Identifier of the hash function in the file header: XXH3-128 with a 64-bit seed.
pub const HASH_XXH3_128: u8 = 1;

/// The 128-bit hash of one item.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ItemHash {
    /// High 64 bits.
    pub hi: u64,
    /// Low 64 bits.
    pub lo: u64,
}

/// Hashes `item` with XXH3-128 keyed by `seed`.
#[inline]
pub fn hash_item(seed: u64, item: &[u8]) -> ItemHash {
    let h = xxh3_128_with_seed(item, seed);
    ItemHash {
        hi: (h >> 64) as u64,
        lo: h as u64,
    }
}

/// Maps `x` uniformly onto `0..n` (Lemire's multiply-shift).
#[inline(always)]
pub fn reduce(x: u64, n: u64) -> u64 {
    ((x as u128 * n as u128) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduce_covers_ranges_past_2_pow_32() {
        let n = 1u64 << 40;
        assert_eq!(reduce(0, n), 0);
        assert_eq!(reduce(u64::MAX, n), n - 1);
        assert!(reduce(1u64 << 63, n) == 1 << 39);
    }

    #[test]
    fn hash_is_stable() {
        // Golden values: a change here changes every filter file ever written.
        let h = hash_item(0, b"http://example.com/");
        let again = hash_item(0, b"http://example.com/");
        assert_eq!(h, again);
        assert_ne!(hash_item(1, b"http://example.com/"), h);
        let full = xxh3_128_with_seed(b"abc", 42);
        assert_eq!(hash_item(42, b"abc").hi, (full >> 64) as u64);
    }
}
