//! The filters a server serves, behind one interface.
//!
//! The front ends ([`crate::http`], [`crate::resp`]) reach filters only
//! through [`Store`] and [`Filter`]: neither knows which implementation
//! serves a filter. There are two: [`LocalStore`], memory-mapped files in a
//! data directory made durable by the write-ahead log ([`crate::wal`]), and
//! [`RedisStore`], filters stored in Redis or Redis Cluster (`bloomgate serve
//! --store redis://…`), whose operations are network calls. The interface is
//! shaped so that both fit without the front ends telling them apart:
//!
//! * **Batches.** Lookups ([`Filter::check_many`]) and adds ([`Store::add`])
//!   take many items at once, so a remote store answers a batch in one trip.
//! * **Typed failure.** Every operation that a remote store cannot always
//!   complete returns a [`StoreError`]; a shard that cannot be read is
//!   [`StoreError::Unavailable`] (HTTP 503, RESP `-TRYAGAIN`), never
//!   "absent". What a store cannot do at all (snapshots, reloading from a
//!   file, `BF.SCANDUMP`) is [`StoreError::Unsupported`], not assumed.
//! * **Durability as a value.** A write returns an [`Ack`] that the front
//!   end waits on before it answers: the local store's resolves when the log
//!   has synced the write (a whole pipeline of adds shares one fsync); a
//!   store whose writes are durable when they return hands back one that is
//!   already done.
//! * **Blocking is declared.** [`Store::is_remote`] and
//!   [`Filter::add_would_block`] tell a front end when a call may wait (on
//!   a lock or the network), so that it moves the call off its event loop.
//! * **Answers that come later.** A remote store batches requests from
//!   all connections; [`Filter::check_later`] and [`Store::add_later`]
//!   queue a lookup or an add without blocking and hand back a receiver of
//!   its answer, so that an event loop keeps many requests in flight.
//!
//! # Why an enum, not a trait object
//!
//! [`Store`] and [`Filter`] are enums over the implementations rather than
//! `dyn` traits. The set is closed (the implementations live in this crate),
//! and the local store's hot path — a pipelined `BF.EXISTS` costs a few
//! hundred nanoseconds, with the next lookups' memory prefetched — stays
//! statically dispatched and inlinable: with one implementation every
//! `match` compiles away, with two it is one predictable branch, not a
//! virtual call per lookup and prefetch. An enum also lets the methods take
//! closures (`each`, called per result without collecting a `Vec`) and
//! lets a connection cache a [`Filter`] by value, which a trait object with
//! generic methods could not offer.
//!
//! # Files
//!
//! | file | role |
//! |---|---|
//! | `store/mod.rs` | the interface: [`Store`], [`Filter`], [`Ack`] and the types they exchange |
//! | `store/error.rs` | [`StoreError`], every failure typed, and [`Damaged`], a filter whose files failed to load |
//! | `store/counters.rs` | a filter's lookup counters ([`Counters`]), the same for every kind |
//! | `store/info.rs` | what a filter says of itself ([`Info`], [`Filter::describe`]), whatever its kind |
//! | `store/local/mod.rs` | [`LocalStore`]: the data directory's filters: open, create, delete, add, whitelist |
//! | `store/local/named.rs` | one local Bloom filter ([`Named`]): the log's and the fill policy's state around the library's list (`BloomList`: lookups, the verdict, whitelist edits), info |
//! | `store/local/growth.rs` | adds that grow a scaling filter |
//! | `store/local/replay.rs` | re-inserting journaled and logged adds |
//! | `store/local/snapshot.rs` | rewriting changed filters, trimming the log into journals |
//! | `store/local/reload.rs` | replacing a filter with a rebuilt file (HTTP reload, SIGHUP) |
//! | `store/local/dump.rs` | `BF.SCANDUMP` / `BF.LOADCHUNK` |
//! | `store/local/listed.rs` | files of every other layout (static ribbon), served through the library's `List` ([`Listed`]): lookups, whitelist, adds into a ribbon list's delta |
//! | `store/redis.rs` | [`RedisStore`]: filters in Redis / Redis Cluster, through `bloomgate_redis` |
//! | `store/redis/named.rs` | [`RedisNamed`]: one Redis filter's handle (revalidation, counters, info) |
//! | `store/redis/named/coalesce.rs` | the Redis store's batching of lookups and adds from all connections |
//! | `store/deletable.rs` | the store's calls that concern a deletable filter's name (`CF.*`: find, create, load) and the narrow methods of what only the `CF.*` protocol asks (`CF.COUNT`, `CF.INFO`); everything else of a deletable filter is every filter's call |
//! | `store/local/deletable/` | deletable filters (cuckoo and counting): the local store's log, registry, files (and the whitelist's), dumps and exactly-once replay of deletes around the library's `TableList` (lookups, adds, removes, whitelist edits) |

