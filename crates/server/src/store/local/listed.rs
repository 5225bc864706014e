//! Filter files served as the library opens them: [`Listed`], one
//! [`List`] behind a served name.
//!
//! The data directory's Bloom filters ([`Named`]) and its counting and
//! cuckoo filters ([`super::deletable`]) take live adds, so the server
//! keeps their state itself: the write-ahead log, journals, snapshots and
//! growth (a Bloom filter's lookups and whitelist edits are still the
//! library's list's, over the layers it holds). Every other layout is
//! served exactly as [`List::open`] opens it
//! — today the static ribbon layout: lookups through [`List::check_each`]
//! (the verdict `bloomgate check` gives, for the same file and queries),
//! whitelist edits through [`List::whitelist_add`] and
//! [`List::save_whitelist`], the description from [`List::info`]. Which
//! files are served here is decided by their layout code alone
//! ([`served_by_list`]: neither a Bloom nor a deletable layout), so a
//! layout added to `List` is served without a change to the server.
//!
//! # Adds into the delta; nothing else changes
//!
//! A static list takes adds into its delta ([`List::add_keys`], the
//! library's `delta` module): `BF.ADD`, `BF.MADD`, `BF.INSERT` and the HTTP
//! add go through [`LocalStore::add_listed`], which appends the batch's
//! keys to `NAME.bgf.delta` and syncs it before it returns, so an
//! acknowledged add survives a `kill -9` as a Bloom filter's does through
//! the write-ahead log (the file of added keys is this list's log: opening
//! it again replays it). The list's write lock is held for the add, sync
//! included, so lookups wait for it. A file whose rate leaves its delta no
//! room refuses adds with the library's reason ([`List::changeable`]).
//! A remove, a create or a dump load over the name is refused with
//! [`StoreError::ReadOnly`] ([`Listed::refusal`]): a refused change is
//! never a silent no-op, and never "absent". Replacing the file and
//! reloading (SIGHUP, or the HTTP reload with or without a source path)
//! serves the new file with the same delta (its keys folded into the new
//! file cost nothing: only keys the solution lacks enter the delta); the
//! old one keeps serving when the new one does not open and verify.
//!
//! # Damage
//!
//! A file that fails to open (a flipped byte in its header or directory, a
//! truncated file, a garbage whitelist) is [`Damaged`] like any other
//! filter: every command on the name is an error naming the file and the
//! fault until it is restored and reloaded, or removed and reloaded.
//!
//! # Concurrency
//!
//! Lookups share a read lock on the [`List`]; an add, a whitelist edit or
//! a reload takes it for writing. The solution is never written: it is
//! read into memory of its own when it fits (a lookup beyond the caches
//! then walks huge pages' small tables instead of the page cache's 4 KiB
//! ones: BENCHMARKS.md, "Ten billion URLs in a ribbon file"), mapped
//! read-only otherwise; the file of added keys is only appended to.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{Ordering::Relaxed, Ordering::Release};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bloomgate_blacklist::VerdictRef;
use bloomgate_engine::format::{layout_name, peek_layout_code, DeletableKind};
use bloomgate_engine::Layout;
use bloomgate_list::{Claim, List, OpenOptions};
use bloomgate_url::KeyError;
use serde_json::Value;

use super::{file_id, lock, valid_name, with_path, FileId, LocalStore, LookupScratch};
use crate::store::{sorted_by_name, AddOutcome, Counters, Damaged, Info, StoreError};

/// The served names of [`Listed`] filters.
pub(super) type ListedMap = RwLock<HashMap<String, Arc<Listed>>>;

/// Whether the filter file at `path` is served through [`List`]: a
/// bloomgate filter file whose layout is neither a Bloom layout (served as
/// [`Named`](super::Named)) nor a deletable one. A file whose header
/// cannot be read is not: the Bloom opener says why it is damaged.
pub(super) fn served_by_list(path: &Path) -> bool {
    match peek_layout_code(path) {
        Ok(code) => Layout::from_code(code).is_none() && DeletableKind::from_code(code).is_none(),
        Err(_) => false,
    }
}

/// One filter file served through the library's [`List`] (see the module
/// documentation).
pub struct Listed {
    name: String,
    list: RwLock<List>,
    layout: &'static str,
    loaded: std::sync::Mutex<Option<FileId>>,
    lookups: Counters,
}

/// Opens the list at `path` for serving (for adds into a ribbon list's
/// delta, under the server's own lock of the data directory), or with
/// `verify` only to check it (every byte compared with its checksum). A list for
/// serving is read into memory of its own ([`OpenOptions::in_memory`]:
/// huge pages, the file's page cache dropped) when it fits
/// ([`fits_in_memory`]); otherwise it is mapped, which answers the same,
/// more slowly once the file is beyond the caches.
fn open_list(path: &Path, verify: bool) -> Result<List, StoreError> {
    let options = OpenOptions {
        verify,
        in_memory: !verify && fits_in_memory(path),
        update: true,
        served: true,
        ..OpenOptions::default()
    };
    Ok(List::open_with(&path.to_string_lossy(), &options)?)
}

