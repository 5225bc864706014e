//! Fill policies: what a filter does when an add finds it full.
//!
//! A filter's fill policy is a [`FillPolicy`], stored in the
//! `.meta` JSON (see [`super::meta`]), stored in the
//! `.meta` JSON (`"policy": "grow" | "refuse" | "rotate" | "clear"`, plus
//! the settings of each; a `.meta` without `policy`, as older versions and
//! the server's `BF.RESERVE` write it, means `grow`, or `refuse` if
//! `nonscaling`; a filter without `.meta` is [`FillPolicy::Fixed`]).
//!
//! * **grow** — scalable layers, RedisBloom's default (`BF.RESERVE`) (Almeida, Baquero, Preguiça &
//!   Hutchison, "Scalable Bloom Filters", 2007; tightening ratio r = 1/2,
//!   growth factor `expansion`). Layer i is planned for `p·2^−(i+1)`, so the
//!   compound rate `1 − Π(1 − pᵢ) < Σ pᵢ < p` however many layers are added.
//!   Cost: lookups probe every layer; memory is about the sum of a geometric
//!   series, 2× the last layer for expansion 2.
//! * **refuse** — one layer; an add of a new item into a full filter fails
//!   ([`super::Added::Full`]): RedisBloom's `NONSCALING`. The rate never passes p.
//! * **rotate** — a ring of G generations over a window of N adds (and
//!   optionally T seconds); see "Rotation" below. Memory is fixed; old
//!   entries are forgotten.
//! * **clear** — the seeds' `autoClearRate`: when the fraction of bits set
//!   reaches `clear_at`, everything is cleared and filling starts over.
//!   Memory is fixed; every entry is forgotten at once.
//!
//! Rotate and clear *forget* entries, which for a blacklist is a false
//! negative: they are refused for url and host blacklists
//! ([`check_policy`]) and allowed for dedup and cache filters
//! ([`Purpose::Dedup`], or raw/email keys). They also rewrite existing
//! layers, which an in-place update cannot do crash-safely, so
//! [`super::Layers::insert`] (`add`'s in-place path) refuses them;
//! [`super::Layers::add`] applies them in memory and [`super::Layers::save`] writes the
//! result. A server applies them with [`super::Layers::add_published`] to a
//! published chain: its write-ahead log holds every add until a snapshot
//! has saved the chain with [`super::Layers::save`].
//!
//! # Rotation
//!
//! G ≥ 2 generations, oldest first, each a filter of the same size and seed
//! planned for `w = ⌈N / (G − 1)⌉` items. Adds go to the newest; when it
//! holds w items (or, with a time window T, is `⌈T / (G − 1)⌉` seconds
//! old), a new empty generation starts and, if there are more than G, the
//! oldest is dropped. An entry added into generation j is dropped when
//! generation j + G starts, which needs generations j+1 … j+G−1 to fill
//! first: at least `(G − 1)·w ≥ N` further new adds (or `(G − 1)·⌈T/(G − 1)⌉
//! ≥ T` seconds, whichever comes first). So an entry stays present for at
//! least one full window and is forgotten after at most `G·w ≈ N·G/(G − 1)`
//! adds. Lookups consult all G generations; each holds at most w items, so
//! with a per-generation rate `p_g` the union's rate is at most
//! `1 − (1 − p_g)^G`, and planning each generation for
//!
//! ```text
//! p_g = 1 − (1 − p)^(1/G)        (≈ p/G for small p)
//! ```
//!
//! keeps it at p (the same formula as a query of G lookups,
//! `bloomgate_engine::math::per_lookup_rate`). The generations share one
//! seed and size, so one hash of a key addresses all of them; their item
//! sets are disjoint and independent, so the false-positive events of one
//! absent key in different generations are independent given its position,
//! and the compound formula is exact in expectation. Cost against `refuse`
//! for the same N and p: G generations of N/(G−1) items at p/G, e.g. G = 4:
//! 4/3 of the items at a 4× tighter rate, about 1.6× the memory at p = 10⁻⁴;
//! more generations forget more smoothly (the window's excess is
//! `N/(G − 1)`) and cost more lookups.
//!
//! # Clearing
//!
//! The fill is not counted per add (a popcount of the array). For k probes
//! into m bits, n distinct items set an expected fraction
//! `1 − e^(−k·n/m)` of the bits, so the threshold `clear_at` is reached at
//! `n_clear = −(m/k)·ln(1 − clear_at)` items ([`clear_items`]); the filter
//! clears when its item count reaches that. The rate just before a clear is
//! the layout's prediction at `n_clear` (for classic `clear_at^k`:
//! 0.8^10 = 10.7 % for the seeds' 0.8 with k = 10 — which is why `info`
//! shows it; choose `clear_at` from the rate you can accept).
//!

