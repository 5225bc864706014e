//! One filter's lookups and adds from every connection, sent to Redis as
//! a few large pipelines instead of one round trip each.
//!
//! A request (the queries of one `BF.EXISTS`/`BF.MEXISTS`, an HTTP check,
//! the entries of one `BF.ADD`/`BF.MADD`, an HTTP add) is queued with a
//! oneshot channel for its answer. Worker threads — [`CHECKERS`] for
//! lookups, one for adds — each take everything queued (up to
//! [`MAX_ITEMS`] items), answer it with the `bloomgate_redis` crate's
//! batch calls, and complete every request. There is no fixed delay: a
//! worker sends as soon as it is free, so one request alone goes out at
//! once, and under load the queue fills while the previous batch is in
//! Redis — the batch grows with the load ("send when the previous batch
//! returns"). At most [`CHECKERS`] lookup batches and one add batch of a
//! filter are in flight at a time.
//!
//! # What an add costs, and the wake-ups
//!
//! An add batch is two round trips to Redis whatever its size (`WATCH`,
//! `STRLEN`s and `GETRANGE`s, then `MULTI`, `SETRANGE`s, `EXEC`: the
//! crate's `txn`), and each round trip costs Redis as much CPU as a dozen
//! pipelined commands (its `epoll_wait`, `read` and `write`: 12 µs on the
//! 2-core VM of BENCHMARKS.md, against 0.8–0.9 µs for a pipelined
//! `GETRANGE`).
//! At a few tens of thousands of adds a second, where the machine has no
//! idle core left, the CPU per add is what sets the latency, so the adds
//! are cut into as few batches as the delays allow:
//!
//! * A queued request does not wake a worker; its [`Reply`] does, when it
//!   is first awaited, waited for or dropped. A connection queues every
//!   request of a client's pipeline before it awaits the first answer, so
//!   the pipeline goes as one batch instead of its first request alone and
//!   the rest behind it; and a worker is woken (a system call) only when
//!   it waits, not for every request (waking one per `BF.EXISTS` was a
//!   tenth of the server's CPU under `redis-benchmark -P 16`).
//! * One add worker: four add lanes (the entries of a request split by
//!   shard, a batch in flight per lane) took a pipeline of 16 adds in four
//!   batches of four.
//! * The item count's `HINCRBY` is in the batch's transaction (the
//!   crate's), not a third round trip.
//!
//! The pipelining is the crate's, as the CLI uses it
//! ([`RedisFilter::contains_keys`], [`RedisFilter::insert_keys`]: one
//! `GETRANGE` per key, and a guarded write per block added to, one
//! pipeline per node, several
//! connections per node for large batches). What this module adds is the
//! cut by node: in a cluster, a batch's keys are grouped by the master
//! that serves their shard, and each group is answered or fails as one
//! crate call of its keys alone would, so a node that fails fails only the
//! requests with a key on it — with the crate's error, as a request sent
//! alone would have — and the others are answered. (A request with keys on
//! several nodes, a URL query in prefix mode, fails if any of them does.)
//! A lookup batch's groups go in one crate call on the worker's thread
//! ([`RedisFilter::contains_groups`]: every group's pipeline sent before
//! any reply is read); an add batch's groups run at once, one thread each
//! beyond the first. (Lookups used to take the add's way, two thread
//! spawns per batch on a cluster of three masters: measured with
//! `redis-benchmark -c 50 -P 16` `BF.EXISTS` on a 3 + 3 cluster on the
//! 2-core VM, the server's CPU per lookup went from 3.5 to 2.3 µs, with the
//! allocation cuts below, and its rate up by a quarter.)
//!
//! Adds run in the order queued, one batch at a time: of two adds of one
//! item, the first queued is the one told "new", as when they are sent one
//! after the other. (A connection waits for its queued adds before it
//! sends a lookup, and the reverse: see `resp::conn`.)
//!
//! # Allocations
//!
//! A request's items are copied into one buffer ([`Packed`]), held in the
//! job itself when small (a `BF.EXISTS` or `BF.ADD` of one key of up to
//! 40 bytes) and in one allocation otherwise; and a lookup's verdicts
//! carry the key that matched only when the requester asks for it (HTTP
//! does, the Redis protocol does not): allocations per `BF.EXISTS` were a
//! sixth of the server's CPU, most of them freed on another thread than
//! the one that made them. A worker keeps its batch buffers (the keys,
//! their slices, an add batch's outcomes) from batch to batch, as the
//! crate keeps a thread's lookup buffers; on one server a batch's answers
//! are the crate's vector as it is, not regrouped by node. (`perf` of the
//! server under `redis-benchmark -c 50 -P 16` `BF.EXISTS` had 13% of its
//! CPU in `malloc`/`free`, much of it `malloc_consolidate`, which each
//! large allocation runs when small chunks were freed since the last; with
//! these cuts, 10%, and the server's CPU per `BF.EXISTS` on one Redis went
//! from 1.68 to 1.48 µs, medians of three alternating rounds.)
//!
//! The worker re-validates the handle (`RedisNamed::read`) before each
//! batch, so a request never waits on the network on the thread that
//! queued it: the front ends' event loops queue requests and await the
//! answer.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Instant;

