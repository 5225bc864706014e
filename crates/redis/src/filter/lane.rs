//! Adds in one round trip: an [`AddLane`] is a connection that keeps the
//! shards of its adds watched between calls, so that a call's transaction
//! is sent at once, and the watch for the next one rides behind it.
//!
//! # Why
//!
//! An add transaction ([`crate::txn`]) needs the `WATCH` and `STRLEN` of
//! its shards answered before its `MULTI … EXEC` is sent: a shard found
//! missing must not be written (a write would create it as zeros), and
//! `WATCH` does not abort an `EXEC` for a key that was missing before it.
//! So a call of [`RedisFilter::add_keys`] is at least two round trips
//! (three when this lane was written, with the item count's `HINCRBY`,
//! since queued in the transaction itself). A server's add lane sends a
//! batch whenever the one before returned; each round trip is a wake-up of
//! the lane's thread, of Redis, and of the thread again, and on a loaded
//! machine each wake-up may wait for a core.
//!
//! A lane keeps one connection whose shards stay watched between calls:
//! each call's write is `MULTI`, one `BITFIELD` per item, `EXEC`, then
//! `WATCH` and `STRLEN` of the lane's shards again, which guard the next
//! call. The guarantee is the transaction's: the `STRLEN`s that cleared a
//! shard were answered under a `WATCH` that is still in force when `EXEC`
//! runs, so a shard deleted, evicted or written since makes `EXEC` run
//! nothing (it is then checked and sent again, as in [`crate::txn`]), and
//! a shard found missing or short is never written (its items are not
//! added, an error naming it). The item count's `HINCRBY` is written
//! behind the call's last transaction before the call returns, and its
//! reply read at the next use: the count is statistics, and it is in Redis
//! before the caller can answer anyone.
//!
//! A lane watches at most [`MAX_WATCHED`] shards: those of its recent
//! calls. Another writer of any of them aborts the lane's next `EXEC` (the
//! retry, right behind a fresh watch, rarely aborts again). A call whose
//! shards are not all watched first sets the watch (one more round trip,
//! as [`RedisFilter::add_keys`] takes); a watch older than [`FRESH`] is
//! set again first (an idle connection may have been closed by Redis's
//! `timeout`; `WATCH` and `STRLEN` are reads, safe to send again on a new
//! connection). Larger calls, calls with more shards, and Redis Cluster
//! (whose `WATCH` takes keys of one slot) go through
//! [`RedisFilter::add_keys`].

use std::time::{Duration, Instant};

use redis::{Connection, Value};

use super::add::{AddReport, Added};
use super::RedisFilter;
use crate::batch::Batch;
use crate::error::Result;
use crate::layout::{self, ItemPlace};
use crate::txn::{abort_wait, redirected, MAX_ABORTS, TX_ITEMS};

/// Shards a lane keeps watched at most (each is a `STRLEN` per round trip).
pub const MAX_WATCHED: usize = 64;

/// Keys per call that go through the lane; a larger call goes through
/// [`RedisFilter::add_keys`], whose chains spread it over connections.
pub const MAX_LANE_KEYS: usize = 8 * TX_ITEMS;

/// A watch older than this is set again before it guards an add.
pub const FRESH: Duration = Duration::from_secs(1);

/// One connection and the shards it watches (see the module
/// documentation). Used by one thread at a time; dropping it closes the
/// connection.
#[derive(Default)]
pub struct AddLane {
    conn: Option<Connection>,
    /// The filter generation the watch is for.
    generation: u64,
    /// Shards watched now (sorted), each with its `STRLEN` then (−1: not a
    /// string).
    watched: Vec<(u64, i64)>,
    /// Whether `conn` watches `watched` now.
    armed: bool,
    /// When the watch was set.
    since: Option<Instant>,
    /// Replies on `conn` not read yet (the count's `HINCRBY`).
    unread: usize,
    buf: Batch,
}

