//! The false-positive mathematics behind each layout, and the planner that turns
//! "n items at false-positive rate p" into concrete parameters.
//!
//! Everything here is pure arithmetic on `f64`; nothing touches a filter. The
//! formulas are kept in one place so that the planner, `info`, the service and
//! the tests all predict the same numbers.
//!
//! # Classic layout (Bloom 1970; Mitzenmacher & Upfal, *Probability and Computing*, §5.5.3)
//!
//! With `m` bits, `k` independent uniform positions per item and `n` items, a
//! given bit is still zero with probability `(1 − 1/m)^{kn} ≈ e^{−kn/m}`, so a
//! never-inserted item finds all its `k` bits set with probability
//!
//! ```text
//! FP_classic(m, n, k) = (1 − e^{−kn/m})^k
//! ```
//!
//! Minimising over `k` gives `k* = ln 2 · m/n` and `m* = −n · ln p / (ln 2)²`,
//! i.e. `−log2(p) / ln 2 ≈ 1.44 · log2(1/p)` bits per item. For `n = 10¹⁰`,
//! `p = 10⁻⁴` that is 19.17 bits per item; rounded up to 20 bits per item the
//! filter is 2·10¹¹ bits = 25 GB with `k = round(20 · ln 2) = 14` and a real
//! rate of 0.0067 %.
//!
//! # Blocked layout (Putze, Sanders & Singler, "Cache-, Hash- and Space-Efficient
//! Bloom Filters", WEA 2007, §3)
//!
//! Each item picks one block of `B = 512` bits (one cache line) and sets its `k`
//! bits inside it. The number of items that land in one block is binomial and,
//! for the sizes we care about, Poisson with mean `λ = B · n / m`. A block that
//! holds `i` items has had `k·i` probes thrown at its `B` bits; with `S` the
//! number of bits they set, a never-inserted item's `k` probes all find set
//! bits with probability `(S/B)^k`, so
//!
//! ```text
//! FP_blocked(m, n, k) = Σ_{i≥0} Pois(i; λ) · E[(S_{k·i}/B)^k]
//! ```
//!
//! where `S_t` is the occupancy of `B` bins after `t` uniform throws. Its
//! distribution is computed exactly, throw by throw (`P(S_{t+1} = s) =
//! P(S_t = s)·s/B + P(S_t = s−1)·(B−s+1)/B`). Putze et al. (and bloomgate
//! before this was measured) use the mean fill instead, `E[S/B]^k = (1 − (1 −
//! 1/B)^{k·i})^k`, which Jensen's inequality makes an underestimate: at
//! `p = 10⁻⁴` (k = 12, 21.9 bits per item) by 3.9 %, and filters planned with
//! it measured 4.4 % above their target (10⁷ URLs, 10⁸ negatives, `scale`
//! in BENCHMARKS.md). With the occupancy model the prediction and the
//! measurement agree, and the planner's filters meet their target.
//!
//! The Poisson spread is what costs space: crowded blocks have a much higher
//! false-positive rate than the average and dominate the sum. At `p = 10⁻⁴`
//! the blocked layout therefore needs about 22.0 bits per item (best `k = 12`)
//! instead of 19.17; in exchange every lookup touches exactly one cache line.
//! The best `k` is lower than the classic optimum (12 instead of 13–14) because
//! extra probes add load to already crowded blocks.
//!
//! The planner chooses the smallest whole number of 512-bit blocks for which
//! some `k` meets the target, and then the `k` with the lowest predicted rate.
//!
//! Hash id 3 places the `k` probes in `k` consecutive words of the block, one
//! bit each (`arch`, "Probes in consecutive words"), which the formula above
//! does not describe; `math/words.rs` computes its rate exactly. It is a
//! little higher (4.5 % at 22.03 bits per item, k = 12), and a plan must
//! hold for whichever probes the new filter's hash id gives it, so for
//! `k ≤ 16` the planner sizes by the larger of the two rates
//! ([`Layout::predicted_fp`]): 22.16 bits per item at `p = 10⁻⁴`.
//!
//! # Scaling filters (Almeida, Baquero, Preguiça & Hutchison, "Scalable Bloom
//! Filters", IPL 101(6), 2007; RedisBloom's `BF.RESERVE` without `NONSCALING`)
//!
//! A filter that must take more items than it was planned for grows by
//! appending *layers*: layer `i` is planned for `n₀ · r^i` items (`r` is the
//! expansion) at the rate `pᵢ = p · 2^{−(i+1)}` ([`scaling_layer_rate`]). A
//! query is a false positive if any layer answers falsely, so with `L`
//! layers, each at or below its planned load,
//!
//! ```text
//! FP_chain = 1 − Π_{i<L} (1 − pᵢ)  ≤  Σ_{i<L} pᵢ  =  p · (1 − 2^{−L})  <  p
//! ```
//!
//! (the union bound), whatever the number of layers: the first layer is
//! planned for half the requested rate so that the geometric series of all
//! later ones stays below `p`. Only the newest layer takes new items, and it
//! is replaced by a fresh one when it holds its planned count, so every layer
//! is at or below its planned load. A non-scaling filter has one layer,
//! planned at `p` itself (RedisBloom does the same: its tightening ratio is
//! 0.5, and 1 for `NONSCALING`). The price of growth is memory: halving the
//! rate costs `1/ln 2 ≈ 1.44` bits per item per layer for the classic
//! optimum, so layer `i` needs about `1.44 · (i + 1)` bits per item more than a
//! filter planned at `p`.
//!
//! # Deletable filters
//!
//! The sizing of counting Bloom filters is in `math/counting.rs`
//! and that of cuckoo filters in `math/cuckoo.rs`, each with its
//! essay; both are re-exported here, so `math::plan_counting` and
//! `math::plan_cuckoo` are the paths to use.
//!
//! # Static ribbon layout
//!
//! The sizing of the static ribbon layout (a linear system solved once, at
//! 3–4 % over the information-theoretic bound) is in `math/ribbon.rs`,
//! re-exported here like the others.

