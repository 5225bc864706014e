//! A filter as it lives on disk: one or more layers, their files, and how
//! the chain grows.
//!
//! Everything that opens a filter — the CLI's `check`, `info`, `add`,
//! `union`, `whitelist`, and the server — goes through [`Layers::open`], so no
//! reader can see layer 0 alone and miss the items of a grown filter.
//!
//! # Files
//!
//! | file | what |
//! |---|---|
//! | `NAME.bgf` | the filter (its first layer) |
//! | `NAME.bgf.layer1`, `.layer2`, … | further layers of a scaling filter, or generations of a rotating one ([`layer_path`]) |
//! | `NAME.bgf.meta` | JSON `{"expansion": 2, "nonscaling": false, "error_rate": 0.01, "policy": "grow"}`: a filter with growth rules and a fill policy ([`meta_path`], [`Meta`], "Fill policies" below) |
//! | `NAME.bgf.whitelist` | the exact whitelist ([`crate::whitelist`]) |
//!
//! Inside a data directory served by `bloomgate serve` there are also the
//! live-add journal `NAME.live` and the write-ahead log `.bloomgate-wal/`:
//! see [`crate::datadir`].
//!
//! # Growth
//!
//! A filter with a `.meta` file behaves like a RedisBloom scalable filter: it
//! is a chain of layers; when the newest layer holds as many items as it was
//! planned for, an add first appends a layer with `expansion` times the
//! capacity and half the error rate. The first layer of a scaling filter is
//! planned for half the requested rate ([`first_layer_rate`]), so the compound
//! rate of the whole chain stays below the requested one however far it
//! grows (the series and its proof: `bloomgate_engine::math`, "Scaling
//! filters"). Lookups consult every layer, newest first. A `nonscaling` filter
//! refuses adds when full ([`Added::Full`]). A filter without a `.meta`
//! (built with the CLI) is *fixed*: it accepts adds past its planned size,
//! with a rising false-positive rate that `info` reports.
//!
//! The one exception to "every layer at or below its planned load" is
//! replay: an add that was acknowledged earlier is re-inserted even into a
//! full non-scaling filter (`force`), since losing it would be a false
//! negative, which is worse than a rate above the target.
//!
//! ## Saving
//!
//! [`Layers::save`] writes a state so that a crash at any point leaves the
//! previous state or the new one readable, never a mix that lost entries of
//! the previous one: every layer file is replaced atomically (bits only
//! gained, or a new file); a new generation is written to a file index that
//! the `.meta` on disk does not name; the `.meta` is written last and is
//! the commit point; files of dropped generations are removed after it.
//! A `.meta` of a rotating filter lists its generations' files (`ring`),
//! and only those are read; the first-layer file `NAME.bgf` always exists
//! (it gives the key rules) but holds an expired generation once the ring
//! has moved past it.

use std::path::Path;
use std::sync::Arc;

use bloomgate_engine::{math, plan, random_seed, Access, Filter, Layout, Params};
use bloomgate_url::{KeyKind, MatchMode};

use crate::journal::Lineage;
use crate::Error;

mod add;
pub mod fill;
pub mod meta;
mod save;
#[cfg(test)]
mod tests;

pub use fill::{
    check_policy, clear_items, unix_now, FillPolicy, Purpose, Rotate, DEFAULT_CLEAR_AT,
    DEFAULT_EXPANSION, DEFAULT_GENERATIONS, MAX_EXPANSION,
};
pub use meta::{layer_path, meta_path, Forgetting, Generation, Meta, Rules};

/// The most layers a chain may have (each one halves the rate: 64 halvings
/// are far past any useful rate, and it bounds lookups).
pub const MAX_LAYERS: usize = 64;

/// What one add did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// Newly added (set at least one bit).
    New,
    /// Already (probably) present in some layer.
    Exists,
    /// A non-scaling filter is full; nothing was added.
    Full,
}

/// Bounds on growth.
#[derive(Clone, Copy, Debug)]
pub struct GrowLimits {
    /// Largest total size of all layers, in bytes.
    pub max_bytes: u64,
}

