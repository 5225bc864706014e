//! A filter's lookup counters ([`Counters`]): how many queries it answered
//! and how many of them were hits (the metrics' per-filter counts).
//!
//! Every served filter that counts its lookups holds one: a data
//! directory's Bloom filters, the files served through the library's
//! `List`, a filter in Redis (a deletable filter's lookups are counted by
//! the server's metrics alone). Lookups are counted by the caller once per
//! batch ([`Filter::count`](super::Filter::count)), so that concurrent
//! readers touch the counters' cache line once per batch rather than once
//! per query, and a batch without hits does not touch the hit counter.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A filter's (checks, hits) counters.
#[derive(Debug, Default)]
pub struct Counters {
    checks: AtomicU64,
    hits: AtomicU64,
}

impl Counters {
    /// Adds `checks` lookups, `hits` of which were hits.
    #[inline]
    pub fn count(&self, checks: u64, hits: u64) {
        if checks > 0 {
            self.checks.fetch_add(checks, Relaxed);
        }
        if hits > 0 {
            self.hits.fetch_add(hits, Relaxed);
        }
    }

    /// (checks, hits) so far.
    pub fn get(&self) -> (u64, u64) {
        (self.checks.load(Relaxed), self.hits.load(Relaxed))
    }
}