mod counters;
pub mod deletable;
mod error;
mod gauges;
mod info;
mod local;
mod redis;

use std::path::Path;
use std::sync::Arc;

use bloomgate_blacklist::{Verdict, VerdictRef};
use bloomgate_url::KeyError;
use serde::Serialize;

use crate::wal;

pub use bloomgate_blacklist::layers::{FillPolicy, Layers, Meta, Purpose};
pub use bloomgate_blacklist::FilterSpec;
pub use counters::Counters;
pub use error::{Damaged, StoreError};
pub use info::{Info, LayerInfo};
pub use local::deletable::{
    check_file as check_cf_file, parse_dump_header as parse_cf_dump_header,
};
pub use local::dump::{parse_dump_header, DUMP_CHUNK};
pub use local::{Listed, LocalStore, LookupScratch, Named};
pub use redis::{
    add_failed, worker_gone, AddReply, Added, CheckReply, Checked, RedisNamed, RedisOptions,
    RedisStore, StoreHealth,
};

/// The filters the server serves (see the [module doc](self)).
pub enum Store {
    /// Filter files in a data directory, with the write-ahead log.
    Local(LocalStore),
    /// Filters stored in Redis or Redis Cluster.
    Redis(RedisStore),
}

/// One served filter, as a cheap handle (clone it freely; it stays valid
/// while the store replaces the filter's contents, and refers to a deleted
/// filter's last state once the name is gone).
#[derive(Clone)]
pub enum Filter {
    /// A Bloom filter of the [`LocalStore`].
    Local(Arc<Named>),
    /// A deletable (counting or cuckoo) filter of the [`LocalStore`]:
    /// [`Store::need`] (and [`Store::cf_get`], for the `CF.*` commands)
    /// hands it out for lookups ([`Filter::check_many`]), adds
    /// ([`Store::add`]: a copy each, as `CF.ADD`; [`AddMode::IfAbsent`],
    /// as `CF.ADDNX`), removes ([`Store::remove`]), whitelist edits
    /// ([`Store::whitelist`]) and dumps ([`Store::scandump`]); what only
    /// the `CF.*` protocol asks of it (`CF.COUNT`, `CF.INFO`) are the
    /// narrow methods of [`deletable`].
    Deletable(Arc<deletable::CfNamed>),
    /// A file of the [`LocalStore`] of another layout (static ribbon),
    /// served through the library's `List`: lookups, whitelist, info, and
    /// adds into its delta (durable when [`Store::add`] returns); every
    /// other change is refused ([`StoreError::ReadOnly`]).
    Listed(Arc<Listed>),
    /// A filter of the [`RedisStore`].
    Redis(Arc<RedisNamed>),
}

/// The acknowledgement of a write: resolves once the write is durable.
/// A front end must not report a write as done before [`Ack::wait`] says so.
#[must_use = "a write is not durable before its Ack resolves"]
pub struct Ack(Option<wal::AckRx>);

impl Ack {
    /// An acknowledgement that is complete already (nothing to wait for).
    pub fn done() -> Ack {
        Ack(None)
    }

    /// Whether there is nothing to wait for.
    pub fn is_done(&self) -> bool {
        self.0.is_none()
    }

    /// Waits until the write is durable, or says why it is not.
    pub async fn wait(self) -> Result<(), StoreError> {
        match self.0 {
            None => Ok(()),
            Some(rx) => match rx.await {
                Ok(r) => r.map_err(StoreError::Wal),
                Err(_) => Err(StoreError::Wal(wal::WalError::io(
                    "log thread stopped",
                    &std::io::ErrorKind::Other.into(),
                ))),
            },
        }
    }

    /// [`Ack::wait`], blocking the thread (tests and tools off the runtime).
    pub fn wait_blocking(self) -> Result<(), StoreError> {
        match self.0 {
            None => Ok(()),
            Some(rx) => rx.blocking_recv().map_err(|_| {
                StoreError::Wal(wal::WalError::io(
                    "log thread stopped",
                    &std::io::ErrorKind::Other.into(),
                ))
            })?,
        }
        .map_err(StoreError::Wal)
    }
}

