//! What the deletable filters share, and one opener for every kind of filter file.
//!
//! [`AnyFilter::open`] reads a file's layout code and opens it as what it
//! is: a Bloom filter ([`Filter`], blocked or classic), a counting filter
//! ([`CountingFilter`]) or a cuckoo filter ([`CuckooFilter`]). Front ends
//! (the CLI's `check`/`info`, the server) dispatch on the variant; the
//! accessors here answer what every kind can answer.

use std::path::Path;

use crate::counting::CountingFilter;
use crate::cuckoo::CuckooFilter;
use crate::error::Result;
use crate::filter::Filter;
use crate::format::{self, Access, DeletableKind};
use crate::math::Layout;

/// The outcome of a delete.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Removal {
    /// One copy of the item was removed.
    Removed,
    /// The item was not present; nothing was changed.
    NotPresent,
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

/// Which table of a chain a delete takes one copy of an item from.
///
/// `holding` lists the tables that hold a match for the item (its
/// fingerprint in one of its buckets, or all its counters above zero),
/// oldest first; `refines(k, j)` says whether table `k` refines table `j`
/// ([`crate::CuckooFilter::refines`]: two items that share a copy's
/// place in `k` are indistinguishable in `j`; a counting filter refines
/// only itself). The answer is the newest table holding a match that
/// refines every other one holding one; `Ok(None)` if none holds a match.
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
) -> Result<Option<usize>, AmbiguousDelete> {
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
            AnyFilter::Bloom(f) => {
                let p = f.params();
                p.layout.predicted_fp(p.bits, f.items() as f64, p.k)
            }
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
