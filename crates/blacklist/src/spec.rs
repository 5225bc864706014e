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

use crate::cf_file::CfLayout;
use crate::layers::fill::{check_fill, FillError};
use crate::layers::{
    FillPolicy, Layers, Purpose, Rotate, DEFAULT_CLEAR_AT, DEFAULT_EXPANSION, DEFAULT_GENERATIONS,
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
    /// A fill policy's setting out of range, or a policy this filter may
    /// not use ([`crate::layers::fill::check_fill`]).
    #[error(transparent)]
    Fill(#[from] FillError),
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
    /// A deletable filter's setting outside its range.
    #[error("{} {value}: it must be in {}..={}", .setting.name(), .setting.range().start(), .setting.range().end())]
    Setting {
        /// Which setting.
        setting: Setting,
        /// The value given.
        value: i64,
    },
    /// A deletable filter's capacity below two buckets.
    #[error("capacity {capacity}: a deletable filter is planned for at least 2 × its bucket size ({min}) items")]
    Capacity {
        /// The capacity given.
        capacity: i64,
        /// The least capacity of its bucket size.
        min: u64,
    },
}

/// A setting of a deletable filter that has a range ([`DeletableSpec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    /// RedisBloom's bucket size: 1..=255.
    BucketSize,
    /// Kicks before an insert gives up: 1..=65535.
    MaxIterations,
    /// Growth factor of the next sub-filter: 0..=32768 (0: never grow).
    Expansion,
}

impl Setting {
    /// The setting's name in messages (`bucket_size`, …).
    pub fn name(self) -> &'static str {
        match self {
            Setting::BucketSize => "bucket_size",
            Setting::MaxIterations => "max_iterations",
            Setting::Expansion => "expansion",
        }
    }

    /// The values it takes (RedisBloom's limits).
    pub fn range(self) -> std::ops::RangeInclusive<i64> {
        match self {
            Setting::BucketSize => 1..=255,
            Setting::MaxIterations => 1..=65535,
            Setting::Expansion => 0..=32768,
        }
    }

    /// `value` if it is in [`Setting::range`].
    pub fn check(self, value: i64) -> Result<i64, SpecError> {
        match self.range().contains(&value) {
            true => Ok(value),
            false => Err(SpecError::Setting {
                setting: self,
                value,
            }),
        }
    }
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
        Ok(check_fill(&self.fill, self.kind, self.purpose)?)
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
        Ok(self.params_of(&self.plan()?, seed))
    }

    /// [`FilterSpec::params`] from this spec's [`FilterSpec::plan`] made
    /// already (a blocked plan evaluates the exact rate some hundred times:
    /// tens of milliseconds, worth not paying twice).
    pub fn params_of(&self, plan: &Plan, seed: u64) -> Params {
        let mut params = Params::from_plan(plan, seed);
        params.key_kind = self.kind.as_u8();
        params.match_mode = self.mode.as_u8();
        params
    }

    /// A new, empty in-memory filter of this spec (one layer, or the first
    /// generation), `now` in Unix seconds; written by [`Layers::save`].
    pub fn create(&self, seed: u64, now: u64) -> Result<Layers, crate::Error> {
        let params = self.params(seed)?;
        Layers::create(params, &self.fill, self.purpose, self.lookup_rate(), now)
    }
}

/// Everything that makes a new deletable filter (a chain of cuckoo tables,
/// or one counting filter): RedisBloom's `CF.RESERVE` parameters, a rate,
/// and the key rules. Built by the front ends (`CF.RESERVE` and the adds
/// that create, the HTTP API's create with `"layout": "cuckoo"` or
/// `"counting"`) with [`DeletableSpec::settle`], which holds every default
/// and range check, so every protocol refuses the same values.
#[derive(Clone, Debug, PartialEq)]
pub struct DeletableSpec {
    /// Cuckoo tables or a counting filter.
    pub layout: CfLayout,
    /// Items the first sub-filter is planned for.
    pub capacity: u64,
    /// RedisBloom's bucket size (1..=255): sets the default error rate and
    /// is reported by `CF.INFO`; the tables use the engine's buckets.
    pub bucket_size: u16,
    /// Kicks before an insert into a full table gives up (1..=65535).
    pub max_iterations: u16,
    /// Growth factor of the next sub-filter (a power of two); 0 = never grow.
    pub expansion: u32,
    /// False-positive rate per sub-filter; `None`: RedisBloom's for the
    /// bucket size ([`redisbloom_rate`]).
    pub error_rate: Option<f64>,
    /// How items are normalized before hashing (raw for `CF.RESERVE`; a
    /// file built by the CLI keeps its own).
    pub kind: KeyKind,
    /// How queries are matched.
    pub mode: MatchMode,
}

