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

/// ORs the `k` probes of `h` into `block`, a block its caller holds
/// exclusively. Returns whether a bit was new. An item whose bits are all
/// set already writes nothing (a mapped file's page is not dirtied for it).
///
/// One branch per item, not per word: whether a given word gains bits is a
/// coin flip for a new item, and eight unpredictable branches cost more
/// than the stores. The eight-word test and merge are plain integer code,
/// which the compiler turns into two vector loads, a test and a store where
/// the loop is compiled for AVX2 or AVX-512 (`arch::dispatch`).
#[inline(always)]
pub fn block_insert(block: &mut [u64; 8], h: u32, k: u32) -> bool {
    let mask = block_mask(h, k);
    let missing = mask
        .iter()
        .zip(block.iter())
        .fold(0, |acc, (m, c)| acc | (m & !c));
    if missing == 0 {
        return false;
    }
    for (w, m) in block.iter_mut().zip(mask) {
        *w |= m;
    }
    true
}