impl From<Option<wal::AckRx>> for Ack {
    fn from(rx: Option<wal::AckRx>) -> Ack {
        Ack(rx)
    }
}

impl Store {
    /// The Bloom filter called `name`, or a filter of another layout
    /// served read-only (the `BF.*` commands' filters: a deletable
    /// filter's name is not one; see [`Store::cf_get`]).
    #[inline]
    pub fn get(&self, name: &str) -> Option<Filter> {
        match self {
            Store::Local(s) => match s.get(name) {
                Some(n) => Some(Filter::Local(n)),
                None => s.listed(name).map(Filter::Listed),
            },
            Store::Redis(s) => s.get(name).map(Filter::Redis),
        }
    }

    /// The filter called `name`, of any kind (Bloom, counting or cuckoo),
    /// or [`StoreError::NotFound`] (or [`StoreError::Damaged`] for a
    /// filter whose files failed to load). Every kind answers lookups
    /// alike ([`Filter::check_many`]).
    pub fn need(&self, name: &str) -> Result<Filter, StoreError> {
        match self {
            Store::Redis(s) => s.need(name).map(Filter::Redis),
            Store::Local(s) => match s.deletables().get(name) {
                Some(n) => Ok(Filter::Deletable(n)),
                None => match s.listed(name) {
                    Some(l) if s.get(name).is_none() => Ok(Filter::Listed(l)),
                    _ => s.need(name).map(Filter::Local),
                },
            },
        }
    }

    /// The error every command on `name` gets while `name` is a damaged
    /// filter (its files failed to load; see [`Damaged`]). Cheap while no
    /// filter is damaged.
    #[inline]
    pub fn damaged_error(&self, name: &str) -> Option<StoreError> {
        match self {
            Store::Local(s) => s.damaged(name).map(StoreError::from),
            Store::Redis(_) => None,
        }
    }

    /// Whether any filter is damaged (one atomic load).
    #[inline]
    pub fn has_damaged(&self) -> bool {
        match self {
            Store::Local(s) => s.has_damaged(),
            Store::Redis(_) => false,
        }
    }

    /// The damaged filters, sorted by name (for `/healthz`, the list of
    /// filters and the metrics).
    pub fn damaged(&self) -> Vec<Damaged> {
        match self {
            Store::Local(s) => s.damaged_all(),
            Store::Redis(_) => Vec::new(),
        }
    }

    /// A number that changes whenever a filter is added, replaced or
    /// removed: a caller may keep a [`Filter`] from [`Store::get`] for as
    /// long as this stays the same (the Redis front end caches its last
    /// lookup per connection this way).
    #[inline]
    pub fn generation(&self) -> u64 {
        match self {
            Store::Local(s) => s.generation(),
            Store::Redis(s) => s.generation(),
        }
    }

    /// All names, sorted.
    pub fn names(&self) -> Vec<String> {
        match self {
            Store::Local(s) => s.names(),
            Store::Redis(s) => s.names(),
        }
    }

    /// All filters, sorted by name.
    pub fn filters(&self) -> Vec<Filter> {
        match self {
            Store::Local(s) => {
                let mut v: Vec<Filter> = s.all().into_iter().map(Filter::Local).collect();
                v.extend(s.listed_all().into_iter().map(Filter::Listed));
                v.sort_by(|a, b| a.name().cmp(b.name()));
                v
            }
            Store::Redis(s) => s.all().into_iter().map(Filter::Redis).collect(),
        }
    }

    /// Whether the store's calls go over the network and may block: a
    /// front end then makes lookups and adds off its event loop.
    #[inline]
    pub fn is_remote(&self) -> bool {
        match self {
            Store::Local(_) => false,
            Store::Redis(_) => true,
        }
    }

    /// Whether lookups (or adds, `add`) of the filter called `name` can be
    /// queued ([`Filter::check_later`], [`Store::add_later`]) without
    /// blocking: a remote store that serves it already (finding a filter
    /// not yet served asks the network) and, for adds, queues them.
    pub fn can_queue(&self, name: &[u8], add: bool) -> bool {
        match self {
            Store::Local(_) => false,
            Store::Redis(s) => {
                std::str::from_utf8(name).is_ok_and(|n| s.serves(n)) && (!add || s.queues_adds())
            }
        }
    }

