//! Snapshots: every changed filter is rewritten atomically, then the log's
//! older segments are copied into the journals and removed (see
//! [`crate::wal`] for why this order loses nothing).
//!
//! A damaged filter ([`Damaged`]) is never written. Its add records go to
//! its journal like those of any filter that is not served (appended; its
//! journal is never compacted while it is damaged). A segment holding one
//! of its records that the journal cannot take (a cuckoo filter's change,
//! a `BF.LOADCHUNK` chunk, an add when its journal is missing or does not
//! load) is *held*: kept on disk and skipped by later snapshots until the
//! next start, which replays it again (to the repaired filter, if it was
//! repaired meanwhile) and decides afresh.

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
        self.recount_memory();
        let dirty: Vec<Arc<Named>> = self
            .all()
            .into_iter()
            .filter(|n| n.dirty.swap(false, Relaxed))
            .collect();
        let old = self.wal.rotate()?;
        let old: Vec<PathBuf> = {
            let held = lock(&self.held_segments);
            old.into_iter().filter(|p| !held.contains(p)).collect()
        };
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
        let hold = self.journal_segments(&old)?;
        for p in &old {
            if !hold.contains(p) {
                let _ = std::fs::remove_file(p);
            }
        }
        if !hold.is_empty() {
            tracing::warn!(
                "bloomgate serve: keeping {} log segment(s) that hold changes of damaged filters until they are repaired: {}",
                hold.len(),
                hold.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            lock(&self.held_segments).extend(hold.iter().cloned());
        }
        if let Some(p) = old.first() {
            sync_parent(p);
        }
        self.metrics.snapshots.fetch_add(1, Relaxed);
        Ok(SnapshotReport {
            filters_saved: saved,
            segments_removed: old.len() - hold.len(),
        })
    }

    /// Appends every add record of `segments` to the journal of the filter
    /// whose lineage it belongs to. Filters that are not served (deleted, or
    /// damaged) keep theirs if their journal exists and claims the seed.
    /// Returns the segments to keep: those with a record of a damaged
    /// filter that its journal cannot take (see the module doc).
    pub(super) fn journal_segments(
        &self,
        segments: &[PathBuf],
    ) -> Result<Vec<PathBuf>, StoreError> {
        let mut hold = Vec::new();
        if segments.is_empty() {
            return Ok(hold);
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
                let seeds = if n.layers().policy().forgets() {
                    Vec::new()
                } else {
                    lock(&n.lineage).iter().map(|l| l.seed).collect()
                };
                (k.clone(), seeds)
            })
            .collect();
        let mut out: HashMap<String, Vec<u8>> = HashMap::new();
        let mut records = 0u64;
        // Per damaged filter, whether its journal loads (its seeds are then
        // in `seeds`).
        let mut damaged_journal: HashMap<String, bool> = HashMap::new();
        // A segment or journal that cannot be read whole stops the trim:
        // the segments stay until it is repaired.
        let mut failure = None;
        for seg in segments {
            let mut keep = false;
            let rep = wal::read_segment_all(seg, |rec| {
                let (name, seed, key) = match rec {
                    wal::AnyRecord::Bloom(Record::Add { name, seed, key }) => (name, seed, key),
                    wal::AnyRecord::Bloom(Record::Chunk { name, .. })
                    | wal::AnyRecord::Cuckoo(wal::CuckooRecord { name, .. }) => {
                        keep |= self.damaged(&name).is_some();
                        return;
                    }
                    _ => return,
                };
                if !seeds.contains_key(&name) && self.damaged(&name).is_some() {
                    let jpath = journal::path(&self.dir, &name);
                    let loaded = journal::load(&jpath, &self.metrics)
                        .ok()
                        .filter(|c| !c.lineage.is_empty());
                    damaged_journal.insert(name.clone(), loaded.is_some());
                    let mine = loaded.map(|c| c.lineage.iter().map(|l| l.seed).collect());
                    seeds.insert(name.clone(), mine.unwrap_or_default());
                }
                if damaged_journal.get(&name) == Some(&false) {
                    keep = true;
                    return;
                }
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
            if keep {
                hold.push(seg.clone());
            }
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
        Ok(hold)
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
        if self.damaged(name).is_some() {
            // Its journal is only appended to until it is repaired.
            return;
        }
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
        if n.layers().policy().forgets() {
            // Generations live in files the `.meta` names, and the saved
            // chain remembers which ([`Layers::save`]); adds wait meanwhile.
            let _w = lock(&n.write);
            let mut st = n.layers().clone();
            st.save(&base)?;
            n.publish(st);
            *lock(&n.loaded) = file_id(&base);
            return Ok(());
        }
        let st = n.layers();
        for (i, f) in st.layers.iter().enumerate().skip(1) {
            f.save(layer_path(&base, i))?;
        }
        st.layers[0].save(&base)?;
        *lock(&n.loaded) = file_id(&base);
        Ok(())
    }
}