impl Default for GrowLimits {
    fn default() -> Self {
        GrowLimits {
            max_bytes: u64::MAX,
        }
    }
}

/// A filter's layers and key rules. Immutable: growth makes a new chain
/// ([`Layers::insert`]), which the caller publishes. A clone shares the
/// layers' bits.
#[derive(Clone, Debug)]
pub struct Layers {
    /// Layer 0 first.
    pub layers: Vec<Arc<Filter>>,
    /// Key kind (from layer 0's header).
    pub kind: KeyKind,
    /// Match mode (from layer 0's header).
    pub mode: MatchMode,
    /// What the filter does when it is full.
    pub fill: FillPolicy,
    /// The false-positive rate of one lookup asked for the whole filter,
    /// as its `.meta` records it (`None`: fixed, or a `.meta` older than
    /// the record; layer 0's rate stands in).
    pub rate: Option<f64>,
    /// The filter's purpose and its forgetting policy's state.
    pub rules: Rules,
}

impl Layers {
    /// A single fixed layer.
    pub fn single(filter: Filter) -> Result<Layers, Error> {
        let (kind, mode) = key_rules(&filter, Path::new(""))?;
        Ok(Layers {
            layers: vec![Arc::new(filter)],
            kind,
            mode,
            fill: FillPolicy::Fixed,
            rate: None,
            rules: Rules::default(),
        })
    }

    /// A new in-memory filter of one layer (one generation) under `policy`:
    /// `params` are layer 0's (see [`Layers::plan_first`]), `p` the rate
    /// asked for the whole filter; `now` is the time in Unix seconds.
    /// Written by [`Layers::save`].
    pub fn create(
        params: Params,
        policy: &FillPolicy,
        purpose: Purpose,
        p: f64,
        now: u64,
    ) -> Result<Layers, Error> {
        let mut layers = Layers::single(Filter::new(params)?)?;
        layers.set_policy(policy, purpose, p, now)?;
        Ok(layers)
    }

    /// Gives a filter of one layer the fill policy `policy` and purpose
    /// `purpose`, `p` being the rate asked for the whole filter (refused as
    /// [`check_policy`] says). Written by [`Layers::save`] or
    /// [`Layers::meta_json`].
    pub fn set_policy(
        &mut self,
        policy: &FillPolicy,
        purpose: Purpose,
        p: f64,
        now: u64,
    ) -> Result<(), Error> {
        check_policy(policy, self.kind, purpose)?;
        if self.layers.len() != 1 {
            return Err(Error::Policy(
                "a policy is chosen for a new filter of one layer".into(),
            ));
        }
        self.fill = policy.clone();
        self.rate = (*policy != FillPolicy::Fixed).then_some(p);
        self.rules.purpose = purpose;
        self.rules.forgetting = match policy {
            FillPolicy::Rotate(_) => Forgetting::Rotate {
                ring: vec![Generation {
                    file: 0,
                    started: now,
                }],
            },
            FillPolicy::Clear { .. } => Forgetting::Clear { clears: 0 },
            _ => Forgetting::None,
        };
        Ok(())
    }

    /// The first layer's plan of a new filter under `policy` for `capacity`
    /// items (for rotate: its window) at the rate `p` for the whole filter:
    /// grow plans layer 0 for `p/2`, rotate a generation for `⌈N/(G−1)⌉`
    /// items at `1 − (1 − p)^(1/G)`, the others `capacity` at `p`.
    pub fn plan_first(
        policy: &FillPolicy,
        layout: Layout,
        capacity: u64,
        p: f64,
    ) -> Result<bloomgate_engine::Plan, Error> {
        let (n, rate) = match policy {
            FillPolicy::Grow { .. } => (capacity, math::scaling_layer_rate(p, 0)),
            FillPolicy::Rotate(r) => (r.span(), r.generation_rate(p)),
            _ => (capacity, p),
        };
        plan(layout, n, rate).map_err(|e| Error::Policy(e.to_string()))
    }

