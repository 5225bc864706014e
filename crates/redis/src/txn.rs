//! Adds as transactions, without Lua: `WATCH` the shards, check that each
//! is whole (`STRLEN`) and read the items' blocks (`GETRANGE`), then
//! `MULTI`, one `SETRANGE` per block that gains bits, `EXEC`.
//!
//! # Why not a script, why not a bare `BITFIELD`
//!
//! A bare `BITFIELD` is the cheapest add in round trips (one command,
//! atomic, its old bits say whether the item was new), but on a missing
//! shard — evicted by an `allkeys-*` policy, deleted — it creates the key
//! anew, short and full of zeros, and lookups of its lower blocks would
//! then answer "absent". The add used to be a Lua script that checked the
//! shard's length before setting bits; on the 2-core VM this project is
//! measured on, script calls of 0.3–1.3 ms were caught by the hypervisor's
//! steal time and held Redis 2–14 ms at a time (BENCHMARKS.md, "The add
//! tail"), where 5-µs commands rarely were. A transaction keeps the check
//! with plain commands:
//!
//! 1. `WATCH` the transaction's shard keys, `STRLEN` each, and `GETRANGE`
//!    each item's 64-byte block. A shard of the wrong length (0: missing)
//!    is damage: its items are not added and the add is an error naming
//!    it, never "absent", and no key is created.
//! 2. Here, each item in order: new when some of its bits is 0 in its
//!    block as read (and as the items before it in the transaction left
//!    it), then its bits are ORed into the block. An item whose bits are
//!    all set is present, and needs no write.
//! 3. `MULTI`, one `SETRANGE key OFFSET BLOCK` per block that gained bits,
//!    `EXEC`.
//!
//! `EXEC` returns nil, running nothing, when a watched key was written,
//! deleted, evicted or expired after the `WATCH` (Redis's `signalModifiedKey`,
//! which eviction calls too: the test `eviction_of_a_watched_shard_aborts_exec`
//! evicts a watched shard with `maxmemory` and `allkeys-lru` and checks
//! that `EXEC` runs nothing and the key stays missing). So when `EXEC`
//! runs, every block is still as read: a block written back is the one
//! read with the transaction's bits ORed in (no other writer's bit is
//! lost), no shard was removed unseen, and among writers racing on an item
//! exactly one is told "new" — the others' `EXEC`s abort, and their
//! retries read its bits. An aborted transaction (or one whose block reads
//! came back short: a shard removed between its `STRLEN` and the reads) is
//! checked, read and sent again, up to [`MAX_ABORTS`] times (other writers
//! on the same shards cause aborts too; each round at least one of them
//! wins), then its items are an error. Evictions do not happen while a
//! transaction runs: Redis evicts before a command, and `EXEC` is one.
//!
//! # Why read-modify-write, not a `BITFIELD` per item
//!
//! The transaction used to queue `BITFIELD key SET u1 BIT 1 …` per item,
//! whose old bits answered "new" in Redis. A `BITFIELD` of `k` bits is
//! `2 + 4k` arguments (54 at k = 13), each parsed by Redis and encoded
//! here, and its answer `k` integers each parsed here: measured with
//! `redis-benchmark -P 16` on the 2-core VM, 3.35 µs of Redis CPU for
//! one of 13 bits, against 0.92 µs for a 64-byte `GETRANGE` and 0.94 µs
//! for a 64-byte `SETRANGE`. The block is read anyway in the `WATCH` round,
//! and an item already present costs no write at all.
//!
//! # The item count
//!
//! The reads say which items are new before `MULTI`, so on one server
//! (where the metadata key may share a transaction with any shard) the
//! transaction also queues `HINCRBY` of the metadata's item count by its
//! new items ([`Tx::count_key`]): the count changes with the bits, once,
//! or not at all when `EXEC` aborts — instead of in a round trip of its
//! own after the adds (each round trip costs Redis about 12 µs of CPU on
//! that VM: `epoll_wait`, `read`, `write`). In a cluster the caller counts
//! the new items after the call ([`TxRun::counted`] says which were).
//!
//! # Chains: two round trips, pipelined
//!
//! A connection has one set of watched keys, which `EXEC` clears, so one
//! connection carries one transaction at a time. Each connection runs a
//! chain of transactions in rounds: a round sends the `MULTI … EXEC` of the
//! transaction read in the round before and, behind it, the `WATCH`,
//! `STRLEN`s and `GETRANGE`s of the next one; `n` transactions take
//! `n + 1` round trips. A transaction with nothing to write and no count
//! ends after its reads (its items were all present). One call spreads
//! its transactions over up to [`CHAINS`] connections per node, all sent
//! before any reply is read. Items of one shard always go through one
//! chain (the caller's [`Tx::chain`]), in order, so the answers are those
//! of the adds made one after the other; chains never share a shard, so
//! they never abort each other.
//!
//! In Redis Cluster a transaction must stay within one slot (`EXEC` of
//! keys of several slots is `CROSSSLOT`), so there a transaction holds the
//! items of one slot (one shard, as shards spread over the slots). A
//! transaction that a node redirects (`MOVED`, `ASK`, `TRYAGAIN`,
//! `CLUSTERDOWN`, `LOADING`, on any of its commands) ran nothing; it and the
//! rest of its chain go again, in order, after the slot map is read again
//! (up to [`MAX_REROUTES`] times, with backoff).
//!
//! # Outcomes
//!
//! Each item's [`Outcome`]: set (new or not), [`Outcome::Unknown`] when its
//! `EXEC` was sent and no reply came back (the node failed: it may have
//! run), [`Outcome::NotRun`] when it did not run (not sent, refused, a
//! damaged shard, aborted too often). A node that fails ends its chains;
//! the other nodes' chains go on.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

