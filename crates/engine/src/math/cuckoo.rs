//! Sizing of cuckoo filters.
//!
//! # Cuckoo filter (Fan, Andersen, Kaminsky & Mitzenmacher, "Cuckoo Filter:
//! Practically Better Than Bloom", CoNEXT 2014)
//!
//! A table of `nb` buckets of `b` slots, each slot an `f`-bit fingerprint
//! (0 = empty). An item's fingerprint `fp` may live in bucket `i1` (from the
//! hash) or `i2 = (h(fp) − i1) mod nb` (partial-key cuckoo hashing: the other bucket
//! is computed from the fingerprint alone, so items can be moved without
//! knowing them). A lookup compares `fp` with the `2b` slots of the two
//! buckets; each occupied slot matches a random other fingerprint with
//! probability `1/(2^f − 1)` (fingerprints are uniform over `1..2^f`), so at
//! load `α` (occupied fraction of slots)
//!
//! ```text
//! FP_cuckoo(f, b, α) = 1 − (1 − 1/(2^f − 1))^{2bα}  ≈  2bα / 2^f
//! ```
//!
//! and the planner takes the smallest `f` that meets `p` even at a full
//! table, `f = ⌈log2(2b/p)⌉` (17 bits at `p = 10⁻⁴`, `b = 4`).
//!
//! **Why b = 4.** With `b = 1` cuckoo hashing fills to ~50 %, `b = 2` to ~84 %,
//! `b = 4` to ~95 % and `b = 8` to ~98 % before inserts fail (Fan et al.,
//! table 2); each doubling of `b` costs one fingerprint bit (2b compared
//! slots). Bits per item are `f/α`: at `p = 10⁻⁴` that is 17/0.95 = 17.9 for
//! `b = 4` against 18/0.98 = 18.4 for `b = 8` and 16/0.84 = 19.0 for `b = 2`.
//! `b = 4` is the optimum for rates from about 10⁻² to 10⁻⁶, and is the
//! default (`BUCKETSIZE` 1..=8 is supported: the packing is generic).
//!
//! **Number of buckets: exactly what the load needs.** The planner takes
//! `nb = ⌈n / (b · 0.95)⌉` (a planned load of 95 %, the load b = 4
//! reaches), so bits per item are `f/0.95` plus under 512 bits of line
//! rounding for the whole table: 17.9 at 10⁻⁴ for any `n`. That needs a
//! second-bucket function that is an involution for any `nb`:
//!
//! ```text
//! i1 = reduce(h_hi, nb)          H(fp) = reduce(fp · 0x9E3779B97F4A7C15 mod 2⁶⁴, nb)
//! alt(i) = (H(fp) − i) mod nb    alt(alt(i)) = H − (H − i) = i   (mod nb)
//! ```
//!
//! * Independence: for a fixed `i1`, `H ↦ (H − i1) mod nb` is a bijection
//!   of `0..nb`, so `i2` is distributed exactly as `H(fp)` (uniform up to
//!   the multiply-shift's bias of `nb/2⁶⁴`), the same as `i1 XOR H(fp)` is
//!   for a power of two. Both take at most `2^f − 1` values given `i1`
//!   (partial-key cuckoo hashing's known limit, negligible for f ≥ 8 at
//!   these table sizes — Fan et al. §4).
//! * `i1 = i2`: when `2·i1 ≡ H (mod nb)`, at most 2 buckets per `H`, so a
//!   fraction ≤ `2/nb` of items have one bucket (`XOR` has it for the
//!   `1/nb` of fingerprints with `H = 0`, for every bucket). Correctness
//!   does not depend on it: a lookup reads the one bucket, an insert with no
//!   room there evicts, and the evicted fingerprint goes to *its* other
//!   bucket.
//! * Why not XOR: `i1 XOR H` stays below `nb` and is an involution only
//!   for a power of two, which left tables 47.5–95 % full at their planned
//!   count (17.9 to 35.8 bits per item at 10⁻⁴; 10¹⁰ items cost 29.2 bits,
//!   36.5 GB, against 17.9 bits, 22.4 GB now). Why not `(i1 + H) mod nb`:
//!   moving a fingerprint would need to know which of its two buckets it is
//!   in. The subtraction costs one compare and one add over XOR.
//!
//! Files from before exact sizes (no `FLAG_CUCKOO_EXACT` in the header)
//! keep the power-of-two count and XOR (`docs/file-format.md`).
//! Rejected: a scaling chain of small sub-filters to hide the rounding
//! (every lookup would read more buckets); `CuckooChain` is for holding
//! more than planned.
//!
//! **Full table.** An insert that finds both buckets full evicts a random
//! slot's fingerprint to its other bucket, up to `max_kicks` times (500 by
//! default, as in the authors' code; RedisBloom's MAXITERATIONS, default 20).
//! If the last evicted fingerprint still finds no room, the insert fails and
//! every move is undone in reverse order: the table is exactly as before and
//! nothing stored is lost. The caller gets an error (never a silent loss).
//!
//! **Fingerprint packing.** Slots are packed at exactly `f` bits (slot `s`
//! occupies bits `s·f .. s·f + f` of the little-endian word array); `f` is
//! not rounded to 8/16/32, which would cost up to 15 bits per item at 10⁻⁴.

use super::{check_inputs, PlanError, BLOCK_BITS};

