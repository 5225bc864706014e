//! bloomgate vs fastbloom, bloomfilter, sbbf-rs (and xorf BinaryFuse16) in one
//! process, on the same synthetic URL keys at the same bits per item.
//!
//! ```text
//! cargo run --release -p bloomgate-bench --bin filters -- quick     # sanity: 1 MiB + 64 MiB
//! cargo run --release -p bloomgate-bench --bin filters -- full      # 1 MiB + 2 GiB (DRAM)
//! options: --dram-mib N  --reps R  --hits N  --misses N  --no-thp-row  --no-classic
//!          --no-slow-peers (no fastbloom/bloomfilter)  --real-fill  --no-dram
//!          (--no-classic and --no-slow-peers apply in cache and at DRAM size)
//! ```
//!
//! Every number printed is a median of `reps` repetitions. The harness checks
//! its answers: every looked-up inserted key must be found by every filter
//! (panic otherwise), and every measured false-positive count must be
//! plausible against the filter's own prediction (non-zero exit otherwise).

use std::hint::black_box;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use bloomgate_bench::{
    advise_hugepages, anon_huge_bytes, cpu_model, median, mix64, num_arg, push_key, sample_ids,
    thp_policy, AlignedBuf, Keys,
};
use bloomgate_engine::arch::{self, Kernel};
use bloomgate_engine::hash::{hash_item, reduce};
use bloomgate_engine::{plan, Filter, Layout, Params};
use rayon::prelude::*;
use xorf::Filter as _;
use xxhash_rust::xxh3::xxh3_64_with_seed;

const TARGET_FP: f64 = 1e-4;
const SEED: u64 = 0x5EED_B100_u64;
/// Prefetch pipeline depth used by the harness's own batched loops (sbbf-rs),
/// the same as the engine's BATCH.
const PIPE: usize = 32;
/// sbbf-rs buffers from this size on get huge pages, the engine's threshold
/// for its own filters (`HUGE_PAGE_MIN` in the engine's storage module).
const SBBF_HUGE_MIN: usize = 4 << 20;

// ---------------------------------------------------------------------------
// The subjects

trait Subject {
    fn name(&self) -> String;
    fn bits(&self) -> u64;
    fn k(&self) -> String;
    fn predicted_fp(&self, n: u64) -> f64;
    fn insert(&mut self, key: &[u8]);
    fn contains(&self, key: &[u8]) -> bool;
    /// Whether the batched (hash + prefetch pipelined) paths exist.
    fn has_batch(&self) -> bool {
        false
    }
    /// Insert every key, one at a time.
    fn insert_all(&mut self, keys: &[&[u8]]) {
        for k in keys {
            self.insert(k);
        }
    }
    /// Insert every key with the batched path (only called if `has_batch`).
    fn insert_all_batch(&mut self, keys: &[&[u8]]) {
        self.insert_all(keys)
    }
    /// Whether the subject also has a shared (`&self`, thread-safe) insert
    /// path beside the one timed as its inserts (bloomgate's blocked
    /// filter: `insert_owned` is timed as its insert, `insert` here).
    fn has_shared(&self) -> bool {
        false
    }
    /// Insert every key through the shared path, one at a time, then
    /// batched (only called if `has_shared`).
    fn insert_all_shared(&mut self, keys: &[&[u8]], batched: bool) {
        let _ = batched;
        self.insert_all(keys)
    }
    /// How many keys are reported present, one lookup at a time.
    fn count(&self, keys: &[&[u8]]) -> u64 {
        let mut c = 0u64;
        for k in keys {
            c += self.contains(k) as u64;
        }
        c
    }
    /// Same, batched (only called if `has_batch`).
    fn count_batch(&self, keys: &[&[u8]], _out: &mut Vec<bool>) -> u64 {
        self.count(keys)
    }
    /// Replace the bit array by random bits at the density `n` inserted items
    /// would give (untimed; only for the slow classic peers at DRAM size).
    /// The memory holding the filter's bits, where the harness can see it
    /// (to report how much of it is on huge pages).
    fn memory(&self) -> Option<(*const u8, usize)> {
        None
    }
    fn prefill_synthetic(&mut self, _n: u64) -> bool {
        false
    }
    /// Untimed bulk load of keys `lo..hi` (generated on the fly, in chunks).
    fn fill(&mut self, lo: u64, hi: u64) {
        let batch = self.has_batch();
        for_key_chunks(lo, hi, |keys| {
            if batch {
                self.insert_all_batch(keys)
            } else {
                self.insert_all(keys)
            }
        });
    }
}

