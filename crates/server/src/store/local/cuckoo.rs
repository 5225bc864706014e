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
//! # Files and durability
//!
//! `NAME.cf` holds the whole chain ([`encode_file`]): a JSON header with the
//! parameters, the incarnation id (random, so records of a deleted
//! namesake never apply), the counters, and `seq`, the sequence number of
//! the last change it contains; then each sub-filter's engine bytes; then an
//! xxh3-64 of all that. It is replaced atomically (write, fsync, rename).
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
use bloomgate_engine::atomic::write_atomic;
use serde::{Deserialize, Serialize};
use sub::Sub as CuckooFilter;
use xxhash_rust::xxh3::xxh3_64;

use crate::wal::{self, AckRx, Wal};
use crate::Limits;

use super::super::StoreError;

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

/// Parameters of a new cuckoo filter (`CF.RESERVE`, or an add that creates).
#[derive(Clone, Debug, PartialEq)]
pub struct CfSpec {
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
}

impl CfSpec {
    /// RedisBloom's defaults for a filter an add creates, with `capacity`.
    pub fn redis_default(capacity: u64) -> CfSpec {
        CfSpec {
            capacity,
            bucket_size: DEFAULT_BUCKET_SIZE,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            expansion: DEFAULT_EXPANSION,
            error_rate: None,
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
    /// Fingerprint width in bits.
    pub fingerprint_bits: u32,
}

/// The header of `NAME.cf` and of a `CF.SCANDUMP` stream.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Header {
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
}

/// The mutable part of a chain (under [`CfNamed::state`]).
struct Chain {
    id: u64,
    /// Sequence number of the last change applied.
    seq: u64,
    spec: CfSpec,
    error_rate: f64,
    subs: Vec<CuckooFilter>,
    items: u64,
    deletes: u64,
}

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
    /// The sub-filters' bytes of a `CF.SCANDUMP` in progress, with the
    /// `seq` they were copied at: each chunk is cut from one copy instead
    /// of a copy of the whole chain per chunk.
    dump: Mutex<Option<(u64, Arc<Vec<u8>>)>>,
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
        let mut c = Chain {
            id: bloomgate_engine::random_seed(),
            seq: 0,
            spec: spec.clone(),
            error_rate,
            subs: Vec::new(),
            items: 0,
            deletes: 0,
        };
        c.grow(limits, true)?;
        Ok(c)
    }

    /// Items the next sub-filter is planned for.
    fn next_capacity(&self) -> Option<u64> {
        let i = self.subs.len() as u32;
        if i == 0 {
            return Some(self.spec.capacity);
        }
        u64::from(self.spec.expansion.max(1))
            .checked_pow(i)?
            .checked_mul(self.spec.capacity)
    }

    fn bytes(&self) -> u64 {
        self.subs.iter().map(|s| s.size_bytes()).sum()
    }

    /// Adds a sub-filter. `force` grows past the expansion rules (replay,
    /// the first sub-filter); the size limit always holds.
    fn grow(&mut self, limits: &Limits, force: bool) -> Result<bool, StoreError> {
        if !force && (self.spec.expansion == 0 || self.subs.len() >= MAX_FILTERS) {
            return Ok(false);
        }
        let Some(cap) = self.next_capacity() else {
            return Ok(false);
        };
        let sub = CuckooFilter::new(
            cap,
            self.error_rate,
            self.spec.bucket_size,
            self.spec.max_iterations,
            bloomgate_engine::random_seed(),
        )
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

    /// Deletes one copy (newest sub-filter first). Returns whether one was found.
    fn delete(&mut self, item: &[u8]) -> bool {
        if self.subs.iter().rev().any(|s| s.remove(item)) {
            self.items = self.items.saturating_sub(1);
            self.deletes += 1;
            true
        } else {
            false
        }
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
        }
    }

    fn header(&self, body: &[Vec<u8>]) -> Header {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for b in body {
            h.update(b);
        }
        Header {
            id: self.id,
            seq: self.seq,
            capacity: self.spec.capacity,
            bucket_size: self.spec.bucket_size,
            max_iterations: self.spec.max_iterations,
            expansion: self.spec.expansion,
            error_rate: self.error_rate,
            items: self.items,
            deletes: self.deletes,
            subs: body.iter().map(|b| b.len() as u64).collect(),
            body_hash: h.digest(),
        }
    }

    /// The header and each sub-filter's bytes (a consistent copy: taken
    /// under the chain's lock by the caller).
    fn serialize(&self) -> (Header, Vec<Vec<u8>>) {
        let body: Vec<Vec<u8>> = self.subs.iter().map(|s| s.to_bytes()).collect();
        (self.header(&body), body)
    }

    /// Rebuilds a chain from its header and its sub-filters' bytes.
    fn from_parts(h: &Header, body: &[u8]) -> Result<Chain, String> {
        if xxh3_64(body) != h.body_hash {
            return Err("checksum mismatch".into());
        }
        if h.subs.is_empty() || h.subs.len() > MAX_FILTERS.max(64) {
            return Err(format!("{} sub-filters", h.subs.len()));
        }
        if !(h.error_rate > 0.0 && h.error_rate < 1.0) || h.bucket_size == 0 {
            return Err("bad parameters".into());
        }
        let mut subs = Vec::new();
        let mut at = 0usize;
        for &len in &h.subs {
            let end = usize::try_from(len)
                .ok()
                .and_then(|l| at.checked_add(l))
                .filter(|&e| e <= body.len())
                .ok_or("sub-filter lengths exceed the data")?;
            subs.push(CuckooFilter::from_bytes(&body[at..end]).map_err(|e| e.to_string())?);
            at = end;
        }
        if at != body.len() {
            return Err("trailing bytes".into());
        }
        Ok(Chain {
            id: h.id,
            seq: h.seq,
            spec: CfSpec {
                capacity: h.capacity,
                bucket_size: h.bucket_size,
                max_iterations: h.max_iterations,
                expansion: h.expansion,
                error_rate: Some(h.error_rate),
            },
            error_rate: h.error_rate,
            subs,
            items: h.items,
            deletes: h.deletes,
        })
    }
}

