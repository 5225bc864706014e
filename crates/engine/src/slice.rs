//! Building a filter larger than memory, one slice of its bit array at a time.
//!
//! A filter of `m` bits that does not fit in the memory a build may use is
//! cut into *slices*: contiguous, page-aligned ranges of its words
//! ([`plan_slices`]). Each slice is built in memory by a pass over all the
//! items that sets only the bits that fall inside it ([`Slice::insert_batch`]),
//! then written to its place in the output file, and the next slice reuses
//! the memory. Every bit of the finished array is set by exactly the items
//! whose positions name it, so the result is bit for bit the array an
//! in-memory build of the same items with the same parameters produces,
//! whatever the number of slices (test `slices_are_bit_identical`).
//!
//! Positions come from [`Locator`] (through [`position_of`] for one item)
//! and [`for_each_position`], the derivation
//! [`Filter::prepare`](crate::Filter::prepare) uses too, for the filter's
//! hash id: the blocked layout's block from the high bits of the item's
//! hash, the in-block probes from [`arch::block_mask`]; the classic
//! layout's `k` double-hashing positions. Slices are whole 4096-byte pages, so the file's data checksum —
//! a sum of per-page hashes ([`crate::format::data_checksum`]) — is the sum
//! of the slices' checksums ([`Slice::checksum`]).
//!
//! A pass costs hashing every item again: `s` slices cost `s` hashing passes
//! over the input (and `s` reads of it). With the blocked layout an item's
//! block lies in exactly one slice, so a pass only sets bits of the items of
//! its slice; with the classic layout an item's `k` bits may lie in `k`
//! different slices.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

use crate::arch::{self, Probes};
use crate::atomic::{create_temp, sync_dir};
use crate::error::{io_err, Error, Result};
use crate::filter::Prepared;
use crate::format::{Header, FORMAT_VERSION, HEADER_LEN};
use crate::hash::reduce;
use crate::math::Layout;
use crate::params::Params;
use crate::place::Locator;
use crate::storage::Bits;

/// Blocks in flight in the prefetch rings of [`Slice::insert_batch`] and
/// [`Slice::rules_out_batch`]: enough to cover a DRAM miss (~100 ns) with
/// the hashing of the items between (as `Filter::contains_batch`).
const PIPELINE: usize = 16;

/// Classic items in flight in the same rings: each has up to k probes in a
/// slice, so fewer items cover as many misses as the CPU can track.
const CLASSIC_PIPELINE: usize = 4;

/// Records one thread stages before it writes them, sorted ([`Slice`]'s
/// staged writes): 32 MiB of records, and as much again to sort them into.
/// The gain grows with the records that land in each huge page per write
/// (BENCHMARKS.md, "Sorted slice writes").
const STAGE_RECORDS: usize = 1 << 22;

/// All threads' staging buffers together stay within this many bytes
/// (records and sort scratch): on a machine with many cores each thread
/// stages fewer records rather than the build using more memory.
const STAGE_TOTAL_BYTES: usize = 256 << 20;

/// Slices from this size on stage their writes, by layout: blocked,
/// classic. Below it a slice is covered by few enough TLB entries (the L2
/// TLB of a Zen 3 core reaches 4 GiB in 2 MiB pages) that sorting the writes
/// costs more than it saves; classic items make 14 scattered writes each
/// instead of one block, so staging pays from a smaller slice. Measured by
/// `slice_writes` (BENCHMARKS.md, "Sorted slice writes"): staged/direct
/// 1.27 at 1.3 GiB, 1.05 at 2.7 GiB and 0.55 at 7.3 GiB blocked; 0.93 at
/// 2 GiB and 0.59 at 11 GiB classic.
const STAGE_MIN_BYTES: [u64; 2] = [4 << 30, 2 << 30];

/// Staged writes are sorted into buckets of 2 MiB of the slice (as a shift
/// of byte offsets): one transparent huge page, so one TLB entry, each.
const BUCKET_SHIFT: u32 = 21;

/// Words in one checksum page (4096 bytes): slices start and end on pages.
pub const PAGE_WORDS: u64 = 4096 / 8;

