//! The on-disk format (version 1): a 4096-byte header, then the bit array.
//!
//! The full specification is `docs/file-format.md`; this module is its only
//! implementation. Design points:
//!
//! * The bit array starts at byte 4096, so it is page-aligned and the file is
//!   memory-mapped and used in place: opening a 25 GB filter reads one page.
//! * The header carries its own checksum (any flipped bit in it is caught on
//!   open). The data checksum is checked only on request (`verify`), because
//!   reading 25 GB is exactly what opening must not do.
//! * The data checksum is the wrapping sum over 4096-byte pages of
//!   `xxh3_64(page, seed = page index)`. A sum of per-page hashes can be
//!   computed in parallel and still catches any corrupted, swapped or zeroed
//!   page with probability 1 − 2⁻⁶⁴.
//! * Every write of a whole file is atomic: temp file in the same directory,
//!   fsync, rename over the target, fsync the directory. A crash leaves either
//!   the old file or the new one, never a mix.
//! * In-place updates (`bloomgate add`) set a *dirty* flag (synced) before
//!   touching the bits and clear it with the new checksum afterwards. Bits are
//!   only ever set, so an interrupted update never loses an item that was there
//!   before; the flag only says that the checksum is stale.
//! * Because the checksum is a sum over pages, an update through
//!   [`crate::Filter::update_batch`] rehashes only the pages it changed: it adds
//!   their old hashes up before writing and their new hashes at commit, and
//!   moves the checksum by the difference. Adding a few thousand items to a
//!   25 GB filter then reads a few thousand pages, not 25 GB; and corruption
//!   elsewhere in the file stays detectable instead of being sealed into a
//!   freshly computed checksum.
//!
//! This module is the header codec and the checksums, nothing more:
//! [`Header`] for Bloom filters and, in `format/deletable.rs`, the
//! headers and file images of counting and cuckoo filters. What a filter
//! does with its file (open, save, verify, in-place updates) is in
//! `filter/file.rs`; the parameters a header holds are [`Params`].

use std::fs::File;
use std::path::Path;

use rayon::prelude::*;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::error::{io_err, Error, FormatProblem, Result};
use crate::hash::HashId;
use crate::math::{Layout, BLOCK_BITS, MAX_K};
use crate::params::Params;
pub use crate::params::{check_counts, check_items};

mod deletable;

pub(crate) use deletable::{
    deletable_image_header, deletable_to_bytes, open_table, read_table, save_deletable,
    DeletableFile, OpenedDeletable, Origin,
};
pub use deletable::{
    DeletableHeader, DeletableKind, Geometry, FLAG_CUCKOO_EXACT, FLAG_CUCKOO_SHIFT,
    LAYOUT_COUNTING, LAYOUT_CUCKOO, MAX_CUCKOO_BUCKET_SHIFT, MAX_KICKS_LIMIT,
};

/// Static ribbon filter layout code (offset 16; `crate::ribbon`).
pub const LAYOUT_RIBBON: u8 = 5;

/// The name of the filter kind a layout code stands for, as
/// [`FormatProblem::WrongKind`] reports it.
pub fn layout_name(code: u8) -> &'static str {
    match code {
        1 => "classic Bloom",
        2 => "blocked Bloom",
        LAYOUT_COUNTING => "counting",
        LAYOUT_CUCKOO => "cuckoo",
        LAYOUT_RIBBON => "ribbon",
        _ => "unknown",
    }
}

/// The first eight bytes of every filter file.
pub const MAGIC: [u8; 8] = *b"BLOOMGT\x01";
/// The format version this build writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
/// Header length; the bit array starts here.
pub const HEADER_LEN: usize = 4096;
/// Checksum page size.
pub(crate) const PAGE: usize = 4096;
/// Header flag: an in-place update is in progress or was interrupted.
pub const FLAG_DIRTY: u32 = 1;
/// Marks the `ones` field as recorded: the field holds `count | 2⁶³`, and 0
/// means "not recorded". The mark lives in the field, not in the flags: a
/// writer from before the field copies the flags through but rebuilds the
/// header without the field, which then reads as "not recorded", never as a
/// stale count (`docs/file-format.md`).
const ONES_RECORDED: u64 = 1 << 63;

