//! Solving one shard: banding (on-the-fly Gaussian elimination) and back
//! substitution into interleaved solution storage.
//!
//! The keys of a shard arrive as 64-bit key hashes ([`super::key_hash`]),
//! in any order, repeats allowed. For attempt `t` every key becomes a row
//! `(s, c, f)` ([`super::Row`]) derived from one 64-bit mix of the key
//! hash ([`super::attempt_mix`]; a bijection, so the mix stands for the
//! key). Rows are inserted in order of their start slot (the band stays in
//! cache), put in that order by a counting sort over the start slots (two
//! linear passes; a comparison sort of the rows cost about as much as the
//! banding itself). Equal keys give equal mixes and so share a start slot:
//! the first attempt sorts each slot's run by mix and, if a key repeats,
//! the shard is planned again for its distinct keys (a repeat would be a
//! redundant equation anyway, but the directory counts distinct keys and
//! the slots are planned for them).
//!
//! Banding is the ribbon algorithm (Dillinger & Walzer 2021, Algorithm 1):
//! at slot `i`, an empty slot takes the row; an occupied one is XORed into
//! it, and the row moves on to its new lowest set bit. A row that vanishes
//! with a zero right-hand side was implied by the others (consistent,
//! dropped); one that vanishes with a nonzero right-hand side makes the
//! system unsolvable with this attempt's rows: the shard is solved again
//! with the next attempt's seed, and from [`GROW_FROM`] attempts on with 2 %
//! more slots per attempt, so that any shard ends solved ([`MAX_ATTEMPTS`]
//! bounds the loop; reaching it would take keys that collide in all 64 hash
//! bits and still differ, which the derivation from those 64 bits rules
//! out).
//!
//! The order of insertion changes how far rows travel, never the result:
//! the set of pivot slots is a property of the row space (slot `i` is a
//! pivot when the rows' span has more vectors whose lowest bit is at `i` or
//! later than at `i + 1` or later), the system restricted to the pivots
//! with the free slots set to 0 has exactly one solution, and whether the
//! system is consistent does not depend on the order either. So the bytes
//! depend on the set of keys alone.
//!
//! Back substitution runs from the last slot to the first, per result
//! column, keeping the 128 solution bits after the current slot in one
//! `u128`; after each block's first slot that word *is* the block's
//! column, as the interleaved layout stores it. Free slots (no row) take 0.
//!
//! Each thread keeps its buffers from shard to shard ([`Scratch`]).

use std::cell::RefCell;

use super::{attempt_mix, row_of_mixed, start_of_mixed, start_slots, ShardEntry};
use crate::math::{ribbon_shard_blocks, ribbon_upper_blocks, RIBBON_MAX_COLUMNS, RIBBON_WIDTH};

/// Attempts per shard before it is given up (never reached in practice).
pub const MAX_ATTEMPTS: u32 = 64;

/// From this attempt on, each attempt has 2 % more blocks than planned
/// per attempt beyond it.
pub const GROW_FROM: u32 = 3;

/// A solved shard: its directory entry (offset left 0) and its words.
#[derive(Debug)]
pub struct SolvedShard {
    /// The shard's directory entry (`offset` is the writer's to set).
    pub entry: ShardEntry,
    /// The interleaved solution, block by block, `r` or `r + 1` words each.
    pub words: Vec<u128>,
}

/// Why a shard could not be solved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SolveError {
    /// More keys than a shard can index.
    #[error("a shard holds {0} keys, more than 2^32")]
    TooManyKeys(usize),
    /// Every attempt failed.
    #[error("a shard of {0} keys could not be solved in {MAX_ATTEMPTS} attempts")]
    Unsolvable(usize),
}

/// Blocks attempt `t` uses for a shard planned at `base` blocks.
pub fn attempt_blocks(base: u64, t: u32) -> u64 {
    if t < GROW_FROM || base == 0 {
        return base;
    }
    let steps = (t - GROW_FROM + 1) as u64;
    base + (base * 2 * steps).div_ceil(100).max(steps)
}

/// Solves the shard of `keys` (in any order, repeats allowed) with `r`
/// lower result bits and the fixed-point fraction `upper` of blocks with
/// one more, planning `(1 + overhead)` slots per distinct key.
pub fn solve_shard(
    keys: &[u64],
    r: u32,
    upper: u32,
    overhead: f64,
) -> Result<SolvedShard, SolveError> {
    SCRATCH.with(|s| solve_with(keys, r, upper, overhead, &mut s.borrow_mut()))
}