mod counting;
mod cuckoo;
mod ribbon;
mod words;

pub use words::words_fp;

use crate::arch::Probes;

pub use counting::*;
pub use cuckoo::*;
pub use ribbon::*;

/// Bits in one block of the blocked layout: one 64-byte cache line.
pub const BLOCK_BITS: u64 = 512;

/// Largest number of probes any layout accepts. Far beyond any useful optimum
/// (k = 40 is already the optimum for p ≈ 10⁻¹²); it bounds loops and file validation.
pub const MAX_K: u32 = 64;

/// Predicted false-positive rate of the classic layout.
///
/// `m` bits, `n` items, `k` probes: `(1 − e^{−kn/m})^k`.
pub fn classic_fp(m: f64, n: f64, k: u32) -> f64 {
    if n <= 0.0 {
        return 0.0;
    }
    (1.0 - (-(k as f64) * n / m).exp()).powi(k.min(i32::MAX as u32) as i32)
}

/// Predicted false-positive rate of the blocked layout: a Poisson mixture
/// over the number of items per block of the exact probability that a
/// block's set bits cover `k` uniform probes (see the module docs).
///
/// `m` bits in blocks of `block_bits`, `n` items, `k` probes per item, all in
/// one block. Costs a few hundred thousand multiply-adds at the usual loads;
/// beyond 2,000 items per block (a hopelessly overfull filter), and for
/// `k` above [`MAX_K`], it falls back to the mean-fill formula,
/// [`blocked_fp_mean_fill`]. Any input ends in bounded time: an item count
/// or bit count that is not a positive finite number answers 1.
pub fn blocked_fp(m: f64, n: f64, k: u32, block_bits: f64) -> f64 {
    if n <= 0.0 {
        return 0.0;
    }
    if let Some(fp) = degenerate_fp(m, n, block_bits) {
        return fp;
    }
    let lambda = block_bits * n / m;
    let b = block_bits as usize;
    // `lambda` is a number here (see `degenerate_fp`), possibly +∞.
    if lambda > 2000.0 || !(1..=4096).contains(&b) || k > MAX_K {
        return blocked_fp_mean_fill(m, n, k, block_bits);
    }
    let bf = block_bits;
    // (s/B)^k for every occupancy s.
    let cover: Vec<f64> = (0..=b).map(|s| (s as f64 / bf).powi(k as i32)).collect();
    // One probe moves occupancy s to s (it hit a set bit, probability s/B)
    // or s−1 to s (a clear one, (B − (s−1))/B). Both factors are tables,
    // computed with the same divisions the recurrence would make per step.
    let stay: Vec<f64> = (0..=b).map(|s| s as f64 / bf).collect();
    let grow: Vec<f64> = (0..=b)
        .map(|s| (bf - s.saturating_sub(1) as f64) / bf)
        .collect();
    let mut dist = vec![0.0f64; b + 1];
    // The next distribution is written beside the current one (not in
    // place), so the step is a plain element-wise multiply-add the compiler
    // vectorizes; the arithmetic, and so every bit of the result, is that
    // of the in-place recurrence.
    let mut next = vec![0.0f64; b + 1];
    dist[0] = 1.0;
    let mut top = 0usize; // highest occupancy with nonzero probability
    let mut sum = 0.0;
    let mode = lambda.floor();
    let mut i = 0.0f64;
    loop {
        let w = (i * lambda.ln() - lambda - ln_factorial(i)).exp();
        if w > 0.0 {
            let e: f64 = dist[..=top].iter().zip(&cover).map(|(p, c)| p * c).sum();
            sum += w * e;
        }
        if (i > mode && w < 1e-18) || i > mode + 10_000.0 {
            break;
        }
        // The next item's k probes.
        for _ in 0..k {
            let new_top = (top + 1).min(b);
            probe_step(&dist[..=new_top], &mut next[..=new_top], &stay, &grow);
            std::mem::swap(&mut dist, &mut next);
            top = new_top;
        }
        i += 1.0;
    }
    sum.min(1.0)
}

