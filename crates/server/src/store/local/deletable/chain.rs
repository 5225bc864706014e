//! A served deletable filter's state: the library's list over the engine's
//! chain of tables ([`TableList`]: lookups, the normalization of items,
//! adds and removes) with what the server adds to it: the parameters it was
//! created with ([`DeletableSpec`]), the incarnation id and the sequence
//! number of its last change (exactly-once replay, see the parent module),
//! and RedisBloom's counters.
//!
//! Growth asks the server first: a new table must fit the size limit and
//! the memory budget ([`Limits`]), except when a replayed add needs it (an
//! acknowledged add is never refused). The chain's own rules (expansion,
//! at most [`bloomgate_engine::MAX_TABLES`] tables, a counting filter never
//! grows) are the engine's.

use bloomgate_blacklist::cf_file::{CfContents, CfHeader, CfLayout, TableImage};
use bloomgate_blacklist::Whitelist;
use bloomgate_engine::{ChainAdd, DeletableTable, Removal, Table};
use bloomgate_list::TableList;

use serde::Serialize;

use crate::store::StoreError;
use crate::Limits;

/// What one add did.
pub type CfAdded = ChainAdd;

pub use bloomgate_blacklist::spec::redisbloom_rate;
pub use bloomgate_blacklist::DeletableSpec;

/// `CF.INFO`'s figures.
#[derive(Clone, Debug, Serialize)]
pub struct CfInfo {
    /// Filter name.
    pub name: String,
    /// Bytes of all sub-filters' tables.
    pub size_bytes: u64,
    /// Buckets of the first sub-filter (RedisBloom's "Number of buckets").
    pub buckets: u64,
    /// Sub-filters.
    pub filters: usize,
    /// Items in the filter (adds less deletes).
    pub items: u64,
    /// Deletes so far.
    pub deletes: u64,
    /// RedisBloom's bucket size parameter.
    pub bucket_size: u16,
    /// Expansion (a power of two, or 0).
    pub expansion: u32,
    /// Kicks before an insert gives up.
    pub max_iterations: u16,
    /// Items the first sub-filter was planned for.
    pub capacity: u64,
    /// False-positive rate each sub-filter was planned for.
    pub error_rate: f64,
    /// Predicted false-positive rate of a lookup now (the sum over the
    /// sub-filters of each one's rate at its load).
    pub predicted_fp: f64,
    /// Fingerprint width in bits (a counting filter: counters per item).
    pub fingerprint_bits: u32,
    /// `cuckoo` or `counting`.
    pub layout: &'static str,
    /// Fraction of the slots holding a fingerprint, or of the counters
    /// above zero.
    pub fill: f64,
    /// Items over the items the sub-filters were sized for.
    pub load: f64,
    /// Counters stuck at 15 (counting filters; never decremented again).
    pub saturated_counters: u64,
    /// How items are normalized (`raw` unless created or built with a kind).
    pub key_kind: &'static str,
    /// How queries are matched.
    pub match_mode: &'static str,
    /// Entries in the whitelist (as a Bloom filter's info says).
    pub whitelist_entries: usize,
}

/// The mutable part of a served deletable filter (under its lock).
pub(super) struct Chain {
    pub(super) id: u64,
    /// Sequence number of the last change applied.
    pub(super) seq: u64,
    pub(super) spec: DeletableSpec,
    pub(super) error_rate: f64,
    /// The tables, the key rules and the whitelist, as the library's list.
    pub(super) list: TableList,
    pub(super) items: u64,
    pub(super) deletes: u64,
}

/// Whether the server has room for `table` beside `now` bytes of the
/// chain's: the size limit, then the memory budget (reserved if so).
fn admit(limits: &Limits, now: u64, table: &DeletableTable) -> Result<(), StoreError> {
    let size = table.bytes();
    if now + size > limits.max_filter_bytes {
        return Err(StoreError::Invalid(format!(
            "a filter of {} bytes exceeds the server's limit of {} bytes",
            now + size,
            limits.max_filter_bytes
        )));
    }
    if limits.memory.reserve(size).is_err() {
        return Err(StoreError::OutOfMemory(format!(
            "a filter of {size} bytes would pass the server's --max-memory of {} bytes",
            limits.memory.limit()
        )));
    }
    Ok(())
}

