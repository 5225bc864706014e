//! A filter stored in Redis ([`RedisFilter`]): lookups, adds, its
//! whitelist and statistics, answering exactly as the same filter in a
//! `.bgf` file does.
//!
//! # Lookups
//!
//! An item's `k` bits are in one 64-byte block, and a block in one shard
//! (see [`layout`]): a lookup is one `GETRANGE` of those 64
//! bytes, probed here with the engine's mask of the item's bits. A batch is
//! one pipeline (per node, in a cluster). A missing shard key reads as
//! zeros: shards are created whole by a push, and an empty one may be
//! absent. Any error — a node down, a timeout, a cluster failing over — is
//! an error of the whole batch ([`Error::Unavailable`]), never "absent": a
//! down node must not create false negatives.
//!
//! # Adds
//!
//! An add is one `BITFIELD key SET u1 OFFSET 1 …` with one `SET` per bit
//! of the item (at most `k`). Redis runs it atomically and returns the old
//! bits, so an item was new — not (probably) present before — exactly when
//! some old bit was 0. Among writers racing on one item, the first to run
//! sets that bit and is told "new"; the others see it set: add-if-absent in
//! one round trip, which is what a fleet of crawlers needs to fetch each
//! URL once. (No one is told "new" for an item whose bits were all set
//! already: a false positive, at the filter's rate.) Each batch then adds
//! its new items to the metadata's count (`HINCRBY items`); the count is
//! statistics, the bits are the truth. A batch that fails part way may
//! have set the bits of some of its items without telling anyone they
//! were new; retrying it reports them as present.
//!
//! # Handles
//!
//! A [`RedisFilter`] reads the metadata and the whitelist when it is
//! opened and keeps them. Replacing the filter (`push --force`, possibly
//! with another seed or size) under an open handle leaves it addressing
//! bits by the old parameters: reopen handles after a replacement (each
//! CLI command opens its own). Whitelist changes made through other
//! handles are seen on reopening too.

use bloomgate_blacklist::{verdict_of, Verdict, Whitelist};
use bloomgate_engine::Layout;
use bloomgate_url::{entry_key, query_keys, KeyError, KeyKind, MatchMode};
use redis::Value;

use crate::address::Address;
use crate::client::Store;
use crate::error::{Error, Result};
use crate::layout::{self, Meta, BLOCK_BYTES};

/// Commands per pipeline: large enough to hide the round trip (each is a
/// few dozen bytes), small enough to bound the memory of the replies.
const PIPELINE: usize = 4096;

/// A filter stored in Redis or Redis Cluster.
#[derive(Debug)]
pub struct RedisFilter {
    store: Store,
    address: Address,
    meta: Meta,
    kind: KeyKind,
    mode: MatchMode,
    whitelist: Whitelist,
}