    /// Queues an add to a remote store's batch and returns the receiver of
    /// its outcomes (or of its error); `None` when the store does not
    /// queue adds (the local store, or a Redis store that waits for
    /// replicas): [`Store::add`] then. The adds are done when it answers.
    pub fn add_later(&self, filter: &Filter, entries: &[&[u8]]) -> Option<AddReply> {
        match (self, filter) {
            (Store::Redis(s), Filter::Redis(n)) => s.add_later(n, entries),
            _ => None,
        }
    }

    /// Creates a filter and serves it.
    pub fn create(&self, name: &str, spec: &FilterSpec) -> Result<Filter, StoreError> {
        match self {
            Store::Local(s) => s.create(name, spec).map(Filter::Local),
            Store::Redis(s) => s.create(name, spec).map(Filter::Redis),
        }
    }

    /// Deletes a filter. Returns whether it existed.
    pub fn delete(&self, name: &str) -> Result<bool, StoreError> {
        match self {
            Store::Local(s) => s.delete(name),
            Store::Redis(s) => s.delete(name),
        }
    }

    /// Adds entries to `filter`: one outcome per entry is pushed to `out`
    /// (fewer if a non-scaling filter fills up, [`AddOutcome::Full`] last).
    /// A deletable filter adds a copy of each (as `CF.ADD`), and refuses
    /// the whole batch for an entry too long or invalid. The adds are
    /// visible to lookups at once, durable once the [`Ack`] resolves.
    pub fn add(
        &self,
        filter: &Filter,
        entries: &[&[u8]],
        out: &mut Vec<AddOutcome>,
    ) -> Result<Ack, StoreError> {
        self.add_with(filter, entries, AddMode::Copy, out)
    }

    /// [`Store::add`], with what a deletable filter does with an entry it
    /// (probably) holds already ([`AddMode`]; every other filter sets bits
    /// that are set already, so both modes are its one add).
    pub fn add_with(
        &self,
        filter: &Filter,
        entries: &[&[u8]],
        mode: AddMode,
        out: &mut Vec<AddOutcome>,
    ) -> Result<Ack, StoreError> {
        match (self, filter) {
            (Store::Local(s), Filter::Local(n)) => s.add(n, entries, out).map(Ack::from),
            (Store::Local(s), Filter::Deletable(n)) => s.add_deletable(n, entries, mode, out),
            (Store::Local(s), Filter::Listed(n)) => {
                s.add_listed(n, entries, out).map(|()| Ack::done())
            }
            (_, Filter::Listed(n)) => Err(n.refusal()),
            (Store::Redis(s), Filter::Redis(n)) => s.add(n, entries, out).map(|()| Ack::done()),
            _ => Err(StoreError::NotFound(filter.name().into())),
        }
    }

    /// Removes one copy of `item` from a deletable filter: whether one was
    /// found, and the [`Ack`] that resolves once the change (with every
    /// earlier one) is durable. Any other filter refuses
    /// ([`Filter::removable`]).
    pub fn remove(&self, filter: &Filter, item: &[u8]) -> Result<(bool, Ack), StoreError> {
        filter.deletable()?.delete_item(item)
    }

    /// Adds (`add`) or removes whitelist entries. Returns, per item, whether
    /// it was a hit (add) or was present (remove). Durable when it returns.
    pub fn whitelist(
        &self,
        filter: &Filter,
        items: &[&[u8]],
        add: bool,
    ) -> Result<Vec<Result<bool, KeyError>>, StoreError> {
        match (self, filter) {
            (Store::Local(s), Filter::Local(n)) => s.whitelist(n, items, add),
            (_, Filter::Deletable(n)) => n.whitelist(items, add),
            (_, Filter::Listed(n)) => n.whitelist(items, add),
            (Store::Redis(s), Filter::Redis(n)) => s.whitelist(n, items, add),
            _ => Err(StoreError::NotFound(filter.name().into())),
        }
    }

