//! Cuckoo filters (`CF.*`) of a data directory: a chain of cuckoo tables
//! per name, its snapshot file, and exactly-once replay of its log records.
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
//! as RedisBloom does; at most [`MAX_FILTERS`] sub-filters), or, with
//! `EXPANSION 0`, answers "Filter is full". Nothing is ever evicted: a
//! failed insert leaves every table as it was (the engine's promise).
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
//! is. The sub-filters of a chain therefore share one hash (the first
//! one's seed and fingerprint width), and each later one is the last one
//! with every bucket split in the expansion
//! ([`bloomgate_engine::CuckooParams::next_in_chain`]), so its buckets
//! refine the older ones'. A delete takes a copy from the newest
//! sub-filter holding a match ([`delete_table`]); if that copy is another
//! item's, the two are indistinguishable in every older sub-filter, and
//! the deleted item's own copy answers for the other item from then on.
//! The argument is in `bloomgate_engine::cuckoo`, "Chains". (With a seed
//! per sub-filter, as before, such a delete removed the other item:
//! 24 to 91 of 3,000 items kept were lost in the test script of
//! `tests/serve_cuckoo_delete.rs`.)
//!
//! Chains saved before keep their sub-filters hashed apart (each with
//! its own seed) and are served as they are; sub-filters they grow now
//! nest in their last one. There, and in a chain of several counting
//! filters (only a `CF.LOADCHUNK` dump can make one), a delete whose item
//! matches in sub-filters hashed apart cannot tell which copy is the
//! item's: it is refused ([`StoreError::Ambiguous`]) and changes nothing,
//! the item stays (a false positive, never a false negative).
//!
//! # Counting filters
//!
//! The same chain can hold one counting Bloom filter instead of cuckoo
//! tables ([`CfLayout::Counting`]: `"layout": "counting"` over HTTP,
//! `CF.RESERVE … LAYOUT COUNTING` over RESP;
//! [`bloomgate_engine::CountingFilter`]): 4-bit counters, an add raises an
//! item's k counters, a delete lowers them, and a counter that reached 15
//! stays there. It is never full (past its capacity the rate rises, as
//! `info` predicts), so it never grows, and the `CF.*` commands, the HTTP
//! API, the log and the files treat it exactly as a cuckoo chain: `COUNT`
//! is the item's smallest counter. It costs about 7× a cuckoo filter's
//! memory at the same rate (`bloomgate_engine::math`, "Counting filter"),
//! for adds that never fail.
//!
//! # Files built by the CLI
//!
//! A counting or cuckoo filter file that `bloomgate build --layout
//! counting|cuckoo` wrote into the data directory as `NAME.bgf` is served
//! here too, so that the CLI and the server read the same data: its key
//! rules (canonicalized URLs, hosts, …) and its whitelist `NAME.bgf.whitelist`
//! apply as the CLI's `check`, `add` and `remove` apply them; it never grows
//! (`EXPANSION 0`, as the CLI's `add` stops at a full table). At its first
//! start the server writes `NAME.cf` for it and from then on `NAME.cf` is
//! the filter (its changes are logged and replayed as below); each save
//! also copies the table back to `NAME.bgf` (atomically), which the CLI
//! reads. `NAME.cf` records the hashes of the last two copies it wrote,
//! before writing the next one, so at a start a `NAME.bgf` it does not
//! name was replaced by someone else: it is then left alone and no longer
//! written, with a warning saying how to serve it instead (deleting
//! `NAME.cf` drops the changes it holds; nothing is dropped silently).
//! Deleting the filter deletes both files.
//!
//! # Files and durability
//!
//! `NAME.cf` holds the whole chain ([`write_file`]): a JSON header with the
//! parameters, the incarnation id (random, so records of a deleted
//! namesake never apply), the counters, and `seq`, the sequence number of
//! the last change it contains; then each sub-filter's engine bytes; then an
//! xxh3-64 of all that. It is replaced atomically (write, fsync, rename).
//! Each table's bytes are written from the table's own memory under the
//! chain's read lock ([`write_file`]; `CF.SCANDUMP` cuts its chunks the
//! same way), and a start reads each table straight into its memory
//! ([`load_file`]): creating, saving, dumping and loading a filter never
//! hold a second copy of it, so a filter that fits in memory (and in
//! `--max-memory`) once can be written and served again.
//!
//! Every change (an add, a delete) gets the next sequence number under the
//! filter's write lock and is queued to the write-ahead log in that order
//! ([`bloomgate_blacklist::log`], record kind 4); the client's reply waits
//! for the log's fsync ([`super::super::Ack`]). A snapshot rotates the log,
//! then copies each changed chain with its `seq` under its read lock and
//! writes it, then trims the old segments. Replay at startup applies a
//! record only if its incarnation id is the file's and its `seq` is greater
//! than the file's, so nothing is applied twice: not after a crash between
//! writing a file and trimming the log (the old segments' records are all
//! at or below the saved `seq`), not after a crash in the middle of a
//! snapshot. A delete is not idempotent — applying one twice removes a
//! second copy, or another item's equal fingerprint, a false negative —
//! which is why this is exact rather than "at least once" like Bloom adds.
//!
//! A replayed add is never refused: if no sub-filter has room (a replay can
//! place items differently only if the engine's kicks were not
//! deterministic) the chain grows whatever its `EXPANSION` says, because an
//! acknowledged add must not be lost.
//!
//! When the log fails to write a group of records (a full disk), their
//! changes stay applied in memory unacknowledged; the next change of such
//! a chain saves it first ([`Cuckoos::settle`]), so that the sequence
//! numbers in the log continue from a file that contains the unlogged
//! ones. One window remains: a change checked here just before a failure
//! is counted, and queued just after the log's retry began a new segment,
//! is logged past the failed group's sequence numbers. Replay then applies
//! it without them. Only unacknowledged changes can be missing that way,
//! never an acknowledged one.
//!
//! A change whose reply is a log error has still been applied in memory,
//! and it is kept if a later change saves the chain first. Its outcome is
//! therefore unknown, as for any write whose reply is lost. A client must
//! not repeat a failed `CF.DEL` blindly: that could remove a second copy.
//! It should check `CF.COUNT` first.
//!
//! Creating a filter (`CF.RESERVE`, an add that creates one,
//! `CF.LOADCHUNK`'s last chunk) writes its file before it answers. A
//! `CF.LOADCHUNK` stream in progress lives in memory only: a crash in the
//! middle of one loses it (the next chunk is answered `ERR not found`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use bloomgate_blacklist::log::{CuckooOp, CuckooRecord};
use bloomgate_blacklist::Whitelist;
use bloomgate_engine::{delete_table, AmbiguousDelete};
use bloomgate_url::{entry_key, query_keys, KeyKind, MatchMode};
use serde::{Deserialize, Serialize};
use sub::Sub;
use xxhash_rust::xxh3::xxh3_64;

use crate::wal::{self, AckRx, Wal};
use crate::Limits;

use super::super::{Damaged, StoreError};

/// Most sub-filters of one chain (RedisBloom's `cf-max-expansions`
/// default): an add to a chain that has them all is refused with
/// "Maximum expansions reached".
pub const MAX_FILTERS: usize = 32;
/// RedisBloom's default capacity of a filter an add creates.
pub const DEFAULT_CAPACITY: u64 = 1024;
/// RedisBloom's default bucket size.
pub const DEFAULT_BUCKET_SIZE: u16 = 2;
/// RedisBloom's default number of kicks before an insert gives up.
pub const DEFAULT_MAX_ITERATIONS: u16 = 20;
/// RedisBloom's default expansion.
pub const DEFAULT_EXPANSION: u32 = 1;
/// Bytes of one `CF.SCANDUMP` chunk.
pub const CF_DUMP_CHUNK: usize = 4 << 20;
const FILE_MAGIC: &[u8; 8] = b"BGCUCKO1";
const DUMP_MAGIC: &[u8] = b"BLOOMGATE-CF-DUMP-1\n";
/// Largest JSON header accepted when reading (anything larger is damage).
const MAX_HEADER: usize = 1 << 20;

/// The false-positive rate RedisBloom's 8-bit fingerprints give a
/// sub-filter with buckets of `bucket_size`: a lookup compares 2·b
/// fingerprints, each equal by chance with probability 1/255.
pub fn redisbloom_rate(bucket_size: u16) -> f64 {
    (2.0 * f64::from(bucket_size) / 255.0).min(0.5)
}

/// What a deletable filter's tables are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CfLayout {
    /// Cuckoo tables (RedisBloom's `CF.*` filter; the default).
    #[default]
    Cuckoo,
    /// One counting Bloom filter of 4-bit counters: never full (past its
    /// capacity its rate rises, as `info` predicts), so it never grows.
    Counting,
}

impl CfLayout {
    /// `cuckoo` or `counting`.
    pub fn name(self) -> &'static str {
        match self {
            CfLayout::Cuckoo => "cuckoo",
            CfLayout::Counting => "counting",
        }
    }

    fn is_cuckoo(&self) -> bool {
        *self == CfLayout::Cuckoo
    }
}

/// Parameters of a new cuckoo filter (`CF.RESERVE`, or an add that creates).
#[derive(Clone, Debug, PartialEq)]
pub struct CfSpec {
    /// Cuckoo tables or a counting filter.
    pub layout: CfLayout,
    /// Items the first sub-filter is planned for.
    pub capacity: u64,
    /// RedisBloom's bucket size (1..=255): sets the default error rate and
    /// is reported by `CF.INFO`; the tables use the engine's buckets.
    pub bucket_size: u16,
    /// Kicks before an insert into a full table gives up (1..=65535).
    pub max_iterations: u16,
    /// Growth factor of the next sub-filter; 0 = never grow.
    pub expansion: u32,
    /// False-positive rate per sub-filter; `None`: RedisBloom's for the
    /// bucket size ([`redisbloom_rate`]).
    pub error_rate: Option<f64>,
    /// How items are normalized before hashing (raw for `CF.RESERVE`; a
    /// file built by the CLI keeps its own, see "Files built by the CLI").
    pub kind: KeyKind,
    /// How queries are matched.
    pub mode: MatchMode,
}

