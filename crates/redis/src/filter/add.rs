//! Adds: a batch of keys set in their shards through the add script,
//! each item's outcome reported.
//!
//! An add ORs the item's bits into its block, in a short Lua script
//! ([`layout::ADD_MANY_SCRIPT`], up to [`layout::ADD_MANY_ITEMS`] items of
//! several shards per call) that first checks each shard's length with
//! `STRLEN`, so that an add never recreates an evicted shard as zeros
//! (measured cost in `docs/redis-layout.md`). Redis runs it atomically and
//! the old bits say whether the item was new — not (probably) present
//! before — exactly when some old bit was 0. Among writers racing on one
//! item, the first to run sets that bit and is told "new"; the others see
//! it set: add-if-absent in one round trip, which is what a fleet of
//! crawlers needs to fetch each URL once. (No one is told "new" for an item whose bits were all set
//! already: a false positive, at the filter's rate.) Each batch then adds
//! its new items to the metadata's count (`HINCRBY items`); the count is
//! statistics, the bits are the truth.
//!
//! A batch that fails part way (a node down) may have set the bits of
//! items whose replies never came back; retrying it would report them as
//! present, so nobody would be told they were new. [`RedisFilter::add_keys`]
//! therefore reports each item's [`Added`] outcome: the replies that came
//! back are honoured (per node, even when another node failed), and an
//! item sent without a reply is [`Added::Unknown`] — its claim must be
//! treated as new by whoever sent it, so that no item is claimed by
//! nobody (a duplicate claim is the price).

use redis::Value;

use super::{RedisFilter, PIPELINE};
use crate::batch::{Batch, Script};
use crate::client::Partial;
use crate::error::{Error, Result};
use crate::layout::{self, ItemPlace, BLOCK_BYTES};

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

/// One [`layout::ADD_MANY_SCRIPT`] call: its shards, each with the
/// positions of its items in the batch.
type AddCall = Vec<(u64, Vec<usize>)>;

