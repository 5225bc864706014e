//! Deletable filters side by side: bloomgate's counting and cuckoo filters,
//! its blocked Bloom filter (no deletes: the baseline), the
//! `scalable_cuckoo_filter` crate, and RedisBloom's `CF.*` in a real
//! `redis-server`, on the same synthetic URL keys at the same target rate.
//!
//! ```text
//! cargo run --release -p bloomgate-bench --bin deletable -- --items 10000000 --fp 1e-4
//! options: --items N (1e6)  --fp P (1e-4)  --misses N (1e6)  --reps R (3)
//!          --threads T (2: the reader-scaling section)  --no-redis
//! RedisBloom: the module from REDISBLOOM_MODULE, by default ../shared/bench/redisbloom.so
//! (the row is skipped with a note where it is absent).
//! ```
//!
//! Every time is the median of `reps` runs over all keys, in nanoseconds per
//! operation, one thread. The harness checks its answers: every inserted key
//! must be found and deleted by every filter (panic otherwise), and each
//! measured false-positive rate must be within a factor of two of the
//! filter's prediction where there is one (non-zero exit otherwise).
//!
//! Peers:
//! * `scalable_cuckoo_filter` (0.3): chosen over `cuckoofilter` (the most
//!   downloaded, but fixed 8-bit fingerprints, ~3 % FP, so not comparable
//!   at 10⁻⁴) because it derives the fingerprint width from the requested
//!   rate and packs fingerprints at exactly that width, as bloomgate does.
//!   It plans its first table for p/2 (it scales), so its fingerprints are
//!   `⌈log2(2b/(p/2))⌉` = 18 bits at 10⁻⁴, one more than bloomgate's 17;
//!   it hashes with SipHash-1-3. Deletes and lookups take `&mut`/`&self`
//!   without internal locking (single-threaded only).
//! * RedisBloom `CF.*`: 8-bit fingerprints whatever the rate (RedisBloom's
//!   cuckoo filter has no rate parameter), buckets of `BUCKETSIZE` 4,
//!   capacity rounded to a power of two of buckets. Driven over loopback
//!   TCP with pipelines of 1000 commands (`CF.ADD`, `CF.EXISTS`, `CF.DEL`)
//!   through the `redis` crate: its ns/op are 1/throughput, including the
//!   network and protocol, so they compare the services, not the tables.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::RwLock;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bloomgate_bench::{cpu_model, median, Keys};
use bloomgate_engine::math::cuckoo_fp;
use bloomgate_engine::{
    plan, plan_counting, plan_cuckoo, CountingFilter, CuckooFilter, Filter, Layout, Params, Removal,
};
use scalable_cuckoo_filter::ScalableCuckooFilter;

const SEED: u64 = 0x5EED_DE1E;
/// Commands per pipeline for RedisBloom.
const PIPE: usize = 1000;