/// The settings of a deletable filter as a front end received them (`None`:
/// the default of [`DeletableArgs::settle`]'s defaults).
#[derive(Clone, Debug, Default)]
pub struct DeletableArgs {
    /// Items to plan the first sub-filter for.
    pub capacity: i64,
    /// Bucket size.
    pub bucket_size: Option<i64>,
    /// Kicks before an insert gives up.
    pub max_iterations: Option<i64>,
    /// Growth factor (rounded up to a power of two, as RedisBloom does).
    pub expansion: Option<i64>,
    /// False-positive rate per sub-filter.
    pub error_rate: Option<f64>,
}

impl DeletableArgs {
    /// The spec these settings ask for over `defaults`, each value checked
    /// against its range in RedisBloom's order (max iterations, bucket
    /// size, expansion, rate, then the capacity: at least two buckets).
    pub fn settle(&self, defaults: &DeletableSpec) -> Result<DeletableSpec, SpecError> {
        let max_iterations = Setting::MaxIterations.check(
            self.max_iterations
                .unwrap_or(defaults.max_iterations.into()),
        )?;
        let bucket_size =
            Setting::BucketSize.check(self.bucket_size.unwrap_or(defaults.bucket_size.into()))?;
        let expansion = match self.expansion {
            Some(e) => Setting::Expansion.check(e)? as u32,
            None => defaults.expansion,
        };
        let error_rate = match self.error_rate {
            Some(r) => Some(check_rate(r).map(|()| r)?),
            None => defaults.error_rate,
        };
        if self.capacity < 2 * bucket_size {
            return Err(SpecError::Capacity {
                capacity: self.capacity,
                min: 2 * bucket_size as u64,
            });
        }
        Ok(DeletableSpec {
            capacity: self.capacity as u64,
            bucket_size: bucket_size as u16,
            max_iterations: max_iterations as u16,
            expansion: expansion.next_power_of_two() * u32::from(expansion != 0),
            error_rate,
            ..defaults.clone()
        })
    }
}

impl DeletableSpec {
    /// RedisBloom's default capacity of a filter an add creates.
    pub const DEFAULT_CAPACITY: u64 = 1024;
    /// RedisBloom's default bucket size.
    pub const DEFAULT_BUCKET_SIZE: u16 = 2;
    /// RedisBloom's default number of kicks before an insert gives up.
    pub const DEFAULT_MAX_ITERATIONS: u16 = 20;
    /// RedisBloom's default expansion.
    pub const DEFAULT_EXPANSION: u32 = 1;

    /// RedisBloom's defaults (`CF.RESERVE`, and a filter an add creates),
    /// with `capacity`: cuckoo tables, buckets of 2, 20 kicks, growing by
    /// sub-filters of the same size, RedisBloom's rate, raw keys.
    pub fn redis_default(capacity: u64) -> DeletableSpec {
        DeletableSpec {
            layout: CfLayout::Cuckoo,
            capacity,
            bucket_size: Self::DEFAULT_BUCKET_SIZE,
            max_iterations: Self::DEFAULT_MAX_ITERATIONS,
            expansion: Self::DEFAULT_EXPANSION,
            error_rate: None,
            kind: KeyKind::Raw,
            mode: MatchMode::Exact,
        }
    }

    /// The HTTP API's defaults for `layout` at rate `rate`: buckets of 4
    /// (the engine's best space per item), 500 evictions before an insert
    /// gives up, growing by sub-filters of the same size.
    pub fn new(layout: CfLayout, rate: f64) -> DeletableSpec {
        DeletableSpec {
            layout,
            bucket_size: 4,
            max_iterations: 500,
            error_rate: Some(rate),
            ..DeletableSpec::redis_default(Self::DEFAULT_CAPACITY)
        }
    }

    /// The false-positive rate each sub-filter is planned for.
    pub fn rate(&self) -> f64 {
        self.error_rate
            .unwrap_or_else(|| redisbloom_rate(self.bucket_size))
    }

    /// What `bloomgate build --layout counting|cuckoo` makes: one table
    /// that never grows, planned for `items` at the per-query rate `fp`
    /// (turned into the per-lookup rate of its key kind and match mode,
    /// as a Bloom filter's), with the engine's default bucket size and
    /// evictions.
    pub fn for_build(
        layout: CfLayout,
        items: u64,
        fp: f64,
        kind: KeyKind,
        mode: MatchMode,
    ) -> DeletableSpec {
        DeletableSpec {
            layout,
            capacity: items,
            bucket_size: math::CUCKOO_DEFAULT_BUCKET_SIZE as u16,
            max_iterations: math::CUCKOO_DEFAULT_MAX_KICKS as u16,
            expansion: 0,
            error_rate: Some(crate::per_lookup_rate(kind, mode, fp)),
            kind,
            mode,
        }
    }