// Field offsets (little-endian). Documented in docs/file-format.md.
pub(crate) const OFF_VERSION: usize = 8;
pub(crate) const OFF_HEADER_LEN: usize = 12;
pub(crate) const OFF_LAYOUT: usize = 16;
pub(crate) const OFF_HASH: usize = 17;
pub(crate) const OFF_KEY_KIND: usize = 18;
pub(crate) const OFF_MATCH_MODE: usize = 19;
pub(crate) const OFF_K: usize = 20;
pub(crate) const OFF_BLOCK_BITS: usize = 24;
pub(crate) const OFF_FLAGS: usize = 28;
pub(crate) const OFF_BITS: usize = 32;
pub(crate) const OFF_SEED: usize = 40;
pub(crate) const OFF_ITEMS: usize = 48;
pub(crate) const OFF_PLANNED: usize = 56;
pub(crate) const OFF_TARGET_FP: usize = 64;
pub(crate) const OFF_DATA_LEN: usize = 72;
pub(crate) const OFF_DATA_SUM: usize = 80;
pub(crate) const OFF_ONES: usize = 88;
pub(crate) const OFF_HEADER_SUM: usize = 120;

/// A decoded header.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// Format version.
    pub version: u32,
    /// Filter parameters (the hash id, offset 17, is `params.hash`).
    pub params: Params,
    /// Flags (bit 0: dirty).
    pub flags: u32,
    /// Items inserted.
    pub items: u64,
    /// Length of the bit array in bytes.
    pub data_len: u64,
    /// Checksum of the bit array.
    pub data_checksum: u64,
    /// Set bits of the bit array, when the file records them (offset 88):
    /// what `info` reports the fill from without reading the data. Current
    /// only while the file is not dirty.
    pub ones: Option<u64>,
}

impl Header {
    /// True if an in-place update did not finish.
    pub fn is_dirty(&self) -> bool {
        self.flags & FLAG_DIRTY != 0
    }

    /// Block size in bits as stored (512 for blocked, 0 for classic).
    pub fn block_bits(&self) -> u32 {
        match self.params.layout {
            Layout::Blocked => BLOCK_BITS as u32,
            Layout::Classic => 0,
        }
    }

