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
//! that serves their shard and each group is one crate call (the groups
//! run at once, one thread each), so a node that fails fails only the
//! requests with a key on it — with the crate's error, as a request sent
//! alone would have — and the others are answered. (A request with keys on
//! several nodes, a URL query in prefix mode, fails if any of them does.)
//!
//! Adds run in the order queued, one batch at a time: of two adds of one
//! item, the first queued is the one told "new", as when they are sent one
//! after the other. (A connection waits for its queued adds before it
//! sends a lookup, and the reverse: see `resp::conn`.)
//!
//! A request's items are copied into one allocation ([`Packed`]), and a
//! lookup's verdicts carry the key that matched only when the requester
//! asks for it (HTTP does, the Redis protocol does not): allocations per
//! `BF.EXISTS` were a sixth of the server's CPU, most of them freed on
//! another thread than the one that made them.
//!
//! The worker re-validates the handle (`RedisNamed::read`) before each
//! batch, so a request never waits on the network on the thread that
//! queued it: the front ends' event loops queue requests and await the
//! answer.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Instant;

use bloomgate_blacklist::Verdict;
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

/// A request's items in one allocation: each item's length (8 bytes,
/// native order), then its bytes.
struct Packed {
    buf: Vec<u8>,
    len: usize,
}

impl Packed {
    fn of(items: &[&[u8]]) -> Packed {
        let mut buf = Vec::with_capacity(items.iter().map(|i| 8 + i.len()).sum());
        for i in items {
            buf.extend_from_slice(&(i.len() as u64).to_ne_bytes());
            buf.extend_from_slice(i);
        }
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
        let mut rest = &self.buf[..];
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

/// A worker: takes batches until the queue is closed.
fn work(queue: &Queue, owner: &Weak<RedisNamed>, max_item_bytes: usize) {
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
            run_checks(&named, checks);
        }
        if !adds.is_empty() {
            run_adds(&named, adds, max_item_bytes);
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

/// The keys' groups: per group, the indexes of its keys (ascending), and
/// per key its group. One group for a single server; in a cluster, one per
/// master (keys of a slot no node serves now form a group of their own,
/// which the crate sends through the cluster client).
fn by_node(f: &RedisFilter, keys: &[&[u8]]) -> Result<Vec<Vec<usize>>, StoreError> {
    if !f.store().is_cluster() {
        return Ok(vec![(0..keys.len()).collect()]);
    }
    let (_, master_of) = f.store().masters_by_slot().map_err(store_err)?;
    let name = &f.address().name;
    // Master index → group index.
    let mut group_of: Vec<(u32, usize)> = Vec::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let place = f.meta().place(k);
        let master = master_of[layout::shard_slot(name, place.shard) as usize];
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

/// Runs `run` on each group's keys, the groups at once (one thread each
/// beyond the first); returns per key its answer or its group's error.
fn per_node<T: Send>(
    f: &RedisFilter,
    keys: &[&[u8]],
    run: impl Fn(&[&[u8]]) -> bloomgate_redis::Result<Vec<T>> + Sync,
) -> Vec<Result<T, Arc<StoreError>>> {
    let groups = match by_node(f, keys) {
        Ok(g) => g,
        Err(e) => {
            let e = Arc::new(e);
            return keys.iter().map(|_| Err(e.clone())).collect();
        }
    };
    let one = |idx: &Vec<usize>| -> Result<Vec<T>, Arc<StoreError>> {
        let part: Vec<&[u8]> = idx.iter().map(|&i| keys[i]).collect();
        let got = run(&part).map_err(|e| Arc::new(store_err(e)))?;
        if got.len() != part.len() {
            return Err(Arc::new(StoreError::Unavailable(format!(
                "{} answers for {} keys",
                got.len(),
                part.len()
            ))));
        }
        Ok(got)
    };
    let answers: Vec<Result<Vec<T>, Arc<StoreError>>> = match groups.as_slice() {
        [only] => vec![one(only)],
        _ => std::thread::scope(|scope| {
            let others: Vec<_> = groups[1..].iter().map(|g| scope.spawn(|| one(g))).collect();
            let mut all = vec![one(&groups[0])];
            for o in others {
                all.push(o.join().unwrap_or_else(|_| {
                    Err(Arc::new(StoreError::Unavailable(
                        "a Redis batch thread panicked".into(),
                    )))
                }));
            }
            all
        }),
    };
    let mut out: Vec<Option<Result<T, Arc<StoreError>>>> = keys.iter().map(|_| None).collect();
    for (idx, answer) in groups.iter().zip(answers) {
        match answer {
            Ok(values) => {
                for (&i, v) in idx.iter().zip(values) {
                    out[i] = Some(Ok(v));
                }
            }
            Err(e) => {
                for &i in idx {
                    out[i] = Some(Err(e.clone()));
                }
            }
        }
    }
    out.into_iter()
        .map(|a| a.expect("every key is in a group"))
        .collect()
}

/// Answers a batch of lookups by the library's verdict, step by step
/// ([`bloomgate_list::check`]: the queries' keys, their membership per
/// node, the whitelist rule), so that a node that fails fails only the
/// requests with a key on it.
fn run_checks(named: &RedisNamed, jobs: Vec<Job>) {
    let f = match named.read() {
        Ok(f) => f,
        Err(e) => return jobs.into_iter().for_each(|j| j.fail(&e)),
    };
    let mut keys = QueryKeys::default();
    for j in &jobs {
        if let Job::Check { queries, .. } = j {
            for q in queries.iter() {
                keys.push(f.kind(), f.mode(), q);
            }
        }
    }
    let refs = keys.keys();
    let answers = per_node(&f, &refs, |part| f.contains_keys(part));
    let found: Vec<bool> = answers
        .iter()
        .map(|a| *a.as_ref().unwrap_or(&false))
        .collect();
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
                if let Some(Err(e)) = answers[r.clone()].iter().find(|a| a.is_err()) {
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
}

/// Runs a batch of adds of one lane (in the order queued), as
/// `RedisStore::add` did for one request: entries too long or invalid get
/// their outcome, the others are added by the crate's guarded adds.
fn run_adds(named: &RedisNamed, jobs: Vec<Job>, max_item_bytes: usize) {
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
    let mut keys: Vec<Vec<u8>> = Vec::new();
    // Per entry: the index of its key, or its outcome.
    let mut slots: Vec<Result<usize, AddOutcome>> = Vec::new();
    for j in &jobs {
        if let Job::Add { entries, .. } = j {
            for e in entries.iter() {
                if e.len() > max_item_bytes {
                    slots.push(Err(AddOutcome::TooLong));
                    continue;
                }
                match f.entry_key(e) {
                    Ok(k) => {
                        slots.push(Ok(keys.len()));
                        keys.push(k.into_owned());
                    }
                    Err(e) => slots.push(Err(AddOutcome::Invalid(e))),
                }
            }
        }
    }
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let read = taken.elapsed();
    let new = per_node(&f, &refs, |part| f.insert_keys(part));
    drop(f);
    let ran = taken.elapsed();
    let jobs_n = jobs.len();
    let mut slots = slots.into_iter();
    for j in jobs {
        let Job::Add { entries, reply, .. } = j else {
            continue;
        };
        let mut outcomes = Vec::with_capacity(entries.len());
        let mut failed = None;
        for slot in slots.by_ref().take(entries.len()) {
            outcomes.push(match slot {
                Ok(i) => match &new[i] {
                    Ok(true) => AddOutcome::New,
                    Ok(false) => AddOutcome::Exists,
                    Err(e) => {
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
        items = refs.len(),
        queued_us = taken.duration_since(oldest).as_micros() as u64,
        read_us = read.as_micros() as u64,
        redis_us = (ran - read).as_micros() as u64,
        answered_us = (taken.elapsed() - ran).as_micros() as u64,
        "add batch"
    );
}