use crate::batch::Batch;
use crate::client::{Node, Store};
use crate::error::Error;
use crate::layout::BLOCK_BYTES;

/// A block's bytes, as stored.
type Block = [u8; BLOCK_BYTES as usize];

mod plan;
use plan::{plan, Plan};

/// Items per transaction at most: `EXEC` runs their writes at once,
/// holding Redis for their time (about a µs each), so a transaction stays
/// well under a millisecond.
pub(crate) const TX_ITEMS: usize = 64;

/// Connections per node that one call's transactions are spread over.
pub(crate) const CHAINS: usize = 4;

/// Times a transaction is checked and sent again after `EXEC` aborted (a
/// watched shard written, deleted or evicted meanwhile) before its items
/// are an error.
pub(crate) const MAX_ABORTS: u32 = 64;

/// Times a call sends again the transactions that nodes redirected (a
/// reshard, a failover, a node loading) before they are an error; the
/// waits between add up to about 6.5 s.
const MAX_REROUTES: u32 = 10;

/// One transaction: shards of one slot in a cluster, and their items.
pub(crate) struct Tx {
    /// The slot of its keys (routes it to its node).
    pub(crate) slot: u16,
    /// Which of its node's chains carries it (below the call's chain
    /// count): the same for every transaction with items of a shard.
    pub(crate) chain: usize,
    /// Its shards, each with its items, in order.
    pub(crate) shards: Vec<TxShard>,
    /// The metadata key, when the transaction counts its new items
    /// (`HINCRBY … items N` queued first): on one server.
    pub(crate) count_key: Option<String>,
    /// What its `MULTI … EXEC` does, from the reads of its `WATCH` round.
    plan: Option<Plan>,
    aborts: u32,
}

impl Tx {
    /// An empty transaction of `slot` on chain `chain`.
    pub(crate) fn new(slot: u16, chain: usize) -> Tx {
        Tx {
            slot,
            chain,
            shards: Vec::new(),
            count_key: None,
            plan: None,
            aborts: 0,
        }
    }

    /// Items in it.
    pub(crate) fn items(&self) -> usize {
        self.shards.iter().map(|s| s.items.len()).sum()
    }

    /// Adds item `id` (the caller's index) setting the bits `mask` (the
    /// engine's, eight little-endian words) of the block at byte `offset`
    /// of shard `shard` (key `key`, whole when `len` bytes long).
    pub(crate) fn push(
        &mut self,
        shard: u64,
        key: &str,
        len: u64,
        id: usize,
        offset: u64,
        mask: [u64; 8],
    ) {
        match self.shards.iter_mut().find(|s| s.shard == shard) {
            Some(s) => s.items.push((id, offset, mask)),
            None => self.shards.push(TxShard {
                shard,
                key: key.to_string(),
                len,
                items: vec![(id, offset, mask)],
            }),
        }
    }

