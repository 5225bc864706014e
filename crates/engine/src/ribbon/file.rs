//! The ribbon file: its header fields, its shard directory, and the writer
//! that streams solved shards into a temporary file and renames it into
//! place.
//!
//! A ribbon file has the frame of every bloomgate file (magic, version 1,
//! a 4096-byte header with its checksum, the data checksum over 4096-byte
//! pages) and layout code [`LAYOUT_RIBBON`]. Its data is the *directory*
//! (one 24-byte [`ShardEntry`] per shard, padded to whole pages) and then
//! the *solution* (the shards' interleaved words, 16 bytes each, in shard
//! order). The fields of the layout use the header's reserved bytes 96–119
//! (`docs/file-format.md`). Everything that sizes memory or drives a loop is
//! checked on open: the directory's offsets must be the running sum of the
//! shards' sizes and end at the solution's length, so a lookup can never
//! read past the data.
//!
//! The writer knows the directory's size from the shard count, so it writes
//! the solution from its final offset on as shards arrive, adding up the
//! page checksums as it goes (the solution starts on a page), and writes the
//! directory and the header last. Until [`RibbonWriter::finish`] renames it,
//! the file is a temporary beside the target, removed if the writer is
//! dropped unfinished: a failed or interrupted build leaves nothing.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::solve::{block_offset, SolvedShard, MAX_ATTEMPTS};
use super::ShardEntry;
use crate::atomic::{create_temp, sync_dir};
use crate::error::{io_err, Error, FormatProblem, Result};
use crate::format::{
    check_frame, data_checksum, header_checksum, HEADER_LEN, LAYOUT_RIBBON, MAGIC, OFF_BITS,
    OFF_BLOCK_BITS, OFF_DATA_LEN, OFF_DATA_SUM, OFF_FLAGS, OFF_HASH, OFF_HEADER_LEN,
    OFF_HEADER_SUM, OFF_ITEMS, OFF_K, OFF_KEY_KIND, OFF_LAYOUT, OFF_MATCH_MODE, OFF_ONES,
    OFF_PLANNED, OFF_SEED, OFF_TARGET_FP, OFF_VERSION, PAGE,
};
use crate::hash::HASH_XXH3_128;
use crate::math::{ribbon_directory_bytes, RIBBON_MAX_COLUMNS, RIBBON_WIDTH};
use crate::params::check_counts;

// The ribbon fields (the common ones are `format.rs`'s).
const OFF_SHARDS: usize = 96;
const OFF_COLUMNS: usize = 104;
const OFF_UPPER: usize = 108;
const OFF_WORDS: usize = 112;

/// Bytes of one directory entry.
pub const ENTRY_LEN: usize = 24;

/// Largest shard count a file may declare (`2³²`).
pub const MAX_SHARDS: u64 = 1 << 32;

/// Largest solution a file may declare, in 16-byte words (2⁵⁶ bytes).
const MAX_WORDS: u64 = 1 << 52;

/// A ribbon file's header.
#[derive(Clone, Debug, PartialEq)]
pub struct RibbonHeader {
    /// Format version.
    pub version: u32,
    /// Key kind code (`bloomgate_url::KeyKind`).
    pub key_kind: u8,
    /// Match mode code.
    pub match_mode: u8,
    /// The seed of the items' hash.
    pub seed: u64,
    /// Distinct keys stored.
    pub items: u64,
    /// Items the file was planned for (keys read, duplicates included).
    pub planned_items: u64,
    /// The rate asked for.
    pub target_fp: f64,
    /// Shards, a power of two.
    pub shards: u64,
    /// Result bits of the lower blocks (`r`).
    pub columns: u32,
    /// Fraction of a shard's blocks with `r + 1` result bits (`· 2⁻³²`).
    pub upper: u32,
    /// 16-byte words of the solution.
    pub words: u64,
    /// Bytes of data (directory and solution).
    pub data_len: u64,
    /// The data checksum.
    pub data_checksum: u64,
}

impl RibbonHeader {
    /// Bits of hash that choose the shard.
    pub fn shard_bits(&self) -> u32 {
        self.shards.trailing_zeros()
    }

    /// Bytes of the directory (whole pages).
    pub fn directory_len(&self) -> u64 {
        ribbon_directory_bytes(self.shards)
    }

