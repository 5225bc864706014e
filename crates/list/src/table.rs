//! A new, empty counting or cuckoo table, planned for a number of entries
//! at a false-positive rate: what `bloomgate build --layout counting|cuckoo`
//! and the Python package's `build` fill and hand to [`List::from_table`].
//!
//! Planning and making are two steps ([`TablePlan::bytes`], then
//! [`TablePlan::create`]) so that a front end can refuse a table larger than
//! the memory it was given before any of it is allocated. The planners and
//! their formulas are the engine's (`math::plan_counting`,
//! `math::plan_cuckoo`); the cuckoo table takes the engine's default bucket
//! size, its best space per item.
//!
//! [`List::from_table`]: crate::List::from_table

use bloomgate_engine::format::DeletableKind;
use bloomgate_engine::math::{self, CUCKOO_DEFAULT_BUCKET_SIZE};
use bloomgate_engine::{AnyFilter, CountingFilter, CountingParams, CuckooFilter, CuckooParams};
use bloomgate_engine::{CountingPlan, CuckooPlan, PlanError};
use bloomgate_url::{KeyKind, MatchMode};

/// A counting or cuckoo table's plan: its size is known, nothing is
/// allocated yet.
#[derive(Clone, Debug)]
pub struct TablePlan {
    kind: KeyKind,
    mode: MatchMode,
    seed: u64,
    plan: Planned,
}

#[derive(Clone, Debug)]
enum Planned {
    Counting(CountingPlan),
    Cuckoo(CuckooPlan),
}

impl TablePlan {
    /// Plans a `which` table for `items` entries at `per_lookup` per
    /// lookup (the rate per query divided among a query's lookups), its
    /// entries of key kind `kind` matched by `mode`, hashed with `seed`.
    pub fn new(
        which: DeletableKind,
        items: u64,
        per_lookup: f64,
        kind: KeyKind,
        mode: MatchMode,
        seed: u64,
    ) -> Result<TablePlan, PlanError> {
        let plan = match which {
            DeletableKind::Counting => Planned::Counting(math::plan_counting(items, per_lookup)?),
            DeletableKind::Cuckoo => Planned::Cuckoo(math::plan_cuckoo(
                items,
                per_lookup,
                CUCKOO_DEFAULT_BUCKET_SIZE,
            )?),
        };
        Ok(TablePlan {
            kind,
            mode,
            seed,
            plan,
        })
    }

    /// The table's size in bytes.
    pub fn bytes(&self) -> u64 {
        match &self.plan {
            Planned::Counting(p) => p.bytes(),
            Planned::Cuckoo(p) => p.bytes(),
        }
    }

    /// Makes the empty table, its header recording the key rules.
    pub fn create(&self) -> Result<AnyFilter, bloomgate_engine::Error> {
        Ok(match &self.plan {
            Planned::Counting(plan) => {
                let mut params = CountingParams::from_plan(plan, self.seed);
                params.key_kind = self.kind.as_u8();
                params.match_mode = self.mode.as_u8();
                AnyFilter::Counting(CountingFilter::new(params)?)
            }
            Planned::Cuckoo(plan) => {
                let mut params = CuckooParams::from_plan(plan, self.seed);
                params.key_kind = self.kind.as_u8();
                params.match_mode = self.mode.as_u8();
                AnyFilter::Cuckoo(CuckooFilter::new(params)?)
            }
        })
    }
}