/// Cuts a filter's words into slices of at most `budget_bytes` each (at
/// least one page): `[first word, end word)` ranges in order, covering
/// every word once. The fewest slices that fit are made as equal as whole
/// pages allow (25.6 GiB in a 12 GiB budget: three of ~8.5 GiB, not 12 +
/// 12 + 1.6), so every pass writes into the smallest memory it can and
/// whatever a command keeps beside the slice has the rest of the budget's
/// room.
pub fn plan_slices(params: &Params, budget_bytes: u64) -> Vec<Range<u64>> {
    let words = params.words();
    let pages = words.div_ceil(PAGE_WORDS);
    let max_pages = (budget_bytes / 8 / PAGE_WORDS).max(1);
    let count = pages.div_ceil(max_pages).max(1);
    let per = pages.div_ceil(count) * PAGE_WORDS;
    let mut out = Vec::new();
    let mut start = 0;
    while start < words {
        let end = start.saturating_add(per).min(words);
        out.push(start..end);
        start = end;
    }
    out
}

/// Where `item` lives in a filter with `params`: exactly what
/// [`Filter::prepare`](crate::Filter::prepare) returns. It makes a
/// [`Locator`] for the one item; a caller placing many keeps one.
#[inline]
pub fn position_of(params: &Params, item: &[u8]) -> Prepared {
    Locator::new(params).prepare(item)
}

/// Calls `f(word, mask)` for every word a prepared item's bits are in, with
/// the bits it sets there (blocked: the words of its block with a nonzero
/// mask; classic: one call per probe, in probe order).
#[inline]
pub fn for_each_position(params: &Params, p: &Prepared, mut f: impl FnMut(u64, u64)) {
    match params.layout {
        Layout::Blocked => {
            let mask = arch::block_mask(params.hash.probes(), p.b as u32, params.k);
            for (i, m) in mask.into_iter().enumerate() {
                if m != 0 {
                    f(p.a + i as u64, m);
                }
            }
        }
        Layout::Classic => {
            let m = params.bits;
            let (mut x, mut y) = (p.a, p.b);
            for i in 0..params.k as u64 {
                let pos = reduce(x, m);
                f(pos >> 6, 1 << (pos & 63));
                x = x.wrapping_add(y);
                y = y.wrapping_add(i);
            }
        }
    }
}

/// Bytes of one record that [`Slice::insert_and_spill`] writes for a later
/// slice: the item's block (word offset in that slice / 8) in the high 32
/// bits and its 32-bit in-block hash in the low 32, little-endian — all that
/// setting the item's bits needs.
pub const RECORD_BYTES: u64 = 8;

/// Whether the items of slice `range` can be spilled as records
/// ([`Slice::insert_and_spill`]): blocked layout, and at most 2³² blocks
/// (256 GiB) in the slice, so that a block fits in a record's 32 bits.
pub fn can_spill(params: &Params, range: &Range<u64>) -> bool {
    params.layout == Layout::Blocked && (range.end - range.start) / 8 <= 1 << 32
}

/// Sets a blocked item's bits in the block at word `at`; whether one was new.
#[inline]
fn set_block(words: &[AtomicU64], probes: Probes, at: usize, h: u32, k: u32) -> bool {
    let mut changed = false;
    for (i, m) in arch::block_mask(probes, h, k).into_iter().enumerate() {
        changed |= m != 0 && set_word(&words[at + i], m);
    }
    changed
}

/// Sets `mask`'s bits in `w`; whether one was new.
#[inline]
fn set_word(w: &AtomicU64, mask: u64) -> bool {
    // Skip the locked RMW when the bits are already there.
    w.load(Relaxed) & mask != mask && w.fetch_or(mask, Relaxed) & mask != mask
}

/// The record of a blocked item in the slice starting at word `start`: its
/// block there in the high 32 bits, its in-block hash in the low 32.
#[inline]
fn block_record(p: &Prepared, start: u64) -> u64 {
    ((p.a - start) / 8) << 32 | (p.b as u32 as u64)
}

fn bad_record(index: usize) -> Error {
    Error::BadSpill(format!(
        "spilled record {index} of a batch names no block of its slice, or is torn"
    ))
}