impl Chain {
    /// A new chain of one table planned for the spec's capacity; refused
    /// if it passes the server's size limit or memory budget.
    pub(super) fn new(spec: &DeletableSpec, limits: &Limits) -> Result<Chain, StoreError> {
        let error_rate = spec.rate();
        let mut spec = spec.clone();
        if spec.layout == CfLayout::Counting {
            // One filter that never fills: nothing to expand.
            spec.expansion = 0;
        }
        // The table is allocated zeroed, untouched (no memory yet); it is
        // kept only if the server's memory budget has room.
        let first = DeletableTable::new(
            spec.layout.kind(),
            spec.capacity,
            error_rate,
            spec.bucket_size,
            spec.max_iterations,
            bloomgate_engine::random_seed(),
            (spec.kind.as_u8(), spec.mode.as_u8()),
        )
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
        admit(limits, 0, &first)?;
        Ok(Chain {
            id: bloomgate_engine::random_seed(),
            seq: 0,
            list: list_of(bloomgate_engine::Chain::new(first, spec.expansion), &spec),
            spec,
            error_rate,
            items: 0,
            deletes: 0,
        })
    }

    /// The engine's chain of tables.
    pub(super) fn tables(&self) -> &bloomgate_engine::Chain<DeletableTable> {
        self.list.chain()
    }

    /// Bytes of its tables.
    pub(super) fn bytes(&self) -> u64 {
        self.tables().bytes()
    }

    /// Whether any table may hold the normalized key.
    #[cfg(test)]
    pub(super) fn contains(&self, key: &[u8]) -> bool {
        self.tables().contains(key)
    }

    /// Copies of the normalized key over the tables.
    #[cfg(test)]
    pub(super) fn count(&self, key: &[u8]) -> u64 {
        self.tables().count(key)
    }

