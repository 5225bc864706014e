//! The static ribbon layout: a filter solved once from all its keys, at
//! 3–4 % over the information-theoretic bound (13.8 bits per item at
//! `p = 10⁻⁴`, against 22.0 for the blocked layout).
//!
//! A ribbon filter is a linear system over GF(2) (Dillinger & Walzer 2021;
//! RocksDB's `Standard128Ribbon`): each key is one equation, a 128-bit
//! coefficient row at a start slot whose solution bits must XOR to the
//! key's fingerprint. It cannot take keys after it is built — adding one
//! means solving again — so it suits a blacklist rebuilt from its source;
//! keys added between builds go into a small Bloom delta beside the file
//! (`bloomgate_list`), for which a build keeps a share of the rate
//! ([`RibbonSpec::reserve`]). The sizing and the false-positive math are
//! in `math/ribbon.rs`.
//!
//! # Keys, shards and rows
//!
//! A key is hashed once, with the file's seed, by the engine's XXH3-128
//! ([`crate::hash::hash_item`]); the ribbon layout keeps its high 64 bits,
//! the *key hash* ([`key_hash`]). The top `log2(shards)` bits of the key
//! hash choose the key's *shard*; every shard is an independent system of
//! about 2¹⁷–2¹⁸ keys, solved on its own in a few megabytes
//! (`ribbon/solve.rs`), so shards are solved in parallel and a build larger
//! than memory solves a range of shards at a time. Within a shard the key
//! hash and the shard's *attempt* number (the seed its solve succeeded
//! with) give the row ([`row`]): the start slot, the coefficients (bit 0
//! always set) and a 32-bit fingerprint, each from a 64-bit mix of the key
//! hash, so the 8 bytes of a key hash are all that a build keeps of a key.
//! Two keys with the same key hash are one key to the filter (about three
//! such pairs among 10¹⁰ keys, each a harmless merge).
//!
//! # The file
//!
//! `ribbon/file.rs`: a header, a directory of one [`ShardEntry`] per shard
//! (where its solution starts, its blocks, how many have the extra result
//! bit, its attempt, its keys), then the solutions. A lookup reads its
//! shard's entry (the directory is 24 bytes per 2¹⁸ keys, so it stays in
//! cache) and two adjacent 128-bit words per result bit of one block, which
//! sit together in one or two cache lines because the storage is
//! interleaved. Files are memory-mapped read-only and used in place.
//!
//! # Building
//!
//! [`build`] builds in memory from key hashes; larger builds feed
//! [`solve_shard`] with a range of shards at a time and stream the results
//! through a [`RibbonWriter`], which gives the same bytes: a shard's
//! solution depends only on its set of distinct keys and the file's
//! parameters, never on the order keys came in, the number of
//! threads or how many shards were solved together.

mod file;
mod solve;

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use rayon::prelude::*;

use crate::error::{io_err, Error, FormatProblem, Result};
use crate::format::{data_checksum, FORMAT_VERSION, HEADER_LEN};
use crate::hash::{hash_item, reduce};
use crate::math::{
    ribbon_columns, ribbon_shard_bits, ribbon_shard_fp, RIBBON_MAX_DELTA_SHARE, RIBBON_OVERHEAD,
};

pub use file::{decode_file, reseal_header, RibbonHeader, RibbonWriter, ENTRY_LEN, MAX_SHARDS};
pub use solve::{attempt_blocks, solve_shard, SolveError, SolvedShard, GROW_FROM, MAX_ATTEMPTS};

use solve::block_offset;

/// One shard's entry in the directory.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct ShardEntry {
    /// Index of the shard's first word in the solution.
    pub offset: u64,
    /// Blocks of 128 slots (0 for a shard without keys).
    pub blocks: u32,
    /// First block with `r + 1` result bits.
    pub upper_start: u32,
    /// The attempt whose seed solved the shard.
    pub attempt: u32,
    /// Distinct keys solved into the shard.
    pub keys: u32,
}

impl ShardEntry {
    /// The entry of a shard without keys.
    pub fn empty() -> ShardEntry {
        ShardEntry::default()
    }
}

/// A key's row in its shard: where it starts, its coefficients, its
/// fingerprint.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Start slot, `0..=m − 128`.
    pub start: u64,
    /// Coefficients of slots `start..start + 128`; bit 0 is set.
    pub coeff: u128,
    /// The fingerprint (the low `r` or `r + 1` bits are compared).
    pub fp: u32,
}