    /// Commands queued between its `MULTI` and `EXEC`: the count's
    /// `HINCRBY`, if any, then one `SETRANGE` per block written.
    fn queued(&self) -> usize {
        self.plan
            .as_ref()
            .map_or(0, |p| p.count(self).is_some() as usize + p.writes.len())
    }

    fn ids(&self) -> impl Iterator<Item = usize> + '_ {
        self.shards
            .iter()
            .flat_map(|s| s.items.iter().map(|(id, _, _)| *id))
    }
}

/// A shard of a transaction and its items.
pub(crate) struct TxShard {
    shard: u64,
    key: String,
    /// Its length when whole.
    len: u64,
    /// Per item: the caller's index, its block's byte offset in the
    /// shard, and its bits in the block.
    items: Vec<(usize, u64, [u64; 8])>,
}

/// What happened to one item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Its transaction ran: whether some of its bits was 0 (new).
    Set(bool),
    /// Its `EXEC` was sent and no reply came back: it may have run.
    Unknown,
    /// It did not run.
    NotRun,
}

/// The outcomes of a call's items (in no particular order), and its first
/// failure.
#[derive(Default)]
pub(crate) struct TxRun {
    pub(crate) outcomes: Vec<(usize, Outcome)>,
    pub(crate) error: Option<Error>,
    /// Where the call's time went (for the `trace` event of each call).
    pub(crate) stats: TxStats,
    /// New items counted by their transactions' `HINCRBY` (see
    /// [`Tx::count_key`]).
    pub(crate) counted: u64,
}

/// What a call of [`run`] did beside its outcomes: round trips, aborted
/// `EXEC`s and the waits after them, connections opened.
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct TxStats {
    /// Rounds sent (each a round trip on one connection).
    pub(crate) rounds: u32,
    /// `EXEC`s that aborted (a watched shard changed).
    pub(crate) aborts: u32,
    /// Connections opened (none idle in the pool).
    pub(crate) connects: u32,
    /// Time spent waiting after aborts and redirections.
    pub(crate) slept: Duration,
}

impl TxRun {
    fn all(&mut self, tx: &Tx, o: Outcome) {
        self.outcomes.extend(tx.ids().map(|id| (id, o)));
    }

    fn fail(&mut self, e: Error) {
        self.error.get_or_insert(e);
    }
}

/// A reply that says the command ran nothing because its slot is elsewhere
/// or not served now: sent again after the slot map is read again.
pub(crate) fn redirected(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if matches!(
        e.code(),
        "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN" | "LOADING"
    ))
}

/// What the redirections of a call said: the last one (the error if
/// they go on too long), and the node each `MOVED` named for its slot.
#[derive(Default)]
struct Redirects {
    last: Option<Error>,
    moved: HashMap<u16, Node>,
}

impl Redirects {
    /// Notes a redirection's error reply.
    fn note(&mut self, store: &Store, e: &redis::ServerError) {
        if e.code() == "MOVED" {
            // "MOVED <slot> <host>:<port>": the slot's master now.
            let mut words = e.details().unwrap_or("").split_whitespace();
            let slot = words.next().and_then(|w| w.parse::<u16>().ok());
            let node = words.next().and_then(|w| {
                let (host, port) = w.rsplit_once(':')?;
                Some((host.to_string(), port.parse::<u16>().ok()?))
            });
            if let (Some(slot), Some(node)) = (slot, node) {
                self.moved.insert(slot, node);
            }
        }
        self.last = Some(store.refused(e.clone()));
    }
}

/// One connection's transactions.
struct Chain {
    node: Node,
    index: usize,
    conn: Option<Connection>,
    /// Not yet watched, in order.
    txs: VecDeque<Tx>,
    /// Watched and checked (only sound shards left): its `MULTI … EXEC`
    /// goes in the next round.
    ready: Option<Tx>,
    /// The connection watches the keys of a transaction put back after an
    /// abort: `UNWATCH` before the next `WATCH`.
    stale_watch: bool,
    /// Ended: finished, failed, or redirected.
    ended: bool,
    /// After an abort: when the transaction may be sent again.
    not_before: Option<Instant>,
    buf: Batch,
    /// What this round sent: the transaction executed, the one watched.
    exec: Option<Tx>,
    watch: Option<Tx>,
    unwatch: bool,
}