/// One slice of a filter's bit array, built in memory.
///
/// # Staged writes
///
/// The slices of a filter larger than memory are gigabytes each, and an
/// item's bits land at a random place in them: every write is a cache miss
/// and, the slice spanning several times what the TLB covers even in huge
/// pages, a page walk too (a nested one under virtualization). So a large
/// slice does not write an item's bits when it is given: each thread appends
/// a compact record of them (blocked: block and in-block hash; classic: the
/// bit's offset) to a buffer of its own, and a full buffer is sorted by
/// 2 MiB bucket (a counting sort, [`BUCKET_SHIFT`]) and written bucket after
/// bucket, so that the page walk of each bucket is paid once per buffer
/// rather than once per item, and the writes within a bucket overlap.
/// On slices of the ten-billion run's size (7–12 GiB) an insert costs 0.55–0.6
/// of a direct one (BENCHMARKS.md, "Sorted slice writes"); smaller slices
/// write directly ([`STAGE_MIN_BYTES`]).
///
/// Staged writes are invisible until they are written, which every reader
/// of the slice ([`Slice::as_bytes`], [`Slice::rules_out`], …) and
/// [`Slice::new_items`] does first: a caller cannot see a slice without
/// them. Writes staged by a call still running on another thread are, as
/// ever, not promised to a reader.
pub struct Slice {
    params: Params,
    /// Where items live ([`Locator::new`] of `params`).
    locator: Locator,
    range: Range<u64>,
    bits: Bits,
    /// `None` for slices written directly (small ones).
    stage: Option<Stage>,
    /// New items whose bits have been written.
    new: AtomicU64,
}

/// The staging buffers of one slice.
struct Stage {
    /// Idle buffers, each (records, sort scratch); one per thread that
    /// staged at once.
    pool: Mutex<Vec<(Vec<u64>, Vec<u64>)>>,
    /// Records a buffer holds before it is written.
    capacity: usize,
    /// Some idle buffer holds records not yet written (changed under the
    /// pool's lock).
    pending: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while the lock was held left whole buffers behind: usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl std::fmt::Debug for Slice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slice")
            .field("range", &self.range)
            .finish_non_exhaustive()
    }
}

impl Slice {
    /// Zeroed memory for words `range` of a filter with `params` (a range
    /// from [`plan_slices`]).
    pub fn new(params: &Params, range: Range<u64>) -> Result<Slice> {
        params.validate()?;
        if range.start > range.end
            || range.end > params.words()
            || !range.start.is_multiple_of(PAGE_WORDS)
            || (!range.end.is_multiple_of(PAGE_WORDS) && range.end != params.words())
        {
            return Err(Error::InvalidParams(format!(
                "slice {range:?} is not a page-aligned part of {} words",
                params.words()
            )));
        }
        let words = usize::try_from(range.end - range.start)
            .map_err(|_| Error::OutOfMemory((range.end - range.start) * 8))?;
        let bits = Bits::heap(words).ok_or(Error::OutOfMemory(words as u64 * 8))?;
        let min = match params.layout {
            Layout::Blocked => STAGE_MIN_BYTES[0],
            Layout::Classic => STAGE_MIN_BYTES[1],
        };
        let capacity = if words as u64 * 8 >= min {
            let threads = rayon::current_num_threads().max(1);
            (STAGE_TOTAL_BYTES / 16 / threads).clamp(1, STAGE_RECORDS)
        } else {
            0
        };
        Ok(Slice {
            params: params.clone(),
            locator: Locator::new(params),
            range,
            bits,
            stage: None,
            new: AtomicU64::new(0),
        }
        .with_staging(capacity))
    }

    /// This slice with staged writes of `capacity` records per buffer, or
    /// written directly if 0 ([`Slice::new`] chooses by the slice's size;
    /// this is for measuring the choice, as `slice_writes` in the bench
    /// crate does). The bits written are the same either way.
    pub fn with_staging(mut self, capacity: usize) -> Slice {
        self.stage = (capacity > 0).then(|| Stage {
            pool: Mutex::new(Vec::new()),
            capacity,
            pending: AtomicBool::new(false),
        });
        self
    }

