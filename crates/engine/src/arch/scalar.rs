//! The portable reference kernels. Every SIMD kernel must agree with these.

use super::POWERS;

/// 2³²/φ rounded to odd: the multiplier whose powers derive the probes.
pub const GOLDEN32: u32 = 0x9E37_79B9;

/// The bit position (0..512) of probe `i` for block hash `h`.
#[inline(always)]
pub fn position(h: u32, i: usize) -> u32 {
    h.wrapping_mul(POWERS[i]) >> 23
}

/// The mask of all `k` probes of `h`, as eight 64-bit words (little-endian bit order).
#[inline]
pub fn block_mask(h: u32, k: u32) -> [u64; 8] {
    let mut mask = [0u64; 8];
    for i in 0..k.min(64) as usize {
        let pos = position(h, i);
        mask[(pos >> 6) as usize] |= 1u64 << (pos & 63);
    }
    mask
}

/// True when every probe of `h` finds its bit set in `block`. Stops at the
/// first clear bit, so a miss usually costs one or two probes.
#[inline]
pub fn block_contains(block: &[u64; 8], h: u32, k: u32) -> bool {
    for i in 0..k.min(64) as usize {
        let pos = position(h, i);
        if block[(pos >> 6) as usize] & (1u64 << (pos & 63)) == 0 {
            return false;
        }
    }
    true
}
