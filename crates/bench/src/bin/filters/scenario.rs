//! The two scenarios: a filter that fits in cache (1 MiB) and one in DRAM
//! (2 GiB in `full`), each with its inserts, lookups and false-positive
//! checks for every subject, and the settings that choose them.

use std::hint::black_box;
use std::time::Instant;

use bloomgate_bench::{anon_huge_bytes, sample_ids, Keys};
use bloomgate_engine::{plan, Layout};

use crate::kernels::kernel_comparison;
use crate::measure::{expect_all, measure_lookups, LookupSets};
use crate::ours::Ours;
use crate::peers::{BloomFilterCrate, FastBloom, Fuse16, Sbbf};
use crate::report::{Op, Report};
use crate::subject::{Subject, TARGET_FP};

pub(crate) struct Cfg {
    pub(crate) reps: usize,
    pub(crate) dram_bytes: u64,
    pub(crate) hits: usize,
    pub(crate) misses: usize,
    pub(crate) thp_row: bool,
    /// Include fastbloom and bloomfilter (in cache and at DRAM size).
    pub(crate) with_slow_peers: bool,
    /// Include bloomgate-classic (in cache and at DRAM size; its untimed DRAM fill is the slowest part of a full run).
    pub(crate) with_classic: bool,
    /// fastbloom and bloomfilter at DRAM size: random bits at the right density instead of the slow real fill
    pub(crate) synthetic: bool,
}

pub(crate) fn bits_for(bytes: u64) -> u64 {
    bytes * 8 / 512 * 512
}

/// Items that give bloomgate-blocked exactly TARGET_FP at `bits` (the planner's bits/item).
pub(crate) fn items_for(bits: u64) -> u64 {
    let p = plan(Layout::Blocked, 10_000_000, TARGET_FP).unwrap();
    (bits as f64 / p.bits_per_item()).floor() as u64
}

