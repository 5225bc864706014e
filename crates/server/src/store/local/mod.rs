//! The named filters of a data directory, their live updates and their files.
//!
//! # Files
//!
//! A filter's files (`NAME.bgf`, its further layers `NAME.bgf.layerN`, its
//! growth settings `NAME.bgf.meta`, its whitelist) and how a scaling filter
//! grows are [`bloomgate_blacklist::layers`], shared with the CLI so that
//! both read the same filter the same way. The server adds:
//!
//! | file | what |
//! |---|---|
//! | `NAME.live` | the journal of live adds trimmed from the log ([`crate::journal`]) |
//! | `NAME.cf` | a deletable (cuckoo or counting) filter, with the log position it includes ([`deletable`]) |
//! | `.bloomgate-wal/wal-N.log` | the write-ahead log ([`crate::wal`]) |
//! | `.bloomgate-wal/lock` | held (`flock`) while the server runs ([`DirLock`]) |
//!
//! # Live adds survive reloads
//!
//! An acknowledged add is never lost: a snapshot copies the add records it
//! trims from the log into `NAME.live` (fsynced) before deleting the log
//! segments, and every time a filter file is (re)loaded — HTTP reload,
//! SIGHUP, startup — the journal and the filter's not-yet-trimmed log
//! records are inserted into the new layers *before* they are published.
//! Log records are matched to a filter by the seeds of its lineage (see
//! [`crate::journal`]), so records made before a reload still count after
//! it, while those of a deleted filter do not come back with a new one of
//! the same name. Only a reload with `drop_live_adds` (which resets the
//! journal) or deleting the filter discards them.
//!
//! # Growth
//!
//! Filters with growth settings behave like RedisBloom's scalable filters
//! ([`Layers::insert`]): `NONSCALING` filters refuse with `ERR non scaling
//! filter is full`; filters built with the CLI are *fixed* and accept adds
//! past their planned size, with a rising false-positive rate that `info`
//! reports.
//!
//! # Concurrency
//!
//! Lookups are lock-free: a filter's layers and whitelist are published
//! together as the library's list ([`bloomgate_list::BloomList`], through
//! an [`arc_swap::ArcSwap`]) and the bit arrays are atomic. Adds, growth
//! and whitelist edits of one filter are serialized by a mutex (adds are
//! bounded by the log's fsync anyway). Snapshots, deletes, reloads and
//! creations are serialized with each other by the store's snapshot lock, so
//! a snapshot can never write an old filter over a freshly reloaded file or
//! resurrect a deleted one.
//!
//! All layer-0 files are mapped copy-on-write ([`Access::ReadOnly`]): live
//! adds change only this process's pages, the log makes them durable, and a
//! snapshot writes a new file with `Filter::save` (atomic rename).
//!
//! # Damaged filters
//!
//! A filter whose files fail to load at startup (a flipped byte, a short
//! or empty file, a damaged layer, a garbage `.meta` or whitelist, a
//! damaged `NAME.cf`) is kept as a [`Damaged`] entry, not dropped: an
//! absent name would answer "not in the list" for every item the filter
//! holds and let the next add create an empty filter over it. Every
//! command on the name gets [`StoreError::Damaged`]; no create, delete or
//! snapshot touches its files or its journal (a snapshot appends the log's
//! adds of the filter to the journal, as for any filter that is not
//! served, and keeps a log segment whose records of it cannot be put
//! there, see [`snapshot`]). A reload (SIGHUP, HTTP) retries it as it
//! stands on disk, so a restored or rebuilt file is served again with its
//! journal's adds; removing its files and reloading discards it.
//!
//! # Stale temporaries
//!
//! Files are replaced by writing a temporary beside them (`NAME.tmp-PID`,
//! `NAME.bgf.tmp-PID-RANDOM`) and renaming it; a crash between the two
//! leaves the temporary behind. [`temporaries::remove_stale_temporaries`] deletes them
//! at startup.
//!
//! # Other layouts
//!
//! A file of any other layout (the static ribbon layout) is served as the
//! library's [`bloomgate_list::List`] opens it, read-only ([`listed`]).
//!
//! The store's files are in this module and its children: [`named`] (one
//! filter), [`growth`], [`replay`], [`snapshot`], [`reload`], [`dump`],
//! [`listed`].

