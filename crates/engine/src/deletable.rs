//! One opener for every kind of filter file, and the one table type of a
//! deletable filter's chain.
//!
//! [`AnyFilter::open`] reads a file's layout code and opens it as what it
//! is: a Bloom filter ([`Filter`], blocked or classic), a counting filter
//! ([`CountingFilter`]) or a cuckoo filter ([`CuckooFilter`]). Front ends
//! (the CLI's `check`/`info`, the server) dispatch on the variant; the
//! accessors here answer what every kind can answer.
//!
//! [`DeletableTable`] is a counting or a cuckoo table, as a deletable
//! filter's [`Chain`](crate::chain::Chain) holds it: made, read and
//! written by its layout ([`DeletableKind`]), and described by the figures
//! a filter's `info` reports. The chain's rules are the [`Table`] trait's.

use std::path::Path;

use crate::counting::CountingFilter;
use crate::cuckoo::CuckooFilter;
use crate::error::Result;
use crate::filter::Filter;
use crate::format::{self, Access, DeletableKind};
use crate::math::{plan_counting, plan_cuckoo, Layout, CUCKOO_MAX_BUCKET_SIZE};
use crate::table::{CuckooFull, Removal, Table};
use crate::{CountingParams, CuckooParams};

/// The kind of filter a file holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FilterKind {
    /// A Bloom filter of the given layout.
    Bloom(Layout),
    /// A counting Bloom filter (deletable).
    Counting,
    /// A cuckoo filter (deletable).
    Cuckoo,
}

impl FilterKind {
    /// The name used in messages and on the command line: `blocked`,
    /// `classic`, `counting`, `cuckoo`.
    pub fn name(self) -> &'static str {
        match self {
            FilterKind::Bloom(layout) => layout.name(),
            FilterKind::Counting => DeletableKind::Counting.name(),
            FilterKind::Cuckoo => DeletableKind::Cuckoo.name(),
        }
    }

    /// True for the kinds that support deletes.
    pub fn deletable(self) -> bool {
        !matches!(self, FilterKind::Bloom(_))
    }
}

impl std::fmt::Display for FilterKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A filter of any kind, as opened from a file.
#[derive(Debug)]
pub enum AnyFilter {
    /// A Bloom filter (blocked or classic).
    Bloom(Filter),
    /// A counting Bloom filter.
    Counting(CountingFilter),
    /// A cuckoo filter.
    Cuckoo(CuckooFilter),
}

impl AnyFilter {
    /// Opens a filter file of any kind. `access` applies to Bloom filters
    /// ([`Filter::open`]); deletable filters are always mapped copy-on-write
    /// and written back whole by their `save` (they are never updated in
    /// place, see `format`), so for them `access` only says whether the
    /// caller means to change them.
    pub fn open(path: impl AsRef<Path>, access: Access) -> Result<AnyFilter> {
        let path = path.as_ref();
        let code = format::peek_layout_code(path)?;
        Ok(match DeletableKind::from_code(code) {
            Some(DeletableKind::Counting) => AnyFilter::Counting(CountingFilter::open(path)?),
            Some(DeletableKind::Cuckoo) => AnyFilter::Cuckoo(CuckooFilter::open(path)?),
            None => AnyFilter::Bloom(Filter::open(path, access)?),
        })
    }

    /// The kind of filter.
    pub fn kind(&self) -> FilterKind {
        match self {
            AnyFilter::Bloom(f) => FilterKind::Bloom(f.params().layout),
            AnyFilter::Counting(_) => FilterKind::Counting,
            AnyFilter::Cuckoo(_) => FilterKind::Cuckoo,
        }
    }

    /// True if the item may be in the filter; false if it certainly is not.
    pub fn contains(&self, item: &[u8]) -> bool {
        match self {
            AnyFilter::Bloom(f) => f.contains(item),
            AnyFilter::Counting(f) => f.contains(item),
            AnyFilter::Cuckoo(f) => f.contains(item),
        }
    }