/// The 64-bit finalizer of MurmurHash3 (`fmix64`): a bijection whose every
/// output bit depends on every input bit.
#[inline(always)]
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The key hash of `item` under `seed`: the high half of its XXH3-128.
#[inline]
pub fn key_hash(seed: u64, item: &[u8]) -> u64 {
    hash_item(seed, item).hi
}

/// The shard of key hash `g` with `shard_bits` bits of shard index.
#[inline(always)]
pub fn shard_of(g: u64, shard_bits: u32) -> u64 {
    if shard_bits == 0 {
        0
    } else {
        g >> (64 - shard_bits)
    }
}

/// The row of key hash `g` in a shard of `blocks` (≥ 1) blocks, for the
/// shard's `attempt`.
#[inline(always)]
pub fn row(g: u64, attempt: u32, blocks: u32) -> Row {
    row_of_mixed(attempt_mix(g, attempt), start_slots(blocks))
}

/// The first of a row's three mixes: key hash `g` under the shard's
/// `attempt`. It gives the start slot and the fingerprint, and (a
/// bijection of `g` for each attempt) stands for the key while a shard is
/// solved.
#[inline(always)]
pub(crate) fn attempt_mix(g: u64, attempt: u32) -> u64 {
    let t = (attempt as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    mix(g ^ t)
}

/// Start slots of a shard of `blocks` (≥ 1) blocks: `0..=m − 128`.
#[inline(always)]
pub(crate) fn start_slots(blocks: u32) -> u64 {
    (blocks as u64 - 1) * 128 + 1
}

/// The start slot of the row whose [`attempt_mix`] is `a`.
#[inline(always)]
pub(crate) fn start_of_mixed(a: u64, starts: u64) -> u64 {
    reduce(a, starts)
}

/// The row whose [`attempt_mix`] is `a`, in a shard of `starts` start
/// slots.
#[inline(always)]
pub(crate) fn row_of_mixed(a: u64, starts: u64) -> Row {
    let b = mix(a ^ 0xd6e8_feb8_6659_fd93);
    let c = mix(b ^ 0xa076_1d64_78bd_642f);
    Row {
        start: start_of_mixed(a, starts),
        coeff: ((c as u128) << 64 | b as u128) | 1,
        fp: a as u32,
    }
}

/// What a ribbon filter is, before it is built.
#[derive(Clone, Debug, PartialEq)]
pub struct RibbonSpec {
    /// The rate asked for.
    pub target_fp: f64,
    /// The hash seed.
    pub seed: u64,
    /// Key kind code.
    pub key_kind: u8,
    /// Match mode code.
    pub match_mode: u8,
    /// Slots per key beyond one ([`RIBBON_OVERHEAD`]; lower only to test
    /// the retries).
    pub overhead: f64,
    /// The share of `target_fp` kept out of the solution for a delta of
    /// adds (`math/ribbon.rs`, "Room for adds"): the solution is planned
    /// for `target_fp · (1 − reserve)`, the header records `target_fp`.
    /// 0 in [`RibbonSpec::new`]; front ends that build lists set
    /// [`crate::math::RIBBON_DELTA_SHARE`].
    pub reserve: f64,
}

impl RibbonSpec {
    /// A spec at rate `target_fp` with seed `seed`, default key rules.
    pub fn new(target_fp: f64, seed: u64) -> RibbonSpec {
        RibbonSpec {
            target_fp,
            seed,
            key_kind: 0,
            match_mode: 0,
            overhead: RIBBON_OVERHEAD,
            reserve: 0.0,
        }
    }

    /// The rate the solution is planned for: `target_fp · (1 − reserve)`.
    pub fn solution_fp(&self) -> f64 {
        self.target_fp * (1.0 - self.reserve)
    }

    /// The header of a file of this spec for `planned` keys read (counts
    /// and checksums left for the writer). Refuses rates the layout cannot
    /// plan, and a reserve outside `0..=`[`RIBBON_MAX_DELTA_SHARE`].
    pub fn header(&self, planned: u64) -> Result<RibbonHeader> {
        if !(0.0..=RIBBON_MAX_DELTA_SHARE).contains(&self.reserve) {
            return Err(Error::InvalidParams(format!(
                "a delta share of {} (it must be between 0 and {RIBBON_MAX_DELTA_SHARE})",
                self.reserve
            )));
        }
        let (columns, upper) = ribbon_columns(self.solution_fp())?;
        crate::params::check_counts(planned.max(1), self.target_fp)
            .map_err(Error::InvalidParams)?;
        Ok(RibbonHeader {
            version: FORMAT_VERSION,
            key_kind: self.key_kind,
            match_mode: self.match_mode,
            seed: self.seed,
            items: 0,
            planned_items: planned.max(1),
            target_fp: self.target_fp,
            shards: 1 << ribbon_shard_bits(planned),
            columns,
            upper,
            words: 0,
            data_len: 0,
            data_checksum: 0,
        })
    }

    /// Solves one shard of this spec's file (`keys` in any order, repeats
    /// allowed).
    pub fn solve(&self, header: &RibbonHeader, keys: &[u64]) -> Result<SolvedShard> {
        solve_shard(keys, header.columns, header.upper, self.overhead)
            .map_err(|e| Error::InvalidParams(e.to_string()))
    }
}

/// Builds the ribbon file `path` from key hashes in memory: shards in
/// parallel, written in order. `planned` is the number of keys read
/// (duplicates included), which sets the shard count.
pub fn build(
    path: &Path,
    spec: &RibbonSpec,
    planned: u64,
    hashes: Vec<u64>,
) -> Result<RibbonHeader> {
    let header = spec.header(planned)?;
    let (keys, cuts) = group_by_shard(&hashes, header.shard_bits(), 0, header.shards as usize);
    drop(hashes);
    let solved: Vec<Result<SolvedShard>> = (0..header.shards as usize)
        .into_par_iter()
        .map(|s| spec.solve(&header, &keys[cuts[s]..cuts[s + 1]]))
        .collect();
    drop(keys);
    let mut w = RibbonWriter::create(path, header)?;
    for s in solved {
        w.push(s?)?;
    }
    w.finish()
}

/// Groups key hashes by shard, for the `count` shards from `first` on
/// with `shard_bits` bits of shard index (every key must be of one of
/// them): a counting sort, so each shard's keys keep their order. Returns
/// the keys and `count + 1` cuts, shard `first + i` holding
/// `keys[cuts[i]..cuts[i + 1]]`.
pub fn group_by_shard(
    hashes: &[u64],
    shard_bits: u32,
    first: u64,
    count: usize,
) -> (Vec<u64>, Vec<usize>) {
    let mut cuts = vec![0usize; count + 1];
    for &g in hashes {
        cuts[(shard_of(g, shard_bits) - first) as usize + 1] += 1;
    }
    for i in 0..count {
        cuts[i + 1] += cuts[i];
    }
    let mut next = cuts.clone();
    let mut keys = vec![0u64; hashes.len()];
    for &g in hashes {
        let at = &mut next[(shard_of(g, shard_bits) - first) as usize];
        keys[*at] = g;
        *at += 1;
    }
    (keys, cuts)
}

/// An opened ribbon filter: the file mapped read-only, its directory
/// decoded and checked.
#[derive(Debug)]
pub struct Ribbon {
    header: RibbonHeader,
    entries: Vec<ShardEntry>,
    map: Mmap,
    solution: usize,
    path: PathBuf,
}

impl Ribbon {
    /// Opens and checks the ribbon file at `path` (header, directory); the
    /// data checksum is checked by [`Ribbon::verify`].
    pub fn open(path: impl AsRef<Path>) -> Result<Ribbon> {
        use std::io::Read;
        let path = path.as_ref();
        let mut file = File::open(path).map_err(io_err(path, "open"))?;
        let meta = file.metadata().map_err(io_err(path, "stat"))?;
        let format = |problem| Error::Format {
            path: path.into(),
            problem,
        };
        if meta.is_dir() {
            return Err(Error::Io {
                path: path.into(),
                op: "open",
                source: std::io::Error::other("is a directory"),
            });
        }
        if meta.len() < HEADER_LEN as u64 {
            return Err(format(FormatProblem::TooShort(meta.len())));
        }
        let mut head = vec![0u8; HEADER_LEN];
        file.read_exact(&mut head).map_err(io_err(path, "read"))?;
        let header = RibbonHeader::decode(&head, meta.len()).map_err(format)?;
        // SAFETY: bloomgate never writes a ribbon file in place; files are
        // replaced by renaming a new one over them, which leaves this
        // mapping on the old inode.
        let map = unsafe { Mmap::map(&file) }.map_err(io_err(path, "memory-map"))?;
        if map.len() as u64 != meta.len() {
            return Err(format(FormatProblem::Truncated {
                expected: meta.len(),
                found: map.len() as u64,
            }));
        }
        let entries = file::decode_directory(&header, &map[HEADER_LEN..]).map_err(format)?;
        let _ = map.advise(memmap2::Advice::Random);
        Ok(Ribbon {
            solution: HEADER_LEN + header.directory_len() as usize,
            header,
            entries,
            map,
            path: path.to_path_buf(),
        })
    }

    /// Opens the ribbon file at `path` like [`Ribbon::open`], then reads it
    /// whole into memory of its own, asking for transparent huge pages
    /// (`MADV_HUGEPAGE`), and drops the file's pages from the page cache as
    /// they are copied (`POSIX_FADV_DONTNEED`), so the filter is not held
    /// twice. A lookup in a filter of many gigabytes is a random access:
    /// through 4 KiB pages of the page cache it also misses the TLB and
    /// waits for a page walk whose table entries are themselves out of
    /// cache; 2 MiB pages keep the walk's tables small enough to stay in
    /// cache. Refused (an error, nothing served half-read) when the file
    /// changes between the two reads: its header and directory must be the
    /// bytes [`Ribbon::open`] checked.
    pub fn open_in_memory(path: impl AsRef<Path>) -> Result<Ribbon> {
        use std::os::unix::fs::FileExt;
        /// Bytes read (and dropped from the page cache) at a time.
        const CHUNK: usize = 64 << 20;
        let path = path.as_ref();
        let mut r = Ribbon::open(path)?;
        let len = r.map.len();
        let file = File::open(path).map_err(io_err(path, "open"))?;
        let mut copy =
            memmap2::MmapMut::map_anon(len).map_err(io_err(path, "allocate memory for"))?;
        if len >= 4 << 20 {
            let _ = copy.advise(memmap2::Advice::HugePage);
        }
        let mut at = 0;
        while at < len {
            let end = (at + CHUNK).min(len);
            file.read_exact_at(&mut copy[at..end], at as u64)
                .map_err(io_err(path, "read"))?;
            let _ = rustix::fs::fadvise(
                &file,
                at as u64,
                std::num::NonZeroU64::new((end - at) as u64),
                rustix::fs::Advice::DontNeed,
            );
            at = end;
        }
        if copy[..r.solution] != r.map[..r.solution] {
            return Err(Error::Format {
                path: path.into(),
                problem: FormatProblem::BadField(
                    "the file changed while it was read into memory; open it again".into(),
                ),
            });
        }
        r.map = copy.make_read_only().map_err(io_err(path, "protect"))?;
        Ok(r)
    }

    /// The header.
    pub fn header(&self) -> &RibbonHeader {
        &self.header
    }

    /// The shards' directory entries.
    pub fn entries(&self) -> &[ShardEntry] {
        &self.entries
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Distinct keys stored.
    pub fn items(&self) -> u64 {
        self.header.items
    }

    /// Bytes of the file.
    pub fn file_len(&self) -> u64 {
        self.map.len() as u64
    }

    /// Bits of data per stored key.
    pub fn bits_per_item(&self) -> f64 {
        self.header.data_len as f64 * 8.0 / self.header.items.max(1) as f64
    }

    /// The rate predicted from the shards' actual result bits: the mean of
    /// their rates, as a key picks its shard uniformly.
    pub fn predicted_fp(&self) -> f64 {
        let r = self.header.columns;
        let sum: f64 = self
            .entries
            .iter()
            .map(|e| ribbon_shard_fp(e.blocks, e.upper_start, r))
            .sum();
        sum / self.entries.len() as f64
    }

    /// Shards that needed more than one attempt.
    pub fn retried_shards(&self) -> u64 {
        self.entries.iter().filter(|e| e.attempt > 0).count() as u64
    }

    /// Reads the whole data and compares it with the data checksum.
    pub fn verify(&self) -> Result<()> {
        let found = data_checksum(&self.map[HEADER_LEN..]);
        if found != self.header.data_checksum {
            return Err(Error::Format {
                path: self.path.clone(),
                problem: FormatProblem::DataChecksum {
                    expected: self.header.data_checksum,
                    found,
                },
            });
        }
        Ok(())
    }

    /// The solution words a row reads: its block's `cols` columns and,
    /// when it does not start on the block's first slot, as many of the
    /// next block's (which has at least as many). One bounds check; the
    /// directory's checks on open keep it inside the file.
    #[inline(always)]
    fn row_words(&self, e: &ShardEntry, start: u64) -> (&[u8], u32, u32) {
        let r = self.header.columns;
        let block = (start >> 7) as u32;
        let shift = (start & 127) as u32;
        let cols = r + (block >= e.upper_start) as u32;
        let here = e.offset as usize + block_offset(block, e.upper_start, r);
        let words = cols as usize * (1 + (shift != 0) as usize);
        let at = self.solution + here * 16;
        (&self.map[at..at + words * 16], cols, shift)
    }
    /// True if the item may be in the filter; false if it certainly is not.
    #[inline]
    pub fn contains(&self, item: &[u8]) -> bool {
        self.contains_hash(key_hash(self.header.seed, item))
    }

    /// [`Ribbon::contains`] for a key hash.
    #[inline]
    pub fn contains_hash(&self, g: u64) -> bool {
        let e = &self.entries[shard_of(g, self.header.shard_bits()) as usize];
        if e.blocks == 0 {
            return false;
        }
        self.check_row(e, &row(g, e.attempt, e.blocks))
    }

    /// Whether the row's parities over the solution match its fingerprint
    /// bits. A row starting `shift` slots into its block reads word `j` of
    /// the block (`lo`) and of the next (`hi`): the parity of
    /// `(lo >> shift | hi << (128 - shift)) & coeff` is that of
    /// `(lo & coeff << shift) ^ (hi & coeff >> (128 - shift))`, so the
    /// coefficients are shifted once per row instead of the words once per
    /// column, and the 128 bits fold to 64 before one population count.
    #[inline(always)]
    fn check_row(&self, e: &ShardEntry, row: &Row) -> bool {
        let (words, cols, shift) = self.row_words(e, row.start);
        let fp = row.fp;
        let parity = |x: u128| (x as u64 ^ (x >> 64) as u64).count_ones() & 1;
        let word = |b: &[u8]| u128::from_le_bytes(b.try_into().expect("16 bytes"));
        if shift == 0 {
            for (j, lo) in words.chunks_exact(16).enumerate() {
                if parity(word(lo) & row.coeff) != (fp >> j) & 1 {
                    return false;
                }
            }
        } else {
            let (c_lo, c_hi) = (row.coeff << shift, row.coeff >> (128 - shift));
            let (lo, hi) = words.split_at(cols as usize * 16);
            for (j, (lo, hi)) in lo.chunks_exact(16).zip(hi.chunks_exact(16)).enumerate() {
                if parity(word(lo) & c_lo ^ word(hi) & c_hi) != (fp >> j) & 1 {
                    return false;
                }
            }
        }
        true
    }

    /// Answers `items` into `out` (cleared first), in order: a batch is
    /// hashed first and the lines its rows read prefetched (every line
    /// beyond the caches, the first of each run in them), so the cache
    /// misses of a batch overlap.
    pub fn contains_many<T: AsRef<[u8]>>(&self, items: &[T], out: &mut Vec<bool>) {
        const BATCH: usize = 16;
        out.clear();
        out.reserve(items.len());
        let bits = self.header.shard_bits();
        let prefetch_all = self.header.data_len >= PREFETCH_ALL_FROM;
        let mut pending = [(
            0usize,
            Row {
                start: 0,
                coeff: 0,
                fp: 0,
            },
        ); BATCH];
        for chunk in items.chunks(BATCH) {
            for (slot, item) in pending.iter_mut().zip(chunk) {
                let g = key_hash(self.header.seed, item.as_ref());
                let s = shard_of(g, bits) as usize;
                let e = &self.entries[s];
                if e.blocks == 0 {
                    *slot = (usize::MAX, slot.1);
                    continue;
                }
                let row = row(g, e.attempt, e.blocks);
                // The row's words are one contiguous run of 13–28 words
                // (up to 448 bytes, 8 lines). Beyond the caches each line
                // is a miss of its own (random rows defeat the hardware
                // prefetcher), so every line is prefetched; in cache only
                // the first of each block's run, as more prefetches there
                // cost more than they save (BENCHMARKS.md, "Static ribbon
                // layout").
                let (words, cols, shift) = self.row_words(e, row.start);
                if prefetch_all {
                    prefetch_lines(words);
                } else {
                    prefetch(words.as_ptr());
                    if shift != 0 {
                        prefetch(words[cols as usize * 16..].as_ptr());
                    }
                }
                *slot = (s, row);
            }
            for (s, row) in &pending[..chunk.len()] {
                out.push(*s != usize::MAX && self.check_row(&self.entries[*s], row));
            }
        }
    }
}

/// Data size from which a batch prefetches every line a row reads (about
/// twice a core's L2 here; smaller filters stay in cache).
const PREFETCH_ALL_FROM: u64 = 8 << 20;

/// Prefetches every cache line of `bytes`.
#[inline(always)]
fn prefetch_lines(bytes: &[u8]) {
    let first = bytes.as_ptr() as usize & !63;
    let end = bytes.as_ptr() as usize + bytes.len();
    let mut line = first;
    while line < end {
        prefetch(line as *const u8);
        line += 64;
    }
}

#[inline(always)]
fn prefetch(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch(at as *const i8, _MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

#[cfg(test)]
mod tests;