impl CfSpec {
    /// RedisBloom's defaults for a filter an add creates, with `capacity`.
    pub fn redis_default(capacity: u64) -> CfSpec {
        CfSpec {
            layout: CfLayout::Cuckoo,
            capacity,
            bucket_size: DEFAULT_BUCKET_SIZE,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            expansion: DEFAULT_EXPANSION,
            error_rate: None,
            kind: KeyKind::Raw,
            mode: MatchMode::Exact,
        }
    }
}

/// What one add did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CfAdded {
    /// A copy was added.
    Added,
    /// `NX`, and the item was (probably) there: nothing added.
    Exists,
    /// No room, and the chain may not grow (or may not grow more).
    Full,
}

/// `CF.INFO`'s figures.
#[derive(Clone, Debug, Serialize)]
pub struct CfInfo {
    /// Filter name.
    pub name: String,
    /// Bytes of all sub-filters' tables.
    pub size_bytes: u64,
    /// Buckets of the first sub-filter (RedisBloom's "Number of buckets").
    pub buckets: u64,
    /// Sub-filters.
    pub filters: usize,
    /// Items in the filter (adds less deletes).
    pub items: u64,
    /// Deletes so far.
    pub deletes: u64,
    /// RedisBloom's bucket size parameter.
    pub bucket_size: u16,
    /// Expansion (a power of two, or 0).
    pub expansion: u32,
    /// Kicks before an insert gives up.
    pub max_iterations: u16,
    /// Items the first sub-filter was planned for.
    pub capacity: u64,
    /// False-positive rate each sub-filter was planned for.
    pub error_rate: f64,
    /// Predicted false-positive rate of a lookup now (the sum over the
    /// sub-filters of each one's rate at its load).
    pub predicted_fp: f64,
    /// Fingerprint width in bits (a counting filter: counters per item).
    pub fingerprint_bits: u32,
    /// `cuckoo` or `counting`.
    pub layout: &'static str,
    /// Fraction of the slots holding a fingerprint, or of the counters
    /// above zero.
    pub fill: f64,
    /// Items over the items the sub-filters were sized for.
    pub load: f64,
    /// Counters stuck at 15 (counting filters; never decremented again).
    pub saturated_counters: u64,
    /// How items are normalized (`raw` unless created or built with a kind).
    pub key_kind: &'static str,
    /// How queries are matched.
    pub match_mode: &'static str,
}

/// The header of `NAME.cf` and of a `CF.SCANDUMP` stream.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Header {
    /// Absent in files and dumps of cuckoo filters (and in those written
    /// before counting filters were served).
    #[serde(default, skip_serializing_if = "CfLayout::is_cuckoo")]
    layout: CfLayout,
    id: u64,
    seq: u64,
    capacity: u64,
    bucket_size: u16,
    max_iterations: u16,
    expansion: u32,
    error_rate: f64,
    items: u64,
    deletes: u64,
    /// Byte length of each sub-filter's engine serialization.
    subs: Vec<u64>,
    /// xxh3-64 of the sub-filters' bytes (all, in order).
    body_hash: u64,
    /// A filter exported to `NAME.bgf` at each save (one imported from a
    /// CLI-built file): xxh3-64 hashes of the files it wrote, the last two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bgf: Option<Vec<u64>>,
}

impl Header {
    /// Checks every field a file or a `CF.LOADCHUNK` header supplies before
    /// it sizes memory or a chain: 1 to 64 sub-filters whose lengths sum
    /// without overflow, a rate strictly between 0 and 1, a bucket size and
    /// an expansion within `CF.RESERVE`'s ranges, a capacity of at least 1,
    /// and a cuckoo filter's item count that fits its slots. Returns the
    /// sub-filters' total length in bytes.
    fn check(&self) -> Result<u64, String> {
        if self.subs.is_empty() || self.subs.len() > MAX_FILTERS.max(64) {
            return Err(format!("{} sub-filters", self.subs.len()));
        }
        let total = self
            .subs
            .iter()
            .try_fold(0u64, |t, &l| t.checked_add(l))
            .ok_or("sub-filter lengths overflow")?;
        if !(self.error_rate > 0.0 && self.error_rate < 1.0)
            || self.bucket_size == 0
            || self.capacity == 0
            || self.expansion > 32_768
        {
            return Err("bad parameters".into());
        }
        // A cuckoo filter's item takes a slot of 2 bits or more. (A
        // counting filter counts repeated adds of one item: no bound.)
        if self.layout.is_cuckoo() && self.items > total.saturating_mul(4) {
            return Err(format!("{} items in {total} bytes", self.items));
        }
        Ok(total)
    }
}

/// Checks the bytes of a `NAME.cf` file as the server's start does,
/// without serving it: `Err` names the fault.
pub fn check_file(bytes: &[u8]) -> Result<(), String> {
    decode_file(bytes).map(|_| ())
}

/// Parses the first chunk of a `CF.LOADCHUNK` stream (magic line, JSON
/// header) and checks it (see [`Header::check`]) and its size against
/// `max_filter_bytes`, before anything is allocated for it. Returns the
/// bytes the stream's later chunks carry.
pub fn parse_dump_header(data: &[u8], max_filter_bytes: u64) -> Result<u64, StoreError> {
    parse_dump(data, max_filter_bytes).map(|(_, total)| total)
}

fn parse_dump(data: &[u8], max_filter_bytes: u64) -> Result<(Header, u64), StoreError> {
    let bad = || StoreError::Invalid("Invalid header".into());
    let h: Header = data
        .strip_prefix(DUMP_MAGIC)
        .and_then(|j| serde_json::from_slice(j).ok())
        .ok_or_else(bad)?;
    let total = h.check().map_err(|_| bad())?;
    if total > max_filter_bytes {
        return Err(StoreError::Invalid(format!(
            "a filter of {total} bytes exceeds the server's limit of {max_filter_bytes} bytes"
        )));
    }
    Ok((h, total))
}

/// The mutable part of a chain (under [`CfNamed::state`]).
struct Chain {
    id: u64,
    /// Sequence number of the last change applied.
    seq: u64,
    spec: CfSpec,
    error_rate: f64,
    subs: Vec<Sub>,
    items: u64,
    deletes: u64,
}

/// The engine headers of a chain's tables, as a dump cuts them.
type DumpHeads = Arc<Vec<Vec<u8>>>;

/// One served cuckoo filter.
pub struct CfNamed {
    name: String,
    state: RwLock<Chain>,
    /// Changed since its file was written.
    dirty: AtomicBool,
    /// Deleted (a handle kept by a caller refers to nothing).
    deleted: AtomicBool,
    /// The log's failure count when this chain's last change was queued
    /// (see [`Cuckoos::settle`]).
    logged_epoch: AtomicU64,
    /// The sub-filters' engine headers of a `CF.SCANDUMP` in progress,
    /// with the `seq` they were made at: each chunk is cut from them and
    /// the tables without checksumming the tables again.
    dump: Mutex<Option<(u64, DumpHeads)>>,
    /// Exported to `NAME.bgf` at each save: the hashes of the last two
    /// files written ([`Header::bgf`]).
    export: Mutex<Option<Vec<u64>>>,
    /// `NAME.bgf.whitelist` of a filter built by the CLI (read at startup),
    /// applied to lookups as the CLI's `check` applies it.
    whitelist: Whitelist,
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

impl Chain {
    fn new(spec: &CfSpec, limits: &Limits) -> Result<Chain, StoreError> {
        let error_rate = spec
            .error_rate
            .unwrap_or_else(|| redisbloom_rate(spec.bucket_size));
        let mut spec = spec.clone();
        if spec.layout == CfLayout::Counting {
            // One filter that never fills: nothing to expand.
            spec.expansion = 0;
        }
        let mut c = Chain {
            id: bloomgate_engine::random_seed(),
            seq: 0,
            spec,
            error_rate,
            subs: Vec::new(),
            items: 0,
            deletes: 0,
        };
        c.grow(limits, true)?;
        Ok(c)
    }

    fn bytes(&self) -> u64 {
        self.subs.iter().map(|s| s.size_bytes()).sum()
    }

    /// Adds a sub-filter. `force` grows past the expansion rules (replay,
    /// the first sub-filter); the size limit always holds. The first is
    /// planned for the capacity; each later one is the last one with every
    /// bucket split in the expansion (see "Deletes in a grown filter").
    fn grow(&mut self, limits: &Limits, force: bool) -> Result<bool, StoreError> {
        if !force && (self.spec.expansion == 0 || self.subs.len() >= MAX_FILTERS) {
            return Ok(false);
        }
        if self.spec.layout == CfLayout::Counting && !self.subs.is_empty() {
            // Never full: adds always fit in the one counting filter.
            return Ok(false);
        }
        let sub = match self.subs.last() {
            None => Sub::new(
                self.spec.layout,
                self.spec.capacity,
                self.error_rate,
                self.spec.bucket_size,
                self.spec.max_iterations,
                bloomgate_engine::random_seed(),
                (self.spec.kind.as_u8(), self.spec.mode.as_u8()),
            ),
            Some(last) => {
                // The expansion as a power of two (RedisBloom rounds it up
                // too; a file's or a dump's is any u32): 2^shift.
                let Some(shift) = self
                    .spec
                    .expansion
                    .max(1)
                    .checked_next_power_of_two()
                    .map(u32::trailing_zeros)
                else {
                    return Ok(false);
                };
                match last.next_in_chain(shift) {
                    Some(sub) => sub,
                    None => return Ok(false),
                }
            }
        }
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
        if self.bytes() + sub.size_bytes() > limits.max_filter_bytes {
            if self.subs.is_empty() {
                return Err(StoreError::Invalid(format!(
                    "a filter of {} bytes exceeds the server's limit of {} bytes",
                    sub.size_bytes(),
                    limits.max_filter_bytes
                )));
            }
            tracing::warn!(
                "bloomgate serve: a cuckoo filter cannot grow past the server's filter size limit of {} bytes",
                limits.max_filter_bytes
            );
            return Ok(false);
        }
        // The table is allocated zeroed, untouched (no memory yet); it is
        // kept only if the server's memory budget has room. A replay's
        // growth (`force` on a chain that exists) holds acknowledged adds
        // and is never refused.
        let replaying = force && !self.subs.is_empty();
        if !replaying && limits.memory.reserve(sub.size_bytes()).is_err() {
            if self.subs.is_empty() {
                return Err(StoreError::OutOfMemory(format!(
                    "a filter of {} bytes would pass the server's --max-memory of {} bytes",
                    sub.size_bytes(),
                    limits.memory.limit()
                )));
            }
            tracing::warn!(
                "bloomgate serve: a cuckoo filter cannot grow past the server's --max-memory of {} bytes",
                limits.memory.limit()
            );
            return Ok(false);
        }
        self.subs.push(sub);
        Ok(true)
    }