    /// `BF.SCANDUMP` and `CF.SCANDUMP`: iteration 0 gives the header;
    /// later iterations the filter's data, [`DUMP_CHUNK`] bytes at a time
    /// (a Bloom filter's bits), or [`deletable::CF_DUMP_CHUNK`] (a
    /// deletable filter's tables: its stream is its own, loaded back by
    /// [`Store::cf_loadchunk`]); `(0, [])` ends.
    pub fn scandump(&self, filter: &Filter, iter: u64) -> Result<(u64, Vec<u8>), StoreError> {
        match (self, filter) {
            (Store::Local(s), Filter::Local(n)) => Ok(s.scandump(n, iter)),
            (_, Filter::Deletable(n)) => Ok(n.scandump(iter)),
            (_, Filter::Listed(_)) => Err(StoreError::Unsupported(
                "BF.SCANDUMP of a filter that is not a Bloom filter (copy its file)",
            )),
            _ => Err(StoreError::Unsupported(
                "BF.SCANDUMP of a filter stored in Redis (use `bloomgate pull`)",
            )),
        }
    }

    /// `BF.LOADCHUNK`: iteration 1 creates the filter from a header, later
    /// ones load its bits.
    pub fn loadchunk(&self, name: &str, iter: u64, data: &[u8]) -> Result<Ack, StoreError> {
        match self {
            Store::Local(s) => s.loadchunk(name, iter, data).map(Ack::from),
            Store::Redis(_) => Err(StoreError::Unsupported(
                "BF.LOADCHUNK into Redis (use `bloomgate push`)",
            )),
        }
    }

    /// Makes every change durable in the store's own files and trims its
    /// log ([`StoreError::Unsupported`] for a store without one).
    pub fn snapshot(&self) -> Result<SnapshotReport, StoreError> {
        match self {
            Store::Local(s) => s.snapshot(),
            Store::Redis(_) => Err(StoreError::Unsupported(
                "snapshots of filters stored in Redis (Redis persists them: RDB/AOF)",
            )),
        }
    }

    /// Bytes of changes not yet in a snapshot (a snapshot is due when they
    /// pass a limit); 0 for a store without snapshots.
    pub fn unsnapshotted_bytes(&self) -> u64 {
        match self {
            Store::Local(s) => s.wal_bytes(),
            Store::Redis(_) => 0,
        }
    }

    /// Replaces a filter with a rebuilt file (see [`LocalStore::reload`]).
    pub fn reload(
        &self,
        name: &str,
        source: Option<&Path>,
        drop_live_adds: bool,
    ) -> Result<Filter, StoreError> {
        match self {
            Store::Local(s) => match s.reload_listed(name, source)? {
                Some(l) => Ok(Filter::Listed(l)),
                None => {
                    let n = s.reload(name, source, drop_live_adds)?;
                    // A file of another layout it replaces stops serving.
                    s.forget_listed(name);
                    Ok(Filter::Local(n))
                }
            },
            Store::Redis(_) => Err(StoreError::Unsupported(
                "reloading a filter stored in Redis (replace it with `bloomgate push --force`)",
            )),
        }
    }

    /// Reloads every filter whose file changed and serves new ones (SIGHUP);
    /// returns what it did, for the log.
    pub fn reload_changed(&self) -> Result<String, StoreError> {
        match self {
            Store::Local(s) => Ok(s.reload_changed()),
            Store::Redis(_) => Err(StoreError::Unsupported("reloading filters stored in Redis")),
        }
    }

    /// Why writes are refused, if they are (the log cannot write, e.g. on a
    /// full disk; it recovers by itself).
    pub fn write_failure(&self) -> Option<StoreError> {
        match self {
            Store::Local(s) => s.write_failure().map(StoreError::Wal),
            Store::Redis(_) => None,
        }
    }

    /// The state of a remote store (Redis: whether every master answers
    /// now, the unavailable answers so far); `None` for a data directory.
    /// Blocking (one `PING` per master).
    pub fn remote_health(&self) -> Option<StoreHealth> {
        match self {
            Store::Local(_) => None,
            Store::Redis(s) => Some(s.health()),
        }
    }

    /// Requests answered unavailable because the remote store could not
    /// answer (0 for a data directory).
    pub fn unavailable_answers(&self) -> u64 {
        match self {
            Store::Local(_) => 0,
            Store::Redis(s) => s.unavailable_answers(),
        }
    }

    /// Stops background work (after a final snapshot).
    pub fn shutdown(&self) {
        match self {
            Store::Local(s) => s.shutdown(),
            Store::Redis(_) => {}
        }
    }
}