use bloomgate_engine::math;
use bloomgate_url::KeyKind;
use serde::{Deserialize, Serialize};

use super::MAX_LAYERS;
use crate::Error;

/// Largest growth factor (RedisBloom's `EXPANSION` limit), on every
/// front end: `BF.RESERVE`, the HTTP API, the CLI and a `.meta` file.
pub const MAX_EXPANSION: u32 = 32_768;
/// The growth factor of a scaling filter when none is given (RedisBloom's).
pub const DEFAULT_EXPANSION: u32 = 2;
/// The generations of a rotating filter when none are given.
pub const DEFAULT_GENERATIONS: u32 = 4;
/// The fill ratio that clears a filter when none is given (the seeds'
/// `autoClearRate`).
pub const DEFAULT_CLEAR_AT: f64 = 0.8;

/// What a filter does when an add finds it full (see the module docs,
/// "Fill policies").
#[derive(Clone, Debug, PartialEq)]
pub enum FillPolicy {
    /// No growth settings (built with the CLI without `--policy`): takes
    /// adds past its planned size, with a rising false-positive rate.
    Fixed,
    /// Scalable layers: a new layer `expansion` times larger at half the rate.
    Grow {
        /// Capacity multiplier of each new layer.
        expansion: u32,
    },
    /// Adds of new items into a full filter fail (RedisBloom `NONSCALING`).
    Refuse,
    /// A ring of generations over a window.
    Rotate(Rotate),
    /// Clear everything when this fraction of the bits is set.
    Clear {
        /// The fill threshold, in (0, 1).
        at: f64,
    },
}

impl FillPolicy {
    /// The policy's name as `--policy` and the `.meta` spell it.
    pub fn name(&self) -> &'static str {
        match self {
            FillPolicy::Fixed => "fixed",
            FillPolicy::Grow { .. } => "grow",
            FillPolicy::Refuse => "refuse",
            FillPolicy::Rotate(_) => "rotate",
            FillPolicy::Clear { .. } => "clear",
        }
    }

    /// True for the policies that drop entries (rotate, clear).
    pub fn forgets(&self) -> bool {
        matches!(self, FillPolicy::Rotate(_) | FillPolicy::Clear { .. })
    }
}

impl std::fmt::Display for FillPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FillPolicy::Grow { expansion } => write!(f, "grow (expansion {expansion})"),
            FillPolicy::Rotate(r) => {
                write!(
                    f,
                    "rotate ({} generations, window {} adds",
                    r.generations, r.window
                )?;
                if let Some(t) = r.window_secs {
                    write!(f, " or {t} s")?;
                }
                f.write_str(")")
            }
            FillPolicy::Clear { at } => write!(f, "clear (at fill {at})"),
            p => f.write_str(p.name()),
        }
    }
}

/// Settings of [`FillPolicy::Rotate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rotate {
    /// Generations in the ring, G ≥ 2.
    pub generations: u32,
    /// Window in new adds, N ≥ 1: an entry stays present at least this long.
    pub window: u64,
    /// Window in seconds, T (optional): an entry stays present at least
    /// this long too, unless the count window ends first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_secs: Option<u64>,
}

impl Rotate {
    /// Checks the settings ([`check_rotate`]).
    pub fn validate(&self) -> Result<(), Error> {
        check_rotate(self).map_err(Error::from)
    }

    /// Items per generation, `w = ⌈N / (G − 1)⌉`.
    pub fn span(&self) -> u64 {
        self.window.div_ceil(self.generations.max(2) as u64 - 1)
    }

    /// Seconds per generation, `⌈T / (G − 1)⌉`.
    pub fn span_secs(&self) -> Option<u64> {
        self.window_secs
            .map(|t| t.div_ceil(self.generations.max(2) as u64 - 1))
    }

