//! bloomgate's own filters as subjects: the blocked and classic layouts,
//! timed through the single-writer inserts and the public lookups.

use std::sync::OnceLock;

use bloomgate_bench::advise_hugepages;
use bloomgate_engine::{Filter, HashId, Layout, Params};
use rayon::prelude::*;

use crate::subject::{for_key_chunks, Subject, SEED, TARGET_FP};

/// The hash id `--hash-id` asks bloomgate's blocked filters to use instead
/// of the one a new filter gets ([`HashId::for_filter`]); set once by `main`.
pub(crate) static FORCED_HASH: OnceLock<HashId> = OnceLock::new();

/// The hash bloomgate's filters of `layout`, `bits` and `k` are built with
/// here.
pub(crate) fn hash_for(layout: Layout, bits: u64, k: u32) -> HashId {
    match FORCED_HASH.get() {
        Some(&h) if layout == Layout::Blocked => h,
        _ => HashId::for_filter(layout, bits, k),
    }
}

pub(crate) struct Ours {
    pub(crate) f: Filter,
    label: &'static str,
}

impl Ours {
    pub(crate) fn new(layout: Layout, bits: u64, n: u64, thp: bool) -> Ours {
        let k = layout.best_k(bits, n as f64);
        let f = Filter::new(Params {
            layout,
            bits,
            k,
            seed: SEED,
            hash: hash_for(layout, bits, k),
            key_kind: 0,
            match_mode: 0,
            planned_items: n,
            target_fp: TARGET_FP,
        })
        .expect("filter");
        if thp {
            let b = f.as_bytes();
            assert!(advise_hugepages(b.as_ptr(), b.len()), "madvise failed");
        }
        let label = match (layout, thp) {
            (Layout::Blocked, false) => "bloomgate-blocked",
            (Layout::Blocked, true) => "bloomgate-blocked+THP",
            (Layout::Classic, false) => "bloomgate-classic",
            (Layout::Classic, true) => "bloomgate-classic+THP",
        };
        Ours { f, label }
    }
}

impl Subject for Ours {
    fn name(&self) -> String {
        self.label.into()
    }
    fn bits(&self) -> u64 {
        self.f.params().bits
    }
    fn k(&self) -> String {
        self.f.params().k.to_string()
    }
    fn predicted_fp(&self, n: u64) -> f64 {
        self.f.predicted_fp_for(n)
    }
    /// The single-writer path: the harness owns the filter, as sbbf-rs's
    /// inserts own their buffer (`&mut`).
    fn insert(&mut self, key: &[u8]) {
        self.f.insert_owned(key);
    }
    fn contains(&self, key: &[u8]) -> bool {
        self.f.contains(key)
    }
    fn has_batch(&self) -> bool {
        true
    }
    fn insert_all_batch(&mut self, keys: &[&[u8]]) {
        self.f.insert_batch_owned(keys);
    }
    fn has_shared(&self) -> bool {
        self.f.params().layout == Layout::Blocked
    }
    fn insert_all_shared(&mut self, keys: &[&[u8]], batched: bool) {
        if batched {
            self.f.insert_batch(keys);
        } else {
            for k in keys {
                self.f.insert(k);
            }
        }
    }
    fn memory(&self) -> Option<(*const u8, usize)> {
        let b = self.f.as_bytes();
        Some((b.as_ptr(), b.len()))
    }
    fn count_batch(&self, keys: &[&[u8]], out: &mut Vec<bool>) -> u64 {
        self.f.contains_batch(keys, out);
        out.iter().filter(|&&b| b).count() as u64
    }
    fn fill(&mut self, lo: u64, hi: u64) {
        // Lock-free inserts: use every core (untimed).
        let f = &self.f;
        let chunk = 1u64 << 20;
        let n_chunks = (hi - lo).div_ceil(chunk);
        (0..n_chunks).into_par_iter().for_each(|c| {
            let s = lo + c * chunk;
            let e = (s + chunk).min(hi);
            for_key_chunks(s, e, |keys| {
                f.insert_batch(keys);
            });
        });
    }
}
