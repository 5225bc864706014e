//! Sizing of the static ribbon layout.
//!
//! # Standard ribbon (Dillinger & Walzer, "Ribbon filter: practically smaller
//! than Bloom and Xor", 2021, §2–4; RocksDB's `Standard128Ribbon`)
//!
//! A ribbon filter stores, for each of `m` *slots*, a short bit vector (its
//! *result bits*) chosen so that for every stored item `x`
//!
//! ```text
//! ⊕_{k < 128} c_x[k] · S[s_x + k]  =  f_x
//! ```
//!
//! where `s_x` is a start slot, `c_x` a 128-bit coefficient row with bit 0
//! set, `f_x` the item's fingerprint, all from its hash. Solving that linear
//! system over GF(2) for the `n` items is the build (`ribbon/solve.rs`);
//! a lookup recomputes the left side and compares it with `f_x`. For a key
//! that was never inserted the left side is a sum of solution bits it does
//! not control, independent of its fingerprint, so each result bit matches
//! with probability ½: with `r` result bits a lookup is a false positive with
//! probability `2^{−r}`, whatever the load.
//!
//! # Any rate: a fractional number of result bits
//!
//! Slots are grouped in blocks of 128 and stored *interleaved*: block `b`
//! holds its `r_b` result bits as `r_b` words of 128 bits (word `j` holds
//! bit `j` of each of the block's slots), and `r_b` is `r` for the first
//! blocks of a shard and `r + 1` for the rest (nondecreasing, so a lookup
//! that starts in a block finds as many words in the next one). A lookup
//! reads `r_b` bits, `b` its start slot's block. With a fraction `a` of the
//! start slots in the blocks of `r + 1` bits,
//!
//! ```text
//! FP_ribbon = (1 − a) · 2^{−r} + a · 2^{−(r+1)} = 2^{−r} · (1 − a/2)
//! ```
//!
//! so for a target `p` the planner takes `r = ⌊log2(1/p)⌋` and
//! `a = 2 · (1 − p · 2^r)` ∈ [0, 1): every rate is met with `r + a` bits
//! per slot, e.g. 13.36 at `p = 10⁻⁴` (the bound is `log2(10⁴)` = 13.29:
//! mixing `r` and `r + 1` costs 0.5 % over a true fractional width). Each
//! shard's rate is computed from its actual split of start slots
//! ([`ribbon_shard_fp`]); a file's is the mean over its shards, as a query
//! picks its shard uniformly.
//!
//! # Space overhead: the slots per item
//!
//! Banding succeeds only if the rows stay linearly independent; with
//! 128-bit rows that needs `m = (1 + ε) · n` slots. With shards of 2¹⁷ to
//! 2¹⁸ keys, measured (`ribbon_overhead_failure_rates`: 100 shards of
//! 200,000 keys per value) the first attempt fails for 100 % of shards at
//! ε = 1 %, 74 % at 2 %, 41 % at 2.5 %, 22 % at 3 %, 8 % at 3.5 %, 7 % at
//! 4 % and 1 % at 5 %. A failed attempt costs time (the shard is solved
//! again), not space, so the planner takes ε = 3 % ([`RIBBON_OVERHEAD`]:
//! 1.3 solves per shard on average) and a
//! shard whose banding fails is solved again with another seed (and, after
//! a few seeds, a little more room: see `ribbon/solve.rs`), so a build
//! always ends with a filter. Bits per item are
//!
//! ```text
//! bits/item = (1 + ε) · (r + a) + 192 / keys per shard  (+ block rounding)
//! ```
//!
//! the last term the shard's directory entry: 13.36 · 1.03 = 13.76 bits per
//! item at `p = 10⁻⁴`, against 13.29 for the information-theoretic bound,
//! 19.17 for the classic Bloom optimum and 22.0 for the blocked layout.
//!
//! # Room for adds: the delta's share of the rate
//!
//! A static list takes adds into a small Bloom *delta* beside it
//! (`bloomgate_list`'s delta module), and a lookup is a hit when the
//! solution or the delta says so. For a key never added the two answers
//! are independent, so the union's rate is
//!
//! ```text
//! FP_union = 1 − (1 − FP_base)(1 − FP_delta)  ≤  FP_base + FP_delta
//! ```
//!
//! and the requested `p` holds for the union when the delta is planned for
//! what the solution leaves, `q = p − FP_base`. A solution planned for `p`
//! itself leaves nothing (its predicted rate is `p` to within a block's
//! rounding, sometimes a little above it), so a build keeps a share `s` of
//! the rate out of the solution ([`RIBBON_DELTA_SHARE`], `--delta-share`):
//! the solution is planned for `p · (1 − s)` and the header records `p`.
//! Its cost is `log2(1/(1 − s))` result bits per slot: 0.046 bits per item
//! at `s = 1/32` (13.76 → 13.81 bits per item at `p = 10⁻⁴`, +0.3 %).
//!
//! The delta, a scaling Bloom filter whose layers take `q/2, q/4, …`
//! (compound rate below `q` however far it grows), pays for a small `q`
//! per added key: about `1.65 · log2(2/(s·p))` bits each in the blocked
//! layout, `1.65 · log2(2/s)` = 9.9 more than a blocked filter at `p` for
//! `s = 1/32`. With `N` keys solved and `D` added between builds the total
//! `N · log2(1/(1 − s)) + D · 1.65 · log2(2/(s·p))` is least near
//! `s ≈ √(1.65 · D/N)`: `s = 1/32` is right for deltas of ~0.06 % of the
//! list and costs under 1 % of the file for deltas up to ~3 % (`1/16`
//! would cost the 10¹⁰-key file 0.05 bits per item more to save 1.65
//! bits per *added* key: worth it only past 2.8 % of adds). A file built
//! with `--delta-share 0` is the most compact and takes no adds.