    /// Reads words `range` of a filter file into memory (with `pread`, not
    /// through a mapping, so the bytes are this slice's alone and leave with
    /// it). `filter` must be opened from a file.
    pub fn load(filter: &crate::Filter, range: Range<u64>) -> Result<Slice> {
        let path = filter
            .path()
            .ok_or(Error::NotWritable("Slice::load needs a file-backed filter"))?
            .to_path_buf();
        let mut s = Slice::new(filter.params(), range)?;
        let file = File::open(&path).map_err(io_err(&path, "open"))?;
        let at = HEADER_LEN as u64 + s.range.start * 8;
        file.read_exact_at(s.bits.bytes_mut(), at)
            .map_err(io_err(&path, "read"))?;
        Ok(s)
    }

    /// Whether this slice rules the prepared item out: `None` if none of its
    /// bits lie here, else `Some(true)` if one of those bits is unset (the
    /// item is certainly absent), `Some(false)` if all are set. An item is
    /// (probably) present in the whole filter exactly when no slice returns
    /// `Some(true)`.
    #[inline]
    pub fn rules_out(&self, p: &Prepared) -> Option<bool> {
        self.settle();
        let words = self.bits.words();
        let (start, end) = (self.range.start, self.range.end);
        let mut seen = false;
        let mut missing = false;
        for_each_position(&self.params, p, |word, mask| {
            if (start..end).contains(&word) {
                seen = true;
                missing |= words[(word - start) as usize].load(Relaxed) & mask != mask;
            }
        });
        seen.then_some(missing)
    }

    /// The words of the filter this slice holds.
    pub fn range(&self) -> Range<u64> {
        self.range.clone()
    }

    /// Sets the bits of `items` that fall inside this slice; safe to call
    /// from several threads at once. A large slice stages the writes and
    /// writes them sorted ([`Slice`]); whoever reads the slice sees them.
    ///
    /// Counts the new items ([`Slice::new_items`]), each in one slice only.
    /// Blocked: an item is new if it set a new bit (all its bits are in its
    /// block's slice), as in an in-memory build — whose count, like this
    /// one, depends on the order of the items only through those whose bits
    /// all happen to be set by others. Classic: an item whose bits all lie in
    /// this slice is judged the same way; one whose bits span slices cannot
    /// be, and is counted as new in the slice of its first probe — an
    /// overcount only for items given twice (or fully covered by others),
    /// which `info`'s fill-based estimate does not share.
    pub fn insert_batch<T: AsRef<[u8]>>(&self, items: &[T]) {
        match self.params.layout {
            Layout::Blocked => self.insert_and_spill(items, &[], &mut []),
            Layout::Classic => self.insert_classic(items),
        }
    }

    /// [`Slice::insert_batch`] for the blocked layout, which also appends to
    /// `spills[i]` the [`RECORD_BYTES`]-byte record of every item whose
    /// block lies in `later[i]` — the words of a slice built later
    /// ([`Slice::insert_records`]) — so that the item need not be read and
    /// hashed again for it. The ranges must come from the same
    /// [`plan_slices`], each passing [`can_spill`].
    ///
    /// # Panics
    /// If a range fails [`can_spill`], or `spills` is shorter than `later`.
    pub fn insert_and_spill<T: AsRef<[u8]>>(
        &self,
        items: &[T],
        later: &[Range<u64>],
        spills: &mut [Vec<u8>],
    ) {
        assert!(later.iter().all(|r| can_spill(&self.params, r)));
        assert!(spills.len() >= later.len());
        let mut spill = |p: &Prepared| {
            if let Some(i) = later.iter().position(|r| r.contains(&p.a)) {
                spills[i].extend_from_slice(&block_record(p, later[i].start).to_le_bytes());
            }
        };
        let start = self.range.start;
        match &self.stage {
            Some(stage) => self.stage(stage, |staged| {
                for item in items {
                    let p = self.locator.prepare(item.as_ref());
                    if self.range.contains(&p.a) {
                        staged.push(block_record(&p, start));
                    } else {
                        spill(&p);
                    }
                }
            }),
            None => {
                let words = self.bits.words();
                let (k, probes) = (self.params.k, self.params.hash.probes());
                let mut new = 0;
                self.blocked_ring(
                    items.iter().map(|item| {
                        let p = self.locator.prepare(item.as_ref());
                        spill(&p);
                        ((), p)
                    }),
                    |(), at, h| new += set_block(words, probes, at, h, k) as u64,
                );
                self.new.fetch_add(new, Relaxed);
            }
        }
    }