impl Filter {
    /// The filter's name.
    pub fn name(&self) -> &str {
        match self {
            Filter::Local(n) => n.name(),
            Filter::Deletable(n) => n.name(),
            Filter::Listed(n) => n.name(),
            Filter::Redis(n) => n.name(),
        }
    }

    /// The filter's whitelist: its exact keys, sorted (`GET
    /// /v1/filters/NAME/whitelist`). An error when the store cannot read
    /// it (Redis unreachable).
    pub fn whitelisted(&self) -> Result<bloomgate_blacklist::Whitelist, StoreError> {
        match self {
            Filter::Local(n) => Ok(n.whitelisted()),
            Filter::Deletable(n) => Ok(n.whitelisted()),
            Filter::Listed(n) => Ok(n.whitelisted()),
            Filter::Redis(n) => n.whitelisted(),
        }
    }

    /// Answers many queries: `each` gets one verdict per query, in order,
    /// or why the query is not valid for the filter's key rules. The one
    /// lookup of every filter, whatever its kind or store: the verdict is
    /// the library's ([`bloomgate_list::check::check_many`], the same as
    /// `bloomgate check`'s), only the membership of the keys is the
    /// filter's own. An error means no result can be trusted (a store that
    /// cannot read a part of the filter says so rather than answer
    /// "absent"); `each` may have been given results of a part of the
    /// batch, which are void then. Not counted in the filter's counters
    /// (see [`Filter::count`]).
    #[inline]
    pub fn check_many(
        &self,
        queries: &[&[u8]],
        scratch: &mut LookupScratch,
        mut each: impl FnMut(Result<VerdictRef<'_>, KeyError>),
    ) -> Result<(), StoreError> {
        match self {
            Filter::Local(n) => {
                n.check_many(queries, scratch, each);
                Ok(())
            }
            Filter::Deletable(n) => {
                n.check_many(queries, scratch, each);
                Ok(())
            }
            Filter::Listed(n) => n.check_many(queries, scratch, each),
            Filter::Redis(n) => n.check_batch(queries, |v| match v {
                Ok(v) => each(Ok(v.as_ref())),
                Err(e) => each(Err(e)),
            }),
        }
    }

    /// [`Filter::check_many`], saying only whether each query is a hit.
    #[inline]
    pub fn contains_batch(
        &self,
        queries: &[&[u8]],
        scratch: &mut LookupScratch,
        mut each: impl FnMut(Result<bool, KeyError>),
    ) -> Result<(), StoreError> {
        self.check_many(queries, scratch, |v| each(v.map(|v| v.hit)))
    }

    /// Queues a lookup of `queries` in a remote store's batch and returns
    /// the reply of its verdicts (one per query, not yet counted in the
    /// filter's counters; with the key that matched when `matched`), or
    /// `None` for a local filter (answer it with [`Filter::check_many`]: it
    /// does not wait).
    pub fn check_later(&self, queries: &[&[u8]], matched: bool) -> Option<CheckReply> {
        match self {
            Filter::Local(_) | Filter::Deletable(_) | Filter::Listed(_) => None,
            Filter::Redis(n) => Some(n.check_later(queries, matched)),
        }
    }

    /// [`Filter::check_many`] with owned verdicts, counted in the
    /// filter's counters.
    pub fn check_batch(
        &self,
        queries: &[&[u8]],
        scratch: &mut LookupScratch,
        mut each: impl FnMut(Result<Verdict, KeyError>),
    ) -> Result<(), StoreError> {
        let (mut checks, mut hits) = (0, 0);
        let r = self.check_many(queries, scratch, |v| {
            checks += 1;
            hits += v.as_ref().is_ok_and(|v| v.hit) as u64;
            each(v.map(|v| v.to_verdict()))
        });
        self.count(checks, hits);
        r
    }

    /// Starts loading the memory a lookup of `query` will read (a hint).
    #[inline]
    pub fn prefetch(&self, query: &[u8]) {
        match self {
            Filter::Local(n) => n.prefetch(query),
            Filter::Deletable(_) | Filter::Listed(_) | Filter::Redis(_) => {}
        }
    }

    /// Adds to the filter's lookup counters (for lookups made with
    /// [`Filter::contains_batch`], counted by the caller once per batch).
    #[inline]
    pub fn count(&self, checks: u64, hits: u64) {
        if let Some(c) = self.lookups() {
            c.count(checks, hits);
        }
    }

    /// (checks, hits) counters.
    pub fn counters(&self) -> (u64, u64) {
        self.lookups().map_or((0, 0), Counters::get)
    }

    /// The filter's lookup counters; `None` for a deletable filter, whose
    /// lookups the server's metrics alone count.
    fn lookups(&self) -> Option<&Counters> {
        match self {
            Filter::Local(n) => Some(n.lookups()),
            Filter::Deletable(_) => None,
            Filter::Listed(n) => Some(n.lookups()),
            Filter::Redis(n) => Some(n.lookups()),
        }
    }

    /// Whether an add would wait (another thread holds the filter's write
    /// lock, say for a reload, or the store is remote): a front end then
    /// makes it off its event loop.
    pub fn add_would_block(&self) -> bool {
        match self {
            Filter::Local(n) => n.write_busy(),
            Filter::Deletable(n) => n.write_busy(),
            Filter::Listed(_) => true, // synced before it returns
            Filter::Redis(_) => true,
        }
    }

    /// Fails with the filter's refusal when it takes no changes but adds
    /// (a static ribbon filter: no remove).
    pub fn changeable(&self) -> Result<(), StoreError> {
        match self {
            Filter::Listed(n) => Err(n.refusal()),
            _ => Ok(()),
        }
    }

    /// Fails unless the filter can remove items, saying why: a static
    /// list with its refusal ([`Filter::changeable`]), a Bloom filter with
    /// [`StoreError::NotDeletable`].
    pub fn removable(&self) -> Result<(), StoreError> {
        self.deletable().map(|_| ())
    }

    /// The deletable filter, or why this one is not one
    /// ([`Filter::removable`]).
    fn deletable(&self) -> Result<&Arc<deletable::CfNamed>, StoreError> {
        self.changeable()?;
        match self {
            Filter::Deletable(n) => Ok(n),
            other => Err(StoreError::NotDeletable(other.name().into())),
        }
    }
}

/// What an add does with an entry a deletable filter (probably) holds
/// already ([`Store::add_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AddMode {
    /// Store one more copy (RedisBloom's `CF.ADD`, and HTTP's add: an item
    /// added twice needs two removes): every add that finds room is
    /// [`AddOutcome::New`].
    #[default]
    Copy,
    /// Add only entries not found (`CF.ADDNX`): one found is
    /// [`AddOutcome::Exists`] and changes nothing.
    IfAbsent,
}

