//! One served deletable filter ([`CfNamed`]): its lookups, and its changes
//! in one hop from the store: an add or a delete is applied under the
//! filter's write lock, numbered, and queued to the write-ahead log in that
//! order; the reply waits for the log's fsync ([`Ack`]). Replay at startup
//! applies a logged change exactly once ([`CfNamed::replay`]).
//!
//! # The whitelist
//!
//! A whitelist edit is not a change of the chain and is not logged: as a
//! Bloom filter's, it is made on a copy, written to the whitelist's file
//! (atomically) and only then served ([`CfNamed::whitelist`]), so it is
//! durable when it returns and a failure changes nothing. The file is
//! `NAME.cf.whitelist`, or, while the filter is exported to a `NAME.bgf`
//! the CLI built, that file's `NAME.bgf.whitelist`, which the CLI reads
//! and edits too; when the export stops (a chain grown past one table) the
//! whitelist is written to `NAME.cf.whitelist` with the next save. Replay
//! leaves it alone: it does not depend on the chain's contents.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock, RwLockWriteGuard};

use bloomgate_blacklist::cf_file;
use bloomgate_blacklist::wal::{CuckooOp, CuckooRecord};
use bloomgate_blacklist::VerdictRef;
use bloomgate_list::check::CheckScratch;
use bloomgate_url::KeyError;

use super::chain::{CfAdded, CfInfo, Chain};
use super::files::{bgf_path, cf_path, whitelist_path};
use super::{lock, read, write, DumpHeads, Shared};
use crate::store::{Ack, StoreError};
use crate::wal::{self, Wal};

/// One served deletable filter.
pub struct CfNamed {
    pub(super) name: String,
    pub(super) state: RwLock<Chain>,
    /// Changed since its file was written.
    pub(super) dirty: AtomicBool,
    /// Deleted (a handle kept by a caller refers to nothing).
    pub(super) deleted: AtomicBool,
    /// The log's failure count when this chain's last change was queued
    /// (see [`CfNamed::settle`]).
    logged_epoch: AtomicU64,
    /// The tables' engine headers of a `CF.SCANDUMP` in progress, with the
    /// `seq` they were made at: each chunk is cut from them and the tables
    /// without checksumming the tables again.
    pub(super) dump: Mutex<Option<(u64, DumpHeads)>>,
    /// Exported to `NAME.bgf` at each save: the hashes of the last two
    /// files written (the `.cf` header's `bgf`).
    pub(super) export: Mutex<Option<Vec<u64>>>,
    /// The data directory, the limits, the log and the metrics.
    pub(super) shared: Arc<Shared>,
    /// Held by a whitelist edit from its copy to its serving, so that the
    /// file always holds the last edit.
    whitelist_edit: Mutex<()>,
}

/// `item` as the chain stores it, by the library's list
/// ([`bloomgate_list::TableList::entry_key`]: raw items as they are, the
/// empty one included; others normalized as the CLI's `add` and `remove`
/// do).
fn normalized<'i>(c: &Chain, item: &'i [u8]) -> Result<std::borrow::Cow<'i, [u8]>, StoreError> {
    c.list.entry_key(item).map_err(|e| match e {
        bloomgate_list::Error::InvalidItem { reason, .. } => {
            StoreError::Invalid(format!("invalid item: {reason}"))
        }
        e => e.into(),
    })
}

/// The error of a delete that the chain refused.
fn refused(name: &str, e: bloomgate_list::Error) -> StoreError {
    let e = match e {
        bloomgate_list::Error::Ambiguous(e) => e,
        other => return other.into(),
    };
    StoreError::Ambiguous(format!(
        "cannot delete this item from '{name}' safely: it matches in sub-filters {:?} \
         (0 = the oldest), which are hashed separately (sub-filters saved by an older \
         bloomgate, or counting filters), so the delete cannot tell which copy is this \
         item's, and taking another item's would make that item a false negative; nothing \
         was deleted",
        e.tables
    ))
}