use super::PlanError;

/// Slots per item beyond one, as planned: `m = (1 + ε) · n` (see the
/// module docs for the measured failure rates).
pub const RIBBON_OVERHEAD: f64 = 0.03;

/// The share of a static list's rate kept for its delta of adds: a build
/// plans the solution for `p · (1 − s)` (see the module docs, "Room for
/// adds").
pub const RIBBON_DELTA_SHARE: f64 = 1.0 / 32.0;

/// Largest `--delta-share`: half of the rate.
pub const RIBBON_MAX_DELTA_SHARE: f64 = 0.5;

/// Width of a coefficient row and of a block of slots.
pub const RIBBON_WIDTH: u64 = 128;

/// Largest number of result bits a block holds (fingerprints are 32 bits).
pub const RIBBON_MAX_COLUMNS: u32 = 32;

/// Smallest rate the ribbon layout plans: `2^{−32}` (32 result bits).
pub const RIBBON_MIN_FP: f64 = 1.0 / 4_294_967_296.0;

/// The result-bit split for rate `p`: `(r, upper)` with `r` the result bits
/// of the lower blocks and `upper` the fraction `a` of blocks with `r + 1`
/// bits, as a 32-bit fixed-point fraction (`a · 2³²`). Rates above ½ take
/// `(1, 0)` (rate ½); rates below [`RIBBON_MIN_FP`] are refused.
pub fn ribbon_columns(p: f64) -> Result<(u32, u32), PlanError> {
    if !(p > 0.0 && p < 1.0) {
        return Err(PlanError::BadRate(p));
    }
    if p < RIBBON_MIN_FP {
        return Err(PlanError::RibbonRateTooLow(p));
    }
    if p >= 0.5 {
        return Ok((1, 0));
    }
    let r = ((-p.log2()).floor() as u32).clamp(1, RIBBON_MAX_COLUMNS);
    if r == RIBBON_MAX_COLUMNS {
        return Ok((r, 0));
    }
    let a = (2.0 * (1.0 - p * (r as f64).exp2())).clamp(0.0, 1.0);
    // Round up so that the planned rate is at or below `p`.
    let upper = (a * 4_294_967_296.0).ceil().min(u32::MAX as f64) as u32;
    Ok((r, upper))
}

/// Blocks of `r + 1` result bits in a shard of `blocks` blocks, for the
/// fixed-point fraction `upper` of [`ribbon_columns`] (rounded up).
pub fn ribbon_upper_blocks(blocks: u32, upper: u32) -> u32 {
    ((blocks as u64 * upper as u64).div_ceil(1 << 32)) as u32
}

/// Blocks a shard of `keys` distinct keys is planned with: `(1 + ε) · keys`
/// slots rounded up to whole blocks (0 for an empty shard).
pub fn ribbon_shard_blocks(keys: u64, overhead: f64) -> u64 {
    if keys == 0 {
        return 0;
    }
    let slots = (keys as f64 * (1.0 + overhead.max(0.0))).ceil() as u64;
    slots.div_ceil(RIBBON_WIDTH).max(1)
}

/// The false-positive rate of one shard of `blocks` blocks whose blocks
/// from `upper_start` on have `r + 1` result bits and the others `r`: the
/// mean of `2^{−r_b}` over its start slots `0..=m − 128`. An empty shard
/// answers 0 (it holds nothing, so nothing matches).
pub fn ribbon_shard_fp(blocks: u32, upper_start: u32, r: u32) -> f64 {
    if blocks == 0 {
        return 0.0;
    }
    let starts = (blocks as u64 - 1) * RIBBON_WIDTH + 1;
    let lower = (upper_start as u64 * RIBBON_WIDTH).min(starts);
    let lo = (-(r as f64)).exp2();
    (lower as f64 * lo + (starts - lower) as f64 * lo / 2.0) / starts as f64
}