    /// Encodes the header, computing its checksum.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[OFF_VERSION..][..4].copy_from_slice(&self.version.to_le_bytes());
        b[OFF_HEADER_LEN..][..4].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        b[OFF_LAYOUT] = LAYOUT_RIBBON;
        b[OFF_HASH] = HASH_XXH3_128;
        b[OFF_KEY_KIND] = self.key_kind;
        b[OFF_MATCH_MODE] = self.match_mode;
        b[OFF_K..][..4].copy_from_slice(&0u32.to_le_bytes());
        b[OFF_BLOCK_BITS..][..4].copy_from_slice(&(RIBBON_WIDTH as u32).to_le_bytes());
        b[OFF_FLAGS..][..4].copy_from_slice(&0u32.to_le_bytes());
        b[OFF_BITS..][..8].copy_from_slice(&(self.data_len * 8).to_le_bytes());
        b[OFF_SEED..][..8].copy_from_slice(&self.seed.to_le_bytes());
        b[OFF_ITEMS..][..8].copy_from_slice(&self.items.to_le_bytes());
        b[OFF_PLANNED..][..8].copy_from_slice(&self.planned_items.to_le_bytes());
        b[OFF_TARGET_FP..][..8].copy_from_slice(&self.target_fp.to_le_bytes());
        b[OFF_DATA_LEN..][..8].copy_from_slice(&self.data_len.to_le_bytes());
        b[OFF_DATA_SUM..][..8].copy_from_slice(&self.data_checksum.to_le_bytes());
        b[OFF_ONES..][..8].copy_from_slice(&0u64.to_le_bytes());
        b[OFF_SHARDS..][..8].copy_from_slice(&self.shards.to_le_bytes());
        b[OFF_COLUMNS..][..4].copy_from_slice(&self.columns.to_le_bytes());
        b[OFF_UPPER..][..4].copy_from_slice(&self.upper.to_le_bytes());
        b[OFF_WORDS..][..8].copy_from_slice(&self.words.to_le_bytes());
        let sum = header_checksum(&b);
        b[OFF_HEADER_SUM..][..8].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes and validates a ribbon header; `file_len` is the whole
    /// file's length.
    pub fn decode(bytes: &[u8], file_len: u64) -> Result<RibbonHeader, FormatProblem> {
        let version = check_frame(bytes, file_len)?;
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        let bad = |s: String| FormatProblem::BadField(s);
        if bytes[OFF_LAYOUT] != LAYOUT_RIBBON {
            return Err(FormatProblem::WrongKind {
                found: crate::format::layout_name(bytes[OFF_LAYOUT]),
                expected: "ribbon",
            });
        }
        if bytes[OFF_HASH] != HASH_XXH3_128 {
            return Err(bad(format!("unknown hash function id {}", bytes[OFF_HASH])));
        }
        let (k, width, flags) = (u32_at(OFF_K), u32_at(OFF_BLOCK_BITS), u32_at(OFF_FLAGS));
        if k != 0 || width != RIBBON_WIDTH as u32 {
            return Err(bad(format!("k {k}, width {width} for the ribbon layout")));
        }
        if flags != 0 {
            return Err(bad(format!("flags {flags:#x}")));
        }
        if u64_at(OFF_ONES) != 0 {
            return Err(bad("set-bit count field in a ribbon file".into()));
        }
        let shards = u64_at(OFF_SHARDS);
        if shards == 0 || !shards.is_power_of_two() || shards > MAX_SHARDS {
            return Err(bad(format!("shard count {shards}")));
        }
        let (columns, upper) = (u32_at(OFF_COLUMNS), u32_at(OFF_UPPER));
        if columns == 0 || columns > RIBBON_MAX_COLUMNS || (columns == 32 && upper != 0) {
            return Err(bad(format!("{columns} result bits (+{upper:#x})")));
        }
        let words = u64_at(OFF_WORDS);
        if words > MAX_WORDS {
            return Err(bad(format!("solution of {words} words")));
        }
        let data_len = u64_at(OFF_DATA_LEN);
        if data_len != ribbon_directory_bytes(shards) + words * 16 {
            return Err(bad(format!(
                "data length {data_len} for {shards} shards and {words} words"
            )));
        }
        if u64_at(OFF_BITS) != data_len * 8 {
            return Err(bad(format!("bit count {}", u64_at(OFF_BITS))));
        }
        let expected = HEADER_LEN as u64 + data_len;
        if file_len < expected {
            return Err(FormatProblem::Truncated {
                expected,
                found: file_len,
            });
        }
        if file_len > expected {
            return Err(FormatProblem::Trailing {
                extra: file_len - expected,
            });
        }
        let header = RibbonHeader {
            version,
            key_kind: bytes[OFF_KEY_KIND],
            match_mode: bytes[OFF_MATCH_MODE],
            seed: u64_at(OFF_SEED),
            items: u64_at(OFF_ITEMS),
            planned_items: u64_at(OFF_PLANNED),
            target_fp: f64::from_le_bytes(bytes[OFF_TARGET_FP..][..8].try_into().expect("8")),
            shards,
            columns,
            upper,
            words,
            data_len,
            data_checksum: u64_at(OFF_DATA_SUM),
        };
        check_counts(header.planned_items, header.target_fp).map_err(bad)?;
        if header.items > words.saturating_mul(RIBBON_WIDTH) {
            return Err(bad(format!("{} items in {words} words", header.items)));
        }
        Ok(header)
    }
}

