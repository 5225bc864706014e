//! A new, empty counting or cuckoo table, planned from a
//! [`DeletableSpec`]: what `bloomgate build --layout counting|cuckoo` and
//! the Python package's `build` fill and hand to [`List::from_table`].
//!
//! Planning and making are two steps ([`TablePlan::bytes`], then
//! [`TablePlan::create`]) so that a front end can refuse a table larger than
//! the memory it was given before any of it is allocated. The sizing is the
//! spec's ([`DeletableSpec::plan`], which `bloomgate plan` shows too): this
//! module only makes the table it describes, its header recording the key
//! rules.
//!
//! [`List::from_table`]: crate::List::from_table

use bloomgate_blacklist::{DeletablePlan, DeletableSpec, SpecError};
use bloomgate_engine::{AnyFilter, CountingFilter, CountingParams, CuckooFilter, CuckooParams};
use bloomgate_url::{KeyKind, MatchMode};

/// A counting or cuckoo table's plan: its size is known, nothing is
/// allocated yet.
#[derive(Clone, Debug)]
pub struct TablePlan {
    kind: KeyKind,
    mode: MatchMode,
    seed: u64,
    plan: DeletablePlan,
}

impl TablePlan {
    /// Plans the table `spec` describes, hashed with `seed`.
    pub fn new(spec: &DeletableSpec, seed: u64) -> Result<TablePlan, SpecError> {
        Ok(TablePlan {
            kind: spec.kind,
            mode: spec.mode,
            seed,
            plan: spec.plan()?,
        })
    }

    /// The table's size in bytes.
    pub fn bytes(&self) -> u64 {
        self.plan.bytes()
    }

    /// Makes the empty table, its header recording the key rules.
    pub fn create(&self) -> Result<AnyFilter, bloomgate_engine::Error> {
        Ok(match &self.plan {
            DeletablePlan::Counting(plan) => {
                let mut params = CountingParams::from_plan(plan, self.seed);
                params.key_kind = self.kind.as_u8();
                params.match_mode = self.mode.as_u8();
                AnyFilter::Counting(CountingFilter::new(params)?)
            }
            DeletablePlan::Cuckoo(plan) => {
                let mut params = CuckooParams::from_plan(plan, self.seed);
                params.key_kind = self.kind.as_u8();
                params.match_mode = self.mode.as_u8();
                AnyFilter::Cuckoo(CuckooFilter::new(params)?)
            }
        })
    }
}