impl std::fmt::Debug for AddLane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddLane")
            .field("watched", &self.watched.len())
            .field("armed", &self.armed)
            .finish()
    }
}

impl AddLane {
    /// A lane with no connection yet.
    pub fn new() -> AddLane {
        AddLane::default()
    }

    /// Forgets the connection (it may be broken, or hold replies or a
    /// watch not accounted for).
    fn reset(&mut self) {
        self.conn = None;
        self.armed = false;
        self.watched.clear();
        self.unread = 0;
        self.since = None;
    }

    fn length(&self, shard: u64) -> Option<i64> {
        self.watched
            .binary_search_by_key(&shard, |w| w.0)
            .ok()
            .map(|i| self.watched[i].1)
    }

    /// Reads the replies left unread on the connection.
    fn drain(&mut self, conn: &mut Connection) -> redis::RedisResult<()> {
        while self.unread > 0 {
            let v = conn.recv_response()?;
            self.unread -= 1;
            if let Value::ServerError(e) = v {
                tracing::warn!("the item count of a filter in Redis was not updated: {e:?}");
            }
        }
        Ok(())
    }
}

/// How a transaction sent through the lane ended, beyond its outcomes.
enum TxEnd {
    /// Done (its items' outcomes are in the report); go on.
    Next,
    /// The connection failed or the call must stop: the rest is not run.
    Stop,
    /// Redis redirected it (loading, say): it and the rest go through
    /// [`RedisFilter::add_keys`], which waits and tries again.
    Elsewhere,
}

impl RedisFilter {
    /// [`RedisFilter::insert_keys`] through `lane`
    /// ([`RedisFilter::add_keys_on`]): per key whether it was new, or the
    /// call's first failure.
    pub fn insert_keys_on<T: AsRef<[u8]>>(
        &self,
        lane: &mut AddLane,
        keys: &[T],
    ) -> Result<Vec<bool>> {
        let report = self.add_keys_on(lane, keys);
        if let Some(e) = report.error {
            return Err(e);
        }
        Ok(report.outcomes.iter().map(|&o| o == Added::New).collect())
    }

    /// Adds normalized keys as [`RedisFilter::add_keys`] does (the same
    /// outcomes, the same guarantees), through `lane`: one round trip per
    /// transaction of up to 64 items while the lane's watch covers their
    /// shards (see the module documentation). Adds the new ones to the
    /// item count.
    pub fn add_keys_on<T: AsRef<[u8]>>(&self, lane: &mut AddLane, keys: &[T]) -> AddReport {
        let Some(node) = self.store.single().cloned() else {
            return self.add_keys(keys);
        };
        if keys.is_empty() || keys.len() > MAX_LANE_KEYS {
            return self.add_keys(keys);
        }
        let places: Vec<ItemPlace> = keys.iter().map(|k| self.meta.place(k.as_ref())).collect();
        let mut shards: Vec<u64> = places.iter().map(|p| p.shard).collect();
        shards.sort_unstable();
        shards.dedup();
        if shards.len() > MAX_WATCHED {
            return self.add_keys(keys);
        }
        let mut report = AddReport {
            outcomes: vec![Added::NotAdded; keys.len()],
            error: None,
        };
        let current = lane.generation == self.meta.generation
            && lane.since.is_some_and(|t| t.elapsed() < FRESH);
        if !current {
            lane.watched.clear();
        }
        let covered = current && lane.armed && shards.iter().all(|&s| lane.length(s).is_some());
        if !covered {
            // The shards of this call and of recent ones, within the cap.
            let mut want = shards.clone();
            want.extend(lane.watched.iter().map(|w| w.0));
            want.sort_unstable();
            want.dedup();
            if want.len() > MAX_WATCHED {
                want = shards.clone();
            }
            if let Err(e) = self.arm(lane, &node, &want) {
                report.error = Some(e);
                return report;
            }
        }
        let started = Instant::now();
        let (mut rounds, mut aborts) = (0u32, 0u32);
        let mut new = 0u64;
        let all: Vec<usize> = (0..keys.len()).collect();
        let mut rest_from = None;
        for (c, chunk) in all.chunks(TX_ITEMS).enumerate() {
            let end = self.lane_tx(
                lane,
                &node,
                &places,
                chunk,
                &mut report,
                &mut new,
                (&mut rounds, &mut aborts),
            );
            match end {
                TxEnd::Next => {}
                TxEnd::Stop => break,
                TxEnd::Elsewhere => {
                    rest_from = Some(c * TX_ITEMS);
                    break;
                }
            }
        }
        if rest_from.is_some() {
            lane.reset();
        }
        self.count_on(lane, new, &mut report);
        if let Some(from) = rest_from {
            let again = self.add_keys(&keys[from..]);
            for (o, a) in report.outcomes[from..].iter_mut().zip(again.outcomes) {
                *o = a;
            }
            report.error = report.error.or(again.error);
        }
        tracing::trace!(
            at_us = crate::epoch_us(),
            items = keys.len(),
            shards = shards.len(),
            armed_first = !covered,
            rounds,
            aborts,
            lane_us = started.elapsed().as_micros() as u64,
            "add lane"
        );
        report
    }

