//! [`RedisNamed`]: one filter of the [`RedisStore`](super::RedisStore), the
//! handle a request goes through.
//!
//! A handle holds what the server read of the filter when it opened it
//! (the metadata and whitelist, in a `bloomgate_redis::RedisFilter`) and
//! checks it against Redis before a request at most every
//! [`REVALIDATE_EVERY`]; or, when the filter could not be opened, why not
//! ([`Broken`]), which every request then answers. Its lookups and adds
//! are queued with those of every other connection (`coalesce`) and sent
//! as a few pipelines; the blocking calls wait for their queued answer.

use std::sync::{Arc, Mutex, RwLock};

use bloomgate_blacklist::Verdict;
use bloomgate_redis::{layout, RedisFilter};
use bloomgate_url::KeyError;

use super::{lock, ready, store_err, worker_gone, Health, REVALIDATE_EVERY};
use crate::store::{Counters, Info, LayerInfo, StoreError};
use crate::Limits;

mod coalesce;

pub use coalesce::{AddReply, Added, CheckReply, Checked, Reply};

/// One filter of the [`RedisStore`].
pub struct RedisNamed {
    name: String,
    /// The handle, or why the filter could not be opened (Redis was
    /// unreachable, or refused the credentials): every operation then
    /// fails with that error.
    pub(super) filter: Result<RwLock<RedisFilter>, Broken>,
    /// When the handle was last checked against the metadata.
    checked: Mutex<std::time::Instant>,
    health: Arc<Health>,
    lookups: Counters,
    /// The queues of its lookups and adds (see `coalesce`).
    batches: coalesce::Coalescer,
}

/// Why a filter's handle could not be opened.
#[derive(Clone, Debug)]
pub(super) enum Broken {
    /// Redis could not be reached: [`StoreError::Unavailable`].
    Unavailable(String),
    /// The request cannot succeed as configured (refused credentials, a
    /// bad password file): [`StoreError::Invalid`].
    Refused(String),
}

impl Broken {
    pub(super) fn error(&self) -> StoreError {
        match self {
            Broken::Unavailable(why) => StoreError::Unavailable(why.clone()),
            Broken::Refused(why) => StoreError::Invalid(why.clone()),
        }
    }
}

impl RedisNamed {
    pub(super) fn new(
        name: &str,
        filter: Result<RwLock<RedisFilter>, Broken>,
        limits: &Limits,
        health: Arc<Health>,
    ) -> Arc<RedisNamed> {
        Arc::new_cyclic(|me| {
            let batches = coalesce::Coalescer::new(me.clone(), limits.max_item_bytes);
            RedisNamed {
                name: name.to_string(),
                filter,
                checked: Mutex::new(std::time::Instant::now()),
                health,
                lookups: Counters::default(),
                batches,
            }
        })
    }

    /// Queues a lookup of `queries` with the filter's other lookups (see
    /// `coalesce`); the verdicts, one per query, arrive on the reply, with
    /// the key that matched when `matched`.
    pub fn check_later(&self, queries: &[&[u8]], matched: bool) -> CheckReply {
        match &self.filter {
            Ok(_) => self.batches.check(queries, matched),
            Err(broken) => Reply::ready(ready(Err(broken.error()))),
        }
    }

    pub(super) fn queue_add(&self, entries: &[&[u8]]) -> AddReply {
        match &self.filter {
            Ok(_) => self.batches.add(entries),
            Err(broken) => AddReply::ready(ready(Err(broken.error()))),
        }
    }

    /// Waits (blocking the thread) for a queued request's answer.
    pub(super) fn wait<T>(&self, rx: Reply<Result<T, StoreError>>) -> Result<T, StoreError> {
        rx.blocking_recv().unwrap_or_else(|_| Err(worker_gone()))
    }