/// What one lane of an add did: `(index, outcome)` per item sent, and the
/// failure that ended it.
type LaneResult = (Vec<(usize, Added)>, Option<Error>);

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
        if lanes == 1 {
            let all: Vec<usize> = (0..keys.len()).collect();
            let (done, error) = self.insert_lane(&places, &all);
            for (i, o) in done {
                report.outcomes[i] = o;
            }
            report.error = error;
        } else {
            // Keys are dealt to lanes by block: items of different blocks
            // share no bit, so the answers are those of running the adds
            // one after the other in the order given.
            let mut dealt: Vec<Vec<usize>> = vec![Vec::new(); lanes];
            for (i, p) in places.iter().enumerate() {
                let block = p.shard.wrapping_mul(self.meta.shard_blocks) + p.offset / BLOCK_BYTES;
                dealt[(block % lanes as u64) as usize].push(i);
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
            for (done, error) in parts {
                for (i, o) in done {
                    report.outcomes[i] = o;
                }
                if let Some(e) = error {
                    report.error.get_or_insert(e);
                }
            }
        }
        report
    }

    /// Adds the items `idx` (indexes into `places`, in order) on one
    /// connection per node, in [`layout::ADD_MANY_SCRIPT`] calls of up to
    /// [`layout::ADD_MANY_ITEMS`] items (see [`RedisFilter::add_calls`]);
    /// returns `(index, outcome)` for each item sent, and adds the new ones
    /// to the metadata's count. The first batch that fails ends the lane
    /// (its later items are not sent), with its error.
    ///
    /// Each item is its block's bytes ORed with its mask in the script, not
    /// a `BITFIELD … SET u1` per bit: Redis's time per scripted add went to
    /// the four arguments per bit (see [`layout::ADD_MANY_SCRIPT`]).
    /// Without a script, several items of one shard in one `BITFIELD`
    /// gained nothing (3.29 µs of Redis CPU per add with one item per
    /// command, 3.61 with 32: the arguments, not the commands, cost).
    fn insert_lane(&self, places: &[ItemPlace], idx: &[usize]) -> LaneResult {
        let mut done = Vec::with_capacity(idx.len());
        let mut cmds = Batch::new();
        let sha = layout::add_many_script_sha().as_bytes();
        for batch in idx.chunks(PIPELINE) {
            let mut partial = self.send_adds(&mut cmds, places, batch, Script::Sha(sha));
            // A node that has not cached the script (restarted, flushed,
            // a replica promoted) refuses `EVALSHA` with NOSCRIPT before
            // running anything: those items go again with the script's
            // text, which caches it there. (Another client's `EVAL` may
            // cache it part way through the pipeline; an item sent again
            // then runs after later ones of the batch, so of two equal
            // items the later may be the one told "new": still exactly
            // one is.)
            let unrun: Vec<usize> = (0..batch.len())
                .filter(|&j| {
                    matches!(&partial.replies[j], Some(Value::ServerError(e)) if e.code() == "NOSCRIPT")
                })
                .collect();
            if !unrun.is_empty() {
                let retry: Vec<usize> = unrun.iter().map(|&j| batch[j]).collect();
                let script = Script::Eval(layout::ADD_MANY_SCRIPT.as_bytes());
                let again = self.send_adds(&mut cmds, places, &retry, script);
                for (reply, &j) in again.replies.into_iter().zip(&unrun) {
                    partial.replies[j] = reply;
                }
                if let Some(e) = again.error {
                    partial.error.get_or_insert(e);
                }
            }
            let mut error = partial.error;
            let mut new = 0u64;
            for (reply, &i) in partial.replies.into_iter().zip(batch) {
                let outcome = match reply {
                    None => Added::Unknown,
                    Some(Value::Int(1)) => Added::New,
                    Some(Value::Int(0)) => Added::Present,
                    Some(Value::Int(n)) if n < 0 => {
                        let len = -(n + 1);
                        error.get_or_insert_with(|| {
                            self.damaged(
                                places[i].shard,
                                match len {
                                    0 => "missing".to_string(),
                                    len => format!(
                                        "{len} bytes long instead of {}",
                                        self.meta.shard_bytes(places[i].shard).end
                                            - self.meta.shard_bytes(places[i].shard).start
                                    ),
                                },
                            )
                        });
                        Added::NotAdded
                    }
                    Some(Value::ServerError(e)) => {
                        // Redis refuses a command before running it (OOM,
                        // READONLY, …), but a script could fail after its
                        // write: the outcome is not known.
                        error.get_or_insert_with(|| self.store.refused(e));
                        Added::Unknown
                    }
                    Some(other) => {
                        error.get_or_insert_with(|| {
                            self.store
                                .protocol(format!("unexpected reply to an add: {other:?}"))
                        });
                        Added::Unknown
                    }
                };
                new += (outcome == Added::New) as u64;
                done.push((i, outcome));
            }
            if new > 0 {
                // Statistics: counted even when the batch failed part way.
                if let Err(e) = self.store.one(
                    redis::cmd("HINCRBY")
                        .arg(layout::meta_key(&self.address.name))
                        .arg("items")
                        .arg(new)
                        .clone(),
                ) {
                    error.get_or_insert(e);
                }
            }
            if error.is_some() {
                return (done, error);
            }
        }
        (done, None)
    }

    /// Sends the items `idx` (indexes into `places`) as
    /// [`layout::ADD_MANY_SCRIPT`] calls named as `how` says, pipelined per
    /// node; per item of `idx`, in order, the reply that came back for it
    /// (its call's answer for it, or its call's error), with the first
    /// failure. An item whose call got no reply has none.
    fn send_adds(
        &self,
        cmds: &mut Batch,
        places: &[ItemPlace],
        idx: &[usize],
        how: Script<'_>,
    ) -> Partial {
        cmds.clear();
        let calls = self.add_calls(idx, places);
        let mut keys: Vec<std::borrow::Cow<'_, str>> = Vec::new();
        let mut pairs = Vec::with_capacity(2 * 64);
        for call in &calls {
            keys.clear();
            keys.extend(call.iter().map(|(shard, _)| self.shard_key(*shard)));
            let key_bytes: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
            let args = 3
                + call.len()
                + call
                    .iter()
                    .map(|(_, items)| 2 + 2 * items.len())
                    .sum::<usize>();
            cmds.start_script(args, how, &key_bytes);
            for (shard, items) in call {
                let r = self.meta.shard_bytes(*shard);
                cmds.arg_u64(r.end - r.start);
                cmds.arg_u64(items.len() as u64);
                for &j in items {
                    let p = &places[idx[j]];
                    cmds.arg_u64(p.offset);
                    p.mask_pairs(&mut pairs);
                    cmds.arg(&pairs);
                }
            }
            cmds.end(0);
        }
        let sent = self.store.run_partial(cmds);
        let mut replies: Vec<Option<Value>> = vec![None; idx.len()];
        let mut error = sent.error;
        for (call, reply) in calls.iter().zip(sent.replies) {
            let items = call.iter().flat_map(|(_, items)| items.iter().copied());
            let count: usize = call.iter().map(|(_, items)| items.len()).sum();
            match reply {
                Some(Value::Array(answers)) if answers.len() == count => {
                    for (j, a) in items.zip(answers) {
                        replies[j] = Some(a);
                    }
                }
                Some(Value::Array(answers)) => {
                    // Not what the script returns: the outcomes are unknown.
                    error.get_or_insert_with(|| {
                        self.store.protocol(format!(
                            "{} answers to an add of {count} items",
                            answers.len()
                        ))
                    });
                }
                other => {
                    for j in items {
                        replies[j] = other.clone();
                    }
                }
            }
        }
        Partial { replies, error }
    }

    /// Cuts the items `idx` into [`layout::ADD_MANY_SCRIPT`] calls: per
    /// call, its shards (in the order first met) and per shard the
    /// positions in `idx` of its items, in order. A call holds at most
    /// [`layout::ADD_MANY_ITEMS`] items and, in a cluster, the shards of
    /// one slot. Items of one shard keep their order: a shard's later items
    /// go in the same call or in a later one of the same node's pipeline.
    fn add_calls(&self, idx: &[usize], places: &[ItemPlace]) -> Vec<AddCall> {
        let cluster = self.store.is_cluster();
        let mut calls: Vec<AddCall> = Vec::new();
        // Per group (a slot in a cluster, one group otherwise): its open
        // call and the items in it.
        let mut open: std::collections::HashMap<u16, (usize, usize)> = Default::default();
        for (j, &i) in idx.iter().enumerate() {
            let p = &places[i];
            let group = if cluster {
                layout::key_slot(self.shard_key(p.shard).as_bytes())
            } else {
                0
            };
            let c = match open.get_mut(&group) {
                Some((c, items)) if *items < layout::ADD_MANY_ITEMS => {
                    *items += 1;
                    *c
                }
                _ => {
                    calls.push(Vec::new());
                    open.insert(group, (calls.len() - 1, 1));
                    calls.len() - 1
                }
            };
            let call = &mut calls[c];
            match call.iter_mut().find(|(shard, _)| *shard == p.shard) {
                Some((_, items)) => items.push(j),
                None => call.push((p.shard, vec![j])),
            }
        }
        calls
    }
}