/// A ribbon sizing decision (what `plan` shows beside the Bloom layouts).
#[derive(Clone, Debug, PartialEq)]
pub struct RibbonPlan {
    /// Items planned for.
    pub items: u64,
    /// The rate asked for.
    pub target_fp: f64,
    /// Result bits of the lower blocks.
    pub columns: u32,
    /// Fraction of blocks with one more result bit (`· 2⁻³²`).
    pub upper: u32,
    /// Shards, a power of two.
    pub shards: u64,
    /// Predicted bytes of the file's data (directory and solution).
    pub bytes: u64,
    /// The rate predicted from the split of result bits.
    pub predicted_fp: f64,
}

impl RibbonPlan {
    /// Bits of data per planned item.
    pub fn bits_per_item(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.items as f64
    }
}

/// Keys per shard the layout aims at: shards hold between half of this and
/// this many keys (their count is a power of two), enough that a block of
/// rounding and a directory entry cost under 0.02 % each, small enough
/// that a shard's banding arrays (about 21 bytes per slot) stay in the
/// L2/L3 caches.
pub const RIBBON_SHARD_KEYS: u64 = 1 << 18;

/// Bits of hash that choose a shard for `items` items: the smallest `b`
/// with `items ≤ 2^b · RIBBON_SHARD_KEYS`, at most 32.
pub fn ribbon_shard_bits(items: u64) -> u32 {
    let shards = items.div_ceil(RIBBON_SHARD_KEYS).max(1);
    shards.next_power_of_two().trailing_zeros().min(32)
}

/// Bytes of a ribbon file's data before its solution: one 24-byte entry
/// per shard, padded to whole 4096-byte pages.
pub fn ribbon_directory_bytes(shards: u64) -> u64 {
    (shards * 24).div_ceil(4096) * 4096
}

/// Plans a ribbon filter for `items` items at rate `p` (sizes assume the
/// keys spread evenly over the shards, as hashing makes them).
pub fn plan_ribbon(items: u64, p: f64) -> Result<RibbonPlan, PlanError> {
    if items == 0 {
        return Err(PlanError::NoItems);
    }
    let (columns, upper) = ribbon_columns(p)?;
    let shards = 1u64 << ribbon_shard_bits(items);
    let per_shard = items.div_ceil(shards);
    let blocks = ribbon_shard_blocks(per_shard, RIBBON_OVERHEAD);
    let blocks32 = u32::try_from(blocks).map_err(|_| PlanError::TooLarge { items, p })?;
    let up = ribbon_upper_blocks(blocks32, upper) as u64;
    let words = (blocks - up) * columns as u64 + up * (columns as u64 + 1);
    let bytes = words
        .checked_mul(16)
        .and_then(|w| w.checked_mul(shards))
        .and_then(|b| b.checked_add(ribbon_directory_bytes(shards)))
        .filter(|&b| b < 1 << 60)
        .ok_or(PlanError::TooLarge { items, p })?;
    Ok(RibbonPlan {
        items,
        target_fp: p,
        columns,
        upper,
        shards,
        bytes,
        predicted_fp: ribbon_shard_fp(blocks32, blocks32 - up as u32, columns),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_meet_every_rate() {
        for &p in &[0.5, 0.3, 0.1, 0.01, 1e-3, 1e-4, 3e-5, 1e-6, 1e-9, 2.5e-10] {
            let (r, upper) = ribbon_columns(p).unwrap();
            let a = upper as f64 / 4_294_967_296.0;
            let fp = (-(r as f64)).exp2() * (1.0 - a / 2.0);
            assert!(fp <= p * (1.0 + 1e-9), "p {p}: {fp}");
            assert!(fp >= p * (1.0 - 1e-6), "p {p}: {fp}");
        }
        assert_eq!(ribbon_columns(0.25).unwrap(), (2, 0));
        assert!(ribbon_columns(1e-12).is_err());
        assert!(ribbon_columns(0.0).is_err());
    }

    #[test]
    fn plan_at_1e_4_is_near_the_bound() {
        let plan = plan_ribbon(10_000_000_000, 1e-4).unwrap();
        let bpi = plan.bits_per_item();
        assert!(bpi > 13.29 && bpi < 14.0, "{bpi}");
        assert!(plan.predicted_fp <= 1e-4 && plan.predicted_fp > 0.99e-4);
        let small = plan_ribbon(1, 1e-4).unwrap();
        assert_eq!(small.shards, 1);
    }

    #[test]
    fn shard_fp_weights_start_slots() {
        assert_eq!(ribbon_shard_fp(0, 0, 7), 0.0);
        assert_eq!(ribbon_shard_fp(10, 10, 7), 1.0 / 128.0);
        assert_eq!(ribbon_shard_fp(10, 0, 7), 1.0 / 256.0);
        // One block: one start slot, in it.
        assert_eq!(ribbon_shard_fp(1, 1, 3), 1.0 / 8.0);
    }
}
