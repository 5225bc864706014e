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
//! | `NAME.bgf.layer1`, `.layer2`, … | further layers of a scaling filter ([`layer_path`]) |
//! | `NAME.bgf.meta` | JSON `{"expansion": 2, "nonscaling": false}`: a filter with growth rules ([`meta_path`], [`Meta`]) |
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

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bloomgate_engine::{math, plan, random_seed, Access, Filter, Params};
use bloomgate_url::{KeyKind, MatchMode};
use serde::{Deserialize, Serialize};

use crate::journal::Lineage;
use crate::Error;

/// The most layers a chain may have (each one halves the rate: 64 halvings
/// are far past any useful rate, and it bounds lookups).
pub const MAX_LAYERS: usize = 64;

/// Growth settings of a scaling filter, stored in `NAME.bgf.meta`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Meta {
    /// Capacity multiplier of each new layer.
    pub expansion: u32,
    /// Refuse adds when full instead of growing.
    pub nonscaling: bool,
    /// The false-positive rate asked for, for the whole chain (absent in
    /// files written before it was recorded: layer 0's rate stands in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_rate: Option<f64>,
}

/// How a filter reacts when its newest layer is full.
#[derive(Clone, Debug, PartialEq)]
pub enum Growth {
    /// Built with the CLI: never grows, never refuses.
    Fixed,
    /// RedisBloom's rules (`BF.RESERVE`): grow, or refuse if non-scaling.
    Redis(Meta),
}

/// The path of layer `i` of the filter whose first layer is `base`.
pub fn layer_path(base: &Path, i: usize) -> PathBuf {
    if i == 0 {
        return base.to_path_buf();
    }
    let mut s = base.as_os_str().to_os_string();
    s.push(format!(".layer{i}"));
    PathBuf::from(s)
}

/// The path of the growth settings of the filter whose first layer is `base`.
pub fn meta_path(base: &Path) -> PathBuf {
    let mut s = base.as_os_str().to_os_string();
    s.push(".meta");
    PathBuf::from(s)
}

/// The rate the first layer of a new filter is planned for, given the rate
/// `p` asked for: half of it for a scaling filter (so that all later layers
/// fit under `p` too), `p` itself otherwise.
pub fn first_layer_rate(growth: &Growth, p: f64) -> f64 {
    match growth {
        Growth::Redis(m) if !m.nonscaling => math::scaling_layer_rate(p, 0),
        _ => p,
    }
}

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
/// ([`Layers::insert`]), which the caller publishes.
#[derive(Debug)]
pub struct Layers {
    /// Layer 0 first.
    pub layers: Vec<Arc<Filter>>,
    /// Key kind (from layer 0's header).
    pub kind: KeyKind,
    /// Match mode (from layer 0's header).
    pub mode: MatchMode,
    /// Growth behaviour.
    pub growth: Growth,
}

impl Layers {
    /// A single fixed layer.
    pub fn single(filter: Filter) -> Result<Layers, Error> {
        let (kind, mode) = key_rules(&filter, Path::new(""))?;
        Ok(Layers {
            layers: vec![Arc::new(filter)],
            kind,
            mode,
            growth: Growth::Fixed,
        })
    }