/// Calls `f` with consecutive chunks of the keys numbered `lo..hi`.
fn for_key_chunks(lo: u64, hi: u64, mut f: impl FnMut(&[&[u8]])) {
    const CHUNK: u64 = 1 << 14;
    let mut data = Vec::with_capacity(CHUNK as usize * 64);
    let mut ends = Vec::with_capacity(CHUNK as usize);
    let mut s = lo;
    while s < hi {
        let e = (s + CHUNK).min(hi);
        data.clear();
        ends.clear();
        for i in s..e {
            push_key(&mut data, i);
            ends.push(data.len());
        }
        let mut start = 0;
        let slices: Vec<&[u8]> = ends
            .iter()
            .map(|&x| {
                let r = &data[start..x];
                start = x;
                r
            })
            .collect();
        f(&slices);
        s = e;
    }
}

struct Ours {
    f: Filter,
    label: &'static str,
}

impl Ours {
    fn new(layout: Layout, bits: u64, n: u64, thp: bool) -> Ours {
        let k = layout.best_k(bits, n as f64);
        let f = Filter::new(Params {
            layout,
            bits,
            k,
            seed: SEED,
            key_kind: 0,
            match_mode: 0,
            planned_items: n,
            target_fp: TARGET_FP,
        })
        .expect("filter");
        if thp {
            let b = f.as_bytes();
            assert!(advise_hugepages(b.as_ptr(), b.len()), "madvise failed");
        }
        let label = match (layout, thp) {
            (Layout::Blocked, false) => "bloomgate-blocked",
            (Layout::Blocked, true) => "bloomgate-blocked+THP",
            (Layout::Classic, false) => "bloomgate-classic",
            (Layout::Classic, true) => "bloomgate-classic+THP",
        };
        Ours { f, label }
    }
}

impl Subject for Ours {
    fn name(&self) -> String {
        self.label.into()
    }
    fn bits(&self) -> u64 {
        self.f.params().bits
    }
    fn k(&self) -> String {
        self.f.params().k.to_string()
    }
    fn predicted_fp(&self, n: u64) -> f64 {
        self.f.predicted_fp_for(n)
    }
    /// The single-writer path: the harness owns the filter, as sbbf-rs's
    /// inserts own their buffer (`&mut`).
    fn insert(&mut self, key: &[u8]) {
        self.f.insert_owned(key);
    }
    fn contains(&self, key: &[u8]) -> bool {
        self.f.contains(key)
    }
    fn has_batch(&self) -> bool {
        true
    }
    fn insert_all_batch(&mut self, keys: &[&[u8]]) {
        self.f.insert_batch_owned(keys);
    }
    fn has_shared(&self) -> bool {
        self.f.params().layout == Layout::Blocked
    }
    fn insert_all_shared(&mut self, keys: &[&[u8]], batched: bool) {
        if batched {
            self.f.insert_batch(keys);
        } else {
            for k in keys {
                self.f.insert(k);
            }
        }
    }
    fn memory(&self) -> Option<(*const u8, usize)> {
        let b = self.f.as_bytes();
        Some((b.as_ptr(), b.len()))
    }
    fn count_batch(&self, keys: &[&[u8]], out: &mut Vec<bool>) -> u64 {
        self.f.contains_batch(keys, out);
        out.iter().filter(|&&b| b).count() as u64
    }
    fn fill(&mut self, lo: u64, hi: u64) {
        // Lock-free inserts: use every core (untimed).
        let f = &self.f;
        let chunk = 1u64 << 20;
        let n_chunks = (hi - lo).div_ceil(chunk);
        (0..n_chunks).into_par_iter().for_each(|c| {
            let s = lo + c * chunk;
            let e = (s + chunk).min(hi);
            for_key_chunks(s, e, |keys| {
                f.insert_batch(keys);
            });
        });
    }
}

struct FastBloom {
    f: fastbloom::BloomFilter,
    synthetic: bool,
}

