//! The portable reference kernels. Every SIMD kernel must agree with these.

use super::{Probes, POWERS};

/// 2³²/φ rounded to odd: the multiplier whose powers derive the probes.
pub const GOLDEN32: u32 = 0x9E37_79B9;

/// The bit position (0..512) of probe `i` for block hash `h` (see the
/// module docs of `arch`, "Probe derivation inside a block").
#[inline(always)]
pub fn position(probes: Probes, h: u32, i: usize) -> u32 {
    let x = h.wrapping_mul(POWERS[i]);
    match probes {
        Probes::Anywhere => x >> 23,
        Probes::Words => ((h.wrapping_add(i as u32) & 15) << 5) | (x >> 27),
    }
}

/// The mask of all `k` probes of `h`, as eight 64-bit words (little-endian
/// bit order). `k` is at most 64, and at most 16 for [`Probes::Words`].
#[inline]
pub fn block_mask(probes: Probes, h: u32, k: u32) -> [u64; 8] {
    let mut mask = [0u64; 8];
    for i in 0..probes.clamp(k) as usize {
        let pos = position(probes, h, i);
        mask[(pos >> 6) as usize] |= 1u64 << (pos & 63);
    }
    mask
}

/// True when every probe of `h` finds its bit set in `block`. Stops at the
/// first clear bit, so a miss usually costs one or two probes.
#[inline]
pub fn block_contains(probes: Probes, block: &[u64; 8], h: u32, k: u32) -> bool {
    for i in 0..probes.clamp(k) as usize {
        let pos = position(probes, h, i);
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
pub fn block_insert(probes: Probes, block: &mut [u64; 8], h: u32, k: u32) -> bool {
    let mask = block_mask(probes, h, k);
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
