//! Adding to a chain under its fill policy: RedisBloom's in-place add
//! ([`Layers::insert`]), and the adds that may rotate or clear
//! ([`Layers::add`], [`Layers::add_batch`], [`Layers::add_published`]).

use std::sync::Arc;

use bloomgate_engine::{Filter, Params, Prepared};

use super::{
    clear_items, Added, FillPolicy, Forgetting, Generation, GrowLimits, Layers, Rotate, MAX_LAYERS,
};
use crate::Error;

impl Layers {
    /// RedisBloom's add of one normalized key: present in any layer →
    /// [`Added::Exists`]; newest layer full → grow first (or
    /// [`Added::Full`] if non-scaling); then insert into the newest layer.
    ///
    /// Growing calls `new_layer` with the new layer's parameters (an
    /// in-memory filter for the server, a new file for the CLI) and returns
    /// the grown chain, which the caller must publish in place of `self`.
    /// With `force` (re-inserting an add acknowledged earlier) it never
    /// refuses: a full non-scaling filter, or one at its size limit, takes
    /// the key into its newest layer anyway.
    pub fn insert(
        &self,
        key: &[u8],
        force: bool,
        limits: GrowLimits,
        new_layer: &mut dyn FnMut(Params) -> Result<Filter, Error>,
    ) -> Result<(Added, Option<Layers>), Error> {
        if self.rules.forgetting != Forgetting::None {
            return Err(Error::Policy(format!(
                "this filter's fill policy is {}: it drops or clears existing layers, which only `bloomgate dedup --state FILE` does (in memory, then saved atomically); it cannot be changed in place",
                self.policy()
            )));
        }
        if self.contains(key) {
            return Ok((Added::Exists, None));
        }
        let last = self.layers.last().expect("at least one layer");
        let full = last.items() >= last.params().planned_items;
        if full {
            match self.fill {
                FillPolicy::Refuse if !force => return Ok((Added::Full, None)),
                FillPolicy::Grow { .. } => match self.grow(limits, new_layer) {
                    Ok(grown) => {
                        let added = grown.layers.last().expect("grown").insert(key);
                        return Ok((if added { Added::New } else { Added::Exists }, Some(grown)));
                    }
                    Err(_) if force => {}
                    Err(e) => return Err(e),
                },
                _ => {}
            }
        }
        Ok((
            if last.insert(key) {
                Added::New
            } else {
                Added::Exists
            },
            None,
        ))
    }

    /// Adds one normalized key under the filter's fill policy, changing
    /// this chain in place: grown layers and new generations are in-memory
    /// filters until [`Layers::save`] writes them. `now` is the time in Unix
    /// seconds (for a rotation's time window).
    ///
    /// The answer is exact as [`Filter::insert`]'s: [`Added::New`] only if
    /// no layer (probably) held the key. [`Added::Full`] only under
    /// [`FillPolicy::Refuse`].
    pub fn add(&mut self, key: &[u8], now: u64) -> Result<Added, Error> {
        self.add_with(key, None, now)
    }

    /// [`Layers::add`] for a published chain that readers hold: the key
    /// goes into the shared newest layer (its bits are atomic), and when the
    /// add started a generation or cleared the filter the changed chain is
    /// returned for the caller to publish in place of `self`. Adds must be
    /// serialized by the caller (as for [`Layers::insert`]).
    pub fn add_published(&self, key: &[u8], now: u64) -> Result<(Added, Option<Layers>), Error> {
        let mut next = self.clone();
        let added = next.add(key, now)?;
        let changed = next.layers.len() != self.layers.len()
            || next
                .layers
                .iter()
                .zip(&self.layers)
                .any(|(a, b)| !Arc::ptr_eq(a, b));
        Ok((added, changed.then_some(next)))
    }

    /// [`Layers::add`] of many keys in order, one answer per key in `out`
    /// (cleared first). Each key is hashed once for all layers that share
    /// the newest layer's size and seed (every generation of a ring), and
    /// the next keys' blocks are prefetched while one is added, so a filter
    /// larger than the CPU caches keeps several memory reads in flight.
    pub fn add_batch<T: AsRef<[u8]>>(
        &mut self,
        keys: &[T],
        now: u64,
        out: &mut Vec<Added>,
    ) -> Result<(), Error> {
        /// Keys hashed ahead of the one being added (the engine's pipeline
        /// depth: about the line-fill buffers of a core).
        const AHEAD: usize = 16;
        out.clear();
        out.reserve(keys.len());
        if self.rules.forgetting != Forgetting::None {
            self.rotate_by_time(now)?;
        }
        let mut ring = [None::<Prepared>; AHEAD];
        let mut owner = Arc::as_ptr(self.layers.last().expect("a layer"));
        for (i, k) in keys.iter().take(AHEAD).enumerate() {
            ring[i] = Some(self.prepare_ahead(k.as_ref()));
        }
        for i in 0..keys.len() {
            let newest = Arc::as_ptr(self.layers.last().expect("a layer"));
            if newest != owner {
                // The chain changed (grown, rotated, cleared): the hashes
                // ahead were for another layer.
                owner = newest;
                for (j, slot) in ring.iter_mut().enumerate() {
                    *slot = keys.get(i + j).map(|k| self.prepare_ahead(k.as_ref()));
                }
                ring.rotate_right(i % AHEAD);
            }
            let p = ring[i % AHEAD].take();
            let added = self.add_with(keys[i].as_ref(), p.as_ref(), now)?;
            out.push(added);
            if let Some(next) = keys.get(i + AHEAD) {
                ring[i % AHEAD] = Some(self.prepare_ahead(next.as_ref()));
            }
        }
        Ok(())
    }

