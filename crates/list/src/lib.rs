//! One type for a list, whatever its layout or store: [`List`].
//!
//! bloomgate keeps a blacklist in several shapes. A `.bgf` file holds a
//! Bloom filter (blocked or classic, possibly grown into layers, possibly
//! inside a served data directory whose live adds are replayed), or a
//! deletable filter (counting or cuckoo); a `redis://HOST/NAME` or
//! `redis+cluster://…/NAME` address names a blocked filter stored in Redis
//! shards. What a user asks of each is the same: is this URL on the list,
//! add it, take it off, whitelist a false positive, describe the list. A
//! front end (the CLI, the Python package, the server) translates its
//! arguments into those operations on a [`List`] and never asks which
//! shape it holds. A server that keeps a Bloom filter's state itself (live
//! adds through its log, layers grown in memory) publishes it as a
//! [`BloomList`]: the same `List` over the layers it holds; its counting
//! and cuckoo filters are each a [`TableList`], the same `List` over the
//! chain of tables it holds (the `table` module: a file's chain of one
//! table, a served chain grown within the server's limits).
//!
//! # One enum, one `match` per operation
//!
//! The shapes are a closed set kept in a private enum (`Store`), and each
//! operation is one `match` over it, in this crate. A trait object was the
//! alternative; it was not taken because the shapes differ in which
//! operations they have at all (a Bloom filter cannot delete, a filter in
//! Redis has no checksum), and an enum makes each such refusal one arm
//! returning a typed [`Error`] beside the arms that work, where a reader
//! sees all of them at once. Adding a shape is one variant, its opener in
//! [`List::open_with`], and one arm per `match` below: a data directory
//! served as a whole (rather than one `.bgf` in it, which the Bloom arm
//! already answers with the live adds replayed) would be one more variant,
//! as the static ribbon layout is (`Store::Static`: lookups, whitelist,
//! info and verify like any file; removes refused, since it is solved once
//! from all its entries; adds taken into a small Bloom delta beside it,
//! durable in the file of added keys `NAME.bgf.delta` and folded in by the
//! next build: the `delta` module).
//!
//! # The verdict, computed once
//!
//! [`List::check_many`] answers a batch of queries in three steps that are
//! the same for every shape: each query becomes its lookup keys by the
//! list's key kind and match mode ([`bloomgate_url::query_keys`]); the
//! store says which keys it (probably) holds, for the whole batch at once
//! (the engine's pipelined batch lookup, one Redis pipeline per node, or a
//! lookup per key in a counting or cuckoo table) — the only step that
//! differs; and the whitelist rule ([`bloomgate_blacklist::verdict_ref`])
//! turns each query's keys and answers into one [`Verdict`]. The three
//! steps are [`check::check_many`], which the server's filters reach
//! through a [`List`] (its files of other layouts), a [`BloomList`] (its
//! Bloom filters), a [`TableList`] (its counting and cuckoo filters) or
//! with their own membership step (a filter in Redis, answered in parts):
//! the verdict is computed in one place for every shape and every front
//! end.
//!
//! # Never "absent" when the list cannot tell
//!
//! A truncated or damaged file fails to open (its header records its
//! length and a checksum that [`OpenOptions::verify`] and [`List::verify`]
//! compare); a Redis node that is down, or a shard that was evicted, fails
//! the whole batch ([`Error::Redis`]). None of them is ever turned into an
//! "absent" answer: an error is the only honest answer then.
#![deny(missing_docs)]

mod bloom;
pub mod check;
mod delta;
mod error;
pub mod info;
mod open;
pub mod stamp;
mod table;
pub mod units;

use std::path::{Path, PathBuf};

use bloomgate_blacklist::datadir::DirLock;
use bloomgate_blacklist::{Blacklist, Opened, VerdictRef, Whitelist};
use bloomgate_engine::{DeletableTable, Removal, Ribbon};
use bloomgate_redis::{Added, RedisFilter};
use bloomgate_url::{entry_key, query_keys, KeyError, KeyKind, MatchMode};

use open::{is_static, open_bloom, open_redis, open_static, rules_of, verify_layers};

pub use bloom::BloomList;
pub use check::{CheckScratch, Verdict};
pub use delta::{DELTA_FIRST_ITEMS, MIN_DELTA_SHARE};
pub use error::Error;
pub use info::Info;
pub use stamp::{Change, Stamp};
pub use table::{TableList, TablePlan};

