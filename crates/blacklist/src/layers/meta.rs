//! The `NAME.bgf.meta` file: a filter's fill policy on disk.
//!
//! A JSON object. Its first fields are RedisBloom's growth settings
//! ([`Meta`]: `expansion`, `nonscaling`, and `error_rate`, the per-lookup
//! rate asked for the whole filter), which every version reads; the fill
//! policy's own fields follow (`policy`, `purpose`, and for rotate
//! `generations`, `window`, `window_secs`, `ring`, for clear `clear_at`,
//! `clears`). Keys are written in sorted order:
//!
//! ```text
//! {"error_rate":0.01,"expansion":4,"nonscaling":false,"policy":"grow"}
//! {"clear_at":0.5,"clears":2,"error_rate":0.01,"expansion":2,"nonscaling":true,"policy":"clear","purpose":"dedup"}
//! ```
//!
//! A `.meta` without `policy` (older versions, and the server's
//! `BF.RESERVE`, which writes `{"expansion":2,"nonscaling":false,"error_rate":0.01}`)
//! means grow, or refuse if `nonscaling`. The forgetting policies (rotate,
//! clear) are written `nonscaling`, so that a reader that knows only the
//! growth settings never grows them. A filter without a `.meta` is fixed.

use std::path::{Path, PathBuf};

use bloomgate_url::KeyKind;
use serde::{Deserialize, Serialize};

use super::fill::{check_policy, FillPolicy, Purpose, Rotate, DEFAULT_EXPANSION, MAX_EXPANSION};
use crate::Error;

/// RedisBloom's growth settings, the first fields of `NAME.bgf.meta` (and
/// of a `BF.SCANDUMP` header).
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

impl Meta {
    /// Checks the settings are in range: an expansion of at most
    /// [`MAX_EXPANSION`] (0 only for a non-scaling filter) and an error rate,
    /// when recorded, strictly between 0 and 1.
    pub fn validate(&self) -> Result<(), String> {
        if self.expansion > MAX_EXPANSION || (self.expansion == 0 && !self.nonscaling) {
            return Err(format!(
                "expansion {} (1..={MAX_EXPANSION}, or 0 when non-scaling)",
                self.expansion
            ));
        }
        if let Some(r) = self.error_rate {
            if !(r > 0.0 && r < 1.0) {
                return Err(format!("error rate {r} (0 < rate < 1)"));
            }
        }
        Ok(())
    }

    /// The growth settings of a fill policy (`None` for fixed, which has no
    /// `.meta`), `rate` the per-lookup rate recorded.
    pub fn of(policy: &FillPolicy, rate: Option<f64>) -> Option<Meta> {
        let (expansion, nonscaling) = match policy {
            FillPolicy::Fixed => return None,
            FillPolicy::Grow { expansion } => ((*expansion).max(1), false),
            _ => (DEFAULT_EXPANSION, true),
        };
        Some(Meta {
            expansion,
            nonscaling,
            error_rate: rate,
        })
    }

    /// The fill policy these growth settings alone describe (no policy
    /// fields): grow, or refuse if non-scaling.
    pub fn policy(&self) -> FillPolicy {
        if self.nonscaling {
            FillPolicy::Refuse
        } else {
            FillPolicy::Grow {
                expansion: self.expansion,
            }
        }
    }

    /// Parses and checks the bytes of a `NAME.bgf.meta` file (at `path`,
    /// for the error): the growth settings and the fill-policy fields
    /// they must agree with.
    pub fn parse_file(bytes: &[u8], path: &Path) -> Result<Meta, Error> {
        parse_meta(bytes, path).map(|m| m.growth)
    }
}

/// One generation of a rotating filter, as the `.meta` lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generation {
    /// Its file: [`layer_path`]`(base, file)`.
    pub file: u32,
    /// When it started, in seconds since the Unix epoch.
    pub started: u64,
}

/// The fill policy's state: what the filter is for, and what a
/// forgetting policy has done so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rules {
    /// What the filter is for.
    pub purpose: Purpose,
    /// The forgetting policy's state, if any (rotate, clear).
    pub forgetting: Forgetting,
    /// The layer files the `.meta` on disk names (rotate): a save never
    /// overwrites one of them with a new generation.
    pub(super) committed: Vec<u32>,
}

/// The forgetting policies' own state (their settings are the
/// [`FillPolicy`]'s).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Forgetting {
    /// None: fixed, grow, refuse.
    #[default]
    None,
    /// A ring of generations; `ring[i]` describes `Layers::layers[i]`.
    Rotate {
        /// The live generations, oldest first.
        ring: Vec<Generation>,
    },
    /// Clear at a fill threshold.
    Clear {
        /// How many times the filter was cleared.
        clears: u64,
    },
}