/// One probe of [`blocked_fp`]'s occupancy recurrence: `next[0] = 0`,
/// `next[s] = dist[s]·stay[s] + dist[s−1]·grow[s]`. Entries past `dist`'s
/// end are not touched (they stay 0: the top only grows).
#[inline]
fn probe_step(dist: &[f64], next: &mut [f64], stay: &[f64], grow: &[f64]) {
    let n = dist.len();
    next[0] = 0.0;
    let now = dist[1..].iter().zip(&dist[..n - 1]);
    let factors = stay[1..n].iter().zip(&grow[1..n]);
    for (out, ((&cur, &below), (&st, &gr))) in next[1..n].iter_mut().zip(now.zip(factors)) {
        *out = cur * st + below * gr;
    }
}

/// The blocked layout's rate with each block's fill taken at its mean
/// (Putze, Sanders & Singler 2007): `Σ Pois(i; λ) · (1 − (1 − 1/B)^{k·i})^k`.
/// An underestimate (see the module docs); cheap, so it narrows the search
/// for the best `k` before [`blocked_fp`] decides.
pub fn blocked_fp_mean_fill(m: f64, n: f64, k: u32, block_bits: f64) -> f64 {
    if n <= 0.0 {
        return 0.0;
    }
    if let Some(fp) = degenerate_fp(m, n, block_bits) {
        return fp;
    }
    let lambda = block_bits * n / m;
    // Sum the Poisson terms outward from the mode in both directions so that
    // large λ (an overfull filter) neither underflows e^{−λ} nor loops forever.
    let mode = lambda.floor();
    let ln_pmf = |i: f64| -> f64 { i * lambda.ln() - lambda - ln_factorial(i) };
    let per_block = |i: f64| -> f64 {
        let zero = (1.0 - 1.0 / block_bits).powf(k as f64 * i);
        (1.0 - zero).powi(k.min(i32::MAX as u32) as i32)
    };
    if lambda > MEAN_FILL_EXACT_LAMBDA {
        // Beyond here the Poisson spread (√λ) is under 0.1 % of λ and the
        // per-block rate is flat across it: the value at the mean is the
        // sum to within that. Summing term by term would need ~√λ terms
        // (and `i + 1.0 == i` once λ ≥ 2⁵³).
        return per_block(lambda).min(1.0);
    }
    // Each direction takes at most 10,001 terms (a counted loop, so it ends
    // whatever the floats do); λ ≤ 10⁶ puts all but 10⁻¹⁸ of the Poisson
    // mass within 10,000 of the mode.
    let mut sum = 0.0;
    for step in 0..=10_000u32 {
        let i = mode + step as f64;
        let w = ln_pmf(i).exp();
        sum += w * per_block(i);
        if w < 1e-18 && i > lambda {
            break;
        }
    }
    for step in 1..=10_000u32 {
        let i = mode - step as f64;
        if i < 0.0 {
            break;
        }
        let w = if lambda == 0.0 { 0.0 } else { ln_pmf(i).exp() };
        sum += w * per_block(i);
        if w < 1e-18 {
            break;
        }
    }
    sum.min(1.0)
}