/// How a list is opened ([`List::open_with`]).
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// A file in a served data directory: answer from the filter files
    /// alone, without the live adds of its journal and log. Not for Redis.
    pub snapshot_only: bool,
    /// Read every file whole and compare it with its checksum before
    /// answering (on the files as they are, before live adds are
    /// replayed). Not for Redis.
    pub verify: bool,
    /// Redis: read the password from this file.
    pub password_file: Option<PathBuf>,
    /// Hold the data directory's lock while the list is open (refused
    /// while a server runs there): for whitelist edits, which a running
    /// server would write over.
    pub lock: bool,
    /// Open for adds and removes: a Bloom file's layers writable (its data
    /// directory locked, every layer marked dirty until [`List::save`]); a
    /// counting or cuckoo file changed in memory and written whole by
    /// [`List::save`]. A filter in Redis takes changes in any case.
    pub update: bool,
    /// A static (ribbon) file: read it whole into memory of its own, on huge
    /// pages where the kernel gives them, instead of mapping the file
    /// ([`Ribbon::open_in_memory`]): for a server that answers from a filter
    /// of many gigabytes. Other layouts ignore it.
    pub in_memory: bool,
    /// Opened by the server of the file's data directory, which holds the
    /// directory's lock itself: an update takes no lock of its own (for a
    /// static list served through `List`, whose adds the server makes
    /// through it).
    pub served: bool,
}

/// What an add did to one key ([`List::add_keys`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The key was new: this add put it on the list.
    New,
    /// The key was (probably) on the list already.
    Present,
    /// The add was sent to Redis but no reply came back: it may have run.
    /// Treat the key as new — its claim may be nobody else's.
    Unknown,
    /// The add did not run: not sent after a failure, or refused.
    NotAdded,
}

/// What [`List::add_keys`] did: one [`Claim`] per key, in order, and the
/// failure that stopped the adds, if any (then some keys are
/// [`Claim::Unknown`] or [`Claim::NotAdded`]).
#[derive(Debug)]
pub struct Claims {
    /// Per key, in order.
    pub outcomes: Vec<Claim>,
    /// The first failure.
    pub error: Option<Error>,
}

/// A static ribbon filter file with its key rules, whitelist and delta of
/// added keys.
#[derive(Debug)]
struct Static {
    filter: Ribbon,
    kind: KeyKind,
    mode: MatchMode,
    whitelist: Whitelist,
    delta: delta::Delta,
}

/// The shapes of a list (see the crate documentation).
#[derive(Debug)]
enum Store {
    /// A Bloom filter file, blocked or classic, with all its layers; in a
    /// data directory with its live adds (unless snapshot-only).
    Bloom(Box<Blacklist>),
    /// A chain of counting or cuckoo tables: a file (one table), or a
    /// server's filter ([`TableList`]).
    Table(Box<table::Table>),
    /// A blocked filter in Redis or Redis Cluster.
    Redis(Box<RedisFilter>),
    /// A static ribbon filter file.
    Static(Box<Static>),
}

/// A list: one filter with its key rules and whitelist, in a file or in
/// Redis (see the crate documentation).
#[derive(Debug)]
pub struct List {
    /// The path as given, or the Redis address without its password.
    address: String,
    store: Store,
    options: OpenOptions,
    _lock: Option<DirLock>,
}

impl List {
    /// Opens the list at `address` for reading: a `.bgf` file of any
    /// layout, or a `redis://…/NAME` / `redis+cluster://…/NAME` address.
    pub fn open(address: &str) -> Result<List, Error> {
        List::open_with(address, &OpenOptions::default())
    }

    /// Opens the list at `address` as `options` say. Options that do not
    /// apply to the store are refused ([`Error::Unsupported`]) before it is
    /// read.
    pub fn open_with(address: &str, options: &OpenOptions) -> Result<List, Error> {
        let (shown, store, lock) = if bloomgate_redis::is_redis_address(address) {
            open_redis(address, options)?
        } else if table::is_table(address) {
            table::open(address, options)?
        } else if is_static(address) {
            open_static(address, options)?
        } else {
            open_bloom(address, options)?
        };
        Ok(List {
            address: shown,
            store,
            options: options.clone(),
            _lock: lock,
        })
    }