    /// Sets the bits of items spilled for this slice by
    /// [`Slice::insert_and_spill`] (`records` whole records, back to back),
    /// counting new items as [`Slice::insert_batch`] does. Safe to call from
    /// several threads.
    ///
    /// A record that does not name a block of this slice (a damaged spill
    /// file), or a torn one, is an error, and none of `records` is set.
    pub fn insert_records(&self, records: &[u8]) -> Result<()> {
        let blocks = (self.range.end - self.range.start) / 8;
        let (whole, torn) = records.as_chunks::<{ RECORD_BYTES as usize }>();
        let mut parsed = Vec::with_capacity(whole.len());
        for (i, r) in whole.iter().enumerate() {
            let r = u64::from_le_bytes(*r);
            if r >> 32 >= blocks {
                return Err(bad_record(i));
            }
            parsed.push(r);
        }
        if !torn.is_empty() {
            return Err(bad_record(whole.len()));
        }
        match &self.stage {
            Some(stage) => self.stage(stage, |staged| staged.extend_from_slice(&parsed)),
            None => {
                let new = self.write_blocks(&parsed);
                self.new.fetch_add(new, Relaxed);
            }
        }
        Ok(())
    }

    /// [`Slice::insert_batch`] for the classic layout. Written directly, an
    /// item's probes in this slice are prefetched when it is hashed and
    /// written [`CLASSIC_PIPELINE`] items later, so that the misses of
    /// several items overlap; staged, the probes of an item with bits in
    /// other slices too are staged one record each, and the rare item whose
    /// bits all lie here is written at once (its count needs them all).
    fn insert_classic<T: AsRef<[u8]>>(&self, items: &[T]) {
        let words = self.bits.words();
        let (start, end) = (self.range.start, self.range.end);
        let mut new = 0;
        // Sets the item's bits in this slice (staging them when it has bits
        // elsewhere and `staged` is given) and counts it.
        let mut set = |p: &Prepared, staged: Option<&mut Vec<u64>>| {
            let (mut first, mut counts, mut elsewhere) = (true, false, false);
            for_each_position(&self.params, p, |word, _| {
                let here = (start..end).contains(&word);
                counts |= first && here;
                elsewhere |= !here;
                first = false;
            });
            if let (Some(staged), true) = (staged, elsewhere) {
                for_each_position(&self.params, p, |word, mask| {
                    if (start..end).contains(&word) {
                        staged.push((word - start) << 6 | mask.trailing_zeros() as u64);
                    }
                });
                new += counts as u64;
                return;
            }
            let mut changed = false;
            for_each_position(&self.params, p, |word, mask| {
                if (start..end).contains(&word) {
                    changed |= set_word(&words[(word - start) as usize], mask);
                }
            });
            new += (counts && (changed || elsewhere)) as u64;
        };
        match &self.stage {
            Some(stage) => self.stage(stage, |staged| {
                for item in items {
                    set(&self.locator.prepare(item.as_ref()), Some(&mut *staged));
                }
            }),
            None => {
                let mut ring = [Prepared { a: 0, b: 0 }; CLASSIC_PIPELINE];
                for (i, item) in items.iter().enumerate() {
                    let p = self.locator.prepare(item.as_ref());
                    self.prefetch_classic(&p);
                    let slot = &mut ring[i % CLASSIC_PIPELINE];
                    if i >= CLASSIC_PIPELINE {
                        set(slot, None);
                    }
                    *slot = p;
                }
                for i in items.len().saturating_sub(CLASSIC_PIPELINE)..items.len() {
                    set(&ring[i % CLASSIC_PIPELINE], None);
                }
            }
        }
        self.new.fetch_add(new, Relaxed);
    }

