//! Deletable filters (`CF.*`: cuckoo chains and counting Bloom filters) of
//! a data directory: the registry of the served ones, their files, and
//! exactly-once replay of their log records.
//!
//! The model lives in the libraries: a filter is the library's list over
//! the engine's chain of tables ([`bloomgate_list::TableList`]: lookups and
//! their verdict, the normalization of items, adds and removes; over
//! [`bloomgate_engine::Chain`] of [`bloomgate_engine::Table`]s: growth,
//! the delete rule, the one limit on tables), and its file `NAME.cf` is
//! [`bloomgate_blacklist::cf_file`]. What stays here is what a server
//! adds: [`chain`] (its parameters, incarnation id, sequence
//! number and growth within the server's limits), [`named`] (one served
//! filter: lookups, changes logged and acknowledged in one hop, and
//! whitelist edits written to the whitelist's file), [`files`] (saving,
//! the whitelist's file, and the `NAME.bgf` files the CLI builds),
//! [`dump`] (`CF.SCANDUMP`/`CF.LOADCHUNK`) and the registry below.
//!
//! # The model: RedisBloom's cuckoo filter
//!
//! A cuckoo filter holds one short fingerprint per item copy in one of two
//! buckets ([`bloomgate_engine::CuckooFilter`], Fan et al. 2014), so it can
//! count and delete what a Bloom filter cannot. RedisBloom's semantics are
//! kept: `CF.ADD` adds a copy even if the item is there (a multiset: two
//! adds then one delete leave it present), `CF.ADDNX` adds only if absent,
//! `CF.DEL` removes one copy, `CF.COUNT` counts matching fingerprints. A
//! filter that cannot place an item grows by a new sub-filter of
//! `capacity · expansionⁱ` items (`EXPANSION`, rounded up to a power of two
//! as RedisBloom does; at most [`bloomgate_engine::MAX_TABLES`]
//! sub-filters), or, with `EXPANSION 0`, answers "Filter is full". Nothing
//! is ever evicted: a failed insert leaves every table as it was (the
//! engine's promise).
//!
//! Beyond RedisBloom: its fingerprints are 8 bits, for a false-positive
//! rate of about 2·b/255 per sub-filter (b = bucket size; 1.6 % at its
//! default b = 2). Here the rate is chosen (`ERROR` on `CF.RESERVE`,
//! default that same 2·b/255) and the engine sizes fingerprints for it.
//! The chain's rate is at most the sum of its sub-filters' rates (a lookup
//! probes all of them).
//!
//! # Deletes in a grown filter
//!
//! A delete must take one copy, and a fingerprint does not say whose it
//! is. The sub-filters of a chain therefore share one hash, and each later
//! one is the last one with every bucket split in the expansion, so its
//! buckets refine the older ones'; a delete takes a copy from the newest
//! sub-filter holding a match ([`bloomgate_engine::delete_table`]). The
//! argument is in `bloomgate_engine::cuckoo`, "Chains". (With a seed per
//! sub-filter, as before, such a delete removed the other item: 24 to 91
//! of 3,000 items kept were lost in the test script of
//! `tests/serve_cuckoo_delete.rs`.) Chains saved before keep their
//! sub-filters hashed apart and are served as they are; there, and in a
//! chain of several counting filters (only a `CF.LOADCHUNK` dump can make
//! one), a delete whose item matches in sub-filters hashed apart is
//! refused ([`StoreError::Ambiguous`]) and changes nothing.
//!
//! # Counting filters
//!
//! The same chain can hold one counting Bloom filter instead of cuckoo
//! tables ([`CfLayout::Counting`]: `"layout": "counting"` over HTTP,
//! `CF.RESERVE … LAYOUT COUNTING` over RESP;
//! [`bloomgate_engine::CountingFilter`]): 4-bit counters, an add raises an
//! item's k counters, a delete lowers them, and a counter that reached 15
//! stays there. It is never full, so it never grows, and the `CF.*`
//! commands, the HTTP API, the log and the files treat it exactly as a
//! cuckoo chain: `COUNT` is the item's smallest counter. It costs about 7×
//! a cuckoo filter's memory at the same rate (`bloomgate_engine::math`,
//! "Counting filter"), for adds that never fail.
//!
//! # Files and durability
//!
//! `NAME.cf` holds the whole chain: the parameters, the incarnation id
//! (random, so records of a deleted namesake never apply), the counters,
//! and `seq`, the sequence number of the last change it contains; then the
//! tables; then a checksum ([`bloomgate_blacklist::cf_file`]). It is
//! replaced atomically (write, fsync, rename), each table's bytes written
//! from the table's own memory under the chain's read lock, and read
//! straight into its memory at a start: creating, saving, dumping and
//! loading a filter never hold a second copy of it.
//!
//! Every change (an add, a delete) gets the next sequence number under the
//! filter's write lock and is queued to the write-ahead log in that order
//! ([`bloomgate_blacklist::wal`], record kind 4); the client's reply waits
//! for the log's fsync ([`crate::store::Ack`]). A snapshot rotates the log,
//! then copies each changed chain with its `seq` under its read lock and
//! writes it, then trims the old segments. Replay at startup applies a
//! record only if its incarnation id is the file's and its `seq` is greater
//! than the file's, so nothing is applied twice: not after a crash between
//! writing a file and trimming the log, not after a crash in the middle of
//! a snapshot. A delete is not idempotent — applying one twice removes a
//! second copy, or another item's equal fingerprint, a false negative —
//! which is why this is exact rather than "at least once" like Bloom adds.
//!
//! A replayed add is never refused for the size limit, the memory budget
//! or `EXPANSION 0`: if no sub-filter has room (a replay can place items
//! differently, as the kicks' random state starts afresh) the chain grows,
//! because an acknowledged add must not be lost.
//!
//! When the log fails to write a group of records (a full disk), their
//! changes stay applied in memory unacknowledged; the next change of such
//! a chain saves it first (`CfNamed::settle`), so that the sequence
//! numbers in the log continue from a file that contains the unlogged
//! ones. One window remains: a change checked just before a failure is
//! counted, and queued just after the log's retry began a new segment, is
//! logged past the failed group's sequence numbers. Replay then applies it
//! without them. Only unacknowledged changes can be missing that way,
//! never an acknowledged one.
//!
//! A change whose reply is a log error has still been applied in memory,
//! and it is kept if a later change saves the chain first. Its outcome is
//! therefore unknown, as for any write whose reply is lost. A client must
//! not repeat a failed `CF.DEL` blindly: that could remove a second copy.
//! It should check `CF.COUNT` first.
//!
//! Creating a filter (`CF.RESERVE`, an add that creates one,
//! `CF.LOADCHUNK`'s last chunk) writes its file before it answers.
//!
//! The whitelist is not a logged change: `NAME.cf.whitelist` (or a
//! CLI-built file's `NAME.bgf.whitelist`) is written by each edit before it
//! is answered and read at the start, beside `NAME.cf` and independent of
//! its `seq` (see `named.rs`, "The whitelist"). A damaged one makes the
//! filter damaged, as a Bloom filter's; a delete removes it, and a new
//! filter removes one a namesake left.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use bloomgate_blacklist::wal::CuckooRecord;
use bloomgate_blacklist::Whitelist;
use xxhash_rust::xxh3::xxh3_64;

