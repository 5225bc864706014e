//! Where an item lives in a Bloom filter: the one derivation of positions
//! every caller goes through.
//!
//! An item's place depends on the filter's layout, size, seed and hash id
//! ([`HashId`]) and on nothing else. [`Locator`] holds exactly those (with
//! the seeded secret made once, [`SeededHash`]) and answers with a
//! [`Prepared`]: the filter's lookups and inserts, the single-writer path,
//! slices of a filter larger than memory, the CLI's sliced `check`, and
//! filters stored in Redis all take their positions from it, so a hash id
//! cannot be honoured by one of them and forgotten by another.
//!
//! * **Blocked, hash id 1 (XXH3-128)**: block `reduce(hi, blocks)`,
//!   in-block hash the low 32 bits of `lo`, made odd.
//! * **Blocked, hash ids 2 and 3 (XXH3-64)**: one 64-bit hash `h`; block
//!   `reduce(h, blocks)` (its high bits), in-block hash the low 32 bits of
//!   `h`, made odd for id 2, as they are for id 3 (whose probes start at
//!   word `h mod 16`, see `arch`). At most 2³² blocks, so the two never
//!   share a bit.
//! * **Classic (hash id 1 only)**: the two halves of XXH3-128 start the
//!   enhanced double hashing (see `filter.rs`).
//!
//! The in-block probes of a hash are [`crate::arch::block_mask`]'s for the
//! hash id's [`crate::arch::Probes`] ([`HashId::probes`]): anywhere in the
//! block for ids 1 and 2, in consecutive words for id 3.

use crate::arch::{Locate, Probes};
use crate::hash::{reduce, HashId, SeededHash};
use crate::math::{Layout, BLOCK_BITS};
use crate::params::Params;

/// An item's hash, resolved to the place it lives in one filter.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// Blocked: word index of the block. Classic: first double-hashing value.
    pub(crate) a: u64,
    /// Blocked: the 32-bit in-block hash (odd but for hash id 3). Classic:
    /// second value.
    pub(crate) b: u64,
}

/// Places items in filters of one set of parameters (see the module docs).
#[derive(Clone, Debug)]
pub struct Locator {
    hasher: SeededHash,
    id: HashId,
    layout: Layout,
    blocks: u64,
}

impl Locator {
    /// The locator of filters with `params` (which must have passed
    /// [`Params::validate`]).
    pub fn new(params: &Params) -> Locator {
        Locator {
            hasher: SeededHash::new(params.seed),
            id: params.hash,
            layout: params.layout,
            blocks: params.bits / BLOCK_BITS,
        }
    }

    /// The hash function.
    #[inline(always)]
    pub fn id(&self) -> HashId {
        self.id
    }

    /// How the hash spreads an item's probes over its block.
    #[inline(always)]
    pub fn probes(&self) -> Probes {
        self.id.probes()
    }

    /// A blocked item's block among `blocks` and its 32-bit in-block
    /// hash, under hash `id`. The hot loops match on [`Locator::id`] once
    /// and pass the constant, so each loop is compiled for one hash; every
    /// other caller uses [`Locator::block`].
    #[inline(always)]
    pub fn block_as(&self, id: HashId, item: &[u8], blocks: u64) -> (usize, u32) {
        match id {
            HashId::Xxh3_64Words => {
                let h = self.hasher.hash64(item);
                (reduce(h, blocks) as usize, h as u32)
            }
            HashId::Xxh3_64 => {
                let h = self.hasher.hash64(item);
                (reduce(h, blocks) as usize, h as u32 | 1)
            }
            HashId::Xxh3_128 => {
                let h = self.hasher.hash(item);
                (reduce(h.hi, blocks) as usize, h.lo as u32 | 1)
            }
        }
    }

    /// [`Locator::block_as`] with this filter's hash and block count.
    #[inline(always)]
    pub fn block(&self, item: &[u8]) -> (usize, u32) {
        self.block_as(self.id, item, self.blocks)
    }

    /// Hashes `item` and resolves where it lives.
    #[inline(always)]
    pub fn prepare(&self, item: &[u8]) -> Prepared {
        match self.layout {
            Layout::Blocked => {
                let (block, h) = self.block(item);
                Prepared {
                    a: block as u64 * 8,
                    b: h as u64,
                }
            }
            Layout::Classic => {
                let h = self.hasher.hash(item);
                Prepared { a: h.hi, b: h.lo }
            }
        }
    }
}

/// Hash id 3's block and in-block hash of an item of [`INLINE_LENGTHS`],
/// whatever this locator's own hash id: the locator of
/// `arch::WordsItem`, which `Filter::contains` uses only for blocked
/// filters of hash id 3 and sends only such items (a shorter one would
/// panic on its hash's read before its start, a longer one get a wrong
/// block). Crate-internal, so that no other caller can.
impl Locate for Locator {
    #[inline(always)]
    fn locate(&self, item: &[u8]) -> (usize, u32) {
        let h = self.hasher.hash64_17_to_128(item);
        (reduce(h, self.blocks) as usize, h as u32)
    }
}

/// The item lengths whose hash is straight-line code: 17 to 128 bytes, the
/// lengths of URLs and of most keys. The other lengths' hash calls out of
/// line (past 240 bytes), and a call inside a single lookup's function
/// makes it save and restore registers on every lookup.
pub const INLINE_LENGTHS: std::ops::RangeInclusive<usize> = 17..=128;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::{hash_item, hash_item64};
    use crate::math::plan;

    /// The derivation written out once more from the hash functions, as
    /// `docs/file-format.md` states it.
    fn by_the_spec(params: &Params, item: &[u8]) -> Prepared {
        let blocks = params.bits / BLOCK_BITS;
        match (params.layout, params.hash) {
            (Layout::Blocked, HashId::Xxh3_64Words) => {
                let h = hash_item64(params.seed, item);
                Prepared {
                    a: ((h as u128 * blocks as u128) >> 64) as u64 * 8,
                    b: (h as u32) as u64,
                }
            }
            (Layout::Blocked, HashId::Xxh3_64) => {
                let h = hash_item64(params.seed, item);
                Prepared {
                    a: ((h as u128 * blocks as u128) >> 64) as u64 * 8,
                    b: (h as u32 | 1) as u64,
                }
            }
            (Layout::Blocked, HashId::Xxh3_128) => {
                let h = hash_item(params.seed, item);
                Prepared {
                    a: ((h.hi as u128 * blocks as u128) >> 64) as u64 * 8,
                    b: (h.lo as u32 | 1) as u64,
                }
            }
            (Layout::Classic, _) => {
                let h = hash_item(params.seed, item);
                Prepared { a: h.hi, b: h.lo }
            }
        }
    }

    #[test]
    fn every_hash_id_places_items_as_the_format_says() {
        for (layout, hash) in [
            (Layout::Blocked, HashId::Xxh3_64Words),
            (Layout::Blocked, HashId::Xxh3_64),
            (Layout::Blocked, HashId::Xxh3_128),
            (Layout::Classic, HashId::Xxh3_128),
        ] {
            let mut params = Params::from_plan(&plan(layout, 50_000, 1e-4).unwrap(), 0x5eed);
            params.hash = hash;
            params.validate().unwrap();
            let loc = Locator::new(&params);
            assert_eq!(loc.id(), hash);
            for i in 0..2000u32 {
                let item = format!("http://host{i}.example/path/{}", i * 7);
                assert_eq!(
                    loc.prepare(item.as_bytes()),
                    by_the_spec(&params, item.as_bytes()),
                    "{layout} {hash}"
                );
            }
        }
    }
}
