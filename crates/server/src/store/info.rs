//! What a served filter says of itself, whatever its kind or store:
//! [`Info`] (HTTP's filter list and `BF.INFO`) and [`Filter::describe`]
//! (HTTP's `GET /v1/filters/NAME`).
//!
//! A Bloom filter of the data directory reports its layers and fill
//! policy, a file served through the library's `List` what the library's
//! description of it says (and that description whole, as `details`), a
//! filter in Redis what Redis holds now; a deletable filter has statistics
//! of its own (`CF.INFO`: buckets, fingerprints, sub-filters) and no Bloom
//! [`Info`]. A front end asks the [`Filter`] and never which kind it is.

use serde::Serialize;
use serde_json::{json, Value};

use super::{Filter, StoreError};

/// Per-filter information (HTTP `info`, `BF.INFO`).
#[derive(Clone, Debug, Serialize)]
pub struct Info {
    /// Filter name.
    pub name: String,
    /// Key kind (`url`, `host`, `email`, `raw`).
    pub key_kind: String,
    /// Match mode (`exact`, `prefix`).
    pub match_mode: String,
    /// Layout of layer 0 (`blocked`, `classic`), or of a filter served
    /// read-only (`ribbon`).
    pub layout: String,
    /// Bits over all layers.
    pub bits: u64,
    /// Probes per item (layer 0).
    pub k: u32,
    /// Items inserted (that set a new bit).
    pub items: u64,
    /// Planned items over all layers.
    pub capacity: u64,
    /// Fraction of bits set (over all layers).
    pub fill_ratio: f64,
    /// Predicted false-positive rate per lookup at the current item count.
    pub predicted_fp: f64,
    /// The false-positive rate the filter promises: for a filter created
    /// through the Redis protocol the rate asked for (of the whole chain,
    /// however far it grows), else the rate layer 0 was planned for.
    pub target_fp: f64,
    /// Number of layers.
    pub layers: usize,
    /// `fixed`, `scaling` or `nonscaling`.
    pub growth: String,
    /// Expansion factor of a scaling filter.
    pub expansion: Option<u32>,
    /// The fill policy and its settings, e.g. `grow (expansion 2)`,
    /// `refuse`, `rotate (4 generations, window 1000 adds)`, `clear (at
    /// fill 0.8)`, `fixed` (`layers` counts a rotation's generations).
    pub policy: String,
    /// Bytes of bit arrays.
    pub size_bytes: u64,
    /// Entries in the whitelist.
    pub whitelist_entries: usize,
    /// Adds not yet in a snapshot (only in the log).
    pub unsnapshotted_changes: bool,
    /// Per layer, oldest first (`BF.DEBUG`; not in the HTTP API's JSON).
    #[serde(skip)]
    pub layer_info: Vec<LayerInfo>,
}

/// One layer of a filter, as `BF.DEBUG` reports it.
#[derive(Clone, Debug)]
pub struct LayerInfo {
    /// Bytes of its bit array.
    pub bytes: u64,
    /// Bits.
    pub bits: u64,
    /// Probes per item.
    pub k: u32,
    /// Bits of the hash each item is placed by (64 for XXH3-64, 128 for
    /// XXH3-128: the layer's hash id).
    pub hash_bits: u32,
    /// Items it was planned for.
    pub capacity: u64,
    /// Items it took.
    pub items: u64,
    /// The false-positive rate it was planned for.
    pub target_fp: f64,
}

/// The width `BF.DEBUG` reports for a layer hashed with `hash`.
pub fn hash_bits(hash: bloomgate_engine::HashId) -> u32 {
    match hash {
        bloomgate_engine::HashId::Xxh3_64 | bloomgate_engine::HashId::Xxh3_64Words => 64,
        bloomgate_engine::HashId::Xxh3_128 => 128,
    }
}

impl Filter {
    /// Information about the filter. `fill` computes the fill ratio (a
    /// full scan, cached for 30 s); without it the cached value or 0.
    pub fn info(&self, fill: bool) -> Result<Info, StoreError> {
        match self {
            Filter::Local(n) => Ok(n.info(fill)),
            Filter::Deletable(_) => Err(StoreError::Unsupported(
                "Bloom filter statistics of a deletable filter (it has its own: CF.INFO)",
            )),
            Filter::Listed(n) => n.info(),
            Filter::Redis(n) => n.info(),
        }
    }

    /// The filter's description as HTTP's `GET /v1/filters/NAME` answers
    /// it: its [`Info`] with the fill ratio; for a file served through the
    /// library's `List` also the library's whole description (`details`: a
    /// ribbon's bits per item, shards, rate per query); for a deletable
    /// filter its own statistics and its `type` (`cuckoo`, `counting`).
    /// May scan the whole filter: call it off the event loop.
    pub fn describe(&self) -> Result<Value, StoreError> {
        Ok(match self {
            Filter::Deletable(_) => {
                let info = self.cf_info()?;
                let mut v = json_of(&info);
                v["type"] = json!(info.layout);
                v
            }
            Filter::Listed(n) => {
                let mut v = json_of(&n.info()?);
                v["details"] = n.details()?;
                v
            }
            Filter::Local(_) | Filter::Redis(_) => json_of(&self.info(true)?),
        })
    }
}

/// `v` as JSON.
fn json_of(v: &impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or_default()
}
