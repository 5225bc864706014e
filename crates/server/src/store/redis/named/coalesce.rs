//! One filter's lookups and adds from every connection, sent to Redis as
//! a few large pipelines instead of one round trip each.
//!
//! A request (the queries of one `BF.EXISTS`/`BF.MEXISTS`, an HTTP check,
//! the entries of one `BF.ADD`/`BF.MADD`, an HTTP add) is queued with a
//! oneshot channel for its answer. Worker threads — [`CHECKERS`] for
//! lookups, one per add lane ([`ADDERS`]) — each take everything queued
//! (up to [`MAX_ITEMS`] items), answer it with the `bloomgate_redis`
//! crate's batch calls, and complete every request. There is no fixed
//! delay: a worker sends as soon as it is free, so one request alone goes
//! out at once, and under load the queue fills while the previous batch is
//! in Redis — the batch grows with the load ("send when the previous batch
//! returns"). At most [`CHECKERS`] lookup batches and [`ADDERS`] add
//! batches of a filter are in flight at a time.
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
//! * A queued add does not wake its lane's worker; its [`AddReply`] does,
//!   when it is first awaited, waited for or dropped. A connection queues
//!   every add of a client's pipeline before it awaits the first answer,
//!   so the pipeline goes as one batch instead of its first add alone and
//!   the rest behind it; and a worker is woken (a system call) only when
//!   it waits, not for every request.
//! * One add lane ([`ADDERS`]): four lanes took a pipeline of 16 adds in
//!   four batches of four.
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
//! Adds go through [`ADDERS`] lanes, each with its own queue and worker:
//! an entry's lane is its shard's (shard number modulo [`ADDERS`], from
//! the filter's metadata as the add workers last read it, [`Placer`]), and a
//! request with entries of several lanes is answered when every part is.
//! So several add batches are in flight — a batch held up in Redis (a
//! stalled round trip) delays only its lane's adds, and the others drain
//! meanwhile — while every add of one item runs in its lane in the order
//! queued: of two adds of one item, the first queued is the one told
//! "new", as when they are sent one after the other. Lanes never share a
//! shard, so their transactions (the crate's `WATCH` … `EXEC`) never abort
//! each other. (A connection waits for its queued adds before it sends a
//! lookup, and the reverse: see `resp::conn`.)
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
use bloomgate_redis::layout::{self, Meta};
use bloomgate_redis::RedisFilter;
use bloomgate_url::{entry_key, KeyError, KeyKind, MatchMode};
use tokio::sync::oneshot;

use super::RedisNamed;
use crate::store::redis::{store_err, worker_gone};
use crate::store::{AddOutcome, StoreError};

/// The answer to a queued lookup: one verdict per query, or why none can
/// be trusted.
pub type Checked = Result<Vec<Result<Verdict, KeyError>>, StoreError>;

/// The answer to a queued add: one outcome per entry, or the error.
pub type Added = Result<Vec<AddOutcome>, StoreError>;

/// Lookup workers per filter: two batches in flight, so that one is
/// collected (and its replies decoded) while Redis runs the other.
pub(super) const CHECKERS: usize = 2;

/// Add lanes per filter: add batches in flight at once, each of the
/// entries of its shards (see the module documentation). One: batches
/// as large as the load makes them, at the least CPU per add.
pub(super) const ADDERS: usize = 1;

/// Items (queries or entries) per batch; a single larger request is
/// taken alone. The crate cuts a batch into pipelines of 4,096 commands
/// and spreads one of 2,048 keys or more over several connections.
pub(super) const MAX_ITEMS: usize = 4096;

enum Job {
    Check {
        queries: Vec<Vec<u8>>,
        reply: oneshot::Sender<Checked>,
    },
    Add {
        entries: Vec<Vec<u8>>,
        part: Part,
        /// When it was queued (for the batch's `trace` event).
        queued: Instant,
    },
}

/// The entries of an add request that go through one lane: their places
/// in the request, and the request's answer being put together.
struct Part {
    join: Arc<Mutex<Join>>,
    at: Vec<usize>,
}

/// An add request's answer, filled in by the lanes of its parts.
struct Join {
    outcomes: Vec<Option<AddOutcome>>,
    /// Parts not answered yet.
    left: usize,
    error: Option<StoreError>,
    reply: Option<oneshot::Sender<Added>>,
}

