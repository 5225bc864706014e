//! `CF.SCANDUMP` and `CF.LOADCHUNK`: a deletable filter copied out and in
//! as RedisBloom's chunked stream. The header chunk is the library's
//! ([`bloomgate_blacklist::cf_file::encode_dump_header`], checked by
//! [`bloomgate_blacklist::cf_file::parse_dump_header`] before anything is
//! allocated for it); the later chunks are the tables' engine images,
//! [`CF_DUMP_CHUNK`] bytes at a time, cut from the tables' own memory under
//! the chain's read lock (no copy of the chain is kept between calls).
//!
//! A `CF.LOADCHUNK` stream in progress lives in memory only: a crash in
//! the middle of one loses it (the next chunk is answered `ERR not found`).
//! Its last chunk builds the filter, checks it against the header's
//! checksum, writes its file and serves it (a fresh incarnation id: the
//! loaded filter is a new filter).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bloomgate_blacklist::cf_file::{self, CfFileError, CfHeader};

use super::chain::Chain;
use super::named::CfNamed;
use super::{lock, read, Deletables, DumpHeads};
use crate::store::StoreError;
use crate::Limits;

/// Bytes of one `CF.SCANDUMP` chunk.
pub const CF_DUMP_CHUNK: usize = 4 << 20;

/// A `CF.LOADCHUNK` stream in progress.
pub(super) struct Loading {
    header: CfHeader,
    body: Vec<u8>,
    /// Chunks received, by index.
    got: Vec<bool>,
}

/// The store's error for a refused dump header.
fn dump_error(e: CfFileError) -> StoreError {
    StoreError::Invalid(e.to_string())
}

/// Parses the first chunk of a `CF.LOADCHUNK` stream and checks it and
/// its size against `max_filter_bytes`, before anything is allocated for
/// it. Returns the bytes the stream's later chunks carry.
pub fn parse_dump_header(data: &[u8], max_filter_bytes: u64) -> Result<u64, StoreError> {
    cf_file::parse_dump_header(data, max_filter_bytes)
        .map(|(_, total)| total)
        .map_err(dump_error)
}

/// Bytes `start..start + len` of the concatenation of `pieces` (fewer at
/// its end, none past it).
pub(super) fn cut<'a>(pieces: impl Iterator<Item = &'a [u8]>, start: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0u64;
    for p in pieces {
        let end = at + p.len() as u64;
        if end > start && out.len() < len {
            let from = start.saturating_sub(at) as usize;
            let take = (p.len() - from).min(len - out.len());
            out.extend_from_slice(&p[from..from + take]);
        }
        at = end;
    }
    out
}

impl CfNamed {
    /// `CF.SCANDUMP`: iteration 0 gives the header (magic line, JSON, as
    /// in `NAME.cf` but with id and seq 0); iteration i ≥ 1 the (i−1)th
    /// [`CF_DUMP_CHUNK`] bytes of the tables' images, paired with i+1;
    /// past the end `(0, [])`.
    pub fn scandump(&self, iter: u64) -> (u64, Vec<u8>) {
        let c = read(&self.state);
        if iter == 0 {
            let (mut h, body) = c.image();
            // The incarnation id and the log position belong to this
            // server's files, not to the filter: a loaded copy is a new
            // incarnation, and two dumps of equal filters are equal.
            h.id = 0;
            h.seq = 0;
            let out = cf_file::encode_dump_header(&h);
            let heads = body.into_iter().map(|b| b.head).collect();
            *lock(&self.dump) = Some((c.seq, Arc::new(heads)));
            return (1, out);
        }
        // The tables' headers made with the dump's header, unless the
        // chain changed since (then the chunks do not match the header's
        // checksum, and a load of them fails rather than build a damaged
        // filter).
        let heads = {
            let mut d = lock(&self.dump);
            match d.as_ref() {
                Some((s, h)) if *s == c.seq => h.clone(),
                _ => {
                    let h: DumpHeads = Arc::new(c.image().1.into_iter().map(|b| b.head).collect());
                    *d = Some((c.seq, h.clone()));
                    h
                }
            }
        };
        let pieces = heads
            .iter()
            .zip(c.tables().tables())
            .flat_map(|(head, t)| [head.as_slice(), t.as_bytes()]);
        let start = (iter - 1).saturating_mul(CF_DUMP_CHUNK as u64);
        let chunk = cut(pieces, start, CF_DUMP_CHUNK);
        if chunk.is_empty() {
            *lock(&self.dump) = None;
            return (0, Vec::new());
        }
        (iter + 1, chunk)
    }
}

impl Deletables {
    /// `CF.LOADCHUNK`: iteration 1 starts a load from a header (the name
    /// must be free); iteration i ≥ 2 is the chunk `CF.SCANDUMP` paired
    /// with i. The last missing chunk builds the filter.
    /// Errors: `Invalid` with RedisBloom's texts.
    pub fn loadchunk(
        &self,
        name: &str,
        iter: u64,
        data: &[u8],
        limits: &Limits,
    ) -> Result<(), StoreError> {
        let bad = |s: &str| StoreError::Invalid(s.into());
        if iter == 1 {
            if self.has(name) {
                return Err(StoreError::Exists(name.into()));
            }
            let (h, total) =
                cf_file::parse_dump_header(data, limits.max_filter_bytes).map_err(dump_error)?;
            let chunks = (total as usize).div_ceil(CF_DUMP_CHUNK);
            let load = Loading {
                header: h,
                body: vec![0; total as usize],
                got: vec![false; chunks],
            };
            if chunks == 0 {
                return self.finish(name, load);
            }
            self.ever.store(true, Relaxed);
            lock(&self.loading).insert(name.into(), load);
            return Ok(());
        }
        let mut loading = lock(&self.loading);
        let Some(load) = loading.get_mut(name) else {
            return Err(if self.get(name).is_some() {
                bad("Couldn't load chunk!")
            } else {
                StoreError::NotFound(name.into())
            });
        };
        let idx = (iter - 2) as usize;
        let start = idx.saturating_mul(CF_DUMP_CHUNK);
        let want = load.body.len().saturating_sub(start).min(CF_DUMP_CHUNK);
        if idx >= load.got.len() || data.len() != want {
            return Err(bad("Couldn't load chunk!"));
        }
        load.body[start..start + want].copy_from_slice(data);
        load.got[idx] = true;
        if load.got.iter().all(|&g| g) {
            let load = loading.remove(name).expect("present");
            drop(loading);
            return self.finish(name, load);
        }
        Ok(())
    }

    fn finish(&self, name: &str, load: Loading) -> Result<(), StoreError> {
        let bad = |e: String| StoreError::Invalid(format!("Couldn't load chunk! ({e})"));
        let contents =
            cf_file::decode_body(load.header, &load.body).map_err(|e| bad(e.to_string()))?;
        let mut chain = Chain::from_contents(contents).map_err(bad)?;
        chain.id = bloomgate_engine::random_seed();
        chain.seq = 0;
        self.install(name, chain).map(|_| ())
    }
}
