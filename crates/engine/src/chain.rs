//! The chain of tables every deletable filter is: one growing list of
//! [`Table`]s, for the engine's API, the CLI and the server alike.
//!
//! A chain grows like RedisBloom's `CF.RESERVE … EXPANSION e`: an add goes
//! into the newest table with room (newest first, as RedisBloom); when no
//! table has room, a table `e` times as large is appended (`e` rounded up
//! to a power of two; for cuckoo tables the same seed, fingerprint width
//! and bucket size, its buckets those of the last one split,
//! [`crate::CuckooParams::next_in_chain`]) and takes the item. A lookup
//! asks every table, so the false-positive rate is the compound rate of
//! the tables ([`crate::math::compound_fp`]), growing with their number.
//! With `expansion = 0` the chain never grows (RedisBloom's non-scaling
//! filter) and a full table is an error. A counting filter never fills, so
//! a chain of one never grows.
//!
//! A delete takes one copy from the table [`delete_table`] picks: the
//! newest table holding a match that refines every other one holding one.
//! In a chain grown here that is always the newest holding a match, and
//! it takes only the item's own copy or one that the item's own then
//! stands in for (the proof is in `crate::cuckoo`, "Chains"). A chain of
//! tables hashed apart (files from before chains nested, or several
//! counting filters) refuses a delete it cannot tell apart
//! ([`AmbiguousDelete`]) and changes nothing.
//!
//! A chain holds at most [`MAX_TABLES`] tables, however it was made:
//! grown, read from a file, or loaded from a dump. Changing the list of
//! tables takes `&mut self`; the owner serializes writers (the server
//! holds each chain under a lock), and the tables keep their own
//! concurrency rules inside.

use crate::error::{Error, Result};
use crate::math;
use crate::table::{delete_table, AmbiguousDelete, Removal, Table};

/// Most tables in a chain (RedisBloom's default `cf-max-expansions`): an
/// add to a full chain of this many is refused, and a file or a dump that
/// holds more is refused as damaged. Each table is `expansion` times the
/// last, so 32 tables is already astronomically large for any expansion
/// above 1.
pub const MAX_TABLES: usize = 32;

/// What one add to a chain did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainAdd {
    /// A copy was added.
    Added,
    /// Only if absent, and the item was (probably) there: nothing added.
    Exists,
    /// No room, and the chain may not grow (or may not grow more).
    Full,
}

/// Why a chain could not take an item. Nothing was changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError {
    /// No table has room and the chain may not grow (expansion 0, or
    /// [`MAX_TABLES`] tables, or a counting filter).
    #[error("the chain of {tables} table(s) is full and may not grow")]
    Full {
        /// Tables in the chain.
        tables: usize,
    },
    /// A new table could not be made (too large, or out of memory).
    #[error("the chain cannot grow: {0}")]
    Grow(Error),
}

/// A growing chain of tables. See the [module documentation](self).
#[derive(Debug)]
pub struct Chain<T> {
    tables: Vec<T>,
    expansion: u32,
}

/// A chain of cuckoo tables.
pub type CuckooChain = Chain<crate::CuckooFilter>;

impl CuckooChain {
    /// A chain of one empty cuckoo table with `params`, growing by
    /// `expansion` (0 = never).
    pub fn with_params(params: crate::CuckooParams, expansion: u32) -> Result<CuckooChain> {
        Ok(Chain::new(crate::CuckooFilter::new(params)?, expansion))
    }
}

impl<T: Table> Chain<T> {
    /// A chain of one table, growing by `expansion` (0 = never).
    pub fn new(first: T, expansion: u32) -> Chain<T> {
        Chain {
            tables: vec![first],
            expansion,
        }
    }

    /// A chain of existing tables (oldest first), e.g. read from a file:
    /// 1 to [`MAX_TABLES`] of them.
    pub fn from_tables(tables: Vec<T>, expansion: u32) -> Result<Chain<T>> {
        if tables.is_empty() || tables.len() > MAX_TABLES {
            return Err(Error::InvalidParams(format!(
                "a chain holds 1 to {MAX_TABLES} tables, not {}",
                tables.len()
            )));
        }
        Ok(Chain { tables, expansion })
    }

