//! A filter stored in Redis ([`RedisFilter`]): lookups, adds, its
//! whitelist and statistics, answering exactly as the same filter in a
//! `.bgf` file does.
//!
//! # Lookups
//!
//! An item's `k` bits are in one 64-byte block, and a block in one shard
//! (see [`layout`]): a lookup is one `GETRANGE` of those 64
//! bytes, probed here with the engine's mask of the item's bits. A batch is
//! one pipeline (per node, in a cluster). Shards are created whole by a
//! push, so the reply is exactly 64 bytes; a shorter one (`""`: the key is
//! missing, evicted or deleted) is [`Error::Damaged`], never zeros. Any
//! error — a node down, a timeout, a cluster failing over — is an error of
//! the whole batch ([`Error::Unavailable`]), never "absent": a down node
//! must not create false negatives.
//!
//! A thread keeps its lookup buffers (the items' places, the encoded
//! commands, the replies) from batch to batch: allocated afresh for each,
//! they were most of the large allocations of a server's lookup worker,
//! each of which runs glibc's `malloc_consolidate` over the small chunks
//! freed since the last. [`RedisFilter::contains_groups`] looks up
//! several groups of keys at once on one thread, each group answered or
//! failed as [`RedisFilter::contains_keys`] of its keys alone would (the
//! server's lookups on a cluster, grouped by master).
//!
//! # Adds
//!
//! In [`add`](self::add): transactions of block writes that check each
//! shard's length before they set bits (no Lua), and each item's outcome
//! ([`Added`]) reported even when the batch fails part way.
//!
//! # Handles
//!
//! A [`RedisFilter`] reads the metadata and the whitelist when it is
//! opened and keeps them. Each push writes a new random `generation` into
//! the metadata, and each whitelist change made through this crate adds 1
//! to its `whitelist_changes`; [`RedisFilter::revalidate`] compares both
//! with one `HMGET` and reads again what changed (the server does so at
//! most once a second per filter, before a request). Until a handle
//! revalidates, it answers by what it read: a filter replaced by
//! `push --force` (possibly with another seed or size) is addressed by the
//! old parameters, so answers in that interval may be wrong either way,
//! and a whitelist change made elsewhere is not applied yet. Each CLI
//! command opens its own handle.
//!
//! # Parallel connections
//!
//! A batch larger than [`LANE_MIN`] keys is spread over up to [`LANES`]
//! connections per node, each driven by its own thread: while one thread
//! encodes commands or decodes replies, Redis runs another's. Adds are
//! dealt to lanes by shard, so the items that can share a bit (those of
//! one block) go through one connection in their order, and no two lanes
//! watch one shard.

use bloomgate_blacklist::Whitelist;
use bloomgate_url::{entry_key, query_keys, KeyError, KeyKind, MatchMode};
use redis::Value;

mod add;
mod lane;

pub use add::{AddReport, Added};
pub use lane::AddLane;

use crate::address::Address;
use crate::batch::{Batch, READ, REPLICA_OK};
use crate::client::Store;
use crate::error::{Error, Result};
use crate::layout::{self, ItemPlace, Meta, BLOCK_BYTES};
use bloomgate_engine::place::Locator;

/// Commands per pipeline: large enough to hide the round trip (each is a
/// few dozen bytes), small enough to bound the memory of the replies.
const PIPELINE: usize = 4096;

/// Connections per node that a large batch is spread over by default,
/// each driven by its own thread, so that encoding, sending and reading
/// replies on one overlap with Redis running the commands of another.
pub const LANES: usize = 4;

/// Keys per lane: a batch smaller than twice this runs on one connection.
pub const LANE_MIN: usize = 1024;

/// The buffers of one thread's lookups, kept from batch to batch: the
/// items' places, the encoded `GETRANGE`s and the replies (a batch of
/// 4,096 lookups is about 250 KB of commands; allocated afresh per batch,
/// these buffers were most of the large allocations of a server's lookup
/// worker).
#[derive(Default)]
struct LookupScratch {
    places: Vec<ItemPlace>,
    cmds: Batch,
    replies: Vec<Option<Value>>,
}

/// The buffers of [`RedisFilter::contains_groups`]: a [`LookupScratch`]
/// per group, the commands of all groups side by side.
#[derive(Default)]
struct GroupScratch {
    places: Vec<Vec<ItemPlace>>,
    cmds: Vec<Batch>,
    replies: Vec<Vec<Option<Value>>>,
}