    /// Watches `want` on the lane's connection (a new one if it has none,
    /// or if its connection fails: these are reads) and reads their lengths.
    fn arm(&self, lane: &mut AddLane, node: &crate::client::Node, want: &[u64]) -> Result<()> {
        let mut last = None;
        for _ in 0..2 {
            let mut conn = match lane.conn.take() {
                Some(c) => c,
                None => {
                    lane.reset();
                    self.store.take(node, false)?
                }
            };
            lane.buf.clear();
            lane.buf.bare(b"UNWATCH");
            self.encode_watch(&mut lane.buf, want);
            let got = (|| -> redis::RedisResult<Vec<Value>> {
                lane.drain(&mut conn)?;
                conn.send_packed_command(lane.buf.all_bytes())?;
                (0..lane.buf.len()).map(|_| conn.recv_response()).collect()
            })();
            match got {
                Ok(replies) => {
                    lane.conn = Some(conn);
                    return self.watched(lane, want, &replies[1..]);
                }
                Err(e) => {
                    lane.reset();
                    last = Some(self.store.node_err(node, e));
                }
            }
        }
        Err(last.expect("two tries failed"))
    }

    /// `WATCH` and `STRLEN` of `shards`, appended to `buf`.
    fn encode_watch(&self, buf: &mut Batch, shards: &[u64]) {
        let keys: Vec<_> = shards.iter().map(|&s| self.shard_key(s)).collect();
        buf.start(1 + keys.len(), b"WATCH", keys[0].as_bytes());
        for k in &keys[1..] {
            buf.arg(k.as_bytes());
        }
        buf.end(0);
        for k in &keys {
            buf.start(2, b"STRLEN", k.as_bytes());
            buf.end(0);
        }
    }

    /// Records the replies to `WATCH` and the `STRLEN`s of `shards` in the
    /// lane. A refused `WATCH` leaves it unarmed (an error).
    fn watched(&self, lane: &mut AddLane, shards: &[u64], replies: &[Value]) -> Result<()> {
        lane.armed = false;
        lane.watched.clear();
        if let Some(Value::ServerError(e)) = replies.first() {
            return Err(self.store.refused(e.clone()));
        }
        for (&s, v) in shards.iter().zip(&replies[1..]) {
            let len = match v {
                Value::Int(n) => *n,
                _ => -1,
            };
            lane.watched.push((s, len));
        }
        lane.armed = true;
        lane.generation = self.meta.generation;
        lane.since = Some(Instant::now());
        Ok(())
    }