use crate::metrics::Metrics;
use crate::wal::Wal;
use crate::Limits;

use super::super::{sorted_by_name, Ack, AddMode, AddOutcome, Damaged, StoreError};

pub(crate) mod chain;
pub(crate) mod dump;
pub(crate) mod files;
pub(crate) mod named;
#[cfg(test)]
mod tests;

pub use bloomgate_blacklist::cf_file::CfLayout;
pub use chain::{redisbloom_rate, CfAdded, CfInfo, DeletableSpec};
pub use dump::{parse_dump_header, CF_DUMP_CHUNK};
pub use files::cf_path;
pub(super) use files::deletable_layout;
pub use named::CfNamed;

use chain::Chain;
use dump::Loading;

/// The engine headers of a chain's tables, as a dump cuts them.
type DumpHeads = Arc<Vec<Vec<u8>>>;

/// What every served deletable filter shares: the data directory, the
/// limits, the metrics, and the write-ahead log (set once it is started,
/// after replay).
pub(crate) struct Shared {
    pub(crate) dir: PathBuf,
    pub(crate) limits: Limits,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) wal: OnceLock<Arc<Wal>>,
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Checks the bytes of a `NAME.cf` file as the server's start does,
/// without serving it: `Err` names the fault.
pub fn check_file(bytes: &[u8]) -> Result<(), String> {
    let c = bloomgate_blacklist::cf_file::decode(bytes).map_err(|e| e.to_string())?;
    Chain::from_contents(c).map(|_| ())
}