    /// The filter's fill policy.
    pub fn policy(&self) -> FillPolicy {
        self.fill.clone()
    }

    /// The growth settings of its `.meta` (`None` for a fixed filter): what
    /// the server writes for a filter it creates, and a `BF.SCANDUMP`
    /// header carries.
    pub fn growth_meta(&self) -> Option<Meta> {
        Meta::of(&self.fill, self.rate)
    }

    /// Opens the filter whose first layer is the file `base`: its growth
    /// settings and, for a filter with growth settings, every further layer.
    pub fn open(base: &Path, access: Access) -> Result<Layers, Error> {
        let l0 = Filter::open(base, access)?;
        let (kind, mode) = key_rules(&l0, base)?;
        let mpath = meta_path(base);
        let (fill, rate, rules) = match std::fs::read(&mpath) {
            Ok(b) => {
                let m = meta::parse_meta(&b, &mpath)?;
                (m.fill, m.growth.error_rate, m.rules)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                (FillPolicy::Fixed, None, Rules::default())
            }
            Err(e) => {
                return Err(Error::Layers {
                    path: mpath,
                    problem: e.to_string(),
                })
            }
        };
        if let Forgetting::Rotate { ring, .. } = &rules.forgetting {
            // The generations the .meta lists, and only those: other layer
            // files are generations dropped (or written by a save that did
            // not commit).
            let mut l0 = Some(l0);
            let mut layers = Vec::with_capacity(ring.len());
            for g in ring {
                let f = match (g.file, l0.take()) {
                    (0, Some(f)) => f,
                    (_, keep) => {
                        l0 = keep;
                        let path = layer_path(base, g.file as usize);
                        let f = Filter::open(&path, access)?;
                        let (k, m) = key_rules(&f, &path)?;
                        if (k, m) != (kind, mode) {
                            return Err(Error::Layers {
                                path,
                                problem: format!(
                                    "its key rules ({k}, {m}) differ from the first layer's ({kind}, {mode})"
                                ),
                            });
                        }
                        f
                    }
                };
                layers.push(Arc::new(f));
            }
            return Ok(Layers {
                layers,
                kind,
                mode,
                fill,
                rate,
                rules,
            });
        }
        let mut layers = vec![Arc::new(l0)];
        for i in 1.. {
            let path = layer_path(base, i);
            if !path.exists() {
                break;
            }
            if fill == FillPolicy::Fixed {
                // A layer file without growth settings: the filter's items
                // may be spread over it, so answering from layer 0 alone
                // could be a false negative.
                return Err(Error::Layers {
                    path: mpath,
                    problem: format!(
                        "{} exists but the growth settings are missing; restore {} (or remove the layer files if {} was rebuilt)",
                        path.display(),
                        mpath_name(base),
                        base.display()
                    ),
                });
            }
            if i >= MAX_LAYERS {
                return Err(Error::Layers {
                    path,
                    problem: format!("more than {MAX_LAYERS} layers"),
                });
            }
            let f = Filter::open(&path, access)?;
            let (k, m) = key_rules(&f, &path)?;
            if (k, m) != (kind, mode) {
                return Err(Error::Layers {
                    path,
                    problem: format!(
                        "its key rules ({k}, {m}) differ from the first layer's ({kind}, {mode})"
                    ),
                });
            }
            layers.push(Arc::new(f));
        }
        Ok(Layers {
            layers,
            kind,
            mode,
            fill,
            rate,
            rules,
        })
    }

    /// True if any layer (probably) contains the key.
    #[inline]
    pub fn contains(&self, key: &[u8]) -> bool {
        match self.layers.as_slice() {
            [one] => one.contains(key),
            many => many.iter().rev().any(|f| f.contains(key)),
        }
    }

