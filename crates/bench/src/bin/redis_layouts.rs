//! Bloom filters stored in Redis, four ways, in one run on one machine:
//!
//! * **bloomgate** — `bloomgate_redis`: shards of 64-byte blocks; a lookup
//!   is one `GETRANGE` of the item's block, an add one `BITFIELD` of its k
//!   `SET u1`, pipelined per node;
//! * **per-bit** — the layout of the seed article and of most client
//!   libraries: one string of m bits, k `SETBIT`/`GETBIT` per item (double
//!   hashing), pipelined;
//! * **Lua** — as Redisson does: `EVALSHA` of a script that runs the k
//!   `SETBIT`/`GETBIT` of one item, pipelined;
//! * **RedisBloom** — `BF.MADD`/`BF.MEXISTS` of 256 items per command on
//!   one key, pipelined (the module from `REDISBLOOM_MODULE`, by default
//!   `../shared/bench/redisbloom.so`; the column is skipped with a note
//!   when the file is absent).
//!
//! Every layout is sized for the same n at the same p, gets the same items
//! and answers the same lookups; the answers are checked (every added item
//! found, each add of a fresh item "new" but for false positives, misses at
//! the layout's false-positive rate), so a layout that computes the wrong
//! answer fails instead of looking fast. Targets: one local `redis-server`,
//! and a local Redis Cluster of three masters without replicas (started as
//! the tests start them). Clients: 1 (one thread; bloomgate spreads a batch
//! over its default lanes) and 50 (threads, one connection each).
//!
//! Printed: a markdown table of items/s with ratios, Redis's own CPU per
//! item (`INFO cpu` of every node, before and after) and the client's
//! (`getrusage`), the CPU model and the command line.
//!
//! ```text
//! cargo run --release -p bloomgate-bench --bin redis_layouts -- --items 500000
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Parser;

use bloomgate_engine::{plan, Filter, Layout, Params};
use bloomgate_redis::{layout::key_slot, Address, RedisFilter};
use testkit::redis::{Cluster, RedisServer};

#[derive(Parser, Debug)]
#[command(about = "Bloom filters in Redis: bloomgate vs per-bit, Lua and RedisBloom")]
struct Args {
    /// Items added, then looked up (as many misses are looked up too).
    #[arg(long, default_value_t = 500_000)]
    items: usize,
    /// Items every layout is sized for (the same n for all).
    #[arg(long, default_value_t = 10_000_000)]
    planned: u64,
    /// Target false-positive rate (the same p for all).
    #[arg(long, default_value_t = 1e-4)]
    p: f64,
    /// Client counts to run.
    #[arg(long, value_delimiter = ',', default_value = "1,50")]
    clients: Vec<usize>,
    /// Targets: standalone, cluster.
    #[arg(long, value_delimiter = ',', default_value = "standalone,cluster")]
    targets: Vec<String>,
    /// Layouts: bloomgate, per-bit, lua, redisbloom.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "bloomgate,per-bit,lua,redisbloom"
    )]
    layouts: Vec<String>,
    /// bloomgate: connections per node for one client's batch.
    #[arg(long, default_value_t = bloomgate_redis::LANES)]
    lanes: usize,
    /// Items per call (bloomgate) or per pipeline (the others), per client.
    #[arg(long, default_value_t = 4096)]
    batch: usize,
}

/// One measured pass.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    items: usize,
    secs: f64,
    redis_cpu: f64,
    client_cpu: f64,
    /// Commands Redis ran (all nodes).
    commands: u64,
}

impl Run {
    fn rate(&self) -> f64 {
        self.items as f64 / self.secs
    }
    fn redis_us(&self) -> f64 {
        self.redis_cpu * 1e6 / self.items as f64
    }
    fn client_us(&self) -> f64 {
        self.client_cpu * 1e6 / self.items as f64
    }
    fn commands_per_item(&self) -> f64 {
        self.commands as f64 / self.items as f64
    }
}

