//! Adds to a served filter, growing a scaling filter by a layer when its
//! newest is full ([`Layers::insert`]), or starting a generation or
//! clearing under a forgetting policy ([`Layers::add_published`]); new
//! layers live in memory until a snapshot writes them.

use bloomgate_blacklist::layers::{Added, GrowLimits};
use bloomgate_engine::{Filter, Params};

use crate::Limits;

use super::*;

/// RedisBloom's add ([`Layers::insert`]) on a filter's published state: a
/// grown chain is published ([`Named::publish`]) before the add returns.
pub(super) fn add_key(
    named: &Named,
    key: &[u8],
    limits: &Limits,
) -> Result<AddOutcome, StoreError> {
    let st = named.layers();
    let (added, grown) = if st.policy().forgets() {
        // Rotate, clear: new generations and cleared filters are in-memory
        // until a snapshot saves the chain ([`Layers::save`]).
        st.add_published(key, bloomgate_blacklist::layers::unix_now())?
    } else {
        st.insert(key, false, grow_limits(limits), &mut |p| {
            budgeted_layer(limits, p)
        })?
    };
    drop(st);
    if let Some(g) = grown {
        named.publish(g);
    }
    Ok(match added {
        Added::New => AddOutcome::New,
        Added::Exists => AddOutcome::Exists,
        Added::Full => AddOutcome::Full,
    })
}

pub(super) fn grow_limits(limits: &Limits) -> GrowLimits {
    GrowLimits {
        max_bytes: limits.max_filter_bytes,
    }
}

/// A growth layer a client's add asks for: its bytes are reserved from the
/// server's memory budget first, and refused (nothing allocated, the add
/// answered with an out-of-memory error) past it.
fn budgeted_layer(limits: &Limits, p: Params) -> Result<Filter, bloomgate_blacklist::Error> {
    let bytes = p.bits / 8;
    limits
        .memory
        .reserve(bytes)
        .map_err(|_| bloomgate_engine::Error::OutOfMemory(bytes))?;
    in_memory_layer(p)
}

/// New layers of served filters live in memory until a snapshot saves them.
pub(super) fn in_memory_layer(p: Params) -> Result<Filter, bloomgate_blacklist::Error> {
    Ok(Filter::new(p)?)
}