/// Whether a copy of the file at `path` fits in the memory available with
/// an eighth of it (at least 256 MiB) to spare. During a reload the old
/// copy is still held, so a large file is then mapped instead of read
/// (the server never asks for memory it may not get); the next reload,
/// with the old copy gone, reads it in.
fn fits_in_memory(path: &Path) -> bool {
    let Ok(len) = std::fs::metadata(path).map(|m| m.len()) else {
        return false;
    };
    let spare = (len / 8).max(256 << 20);
    bloomgate_engine::mem_available().is_some_and(|free| len.saturating_add(spare) <= free)
}

impl Listed {
    fn new(name: &str, list: List, loaded: Option<FileId>) -> Listed {
        Listed {
            name: name.into(),
            layout: list.layout(),
            list: RwLock::new(list),
            loaded: std::sync::Mutex::new(loaded),
            lookups: Counters::default(),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, List> {
        self.list.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, List> {
        self.list.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The filter's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its whitelist as it is now (shared with the list: a reference
    /// count, not a copy).
    pub fn whitelisted(&self) -> bloomgate_blacklist::Whitelist {
        self.read().whitelist().clone()
    }

    /// The layout's name (`ribbon`).
    pub fn layout(&self) -> &'static str {
        self.layout
    }

    /// Answers many queries by the library's verdict ([`List::check_each`]):
    /// `each` gets one result per query, in order. Not counted (see
    /// [`Counters`]).
    #[inline]
    pub fn check_many(
        &self,
        queries: &[&[u8]],
        scratch: &mut LookupScratch,
        each: impl FnMut(Result<VerdictRef<'_>, KeyError>),
    ) -> Result<(), StoreError> {
        Ok(self.read().check_each(queries, scratch, each)?)
    }

    /// Its lookup counters.
    pub fn lookups(&self) -> &Counters {
        &self.lookups
    }

    /// The refusal of a change other than an add (a remove, a create or
    /// a dump load over the name): a static ribbon filter is solved once
    /// from its entries and takes adds only into its delta.
    pub fn refusal(&self) -> StoreError {
        let list = self.read();
        StoreError::ReadOnly(format!(
            "filter '{}' is a static {} filter: it takes adds (into its delta of added keys) and whitelist changes, nothing else; rebuild it from its source (bloomgate build --layout {} --fold {} folds the added keys in) and reload it",
            self.name,
            self.layout,
            self.layout,
            list.address()
        ))
    }

    /// Adds (`add`) or removes whitelist entries and writes the whitelist
    /// file. Returns, per item, whether it was a hit (add) or was present
    /// (remove). If the file cannot be written, the whitelist is read back
    /// as it is on disk and the error returned.
    pub(crate) fn whitelist(
        &self,
        items: &[&[u8]],
        add: bool,
    ) -> Result<Vec<Result<bool, KeyError>>, StoreError> {
        let mut list = self.write();
        let edited = list.whitelist_edit(items, add);
        edited
            .and_then(|out| list.save_whitelist().map(|()| out))
            .map_err(|e| {
                reopen_after_failure(&mut list);
                e.into()
            })
    }

    /// Information about the filter, from the library's description.
    pub fn info(&self) -> Result<Info, StoreError> {
        let list = self.read();
        let v = list.info()?.json;
        let u = |k: &str| v.get(k).and_then(Value::as_u64);
        let f = |k: &str| v.get(k).and_then(Value::as_f64);
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let bytes = u("bytes").unwrap_or_else(|| list.data_bytes());
        let items = u("items").unwrap_or(0);
        Ok(Info {
            name: self.name.clone(),
            key_kind: list.kind().as_str().into(),
            match_mode: list.mode().as_str().into(),
            layout: self.layout.into(),
            bits: u("bits").unwrap_or(bytes.saturating_mul(8)),
            k: u("k").map_or(0, |k| k.min(u64::from(u32::MAX)) as u32),
            items,
            capacity: u("planned_items").unwrap_or(items),
            fill_ratio: f("fill_ratio").unwrap_or(0.0),
            predicted_fp: f("predicted_fp").unwrap_or(0.0),
            target_fp: f("target_fp").unwrap_or(0.0),
            layers: 1,
            growth: "static".into(),
            expansion: None,
            policy: s("policy").unwrap_or_else(|| "static".into()),
            size_bytes: bytes,
            whitelist_entries: list.whitelist().len(),
            unsnapshotted_changes: false,
            layer_info: Vec::new(),
        })
    }

    /// The library's whole description of the filter ([`List::info`]'s
    /// JSON: for a ribbon filter its bits per item against the bound,
    /// shards, predicted rate per query).
    pub fn details(&self) -> Result<Value, StoreError> {
        Ok(self.read().info()?.json)
    }

    /// Bytes of its mapped data (for the memory budget).
    pub(super) fn bytes(&self) -> u64 {
        self.read().data_bytes()
    }
}

/// After a failed whitelist write: the list as it is on disk again (kept
/// as it is when even that fails to open: its lookups are unchanged).
fn reopen_after_failure(list: &mut List) {
    let path = list.address().to_string();
    if let Ok(again) = open_list(Path::new(&path), false) {
        *list = again;
    }
}

/// Opens every file of `dir` served through [`List`] ([`served_by_list`]);
/// a file that fails to open is pushed to `damaged`.
pub(super) fn open_all(
    dir: &Path,
    damaged: &mut Vec<Damaged>,
) -> Result<HashMap<String, Arc<Listed>>, StoreError> {
    let mut out = HashMap::new();
    for (name, path) in super::named_files(dir, "bgf", valid_name)? {
        if !served_by_list(&path) {
            continue;
        }
        match open_list(&path, false) {
            Ok(list) => {
                out.insert(
                    name.clone(),
                    Arc::new(Listed::new(&name, list, file_id(&path))),
                );
            }
            Err(e) => damaged.push(damage(&name, &path, &e)),
        }
    }
    Ok(out)
}

/// The [`Damaged`] entry of a file that failed to open.
fn damage(name: &str, path: &Path, e: &StoreError) -> Damaged {
    Damaged {
        name: name.into(),
        kind: peek_layout_code(path).map_or("bloom", layout_name),
        file: path.display().to_string(),
        fault: with_path(path, e.to_string()),
    }
}

impl LocalStore {
    /// Adds entries to a filter served through [`List`] (a static ribbon
    /// list: into its delta): one outcome per entry in `out`. Durable when
    /// it returns `Ok` (the keys appended to its file of added keys and
    /// synced); on an error nothing of the call was acknowledged, and the
    /// outcomes pushed are taken back.
    pub(crate) fn add_listed(
        &self,
        l: &Listed,
        entries: &[&[u8]],
        out: &mut Vec<AddOutcome>,
    ) -> Result<(), StoreError> {
        let mut list = l.write();
        if let Err(e) = list.changeable() {
            return Err(StoreError::ReadOnly(format!(
                "filter '{}' takes no adds: {e}",
                l.name
            )));
        }
        let first = out.len();
        let mut keys = Vec::with_capacity(entries.len());
        let mut slots = Vec::with_capacity(entries.len());
        for entry in entries {
            if entry.len() > self.limits.max_item_bytes {
                out.push(AddOutcome::TooLong);
                continue;
            }
            match list.entry_key(entry) {
                Ok(k) => {
                    slots.push(out.len());
                    out.push(AddOutcome::Exists);
                    keys.push(k.into_owned());
                }
                Err(bloomgate_list::Error::InvalidItem { reason, .. }) => {
                    out.push(AddOutcome::Invalid(reason))
                }
                Err(e) => {
                    out.truncate(first);
                    return Err(e.into());
                }
            }
        }
        let claims = list.add_keys(&keys);
        if let Some(e) = claims.error {
            out.truncate(first);
            return Err(e.into());
        }
        for (&slot, claim) in slots.iter().zip(&claims.outcomes) {
            if *claim == Claim::New {
                out[slot] = AddOutcome::New;
                self.metrics.items_added.fetch_add(1, Relaxed);
            }
        }
        Ok(())
    }

    /// The filter called `name` served through [`List`], if there is one.
    #[inline]
    pub fn listed(&self, name: &str) -> Option<Arc<Listed>> {
        self.listed
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// All filters served through [`List`], sorted by name.
    pub fn listed_all(&self) -> Vec<Arc<Listed>> {
        sorted_by_name(&self.listed)
    }

    /// Bytes of all filters served through [`List`].
    pub(super) fn listed_bytes(&self) -> u64 {
        self.listed_all().iter().map(|l| l.bytes()).sum()
    }

    /// Refuses a create or load over a name served through [`List`] with
    /// its refusal ([`Listed::refusal`]).
    pub(super) fn refuse_listed(&self, name: &str) -> Result<(), StoreError> {
        match self.listed(name) {
            Some(l) => Err(l.refusal()),
            None => Ok(()),
        }
    }

    /// Stops serving `name` through [`List`] (replaced by a Bloom filter
    /// of that name, or deleted). Returns the filter if it was served.
    pub(crate) fn forget_listed(&self, name: &str) -> Option<Arc<Listed>> {
        let mut map = self.listed.write().unwrap_or_else(|e| e.into_inner());
        let was = map.remove(name);
        drop(map);
        if was.is_some() {
            self.generation.fetch_add(1, Release);
        }
        was
    }

    /// Deletes a filter served through [`List`] and its files (its file
    /// and whitelist; under the snapshot lock). Returns whether it was one.
    pub(super) fn delete_listed(&self, name: &str) -> bool {
        if self.forget_listed(name).is_none() {
            return false;
        }
        let base = self.base(name);
        let _ = std::fs::remove_file(&base);
        let _ = std::fs::remove_file(bloomgate_blacklist::Whitelist::path_for(&base));
        let _ = std::fs::remove_file(bloomgate_blacklist::delta::delta_path(&base));
        bloomgate_engine::atomic::sync_parent(&base);
        self.recount_memory();
        true
    }

    /// Serves `name` from its file through [`List`] when the file (`source`,
    /// else `NAME.bgf`) is one [`served_by_list`]: the file opened and
    /// verified first (the old one keeps serving if it fails), copied over
    /// `NAME.bgf` when `source` is another file, then served in place of
    /// the old one (a damaged entry of the name is repaired). `Ok(None)`
    /// when the file is not one: a Bloom filter's reload then.
    ///
    /// A Bloom filter of the name is not replaced by such a file: its live
    /// adds could not be carried over (delete it first).
    pub(crate) fn reload_listed(
        &self,
        name: &str,
        source: Option<&Path>,
    ) -> Result<Option<Arc<Listed>>, StoreError> {
        if !valid_name(name) {
            return Err(StoreError::BadName(name.into()));
        }
        let base = self.base(name);
        let src = source.unwrap_or(&base);
        if !served_by_list(src) {
            return Ok(None);
        }
        let _snap = lock(&self.snapshot_lock);
        if let Some(d) = self.damaged(name) {
            if d.kind == "cuckoo" {
                return Err(d.into());
            }
        }
        if self.get(name).is_some() || self.cuckoo.has(name) {
            return Err(StoreError::Invalid(format!(
                "'{name}' is served as a filter that takes live adds, which a {} file cannot take over: delete '{name}' first, then reload",
                layout_name(peek_layout_code(src).unwrap_or(0))
            )));
        }
        drop(open_list(src, true)?);
        if let Some(src) = source {
            let same = std::fs::canonicalize(src).ok() == std::fs::canonicalize(&base).ok();
            if !same {
                super::write_atomic_from(&base, src).map_err(|e| {
                    StoreError::io(format_args!("cannot copy {} into place", src.display()), e)
                })?;
            }
        }
        let list = open_list(&base, false)?;
        let id = file_id(&base);
        let served = match self.listed(name) {
            Some(l) => {
                *l.write() = list;
                *lock(&l.loaded) = id;
                l
            }
            None => {
                let l = Arc::new(Listed::new(name, list, id));
                self.listed
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(name.into(), l.clone());
                l
            }
        };
        self.generation.fetch_add(1, Release);
        if self.undamage(name) {
            tracing::info!("bloomgate serve: filter '{name}' is repaired and served again");
        }
        self.recount_memory();
        Ok(Some(served))
    }

    /// Records `d` as a damaged filter (under the snapshot lock).
    fn mark_damaged(&self, d: Damaged) {
        tracing::error!(
            "bloomgate serve: filter '{}' is damaged and not served: {}; restore or rebuild {}, then SIGHUP",
            d.name,
            d.fault,
            d.file
        );
        let mut map = self.damaged.write().unwrap_or_else(|e| e.into_inner());
        map.insert(d.name.clone(), d);
        self.any_damaged.store(true, Relaxed);
        drop(map);
        self.generation.fetch_add(1, Release);
    }

    /// SIGHUP's part for a file served through [`List`]: reloads it when
    /// it changed (or is new, or was damaged); what it did, for the log.
    pub(super) fn reload_listed_if_changed(&self, name: &str, path: &Path) -> Option<String> {
        let changed = match self.listed(name) {
            Some(l) => *lock(&l.loaded) != file_id(path),
            None => true,
        };
        if !changed {
            return None;
        }
        Some(match self.reload_listed(name, None) {
            Ok(_) => format!("reloaded {name}"),
            Err(e) => {
                if self.listed(name).is_none() && self.get(name).is_none() {
                    let _snap = lock(&self.snapshot_lock);
                    if self.damaged(name).is_none() {
                        self.mark_damaged(damage(name, path, &e));
                    }
                }
                format!("kept {name}: {e}")
            }
        })
    }
}