/// The deletable filters of a data directory.
pub struct Deletables {
    shared: Arc<Shared>,
    map: RwLock<HashMap<String, Arc<CfNamed>>>,
    loading: Mutex<HashMap<String, Loading>>,
    /// Whether a deletable filter was ever served or loaded: until then
    /// [`Deletables::has`] (asked by every Bloom write) takes no lock.
    ever: AtomicBool,
}

impl Deletables {
    /// Loads every `*.cf` of `dir` and every counting or cuckoo `*.bgf`
    /// the CLI built, except the names `bloom` takes (the Bloom filters',
    /// served or damaged). A file that fails to load is left in place and
    /// pushed to `damaged` (see [`Damaged`]).
    pub fn open(
        dir: &Path,
        limits: &Limits,
        metrics: Arc<Metrics>,
        valid_name: impl Fn(&str) -> bool,
        bloom: impl Fn(&str) -> bool,
        damaged: &mut Vec<Damaged>,
    ) -> Result<Deletables, StoreError> {
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            limits: limits.clone(),
            metrics,
            wal: OnceLock::new(),
        });
        let mut map = HashMap::new();
        let fail = |name: String, path: &Path, fault: String| Damaged {
            name,
            kind: "cuckoo",
            file: path.display().to_string(),
            fault: format!("{}: {fault}", path.display()),
        };
        let cf_name = |n: &str| valid_name(n) && !bloom(n);
        for (name, path) in super::named_files(dir, "cf", cf_name)? {
            match files::load(&path) {
                Ok((mut c, export)) => {
                    let wl = match export.is_some() {
                        // The CLI's, which it edits too: a damaged one is
                        // ignored, as it always was.
                        true => Ok(files::load_whitelist(&files::bgf_path(dir, &name))),
                        // The server's own: damaged, the filter is damaged,
                        // as a Bloom filter with a damaged whitelist is.
                        false => Whitelist::load(&files::whitelist_path(dir, &name, false)),
                    };
                    match wl {
                        Ok(wl) => c.list.set_whitelist(wl),
                        Err(e) => {
                            damaged.push(Damaged {
                                name,
                                kind: "cuckoo",
                                file: path.display().to_string(),
                                fault: e.to_string(),
                            });
                            continue;
                        }
                    }
                    let mut n = CfNamed::new(name.clone(), c, shared.clone());
                    *n.export.get_mut().unwrap_or_else(|e| e.into_inner()) = export;
                    map.insert(name, Arc::new(n));
                }
                Err(e) => damaged.push(fail(name, &path, e)),
            }
        }
        // Counting and cuckoo filter files built by the CLI (the Bloom
        // scan has warned about unusable names already, and served or
        // reported the Bloom filters' files).
        for (name, path) in super::named_files(dir, "bgf", |_| true)? {
            if !valid_name(&name) || bloom(&name) {
                continue;
            }
            let Some(layout) = deletable_layout(&path) else {
                continue;
            };
            if damaged.iter().any(|d| d.name == name) {
                // Its NAME.cf is damaged: the CLI's file is not served in
                // its place (it lacks the changes NAME.cf holds).
                continue;
            }
            let bytes = match std::fs::read(&path) {
                Ok(b) => b,
                Err(e) => {
                    damaged.push(fail(name, &path, e.to_string()));
                    continue;
                }
            };
            let sum = xxh3_64(&bytes);
            if let Some(n) = map.get(&name) {
                let mut export = lock(&n.export);
                if !export.as_ref().is_some_and(|l| l.contains(&sum)) {
                    tracing::warn!(
                        "bloomgate serve: {} is not the file this server last wrote (replaced while it was stopped?): serving {} instead, which holds every acknowledged change, and leaving {} as it is; to serve that file, stop the server and delete {} (its changes are then lost)",
                        path.display(),
                        cf_path(dir, &name).display(),
                        path.display(),
                        cf_path(dir, &name).display()
                    );
                    *export = None;
                    drop(export);
                    // Its whitelist is its own from now on.
                    let wl = files::whitelist_path(dir, &name, false);
                    if let Err(e) = read(&n.state).list.list().whitelist().save(&wl) {
                        tracing::warn!("bloomgate serve: cannot write {}: {e}", wl.display());
                    }
                }
                continue;
            }
            let mut chain = match Chain::import(layout, &bytes) {
                Ok(c) => c,
                Err(e) => {
                    damaged.push(fail(name, &path, e));
                    continue;
                }
            };
            chain.list.set_whitelist(files::load_whitelist(&path));
            let mut n = CfNamed::new(name.clone(), chain, shared.clone());
            // The CLI's file is named too: a crash before the first copy
            // replaces it must not make it look replaced by someone else.
            *n.export.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(vec![sum]);
            // Its changes are saved to NAME.cf from now on; written now, so
            // that the log's records have a file to apply to.
            if let Err(e) = n.save_to(dir, &read(&n.state)) {
                damaged.push(fail(name, &path, e.to_string()));
                continue;
            }
            tracing::info!(
                "bloomgate serve: serving {} ({}) with adds and removes; its changes are saved to {} and copied back to it at each snapshot",
                path.display(),
                layout.name(),
                cf_path(dir, &name).display()
            );
            map.insert(name, Arc::new(n));
        }
        Ok(Deletables {
            shared,
            ever: AtomicBool::new(!map.is_empty()),
            map: RwLock::new(map),
            loading: Mutex::new(HashMap::new()),
        })
    }

    /// Hands the started write-ahead log to every filter (after replay).
    pub(crate) fn attach_wal(&self, wal: Arc<Wal>) {
        let _ = self.shared.wal.set(wal);
    }

    /// The deletable filter called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<CfNamed>> {
        read(&self.map).get(name).cloned()
    }

    /// Whether `name` is a deletable filter, or one being loaded.
    pub fn has(&self, name: &str) -> bool {
        if !self.ever.load(Relaxed) {
            return false;
        }
        read(&self.map).contains_key(name) || lock(&self.loading).contains_key(name)
    }

    /// All names (sorted), including those being loaded.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = read(&self.map).keys().cloned().collect();
        v.extend(lock(&self.loading).keys().cloned());
        v.sort();
        v.dedup();
        v
    }

    /// Bytes of all chains' tables together.
    pub fn bytes(&self) -> u64 {
        read(&self.map)
            .values()
            .map(|n| read(&n.state).bytes())
            .sum()
    }

    /// All filters, sorted by name.
    pub fn all(&self) -> Vec<Arc<CfNamed>> {
        sorted_by_name(&self.map)
    }

    /// Creates a filter and writes its file. The caller has checked the
    /// name and that no Bloom filter has it, under the store's snapshot lock.
    pub fn create(&self, name: &str, spec: &DeletableSpec) -> Result<Arc<CfNamed>, StoreError> {
        if self.has(name) {
            return Err(StoreError::Exists(name.into()));
        }
        let chain = Chain::new(spec, &self.shared.limits)?;
        self.install(name, chain)
    }

    fn install(&self, name: &str, chain: Chain) -> Result<Arc<CfNamed>, StoreError> {
        let named = Arc::new(CfNamed::new(name.into(), chain, self.shared.clone()));
        // A whitelist a namesake left (a delete cut short) is not this
        // filter's.
        let wl = named.whitelist_path();
        match std::fs::remove_file(&wl) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(StoreError::io(
                    format_args!("{}: cannot remove", wl.display()),
                    e,
                ))
            }
            _ => {}
        }
        self.save(&named)?;
        self.ever.store(true, Relaxed);
        write(&self.map).insert(name.into(), named.clone());
        Ok(named)
    }

    /// Deletes a filter (or a load in progress) and its file. Returns
    /// whether it existed. Under the store's snapshot lock.
    pub fn delete(&self, name: &str) -> bool {
        let loading = lock(&self.loading).remove(name).is_some();
        let Some(named) = write(&self.map).remove(name) else {
            return loading;
        };
        {
            let _w = write(&named.state);
            named.deleted.store(true, Relaxed);
        }
        let dir = &self.shared.dir;
        let path = cf_path(dir, name);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(files::whitelist_path(dir, name, false));
        if lock(&named.export).is_some() {
            // Else the next start would serve the CLI's file again.
            let _ = std::fs::remove_file(files::bgf_path(dir, name));
            let _ = std::fs::remove_file(Whitelist::path_for(&files::bgf_path(dir, name)));
        }
        bloomgate_engine::atomic::sync_parent(&path);
        true
    }

    /// Writes the chain's file with the changes it contains now.
    fn save(&self, named: &CfNamed) -> Result<(), StoreError> {
        named.save_to(&self.shared.dir, &read(&named.state))
    }

    /// Saves every changed filter (a snapshot, after the log's rotation).
    /// Returns how many were saved, or the first failure (the others are
    /// still attempted).
    pub fn snapshot(&self) -> Result<usize, StoreError> {
        let mut saved = 0;
        let mut failure = None;
        for n in self.all() {
            if !n.dirty.load(Relaxed) || n.deleted.load(Relaxed) {
                continue;
            }
            match self.save(&n) {
                Ok(()) => saved += 1,
                Err(e) => failure = Some(e),
            }
        }
        failure.map_or(Ok(saved), Err)
    }

    /// Whether any filter has changes not in its file.
    pub fn any_dirty(&self) -> bool {
        read(&self.map).values().any(|n| n.dirty.load(Relaxed))
    }

    /// Applies a logged change at startup, exactly once (see
    /// [`CfNamed::replay`]).
    pub fn replay(&self, rec: CuckooRecord) {
        if let Some(n) = self.get(&rec.name) {
            n.replay(rec);
        }
    }
}