/// Runs `txs`, spread over up to `chains` connections per node (see the
/// module documentation); `damaged(shard, problem)` is the error of a
/// shard found missing or of the wrong length.
pub(crate) fn run(
    store: &Store,
    txs: Vec<Tx>,
    chains: usize,
    damaged: &dyn Fn(u64, String) -> Error,
) -> TxRun {
    let mut out = TxRun::default();
    let mut pending = txs;
    let mut reroutes = 0;
    let mut redirect = Redirects::default();
    while !pending.is_empty() {
        let routes = match store.routes() {
            Ok(r) => r,
            Err(e) => {
                pending.iter().for_each(|tx| out.all(tx, Outcome::NotRun));
                out.fail(e);
                break;
            }
        };
        let mut all: Vec<Chain> = Vec::new();
        let mut again: Vec<Tx> = Vec::new();
        for tx in pending.drain(..) {
            let Some(node) = redirect.moved.get(&tx.slot).or(routes.master(tx.slot)) else {
                // No node serves the slot a moment ago (a failover).
                again.push(tx);
                continue;
            };
            let index = tx.chain % chains.max(1);
            match all.iter_mut().find(|c| c.index == index && c.node == *node) {
                Some(c) => c.txs.push_back(tx),
                None => all.push(Chain {
                    node: node.clone(),
                    index,
                    conn: None,
                    txs: VecDeque::from([tx]),
                    ready: None,
                    stale_watch: false,
                    ended: false,
                    not_before: None,
                    buf: Batch::new(),
                    exec: None,
                    watch: None,
                    unwatch: false,
                }),
            }
        }
        drop(routes);
        drive(
            store,
            &mut all,
            &mut out,
            &mut again,
            &mut redirect,
            damaged,
        );
        if again.is_empty() {
            break;
        }
        reroutes += 1;
        store.forget_routes();
        store.count_redirected(again.iter().map(|t| t.items() as u64).sum());
        if reroutes > MAX_REROUTES {
            again.iter().for_each(|tx| out.all(tx, Outcome::NotRun));
            out.fail(redirect.last.take().unwrap_or_else(|| {
                store.protocol(format!(
                    "slots still moving or unserved after {MAX_REROUTES} tries"
                ))
            }));
            break;
        }
        tracing::debug!(
            transactions = again.len(),
            "redirected; sending again after reading the slot map"
        );
        let pause = Duration::from_millis((25 << reroutes).min(1000));
        std::thread::sleep(pause);
        out.stats.slept += pause;
        pending = again;
    }
    out
}

/// Runs every chain's rounds until all have ended; transactions that a
/// node redirected go to `again` (each chain's in order), with the
/// redirection's error in `redirect`.
fn drive(
    store: &Store,
    chains: &mut [Chain],
    out: &mut TxRun,
    again: &mut Vec<Tx>,
    redirect: &mut Redirects,
    damaged: &dyn Fn(u64, String) -> Error,
) {
    loop {
        let mut sent = Vec::new();
        let mut wait: Option<Instant> = None;
        let now = Instant::now();
        for (i, c) in chains.iter_mut().enumerate() {
            if c.ended {
                continue;
            }
            if let Some(t) = c.not_before.filter(|&t| t > now) {
                wait = Some(wait.map_or(t, |w| w.min(t)));
                continue;
            }
            c.not_before = None;
            if send_round(store, c, out) {
                out.stats.rounds += 1;
                sent.push(i);
            }
        }
        if sent.is_empty() {
            match wait {
                Some(t) => {
                    let pause = t.saturating_duration_since(Instant::now());
                    std::thread::sleep(pause);
                    out.stats.slept += pause;
                    continue;
                }
                None => return,
            }
        }
        for i in sent {
            read_round(store, &mut chains[i], out, again, redirect, damaged);
        }
    }
}