    /// Items stored (for a Bloom filter, insertions that set a new bit).
    pub fn items(&self) -> u64 {
        match self {
            AnyFilter::Bloom(f) => f.items(),
            AnyFilter::Counting(f) => f.items(),
            AnyFilter::Cuckoo(f) => f.items(),
        }
    }

    /// Items the filter was sized for.
    pub fn planned_items(&self) -> u64 {
        match self {
            AnyFilter::Bloom(f) => f.params().planned_items,
            AnyFilter::Counting(f) => f.params().planned_items,
            AnyFilter::Cuckoo(f) => f.params().planned_items,
        }
    }

    /// The false-positive rate the filter was sized for.
    pub fn target_fp(&self) -> f64 {
        match self {
            AnyFilter::Bloom(f) => f.params().target_fp,
            AnyFilter::Counting(f) => f.params().target_fp,
            AnyFilter::Cuckoo(f) => f.params().target_fp,
        }
    }

    /// The false-positive rate predicted for the items stored now (for a
    /// Bloom filter, from its item count as `Layout::predicted_fp`).
    pub fn predicted_fp(&self) -> f64 {
        match self {
            AnyFilter::Bloom(f) => f.params().predicted_fp(f.items() as f64),
            AnyFilter::Counting(f) => f.predicted_fp(),
            AnyFilter::Cuckoo(f) => f.predicted_fp(),
        }
    }

    /// Bytes of filter data (bits, counters or slots; the header excluded).
    pub fn data_bytes(&self) -> u64 {
        match self {
            AnyFilter::Bloom(f) => f.params().bits / 8,
            AnyFilter::Counting(f) => f.params().bytes(),
            AnyFilter::Cuckoo(f) => f.params().bytes(),
        }
    }

    /// The hash seed.
    pub fn seed(&self) -> u64 {
        match self {
            AnyFilter::Bloom(f) => f.params().seed,
            AnyFilter::Counting(f) => f.params().seed,
            AnyFilter::Cuckoo(f) => f.params().seed,
        }
    }

    /// How keys were normalized (interpreted by `bloomgate-url`).
    pub fn key_kind(&self) -> u8 {
        match self {
            AnyFilter::Bloom(f) => f.params().key_kind,
            AnyFilter::Counting(f) => f.params().key_kind,
            AnyFilter::Cuckoo(f) => f.params().key_kind,
        }
    }

    /// How queries are matched (interpreted by `bloomgate-url`).
    pub fn match_mode(&self) -> u8 {
        match self {
            AnyFilter::Bloom(f) => f.params().match_mode,
            AnyFilter::Counting(f) => f.params().match_mode,
            AnyFilter::Cuckoo(f) => f.params().match_mode,
        }
    }

    /// Reads the whole data and compares it with the header's checksum.
    pub fn verify(&self) -> Result<()> {
        match self {
            AnyFilter::Bloom(f) => f.verify(),
            AnyFilter::Counting(f) => f.verify(),
            AnyFilter::Cuckoo(f) => f.verify(),
        }
    }

    /// Writes the filter to `path` atomically.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        match self {
            AnyFilter::Bloom(f) => f.save(path),
            AnyFilter::Counting(f) => f.save(path),
            AnyFilter::Cuckoo(f) => f.save(path),
        }
    }
}

/// One table of a deletable filter's chain: a cuckoo table, or a counting
/// Bloom filter.
#[derive(Debug)]
pub enum DeletableTable {
    /// A cuckoo table.
    Cuckoo(CuckooFilter),
    /// A counting Bloom filter.
    Counting(CountingFilter),
}

/// Dispatches `$e` on the table inside `$t`, bound to `$f`.
macro_rules! each {
    ($t:expr, $f:ident => $e:expr) => {
        match $t {
            DeletableTable::Cuckoo($f) => $e,
            DeletableTable::Counting($f) => $e,
        }
    };
}