use bloomgate_blacklist::Verdict;
use bloomgate_engine::place::Locator;
use bloomgate_list::check::{verdict, QueryKeys};
use bloomgate_redis::layout;
use bloomgate_redis::RedisFilter;
use bloomgate_url::KeyError;
use tokio::sync::oneshot;

use super::RedisNamed;
use crate::store::redis::store_err;
use crate::store::{AddOutcome, StoreError};

/// The answer to a queued lookup: one verdict per query, or why none can
/// be trusted.
pub type Checked = Result<Vec<Result<Verdict, KeyError>>, StoreError>;

/// The answer to a queued add: one outcome per entry, or the error.
pub type Added = Result<Vec<AddOutcome>, StoreError>;

/// Lookup workers per filter: two batches in flight, so that one is
/// collected (and its replies decoded) while Redis runs the other.
pub(super) const CHECKERS: usize = 2;

/// Items (queries or entries) per batch; a single larger request is
/// taken alone. The crate cuts a batch into pipelines of 4,096 commands
/// and spreads one of 2,048 keys or more over several connections.
pub(super) const MAX_ITEMS: usize = 4096;

enum Job {
    Check {
        queries: Packed,
        /// Whether the verdicts carry the key that matched.
        matched: bool,
        reply: oneshot::Sender<Checked>,
    },
    Add {
        entries: Packed,
        reply: oneshot::Sender<Added>,
        /// When it was queued (for the batch's `trace` event).
        queued: Instant,
    },
}

/// A request's items in one buffer: each item's length (8 bytes, native
/// order), then its bytes. A request of at most [`INLINE`] bytes so
/// packed (a `BF.EXISTS` or `BF.ADD` of one key of up to 40 bytes) is
/// held in the job itself, with no allocation: the event loop allocated
/// one per request and a batch worker freed it on another thread.
struct Packed {
    buf: PackedBuf,
    len: usize,
}

/// Bytes of a request's packed items kept in the job itself.
const INLINE: usize = 48;

enum PackedBuf {
    Inline { bytes: [u8; INLINE], used: u8 },
    Heap(Vec<u8>),
}

