//! `BF.SCANDUMP` / `BF.LOADCHUNK`: a filter as a stream of chunks, a JSON
//! header first (each layer's parameters, growth rules), then the bit
//! arrays of all layers in order.

use std::sync::atomic::Ordering::Relaxed;

pub use bloomgate_blacklist::layers::Meta;
use bloomgate_engine::{Layout, Params};
use serde::{Deserialize, Serialize};

use crate::wal::{self, AckRx};

use super::*;

/// The header of a `BF.SCANDUMP` stream (JSON after a magic line).
#[derive(Serialize, Deserialize)]
struct DumpHeader {
    layers: Vec<DumpLayer>,
    meta: Option<Meta>,
}

#[derive(Serialize, Deserialize)]
struct DumpLayer {
    layout: u8,
    bits: u64,
    k: u32,
    seed: u64,
    /// The layer's hash id (absent in dumps from before hash id 2: 1,
    /// XXH3-128).
    #[serde(default = "hash_id_1")]
    hash: u8,
    key_kind: u8,
    match_mode: u8,
    planned_items: u64,
    target_fp: f64,
    items: u64,
}

fn hash_id_1() -> u8 {
    bloomgate_engine::hash::HASH_XXH3_128
}

/// A dump header: each layer's parameters and item count, and the
/// filter's `.meta` (its fill policy), if it has one.
pub type DumpLayers = (Vec<(Params, u64)>, Option<Meta>);

/// Parses the first chunk of a `BF.SCANDUMP` stream (the magic line and the
/// JSON header): each layer's parameters and item count, and the growth
/// rules. Anything malformed, any layer whose parameters do not validate
/// (sizes, rates, an item count above the bit count, unknown or differing
/// key rules, growth settings out of range), and filters larger than
/// `max_filter_bytes` in all are refused with RedisBloom's texts.
pub fn parse_dump_header(data: &[u8], max_filter_bytes: u64) -> Result<DumpLayers, StoreError> {
    let bad_data = || StoreError::Invalid("received bad data".into());
    let (json, magic_1) = match data.strip_prefix(DUMP_MAGIC) {
        Some(json) => (Some(json), true),
        None => (data.strip_prefix(DUMP_MAGIC_2), false),
    };
    let h: DumpHeader = json
        .and_then(|json| serde_json::from_slice(json).ok())
        .ok_or_else(bad_data)?;
    if h.layers.is_empty() || h.layers.len() > 64 {
        return Err(bad_data());
    }
    // The first magic line never comes with XXH3-64 layers (see `DUMP_MAGIC_2`).
    if magic_1 && h.layers.iter().any(|l| l.hash != hash_id_1()) {
        return Err(bad_data());
    }
    let mut specs = Vec::new();
    let mut total = 0u64;
    for l in &h.layers {
        let p = Params {
            layout: Layout::from_code(l.layout).ok_or_else(bad_data)?,
            bits: l.bits,
            k: l.k,
            seed: l.seed,
            hash: bloomgate_engine::HashId::from_code(l.hash).ok_or_else(bad_data)?,
            key_kind: l.key_kind,
            match_mode: l.match_mode,
            planned_items: l.planned_items,
            target_fp: l.target_fp,
        };
        p.validate().map_err(|_| bad_data())?;
        bloomgate_engine::format::check_items(l.items, p.bits).map_err(|_| bad_data())?;
        if bloomgate_url::KeyKind::from_u8(p.key_kind).is_none()
            || bloomgate_url::MatchMode::from_u8(p.match_mode).is_none()
            || (p.key_kind, p.match_mode) != (h.layers[0].key_kind, h.layers[0].match_mode)
        {
            return Err(bad_data());
        }
        total = total.saturating_add(p.bits / 8);
        specs.push((p, l.items));
    }
    if total > max_filter_bytes {
        return Err(StoreError::Invalid(
            "filter too large for this server".into(),
        ));
    }
    if let Some(m) = &h.meta {
        m.validate().map_err(|_| bad_data())?;
    }
    Ok((specs, h.meta))
}

const DUMP_MAGIC: &[u8] = b"BLOOMGATE-DUMP-1\n";
/// The magic line of a dump with a layer hashed with XXH3-64 (hash id 2):
/// servers from before hash id 2 ignore the layers' `hash` field, so such a
/// dump carries a magic line they refuse instead of loading its bits under
/// the wrong hash. Dumps of XXH3-128 layers keep the first line, which
/// every server reads.
const DUMP_MAGIC_2: &[u8] = b"BLOOMGATE-DUMP-2\n";
/// Bytes per `BF.SCANDUMP` data chunk.
pub const DUMP_CHUNK: usize = 4 << 20;