impl DeletableTable {
    /// A table of `layout` for `items` at rate `p`. A cuckoo table has
    /// buckets of `bucket_size` slots (the engine's largest if more) and
    /// gives up after `max_kicks` evictions; a counting filter uses
    /// neither. `key_rules` are the key kind and match mode codes.
    pub fn new(
        layout: DeletableKind,
        items: u64,
        p: f64,
        bucket_size: u16,
        max_kicks: u16,
        seed: u64,
        (key_kind, match_mode): (u8, u8),
    ) -> Result<DeletableTable> {
        let plan_error = |e: crate::PlanError| crate::Error::InvalidParams(e.to_string());
        Ok(match layout {
            DeletableKind::Cuckoo => {
                let b = u32::from(bucket_size).clamp(1, CUCKOO_MAX_BUCKET_SIZE);
                let plan = plan_cuckoo(items, p, b).map_err(plan_error)?;
                let mut params = CuckooParams::from_plan(&plan, seed);
                params.max_kicks = u32::from(max_kicks);
                params.key_kind = key_kind;
                params.match_mode = match_mode;
                DeletableTable::Cuckoo(CuckooFilter::new(params)?)
            }
            DeletableKind::Counting => {
                let plan = plan_counting(items, p).map_err(plan_error)?;
                let mut params = CountingParams::from_plan(&plan, seed);
                params.key_kind = key_kind;
                params.match_mode = match_mode;
                DeletableTable::Counting(CountingFilter::new(params)?)
            }
        })
    }

    /// A table of `layout` from its file image of `len` bytes read from
    /// `r`, straight into the table's memory.
    pub fn read_from(
        layout: DeletableKind,
        r: &mut impl std::io::Read,
        len: u64,
    ) -> Result<DeletableTable> {
        Ok(match layout {
            DeletableKind::Cuckoo => DeletableTable::Cuckoo(CuckooFilter::read_from(r, len)?),
            DeletableKind::Counting => DeletableTable::Counting(CountingFilter::read_from(r, len)?),
        })
    }

    /// A table of `layout` from its file image.
    pub fn from_bytes(layout: DeletableKind, bytes: &[u8]) -> Result<DeletableTable> {
        DeletableTable::read_from(layout, &mut &bytes[..], bytes.len() as u64)
    }

    /// Opens a counting or cuckoo filter file as a table (mapped
    /// copy-on-write, as [`AnyFilter::open`]); `None` for a Bloom filter
    /// file, which is no table.
    pub fn open(path: impl AsRef<Path>) -> Result<Option<DeletableTable>> {
        Ok(match AnyFilter::open(path, Access::ReadOnly)? {
            AnyFilter::Counting(f) => Some(DeletableTable::Counting(f)),
            AnyFilter::Cuckoo(f) => Some(DeletableTable::Cuckoo(f)),
            AnyFilter::Bloom(_) => None,
        })
    }