pub(crate) fn in_cache(cfg: &Cfg, bytes: u64) -> Report {
    let bits = bits_for(bytes);
    let n = items_for(bits);
    let mut rep = Report::new();
    eprintln!("== in-cache: {bytes} bytes, {n} keys");
    let ins = Keys::from_ids(0..n);
    let ins_s = ins.slices();
    let miss = Keys::from_ids(n..n + cfg.misses as u64);
    eprintln!("   mean key length {:.1} bytes", ins.mean_len());
    // Lookup hits: every inserted key, in a shuffled order.
    // (A separate arena in that order, so reading the keys stays sequential.)
    let order = sample_ids(n as usize, n, 99);
    let hit_keys = Keys::from_ids(order.into_iter());
    let hits = hit_keys.slices();
    let target_ops = 4_000_000usize;
    let sets = LookupSets {
        hit_inner: (target_ops / hits.len()).max(1),
        miss_inner: (target_ops / cfg.misses).max(1),
        hits,
        misses: miss.slices(),
    };

    type Make = Box<dyn Fn() -> Box<dyn Subject>>;
    // bloomgate-blocked first (the lookups below pair every peer with it);
    // `--no-classic` and `--no-slow-peers` leave those out here too.
    let mut makers: Vec<(Make, bool)> = vec![(
        Box::new(move || Box::new(Ours::new(Layout::Blocked, bits, n, false))),
        true,
    )];
    if cfg.with_classic {
        makers.push((
            Box::new(move || Box::new(Ours::new(Layout::Classic, bits, n, false))),
            true,
        ));
    }
    if cfg.with_slow_peers {
        makers.push((Box::new(move || Box::new(FastBloom::new(bits, n))), true));
        makers.push((
            Box::new(move || Box::new(BloomFilterCrate::new(bits, n))),
            true,
        ));
    }
    makers.push((Box::new(move || Box::new(Sbbf::new(bits))), true));
    // Inserts: a fresh filter per rep, subjects interleaved within each rep.
    let mut ins_times: Vec<Vec<f64>> = vec![vec![]; makers.len()];
    let mut ins_b_times: Vec<Vec<f64>> = vec![vec![]; makers.len()];
    let mut built: Vec<Option<Box<dyn Subject>>> = (0..makers.len()).map(|_| None).collect();
    // The shared (`&Filter`) insert paths of the subjects that have one.
    let mut shared_times: Vec<[Vec<f64>; 2]> = vec![[vec![], vec![]]; makers.len()];
    for _ in 0..cfg.reps {
        for (i, (make, _)) in makers.iter().enumerate() {
            if make().has_shared() {
                for (b, times) in shared_times[i].iter_mut().enumerate() {
                    let mut s = make();
                    let t = Instant::now();
                    s.insert_all_shared(black_box(&ins_s), b == 1);
                    times.push(t.elapsed().as_nanos() as f64 / n as f64);
                    expect_all(&s.name(), "shared inserts", s.count(&ins_s), ins_s.len());
                }
            }
            let mut s = make();
            let t = Instant::now();
            s.insert_all(black_box(&ins_s));
            ins_times[i].push(t.elapsed().as_nanos() as f64 / n as f64);
            if s.has_batch() {
                let mut s2 = make();
                let t = Instant::now();
                s2.insert_all_batch(black_box(&ins_s));
                ins_b_times[i].push(t.elapsed().as_nanos() as f64 / n as f64);
                // Alternate which copy is kept so both paths get checked.
                built[i] = Some(if ins_b_times[i].len().is_multiple_of(2) {
                    s2
                } else {
                    s
                });
            } else {
                built[i] = Some(s);
            }
        }
    }
    // xorf: static, "insert" = construction time per key.
    let mut fuse_times = vec![];
    let mut fuse = None;
    for _ in 0..cfg.reps {
        let t = Instant::now();
        let f = Fuse16::build(&ins_s);
        fuse_times.push(t.elapsed().as_nanos() as f64 / n as f64);
        fuse = Some(f);
    }
    // Every subject's inserts ran in the same repetitions as blocked's
    // (makers[0]), one after the other: the ratios are per rep.
    for (i, s) in built.iter().enumerate() {
        let s = s.as_ref().unwrap();
        if i == 0 {
            rep.add(&s.name(), Op::Insert, ins_times[i].clone(), None);
        } else {
            rep.add_per_rep(&s.name(), Op::Insert, ins_times[i].clone(), &ins_times[0]);
        }
        if s.has_batch() {
            if i == 0 {
                rep.add(&s.name(), Op::InsertBatch, ins_b_times[i].clone(), None);
            } else {
                rep.add_per_rep(
                    &s.name(),
                    Op::InsertBatch,
                    ins_b_times[i].clone(),
                    &ins_b_times[0],
                );
            }
        }
        if s.has_shared() {
            let name = format!("{} (shared &Filter)", s.name());
            rep.add(&name, Op::Insert, shared_times[i][0].clone(), None);
            rep.add(&name, Op::InsertBatch, shared_times[i][1].clone(), None);
        }
    }
    let fuse = fuse.unwrap();
    rep.add(
        &format!("{} (construction)", fuse.name()),
        Op::Insert,
        fuse_times,
        None,
    );

    // Lookups: reps interleaved across subjects via pairing with blocked.
    let blocked = built[0].take().unwrap();
    measure_lookups(&mut rep, n, &*blocked, None, &sets, cfg.reps, true);
    for s in built.iter().skip(1) {
        let s = s.as_ref().unwrap();
        measure_lookups(&mut rep, n, &**s, Some(&*blocked), &sets, cfg.reps, true);
    }
    measure_lookups(&mut rep, n, &fuse, Some(&*blocked), &sets, cfg.reps, true);

    kernel_comparison(&mut rep, &*blocked, &sets, cfg.reps, n);
    rep
}