/// The chain's `seq` (read under its lock).
fn h_seq(state: &RwLock<Chain>) -> u64 {
    read(state).seq
}

/// `NAME.cf`'s bytes: magic, u32 LE header length, JSON header, the
/// sub-filters' bytes, xxh3-64 (LE) of everything before it.
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

fn decode_file(bytes: &[u8]) -> Result<Chain, String> {
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
    Chain::from_parts(&h, &data[len..])
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

    /// Whether `item` is (probably) in the filter, per item.
    pub fn exists(&self, items: &[&[u8]]) -> Vec<bool> {
        let c = read(&self.state);
        items.iter().map(|i| c.contains(i)).collect()
    }

    /// Matching fingerprints of `item` (an upper bound of its copies).
    pub fn count(&self, item: &[u8]) -> u64 {
        read(&self.state).count(item)
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
    /// Loads every `*.cf` of `dir` (a file that fails to load is skipped
    /// with a warning and left in place).
    pub fn open(
        dir: &Path,
        limits: &Limits,
        valid_name: impl Fn(&str) -> bool,
    ) -> Result<Cuckoos, StoreError> {
        let mut map = HashMap::new();
        for (name, path) in super::named_files(dir, "cf", valid_name)? {
            let chain = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| decode_file(&b));
            match chain {
                Ok(c) => {
                    map.insert(name.clone(), Arc::new(CfNamed::new(name, c)));
                }
                Err(e) => tracing::warn!("bloomgate serve: skipping {}: {e}", path.display()),
            }
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
        let (h, body) = c.serialize();
        named.dirty.store(false, Relaxed);
        let path = cf_path(&self.dir, &named.name);
        if let Err(e) = write_atomic(&path, &encode_file(&h, &body)) {
            named.dirty.store(true, Relaxed);
            return Err(StoreError::io(path.display(), e.into()));
        }
        Ok(())
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
            CuckooOp::Delete => {
                if !c.delete(&rec.item) {
                    tracing::warn!(
                        "bloomgate serve: cuckoo filter '{}': a logged delete found nothing to delete",
                        rec.name
                    );
                }
            }
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
        for item in items {
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
        let found = c.delete(item);
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
    /// Each call copies the chain (consistent, under its read lock).
    pub fn scandump(&self, named: &CfNamed, iter: u64) -> (u64, Vec<u8>) {
        if iter == 0 {
            let (mut h, body) = read(&named.state).serialize();
            // The incarnation id and the log position belong to this
            // server's files, not to the filter: a loaded copy is a new
            // incarnation, and two dumps of equal filters are equal.
            h.id = 0;
            h.seq = 0;
            let mut out = DUMP_MAGIC.to_vec();
            out.extend_from_slice(&serde_json::to_vec(&h).expect("a header serializes"));
            *lock(&named.dump) = Some((h_seq(&named.state), Arc::new(body.concat())));
            return (1, out);
        }
        // The copy made with the header, unless the chain changed since
        // (then the chunks do not match the header's checksum, and a load
        // of them fails rather than build a damaged filter).
        let body = {
            let mut d = lock(&named.dump);
            let seq = h_seq(&named.state);
            match d.as_ref() {
                Some((s, b)) if *s == seq => b.clone(),
                _ => {
                    let b = Arc::new(read(&named.state).serialize().1.concat());
                    *d = Some((seq, b.clone()));
                    b
                }
            }
        };
        let start = (iter - 1).saturating_mul(CF_DUMP_CHUNK as u64);
        if start >= body.len() as u64 {
            *lock(&named.dump) = None;
            return (0, Vec::new());
        }
        let start = start as usize;
        let end = (start + CF_DUMP_CHUNK).min(body.len());
        (iter + 1, body[start..end].to_vec())
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
            let h: Header = data
                .strip_prefix(DUMP_MAGIC)
                .and_then(|j| serde_json::from_slice(j).ok())
                .ok_or_else(|| bad("Invalid header"))?;
            let total: u64 = h.subs.iter().sum();
            if h.subs.is_empty() || h.subs.len() > 64 {
                return Err(bad("Invalid header"));
            }
            if total > limits.max_filter_bytes {
                return Err(StoreError::Invalid(format!(
                    "a filter of {total} bytes exceeds the server's limit of {} bytes",
                    limits.max_filter_bytes
                )));
            }
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
        if self.get(name).is_some() {
            return Err(StoreError::Exists(name.into()));
        }
        self.cuckoo.create(name, spec, &self.limits)
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
        if iter == 1 && self.get(name).is_some() {
            return Err(StoreError::Exists(name.into()));
        }
        self.cuckoo.loadchunk(name, iter, data, &self.limits)
    }
}

/// The engine's cuckoo table, as the chain uses it.
mod sub {
    use bloomgate_engine::math::{plan_cuckoo, CUCKOO_MAX_BUCKET_SIZE};
    use bloomgate_engine::{CuckooFilter, CuckooParams, Removal};

    /// One table of a chain.
    pub(super) struct Sub(CuckooFilter);

    impl Sub {
        /// A table for `items` at rate `p`, with buckets of `bucket_size`
        /// slots (the engine's largest if more) and `max_kicks` evictions.
        pub(super) fn new(
            items: u64,
            p: f64,
            bucket_size: u16,
            max_kicks: u16,
            seed: u64,
        ) -> Result<Sub, String> {
            let b = u32::from(bucket_size).clamp(1, CUCKOO_MAX_BUCKET_SIZE);
            let plan = plan_cuckoo(items, p, b).map_err(|e| e.to_string())?;
            let mut params = CuckooParams::from_plan(&plan, seed);
            params.max_kicks = u32::from(max_kicks);
            CuckooFilter::new(params)
                .map(Sub)
                .map_err(|e| e.to_string())
        }

        pub(super) fn size_bytes(&self) -> u64 {
            self.0.params().bytes()
        }

        pub(super) fn buckets(&self) -> u64 {
            self.0.params().buckets
        }

        pub(super) fn fingerprint_bits(&self) -> u32 {
            self.0.params().fingerprint_bits
        }

        pub(super) fn predicted_fp(&self) -> f64 {
            self.0.predicted_fp()
        }

        pub(super) fn contains(&self, item: &[u8]) -> bool {
            self.0.contains(item)
        }

        pub(super) fn count(&self, item: &[u8]) -> u64 {
            u64::from(self.0.count(item))
        }

        /// Adds a copy; an error leaves the table unchanged.
        pub(super) fn add(&self, item: &[u8]) -> Result<(), ()> {
            self.0.insert(item).map(|_| ()).map_err(|_| ())
        }

        pub(super) fn remove(&self, item: &[u8]) -> bool {
            self.0.remove(item) == Removal::Removed
        }

        pub(super) fn to_bytes(&self) -> Vec<u8> {
            self.0.to_bytes()
        }

        pub(super) fn from_bytes(b: &[u8]) -> Result<Sub, String> {
            CuckooFilter::from_bytes(b)
                .map(Sub)
                .map_err(|e| e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::store::local::LocalStore;

    fn store(dir: &Path) -> LocalStore {
        LocalStore::open(dir, Limits::default(), Arc::new(Metrics::default())).unwrap()
    }

    fn spec(capacity: u64, expansion: u32) -> CfSpec {
        CfSpec {
            capacity,
            bucket_size: 4,
            max_iterations: 100,
            expansion,
            error_rate: Some(1e-6),
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

    /// The file keeps everything (parameters, counters, seq, tables) and
    /// any damaged byte is refused, never read as a filter.
    #[test]
    fn file_round_trip_and_corruption() {
        let mut c = Chain::new(&spec(50, 2), &Limits::default()).unwrap();
        for it in items(300, "a") {
            assert_eq!(c.add(&it, false, &Limits::default(), false), CfAdded::Added);
        }
        assert!(c.subs.len() > 1);
        assert!(c.delete(b"a7"));
        c.seq = 301;
        let (h, body) = c.serialize();
        let file = encode_file(&h, &body);
        let back = decode_file(&file).unwrap();
        assert_eq!(back.serialize(), (h.clone(), body.clone()));
        assert_eq!((back.items, back.deletes, back.seq), (299, 1, 301));
        assert!(!back.contains(b"a7") && back.contains(b"a8"));
        for at in [0, 9, 20, file.len() / 2, file.len() - 1] {
            let mut bad = file.clone();
            bad[at] ^= 0x40;
            assert!(decode_file(&bad).is_err(), "byte {at}");
        }
        assert!(decode_file(&file[..file.len() - 1]).is_err());
        assert!(decode_file(b"").is_err());
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