/// Statistics of a stored filter ([`RedisFilter::info`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Info {
    /// Items added so far (from the metadata's count).
    pub items: u64,
    /// Shards of the filter.
    pub shards: u64,
    /// Shard keys that exist (all of them after a push).
    pub shards_present: u64,
    /// Bytes of data (as in a `.bgf` file).
    pub data_bytes: u64,
    /// Keys in the whitelist.
    pub whitelist: u64,
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
        };
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

    /// Whether each normalized key is (probably) in the filter, in order.
    pub fn contains_keys<T: AsRef<[u8]>>(&self, keys: &[T]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(keys.len());
        for batch in keys.chunks(PIPELINE) {
            let places: Vec<_> = batch.iter().map(|k| self.meta.place(k.as_ref())).collect();
            let cmds: Vec<redis::Cmd> = places
                .iter()
                .map(|p| {
                    redis::cmd("GETRANGE")
                        .arg(layout::shard_key(&self.address.name, p.shard))
                        .arg(p.offset)
                        .arg(p.offset + BLOCK_BYTES - 1)
                        .clone()
                })
                .collect();
            for (place, reply) in places.iter().zip(self.store.run(&cmds)?) {
                let block = bytes(&self.store, reply)?;
                out.push(place.found_in(&block));
            }
        }
        Ok(out)
    }

    /// Adds normalized keys; returns, per key, whether it was new (not
    /// (probably) present before this add — among racing writers exactly
    /// one is told so). Adds the new ones to the item count.
    pub fn insert_keys<T: AsRef<[u8]>>(&self, keys: &[T]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(keys.len());
        for batch in keys.chunks(PIPELINE) {
            let cmds: Vec<redis::Cmd> = batch
                .iter()
                .map(|k| {
                    let place = self.meta.place(k.as_ref());
                    let mut c = redis::cmd("BITFIELD");
                    c.arg(layout::shard_key(&self.address.name, place.shard));
                    for bit in place.redis_bits() {
                        c.arg("SET").arg("u1").arg(bit).arg(1);
                    }
                    c
                })
                .collect();
            let mut new = 0u64;
            for reply in self.store.run(&cmds)? {
                let Value::Array(old) = reply else {
                    return Err(self.store.protocol("expected an array reply to BITFIELD"));
                };
                let mut was_new = false;
                for bit in &old {
                    was_new |= int(&self.store, bit)? == 0;
                }
                new += was_new as u64;
                out.push(was_new);
            }
            if new > 0 {
                self.store.one(
                    redis::cmd("HINCRBY")
                        .arg(layout::meta_key(&self.address.name))
                        .arg("items")
                        .arg(new)
                        .clone(),
                )?;
            }
        }
        Ok(out)
    }

    /// Normalizes one entry as the filter's key kind requires.
    pub fn entry_key<'a>(&self, entry: &'a [u8]) -> Result<std::borrow::Cow<'a, [u8]>, KeyError> {
        entry_key(self.kind, self.mode, entry)
    }

    /// Answers queries (lines as a user gives them) exactly as
    /// `bloomgate_blacklist::Blacklist::check_many` answers them for the
    /// same filter in a file: the query's lookup keys by the key kind and
    /// match mode, then the whitelist rules. `out` gets one result per
    /// query; the `Err` of the whole call is a Redis failure.
    pub fn check_many<'q>(
        &self,
        queries: impl IntoIterator<Item = &'q [u8]>,
        out: &mut Vec<Result<Verdict, KeyError>>,
    ) -> Result<()> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut spans = Vec::new();
        let mut scratch = Vec::new();
        for q in queries {
            spans.push(query_keys(self.kind, self.mode, q, &mut scratch).map(|()| {
                let first = keys.len();
                keys.append(&mut scratch);
                (first, keys.len())
            }));
        }
        let found = self.contains_keys(&keys)?;
        out.clear();
        out.extend(spans.into_iter().map(|span| {
            span.map(|(a, b)| {
                verdict_of(
                    &self.whitelist,
                    keys[a..b]
                        .iter()
                        .map(Vec::as_slice)
                        .zip(found[a..b].iter().copied()),
                )
            })
        }));
        Ok(())
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

    /// Statistics: the item count, and how many shard keys exist.
    pub fn info(&self) -> Result<Info> {
        let shards = self.meta.shards();
        let mut present = 0;
        let all: Vec<u64> = (0..shards).collect();
        for batch in all.chunks(PIPELINE) {
            let cmds: Vec<redis::Cmd> = batch
                .iter()
                .map(|&i| {
                    redis::cmd("EXISTS")
                        .arg(layout::shard_key(&self.address.name, i))
                        .clone()
                })
                .collect();
            for v in self.store.run(&cmds)? {
                present += int(&self.store, &v)? as u64;
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
            data_bytes: self.meta.data_len(),
            whitelist,
        })
    }

    /// The predicted false-positive rate per lookup at `items` items.
    pub fn predicted_fp(&self, items: u64) -> f64 {
        let p = &self.meta.params;
        Layout::Blocked.predicted_fp(p.bits, items as f64, p.k)
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
        self.store.one(
            redis::cmd("SADD")
                .arg(layout::whitelist_key(&self.address.name))
                .arg(&key)
                .clone(),
        )?;
        self.whitelist.insert(key);
        Ok(was_hit)
    }

    /// Removes an item from the whitelist. Returns whether it was there.
    pub fn whitelist_remove(&mut self, item: &[u8]) -> Result<bool> {
        let key = self
            .entry_key(item)
            .map_err(|e| self.invalid(item, e))?
            .into_owned();
        let v = self.store.one(
            redis::cmd("SREM")
                .arg(layout::whitelist_key(&self.address.name))
                .arg(&key)
                .clone(),
        )?;
        self.whitelist.remove(&key);
        Ok(int(&self.store, &v)? > 0)
    }

    fn invalid(&self, item: &[u8], e: KeyError) -> Error {
        Error::InvalidItem {
            item: String::from_utf8_lossy(item).into_owned(),
            kind: self.kind.to_string(),
            reason: e.to_string(),
        }
    }
}