    /// [`Layers::contains`] of many keys through each layer's pipelined
    /// batch lookup; `out` gets one answer per key. `scratch` is reused.
    pub fn contains_batch<T: AsRef<[u8]>>(
        &self,
        keys: &[T],
        out: &mut Vec<bool>,
        scratch: &mut Vec<bool>,
    ) {
        match self.layers.as_slice() {
            [one] => one.contains_batch(keys, out),
            many => {
                out.clear();
                out.resize(keys.len(), false);
                for f in many.iter().rev() {
                    f.contains_batch(keys, scratch);
                    for (h, &l) in out.iter_mut().zip(scratch.iter()) {
                        *h |= l;
                    }
                }
            }
        }
    }

    /// Items counted over all layers.
    pub fn items(&self) -> u64 {
        self.layers.iter().map(|f| f.items()).sum()
    }

    /// Sum of planned items over all layers (RedisBloom's "Capacity").
    pub fn capacity(&self) -> u64 {
        self.layers.iter().map(|f| f.params().planned_items).sum()
    }

    /// Bytes of bit arrays.
    pub fn bytes(&self) -> u64 {
        self.layers.iter().map(|f| f.params().bits / 8).sum()
    }

    /// Bits over all layers.
    pub fn bits(&self) -> u64 {
        self.layers.iter().map(|f| f.params().bits).sum()
    }

    /// Seed of layer 0: identifies this incarnation of the filter in the log.
    pub fn seed(&self) -> u64 {
        self.layers[0].params().seed
    }

    /// The false-positive rate the filter promises: the rate asked for at
    /// creation for a filter with a fill policy (see [`crate::spec`], "Rates"),
    /// else the rate its first layer was planned for.
    pub fn target_fp(&self) -> f64 {
        match self.rate {
            Some(p) if self.fill != FillPolicy::Fixed => p,
            _ => self.layers[0].params().target_fp,
        }
    }

    /// Predicted false-positive rate of one lookup at the current item
    /// counts: `1 − Π (1 − FPᵢ)` over the layers.
    pub fn predicted_fp(&self) -> f64 {
        math::compound_fp(self.layers.iter().map(|f| f.predicted_fp()))
    }

    /// The lineage marker of these layers (layer-0 seed and key rules).
    pub fn lineage(&self) -> Lineage {
        let p = self.layers[0].params();
        Lineage {
            seed: p.seed,
            key_kind: p.key_kind,
            match_mode: p.match_mode,
        }
    }

    /// The parameters of the layer that growth appends next: `expansion`
    /// times the newest layer's capacity at half its rate, same layout and
    /// key rules, a fresh seed. `None` for a filter that does not grow.
    pub fn next_layer(&self) -> Result<Option<Params>, Error> {
        let FillPolicy::Grow { expansion } = self.fill else {
            return Ok(None);
        };
        let p = self.layers.last().expect("at least one layer").params();
        let cap = p.planned_items.saturating_mul(expansion.max(1) as u64);
        let fp = (p.target_fp * 0.5).max(f64::MIN_POSITIVE);
        let plan = plan(p.layout, cap, fp).map_err(|e| Error::CannotGrow(e.to_string()))?;
        let mut params = Params::from_plan(&plan, random_seed());
        params.key_kind = p.key_kind;
        params.match_mode = p.match_mode;
        Ok(Some(params))
    }

    /// A new chain with `layer` appended.
    pub fn with_layer(&self, layer: Filter) -> Layers {
        let mut layers = self.layers.clone();
        layers.push(Arc::new(layer));
        Layers {
            layers,
            kind: self.kind,
            mode: self.mode,
            fill: self.fill.clone(),
            rate: self.rate,
            rules: self.rules.clone(),
        }
    }
}

fn mpath_name(base: &Path) -> String {
    meta_path(base)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The key kind and match mode a filter's header names.
pub(crate) fn key_rules(filter: &Filter, path: &Path) -> Result<(KeyKind, MatchMode), Error> {
    let p = filter.params();
    match (
        KeyKind::from_u8(p.key_kind),
        MatchMode::from_u8(p.match_mode),
    ) {
        (Some(k), Some(m)) => Ok((k, m)),
        _ => Err(Error::UnknownKind {
            path: filter
                .path()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| path.to_path_buf()),
            kind: p.key_kind,
            mode: p.match_mode,
        }),
    }
}
