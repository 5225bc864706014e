//! One served filter ([`Named`]): its layers and whitelist, published
//! lock-free for lookups; batched lookups (the library's verdict) with
//! prefetch; lookup counters; [`Info`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwap;
pub use bloomgate_blacklist::layers::Layers;
use std::convert::Infallible;

use bloomgate_blacklist::{VerdictRef, Whitelist};
use bloomgate_list::check::{check_many, CheckScratch};
use bloomgate_url::{KeyError, KeyKind};

use crate::journal::Lineage;

use super::*;
use crate::store::LayerInfo;

/// One served filter.
pub struct Named {
    pub(super) name: String,
    pub(super) state: ArcSwap<Layers>,
    pub(super) whitelist: ArcSwap<Whitelist>,
    pub(super) write: Mutex<()>,
    pub(super) dirty: AtomicBool,
    pub(super) deleted: AtomicBool,
    pub(super) checks: AtomicU64,
    pub(super) hits: AtomicU64,
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

impl Named {
    pub(super) fn new(
        name: String,
        layers: impl Into<Arc<Layers>>,
        whitelist: Whitelist,
        loaded: Option<FileId>,
    ) -> Named {
        let layers: Arc<Layers> = layers.into();
        Named {
            lineage: Mutex::new(vec![layers.lineage()]),
            name,
            state: ArcSwap::new(layers),
            whitelist: ArcSwap::from_pointee(whitelist),
            write: Mutex::new(()),
            dirty: AtomicBool::new(false),
            deleted: AtomicBool::new(false),
            checks: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            fill_cache: Mutex::new(None),
            loaded: Mutex::new(loaded),
            marker: Mutex::new(None),
        }
    }

    /// The filter's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current layers.
    pub fn layers(&self) -> arc_swap::Guard<Arc<Layers>> {
        self.state.load()
    }

    /// Answers many queries by the library's verdict
    /// ([`bloomgate_list::check::check_many`]: the queries' keys by the
    /// filter's key rules, their membership over all layers with the
    /// engine's pipelined batch lookup, the whitelist rule), as the CLI's
    /// `check` answers them: `each` gets one result per query, in order.
    /// Not counted: the caller reports its lookups with [`Named::count`]
    /// (once per batch, so that concurrent readers do not contend on the
    /// counters' cache line for every query).
    #[inline]
    pub fn check_many(
        &self,
        queries: &[&[u8]],
        scratch: &mut LookupScratch,
        each: impl FnMut(Result<VerdictRef<'_>, KeyError>),
    ) {
        let st = self.state.load();
        let wl = self.whitelist.load();
        let looked_up = check_many::<Infallible>(
            st.kind,
            st.mode,
            &wl,
            queries,
            scratch,
            |keys, found, spare| {
                st.contains_batch(keys, found, spare);
                Ok(())
            },
            each,
        );
        let Ok(()) = looked_up;
    }

    /// Starts loading the memory a [`Named::check_many`] of a raw `query` will
    /// read, in every layer (a hint; nothing for other key kinds).
    #[inline]
    pub fn prefetch(&self, query: &[u8]) {
        let st = self.state.load();
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

    /// Adds to the filter's lookup counters (see [`Named::counters`]).
    #[inline]
    pub fn count(&self, checks: u64, hits: u64) {
        if checks > 0 {
            self.checks.fetch_add(checks, Relaxed);
        }
        if hits > 0 {
            self.hits.fetch_add(hits, Relaxed);
        }
    }

    /// Information about the filter. `fill` computes the fill ratio (a full
    /// scan, cached for 30 s); without it the cached value or 0 is reported.
    pub fn info(&self, fill: bool) -> Info {
        let st = self.state.load();
        let l0 = st.layers[0].params();
        let fill_ratio = self.fill_ratio(&st, fill);
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
            whitelist_entries: self.whitelist.load().len(),
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

    /// (checks, hits) counters.
    pub fn counters(&self) -> (u64, u64) {
        (self.checks.load(Relaxed), self.hits.load(Relaxed))
    }
}
