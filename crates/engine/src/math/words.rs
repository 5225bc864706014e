//! The false-positive rate of a blocked filter whose probes lie in
//! consecutive words (hash id 3, `arch::Probes::Words`).
//!
//! An item whose in-block hash has start word `s` sets one uniform bit in
//! each of the words `W_s = {s, s+1, …, s+k−1} (mod 16)` of its block, `s`
//! uniform over the 16 words. By symmetry a query may take start 0 and
//! probe `Q = W_0`. Given how many items set a bit in each word (`c_w`),
//! the query's bits are set independently, word `w`'s with probability
//! `1 − a^{c_w}`, `a = 31/32`. Expanding the product over the query's words,
//!
//! ```text
//! ∏_{w∈Q} (1 − a^{c_w}) = Σ_{S⊆Q} (−1)^{|S|} · a^{Σ_{w∈S} c_w},
//! ```
//!
//! each of the block's `j` items contributes, independently, a factor
//! `g(S) = (1/16) Σ_s a^{|S ∩ W_s|}` to the expectation of the last power,
//! and a Poisson(λ) number of items per block (`λ = 512 · n / m`) turns
//! `g(S)^j` into `e^{−λ(1 − g(S))}`:
//!
//! ```text
//! fp = Σ_{S⊆Q} (−1)^{|S|} · e^{−λ(1 − g(S))}
//! ```
//!
//! exactly, for uniform hashes. `g(S)` depends only on how many of the 16
//! windows meet `S` in each number of words, so the 2^k subsets fall into
//! a few hundred groups, counted once per `k` ([`groups`]); a rate is then
//! one exponential per group. With `k = 16` every window is the whole block
//! and the sum is the split-block formula `Σ_j P(j) (1 − a^j)^16`.
//!
//! The sum alternates over terms near 1 to reach 10⁻⁴ or less, so rounding
//! matters: each term is off by at most about `8(λ + 4)·ε` relative, each
//! addition by `ε` of the terms' total, and [`words_fp`] adds that bound
//! (a few 10⁻¹⁰ at the usual loads) to its answer. A planner that sizes by it therefore never undershoots its
//! target by rounding; at rates far below 10⁻⁹ the bound dominates and the
//! planner falls back to the other probes (hash id 2), which it may.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::degenerate_fp;

/// Words in a 512-bit block.
const WORDS: u32 = 16;

/// A set of subsets `S ⊆ Q` with the same `g(S)`.
struct Group {
    /// For each `c` in `0..=16`, how many of the 16 windows meet `S` in `c`
    /// words.
    meeting: [u8; 17],
    /// `Σ (−1)^{|S|}` over the group.
    sign_sum: i64,
}

/// The groups of the subsets of `Q` for `k` probes (`1 ≤ k ≤ 16`), built
/// once per `k` (2^k · 16 intersections: about 2 ms for k = 16).
fn groups(k: u32) -> &'static [Group] {
    static TABLES: [OnceLock<Vec<Group>>; 17] = [const { OnceLock::new() }; 17];
    TABLES[k as usize].get_or_init(|| {
        let low = (1u32 << k) - 1;
        let windows: Vec<u32> = (0..WORDS)
            .map(|s| ((low << s) | (low >> (WORDS - s))) & 0xFFFF)
            .collect();
        let mut by_meeting: HashMap<[u8; 17], i64> = HashMap::new();
        for subset in 0..=low {
            let mut meeting = [0u8; 17];
            for w in &windows {
                meeting[(subset & w).count_ones() as usize] += 1;
            }
            let sign = if subset.count_ones() % 2 == 0 { 1 } else { -1 };
            *by_meeting.entry(meeting).or_default() += sign;
        }
        let mut groups: Vec<Group> = by_meeting
            .into_iter()
            .filter(|&(_, sign_sum)| sign_sum != 0)
            .map(|(meeting, sign_sum)| Group { meeting, sign_sum })
            .collect();
        // A fixed order, so the sum (and its rounding) does not depend on
        // the hash map's.
        groups.sort_by_key(|g| g.meeting);
        groups
    })
}

