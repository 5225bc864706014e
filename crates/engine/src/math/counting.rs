//! Sizing of counting Bloom filters.
//!
//! # Counting Bloom filter (Fan, Cao, Almeida & Broder, "Summary Cache", IEEE/ACM ToN 8(3), 2000)
//!
//! Each bit of a Bloom filter becomes a 4-bit counter: an insert adds 1 to
//! each of the item's counters, a delete subtracts 1, and an item is present
//! when all its counters are above zero. Membership therefore behaves exactly
//! like a Bloom filter whose set bits are the non-zero counters, so the
//! false-positive formulas above hold with "bits" read as "counters".
//!
//! **Overflow.** A counter that reaches 15 stays there forever and is never
//! decremented: it can then no longer reach zero through deletes, which costs
//! (a little) false-positive rate and never a false negative. In the blocked
//! arrangement below, a block holds `i ~ Pois(λ = 128·n/m)` items and, given
//! `i`, a counter is `Binomial(i, q)` with `q ≤ k/128` (an item's probes are
//! `k` counters of the block, repeats counted once), so
//!
//! ```text
//! P(counter saturates) = Σ_i Pois(i; λ) · P(Binomial(i, k/128) ≥ 15)
//! ```
//!
//! ([`counting_saturation`]): about 10⁻²⁰ per counter for the plan at
//! `p = 10⁻⁴` (λ = 4.1, k = 10), so saturation happens in practice only to
//! an item inserted 15 times or more, which the rule makes safe. (For the
//! classic arrangement Fan et al. bound it by `m·(e·ln 2/16)^{16}`.)
//!
//! **Delete of an absent item.** If any of the item's counters is zero the
//! item was never inserted (or has been deleted): nothing is decremented and
//! the delete reports "not present". Deleting an item that only *tests*
//! present (a false positive) would decrement other items' counters and can
//! create false negatives; that is inherent to counting filters, and callers
//! must delete only what they inserted (RedisBloom's `CF.DEL` has the same
//! rule). Both filters here document it on `remove`.
//!
//! **Layout: blocked, 128 counters per 64-byte cache line.** The item's `k`
//! counters all sit in one block of `B = 128` counters (512 bits), chosen by
//! `reduce(hi, blocks)`; the probes inside it are derived from `lo` exactly
//! as in the blocked Bloom layout, but with 7-bit positions. The rate is
//! [`blocked_fp`] with `B = 128`:
//!
//! ```text
//! FP_counting(m, n, k) = Σ_{i≥0} Pois(i; λ = 128·n/m) · E[(S_{k·i}/128)^k]
//! ```
//!
//! Costs at `p = 10⁻⁴` (computed by [`plan_counting`] and pinned by the tests):
//!
//! | arrangement | counters/item | bits/item | 10¹⁰ items |
//! |-------------|--------------:|----------:|-----------:|
//! | classic, `m*` (unrounded), k = 13 | 19.17 | 76.7  | 95.9 GB |
//! | blocked, `B = 128`, k = 10        | 30.94 | 123.8 | 154.7 GB |
//!
//! The blocked arrangement costs 61 % more memory than the classic optimum:
//! 128-counter blocks hold only λ ≈ 4 items each, so the Poisson spread of
//! their load is wide and crowded blocks dominate the rate (512-bit Bloom
//! blocks hold 23 items and cost only 15 %). What it buys:
//!
//! * **one cache miss** per insert, lookup and delete instead of `k = 13`,
//!   the difference that made blocked the default Bloom layout;
//! * **atomic operations per item**: all of an item's counters are in one
//!   line, so one lock per line makes "check all `k` > 0, then decrement"
//!   (delete) and "test, then increment" (add-if-absent) atomic with respect
//!   to every other writer of that item — the classic arrangement would need
//!   `k` locks in a global order, or a lock-free protocol over `k` words;
//! * a file that is still one page-aligned array of 512-bit blocks.
//!
//! Where memory matters more than one-miss operations, the cuckoo filter
//! below deletes at about 18 bits per item. Rejected: 8-bit counters (twice the
//! memory to make an event of probability 10⁻²⁰ rarer), and 2-bit counters (saturate after 3
//! insertions of overlapping items, leaving undeletable counters in a
//! filter meant for deletes).

use super::{
    blocked_fp, blocked_fp_mean_fill, check_inputs, classic_optimum, least_meeting, ln_factorial,
    PlanError,
};

/// Counters in one block of a counting filter: 128 4-bit counters, one
/// 64-byte cache line (see the module docs, "Counting Bloom filter").
pub const COUNTING_BLOCK_COUNTERS: u64 = 128;

/// Width of a counting filter's counters in bits.
pub const COUNTER_BITS: u32 = 4;

/// The largest value a counter holds; a counter that reaches it stays there
/// (it is never incremented nor decremented again).
pub const COUNTER_MAX: u8 = 15;

/// Predicted false-positive rate of the counting filter (blocked, 128
/// counters per block) with `counters` counters, `n` items and `k` probes.
pub fn counting_fp(counters: u64, n: f64, k: u32) -> f64 {
    blocked_fp(counters as f64, n, k, COUNTING_BLOCK_COUNTERS as f64)
}

/// The `k` with the lowest predicted rate for a counting filter of
/// `counters` counters holding `n` items.
pub fn counting_best_k(counters: u64, n: f64) -> u32 {
    let b = COUNTING_BLOCK_COUNTERS as f64;
    let mut rough = (f64::INFINITY, 1);
    for k in 1..=MAX_COUNTING_K {
        let fp = blocked_fp_mean_fill(counters as f64, n, k, b);
        if fp < rough.0 {
            rough = (fp, k);
        }
    }
    let k0 = rough.1;
    let mut best = (f64::INFINITY, 1);
    for k in k0.saturating_sub(2).max(1)..=(k0 + 2).min(MAX_COUNTING_K) {
        let fp = counting_fp(counters, n, k);
        if fp < best.0 {
            best = (fp, k);
        }
    }
    best.1
}