    /// Sends the items `chunk` (indexes into `places`) as one transaction
    /// behind the lane's watch, with the watch for the next one behind it;
    /// sends it again after an abort. Fills in the items' outcomes and adds
    /// the new ones to `new`.
    #[allow(clippy::too_many_arguments)]
    fn lane_tx(
        &self,
        lane: &mut AddLane,
        node: &crate::client::Node,
        places: &[ItemPlace],
        chunk: &[usize],
        report: &mut AddReport,
        new: &mut u64,
        (rounds, aborts): (&mut u32, &mut u32),
    ) -> TxEnd {
        let mut items: Vec<usize> = chunk.to_vec();
        let mut tries = 0u32;
        loop {
            // Items of shards found missing, short or not strings are not
            // sent: an error naming the shard.
            items.retain(|&i| {
                let shard = places[i].shard;
                let want = {
                    let r = self.meta.shard_bytes(shard);
                    (r.end - r.start) as i64
                };
                match lane.length(shard) {
                    Some(n) if n == want => true,
                    found => {
                        let problem = match found {
                            Some(0) => "missing".to_string(),
                            Some(-1) | None => "not a string".to_string(),
                            Some(n) => format!("{n} bytes long instead of {want}"),
                        };
                        report.error.get_or_insert(self.damaged(shard, problem));
                        report.outcomes[i] = Added::NotAdded;
                        false
                    }
                }
            });
            if items.is_empty() {
                return TxEnd::Next;
            }
            let Some(mut conn) = lane.conn.take() else {
                report
                    .error
                    .get_or_insert(self.store.protocol("an add lane lost its connection"));
                return TxEnd::Stop;
            };
            let watch: Vec<u64> = lane.watched.iter().map(|w| w.0).collect();
            lane.buf.clear();
            lane.buf.bare(b"MULTI");
            for &i in &items {
                let p = &places[i];
                let key = self.shard_key(p.shard);
                let bits: Vec<u64> = p.redis_bits().collect();
                lane.buf
                    .start(2 + 4 * bits.len(), b"BITFIELD", key.as_bytes());
                for bit in bits {
                    lane.buf.arg(b"SET");
                    lane.buf.arg(b"u1");
                    lane.buf.arg_u64(bit);
                    lane.buf.arg(b"1");
                }
                lane.buf.end(0);
            }
            lane.buf.bare(b"EXEC");
            self.encode_watch(&mut lane.buf, &watch);
            *rounds += 1;
            lane.armed = false;
            // Replies: MULTI, QUEUED × items, EXEC, then WATCH, STRLEN × watch.
            let exec_at = items.len() + 1;
            let mut replies = Vec::with_capacity(lane.buf.len());
            let failure = (|| -> redis::RedisResult<()> {
                lane.drain(&mut conn)?;
                conn.send_packed_command(lane.buf.all_bytes())?;
                for _ in 0..lane.buf.len() {
                    replies.push(conn.recv_response()?);
                }
                Ok(())
            })()
            .err();
            if let Some(e) = failure {
                lane.reset();
                let e = self.store.node_err(node, e);
                if replies.len() > exec_at {
                    // The EXEC's reply came back: use it (nil or an
                    // error: nothing ran).
                    if let Value::Array(_) = &replies[exec_at] {
                        self.exec_outcomes(&items, &replies[..=exec_at], report, new);
                    }
                } else {
                    // Sent (perhaps in part) without its answer: it may have run.
                    for &i in &items {
                        report.outcomes[i] = Added::Unknown;
                    }
                }
                report.error.get_or_insert(e);
                return TxEnd::Stop;
            }
            lane.conn = Some(conn);
            if let Value::ServerError(e) = &replies[0] {
                // MULTI refused: the BITFIELDs behind it ran, or not,
                // outside a transaction.
                lane.reset();
                for &i in &items {
                    report.outcomes[i] = Added::Unknown;
                }
                report.error.get_or_insert(self.store.refused(e.clone()));
                return TxEnd::Stop;
            }
            let watch_ok = self.watched(lane, &watch, &replies[exec_at + 1..]);
            match &replies[exec_at] {
                Value::Nil => {
                    // Aborted: a watched shard was written, deleted or
                    // evicted since the watch. Nothing ran; the watch sent
                    // behind it is fresh: check and send again.
                    *aborts += 1;
                    tries += 1;
                    if let Err(e) = watch_ok {
                        report.error.get_or_insert(e);
                        return TxEnd::Stop;
                    }
                    if tries > MAX_ABORTS {
                        report.error.get_or_insert(self.store.protocol(format!(
                            "the shards of an add changed under each of {MAX_ABORTS} tries (other writers, or evictions)"
                        )));
                        return TxEnd::Stop;
                    }
                    std::thread::sleep(abort_wait(tries));
                    continue;
                }
                Value::ServerError(e) => {
                    // Refused, nothing ran: EXECABORT because a queued
                    // command was refused (its reply says why), or EXEC
                    // itself.
                    let cause = replies[1..exec_at]
                        .iter()
                        .find(|v| matches!(v, Value::ServerError(_)));
                    if redirected(&replies[exec_at]) || cause.is_some_and(redirected) {
                        return TxEnd::Elsewhere;
                    }
                    let why = match cause {
                        Some(Value::ServerError(q)) => q.clone(),
                        _ => e.clone(),
                    };
                    report.error.get_or_insert(self.store.refused(why));
                    return match watch_ok {
                        Ok(()) => TxEnd::Next,
                        Err(e) => {
                            report.error.get_or_insert(e);
                            TxEnd::Stop
                        }
                    };
                }
                _ => {
                    self.exec_outcomes(&items, &replies[..=exec_at], report, new);
                    if let Err(e) = watch_ok {
                        // The next call watches again.
                        lane.reset();
                        report.error.get_or_insert(e);
                        return TxEnd::Stop;
                    }
                    return TxEnd::Next;
                }
            }
        }
    }

