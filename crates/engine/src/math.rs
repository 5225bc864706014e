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
    let mut dist = vec![0.0f64; b + 1];
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
            for s in (1..=new_top).rev() {
                dist[s] = dist[s] * (s as f64 / bf) + dist[s - 1] * ((bf - (s - 1) as f64) / bf);
            }
            dist[0] = 0.0;
            top = new_top;
        }
        i += 1.0;
    }
    sum.min(1.0)
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
    /// lookup, about 14 % more bits at `p = 10⁻⁴`.
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

    /// Predicted false-positive rate of this layout for `m` bits, `n` items, `k` probes.
    pub fn predicted_fp(self, m_bits: u64, n: f64, k: u32) -> f64 {
        match self {
            Layout::Classic => classic_fp(m_bits as f64, n, k),
            Layout::Blocked => blocked_fp(m_bits as f64, n, k, BLOCK_BITS as f64),
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
            let mut lo = ((lo_bits as u64) / BLOCK_BITS).max(1);
            let mut hi = lo.max(1);
            while meets(hi).is_none() {
                hi = hi.checked_mul(2).ok_or_else(too_large)?;
                if hi > (1u64 << 63) / BLOCK_BITS {
                    return Err(too_large());
                }
            }
            if meets(lo).is_some() {
                hi = lo;
            }
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if meets(mid).is_some() {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
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

// ---------------------------------------------------------------------------
// Deletable filters
// ---------------------------------------------------------------------------

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
    let mut lo = ((lo_counters as u64) / COUNTING_BLOCK_COUNTERS).max(1);
    let mut hi = lo;
    while meets(hi).is_none() {
        hi = hi
            .checked_mul(2)
            .filter(|&h| h <= max_blocks)
            .ok_or_else(too_large)?;
    }
    if meets(lo).is_some() {
        hi = lo;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if meets(mid).is_some() {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let (k, predicted_fp) = meets(hi).ok_or_else(too_large)?;
    Ok(CountingPlan {
        items,
        target_fp: p,
        counters: hi * COUNTING_BLOCK_COUNTERS,
        k,
        predicted_fp,
    })
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_worked_example_classic() {
        // n = 10^10, p = 1e-4: 19.17 bits per item exact, 20 rounded, 25 GB, k = 14, ~0.006 %.
        let (bpi, k) = classic_optimum(1e-4);
        assert!((bpi - 19.17).abs() < 0.01, "{bpi}");
        assert!((k - 13.29).abs() < 0.01, "{k}");
        let plan = plan(Layout::Classic, 10_000_000_000, 1e-4).unwrap();
        assert_eq!(plan.bits, 200_000_000_000);
        assert_eq!(plan.bytes(), 25_000_000_000);
        assert_eq!(plan.k, 14);
        assert!(
            plan.predicted_fp > 0.00006 && plan.predicted_fp < 0.00007,
            "{}",
            plan.predicted_fp
        );
    }

    #[test]
    fn blocked_plan_matches_putze() {
        let plan = plan(Layout::Blocked, 10_000_000_000, 1e-4).unwrap();
        let bpi = plan.bits_per_item();
        // 21.9 with the mean-fill formula, which under-predicts by 3.9 %.
        assert!((22.0..22.1).contains(&bpi), "{bpi}");
        assert_eq!(plan.k, 12);
        assert!(plan.predicted_fp <= 1e-4);
        assert!(plan.bytes() < 30_000_000_000);
        assert!((27.5e9..27.6e9).contains(&(plan.bytes() as f64)));
        // The smallest m: one block less does not meet the target.
        let fewer = plan.bits - BLOCK_BITS;
        let k = Layout::Blocked.best_k(fewer, 1e10);
        assert!(Layout::Blocked.predicted_fp(fewer, 1e10, k) > 1e-4);
    }

    #[test]
    fn blocked_fp_tends_to_classic_for_big_blocks() {
        // With one huge block the mixture collapses to the classic formula.
        let m = 1e6;
        let c = classic_fp(m, 5e4, 10);
        let b = blocked_fp(m, 5e4, 10, m);
        assert!((c - b).abs() / c < 0.01, "{c} vs {b}");
    }

    #[test]
    fn bad_inputs() {
        assert_eq!(plan(Layout::Blocked, 0, 0.1), Err(PlanError::NoItems));
        assert!(matches!(
            plan(Layout::Blocked, 10, 0.0),
            Err(PlanError::BadRate(_))
        ));
        assert!(matches!(
            plan(Layout::Classic, 10, 1.0),
            Err(PlanError::BadRate(_))
        ));
        assert!(matches!(
            plan(Layout::Classic, 10, f64::NAN),
            Err(PlanError::BadRate(_))
        ));
        assert!(matches!(
            plan(Layout::Classic, u64::MAX, 1e-9),
            Err(PlanError::TooLarge { .. })
        ));
    }

    #[test]
    fn estimator_inverts_expected_fill() {
        let m = 1u64 << 20;
        let (k, n) = (7u32, 50_000f64);
        let ones = (m as f64 * (1.0 - (-(k as f64) * n / m as f64).exp())) as u64;
        let est = estimate_items(m, k, ones);
        assert!((est - n).abs() / n < 0.001);
    }

    #[test]
    fn per_lookup_rate_is_consistent() {
        let r = per_lookup_rate(1e-4, 30);
        assert!((1.0 - (1.0 - r).powi(30) - 1e-4).abs() < 1e-12);
        assert_eq!(per_lookup_rate(1e-4, 1), 1e-4);
    }

    #[test]
    fn scaling_series_stays_below_the_requested_rate() {
        for p in [0.1, 0.01, 1e-4, 1e-9] {
            assert_eq!(scaling_layer_rate(p, 0), p / 2.0);
            assert_eq!(scaling_layer_rate(p, 3), p / 16.0);
            let mut sum = 0.0;
            for layers in 1..=64u32 {
                sum += scaling_layer_rate(p, layers - 1);
                let c = compound_fp((0..layers).map(|i| scaling_layer_rate(p, i)));
                // Up to rounding; past 2^−53 the partial sums round to p.
                assert!(
                    c <= sum * (1.0 + 1e-12) && sum <= p && c < p,
                    "p {p} layers {layers}: {c} {sum}"
                );
            }
        }
        // Past the smallest f64 the rate is 0, never NaN.
        assert_eq!(scaling_layer_rate(0.5, u32::MAX), 0.0);
    }

    #[test]
    fn occupancy_model_exceeds_mean_fill_by_jensen() {
        // At the p = 1e-4 optimum the exact occupancy model predicts 3.9 %
        // more than the mean-fill formula (measured: +4.4 % ± 1 %).
        let (m, n) = (21.9e6, 1e6);
        let exact = blocked_fp(m, n, 12, 512.0);
        let mean = blocked_fp_mean_fill(m, n, 12, 512.0);
        let ratio = exact / mean;
        assert!((1.03..1.05).contains(&ratio), "{ratio}");
        // One item per block: its own k probes can repeat, so fewer than k
        // bits are set: E[(S/B)^k] for S = occupancy of k throws. Checked
        // against direct enumeration for a tiny block (B = 4, k = 2).
        // Occupancy after 2 throws into 4 bins: 1 w.p. 1/4, 2 w.p. 3/4;
        // E[(S/4)^2] = 1/4·1/16 + 3/4·4/16 = 13/64.
        let lambda: f64 = 1.0;
        let m4 = 4.0 * 1e4;
        let got = blocked_fp(m4, 1e4 * lambda, 2, 4.0);
        // Σ Pois(i;1)·E_i, with E_0 = 0, E_1 = 13/64, E_2.. from the DP.
        let mut d = [1.0f64, 0.0, 0.0, 0.0, 0.0];
        let mut want = 0.0;
        for i in 0..60u32 {
            let w = (-(lambda)).exp() / (1..=i).map(f64::from).product::<f64>();
            let e: f64 = (0..5).map(|s| d[s] * (s as f64 / 4.0).powi(2)).sum();
            if i == 1 {
                assert!((e - 13.0 / 64.0).abs() < 1e-12);
            }
            want += w * e;
            for _ in 0..2 {
                for s in (1..5).rev() {
                    d[s] = d[s] * s as f64 / 4.0 + d[s - 1] * (4 - (s - 1)) as f64 / 4.0;
                }
                d[0] = 0.0;
            }
        }
        assert!((got - want).abs() < 1e-9, "{got} vs {want}");
    }
}

#[cfg(test)]
mod deletable_tests {
    use super::*;

    #[test]
    fn saturation_is_negligible_at_plan() {
        let c = plan_counting(1_000_000, 1e-4).unwrap();
        let s = counting_saturation(c.counters, 1e6, c.k);
        println!("saturation {s:e}");
        assert!(s < 1e-15, "{s}");
        // And it grows with overload, as it must.
        assert!(counting_saturation(c.counters, 3e7, c.k) > s);
    }

    #[test]
    fn counting_costs_at_1e4_as_documented() {
        // The module docs' table: blocked 128-counter blocks need 30.94
        // counters (123.8 bits) per item with k = 10 at p = 1e-4, against
        // the classic optimum's 19.17 counters (76.7 bits).
        let c = plan_counting(10_000_000_000, 1e-4).unwrap();
        assert_eq!(c.k, 10);
        assert!(
            (123.7..123.9).contains(&c.bits_per_item()),
            "{}",
            c.bits_per_item()
        );
        assert!(
            (154.6e9..154.8e9).contains(&(c.bytes() as f64)),
            "{}",
            c.bytes()
        );
        assert!(c.predicted_fp <= 1e-4);
        // One block fewer misses the target.
        let fewer = c.counters - COUNTING_BLOCK_COUNTERS;
        assert!(counting_fp(fewer, 1e10, counting_best_k(fewer, 1e10)) > 1e-4);
        let (classic, _) = classic_optimum(1e-4);
        assert!((4.0 * classic - 76.68).abs() < 0.01, "{}", 4.0 * classic);
    }

    #[test]
    fn cuckoo_plan_as_documented() {
        assert_eq!(cuckoo_fingerprint_bits(1e-4, 4), 17);
        assert_eq!(cuckoo_fingerprint_bits(1e-2, 4), 10);
        // At full load the rate is still within the target, and one bit
        // fewer would not be.
        for p in [1e-2, 1e-4, 1e-6] {
            for b in 1..=8 {
                let f = cuckoo_fingerprint_bits(p, b);
                assert!(cuckoo_fp(f, b, 1.0) <= p, "p {p} b {b}");
                assert!(cuckoo_fp(f - 1, b, 1.0) > p * 0.99, "p {p} b {b}");
            }
        }
        // Exact sizes: ~17.9 bits per item at any n, the load 95 %.
        let q = plan_cuckoo(10_000_000_000, 1e-4, 4).unwrap();
        assert_eq!((q.buckets, q.fingerprint_bits), (2_631_578_948, 17));
        assert!(
            (17.89..17.9).contains(&q.bits_per_item()),
            "{}",
            q.bits_per_item()
        );
        assert_eq!(q.bytes(), 22_368_421_120);
        for n in [1_000, 996_000, 1_000_000, 1_048_577, 123_456_789] {
            let q = plan_cuckoo(n, 1e-4, 4).unwrap();
            assert_eq!(q.buckets, (n as f64 / 3.8).ceil() as u64, "n {n}");
            assert!(
                (17.89..18.5).contains(&q.bits_per_item()),
                "n {n}: {}",
                q.bits_per_item()
            );
            assert!((0.94..=0.95).contains(&q.load()), "n {n}: {}", q.load());
            assert!(q.predicted_fp <= 1e-4, "n {n}");
        }
        assert_eq!(plan_cuckoo(1, 1e-4, 4).unwrap().buckets, 1);
        assert_eq!(plan_cuckoo(10, 1e-4, 9), Err(PlanError::BadBucketSize(9)));
        assert!(matches!(
            plan_cuckoo(10, 1e-12, 4),
            Err(PlanError::RateTooLow { .. })
        ));
    }
}

#[cfg(test)]
/// Every sizing and rate function ends, in bounded time, for any
/// input: the whole `u64`/`u32` range and every `f64` class (NaN, ±∞,
/// subnormals, huge values); the rates stay in `[0, 1]`.
mod any_input {
    use super::*;
    use proptest::prelude::*;
    use std::time::{Duration, Instant};

    /// Generous for a loaded machine: a loop that does not end takes
    /// forever, a bounded one milliseconds.
    const BOUND: Duration = Duration::from_secs(20);

    fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let v = f();
        assert!(t.elapsed() < BOUND, "{what} took {:?}", t.elapsed());
        v
    }

    fn rate(what: &str, fp: f64) {
        assert!((0.0..=1.0).contains(&fp), "{what} = {fp}");
    }

    /// Integers biased towards the edges (0, 1, 2⁵³ and up, u64::MAX)
    /// as well as the whole range.
    fn int() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u64>(),
            Just(0u64),
            Just(1u64),
            Just(u64::MAX),
            (53u32..64).prop_map(|e| 1u64 << e),
            0u64..100_000,
        ]
    }

    fn float() -> impl Strategy<Value = f64> {
        prop_oneof![
            proptest::num::f64::ANY,
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(0.0),
            Just(9.007_199_254_740_992e15),
            Just(f64::MAX),
            Just(f64::MIN_POSITIVE),
            (0u64..u64::MAX).prop_map(|v| v as f64),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn rates_end_and_stay_rates(m in int(), n in float(), ni in int(), k in any::<u32>(), small_k in 0u32..70) {
            for k in [k, small_k] {
                for n in [n, ni as f64] {
                    for layout in [Layout::Blocked, Layout::Classic] {
                        let fp = timed("predicted_fp", || layout.predicted_fp(m, n, k));
                        if m > 0 && n >= 0.0 && !n.is_nan() {
                            rate("predicted_fp", fp);
                        }
                    }
                    rate("blocked_fp_mean_fill", timed("mean fill", || blocked_fp_mean_fill(m as f64, n, k, 512.0)));
                    rate("counting_fp", timed("counting_fp", || counting_fp(m, n, k)));
                    rate("counting_saturation", timed("saturation", || counting_saturation(m, n, k)));
                    let _ = timed("estimate_items", || estimate_items(m, k, ni));
                }
            }
        }

        #[test]
        fn best_k_ends(m in int(), n in float(), ni in int()) {
            for n in [n, ni as f64] {
                for layout in [Layout::Blocked, Layout::Classic] {
                    let k = timed("best_k", || layout.best_k(m, n));
                    prop_assert!((1..=MAX_K).contains(&k));
                }
                let k = timed("counting_best_k", || counting_best_k(m, n));
                prop_assert!((1..=MAX_COUNTING_K).contains(&k));
            }
        }

        #[test]
        fn plans_end(items in int(), p in float(), b in any::<u32>()) {
            for layout in [Layout::Blocked, Layout::Classic] {
                if let Ok(pl) = timed("plan", || plan(layout, items, p)) {
                    prop_assert!(pl.bits > 0 && pl.bits < 1 << 63);
                }
            }
            let _ = timed("plan_counting", || plan_counting(items, p));
            let _ = timed("plan_cuckoo", || plan_cuckoo(items, p, b));
            let _ = timed("plan_cuckoo", || plan_cuckoo(items, p, 4));
            let _ = timed("cuckoo_fp", || cuckoo_fp(b, b, p));
            let _ = timed("per_lookup_rate", || per_lookup_rate(p, b));
            let _ = timed("scaling_layer_rate", || scaling_layer_rate(p, b));
            let _ = timed("compound_fp", || compound_fp([p, p, 0.5]));
        }
    }

    /// The header of the frozen-server report: 2⁶⁴ − 1 items in 11,776
    /// bits put λ near 2⁶³ items per block.
    #[test]
    fn overfull_filter_rate_is_one() {
        let n = u64::MAX as f64;
        assert_eq!(blocked_fp_mean_fill(11_776.0, n, 7, 512.0), 1.0);
        assert_eq!(Layout::Blocked.predicted_fp(11_776, n, 7), 1.0);
        assert_eq!(counting_saturation(128, n, 7), 1.0);
        let k = Layout::Blocked.best_k(11_776, n);
        assert!((1..=MAX_K).contains(&k));
    }
}