    pub(super) fn read(&self) -> Result<std::sync::RwLockReadGuard<'_, RedisFilter>, StoreError> {
        let f = match &self.filter {
            Ok(f) => f,
            Err(broken) => return Err(broken.error()),
        };
        self.revalidate_if_due(f)?;
        Ok(f.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Checks the handle against the metadata when it was last checked
    /// [`REVALIDATE_EVERY`] ago or more (one request does, the others go
    /// on meanwhile). A filter deleted elsewhere is [`StoreError::NotFound`]
    /// (checked again at each request until it is pushed again).
    ///
    /// The check is made under the read lock (the lookups and adds in
    /// flight, which hold it for their round trips to Redis, go on); the
    /// write lock is taken only when something changed. Taking it for
    /// every check made every batch of every lane wait, once a second, for
    /// the slowest batch in flight.
    pub(super) fn revalidate_if_due(&self, f: &RwLock<RedisFilter>) -> Result<(), StoreError> {
        {
            let Ok(mut checked) = self.checked.try_lock() else {
                return Ok(());
            };
            if checked.elapsed() < REVALIDATE_EVERY {
                return Ok(());
            }
            *checked = std::time::Instant::now();
        }
        let current = f.read().unwrap_or_else(|p| p.into_inner()).is_current();
        let checked = match current {
            Ok(true) => return Ok(()),
            Ok(false) => f.write().unwrap_or_else(|p| p.into_inner()).revalidate(),
            Err(e) => Err(e),
        };
        match checked {
            Ok(_) => Ok(()),
            Err(e @ bloomgate_redis::Error::NotFound { .. }) => {
                // Check again at the next request.
                let mut checked = lock(&self.checked);
                if let Some(t) = checked.checked_sub(REVALIDATE_EVERY) {
                    *checked = t;
                }
                Err(store_err(e))
            }
            Err(e) => Err(store_err(e)),
        }
    }

    /// The filter's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its whitelist as Redis holds it now (with the changes other
    /// servers made, which lookups here see within about a second).
    pub fn whitelisted(&self) -> Result<bloomgate_blacklist::Whitelist, StoreError> {
        self.health.note(
            self.read()
                .and_then(|f| f.whitelist_now().map_err(store_err)),
        )
    }

    /// Answers queries as the filter's file would: `each` gets one verdict per query.
    pub fn check_batch(
        &self,
        queries: &[&[u8]],
        mut each: impl FnMut(Result<Verdict, KeyError>),
    ) -> Result<(), StoreError> {
        for v in self
            .health
            .note(self.wait(self.check_later(queries, true)))?
        {
            each(v);
        }
        Ok(())
    }

    /// Its lookup counters.
    pub fn lookups(&self) -> &Counters {
        &self.lookups
    }

    /// Information (the item count and whitelist size read from Redis now).
    pub fn info(&self) -> Result<Info, StoreError> {
        self.health.note(self.info_inner())
    }

    fn info_inner(&self) -> Result<Info, StoreError> {
        let f = self.read()?;
        let i = f.info().map_err(store_err)?;
        if let Some((shard, problem)) = i.damaged.first() {
            return Err(StoreError::Unavailable(format!(
                "{}: the filter is damaged: {} of {} shards are missing or of the wrong length, first shard {shard} ({}): {problem} (evicted by Redis's maxmemory policy, or deleted); push it again",
                self.name,
                i.damaged.len(),
                i.shards,
                layout::shard_key(&self.name, *shard)
            )));
        }
        let p = &f.meta().params;
        Ok(Info {
            name: self.name.clone(),
            key_kind: f.kind().as_str().into(),
            match_mode: f.mode().as_str().into(),
            layout: p.layout.name().into(),
            bits: p.bits,
            k: p.k,
            items: i.items,
            capacity: p.planned_items,
            fill_ratio: i.fill_ratio(),
            predicted_fp: f.predicted_fp(i.items),
            target_fp: p.target_fp,
            layers: 1,
            growth: "fixed".into(),
            expansion: None,
            policy: "fixed".into(),
            size_bytes: i.data_bytes,
            whitelist_entries: i.whitelist as usize,
            unsnapshotted_changes: false,
            layer_info: vec![LayerInfo {
                bytes: i.data_bytes,
                bits: p.bits,
                k: p.k,
                hash_bits: crate::store::info::hash_bits(p.hash),
                capacity: p.planned_items,
                items: i.items,
                target_fp: p.target_fp,
            }],
        })
    }
}