impl CfNamed {
    pub(super) fn new(name: String, chain: Chain, shared: Arc<Shared>) -> CfNamed {
        CfNamed {
            name,
            state: RwLock::new(chain),
            dirty: AtomicBool::new(false),
            deleted: AtomicBool::new(false),
            logged_epoch: AtomicU64::new(0),
            dump: Mutex::new(None),
            export: Mutex::new(None),
            shared,
            whitelist_edit: Mutex::new(()),
        }
    }

    /// The filter's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its whitelist as it is now (shared with the list: a reference
    /// count, not a copy).
    pub fn whitelisted(&self) -> bloomgate_blacklist::Whitelist {
        read(&self.state).list.list().whitelist().clone()
    }

    /// Answers many queries by the library's list
    /// ([`bloomgate_list::TableList::check_each`]), as the CLI's `check`
    /// answers them for the same file: a filter built by the CLI with key
    /// rules canonicalizes each query into every lookup key of its match
    /// mode, and its whitelist applies; a raw filter takes the empty item
    /// as an entry (as RedisBloom's `CF.ADD` does). `each` gets one result
    /// per query, in order.
    pub fn check_many(
        &self,
        queries: &[&[u8]],
        scratch: &mut CheckScratch,
        each: impl FnMut(Result<VerdictRef<'_>, KeyError>),
    ) {
        read(&self.state).list.check_each(queries, scratch, each);
    }

    /// Matching fingerprints of `item` (an upper bound of its copies; for
    /// a counting filter its smallest counter). 0 for an item that cannot
    /// be normalized.
    pub fn count(&self, item: &[u8]) -> u64 {
        read(&self.state).list.count(item)
    }

    /// Whitelists (`add`) or takes off the whitelist each of `items`: per
    /// item, whether it was a hit (add) or was there (remove), or why it is
    /// not a valid entry. The library's edit made on a copy
    /// ([`bloomgate_list::TableList::whitelist_edited`]), written to the
    /// whitelist's file under the chain's read lock (lookups go on; a
    /// delete of the filter waits, then removes the file), then served:
    /// durable when it returns, and nothing changed if it fails.
    pub fn whitelist(
        &self,
        items: &[&[u8]],
        add: bool,
    ) -> Result<Vec<Result<bool, KeyError>>, StoreError> {
        let _edit = lock(&self.whitelist_edit);
        let (whitelist, out) = {
            let c = read(&self.state);
            if self.deleted.load(Relaxed) {
                return Err(StoreError::NotFound(self.name.clone()));
            }
            let (whitelist, out) = c.list.whitelist_edited(items, add)?;
            whitelist
                .save(&self.whitelist_path())
                .map_err(bloomgate_blacklist::Error::from)?;
            (whitelist, out)
        };
        write(&self.state).list.set_whitelist(whitelist);
        Ok(out)
    }

    /// The whitelist's file (see the module documentation).
    pub(super) fn whitelist_path(&self) -> PathBuf {
        whitelist_path(&self.shared.dir, &self.name, lock(&self.export).is_some())
    }

    /// Whether a change would wait for the chain's lock (a snapshot is
    /// copying it): a front end then makes the change off its event loop.
    pub fn write_busy(&self) -> bool {
        self.state.try_write().is_err()
    }

    /// Sub-filters in the chain.
    pub fn filters(&self) -> usize {
        read(&self.state).tables().len()
    }

    /// `CF.INFO`'s figures.
    pub fn info(&self) -> CfInfo {
        read(&self.state).info(&self.name)
    }

    fn wal(&self) -> Result<&Wal, StoreError> {
        self.shared
            .wal
            .get()
            .map(|w| &**w)
            .ok_or_else(|| StoreError::Invalid("the write-ahead log is not open yet".into()))
    }

    /// Adds `items` (`nx`: only those absent); one outcome per item, in
    /// order (an item no table had room for is `Full`, and the later ones
    /// are still tried). Visible at once; durable once the returned [`Ack`]
    /// resolves (with all earlier changes). The store has checked the
    /// items' lengths ([`LocalStore::add_deletable`]).
    ///
    /// [`LocalStore::add_deletable`]: crate::store::LocalStore::add_deletable
    pub fn add(
        &self,
        items: &[&[u8]],
        nx: bool,
        out: &mut Vec<CfAdded>,
    ) -> Result<Ack, StoreError> {
        let limits = &self.shared.limits;
        let (wal, mut c) = self.begin_write()?;
        let mut log = Vec::new();
        let keys = items
            .iter()
            .map(|i| normalized(&c, i))
            .collect::<Result<Vec<_>, _>>()?;
        let before = out.len();
        for item in &keys {
            let item: &[u8] = item;
            let r = c.add(item, nx, limits, false);
            if r == CfAdded::Added {
                c.seq += 1;
                wal::encode_cuckoo(&mut log, &self.name, c.id, c.seq, CuckooOp::Add, item);
            }
            out.push(r);
        }
        let added = out[before..]
            .iter()
            .filter(|o| **o == CfAdded::Added)
            .count();
        self.shared
            .metrics
            .items_added
            .fetch_add(added as u64, Relaxed);
        Ok(self.queue(wal, log))
    }

    /// Deletes one copy of `item`. Returns whether one was found, and the
    /// [`Ack`] that resolves once the change (and all earlier ones) is
    /// durable.
    pub fn delete_item(&self, item: &[u8]) -> Result<(bool, Ack), StoreError> {
        let (wal, mut c) = self.begin_write()?;
        let mut log = Vec::new();
        let key = normalized(&c, item)?;
        let item: &[u8] = &key;
        let found = c.delete(item).map_err(|e| refused(&self.name, e))?;
        if found {
            c.seq += 1;
            wal::encode_cuckoo(&mut log, &self.name, c.id, c.seq, CuckooOp::Delete, item);
        }
        Ok((found, self.queue(wal, log)))
    }

    /// The start of every change: the log (refused while it refuses
    /// writes), the chain's write lock, the filter still there (not
    /// deleted meanwhile), and the chain settled against the log
    /// ([`CfNamed::settle`]).
    fn begin_write(&self) -> Result<(&Wal, RwLockWriteGuard<'_, Chain>), StoreError> {
        let wal = self.wal()?;
        if let Some(e) = wal.refusing() {
            return Err(e.into());
        }
        let c = write(&self.state);
        if self.deleted.load(Relaxed) {
            return Err(StoreError::NotFound(self.name.clone()));
        }
        self.settle(&c, wal)?;
        Ok((wal, c))
    }

    /// Before a change: if the log failed since this chain's last change
    /// was queued, that change may not be in the log although it is in
    /// memory; the chain is saved first, so that the log's sequence
    /// numbers continue from a file that contains it.
    /// Called under the chain's write lock, right before the change is
    /// queued: a group that failed before this check has counted its
    /// failure, and one that fails after it also fails every group queued
    /// behind it until the log's retry is due ([`wal::RETRY`]), this one's
    /// included, which then is not acknowledged.
    fn settle(&self, c: &Chain, wal: &Wal) -> Result<(), StoreError> {
        let now = wal.failures();
        if self.logged_epoch.load(Relaxed) != now {
            if self.dirty.load(Relaxed) {
                self.save_to(&self.shared.dir, c)?;
            }
            self.logged_epoch.store(now, Relaxed);
        }
        Ok(())
    }

    /// Queues `log` (under the chain's write lock, so the log receives the
    /// changes in sequence order). An empty `log` still gets an [`Ack`]
    /// that resolves after everything queued before it: an answer that
    /// depends on an earlier change ("exists", "not found") is not given
    /// before that change is durable.
    fn queue(&self, wal: &Wal, log: Vec<u8>) -> Ack {
        if !log.is_empty() {
            self.dirty.store(true, Relaxed);
        }
        Ack::from(Some(wal.append(log)))
    }

    /// Applies a logged change at startup, exactly once: only a change of
    /// the served incarnation that its file does not contain yet.
    pub(super) fn replay(&self, rec: CuckooRecord) {
        let mut c = write(&self.state);
        if c.id != rec.id || rec.seq <= c.seq {
            return;
        }
        if rec.seq != c.seq + 1 {
            // Unlogged changes (a failed log write) are saved before the
            // next logged one (`settle`), so this means a lost segment.
            tracing::warn!(
                "bloomgate serve: cuckoo filter '{}': log changes {}..{} are missing",
                rec.name,
                c.seq + 1,
                rec.seq - 1
            );
        }
        match rec.op {
            CuckooOp::Add => {
                // An acknowledged add is placed whatever the growth rules,
                // the size limit and the budget say.
                if c.add(&rec.item, false, &self.shared.limits, true) != CfAdded::Added {
                    tracing::error!(
                        "bloomgate serve: cuckoo filter '{}': a logged add could not be replayed (no room)",
                        rec.name
                    );
                }
            }
            CuckooOp::Delete => match c.delete(&rec.item) {
                Ok(true) => {}
                Ok(false) => tracing::warn!(
                    "bloomgate serve: cuckoo filter '{}': a logged delete found nothing to delete",
                    rec.name
                ),
                // Kept rather than risk another item's copy: a false
                // positive at worst.
                Err(e) => tracing::warn!(
                    "bloomgate serve: cuckoo filter '{}': a logged delete was not replayed: {e}",
                    rec.name
                ),
            },
        }
        c.seq = rec.seq;
        self.dirty.store(true, Relaxed);
    }
}

impl CfNamed {
    /// Writes `NAME.cf` for `c`, this filter's chain, then, for a filter
    /// exported to `NAME.bgf`, that file (the new file's hash is in `NAME.cf`
    /// before the file is written, so a crash between the two leaves a
    /// `NAME.bgf` that `NAME.cf` still names).
    pub(super) fn save_to(&self, dir: &Path, c: &Chain) -> Result<(), StoreError> {
        use std::io::Write;
        let (mut h, body) = c.image();
        let mut export = lock(&self.export);
        let mut hashes = export.clone();
        if hashes.is_some() && body.len() != 1 {
            // A replayed add grew it past one table: one engine file cannot
            // hold it.
            tracing::warn!(
                "bloomgate serve: cuckoo filter '{}' has {} sub-filters and is no longer exported to {}.bgf",
                self.name,
                body.len(),
                self.name
            );
            hashes = None;
        }
        let image = match (hashes.as_mut(), body.first()) {
            (Some(list), Some(one)) => {
                let mut sum = xxhash_rust::xxh3::Xxh3::new();
                one.pieces().iter().for_each(|p| sum.update(p));
                let sum = sum.digest();
                if list.last() != Some(&sum) {
                    list.push(sum);
                }
                if list.len() > 2 {
                    list.remove(0);
                }
                Some(one)
            }
            _ => None,
        };
        h.bgf = hashes.clone();
        self.dirty.store(false, Relaxed);
        let failed = |path: PathBuf, e: std::io::Error| {
            self.dirty.store(true, Relaxed);
            StoreError::io(path.display(), e)
        };
        let path = cf_path(dir, &self.name);
        bloomgate_engine::atomic::replace_with(&path, |f| cf_file::write(f, &h, &body))
            .map_err(|e| failed(path.clone(), e.into()))?;
        if export.is_some() && hashes.is_none() {
            // No longer exported: the whitelist moves to its own file.
            let wl = whitelist_path(dir, &self.name, false);
            c.list.list().whitelist().save(&wl).map_err(|e| {
                self.dirty.store(true, Relaxed);
                StoreError::from(bloomgate_blacklist::Error::from(e))
            })?;
        }
        *export = hashes;
        if let Some(image) = image {
            let bgf = bgf_path(dir, &self.name);
            bloomgate_engine::atomic::replace_with(&bgf, |f| {
                image.pieces().iter().try_for_each(|p| f.write_all(p))
            })
            .map_err(|e| failed(bgf.clone(), e.into()))?;
        }
        Ok(())
    }
}