thread_local! {
    static LOOKUP_SCRATCH: std::cell::Cell<Option<LookupScratch>> =
        const { std::cell::Cell::new(None) };
    static GROUP_SCRATCH: std::cell::Cell<Option<GroupScratch>> =
        const { std::cell::Cell::new(None) };
}

/// A filter stored in Redis or Redis Cluster.
#[derive(Debug)]
pub struct RedisFilter {
    store: Store,
    address: Address,
    meta: Meta,
    kind: KeyKind,
    mode: MatchMode,
    whitelist: Whitelist,
    /// `shard_key` of every shard (of the first [`MAX_CACHED_KEYS`]).
    shard_keys: Vec<String>,
    lanes: usize,
}

/// Shard key names kept (26,224 for a 10¹⁰-item filter at 10⁻⁴).
const MAX_CACHED_KEYS: u64 = 1 << 16;

/// Statistics of a stored filter ([`RedisFilter::info`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Info {
    /// Items added so far (from the metadata's count).
    pub items: u64,
    /// Shards of the filter.
    pub shards: u64,
    /// Shard keys that exist (all of them after a push).
    pub shards_present: u64,
    /// Shards missing or of the wrong length, with what is wrong: lost data
    /// (see [`Error::Damaged`]). Empty for a sound filter.
    pub damaged: Vec<(u64, String)>,
    /// Bytes of data (as in a `.bgf` file).
    pub data_bytes: u64,
    /// Keys in the whitelist.
    pub whitelist: u64,
    /// Bits set (`BITCOUNT` of every shard).
    pub ones: u64,
}

impl Info {
    /// Bits set / bits.
    pub fn fill_ratio(&self) -> f64 {
        self.ones as f64 / (self.data_bytes * 8).max(1) as f64
    }
}

/// What [`RedisFilter::revalidate`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revalidated {
    /// Nothing changed.
    Unchanged,
    /// The whitelist was changed elsewhere: it was read again.
    Whitelist,
    /// The filter was replaced (pushed again): its metadata and whitelist
    /// were read again.
    Replaced,
}

/// Reads a filter's metadata, or `None` when there is no such filter.
pub(crate) fn read_meta(store: &Store, name: &str) -> Result<Option<Meta>> {
    let v = store.one(redis::cmd("HGETALL").arg(layout::meta_key(name)).clone())?;
    let fields = hash_fields(store, v)?;
    if fields.is_empty() {
        return Ok(None);
    }
    Meta::from_fields(&fields).map(Some).map_err(|problem| {
        store.protocol(format!(
            "{} is not bloomgate filter metadata: {problem}",
            layout::meta_key(name)
        ))
    })
}

/// A filter's whitelist (`SMEMBERS`).
pub(crate) fn read_whitelist(store: &Store, name: &str) -> Result<Whitelist> {
    let v = store.one(
        redis::cmd("SMEMBERS")
            .arg(layout::whitelist_key(name))
            .clone(),
    )?;
    let members = match v {
        Value::Array(m) | Value::Set(m) => m,
        Value::Nil => Vec::new(),
        _ => return Err(store.protocol("unexpected reply to SMEMBERS")),
    };
    let mut w = Whitelist::default();
    for m in members {
        w.insert(bytes(store, m)?);
    }
    Ok(w)
}

/// The field/value pairs of an `HGETALL` reply (RESP2 array or RESP3 map).
fn hash_fields(store: &Store, v: Value) -> Result<Vec<(String, String)>> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let bad = || store.protocol("unexpected reply to HGETALL");
    match v {
        Value::Array(items) => items
            .chunks(2)
            .map(|kv| match kv {
                [k, v] => Ok((text(k).ok_or_else(bad)?, text(v).ok_or_else(bad)?)),
                _ => Err(bad()),
            })
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .map(|(k, v)| Ok((text(k).ok_or_else(bad)?, text(v).ok_or_else(bad)?)))
            .collect(),
        Value::Nil => Ok(Vec::new()),
        _ => Err(bad()),
    }
}

/// The integer of a reply.
pub(crate) fn int(store: &Store, v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| store.protocol("expected an integer reply")),
        _ => Err(store.protocol(format!("expected an integer reply, got {v:?}"))),
    }
}

/// The bytes of a string reply; `Nil` (no such key) is empty.
pub(crate) fn bytes(store: &Store, v: Value) -> Result<Vec<u8>> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::Nil => Ok(Vec::new()),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        other => Err(store.protocol(format!("expected a string reply, got {other:?}"))),
    }
}