fn client_cpu() -> f64 {
    // SAFETY: getrusage writes one `rusage` into the zeroed value we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// The servers of one target.
struct Target {
    name: &'static str,
    /// Every node (for INFO cpu).
    nodes: Vec<u16>,
    /// Address prefix of filters: `redis://h:p` or `redis+cluster://h:p,…`.
    base: String,
    has_module: bool,
    _keep: Box<dyn std::any::Any>,
}

impl Target {
    /// Redis's CPU seconds (user + system) and commands run, summed over
    /// every node.
    fn redis_counters(&self) -> (f64, u64) {
        let mut cpu = 0.0;
        let mut commands = 0;
        for &port in &self.nodes {
            let mut c = conn(port);
            let info: String = redis::cmd("INFO").arg("all").query(&mut c).unwrap();
            for l in info.lines() {
                let Some((k, v)) = l.split_once(':') else {
                    continue;
                };
                match k {
                    "used_cpu_sys" | "used_cpu_user" => cpu += v.trim().parse::<f64>().unwrap(),
                    // The INFO of this call counts itself: one more.
                    "total_commands_processed" => commands += v.trim().parse::<u64>().unwrap(),
                    _ => {}
                }
            }
        }
        (cpu, commands)
    }

    /// The port of the master serving `key`.
    fn node_of(&self, key: &str) -> Result<u16> {
        let a = Address::parse(&format!("{}/x", self.base))?;
        let store = bloomgate_redis::Store::new(&a)?;
        let (nodes, master) = store.masters_by_slot()?;
        Ok(nodes[master[key_slot(key.as_bytes()) as usize] as usize].1)
    }
}

fn conn(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection()
        .unwrap()
}

fn item(i: usize) -> String {
    format!("https://site{}.example/page/{i}", i % 9973)
}
fn miss(i: usize) -> String {
    format!("https://other{}.example/none/{i}", i % 9973)
}

/// Runs `work(client, range)` on `clients` threads over `0..n`; returns
/// the time and the CPU of Redis and of this process, and the results.
fn measure<R: Send>(
    target: &Target,
    clients: usize,
    n: usize,
    work: impl Fn(usize, std::ops::Range<usize>) -> Result<R> + Sync,
) -> Result<(Run, Vec<R>)> {
    let ((r0, n0), c0) = (target.redis_counters(), client_cpu());
    let t = Instant::now();
    let per = n.div_ceil(clients);
    let results: Vec<Result<R>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..clients)
            .map(|c| {
                let work = &work;
                s.spawn(move || work(c, c * per..((c + 1) * per).min(n)))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let secs = t.elapsed().as_secs_f64();
    let ((r1, n1), c1) = (target.redis_counters(), client_cpu());
    let results = results.into_iter().collect::<Result<Vec<R>>>()?;
    Ok((
        Run {
            items: n,
            secs,
            redis_cpu: r1 - r0,
            client_cpu: c1 - c0,
            // Less the INFO commands of the measurement itself.
            commands: (n1 - n0).saturating_sub(target.nodes.len() as u64),
        },
        results,
    ))
}

/// What one layout did: adds and lookups, checked.
struct Outcome {
    add: Run,
    lookup: Run,
    fp: f64,
}

/// Checks the answers: every add of a distinct fresh item is new but for
/// false positives, every added item is found, misses at about `p`.
fn check(
    layout: &str,
    new: usize,
    n: usize,
    hits: usize,
    false_hits: usize,
    p: f64,
) -> Result<f64> {
    let slack = (n as f64 * p * 20.0).ceil() as usize + 5;
    if new + slack < n || new > n {
        bail!("{layout}: {new} of {n} fresh items were new");
    }
    if hits != n {
        bail!("{layout}: {hits} of {n} added items found (false negatives!)");
    }
    if false_hits > slack {
        bail!("{layout}: {false_hits} false positives in {n} misses (p = {p})");
    }
    Ok(false_hits as f64 / n as f64)
}

fn run_bloomgate(a: &Args, t: &Target, dir: &Path, clients: usize) -> Result<Outcome> {
    let name = format!("bench{clients}");
    let file = dir.join(format!("{name}.bgf"));
    let _ = std::fs::remove_file(&file);
    let params = Params::from_plan(&plan(Layout::Blocked, a.planned, a.p)?, 0x5eed);
    let mut f = Filter::create_file(&file, params)?;
    f.persist()?;
    drop(f);
    let address = Address::parse(&format!("{}/{name}", t.base))?;
    bloomgate_redis::push(&file, &address, true, &|_| {})?;
    std::fs::remove_file(&file)?;
    let lanes = if clients == 1 { a.lanes } else { 1 };
    let open = || -> Result<RedisFilter> {
        let mut f = RedisFilter::open(&address)?;
        f.set_lanes(lanes);
        Ok(f)
    };
    let filters: Vec<RedisFilter> = (0..clients).map(|_| open()).collect::<Result<_>>()?;
    let (add, news) = measure(t, clients, a.items, |c, r| {
        let mut new = 0;
        let keys: Vec<String> = r.map(item).collect();
        for b in keys.chunks(a.batch) {
            new += filters[c].insert_keys(b)?.iter().filter(|&&x| x).count();
        }
        Ok(new)
    })?;
    let (lookup, found) = measure(t, clients, a.items, |c, r| {
        let mut hits = (0, 0);
        let keys: Vec<String> = r.clone().map(item).collect();
        let misses: Vec<String> = r.map(miss).collect();
        for (b, m) in keys.chunks(a.batch / 2).zip(misses.chunks(a.batch / 2)) {
            hits.0 += filters[c].contains_keys(b)?.iter().filter(|&&x| x).count();
            hits.1 += filters[c].contains_keys(m)?.iter().filter(|&&x| x).count();
        }
        Ok(hits)
    })?;
    let lookup = Run {
        items: 2 * a.items,
        ..lookup
    };
    let fp = check(
        "bloomgate",
        news.iter().sum(),
        a.items,
        found.iter().map(|h| h.0).sum(),
        found.iter().map(|h| h.1).sum(),
        a.p,
    )?;
    bloomgate_redis::delete(&address)?;
    Ok(Outcome { add, lookup, fp })
}

/// The k bit positions of `key` in an m-bit classic filter: double hashing
/// of XXH3-128, `h1 + i·h2 mod m`, as common libraries do (Kirsch &
/// Mitzenmacher).
fn positions(key: &[u8], m: u64, k: u32, out: &mut Vec<u64>) {
    let h = xxhash_rust::xxh3::xxh3_128(key);
    let (h1, h2) = (h as u64, (h >> 64) as u64 | 1);
    out.clear();
    out.extend((0..k as u64).map(|i| h1.wrapping_add(i.wrapping_mul(h2)) % m));
}

const ADD_LUA: &str = "local new = 0\n\
for i = 1, #ARGV do\n\
  if redis.call('SETBIT', KEYS[1], ARGV[i], 1) == 0 then new = 1 end\n\
end\n\
return new";
const EXISTS_LUA: &str = "for i = 1, #ARGV do\n\
  if redis.call('GETBIT', KEYS[1], ARGV[i]) == 0 then return 0 end\n\
end\n\
return 1";

/// per-bit (`lua = false`) or Lua (`lua = true`) on one string key.
fn run_bits(a: &Args, t: &Target, clients: usize, lua: bool) -> Result<Outcome> {
    let pl = plan(Layout::Classic, a.planned, a.p)?;
    let (m, k) = (pl.bits, pl.k);
    let key = format!("{}{{bits}}:{clients}", if lua { "lua" } else { "perbit" });
    let port = t.node_of(&key)?;
    let mut c0 = conn(port);
    redis::cmd("DEL").arg(&key).query::<()>(&mut c0)?;
    // The whole string at once (one allocation, as a push does).
    redis::cmd("SETRANGE")
        .arg(&key)
        .arg(m / 8 - 1)
        .arg(&[0u8][..])
        .query::<()>(&mut c0)?;
    let add_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(ADD_LUA)
        .query(&mut c0)?;
    let exists_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(EXISTS_LUA)
        .query(&mut c0)?;
    let per_pipe = (a.batch / if lua { 1 } else { k as usize }).max(1);
    let (add, news) = measure(t, clients, a.items, |_, r| {
        let mut c = conn(port);
        let mut new = 0;
        let mut pos = Vec::new();
        let idx: Vec<usize> = r.collect();
        for b in idx.chunks(per_pipe) {
            let mut p = redis::pipe();
            for &i in b {
                positions(item(i).as_bytes(), m, k, &mut pos);
                if lua {
                    p.cmd("EVALSHA").arg(&add_sha).arg(1).arg(&key).arg(&pos);
                } else {
                    for &x in &pos {
                        p.cmd("SETBIT").arg(&key).arg(x).arg(1);
                    }
                }
            }
            let v: Vec<i64> = p.query(&mut c)?;
            new += if lua {
                v.iter().filter(|&&x| x == 1).count()
            } else {
                v.chunks(k as usize).filter(|old| old.contains(&0)).count()
            };
        }
        Ok(new)
    })?;
    let (lookup, found) = measure(t, clients, a.items, |_, r| {
        let mut c = conn(port);
        let mut hits = (0, 0);
        let mut pos = Vec::new();
        let idx: Vec<usize> = r.collect();
        for b in idx.chunks((per_pipe / 2).max(1)) {
            let mut p = redis::pipe();
            for &i in b {
                for key_of in [item(i), miss(i)] {
                    positions(key_of.as_bytes(), m, k, &mut pos);
                    if lua {
                        p.cmd("EVALSHA").arg(&exists_sha).arg(1).arg(&key).arg(&pos);
                    } else {
                        for &x in &pos {
                            p.cmd("GETBIT").arg(&key).arg(x);
                        }
                    }
                }
            }
            let v: Vec<i64> = p.query(&mut c)?;
            let answers: Vec<bool> = if lua {
                v.iter().map(|&x| x == 1).collect()
            } else {
                v.chunks(k as usize).map(|b| !b.contains(&0)).collect()
            };
            for pair in answers.chunks(2) {
                hits.0 += pair[0] as usize;
                hits.1 += pair[1] as usize;
            }
        }
        Ok(hits)
    })?;
    let lookup = Run {
        items: 2 * a.items,
        ..lookup
    };
    let fp = check(
        if lua { "lua" } else { "per-bit" },
        news.iter().sum(),
        a.items,
        found.iter().map(|h| h.0).sum(),
        found.iter().map(|h| h.1).sum(),
        a.p,
    )?;
    redis::cmd("DEL").arg(&key).query::<()>(&mut c0)?;
    Ok(Outcome { add, lookup, fp })
}

/// Items per `BF.MADD`/`BF.MEXISTS`.
const BF_ITEMS: usize = 256;

fn run_redisbloom(a: &Args, t: &Target, clients: usize) -> Result<Outcome> {
    let key = format!("rb{{bf}}:{clients}");
    let port = t.node_of(&key)?;
    let mut c0 = conn(port);
    redis::cmd("DEL").arg(&key).query::<()>(&mut c0)?;
    redis::cmd("BF.RESERVE")
        .arg(&key)
        .arg(a.p)
        .arg(a.planned)
        .arg("NONSCALING")
        .query::<()>(&mut c0)
        .context("BF.RESERVE")?;
    let cmds_per_pipe = (a.batch / BF_ITEMS).max(1);
    let (add, news) = measure(t, clients, a.items, |_, r| {
        let mut c = conn(port);
        let mut new = 0;
        let keys: Vec<String> = r.map(item).collect();
        for pipe in keys.chunks(BF_ITEMS * cmds_per_pipe) {
            let mut p = redis::pipe();
            for b in pipe.chunks(BF_ITEMS) {
                p.cmd("BF.MADD").arg(&key).arg(b);
            }
            let v: Vec<Vec<i64>> = p.query(&mut c)?;
            new += v.iter().flatten().filter(|&&x| x == 1).count();
        }
        Ok(new)
    })?;
    let (lookup, found) = measure(t, clients, a.items, |_, r| {
        let mut c = conn(port);
        let mut hits = (0, 0);
        let keys: Vec<String> = r.clone().map(item).collect();
        let misses: Vec<String> = r.map(miss).collect();
        let half = (BF_ITEMS * cmds_per_pipe / 2).max(1);
        for (kp, mp) in keys.chunks(half).zip(misses.chunks(half)) {
            let mut p = redis::pipe();
            for b in kp.chunks(BF_ITEMS) {
                p.cmd("BF.MEXISTS").arg(&key).arg(b);
            }
            for b in mp.chunks(BF_ITEMS) {
                p.cmd("BF.MEXISTS").arg(&key).arg(b);
            }
            let v: Vec<Vec<i64>> = p.query(&mut c)?;
            let split = kp.len().div_ceil(BF_ITEMS);
            hits.0 += v[..split].iter().flatten().filter(|&&x| x == 1).count();
            hits.1 += v[split..].iter().flatten().filter(|&&x| x == 1).count();
        }
        Ok(hits)
    })?;
    let lookup = Run {
        items: 2 * a.items,
        ..lookup
    };
    let fp = check(
        "redisbloom",
        news.iter().sum(),
        a.items,
        found.iter().map(|h| h.0).sum(),
        found.iter().map(|h| h.1).sum(),
        a.p,
    )?;
    redis::cmd("DEL").arg(&key).query::<()>(&mut c0)?;
    Ok(Outcome { add, lookup, fp })
}

fn module_path() -> Option<PathBuf> {
    let p = std::env::var_os("REDISBLOOM_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("../shared/bench/redisbloom.so"));
    p.is_file().then(|| p.canonicalize().unwrap_or(p))
}

fn start(target: &str, dir: &Path, module: Option<&Path>) -> Result<Target> {
    let mut extra: Vec<String> = Vec::new();
    if let Some(m) = module {
        extra.push("--loadmodule".into());
        extra.push(m.display().to_string());
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    Ok(match target {
        "standalone" => {
            let s = RedisServer::start(dir, &extra);
            Target {
                name: "standalone",
                nodes: vec![s.port],
                base: format!("redis://{}", s.addr()),
                has_module: module.is_some(),
                _keep: Box::new(s),
            }
        }
        "cluster" => {
            let c = Cluster::start_with(dir, 0, &extra);
            let addrs: Vec<String> = c.nodes.iter().map(RedisServer::addr).collect();
            Target {
                name: "cluster, 3 masters",
                nodes: c.nodes.iter().map(|n| n.port).collect(),
                base: format!("redis+cluster://{}", addrs.join(",")),
                has_module: module.is_some(),
                _keep: Box::new(c),
            }
        }
        other => bail!("unknown target {other:?} (standalone, cluster)"),
    })
}

fn main() -> Result<()> {
    let a = Args::parse();
    if testkit::redis::redis_missing() {
        bail!("redis-server and redis-cli are needed");
    }
    let module = module_path();
    let dir = tempfile::Builder::new()
        .prefix("redis-layouts-")
        .tempdir_in(std::env::temp_dir())?;
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let redis_version = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let blocked = plan(Layout::Blocked, a.planned, a.p)?;
    let classic = plan(Layout::Classic, a.planned, a.p)?;
    eprintln!(
        "planned n = {}, p = {}: blocked {} bits k = {}, classic {} bits k = {}",
        a.planned, a.p, blocked.bits, blocked.k, classic.bits, classic.k
    );

    // (target, layout, clients) -> outcome
    let mut rows: Vec<(String, String, usize, Outcome)> = Vec::new();
    let mut notes = Vec::new();
    for target in &a.targets {
        let t = start(target, dir.path(), module.as_deref())?;
        for layout in &a.layouts {
            for &clients in &a.clients {
                let o = match layout.as_str() {
                    "bloomgate" => run_bloomgate(&a, &t, dir.path(), clients)?,
                    "per-bit" => run_bits(&a, &t, clients, false)?,
                    "lua" => run_bits(&a, &t, clients, true)?,
                    "redisbloom" if !t.has_module => {
                        let note =
                            "RedisBloom: skipped, no module (set REDISBLOOM_MODULE)".to_string();
                        if !notes.contains(&note) {
                            notes.push(note);
                        }
                        continue;
                    }
                    "redisbloom" => run_redisbloom(&a, &t, clients)?,
                    other => bail!("unknown layout {other:?}"),
                };
                eprintln!(
                    "{} {layout} clients={clients}: add {:.0}/s ({:.2} µs Redis, {:.2} µs client, {:.3} commands per item), lookup {:.0}/s ({:.2} µs Redis, {:.2} µs client, {:.3} commands), fp {:.2e}",
                    t.name,
                    o.add.rate(),
                    o.add.redis_us(),
                    o.add.client_us(),
                    o.add.commands_per_item(),
                    o.lookup.rate(),
                    o.lookup.redis_us(),
                    o.lookup.client_us(),
                    o.lookup.commands_per_item(),
                    o.fp
                );
                rows.push((t.name.to_string(), layout.clone(), clients, o));
            }
        }
    }
    print_tables(
        &a,
        &rows,
        &notes,
        &cpu,
        cores,
        &redis_version,
        &blocked,
        &classic,
    );
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn print_tables(
    a: &Args,
    rows: &[(String, String, usize, Outcome)],
    notes: &[String],
    cpu: &str,
    cores: usize,
    redis_version: &str,
    blocked: &bloomgate_engine::math::Plan,
    classic: &bloomgate_engine::math::Plan,
) {
    let cmd: Vec<String> = std::env::args().collect();
    println!(
        "CPU: {cpu} ({cores} cores); {redis_version}; n = {} planned, p = {}, {} items added then {} looked up (half misses) per cell; bloomgate: {} lanes for 1 client, {} keys per call; blocked {:.1} MiB k = {}, per-bit/Lua {:.1} MiB k = {}",
        a.planned,
        a.p,
        a.items,
        2 * a.items,
        a.lanes,
        a.batch,
        blocked.bits as f64 / 8.0 / 1048576.0,
        blocked.k,
        classic.bits as f64 / 8.0 / 1048576.0,
        classic.k
    );
    println!("Command: `{}`", cmd.join(" "));
    println!();
    let layouts = ["bloomgate", "per-bit", "lua", "redisbloom"];
    let get = |t: &str, l: &str, c: usize| {
        rows.iter()
            .find(|r| r.0 == t && r.1 == l && r.2 == c)
            .map(|r| &r.3)
    };
    println!("| target | op | clients | bloomgate | per-bit | Lua | RedisBloom | ÷ per-bit | ÷ Lua | ÷ RedisBloom |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut targets: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    targets.dedup();
    for t in &targets {
        for op in ["add", "lookup"] {
            for &c in &a.clients {
                let rate = |l: &str| {
                    get(t, l, c).map(|o| {
                        if op == "add" {
                            o.add.rate()
                        } else {
                            o.lookup.rate()
                        }
                    })
                };
                let cell = |l: &str| {
                    rate(l).map_or("–".into(), |r| format!("{:.0}", r).replace_thousands())
                };
                let ratio = |l: &str| match (rate("bloomgate"), rate(l)) {
                    (Some(b), Some(x)) => format!("{:.1}×", b / x),
                    _ => "–".into(),
                };
                println!(
                    "| {t} | {op} | {c} | {} | {} | {} | {} | {} | {} | {} |",
                    cell(layouts[0]),
                    cell(layouts[1]),
                    cell(layouts[2]),
                    cell(layouts[3]),
                    ratio("per-bit"),
                    ratio("lua"),
                    ratio("redisbloom")
                );
            }
        }
    }
    println!();
    println!("Per item: Redis CPU µs (all nodes, `INFO cpu`) / client CPU µs (this process, `getrusage`) / commands Redis ran (`total_commands_processed`)");
    println!();
    println!("| target | op | clients | bloomgate | per-bit | Lua | RedisBloom |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for t in &targets {
        for op in ["add", "lookup"] {
            for &c in &a.clients {
                let cell = |l: &str| {
                    get(t, l, c).map_or("–".into(), |o| {
                        let r = if op == "add" { o.add } else { o.lookup };
                        format!(
                            "{:.2} / {:.2} / {:.3}",
                            r.redis_us(),
                            r.client_us(),
                            r.commands_per_item()
                        )
                    })
                };
                println!(
                    "| {t} | {op} | {c} | {} | {} | {} | {} |",
                    cell(layouts[0]),
                    cell(layouts[1]),
                    cell(layouts[2]),
                    cell(layouts[3])
                );
            }
        }
    }
    for n in notes {
        println!();
        println!("{n}");
    }
}

/// `1234567` → `1,234,567`.
trait Thousands {
    fn replace_thousands(self) -> String;
}

impl Thousands for String {
    fn replace_thousands(self) -> String {
        let (sign, digits) = match self.strip_prefix('-') {
            Some(d) => ("-", d.to_string()),
            None => ("", self.clone()),
        };
        let mut out = String::new();
        for (i, ch) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(ch);
        }
        format!("{sign}{out}")
    }
}
