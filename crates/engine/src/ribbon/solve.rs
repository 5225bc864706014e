//! Solving one shard: banding (on-the-fly Gaussian elimination) and back
//! substitution into interleaved solution storage.
//!
//! The keys of a shard arrive as 64-bit key hashes ([`super::key_hash`]).
//! They are sorted and deduplicated first: equal hashes give equal rows and
//! equal fingerprints, so a duplicate would be a redundant equation anyway,
//! and sorting makes the work independent of the order the keys came in.
//! For attempt `t` every key becomes a row `(s, c, f)` ([`super::Row`]);
//! rows are inserted in order of their start slot (the band stays in cache)
//! by the ribbon algorithm (Dillinger & Walzer 2021, Algorithm 1): at slot
//! `i`, an empty slot takes the row; an occupied one is XORed into it, and
//! the row moves on to its new lowest set bit. A row that vanishes with a
//! zero right-hand side was implied by the others (consistent, dropped); one
//! that vanishes with a nonzero right-hand side makes the system unsolvable
//! with this attempt's rows: the shard is solved again with the next
//! attempt's seed, and from [`GROW_FROM`] attempts on with 2 % more slots
//! per attempt, so that any shard ends solved ([`MAX_ATTEMPTS`] bounds the
//! loop; reaching it would take keys that collide in all 64 hash bits and
//! still differ, which the derivation from those 64 bits rules out).
//!
//! Back substitution runs from the last slot to the first, per result
//! column, keeping the 128 solution bits after the current slot in one
//! `u128`; after each block's first slot that word *is* the block's
//! column, as the interleaved layout stores it. Free slots (no row) take 0.
//! The rows' pivots are the same whatever their order (they are a property
//! of the row space), so the solution is too.

use super::{row, ShardEntry};
use crate::math::{ribbon_shard_blocks, ribbon_upper_blocks, RIBBON_WIDTH};

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

/// Solves the shard of `keys` (sorted and deduplicated here, in place) with
/// `r` lower result bits and the fixed-point fraction `upper` of blocks with
/// one more, planning `(1 + overhead)` slots per key.
pub fn solve_shard(
    keys: &mut Vec<u64>,
    r: u32,
    upper: u32,
    overhead: f64,
) -> Result<SolvedShard, SolveError> {
    keys.sort_unstable();
    keys.dedup();
    let n = keys.len();
    let n32 = u32::try_from(n).map_err(|_| SolveError::TooManyKeys(n))?;
    let base = ribbon_shard_blocks(n as u64, overhead);
    if n == 0 {
        return Ok(SolvedShard {
            entry: ShardEntry::empty(),
            words: Vec::new(),
        });
    }
    let mut rows = Vec::with_capacity(n);
    let mut coeff: Vec<u128> = Vec::new();
    let mut rhs: Vec<u32> = Vec::new();
    for t in 0..MAX_ATTEMPTS {
        let blocks = attempt_blocks(base, t);
        let Ok(blocks32) = u32::try_from(blocks) else {
            break;
        };
        let m = (blocks * RIBBON_WIDTH) as usize;
        rows.clear();
        rows.extend(keys.iter().map(|&k| row(k, t, blocks32)));
        rows.sort_unstable_by_key(|r| r.start);
        coeff.clear();
        coeff.resize(m, 0);
        rhs.clear();
        rhs.resize(m, 0);
        if band(&rows, &mut coeff, &mut rhs) {
            let upper_start = blocks32 - ribbon_upper_blocks(blocks32, upper);
            let words = back_substitute(&coeff, &rhs, blocks32, upper_start, r);
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
    Err(SolveError::Unsolvable(n))
}

/// Inserts every row; false if one is inconsistent with those before it.
fn band(rows: &[super::Row], coeff: &mut [u128], rhs: &mut [u32]) -> bool {
    for row in rows {
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
/// `upper_start` get `r` columns, the others `r + 1`.
fn back_substitute(
    coeff: &[u128],
    rhs: &[u32],
    blocks: u32,
    upper_start: u32,
    r: u32,
) -> Vec<u128> {
    let lower = upper_start as usize;
    let total = lower * r as usize + (blocks as usize - lower) * (r as usize + 1);
    let mut words = vec![0u128; total];
    let cols = r as usize + 1;
    // state[j]: bit k is column j's solution at the slot k + 1 after the
    // current one.
    let mut state = [0u128; 33];
    let width = RIBBON_WIDTH as usize;
    for i in (0..coeff.len()).rev() {
        let c = coeff[i];
        let block = i / width;
        let ncols = if block < lower { cols - 1 } else { cols };
        let above = c >> 1;
        let f = rhs[i];
        for (j, s) in state.iter_mut().enumerate().take(ncols) {
            let bit = if c == 0 {
                0
            } else {
                ((f >> j) & 1) ^ ((above & *s).count_ones() & 1)
            };
            *s = (*s << 1) | bit as u128;
        }
        if i % width == 0 {
            let at = block_offset(block as u32, upper_start, r);
            words[at..at + ncols].copy_from_slice(&state[..ncols]);
        }
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
