//! One served Bloom filter ([`Named`]): the write-ahead log's and the
//! fill policy's state around the library's list.
//!
//! What lookups read is a [`BloomList`] — the library's `List` over the
//! filter's layers and whitelist — published through an [`ArcSwap`], so a
//! lookup is one atomic load and [`BloomList::check_each`]: the verdict
//! `bloomgate check` gives, computed where every list's is. Everything
//! else here is what the server adds to a list: adds logged and
//! acknowledged ([`LocalStore::add`]), growth and generations published as
//! a new list over the new layers ([`Named::publish`]), whitelist edits
//! made by the list on a copy and published once written
//! ([`LocalStore::whitelist`]), the lineage of its journal, the
//! snapshot's dirty flag, the lookup [`Counters`], and [`Info`].

use std::ops::Deref;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwap;
pub use bloomgate_blacklist::layers::Layers;

use bloomgate_blacklist::{VerdictRef, Whitelist};
use bloomgate_list::check::CheckScratch;
use bloomgate_list::BloomList;
use bloomgate_url::{KeyError, KeyKind};

use crate::journal::Lineage;

use super::*;
use crate::store::{Counters, LayerInfo};

/// One served filter.
pub struct Named {
    pub(super) name: String,
    /// Its layers and whitelist as the library's list: what lookups read,
    /// replaced whole (under `write`) after growth, a reload or a
    /// whitelist edit.
    pub(super) list: ArcSwap<BloomList>,
    pub(super) write: Mutex<()>,
    pub(super) dirty: AtomicBool,
    pub(super) deleted: AtomicBool,
    lookups: Counters,
    pub(super) fill_cache: Mutex<Option<(Instant, f64)>>,
    pub(super) loaded: Mutex<Option<FileId>>,
    /// Layer-0 seeds (and key rules) whose log records belong to this
    /// filter: the markers of `NAME.live` (changed under the snapshot lock).
    pub(super) lineage: Mutex<Vec<Lineage>>,
    /// A lineage marker that could not be journaled when the filter was
    /// first served (a full disk): adds are refused until it is, so that no
    /// add is logged under a seed its journal does not claim.
    pub(super) marker: Mutex<Option<Vec<u8>>>,
}

/// Reusable buffers of a filter's lookups (the library's, see
/// [`bloomgate_list::check`]).
pub type LookupScratch = CheckScratch;

/// The layers of a filter's list as it was loaded ([`Named::layers`]): the
/// state stays as it was while this is held.
pub struct LayersGuard(arc_swap::Guard<Arc<BloomList>>);

impl Deref for LayersGuard {
    type Target = Layers;

    fn deref(&self) -> &Layers {
        self.0.layers()
    }
}

impl Named {
    /// The filter `name` of `layers` and `whitelist`, whose first layer's
    /// file is `base`.
    pub(super) fn new(
        name: String,
        base: &Path,
        layers: Layers,
        whitelist: Whitelist,
        loaded: Option<FileId>,
    ) -> Named {
        Named {
            lineage: Mutex::new(vec![layers.lineage()]),
            name,
            list: ArcSwap::from_pointee(BloomList::new(base, layers, whitelist)),
            write: Mutex::new(()),
            dirty: AtomicBool::new(false),
            deleted: AtomicBool::new(false),
            lookups: Counters::default(),
            fill_cache: Mutex::new(None),
            loaded: Mutex::new(loaded),
            marker: Mutex::new(None),
        }
    }

    /// The filter's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its whitelist as it is now (shared with the list: a reference
    /// count, not a copy).
    pub fn whitelisted(&self) -> Whitelist {
        self.list.load().whitelist().clone()
    }

    /// The current layers.
    pub fn layers(&self) -> LayersGuard {
        LayersGuard(self.list.load())
    }

    /// Publishes `layers` (grown, or a new generation) in place of the
    /// current ones, with the same whitelist. Called under the filter's
    /// write lock (or before it is served), so no whitelist edit is lost.
    pub(super) fn publish(&self, layers: Layers) {
        let next = self.list.load().with_layers(layers);
        self.list.store(Arc::new(next));
    }