impl LocalStore {
    /// `BF.SCANDUMP`: iteration 0 gives the header; later iterations the bit
    /// arrays of all layers in order, [`DUMP_CHUNK`] bytes at a time; `(0, [])` ends.
    pub fn scandump(&self, named: &Named, iter: u64) -> (u64, Vec<u8>) {
        let st = named.layers();
        if iter == 0 {
            let header = DumpHeader {
                layers: st
                    .layers
                    .iter()
                    .map(|f| {
                        let p = f.params();
                        DumpLayer {
                            layout: p.layout.code(),
                            bits: p.bits,
                            k: p.k,
                            seed: p.seed,
                            hash: p.hash.code(),
                            key_kind: p.key_kind,
                            match_mode: p.match_mode,
                            planned_items: p.planned_items,
                            target_fp: p.target_fp,
                            items: f.items(),
                        }
                    })
                    .collect(),
                meta: st.growth_meta(),
            };
            let all_128 = header.layers.iter().all(|l| l.hash == hash_id_1());
            let mut out = if all_128 { DUMP_MAGIC } else { DUMP_MAGIC_2 }.to_vec();
            out.extend_from_slice(&serde_json::to_vec(&header).unwrap_or_default());
            return (1, out);
        }
        let mut pos = iter - 1;
        for f in &st.layers {
            let bytes = f.as_bytes();
            let len = bytes.len() as u64;
            if pos < len {
                let end = (pos + DUMP_CHUNK as u64).min(len);
                let chunk = bytes[pos as usize..end as usize].to_vec();
                let consumed: u64 = iter - 1 + (end - pos);
                return (consumed + 1, chunk);
            }
            pos -= len;
        }
        (0, Vec::new())
    }

    /// `BF.LOADCHUNK`: iteration 1 creates the filter from a header; later
    /// iterations OR data into it (logged like adds): a chunk of `n` bytes
    /// covers bytes `iter - 1 - n .. iter - 1` of the layers laid end to end.
    /// A bad header or chunk is refused with RedisBloom's texts (`received bad data`, `invalid offset
    /// - no link found`, `invalid chunk - Too big for current filter`).
    pub fn loadchunk(
        &self,
        name: &str,
        iter: u64,
        data: &[u8],
    ) -> Result<Option<AckRx>, StoreError> {
        let bad_data = || StoreError::Invalid("received bad data".into());
        if iter == 1 {
            if !valid_name(name) {
                return Err(StoreError::BadName(name.into()));
            }
            let (specs, growth) = parse_dump_header(data, self.limits.max_filter_bytes)?;
            let _snap = lock(&self.snapshot_lock);
            self.not_damaged(name)?;
            self.refuse_listed(name)?;
            if self.get(name).is_some() {
                return Err(StoreError::Exists(name.into()));
            }
            self.reserve_memory(specs.iter().map(|(p, _)| p.bits / 8).sum())?;
            let made = (|| {
                let base = self.base(name);
                self.fresh_journal(name, &specs[0].0)?;
                let layers = self.write_new_or_clean(name, &base, &specs, growth.as_ref())?;
                self.install(name, &base, layers)
            })();
            self.recount_memory();
            made?;
            return Ok(None);
        }
        if let Some(e) = self.wal.refusing() {
            return Err(e.into());
        }
        let named = self.need(name)?;
        self.write_marker(&named)?;
        let _w = lock(&named.write);
        let st = named.layers();
        let no_link = || StoreError::Invalid("invalid offset - no link found".into());
        let mut start = iter
            .checked_sub(data.len() as u64)
            .ok_or_else(bad_data)?
            .checked_sub(1)
            .ok_or_else(no_link)?;
        for (i, f) in st.layers.iter().enumerate() {
            let len = f.as_bytes().len() as u64;
            if start < len {
                if data.len() as u64 > len - start {
                    return Err(StoreError::Invalid(
                        "invalid chunk - Too big for current filter".into(),
                    ));
                }
                // In range: only a misaligned chunk fails.
                f.or_bytes_at(start, data).map_err(|_| bad_data())?;
                let mut log = Vec::with_capacity(data.len() + 64);
                wal::encode_chunk(&mut log, &named.name, st.seed(), i as u32, start, data);
                named.dirty.store(true, Relaxed);
                return Ok(Some(self.wal.append(log)));
            }
            start -= len;
        }
        Err(no_link())
    }
}