    /// Hashes `key` for the newest layer and prefetches its block there and
    /// in the other layers of the same addressing.
    fn prepare_ahead(&self, key: &[u8]) -> Prepared {
        let newest = self.layers.last().expect("a layer");
        let p = newest.prepare(key);
        for f in &self.layers {
            if same_addressing(f.params(), newest.params()) {
                f.prefetch(&p);
            }
        }
        p
    }

    /// The add of [`Layers::add`], with `p` the key's hash for the newest
    /// layer when known.
    fn add_with(&mut self, key: &[u8], p: Option<&Prepared>, now: u64) -> Result<Added, Error> {
        if let FillPolicy::Rotate(Rotate {
            window_secs: Some(_),
            ..
        }) = &self.fill
        {
            self.rotate_by_time(now)?;
        }
        let (newest, older) = self.layers.split_last().expect("a layer");
        let np = newest.params();
        let in_layer = |f: &Filter| match p {
            Some(p) if same_addressing(f.params(), np) => f.contains_prepared(p),
            _ => f.contains(key),
        };
        if older.iter().rev().any(|f| in_layer(f)) {
            return Ok(Added::Exists);
        }
        if newest.items() >= self.newest_limit() {
            if in_layer(newest) {
                return Ok(Added::Exists);
            }
            match self.policy() {
                FillPolicy::Fixed => {}
                FillPolicy::Refuse => return Ok(Added::Full),
                FillPolicy::Grow { .. } => {
                    let grown = self.grow(GrowLimits::default(), &mut |p| {
                        Filter::new(p).map_err(Error::from)
                    })?;
                    *self = grown;
                    return Ok(self.insert_newest(key, None));
                }
                FillPolicy::Rotate(_) => {
                    self.rotate_once(now)?;
                    return Ok(self.insert_newest(key, p));
                }
                FillPolicy::Clear { .. } => {
                    self.clear()?;
                    return Ok(self.insert_newest(key, p));
                }
            }
        }
        Ok(self.insert_newest(key, p))
    }

    /// Inserts into the newest layer (`p`: the key's hash for it, if known).
    fn insert_newest(&self, key: &[u8], p: Option<&Prepared>) -> Added {
        let newest = self.layers.last().expect("a layer");
        let new = match p {
            Some(p) => newest.insert_prepared(p),
            None => newest.insert(key),
        };
        if new {
            Added::New
        } else {
            Added::Exists
        }
    }

    /// The item count at which the newest layer is full: its plan, or for
    /// clear the count that reaches the fill threshold.
    fn newest_limit(&self) -> u64 {
        let p = self.layers.last().expect("a layer").params();
        match &self.fill {
            FillPolicy::Clear { at } => clear_items(p.bits, p.k, *at),
            _ => p.planned_items,
        }
    }

    /// Starts the generations a time window has made due: one per
    /// `⌈T/(G−1)⌉` seconds the newest has run, at most G.
    fn rotate_by_time(&mut self, now: u64) -> Result<(), Error> {
        let (FillPolicy::Rotate(rotate), Forgetting::Rotate { ring }) =
            (&self.fill, &self.rules.forgetting)
        else {
            return Ok(());
        };
        let Some(span) = rotate.span_secs() else {
            return Ok(());
        };
        let started = ring.last().map_or(now, |g| g.started);
        let due = (now.saturating_sub(started) / span).min(rotate.generations as u64);
        for _ in 0..due {
            self.rotate_once(now)?;
        }
        Ok(())
    }

    /// Starts a new, empty generation and drops the oldest beyond G. Its
    /// file is the lowest index that neither a live generation nor the
    /// `.meta` on disk names, so saving it never overwrites a generation of
    /// the committed state.
    fn rotate_once(&mut self, now: u64) -> Result<(), Error> {
        let (FillPolicy::Rotate(rotate), Forgetting::Rotate { ring }) =
            (&self.fill, &mut self.rules.forgetting)
        else {
            return Ok(());
        };
        let used = |i: &u32| ring.iter().any(|g| g.file == *i) || self.rules.committed.contains(i);
        let file = (0..).find(|i| !used(i)).expect("a free index");
        let params = self.layers.last().expect("a layer").params().clone();
        self.layers.push(Arc::new(Filter::new(params)?));
        ring.push(Generation { file, started: now });
        while ring.len() > rotate.generations as usize {
            ring.remove(0);
            self.layers.remove(0);
        }
        Ok(())
    }

    /// Replaces the (single) layer by an empty one of the same parameters.
    fn clear(&mut self) -> Result<(), Error> {
        let params = self.layers.last().expect("a layer").params().clone();
        self.layers = vec![Arc::new(Filter::new(params)?)];
        if let Forgetting::Clear { clears, .. } = &mut self.rules.forgetting {
            *clears += 1;
        }
        Ok(())
    }

    fn grow(
        &self,
        limits: GrowLimits,
        new_layer: &mut dyn FnMut(Params) -> Result<Filter, Error>,
    ) -> Result<Layers, Error> {
        let params = self.next_layer()?.expect("only scaling filters grow");
        if self.layers.len() >= MAX_LAYERS
            || self.bytes().saturating_add(params.bits / 8) > limits.max_bytes
        {
            return Err(Error::CannotGrow("size limit reached".into()));
        }
        Ok(self.with_layer(new_layer(params)?))
    }
}

/// True if a key's hash for a filter of parameters `a` addresses one of
/// parameters `b` too (same layout, size, probes, seed and hash id: two
/// hash ids place a key at different bits).
fn same_addressing(a: &Params, b: &Params) -> bool {
    a.layout == b.layout && a.bits == b.bits && a.k == b.k && a.seed == b.seed && a.hash == b.hash
}