    /// The rate each generation is planned for so that the union of G stays
    /// at `p`: `1 − (1 − p)^(1/G)`.
    pub fn generation_rate(&self, p: f64) -> f64 {
        math::per_lookup_rate(p, self.generations)
    }
}

/// Seconds since the Unix epoch (the clock of rotation windows).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The number of distinct items at which `k` probes into `m` bits are
/// expected to have set the fraction `at` of them:
/// `−(m/k)·ln(1 − at)` (see the module docs, "Clearing").
pub fn clear_items(m_bits: u64, k: u32, at: f64) -> u64 {
    let n = -(m_bits as f64 / k.max(1) as f64) * (-at).ln_1p();
    if n.is_finite() {
        n.max(1.0) as u64
    } else {
        u64::MAX
    }
}

/// What a filter is for: who may forget entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Purpose {
    /// A blacklist (the default): an entry once added must stay.
    #[default]
    Blacklist,
    /// Deduplication or cache state (`bloomgate dedup`): forgetting old
    /// entries is acceptable, a forgotten entry is only seen once more.
    Dedup,
}

/// Fails unless `policy` may be used for a filter of key kind `kind` and
/// purpose `purpose` ([`check_fill`]): the forgetting
/// policies (rotate, clear) are refused for url and host blacklists, where
/// a forgotten entry is a blocked URL let through.
pub fn check_policy(policy: &FillPolicy, kind: KeyKind, purpose: Purpose) -> Result<(), Error> {
    check_fill(policy, kind, purpose).map_err(Error::from)
}

/// A fill policy's setting out of range, or a policy that a filter may
/// not use (wrapped in [`crate::SpecError::Fill`]).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FillError {
    /// A growth factor outside 1..=[`MAX_EXPANSION`].
    #[error("expansion {0}: it must be in 1..={max} for a growing filter", max = MAX_EXPANSION)]
    Expansion(u64),
    /// A ring of too few or too many generations.
    #[error("rotate needs 2 to {max} generations, got {0}", max = MAX_LAYERS)]
    Generations(u64),
    /// A rotation window of 0 adds or 0 seconds.
    #[error("a rotation window must be at least 1")]
    Window,
    /// A clear threshold outside (0, 1).
    #[error("the clear threshold is a fill ratio strictly between 0 and 1, got {0}")]
    ClearAt(f64),
    /// A forgetting policy for a url or host blacklist.
    #[error("the {policy} policy forgets entries, and a {kind} blacklist must never forget one (a forgotten entry is a blocked {kind} let through); use grow or refuse, or build a dedup/cache filter (bloomgate dedup, or --keys raw)")]
    Forgets {
        /// The policy's name.
        policy: &'static str,
        /// The key kind.
        kind: KeyKind,
    },
}

/// Checks a fill policy's settings, and that a filter of key kind `kind`
/// and purpose `purpose` may use it: the forgetting policies (rotate,
/// clear) are refused for url and host blacklists, where a forgotten entry
/// is a blocked URL let through.
pub fn check_fill(fill: &FillPolicy, kind: KeyKind, purpose: Purpose) -> Result<(), FillError> {
    match fill {
        FillPolicy::Grow { expansion } if !(1..=MAX_EXPANSION).contains(expansion) => {
            return Err(FillError::Expansion(u64::from(*expansion)))
        }
        FillPolicy::Rotate(r) => check_rotate(r)?,
        FillPolicy::Clear { at } if !(*at > 0.0 && *at < 1.0) => {
            return Err(FillError::ClearAt(*at))
        }
        _ => {}
    }
    if fill.forgets()
        && purpose == Purpose::Blacklist
        && matches!(kind, KeyKind::Url | KeyKind::Host)
    {
        return Err(FillError::Forgets {
            policy: fill.name(),
            kind,
        });
    }
    Ok(())
}

/// Checks a rotation's settings.
pub fn check_rotate(r: &Rotate) -> Result<(), FillError> {
    if r.generations < 2 || r.generations as usize > MAX_LAYERS {
        return Err(FillError::Generations(u64::from(r.generations)));
    }
    if r.window == 0 || r.window_secs == Some(0) {
        return Err(FillError::Window);
    }
    Ok(())
}