    /// Encodes the header, computing its checksum.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN];
        let p = &self.params;
        b[..8].copy_from_slice(&MAGIC);
        b[OFF_VERSION..][..4].copy_from_slice(&self.version.to_le_bytes());
        b[OFF_HEADER_LEN..][..4].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        b[OFF_LAYOUT] = p.layout.code();
        b[OFF_HASH] = p.hash.code();
        b[OFF_KEY_KIND] = p.key_kind;
        b[OFF_MATCH_MODE] = p.match_mode;
        b[OFF_K..][..4].copy_from_slice(&p.k.to_le_bytes());
        b[OFF_BLOCK_BITS..][..4].copy_from_slice(&self.block_bits().to_le_bytes());
        b[OFF_FLAGS..][..4].copy_from_slice(&self.flags.to_le_bytes());
        let ones = self.ones.map_or(0, |o| o | ONES_RECORDED);
        b[OFF_ONES..][..8].copy_from_slice(&ones.to_le_bytes());
        b[OFF_BITS..][..8].copy_from_slice(&p.bits.to_le_bytes());
        b[OFF_SEED..][..8].copy_from_slice(&p.seed.to_le_bytes());
        b[OFF_ITEMS..][..8].copy_from_slice(&self.items.to_le_bytes());
        b[OFF_PLANNED..][..8].copy_from_slice(&p.planned_items.to_le_bytes());
        b[OFF_TARGET_FP..][..8].copy_from_slice(&p.target_fp.to_le_bytes());
        b[OFF_DATA_LEN..][..8].copy_from_slice(&self.data_len.to_le_bytes());
        b[OFF_DATA_SUM..][..8].copy_from_slice(&self.data_checksum.to_le_bytes());
        let sum = header_checksum(&b);
        b[OFF_HEADER_SUM..][..8].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes and validates a header. `file_len` is the length of the whole file.
    pub fn decode(bytes: &[u8], file_len: u64) -> Result<Header, FormatProblem> {
        let version = check_frame(bytes, file_len)?;
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        let bad = |s: String| FormatProblem::BadField(s);
        if let Some(kind) = DeletableKind::from_code(bytes[OFF_LAYOUT]) {
            return Err(FormatProblem::WrongKind {
                found: kind.name(),
                expected: "Bloom",
            });
        }
        if bytes[OFF_LAYOUT] == LAYOUT_RIBBON {
            return Err(FormatProblem::WrongKind {
                found: "ribbon",
                expected: "Bloom",
            });
        }
        let layout = Layout::from_code(bytes[OFF_LAYOUT])
            .ok_or_else(|| bad(format!("unknown layout code {}", bytes[OFF_LAYOUT])))?;
        let hash_id = bytes[OFF_HASH];
        let hash = HashId::from_code(hash_id)
            .ok_or_else(|| bad(format!("unknown hash function id {hash_id}")))?;
        let k = u32_at(OFF_K);
        if k == 0 || k > MAX_K {
            return Err(bad(format!("k = {k}")));
        }
        let bits = u64_at(OFF_BITS);
        if bits == 0 || bits % BLOCK_BITS != 0 || bits >= 1 << 63 {
            return Err(bad(format!("bit count {bits}")));
        }
        if !hash.allows(layout, bits, k) {
            return Err(bad(format!(
                "hash function id {hash_id} ({hash}) for a {layout} filter of {bits} bits and k = {k}"
            )));
        }
        let data_len = u64_at(OFF_DATA_LEN);
        if data_len != bits / 8 {
            return Err(bad(format!("data length {data_len} for {bits} bits")));
        }
        let block_bits = u32_at(OFF_BLOCK_BITS);
        let expected_block = if layout == Layout::Blocked {
            BLOCK_BITS as u32
        } else {
            0
        };
        if block_bits != expected_block {
            return Err(bad(format!("block size {block_bits} for layout {layout}")));
        }
        let ones = match u64_at(OFF_ONES) {
            0 => None,
            v if v & ONES_RECORDED != 0 && v & !ONES_RECORDED <= bits => Some(v & !ONES_RECORDED),
            v => return Err(bad(format!("set-bit count field {v:#x} for {bits} bits"))),
        };
        let expected_len = HEADER_LEN as u64 + data_len;
        if file_len < expected_len {
            return Err(FormatProblem::Truncated {
                expected: expected_len,
                found: file_len,
            });
        }
        if file_len > expected_len {
            return Err(FormatProblem::Trailing {
                extra: file_len - expected_len,
            });
        }
        let header = Header {
            version,
            params: Params {
                layout,
                bits,
                k,
                seed: u64_at(OFF_SEED),
                hash,
                key_kind: bytes[OFF_KEY_KIND],
                match_mode: bytes[OFF_MATCH_MODE],
                planned_items: u64_at(OFF_PLANNED),
                target_fp: f64::from_le_bytes(bytes[OFF_TARGET_FP..][..8].try_into().expect("8")),
            },
            flags: u32_at(OFF_FLAGS),
            items: u64_at(OFF_ITEMS),
            data_len,
            data_checksum: u64_at(OFF_DATA_SUM),
            ones,
        };
        check_counts(header.params.planned_items, header.params.target_fp).map_err(bad)?;
        check_items(header.items, bits).map_err(bad)?;
        Ok(header)
    }
}

/// XXH3-64 of the header with its checksum field read as zero.
pub(crate) fn header_checksum(header: &[u8]) -> u64 {
    let mut copy = [0u8; HEADER_LEN];
    copy.copy_from_slice(&header[..HEADER_LEN]);
    copy[OFF_HEADER_SUM..OFF_HEADER_SUM + 8].fill(0);
    xxh3_64_with_seed(&copy, 0)
}

/// The data checksum: wrapping sum of `xxh3_64(page, seed = page index)` over
/// 4096-byte pages (the last may be shorter). Parallel.
pub fn data_checksum(data: &[u8]) -> u64 {
    pages_checksum(data, 0)
}