    /// Adds one copy: into the newest table with room (newest first, as
    /// RedisBloom), else into a new one if the chain may grow and the
    /// server has room. `replay`: grows whatever the expansion, the size
    /// limit and the budget say (an acknowledged add must not be lost).
    pub(super) fn add(&mut self, item: &[u8], nx: bool, limits: &Limits, replay: bool) -> CfAdded {
        let r = self.list.add_key(item, nx, replay, |now, t| {
            if replay {
                return true;
            }
            match admit(limits, now, t) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!("bloomgate serve: a cuckoo filter cannot grow: {e}");
                    false
                }
            }
        });
        if r == CfAdded::Added {
            self.items += 1;
        }
        r
    }

    /// Deletes one copy, from the table the engine's rule picks. Returns
    /// whether one was found; an error (nothing changed) if the tables
    /// holding a match were hashed apart ([`bloomgate_list::Error::Ambiguous`]).
    pub(super) fn delete(&mut self, item: &[u8]) -> Result<bool, bloomgate_list::Error> {
        if self.list.remove_key(item)? != Removal::Removed {
            return Ok(false);
        }
        self.items = self.items.saturating_sub(1);
        self.deletes += 1;
        Ok(true)
    }

    pub(super) fn info(&self, name: &str) -> CfInfo {
        let t = self.tables().tables();
        CfInfo {
            name: name.into(),
            size_bytes: self.bytes(),
            buckets: t.first().map_or(0, |s| s.buckets()),
            filters: t.len(),
            items: self.items,
            deletes: self.deletes,
            bucket_size: self.spec.bucket_size,
            expansion: self.spec.expansion,
            max_iterations: self.spec.max_iterations,
            capacity: self.spec.capacity,
            error_rate: self.error_rate,
            predicted_fp: t.iter().map(Table::predicted_fp).sum::<f64>().min(1.0),
            fingerprint_bits: t.first().map_or(0, |s| s.fingerprint_bits()),
            layout: self.spec.layout.name(),
            fill: t.iter().map(|s| s.used_cells()).sum::<u64>() as f64
                / t.iter().map(|s| s.cells()).sum::<u64>().max(1) as f64,
            load: self.items as f64 / t.iter().map(|s| s.planned()).sum::<u64>().max(1) as f64,
            saturated_counters: t.iter().map(|s| s.saturated()).sum(),
            key_kind: self.spec.kind.as_str(),
            match_mode: self.spec.mode.as_str(),
            whitelist_entries: self.list.list().whitelist().len(),
        }
    }

    /// The header and each table's image, its data the table's own
    /// memory (no copy): consistent while the caller holds the chain's
    /// lock, which keeps every change out.
    pub(super) fn image(&self) -> (CfHeader, Vec<TableImage<'_>>) {
        let body: Vec<TableImage<'_>> = self.tables().tables().iter().map(TableImage::of).collect();
        let mut h = CfHeader {
            layout: self.spec.layout,
            id: self.id,
            seq: self.seq,
            capacity: self.spec.capacity,
            bucket_size: self.spec.bucket_size,
            max_iterations: self.spec.max_iterations,
            expansion: self.spec.expansion,
            error_rate: self.error_rate,
            items: self.items,
            deletes: self.deletes,
            subs: Vec::new(),
            body_hash: 0,
            bgf: None,
        };
        h.describe(&body);
        (h, body)
    }

    /// The chain a file or a dump holds.
    pub(super) fn from_contents(c: CfContents) -> Result<Chain, String> {
        let h = c.header;
        let tables = bloomgate_engine::Chain::from_tables(c.tables, h.expansion)
            .map_err(|e| e.to_string())?;
        let spec = DeletableSpec {
            layout: h.layout,
            capacity: h.capacity,
            bucket_size: h.bucket_size,
            max_iterations: h.max_iterations,
            expansion: h.expansion,
            error_rate: Some(h.error_rate),
            kind: c.kind,
            mode: c.mode,
        };
        Ok(Chain {
            id: h.id,
            seq: h.seq,
            list: list_of(tables, &spec),
            spec,
            error_rate: h.error_rate,
            items: h.items,
            deletes: h.deletes,
        })
    }

    /// A chain serving a deletable filter file built by the CLI (`bloomgate
    /// build --layout counting|cuckoo`), from the file's bytes: one table,
    /// its key rules, never grown (`EXPANSION 0`, as the CLI's `add` stops
    /// at a full table).
    pub(super) fn import(layout: CfLayout, bytes: &[u8]) -> Result<Chain, String> {
        let table = DeletableTable::from_bytes(layout.kind(), bytes).map_err(|e| e.to_string())?;
        let (kind, mode) = bloomgate_blacklist::cf_file::key_rules(std::slice::from_ref(&table))
            .map_err(|e| e.to_string())?;
        let (bucket_size, max_iterations) = table.cuckoo_settings().map_or(
            (
                DeletableSpec::DEFAULT_BUCKET_SIZE,
                DeletableSpec::DEFAULT_MAX_ITERATIONS,
            ),
            |(b, k)| (b as u16, k.min(u32::from(u16::MAX)) as u16),
        );
        let error_rate = table.target_fp();
        let items = Table::items(&table);
        let spec = DeletableSpec {
            layout,
            capacity: table.planned(),
            bucket_size,
            max_iterations,
            expansion: 0,
            error_rate: Some(error_rate),
            kind,
            mode,
        };
        Ok(Chain {
            id: bloomgate_engine::random_seed(),
            seq: 0,
            list: list_of(bloomgate_engine::Chain::new(table, 0), &spec),
            spec,
            error_rate,
            items,
            deletes: 0,
        })
    }
}

/// The library's list over `tables` with the key rules of `spec` (its
/// whitelist, if it has one, is set once read: [`TableList::set_whitelist`]).
fn list_of(tables: bloomgate_engine::Chain<DeletableTable>, spec: &DeletableSpec) -> TableList {
    TableList::new(tables, (spec.kind, spec.mode), Whitelist::default())
}