impl ShardEntry {
    fn encode(&self, out: &mut [u8]) {
        out[..8].copy_from_slice(&self.offset.to_le_bytes());
        out[8..12].copy_from_slice(&self.blocks.to_le_bytes());
        out[12..16].copy_from_slice(&self.upper_start.to_le_bytes());
        out[16..20].copy_from_slice(&self.attempt.to_le_bytes());
        out[20..24].copy_from_slice(&self.keys.to_le_bytes());
    }

    fn decode(b: &[u8]) -> ShardEntry {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        ShardEntry {
            offset: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            blocks: u32_at(8),
            upper_start: u32_at(12),
            attempt: u32_at(16),
            keys: u32_at(20),
        }
    }

    /// Words this shard's solution takes with `r` lower result bits.
    pub fn words(&self, r: u32) -> u64 {
        block_offset(self.blocks, self.upper_start, r) as u64
    }
}

/// Decodes and checks the directory (the first `directory_len` bytes of
/// the data): offsets are the running sum of the shards' sizes, ending at
/// the solution's length; keys sum to the header's item count; padding is
/// zero.
pub(crate) fn decode_directory(
    header: &RibbonHeader,
    data: &[u8],
) -> Result<Vec<ShardEntry>, FormatProblem> {
    let bad = |s: String| FormatProblem::BadField(s);
    let dir_len = header.directory_len() as usize;
    let dir = data.get(..dir_len).ok_or(FormatProblem::Truncated {
        expected: (HEADER_LEN + dir_len) as u64,
        found: (HEADER_LEN + data.len()) as u64,
    })?;
    let shards = header.shards as usize;
    let mut entries = Vec::with_capacity(shards);
    let (mut next, mut keys) = (0u64, 0u64);
    for (i, raw) in dir.chunks_exact(ENTRY_LEN).take(shards).enumerate() {
        let e = ShardEntry::decode(raw);
        let ok = e.offset == next
            && e.upper_start <= e.blocks
            && e.attempt < MAX_ATTEMPTS
            && (e.keys as u64) <= e.blocks as u64 * RIBBON_WIDTH
            && (e.blocks != 0 || (e.keys == 0 && e.attempt == 0))
            && (e.blocks == 0 || e.keys != 0);
        if !ok {
            return Err(bad(format!("directory entry {i}: {e:?}")));
        }
        next += e.words(header.columns);
        keys += e.keys as u64;
        if next > header.words {
            return Err(bad(format!("directory entry {i} ends past the solution")));
        }
        entries.push(e);
    }
    if next != header.words || keys != header.items {
        return Err(bad(format!(
            "directory totals {next} words and {keys} keys, header says {} and {}",
            header.words, header.items
        )));
    }
    if dir[shards * ENTRY_LEN..].iter().any(|&b| b != 0) {
        return Err(bad("directory padding is not zero".into()));
    }
    Ok(entries)
}

/// Decodes and checks the header and directory of a whole ribbon file
/// held in `bytes`, as [`crate::Ribbon::open`] does before it answers a
/// lookup: on success every shard's solution lies inside `bytes`.
pub fn decode_file(bytes: &[u8]) -> Result<(RibbonHeader, Vec<ShardEntry>), FormatProblem> {
    let head = bytes
        .get(..HEADER_LEN)
        .ok_or(FormatProblem::TooShort(bytes.len() as u64))?;
    let header = RibbonHeader::decode(head, bytes.len() as u64)?;
    let entries = decode_directory(&header, &bytes[HEADER_LEN..])?;
    Ok((header, entries))
}

/// Rewrites the header checksum of the header at the start of `bytes`
/// (at least [`HEADER_LEN`] of them) after its fields were changed, so
/// tests and fuzzing reach the checks behind it.
pub fn reseal_header(bytes: &mut [u8]) {
    let sum = header_checksum(&bytes[..HEADER_LEN]);
    bytes[OFF_HEADER_SUM..OFF_HEADER_SUM + 8].copy_from_slice(&sum.to_le_bytes());
}