/// Mean items per block above which [`blocked_fp_mean_fill`] evaluates the
/// per-block rate at the mean instead of summing the Poisson mixture.
const MEAN_FILL_EXACT_LAMBDA: f64 = 1e6;

/// The rate for inputs the sums cannot take: `None` for ordinary ones
/// (`m`, `block_bits` positive and finite, `n` positive and finite). A
/// filter of no bits, or one whose item count is infinite or not a number,
/// answers 1 (every lookup may be a false positive); so does a block size
/// that is not a positive number. Keeps every caller's loops finite.
fn degenerate_fp(m: f64, n: f64, block_bits: f64) -> Option<f64> {
    let ordinary = m > 0.0 && m.is_finite() && n.is_finite() && block_bits >= 1.0;
    let ordinary = ordinary && block_bits.is_finite();
    (!ordinary).then_some(1.0)
}

/// `ln(i!)` through Stirling's series (exact table for small `i`).
fn ln_factorial(i: f64) -> f64 {
    if i < 20.0 {
        let mut acc = 0.0;
        let mut j = 2.0;
        while j <= i {
            acc += f64::ln(j);
            j += 1.0;
        }
        return acc;
    }
    // Stirling with two correction terms: error < 1e-10 for i ≥ 20.
    let x = i + 1.0;
    (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + 1.0 / (12.0 * x)
        - 1.0 / (360.0 * x * x * x)
}

/// Which arrangement of bits a filter uses. Stored in the file header.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// The textbook filter: `k` positions anywhere in the `m` bits.
    /// Smallest for a given rate, but `k` cache misses per lookup.
    Classic,
    /// Every item confined to one 512-bit cache line: one cache miss per
    /// lookup, about 16 % more bits at `p = 10⁻⁴`.
    Blocked,
}

impl Layout {
    /// The name used on the command line and in JSON (`classic`, `blocked`).
    pub fn name(self) -> &'static str {
        match self {
            Layout::Classic => "classic",
            Layout::Blocked => "blocked",
        }
    }

    /// The code stored in the file header.
    pub fn code(self) -> u8 {
        match self {
            Layout::Classic => 1,
            Layout::Blocked => 2,
        }
    }

    /// Decodes a header code.
    pub fn from_code(code: u8) -> Option<Layout> {
        match code {
            1 => Some(Layout::Classic),
            2 => Some(Layout::Blocked),
            _ => None,
        }
    }

    /// Predicted false-positive rate of a filter of this layout for `m`
    /// bits, `n` items, `k` probes, whichever probes its hash id gives it:
    /// what the planner sizes by. For the blocked layout with at most 16
    /// probes that is the larger of the two probes' rates (a plan may be
    /// built with either: hash id 3 where it can address the filter, 1
    /// above 2³² blocks); with more, only hash ids 1 and 2 exist. A built
    /// filter's own rate is [`filter_fp`].
    pub fn predicted_fp(self, m_bits: u64, n: f64, k: u32) -> f64 {
        match self {
            Layout::Classic => classic_fp(m_bits as f64, n, k),
            Layout::Blocked => {
                let anywhere = blocked_fp(m_bits as f64, n, k, BLOCK_BITS as f64);
                if k <= Probes::Words.max_k() {
                    anywhere.max(words_fp(m_bits as f64, n, k))
                } else {
                    anywhere
                }
            }
        }
    }

    /// The `k` with the lowest predicted rate for `m` bits and `n` items.
    pub fn best_k(self, m_bits: u64, n: f64) -> u32 {
        match self {
            Layout::Classic => {
                // The optimum of a convex-ish function of k: check both
                // neighbours of ln2·m/n rather than trusting rounding.
                let k0 = (std::f64::consts::LN_2 * m_bits as f64 / n)
                    .floor()
                    .max(1.0)
                    .min(MAX_K as f64) as u32;
                let cands = [k0, (k0 + 1).min(MAX_K)];
                best_of(self, m_bits, n, cands.into_iter())
            }
            Layout::Blocked => {
                // The mean-fill formula finds the neighbourhood (its error
                // varies slowly with k); the exact one decides within it.
                let mut rough = (f64::INFINITY, 1);
                for k in 1..=MAX_K {
                    let fp = blocked_fp_mean_fill(m_bits as f64, n, k, BLOCK_BITS as f64);
                    if fp < rough.0 {
                        rough = (fp, k);
                    }
                }
                let k0 = rough.1;
                best_of(
                    self,
                    m_bits,
                    n,
                    k0.saturating_sub(2).max(1)..=(k0 + 2).min(MAX_K),
                )
            }
        }
    }
}