/// Random words in which each bit is set with probability `d` (16-bit
/// binary expansion of `d`), generated in parallel.
fn random_words(words: usize, d: f64, seed: u64) -> Vec<u64> {
    let q = (d * 65536.0).round() as u32;
    let mut v = vec![0u64; words];
    v.par_chunks_mut(1 << 16)
        .enumerate()
        .for_each(|(c, chunk)| {
            let mut st = mix64(seed ^ (c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            for w in chunk {
                let mut x = 0u64;
                for b in 0..16 {
                    st = st.wrapping_add(0x9E37_79B9_7F4A_7C15);
                    let r = mix64(st);
                    x = if (q >> b) & 1 == 1 { x | r } else { x & r };
                }
                *w = x;
            }
        });
    v
}

fn classic_density(m: u64, n: u64, k: u32) -> f64 {
    1.0 - (-(k as f64) * n as f64 / m as f64).exp()
}

impl FastBloom {
    fn new(bits: u64, n: u64) -> FastBloom {
        // Same bit count as ours, fastbloom's own optimal k for n items.
        let f = fastbloom::BloomFilter::with_num_bits(bits as usize)
            .seed(&(SEED as u128))
            .expected_items(n as usize);
        FastBloom {
            f,
            synthetic: false,
        }
    }
}

impl Subject for FastBloom {
    fn name(&self) -> String {
        if self.synthetic {
            "fastbloom 0.17 (synthetic prefill)".into()
        } else {
            "fastbloom 0.17".into()
        }
    }
    fn prefill_synthetic(&mut self, n: u64) -> bool {
        let k = self.f.num_hashes();
        let d = classic_density(self.bits(), n, k);
        let words = random_words(self.f.as_slice().len(), d, 1);
        self.f = fastbloom::BloomFilter::from_vec(words)
            .seed(&(SEED as u128))
            .hashes(k);
        self.synthetic = true;
        true
    }
    fn bits(&self) -> u64 {
        self.f.num_bits() as u64
    }
    fn k(&self) -> String {
        self.f.num_hashes().to_string()
    }
    fn predicted_fp(&self, n: u64) -> f64 {
        self.f.expected_false_pos(n as usize)
    }
    fn insert(&mut self, key: &[u8]) {
        self.f.insert(key);
    }
    fn contains(&self, key: &[u8]) -> bool {
        self.f.contains(key)
    }
}

struct BloomFilterCrate {
    f: bloomfilter::Bloom<[u8]>,
    synthetic: bool,
}

impl BloomFilterCrate {
    fn new(bits: u64, n: u64) -> BloomFilterCrate {
        let mut seed = [0u8; 32];
        for (i, c) in seed.chunks_mut(8).enumerate() {
            c.copy_from_slice(&mix64(SEED + i as u64).to_le_bytes());
        }
        let f = bloomfilter::Bloom::new_with_seed((bits / 8) as usize, n as usize, &seed).unwrap();
        BloomFilterCrate {
            f,
            synthetic: false,
        }
    }
}

impl Subject for BloomFilterCrate {
    fn name(&self) -> String {
        if self.synthetic {
            "bloomfilter 3 (synthetic prefill)".into()
        } else {
            "bloomfilter 3".into()
        }
    }
    fn prefill_synthetic(&mut self, n: u64) -> bool {
        let k = self.f.number_of_hash_functions();
        let bits = self.bits();
        let d = classic_density(bits, n, k);
        let f = std::mem::replace(
            &mut self.f,
            bloomfilter::Bloom::new_with_seed(8, 1, &[0; 32]).unwrap(),
        );
        let mut bytes = f.into_bytes();
        let header = bytes.len() - (bits / 8) as usize;
        let words = random_words((bits / 64) as usize, d, 2);
        for (dst, w) in bytes[header..].chunks_exact_mut(8).zip(words) {
            dst.copy_from_slice(&w.to_le_bytes());
        }
        self.f = bloomfilter::Bloom::from_bytes(bytes).unwrap();
        assert_eq!(self.f.number_of_hash_functions(), k);
        self.synthetic = true;
        true
    }
    fn bits(&self) -> u64 {
        self.f.len()
    }
    fn k(&self) -> String {
        self.f.number_of_hash_functions().to_string()
    }
    fn predicted_fp(&self, n: u64) -> f64 {
        classic_fp(
            self.bits() as f64,
            n as f64,
            self.f.number_of_hash_functions(),
        )
    }
    fn insert(&mut self, key: &[u8]) {
        self.f.set(key);
    }
    fn contains(&self, key: &[u8]) -> bool {
        self.f.check(key)
    }
}

/// sbbf-rs: split-block (Parquet-style) filter over a caller-owned buffer;
/// keys hashed with seeded xxh3-64, hashing included in every timing.
/// Buffers of [`SBBF_HUGE_MIN`] and more get transparent huge pages like the
/// engine's filters (2 MiB aligned, `MADV_HUGEPAGE` before the first touch).
struct Sbbf {
    buf: AlignedBuf,
    buckets: usize,
    ff: sbbf_rs::FilterFn,
}

impl Sbbf {
    fn new(bits: u64) -> Sbbf {
        let bytes = (bits / 8) as usize;
        assert!(bytes.is_multiple_of(sbbf_rs::BUCKET_SIZE));
        let buckets = bytes / sbbf_rs::BUCKET_SIZE;
        assert!(
            buckets <= u32::MAX as usize,
            "sbbf-rs indexes buckets with 32 bits"
        );
        let buf = if bytes >= SBBF_HUGE_MIN {
            AlignedBuf::zeroed_huge(bytes)
        } else {
            AlignedBuf::zeroed(bytes)
        };
        Sbbf {
            buf,
            buckets,
            ff: sbbf_rs::FilterFn::new(),
        }
    }
    #[inline(always)]
    fn hash(key: &[u8]) -> u64 {
        xxh3_64_with_seed(key, SEED)
    }
    /// The bucket sbbf-rs will touch for `h` (its own `fastrange_32` of the
    /// rotated hash; used only to prefetch).
    #[inline(always)]
    fn bucket_ptr(&self, h: u64) -> *const u8 {
        let idx = ((h.rotate_left(32) as u32 as u64 * self.buckets as u64) >> 32) as usize;
        self.buf.as_ptr().wrapping_add(idx * sbbf_rs::BUCKET_SIZE)
    }
}

impl Subject for Sbbf {
    fn name(&self) -> String {
        format!("sbbf-rs 0.2 ({})", self.ff.which())
    }
    fn bits(&self) -> u64 {
        self.buckets as u64 * 256
    }
    fn k(&self) -> String {
        "8".into()
    }
    fn predicted_fp(&self, n: u64) -> f64 {
        // Poisson mixture over the per-bucket load; each of the 8 probes hits
        // its own 32-bit word.
        let lambda = n as f64 / self.buckets as f64;
        let mut p = (-lambda).exp();
        let mut fp = 0.0;
        for j in 0..1000 {
            if j > 0 {
                p *= lambda / j as f64;
            }
            let word_fill = 1.0 - (31.0f64 / 32.0).powi(j);
            fp += p * word_fill.powi(8);
            if j as f64 > lambda * 4.0 + 50.0 {
                break;
            }
        }
        fp
    }
    fn insert(&mut self, key: &[u8]) {
        let h = Self::hash(key);
        // SAFETY: buf is 64-byte aligned and holds `buckets` buckets (> 0).
        unsafe { self.ff.insert(self.buf.as_mut_ptr(), self.buckets, h) };
    }
    fn contains(&self, key: &[u8]) -> bool {
        let h = Self::hash(key);
        // SAFETY: as above.
        unsafe { self.ff.contains(self.buf.as_ptr(), self.buckets, h) }
    }
    fn memory(&self) -> Option<(*const u8, usize)> {
        Some((self.buf.as_ptr(), self.buf.len()))
    }
    fn has_batch(&self) -> bool {
        true
    }
    fn insert_all_batch(&mut self, keys: &[&[u8]]) {
        let mut hs = [0u64; PIPE];
        for chunk in keys.chunks(PIPE) {
            for (h, k) in hs.iter_mut().zip(chunk) {
                *h = Self::hash(k);
                arch::prefetch(self.bucket_ptr(*h));
            }
            for &h in &hs[..chunk.len()] {
                // SAFETY: as above.
                unsafe { self.ff.insert(self.buf.as_mut_ptr(), self.buckets, h) };
            }
        }
    }
    fn count_batch(&self, keys: &[&[u8]], _out: &mut Vec<bool>) -> u64 {
        let mut hs = [0u64; PIPE];
        let mut c = 0;
        for chunk in keys.chunks(PIPE) {
            for (h, k) in hs.iter_mut().zip(chunk) {
                *h = Self::hash(k);
                arch::prefetch(self.bucket_ptr(*h));
            }
            for &h in &hs[..chunk.len()] {
                // SAFETY: as above.
                c += unsafe { self.ff.contains(self.buf.as_ptr(), self.buckets, h) } as u64;
            }
        }
        c
    }
}

/// xorf BinaryFuse16 (static: built from all keys at once), keys hashed with xxh3-64.
struct Fuse16 {
    f: xorf::BinaryFuse16,
}

impl Fuse16 {
    fn build(keys: &[&[u8]]) -> Fuse16 {
        let hashes: Vec<u64> = keys.iter().map(|k| xxh3_64_with_seed(k, SEED)).collect();
        Fuse16 {
            f: xorf::BinaryFuse16::try_from(&hashes).expect("BinaryFuse16 construction"),
        }
    }
}

impl Subject for Fuse16 {
    fn name(&self) -> String {
        "xorf BinaryFuse16".into()
    }
    fn bits(&self) -> u64 {
        self.f.len() as u64 * 16
    }
    fn k(&self) -> String {
        "3 (16-bit fp)".into()
    }
    fn predicted_fp(&self, _n: u64) -> f64 {
        1.0 / 65536.0
    }
    fn insert(&mut self, _key: &[u8]) {
        unreachable!("static filter")
    }
    fn contains(&self, key: &[u8]) -> bool {
        self.f.contains(&xxh3_64_with_seed(key, SEED))
    }
}

fn classic_fp(m: f64, n: f64, k: u32) -> f64 {
    (1.0 - (-(k as f64) * n / m).exp()).powi(k as i32)
}

// ---------------------------------------------------------------------------
// Results

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Insert,
    InsertBatch,
    HitSingle,
    MissSingle,
    HitBatch,
    MissBatch,
}

impl Op {
    const ALL: [Op; 6] = [
        Op::Insert,
        Op::InsertBatch,
        Op::HitSingle,
        Op::MissSingle,
        Op::HitBatch,
        Op::MissBatch,
    ];
    fn title(self) -> &'static str {
        match self {
            Op::Insert => "insert, one at a time",
            Op::InsertBatch => "insert, batched (hash + prefetch pipeline)",
            Op::HitSingle => "lookup hits (inserted keys), one at a time",
            Op::MissSingle => "lookup misses (never-inserted keys), one at a time",
            Op::HitBatch => "lookup hits, batched (hash + prefetch pipeline)",
            Op::MissBatch => "lookup misses, batched",
        }
    }
}

