//! Adds: a batch of keys set in their shards as transactions
//! ([`crate::txn`]: `WATCH` and `STRLEN` of the shards and `GETRANGE` of
//! the items' blocks, then `MULTI`, one `SETRANGE` per block that gains
//! bits, `EXEC`), each item's outcome reported.
//!
//! A shard of the wrong length (0: missing, evicted) is never written: its
//! items are not added and the add is an error naming it ([`Error::Damaged`]),
//! so an add never recreates an evicted shard as zeros. An item is new —
//! not (probably) present before — exactly when some of its bits was 0 in
//! its block as read under the transaction's `WATCH`. Among writers racing
//! on one item, the first whose `EXEC` runs sets that bit and is told
//! "new"; the others' `EXEC`s abort and their retries see it set: add-if-absent,
//! which is what a fleet of crawlers needs to fetch each URL once. (No one
//! is told "new" for an item whose bits were all set already: a false
//! positive, at the filter's rate.) The new items are added to the
//! metadata's count (`HINCRBY items`); the count is statistics, the bits
//! are the truth. On one server each transaction counts its own new items
//! (known from its reads before its `MULTI`), with its bits, so a small
//! batch costs two round trips, not three; in a cluster (where the
//! metadata key is in another slot than the shards) one `HINCRBY` at the
//! end of the call counts them.
//!
//! A batch that fails part way (a node down) may have set the bits of
//! items whose replies never came back; retrying it would report them as
//! present, so nobody would be told they were new. [`RedisFilter::add_keys`]
//! therefore reports each item's [`Added`] outcome: the replies that came
//! back are honoured (per node, even when another node failed), and an
//! item sent without a reply is [`Added::Unknown`] — its claim must be
//! treated as new by whoever sent it, so that no item is claimed by
//! nobody (a duplicate claim is the price).

use std::collections::HashMap;

use super::{RedisFilter, PIPELINE};
use crate::error::{Error, Result};
use crate::layout::{self, ItemPlace};
use crate::txn::{self, Outcome, Tx, CHAINS, TX_ITEMS};

/// What an add did to one item ([`RedisFilter::add_keys`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// The item was new: this add set one of its bits.
    New,
    /// Every bit of the item was set already.
    Present,
    /// The add was sent but no reply came back (its node failed): it may
    /// have run. Treat the item as new — its claim may be nobody else's.
    Unknown,
    /// The add did not run: it was not sent (an earlier batch failed), or
    /// Redis refused it before running it (a damaged shard).
    NotAdded,
}

/// The outcome of an add batch: one [`Added`] per key, and the first
/// failure, if any (then some items are [`Added::Unknown`] or
/// [`Added::NotAdded`]).
#[derive(Debug)]
pub struct AddReport {
    /// Per key, in order.
    pub outcomes: Vec<Added>,
    /// The first failure.
    pub error: Option<Error>,
}

impl AddReport {
    /// How many keys had outcome `what`.
    pub fn count(&self, what: Added) -> u64 {
        self.outcomes.iter().filter(|&&o| o == what).count() as u64
    }
}

/// What one lane of an add did: `(index, outcome)` per item sent, the
/// failure that ended it, and the new items it did not count.
type LaneResult = (Vec<(usize, Added)>, Option<Error>, u64);

impl RedisFilter {
    /// Adds normalized keys; returns, per key, whether it was new (not
    /// (probably) present before this add — among racing writers exactly
    /// one is told so; of equal keys in one call, the first). Adds the
    /// new ones to the item count. Any failure is an error of the whole
    /// call: a caller that must not lose claims uses
    /// [`RedisFilter::add_keys`].
    pub fn insert_keys<T: AsRef<[u8]>>(&self, keys: &[T]) -> Result<Vec<bool>> {
        let report = self.add_keys(keys);
        if let Some(e) = report.error {
            return Err(e);
        }
        Ok(report.outcomes.iter().map(|&o| o == Added::New).collect())
    }

