//! What a new filter is: [`FilterSpec`], one type for every front end.
//!
//! A filter is asked for in many ways — `bloomgate build` and `plan`
//! (`--items --fp`), `bloomgate dedup` and `create`, the HTTP API's
//! `POST /v1/filters` (`items`, `fp`), RedisBloom's `BF.RESERVE key
//! error_rate capacity` and its auto-creating adds. Each front end only
//! translates its own arguments into a [`FilterSpec`]; the defaults, the
//! range checks and the sizing live here, so every protocol refuses the
//! same values with the same limits ([`SpecError`]).
//!
//! # Rates
//!
//! [`FilterSpec::rate`] is the false-positive rate of one *query*, what a
//! user asks for. A url or host query looks up several keys (a host query
//! `a.b.example.com` looks up `a.b.example.com`, `b.example.com` and
//! `example.com`, up to `bloomgate_url::max_lookups`), and a query is a false
//! positive if any lookup is. So the filter is planned for the per-lookup
//! rate `1 − (1 − p)^(1/L)` ([`FilterSpec::lookup_rate`]), and then the fill
//! policy decides the first layer's share ([`FilterSpec::layer_rate`]):
//!
//! | policy | first layer planned for |
//! |---|---|
//! | fixed, refuse, clear | the per-lookup rate, `items` |
//! | grow | half of it (the layers' rates sum below it however far it grows) |
//! | rotate (G generations, window N) | `1 − (1 − p_l)^(1/G)`, `⌈N/(G−1)⌉` items |
//!
//! The `.meta` of a filter with a policy records the per-lookup rate
//! (`error_rate`); [`per_query_rate`] turns it back into the rate asked for.

use bloomgate_engine::{math, Layout, Params, Plan};
use bloomgate_url::{KeyKind, MatchMode};

use crate::layers::{
    FillPolicy, Layers, Purpose, Rotate, DEFAULT_CLEAR_AT, DEFAULT_EXPANSION, DEFAULT_GENERATIONS,
    MAX_EXPANSION, MAX_LAYERS,
};

/// A specification that cannot make a filter: which value, and its limit.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// No items to plan for.
    #[error("items {0}: a filter is planned for at least 1 item")]
    Items(u64),
    /// A rate outside (0, 1).
    #[error("false-positive rate {0}: it must be strictly between 0 and 1")]
    Rate(f64),
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
    /// A setting of another policy than the one asked for.
    #[error("'{setting}' does not apply to the {policy} policy")]
    NotApplicable {
        /// The setting, as the front end spells it.
        setting: String,
        /// The policy asked for.
        policy: &'static str,
    },
    /// A policy name this version does not know.
    #[error("unknown policy '{0}' (fixed, grow, refuse, rotate, clear)")]
    UnknownPolicy(String),
    /// A purpose name this version does not know.
    #[error("unknown purpose '{0}' (blacklist, dedup)")]
    UnknownPurpose(String),
    /// The engine cannot size the filter (too large, rate too small).
    #[error("{0}")]
    Plan(String),
}

/// Everything that makes a new Bloom filter: how many items, at what rate
/// per query, of which keys, in which layout, under which fill policy, for
/// what purpose. Built by the front ends; checked by
/// [`FilterSpec::validate`]; sized by [`FilterSpec::plan`].
#[derive(Clone, Debug, PartialEq)]
pub struct FilterSpec {
    /// Items to plan for (the first layer's, or a ring's window).
    pub items: u64,
    /// False-positive rate per query, in (0, 1).
    pub rate: f64,
    /// What the entries are.
    pub kind: KeyKind,
    /// How queries match entries.
    pub mode: MatchMode,
    /// The bit layout.
    pub layout: Layout,
    /// What the filter does when it is full.
    pub fill: FillPolicy,
    /// What the filter is for (who may forget entries).
    pub purpose: Purpose,
}