impl Packed {
    fn of(items: &[&[u8]]) -> Packed {
        let size: usize = items.iter().map(|i| 8 + i.len()).sum();
        let buf = if size <= INLINE {
            let mut bytes = [0u8; INLINE];
            let mut at = 0;
            for i in items {
                bytes[at..at + 8].copy_from_slice(&(i.len() as u64).to_ne_bytes());
                bytes[at + 8..at + 8 + i.len()].copy_from_slice(i);
                at += 8 + i.len();
            }
            PackedBuf::Inline {
                bytes,
                used: at as u8,
            }
        } else {
            let mut buf = Vec::with_capacity(size);
            for i in items {
                buf.extend_from_slice(&(i.len() as u64).to_ne_bytes());
                buf.extend_from_slice(i);
            }
            PackedBuf::Heap(buf)
        };
        Packed {
            buf,
            len: items.len(),
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    /// The items, in order.
    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let mut rest = match &self.buf {
            PackedBuf::Inline { bytes, used } => &bytes[..*used as usize],
            PackedBuf::Heap(buf) => &buf[..],
        };
        (0..self.len).map(move |_| {
            let (n, tail) = rest.split_at(8);
            let n = u64::from_ne_bytes(n.try_into().expect("8 bytes")) as usize;
            let (item, tail) = tail.split_at(n);
            rest = tail;
            item
        })
    }
}

impl Job {
    fn items(&self) -> usize {
        match self {
            Job::Check { queries, .. } => queries.len(),
            Job::Add { entries, .. } => entries.len(),
        }
    }

    fn fail(self, e: &StoreError) {
        // A requester that went away (its connection closed) is not told.
        match self {
            Job::Check { reply, .. } => drop(reply.send(Err(dup(e)))),
            Job::Add { reply, .. } => drop(reply.send(Err(dup(e)))),
        }
    }
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Workers started (they run until the queue is closed).
    workers: usize,
    /// Workers waiting for a job.
    waiting: usize,
    closed: bool,
}

/// Queued requests of one kind, and the workers' wake-up.
#[derive(Default)]
struct Queue {
    state: Mutex<State>,
    ready: Condvar,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Everything queued, up to [`MAX_ITEMS`] items (at least one
    /// request); waits while there is nothing. `None` once closed and empty.
    fn take(&self) -> Option<Vec<Job>> {
        let mut s = self.lock();
        while s.jobs.is_empty() {
            if s.closed {
                return None;
            }
            s.waiting += 1;
            s = self.ready.wait(s).unwrap_or_else(|p| p.into_inner());
            s.waiting -= 1;
        }
        let mut items = 0;
        let mut out = Vec::new();
        while let Some(j) = s.jobs.front() {
            if !out.is_empty() && items + j.items() > MAX_ITEMS {
                break;
            }
            items += j.items();
            out.push(s.jobs.pop_front().expect("a front job"));
        }
        Some(out)
    }

    fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// Wakes a waiting worker if there is work (a system call, so only
    /// then).
    fn wake(&self) {
        let s = self.lock();
        if s.waiting > 0 && !s.jobs.is_empty() {
            drop(s);
            self.ready.notify_one();
        }
    }
}

/// The answer to a queued request, on its way (a future, or
/// [`Reply::blocking_recv`]). Queueing a request wakes no worker: this
/// does, when it is first polled, waited for or dropped (see the module
/// documentation), so that a connection's pipelined requests, all queued
/// before it awaits the first, go in one batch.
pub struct Reply<T> {
    rx: Option<oneshot::Receiver<T>>,
    /// The queue to wake, until it is.
    wake: Option<Arc<Queue>>,
}

/// The answer to a queued add.
pub type AddReply = Reply<Added>;

/// The answer to a queued lookup.
pub type CheckReply = Reply<Checked>;

impl<T> Reply<T> {
    /// An answer that is already there (no queue to wake).
    pub(crate) fn ready(rx: oneshot::Receiver<T>) -> Reply<T> {
        Reply {
            rx: Some(rx),
            wake: None,
        }
    }

    fn wake(&mut self) {
        if let Some(queue) = self.wake.take() {
            queue.wake();
        }
    }