impl RedisFilter {
    /// Opens the filter at `address`: reads its metadata and whitelist.
    /// [`Error::NotFound`] if there is none.
    pub fn open(address: &Address) -> Result<RedisFilter> {
        let store = Store::new(address)?;
        let meta = read_meta(&store, &address.name)?.ok_or_else(|| Error::NotFound {
            server: store.server().to_string(),
            name: address.name.clone(),
        })?;
        let (kind, mode) = match (
            KeyKind::from_u8(meta.params.key_kind),
            MatchMode::from_u8(meta.params.match_mode),
        ) {
            (Some(k), Some(m)) => (k, m),
            _ => {
                return Err(store.protocol(format!(
                    "{}: unknown key kind code {} or match mode code {}",
                    address.name, meta.params.key_kind, meta.params.match_mode
                )))
            }
        };
        let mut filter = RedisFilter {
            store,
            address: address.clone(),
            meta,
            kind,
            mode,
            whitelist: Whitelist::default(),
            shard_keys: Vec::new(),
            lanes: LANES,
        };
        filter.shard_keys = (0..filter.meta.shards().min(MAX_CACHED_KEYS))
            .map(|i| layout::shard_key(&address.name, i))
            .collect();
        filter.whitelist = read_whitelist(&filter.store, &address.name)?;
        Ok(filter)
    }

    /// The filter's address.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// The connections to its server or cluster.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Its metadata as read when it was opened (parameters, shard size).
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// What the entries are.
    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// How queries are matched.
    pub fn mode(&self) -> MatchMode {
        self.mode
    }

    /// The whitelist as read when the filter was opened (or last changed
    /// through this handle).
    pub fn whitelist(&self) -> &Whitelist {
        &self.whitelist
    }

    /// The whitelist as Redis holds it now (`SMEMBERS`), with the changes
    /// other clients made since this handle read it.
    pub fn whitelist_now(&self) -> Result<Whitelist> {
        read_whitelist(&self.store, &self.address.name)
    }