impl FilterSpec {
    /// RedisBloom's auto-created filter: 100 items at 0.01, raw keys,
    /// growing by [`DEFAULT_EXPANSION`].
    pub const REDIS_ITEMS: u64 = 100;
    /// RedisBloom's default error rate of an auto-created filter.
    pub const REDIS_RATE: f64 = 0.01;

    /// `items` at `rate` per query: raw keys matched exactly, blocked
    /// layout, fixed (no `.meta`), a blacklist.
    pub fn new(items: u64, rate: f64) -> FilterSpec {
        FilterSpec {
            items,
            rate,
            kind: KeyKind::Raw,
            mode: MatchMode::Exact,
            layout: Layout::Blocked,
            fill: FillPolicy::Fixed,
            purpose: Purpose::Blacklist,
        }
    }

    /// The filter `BF.ADD` and friends create when the key is unknown:
    /// RedisBloom's 100 items at 0.01, growing.
    pub fn redis_default() -> FilterSpec {
        FilterSpec {
            fill: FillPolicy::Grow {
                expansion: DEFAULT_EXPANSION,
            },
            ..FilterSpec::new(Self::REDIS_ITEMS, Self::REDIS_RATE)
        }
    }

    /// Checks every value against its limit (the same on every front end).
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.items == 0 {
            return Err(SpecError::Items(self.items));
        }
        check_rate(self.rate)?;
        check_fill(&self.fill, self.kind, self.purpose)
    }

    /// The rate of one lookup that keeps a query of this key kind and match
    /// mode at [`FilterSpec::rate`].
    pub fn lookup_rate(&self) -> f64 {
        crate::per_lookup_rate(self.kind, self.mode, self.rate)
    }

    /// The rate and item count the first layer is planned for (see the
    /// module docs, "Rates").
    pub fn layer_rate(&self) -> (u64, f64) {
        let p = self.lookup_rate();
        match &self.fill {
            FillPolicy::Grow { .. } => (self.items, math::scaling_layer_rate(p, 0)),
            FillPolicy::Rotate(r) => (r.span(), r.generation_rate(p)),
            _ => (self.items, p),
        }
    }

    /// The first layer's plan, once the spec is valid.
    pub fn plan(&self) -> Result<Plan, SpecError> {
        self.validate()?;
        let (n, rate) = self.layer_rate();
        math::plan(self.layout, n, rate).map_err(|e| SpecError::Plan(e.to_string()))
    }

    /// Bytes of bits a new filter takes: the first layer, times the
    /// generations of a ring.
    pub fn bytes(&self) -> Result<u64, SpecError> {
        let layers = match &self.fill {
            FillPolicy::Rotate(r) => u64::from(r.generations),
            _ => 1,
        };
        Ok(self.plan()?.bytes().saturating_mul(layers))
    }

    /// The first layer's parameters, with `seed` and the key rules.
    pub fn params(&self, seed: u64) -> Result<Params, SpecError> {
        let mut params = Params::from_plan(&self.plan()?, seed);
        params.key_kind = self.kind.as_u8();
        params.match_mode = self.mode.as_u8();
        Ok(params)
    }

    /// A new, empty in-memory filter of this spec (one layer, or the first
    /// generation), `now` in Unix seconds; written by [`Layers::save`].
    pub fn create(&self, seed: u64, now: u64) -> Result<Layers, crate::Error> {
        let params = self.params(seed)?;
        Layers::create(params, &self.fill, self.purpose, self.lookup_rate(), now)
    }
}

/// Checks a false-positive rate is strictly between 0 and 1.
pub fn check_rate(rate: f64) -> Result<(), SpecError> {
    if rate > 0.0 && rate < 1.0 {
        Ok(())
    } else {
        Err(SpecError::Rate(rate))
    }
}