    /// Sets the bits of classic `items` that fall inside this slice, in
    /// order and written directly (never staged), and sets `changed[i]`
    /// when item `i` set a bit that was clear. An item is new to the whole
    /// filter exactly when it changed some slice, so a caller that keeps
    /// these flags across the passes of all slices (OR-ed per item) counts
    /// the items an in-memory build in the same order counts, whatever the
    /// slicing. Sequential by design: the count depends on the order.
    ///
    /// # Panics
    /// If the layout is not classic or `changed` is shorter than `items`.
    pub fn insert_classic_flagged<T: AsRef<[u8]>>(&self, items: &[T], changed: &mut [bool]) {
        assert_eq!(self.params.layout, Layout::Classic);
        assert!(changed.len() >= items.len());
        self.settle();
        let words = self.bits.words();
        let (start, end) = (self.range.start, self.range.end);
        let set = |p: &Prepared, flag: &mut bool| {
            for_each_position(&self.params, p, |word, mask| {
                if (start..end).contains(&word) {
                    *flag |= set_word(&words[(word - start) as usize], mask);
                }
            });
        };
        let mut ring = [Prepared { a: 0, b: 0 }; CLASSIC_PIPELINE];
        for (i, item) in items.iter().enumerate() {
            let p = self.locator.prepare(item.as_ref());
            self.prefetch_classic(&p);
            let slot = &mut ring[i % CLASSIC_PIPELINE];
            if i >= CLASSIC_PIPELINE {
                set(slot, &mut changed[i - CLASSIC_PIPELINE]);
            }
            *slot = p;
        }
        for i in items.len().saturating_sub(CLASSIC_PIPELINE)..items.len() {
            set(&ring[i % CLASSIC_PIPELINE], &mut changed[i]);
        }
    }

    /// Appends records through `fill` to an idle staging buffer (one per
    /// thread staging at once), and writes the buffer when it is full.
    fn stage(&self, stage: &Stage, fill: impl FnOnce(&mut Vec<u64>)) {
        let (mut records, mut scratch) = lock(&stage.pool).pop().unwrap_or_default();
        fill(&mut records);
        if records.len() >= stage.capacity {
            self.write_sorted(&mut records, &mut scratch);
        }
        let mut pool = lock(&stage.pool);
        if !records.is_empty() {
            stage.pending.store(true, Relaxed);
        }
        pool.push((records, scratch));
    }

    /// Writes every staged record. Readers call it first.
    #[inline]
    fn settle(&self) {
        if let Some(stage) = &self.stage {
            if stage.pending.load(Acquire) {
                self.flush(stage);
            }
        }
    }

    #[cold]
    fn flush(&self, stage: &Stage) {
        let mut buffers = {
            let mut pool = lock(&stage.pool);
            stage.pending.store(false, Relaxed);
            std::mem::take(&mut *pool)
        };
        for (records, scratch) in &mut buffers {
            self.write_sorted(records, scratch);
        }
        lock(&stage.pool).extend(buffers);
    }

    /// Sorts staged records by the 2 MiB bucket of the slice they write to
    /// (a counting sort into `scratch`), writes them in that order and
    /// empties `records`.
    fn write_sorted(&self, records: &mut Vec<u64>, scratch: &mut Vec<u64>) {
        // Both kinds of record keep the byte offset's high bits on top:
        // blocked (block << 32 | hash), classic (word << 6 | bit).
        let shift = match self.params.layout {
            Layout::Blocked => 32 + BUCKET_SHIFT - 6,
            Layout::Classic => 6 + BUCKET_SHIFT - 3,
        };
        let buckets = (((self.range.end - self.range.start) * 8) >> BUCKET_SHIFT) as usize + 1;
        let mut next = vec![0usize; buckets + 1];
        for &r in records.iter() {
            next[(r >> shift) as usize + 1] += 1;
        }
        for b in 1..next.len() {
            next[b] += next[b - 1];
        }
        scratch.clear();
        scratch.resize(records.len(), 0);
        for &r in records.iter() {
            let at = &mut next[(r >> shift) as usize];
            scratch[*at] = r;
            *at += 1;
        }
        records.clear();
        let new = match self.params.layout {
            Layout::Blocked => self.write_blocks(scratch),
            Layout::Classic => {
                let words = self.bits.words();
                for (i, &r) in scratch.iter().enumerate() {
                    if let Some(&ahead) = scratch.get(i + PIPELINE) {
                        arch::prefetch(words[(ahead >> 6) as usize..].as_ptr());
                    }
                    set_word(&words[(r >> 6) as usize], 1 << (r & 63));
                }
                0 // counted when staged
            }
        };
        self.new.fetch_add(new, Relaxed);
    }