    /// Answers many queries by the library's verdict
    /// ([`BloomList::check_each`]: the queries' keys by the filter's key
    /// rules, their membership over all layers with the engine's pipelined
    /// batch lookup, the whitelist rule), as the CLI's `check` answers
    /// them: `each` gets one result per query, in order. Not counted: the
    /// caller reports its lookups to [`Named::lookups`] (once per batch, so
    /// that concurrent readers do not contend on the counters' cache line
    /// for every query).
    #[inline]
    pub fn check_many(
        &self,
        queries: &[&[u8]],
        scratch: &mut LookupScratch,
        each: impl FnMut(Result<VerdictRef<'_>, KeyError>),
    ) {
        self.list.load().check_each(queries, scratch, each);
    }

    /// Starts loading the memory a [`Named::check_many`] of a raw `query` will
    /// read, in every layer (a hint; nothing for other key kinds).
    #[inline]
    pub fn prefetch(&self, query: &[u8]) {
        let list = self.list.load();
        let st = list.layers();
        if st.kind == KeyKind::Raw {
            for f in &st.layers {
                f.prefetch(&f.prepare(query));
            }
        }
    }

    /// True while another thread holds the filter's write lock (a reload or
    /// whitelist edit can hold it for a long time): an add would wait.
    pub fn write_busy(&self) -> bool {
        matches!(
            self.write.try_lock(),
            Err(std::sync::TryLockError::WouldBlock)
        )
    }

    /// Its lookup counters.
    pub fn lookups(&self) -> &Counters {
        &self.lookups
    }

    /// Information about the filter. `fill` computes the fill ratio (a full
    /// scan, cached for 30 s); without it the cached value or 0 is reported.
    pub fn info(&self, fill: bool) -> Info {
        let list = self.list.load();
        let st = list.layers();
        let l0 = st.layers[0].params();
        let fill_ratio = self.fill_ratio(st, fill);
        let mut not_fp = 1.0;
        for f in &st.layers {
            not_fp *= 1.0 - f.predicted_fp();
        }
        let (growth, expansion) = match st.growth_meta() {
            None => ("fixed", None),
            Some(m) if m.nonscaling => ("nonscaling", None),
            Some(m) => ("scaling", Some(m.expansion)),
        };
        Info {
            name: self.name.clone(),
            key_kind: st.kind.as_str().into(),
            match_mode: st.mode.as_str().into(),
            layout: l0.layout.name().into(),
            bits: st.layers.iter().map(|f| f.params().bits).sum(),
            k: l0.k,
            items: st.items(),
            capacity: st.capacity(),
            fill_ratio,
            predicted_fp: 1.0 - not_fp,
            target_fp: st.target_fp(),
            layers: st.layers.len(),
            growth: growth.into(),
            expansion,
            policy: st.policy().to_string(),
            size_bytes: st.bytes(),
            whitelist_entries: list.whitelist().len(),
            unsnapshotted_changes: self.dirty.load(Relaxed),
            layer_info: st
                .layers
                .iter()
                .map(|f| {
                    let p = f.params();
                    LayerInfo {
                        bytes: f.as_bytes().len() as u64,
                        bits: p.bits,
                        k: p.k,
                        hash_bits: crate::store::info::hash_bits(p.hash),
                        capacity: p.planned_items,
                        items: f.items(),
                        target_fp: p.target_fp,
                    }
                })
                .collect(),
        }
    }

    fn fill_ratio(&self, st: &Layers, compute: bool) -> f64 {
        let mut cache = self.fill_cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, v)) = *cache {
            if !compute || at.elapsed().as_secs() < 30 {
                return v;
            }
        }
        if !compute {
            return 0.0;
        }
        let ones: u64 = st.layers.iter().map(|f| f.count_ones()).sum();
        let bits: u64 = st.layers.iter().map(|f| f.params().bits).sum();
        let v = ones as f64 / bits.max(1) as f64;
        *cache = Some((Instant::now(), v));
        v
    }
}
