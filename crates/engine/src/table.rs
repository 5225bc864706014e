//! What a deletable table is, to the chain that holds it.
//!
//! A deletable filter is a chain of tables ([`crate::chain::Chain`]): cuckoo
//! tables ([`crate::CuckooFilter`]) that grow by appending, or one counting
//! Bloom filter ([`crate::CountingFilter`]) that never fills. [`Table`] is
//! the little a chain needs of a table: look up, count, add a copy, take a
//! copy, say whether a delete may take a copy from it although another
//! table holds a match too ([`Table::refines`]), and make the table that
//! comes after it. The rule that picks the table a delete takes from is
//! [`delete_table`]; its proof is in `crate::cuckoo`, "Chains".
//!
//! This module imports no table: the tables import it (so that `cuckoo`,
//! `counting` and `deletable`, which names them all, import no one in a
//! circle).

use crate::error::Result;

/// The outcome of a delete.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Removal {
    /// One copy of the item was removed.
    Removed,
    /// The item was not present; nothing was changed.
    NotPresent,
}

/// An insert found no room: both buckets were full and `kicks` evictions did
/// not free a slot. Every eviction was undone; the table is unchanged.
/// (Only a cuckoo table is ever full: a counting filter takes every add.)
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the cuckoo filter is full: no room after {kicks} evictions (nothing was changed)")]
pub struct CuckooFull {
    /// Evictions tried.
    pub kicks: u32,
}

/// A delete in a chain of tables that cannot tell which table's copy is
/// the item's: its fingerprint is in tables hashed apart. Nothing was
/// changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot delete safely: the item matches in {} tables of the chain that were hashed \
     separately (tables {tables:?}, oldest is 0), so a delete cannot tell which copy is \
     the item's, and taking another item's copy would make that item a false negative; \
     nothing was deleted",
    tables.len()
)]
pub struct AmbiguousDelete {
    /// The tables holding a match, oldest first (0 = the oldest).
    pub tables: Vec<usize>,
}

/// One table of a deletable filter's chain: a cuckoo table or a counting
/// Bloom filter. Every method takes `&self`: the tables keep their own
/// concurrency rules (atomic counters, a writer lock).
pub trait Table: Sized {
    /// True if the item may be in the table.
    fn contains(&self, item: &[u8]) -> bool;
    /// Matching fingerprints (cuckoo) or the smallest counter (counting):
    /// an upper bound of the item's copies.
    fn count(&self, item: &[u8]) -> u64;
    /// Adds a copy; returns whether the item was absent. An error (a full
    /// cuckoo table) leaves the table unchanged.
    fn insert(&self, item: &[u8]) -> std::result::Result<bool, CuckooFull>;
    /// Removes one copy of the item if it holds a match.
    fn remove(&self, item: &[u8]) -> Removal;
    /// Whether a delete may take a copy from this table although `coarser`
    /// holds a match too ([`crate::CuckooFilter::refines`]; a counting
    /// filter refines only itself).
    fn refines(&self, coarser: &Self) -> bool;
    /// The table a chain appends after this one, every bucket split in
    /// `2^shift`; `None` if there is none (a counting filter never grows,
    /// or the split would be too large).
    fn next_in_chain(&self, shift: u32) -> Option<Result<Self>>;
    /// Items stored (copies added less copies removed).
    fn items(&self) -> u64;
    /// Bytes of table data.
    fn bytes(&self) -> u64;
    /// The false-positive rate predicted at the table's load.
    fn predicted_fp(&self) -> f64;
}

/// Which table of a chain a delete takes one copy of an item from.
///
/// `holding` lists the tables that hold a match for the item (its
/// fingerprint in one of its buckets, or all its counters above zero),
/// oldest first; `refines(k, j)` says whether table `k` refines table `j`
/// ([`Table::refines`]: two items that share a copy's place in `k` are
/// indistinguishable in `j`; a counting filter refines only itself). The
/// answer is the newest table holding a match that refines every other
/// one holding one; `Ok(None)` if none holds a match.
///
/// Why this takes only the item's own copy, or a copy that the item's own
/// then stands in for, is argued in `crate::cuckoo` ("Chains"). A table
/// that refines no other (counting filters, or cuckoo tables hashed apart)
/// is chosen only when it is the one holding a match: then the item's copy
/// must be there. Otherwise [`AmbiguousDelete`]: a delete that may take
/// another item's copy is refused rather than risk a false negative.
pub fn delete_table(
    holding: &[usize],
    refines: impl Fn(usize, usize) -> bool,
) -> std::result::Result<Option<usize>, AmbiguousDelete> {
    if holding.is_empty() {
        return Ok(None);
    }
    holding
        .iter()
        .rev()
        .find(|&&k| holding.iter().all(|&j| refines(k, j)))
        .map(|&k| Some(k))
        .ok_or_else(|| AmbiguousDelete {
            tables: holding.to_vec(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The newest table that refines every other holding table is chosen;
    /// none such is a refusal; no holding table is `None`.
    #[test]
    fn delete_table_picks_the_newest_refining_table() {
        assert_eq!(delete_table(&[], |_, _| false), Ok(None));
        assert_eq!(delete_table(&[0, 2], |_, _| true), Ok(Some(2)));
        assert_eq!(delete_table(&[3], |k, j| k == j), Ok(Some(3)));
        assert_eq!(
            delete_table(&[0, 1], |k, j| k == j),
            Err(AmbiguousDelete { tables: vec![0, 1] })
        );
        // Table 2 does not refine 0, table 1 does: 1 is taken.
        assert_eq!(
            delete_table(&[0, 1, 2], |k, j| k == j || (k == 1) || (k == 2 && j == 1)),
            Ok(Some(1))
        );
    }
}