/// Largest `k` a counting filter accepts: its probes are distinct counters
/// of one 128-counter block, and beyond 32 the block would be mostly full
/// with a single item.
pub const MAX_COUNTING_K: u32 = 32;

/// The probability that a given counter of a counting filter saturates
/// (reaches 15) with `counters` counters, `n` distinct items and `k`
/// probes: `Σ_i Pois(i; λ) · P(Binomial(i, k/128) ≥ 15)` with
/// `λ = 128·n/counters` (see the module docs).
pub fn counting_saturation(counters: u64, n: f64, k: u32) -> f64 {
    let b = COUNTING_BLOCK_COUNTERS as f64;
    let lambda = b * n / counters as f64;
    let q = (k as f64 / b).min(1.0);
    let limit = COUNTER_MAX as u32;
    if k == 0 || n.is_nan() || n <= 0.0 {
        // No probes, no items (or a count that is not a number: 0 here,
        // the rates above answer 1 for it): nothing is ever incremented.
        return if n.is_nan() { 1.0 } else { 0.0 };
    }
    let per_counter = lambda * q;
    if per_counter >= 100.0 || per_counter.is_nan() {
        // A counter expects 100 or more increments (or the filter has no
        // counters): it falls short of 15 with probability under 10⁻²⁵.
        // The sum below would also start too far under the mode to reach it.
        return 1.0;
    }
    let mut total = 0.0;
    // Terms below 15 items cannot saturate a counter; sum until the
    // Poisson weight is negligible past the mode.
    let mut i = limit;
    loop {
        let fi = i as f64;
        let w = (fi * lambda.ln() - lambda - ln_factorial(fi)).exp();
        // P(Bin(i, q) >= 15) = 1 - P(Bin <= 14).
        let mut below = 0.0;
        for j in 0..limit {
            let fj = j as f64;
            let ln_c = ln_factorial(fi) - ln_factorial(fj) - ln_factorial(fi - fj);
            below += (ln_c + fj * q.ln() + (fi - fj) * (1.0 - q).ln()).exp();
        }
        // Small tails lose precision in 1 - below; sum them directly then.
        let tail = if below > 0.5 {
            (limit..=i)
                .map(|j| {
                    let fj = j as f64;
                    let ln_c = ln_factorial(fi) - ln_factorial(fj) - ln_factorial(fi - fj);
                    (ln_c + fj * q.ln() + (fi - fj) * (1.0 - q).ln()).exp()
                })
                .sum::<f64>()
        } else {
            1.0 - below
        };
        total += w * tail;
        if (fi > lambda && w < 1e-30) || i > 100_000 {
            break;
        }
        i += 1;
    }
    total.min(1.0)
}

/// A sizing decision for a counting Bloom filter.
#[derive(Clone, Debug, PartialEq)]
pub struct CountingPlan {
    /// Items the filter is sized for.
    pub items: u64,
    /// The false-positive rate asked for.
    pub target_fp: f64,
    /// Counters in the filter (a whole number of 128-counter blocks).
    pub counters: u64,
    /// Counters per item (probes).
    pub k: u32,
    /// The false-positive rate predicted for `items` items.
    pub predicted_fp: f64,
}

impl CountingPlan {
    /// Bits of filter data (4 per counter).
    pub fn bits(&self) -> u64 {
        self.counters * COUNTER_BITS as u64
    }

    /// Bytes of filter data.
    pub fn bytes(&self) -> u64 {
        self.bits() / 8
    }

    /// Bits per planned item.
    pub fn bits_per_item(&self) -> f64 {
        self.bits() as f64 / self.items as f64
    }
}

/// Plans a counting filter for `items` items at rate `p`: the smallest
/// whole number of 128-counter blocks for which some `k` meets `p` (found by
/// bisection, as for the blocked Bloom layout), with the best `k` for it.
pub fn plan_counting(items: u64, p: f64) -> Result<CountingPlan, PlanError> {
    check_inputs(items, p)?;
    let n = items as f64;
    let too_large = || PlanError::TooLarge { items, p };
    let meets = |blocks: u64| -> Option<(u32, f64)> {
        let counters = blocks * COUNTING_BLOCK_COUNTERS;
        let k = counting_best_k(counters, n);
        let fp = counting_fp(counters, n, k);
        (fp <= p).then_some((k, fp))
    };
    // Largest block count whose bits (4 per counter) stay below 2⁶³.
    let max_blocks = (1u64 << 63) / (COUNTING_BLOCK_COUNTERS * COUNTER_BITS as u64) - 1;
    let (bpi, _) = classic_optimum(p);
    let lo_counters = bpi * n;
    if lo_counters >= (max_blocks * COUNTING_BLOCK_COUNTERS) as f64 {
        return Err(too_large());
    }
    let lo = ((lo_counters as u64) / COUNTING_BLOCK_COUNTERS).max(1);
    let hi = least_meeting(lo, max_blocks, |b| meets(b).is_some()).ok_or_else(too_large)?;
    let (k, predicted_fp) = meets(hi).ok_or_else(too_large)?;
    Ok(CountingPlan {
        items,
        target_fp: p,
        counters: hi * COUNTING_BLOCK_COUNTERS,
        k,
        predicted_fp,
    })
}