/// Checks a fill policy's settings, and that a filter of key kind `kind`
/// and purpose `purpose` may use it: the forgetting policies (rotate,
/// clear) are refused for url and host blacklists, where a forgotten entry
/// is a blocked URL let through.
pub fn check_fill(fill: &FillPolicy, kind: KeyKind, purpose: Purpose) -> Result<(), SpecError> {
    match fill {
        FillPolicy::Grow { expansion } if !(1..=MAX_EXPANSION).contains(expansion) => {
            return Err(SpecError::Expansion(u64::from(*expansion)))
        }
        FillPolicy::Rotate(r) => check_rotate(r)?,
        FillPolicy::Clear { at } if !(*at > 0.0 && *at < 1.0) => {
            return Err(SpecError::ClearAt(*at))
        }
        _ => {}
    }
    if fill.forgets()
        && purpose == Purpose::Blacklist
        && matches!(kind, KeyKind::Url | KeyKind::Host)
    {
        return Err(SpecError::Forgets {
            policy: fill.name(),
            kind,
        });
    }
    Ok(())
}

/// Checks a rotation's settings.
pub fn check_rotate(r: &Rotate) -> Result<(), SpecError> {
    if r.generations < 2 || r.generations as usize > MAX_LAYERS {
        return Err(SpecError::Generations(u64::from(r.generations)));
    }
    if r.window == 0 || r.window_secs == Some(0) {
        return Err(SpecError::Window);
    }
    Ok(())
}