/// Predicted false-positive rate of a blocked filter with hash id 3's
/// probes: `m` bits in 512-bit blocks, `n` items, `k` probes (`1..=16`; a
/// larger `k` answers 1, as no such filter exists). Exact for uniform
/// hashes, plus a bound on its own rounding (module docs).
pub fn words_fp(m: f64, n: f64, k: u32) -> f64 {
    if n <= 0.0 {
        return 0.0;
    }
    if let Some(fp) = degenerate_fp(m, n, 512.0) {
        return fp;
    }
    if !(1..=WORDS).contains(&k) {
        return 1.0;
    }
    let lambda = 512.0 * n / m;
    if !lambda.is_finite() || lambda > 1e6 {
        return 1.0;
    }
    let a: [f64; 17] = std::array::from_fn(|c| (31.0f64 / 32.0).powi(c as i32));
    let (mut sum, mut size) = (0.0f64, 0.0f64);
    for g in groups(k) {
        let mean = g
            .meeting
            .iter()
            .zip(a)
            .map(|(&windows, a_c)| f64::from(windows) * a_c)
            .sum::<f64>()
            / f64::from(WORDS);
        let term = (-lambda * (1.0 - mean)).exp();
        sum += g.sign_sum as f64 * term;
        size += g.sign_sum.unsigned_abs() as f64 * term;
    }
    // Each term off by (λ + 4)·8ε relative at most, and the running sum by
    // one ε of the terms' total per addition.
    let rounding = size * f64::EPSILON * (8.0 * (lambda + 4.0) + groups(k).len() as f64);
    (sum + rounding).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The split-block formula for sixteen words, summed directly.
    fn split_block_16(m: f64, n: f64) -> f64 {
        let lambda = 512.0 * n / m;
        let mut p = (-lambda).exp();
        let mut fp = 0.0;
        for j in 0..2000 {
            if j > 0 {
                p *= lambda / j as f64;
            }
            fp += p * (1.0 - (31.0f64 / 32.0).powi(j)).powi(16);
        }
        fp
    }

    #[test]
    fn sixteen_probes_give_the_split_block_formula() {
        for (m, n) in [(512e3, 23e3), (512e3, 10e3), (512e3, 40e3)] {
            let want = split_block_16(m, n);
            let got = words_fp(m, n, 16);
            // Above by its rounding bound at most (a few 10⁻¹⁰ here).
            assert!(got >= want - 1e-15 && got - want <= 1e-9, "{got} vs {want}");
        }
    }

    #[test]
    fn one_probe_is_the_chance_of_hitting_a_set_bit_of_one_word() {
        // k = 1: the query's one word holds c ~ Poisson(λ/16) items' bits.
        let (m, n) = (512e3, 23e3);
        let lambda: f64 = 512.0 * n / m;
        let want = 1.0 - (-lambda / 16.0 / 32.0).exp();
        let got = words_fp(m, n, 1);
        assert!((got - want).abs() <= 1e-12, "{got} vs {want}");
    }

    #[test]
    fn at_the_planners_bits_for_1e_4_the_rate_is_a_little_above_the_other_probes() {
        // 22.03 bits per item, k = 12: 1.045e-4 (the other probes: 1.000e-4).
        let fp = words_fp(22.03, 1.0, 12);
        assert!((1.040e-4..1.050e-4).contains(&fp), "{fp}");
    }

    #[test]
    fn odd_inputs_answer_in_range() {
        assert_eq!(words_fp(512.0, 0.0, 12), 0.0);
        assert_eq!(words_fp(0.0, 5.0, 12), 1.0);
        assert_eq!(words_fp(512.0, f64::INFINITY, 12), 1.0);
        assert_eq!(words_fp(512.0, 5.0, 17), 1.0);
        assert_eq!(words_fp(512.0, 5.0, 0), 1.0);
        let full = words_fp(512.0, 1e5, 12);
        assert!((0.99..=1.0).contains(&full), "{full}");
    }
}