/// Encodes and sends chain `c`'s next round; false if it had nothing to
/// send (then it has ended) or failed to send.
fn send_round(store: &Store, c: &mut Chain, out: &mut TxRun) -> bool {
    c.buf.clear();
    c.exec = c.ready.take();
    c.watch = c.txs.pop_front();
    c.unwatch = c.watch.is_some() && std::mem::take(&mut c.stale_watch);
    if let Some(tx) = &c.exec {
        c.buf.bare(b"MULTI");
        let plan = tx.plan.as_ref().expect("a transaction read is planned");
        if let Some((key, n)) = plan.count(tx) {
            c.buf.start(4, b"HINCRBY", key.as_bytes());
            c.buf.arg(b"items");
            c.buf.arg_u64(n);
            c.buf.end(0);
        }
        for (shard, offset, bytes) in &plan.writes {
            c.buf
                .start(4, b"SETRANGE", tx.shards[*shard].key.as_bytes());
            c.buf.arg_u64(*offset);
            c.buf.arg(bytes);
            c.buf.end(0);
        }
        c.buf.bare(b"EXEC");
    }
    if let Some(tx) = &c.watch {
        if c.unwatch {
            c.buf.bare(b"UNWATCH");
        }
        c.buf
            .start(1 + tx.shards.len(), b"WATCH", tx.shards[0].key.as_bytes());
        for s in &tx.shards[1..] {
            c.buf.arg(s.key.as_bytes());
        }
        c.buf.end(0);
        for s in &tx.shards {
            c.buf.start(2, b"STRLEN", s.key.as_bytes());
            c.buf.end(0);
        }
        for s in &tx.shards {
            for (_, offset, _) in &s.items {
                c.buf.start(4, b"GETRANGE", s.key.as_bytes());
                c.buf.arg_u64(*offset);
                c.buf.arg_u64(offset + BLOCK_BYTES - 1);
                c.buf.end(0);
            }
        }
    }
    if c.buf.is_empty() {
        // Finished. A connection that still watches keys is not pooled.
        c.ended = true;
        if let Some(conn) = c.conn.take().filter(|_| !c.stale_watch) {
            store.give_back(&c.node, false, conn);
        }
        return false;
    }
    let conn = match c.conn.take() {
        Some(conn) => Ok(conn),
        None => {
            let (conn, opened) = store.take_counted(&c.node, false);
            out.stats.connects += opened as u32;
            conn
        }
    };
    let sent = conn.and_then(|mut conn| {
        conn.send_packed_command(c.buf.all_bytes())
            .map_err(|e| store.node_err(&c.node, e))?;
        Ok(conn)
    });
    match sent {
        Ok(conn) => {
            c.conn = Some(conn);
            true
        }
        Err(e) => {
            // Part of the round may have been written: an `EXEC` in it
            // may have run.
            store.drop_pool(&c.node, false);
            let exec = c.exec.take();
            end_failed(c, out, exec.as_ref(), e);
            false
        }
    }
}

/// Ends chain `c` after its node failed: the transaction whose `EXEC`
/// was sent (`exec`, if its reply did not come back) is unknown, the rest
/// did not run.
fn end_failed(c: &mut Chain, out: &mut TxRun, exec: Option<&Tx>, e: Error) {
    if let Some(tx) = exec {
        out.all(tx, Outcome::Unknown);
    }
    let (ready, watch) = (c.ready.take(), c.watch.take());
    for tx in ready.iter().chain(watch.iter()) {
        out.all(tx, Outcome::NotRun);
    }
    for tx in c.txs.drain(..) {
        out.all(&tx, Outcome::NotRun);
    }
    c.conn = None;
    c.ended = true;
    out.fail(e);
}

/// Ends chain `c` after a redirection: its transactions not run go
/// again, in order.
fn end_redirected(c: &mut Chain, again: &mut Vec<Tx>, first: Option<Tx>) {
    again.extend(first);
    again.extend(c.watch.take());
    again.extend(c.txs.drain(..));
    c.conn = None;
    c.ended = true;
}