/// What happened to one added entry.
#[derive(Clone, Debug, PartialEq)]
pub enum AddOutcome {
    /// Newly added.
    New,
    /// Already (probably) present.
    Exists,
    /// The entry could not be normalized.
    Invalid(KeyError),
    /// Too long.
    TooLong,
    /// A non-scaling filter is full (processing stopped here).
    Full,
    /// No table of a deletable filter had room and its chain may not grow:
    /// this entry was not added (the later ones were still tried).
    NoRoom,
}

/// The values of a map keyed by filter name (under its lock), sorted by
/// name: every list of filters a store gives.
pub(crate) fn sorted_by_name<V: Clone>(
    map: &std::sync::RwLock<std::collections::HashMap<String, V>>,
) -> Vec<V> {
    let map = map.read().unwrap_or_else(|e| e.into_inner());
    let mut v: Vec<(&String, &V)> = map.iter().collect();
    v.sort_unstable_by(|a, b| a.0.cmp(b.0));
    v.into_iter().map(|(_, f)| f.clone()).collect()
}

/// The first layer's parameters of a new filter, with a fresh seed (see
/// [`FilterSpec::params`]); refused past the server's filter size limit
/// (all generations of a ring counted).
pub fn first_params(
    spec: &FilterSpec,
    limits: &crate::Limits,
) -> Result<bloomgate_engine::Params, StoreError> {
    let invalid = |e: bloomgate_blacklist::SpecError| StoreError::Invalid(e.to_string());
    let bytes = spec.bytes().map_err(invalid)?;
    if bytes > limits.max_filter_bytes {
        return Err(StoreError::Invalid(format!(
            "a filter of {bytes} bytes exceeds the server's limit of {} bytes",
            limits.max_filter_bytes
        )));
    }
    spec.params(bloomgate_engine::random_seed())
        .map_err(invalid)
}

/// Result of a snapshot.
#[derive(Debug, Default, Clone, Serialize)]
pub struct SnapshotReport {
    /// Filters written.
    pub filters_saved: usize,
    /// Log segments removed.
    pub segments_removed: usize,
}