    /// The outcomes of `items` from the replies to their `MULTI … EXEC`
    /// (the `EXEC`'s last), which ran.
    fn exec_outcomes(
        &self,
        items: &[usize],
        replies: &[Value],
        report: &mut AddReport,
        new: &mut u64,
    ) {
        let exec = replies.last().expect("the EXEC's reply");
        let answers = match exec {
            Value::Array(a) if a.len() == items.len() => a,
            other => {
                report.error.get_or_insert(self.store.protocol(format!(
                    "unexpected reply to a transaction of {} adds: {other:?}",
                    items.len()
                )));
                for &i in items {
                    report.outcomes[i] = Added::Unknown;
                }
                return;
            }
        };
        for (&i, a) in items.iter().zip(answers) {
            report.outcomes[i] = match a {
                Value::Array(old) if old.iter().all(|b| matches!(b, Value::Int(_))) => {
                    if old.iter().any(|b| matches!(b, Value::Int(0))) {
                        *new += 1;
                        Added::New
                    } else {
                        Added::Present
                    }
                }
                Value::ServerError(e) => {
                    // A command that fails when run writes nothing.
                    report.error.get_or_insert(self.store.refused(e.clone()));
                    Added::NotAdded
                }
                other => {
                    report.error.get_or_insert(
                        self.store
                            .protocol(format!("unexpected reply to an add: {other:?}")),
                    );
                    Added::Unknown
                }
            };
        }
    }

    /// Adds `new` to the item count: written on the lane's connection
    /// (its reply read at the next use), or sent on its own when the lane
    /// has no connection left.
    fn count_on(&self, lane: &mut AddLane, new: u64, report: &mut AddReport) {
        if new == 0 {
            return;
        }
        let mut cmd = Batch::new();
        cmd.start(
            4,
            b"HINCRBY",
            layout::meta_key(&self.address.name).as_bytes(),
        );
        cmd.arg(b"items");
        cmd.arg_u64(new);
        cmd.end(0);
        if let Some(conn) = lane.conn.as_mut() {
            if conn.send_packed_command(cmd.all_bytes()).is_ok() {
                lane.unread += 1;
                return;
            }
            lane.reset();
        }
        if let Err(e) = self.store.run_batch(&cmd) {
            report.error.get_or_insert(e);
        }
    }
}