    /// The size of the first table: the engine's plan for
    /// [`DeletableSpec::capacity`] items at [`DeletableSpec::rate`], with
    /// buckets of [`DeletableSpec::bucket_size`] slots (the engine's
    /// largest if more) for a cuckoo table. `bloomgate plan`, `build` and
    /// the server's tables are all sized by it.
    pub fn plan(&self) -> Result<DeletablePlan, SpecError> {
        let failed = |e: math::PlanError| SpecError::Plan(e.to_string());
        Ok(match self.layout {
            CfLayout::Counting => DeletablePlan::Counting(
                math::plan_counting(self.capacity, self.rate()).map_err(failed)?,
            ),
            CfLayout::Cuckoo => {
                let b = u32::from(self.bucket_size).clamp(1, math::CUCKOO_MAX_BUCKET_SIZE);
                DeletablePlan::Cuckoo(
                    math::plan_cuckoo(self.capacity, self.rate(), b).map_err(failed)?,
                )
            }
        })
    }
}

/// The size of a deletable filter's table ([`DeletableSpec::plan`]).
#[derive(Clone, Debug, PartialEq)]
pub enum DeletablePlan {
    /// A counting Bloom filter's counters and probes.
    Counting(math::CountingPlan),
    /// A cuckoo table's buckets and fingerprints.
    Cuckoo(math::CuckooPlan),
}

impl DeletablePlan {
    /// Bits of the table.
    pub fn bits(&self) -> u64 {
        match self {
            DeletablePlan::Counting(p) => p.bits(),
            DeletablePlan::Cuckoo(p) => p.bits(),
        }
    }

    /// Bytes of the table (a file adds the engine's header to it).
    pub fn bytes(&self) -> u64 {
        match self {
            DeletablePlan::Counting(p) => p.bytes(),
            DeletablePlan::Cuckoo(p) => p.bytes(),
        }
    }

    /// The predicted false-positive rate of one lookup at the planned items.
    pub fn predicted_fp(&self) -> f64 {
        match self {
            DeletablePlan::Counting(p) => p.predicted_fp,
            DeletablePlan::Cuckoo(p) => p.predicted_fp,
        }
    }
}

/// The false-positive rate RedisBloom's 8-bit fingerprints give a
/// sub-filter with buckets of `bucket_size`: a lookup compares 2·b
/// fingerprints, each equal by chance with probability 1/255.
pub fn redisbloom_rate(bucket_size: u16) -> f64 {
    (2.0 * f64::from(bucket_size) / 255.0).min(0.5)
}

/// Checks a false-positive rate is strictly between 0 and 1.
pub fn check_rate(rate: f64) -> Result<(), SpecError> {
    if rate > 0.0 && rate < 1.0 {
        Ok(())
    } else {
        Err(SpecError::Rate(rate))
    }
}

impl From<FillError> for crate::Error {
    fn from(e: FillError) -> crate::Error {
        crate::Error::Spec(e.into())
    }
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
                    Some((_, e)) => narrow(e, |v| FillError::Expansion(v).into())?,
                    None => DEFAULT_EXPANSION,
                },
            },
            "refuse" => FillPolicy::Refuse,
            "rotate" => FillPolicy::Rotate(Rotate {
                generations: match self.generations {
                    Some((_, g)) => narrow(g, |v| FillError::Generations(v).into())?,
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
    use crate::layers::MAX_EXPANSION;

    #[test]
    fn deletable_defaults_and_limits_live_here() {
        let resp = DeletableSpec::redis_default(DeletableSpec::DEFAULT_CAPACITY);
        let args = |capacity| DeletableArgs {
            capacity,
            ..DeletableArgs::default()
        };
        let s = args(10).settle(&resp).unwrap();
        assert_eq!((s.capacity, s.bucket_size, s.expansion), (10, 2, 1));
        assert_eq!(s.rate(), redisbloom_rate(2));
        assert_eq!(
            args(3).settle(&resp),
            Err(SpecError::Capacity {
                capacity: 3,
                min: 4
            })
        );
        let e = DeletableArgs {
            expansion: Some(3),
            ..args(10)
        };
        assert_eq!(e.settle(&resp).unwrap().expansion, 4);
        for (setting, bad) in [
            (Setting::BucketSize, 256),
            (Setting::MaxIterations, 0),
            (Setting::Expansion, 32769),
        ] {
            let a = DeletableArgs {
                bucket_size: (setting == Setting::BucketSize).then_some(bad),
                max_iterations: (setting == Setting::MaxIterations).then_some(bad),
                expansion: (setting == Setting::Expansion).then_some(bad),
                ..args(1000)
            };
            assert_eq!(
                a.settle(&resp),
                Err(SpecError::Setting {
                    setting,
                    value: bad
                })
            );
        }
        let http = DeletableSpec::new(CfLayout::Counting, 0.01);
        assert!(matches!(
            DeletableArgs {
                error_rate: Some(1.5),
                ..args(100)
            }
            .settle(&http),
            Err(SpecError::Rate(_))
        ));
    }

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
            assert_eq!(e, SpecError::Fill(FillError::Expansion(u64::from(bad))));
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