    fn contains(&self, item: &[u8]) -> bool {
        self.subs.iter().any(|s| s.contains(item))
    }

    fn count(&self, item: &[u8]) -> u64 {
        self.subs.iter().map(|s| s.count(item)).sum()
    }

    /// Adds one copy: into the newest sub-filter with room (newest first,
    /// as RedisBloom), else into a new one if the chain may grow (`force`:
    /// whatever the rules say).
    fn add(&mut self, item: &[u8], nx: bool, limits: &Limits, force: bool) -> CfAdded {
        if nx && self.contains(item) {
            return CfAdded::Exists;
        }
        loop {
            if self.subs.iter().rev().any(|s| s.add(item).is_ok()) {
                self.items += 1;
                return CfAdded::Added;
            }
            match self.grow(limits, force) {
                Ok(true) => continue,
                _ => return CfAdded::Full,
            }
        }
    }

    /// Deletes one copy, from the newest sub-filter holding a match that
    /// refines every other one holding one ([`delete_table`]; see
    /// "Deletes in a grown filter"). Returns whether one was found; an
    /// error (nothing changed) if the sub-filters holding a match were
    /// hashed apart.
    fn delete(&mut self, item: &[u8]) -> Result<bool, AmbiguousDelete> {
        let subs = &self.subs;
        let holding: Vec<usize> = (0..subs.len())
            .filter(|&i| subs[i].contains(item))
            .collect();
        let Some(k) = delete_table(&holding, |k, j| subs[k].refines(&subs[j]))? else {
            return Ok(false);
        };
        if !subs[k].remove(item) {
            // It holds a match, under the chain's write lock: unreachable.
            return Ok(false);
        }
        self.items = self.items.saturating_sub(1);
        self.deletes += 1;
        Ok(true)
    }

    fn info(&self, name: &str) -> CfInfo {
        CfInfo {
            name: name.into(),
            size_bytes: self.bytes(),
            buckets: self.subs.first().map_or(0, |s| s.buckets()),
            filters: self.subs.len(),
            items: self.items,
            deletes: self.deletes,
            bucket_size: self.spec.bucket_size,
            expansion: self.spec.expansion,
            max_iterations: self.spec.max_iterations,
            capacity: self.spec.capacity,
            error_rate: self.error_rate,
            predicted_fp: self
                .subs
                .iter()
                .map(|s| s.predicted_fp())
                .sum::<f64>()
                .min(1.0),
            fingerprint_bits: self.subs.first().map_or(0, |s| s.fingerprint_bits()),
            layout: self.spec.layout.name(),
            fill: self.subs.iter().map(|s| s.used_cells()).sum::<u64>() as f64
                / self.subs.iter().map(|s| s.cells()).sum::<u64>().max(1) as f64,
            load: self.items as f64
                / self.subs.iter().map(|s| s.planned()).sum::<u64>().max(1) as f64,
            saturated_counters: self.subs.iter().map(|s| s.saturated()).sum(),
            key_kind: self.spec.kind.as_str(),
            match_mode: self.spec.mode.as_str(),
        }
    }

    fn header(&self, body: &[SubImage<'_>]) -> Header {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for b in body {
            b.pieces().iter().for_each(|p| h.update(p));
        }
        Header {
            layout: self.spec.layout,
            id: self.id,
            seq: self.seq,
            capacity: self.spec.capacity,
            bucket_size: self.spec.bucket_size,
            max_iterations: self.spec.max_iterations,
            expansion: self.spec.expansion,
            error_rate: self.error_rate,
            items: self.items,
            deletes: self.deletes,
            subs: body.iter().map(SubImage::len).collect(),
            body_hash: h.digest(),
            bgf: None,
        }
    }

    /// The header and each sub-filter's image, its data the table's own
    /// memory (no copy): consistent while the caller holds the chain's
    /// lock, which keeps every change out.
    fn image(&self) -> (Header, Vec<SubImage<'_>>) {
        let body: Vec<SubImage<'_>> = self.subs.iter().map(Sub::image).collect();
        (self.header(&body), body)
    }

    /// The header and each sub-filter's bytes, copied.
    #[cfg(test)]
    fn serialize(&self) -> (Header, Vec<Vec<u8>>) {
        let (h, body) = self.image();
        (h, body.iter().map(|b| b.pieces().concat()).collect())
    }

    /// Rebuilds a chain from its header and its sub-filters' bytes.
    fn from_parts(h: &Header, body: &[u8]) -> Result<Chain, String> {
        if xxh3_64(body) != h.body_hash {
            return Err("checksum mismatch".into());
        }
        h.check()?;
        let mut subs = Vec::new();
        let mut at = 0usize;
        for &len in &h.subs {
            let end = usize::try_from(len)
                .ok()
                .and_then(|l| at.checked_add(l))
                .filter(|&e| e <= body.len())
                .ok_or("sub-filter lengths exceed the data")?;
            subs.push(Sub::from_bytes(h.layout, &body[at..end])?);
            at = end;
        }
        if at != body.len() {
            return Err("trailing bytes".into());
        }
        Chain::from_subs(h, subs)
    }

    /// A chain of `subs`, read as `h` describes them.
    fn from_subs(h: &Header, subs: Vec<Sub>) -> Result<Chain, String> {
        let (kind, mode) = key_rules(&subs)?;
        Ok(Chain {
            id: h.id,
            seq: h.seq,
            spec: CfSpec {
                layout: h.layout,
                capacity: h.capacity,
                bucket_size: h.bucket_size,
                max_iterations: h.max_iterations,
                expansion: h.expansion,
                error_rate: Some(h.error_rate),
                kind,
                mode,
            },
            error_rate: h.error_rate,
            subs,
            items: h.items,
            deletes: h.deletes,
        })
    }
}

/// `item` as the chain stores it: itself for raw keys, else normalized by
/// the chain's key rules (as the CLI's `add` and `remove` do).
fn normalized<'i>(c: &Chain, item: &'i [u8]) -> Result<std::borrow::Cow<'i, [u8]>, StoreError> {
    if c.spec.kind == KeyKind::Raw && c.spec.mode == MatchMode::Exact {
        return Ok(item.into());
    }
    entry_key(c.spec.kind, c.spec.mode, item)
        .map_err(|e| StoreError::Invalid(format!("invalid item: {e}")))
}

/// The key rules of a chain's sub-filters (all the same).
fn key_rules(subs: &[Sub]) -> Result<(KeyKind, MatchMode), String> {
    let (k, m) = subs.first().map_or((0, 0), Sub::key_rules);
    if subs.iter().any(|s| s.key_rules() != (k, m)) {
        return Err("sub-filters with different key rules".into());
    }
    match (KeyKind::from_u8(k), MatchMode::from_u8(m)) {
        (Some(k), Some(m)) => Ok((k, m)),
        _ => Err(format!(
            "unknown key kind {k} or match mode {m} (written by a newer bloomgate?)"
        )),
    }
}

/// The error of a delete that [`delete_table`] refused.
fn ambiguous(name: &str, e: &AmbiguousDelete) -> StoreError {
    StoreError::Ambiguous(format!(
        "cannot delete this item from '{name}' safely: it matches in sub-filters {:?} \
         (0 = the oldest), which are hashed separately (sub-filters saved by an older \
         bloomgate, or counting filters), so the delete cannot tell which copy is this \
         item's, and taking another item's would make that item a false negative; nothing \
         was deleted",
        e.tables
    ))
}

/// Bytes `start..start + len` of the concatenation of `pieces` (fewer at
/// its end, none past it).
fn cut<'a>(pieces: impl Iterator<Item = &'a [u8]>, start: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0u64;
    for p in pieces {
        let end = at + p.len() as u64;
        if end > start && out.len() < len {
            let from = start.saturating_sub(at) as usize;
            let take = (p.len() - from).min(len - out.len());
            out.extend_from_slice(&p[from..from + take]);
        }
        at = end;
    }
    out
}

/// One sub-filter's engine file image, without a copy of its table: its
/// header, then the table's own bytes.
struct SubImage<'a> {
    head: Vec<u8>,
    data: &'a [u8],
}

impl SubImage<'_> {
    fn pieces(&self) -> [&[u8]; 2] {
        [&self.head, self.data]
    }

    fn len(&self) -> u64 {
        (self.head.len() + self.data.len()) as u64
    }
}

