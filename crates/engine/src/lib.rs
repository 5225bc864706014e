//! The bloomgate engine: Bloom filters for blacklists of billions of keys.
//!
//! Two layouts share one API ([`Filter`]):
//!
//! * [`Layout::Blocked`] (the default): each item's `k` bits live in one
//!   512-bit, cache-line-aligned block, so a lookup costs one cache miss. About
//!   22.0 bits per item at a false-positive rate of 10⁻⁴.
//! * [`Layout::Classic`]: the textbook filter, 19.17 bits per item at 10⁻⁴
//!   (20 when rounded to whole bits, as the planner does), `k` cache misses.
//!
//! Items are hashed once with seeded XXH3 ([`hash`]: XXH3-64 for blocked
//! filters built today, XXH3-128 for classic ones and older files, as the
//! file's hash id says); all positions are derived from that hash by one
//! function ([`place::Locator`]) with 64-bit arithmetic and multiply-shift
//! range reduction, so filters beyond 2³² bits work. Insertion is lock-free
//! (atomic OR) and may run on every core at once. Filters are stored in a
//! memory-mappable file format ([`format`](mod@format), `docs/file-format.md`).
//!
//! Two more layouts can delete ([`deletable`]): a counting Bloom filter
//! ([`CountingFilter`], 4-bit counters blocked 128 to a cache line) and a
//! cuckoo filter ([`CuckooFilter`], packed `f`-bit fingerprints in buckets
//! of 4). A deletable filter is a [`Chain`] of either, over one [`Table`]
//! trait, growing like RedisBloom's `EXPANSION`. They share the
//! file format's frame with their own layout codes; [`AnyFilter::open`]
//! opens a file of any kind.
//!
//! A static layout, [`Ribbon`] ([`ribbon`](mod@ribbon)), is solved once
//! from all its keys and cannot take more: 13.8 bits per item at 10⁻⁴,
//! within 4 % of the information-theoretic bound, for blacklists rebuilt
//! from their source. It has its own layout code and opener.
//!
//! The sizing formulas and their sources are in [`math`]. A filter larger
//! than the memory a build may use is built a slice at a time ([`slice`](mod@slice)),
//! bit for bit as it would be in memory.
//!
//! Each file says its role, and the modules depend one way: [`Params`]
//! (`params.rs`, what a Bloom filter is) sits below both the header codec
//! ([`format`](mod@format): the bytes of a file, its checksums) and the
//! filter (`filter.rs`: lookups and inserts); the filter's file — open,
//! save, verify, in-place updates — is `filter/file.rs`, which uses the
//! codec; the codec never uses the filter.
//!
//! ```
//! use bloomgate_engine::{plan, Filter, Layout};
//!
//! let plan = plan(Layout::Blocked, 1_000, 1e-4).unwrap();
//! let filter = Filter::with_plan(&plan).unwrap();
//! filter.insert(b"evil.example/");
//! assert!(filter.contains(b"evil.example/"));
//! assert!(plan.predicted_fp <= 1e-4);
//! ```
#![deny(missing_docs)]

#[cfg(target_endian = "big")]
compile_error!("bloomgate's file format and SIMD kernels assume a little-endian CPU");

pub mod arch;
pub mod atomic;
pub mod chain;
pub mod counting;
pub mod cuckoo;
pub mod deletable;
mod error;
mod filter;
pub mod format;
pub mod hash;
pub mod math;
mod params;
pub mod place;
pub mod ribbon;
pub mod slice;
mod spin;
mod storage;
pub mod table;

pub use chain::{Chain, ChainAdd, ChainError, CuckooChain, MAX_TABLES};
pub use counting::{CountingFilter, CountingParams};
pub use cuckoo::{CuckooFilter, CuckooParams};
pub use deletable::{AnyFilter, DeletableTable, FilterKind};
pub use error::{Error, FormatProblem, Result};
pub use filter::{Filter, Prepared};
pub use format::{Access, Header};
pub use hash::HashId;
pub use math::{
    plan, plan_counting, plan_cuckoo, CountingPlan, CuckooPlan, Layout, Plan, PlanError,
};
pub use params::{random_seed, Params};
pub use ribbon::{Ribbon, RibbonSpec};
pub use storage::mem_available;
pub use table::{delete_table, AmbiguousDelete, CuckooFull, Removal, Table};