    /// Sets the items of blocked records (block << 32 | in-block hash, the
    /// blocks checked), the blocks prefetched [`PIPELINE`] records ahead;
    /// returns how many were new.
    fn write_blocks(&self, records: &[u64]) -> u64 {
        let words = self.bits.words();
        let (k, probes) = (self.params.k, self.params.hash.probes());
        let mut new = 0;
        for (i, &r) in records.iter().enumerate() {
            if let Some(&ahead) = records.get(i + PIPELINE) {
                arch::prefetch(words[((ahead >> 32) * 8) as usize..].as_ptr());
            }
            new += set_block(words, probes, ((r >> 32) * 8) as usize, r as u32, k) as u64;
        }
        new
    }

    /// Items new to the filter among those given to this slice so far,
    /// counted as [`Slice::insert_batch`] says (staged writes are written
    /// first).
    pub fn new_items(&self) -> u64 {
        self.settle();
        self.new.load(Relaxed)
    }

    /// Prefetches the words of a classic item's probes that lie in this slice.
    #[inline]
    fn prefetch_classic(&self, p: &Prepared) {
        let words = self.bits.words();
        let (start, end) = (self.range.start, self.range.end);
        for_each_position(&self.params, p, |word, _| {
            if (start..end).contains(&word) {
                arch::prefetch(words[(word - start) as usize..].as_ptr());
            }
        });
    }

    /// [`Slice::rules_out`] for many prepared items at once, appended to
    /// `out` in order; for the blocked layout through a ring of prefetched
    /// blocks, as [`Slice::insert_batch`].
    pub fn rules_out_batch(&self, prepared: &[Prepared], out: &mut Vec<Option<bool>>) {
        self.settle();
        if self.params.layout != Layout::Blocked {
            for (i, p) in prepared.iter().enumerate() {
                if let Some(ahead) = prepared.get(i + CLASSIC_PIPELINE) {
                    self.prefetch_classic(ahead);
                }
                out.push(self.rules_out(p));
            }
            return;
        }
        let words = self.bits.words();
        let (k, probes) = (self.params.k, self.params.hash.probes());
        let base = out.len();
        out.resize(base + prepared.len(), None);
        let test = |(at, h): (usize, u32)| {
            let mask = arch::block_mask(probes, h, k);
            mask.iter()
                .enumerate()
                .any(|(i, &m)| words[at + i].load(Relaxed) & m != m)
        };
        self.blocked_ring(prepared.iter().copied().enumerate(), |j, at, h| {
            out[base + j] = Some(test((at, h)))
        });
    }

    /// The prefetch ring of the blocked batches: for every `(tag, item)`
    /// whose block lies in this slice, prefetches the block and calls
    /// `f(tag, word offset in the slice, in-block hash)` [`PIPELINE`] such
    /// items later (in order), so that their cache misses overlap; items of
    /// other slices cost one comparison.
    fn blocked_ring<T: Copy>(
        &self,
        items: impl Iterator<Item = (T, Prepared)>,
        mut f: impl FnMut(T, usize, u32),
    ) {
        let words = self.bits.words();
        let (start, end) = (self.range.start, self.range.end);
        let mut ring: [Option<(T, usize, u32)>; PIPELINE] = [None; PIPELINE];
        let mut queued = 0usize;
        for (tag, p) in items {
            if !(start..end).contains(&p.a) {
                continue;
            }
            let at = (p.a - start) as usize;
            arch::prefetch(words[at..].as_ptr());
            if let Some((t, a, h)) = ring[queued % PIPELINE].replace((tag, at, p.b as u32)) {
                f(t, a, h);
            }
            queued += 1;
        }
        for q in queued..queued + PIPELINE {
            if let Some((t, a, h)) = ring[q % PIPELINE].take() {
                f(t, a, h);
            }
        }
    }

    /// The slice's bytes, in file order.
    pub fn as_bytes(&self) -> &[u8] {
        self.settle();
        self.bits.bytes()
    }

