//! What a Bloom filter is, apart from its bits: the parameters that decide
//! where an item's bits are ([`Params`]), the checks every source of them
//! (a plan, a file header, a caller) must pass, and the seed.
//!
//! Both the filter ([`crate::Filter`]) and the file format's header codec
//! ([`crate::format::Header`]) hold a `Params`; it lives here, below both,
//! so that neither has to import the other for it.

use crate::error::{Error, Result};
use crate::hash::HashId;
use crate::math::{Layout, Plan, BLOCK_BITS, MAX_K};

/// Everything that determines where an item's bits are, plus descriptive metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// Bit layout.
    pub layout: Layout,
    /// Number of bits, a positive multiple of 512.
    pub bits: u64,
    /// Probes per item, 1..=64.
    pub k: u32,
    /// Hash seed. Two filters can only be combined if their seeds are equal.
    pub seed: u64,
    /// Hash function (the header's hash id): with the layout, the seed and
    /// the size, where every item's bits are (`place.rs`).
    pub hash: HashId,
    /// How keys are normalized before hashing (interpreted by `bloomgate-url`; 0 = raw bytes).
    pub key_kind: u8,
    /// How queries are matched (interpreted by `bloomgate-url`; 0 = exact).
    pub match_mode: u8,
    /// Items the filter was sized for.
    pub planned_items: u64,
    /// False-positive rate the filter was sized for.
    pub target_fp: f64,
}

impl Params {
    /// Parameters from a sizing plan, with the given seed and raw keys, and
    /// the hash a new filter of the plan's layout and size is built with
    /// ([`HashId::for_filter`]).
    pub fn from_plan(plan: &Plan, seed: u64) -> Params {
        Params {
            layout: plan.layout,
            bits: plan.bits,
            k: plan.k,
            seed,
            hash: HashId::for_filter(plan.layout, plan.bits, plan.k),
            key_kind: 0,
            match_mode: 0,
            planned_items: plan.items,
            target_fp: plan.target_fp,
        }
    }

    /// Checks that the parameters describe an addressable filter.
    pub fn validate(&self) -> Result<()> {
        if self.bits == 0 || !self.bits.is_multiple_of(BLOCK_BITS) {
            return Err(Error::InvalidParams(format!(
                "bits must be a positive multiple of {BLOCK_BITS}, got {}",
                self.bits
            )));
        }
        if self.bits >= 1 << 63 {
            return Err(Error::InvalidParams(format!(
                "{} bits is too many",
                self.bits
            )));
        }
        if self.k == 0 || self.k > MAX_K {
            return Err(Error::InvalidParams(format!(
                "k must be in 1..={MAX_K}, got {}",
                self.k
            )));
        }
        if !self.hash.allows(self.layout, self.bits, self.k) {
            return Err(Error::InvalidParams(format!(
                "hash {} cannot address a {} filter of {} bits and k = {} (it is for blocked filters of at most 2^32 blocks{})",
                self.hash,
                self.layout,
                self.bits,
                self.k,
                if self.hash == HashId::Xxh3_64Words {
                    " and 16 probes"
                } else {
                    ""
                }
            )));
        }
        check_counts(self.planned_items, self.target_fp).map_err(Error::InvalidParams)?;
        Ok(())
    }

    /// Number of 64-bit words.
    pub fn words(&self) -> u64 {
        self.bits / 64
    }

    /// The false-positive rate a filter of these parameters has after `n`
    /// distinct insertions: its layout's formula for its probes
    /// ([`crate::math::filter_fp`]).
    pub fn predicted_fp(&self, n: f64) -> f64 {
        crate::math::filter_fp(self.layout, self.hash.probes(), self.bits, n, self.k)
    }
}

/// A fresh random seed from the operating system.
pub fn random_seed() -> u64 {
    // getrandom only fails on exotic platforms with no entropy source; fall
    // back to a time-and-address mix rather than refusing to build a filter.
    getrandom::u64().unwrap_or_else(|_| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        xxhash_rust::xxh3::xxh3_64_with_seed(&t.to_le_bytes(), &t as *const u64 as u64)
    })
}

/// Checks what a header says about its sizing: at least one planned item
/// and a rate strictly between 0 and 1 (every plan has both; growth and
/// the rate math take them as given).
pub fn check_counts(planned_items: u64, target_fp: f64) -> std::result::Result<(), String> {
    if planned_items == 0 {
        return Err("planned item count 0".into());
    }
    if !(target_fp > 0.0 && target_fp < 1.0) {
        return Err(format!("target rate {target_fp} (0 < rate < 1)"));
    }
    Ok(())
}

/// Checks a Bloom filter's item count against its size: an item is counted
/// only when it sets a bit that was clear (and a union's count is clamped
/// the same way, see [`crate::Filter::set_items`]), so a filter of `bits` bits
/// never counts more than `bits` items. A larger count is damage, or a
/// header written to make the rate math run away.
pub fn check_items(items: u64, bits: u64) -> std::result::Result<(), String> {
    if items > bits {
        return Err(format!(
            "item count {items} for {bits} bits (at most one per bit)"
        ));
    }
    Ok(())
}