/// Streams solved shards into a new ribbon file (see the module docs).
#[derive(Debug)]
pub struct RibbonWriter {
    path: PathBuf,
    tmp: Option<PathBuf>,
    out: BufWriter<File>,
    header: RibbonHeader,
    entries: Vec<ShardEntry>,
    page: Vec<u8>,
    page_index: u64,
    sum: u64,
    words: u64,
}

impl RibbonWriter {
    /// Starts the file that will be `path`: `header` gives everything but
    /// the counts and checksums, which [`RibbonWriter::finish`] fills in.
    pub fn create(path: &Path, header: RibbonHeader) -> Result<RibbonWriter> {
        if header.shards == 0 || !header.shards.is_power_of_two() || header.shards > MAX_SHARDS {
            return Err(Error::InvalidParams(format!(
                "shard count {}",
                header.shards
            )));
        }
        let (tmp, file) = create_temp(path)?;
        let mut w = RibbonWriter {
            path: path.to_path_buf(),
            tmp: Some(tmp.clone()),
            out: BufWriter::with_capacity(1 << 20, file),
            entries: Vec::with_capacity(header.shards as usize),
            page: Vec::with_capacity(PAGE),
            page_index: header.directory_len() / PAGE as u64,
            header,
            sum: 0,
            words: 0,
        };
        let start = HEADER_LEN as u64 + w.header.directory_len();
        w.out
            .seek(SeekFrom::Start(start))
            .map_err(io_err(&tmp, "seek"))?;
        Ok(w)
    }

    /// Shards written so far: the next one pushed is this shard.
    pub fn shards_done(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Appends the next shard's solution.
    pub fn push(&mut self, shard: SolvedShard) -> Result<()> {
        if self.shards_done() >= self.header.shards {
            return Err(Error::InvalidParams("more shards than declared".into()));
        }
        let mut entry = shard.entry;
        entry.offset = self.words;
        if entry.words(self.header.columns) != shard.words.len() as u64 {
            return Err(Error::InvalidParams(
                "shard solution of the wrong size".into(),
            ));
        }
        for w in &shard.words {
            self.page.extend_from_slice(&w.to_le_bytes());
            if self.page.len() == PAGE {
                self.flush_page()?;
            }
        }
        self.words += shard.words.len() as u64;
        self.entries.push(entry);
        Ok(())
    }

    fn flush_page(&mut self) -> Result<()> {
        let tmp = self.tmp.as_deref().unwrap_or(&self.path);
        self.sum = self
            .sum
            .wrapping_add(xxh3_64_with_seed(&self.page, self.page_index));
        self.page_index += 1;
        self.out
            .write_all(&self.page)
            .map_err(io_err(tmp, "write"))?;
        self.page.clear();
        Ok(())
    }

    /// Writes the directory and the header, syncs, and renames the file
    /// into place. Returns the header as written.
    pub fn finish(mut self) -> Result<RibbonHeader> {
        if self.shards_done() != self.header.shards {
            return Err(Error::InvalidParams(format!(
                "{} of {} shards written",
                self.shards_done(),
                self.header.shards
            )));
        }
        if !self.page.is_empty() {
            self.flush_page()?;
        }
        let tmp = self.tmp.clone().expect("not finished twice");
        let mut dir = vec![0u8; self.header.directory_len() as usize];
        for (e, out) in self.entries.iter().zip(dir.chunks_exact_mut(ENTRY_LEN)) {
            e.encode(out);
        }
        let mut header = self.header.clone();
        header.words = self.words;
        header.items = self.entries.iter().map(|e| e.keys as u64).sum();
        header.data_len = dir.len() as u64 + self.words * 16;
        header.data_checksum = data_checksum(&dir).wrapping_add(self.sum);
        let io = |op| io_err(&tmp, op);
        self.out.flush().map_err(io("write"))?;
        let file = self.out.get_mut();
        file.seek(SeekFrom::Start(0)).map_err(io("seek"))?;
        file.write_all(&header.encode()).map_err(io("write"))?;
        file.write_all(&dir).map_err(io("write"))?;
        file.sync_all().map_err(io("fsync"))?;
        std::fs::rename(&tmp, &self.path).map_err(io_err(&self.path, "rename into place"))?;
        self.tmp = None;
        sync_dir(&self.path)?;
        Ok(header)
    }
}

impl Drop for RibbonWriter {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}