pub(crate) mod deletable;
pub(crate) mod dump;
mod growth;
mod listed;
mod named;
mod reload;
mod replay;
mod snapshot;
mod temporaries;

/// The files `NAME.ext` of the data directory `dir` whose `NAME` is valid
/// (others are skipped with a warning), as `(NAME, path)`.
fn named_files(
    dir: &Path,
    ext: &str,
    valid_name: impl Fn(&str) -> bool,
) -> Result<Vec<(String, PathBuf)>, StoreError> {
    let rd = std::fs::read_dir(dir).map_err(|e| {
        StoreError::io(
            format_args!("{}: cannot read data directory", dir.display()),
            e,
        )
    })?;
    let mut out = Vec::new();
    for e in rd.flatten() {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some(ext) || !path.is_file() {
            continue;
        }
        let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
            continue;
        };
        if !valid_name(&name) {
            tracing::warn!(
                "bloomgate serve: skipping {}: unusable name",
                path.display()
            );
            continue;
        }
        out.push((name, path));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{
    AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::{Arc, Mutex, RwLock};

use bloomgate_blacklist::datadir::DirLock;
use bloomgate_blacklist::layers::{layer_path, meta_path};
pub use bloomgate_blacklist::layers::{FillPolicy, Layers, Meta};
use bloomgate_blacklist::FilterSpec;
use bloomgate_blacklist::Whitelist;
use bloomgate_engine::atomic::{sync_parent, write_atomic};
use bloomgate_engine::{Access, Filter, Params};
use bloomgate_url::{entry_key, KeyError};

use crate::journal::{self, Lineage};
use crate::metrics::Metrics;
use crate::wal::{self, AckRx, Wal};
use crate::Limits;

use super::{sorted_by_name, AddOutcome, Damaged, Info, SnapshotReport, StoreError};

use growth::add_key;
pub use listed::Listed;
pub use named::{LookupScratch, Named};
use replay::apply_replay;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct FileId {
    len: u64,
    mtime: Option<std::time::SystemTime>,
    #[cfg(unix)]
    ino: u64,
}

fn file_id(path: &Path) -> Option<FileId> {
    let m = std::fs::metadata(path).ok()?;
    Some(FileId {
        len: m.len(),
        mtime: m.modified().ok(),
        #[cfg(unix)]
        ino: std::os::unix::fs::MetadataExt::ino(&m),
    })
}

/// All served filters plus the log.
pub struct LocalStore {
    dir: PathBuf,
    filters: RwLock<HashMap<String, Arc<Named>>>,
    /// Bumped after every change of `filters` (see [`LocalStore::generation`]).
    generation: AtomicU64,
    wal: Arc<Wal>,
    limits: Limits,
    metrics: Arc<Metrics>,
    snapshot_lock: Mutex<()>,
    /// Per journal, its length after it was last compacted (under the
    /// snapshot lock; see [`LocalStore::compact_journal`]).
    journal_base: Mutex<HashMap<String, u64>>,
    /// The deletable filters (`NAME.cf`, see [`deletable`]).
    cuckoo: Box<deletable::Deletables>,
    /// The files of other layouts, served through the library's `List`
    /// ([`listed`]).
    listed: listed::ListedMap,
    /// The filters whose files failed to load, by name (see the module
    /// doc); changed under the snapshot lock.
    damaged: RwLock<HashMap<String, Damaged>>,
    /// Whether `damaged` is not empty (read by every command first).
    any_damaged: AtomicBool,
    /// Log segments a snapshot keeps because they hold records of a
    /// damaged filter that its journal cannot take (under the snapshot
    /// lock): later snapshots neither journal them again nor delete them
    /// while the filter is damaged.
    held_segments: Mutex<std::collections::HashSet<PathBuf>>,
    /// Held while the store is open: no second server, and no CLI writer.
    _dir_lock: DirLock,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Loads a filter's layers, meta and whitelist from `base` (`NAME.bgf`).
fn load_layers(base: &Path) -> Result<(Layers, Whitelist), StoreError> {
    let layers = Layers::open(base, Access::ReadOnly)?;
    let whitelist =
        Whitelist::load(&Whitelist::path_for(base)).map_err(bloomgate_blacklist::Error::from)?;
    Ok((layers, whitelist))
}

impl LocalStore {
    /// Opens every `*.bgf` in `dir`, replays the log and snapshots what it replayed.
    pub fn open(
        dir: &Path,
        limits: Limits,
        metrics: Arc<Metrics>,
    ) -> Result<LocalStore, StoreError> {
        if !dir.is_dir() {
            return Err(StoreError::io(
                format_args!("{}: cannot read data directory", dir.display()),
                std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
            ));
        }
        let dir_lock = DirLock::acquire_waiting(dir, std::time::Duration::from_secs(2))?;
        temporaries::remove_stale_temporaries(dir);
        let mut filters = HashMap::new();
        let mut damaged = Vec::new();
        for (name, path) in named_files(dir, "bgf", valid_name)? {
            if deletable::deletable_layout(&path).is_some() || listed::served_by_list(&path) {
                // Counting and cuckoo filter files: served by `deletable`;
                // other layouts by `listed`.
                continue;
            }
            match load_layers(&path) {
                Ok((layers, wl)) => {
                    let id = file_id(&path);
                    let named = Named::new(name.clone(), &path, layers, wl, id);
                    filters.insert(name, Arc::new(named));
                }
                Err(e) => damaged.push(Damaged {
                    name,
                    kind: "bloom",
                    file: path.display().to_string(),
                    fault: with_path(&path, e.to_string()),
                }),
            }
        }
        // Journals of live adds: learn each filter's lineage and insert its
        // journaled adds (a no-op unless the file was replaced while the
        // server was down, or a crash followed a reload).
        for n in filters.values() {
            let jpath = journal::path(dir, &n.name);
            let c = journal::load(&jpath, &metrics)?;
            let current = n.layers().lineage();
            let mut lineage = c.lineage;
            if !lineage.iter().any(|l| l.seed == current.seed) {
                // First time served, or NAME.bgf was replaced while the
                // server was down: the new file joins the lineage. On a full
                // disk the marker waits, and adds with it (`write_marker`).
                let mut m = Vec::new();
                journal::marker(&mut m, &n.name, current);
                if let Err(e) = journal::append(&jpath, &m) {
                    tracing::warn!(
                        "bloomgate serve: {}: {e}; adds to '{}' are refused until it can be written",
                        jpath.display(),
                        n.name
                    );
                    *lock(&n.marker) = Some(m);
                }
                lineage.push(current);
            }
            let mut inserted = 0u64;
            // A forgetting filter's journal holds no adds (snapshots skip
            // them, see `journal_segments`); older ones are not re-inserted.
            let adds = if n.layers().policy().forgets() {
                &[][..]
            } else {
                &c.adds[..]
            };
            for (seed, key) in adds {
                if let Ok(true) = n.replay_add(&lineage, *seed, key, &limits) {
                    inserted += 1;
                }
            }
            if inserted > 0 {
                tracing::info!(
                    "bloomgate serve: {}: re-inserted {inserted} journaled live add(s) missing from its file",
                    n.name
                );
                metrics.journal_replayed.fetch_add(inserted, Relaxed);
                n.dirty.store(true, Relaxed);
            }
            *lock(&n.lineage) = lineage;
        }
        let listed = listed::open_all(dir, &mut damaged)?;
        let bloom_damaged: std::collections::HashSet<String> =
            damaged.iter().map(|d| d.name.clone()).collect();
        let cuckoo = Box::new(deletable::Deletables::open(
            dir,
            &limits,
            metrics.clone(),
            valid_name,
            |n| filters.contains_key(n) || listed.contains_key(n) || bloom_damaged.contains(n),
            &mut damaged,
        )?);
        for d in &damaged {
            tracing::error!(
                "bloomgate serve: filter '{}' is damaged and not served: {}; its files and journal are left as they are, and commands on it answer an error until it is repaired (restore or rebuild {}, then {}; see \"Damaged filters\" in docs/http-api.md)",
                d.name,
                d.fault,
                d.file,
                if d.kind == "cuckoo" { "restart" } else { "SIGHUP" }
            );
        }
        let wal_dir = dir.join(".bloomgate-wal");
        std::fs::create_dir_all(&wal_dir).map_err(|e| StoreError::io(wal_dir.display(), e))?;
        // Replay. A file that looks like a segment but is not named like one
        // would be skipped with its records: refuse to start instead.
        let strays = wal::strays(&wal_dir).map_err(|e| StoreError::io(wal_dir.display(), e))?;
        if let Some(stray) = strays.first() {
            return Err(StoreError::Invalid(format!(
                "{}: looks like a write-ahead log segment but is not named like one (wal-NNNNNNNN.log), so its records would not be replayed{}; rename it to the next free segment number, or move it out of {} if it holds nothing needed",
                stray.display(),
                if strays.len() > 1 {
                    format!(" (and {} more such file(s))", strays.len() - 1)
                } else {
                    String::new()
                },
                wal_dir.display()
            )));
        }
        let old = wal::segments(&wal_dir).map_err(|e| StoreError::io(wal_dir.display(), e))?;
        // Every segment is checked before any record is applied: damage in
        // the middle of one stops the start, and nothing has changed then.
        for (_, seg) in &old {
            wal::read_segment_all(seg, |_| {})
                .map_err(|e| StoreError::io(seg.display(), e))?
                .check(seg)
                .map_err(|e| StoreError::Files(e.into()))?;
        }
        let mut replayed = 0u64;
        for (_, seg) in &old {
            let rep = wal::read_segment_all(seg, |rec| {
                replayed += 1;
                match rec {
                    wal::AnyRecord::Bloom(rec) => apply_replay(&filters, rec),
                    wal::AnyRecord::Cuckoo(rec) => cuckoo.replay(rec),
                }
            })
            .map_err(|e| StoreError::io(seg.display(), e))?;
            rep.check(seg).map_err(|e| StoreError::Files(e.into()))?;
            if let Some(fault) = &rep.fault {
                tracing::warn!(
                    "bloomgate serve: write-ahead log {}: {fault}: kept {} record(s), discarded {} byte(s) of torn tail",
                    seg.display(),
                    rep.records,
                    rep.lost_bytes
                );
                metrics.wal_records_lost.fetch_add(1, Relaxed);
            }
        }
        metrics.wal_records_replayed.store(replayed, Relaxed);
        if replayed > 0 {
            tracing::info!("bloomgate serve: replayed {replayed} log record(s)");
        }
        let wal = Arc::new(Wal::start(&wal_dir, metrics.clone())?);
        cuckoo.attach_wal(wal.clone());
        let store = LocalStore {
            dir: dir.to_path_buf(),
            filters: RwLock::new(filters),
            generation: AtomicU64::new(0),
            wal,
            limits,
            metrics,
            snapshot_lock: Mutex::new(()),
            journal_base: Mutex::new(HashMap::new()),
            cuckoo,
            listed: RwLock::new(listed),
            any_damaged: AtomicBool::new(!damaged.is_empty()),
            damaged: RwLock::new(damaged.into_iter().map(|d| (d.name.clone(), d)).collect()),
            held_segments: Mutex::new(Default::default()),
            _dir_lock: dir_lock,
        };
        let any_dirty =
            store.all().iter().any(|n| n.dirty.load(Relaxed)) || store.cuckoo.any_dirty();
        if !old.is_empty() || any_dirty {
            // On a full disk the replayed log stays until a later snapshot
            // succeeds; the server serves meanwhile (reads, and writes once
            // the log can write).
            if let Err(e) = store.snapshot() {
                tracing::warn!("bloomgate serve: snapshot after replay failed, will retry: {e}");
            }
        }
        store.recount_memory();
        Ok(store)
    }

    fn base(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.bgf"))
    }

    /// The filter called `name`.
    #[inline]
    pub fn get(&self, name: &str) -> Option<Arc<Named>> {
        self.filters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// A number that changes whenever a filter is added, replaced or
    /// removed: a caller may keep an `Arc<Named>` from [`LocalStore::get`] for as
    /// long as this stays the same (the Redis front end caches its last
    /// lookup per connection this way).
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Acquire)
    }

    /// Inserts or removes under the map's write lock and bumps the generation.
    fn change_filters<R>(&self, f: impl FnOnce(&mut HashMap<String, Arc<Named>>) -> R) -> R {
        let mut map = self.filters.write().unwrap_or_else(|e| e.into_inner());
        let r = f(&mut map);
        self.generation.fetch_add(1, Release);
        r
    }

    /// The filter called `name`, or [`StoreError::NotFound`] (or
    /// [`StoreError::Damaged`]).
    pub fn need(&self, name: &str) -> Result<Arc<Named>, StoreError> {
        self.get(name).ok_or_else(|| match self.damaged(name) {
            Some(d) => d.into(),
            None => StoreError::NotFound(name.into()),
        })
    }

    /// Whether any filter is damaged.
    #[inline]
    pub fn has_damaged(&self) -> bool {
        self.any_damaged.load(Relaxed)
    }

    /// The damaged filter called `name`, if there is one.
    #[inline]
    pub fn damaged(&self, name: &str) -> Option<Damaged> {
        if !self.has_damaged() {
            return None;
        }
        self.damaged
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// The damaged filters, sorted by name.
    pub fn damaged_all(&self) -> Vec<Damaged> {
        sorted_by_name(&self.damaged)
    }

    /// Refuses with [`StoreError::Damaged`] if `name` is damaged.
    fn not_damaged(&self, name: &str) -> Result<(), StoreError> {
        match self.damaged(name) {
            Some(d) => Err(d.into()),
            None => Ok(()),
        }
    }

    /// Forgets that `name` is damaged (repaired or discarded; under the
    /// snapshot lock). Returns whether it was.
    fn undamage(&self, name: &str) -> bool {
        let mut map = self.damaged.write().unwrap_or_else(|e| e.into_inner());
        let was = map.remove(name).is_some();
        self.any_damaged.store(!map.is_empty(), Relaxed);
        drop(map);
        self.generation.fetch_add(1, Release);
        was
    }

    /// All names, sorted (the cuckoo filters' and the damaged ones' too).
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .filters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        v.extend(self.cuckoo.names());
        v.extend(self.listed_all().iter().map(|l| l.name().to_owned()));
        v.extend(
            self.damaged
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .keys()
                .cloned(),
        );
        v.sort();
        v.dedup();
        v
    }

    /// All filters, sorted by name.
    pub fn all(&self) -> Vec<Arc<Named>> {
        sorted_by_name(&self.filters)
    }

    /// Bytes in the current log segment.
    pub fn wal_bytes(&self) -> u64 {
        self.wal.bytes()
    }

    /// Why writes are refused, if they are (the write-ahead log failed, e.g.
    /// on a full disk; it retries by itself, see [`crate::wal`]).
    pub fn write_failure(&self) -> Option<wal::WalError> {
        self.wal.failure()
    }

    /// Journals the filter's pending lineage marker, if any (under the
    /// snapshot lock, as every journal write).
    fn write_marker(&self, named: &Named) -> Result<(), StoreError> {
        if lock(&named.marker).is_none() {
            return Ok(());
        }
        let _snap = lock(&self.snapshot_lock);
        let mut pending = lock(&named.marker);
        if let Some(m) = pending.as_ref() {
            let jpath = journal::path(&self.dir, &named.name);
            journal::append(&jpath, m).map_err(|e| wal::WalError::io(jpath.display(), &e))?;
            *pending = None;
        }
        Ok(())
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Reserves `bytes` of filter memory for a create or a load, before
    /// anything is allocated (see [`crate::memory`]).
    fn reserve_memory(&self, bytes: u64) -> Result<(), StoreError> {
        let b = &self.limits.memory;
        b.reserve(bytes).map_err(|used| {
            StoreError::OutOfMemory(format!(
                "a filter of {bytes} bytes would pass the server's --max-memory of {} bytes ({used} in use)",
                b.limit()
            ))
        })
    }

    /// Recounts the memory of all filters into the budget (after a create,
    /// a delete, a snapshot: reservations that did not become filters are
    /// returned, grown layers counted exactly).
    pub(crate) fn recount_memory(&self) {
        let bloom: u64 = self.all().iter().map(|n| n.layers().bytes()).sum();
        self.limits.memory.set_used(
            bloom
                .saturating_add(self.cuckoo.bytes())
                .saturating_add(self.listed_bytes()),
        );
    }

    /// Creates a filter file and serves it.
    pub fn create(&self, name: &str, spec: &FilterSpec) -> Result<Arc<Named>, StoreError> {
        if !valid_name(name) {
            return Err(StoreError::BadName(name.into()));
        }
        let _snap = lock(&self.snapshot_lock);
        self.not_damaged(name)?;
        self.refuse_listed(name)?;
        if self.get(name).is_some() || self.cuckoo.has(name) {
            return Err(StoreError::Exists(name.into()));
        }
        let params = super::first_params(spec, &self.limits)?;
        if spec.fill.forgets() {
            return self.create_forgetting(name, spec, params);
        }
        self.reserve_memory(params.bits / 8)?;
        let made = self.create_reserved(name, spec, params);
        self.recount_memory();
        made
    }

    /// The rest of [`LocalStore::create`], once its memory is reserved.
    fn create_reserved(
        &self,
        name: &str,
        spec: &FilterSpec,
        params: Params,
    ) -> Result<Arc<Named>, StoreError> {
        let base = self.base(name);
        self.fresh_journal(name, &params)?;
        let meta = Meta::of(&spec.fill, Some(spec.lookup_rate()));
        let layers = self.write_new_or_clean(name, &base, &[(params, 0)], meta.as_ref())?;
        self.install(name, &base, layers)
    }

    /// [`LocalStore::create`] of a filter under a forgetting policy (rotate,
    /// clear; under the snapshot lock): made by [`FilterSpec`] and written
    /// by [`Layers::save`], the CLI's `dedup` path, so both read the same
    /// files.
    fn create_forgetting(
        &self,
        name: &str,
        spec: &FilterSpec,
        params: Params,
    ) -> Result<Arc<Named>, StoreError> {
        let generations = match &spec.fill {
            FillPolicy::Rotate(r) => u64::from(r.generations),
            _ => 1,
        };
        self.reserve_memory((params.bits / 8).saturating_mul(generations))?;
        let made = self.create_forgetting_reserved(name, spec, params);
        self.recount_memory();
        made
    }

    /// The rest of [`LocalStore::create_forgetting`], once its memory is reserved.
    fn create_forgetting_reserved(
        &self,
        name: &str,
        spec: &FilterSpec,
        params: Params,
    ) -> Result<Arc<Named>, StoreError> {
        let invalid = |e: bloomgate_blacklist::Error| StoreError::Invalid(e.to_string());
        let base = self.base(name);
        self.fresh_journal(name, &params)?;
        remove_files(&base);
        let mut layers = Layers::create(
            params,
            &spec.fill,
            spec.purpose,
            spec.lookup_rate(),
            bloomgate_blacklist::layers::unix_now(),
        )
        .map_err(invalid)?;
        layers.save(&base)?;
        let (layers, _) = load_layers(&base)?;
        self.install(name, &base, layers)
    }

    /// A new filter starts a new journal holding only its lineage marker
    /// (written before its files, so stale adds of a deleted namesake can
    /// never attach to it).
    fn fresh_journal(&self, name: &str, layer0: &Params) -> Result<(), StoreError> {
        let jpath = journal::path(&self.dir, name);
        let mut m = Vec::new();
        journal::marker(
            &mut m,
            name,
            Lineage {
                seed: layer0.seed,
                key_kind: layer0.key_kind,
                match_mode: layer0.match_mode,
            },
        );
        journal::reset(&jpath, &m).map_err(|e| StoreError::io(jpath.display(), e))
    }

    /// [`LocalStore::write_new`] of a filter whose journal
    /// [`LocalStore::fresh_journal`] has just started; if it fails, the
    /// files and the journal it made are removed again, so a refused create
    /// leaves nothing behind.
    fn write_new_or_clean(
        &self,
        name: &str,
        base: &Path,
        layers: &[(Params, u64)],
        meta: Option<&Meta>,
    ) -> Result<Layers, StoreError> {
        self.write_new(base, layers, meta).inspect_err(|_| {
            remove_files(base);
            journal::remove(&journal::path(&self.dir, name));
            sync_parent(base);
        })
    }

    /// Writes a new filter's files (removing stale ones) and opens it.
    fn write_new(
        &self,
        base: &Path,
        layers: &[(Params, u64)],
        meta: Option<&Meta>,
    ) -> Result<Layers, StoreError> {
        remove_files(base);
        for (i, (params, items)) in layers.iter().enumerate().rev() {
            let mut f = Filter::create_file(layer_path(base, i), params.clone())?;
            f.set_items(*items);
            f.persist()?;
        }
        if let Some(meta) = meta {
            let json = serde_json::to_vec(meta).unwrap_or_default();
            write_atomic(&meta_path(base), &json)
                .map_err(|e| StoreError::io(meta_path(base).display(), e.into()))?;
        }
        let (layers, _) = load_layers(base)?;
        Ok(layers)
    }

    fn install(&self, name: &str, base: &Path, layers: Layers) -> Result<Arc<Named>, StoreError> {
        let named = Arc::new(Named::new(
            name.into(),
            base,
            layers,
            Whitelist::default(),
            file_id(base),
        ));
        self.change_filters(|m| m.insert(name.into(), named.clone()));
        Ok(named)
    }

    /// Deletes a filter and its files. Returns whether it existed.
    pub fn delete(&self, name: &str) -> Result<bool, StoreError> {
        let _snap = lock(&self.snapshot_lock);
        // A damaged filter is discarded by removing its files and
        // reloading, never by a client's delete.
        self.not_damaged(name)?;
        if self.delete_listed(name) {
            return Ok(true);
        }
        let Some(named) = self.get(name) else {
            let existed = self.cuckoo.delete(name);
            self.recount_memory();
            return Ok(existed);
        };
        let _w = lock(&named.write);
        named.deleted.store(true, Relaxed);
        self.change_filters(|m| m.remove(name));
        let base = self.base(name);
        remove_files(&base);
        let _ = std::fs::remove_file(Whitelist::path_for(&base));
        sync_parent(&base);
        // Last: a crash before this leaves a journal without a filter, which
        // a later create resets (and a later reload of the name reuses).
        journal::remove(&journal::path(&self.dir, name));
        self.recount_memory();
        Ok(true)
    }

    /// Adds entries under the filter's write lock; returns the outcomes and,
    /// if anything was logged, the receiver that resolves once it is durable.
    pub fn add(
        &self,
        named: &Named,
        entries: &[&[u8]],
        out: &mut Vec<AddOutcome>,
    ) -> Result<Option<AckRx>, StoreError> {
        // A log that cannot write refuses before anything changes.
        if let Some(e) = self.wal.refusing() {
            return Err(e.into());
        }
        self.write_marker(named)?;
        let mut log = Vec::new();
        let mut changed = false;
        {
            let _w = lock(&named.write);
            if named.deleted.load(Relaxed) {
                return Err(StoreError::NotFound(named.name.clone()));
            }
            for entry in entries {
                if entry.len() > self.limits.max_item_bytes {
                    out.push(AddOutcome::TooLong);
                    continue;
                }
                let st = named.layers();
                let key = match entry_key(st.kind, st.mode, entry) {
                    Ok(k) => k,
                    Err(e) => {
                        out.push(AddOutcome::Invalid(e));
                        continue;
                    }
                };
                let outcome = add_key(named, &key, &self.limits)?;
                if outcome == AddOutcome::New {
                    self.metrics.items_added.fetch_add(1, Relaxed);
                    changed = true;
                }
                let stop = outcome == AddOutcome::Full;
                // "Exists" is logged too: the bits that answered it may belong
                // to the file's own items (or be a false positive), and a
                // reload can replace them; the acknowledged add must survive.
                if matches!(outcome, AddOutcome::New | AddOutcome::Exists) {
                    wal::encode_add(&mut log, &named.name, st.seed(), &key);
                }
                out.push(outcome);
                if stop {
                    break;
                }
            }
            if log.is_empty() {
                return Ok(None);
            }
            if changed {
                named.dirty.store(true, Relaxed);
            }
            Ok(Some(self.wal.append(log)))
        }
    }

    /// Adds or removes whitelist entries and writes the whitelist file: the
    /// library's edits ([`bloomgate_list::List::whitelist_edit`]) on a copy
    /// of the filter's list, published once written. Returns, per item,
    /// whether it was a hit (add) or was present (remove).
    pub fn whitelist(
        &self,
        named: &Named,
        items: &[&[u8]],
        add: bool,
    ) -> Result<Vec<Result<bool, KeyError>>, StoreError> {
        let _w = lock(&named.write);
        let mut list = (**named.list.load()).clone();
        let edited = list.list_mut().whitelist_edit(items, add);
        let out = edited
            .and_then(|out| list.list().save_whitelist().map(|()| out))
            .map_err(|e| match e {
                bloomgate_list::Error::File(e) => StoreError::from(e),
                e => StoreError::List(e),
            })?;
        named.list.store(Arc::new(list));
        Ok(out)
    }

    /// Stops the log thread (after a final snapshot).
    pub fn shutdown(&self) {
        self.wal.stop();
    }
}

/// `fault` as it is if it names `path`'s directory already (the engine's and
/// the data directory's errors do), else prefixed with `path`.
fn with_path(path: &Path, fault: String) -> String {
    if fault.contains(&*path.display().to_string()) || fault.starts_with('/') {
        fault
    } else {
        format!("{}: {fault}", path.display())
    }
}

/// Copies `src` over `base` atomically ([`bloomgate_engine::atomic`]): a
/// reloaded file put in place, whatever its layout.
fn write_atomic_from(base: &Path, src: &Path) -> std::io::Result<()> {
    let mut from = std::fs::File::open(src)?;
    bloomgate_engine::atomic::replace_with(base, |f| std::io::copy(&mut from, f).map(|_| ()))?;
    Ok(())
}

fn remove_files(base: &Path) {
    let _ = std::fs::remove_file(base);
    let _ = std::fs::remove_file(meta_path(base));
    // A rotating filter's generations need not be numbered without gaps.
    for i in 1..=2 * bloomgate_blacklist::layers::MAX_LAYERS {
        let _ = std::fs::remove_file(layer_path(base, i));
    }
}
