//! Snapshots: every changed filter is rewritten atomically, then the log's
//! older segments are copied into the journals and removed (see
//! [`crate::wal`] for why this order loses nothing).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bloomgate_blacklist::layers::layer_path;

use crate::journal;
use crate::wal::{self, Record};

use super::*;

/// A journal is compacted once it is this long and twice its length after
/// its last compaction: it then stays within about twice the size of its
/// distinct adds, and compaction's cost (a read and a rewrite of the
/// journal) is amortized over at least as many bytes of appends.
const JOURNAL_COMPACT_MIN: u64 = 64 << 10;

impl LocalStore {
    /// Rewrites every changed filter atomically and trims the log.
    pub fn snapshot(&self) -> Result<SnapshotReport, StoreError> {
        let _snap = lock(&self.snapshot_lock);
        let dirty: Vec<Arc<Named>> = self
            .all()
            .into_iter()
            .filter(|n| n.dirty.swap(false, Relaxed))
            .collect();
        let old = self.wal.rotate()?;
        let mut failure = None;
        let mut saved = 0;
        for n in &dirty {
            if n.deleted.load(Relaxed) {
                continue;
            }
            match self.save_named(n) {
                Ok(()) => saved += 1,
                Err(e) => {
                    n.dirty.store(true, Relaxed);
                    failure = Some(e);
                }
            }
        }
        // Cuckoo filters: each file holds the sequence number of its last
        // change, so a crash before the trim below replays nothing twice.
        match self.cuckoo.snapshot() {
            Ok(n) => saved += n,
            Err(e) => failure = Some(e),
        }
        if let Some(e) = failure {
            return Err(e);
        }
        // Before the log is trimmed, its adds go to the journals.
        self.journal_segments(&old)?;
        for p in &old {
            let _ = std::fs::remove_file(p);
        }
        if let Some(p) = old.first() {
            sync_parent(p);
        }
        self.metrics.snapshots.fetch_add(1, Relaxed);
        Ok(SnapshotReport {
            filters_saved: saved,
            segments_removed: old.len(),
        })
    }

    /// Appends every add record of `segments` to the journal of the filter
    /// whose lineage it belongs to. Filters that are not served (deleted, or
    /// failed to load) keep theirs if their journal exists and claims the seed.
    pub(super) fn journal_segments(&self, segments: &[PathBuf]) -> Result<(), StoreError> {
        if segments.is_empty() {
            return Ok(());
        }
        // A filter under a forgetting policy journals nothing: its adds are
        // in its saved chain or were forgotten on purpose, and re-inserting
        // old adds would start generations early. (It cannot be reloaded
        // from a rebuilt file, which is what journals are for.)
        let mut seeds: HashMap<String, Vec<u64>> = self
            .filters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, n)| {
                let seeds = if n.state.load().policy().forgets() {
                    Vec::new()
                } else {
                    lock(&n.lineage).iter().map(|l| l.seed).collect()
                };
                (k.clone(), seeds)
            })
            .collect();
        let mut out: HashMap<String, Vec<u8>> = HashMap::new();
        let mut records = 0u64;
        // A segment or journal that cannot be read whole stops the trim:
        // the segments stay until it is repaired.
        let mut failure = None;
        for seg in segments {
            let rep = wal::read_segment(seg, |rec| {
                let Record::Add { name, seed, key } = rec else {
                    return;
                };
                let mine = seeds.entry(name.clone()).or_insert_with(|| {
                    if !valid_name(&name) {
                        return Vec::new();
                    }
                    let jpath = journal::path(&self.dir, &name);
                    if !jpath.exists() {
                        return Vec::new();
                    }
                    match journal::load(&jpath, &self.metrics) {
                        Ok(c) => c.lineage.iter().map(|l| l.seed).collect(),
                        Err(e) => {
                            failure = Some(e);
                            Vec::new()
                        }
                    }
                });
                if mine.contains(&seed) {
                    wal::encode_add(out.entry(name.clone()).or_default(), &name, seed, &key);
                    records += 1;
                }
            })
            .map_err(|e| StoreError::io(seg.display(), e))?;
            rep.check(seg).map_err(|e| StoreError::Files(e.into()))?;
        }
        if let Some(e) = failure {
            return Err(e);
        }
        for (name, buf) in &out {
            let jpath = journal::path(&self.dir, name);
            journal::append(&jpath, buf).map_err(|e| StoreError::io(jpath.display(), e))?;
        }
        self.metrics.journal_records.fetch_add(records, Relaxed);
        for name in out.keys() {
            self.compact_journal(name);
        }
        Ok(())
    }

    /// Compacts `NAME.live` ([`journal::compact`]: each distinct live add
    /// once) when it has grown to [`JOURNAL_COMPACT_MIN`] and twice its
    /// length after its last compaction. Called under the snapshot lock,
    /// which every writer of journals holds. The journal must keep each
    /// distinct add: a reload replaces the snapshot's file with a rebuilt
    /// one that need not contain them, and only the keys can be inserted
    /// into a file of other parameters, seed or key rules. A failed
    /// compaction leaves the journal as it was (the rewrite is atomic).
    pub(super) fn compact_journal(&self, name: &str) {
        let jpath = journal::path(&self.dir, name);
        let Ok(len) = std::fs::metadata(&jpath).map(|m| m.len()) else {
            return;
        };
        let mut bases = lock(&self.journal_base);
        let base = bases.get(name).copied().unwrap_or(0);
        if len < JOURNAL_COMPACT_MIN || len < 2 * base {
            return;
        }
        match journal::compact(&jpath, name) {
            Ok(c) => {
                bases.insert(name.to_string(), c.after);
                self.metrics.journal_compactions.fetch_add(1, Relaxed);
            }
            Err(e) => {
                // Not again before it has doubled once more.
                bases.insert(name.to_string(), len);
                tracing::warn!(
                    "bloomgate serve: compacting {} failed (kept as it was): {e}",
                    jpath.display()
                );
            }
        }
    }

    pub(super) fn save_named(&self, n: &Named) -> Result<(), StoreError> {
        let base = self.base(&n.name);
        if n.state.load().policy().forgets() {
            // Generations live in files the `.meta` names, and the saved
            // chain remembers which ([`Layers::save`]); adds wait meanwhile.
            let _w = lock(&n.write);
            let mut st = (*n.state.load_full()).clone();
            st.save(&base)?;
            n.state.store(Arc::new(st));
            *lock(&n.loaded) = file_id(&base);
            return Ok(());
        }
        let st = n.state.load_full();
        for (i, f) in st.layers.iter().enumerate().skip(1) {
            f.save(layer_path(&base, i))?;
        }
        st.layers[0].save(&base)?;
        *lock(&n.loaded) = file_id(&base);
        Ok(())
    }
}