    /// Wraps a counting or cuckoo table made in memory as the list that
    /// [`List::save`] writes to `path`, with an empty whitelist.
    pub fn from_table(table: DeletableTable, path: &str) -> Result<List, Error> {
        let (kind, mode) = table.key_rules();
        let rules = rules_of(path, kind, mode)?;
        let store = Store::Table(Box::new(table::Table::file(
            table,
            rules,
            Whitelist::default(),
        )));
        Ok(List::held(path.to_string(), store, true))
    }

    /// A list over a store made in memory, which no file opened and no
    /// lock guards (a caller holds it): `update` if it takes changes.
    fn held(address: String, store: Store, update: bool) -> List {
        List {
            address,
            store,
            options: OpenOptions {
                update,
                ..OpenOptions::default()
            },
            _lock: None,
        }
    }

    /// The list's path as given, or its Redis address without the password.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// What the entries are.
    pub fn kind(&self) -> KeyKind {
        self.rules().0
    }

    /// How queries match them.
    pub fn mode(&self) -> MatchMode {
        self.rules().1
    }

    fn rules(&self) -> (KeyKind, MatchMode) {
        match &self.store {
            Store::Bloom(b) => (b.kind(), b.mode()),
            Store::Table(t) => (t.kind, t.mode),
            Store::Redis(r) => (r.kind(), r.mode()),
            Store::Static(t) => (t.kind, t.mode),
        }
    }