    /// Opens the filter whose first layer is the file `base`: its growth
    /// settings and, for a filter with growth settings, every further layer.
    pub fn open(base: &Path, access: Access) -> Result<Layers, Error> {
        let l0 = Filter::open(base, access)?;
        let (kind, mode) = key_rules(&l0, base)?;
        let mpath = meta_path(base);
        let growth = match std::fs::read(&mpath) {
            Ok(b) => Growth::Redis(serde_json::from_slice(&b).map_err(|e| Error::Layers {
                path: mpath.clone(),
                problem: format!("unreadable growth settings: {e}"),
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Growth::Fixed,
            Err(e) => {
                return Err(Error::Layers {
                    path: mpath,
                    problem: e.to_string(),
                })
            }
        };
        let mut layers = vec![Arc::new(l0)];
        for i in 1.. {
            let path = layer_path(base, i);
            if !path.exists() {
                break;
            }
            if growth == Growth::Fixed {
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
            growth,
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
    /// creation for a filter with growth settings (see [`first_layer_rate`]),
    /// else the rate its first layer was planned for.
    pub fn target_fp(&self) -> f64 {
        match &self.growth {
            Growth::Redis(Meta {
                error_rate: Some(p),
                ..
            }) => *p,
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
        let Growth::Redis(m) = &self.growth else {
            return Ok(None);
        };
        if m.nonscaling {
            return Ok(None);
        }
        let p = self.layers.last().expect("at least one layer").params();
        let cap = p.planned_items.saturating_mul(m.expansion.max(1) as u64);
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
            growth: self.growth.clone(),
        }
    }

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
        if self.contains(key) {
            return Ok((Added::Exists, None));
        }
        let last = self.layers.last().expect("at least one layer");
        let full = last.items() >= last.params().planned_items;
        if full {
            if let Growth::Redis(m) = &self.growth {
                if m.nonscaling && !force {
                    return Ok((Added::Full, None));
                }
                if !m.nonscaling {
                    match self.grow(limits, new_layer) {
                        Ok(grown) => {
                            let added = grown.layers.last().expect("grown").insert(key);
                            return Ok((
                                if added { Added::New } else { Added::Exists },
                                Some(grown),
                            ));
                        }
                        Err(_) if force => {}
                        Err(e) => return Err(e),
                    }
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_engine::Layout;

    fn file(path: &Path, items: u64, fp: f64, key: &[u8]) {
        let mut f = Filter::create_file(
            path,
            Params::from_plan(&plan(Layout::Blocked, items, fp).unwrap(), 3),
        )
        .unwrap();
        f.insert(key);
        f.persist().unwrap();
    }

    #[test]
    fn every_layer_is_read_and_a_stray_layer_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("f.bgf");
        file(&base, 100, 0.005, b"zero");
        file(&layer_path(&base, 1), 200, 0.0025, b"one");
        // Layer files without growth settings: answering from layer 0 alone
        // could miss items, so opening fails and says what to do.
        let e = Layers::open(&base, Access::ReadOnly)
            .unwrap_err()
            .to_string();
        assert!(e.contains("growth settings are missing"), "{e}");
        std::fs::write(meta_path(&base), br#"{"expansion":2,"nonscaling":false}"#).unwrap();
        let l = Layers::open(&base, Access::ReadOnly).unwrap();
        assert_eq!(l.layers.len(), 2);
        assert!(l.contains(b"zero") && l.contains(b"one"));
        // Without a recorded rate, layer 0's stands in.
        assert_eq!(l.target_fp(), 0.005);
        let mut out = Vec::new();
        l.contains_batch(&[&b"one"[..], b"zero", b"none"], &mut out, &mut Vec::new());
        assert_eq!(out, [true, true, false]);
        // The next layer: expansion × capacity at half the newest's rate.
        let next = l.next_layer().unwrap().unwrap();
        assert_eq!(next.planned_items, 400);
        assert_eq!(next.target_fp, 0.00125);
    }

    #[test]
    fn nonscaling_refuses_unless_forced_and_growth_respects_limits() {
        let mut p = Params::from_plan(&plan(Layout::Blocked, 2, 0.01).unwrap(), 1);
        p.planned_items = 2;
        let mut l = Layers::single(Filter::new(p).unwrap()).unwrap();
        l.growth = Growth::Redis(Meta {
            expansion: 2,
            nonscaling: true,
            error_rate: Some(0.01),
        });
        let mut mem = |p: Params| Filter::new(p).map_err(Error::from);
        for k in [&b"a"[..], b"b"] {
            assert_eq!(
                l.insert(k, false, GrowLimits::default(), &mut mem)
                    .unwrap()
                    .0,
                Added::New
            );
        }
        let (a, grown) = l
            .insert(b"c", false, GrowLimits::default(), &mut mem)
            .unwrap();
        assert_eq!((a, grown.is_none()), (Added::Full, true));
        assert!(!l.contains(b"c"));
        // An acknowledged add is never refused.
        assert_eq!(
            l.insert(b"c", true, GrowLimits::default(), &mut mem)
                .unwrap()
                .0,
            Added::New
        );
        assert!(l.contains(b"c"));
        // Scaling, but no room to grow: refused, or forced into the last layer.
        l.growth = Growth::Redis(Meta {
            expansion: 2,
            nonscaling: false,
            error_rate: None,
        });
        let tight = GrowLimits {
            max_bytes: l.bytes(),
        };
        let e = l.insert(b"d", false, tight, &mut mem).unwrap_err();
        assert!(matches!(e, Error::CannotGrow(_)), "{e}");
        assert_eq!(l.insert(b"d", true, tight, &mut mem).unwrap().0, Added::New);
        let (a, grown) = l
            .insert(b"e", false, GrowLimits::default(), &mut mem)
            .unwrap();
        assert_eq!(a, Added::New);
        let grown = grown.expect("grew");
        assert_eq!(grown.layers.len(), 2);
        assert!(grown.contains(b"e") && grown.contains(b"a"));
    }
}