/// Predicted false-positive rate of a built filter of `layout` whose hash
/// id spreads its probes as `probes`: `m` bits, `n` items, `k` probes. The
/// classic layout ignores `probes`.
pub fn filter_fp(layout: Layout, probes: Probes, m_bits: u64, n: f64, k: u32) -> f64 {
    match (layout, probes) {
        (Layout::Classic, _) => classic_fp(m_bits as f64, n, k),
        (Layout::Blocked, Probes::Anywhere) => blocked_fp(m_bits as f64, n, k, BLOCK_BITS as f64),
        (Layout::Blocked, Probes::Words) => words_fp(m_bits as f64, n, k),
    }
}

fn best_of(layout: Layout, m_bits: u64, n: f64, ks: impl Iterator<Item = u32>) -> u32 {
    let mut best = (f64::INFINITY, 1);
    for k in ks {
        let fp = layout.predicted_fp(m_bits, n, k);
        if fp < best.0 {
            best = (fp, k);
        }
    }
    best.1
}

impl std::str::FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "classic" => Ok(Layout::Classic),
            "blocked" => Ok(Layout::Blocked),
            _ => Err(format!(
                "unknown layout {s:?} (expected blocked or classic)"
            )),
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A sizing decision: how many bits and probes a filter needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The layout this plan is for.
    pub layout: Layout,
    /// Items the filter is sized for.
    pub items: u64,
    /// The false-positive rate asked for.
    pub target_fp: f64,
    /// Bits in the filter (a whole number of 512-bit blocks, so the data is
    /// cache-line aligned and its length a multiple of 64 bytes).
    pub bits: u64,
    /// Probes per item.
    pub k: u32,
    /// The false-positive rate predicted for `items` items.
    pub predicted_fp: f64,
}

impl Plan {
    /// Bytes of filter data (`bits / 8`).
    pub fn bytes(&self) -> u64 {
        self.bits / 8
    }

    /// Bits per planned item.
    pub fn bits_per_item(&self) -> f64 {
        self.bits as f64 / self.items as f64
    }
}

/// The unrounded optimum of the classic layout: `m* = −n ln p / (ln 2)²`,
/// `k* = ln 2 · m*/n`. Returned as (bits per item, k) with `k` not rounded.
pub fn classic_optimum(p: f64) -> (f64, f64) {
    let ln2 = std::f64::consts::LN_2;
    let bpi = -p.ln() / (ln2 * ln2);
    (bpi, ln2 * bpi)
}