struct Args {
    items: u64,
    fp: f64,
    misses: u64,
    reps: usize,
    threads: usize,
    redis: bool,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        items: 1_000_000,
        fp: 1e-4,
        misses: 1_000_000,
        reps: 3,
        threads: 2,
        redis: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value =
            || -> Result<String> { it.next().with_context(|| format!("{flag} needs a value")) };
        match flag.as_str() {
            "--items" => a.items = value()?.parse::<f64>().context("--items")? as u64,
            "--fp" => a.fp = value()?.parse().context("--fp")?,
            "--misses" => a.misses = value()?.parse::<f64>().context("--misses")? as u64,
            "--reps" => a.reps = value()?.parse().context("--reps")?,
            "--threads" => a.threads = value()?.parse().context("--threads")?,
            "--no-redis" => a.redis = false,
            "-h" | "--help" => {
                println!("usage: deletable [--items N] [--fp P] [--misses N] [--reps R] [--threads T] [--no-redis]");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if a.items == 0 || a.reps == 0 || a.misses == 0 {
        bail!("--items, --misses and --reps must be positive");
    }
    Ok(a)
}

/// One row of the table.
struct Row {
    name: String,
    bits_per_item: f64,
    predicted_fp: Option<f64>,
    measured_fp: f64,
    add_ns: f64,
    hit_ns: f64,
    miss_ns: f64,
    delete_ns: Option<f64>,
    note: String,
}

/// The timing loop: `reps` times (fresh filter each time), median of each phase.
struct Phases {
    add: Vec<f64>,
    hit: Vec<f64>,
    miss: Vec<f64>,
    delete: Vec<f64>,
    fps: u64,
}

fn ns_per(t: Instant, ops: usize) -> f64 {
    t.elapsed().as_nanos() as f64 / ops as f64
}

/// What the timing loop needs of a filter.
trait Subject {
    /// Adds a key; false if the filter refused it (fatal).
    fn add(&mut self, k: &[u8]) -> bool;
    /// Looks a key up.
    fn has(&self, k: &[u8]) -> bool;
    /// Deletes a key: `None` if the filter cannot delete, else whether it
    /// found the key.
    fn del(&mut self, k: &[u8]) -> Option<bool>;
}

impl Subject for CountingFilter {
    fn add(&mut self, k: &[u8]) -> bool {
        self.insert(k);
        true
    }
    fn has(&self, k: &[u8]) -> bool {
        self.contains(k)
    }
    fn del(&mut self, k: &[u8]) -> Option<bool> {
        Some(self.remove(k) == Removal::Removed)
    }
}

impl Subject for CuckooFilter {
    fn add(&mut self, k: &[u8]) -> bool {
        self.insert(k).is_ok()
    }
    fn has(&self, k: &[u8]) -> bool {
        self.contains(k)
    }
    fn del(&mut self, k: &[u8]) -> Option<bool> {
        Some(self.remove(k) == Removal::Removed)
    }
}

impl Subject for Filter {
    fn add(&mut self, k: &[u8]) -> bool {
        self.insert(k);
        true
    }
    fn has(&self, k: &[u8]) -> bool {
        self.contains(k)
    }
    fn del(&mut self, _: &[u8]) -> Option<bool> {
        None
    }
}

impl Subject for ScalableCuckooFilter<[u8]> {
    fn add(&mut self, k: &[u8]) -> bool {
        self.insert(k);
        true
    }
    fn has(&self, k: &[u8]) -> bool {
        self.contains(k)
    }
    fn del(&mut self, k: &[u8]) -> Option<bool> {
        Some(self.remove(k))
    }
}

/// Runs the phases on a fresh filter from `make` per repetition; `after`
/// sees the filter once it is full.
fn run<F: Subject>(
    reps: usize,
    hits: &[&[u8]],
    misses: &[&[u8]],
    make: impl Fn() -> F,
    after: impl Fn(&F),
) -> Phases {
    let mut p = Phases {
        add: vec![],
        hit: vec![],
        miss: vec![],
        delete: vec![],
        fps: 0,
    };
    for _ in 0..reps {
        let mut f = make();
        let t = Instant::now();
        for k in hits {
            assert!(f.add(k), "the filter refused an item");
        }
        p.add.push(ns_per(t, hits.len()));
        after(&f);
        let t = Instant::now();
        let found = hits.iter().filter(|k| f.has(black_box(k))).count();
        p.hit.push(ns_per(t, hits.len()));
        assert_eq!(found, hits.len(), "false negative");
        let t = Instant::now();
        let fps = misses.iter().filter(|k| f.has(black_box(k))).count();
        p.miss.push(ns_per(t, misses.len()));
        p.fps = fps as u64;
        let t = Instant::now();
        let mut deleted = 0usize;
        for k in hits {
            match f.del(k) {
                None => break,
                Some(found) => deleted += found as usize,
            }
        }
        if deleted > 0 {
            p.delete.push(ns_per(t, hits.len()));
            assert_eq!(deleted, hits.len(), "a stored item was not found to delete");
        }
    }
    p
}

impl Phases {
    fn row(
        self,
        name: &str,
        bits_per_item: f64,
        predicted_fp: Option<f64>,
        misses: usize,
        note: String,
    ) -> Row {
        Row {
            name: name.into(),
            bits_per_item,
            predicted_fp,
            measured_fp: self.fps as f64 / misses as f64,
            add_ns: median(&self.add),
            hit_ns: median(&self.hit),
            miss_ns: median(&self.miss),
            delete_ns: (!self.delete.is_empty()).then(|| median(&self.delete)),
            note,
        }
    }
}

fn module_path() -> Option<PathBuf> {
    let p = std::env::var_os("REDISBLOOM_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../shared/bench/redisbloom.so"));
    p.is_file().then(|| p.canonicalize().unwrap_or(p))
}

/// RedisBloom's cuckoo filter in a real redis-server: pipelined adds,
/// lookups and deletes, with the size from `CF.INFO`.
fn redisbloom(a: &Args, hits: &[&[u8]], misses: &[&[u8]], module: &std::path::Path) -> Result<Row> {
    let dir = tempfile::Builder::new()
        .prefix("deletable-bench-")
        .tempdir()?;
    let module = module.display().to_string();
    let server = testkit::redis::RedisServer::start(dir.path(), &["--loadmodule", &module]);
    let client = redis::Client::open(format!("redis://{}", server.addr()))?;
    let mut c = client.get_connection()?;
    let (mut add, mut hit, mut miss, mut del) = (vec![], vec![], vec![], vec![]);
    let (mut fps, mut bytes) = (0u64, 0u64);
    let ints = |c: &mut redis::Connection, cmd: &str, keys: &[&[u8]]| -> Result<Vec<i64>> {
        let mut pipe = redis::pipe();
        for k in keys {
            pipe.cmd(cmd).arg("cf").arg(*k);
        }
        Ok(pipe.query(c)?)
    };
    for _ in 0..a.reps {
        redis::cmd("DEL").arg("cf").query::<()>(&mut c)?;
        redis::cmd("CF.RESERVE")
            .arg("cf")
            .arg(a.items)
            .arg("BUCKETSIZE")
            .arg(4)
            .query::<()>(&mut c)
            .context("CF.RESERVE")?;
        let t = Instant::now();
        for chunk in hits.chunks(PIPE) {
            let r = ints(&mut c, "CF.ADD", chunk)?;
            assert!(r.iter().all(|&x| x == 1), "CF.ADD refused an item");
        }
        add.push(ns_per(t, hits.len()));
        let info: Vec<redis::Value> = redis::cmd("CF.INFO").arg("cf").query(&mut c)?;
        bytes = info_field(&info, "Size").context("CF.INFO has no Size")?;
        let t = Instant::now();
        for chunk in hits.chunks(PIPE) {
            let r = ints(&mut c, "CF.EXISTS", chunk)?;
            assert!(r.iter().all(|&x| x == 1), "RedisBloom: false negative");
        }
        hit.push(ns_per(t, hits.len()));
        let t = Instant::now();
        let mut found = 0u64;
        for chunk in misses.chunks(PIPE) {
            found += ints(&mut c, "CF.EXISTS", chunk)?.iter().sum::<i64>() as u64;
        }
        miss.push(ns_per(t, misses.len()));
        fps = found;
        let t = Instant::now();
        for chunk in hits.chunks(PIPE) {
            let r = ints(&mut c, "CF.DEL", chunk)?;
            assert!(
                r.iter().all(|&x| x == 1),
                "CF.DEL did not find a stored item"
            );
        }
        del.push(ns_per(t, hits.len()));
    }
    drop(server);
    Ok(Row {
        name: "RedisBloom CF (8-bit fp)".into(),
        bits_per_item: bytes as f64 * 8.0 / a.items as f64,
        predicted_fp: None,
        measured_fp: fps as f64 / misses.len() as f64,
        add_ns: median(&add),
        hit_ns: median(&hit),
        miss_ns: median(&miss),
        delete_ns: Some(median(&del)),
        note: format!(
            "CF.INFO Size {bytes} B; loopback TCP, pipelines of {PIPE}: {:.0} adds/s, {:.0} lookups/s",
            1e9 / median(&add),
            1e9 / median(&hit)
        ),
    })
}

/// The integer after `name` in a `CF.INFO` reply (a flat name/value array).
fn info_field(info: &[redis::Value], name: &str) -> Option<u64> {
    let mut it = info.iter();
    while let Some(v) = it.next() {
        let is_name = match v {
            redis::Value::BulkString(b) => b == name.as_bytes(),
            redis::Value::SimpleString(s) => s == name,
            _ => false,
        };
        if is_name {
            return match it.next()? {
                redis::Value::Int(i) => Some(*i as u64),
                _ => None,
            };
        }
    }
    None
}

/// Lookups per second with `threads` readers on one full cuckoo filter:
/// through its lock-free (sequence-lock) `contains`, and through a
/// `RwLock` read guard around it, which is what a reader-writer lock design
/// would cost. Returns (seqlock, rwlock) in millions of lookups per second.
fn reader_scaling(f: &CuckooFilter, keys: &[&[u8]], threads: usize) -> (f64, f64) {
    let wrapped = RwLock::new(());
    let measure = |locked: bool| {
        let t = Instant::now();
        std::thread::scope(|s| {
            for i in 0..threads {
                let wrapped = &wrapped;
                s.spawn(move || {
                    let mut found = 0usize;
                    // Each thread starts at another place in the keys.
                    let start = i * keys.len() / threads.max(1);
                    for j in 0..keys.len() {
                        let k = keys[(start + j) % keys.len()];
                        found += if locked {
                            let _g = wrapped.read().unwrap();
                            f.contains(k)
                        } else {
                            f.contains(k)
                        } as usize;
                    }
                    assert_eq!(found, keys.len(), "false negative");
                });
            }
        });
        (threads * keys.len()) as f64 / t.elapsed().as_secs_f64() / 1e6
    };
    let _ = measure(false); // warm
    (measure(false), measure(true))
}

fn main() -> Result<()> {
    let a = parse_args()?;
    let n = a.items;
    let p = a.fp;
    eprintln!("keys: {n} inserted, {} never inserted", a.misses);
    let inserted = Keys::from_ids(0..n);
    let absent = Keys::from_ids((1u64 << 40)..(1u64 << 40) + a.misses);
    let (hits, misses) = (inserted.slices(), absent.slices());
    let mut rows = Vec::new();

    // bloomgate counting.
    let cplan = plan_counting(n, p)?;
    let phases = run(
        a.reps,
        &hits,
        &misses,
        || CountingFilter::with_plan(&cplan, SEED).expect("counting filter"),
        |_| {},
    );
    rows.push(phases.row(
        "bloomgate counting (blocked)",
        cplan.bits_per_item(),
        Some(cplan.predicted_fp),
        misses.len(),
        format!("k = {}, 4-bit counters, 128 per cache line", cplan.k),
    ));

    // bloomgate cuckoo.
    let qplan = plan_cuckoo(n, p, 4)?;
    let load = std::cell::Cell::new(0.0);
    let phases = run(
        a.reps,
        &hits,
        &misses,
        || CuckooFilter::with_plan(&qplan, SEED).expect("cuckoo filter"),
        |f| load.set(f.load()),
    );
    rows.push(phases.row(
        "bloomgate cuckoo",
        qplan.bits_per_item(),
        Some(cuckoo_fp(qplan.fingerprint_bits, 4, load.get())),
        misses.len(),
        format!(
            "f = {}, b = 4, {} buckets, load {:.1} %",
            qplan.fingerprint_bits,
            qplan.buckets,
            load.get() * 100.0
        ),
    ));

    // bloomgate blocked Bloom (no deletes).
    let bplan = plan(Layout::Blocked, n, p)?;
    let phases = run(
        a.reps,
        &hits,
        &misses,
        || Filter::new(Params::from_plan(&bplan, SEED)).expect("filter"),
        |_| {},
    );
    rows.push(phases.row(
        "bloomgate blocked Bloom",
        bplan.bits_per_item(),
        Some(bplan.predicted_fp),
        misses.len(),
        format!("k = {}, no deletes", bplan.k),
    ));

    // scalable_cuckoo_filter.
    let bits = std::cell::Cell::new(0u64);
    let phases = run(
        a.reps,
        &hits,
        &misses,
        || {
            scalable_cuckoo_filter::ScalableCuckooFilterBuilder::new()
                .initial_capacity(n as usize)
                .false_positive_probability(p)
                .finish::<[u8]>()
        },
        |f| bits.set(f.bits()),
    );
    rows.push(phases.row(
        "scalable_cuckoo_filter 0.3",
        bits.get() as f64 / n as f64,
        None,
        misses.len(),
        "18-bit fp (first table at p/2), SipHash-1-3".into(),
    ));

    // RedisBloom.
    let mut notes = Vec::new();
    match (a.redis, module_path()) {
        (false, _) => notes.push("RedisBloom: skipped (--no-redis)".to_string()),
        (true, None) => notes.push("RedisBloom: skipped, no module (set REDISBLOOM_MODULE)".into()),
        (true, Some(_)) if !testkit::have("redis-server") => {
            notes.push("RedisBloom: skipped, redis-server is not installed".into())
        }
        (true, Some(m)) => rows.push(redisbloom(&a, &hits, &misses, &m)?),
    }

    // Readers of one cuckoo filter on several threads.
    let f = CuckooFilter::with_plan(&qplan, SEED)?;
    for k in &hits {
        f.insert(k).expect("planned capacity");
    }
    let sample = &hits[..hits.len().min(1_000_000)];
    let (seq, rw) = reader_scaling(&f, sample, a.threads);
    let (seq1, rw1) = reader_scaling(&f, sample, 1);

    println!("## Deletable filters: n = {n}, p = {p}\n");
    println!(
        "CPU: {} ({} threads available)",
        cpu_model(),
        std::thread::available_parallelism().map_or(0, |t| t.get())
    );
    println!(
        "Command: `cargo run --release -p bloomgate-bench --bin deletable -- {}`\n",
        std::env::args().skip(1).collect::<Vec<_>>().join(" ")
    );
    println!("| filter | bits/item | FP measured | FP predicted | add ns | lookup hit ns | lookup miss ns | delete ns | notes |");
    println!("|---|--:|--:|--:|--:|--:|--:|--:|---|");
    let mut bad = Vec::new();
    for r in &rows {
        println!(
            "| {} | {:.1} | {:.2e} | {} | {:.0} | {:.0} | {:.0} | {} | {} |",
            r.name,
            r.bits_per_item,
            r.measured_fp,
            r.predicted_fp.map_or("–".into(), |p| format!("{p:.2e}")),
            r.add_ns,
            r.hit_ns,
            r.miss_ns,
            r.delete_ns.map_or("–".into(), |d| format!("{d:.0}")),
            r.note
        );
        if let Some(pred) = r.predicted_fp {
            // Below ~20 expected false positives the measurement says little.
            if pred * misses.len() as f64 >= 20.0
                && !(pred / 2.0..=pred * 2.0).contains(&r.measured_fp)
            {
                bad.push(format!(
                    "{}: measured FP {} vs predicted {pred}",
                    r.name, r.measured_fp
                ));
            }
        }
    }
    for note in &notes {
        println!("\n{note}");
    }
    println!(
        "\nCuckoo lookups (hits) from {} thread(s): {seq:.1} M/s lock-free (sequence lock), {rw:.1} M/s through an RwLock read guard; one thread: {seq1:.1} vs {rw1:.1} M/s.",
        a.threads
    );
    if !bad.is_empty() {
        bail!("implausible false-positive rates: {}", bad.join("; "));
    }
    Ok(())
}