    /// Adds normalized keys and reports each one's outcome ([`Added`]),
    /// also when the call fails part way: the replies that came back are
    /// honoured (per node), items sent without a reply are
    /// [`Added::Unknown`], and items not sent are [`Added::NotAdded`].
    /// Adds the new ones to the item count.
    pub fn add_keys<T: AsRef<[u8]>>(&self, keys: &[T]) -> AddReport {
        let places: Vec<ItemPlace> = keys.iter().map(|k| self.meta.place(k.as_ref())).collect();
        let lanes = self.lanes_for(keys.len());
        let mut report = AddReport {
            outcomes: vec![Added::NotAdded; keys.len()],
            error: None,
        };
        let mut uncounted = 0;
        if lanes == 1 {
            let all: Vec<usize> = (0..keys.len()).collect();
            let (done, error, left) = self.insert_lane(&places, &all);
            for (i, o) in done {
                report.outcomes[i] = o;
            }
            report.error = error;
            uncounted = left;
        } else {
            // Keys are dealt to lanes by shard: items of different shards
            // share no bit, so the answers are those of running the adds
            // one after the other in the order given; and no two lanes
            // watch one shard, so they never abort each other's
            // transactions.
            let mut dealt: Vec<Vec<usize>> = vec![Vec::new(); lanes];
            for (i, p) in places.iter().enumerate() {
                dealt[(p.shard % lanes as u64) as usize].push(i);
            }
            let parts: Vec<LaneResult> = std::thread::scope(|scope| {
                let workers: Vec<_> = dealt
                    .iter()
                    .map(|idx| {
                        let places = &places;
                        scope.spawn(move || self.insert_lane(places, idx))
                    })
                    .collect();
                workers
                    .into_iter()
                    .map(|w| w.join().expect("an add thread panicked"))
                    .collect()
            });
            for (done, error, left) in parts {
                for (i, o) in done {
                    report.outcomes[i] = o;
                }
                if let Some(e) = error {
                    report.error.get_or_insert(e);
                }
                uncounted += left;
            }
        }
        // Statistics: counted even when the call failed part way.
        if let Err(e) = self.count_items(uncounted) {
            report.error.get_or_insert(e);
        }
        report
    }

    /// Adds `n` new items to the metadata's item count (`HINCRBY`; nothing
    /// when `n` is 0).
    fn count_items(&self, n: u64) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.store
            .one(
                redis::cmd("HINCRBY")
                    .arg(layout::meta_key(&self.address.name))
                    .arg("items")
                    .arg(n)
                    .clone(),
            )
            .map(|_| ())
    }

    /// Adds the items `idx` (indexes into `places`, in order) as
    /// transactions (see [`RedisFilter::transactions`]), a pipeline of up
    /// to [`PIPELINE`] items at a time; returns `(index, outcome)` for each
    /// item sent, and the new items its transactions did not count (all of
    /// them in a cluster). A pipeline that fails ends the lane (its later
    /// items are not sent), with its first error.
    ///
    /// An item is its block read (`GETRANGE`, 64 bytes) and, when it
    /// gains bits, written back ORed with its mask (`SETRANGE`) under the
    /// transaction's `WATCH`, rather than a `BITFIELD` of its `k` bits: two
    /// short commands cost Redis 1.9 µs against 3.4 µs for a `BITFIELD` of
    /// 13 bits (see [`crate::txn`]).
    fn insert_lane(&self, places: &[ItemPlace], idx: &[usize]) -> LaneResult {
        let mut done = Vec::with_capacity(idx.len());
        let damaged = |shard: u64, problem: String| self.damaged(shard, problem);
        let count_key = (!self.store.is_cluster()).then(|| layout::meta_key(&self.address.name));
        let mut uncounted = 0;
        for batch in idx.chunks(PIPELINE) {
            let (mut txs, chains) = self.transactions(places, batch);
            for tx in &mut txs {
                tx.count_key.clone_from(&count_key);
            }
            let started = std::time::Instant::now();
            let transactions = txs.len();
            let run = txn::run(&self.store, txs, chains, &damaged);
            let ran = started.elapsed();
            let stats = run.stats;
            let error = run.error;
            let mut new = 0u64;
            for (i, o) in run.outcomes {
                let outcome = match o {
                    Outcome::Set(true) => Added::New,
                    Outcome::Set(false) => Added::Present,
                    Outcome::Unknown => Added::Unknown,
                    Outcome::NotRun => Added::NotAdded,
                };
                new += (outcome == Added::New) as u64;
                done.push((i, outcome));
            }
            uncounted += new.saturating_sub(run.counted);
            tracing::trace!(
                at_us = crate::epoch_us(),
                items = batch.len(),
                transactions,
                chains,
                rounds = stats.rounds,
                aborts = stats.aborts,
                connects = stats.connects,
                slept_us = stats.slept.as_micros() as u64,
                txn_us = ran.as_micros() as u64,
                counted = run.counted,
                "add pipeline"
            );
            if error.is_some() {
                return (done, error, uncounted);
            }
        }
        (done, None, uncounted)
    }

    /// Cuts the items `idx` into transactions of at most [`TX_ITEMS`]
    /// items: in a cluster, each of one slot's shards; on one server, of
    /// any shards. Returns them with the number of chains (connections
    /// per node, [`CHAINS`] at most) they are spread over; every item of a
    /// shard is on one chain, in order, so a shard's later items go in the
    /// same transaction or a later one of the same connection.
    fn transactions(&self, places: &[ItemPlace], idx: &[usize]) -> (Vec<Tx>, usize) {
        let cluster = self.store.is_cluster();
        // On one server a chain per 512 items (eight transactions) at
        // least: a server's small batches take one connection each. In a
        // cluster a transaction is one slot's items, usually one or two,
        // so every chain counts.
        let chains = match cluster {
            true => CHAINS,
            false => (idx.len() / (8 * TX_ITEMS)).clamp(1, CHAINS),
        };
        let mut txs: Vec<Tx> = Vec::new();
        // Per (slot, chain): its open transaction and the items in it.
        let mut open: HashMap<(u16, usize), (usize, usize)> = HashMap::new();
        for &i in idx {
            let p = &places[i];
            let key = self.shard_key(p.shard);
            let slot = match cluster {
                true => layout::key_slot(key.as_bytes()),
                false => 0,
            };
            let chain = spread(if cluster { slot as u64 } else { p.shard }) % chains;
            let t = match open.get_mut(&(slot, chain)) {
                Some((t, items)) if *items < TX_ITEMS => {
                    *items += 1;
                    *t
                }
                _ => {
                    txs.push(Tx::new(slot, chain));
                    open.insert((slot, chain), (txs.len() - 1, 1));
                    txs.len() - 1
                }
            };
            let r = self.meta.shard_bytes(p.shard);
            txs[t].push(p.shard, &key, r.end - r.start, i, p.offset, p.mask);
        }
        (txs, chains)
    }
}

