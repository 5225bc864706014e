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
        // Golden values: a change here changes every filter file ever
        // written. They were computed independently with the reference C
        // implementation of XXH3-128 (xxHash 0.8.4, through python-xxhash
        // 4.1.0: `xxhash.xxh3_128_intdigest(data, seed=seed)`), so they
        // pin the specified function, not just this crate's output.
        let a100 = [b'a'; 100];
        let cases: [(u64, &[u8], u64, u64); 5] = [
            (0, b"", 0x99aa06d3014798d8, 0x6001c324468d497f),
            (
                0,
                b"http://example.com/",
                0x42663426682770e6,
                0x05cd77c9b152d153,
            ),
            (42, b"abc", 0x4bc24859f045e0b4, 0xd8438def21bbdcc3),
            (
                0x5eed,
                b"evil.example/phish/",
                0x903112f5c24e50d1,
                0x2d84929a3722ad1f,
            ),
            (u64::MAX, &a100, 0x889ef585255d3bbf, 0x6d35a34c0601a983),
        ];
        for (seed, data, hi, lo) in cases {
            assert_eq!(
                hash_item(seed, data),
                ItemHash { hi, lo },
                "seed {seed:#x}, {:?}",
                String::from_utf8_lossy(data)
            );
        }
    }
}