    /// Waits for the answer, blocking the thread.
    pub fn blocking_recv(mut self) -> Result<T, oneshot::error::RecvError> {
        self.wake();
        self.rx.take().expect("not received yet").blocking_recv()
    }
}

impl<T> std::future::Future for Reply<T> {
    type Output = Result<T, oneshot::error::RecvError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        self.wake();
        let rx = self.rx.as_mut().expect("not received yet");
        std::pin::Pin::new(rx).poll(cx)
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        // A request nobody awaits still goes (the adds were asked for).
        self.wake();
    }
}

/// The queues of one filter and their workers (see the module doc).
pub(super) struct Coalescer {
    checks: Arc<Queue>,
    adds: Arc<Queue>,
    /// The filter, for the workers (a weak reference: the workers stop
    /// when the filter is dropped).
    owner: Weak<RedisNamed>,
    /// Entries longer than this are [`AddOutcome::TooLong`].
    max_item_bytes: usize,
}

impl Drop for Coalescer {
    fn drop(&mut self) {
        self.checks.close();
        self.adds.close();
    }
}

impl Coalescer {
    /// The queues of a filter (its workers start with its first request).
    pub(super) fn new(owner: Weak<RedisNamed>, max_item_bytes: usize) -> Coalescer {
        Coalescer {
            checks: Arc::default(),
            adds: Arc::default(),
            owner,
            max_item_bytes,
        }
    }

    /// Queues a lookup of `queries`; the verdicts carry the key that
    /// matched when `matched` (the worker is woken by the [`Reply`]).
    pub(super) fn check(&self, queries: &[&[u8]], matched: bool) -> CheckReply {
        let (tx, rx) = oneshot::channel();
        let job = Job::Check {
            queries: Packed::of(queries),
            matched,
            reply: tx,
        };
        self.queue(&self.checks, CHECKERS, job);
        Reply {
            rx: Some(rx),
            wake: Some(self.checks.clone()),
        }
    }

    /// Queues an add of `entries` (the worker is woken by the [`Reply`]).
    pub(super) fn add(&self, entries: &[&[u8]]) -> AddReply {
        let (tx, rx) = oneshot::channel();
        if entries.is_empty() {
            let _ = tx.send(Ok(Vec::new()));
            return Reply::ready(rx);
        }
        let job = Job::Add {
            entries: Packed::of(entries),
            reply: tx,
            queued: Instant::now(),
        };
        self.queue(&self.adds, 1, job);
        Reply {
            rx: Some(rx),
            wake: Some(self.adds.clone()),
        }
    }