/// The settings of a fill policy as a front end received them: a policy
/// name and the optional settings, each named as that front end spells it
/// (for the error of a setting that does not apply).
#[derive(Clone, Debug, Default)]
pub struct FillArgs<'a> {
    /// `fixed`, `grow`, `refuse`, `rotate` or `clear` (`None`: `default`).
    pub policy: Option<&'a str>,
    /// grow: the growth factor.
    pub expansion: Option<(&'a str, u64)>,
    /// rotate: generations.
    pub generations: Option<(&'a str, u64)>,
    /// rotate: window in adds.
    pub window: Option<(&'a str, u64)>,
    /// rotate: window in seconds.
    pub window_secs: Option<(&'a str, u64)>,
    /// clear: the fill ratio.
    pub clear_at: Option<(&'a str, f64)>,
}

impl FillArgs<'_> {
    /// The fill policy these settings ask for, with the defaults filled in
    /// (`items` is rotate's default window; `default` the policy when none
    /// is named). A setting of another policy is an error.
    pub fn resolve(&self, items: u64, default: &str) -> Result<FillPolicy, SpecError> {
        let name = self.policy.unwrap_or(default);
        let policy: &'static str = match name {
            "fixed" => "fixed",
            "grow" => "grow",
            "refuse" => "refuse",
            "rotate" => "rotate",
            "clear" => "clear",
            other => return Err(SpecError::UnknownPolicy(other.into())),
        };
        let unused = |set: Option<&str>, applies: bool| match set {
            Some(setting) if !applies => Err(SpecError::NotApplicable {
                setting: setting.into(),
                policy,
            }),
            _ => Ok(()),
        };
        unused(self.expansion.map(|s| s.0), policy == "grow")?;
        let rotating = policy == "rotate";
        unused(self.generations.map(|s| s.0), rotating)?;
        unused(self.window.map(|s| s.0), rotating)?;
        unused(self.window_secs.map(|s| s.0), rotating)?;
        unused(self.clear_at.map(|s| s.0), policy == "clear")?;
        let narrow = |v: u64, e: fn(u64) -> SpecError| u32::try_from(v).map_err(|_| e(v));
        Ok(match policy {
            "grow" => FillPolicy::Grow {
                expansion: match self.expansion {
                    Some((_, e)) => narrow(e, SpecError::Expansion)?,
                    None => DEFAULT_EXPANSION,
                },
            },
            "refuse" => FillPolicy::Refuse,
            "rotate" => FillPolicy::Rotate(Rotate {
                generations: match self.generations {
                    Some((_, g)) => narrow(g, SpecError::Generations)?,
                    None => DEFAULT_GENERATIONS,
                },
                window: self.window.map_or(items, |w| w.1),
                window_secs: self.window_secs.map(|w| w.1),
            }),
            "clear" => FillPolicy::Clear {
                at: self.clear_at.map_or(DEFAULT_CLEAR_AT, |c| c.1),
            },
            _ => FillPolicy::Fixed,
        })
    }
}

/// Parses a purpose name (`blacklist`, `dedup`).
pub fn parse_purpose(name: &str) -> Result<Purpose, SpecError> {
    match name {
        "blacklist" => Ok(Purpose::Blacklist),
        "dedup" => Ok(Purpose::Dedup),
        other => Err(SpecError::UnknownPurpose(other.into())),
    }
}

/// The rate per query of a filter whose lookups are each at `per_lookup`:
/// `1 − (1 − p_l)^L` for L lookups per query (the inverse of
/// [`FilterSpec::lookup_rate`]).
pub fn per_query_rate(kind: KeyKind, mode: MatchMode, per_lookup: f64) -> f64 {
    let lookups = bloomgate_url::max_lookups(kind, mode);
    -((-per_lookup).ln_1p() * f64::from(lookups)).exp_m1()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_live_here_and_validation_names_the_limit() {
        let s = FilterSpec::redis_default();
        assert_eq!((s.items, s.rate), (100, 0.01));
        assert_eq!(s.fill, FillPolicy::Grow { expansion: 2 });
        let grow = |e| FilterSpec {
            fill: FillPolicy::Grow { expansion: e },
            ..FilterSpec::new(10, 0.01)
        };
        assert!(grow(MAX_EXPANSION).validate().is_ok());
        for bad in [0, MAX_EXPANSION + 1] {
            let e = grow(bad).validate().unwrap_err();
            assert_eq!(e, SpecError::Expansion(u64::from(bad)));
            assert!(e.to_string().contains("1..=32768"), "{e}");
        }
        assert_eq!(
            FilterSpec::new(0, 0.01).validate(),
            Err(SpecError::Items(0))
        );
        for r in [0.0, 1.0, -1.0, f64::NAN] {
            assert!(matches!(
                FilterSpec::new(1, r).validate(),
                Err(SpecError::Rate(_))
            ));
        }
        let args = FillArgs {
            policy: Some("rotate"),
            ..FillArgs::default()
        };
        assert_eq!(
            args.resolve(500, "fixed").unwrap(),
            FillPolicy::Rotate(Rotate {
                generations: DEFAULT_GENERATIONS,
                window: 500,
                window_secs: None
            })
        );
        let e = FillArgs {
            policy: Some("grow"),
            clear_at: Some(("--clear-at", 0.5)),
            ..FillArgs::default()
        }
        .resolve(1, "fixed")
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "'--clear-at' does not apply to the grow policy"
        );
    }

    #[test]
    fn the_plan_is_per_lookup_then_the_policy_s_share() {
        let mut s = FilterSpec::new(1000, 1e-4);
        s.kind = KeyKind::Host;
        let pl = s.lookup_rate();
        assert!((per_query_rate(s.kind, s.mode, pl) - 1e-4).abs() < 1e-12);
        assert!(pl < 1e-4 / 2.0);
        assert_eq!(s.plan().unwrap().target_fp, pl);
        s.fill = FillPolicy::Grow { expansion: 2 };
        assert_eq!(s.plan().unwrap().target_fp, pl / 2.0);
        s.kind = KeyKind::Raw;
        s.fill = FillPolicy::Rotate(Rotate {
            generations: 4,
            window: 900,
            window_secs: None,
        });
        s.purpose = Purpose::Dedup;
        let p = s.plan().unwrap();
        assert_eq!(p.items, 300);
        assert_eq!(s.bytes().unwrap(), 4 * p.bytes());
    }
}