    /// The tables, oldest first.
    pub fn tables(&self) -> &[T] {
        &self.tables
    }

    /// The expansion factor (0 = non-scaling).
    pub fn expansion(&self) -> u32 {
        self.expansion
    }

    /// Number of tables.
    pub fn len(&self) -> usize {
        self.tables.len()
    }

    /// Always false: a chain has at least one table.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// True if any table may hold the item.
    pub fn contains(&self, item: &[u8]) -> bool {
        self.tables.iter().any(|t| t.contains(item))
    }

    /// Copies of the item's fingerprint over all tables (for counting
    /// filters, the sum of each one's smallest counter).
    pub fn count(&self, item: &[u8]) -> u64 {
        self.tables.iter().map(|t| t.count(item)).sum()
    }

    /// Items stored over all tables.
    pub fn items(&self) -> u64 {
        self.tables.iter().map(Table::items).sum()
    }

    /// Bytes of table data over all tables.
    pub fn bytes(&self) -> u64 {
        self.tables.iter().map(Table::bytes).sum()
    }

    /// The compound false-positive rate predicted at the current loads.
    pub fn predicted_fp(&self) -> f64 {
        math::compound_fp(self.tables.iter().map(Table::predicted_fp))
    }

    /// The table the chain would append next, not yet appended: `None`
    /// when it may not grow ([`MAX_TABLES`] tables, expansion 0 unless
    /// `force`, a counting filter, a split past the largest), an error
    /// when the table cannot be made.
    pub fn next_table(&self, force: bool) -> Option<Result<T>> {
        if self.tables.len() >= MAX_TABLES || (!force && self.expansion == 0) {
            return None;
        }
        // The expansion as a power of two (RedisBloom rounds it up too; a
        // file's or a dump's is any u32): 2^shift. Forced growth of a
        // non-scaling chain appends a table of the last one's size.
        let shift = self
            .expansion
            .max(1)
            .checked_next_power_of_two()?
            .trailing_zeros();
        self.tables.last()?.next_in_chain(shift)
    }

    /// Appends the next table if `admit(bytes now, the table)` agrees
    /// (the owner's size and memory limits). Returns whether it grew.
    pub fn grow(&mut self, force: bool, admit: impl FnOnce(u64, &T) -> bool) -> Result<bool> {
        let Some(next) = self.next_table(force) else {
            return Ok(false);
        };
        let table = next?;
        if !admit(self.bytes(), &table) {
            return Ok(false);
        }
        self.tables.push(table);
        Ok(true)
    }

    /// Adds one copy (`nx`: only if absent): into the newest table with
    /// room, else into a new one if the chain may grow and `admit` agrees
    /// (`force`: grows past expansion 0, as a replayed add must).
    pub fn add(
        &mut self,
        item: &[u8],
        nx: bool,
        force: bool,
        mut admit: impl FnMut(u64, &T) -> bool,
    ) -> ChainAdd {
        if nx && self.contains(item) {
            return ChainAdd::Exists;
        }
        loop {
            if self.tables.iter().rev().any(|t| t.insert(item).is_ok()) {
                return ChainAdd::Added;
            }
            match self.grow(force, &mut admit) {
                Ok(true) => continue,
                _ => return ChainAdd::Full,
            }
        }
    }

    /// Adds the item (another copy if present, as `CF.ADD`); returns
    /// whether it was absent from every table before. Grows the chain when
    /// no table has room; fails (changing nothing) if it may not grow.
    pub fn insert(&mut self, item: &[u8]) -> std::result::Result<bool, ChainError> {
        let present = self.contains(item);
        self.insert_new(item, present)
    }