impl Part {
    /// Answers this part: its outcomes in order, or its error (the
    /// request's answer is the first error of its parts). The last part
    /// sends the request's answer.
    fn done(self, answer: Result<Vec<AddOutcome>, StoreError>) {
        let mut j = self.join.lock().unwrap_or_else(|p| p.into_inner());
        match answer {
            Ok(outcomes) => {
                for (&i, o) in self.at.iter().zip(outcomes) {
                    j.outcomes[i] = Some(o);
                }
            }
            Err(e) => {
                j.error.get_or_insert(e);
            }
        }
        j.left -= 1;
        if j.left > 0 {
            return;
        }
        let answer: Added = match j.error.take() {
            Some(e) => Err(e),
            None => std::mem::take(&mut j.outcomes)
                .into_iter()
                .map(|o| o.ok_or_else(worker_gone))
                .collect(),
        };
        if let Some(reply) = j.reply.take() {
            // A requester that went away (its connection closed) is not told.
            let _ = reply.send(answer);
        }
    }
}

/// What the queueing side needs to pick an entry's add lane: the filter's
/// key rules and shard geometry, as the add workers last read them.
struct Placer {
    kind: KeyKind,
    mode: MatchMode,
    meta: Meta,
}

impl Placer {
    fn of(f: &RedisFilter) -> Placer {
        Placer {
            kind: f.kind(),
            mode: f.mode(),
            meta: f.meta().clone(),
        }
    }

    /// The add lane of `entry`: its shard's. An entry that is not a valid
    /// key (its outcome says so) goes to lane 0.
    fn lane(&self, entry: &[u8]) -> usize {
        match entry_key(self.kind, self.mode, entry) {
            Ok(k) => (self.meta.place(&k).shard % ADDERS as u64) as usize,
            Err(_) => 0,
        }
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
            Job::Add { part, .. } => part.done(Err(dup(e))),
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

/// The answer to a queued add, on its way (a future, or
/// [`AddReply::blocking_recv`]). Queueing an add wakes no worker: this
/// does, when it is first polled, waited for or dropped (see the module
/// documentation), so that a connection's pipelined adds, all queued
/// before it awaits the first, go in one batch.
pub struct AddReply {
    rx: Option<oneshot::Receiver<Added>>,
    /// The add queues to wake, until they are.
    wake: Option<Arc<Vec<Arc<Queue>>>>,
}

impl AddReply {
    /// An answer that is already there (no queue to wake).
    pub(crate) fn ready(rx: oneshot::Receiver<Added>) -> AddReply {
        AddReply {
            rx: Some(rx),
            wake: None,
        }
    }

    fn wake(&mut self) {
        if let Some(queues) = self.wake.take() {
            queues.iter().for_each(|q| q.wake());
        }
    }

    /// Waits for the answer, blocking the thread.
    pub fn blocking_recv(mut self) -> Result<Added, oneshot::error::RecvError> {
        self.wake();
        self.rx.take().expect("not received yet").blocking_recv()
    }
}

impl std::future::Future for AddReply {
    type Output = Result<Added, oneshot::error::RecvError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        self.wake();
        let rx = self.rx.as_mut().expect("not received yet");
        std::pin::Pin::new(rx).poll(cx)
    }
}

impl Drop for AddReply {
    fn drop(&mut self) {
        // A request nobody awaits still goes (the adds were asked for).
        self.wake();
    }
}

/// The queues of one filter and their workers (see the module doc).
pub(super) struct Coalescer {
    checks: Arc<Queue>,
    /// One queue per add lane.
    adds: Arc<Vec<Arc<Queue>>>,
    /// How entries are placed in lanes (`None` until the filter is read).
    placer: Mutex<Option<Arc<Placer>>>,
    /// The filter, for the workers (a weak reference: the workers stop
    /// when the filter is dropped).
    owner: Weak<RedisNamed>,
    /// Entries longer than this are [`AddOutcome::TooLong`].
    max_item_bytes: usize,
}

impl Drop for Coalescer {
    fn drop(&mut self) {
        self.checks.close();
        self.adds.iter().for_each(|q| q.close());
    }
}

impl Coalescer {
    /// The queues of a filter whose handle is `filter` (`None`: broken,
    /// its requests never queued).
    pub(super) fn new(
        owner: Weak<RedisNamed>,
        filter: Option<&RedisFilter>,
        max_item_bytes: usize,
    ) -> Coalescer {
        Coalescer {
            checks: Arc::default(),
            adds: Arc::new((0..ADDERS).map(|_| Arc::default()).collect()),
            placer: Mutex::new(filter.map(|f| Arc::new(Placer::of(f)))),
            owner,
            max_item_bytes,
        }
    }