    /// Queues `job`, starting the queue's workers on first use.
    fn queue(&self, queue: &Arc<Queue>, workers: usize, job: Job) {
        let mut s = queue.lock();
        while s.workers < workers {
            let (q, owner, max) = (queue.clone(), self.owner.clone(), self.max_item_bytes);
            let started = std::thread::Builder::new()
                .name("bloomgate-redis-batch".into())
                .spawn(move || work(&q, &owner, max));
            match started {
                Ok(_) => s.workers += 1,
                Err(e) if s.workers == 0 => {
                    drop(s);
                    let e = StoreError::Unavailable(format!("cannot start a Redis worker: {e}"));
                    return job.fail(&e);
                }
                // Fewer workers than planned; try again next time.
                Err(_) => break,
            }
        }
        s.jobs.push_back(job);
    }
}

/// A worker's buffers, kept from batch to batch (see the module
/// documentation).
#[derive(Default)]
struct Scratch {
    /// A lookup batch's keys.
    keys: QueryKeys,
    /// An add batch's keys, one after the other, and where each ends.
    arena: Vec<u8>,
    ends: Vec<usize>,
    /// Per entry of an add batch: the index of its key, or its outcome.
    slots: Vec<Result<usize, AddOutcome>>,
    /// The keys as slices (empty between batches).
    refs: Vec<&'static [u8]>,
}

/// An empty vector with the buffer of `v`, for slices of another lifetime.
fn recycle<'b>(mut v: Vec<&[u8]>) -> Vec<&'b [u8]> {
    v.clear();
    // Collecting from a vector's own iterator into elements of the same
    // size reuses its buffer (the standard library's in-place collect);
    // it yields no element, so none outlives its lifetime.
    v.into_iter()
        .map(|_| -> &'b [u8] { unreachable!() })
        .collect()
}

/// A worker: takes batches until the queue is closed.
fn work(queue: &Queue, owner: &Weak<RedisNamed>, max_item_bytes: usize) {
    let mut scratch = Scratch::default();
    while let Some(jobs) = queue.take() {
        let Some(named) = owner.upgrade() else {
            let e = StoreError::NotFound("(a filter no longer served)".into());
            jobs.into_iter().for_each(|j| j.fail(&e));
            continue;
        };
        let (checks, adds): (Vec<Job>, Vec<Job>) = jobs
            .into_iter()
            .partition(|j| matches!(j, Job::Check { .. }));
        if !checks.is_empty() {
            run_checks(&named, checks, &mut scratch);
        }
        if !adds.is_empty() {
            run_adds(&named, adds, max_item_bytes, &mut scratch);
        }
    }
}

/// A copy of a store error as the Redis store makes them (each requester
/// of a failed batch gets its own).
fn dup(e: &StoreError) -> StoreError {
    match e {
        StoreError::NotFound(s) => StoreError::NotFound(s.clone()),
        StoreError::Exists(s) => StoreError::Exists(s.clone()),
        StoreError::BadName(s) => StoreError::BadName(s.clone()),
        StoreError::Invalid(s) => StoreError::Invalid(s.clone()),
        StoreError::Unsupported(s) => StoreError::Unsupported(s),
        other => StoreError::Unavailable(other.to_string()),
    }
}

/// The keys' groups in a cluster: per group, the indexes of its keys
/// (ascending); one per master (keys of a slot no node serves now form a
/// group of their own, which the crate sends through the cluster client).
fn by_node(f: &RedisFilter, keys: &[&[u8]]) -> Result<Vec<Vec<usize>>, StoreError> {
    let masters = f.store().slot_masters().map_err(store_err)?;
    let name = &f.address().name;
    let locator = Locator::new(&f.meta().params);
    // Master index → group index.
    let mut group_of: Vec<(u32, usize)> = Vec::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let place = f.meta().place_with(&locator, k);
        let master = masters.of(layout::shard_slot(name, place.shard));
        let g = match group_of.iter().find(|(m, _)| *m == master) {
            Some(&(_, g)) => g,
            None => {
                group_of.push((master, groups.len()));
                groups.push(Vec::new());
                groups.len() - 1
            }
        };
        groups[g].push(i);
    }
    Ok(groups)
}

/// Per key of a batch, the answer of its node, or its node's error.
struct Answers<T> {
    /// Per key, its answer (`T::default()` for a key whose node failed).
    values: Vec<T>,
    /// Per key, the index in `errors` of its node's error, or `u32::MAX`;
    /// empty when no node failed.
    failed: Vec<u32>,
    errors: Vec<Arc<StoreError>>,
}

impl<T: Default + Clone> Answers<T> {
    /// Every key failed with `e`.
    fn all_failed(keys: usize, e: StoreError) -> Answers<T> {
        Answers {
            values: vec![T::default(); keys],
            failed: vec![0; keys],
            errors: vec![Arc::new(e)],
        }
    }