/// Reads chain `c`'s round and acts on it.
fn read_round(
    store: &Store,
    c: &mut Chain,
    out: &mut TxRun,
    again: &mut Vec<Tx>,
    redirect: &mut Redirects,
    damaged: &dyn Fn(u64, String) -> Error,
) {
    let expected = c.buf.len();
    let mut replies = Vec::with_capacity(expected);
    let mut failure = None;
    {
        let conn = c.conn.as_mut().expect("a round was sent");
        for _ in 0..expected {
            match conn.recv_response() {
                Ok(v) => replies.push(v),
                Err(e) => {
                    failure = Some(store.node_err(&c.node, e));
                    break;
                }
            }
        }
    }
    let queued = c.exec.as_ref().map_or(0, Tx::queued);
    // Replies: [MULTI, QUEUED × queued, EXEC] then [UNWATCH], WATCH, STRLEN….
    let exec_len = if c.exec.is_some() { queued + 2 } else { 0 };
    if let Some(e) = failure {
        store.drop_pool(&c.node, false);
        let exec = c.exec.take();
        if replies.len() >= exec_len {
            // The EXEC's reply came back: use it, then fail the rest.
            if let Some(tx) = exec {
                exec_outcomes(store, c, out, again, redirect, tx, &replies[..exec_len]);
            }
            return end_failed(c, out, None, e);
        }
        return end_failed(c, out, exec.as_ref(), e);
    }
    let mut put_back = false;
    if let Some(tx) = c.exec.take() {
        put_back = !exec_outcomes(store, c, out, again, redirect, tx, &replies[..exec_len]);
        if c.ended {
            return;
        }
    }
    let Some(tx) = c.watch.take() else {
        return;
    };
    if put_back {
        // The transaction before it goes again first (it is at the front
        // already); this one after it, watched again then.
        let first = c.txs.pop_front();
        c.txs.push_front(tx);
        if let Some(f) = first {
            c.txs.push_front(f);
        }
        c.stale_watch = true;
        return;
    }
    let rest = &replies[exec_len + c.unwatch as usize..];
    if let Some(Value::ServerError(e)) = rest.iter().find(|v| redirected(v)) {
        redirect.note(store, e);
        c.watch = Some(tx);
        return end_redirected(c, again, None);
    }
    if let Some(Value::ServerError(e)) = rest.first() {
        // WATCH refused: nothing of the transaction ran.
        c.watch = Some(tx);
        let e = store.refused(e.clone());
        return end_failed(c, out, None, e);
    }
    let mut tx = tx;
    // After the WATCH's reply: one STRLEN's per shard, then one GETRANGE's
    // per item, shard after shard.
    let (lengths, mut blocks) = rest[1..].split_at(tx.shards.len());
    let mut sound = Vec::with_capacity(tx.shards.len());
    // Per sound shard, its items' blocks as read (`None`: not 64 bytes).
    let mut read: Vec<Vec<Option<&[u8]>>> = Vec::with_capacity(tx.shards.len());
    for (s, v) in tx.shards.drain(..).zip(lengths) {
        let (mine, others) = blocks.split_at(s.items.len());
        blocks = others;
        let problem = match v {
            Value::Int(n) if *n as u64 == s.len && *n >= 0 => None,
            Value::Int(0) => Some("missing".to_string()),
            Value::Int(n) => Some(format!("{n} bytes long instead of {}", s.len)),
            Value::ServerError(e) => {
                out.fail(store.refused(e.clone()));
                out.outcomes
                    .extend(s.items.iter().map(|(id, _, _)| (*id, Outcome::NotRun)));
                continue;
            }
            other => Some(format!("answered STRLEN with {other:?}")),
        };
        match problem {
            None => {
                read.push(
                    mine.iter()
                        .map(|v| match v {
                            Value::BulkString(b) if b.len() == BLOCK_BYTES as usize => Some(&b[..]),
                            _ => None,
                        })
                        .collect(),
                );
                sound.push(s);
            }
            Some(p) => {
                out.fail(damaged(s.shard, p));
                out.outcomes
                    .extend(s.items.iter().map(|(id, _, _)| (*id, Outcome::NotRun)));
            }
        }
    }
    if sound.is_empty() {
        // Nothing to run: the connection still watches its keys.
        c.stale_watch = true;
        return;
    }
    tx.shards = sound;
    if read.iter().flatten().any(Option::is_none) {
        // A block read short although its shard was whole a moment
        // before: the shard changed between its STRLEN and the reads, so
        // EXEC would abort. Check and read again, as after an abort.
        c.stale_watch = true;
        retry(store, c, out, tx);
        return;
    }
    // A transaction with nothing to write (every item present) still
    // runs its (empty) MULTI … EXEC: EXEC clears the watch, so the
    // connection goes back to the pool clean.
    tx.plan = Some(plan(&tx, &read));
    c.ready = Some(tx);
}