struct Row {
    name: String,
    op: Op,
    /// ns/op of each repetition
    samples: Vec<f64>,
    /// median ns/op of bloomgate-blocked measured alongside (paired), if any
    paired_blocked: Option<f64>,
}

struct FpRow {
    name: String,
    bits: u64,
    k: String,
    predicted: f64,
    fps: u64,
    queries: u64,
}

struct Report {
    rows: Vec<Row>,
    fp: Vec<FpRow>,
    failures: Vec<String>,
}

impl Report {
    fn add(&mut self, name: &str, op: Op, samples: Vec<f64>, paired: Option<f64>) {
        eprintln!(
            "    {name:<26} {op:?}: median {:.2} ns/op  (reps {:?})",
            median(&samples),
            samples
                .iter()
                .map(|x| (x * 100.0).round() / 100.0)
                .collect::<Vec<_>>()
        );
        self.rows.push(Row {
            name: name.into(),
            op,
            samples,
            paired_blocked: paired,
        });
    }

    fn check_fp(&mut self, s: &dyn Subject, n: u64, fps: u64, queries: u64) {
        let predicted = s.predicted_fp(n);
        let expected = predicted * queries as f64;
        let measured = fps as f64;
        // Loud failure for anything a Poisson count cannot explain
        // (6 sigma + 2x slack on the model for peers' approximate formulas).
        let ok = measured <= 2.0 * expected + 6.0 * expected.sqrt() + 10.0
            && measured >= 0.5 * expected - 6.0 * expected.sqrt() - 10.0;
        if !ok {
            self.failures.push(format!(
                "{}: {fps} false positives in {queries} queries, predicted {expected:.0}",
                s.name()
            ));
        }
        self.fp.push(FpRow {
            name: s.name(),
            bits: s.bits(),
            k: s.k(),
            predicted,
            fps,
            queries,
        });
    }