    /// The error of key `i`'s node, if it failed.
    fn error(&self, i: usize) -> Option<&Arc<StoreError>> {
        match self.failed.get(i) {
            Some(&e) if e != u32::MAX => Some(&self.errors[e as usize]),
            _ => None,
        }
    }
}

/// `got`, the answers to `keys` keys, if there is one per key.
fn one_per_key<T>(got: Vec<T>, keys: usize) -> Result<Vec<T>, StoreError> {
    if got.len() != keys {
        return Err(StoreError::Unavailable(format!(
            "{} answers for {keys} keys",
            got.len()
        )));
    }
    Ok(got)
}

/// Per key of `keys`, its answer or its node's error: `one(keys)` for a
/// single server; in a cluster, `each(groups)` with the keys grouped by
/// master ([`by_node`]), one answer or error per group.
fn per_node<T: Default + Clone>(
    f: &RedisFilter,
    keys: &[&[u8]],
    one: impl FnOnce(&[&[u8]]) -> bloomgate_redis::Result<Vec<T>>,
    each: impl FnOnce(&[Vec<usize>]) -> Vec<Result<Vec<T>, StoreError>>,
) -> Answers<T> {
    if !f.store().is_cluster() {
        return match one(keys)
            .map_err(store_err)
            .and_then(|got| one_per_key(got, keys.len()))
        {
            Ok(values) => Answers {
                values,
                failed: Vec::new(),
                errors: Vec::new(),
            },
            Err(e) => Answers::all_failed(keys.len(), e),
        };
    }
    let groups = match by_node(f, keys) {
        Ok(g) => g,
        Err(e) => return Answers::all_failed(keys.len(), e),
    };
    let answers = each(&groups);
    let mut out = Answers {
        values: vec![T::default(); keys.len()],
        failed: Vec::new(),
        errors: Vec::new(),
    };
    for (idx, answer) in groups.iter().zip(answers) {
        match answer.and_then(|got| one_per_key(got, idx.len())) {
            Ok(values) => {
                for (&i, v) in idx.iter().zip(values) {
                    out.values[i] = v;
                }
            }
            Err(e) => {
                if out.failed.is_empty() {
                    out.failed = vec![u32::MAX; keys.len()];
                }
                let at = out.errors.len() as u32;
                out.errors.push(Arc::new(e));
                for &i in idx {
                    out.failed[i] = at;
                }
            }
        }
    }
    out
}

/// Runs `run` on each group's keys, the groups at once (one thread each
/// beyond the first): the adds of a cluster's masters.
fn on_threads<T: Send>(
    keys: &[&[u8]],
    groups: &[Vec<usize>],
    run: impl Fn(&[&[u8]]) -> bloomgate_redis::Result<Vec<T>> + Sync,
) -> Vec<Result<Vec<T>, StoreError>> {
    let one = |idx: &Vec<usize>| {
        let part: Vec<&[u8]> = idx.iter().map(|&i| keys[i]).collect();
        run(&part).map_err(store_err)
    };
    match groups {
        [] => Vec::new(),
        [only] => vec![one(only)],
        [first, rest @ ..] => std::thread::scope(|scope| {
            let others: Vec<_> = rest.iter().map(|g| scope.spawn(|| one(g))).collect();
            let mut all = vec![one(first)];
            for o in others {
                all.push(o.join().unwrap_or_else(|_| {
                    Err(StoreError::Unavailable(
                        "a Redis batch thread panicked".into(),
                    ))
                }));
            }
            all
        }),
    }
}

/// Answers a batch of lookups by the library's verdict, step by step
/// ([`bloomgate_list::check`]: the queries' keys, their membership per
/// node, the whitelist rule), so that a node that fails fails only the
/// requests with a key on it.
fn run_checks(named: &RedisNamed, jobs: Vec<Job>, scratch: &mut Scratch) {
    let f = match named.read() {
        Ok(f) => f,
        Err(e) => return jobs.into_iter().for_each(|j| j.fail(&e)),
    };
    let keys = &mut scratch.keys;
    keys.clear();
    for j in &jobs {
        if let Job::Check { queries, .. } = j {
            for q in queries.iter() {
                keys.push(f.kind(), f.mode(), q);
            }
        }
    }
    let mut refs = recycle(std::mem::take(&mut scratch.refs));
    keys.keys_into(&mut refs);
    // In a cluster, the masters' groups are looked up on this thread, all
    // their pipelines sent before any reply is read (a thread per master
    // and batch cost more CPU than the lookups of a small batch).
    let answers = per_node(
        &f,
        &refs,
        |keys| f.contains_keys(keys),
        |groups| {
            f.contains_groups(&refs, groups)
                .into_iter()
                .map(|r| r.map_err(store_err))
                .collect()
        },
    );
    let found = &answers.values;
    let mut spans = keys.spans().iter();
    for j in jobs {
        let Job::Check {
            queries,
            matched,
            reply,
        } = j
        else {
            continue;
        };
        let mut verdicts = Vec::with_capacity(queries.len());
        let mut failed = None;
        for span in spans.by_ref().take(queries.len()) {
            if let Ok(r) = span {
                if let Some(e) = r.clone().find_map(|i| answers.error(i)) {
                    failed.get_or_insert_with(|| e.clone());
                }
            }
            verdicts.push(span.clone().map(|r| {
                let v = verdict(f.whitelist(), &refs[r.clone()], &found[r]);
                if matched {
                    v.to_verdict()
                } else {
                    Verdict {
                        hit: v.hit,
                        whitelisted: v.whitelisted,
                        matched: None,
                    }
                }
            }));
        }
        // No partial answer: a key that could not be read voids the request.
        let _ = reply.send(match failed {
            Some(e) => Err(dup(&e)),
            None => Ok(verdicts),
        });
    }
    scratch.refs = recycle(refs);
}

/// Runs a batch of adds of one lane (in the order queued), as
/// `RedisStore::add` did for one request: entries too long or invalid get
/// their outcome, the others are added by the crate's guarded adds.
fn run_adds(named: &RedisNamed, jobs: Vec<Job>, max_item_bytes: usize, scratch: &mut Scratch) {
    let taken = Instant::now();
    let oldest = jobs
        .iter()
        .filter_map(|j| match j {
            Job::Add { queued, .. } => Some(*queued),
            Job::Check { .. } => None,
        })
        .min()
        .unwrap_or(taken);
    let f = match named.read() {
        Ok(f) => f,
        Err(e) => return jobs.into_iter().for_each(|j| j.fail(&e)),
    };
    let Scratch {
        arena,
        ends,
        slots,
        refs,
        ..
    } = scratch;
    arena.clear();
    ends.clear();
    // Per entry: the index of its key, or its outcome.
    slots.clear();
    for j in &jobs {
        if let Job::Add { entries, .. } = j {
            for e in entries.iter() {
                if e.len() > max_item_bytes {
                    slots.push(Err(AddOutcome::TooLong));
                    continue;
                }
                match f.entry_key(e) {
                    Ok(k) => {
                        slots.push(Ok(ends.len()));
                        arena.extend_from_slice(&k);
                        ends.push(arena.len());
                    }
                    Err(e) => slots.push(Err(AddOutcome::Invalid(e))),
                }
            }
        }
    }
    let mut keys = recycle(std::mem::take(refs));
    let mut start = 0;
    keys.extend(ends.iter().map(|&end| {
        let key = &arena[start..end];
        start = end;
        key
    }));
    let read = taken.elapsed();
    let new = per_node(
        &f,
        &keys,
        |keys| f.insert_keys(keys),
        |groups| on_threads(&keys, groups, |part| f.insert_keys(part)),
    );
    let items = keys.len();
    *refs = recycle(keys);
    drop(f);
    let ran = taken.elapsed();
    let jobs_n = jobs.len();
    let mut slots = slots.drain(..);
    for j in jobs {
        let Job::Add { entries, reply, .. } = j else {
            continue;
        };
        let mut outcomes = Vec::with_capacity(entries.len());
        let mut failed = None;
        for slot in slots.by_ref().take(entries.len()) {
            outcomes.push(match slot {
                Ok(i) => match new.error(i) {
                    None if new.values[i] => AddOutcome::New,
                    None => AddOutcome::Exists,
                    Some(e) => {
                        failed.get_or_insert_with(|| e.clone());
                        AddOutcome::Exists
                    }
                },
                Err(o) => o,
            });
        }
        // A requester that went away (its connection closed) is not told.
        let _ = reply.send(match failed {
            Some(e) => Err(dup(&e)),
            None => Ok(outcomes),
        });
    }
    tracing::trace!(
        at_us = bloomgate_redis::epoch_us(),
        jobs = jobs_n,
        items,
        queued_us = taken.duration_since(oldest).as_micros() as u64,
        read_us = read.as_micros() as u64,
        redis_us = (ran - read).as_micros() as u64,
        answered_us = (taken.elapsed() - ran).as_micros() as u64,
        "add batch"
    );
}
