//! Re-inserting acknowledged adds from a journal or the write-ahead log
//! (at startup and on reload), converted to the filter's current key rules.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bloomgate_blacklist::datadir::{self, Replayed};
pub use bloomgate_blacklist::layers::Layers;

use crate::journal::Lineage;
use crate::wal::Record;
use crate::Limits;

use super::growth::{grow_limits, in_memory_layer};
use super::*;

/// Re-inserts an acknowledged add (from a journal or the log) made under
/// `seed` into `st` ([`datadir::replay_key`]: converted to the layers' key
/// rules if they changed; never refused for lack of room). Returns whether
/// it was new, and the grown layers to publish in place of `st` if it grew.
pub(super) fn replay_key(
    st: &Layers,
    lineage: &[Lineage],
    seed: u64,
    key: &[u8],
    limits: &Limits,
) -> Result<(bool, Option<Layers>), StoreError> {
    let (r, grown) = datadir::replay_key(
        st,
        lineage,
        seed,
        key,
        grow_limits(limits),
        &mut in_memory_layer,
    )?;
    let new = match r {
        Replayed::New => true,
        Replayed::Present => false,
        Replayed::Unconvertible(e) => {
            tracing::warn!(
                "bloomgate serve: a journaled live add cannot be converted to the new file's key rules ({} {}): {e}: {:?}",
                st.kind.as_str(),
                st.mode.as_str(),
                String::from_utf8_lossy(key)
            );
            false
        }
    };
    Ok((new, grown))
}

/// [`replay_key`] into `layers`, grown in place (a reloaded file's layers
/// before they are served).
pub(super) fn replay_into(
    layers: &mut Layers,
    lineage: &[Lineage],
    seed: u64,
    key: &[u8],
    limits: &Limits,
) -> Result<bool, StoreError> {
    let (new, grown) = replay_key(layers, lineage, seed, key, limits)?;
    if let Some(g) = grown {
        *layers = g;
    }
    Ok(new)
}

impl Named {
    /// [`replay_key`] into the filter's published layers (at startup,
    /// before it is served).
    pub(super) fn replay_add(
        &self,
        lineage: &[Lineage],
        seed: u64,
        key: &[u8],
        limits: &Limits,
    ) -> Result<bool, StoreError> {
        let (new, grown) = replay_key(&self.layers(), lineage, seed, key, limits)?;
        if let Some(g) = grown {
            self.publish(g);
        }
        Ok(new)
    }
}

pub(super) fn apply_replay(filters: &HashMap<String, Arc<Named>>, rec: Record) {
    match rec {
        Record::Add { name, seed, key } => {
            if let Some(n) = filters.get(&name) {
                let lineage = lock(&n.lineage);
                if lineage.iter().any(|l| l.seed == seed) {
                    let limits = Limits::default();
                    if let Ok(true) = n.replay_add(&lineage, seed, &key, &limits) {
                        n.dirty.store(true, Relaxed);
                    }
                }
            }
        }
        Record::Chunk {
            name,
            seed,
            layer,
            offset,
            data,
        } => {
            if let Some(n) = filters.get(&name) {
                let st = n.layers();
                if st.seed() == seed {
                    if let Some(f) = st.layers.get(layer as usize) {
                        if f.or_bytes_at(offset, &data).is_ok() {
                            n.dirty.store(true, Relaxed);
                        }
                    }
                }
            }
        }
        Record::Lineage { .. } => {}
    }
}