    fn print(&self, title: &str, n: u64, bytes: u64) {
        println!(
            "\n### {title}: {n} keys, {:.1} MiB per filter, {:.2} bits/item\n",
            bytes as f64 / (1 << 20) as f64,
            bytes as f64 * 8.0 / n as f64
        );
        println!("| filter | bits | bits/item | k | predicted FP | measured FP | false pos / queries | measured ÷ predicted |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|");
        for r in &self.fp {
            let m = r.fps as f64 / r.queries as f64;
            println!(
                "| {} | {} | {:.2} | {} | {:.3e} | {:.3e} | {} / {} | {:.3} |",
                r.name,
                r.bits,
                r.bits as f64 / n as f64,
                r.k,
                r.predicted,
                m,
                r.fps,
                r.queries,
                m / r.predicted
            );
        }
        let blocked = |op: Op| {
            self.rows
                .iter()
                .filter(|r| r.op == op && r.name == "bloomgate-blocked")
                .flat_map(|r| r.samples.iter().copied())
                .collect::<Vec<_>>()
        };
        for op in Op::ALL {
            let rows: Vec<&Row> = self.rows.iter().filter(|r| r.op == op).collect();
            if rows.is_empty() {
                continue;
            }
            let b = blocked(op);
            let bmed = if b.is_empty() { f64::NAN } else { median(&b) };
            println!("\n**{title} — {}** (median of reps; ratio = its ns/op ÷ bloomgate-blocked's, >1 means blocked is faster; paired = blocked measured alternately in the same interval)\n", op.title());
            println!("| filter | ns/op (median) | min–max | Mops/s | ratio vs blocked |");
            println!("|---|---:|---:|---:|---:|");
            let mut seen = Vec::new();
            for r in rows {
                if seen.contains(&r.name) {
                    continue;
                }
                seen.push(r.name.clone());
                let med = median(&r.samples);
                let lo = r.samples.iter().cloned().fold(f64::INFINITY, f64::min);
                let hi = r.samples.iter().cloned().fold(0.0, f64::max);
                let ratio = match r.paired_blocked {
                    Some(pb) => format!("{:.2}× (paired)", med / pb),
                    None => format!("{:.2}×", med / bmed),
                };
                println!(
                    "| {} | {:.2} | {:.2}–{:.2} | {:.1} | {} |",
                    r.name,
                    med,
                    lo,
                    hi,
                    1e3 / med,
                    ratio
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Measurement helpers

/// Times `count` (or `count_batch`) over `keys`, repeated `inner` times per rep; ns/op per rep.
fn time_lookups(
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

fn expect_all(name: &str, what: &str, found: u64, total: usize) {
    if found != total as u64 {
        panic!(
            "BROKEN FILTER: {name} found only {found} of {total} inserted keys ({what}) — false negatives"
        );
    }
}

struct LookupSets<'a> {
    hits: Vec<&'a [u8]>,
    misses: Vec<&'a [u8]>,
    /// repetitions of the set inside one timed rep (so each rep lasts long enough)
    hit_inner: usize,
    miss_inner: usize,
}

/// Runs the four lookup measurements on `s` for `reps` reps, interleaved with
/// the same measurement on `paired` (bloomgate-blocked) when given.
fn measure_lookups(
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

// ---------------------------------------------------------------------------
// Scenarios

struct Cfg {
    reps: usize,
    dram_bytes: u64,
    hits: usize,
    misses: usize,
    thp_row: bool,
    /// Include fastbloom and bloomfilter (in cache and at DRAM size).
    with_slow_peers: bool,
    /// Include bloomgate-classic (in cache and at DRAM size; its untimed DRAM fill is the slowest part of a full run).
    with_classic: bool,
    /// fastbloom and bloomfilter at DRAM size: random bits at the right density instead of the slow real fill
    synthetic: bool,
}

fn bits_for(bytes: u64) -> u64 {
    bytes * 8 / 512 * 512
}

/// Items that give bloomgate-blocked exactly TARGET_FP at `bits` (the planner's bits/item).
fn items_for(bits: u64) -> u64 {
    let p = plan(Layout::Blocked, 10_000_000, TARGET_FP).unwrap();
    (bits as f64 / p.bits_per_item()).floor() as u64
}

fn in_cache(cfg: &Cfg, bytes: u64) -> Report {
    let bits = bits_for(bytes);
    let n = items_for(bits);
    let mut rep = Report {
        rows: vec![],
        fp: vec![],
        failures: vec![],
    };
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
    for (i, s) in built.iter().enumerate() {
        let s = s.as_ref().unwrap();
        rep.add(&s.name(), Op::Insert, ins_times[i].clone(), None);
        if s.has_batch() {
            rep.add(&s.name(), Op::InsertBatch, ins_b_times[i].clone(), None);
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

/// SIMD vs scalar in-block kernel on the in-cache blocked filter, fed
/// pre-hashed (block, h) pairs so only the kernel + block load is timed.
fn kernel_comparison(
    rep: &mut Report,
    blocked: &dyn Subject,
    sets: &LookupSets,
    reps: usize,
    n: u64,
) {
    // Rebuild an identical blocked filter we can reach the bytes of.
    let bits = blocked.bits();
    let f = Ours::new(Layout::Blocked, bits, n, false);
    f.f.insert_batch(&sets.hits);
    let k = f.f.params().k;
    let blocks = bits / 512;
    let words: Vec<AtomicU64> =
        f.f.as_bytes()
            .chunks_exact(8)
            .map(|b| AtomicU64::new(u64::from_le_bytes(b.try_into().unwrap())))
            .collect();
    let prep = |keys: &[&[u8]]| -> Vec<(usize, u32)> {
        keys.iter()
            .map(|key| {
                let h = hash_item(SEED, key);
                ((reduce(h.hi, blocks) * 8) as usize, h.lo as u32 | 1)
            })
            .collect()
    };
    let hp = prep(&sets.hits);
    let mp = prep(&sets.misses);
    let kernels = Kernel::supported();
    // Cross-check our derivation (and every kernel) against the filter itself.
    for (set, p) in [(&sets.hits, &hp), (&sets.misses, &mp)] {
        for (key, &(w, h)) in set.iter().zip(p.iter()).take(200_000) {
            let want = f.f.contains(key);
            for &kernel in &kernels {
                assert_eq!(
                    arch::block_contains(kernel, block_at(&words, w), h, k),
                    want,
                    "kernel {kernel} disagrees with the filter"
                );
            }
        }
    }
    let mut names: Vec<String> = kernels
        .iter()
        .map(|k| format!("kernel: {}", kernel_label(*k)))
        .collect();
    names.push("kernel: mask-and-compare (harness candidate)".into());
    for (op, p) in [(Op::HitSingle, &hp), (Op::MissSingle, &mp)] {
        let inner = (4_000_000 / p.len()).max(1);
        let mut samples = vec![vec![]; names.len()];
        let mut counts = vec![0u64; names.len()];
        for _ in 0..reps {
            for which in 0..names.len() {
                let t = Instant::now();
                for _ in 0..inner {
                    counts[which] = match kernels.get(which) {
                        Some(&kernel) => count_kernel(kernel, black_box(&words), black_box(p), k),
                        None => count_mask_compare(black_box(&words), black_box(p), k),
                    };
                }
                samples[which].push(t.elapsed().as_nanos() as f64 / (p.len() * inner) as f64);
            }
        }
        assert!(
            counts.iter().all(|&c| c == counts[0]),
            "kernels disagree: {counts:?}"
        );
        if op == Op::HitSingle {
            expect_all("kernels", "hits", counts[0], p.len());
        }
        for (i, s) in samples.into_iter().enumerate() {
            rep.add(&names[i], op, s, None);
        }
    }
    // Hash cost alone (xxh3-128), to decompose a lookup.
    let mut hs = vec![];
    for _ in 0..reps {
        let t = Instant::now();
        let mut acc = 0u64;
        for key in &sets.misses {
            acc ^= hash_item(SEED, black_box(key)).hi;
        }
        black_box(acc);
        hs.push(t.elapsed().as_nanos() as f64 / sets.misses.len() as f64);
    }
    rep.add("hash only: xxh3-128 of the key", Op::MissSingle, hs, None);
}

fn dram(cfg: &Cfg) -> Report {
    let bits = bits_for(cfg.dram_bytes);
    let n = items_for(bits);
    let mut rep = Report {
        rows: vec![],
        fp: vec![],
        failures: vec![],
    };
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

    let build = |rep: &mut Report, s: &mut dyn Subject, synthetic: bool| {
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
        let mut single = vec![];
        let mut batched = vec![];
        let mut shared: [Vec<f64>; 2] = [vec![], vec![]];
        let part = |j: usize| &res[j * chunk as usize..(j + 1) * chunk as usize];
        let mut inserted = vec![];
        for r in 0..cfg.reps {
            let (c1, c2) = (part(4 * r), part(4 * r + 1));
            let t = Instant::now();
            s.insert_all(black_box(c1));
            single.push(t.elapsed().as_nanos() as f64 / chunk as f64);
            let t = Instant::now();
            if s.has_batch() {
                s.insert_all_batch(black_box(c2));
                batched.push(t.elapsed().as_nanos() as f64 / chunk as f64);
            } else {
                s.insert_all(c2);
            }
            inserted.extend([c1, c2]);
            if s.has_shared() {
                for (b, times) in shared.iter_mut().enumerate() {
                    let t = Instant::now();
                    s.insert_all_shared(black_box(part(4 * r + 2 + b)), b == 1);
                    times.push(t.elapsed().as_nanos() as f64 / chunk as f64);
                }
            } else {
                // Untimed: the lookup samples may name these keys.
                s.insert_all_batch(part(4 * r + 2));
                s.insert_all_batch(part(4 * r + 3));
            }
            inserted.extend([part(4 * r + 2), part(4 * r + 3)]);
        }
        rep.add(&s.name(), Op::Insert, single, None);
        if !batched.is_empty() {
            rep.add(&s.name(), Op::InsertBatch, batched, None);
        }
        if s.has_shared() {
            let name = format!("{} (shared &Filter)", s.name());
            let [one, many] = shared;
            rep.add(&name, Op::Insert, one, None);
            rep.add(&name, Op::InsertBatch, many, None);
        }
        // Every timed-inserted key must be there.
        let found: u64 = inserted.iter().map(|c| s.count(c)).sum();
        expect_all(
            &s.name(),
            "reserved keys",
            found,
            inserted.len() * chunk as usize,
        );
    };

    let mut blocked = Ours::new(Layout::Blocked, bits, n, false);
    build(&mut rep, &mut blocked, false);
    measure_lookups(&mut rep, n, &blocked, None, &sets, cfg.reps, true);

    type Make = Box<dyn Fn() -> Box<dyn Subject>>;
    let mut peers: Vec<(Make, bool)> = vec![(Box::new(move || Box::new(Sbbf::new(bits))), false)];
    if cfg.with_classic {
        peers.push((
            Box::new(move || Box::new(Ours::new(Layout::Classic, bits, n, false))),
            false,
        ));
    }
    if cfg.with_slow_peers {
        peers.insert(
            0,
            (
                Box::new(move || Box::new(FastBloom::new(bits, n))),
                cfg.synthetic,
            ),
        );
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
        build(&mut rep, &mut *s, synthetic);
        measure_lookups(&mut rep, n, &*s, Some(&blocked), &sets, cfg.reps, true);
        drop(s);
    }
    rep
}

fn block_at(words: &[AtomicU64], w: usize) -> &arch::Block {
    words[w..w + 8].try_into().unwrap()
}

fn kernel_label(kernel: Kernel) -> &'static str {
    match kernel.name() {
        "avx512" => "avx512 (one vpermd of the block, 16 lanes)",
        "avx2" => "avx2 (2 vpermd + blend, 8 lanes)",
        _ => "scalar (early exit)",
    }
}

/// How many of the pre-hashed `(word, h)` pairs `kernel` finds, in a loop
/// compiled for the kernel (as the engine's own loops are).
fn count_kernel(kernel: Kernel, words: &[AtomicU64], pairs: &[(usize, u32)], k: u32) -> u64 {
    arch::dispatch(
        kernel,
        #[inline(always)]
        |kernel| {
            let mut c = 0u64;
            for &(w, h) in pairs {
                c += arch::block_contains(kernel, block_at(words, w), h, k) as u64;
            }
            c
        },
    )
}

/// Candidate: build the mask (as insert does) and compare all 8 words.
fn count_mask_compare(words: &[AtomicU64], pairs: &[(usize, u32)], k: u32) -> u64 {
    let mut c = 0u64;
    for &(w, h) in pairs {
        let block = arch::load_block(block_at(words, w));
        let m = arch::block_mask(h, k);
        let mut missing = 0u64;
        for i in 0..8 {
            missing |= m[i] & !block[i];
        }
        c += (missing == 0) as u64;
    }
    c
}

/// `filters kernel-dram [--dram-mib N]`: the in-block kernels on random
/// blocks of a DRAM-sized bit array (random bits, ~half set), one lookup at a
/// time without prefetch: shows how much memory-level parallelism each
/// kernel lets the out-of-order core extract.
fn kernel_dram(bytes: u64, reps: usize) {
    let words: Vec<AtomicU64> = random_words((bytes / 8) as usize, 0.55, 3)
        .into_iter()
        .map(AtomicU64::new)
        .collect();
    let blocks = (words.len() / 8) as u64;
    let k = 12u32;
    let pairs: Vec<(usize, u32)> = (0..10_000_000u64)
        .map(|i| {
            let h = mix64(i ^ 0xABCDEF);
            ((reduce(h, blocks) * 8) as usize, (h >> 32) as u32 | 1)
        })
        .collect();
    println!("\n### In-block kernels on a {} MiB random bit array (DRAM), 10 M random blocks, k = {k}, no prefetch\n", bytes >> 20);
    println!("| kernel | ns/lookup (median of {reps}) | min–max |");
    println!("|---|---:|---:|");
    let kernels = Kernel::supported();
    let mut samples = vec![vec![]; kernels.len()];
    let mut counts = vec![0u64; kernels.len()];
    for _ in 0..reps {
        for (i, &kernel) in kernels.iter().enumerate() {
            let t = Instant::now();
            counts[i] = count_kernel(kernel, &words, black_box(&pairs), k);
            samples[i].push(t.elapsed().as_nanos() as f64 / pairs.len() as f64);
        }
    }
    assert!(
        counts.iter().all(|&c| c == counts[0]),
        "kernels disagree: {counts:?}"
    );
    for (i, s) in samples.iter().enumerate() {
        let lo = s.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = s.iter().cloned().fold(0.0, f64::max);
        println!(
            "| {} | {:.2} | {lo:.2}–{hi:.2} |",
            kernel_label(kernels[i]),
            median(s)
        );
    }
    println!(
        "\n({} of {} random probes reported present)",
        counts[0],
        pairs.len()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(|a| a == "kernel-dram").unwrap_or(false) {
        let mib = num_arg(&args, "--dram-mib").map_or(2048, |m| m as u64);
        kernel_dram(mib << 20, 5);
        return;
    }
    let full = args.iter().any(|a| a == "full");
    let get = |name: &str| num_arg(&args, name);
    let cfg = Cfg {
        reps: get("--reps").map(|x| x as usize).unwrap_or(5),
        dram_bytes: (get("--dram-mib").unwrap_or(if full { 2048.0 } else { 64.0 })
            * (1 << 20) as f64) as u64,
        hits: get("--hits").map(|x| x as usize).unwrap_or(if full {
            10_000_000
        } else {
            1_000_000
        }),
        misses: get("--misses").map(|x| x as usize).unwrap_or(if full {
            10_000_000
        } else {
            1_000_000
        }),
        thp_row: !args.iter().any(|a| a == "--no-thp-row"),
        with_slow_peers: !args.iter().any(|a| a == "--no-slow-peers"),
        with_classic: !args.iter().any(|a| a == "--no-classic"),
        synthetic: !args.iter().any(|a| a == "--real-fill"),
    };
    let in_cache_bytes = (get("--cache-kib").unwrap_or(1024.0) * 1024.0) as u64;
    println!(
        "## filters benchmark ({})\n",
        if full { "full" } else { "quick" }
    );
    println!(
        "CPU: {} ({} logical CPUs), THP policy: {}, reps: {}, target p = {TARGET_FP:e}, keys: synthetic URLs `http://host<h>.example/path/<i>[?q=<x>]`; sbbf-rs and xorf get seeded xxh3-64 of the key (hashing inside the timing); sbbf-rs's buffer gets transparent huge pages (2 MiB aligned, MADV_HUGEPAGE before first touch) from 4 MiB on, like bloomgate's own filters.",
        cpu_model(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        thp_policy(),
        cfg.reps
    );
    let t0 = Instant::now();
    let mut failures = vec![];
    let r = in_cache(&cfg, in_cache_bytes);
    let bits = bits_for(in_cache_bytes);
    r.print("In-cache", items_for(bits), bits / 8);
    failures.extend(r.failures);
    if !args.iter().any(|a| a == "--no-dram") {
        let r = dram(&cfg);
        let bits = bits_for(cfg.dram_bytes);
        r.print(
            if cfg.dram_bytes >= 2 << 30 {
                "DRAM-resident"
            } else {
                "Larger (quick)"
            },
            items_for(bits),
            bits / 8,
        );
        failures.extend(r.failures);
    }
    println!("\n(total {:.0} s)", t0.elapsed().as_secs_f64());
    if !failures.is_empty() {
        eprintln!("\nIMPLAUSIBLE RESULTS:");
        for f in &failures {
            eprintln!("  {f}");
        }
        std::process::exit(1);
    }
}