    /// Writes the table to `path` as a filter file, atomically.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        each!(self, f => f.save(path))
    }

    /// Reads the whole data and compares it with the checksum of the file
    /// it was opened from.
    pub fn verify(&self) -> Result<()> {
        each!(self, f => f.verify())
    }

    /// The kind of filter: counting or cuckoo.
    pub fn kind(&self) -> FilterKind {
        match self {
            DeletableTable::Cuckoo(_) => FilterKind::Cuckoo,
            DeletableTable::Counting(_) => FilterKind::Counting,
        }
    }

    /// The hash seed.
    pub fn seed(&self) -> u64 {
        each!(self, f => f.params().seed)
    }

    /// Items over the items it is sized for (a cuckoo table: the occupied
    /// fraction of its slots).
    pub fn load(&self) -> f64 {
        each!(self, f => f.load())
    }

    /// Cuckoo or counting.
    pub fn layout(&self) -> DeletableKind {
        match self {
            DeletableTable::Cuckoo(_) => DeletableKind::Cuckoo,
            DeletableTable::Counting(_) => DeletableKind::Counting,
        }
    }

    /// The key kind and match mode codes of its header.
    pub fn key_rules(&self) -> (u8, u8) {
        each!(self, f => (f.params().key_kind, f.params().match_mode))
    }

    /// The false-positive rate it was planned for.
    pub fn target_fp(&self) -> f64 {
        each!(self, f => f.params().target_fp)
    }

    /// Items the table is sized for (at its rate).
    pub fn planned(&self) -> u64 {
        each!(self, f => f.params().planned_items)
    }

    /// A cuckoo table's bucket size and kicks.
    pub fn cuckoo_settings(&self) -> Option<(u32, u32)> {
        match self {
            DeletableTable::Cuckoo(f) => Some((f.params().bucket_size, f.params().max_kicks)),
            DeletableTable::Counting(_) => None,
        }
    }

    /// Buckets of a cuckoo table; 128-counter blocks of a counting filter.
    pub fn buckets(&self) -> u64 {
        match self {
            DeletableTable::Cuckoo(f) => f.params().buckets,
            DeletableTable::Counting(f) => f.params().counters / 128,
        }
    }

    /// Fingerprint bits of a cuckoo table; counters per item (k) of a
    /// counting filter.
    pub fn fingerprint_bits(&self) -> u32 {
        match self {
            DeletableTable::Cuckoo(f) => f.params().fingerprint_bits,
            DeletableTable::Counting(f) => f.params().k,
        }
    }

    /// Slots holding a fingerprint, or counters above zero.
    pub fn used_cells(&self) -> u64 {
        match self {
            DeletableTable::Cuckoo(f) => f.items(),
            DeletableTable::Counting(f) => f.nonzero_counters(),
        }
    }

    /// Slots, or counters.
    pub fn cells(&self) -> u64 {
        match self {
            DeletableTable::Cuckoo(f) => f.params().slots(),
            DeletableTable::Counting(f) => f.params().counters,
        }
    }

    /// Counters stuck at their maximum (counting filters; 0 for cuckoo).
    pub fn saturated(&self) -> u64 {
        match self {
            DeletableTable::Cuckoo(_) => 0,
            DeletableTable::Counting(f) => f.saturated_counters(),
        }
    }

    /// The table's own bytes (its file image's data).
    pub fn as_bytes(&self) -> &[u8] {
        each!(self, f => f.as_bytes())
    }

    /// The header of its file image as the table is now (the image is
    /// this header, then [`DeletableTable::as_bytes`]; consistent while the
    /// chain's owner keeps changes out).
    pub fn image_header(&self) -> Vec<u8> {
        each!(self, f => f.image_header())
    }
}

impl Table for DeletableTable {
    fn contains(&self, item: &[u8]) -> bool {
        each!(self, f => f.contains(item))
    }

    fn count(&self, item: &[u8]) -> u64 {
        each!(self, f => Table::count(f, item))
    }

    fn insert(&self, item: &[u8]) -> std::result::Result<bool, CuckooFull> {
        each!(self, f => Table::insert(f, item))
    }

    fn remove(&self, item: &[u8]) -> Removal {
        each!(self, f => f.remove(item))
    }

    /// A cuckoo table refines as [`CuckooFilter::refines`] says; anything
    /// else refines only itself.
    fn refines(&self, coarser: &DeletableTable) -> bool {
        match (self, coarser) {
            (DeletableTable::Cuckoo(a), DeletableTable::Cuckoo(b)) => a.refines(b),
            _ => std::ptr::eq(self, coarser),
        }
    }

    fn next_in_chain(&self, shift: u32) -> Option<Result<DeletableTable>> {
        match self {
            DeletableTable::Cuckoo(f) => {
                Table::next_in_chain(f, shift).map(|t| t.map(DeletableTable::Cuckoo))
            }
            DeletableTable::Counting(_) => None,
        }
    }

    fn items(&self) -> u64 {
        each!(self, f => f.items())
    }

    fn bytes(&self) -> u64 {
        each!(self, f => f.params().bytes())
    }

    fn predicted_fp(&self) -> f64 {
        each!(self, f => f.predicted_fp())
    }
}