impl super::LocalStore {
    /// The deletable filters.
    pub fn deletables(&self) -> &Deletables {
        &self.cuckoo
    }

    /// Creates a deletable filter and writes its file.
    pub fn cf_create(&self, name: &str, spec: &DeletableSpec) -> Result<Arc<CfNamed>, StoreError> {
        if !super::valid_name(name) {
            return Err(StoreError::BadName(name.into()));
        }
        let _snap = lock(&self.snapshot_lock);
        self.not_damaged(name)?;
        self.refuse_listed(name)?;
        if self.get(name).is_some() {
            return Err(StoreError::Exists(name.into()));
        }
        let made = self.cuckoo.create(name, spec);
        self.recount_memory();
        made
    }

    /// Adds a copy of each entry to a deletable filter, or with
    /// [`AddMode::IfAbsent`] each entry not found ([`Store::add_with`]):
    /// the whole batch refused for an entry too long
    /// ([`StoreError::TooLong`]) or not valid for the filter's key rules;
    /// per entry [`AddOutcome::New`], [`AddOutcome::Exists`] (found, if
    /// absent only), or [`AddOutcome::NoRoom`] where no table had room
    /// (the later entries are still tried).
    ///
    /// [`Store::add_with`]: crate::store::Store::add_with
    pub fn add_deletable(
        &self,
        n: &CfNamed,
        entries: &[&[u8]],
        mode: AddMode,
        out: &mut Vec<AddOutcome>,
    ) -> Result<Ack, StoreError> {
        let limit = self.limits.max_item_bytes;
        if let Some(e) = entries.iter().find(|e| e.len() > limit) {
            return Err(StoreError::TooLong {
                bytes: e.len(),
                limit,
            });
        }
        let mut added = Vec::with_capacity(entries.len());
        let ack = n.add(entries, mode == AddMode::IfAbsent, &mut added)?;
        out.extend(added.iter().map(|a| match a {
            CfAdded::Added => AddOutcome::New,
            CfAdded::Exists => AddOutcome::Exists,
            CfAdded::Full => AddOutcome::NoRoom,
        }));
        Ok(ack)
    }

    /// `CF.LOADCHUNK` (see [`Deletables::loadchunk`]).
    pub fn cf_loadchunk(&self, name: &str, iter: u64, data: &[u8]) -> Result<(), StoreError> {
        if !super::valid_name(name) {
            return Err(StoreError::BadName(name.into()));
        }
        let _snap = lock(&self.snapshot_lock);
        self.not_damaged(name)?;
        if iter == 1 && self.get(name).is_some() {
            return Err(StoreError::Exists(name.into()));
        }
        if iter == 1 {
            self.refuse_listed(name)?;
        }
        if iter == 1 && !self.cuckoo.has(name) {
            // The stream's data is buffered until its last chunk: reserved
            // now, before the buffer is allocated.
            let total = parse_dump_header(data, self.limits.max_filter_bytes)?;
            self.reserve_memory(total)?;
        }
        let loaded = self.cuckoo.loadchunk(name, iter, data, &self.limits);
        if iter == 1 || loaded.is_err() {
            self.recount_memory();
        }
        loaded
    }
}