/// Why a plan could not be made.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// `n` was zero.
    #[error("the number of items must be at least 1")]
    NoItems,
    /// `p` was not strictly between 0 and 1.
    #[error("the false-positive rate must be strictly between 0 and 1, got {0}")]
    BadRate(f64),
    /// The plan would need more bits than can be addressed (2⁶³).
    #[error("{items} items at p = {p} need more than 2^63 bits")]
    TooLarge {
        /// Items asked for.
        items: u64,
        /// Rate asked for.
        p: f64,
    },
    /// A cuckoo filter's bucket size outside 1..=8.
    #[error("the bucket size must be between 1 and 8, got {0}")]
    BadBucketSize(u32),
    /// A cuckoo filter cannot reach the rate with fingerprints of at most 32 bits.
    #[error("a cuckoo filter with buckets of {bucket_size} needs more than 32-bit fingerprints for p = {p}")]
    RateTooLow {
        /// Rate asked for.
        p: f64,
        /// Slots per bucket.
        bucket_size: u32,
    },
    /// The ribbon layout's fingerprints are at most 32 bits.
    #[error("the ribbon layout plans rates down to 2^-32, got {0}")]
    RibbonRateTooLow(f64),
}

/// The least `b ≥ lo` for which `meets(b)` holds, for a `meets` that stays
/// true once true (more room never raises the rate): doubling from `lo`
/// until it holds, then bisection between `lo` and there. `None` if
/// doubling passes `max` first.
pub(crate) fn least_meeting(mut lo: u64, max: u64, meets: impl Fn(u64) -> bool) -> Option<u64> {
    let mut hi = lo;
    while !meets(hi) {
        hi = hi.checked_mul(2).filter(|&h| h <= max)?;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if meets(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

fn check_inputs(items: u64, p: f64) -> Result<(), PlanError> {
    if items == 0 {
        return Err(PlanError::NoItems);
    }
    if !(p > 0.0 && p < 1.0) {
        return Err(PlanError::BadRate(p));
    }
    Ok(())
}

/// Plans a filter of `layout` for `items` items at rate `p`.
///
/// * Classic: bits per item rounded **up to a whole number** (the seeds'
///   convention: 19.17 → 20 for p = 10⁻⁴), `k = round(ln 2 · bits per item)`.
/// * Blocked: the smallest whole number of 512-bit blocks for which some `k`
///   meets `p`, found by bisection on the monotone `min_k FP(m, k)`.
///
/// Both round the bit count up to a whole number of 512-bit blocks.
pub fn plan(layout: Layout, items: u64, p: f64) -> Result<Plan, PlanError> {
    check_inputs(items, p)?;
    let n = items as f64;
    let too_large = || PlanError::TooLarge { items, p };
    match layout {
        Layout::Classic => {
            let (bpi, _) = classic_optimum(p);
            let whole_bpi = bpi.ceil();
            let bits_f = whole_bpi * n;
            if bits_f >= 9.2e18 {
                return Err(too_large());
            }
            let bits = round_up_blocks(bits_f as u64).ok_or_else(too_large)?;
            let k = ((std::f64::consts::LN_2 * whole_bpi).round() as u32).clamp(1, MAX_K);
            Ok(Plan {
                layout,
                items,
                target_fp: p,
                bits,
                k,
                predicted_fp: classic_fp(bits as f64, n, k),
            })
        }
        Layout::Blocked => {
            let meets = |blocks: u64| -> Option<(u32, f64)> {
                let bits = blocks * BLOCK_BITS;
                let k = layout.best_k(bits, n);
                let fp = layout.predicted_fp(bits, n, k);
                (fp <= p).then_some((k, fp))
            };
            // Lower bound: the classic optimum (blocking never beats it).
            let (bpi, _) = classic_optimum(p);
            let lo_bits = bpi * n;
            if lo_bits >= 4.0e18 {
                return Err(too_large());
            }
            let lo = ((lo_bits as u64) / BLOCK_BITS).max(1);
            let max = (1u64 << 63) / BLOCK_BITS;
            let hi = least_meeting(lo, max, |b| meets(b).is_some()).ok_or_else(too_large)?;
            let (k, predicted_fp) = meets(hi).ok_or_else(too_large)?;
            Ok(Plan {
                layout,
                items,
                target_fp: p,
                bits: hi * BLOCK_BITS,
                k,
                predicted_fp,
            })
        }
    }
}

/// The least classic filter that meets `p`: for each whole `k` near the
/// optimum `−log2 p`, the fewest 512-bit blocks with
/// `FP_classic(m, n, k) ≤ p` (`m ≥ −k·n / ln(1 − p^{1/k})`), and of those
/// the smallest (then the lowest rate). At `p = 10⁻⁴` that is `k = 13` and
/// 19.17 bits per item, the unrounded optimum within 0.02 %, where
/// [`plan`]'s whole bits per item give 20. The Python package's classic
/// lists are planned so; the CLI keeps [`plan`]'s sizes.
pub fn plan_classic_least(items: u64, p: f64) -> Result<Plan, PlanError> {
    check_inputs(items, p)?;
    let n = items as f64;
    let too_large = || PlanError::TooLarge { items, p };
    let k_opt = -p.log2();
    let lo = (k_opt.floor() as u32).saturating_sub(1).max(1);
    let hi = (k_opt.ceil() as u32 + 1).min(MAX_K);
    let mut best: Option<Plan> = None;
    for k in lo..=hi.max(lo) {
        let per_probe = 1.0 - p.powf(1.0 / k as f64);
        let bits_f = -(k as f64) * n / per_probe.ln();
        if !bits_f.is_finite() || bits_f >= 9.2e18 {
            continue;
        }
        let Some(mut bits) = round_up_blocks(bits_f.ceil() as u64) else {
            continue;
        };
        // The closed form in floating point may fall a hair short.
        let mut steps = 0;
        while classic_fp(bits as f64, n, k) > p && steps < 8 {
            bits += BLOCK_BITS;
            steps += 1;
        }
        let fp = classic_fp(bits as f64, n, k);
        if fp > p || bits >= 1u64 << 63 {
            continue;
        }
        let better = match &best {
            None => true,
            Some(b) => bits < b.bits || (bits == b.bits && fp < b.predicted_fp),
        };
        if better {
            best = Some(Plan {
                layout: Layout::Classic,
                items,
                target_fp: p,
                bits,
                k,
                predicted_fp: fp,
            });
        }
    }
    best.ok_or_else(too_large)
}

fn round_up_blocks(bits: u64) -> Option<u64> {
    let blocks = bits.div_ceil(BLOCK_BITS).max(1);
    blocks.checked_mul(BLOCK_BITS).filter(|&b| b < (1u64 << 63))
}

/// Estimated number of distinct items from the number of set bits
/// (Swamidass & Baldi 2007): `n̂ = −(m/k) · ln(1 − X/m)`.
///
/// Both layouts set each bit with the same probability per probe (`1/m`), so
/// the estimator holds for both. A completely full filter returns `+∞`.
pub fn estimate_items(m_bits: u64, k: u32, ones: u64) -> f64 {
    let m = m_bits as f64;
    let x = ones as f64;
    if x >= m {
        return f64::INFINITY;
    }
    -(m / k as f64) * (1.0 - x / m).ln()
}

/// The per-lookup rate needed so that a query making up to `lookups`
/// independent lookups stays at `per_query`: `1 − (1 − p)^{1/L}`.
pub fn per_lookup_rate(per_query: f64, lookups: u32) -> f64 {
    if lookups <= 1 {
        return per_query;
    }
    // -expm1(ln1p(-p)/L) keeps precision for tiny p.
    -((-per_query).ln_1p() / lookups as f64).exp_m1()
}

/// The rate layer `i` (0 = first) of a scaling filter for the overall rate
/// `p` is planned for: `p · 2^{−(i+1)}` (see the module docs: the compound
/// rate of any number of layers then stays below `p`).
pub fn scaling_layer_rate(p: f64, layer: u32) -> f64 {
    p * 0.5f64.powi(layer.saturating_add(1).min(1074) as i32)
}

/// The compound false-positive rate of independent layers with per-layer
/// rates `rates`: `1 − Π (1 − pᵢ)`, computed as `−expm1(Σ ln(1 − pᵢ))` so
/// that tiny rates keep their precision.
pub fn compound_fp(rates: impl IntoIterator<Item = f64>) -> f64 {
    -rates
        .into_iter()
        .map(|p| (-p.min(1.0)).ln_1p())
        .sum::<f64>()
        .exp_m1()
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod deletable_tests;

#[cfg(test)]
mod any_input;