/// The policy fields of the `.meta` JSON (beside [`Meta`]'s).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct PolicyFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    purpose: Option<Purpose>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    generations: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    window: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    window_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ring: Option<Vec<Generation>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    clear_at: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    clears: Option<u64>,
}

/// A `.meta` read and checked.
#[derive(Clone, Debug)]
pub(super) struct ParsedMeta {
    /// The growth settings as written.
    pub growth: Meta,
    /// The fill policy.
    pub fill: FillPolicy,
    /// Purpose and forgetting state.
    pub rules: Rules,
}

/// Reads a `.meta`: its growth settings, then the policy fields, checked
/// against them.
pub(super) fn parse_meta(bytes: &[u8], path: &Path) -> Result<ParsedMeta, Error> {
    let bad = |problem: String| Error::Layers {
        path: path.to_path_buf(),
        problem,
    };
    let meta: Meta = serde_json::from_slice(bytes)
        .map_err(|e| bad(format!("unreadable growth settings: {e}")))?;
    meta.validate().map_err(bad)?;
    let f: PolicyFields =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("unreadable fill policy: {e}")))?;
    let mut rules = Rules {
        purpose: f.purpose.unwrap_or_default(),
        ..Rules::default()
    };
    let fill = match f.policy.as_deref() {
        None => meta.policy(),
        Some("grow") if !meta.nonscaling => meta.policy(),
        Some("refuse") if meta.nonscaling => meta.policy(),
        Some(p @ ("grow" | "refuse")) => {
            return Err(bad(format!(
                "policy {p} contradicts \"nonscaling\": {}",
                meta.nonscaling
            )))
        }
        Some("rotate") => {
            let (Some(generations), Some(window), Some(ring)) = (f.generations, f.window, f.ring)
            else {
                return Err(bad(
                    "policy rotate needs \"generations\", \"window\" and \"ring\"".into(),
                ));
            };
            let rotate = Rotate {
                generations,
                window,
                window_secs: f.window_secs,
            };
            rotate.validate()?;
            if ring.is_empty() || ring.len() > generations as usize {
                return Err(bad(format!(
                    "{} generations listed for a ring of {generations}",
                    ring.len()
                )));
            }
            rules.committed = ring.iter().map(|g| g.file).collect();
            let mut files = rules.committed.clone();
            files.sort_unstable();
            files.dedup();
            if files.len() != ring.len() {
                return Err(bad("two generations share a file".into()));
            }
            rules.forgetting = Forgetting::Rotate { ring };
            FillPolicy::Rotate(rotate)
        }
        Some("clear") => {
            let at = f
                .clear_at
                .ok_or_else(|| bad("policy clear needs \"clear_at\"".into()))?;
            check_policy(&FillPolicy::Clear { at }, KeyKind::Raw, Purpose::Dedup)?;
            rules.forgetting = Forgetting::Clear {
                clears: f.clears.unwrap_or(0),
            };
            FillPolicy::Clear { at }
        }
        Some(other) => {
            return Err(bad(format!(
                "unknown fill policy {other:?} (written by a newer bloomgate?)"
            )))
        }
    };
    Ok(ParsedMeta {
        growth: meta,
        fill,
        rules,
    })
}

/// The `.meta` JSON of a filter under `fill` (`None` for fixed): the
/// growth settings, then the policy's fields, keys in sorted order.
pub(super) fn meta_json(fill: &FillPolicy, rate: Option<f64>, rules: &Rules) -> Option<Vec<u8>> {
    let meta = Meta::of(fill, rate)?;
    let mut fields = PolicyFields {
        policy: Some(fill.name().into()),
        purpose: (rules.purpose != Purpose::Blacklist).then_some(rules.purpose),
        ..PolicyFields::default()
    };
    match (fill, &rules.forgetting) {
        (FillPolicy::Rotate(rotate), Forgetting::Rotate { ring }) => {
            fields.generations = Some(rotate.generations);
            fields.window = Some(rotate.window);
            fields.window_secs = rotate.window_secs;
            fields.ring = Some(ring.clone());
        }
        (FillPolicy::Clear { at }, Forgetting::Clear { clears }) => {
            fields.clear_at = Some(*at);
            fields.clears = Some(*clears);
        }
        _ => {}
    }
    let mut json = serde_json::to_value(meta).ok()?;
    let extra = serde_json::to_value(&fields).ok()?;
    if let (Some(j), serde_json::Value::Object(e)) = (json.as_object_mut(), extra) {
        j.extend(e);
    }
    serde_json::to_vec(&json).ok()
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

/// The path of the fill policy of the filter whose first layer is `base`.
pub fn meta_path(base: &Path) -> PathBuf {
    let mut s = base.as_os_str().to_os_string();
    s.push(".meta");
    PathBuf::from(s)
}