/// The buffers of one solve, kept by each thread from shard to shard: a
/// build solves tens of thousands of shards of a few megabytes each, and
/// fresh buffers would fault in (and zero) their pages every time.
#[derive(Default)]
struct Scratch {
    /// Each key's [`attempt_mix`], in key order.
    mixed: Vec<u64>,
    /// The same, in order of start slot.
    sorted: Vec<u64>,
    /// Per start slot: the first, then the end, of its run in `sorted`.
    runs: Vec<u32>,
    /// The band: each slot's pivot row, 0 for a free slot.
    coeff: Vec<u128>,
    /// Each pivot row's right-hand side (the fingerprint, reduced).
    rhs: Vec<u32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

fn solve_with(
    keys: &[u64],
    r: u32,
    upper: u32,
    overhead: f64,
    s: &mut Scratch,
) -> Result<SolvedShard, SolveError> {
    // Repeated keys are found while the first attempt's rows are sorted
    // (equal keys give equal mixes, so they share a run); the distinct keys
    // are then taken once and the shard planned again for their number.
    let distinct_of = |keys: &[u64]| {
        let mut d = keys.to_vec();
        d.sort_unstable();
        d.dedup();
        d
    };
    // More keys than a directory entry counts may still be few distinct.
    let mut distinct = (keys.len() > u32::MAX as usize).then(|| distinct_of(keys));
    'plan: loop {
        let keys = distinct.as_deref().unwrap_or(keys);
        let n = keys.len();
        let n32 = u32::try_from(n).map_err(|_| SolveError::TooManyKeys(n))?;
        if n == 0 {
            return Ok(SolvedShard {
                entry: ShardEntry::empty(),
                words: Vec::new(),
            });
        }
        let base = ribbon_shard_blocks(n as u64, overhead);
        for t in 0..MAX_ATTEMPTS {
            let blocks = attempt_blocks(base, t);
            let Ok(blocks32) = u32::try_from(blocks) else {
                break;
            };
            let starts = start_slots(blocks32);
            if sort_rows(keys, t, starts, s, t == 0 && distinct.is_none()) {
                distinct = Some(distinct_of(keys));
                continue 'plan;
            }
            let m = (blocks * RIBBON_WIDTH) as usize;
            s.coeff.clear();
            s.coeff.resize(m, 0);
            s.rhs.clear();
            s.rhs.resize(m, 0);
            if band(&s.sorted, starts, &mut s.coeff, &mut s.rhs) {
                let upper_start = blocks32 - ribbon_upper_blocks(blocks32, upper);
                let words = back_substitute(&s.coeff, &s.rhs, blocks32, upper_start, r);
                return Ok(SolvedShard {
                    entry: ShardEntry {
                        offset: 0,
                        blocks: blocks32,
                        upper_start,
                        attempt: t,
                        keys: n32,
                    },
                    words,
                });
            }
        }
        return Err(SolveError::Unsolvable(n));
    }
}

/// Puts the keys' rows for attempt `t` in order of start slot, as their
/// mixes ([`attempt_mix`], from which a row is derived) in `s.sorted`: a
/// counting sort over the start slots, two passes over the keys. Runs of
/// one start slot are sorted by mix when `repeats` asks whether a key
/// occurs twice (the answer), so the order depends on the set of keys
/// alone; it does not change the solution either way (see the module
/// docs), only how far rows travel in the band.
fn sort_rows(keys: &[u64], t: u32, starts: u64, s: &mut Scratch, repeats: bool) -> bool {
    s.runs.clear();
    s.runs.resize(starts as usize, 0);
    s.mixed.clear();
    s.mixed.extend(keys.iter().map(|&g| attempt_mix(g, t)));
    for &a in &s.mixed {
        s.runs[start_of_mixed(a, starts) as usize] += 1;
    }
    let mut first = 0u32;
    for run in s.runs.iter_mut() {
        let len = *run;
        *run = first;
        first += len;
    }
    s.sorted.clear();
    s.sorted.resize(keys.len(), 0);
    for &a in &s.mixed {
        let at = &mut s.runs[start_of_mixed(a, starts) as usize];
        s.sorted[*at as usize] = a;
        *at += 1;
    }
    if !repeats {
        return false;
    }
    // `runs` now holds each run's end.
    let mut found = false;
    let mut lo = 0usize;
    for &end in &s.runs {
        let end = end as usize;
        if end - lo > 1 {
            let run = &mut s.sorted[lo..end];
            run.sort_unstable();
            found |= run.windows(2).any(|w| w[0] == w[1]);
        }
        lo = end;
    }
    found
}