/// Slots per bucket of a cuckoo filter unless chosen (see the module docs,
/// "Cuckoo filter").
pub const CUCKOO_DEFAULT_BUCKET_SIZE: u32 = 4;

/// The load a table of the default bucket size is planned for (95 %).
pub const CUCKOO_PLANNED_LOAD: f64 = 0.95;

/// The default number of evictions before an insert gives up (and undoes them).
pub const CUCKOO_DEFAULT_MAX_KICKS: u32 = 500;

/// Largest bucket size accepted.
pub const CUCKOO_MAX_BUCKET_SIZE: u32 = 8;

/// Largest fingerprint width accepted (a slot spans at most two words).
pub const CUCKOO_MAX_FINGERPRINT_BITS: u32 = 32;

/// The fingerprint width for rate `p` with buckets of `b` slots:
/// `⌈log2(2b/p)⌉` (see the cuckoo section above), at least 2.
pub fn cuckoo_fingerprint_bits(p: f64, bucket_size: u32) -> u32 {
    let f = (2.0 * bucket_size as f64 / p).log2().ceil();
    (f.max(2.0)) as u32
}

/// Predicted false-positive rate of a cuckoo filter with `f`-bit
/// fingerprints, buckets of `b` slots, at load `alpha` (occupied fraction of
/// all slots): `1 − (1 − 1/(2^f − 1))^{2bα}`.
pub fn cuckoo_fp(fingerprint_bits: u32, bucket_size: u32, alpha: f64) -> f64 {
    let alpha = alpha.clamp(0.0, 1.0);
    let q = 1.0 / ((fingerprint_bits as f64).exp2() - 1.0);
    -((2.0 * bucket_size as f64 * alpha) * (-q).ln_1p()).exp_m1()
}

/// A sizing decision for a cuckoo filter.
#[derive(Clone, Debug, PartialEq)]
pub struct CuckooPlan {
    /// Items the filter is sized for.
    pub items: u64,
    /// The false-positive rate asked for.
    pub target_fp: f64,
    /// Buckets (any number, at least 1).
    pub buckets: u64,
    /// Slots per bucket.
    pub bucket_size: u32,
    /// Fingerprint width in bits.
    pub fingerprint_bits: u32,
    /// The false-positive rate predicted at `items` items.
    pub predicted_fp: f64,
}

impl CuckooPlan {
    /// Slots in the table.
    pub fn slots(&self) -> u64 {
        self.buckets * self.bucket_size as u64
    }

    /// Bits of filter data: the packed slots, rounded up to whole 512-bit lines.
    pub fn bits(&self) -> u64 {
        (self.slots() * self.fingerprint_bits as u64).div_ceil(BLOCK_BITS) * BLOCK_BITS
    }

    /// Bytes of filter data.
    pub fn bytes(&self) -> u64 {
        self.bits() / 8
    }

    /// Bits per planned item.
    pub fn bits_per_item(&self) -> f64 {
        self.bits() as f64 / self.items as f64
    }

    /// The load at the planned item count (`items / slots`).
    pub fn load(&self) -> f64 {
        self.items as f64 / self.slots() as f64
    }
}

/// Plans a cuckoo filter for `items` items at rate `p` with buckets of
/// `bucket_size` slots (1..=8; 4 is the default): `f = ⌈log2(2b/p)⌉` and
/// the smallest bucket count whose planned load is at most
/// 95 % (for b = 4; the load each bucket size reaches, Fan et al. table 2:
/// 50 % for b = 1, 84 % for 2, 95 % for 4, 98 % for 8, interpolated).
pub fn plan_cuckoo(items: u64, p: f64, bucket_size: u32) -> Result<CuckooPlan, PlanError> {
    check_inputs(items, p)?;
    let too_large = || PlanError::TooLarge { items, p };
    if !(1..=CUCKOO_MAX_BUCKET_SIZE).contains(&bucket_size) {
        return Err(PlanError::BadBucketSize(bucket_size));
    }
    let f = cuckoo_fingerprint_bits(p, bucket_size);
    if f > CUCKOO_MAX_FINGERPRINT_BITS {
        return Err(PlanError::RateTooLow { p, bucket_size });
    }
    let load = cuckoo_max_load(bucket_size);
    let need = (items as f64 / (bucket_size as f64 * load)).ceil();
    if need >= (1u64 << 56) as f64 {
        return Err(too_large());
    }
    let buckets = (need as u64).max(1);
    if buckets * bucket_size as u64 * f as u64 >= 1 << 62 {
        return Err(too_large());
    }
    let alpha = items as f64 / (buckets * bucket_size as u64) as f64;
    Ok(CuckooPlan {
        items,
        target_fp: p,
        buckets,
        bucket_size,
        fingerprint_bits: f,
        predicted_fp: cuckoo_fp(f, bucket_size, alpha),
    })
}

/// The load a cuckoo table with buckets of `b` slots is planned to: 50 %,
/// 84 %, 95 %, 98 % for b = 1, 2, 4, 8 (Fan et al. 2014, table 2), linear in
/// between.
pub fn cuckoo_max_load(bucket_size: u32) -> f64 {
    match bucket_size {
        0 | 1 => 0.50,
        2 => 0.84,
        3 => 0.90,
        4 => CUCKOO_PLANNED_LOAD,
        5 => 0.9575,
        6 => 0.965,
        7 => 0.9725,
        _ => 0.98,
    }
}
