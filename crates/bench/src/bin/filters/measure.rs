//! Timing lookups: the key sets, one timed repetition, and the paired
//! measurement of a subject against bloomgate-blocked (repetitions
//! alternating in the same interval, answers checked).

use std::hint::black_box;
use std::time::Instant;

use bloomgate_bench::median;

use crate::report::{Op, Report};
use crate::subject::{Subject, PIPE};

/// Times `count` (or `count_batch`) over `keys`, repeated `inner` times per rep; ns/op per rep.
pub(crate) fn time_lookups(
    s: &dyn Subject,
    keys: &[&[u8]],
    inner: usize,
    batch: bool,
    out: &mut Vec<bool>,
) -> (f64, u64) {
    let t = Instant::now();
    let mut c = 0;
    for _ in 0..inner {
        c = if batch {
            s.count_batch(black_box(keys), out)
        } else {
            s.count(black_box(keys))
        };
    }
    let ns = t.elapsed().as_nanos() as f64 / (keys.len() * inner) as f64;
    (ns, black_box(c))
}

pub(crate) fn expect_all(name: &str, what: &str, found: u64, total: usize) {
    if found != total as u64 {
        panic!(
            "BROKEN FILTER: {name} found only {found} of {total} inserted keys ({what}) — false negatives"
        );
    }
}

pub(crate) struct LookupSets<'a> {
    pub(crate) hits: Vec<&'a [u8]>,
    pub(crate) misses: Vec<&'a [u8]>,
    /// repetitions of the set inside one timed rep (so each rep lasts long enough)
    pub(crate) hit_inner: usize,
    pub(crate) miss_inner: usize,
}

/// Runs the four lookup measurements on `s` for `reps` reps, interleaved with
/// the same measurement on `paired` (bloomgate-blocked) when given.
pub(crate) fn measure_lookups(
    rep: &mut Report,
    n: u64,
    s: &dyn Subject,
    paired: Option<&dyn Subject>,
    sets: &LookupSets,
    reps: usize,
    record_fp: bool,
) {
    let mut out = Vec::with_capacity(PIPE.max(sets.hits.len().max(sets.misses.len())));
    let mut fp_count = None;
    for (op, batch, keys, inner) in [
        (Op::HitSingle, false, &sets.hits, sets.hit_inner),
        (Op::MissSingle, false, &sets.misses, sets.miss_inner),
        (Op::HitBatch, true, &sets.hits, sets.hit_inner),
        (Op::MissBatch, true, &sets.misses, sets.miss_inner),
    ] {
        if batch && !s.has_batch() {
            continue;
        }
        let mut mine = Vec::new();
        let mut theirs = Vec::new();
        for _ in 0..reps {
            let (ns, c) = time_lookups(s, keys, inner, batch, &mut out);
            mine.push(ns);
            match op {
                Op::HitSingle | Op::HitBatch => expect_all(&s.name(), op.title(), c, keys.len()),
                _ => {
                    if let Some(prev) = fp_count {
                        assert_eq!(prev, c, "{}: batched and single lookups disagree", s.name());
                    }
                    fp_count = Some(c);
                }
            }
            if let Some(p) = paired {
                let (ns, c) = time_lookups(p, keys, inner, batch, &mut out);
                theirs.push(ns);
                if matches!(op, Op::HitSingle | Op::HitBatch) {
                    expect_all(&p.name(), op.title(), c, keys.len());
                }
            }
        }
        rep.add(&s.name(), op, mine, paired.map(|_| median(&theirs)));
    }
    if record_fp {
        rep.check_fp(s, n, fp_count.unwrap(), sets.misses.len() as u64);
    }
}