/// Inserts every row (given by its mix, in order of start slot); false if
/// one is inconsistent with those before it.
fn band(sorted: &[u64], starts: u64, coeff: &mut [u128], rhs: &mut [u32]) -> bool {
    for &a in sorted {
        let row = row_of_mixed(a, starts);
        let mut i = row.start as usize;
        let mut c = row.coeff;
        let mut f = row.fp;
        loop {
            // `i < m`: the row's highest bit is at most `start + 127 ≤ m − 1`
            // and XORs with rows pivoted at or before it keep it there.
            let here = coeff[i];
            if here == 0 {
                coeff[i] = c;
                rhs[i] = f;
                break;
            }
            c ^= here;
            f ^= rhs[i];
            if c == 0 {
                if f != 0 {
                    return false;
                }
                break;
            }
            let tz = c.trailing_zeros();
            c >>= tz;
            i += tz as usize;
        }
    }
    true
}

/// The interleaved solution of a banded system: blocks before
/// `upper_start` get `r` columns, the others `r + 1`. Slots are solved
/// from the last to the first, all of a block's columns at each slot (the
/// columns are independent chains, so they overlap in the core); a free
/// slot has coefficients and right side 0, so its bits come out 0.
fn back_substitute(
    coeff: &[u128],
    rhs: &[u32],
    blocks: u32,
    upper_start: u32,
    r: u32,
) -> Vec<u128> {
    let mut words = vec![0u128; block_offset(blocks, upper_start, r)];
    // state[j]: bit k is column j's solution at the slot k + 1 after the
    // current one.
    let mut state = [0u128; RIBBON_MAX_COLUMNS as usize + 1];
    let width = RIBBON_WIDTH as usize;
    for block in (0..blocks).rev() {
        let ncols = (r + (block >= upper_start) as u32) as usize;
        let state = &mut state[..ncols];
        let first = block as usize * width;
        for i in (first..first + width).rev() {
            let above = coeff[i] >> 1;
            let f = rhs[i];
            for (j, s) in state.iter_mut().enumerate() {
                let x = above & *s;
                let bit = ((f >> j) ^ (x as u64 ^ (x >> 64) as u64).count_ones()) & 1;
                *s = (*s << 1) | bit as u128;
            }
        }
        let at = block_offset(block, upper_start, r);
        words[at..at + ncols].copy_from_slice(state);
    }
    words
}

/// Index of block `b`'s first word in a shard's solution.
#[inline(always)]
pub fn block_offset(b: u32, upper_start: u32, r: u32) -> usize {
    if b < upper_start {
        b as usize * r as usize
    } else {
        upper_start as usize * r as usize + (b - upper_start) as usize * (r as usize + 1)
    }
}

/// [`sort_rows`] on fresh buffers, for the tests' timings.
#[cfg(test)]
pub(super) fn sort_rows_for_test(keys: &[u64], t: u32, starts: u64, repeats: bool) -> Vec<u64> {
    let mut s = Scratch::default();
    sort_rows(keys, t, starts, &mut s, repeats);
    s.sorted
}

/// [`band`], and the steps rows take (slots they visit) counted on a
/// second banding (meaningful when the first succeeded).
#[cfg(test)]
pub(super) fn band_for_test(
    sorted: &[u64],
    starts: u64,
    coeff: &mut [u128],
    rhs: &mut [u32],
) -> (bool, u64) {
    let ok = band(sorted, starts, coeff, rhs);
    let mut steps = 0u64;
    let mut c2 = vec![0u128; coeff.len()];
    let mut r2 = vec![0u32; rhs.len()];
    for &a in sorted {
        let row = row_of_mixed(a, starts);
        let (mut i, mut c, mut f) = (row.start as usize, row.coeff, row.fp);
        loop {
            steps += 1;
            if c2[i] == 0 {
                c2[i] = c;
                r2[i] = f;
                break;
            }
            c ^= c2[i];
            f ^= r2[i];
            if c == 0 {
                break;
            }
            let tz = c.trailing_zeros();
            c >>= tz;
            i += tz as usize;
        }
    }
    (ok, steps)
}