    /// Whether each normalized key is (probably) in the filter, in order.
    pub fn contains_keys<T: AsRef<[u8]> + Sync>(&self, keys: &[T]) -> Result<Vec<bool>> {
        let lanes = self.lanes_for(keys.len());
        if lanes == 1 {
            return self.contains_lane(keys);
        }
        // Contiguous slices, one per lane: lookups do not interact.
        let per = keys.len().div_ceil(lanes);
        let parts: Vec<Result<Vec<bool>>> = std::thread::scope(|scope| {
            let workers: Vec<_> = keys
                .chunks(per)
                .map(|part| scope.spawn(move || self.contains_lane(part)))
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("a lookup thread panicked"))
                .collect()
        });
        let mut out = Vec::with_capacity(keys.len());
        for p in parts {
            out.extend(p?);
        }
        Ok(out)
    }

    fn contains_lane<T: AsRef<[u8]>>(&self, keys: &[T]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(keys.len());
        // The thread's buffers, unless a caller up the stack holds them.
        let scratch = LOOKUP_SCRATCH.with(|s| s.take());
        let mut s = scratch.unwrap_or_default();
        let done = self.contains_lane_with(keys, &mut s, &mut out);
        LOOKUP_SCRATCH.with(|cell| cell.set(Some(s)));
        done.map(|()| out)
    }

    fn contains_lane_with<T: AsRef<[u8]>>(
        &self,
        keys: &[T],
        s: &mut LookupScratch,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let locator = Locator::new(&self.meta.params);
        for batch in keys.chunks(PIPELINE) {
            s.places.clear();
            s.places.extend(
                batch
                    .iter()
                    .map(|k| self.meta.place_with(&locator, k.as_ref())),
            );
            self.encode_lookups(&s.places, &mut s.cmds);
            self.store.run_batch_into(&s.cmds, &mut s.replies)?;
            self.decode_lookups(&s.places, &mut s.replies, out)?;
        }
        Ok(())
    }

    /// The `GETRANGE`s of the blocks at `places`, into `cmds`.
    fn encode_lookups(&self, places: &[ItemPlace], cmds: &mut Batch) {
        cmds.clear();
        for p in places {
            cmds.start(4, b"GETRANGE", self.shard_key(p.shard).as_bytes());
            cmds.arg_u64(p.offset);
            cmds.arg_u64(p.offset + BLOCK_BYTES - 1);
            cmds.end(READ | REPLICA_OK);
        }
    }

    /// Whether each item at `places` is in its block as `replies` (one
    /// per place, all there) hold them, appended to `out`; the replies are
    /// taken.
    fn decode_lookups(
        &self,
        places: &[ItemPlace],
        replies: &mut Vec<Option<Value>>,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        for (place, reply) in places.iter().zip(replies.drain(..)) {
            let reply = reply.expect("every reply came back");
            let found = match &reply {
                Value::BulkString(b) if b.len() as u64 == BLOCK_BYTES => place.found_in(b),
                _ => {
                    let block = bytes(&self.store, reply)?;
                    if block.len() as u64 != BLOCK_BYTES {
                        // A block of a whole shard is 64 bytes: the key is
                        // missing (`""`) or was overwritten shorter.
                        return Err(self.damaged(
                            place.shard,
                            match block.len() {
                                0 => "missing".to_string(),
                                n => format!("too short ({n} bytes at offset {})", place.offset),
                            },
                        ));
                    }
                    place.found_in(&block)
                }
            };
            out.push(found);
        }
        Ok(())
    }

    /// [`RedisFilter::contains_keys`] of several groups of `keys` (each
    /// group the indexes of its keys; in a cluster, those of one master),
    /// on this thread: every group's pipelines are sent before any reply
    /// is read, so the nodes work at once, and each group gets the answer
    /// or the error that `contains_keys` of its keys alone gives, so a node
    /// that fails fails only the groups with keys on it. A group too large
    /// for one pipeline on one connection (see [`LANE_MIN`]) is looked up
    /// by `contains_keys` after the others.
    pub fn contains_groups(&self, keys: &[&[u8]], groups: &[Vec<usize>]) -> Vec<Result<Vec<bool>>> {
        let small = |g: &Vec<usize>| g.len() <= PIPELINE && self.lanes_for(g.len()) == 1;
        let locator = Locator::new(&self.meta.params);
        let mut s = GROUP_SCRATCH.with(|s| s.take()).unwrap_or_default();
        let n = groups.iter().filter(|g| small(g)).count();
        if s.places.len() < n {
            s.places.resize_with(n, Vec::new);
            s.cmds.resize_with(n, Batch::default);
            s.replies.resize_with(n, Vec::new);
        }
        for (j, g) in groups.iter().filter(|g| small(g)).enumerate() {
            let places = &mut s.places[j];
            places.clear();
            places.extend(g.iter().map(|&i| self.meta.place_with(&locator, keys[i])));
            self.encode_lookups(places, &mut s.cmds[j]);
        }
        let mut ran = self
            .store
            .run_batches_into(&s.cmds[..n], &mut s.replies[..n])
            .into_iter();
        let mut j = 0;
        let out = groups
            .iter()
            .map(|g| {
                if !small(g) {
                    let part: Vec<&[u8]> = g.iter().map(|&i| keys[i]).collect();
                    return self.contains_keys(&part);
                }
                let at = j;
                j += 1;
                let mut found = Vec::with_capacity(g.len());
                ran.next()
                    .expect("a result per group run")
                    .and_then(|()| {
                        self.decode_lookups(&s.places[at], &mut s.replies[at], &mut found)
                    })
                    .map(|()| found)
            })
            .collect();
        GROUP_SCRATCH.with(|cell| cell.set(Some(s)));
        out
    }

    /// Sets how many connections per node a large batch is spread over
    /// (each driven by its own thread; at least 1). See [`LANES`].
    pub fn set_lanes(&mut self, lanes: usize) {
        self.lanes = lanes.max(1);
    }

    /// Lanes for a batch of `n` keys: one per [`LANE_MIN`] keys, at most
    /// the configured number.
    pub(super) fn lanes_for(&self, n: usize) -> usize {
        (n / LANE_MIN).clamp(1, self.lanes)
    }

    pub(super) fn shard_key(&self, shard: u64) -> std::borrow::Cow<'_, str> {
        match self.shard_keys.get(shard as usize) {
            Some(k) => k.as_str().into(),
            None => layout::shard_key(&self.address.name, shard).into(),
        }
    }

    /// An [`Error::Damaged`] for shard `shard`.
    pub(super) fn damaged(&self, shard: u64, problem: String) -> Error {
        Error::Damaged {
            server: self.store.server().to_string(),
            name: self.address.name.clone(),
            shard,
            key: self.shard_key(shard).into_owned(),
            problem,
        }
    }

    /// Normalizes one entry as the filter's key kind requires.
    pub fn entry_key<'a>(&self, entry: &'a [u8]) -> Result<std::borrow::Cow<'a, [u8]>, KeyError> {
        entry_key(self.kind, self.mode, entry)
    }

    /// The item count now (read from Redis).
    pub fn items(&self) -> Result<u64> {
        let v = self.store.one(
            redis::cmd("HGET")
                .arg(layout::meta_key(&self.address.name))
                .arg("items")
                .clone(),
        )?;
        match v {
            Value::Nil => Err(Error::NotFound {
                server: self.store.server().to_string(),
                name: self.address.name.clone(),
            }),
            v => Ok(int(&self.store, &v)?.max(0) as u64),
        }
    }

    /// Statistics: the item count, how many shard keys exist and which
    /// are missing or of the wrong length ([`Info::damaged`]), and how many
    /// bits are set (`STRLEN` and `BITCOUNT` of every shard, pipelined: a
    /// `BITCOUNT` of a 1 MB shard takes Redis about 0.1 ms).
    pub fn info(&self) -> Result<Info> {
        let shards = self.meta.shards();
        let (mut present, mut ones, mut damaged) = (0, 0, Vec::new());
        let all: Vec<u64> = (0..shards).collect();
        for batch in all.chunks(PIPELINE / 2) {
            let mut cmds = Batch::new();
            for &i in batch {
                let key = self.shard_key(i);
                cmds.push(redis::cmd("STRLEN").arg(key.as_ref()));
                cmds.push(redis::cmd("BITCOUNT").arg(key.as_ref()));
            }
            let replies = self.store.run_batch(&cmds)?;
            for (pair, &i) in replies.chunks(2).zip(batch) {
                let len = int(&self.store, &pair[0])?.max(0) as u64;
                let r = self.meta.shard_bytes(i);
                if len > 0 {
                    present += 1;
                }
                if len == 0 {
                    damaged.push((i, "missing".to_string()));
                } else if len != r.end - r.start {
                    damaged.push((
                        i,
                        format!("{len} bytes long instead of {}", r.end - r.start),
                    ));
                }
                ones += int(&self.store, &pair[1])? as u64;
            }
        }
        let whitelist = int(
            &self.store,
            &self.store.one(
                redis::cmd("SCARD")
                    .arg(layout::whitelist_key(&self.address.name))
                    .clone(),
            )?,
        )? as u64;
        Ok(Info {
            items: self.items()?,
            shards,
            shards_present: present,
            damaged,
            data_bytes: self.meta.data_len(),
            whitelist,
            ones,
        })
    }

    /// The false-positive rate per lookup predicted from the bits set: the
    /// items estimated from the fill (`n̂ = −(m/k)·ln(1 − ones/m)`, Swamidass
    /// & Baldi), then the blocked layout's rate at `n̂` — as `bloomgate info`
    /// reports it for a file. It counts every item, including adds not
    /// counted in the metadata (a batch that failed part way).
    pub fn fp_at_fill(&self, ones: u64) -> f64 {
        let p = &self.meta.params;
        let n = bloomgate_engine::math::estimate_items(p.bits, p.k, ones);
        if n.is_finite() {
            p.predicted_fp(n)
        } else {
            1.0
        }
    }

    /// Checks whether the filter was replaced (`push --force`), deleted,
    /// or had its whitelist changed through another handle since this one
    /// read its metadata, with one `HMGET` of the metadata's `generation`
    /// and `whitelist_changes`, and reads what changed again.
    /// [`Error::NotFound`] if the filter is gone (this handle then keeps
    /// its old state; a later call sees a filter pushed again).
    ///
    /// Long-lived handles (a server) call this every second or so; until
    /// they do, they answer by what they read (see the module
    /// documentation).
    pub fn revalidate(&mut self) -> Result<Revalidated> {
        let (generation, changes) = self.stamps()?;
        if generation != self.meta.generation {
            let fresh = RedisFilter::open(&self.address)?;
            *self = RedisFilter {
                lanes: self.lanes,
                ..fresh
            };
            tracing::info!(filter = %self.address.name, "the filter was replaced; its metadata was read again");
            return Ok(Revalidated::Replaced);
        }
        if changes != self.meta.whitelist_changes {
            self.whitelist = read_whitelist(&self.store, &self.address.name)?;
            self.meta.whitelist_changes = changes;
            return Ok(Revalidated::Whitelist);
        }
        Ok(Revalidated::Unchanged)
    }

    /// Whether [`RedisFilter::revalidate`] would find nothing to read
    /// again (the same `HMGET`, changing nothing): a shared handle asks
    /// this under a read lock, so that its users go on meanwhile, and takes
    /// the write lock only when something changed.
    pub fn is_current(&self) -> Result<bool> {
        let (generation, changes) = self.stamps()?;
        Ok(generation == self.meta.generation && changes == self.meta.whitelist_changes)
    }

    /// The metadata's `generation` and `whitelist_changes` now;
    /// [`Error::NotFound`] when the filter is gone.
    fn stamps(&self) -> Result<(u64, u64)> {
        let v = self.store.one(
            redis::cmd("HMGET")
                .arg(layout::meta_key(&self.address.name))
                .arg("format")
                .arg("generation")
                .arg("whitelist_changes")
                .clone(),
        )?;
        let Value::Array(fields) = v else {
            return Err(self.store.protocol("unexpected reply to HMGET"));
        };
        let num = |v: Option<&Value>| -> Result<Option<u64>> {
            match v {
                None | Some(Value::Nil) => Ok(None),
                Some(Value::BulkString(b)) => std::str::from_utf8(b)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .map(Some)
                    .ok_or_else(|| self.store.protocol("metadata field is not a number")),
                Some(v) => Ok(Some(int(&self.store, v)?.max(0) as u64)),
            }
        };
        if num(fields.first())?.is_none() {
            return Err(Error::NotFound {
                server: self.store.server().to_string(),
                name: self.address.name.clone(),
            });
        }
        let generation = num(fields.get(1))?.unwrap_or(0);
        let changes = num(fields.get(2))?.unwrap_or(0);
        Ok((generation, changes))
    }

    /// The predicted false-positive rate per lookup at `items` items.
    pub fn predicted_fp(&self, items: u64) -> f64 {
        let p = &self.meta.params;
        p.predicted_fp(items as f64)
    }

    /// Whitelists an item (normalized with the key kind). Returns whether
    /// the filter reports it as a hit now: whitelisting something that is
    /// not a hit has no effect, and callers should say so.
    pub fn whitelist_add(&mut self, item: &[u8]) -> Result<bool> {
        let key = self
            .entry_key(item)
            .map_err(|e| self.invalid(item, e))?
            .into_owned();
        let mut lookups = vec![key.clone()];
        let mut scratch = Vec::new();
        if query_keys(self.kind, self.mode, item, &mut scratch).is_ok() {
            lookups.append(&mut scratch);
        }
        let was_hit = self.contains_keys(&lookups)?.iter().any(|&f| f);
        let replies = self.store.run(&[
            redis::cmd("SADD")
                .arg(layout::whitelist_key(&self.address.name))
                .arg(&key)
                .clone(),
            self.whitelist_changed(),
        ])?;
        self.meta.whitelist_changes = int(&self.store, &replies[1])?.max(0) as u64;
        self.whitelist.insert(key);
        Ok(was_hit)
    }

    /// Removes an item from the whitelist. Returns whether it was there.
    pub fn whitelist_remove(&mut self, item: &[u8]) -> Result<bool> {
        let key = self
            .entry_key(item)
            .map_err(|e| self.invalid(item, e))?
            .into_owned();
        let replies = self.store.run(&[
            redis::cmd("SREM")
                .arg(layout::whitelist_key(&self.address.name))
                .arg(&key)
                .clone(),
            self.whitelist_changed(),
        ])?;
        self.meta.whitelist_changes = int(&self.store, &replies[1])?.max(0) as u64;
        self.whitelist.remove(&key);
        Ok(int(&self.store, &replies[0])? > 0)
    }

    /// `HINCRBY bg:{NAME} whitelist_changes 1`, sent after a whitelist
    /// change on the same connection (the metadata and the whitelist share
    /// a slot), so that a handle that sees the new count reads the new set.
    fn whitelist_changed(&self) -> redis::Cmd {
        redis::cmd("HINCRBY")
            .arg(layout::meta_key(&self.address.name))
            .arg("whitelist_changes")
            .arg(1)
            .clone()
    }

    fn invalid(&self, item: &[u8], e: KeyError) -> Error {
        Error::InvalidItem {
            item: String::from_utf8_lossy(item).into_owned(),
            kind: self.kind.to_string(),
            reason: e.to_string(),
        }
    }
}