    /// The layout's name: `blocked`, `classic`, `counting`, `cuckoo`,
    /// `ribbon`.
    pub fn layout(&self) -> &'static str {
        match &self.store {
            Store::Bloom(b) => b.filter().params().layout.name(),
            Store::Table(t) => t.newest().kind().name(),
            Store::Redis(r) => r.meta().params.layout.name(),
            Store::Static(_) => "ribbon",
        }
    }

    /// The exact list of known false positives.
    pub fn whitelist(&self) -> &Whitelist {
        match &self.store {
            Store::Bloom(b) => b.whitelist(),
            Store::Table(t) => &t.whitelist,
            Store::Redis(r) => r.whitelist(),
            Store::Static(t) => &t.whitelist,
        }
    }

    /// What opening found around a file (its data directory, the live adds
    /// replayed, damaged log tails skipped); empty for other stores.
    pub fn opened(&self) -> &Opened {
        static NONE: std::sync::OnceLock<Opened> = std::sync::OnceLock::new();
        match &self.store {
            Store::Bloom(b) => b.opened(),
            Store::Table(_) | Store::Redis(_) | Store::Static(_) => {
                NONE.get_or_init(Opened::default)
            }
        }
    }

    /// The (newest) counting or cuckoo table behind a deletable list (for
    /// the statistics a front end prints after changing it); `None`
    /// otherwise.
    pub fn table(&self) -> Option<&DeletableTable> {
        match &self.store {
            Store::Table(t) => Some(t.newest()),
            Store::Bloom(_) | Store::Redis(_) | Store::Static(_) => None,
        }
    }

    /// Normalizes one entry as the list's key kind requires (the empty
    /// entry of a served table list is itself: [`TableList`]).
    pub fn entry_key<'a>(&self, entry: &'a [u8]) -> Result<std::borrow::Cow<'a, [u8]>, Error> {
        let (kind, mode) = self.rules();
        if entry.is_empty() && self.takes_empty() {
            return Ok(entry.into());
        }
        entry_key(kind, mode, entry).map_err(|reason| Error::InvalidItem {
            item: String::from_utf8_lossy(entry).into_owned(),
            kind,
            reason,
        })
    }

    /// Whether the store (probably) holds each key: `found` gets one answer
    /// per key (`spare`: a buffer for a filter of several layers). The one
    /// step of a lookup that differs between stores.
    fn contains_many(
        &self,
        keys: &[&[u8]],
        found: &mut Vec<bool>,
        spare: &mut Vec<bool>,
    ) -> Result<(), Error> {
        match &self.store {
            Store::Bloom(b) => b.layers().contains_batch(keys, found, spare),
            Store::Table(t) => t.contains_many(keys, found),
            Store::Redis(r) => *found = r.contains_keys(keys)?,
            Store::Static(t) => {
                t.filter.contains_many(keys, found);
                let mut scratch = Vec::new();
                t.delta.or_into(keys, found, spare, &mut scratch)?;
            }
        }
        Ok(())
    }

    /// Answers many queries (lines as a user gives them), one result per
    /// query in `out` (cleared first): a [`Verdict`], or why the query is
    /// not a valid query of the list's key kind. The `Err` of the whole
    /// call means the store could not answer (a Redis node down, a shard
    /// missing): no verdict is given then, rather than "absent". The
    /// verdict is [`check::check_many`]'s, as for every served filter.
    pub fn check_many<'q>(
        &self,
        queries: impl IntoIterator<Item = &'q [u8]>,
        s: &mut CheckScratch,
        out: &mut Vec<Result<Verdict, KeyError>>,
    ) -> Result<(), Error> {
        let queries: Vec<&[u8]> = queries.into_iter().collect();
        out.clear();
        self.check_each(&queries, s, |v| out.push(v.map(Verdict::of)))
    }

    /// [`List::check_many`] with each verdict handed to `each` in its
    /// borrowed form ([`VerdictRef`], as the server answers it), one per
    /// query, in order: nothing is collected, and nothing is allocated per
    /// query once `s` has grown. On the `Err` of the whole call the
    /// verdicts `each` got are void.
    pub fn check_each(
        &self,
        queries: &[&[u8]],
        s: &mut CheckScratch,
        each: impl FnMut(Result<VerdictRef<'_>, KeyError>),
    ) -> Result<(), Error> {
        self.check_each_in(
            queries,
            s,
            |keys, found, spare| self.contains_many(keys, found, spare),
            each,
        )
    }

    /// [`check::check_many`] by the list's key rules and whitelist, the
    /// membership `contains_many`'s: the one verdict of every shape (the
    /// empty item of a list that takes it, [`TableList`], looked up as
    /// itself).
    fn check_each_in<E>(
        &self,
        queries: &[&[u8]],
        s: &mut CheckScratch,
        contains_many: impl FnOnce(&[&[u8]], &mut Vec<bool>, &mut Vec<bool>) -> Result<(), E>,
        mut each: impl FnMut(Result<VerdictRef<'_>, KeyError>),
    ) -> Result<(), E> {
        let (kind, mode) = self.rules();
        let wl = self.whitelist();
        let takes_empty = self.takes_empty();
        check::check_many(kind, mode, wl, queries, s, contains_many, |v| match v {
            Err(KeyError::Empty) if takes_empty => {
                each(Ok(check::verdict(wl, &[b""], &[self.holds_empty()])))
            }
            v => each(v),
        })
    }

    /// Whether the store holds the empty item (asked only of a list that
    /// takes it).
    fn holds_empty(&self) -> bool {
        match &self.store {
            Store::Table(t) => t.holds_empty(),
            Store::Bloom(_) | Store::Redis(_) | Store::Static(_) => false,
        }
    }

    /// Whether the empty entry is an entry (a served raw table list's:
    /// [`TableList`]), not an invalid one.
    fn takes_empty(&self) -> bool {
        match &self.store {
            Store::Table(t) => t.takes_empty(),
            Store::Bloom(_) | Store::Redis(_) | Store::Static(_) => false,
        }
    }

    /// Answers one query (see [`List::check_many`]).
    pub fn check(&self, query: &[u8]) -> Result<Result<Verdict, KeyError>, Error> {
        let mut out = Vec::with_capacity(1);
        self.check_many([query], &mut CheckScratch::default(), &mut out)?;
        Ok(out.pop().expect("one answer per query"))
    }

    /// For a check within a memory budget: the Bloom filter to check a slice
    /// at a time when its bits exceed `budget` (`None` when it fits, or no
    /// budget is given). Layouts that are only read whole refuse a budget
    /// smaller than their data ([`Error::Unsupported`]); a filter in Redis
    /// refuses any.
    pub fn sliced(&self, budget: Option<u64>) -> Result<Option<&Blacklist>, Error> {
        let Some(budget) = budget else {
            return Ok(None);
        };
        let refuse = |problem: String| Error::Unsupported {
            address: self.address.clone(),
            problem,
        };
        match &self.store {
            Store::Bloom(b) => Ok((b.layers().bytes() > budget).then_some(&**b)),
            Store::Table(t) if budget < t.bytes() => Err(refuse(format!(
                "checking in slices (--memory {}) is for Bloom filters; this {} filter's {} are memory-mapped whole: leave out --memory",
                units::bytes(budget),
                t.newest().kind(),
                units::bytes(t.bytes())
            ))),
            // Mapped read-only and never written: the kernel keeps what
            // fits of it and reads the rest again, so any budget gives
            // the same answers.
            Store::Table(_) | Store::Static(_) => Ok(None),
            Store::Redis(_) => Err(refuse(
                "a filter in Redis is looked up where it is stored: --memory applies to filter files".into(),
            )),
        }
    }

    /// Fails unless the list was opened for changes.
    fn writable(&self) -> Result<(), Error> {
        match &self.store {
            Store::Bloom(_) | Store::Table(_) | Store::Static(_) if !self.options.update => {
                Err(Error::ReadOnly(self.address.clone()))
            }
            _ => Ok(()),
        }
    }

    /// Adds one entry (normalized by the key kind). Returns true if it was
    /// new: not (probably) on the list before. See [`List::add_key`].
    pub fn add(&mut self, entry: &[u8]) -> Result<bool, Error> {
        let key = self.entry_key(entry)?.into_owned();
        self.add_key(&key)
    }

    /// Adds one normalized key; true if it was new. A Bloom filter and a
    /// filter in Redis set the key's bits, so an add of a present key
    /// changes nothing (add-if-absent; Redis decides atomically among
    /// racing writers, and a Bloom file grows by its fill policy). A
    /// counting or cuckoo table stores one more copy of a key already
    /// present (a multiset, as RedisBloom's `CF.ADD`), so that a later
    /// remove takes back exactly one; a full cuckoo table is
    /// [`Error::Full`]. A static ribbon list takes the key into its delta
    /// (durable when this returns; see [`List::add_keys`]).
    pub fn add_key(&mut self, key: &[u8]) -> Result<bool, Error> {
        self.writable()?;
        match &mut self.store {
            Store::Bloom(b) => Ok(b.update_keys(&[key], false)? == 1),
            Store::Static(t) => {
                let mut claim = [Claim::NotAdded];
                t.delta.add_keys(&t.filter, &[key], &mut claim)?;
                Ok(claim[0] == Claim::New)
            }
            Store::Table(t) => t.add_file_key(key),
            Store::Redis(r) => {
                let report = r.add_keys(&[key]);
                match (report.error, report.outcomes.first()) {
                    (Some(e), _) => Err(e.into()),
                    (None, Some(Added::New)) => Ok(true),
                    (None, _) => Ok(false),
                }
            }
        }
    }

    /// Adds normalized keys, in order, and says what each add did
    /// ([`Claim`]), also when the adds stop part way ([`Claims::error`]).
    /// This is the add-if-absent claim of a shared list: of several
    /// processes adding one key to one filter in Redis at once, exactly
    /// one is told [`Claim::New`] (Redis decides, per key, atomically); of
    /// equal keys in one call, the first. When Redis fails, the replies
    /// that came back are kept, keys sent without a reply are
    /// [`Claim::Unknown`] and keys not sent [`Claim::NotAdded`], so that a
    /// caller can say exactly what happened to each. A Bloom file takes
    /// the keys as one batch (the same answers and bits as
    /// [`List::add_key`] key by key), a counting or cuckoo table key by
    /// key; the first failure ends the adds. A static ribbon list appends
    /// the batch to its file of added keys with one synced write, then
    /// puts the keys the solution lacks into its delta: a key is new when
    /// neither held it; a failure before the write was synced leaves every
    /// key [`Claim::NotAdded`].
    pub fn add_keys<T: AsRef<[u8]>>(&mut self, keys: &[T]) -> Claims {
        let mut claims = Claims {
            outcomes: vec![Claim::NotAdded; keys.len()],
            error: None,
        };
        if let Err(e) = self.writable() {
            claims.error = Some(e);
            return claims;
        }
        if let Store::Redis(r) = &self.store {
            let report = r.add_keys(keys);
            for (c, o) in claims.outcomes.iter_mut().zip(&report.outcomes) {
                *c = match o {
                    Added::New => Claim::New,
                    Added::Present => Claim::Present,
                    Added::Unknown => Claim::Unknown,
                    Added::NotAdded => Claim::NotAdded,
                };
            }
            claims.error = report.error.map(Error::from);
            return claims;
        }
        if let Store::Static(t) = &mut self.store {
            claims.error = t
                .delta
                .add_keys(&t.filter, keys, &mut claims.outcomes)
                .err();
            return claims;
        }
        if let Store::Bloom(b) = &mut self.store {
            // One batch through the engine: the answers and bits of adding
            // the keys one at a time, the hashing and the checksum pages'
            // bookkeeping done once for the batch.
            let mut new = Vec::with_capacity(keys.len());
            let result = b.update_keys_each(keys, false, &mut new);
            for (c, &n) in claims.outcomes.iter_mut().zip(&new) {
                *c = if n { Claim::New } else { Claim::Present };
            }
            claims.error = result.err().map(Error::from);
            return claims;
        }
        for (c, key) in claims.outcomes.iter_mut().zip(keys) {
            match self.add_key(key.as_ref()) {
                Ok(new) => *c = if new { Claim::New } else { Claim::Present },
                Err(e) => {
                    claims.error = Some(e);
                    break;
                }
            }
        }
        claims
    }

    /// Fails with [`Error::CannotRemove`] unless the layout can delete.
    pub fn removable(&self) -> Result<(), Error> {
        let cannot = |layout| Error::CannotRemove {
            address: self.address.clone(),
            layout,
        };
        match &self.store {
            Store::Table(_) => Ok(()),
            Store::Bloom(b) => Err(cannot(b.filter().params().layout.name())),
            Store::Redis(r) => Err(cannot(r.meta().params.layout.name())),
            Store::Static(_) => Err(cannot("ribbon")),
        }
    }

    /// Removes one copy of an entry (normalized by the key kind): see
    /// [`List::remove_key`].
    pub fn remove(&mut self, entry: &[u8]) -> Result<Removal, Error> {
        let key = self.entry_key(entry)?.into_owned();
        self.remove_key(&key)
    }

    /// Removes one copy of a normalized key from a counting or cuckoo
    /// table. **Only remove what was added**: a key never added that tests
    /// present (a false positive) takes another key's copy, which may then
    /// test absent. A Bloom filter is [`Error::CannotRemove`].
    pub fn remove_key(&mut self, key: &[u8]) -> Result<Removal, Error> {
        self.removable()?;
        self.writable()?;
        match &mut self.store {
            Store::Table(t) => t.remove_key(key),
            // Refused by `removable` above.
            Store::Bloom(_) | Store::Redis(_) | Store::Static(_) => Ok(Removal::NotPresent),
        }
    }

    /// Whitelists an item (normalized by the key kind). Returns whether the
    /// list reports it as a hit now: whitelisting something that is not a
    /// hit has no effect, and callers should say so. A file's whitelist is
    /// written by [`List::save_whitelist`]; Redis's at once.
    pub fn whitelist_add(&mut self, item: &[u8]) -> Result<bool, Error> {
        let key = self.entry_key(item)?.into_owned();
        let kind = self.kind();
        let was_hit = self.is_hit(item, &key)?;
        match &mut self.store {
            Store::Bloom(b) => {
                b.whitelist_add(item).map_err(|reason| Error::InvalidItem {
                    item: String::from_utf8_lossy(item).into_owned(),
                    kind,
                    reason,
                })?;
            }
            Store::Table(t) => {
                t.whitelist.insert(key);
            }
            Store::Static(t) => {
                t.whitelist.insert(key);
            }
            Store::Redis(r) => {
                r.whitelist_add(item)?;
            }
        }
        Ok(was_hit)
    }

    /// Whether the list holds `item` (whose entry key is `key`) or any of
    /// its query's lookup keys, whitelisted or not: what a whitelist add
    /// reports, so that a caller can say when whitelisting an item that is
    /// not a hit changes nothing.
    pub(crate) fn is_hit(&self, item: &[u8], key: &[u8]) -> Result<bool, Error> {
        let (kind, mode) = self.rules();
        let mut lookups = vec![key.to_vec()];
        let mut scratch = Vec::new();
        if query_keys(kind, mode, item, &mut scratch).is_ok() {
            lookups.append(&mut scratch);
        }
        let keys: Vec<&[u8]> = lookups.iter().map(Vec::as_slice).collect();
        let mut found = Vec::new();
        self.contains_many(&keys, &mut found, &mut Vec::new())?;
        Ok(found.iter().any(|&f| f))
    }

    /// Whitelists (`add`) or takes off the whitelist each of `items`, in
    /// memory ([`List::whitelist_add`], [`List::whitelist_remove`]): per
    /// item, whether it was a hit (add) or was there (remove), or why it is
    /// not a valid entry of the key kind. Any other failure stops the
    /// edits (those made before it stay made).
    pub fn whitelist_edit(
        &mut self,
        items: &[&[u8]],
        add: bool,
    ) -> Result<Vec<Result<bool, KeyError>>, Error> {
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let r = match add {
                true => self.whitelist_add(item),
                false => self.whitelist_remove(item),
            };
            match r {
                Ok(b) => out.push(Ok(b)),
                Err(Error::InvalidItem { reason, .. }) => out.push(Err(reason)),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Takes an item off the whitelist. Returns whether it was there.
    pub fn whitelist_remove(&mut self, item: &[u8]) -> Result<bool, Error> {
        let key = self.entry_key(item)?.into_owned();
        Ok(match &mut self.store {
            Store::Bloom(b) => b
                .whitelist_remove(item)
                .map_err(|reason| Error::InvalidItem {
                    item: String::from_utf8_lossy(item).into_owned(),
                    kind: b.kind(),
                    reason,
                })?,
            Store::Table(t) => t.whitelist.remove(&key),
            Store::Static(t) => t.whitelist.remove(&key),
            Store::Redis(r) => r.whitelist_remove(item)?,
        })
    }

    /// Writes a file's whitelist beside it, atomically (a filter in Redis
    /// wrote each change at once).
    pub fn save_whitelist(&self) -> Result<(), Error> {
        match &self.store {
            Store::Bloom(b) => b.save_whitelist()?,
            Store::Table(t) => t
                .whitelist
                .save(&Whitelist::path_for(Path::new(&self.address)))
                .map_err(bloomgate_blacklist::Error::from)?,
            Store::Static(t) => t
                .whitelist
                .save(&Whitelist::path_for(Path::new(&self.address)))
                .map_err(bloomgate_blacklist::Error::from)?,
            Store::Redis(_) => {}
        }
        Ok(())
    }

    /// Makes the adds and removes durable: a Bloom file's layers resealed
    /// (bits already set stay set whatever happened), a counting or cuckoo
    /// file replaced whole, atomically. A filter in Redis took each change
    /// at once.
    pub fn save(&mut self) -> Result<(), Error> {
        self.writable()?;
        match &mut self.store {
            Store::Bloom(b) => b.commit()?,
            Store::Table(t) => t.save(Path::new(&self.address))?,
            Store::Redis(_) | Store::Static(_) => {}
        }
        Ok(())
    }

    /// Reads every file of the list whole and compares it with its
    /// checksum (a Bloom file's layers as they are on disk, without the
    /// live adds replayed into this process's copy). A filter in Redis has
    /// no checksum: [`Error::Unsupported`].
    pub fn verify(&self) -> Result<(), Error> {
        match &self.store {
            Store::Bloom(_) => verify_layers(&self.address),
            Store::Table(t) => t.verify(),
            Store::Static(t) => Ok(t.filter.verify()?),
            Store::Redis(_) => Err(Error::Unsupported {
                address: self.address.clone(),
                problem: "a filter in Redis has no checksum to verify".into(),
            }),
        }
    }

    /// Describes the list: what `bloomgate info` prints (see [`info`]).
    pub fn info(&self) -> Result<Info, Error> {
        match &self.store {
            Store::Bloom(b) => Ok(info::bloom(&self.address, b, &self.options)),
            Store::Table(t) => {
                info::table(&self.address, t.newest(), t.whitelist.len(), &self.options)
            }
            Store::Redis(r) => info::redis(r),
            Store::Static(t) => Ok(info::ribbon(
                &self.address,
                &t.filter,
                &t.delta.info(),
                (t.kind, t.mode),
                t.whitelist.len(),
                &self.options,
            )),
        }
    }

    /// Whether the list can take adds at all, whatever it was opened for:
    /// [`Error::Unsupported`] for a static list whose rate leaves its delta
    /// no room (a front end that serves a list says so for an add). Opened
    /// read-only, a list that can is still refused its changes
    /// ([`Error::ReadOnly`]).
    pub fn changeable(&self) -> Result<(), Error> {
        match &self.store {
            Store::Static(t) => t.delta.room().map_err(|problem| Error::Unsupported {
                address: self.address.clone(),
                problem: format!("a ribbon filter takes no adds: {problem}"),
            }),
            _ => Ok(()),
        }
    }

    /// The bytes of the list's filter data (its mapped file for a file).
    pub fn data_bytes(&self) -> u64 {
        match &self.store {
            Store::Bloom(b) => b.layers().bytes(),
            Store::Table(t) => t.bytes(),
            Store::Redis(_) => 0,
            Store::Static(t) => t.filter.file_len() + t.delta.bytes(),
        }
    }
}