    /// This slice's share of the file's data checksum
    /// ([`crate::format::data_checksum`]): the wrapping sum of its pages'
    /// hashes, each seeded with its page index in the whole array.
    pub fn checksum(&self) -> u64 {
        crate::format::pages_checksum(self.as_bytes(), self.range.start / PAGE_WORDS)
    }

    /// Set bits in this slice.
    pub fn count_ones(&self) -> u64 {
        self.settle();
        self.bits
            .words()
            .iter()
            .map(|w: &AtomicU64| w.load(Relaxed).count_ones() as u64)
            .sum()
    }
}

/// Writes a filter file slice by slice: a temporary file beside the target
/// path, each [`Slice`] written at its place, then the header (with the
/// data checksum summed from the slices'), fsync and an atomic rename.
/// Dropped before [`SliceWriter::finish`] — an error, a full disk — the
/// temporary is removed and nothing appears at the target path.
#[derive(Debug)]
pub struct SliceWriter {
    path: PathBuf,
    tmp: Option<PathBuf>,
    file: File,
    params: Params,
    next_word: u64,
    checksum: u64,
    ones: u64,
    items: u64,
}

impl SliceWriter {
    /// Creates the temporary file (sparse, at its final size).
    pub fn create(path: impl AsRef<Path>, params: &Params) -> Result<SliceWriter> {
        params.validate()?;
        let path = path.as_ref().to_path_buf();
        let (tmp, file) = create_temp(&path)?;
        let w = SliceWriter {
            path,
            tmp: Some(tmp.clone()),
            file,
            params: params.clone(),
            next_word: 0,
            checksum: 0,
            ones: 0,
            items: 0,
        };
        // Sparse: the blocks are allocated as the slices are written, so a
        // full disk shows up as a failed write (and the temporary goes).
        w.file
            .set_len(HEADER_LEN as u64 + params.bits / 8)
            .map_err(io_err(&tmp, "size"))?;
        Ok(w)
    }

    /// Writes the next slice (slices must come in order, without gaps) and
    /// adds its [`Slice::new_items`] to the item count.
    pub fn write(&mut self, slice: &Slice) -> Result<()> {
        let tmp = self.tmp.clone().expect("not finished");
        if slice.range.start != self.next_word || slice.params.bits != self.params.bits {
            return Err(Error::InvalidParams(format!(
                "slice {:?} written out of order (next word {})",
                slice.range, self.next_word
            )));
        }
        self.file
            .write_all_at(slice.as_bytes(), HEADER_LEN as u64 + slice.range.start * 8)
            .map_err(io_err(&tmp, "write"))?;
        let (checksum, ones) = crate::format::pages_checksum_and_ones(
            slice.as_bytes(),
            slice.range.start / PAGE_WORDS,
        );
        self.checksum = self.checksum.wrapping_add(checksum);
        self.ones += ones;
        self.items += slice.new_items();
        self.next_word = slice.range.end;
        Ok(())
    }

    /// Replaces the item count the slices' [`Slice::new_items`] added up to
    /// (for a caller that counted them itself, as
    /// [`Slice::insert_classic_flagged`] lets it).
    pub fn set_items(&mut self, items: u64) {
        self.items = items;
    }

    /// Writes the header, syncs and renames the file into place. Every slice
    /// must have been written.
    pub fn finish(mut self) -> Result<()> {
        let tmp = self.tmp.clone().expect("not finished");
        if self.next_word != self.params.words() {
            return Err(Error::InvalidParams(format!(
                "only {} of {} words were written",
                self.next_word,
                self.params.words()
            )));
        }
        let header = Header {
            version: FORMAT_VERSION,
            params: self.params.clone(),
            flags: 0,
            items: self.items,
            data_len: self.params.bits / 8,
            data_checksum: self.checksum,
            ones: Some(self.ones),
        };
        self.file
            .write_all_at(&header.encode(), 0)
            .map_err(io_err(&tmp, "write"))?;
        self.file.sync_all().map_err(io_err(&tmp, "fsync"))?;
        std::fs::rename(&tmp, &self.path).map_err(io_err(&self.path, "rename into place"))?;
        self.tmp = None;
        sync_dir(&self.path)
    }
}

impl Drop for SliceWriter {
    fn drop(&mut self) {
        if let Some(tmp) = &self.tmp {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod tests;