    /// Adds the item only if no table holds it (`CF.ADDNX`); returns
    /// whether it was added.
    pub fn insert_if_absent(&mut self, item: &[u8]) -> std::result::Result<bool, ChainError> {
        if self.contains(item) {
            return Ok(false);
        }
        self.insert_new(item, false)
    }

    fn insert_new(&mut self, item: &[u8], present: bool) -> std::result::Result<bool, ChainError> {
        if self.tables.iter().rev().any(|t| t.insert(item).is_ok()) {
            return Ok(!present);
        }
        let full = |tables| ChainError::Full { tables };
        let table = match self.next_table(false) {
            None => return Err(full(self.len())),
            Some(t) => t.map_err(ChainError::Grow)?,
        };
        table.insert(item).map_err(|_| full(self.len() + 1))?;
        self.tables.push(table);
        Ok(!present)
    }

    /// Deletes one copy of the item, from the table [`delete_table`]
    /// picks. A chain of tables hashed apart refuses a delete it cannot
    /// tell apart, changing nothing; a chain grown here never does.
    pub fn remove(&self, item: &[u8]) -> std::result::Result<Removal, AmbiguousDelete> {
        let t = &self.tables;
        let holding: Vec<usize> = (0..t.len()).filter(|&i| t[i].contains(item)).collect();
        Ok(match delete_table(&holding, |k, j| t[k].refines(&t[j]))? {
            Some(k) => t[k].remove(item),
            None => Removal::NotPresent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{plan_counting, CountingFilter, CuckooFilter, CuckooParams};

    fn tiny(seed: u64) -> CuckooFilter {
        CuckooFilter::new(CuckooParams {
            buckets: 2,
            bucket_size: 2,
            fingerprint_bits: 8,
            max_kicks: 10,
            seed,
            bucket_shift: 0,
            key_kind: 0,
            match_mode: 0,
            planned_items: 4,
            target_fp: 0.01,
        })
        .unwrap()
    }

    /// One limit on the number of tables: a file's chain of more is
    /// refused, and growth stops there even when forced.
    #[test]
    fn a_chain_holds_1_to_max_tables() {
        assert!(Chain::<CuckooFilter>::from_tables(Vec::new(), 1).is_err());
        let many: Vec<CuckooFilter> = (0..=MAX_TABLES as u64).map(tiny).collect();
        assert!(Chain::from_tables(many, 1).is_err());
        let mut c = Chain::new(tiny(1), 1);
        let mut added = 0u32;
        while c.add(&added.to_le_bytes(), false, true, |_, _| true) == ChainAdd::Added {
            added += 1;
        }
        assert_eq!(c.len(), MAX_TABLES);
        assert!(c.next_table(true).is_none());
        // Everything taken is still there.
        assert!((0..added).all(|i| c.contains(&i.to_le_bytes())));
    }

    /// Growth asks the owner first: refused, the add is `Full` and the
    /// chain unchanged; a counting filter never grows.
    #[test]
    fn growth_asks_and_counting_never_grows() {
        let mut c = Chain::new(tiny(2), 2);
        let mut i = 0u32;
        while c.add(&i.to_le_bytes(), false, false, |_, _| false) == ChainAdd::Added {
            i += 1;
        }
        assert_eq!(c.len(), 1);
        let before = c.bytes();
        let admit = |now: u64, t: &CuckooFilter| now == before && t.params().buckets == 4;
        assert_eq!(
            c.add(&i.to_le_bytes(), false, false, admit),
            ChainAdd::Added
        );
        assert_eq!(c.len(), 2);
        let counting = CountingFilter::with_plan(&plan_counting(10, 0.01).unwrap(), 3).unwrap();
        let mut c = Chain::new(counting, 2);
        for i in 0..1000u32 {
            assert_eq!(
                c.add(&i.to_le_bytes(), false, true, |_, _| true),
                ChainAdd::Added
            );
        }
        assert_eq!(c.len(), 1);
        assert!(c.next_table(true).is_none());
        assert_eq!(
            c.add(&7u32.to_le_bytes(), true, false, |_, _| true),
            ChainAdd::Exists
        );
    }
}