/// The share of the data checksum of `data`, a run of whole pages starting
/// at page `first_page` of the array (the last may be shorter if it ends
/// the array): [`data_checksum`] of the array is the wrapping sum of these
/// shares over any cut of it into page-aligned runs.
pub fn pages_checksum(data: &[u8], first_page: u64) -> u64 {
    pages_checksum_and_ones(data, first_page).0
}

/// [`pages_checksum`] and the number of set bits, in one parallel pass over
/// the data.
pub fn pages_checksum_and_ones(data: &[u8], first_page: u64) -> (u64, u64) {
    data.par_chunks(PAGE)
        .enumerate()
        .map(|(i, page)| {
            (
                xxh3_64_with_seed(page, first_page + i as u64),
                page_ones(page),
            )
        })
        .reduce(|| (0, 0), |a, b| (a.0.wrapping_add(b.0), a.1 + b.1))
}

/// Set bits of one page (or any run of bytes).
pub(crate) fn page_ones(page: &[u8]) -> u64 {
    let (words, rest) = page.as_chunks::<8>();
    words
        .iter()
        .map(|w| u64::from_ne_bytes(*w).count_ones() as u64)
        .sum::<u64>()
        + rest.iter().map(|b| b.count_ones() as u64).sum::<u64>()
}

/// Checksum page `page` of `data`.
pub(crate) fn page_bytes(data: &[u8], page: u64) -> &[u8] {
    let start = page as usize * PAGE;
    let end = (start + PAGE).min(data.len());
    &data[start..end]
}

/// The hash of checksum page `page` of `data`.
pub(crate) fn page_hash(data: &[u8], page: u64) -> u64 {
    xxh3_64_with_seed(page_bytes(data, page), page)
}

/// How a filter file is opened.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// Mapped copy-on-write: pages are shared with the page cache and other
    /// processes; inserts change only this process's private copy.
    ReadOnly,
    /// Mapped shared and writable: inserts reach the file (see
    /// [`crate::Filter::begin_update`] and [`crate::Filter::commit_update`]).
    ReadWrite,
}

/// Reads the layout code of the filter file at `path` (byte 16), checking
/// only the magic: which opener to use. Errors as [`crate::Filter::open`] would
/// for a file that is not a bloomgate filter.
pub fn peek_layout_code(path: &Path) -> Result<u8> {
    use std::io::Read;
    let mut f = File::open(path).map_err(io_err(path, "open"))?;
    let meta = f.metadata().map_err(io_err(path, "stat"))?;
    if meta.is_dir() {
        return Err(Error::Io {
            path: path.into(),
            op: "open",
            source: std::io::Error::other("is a directory"),
        });
    }
    let mut head = [0u8; 17];
    let format = |problem| Error::Format {
        path: path.into(),
        problem,
    };
    if meta.len() < HEADER_LEN as u64 {
        return Err(format(FormatProblem::TooShort(meta.len())));
    }
    f.read_exact(&mut head).map_err(io_err(path, "read"))?;
    if head[..8] != MAGIC {
        return Err(format(FormatProblem::BadMagic));
    }
    Ok(head[OFF_LAYOUT])
}

/// Checks the frame every header shares, whatever the layout: length,
/// magic, version, header checksum and header length. Returns the version.
pub(crate) fn check_frame(bytes: &[u8], file_len: u64) -> Result<u32, FormatProblem> {
    if bytes.len() < HEADER_LEN || file_len < HEADER_LEN as u64 {
        return Err(FormatProblem::TooShort(file_len.min(bytes.len() as u64)));
    }
    if bytes[..8] != MAGIC {
        return Err(FormatProblem::BadMagic);
    }
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
    let version = u32_at(OFF_VERSION);
    if version > FORMAT_VERSION {
        return Err(FormatProblem::NewerVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    if u64_at(OFF_HEADER_SUM) != header_checksum(&bytes[..HEADER_LEN]) {
        return Err(FormatProblem::HeaderChecksum);
    }
    if version == 0 {
        return Err(FormatProblem::BadField("format version 0".into()));
    }
    if u32_at(OFF_HEADER_LEN) as usize != HEADER_LEN {
        return Err(FormatProblem::BadField(format!(
            "header length {}",
            u32_at(OFF_HEADER_LEN)
        )));
    }
    Ok(version)
}

#[cfg(test)]
mod tests;