impl RedisFilter {
    /// Sets Redis bit `bit` of shard `shard` again, on `conn` (a
    /// connection to the shard's master), guarded as every add is: `WATCH`
    /// and `STRLEN` of the shard, then `MULTI`, `BITFIELD`, `EXEC` (sent
    /// again if `EXEC` aborts). A shard missing or of the wrong length is
    /// [`Error::Damaged`] and is not written. Setting a bit that is set
    /// changes nothing, but it is a write: it enters the replication stream
    /// after everything the master ran before it, which a `WAIT` sent next
    /// on the same connection then waits for.
    pub fn set_bit_again(&self, conn: &mut redis::Connection, shard: u64, bit: u64) -> Result<()> {
        let key = self.shard_key(shard);
        let r = self.meta.shard_bytes(shard);
        let len = r.end - r.start;
        let err = |e| Error::from_redis(self.store.server(), e);
        for _ in 0..=txn::MAX_ABORTS {
            redis::cmd("WATCH")
                .arg(key.as_ref())
                .query::<()>(conn)
                .map_err(err)?;
            let have: i64 = redis::cmd("STRLEN")
                .arg(key.as_ref())
                .query(conn)
                .map_err(err)?;
            if have < 0 || have as u64 != len {
                redis::cmd("UNWATCH").query::<()>(conn).map_err(err)?;
                return Err(self.damaged(
                    shard,
                    match have {
                        0 => "missing".to_string(),
                        n => format!("{n} bytes long instead of {len}"),
                    },
                ));
            }
            let replies: Vec<redis::Value> = redis::pipe()
                .cmd("MULTI")
                .cmd("BITFIELD")
                .arg(key.as_ref())
                .arg("SET")
                .arg("u1")
                .arg(bit)
                .arg(1)
                .cmd("EXEC")
                .query(conn)
                .map_err(err)?;
            match replies.last() {
                // Aborted: the shard changed since the WATCH; check again.
                Some(redis::Value::Nil) => continue,
                Some(redis::Value::Array(_)) => return Ok(()),
                other => {
                    return Err(self
                        .store
                        .protocol(format!("unexpected reply to EXEC: {other:?}")))
                }
            }
        }
        Err(self.store.protocol(format!(
            "the shard {shard} changed under each of {} tries to set a bit again",
            txn::MAX_ABORTS
        )))
    }
}

/// A chain for a shard or slot number: a multiplicative hash, so that the
/// chains of one lane (whose shards are alike modulo the lanes) differ.
fn spread(n: u64) -> usize {
    (n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize
}