/// `NAME.cf`'s bytes: magic, u32 LE header length, JSON header, the
/// sub-filters' bytes, xxh3-64 (LE) of everything before it.
/// Writes a `NAME.cf` image to `out`, piece by piece (the checksum hashed
/// as they go), each table's data from the table's own memory: a save
/// holds no second copy of the tables.
fn write_file(
    out: &mut impl std::io::Write,
    h: &Header,
    body: &[SubImage<'_>],
) -> std::io::Result<()> {
    let json = serde_json::to_vec(h).expect("a header serializes");
    let len = (json.len() as u32).to_le_bytes();
    let mut sum = xxhash_rust::xxh3::Xxh3::new();
    let head: [&[u8]; 3] = [FILE_MAGIC, &len, &json];
    for piece in head.into_iter().chain(body.iter().flat_map(|b| b.pieces())) {
        sum.update(piece);
        out.write_all(piece)?;
    }
    out.write_all(&sum.digest().to_le_bytes())
}

/// The image [`write_file`] writes, in one buffer.
#[cfg(test)]
fn encode_file(h: &Header, body: &[Vec<u8>]) -> Vec<u8> {
    let json = serde_json::to_vec(h).expect("a header serializes");
    let mut out = Vec::with_capacity(16 + json.len() + body.iter().map(Vec::len).sum::<usize>());
    out.extend_from_slice(FILE_MAGIC);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    for b in body {
        out.extend_from_slice(b);
    }
    let sum = xxh3_64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// A chain from `NAME.cf`'s bytes, with its export hashes ([`Header::bgf`]).
fn decode_file(bytes: &[u8]) -> Result<(Chain, Option<Vec<u64>>), String> {
    let rest = bytes
        .strip_prefix(FILE_MAGIC.as_slice())
        .ok_or("not a bloomgate cuckoo filter file (bad magic)")?;
    let (data, sum) = rest.split_last_chunk::<8>().ok_or("truncated")?;
    if xxh3_64(&bytes[..bytes.len() - 8]) != u64::from_le_bytes(*sum) {
        return Err("checksum mismatch (damaged or truncated file)".into());
    }
    let (len, data) = data.split_first_chunk::<4>().ok_or("truncated")?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > MAX_HEADER || len > data.len() {
        return Err("impossible header length".into());
    }
    let h: Header = serde_json::from_slice(&data[..len]).map_err(|e| format!("header: {e}"))?;
    Ok((Chain::from_parts(&h, &data[len..])?, h.bgf))
}

/// xxh3-64 of bytes `from..to` of `file`, read 1 MiB at a time.
fn hash_range(file: &std::fs::File, from: u64, to: u64) -> std::io::Result<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::Start(from))?;
    let mut r = f.take(to.saturating_sub(from));
    let mut sum = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match r.read(&mut buf)? {
            0 => break,
            n => sum.update(&buf[..n]),
        }
    }
    Ok(sum.digest())
}

/// A chain from the file `path`, as [`decode_file`] reads it from its
/// bytes, with the same checks in the same order, but in bounded memory:
/// the checksums are computed reading the file a piece at a time, and each
/// table is read straight into its own memory. (Reading the file whole,
/// then decoding each table from it, held the filter twice at a start: a
/// filter that fits the memory once could not be loaded again.)
fn load_file(path: &Path) -> Result<(Chain, Option<Vec<u64>>), String> {
    use std::io::{BufReader, Read, Seek, SeekFrom};
    let io = |e: std::io::Error| e.to_string();
    let file = std::fs::File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    let mut f = &file;
    let mut magic = [0u8; 8];
    if size < 8 || f.read_exact(&mut magic).is_err() || &magic != FILE_MAGIC {
        return Err("not a bloomgate cuckoo filter file (bad magic)".into());
    }
    if size < 16 {
        return Err("truncated".into());
    }
    let mut sum = [0u8; 8];
    f.seek(SeekFrom::Start(size - 8)).map_err(io)?;
    f.read_exact(&mut sum).map_err(io)?;
    if hash_range(&file, 0, size - 8).map_err(io)? != u64::from_le_bytes(sum) {
        return Err("checksum mismatch (damaged or truncated file)".into());
    }
    if size < 20 {
        return Err("truncated".into());
    }
    let mut len = [0u8; 4];
    f.seek(SeekFrom::Start(8)).map_err(io)?;
    f.read_exact(&mut len).map_err(io)?;
    let len = u64::from(u32::from_le_bytes(len));
    if len > MAX_HEADER as u64 || len > size - 20 {
        return Err("impossible header length".into());
    }
    let mut json = vec![0u8; len as usize];
    f.read_exact(&mut json).map_err(io)?;
    let h: Header = serde_json::from_slice(&json).map_err(|e| format!("header: {e}"))?;
    let (body_start, body_end) = (12 + len, size - 8);
    if hash_range(&file, body_start, body_end).map_err(io)? != h.body_hash {
        return Err("checksum mismatch".into());
    }
    let total = h.check()?;
    if total > body_end - body_start {
        return Err("sub-filter lengths exceed the data".into());
    }
    if total < body_end - body_start {
        return Err("trailing bytes".into());
    }
    f.seek(SeekFrom::Start(body_start)).map_err(io)?;
    let mut r = BufReader::with_capacity(1 << 20, f);
    let subs = h
        .subs
        .iter()
        .map(|&l| Sub::read_from(h.layout, &mut (&mut r).take(l), l))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((Chain::from_subs(&h, subs)?, h.bgf))
}

/// Writes `NAME.cf` for `c`, the chain of `named`, then, for a filter
/// exported to `NAME.bgf`, that file (see "Files built by the CLI": the
/// new file's hash is in `NAME.cf` before the file is written, so a crash
/// between the two leaves a `NAME.bgf` that `NAME.cf` still names).
fn save_to(dir: &Path, named: &CfNamed, c: &Chain) -> Result<(), StoreError> {
    use std::io::Write;
    let (mut h, body) = c.image();
    let mut export = lock(&named.export);
    let mut hashes = export.clone();
    if hashes.is_some() && body.len() != 1 {
        // A replayed add grew it past one table (see `replay`): one engine
        // file cannot hold it.
        tracing::warn!(
            "bloomgate serve: cuckoo filter '{}' has {} sub-filters and is no longer exported to {}.bgf",
            named.name,
            body.len(),
            named.name
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
    named.dirty.store(false, Relaxed);
    let failed = |path: PathBuf, e: std::io::Error| {
        named.dirty.store(true, Relaxed);
        StoreError::io(path.display(), e)
    };
    let path = cf_path(dir, &named.name);
    bloomgate_engine::atomic::replace_with(&path, |f| write_file(f, &h, &body))
        .map_err(|e| failed(path.clone(), e.into()))?;
    *export = hashes;
    if let Some(image) = image {
        let bgf = bgf_path(dir, &named.name);
        bloomgate_engine::atomic::replace_with(&bgf, |f| {
            image.pieces().iter().try_for_each(|p| f.write_all(p))
        })
        .map_err(|e| failed(bgf.clone(), e.into()))?;
    }
    Ok(())
}

/// The layout of a counting or cuckoo filter file; `None` for a Bloom
/// filter or an unreadable file (the Bloom loader reports those).
pub(super) fn deletable_layout(path: &Path) -> Option<CfLayout> {
    let code = bloomgate_engine::format::peek_layout_code(path).ok()?;
    match bloomgate_engine::format::DeletableKind::from_code(code)? {
        bloomgate_engine::format::DeletableKind::Counting => Some(CfLayout::Counting),
        bloomgate_engine::format::DeletableKind::Cuckoo => Some(CfLayout::Cuckoo),
    }
}

/// The whitelist of the filter file `bgf` (empty if it has none; a
/// damaged one is reported and ignored).
fn load_whitelist(bgf: &Path) -> Whitelist {
    let path = Whitelist::path_for(bgf);
    Whitelist::load(&path).unwrap_or_else(|e| {
        tracing::warn!("bloomgate serve: ignoring {}: {e}", path.display());
        Whitelist::default()
    })
}

/// `NAME.bgf` in `dir`.
fn bgf_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.bgf"))
}

/// A chain serving a deletable filter file built by the CLI (`bloomgate
/// build --layout counting|cuckoo`), from the file's bytes: one sub-filter,
/// its key rules, never grown (`EXPANSION 0`, as the CLI's `add` stops at
/// a full table).
fn import(layout: CfLayout, bytes: &[u8]) -> Result<Chain, String> {
    let sub = Sub::from_bytes(layout, bytes)?;
    let (kind, mode) = key_rules(std::slice::from_ref(&sub))?;
    let (bucket_size, max_iterations) = sub
        .cuckoo_settings()
        .map_or((DEFAULT_BUCKET_SIZE, DEFAULT_MAX_ITERATIONS), |(b, k)| {
            (b as u16, k.min(u32::from(u16::MAX)) as u16)
        });
    let error_rate = sub.target_fp();
    Ok(Chain {
        id: bloomgate_engine::random_seed(),
        seq: 0,
        spec: CfSpec {
            layout,
            capacity: sub.planned(),
            bucket_size,
            max_iterations,
            expansion: 0,
            error_rate: Some(error_rate),
            kind,
            mode,
        },
        error_rate,
        items: sub.items(),
        deletes: 0,
        subs: vec![sub],
    })
}

/// A `CF.LOADCHUNK` stream in progress.
struct Loading {
    header: Header,
    body: Vec<u8>,
    /// Chunks received, by index.
    got: Vec<bool>,
}

/// The cuckoo filters of a data directory.
pub struct Cuckoos {
    dir: PathBuf,
    map: RwLock<HashMap<String, Arc<CfNamed>>>,
    loading: Mutex<HashMap<String, Loading>>,
    limits: Limits,
    /// Whether a cuckoo filter was ever served or loaded: until then
    /// [`Cuckoos::has`] (asked by every Bloom write) takes no lock.
    ever: AtomicBool,
}

/// `NAME.cf` in `dir`.
pub fn cf_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.cf"))
}

impl CfNamed {
    /// The filter's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether `item` is (probably) in the filter, per item. Raw keys are
    /// looked up as they are; a filter built by the CLI with other key
    /// rules answers as the CLI's `check` does (canonicalized, every lookup
    /// key of the match mode, its whitelist applied). An item that cannot
    /// be normalized is not in it.
    pub fn exists(&self, items: &[&[u8]]) -> Vec<bool> {
        let c = read(&self.state);
        if c.spec.kind == KeyKind::Raw && c.spec.mode == MatchMode::Exact {
            let wl = &self.whitelist;
            return items
                .iter()
                .map(|i| c.contains(i) && (wl.is_empty() || !wl.contains(i)))
                .collect();
        }
        let mut keys = Vec::new();
        items
            .iter()
            .map(|i| {
                query_keys(c.spec.kind, c.spec.mode, i, &mut keys).is_ok()
                    && bloomgate_blacklist::verdict_with(|k| c.contains(k), &self.whitelist, &keys)
                        .hit
            })
            .collect()
    }

    /// Matching fingerprints of `item` (an upper bound of its copies; for
    /// a counting filter its smallest counter). 0 for an item that cannot
    /// be normalized.
    pub fn count(&self, item: &[u8]) -> u64 {
        let c = read(&self.state);
        match entry_key(c.spec.kind, c.spec.mode, item) {
            Ok(k) => c.count(&k),
            Err(_) => 0,
        }
    }

    /// Whether a change would wait for the chain's lock (a snapshot is
    /// copying it): a front end then makes the change off its event loop.
    pub fn write_busy(&self) -> bool {
        self.state.try_write().is_err()
    }