/// Puts transaction `tx` back at the front of chain `c` after an abort,
/// to be checked, read and sent again after a short wait; false (its
/// items not run, an error) after [`MAX_ABORTS`] aborts.
fn retry(store: &Store, c: &mut Chain, out: &mut TxRun, mut tx: Tx) -> bool {
    tx.aborts += 1;
    out.stats.aborts += 1;
    tx.plan = None;
    if tx.aborts > MAX_ABORTS {
        out.all(&tx, Outcome::NotRun);
        out.fail(store.protocol(format!(
            "the shards of an add changed under each of {MAX_ABORTS} tries (other writers, or evictions)"
        )));
        return false;
    }
    c.not_before = Some(Instant::now() + abort_wait(tx.aborts));
    c.txs.push_front(tx);
    true
}

/// Acts on the replies to a transaction's `MULTI … EXEC` (`replies`: the
/// `MULTI`'s, one per queued command, the `EXEC`'s). Returns false if
/// `EXEC` aborted and the transaction was put back at the front of the
/// chain to be checked and sent again.
fn exec_outcomes(
    store: &Store,
    c: &mut Chain,
    out: &mut TxRun,
    again: &mut Vec<Tx>,
    redirect: &mut Redirects,
    mut tx: Tx,
    replies: &[Value],
) -> bool {
    let Some((exec, before)) = replies.split_last() else {
        return true;
    };
    match exec {
        Value::Array(answers) if answers.len() == tx.queued() => {
            let plan = tx.plan.take().expect("a transaction sent is planned");
            let answers = match plan.count(&tx) {
                None => &answers[..],
                Some((_, n)) => {
                    out.counted += n;
                    if let Value::ServerError(e) = &answers[0] {
                        // Statistics: the adds stand.
                        tracing::warn!(
                            "the item count of a filter in Redis was not updated: {e:?}"
                        );
                    }
                    &answers[1..]
                }
            };
            // Per write: `None` if it ran (SETRANGE answers the new
            // length), else what its new items' outcome is.
            let mut failed = Vec::with_capacity(plan.writes.len());
            for a in answers {
                failed.push(match a {
                    Value::Int(_) => None,
                    Value::ServerError(e) => {
                        // A command that fails when run writes nothing
                        // (a key of another type).
                        out.fail(store.refused(e.clone()));
                        Some(Outcome::NotRun)
                    }
                    other => {
                        out.fail(store.protocol(format!("unexpected reply to an add: {other:?}")));
                        Some(Outcome::Unknown)
                    }
                });
            }
            for (id, new, write) in plan.items {
                let o = write.and_then(|w| failed[w]).unwrap_or(Outcome::Set(new));
                out.outcomes.push((id, o));
            }
            true
        }
        Value::Array(answers) => {
            out.fail(store.protocol(format!(
                "{} answers to a transaction of {} commands",
                answers.len(),
                tx.queued()
            )));
            out.all(&tx, Outcome::Unknown);
            true
        }
        Value::Nil => {
            // Aborted: a watched shard was written, deleted or evicted
            // after the WATCH. Nothing ran; check, read and send it again.
            !retry(store, c, out, tx)
        }
        Value::ServerError(e) => {
            // Refused, nothing ran: EXEC itself redirected, or EXECABORT
            // because a queued command was refused (its reason is that
            // command's reply).
            let cause = before.iter().find(|v| matches!(v, Value::ServerError(_)));
            if redirected(exec) || cause.is_some_and(redirected) {
                let why = match cause.filter(|v| redirected(v)) {
                    Some(Value::ServerError(q)) => q,
                    _ => e,
                };
                redirect.note(store, why);
                end_redirected(c, again, Some(tx));
                return true;
            }
            let why = match cause {
                Some(Value::ServerError(q)) => q.clone(),
                _ => e.clone(),
            };
            out.fail(store.refused(why));
            out.all(&tx, Outcome::NotRun);
            true
        }
        other => {
            out.fail(store.protocol(format!("unexpected reply to EXEC: {other:?}")));
            out.all(&tx, Outcome::Unknown);
            true
        }
    }
}

/// How long a transaction waits before it is sent again after its
/// `aborts`th abort: random, up to 200 µs per abort so far (at most
/// 10 ms). Other writers of its shards abort it while their transactions
/// land inside its `WATCH` window; a short random wait lets one of them
/// finish first instead of all retrying in step.
pub(crate) fn abort_wait(aborts: u32) -> Duration {
    let most = (aborts.max(1) as u64 * 200).min(10_000);
    Duration::from_micros(std::collections::hash_map::RandomState::new().hash_one(aborts) % most)
}