pub(crate) fn dram(cfg: &Cfg) -> Report {
    let bits = bits_for(cfg.dram_bytes);
    let n = items_for(bits);
    let mut rep = Report::new();
    eprintln!("== DRAM: {} bytes, {n} keys", cfg.dram_bytes);
    // Timed-insert keys: the last `reserve` of the n keys, pre-generated.
    let chunk = 1_000_000u64.min(n / 20);
    // Two chunks per rep for the timed paths, two for the shared ones.
    let reserve = chunk * cfg.reps as u64 * 4;
    let fill_hi = n - reserve;
    let res_keys = Keys::from_ids(fill_hi..n);
    let res = res_keys.slices();
    // Lookups: a random sample of inserted keys, and never-inserted keys.
    let hit_ids = sample_ids(cfg.hits, n, 12345);
    let hit_keys = Keys::from_ids(hit_ids.into_iter());
    let miss_keys = Keys::from_ids(n..n + cfg.misses as u64);
    let sets = LookupSets {
        hits: hit_keys.slices(),
        misses: miss_keys.slices(),
        hit_inner: 1,
        miss_inner: 1,
    };

    // Untimed: everything but the reserved keys, then the huge-page check.
    let fill = |rep: &mut Report, s: &mut dyn Subject, synthetic: bool| {
        let t = Instant::now();
        if synthetic && s.prefill_synthetic(fill_hi - sets.hits.len() as u64) {
            // Random bits at the density of the untimed keys, then the
            // looked-up keys for real, so every hit must still be found.
            s.insert_all(&sets.hits);
        } else {
            s.fill(0, fill_hi);
        }
        eprintln!(
            "   {}: untimed fill of {fill_hi} keys took {:.1} s",
            s.name(),
            t.elapsed().as_secs_f64()
        );
        if let Some((ptr, len)) = s.memory() {
            let huge = anon_huge_bytes(ptr, len).unwrap_or(0);
            let pct = 100.0 * huge as f64 / len as f64;
            eprintln!(
                "   {}: {pct:.0} % of its {len} bytes on huge pages",
                s.name()
            );
            if pct < 90.0 {
                rep.failures.push(format!(
                    "{} has only {pct:.0} % of its bits on huge pages: its DRAM rows are not comparable",
                    s.name()
                ));
            }
        }
    };
    let part = |j: usize| &res[j * chunk as usize..(j + 1) * chunk as usize];

    // bloomgate-blocked and sbbf-rs are filled (untimed) and held together,
    // so that their timed inserts alternate step by step in every rep (which
    // goes first alternates too): on a shared machine two medians taken
    // minutes apart differ by more than the gap between the two filters.
    let mut blocked = Ours::new(Layout::Blocked, bits, n, false);
    fill(&mut rep, &mut blocked, false);
    let mut sbbf = Sbbf::new(bits);
    fill(&mut rep, &mut sbbf, false);
    let mut ours_ins = DramInserts::default();
    let mut sbbf_ins = DramInserts::default();
    for r in 0..cfg.reps {
        for step in 0..4 {
            let keys = part(4 * r + step);
            if r % 2 == 0 {
                ours_ins.step(&mut blocked, step, keys);
                sbbf_ins.step(&mut sbbf, step, keys);
            } else {
                sbbf_ins.step(&mut sbbf, step, keys);
                ours_ins.step(&mut blocked, step, keys);
            }
        }
    }
    ours_ins.finish(&mut rep, &blocked, None);
    sbbf_ins.finish(&mut rep, &sbbf, Some(&ours_ins));
    measure_lookups(&mut rep, n, &blocked, None, &sets, cfg.reps, true);
    measure_lookups(&mut rep, n, &sbbf, Some(&blocked), &sets, cfg.reps, true);
    drop(sbbf);

    // The other peers one at a time beside blocked (their inserts unpaired).
    type Make = Box<dyn Fn() -> Box<dyn Subject>>;
    let mut peers: Vec<(Make, bool)> = vec![];
    if cfg.with_slow_peers {
        peers.push((
            Box::new(move || Box::new(FastBloom::new(bits, n))),
            cfg.synthetic,
        ));
    }
    if cfg.with_classic {
        peers.push((
            Box::new(move || Box::new(Ours::new(Layout::Classic, bits, n, false))),
            false,
        ));
    }
    if cfg.with_slow_peers {
        peers.push((
            Box::new(move || Box::new(BloomFilterCrate::new(bits, n))),
            cfg.synthetic,
        ));
    }
    if cfg.thp_row {
        peers.push((
            Box::new(move || Box::new(Ours::new(Layout::Blocked, bits, n, true))),
            false,
        ));
    }
    for (make, synthetic) in peers {
        let mut s = make();
        fill(&mut rep, &mut *s, synthetic);
        let mut ins = DramInserts::default();
        for r in 0..cfg.reps {
            for step in 0..4 {
                ins.step(&mut *s, step, part(4 * r + step));
            }
        }
        ins.finish(&mut rep, &*s, None);
        measure_lookups(&mut rep, n, &*s, Some(&blocked), &sets, cfg.reps, true);
        drop(s);
    }
    rep
}