    /// Sub-filters in the chain.
    pub fn filters(&self) -> usize {
        read(&self.state).subs.len()
    }

    /// `CF.INFO`'s figures.
    pub fn info(&self) -> CfInfo {
        read(&self.state).info(&self.name)
    }
}

impl Cuckoos {
    /// Loads every `*.cf` of `dir` and every counting or cuckoo `*.bgf`
    /// the CLI built, except the names `bloom` takes (the Bloom filters',
    /// served or damaged). A file that fails to load is left in place and
    /// pushed to `damaged` (see [`Damaged`]).
    pub fn open(
        dir: &Path,
        limits: &Limits,
        valid_name: impl Fn(&str) -> bool,
        bloom: impl Fn(&str) -> bool,
        damaged: &mut Vec<Damaged>,
    ) -> Result<Cuckoos, StoreError> {
        let mut map = HashMap::new();
        let fail = |name: String, path: &Path, fault: String| Damaged {
            name,
            kind: "cuckoo",
            file: path.display().to_string(),
            fault: format!("{}: {fault}", path.display()),
        };
        let cf_name = |n: &str| valid_name(n) && !bloom(n);
        for (name, path) in super::named_files(dir, "cf", cf_name)? {
            let chain = load_file(&path);
            match chain {
                Ok((c, export)) => {
                    let mut n = CfNamed::new(name.clone(), c);
                    if export.is_some() {
                        n.whitelist = load_whitelist(&bgf_path(dir, &name));
                    }
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
                }
                continue;
            }
            let chain = match import(layout, &bytes) {
                Ok(c) => c,
                Err(e) => {
                    damaged.push(fail(name, &path, e));
                    continue;
                }
            };
            let mut n = CfNamed::new(name.clone(), chain);
            n.whitelist = load_whitelist(&path);
            // The CLI's file is named too: a crash before the first copy
            // replaces it must not make it look replaced by someone else.
            *n.export.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(vec![sum]);
            // Its changes are saved to NAME.cf from now on; written now, so
            // that the log's records have a file to apply to.
            let saved = save_to(dir, &n, &read(&n.state));
            if let Err(e) = saved {
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
        Ok(Cuckoos {
            dir: dir.to_path_buf(),
            ever: AtomicBool::new(!map.is_empty()),
            limits: limits.clone(),
            map: RwLock::new(map),
            loading: Mutex::new(HashMap::new()),
        })
    }

    /// The cuckoo filter called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<CfNamed>> {
        read(&self.map).get(name).cloned()
    }

    /// Whether `name` is a cuckoo filter, or one being loaded.
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
        let mut v: Vec<Arc<CfNamed>> = read(&self.map).values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Creates a filter and writes its file. The caller has checked the
    /// name and that no Bloom filter has it, under the store's snapshot lock.
    pub fn create(
        &self,
        name: &str,
        spec: &CfSpec,
        limits: &Limits,
    ) -> Result<Arc<CfNamed>, StoreError> {
        if self.has(name) {
            return Err(StoreError::Exists(name.into()));
        }
        let chain = Chain::new(spec, limits)?;
        self.install(name, chain)
    }

    fn install(&self, name: &str, chain: Chain) -> Result<Arc<CfNamed>, StoreError> {
        let named = Arc::new(CfNamed::new(name.into(), chain));
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
        let path = cf_path(&self.dir, name);
        let _ = std::fs::remove_file(&path);
        if lock(&named.export).is_some() {
            // Else the next start would serve the CLI's file again.
            let _ = std::fs::remove_file(bgf_path(&self.dir, name));
            let _ = std::fs::remove_file(Whitelist::path_for(&bgf_path(&self.dir, name)));
        }
        bloomgate_engine::atomic::sync_parent(&path);
        true
    }

    /// Writes the chain's file with the changes it contains now.
    fn save(&self, named: &CfNamed) -> Result<(), StoreError> {
        let c = read(&named.state);
        self.save_chain(named, &c)
    }

    /// Writes `c`, the chain of `named` (its lock held by the caller, so
    /// no change can slip between the copy and clearing the dirty flag).
    fn save_chain(&self, named: &CfNamed, c: &Chain) -> Result<(), StoreError> {
        save_to(&self.dir, named, c)
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

    /// Applies a logged change at startup, exactly once: only a change of
    /// the served incarnation that its file does not contain yet.
    pub fn replay(&self, rec: CuckooRecord) {
        let Some(n) = self.get(&rec.name) else {
            return;
        };
        let mut c = write(&n.state);
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
                // An acknowledged add is placed whatever the growth rules
                // and the size limit say.
                let unlimited = Limits {
                    max_filter_bytes: u64::MAX,
                    ..self.limits.clone()
                };
                if c.add(&rec.item, false, &unlimited, true) != CfAdded::Added {
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
        n.dirty.store(true, Relaxed);
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
    fn settle(&self, named: &CfNamed, c: &Chain, wal: &Wal) -> Result<(), StoreError> {
        let now = wal.failures();
        if named.logged_epoch.load(Relaxed) != now {
            if named.dirty.load(Relaxed) {
                self.save_chain(named, c)?;
            }
            named.logged_epoch.store(now, Relaxed);
        }
        Ok(())
    }

    /// Adds `items` (`nx`: only those absent); one outcome per item, in
    /// order, up to and including the first `Full` if `stop_at_full`.
    /// Returns the receiver that resolves once the changes (and all
    /// earlier ones) are durable.
    pub fn add(
        &self,
        named: &CfNamed,
        items: &[&[u8]],
        nx: bool,
        stop_at_full: bool,
        wal: &Wal,
        out: &mut Vec<CfAdded>,
    ) -> Result<AckRx, StoreError> {
        let limits = &self.limits;
        if let Some(e) = wal.refusing() {
            return Err(e.into());
        }
        let mut log = Vec::new();
        let mut c = write(&named.state);
        if named.deleted.load(Relaxed) {
            return Err(StoreError::NotFound(named.name.clone()));
        }
        self.settle(named, &c, wal)?;
        for item in items {
            if item.len() > limits.max_item_bytes {
                return Err(StoreError::Invalid("item is too long".into()));
            }
        }
        let keys = items
            .iter()
            .map(|i| normalized(&c, i))
            .collect::<Result<Vec<_>, _>>()?;
        for item in &keys {
            let item: &[u8] = item;
            let r = c.add(item, nx, limits, false);
            if r == CfAdded::Added {
                c.seq += 1;
                wal::encode_cuckoo(&mut log, &named.name, c.id, c.seq, CuckooOp::Add, item);
            }
            out.push(r);
            if r == CfAdded::Full && stop_at_full {
                break;
            }
        }
        Ok(self.queue(named, wal, log))
    }

    /// Deletes one copy of `item`. Returns whether one was found, and the
    /// receiver that resolves once the change (and all earlier ones) is
    /// durable.
    pub fn delete_item(
        &self,
        named: &CfNamed,
        item: &[u8],
        wal: &Wal,
    ) -> Result<(bool, AckRx), StoreError> {
        if let Some(e) = wal.refusing() {
            return Err(e.into());
        }
        let mut log = Vec::new();
        let mut c = write(&named.state);
        if named.deleted.load(Relaxed) {
            return Err(StoreError::NotFound(named.name.clone()));
        }
        self.settle(named, &c, wal)?;
        let key = normalized(&c, item)?;
        let item: &[u8] = &key;
        let found = c.delete(item).map_err(|e| ambiguous(&named.name, &e))?;
        if found {
            c.seq += 1;
            wal::encode_cuckoo(&mut log, &named.name, c.id, c.seq, CuckooOp::Delete, item);
        }
        Ok((found, self.queue(named, wal, log)))
    }

    /// Queues `log` (under the chain's write lock, so the log receives the
    /// changes in sequence order). An empty `log` still gets a receiver
    /// that resolves after everything queued before it: an answer that
    /// depends on an earlier change ("exists", "not found") is not given
    /// before that change is durable.
    fn queue(&self, named: &CfNamed, wal: &Wal, log: Vec<u8>) -> AckRx {
        if !log.is_empty() {
            named.dirty.store(true, Relaxed);
        }
        wal.append(log)
    }

    /// `CF.SCANDUMP`: iteration 0 gives the header (magic line, JSON, as
    /// in `NAME.cf` but with id and seq 0);
    /// iteration i ≥ 1 the (i−1)th [`CF_DUMP_CHUNK`] bytes of the
    /// sub-filters' bytes, paired with i+1; past the end `(0, [])`.
    /// Each chunk is cut from the tables' own memory under the chain's
    /// read lock (no copy of the chain is kept between calls).
    pub fn scandump(&self, named: &CfNamed, iter: u64) -> (u64, Vec<u8>) {
        let c = read(&named.state);
        if iter == 0 {
            let (mut h, body) = c.image();
            // The incarnation id and the log position belong to this
            // server's files, not to the filter: a loaded copy is a new
            // incarnation, and two dumps of equal filters are equal.
            h.id = 0;
            h.seq = 0;
            let mut out = DUMP_MAGIC.to_vec();
            out.extend_from_slice(&serde_json::to_vec(&h).expect("a header serializes"));
            let heads = body.into_iter().map(|b| b.head).collect();
            *lock(&named.dump) = Some((c.seq, Arc::new(heads)));
            return (1, out);
        }
        // The tables' headers made with the dump's header, unless the
        // chain changed since (then the chunks do not match the header's
        // checksum, and a load of them fails rather than build a damaged
        // filter).
        let heads = {
            let mut d = lock(&named.dump);
            match d.as_ref() {
                Some((s, h)) if *s == c.seq => h.clone(),
                _ => {
                    let h: DumpHeads = Arc::new(c.image().1.into_iter().map(|b| b.head).collect());
                    *d = Some((c.seq, h.clone()));
                    h
                }
            }
        };
        let pieces = heads
            .iter()
            .zip(&c.subs)
            .flat_map(|(head, sub)| [head.as_slice(), sub.data()]);
        let start = (iter - 1).saturating_mul(CF_DUMP_CHUNK as u64);
        let chunk = cut(pieces, start, CF_DUMP_CHUNK);
        if chunk.is_empty() {
            *lock(&named.dump) = None;
            return (0, Vec::new());
        }
        (iter + 1, chunk)
    }

    /// `CF.LOADCHUNK`: iteration 1 starts a load from a header (the name
    /// must be free); iteration i ≥ 2 is the chunk `CF.SCANDUMP` paired
    /// with i. The last missing chunk builds the filter, checks it against
    /// the header's checksum, writes its file and serves it (a fresh
    /// incarnation id: the loaded filter is a new filter).
    /// Errors: `Invalid` with RedisBloom's texts.
    pub fn loadchunk(
        &self,
        name: &str,
        iter: u64,
        data: &[u8],
        limits: &Limits,
    ) -> Result<(), StoreError> {
        let bad = |s: &str| StoreError::Invalid(s.into());
        if iter == 1 {
            if self.has(name) {
                return Err(StoreError::Exists(name.into()));
            }
            let (h, total) = parse_dump(data, limits.max_filter_bytes)?;
            let chunks = (total as usize).div_ceil(CF_DUMP_CHUNK);
            let load = Loading {
                header: h,
                body: vec![0; total as usize],
                got: vec![false; chunks],
            };
            if chunks == 0 {
                return self.finish(name, load);
            }
            self.ever.store(true, Relaxed);
            lock(&self.loading).insert(name.into(), load);
            return Ok(());
        }
        let mut loading = lock(&self.loading);
        let Some(load) = loading.get_mut(name) else {
            return Err(if self.get(name).is_some() {
                bad("Couldn't load chunk!")
            } else {
                StoreError::NotFound(name.into())
            });
        };
        let idx = (iter - 2) as usize;
        let start = idx.saturating_mul(CF_DUMP_CHUNK);
        let want = load.body.len().saturating_sub(start).min(CF_DUMP_CHUNK);
        if idx >= load.got.len() || data.len() != want {
            return Err(bad("Couldn't load chunk!"));
        }
        load.body[start..start + want].copy_from_slice(data);
        load.got[idx] = true;
        if load.got.iter().all(|&g| g) {
            let load = loading.remove(name).expect("present");
            drop(loading);
            return self.finish(name, load);
        }
        Ok(())
    }

    fn finish(&self, name: &str, load: Loading) -> Result<(), StoreError> {
        let mut chain = Chain::from_parts(&load.header, &load.body)
            .map_err(|e| StoreError::Invalid(format!("Couldn't load chunk! ({e})")))?;
        chain.id = bloomgate_engine::random_seed();
        chain.seq = 0;
        self.install(name, chain).map(|_| ())
    }
}

impl CfNamed {
    fn new(name: String, chain: Chain) -> CfNamed {
        CfNamed {
            name,
            state: RwLock::new(chain),
            dirty: AtomicBool::new(false),
            deleted: AtomicBool::new(false),
            logged_epoch: AtomicU64::new(0),
            dump: Mutex::new(None),
            export: Mutex::new(None),
            whitelist: Whitelist::default(),
        }
    }
}

impl super::LocalStore {
    /// The cuckoo filter called `name`.
    pub fn cf_get(&self, name: &str) -> Option<Arc<CfNamed>> {
        self.cuckoo.get(name)
    }

    /// Whether `name` is a cuckoo filter (or one being loaded).
    pub fn cf_has(&self, name: &str) -> bool {
        self.cuckoo.has(name)
    }

    /// All cuckoo filters, sorted by name.
    pub fn cf_all(&self) -> Vec<Arc<CfNamed>> {
        self.cuckoo.all()
    }

    /// Creates a cuckoo filter and writes its file.
    pub fn cf_create(&self, name: &str, spec: &CfSpec) -> Result<Arc<CfNamed>, StoreError> {
        if !super::valid_name(name) {
            return Err(StoreError::BadName(name.into()));
        }
        let _snap = lock(&self.snapshot_lock);
        self.not_damaged(name)?;
        if self.get(name).is_some() {
            return Err(StoreError::Exists(name.into()));
        }
        let made = self.cuckoo.create(name, spec, &self.limits);
        self.recount_memory();
        made
    }

    /// Adds items to a cuckoo filter (see [`Cuckoos::add`]).
    pub fn cf_add(
        &self,
        named: &CfNamed,
        items: &[&[u8]],
        nx: bool,
        stop_at_full: bool,
        out: &mut Vec<CfAdded>,
    ) -> Result<AckRx, StoreError> {
        let rx = self
            .cuckoo
            .add(named, items, nx, stop_at_full, &self.wal, out)?;
        let added = out.iter().filter(|o| **o == CfAdded::Added).count();
        self.metrics.items_added.fetch_add(added as u64, Relaxed);
        Ok(rx)
    }

    /// Deletes one copy of `item` from a cuckoo filter.
    pub fn cf_delete_item(
        &self,
        named: &CfNamed,
        item: &[u8],
    ) -> Result<(bool, AckRx), StoreError> {
        self.cuckoo.delete_item(named, item, &self.wal)
    }

    /// `CF.SCANDUMP` (see [`Cuckoos::scandump`]).
    pub fn cf_scandump(&self, named: &CfNamed, iter: u64) -> (u64, Vec<u8>) {
        self.cuckoo.scandump(named, iter)
    }

    /// `CF.LOADCHUNK` (see [`Cuckoos::loadchunk`]).
    pub fn cf_loadchunk(&self, name: &str, iter: u64, data: &[u8]) -> Result<(), StoreError> {
        if !super::valid_name(name) {
            return Err(StoreError::BadName(name.into()));
        }
        let _snap = lock(&self.snapshot_lock);
        self.not_damaged(name)?;
        if iter == 1 && self.get(name).is_some() {
            return Err(StoreError::Exists(name.into()));
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

/// The engine's tables, as the chain uses them: a cuckoo table, or a
/// counting Bloom filter ([`CfLayout::Counting`]).
mod sub {
    use bloomgate_engine::math::{plan_counting, plan_cuckoo, CUCKOO_MAX_BUCKET_SIZE};
    use bloomgate_engine::{CountingFilter, CountingParams, CuckooFilter, CuckooParams, Removal};

    use super::CfLayout;

    /// One table of a chain.
    pub(super) enum Sub {
        Cuckoo(CuckooFilter),
        Counting(CountingFilter),
    }

    impl Sub {
        /// A table of `layout` for `items` at rate `p`. A cuckoo table has
        /// buckets of `bucket_size` slots (the engine's largest if more) and
        /// gives up after `max_kicks` evictions; a counting filter uses
        /// neither.
        pub(super) fn new(
            layout: CfLayout,
            items: u64,
            p: f64,
            bucket_size: u16,
            max_kicks: u16,
            seed: u64,
            (key_kind, match_mode): (u8, u8),
        ) -> Result<Sub, String> {
            match layout {
                CfLayout::Cuckoo => {
                    let b = u32::from(bucket_size).clamp(1, CUCKOO_MAX_BUCKET_SIZE);
                    let plan = plan_cuckoo(items, p, b).map_err(|e| e.to_string())?;
                    let mut params = CuckooParams::from_plan(&plan, seed);
                    params.max_kicks = u32::from(max_kicks);
                    params.key_kind = key_kind;
                    params.match_mode = match_mode;
                    CuckooFilter::new(params)
                        .map(Sub::Cuckoo)
                        .map_err(|e| e.to_string())
                }
                CfLayout::Counting => {
                    let plan = plan_counting(items, p).map_err(|e| e.to_string())?;
                    let mut params = CountingParams::from_plan(&plan, seed);
                    params.key_kind = key_kind;
                    params.match_mode = match_mode;
                    CountingFilter::new(params)
                        .map(Sub::Counting)
                        .map_err(|e| e.to_string())
                }
            }
        }

        /// The key kind and match mode codes of its header.
        pub(super) fn key_rules(&self) -> (u8, u8) {
            match self {
                Sub::Cuckoo(f) => (f.params().key_kind, f.params().match_mode),
                Sub::Counting(f) => (f.params().key_kind, f.params().match_mode),
            }
        }

        /// Items stored (copies added less copies removed).
        pub(super) fn items(&self) -> u64 {
            match self {
                Sub::Cuckoo(f) => f.items(),
                Sub::Counting(f) => f.items(),
            }
        }

        /// The false-positive rate it was planned for.
        pub(super) fn target_fp(&self) -> f64 {
            match self {
                Sub::Cuckoo(f) => f.params().target_fp,
                Sub::Counting(f) => f.params().target_fp,
            }
        }

        /// A cuckoo table's bucket size and kicks.
        pub(super) fn cuckoo_settings(&self) -> Option<(u32, u32)> {
            match self {
                Sub::Cuckoo(f) => Some((f.params().bucket_size, f.params().max_kicks)),
                Sub::Counting(_) => None,
            }
        }

        pub(super) fn size_bytes(&self) -> u64 {
            match self {
                Sub::Cuckoo(f) => f.params().bytes(),
                Sub::Counting(f) => f.params().bytes(),
            }
        }

        /// Buckets of a cuckoo table; 128-counter blocks of a counting filter.
        pub(super) fn buckets(&self) -> u64 {
            match self {
                Sub::Cuckoo(f) => f.params().buckets,
                Sub::Counting(f) => f.params().counters / 128,
            }
        }

        /// Fingerprint bits of a cuckoo table; counters per item (k) of a
        /// counting filter.
        pub(super) fn fingerprint_bits(&self) -> u32 {
            match self {
                Sub::Cuckoo(f) => f.params().fingerprint_bits,
                Sub::Counting(f) => f.params().k,
            }
        }

        /// Items the table is sized for (at its rate).
        pub(super) fn planned(&self) -> u64 {
            match self {
                Sub::Cuckoo(f) => f.params().planned_items,
                Sub::Counting(f) => f.params().planned_items,
            }
        }

        /// Slots holding a fingerprint, or counters above zero.
        pub(super) fn used_cells(&self) -> u64 {
            match self {
                Sub::Cuckoo(f) => f.items(),
                Sub::Counting(f) => f.nonzero_counters(),
            }
        }

        /// Slots, or counters.
        pub(super) fn cells(&self) -> u64 {
            match self {
                Sub::Cuckoo(f) => f.params().slots(),
                Sub::Counting(f) => f.params().counters,
            }
        }

        /// Counters stuck at their maximum (counting filters; 0 for cuckoo).
        pub(super) fn saturated(&self) -> u64 {
            match self {
                Sub::Cuckoo(_) => 0,
                Sub::Counting(f) => f.saturated_counters(),
            }
        }

        pub(super) fn predicted_fp(&self) -> f64 {
            match self {
                Sub::Cuckoo(f) => f.predicted_fp(),
                Sub::Counting(f) => f.predicted_fp(),
            }
        }

        pub(super) fn contains(&self, item: &[u8]) -> bool {
            match self {
                Sub::Cuckoo(f) => f.contains(item),
                Sub::Counting(f) => f.contains(item),
            }
        }

        /// Matching fingerprints; for a counting filter the item's smallest
        /// counter (an upper bound of its copies, 15 meaning "15 or more").
        pub(super) fn count(&self, item: &[u8]) -> u64 {
            match self {
                Sub::Cuckoo(f) => u64::from(f.count(item)),
                Sub::Counting(f) => u64::from(f.count(item)),
            }
        }

        /// Adds a copy; an error (a full cuckoo table) leaves the table
        /// unchanged. A counting filter always takes it.
        pub(super) fn add(&self, item: &[u8]) -> Result<(), ()> {
            match self {
                Sub::Cuckoo(f) => f.insert(item).map(|_| ()).map_err(|_| ()),
                Sub::Counting(f) => {
                    f.insert(item);
                    Ok(())
                }
            }
        }

        /// The table a chain appends after this one: a cuckoo table's
        /// buckets each split in `2^shift` ([`CuckooParams::next_in_chain`]);
        /// `None` for a counting filter (it never grows) or past the
        /// largest split.
        pub(super) fn next_in_chain(&self, shift: u32) -> Option<Result<Sub, String>> {
            match self {
                Sub::Cuckoo(f) => f.params().next_in_chain(shift).map(|p| {
                    CuckooFilter::new(p)
                        .map(Sub::Cuckoo)
                        .map_err(|e| e.to_string())
                }),
                Sub::Counting(_) => None,
            }
        }

        /// Whether a delete may take a copy from this table although
        /// `coarser` holds a match too ([`CuckooFilter::refines`]); a
        /// counting filter refines only itself.
        pub(super) fn refines(&self, coarser: &Sub) -> bool {
            match (self, coarser) {
                (Sub::Cuckoo(a), Sub::Cuckoo(b)) => a.refines(b),
                _ => std::ptr::eq(self, coarser),
            }
        }

        pub(super) fn remove(&self, item: &[u8]) -> bool {
            let r = match self {
                Sub::Cuckoo(f) => f.remove(item),
                Sub::Counting(f) => f.remove(item),
            };
            r == Removal::Removed
        }

        /// The table's own bytes (its file image's data).
        pub(super) fn data(&self) -> &[u8] {
            match self {
                Sub::Cuckoo(f) => f.as_bytes(),
                Sub::Counting(f) => f.as_bytes(),
            }
        }

        /// Its file image, the data not copied (consistent while the
        /// chain's lock keeps changes out).
        pub(super) fn image(&self) -> super::SubImage<'_> {
            let head = match self {
                Sub::Cuckoo(f) => f.image_header(),
                Sub::Counting(f) => f.image_header(),
            };
            super::SubImage {
                head,
                data: self.data(),
            }
        }

        /// A table from its file image of `len` bytes read from `r`,
        /// straight into the table's memory.
        pub(super) fn read_from(
            layout: CfLayout,
            r: &mut impl std::io::Read,
            len: u64,
        ) -> Result<Sub, String> {
            match layout {
                CfLayout::Cuckoo => CuckooFilter::read_from(r, len).map(Sub::Cuckoo),
                CfLayout::Counting => CountingFilter::read_from(r, len).map(Sub::Counting),
            }
            .map_err(|e| e.to_string())
        }

        pub(super) fn from_bytes(layout: CfLayout, b: &[u8]) -> Result<Sub, String> {
            match layout {
                CfLayout::Cuckoo => CuckooFilter::from_bytes(b).map(Sub::Cuckoo),
                CfLayout::Counting => CountingFilter::from_bytes(b).map(Sub::Counting),
            }
            .map_err(|e| e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::store::local::LocalStore;
    use bloomgate_engine::random_seed;
    use proptest::prelude::*;

    fn store(dir: &Path) -> LocalStore {
        LocalStore::open(dir, Limits::default(), Arc::new(Metrics::default())).unwrap()
    }

    fn spec(capacity: u64, expansion: u32) -> CfSpec {
        CfSpec {
            layout: CfLayout::Cuckoo,
            capacity,
            bucket_size: 4,
            max_iterations: 100,
            expansion,
            error_rate: Some(1e-6),
            kind: KeyKind::Raw,
            mode: MatchMode::Exact,
        }
    }

    fn items(n: usize, prefix: &str) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("{prefix}{i}").into_bytes())
            .collect()
    }

    #[test]
    fn default_rate_is_redisbloom_s_and_sizes_8_bit_fingerprints() {
        assert!((redisbloom_rate(2) - 4.0 / 255.0).abs() < 1e-12);
        let c = Chain::new(&CfSpec::redis_default(1024), &Limits::default()).unwrap();
        assert_eq!(c.info("x").fingerprint_bits, 8);
        let c = Chain::new(&spec(1000, 1), &Limits::default()).unwrap();
        // ⌈log2(2·4 / 1e-6)⌉ = 23.
        assert_eq!(c.info("x").fingerprint_bits, 23);
    }

    /// A dump's chunks cut from the pieces are the chunks of their
    /// concatenation.
    #[test]
    fn cut_is_a_slice_of_the_concatenation() {
        let pieces: Vec<Vec<u8>> = [0usize, 3, 0, 7, 1, 10]
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| (i * 16 + j) as u8).collect())
            .collect();
        let whole = pieces.concat();
        for start in 0..=whole.len() as u64 + 2 {
            for len in [1, 2, 4, 5, 30] {
                let want: Vec<u8> = whole
                    .iter()
                    .skip(start as usize)
                    .take(len)
                    .copied()
                    .collect();
                assert_eq!(cut(pieces.iter().map(Vec::as_slice), start, len), want);
            }
        }
    }

    /// The file keeps everything (parameters, counters, seq, tables) and
    /// any damaged byte is refused, never read as a filter.
    #[test]
    fn file_round_trip_and_corruption() {
        let mut c = Chain::new(&spec(50, 2), &Limits::default()).unwrap();
        for it in items(300, "a") {
            assert_eq!(c.add(&it, false, &Limits::default(), false), CfAdded::Added);
        }
        assert!(c.subs.len() > 1);
        assert!(c.delete(b"a7").unwrap());
        c.seq = 301;
        let (h, body) = c.serialize();
        let file = encode_file(&h, &body);
        let mut streamed = Vec::new();
        let (h2, images) = c.image();
        assert_eq!(h2, h);
        write_file(&mut streamed, &h, &images).unwrap();
        assert_eq!(streamed, file);
        let (back, _) = decode_file(&file).unwrap();
        assert_eq!(back.serialize(), (h.clone(), body.clone()));
        assert_eq!((back.items, back.deletes, back.seq), (299, 1, 301));
        assert!(!back.contains(b"a7") && back.contains(b"a8"));
        // Read from a file in bounded memory: the same chain, the same
        // faults.
        let dir = tempfile::tempdir().unwrap();
        let on_disk = |bytes: &[u8]| {
            let p = dir.path().join("t.cf");
            std::fs::write(&p, bytes).unwrap();
            load_file(&p)
        };
        let (loaded, _) = on_disk(&file).unwrap();
        assert_eq!(loaded.serialize(), (h.clone(), body.clone()));
        for at in [0, 9, 20, file.len() / 2, file.len() - 1] {
            let mut bad = file.clone();
            bad[at] ^= 0x40;
            assert!(decode_file(&bad).is_err(), "byte {at}");
            assert_eq!(on_disk(&bad).err(), decode_file(&bad).err(), "byte {at}");
        }
        for cut in [0, 5, 8, 15, 19, 30, file.len() - 1] {
            assert_eq!(
                on_disk(&file[..cut]).err(),
                decode_file(&file[..cut]).err(),
                "{cut} bytes"
            );
        }
        assert!(decode_file(&file[..file.len() - 1]).is_err());
        assert!(decode_file(b"").is_err());
    }

    /// A counting chain: one filter that takes every add (no growth past
    /// capacity), keeps its layout through its file, and refuses a file
    /// whose header names the other layout.
    #[test]
    fn counting_chain_never_grows_and_keeps_its_layout() {
        let sp = CfSpec {
            layout: CfLayout::Counting,
            ..spec(50, 2)
        };
        let mut c = Chain::new(&sp, &Limits::default()).unwrap();
        for it in items(500, "c") {
            assert_eq!(c.add(&it, false, &Limits::default(), false), CfAdded::Added);
        }
        assert_eq!((c.subs.len(), c.spec.expansion), (1, 0));
        // (At 10× its capacity the filter answers "present" for much that
        // was never added: only the counts are checked here.)
        let before = c.count(b"c7");
        assert!(c.delete(b"c7").unwrap());
        assert!(c.count(b"c7") < before || before == 15, "{before}");
        let info = c.info("x");
        assert_eq!((info.layout, info.items), ("counting", 499));
        assert!(info.load > 9.0 && info.predicted_fp > 1e-6, "{info:?}");
        let (h, body) = c.serialize();
        let file = encode_file(&h, &body);
        let (back, _) = decode_file(&file).unwrap();
        assert_eq!(back.spec.layout, CfLayout::Counting);
        assert_eq!(back.serialize(), (h.clone(), body.clone()));
        assert!(back.contains(b"c8"));
        // The same bytes read as cuckoo tables are refused, not misread.
        let mut h2 = h.clone();
        h2.layout = CfLayout::Cuckoo;
        assert!(Chain::from_parts(&h2, &body.concat()).is_err());
        // A cuckoo chain's header leaves the field out (files written
        // before counting filters were served read the same).
        let (hc, _) = Chain::new(&spec(50, 1), &Limits::default())
            .unwrap()
            .serialize();
        assert!(!String::from_utf8(serde_json::to_vec(&hc).unwrap())
            .unwrap()
            .contains("layout"));
    }

    /// Replay applies a record once: not one the file has, not twice, not
    /// one of another incarnation.
    #[test]
    fn replay_is_exactly_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let n = s.cf_create("c", &spec(1000, 1)).unwrap();
        let id = read(&n.state).id;
        let rec = |seq, op, item: &[u8]| CuckooRecord {
            name: "c".into(),
            id,
            seq,
            op,
            item: item.to_vec(),
        };
        let cf = &s.cuckoo;
        cf.replay(rec(1, CuckooOp::Add, b"x"));
        cf.replay(rec(2, CuckooOp::Add, b"x"));
        cf.replay(rec(3, CuckooOp::Delete, b"x"));
        assert_eq!(n.count(b"x"), 1);
        // Already applied: nothing happens.
        cf.replay(rec(3, CuckooOp::Delete, b"x"));
        cf.replay(rec(2, CuckooOp::Add, b"x"));
        assert_eq!(n.count(b"x"), 1);
        // Another incarnation's records never apply.
        cf.replay(CuckooRecord {
            id: id ^ 1,
            ..rec(4, CuckooOp::Delete, b"x")
        });
        assert_eq!(n.count(b"x"), 1);
        cf.replay(rec(4, CuckooOp::Delete, b"x"));
        assert_eq!(n.count(b"x"), 0);
        let i = n.info();
        assert_eq!((i.items, i.deletes), (0, 2));
    }

    /// Adds and deletes through the store are logged and come back after
    /// a reopen (no snapshot: from the log alone), counts exact.
    #[test]
    fn logged_changes_come_back_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = store(dir.path());
            let n = s.cf_create("c", &spec(1000, 1)).unwrap();
            let its = items(100, "k");
            let refs: Vec<&[u8]> = its.iter().map(Vec::as_slice).collect();
            let mut out = Vec::new();
            let rx = s.cf_add(&n, &refs, false, false, &mut out).unwrap();
            rx.blocking_recv().unwrap().unwrap();
            let rx = s.cf_add(&n, &refs[..10], false, false, &mut out).unwrap();
            rx.blocking_recv().unwrap().unwrap();
            for it in &refs[..30] {
                let (found, rx) = s.cf_delete_item(&n, it).unwrap();
                assert!(found);
                rx.blocking_recv().unwrap().unwrap();
            }
            let (found, rx) = s.cf_delete_item(&n, b"never").unwrap();
            assert!(!found);
            rx.blocking_recv().unwrap().unwrap();
            s.shutdown();
        }
        let s = store(dir.path());
        let n = s.cf_get("c").unwrap();
        for i in 0..100 {
            let want = match i {
                0..10 => 1,
                10..30 => 0,
                _ => 1,
            };
            assert_eq!(n.count(format!("k{i}").as_bytes()), want, "k{i}");
        }
        assert_eq!((n.info().items, n.info().deletes), (80, 30));
    }

    /// A step on a chain: add a copy of a key, delete one of the stored
    /// copies (the index picks which), or look a key up.
    #[derive(Clone, Debug)]
    enum Step {
        Add(u16),
        DeleteStored(usize),
        Lookup(u16),
    }

    fn steps(keys: u16, len: usize) -> impl Strategy<Value = Vec<Step>> {
        proptest::collection::vec(
            prop_oneof![
                5 => (0..keys).prop_map(Step::Add),
                3 => any::<usize>().prop_map(Step::DeleteStored),
                1 => (0..keys).prop_map(Step::Lookup),
            ],
            1..len,
        )
    }

    fn key(k: u16) -> Vec<u8> {
        format!("item-{k}").into_bytes()
    }

    /// Runs `steps` on `c`, which holds the copies `stored` (one entry per
    /// copy), checking after every step that each key stored more times
    /// than deleted is present. A delete of a stored copy must find one,
    /// unless `may_refuse` (sub-filters hashed apart), where it may
    /// instead be refused, changing nothing. Returns the refusals.
    fn run(
        c: &mut Chain,
        steps: Vec<Step>,
        mut stored: Vec<u16>,
        may_refuse: bool,
    ) -> Result<usize, TestCaseError> {
        let limits = Limits::default();
        let mut model: HashMap<u16, u64> = HashMap::new();
        for &x in &stored {
            *model.entry(x).or_default() += 1;
        }
        let mut refused = 0;
        for step in steps {
            match step {
                Step::Add(x) => match c.add(&key(x), false, &limits, false) {
                    CfAdded::Added => {
                        *model.entry(x).or_default() += 1;
                        stored.push(x);
                    }
                    // 32 sub-filters of a few slots can fill up.
                    CfAdded::Full => {}
                    CfAdded::Exists => prop_assert!(false, "ADD answered exists"),
                },
                Step::DeleteStored(i) if !stored.is_empty() => {
                    let x = stored[i % stored.len()];
                    let before = c.serialize();
                    match c.delete(&key(x)) {
                        Ok(found) => {
                            prop_assert!(found, "a stored copy of {} was not found", x);
                            stored.swap_remove(i % stored.len());
                            *model.get_mut(&x).unwrap() -= 1;
                        }
                        Err(e) => {
                            prop_assert!(may_refuse, "refused in a chain made here: {:?}", e);
                            prop_assert!(e.tables.len() > 1);
                            prop_assert!(
                                c.serialize() == before,
                                "a refused delete changed the chain"
                            );
                            refused += 1;
                        }
                    }
                }
                Step::DeleteStored(_) => {}
                Step::Lookup(x) => {
                    let n = model.get(&x).copied().unwrap_or(0);
                    prop_assert!(c.count(&key(x)) >= n.min(1));
                }
            }
            for (&x, &n) in &model {
                prop_assert!(
                    n == 0 || c.contains(&key(x)),
                    "false negative: {} (stored {})",
                    x,
                    n
                );
            }
        }
        prop_assert_eq!(c.items, stored.len() as u64);
        // The file keeps every stored copy.
        let (h, body) = c.serialize();
        let (back, _) = decode_file(&encode_file(&h, &body)).unwrap();
        for (&x, &n) in &model {
            prop_assert!(n == 0 || back.contains(&key(x)), "lost in the file: {}", x);
        }
        Ok(refused)
    }

    fn layouts() -> impl Strategy<Value = CfLayout> {
        prop::sample::select(vec![CfLayout::Cuckoo, CfLayout::Counting])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(100))]

        /// Chains as the server makes them, of every layout: cuckoo with
        /// buckets of 1, 2 or 4, expansion 1, 2 or 4, a first sub-filter
        /// of 2..=12 items and rates that give 3- to 6-bit fingerprints, so
        /// a few hundred adds grow it to several sub-filters and copies of
        /// different keys share fingerprints and buckets across them; and
        /// counting chains (one filter, never grown). Every delete of a
        /// stored copy finds one and takes no other key's.
        #[test]
        fn deletes_in_grown_chains_take_only_the_item_s_copy(
            steps in steps(200, 500),
            layout in layouts(),
            capacity in 2u64..=12,
            bucket_size in prop::sample::select(vec![1u16, 2, 4]),
            expansion in prop::sample::select(vec![1u32, 2, 4]),
            error_rate in prop::sample::select(vec![0.4, 0.2, 0.1]),
            max_iterations in 1u16..=30,
        ) {
            let sp = CfSpec {
                layout,
                capacity,
                bucket_size,
                max_iterations,
                expansion,
                error_rate: Some(error_rate),
                ..CfSpec::redis_default(capacity)
            };
            let mut c = Chain::new(&sp, &Limits::default()).unwrap();
            run(&mut c, steps, Vec::new(), false)?;
            if layout == CfLayout::Cuckoo {
                // (Counting chains hold one filter whatever is added.)
                prop_assert!(c.subs.len() > 1 || c.items < 40, "{} items in one sub-filter", c.items);
            }
        }

        /// Chains whose sub-filters were hashed apart — a seed each, sized
        /// one by one, as files and dumps from before nested chains hold
        /// them; or several counting filters, as a dump may carry — each
        /// filled first, then changed here (a cuckoo chain grows nested
        /// sub-filters after its old ones): a delete that cannot tell whose
        /// copy it would take is refused, and nothing is lost.
        #[test]
        fn chains_hashed_apart_refuse_rather_than_lose(
            steps in steps(200, 400),
            layout in layouts(),
            subs in 2usize..=4,
            fill in 1u16..=20,
            error_rate in prop::sample::select(vec![0.4, 0.2]),
        ) {
            let sp = CfSpec {
                layout,
                bucket_size: 2,
                expansion: 2,
                error_rate: Some(error_rate),
                ..CfSpec::redis_default(4)
            };
            let mut c = Chain::new(&sp, &Limits::default()).unwrap();
            c.subs.clear();
            let mut stored = Vec::new();
            for t in 0..subs {
                let sub = Sub::new(layout, 4 << t, error_rate, 2, 20, random_seed(), (0, 0)).unwrap();
                for x in 0..fill {
                    let x = x * 5 + t as u16;
                    if sub.add(&key(x)).is_ok() {
                        stored.push(x);
                    }
                }
                c.subs.push(sub);
            }
            c.items = stored.len() as u64;
            run(&mut c, steps, stored, true)?;
        }
    }

    /// `EXPANSION 0`: a full chain refuses, and keeps every item it took.
    #[test]
    fn full_chain_refuses_and_keeps_everything() {
        let mut c = Chain::new(&spec(20, 0), &Limits::default()).unwrap();
        let mut taken = Vec::new();
        for it in items(500, "f") {
            match c.add(&it, false, &Limits::default(), false) {
                CfAdded::Added => taken.push(it),
                CfAdded::Full => {}
                CfAdded::Exists => unreachable!(),
            }
        }
        assert!(taken.len() >= 20 && taken.len() < 500);
        assert_eq!(c.subs.len(), 1);
        for it in &taken {
            assert_eq!(c.count(it), 1);
        }
        // A replayed add is placed anyway (the chain grows).
        assert_eq!(
            c.add(b"late", false, &Limits::default(), true),
            CfAdded::Added
        );
        assert!(c.contains(b"late"));
    }
}