/// [`back_substitute`], for the tests' timings.
#[cfg(test)]
pub(super) fn back_substitute_for_test(
    coeff: &[u128],
    rhs: &[u32],
    blocks: u32,
    upper_start: u32,
    r: u32,
) -> Vec<u128> {
    back_substitute(coeff, rhs, blocks, upper_start, r)
}

/// [`band`] with the row kept as two 64-bit halves: the lowest set bit is
/// almost always in the low half (bit 0 of both rows is set, so the XOR
/// clears it and the next set bit is 1..=63 places up), so one 64-bit
/// trailing-zero count and a funnel shift replace the 128-bit ones.
#[cfg(test)]
pub(super) fn band_split(sorted: &[u64], starts: u64, coeff: &mut [u128], rhs: &mut [u32]) -> bool {
    for &a in sorted {
        let row = row_of_mixed(a, starts);
        let mut i = row.start as usize;
        let (mut lo, mut hi) = (row.coeff as u64, (row.coeff >> 64) as u64);
        let mut f = row.fp;
        loop {
            let here = coeff[i];
            if here == 0 {
                coeff[i] = (hi as u128) << 64 | lo as u128;
                rhs[i] = f;
                break;
            }
            lo ^= here as u64;
            hi ^= (here >> 64) as u64;
            f ^= rhs[i];
            if lo != 0 {
                let tz = lo.trailing_zeros();
                debug_assert!(tz >= 1);
                lo = (lo >> tz) | (hi << (64 - tz));
                hi >>= tz;
                i += tz as usize;
            } else if hi != 0 {
                let tz = hi.trailing_zeros();
                lo = hi >> tz;
                hi = 0;
                i += 64 + tz as usize;
            } else {
                if f != 0 {
                    return false;
                }
                break;
            }
        }
    }
    true
}

/// [`band`] with two rows in flight: the rows (in order of start slot) are
/// cut in two halves, and one step of a row of each half is taken in turn,
/// so the two dependency chains (load the slot, XOR, find the next set
/// bit, move on) overlap in the core. Any interleaving of steps is a valid
/// elimination (each step reduces a row by a pivot already placed), so the
/// pivots, the solution and whether the system is consistent are those of
/// [`band`].
#[cfg(test)]
pub(super) fn band_two(sorted: &[u64], starts: u64, coeff: &mut [u128], rhs: &mut [u32]) -> bool {
    let half = sorted.len() / 2;
    let (first, second) = sorted.split_at(half);
    let mut a = Lane::new(first, starts);
    let mut b = Lane::new(second, starts);
    while a.live && b.live {
        if !a.step(coeff, rhs) || !b.step(coeff, rhs) {
            return false;
        }
    }
    while a.live {
        if !a.step(coeff, rhs) {
            return false;
        }
    }
    while b.live {
        if !b.step(coeff, rhs) {
            return false;
        }
    }
    true
}

/// One row in flight in [`band_two`], and the rows after it.
#[cfg(test)]
struct Lane<'a> {
    rows: std::slice::Iter<'a, u64>,
    starts: u64,
    i: usize,
    c: u128,
    f: u32,
    live: bool,
}

#[cfg(test)]
impl<'a> Lane<'a> {
    fn new(rows: &'a [u64], starts: u64) -> Lane<'a> {
        let mut lane = Lane {
            rows: rows.iter(),
            starts,
            i: 0,
            c: 0,
            f: 0,
            live: true,
        };
        lane.next();
        lane
    }

    #[inline(always)]
    fn next(&mut self) {
        match self.rows.next() {
            Some(&a) => {
                let row = row_of_mixed(a, self.starts);
                self.i = row.start as usize;
                self.c = row.coeff;
                self.f = row.fp;
            }
            None => self.live = false,
        }
    }

    /// One step; false if the row is inconsistent.
    #[inline(always)]
    fn step(&mut self, coeff: &mut [u128], rhs: &mut [u32]) -> bool {
        let here = coeff[self.i];
        if here == 0 {
            coeff[self.i] = self.c;
            rhs[self.i] = self.f;
            self.next();
            return true;
        }
        self.c ^= here;
        self.f ^= rhs[self.i];
        if self.c == 0 {
            if self.f != 0 {
                return false;
            }
            self.next();
            return true;
        }
        let tz = self.c.trailing_zeros();
        self.c >>= tz;
        self.i += tz as usize;
        true
    }
}