/// The timed inserts of one subject at DRAM size, into its filled filter.
/// Each rep inserts four chunks of the reserved keys: one at a time, then
/// batched (untimed one at a time without a batched path), then the shared
/// paths one at a time and batched (untimed batched without them: the
/// lookup samples may name these keys).
#[derive(Default)]
struct DramInserts<'k> {
    single: Vec<f64>,
    batched: Vec<f64>,
    shared: [Vec<f64>; 2],
    /// Every chunk inserted, timed or not, to check that all are found.
    inserted: Vec<&'k [&'k [u8]]>,
}

impl<'k> DramInserts<'k> {
    /// Step `step` (0..4) of a rep: inserts `keys` into `s`, timed where the
    /// subject has that path.
    fn step(&mut self, s: &mut dyn Subject, step: usize, keys: &'k [&'k [u8]]) {
        let t = Instant::now();
        let times = match step {
            0 => {
                s.insert_all(black_box(keys));
                Some(&mut self.single)
            }
            1 if s.has_batch() => {
                s.insert_all_batch(black_box(keys));
                Some(&mut self.batched)
            }
            1 => {
                s.insert_all(keys);
                None
            }
            2 | 3 if s.has_shared() => {
                s.insert_all_shared(black_box(keys), step == 3);
                Some(&mut self.shared[step - 2])
            }
            _ => {
                s.insert_all_batch(keys);
                None
            }
        };
        if let Some(times) = times {
            times.push(t.elapsed().as_nanos() as f64 / keys.len() as f64);
        }
        self.inserted.push(keys);
    }

    /// Adds the subject's insert rows (its single and batched ones as
    /// per-rep ratios against `paired`, bloomgate-blocked's inserts of the
    /// same reps, when given) and checks that every inserted key is found.
    fn finish(&self, rep: &mut Report, s: &dyn Subject, paired: Option<&DramInserts>) {
        let name = s.name();
        match paired {
            Some(b) => rep.add_per_rep(&name, Op::Insert, self.single.clone(), &b.single),
            None => rep.add(&name, Op::Insert, self.single.clone(), None),
        }
        if !self.batched.is_empty() {
            match paired {
                Some(b) => {
                    rep.add_per_rep(&name, Op::InsertBatch, self.batched.clone(), &b.batched)
                }
                None => rep.add(&name, Op::InsertBatch, self.batched.clone(), None),
            }
        }
        if s.has_shared() {
            let shared = format!("{name} (shared &Filter)");
            let [one, many] = self.shared.clone();
            rep.add(&shared, Op::Insert, one, None);
            rep.add(&shared, Op::InsertBatch, many, None);
        }
        let found: u64 = self.inserted.iter().map(|c| s.count(c)).sum();
        let total = self.inserted.iter().map(|c| c.len()).sum();
        expect_all(&name, "reserved keys", found, total);
    }
}