    /// Updates the placer after the handle was read again (a filter
    /// replaced by a push has new metadata).
    fn refresh(&self, f: &RedisFilter) {
        let mut p = self.placer.lock().unwrap_or_else(|p| p.into_inner());
        if p.as_ref()
            .is_none_or(|p| p.meta.generation != f.meta().generation)
        {
            *p = Some(Arc::new(Placer::of(f)));
        }
    }

    /// Queues a lookup of `queries`.
    pub(super) fn check(&self, queries: &[&[u8]]) -> oneshot::Receiver<Checked> {
        let (tx, rx) = oneshot::channel();
        let job = Job::Check {
            queries: queries.iter().map(|q| q.to_vec()).collect(),
            reply: tx,
        };
        self.queue(&self.checks, CHECKERS, job, usize::MAX);
        self.checks.wake();
        rx
    }

    /// Queues an add of `entries`, in parts by add lane (the workers are
    /// woken by the [`AddReply`]).
    pub(super) fn add(&self, entries: &[&[u8]]) -> AddReply {
        let (tx, rx) = oneshot::channel();
        let mut parts: Vec<Vec<usize>> = vec![Vec::new(); ADDERS];
        if ADDERS == 1 {
            parts[0].extend(0..entries.len());
        } else {
            let placer = self
                .placer
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            for (i, e) in entries.iter().enumerate() {
                let lane = match &placer {
                    Some(p) if e.len() <= self.max_item_bytes => p.lane(e),
                    _ => 0,
                };
                parts[lane].push(i);
            }
        }
        let left = parts.iter().filter(|p| !p.is_empty()).count();
        let queued = Instant::now();
        if left == 0 {
            let _ = tx.send(Ok(Vec::new()));
            return AddReply::ready(rx);
        }
        let join = Arc::new(Mutex::new(Join {
            outcomes: vec![None; entries.len()],
            left,
            error: None,
            reply: Some(tx),
        }));
        for (lane, at) in parts.into_iter().enumerate() {
            if at.is_empty() {
                continue;
            }
            let job = Job::Add {
                entries: at.iter().map(|&i| entries[i].to_vec()).collect(),
                part: Part {
                    join: join.clone(),
                    at,
                },
                queued,
            };
            self.queue(&self.adds[lane], 1, job, lane);
        }
        AddReply {
            rx: Some(rx),
            wake: Some(self.adds.clone()),
        }
    }

    /// Queues `job`, starting the queue's workers on first use (`lane`:
    /// the add lane of the queue, for the workers' `trace` events).
    fn queue(&self, queue: &Arc<Queue>, workers: usize, job: Job, lane: usize) {
        let mut s = queue.lock();
        while s.workers < workers {
            let (q, owner, max) = (queue.clone(), self.owner.clone(), self.max_item_bytes);
            let started = std::thread::Builder::new()
                .name("bloomgate-redis-batch".into())
                .spawn(move || work(&q, &owner, max, lane));
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
fn work(queue: &Queue, owner: &Weak<RedisNamed>, max_item_bytes: usize, lane: usize) {
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
            run_adds(&named, adds, max_item_bytes, lane);
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
            for q in queries {
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
        let Job::Check { queries, reply } = j else {
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
            verdicts.push(
                span.clone()
                    .map(|r| verdict(f.whitelist(), &refs[r.clone()], &found[r]).to_verdict()),
            );
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
fn run_adds(named: &RedisNamed, jobs: Vec<Job>, max_item_bytes: usize, lane: usize) {
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
    named.batches.refresh(&f);
    let mut keys: Vec<Vec<u8>> = Vec::new();
    // Per entry: the index of its key, or its outcome.
    let mut slots: Vec<Result<usize, AddOutcome>> = Vec::new();
    for j in &jobs {
        if let Job::Add { entries, .. } = j {
            for e in entries {
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
        let Job::Add { entries, part, .. } = j else {
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
        part.done(match failed {
            Some(e) => Err(dup(&e)),
            None => Ok(outcomes),
        });
    }
    tracing::trace!(
        at_us = bloomgate_redis::epoch_us(),
        lane,
        jobs = jobs_n,
        items = refs.len(),
        queued_us = taken.duration_since(oldest).as_micros() as u64,
        read_us = read.as_micros() as u64,
        redis_us = (ran - read).as_micros() as u64,
        answered_us = (taken.elapsed() - ran).as_micros() as u64,
        "add batch"
    );
}
