//! One filter file served by the real `bloomgate serve`, measured as a
//! client sees it: latency of single HTTP checks at a fixed modest rate,
//! lookups per second of batched members (RESP `BF.MEXISTS` pipelines and
//! HTTP batch checks), and whether the server read from disk after the
//! file was warmed.
//!
//! The files hold the synthetic URLs of the `scale` harness
//! (`bloomgate_bench::urls`, stream `p`, numbers `0..--items`): a file that
//! `scale --keep` left behind, or one this tool builds first with
//! `--build` (through the `bloomgate build` command's own code, from the
//! same generator). Each `--file` is served in turn from a data directory
//! of its own (`--dir`, the file hard-linked into it as `f.bgf`, or
//! symlinked across file systems), so several layouts of the same items
//! are measured in one run.
//!
//! Per file:
//! 1. **Warm**: every page of the file is read (so it sits in the page
//!    cache the server's mapping shares), then every member is looked up
//!    once through `BF.MEXISTS` (`--warm-lookups`, default all up to 10⁸) —
//!    all of them must answer 1: a false negative fails the run.
//! 2. The server's `read_bytes` (`/proc/PID/io`) and major page faults
//!    (`/proc/PID/stat`) are read, and the file's resident fraction
//!    (`mincore`).
//! 3. **Single checks**: `--http-rate` GET `/v1/filters/f/check?item=…`
//!    per second of random members over `--http-conns` keep-alive
//!    connections for `--seconds`, open loop (latency from the scheduled
//!    send, so a stall is charged to every request it delays); p50, p99.
//! 4. **Batches**: `--conns` connections each keep `--pipeline` commands of
//!    `BF.MEXISTS f` with `--batch` random members in flight for
//!    `--seconds`: members/s. Then the same through HTTP batch checks
//!    (POST of `--batch` items, one request in flight per connection).
//! 5. The counters of step 2 again: the difference says whether anything
//!    was read from disk while measuring.
//!
//! Prints one line per file and a summary table.
//!
//! ```text
//! cargo build --release -p bloomgate-bench --bin serve_file -p bloomgate-cli   # `bloomgate` beside it, or BLOOMGATE_BIN
//! target/release/serve_file --items 1e7 --build --dir /tmp/sf \
//!     --file /tmp/sf/ribbon.bgf:ribbon --file /tmp/sf/blocked.bgf:blocked
//! target/release/serve_file --items 1e10 --file /work/scale/scale-ribbon.bgf
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bloomgate_bench::urls::{url, Urls};
use bloomgate_bench::{cpu_model, mix64};
use bloomgate_cli::args::Cli;
use bloomgate_cli::input::register_generated;
use clap::Parser;

#[derive(Parser)]
#[command(about = "Serve a filter file with `bloomgate serve` and measure lookups as a client")]
struct Opts {
    /// A filter file (`PATH`, or `PATH:LAYOUT` with --build); repeat to
    /// measure several in one run.
    #[arg(long, required = true)]
    file: Vec<String>,
    /// The file holds the synthetic URLs 0..items of stream `p`.
    #[arg(long, value_parser = count)]
    items: u64,
    /// Build each missing file (`PATH:LAYOUT`) from the generator first.
    #[arg(long)]
    build: bool,
    /// Only build.
    #[arg(long)]
    build_only: bool,
    /// Target false-positive rate of a build.
    #[arg(long, default_value_t = 1e-4)]
    fp: f64,
    /// Memory budget of a build.
    #[arg(long, default_value = "2G")]
    memory: String,
    /// Working directory: the data directories served.
    #[arg(long, default_value = "serve-file-run")]
    dir: PathBuf,
    /// Seconds of each measurement.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Single HTTP checks per second (all connections).
    #[arg(long, default_value_t = 2000)]
    http_rate: u64,
    /// Connections of the single checks.
    #[arg(long, default_value_t = 4)]
    http_conns: u64,
    /// Connections of the batched lookups.
    #[arg(long, default_value_t = 2)]
    conns: u64,
    /// Members per batch.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// RESP commands in flight per connection.
    #[arg(long, default_value_t = 8)]
    pipeline: usize,
    /// Members looked up while warming (default: all, at most 10⁸).
    #[arg(long, value_parser = count)]
    warm_lookups: Option<u64>,
}

fn count(s: &str) -> Result<u64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{s}: {e}"))?;
    if !(1.0..=1e12).contains(&v) {
        return Err(format!("{s}: between 1 and 1e12"));
    }
    Ok(v as u64)
}

/// Member number `i` (without its newline).
fn member(i: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(96);
    url(&mut v, b'p', i);
    v.pop();
    v
}

/// A random member number (a counter through a mixer).
struct Pick {
    state: u64,
    items: u64,
}

impl Pick {
    fn new(seed: u64, items: u64) -> Pick {
        Pick { state: seed, items }
    }
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state) % self.items
    }
}

/// The server's bytes read from storage and major page faults.
fn disk_counters(pid: u32) -> (u64, u64) {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    let read_bytes = io
        .lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(u64::MAX);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; majflt is field 12.
    let majflt = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.split(' ').nth(9))
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    (read_bytes, majflt)
}

/// Reads every page of `path` (into the page cache); returns its length.
fn warm_pages(path: &Path) -> Result<u64> {
    let mut f = std::fs::File::open(path).with_context(|| path.display().to_string())?;
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let r = f.read(&mut buf)?;
        if r == 0 {
            return Ok(n);
        }
        n += r as u64;
    }
}

/// The fraction of `path`'s pages in the page cache (`mincore`).
fn resident(path: &Path) -> Result<f64> {
    let f = std::fs::File::open(path)?;
    // SAFETY: the map is only passed to mincore, never read; the file is
    // not truncated while this runs (the tool owns the run).
    let map = unsafe { memmap2::Mmap::map(&f)? };
    let page = 4096usize;
    let pages = map.len().div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `map` is a live mapping of `map.len()` bytes and `vec` has
    // one byte per page of it, as mincore requires.
    let r = unsafe { libc::mincore(map.as_ptr() as *mut _, map.len(), vec.as_mut_ptr()) };
    if r != 0 {
        bail!("mincore: {}", std::io::Error::last_os_error());
    }
    Ok(vec.iter().filter(|b| **b & 1 == 1).count() as f64 / pages.max(1) as f64)
}

/// A RESP connection sending `BF.MEXISTS f` commands.
struct Resp {
    w: TcpStream,
    r: BufReader<TcpStream>,
    line: String,
}

impl Resp {
    fn connect(addr: SocketAddr) -> Result<Resp> {
        let w = TcpStream::connect(addr)?;
        w.set_nodelay(true)?;
        let r = BufReader::new(w.try_clone()?);
        Ok(Resp {
            w,
            r,
            line: String::new(),
        })
    }

    /// Appends `BF.MEXISTS f` of `ids`' members to `out`.
    fn mexists(out: &mut Vec<u8>, count: usize, ids: impl Iterator<Item = u64>) {
        out.extend_from_slice(
            format!("*{}\r\n$10\r\nBF.MEXISTS\r\n$1\r\nf\r\n", count + 2).as_bytes(),
        );
        for i in ids {
            let m = member(i);
            out.extend_from_slice(format!("${}\r\n", m.len()).as_bytes());
            out.extend_from_slice(&m);
            out.extend_from_slice(b"\r\n");
        }
    }

    /// Reads one `BF.MEXISTS` reply; returns (answers, zeros).
    fn read_reply(&mut self) -> Result<(u64, u64)> {
        self.line.clear();
        self.r.read_line(&mut self.line)?;
        let n: u64 = match self.line.strip_prefix('*') {
            Some(n) => n.trim().parse()?,
            None => bail!("reply {:?}", self.line.trim()),
        };
        let mut zeros = 0;
        for _ in 0..n {
            self.line.clear();
            self.r.read_line(&mut self.line)?;
            match self.line.trim() {
                ":1" | "#t" => {}
                ":0" | "#f" => zeros += 1,
                other => bail!("answer {other:?}"),
            }
        }
        Ok((n, zeros))
    }
}

/// A keep-alive HTTP/1.1 connection.
struct Http {
    /// The `Host` header: the server's own address (it refuses a name that
    /// is not a loopback one, as a browser's rebound request would send).
    host: String,
    w: TcpStream,
    r: BufReader<TcpStream>,
    line: String,
}

impl Http {
    fn connect(addr: SocketAddr) -> Result<Http> {
        let w = TcpStream::connect(addr)?;
        w.set_nodelay(true)?;
        let r = BufReader::new(w.try_clone()?);
        Ok(Http {
            host: addr.to_string(),
            w,
            r,
            line: String::new(),
        })
    }

    /// Sends a request and reads the answer's body (status 200 required).
    fn request(&mut self, head: &str, body: &[u8]) -> Result<Vec<u8>> {
        let mut req = Vec::with_capacity(head.len() + body.len() + 100);
        req.extend_from_slice(head.as_bytes());
        req.extend_from_slice(
            format!(
                "Host: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                self.host,
                body.len()
            )
            .as_bytes(),
        );
        req.extend_from_slice(body);
        self.w.write_all(&req)?;
        self.line.clear();
        self.r.read_line(&mut self.line)?;
        if !self.line.starts_with("HTTP/1.1 200") {
            bail!("answer {:?}", self.line.trim());
        }
        let mut len = None;
        loop {
            self.line.clear();
            self.r.read_line(&mut self.line)?;
            let l = self.line.trim();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = Some(v.trim().parse::<usize>()?);
                }
            }
        }
        let mut out = vec![0u8; len.context("no content-length")?];
        self.r.read_exact(&mut out)?;
        Ok(out)
    }
}

fn percent_encode(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for &b in s {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Every member (up to `n`) looked up once over `conns` connections;
/// fails on a false negative.
fn warm_lookups(addr: SocketAddr, items: u64, n: u64, conns: u64) -> Result<()> {
    let per = n.div_ceil(conns);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..conns)
            .map(|c| {
                s.spawn(move || -> Result<()> {
                    let mut r = Resp::connect(addr)?;
                    let (lo, hi) = (c * per, ((c + 1) * per).min(n));
                    let stride = (items / n).max(1);
                    let mut buf = Vec::new();
                    let mut i = lo;
                    while i < hi {
                        let end = (i + 1000).min(hi);
                        buf.clear();
                        Resp::mexists(&mut buf, (end - i) as usize, (i..end).map(|j| j * stride));
                        r.w.write_all(&buf)?;
                        let (_, zeros) = r.read_reply()?;
                        if zeros > 0 {
                            bail!("{zeros} false negative(s) among members {i}..{end}");
                        }
                        i = end;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("warm thread"))
    })
}

/// Single HTTP checks at a fixed rate: (achieved/s, p50 µs, p99 µs).
fn paced_singles(o: &Opts, addr: SocketAddr) -> Result<(f64, f64, f64)> {
    let per_conn = o.http_rate as f64 / o.http_conns as f64;
    let gap = Duration::from_secs_f64(1.0 / per_conn);
    let start = Instant::now() + Duration::from_millis(100);
    let end = start + Duration::from_secs(o.seconds);
    let items = o.items;
    let all: Vec<Vec<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..o.http_conns)
            .map(|c| {
                s.spawn(move || -> Result<Vec<f64>> {
                    let mut h = Http::connect(addr)?;
                    let mut pick = Pick::new(0x5eed ^ (c << 40), items);
                    let mut lat = Vec::new();
                    // Connections start spread over one gap.
                    let mut next = start + gap.mul_f64(c as f64 / o.http_conns as f64);
                    while next < end {
                        let now = Instant::now();
                        if now < next {
                            std::thread::sleep(next - now);
                        }
                        let m = member(pick.next());
                        let head = format!(
                            "GET /v1/filters/f/check?item={} HTTP/1.1\r\n",
                            percent_encode(&m)
                        );
                        let body = h.request(&head, b"")?;
                        lat.push((Instant::now() - next).as_secs_f64() * 1e6);
                        if !body.windows(10).any(|w| w == b"\"hit\":true") {
                            bail!("a member answered {}", String::from_utf8_lossy(&body));
                        }
                        next += gap;
                    }
                    Ok(lat)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("paced thread"))
            .collect::<Result<Vec<_>>>()
    })?;
    let mut lat: Vec<f64> = all.into_iter().flatten().collect();
    lat.sort_by(f64::total_cmp);
    let q = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    Ok((lat.len() as f64 / o.seconds as f64, q(0.5), q(0.99)))
}

/// Batched RESP lookups of random members: members/s.
fn resp_batches(o: &Opts, addr: SocketAddr) -> Result<f64> {
    let end = Instant::now() + Duration::from_secs(o.seconds);
    let t = Instant::now();
    let items = o.items;
    let done: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..o.conns)
            .map(|c| {
                s.spawn(move || -> Result<u64> {
                    let mut r = Resp::connect(addr)?;
                    let mut pick = Pick::new(0xba7c ^ (c << 40), items);
                    let mut buf = Vec::new();
                    // Commands are made ahead of time in rounds, so the
                    // client's URL writing overlaps the server's work.
                    let mut send = |r: &mut Resp, buf: &mut Vec<u8>| -> Result<()> {
                        buf.clear();
                        Resp::mexists(buf, o.batch, (0..o.batch).map(|_| pick.next()));
                        r.w.write_all(buf)?;
                        Ok(())
                    };
                    for _ in 0..o.pipeline {
                        send(&mut r, &mut buf)?;
                    }
                    let mut n = 0;
                    while Instant::now() < end {
                        let (got, zeros) = r.read_reply()?;
                        if zeros > 0 {
                            bail!("{zeros} false negative(s)");
                        }
                        n += got;
                        send(&mut r, &mut buf)?;
                    }
                    for _ in 0..o.pipeline {
                        let (got, zeros) = r.read_reply()?;
                        if zeros > 0 {
                            bail!("{zeros} false negative(s)");
                        }
                        n += got;
                    }
                    Ok(n)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("batch thread"))
            .sum::<Result<u64>>()
    })?;
    Ok(done as f64 / t.elapsed().as_secs_f64())
}

/// Batched HTTP checks of random members: members/s.
fn http_batches(o: &Opts, addr: SocketAddr) -> Result<f64> {
    let end = Instant::now() + Duration::from_secs(o.seconds);
    let t = Instant::now();
    let items = o.items;
    let done: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..o.conns)
            .map(|c| {
                s.spawn(move || -> Result<u64> {
                    let mut h = Http::connect(addr)?;
                    let mut pick = Pick::new(0x4774 ^ (c << 40), items);
                    let mut n = 0;
                    while Instant::now() < end {
                        let batch: Vec<String> = (0..o.batch)
                            .map(|_| String::from_utf8(member(pick.next())).expect("ASCII"))
                            .collect();
                        let body = serde_json::to_vec(&batch)?;
                        let answer = h.request("POST /v1/filters/f/check HTTP/1.1\r\n", &body)?;
                        let v: serde_json::Value = serde_json::from_slice(&answer)?;
                        let results = v["results"].as_array().context("no results")?;
                        if results.len() != batch.len()
                            || results
                                .iter()
                                .any(|r| r["hit"] != serde_json::Value::Bool(true))
                        {
                            bail!("a member was not a hit: {v}");
                        }
                        n += batch.len() as u64;
                    }
                    Ok(n)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("http batch thread"))
            .sum::<Result<u64>>()
    })?;
    Ok(done as f64 / t.elapsed().as_secs_f64())
}

/// Builds `path` in `layout` from the generator's first `items` URLs.
fn build(path: &Path, layout: &str, o: &Opts) -> Result<()> {
    register_generated("generated:positives", Arc::new(Urls::new(b'p', o.items)));
    let argv = [
        "bloomgate",
        "build",
        "--keys",
        "url",
        "-n",
        &o.items.to_string(),
        "--layout",
        layout,
        "--memory",
        &o.memory,
        "-p",
        &o.fp.to_string(),
        "-o",
        &path.to_string_lossy(),
        "generated:positives",
    ]
    .map(String::from);
    let t = Instant::now();
    let code = bloomgate_cli::cmd::run(Cli::try_parse_from(argv)?)?;
    if code != 0 {
        bail!("build of {} failed", path.display());
    }
    eprintln!(
        "serve_file: built {} ({layout}) in {:.1} s",
        path.display(),
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The data directory serving `file` as `f.bgf`.
fn data_dir(o: &Opts, n: usize, file: &Path) -> Result<PathBuf> {
    let d = o.dir.join(format!("served-{n}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d)?;
    let f = d.join("f.bgf");
    if std::fs::hard_link(file, &f).is_err() {
        std::os::unix::fs::symlink(std::fs::canonicalize(file)?, &f)?;
    }
    Ok(d)
}

struct Row {
    name: String,
    bytes: u64,
    p50: f64,
    p99: f64,
    singles: f64,
    resp: f64,
    http: f64,
    read_bytes: u64,
    majflt: u64,
    resident: f64,
}

fn main() -> Result<()> {
    let o = Opts::parse();
    if std::env::var_os("BLOOMGATE_BIN").is_none() {
        // The `bloomgate` built beside this tool (target/release).
        let exe = std::env::current_exe()?;
        let bin = exe.with_file_name("bloomgate");
        if !bin.is_file() {
            bail!("{} is missing: build it (cargo build --release -p bloomgate-cli) or set BLOOMGATE_BIN", bin.display());
        }
        std::env::set_var("BLOOMGATE_BIN", bin);
    }
    if o.http_rate == 0 || o.http_conns == 0 || o.conns == 0 || o.batch == 0 || o.pipeline == 0 {
        bail!("--http-rate, --http-conns, --conns, --batch and --pipeline must be at least 1");
    }
    std::fs::create_dir_all(&o.dir)?;
    let files: Vec<(PathBuf, Option<String>)> = o
        .file
        .iter()
        .map(|f| match f.rsplit_once(':') {
            Some((p, l)) => (PathBuf::from(p), Some(l.to_string())),
            None => (PathBuf::from(f), None),
        })
        .collect();
    for (path, layout) in &files {
        if (o.build || o.build_only) && !path.exists() {
            let layout = layout.as_deref().context("--build needs PATH:LAYOUT")?;
            build(path, layout, &o)?;
        }
    }
    if o.build_only {
        return Ok(());
    }
    println!(
        "serve_file: {} members, {}, {} cores; singles {}/s over {} connections, batches of {} over {} connections ({} in flight each), {} s each",
        o.items,
        cpu_model(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        o.http_rate,
        o.http_conns,
        o.batch,
        o.conns,
        o.pipeline,
        o.seconds
    );
    let mut rows = Vec::new();
    for (n, (path, _)) in files.iter().enumerate() {
        let d = data_dir(&o, n, path)?;
        let bytes = warm_pages(path)?;
        let server = testkit::Server::start(&d, &["--snapshot-secs", "100000"]);
        let pid = server.child.id();
        let t = Instant::now();
        let warm = o
            .warm_lookups
            .unwrap_or(o.items.min(100_000_000))
            .min(o.items);
        warm_lookups(server.resp, o.items, warm, o.conns)?;
        eprintln!(
            "serve_file: {}: {warm} members looked up to warm, all present, {:.1} s",
            path.display(),
            t.elapsed().as_secs_f64()
        );
        let resident = resident(path)?;
        let (rb0, mf0) = disk_counters(pid);
        let (singles, p50, p99) = paced_singles(&o, server.http)?;
        let resp = resp_batches(&o, server.resp)?;
        let http = http_batches(&o, server.http)?;
        let (rb1, mf1) = disk_counters(pid);
        let row = Row {
            name: path
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into()),
            bytes,
            p50,
            p99,
            singles,
            resp,
            http,
            read_bytes: rb1.wrapping_sub(rb0),
            majflt: mf1.wrapping_sub(mf0),
            resident,
        };
        println!(
            "{}: {} bytes, {:.1} % resident after warming; singles {:.0}/s p50 {:.0} µs p99 {:.0} µs; RESP BF.MEXISTS {:.2} M/s; HTTP batch {:.2} M/s; after warming: {} bytes read from disk, {} major faults",
            row.name,
            row.bytes,
            row.resident * 100.0,
            row.singles,
            row.p50,
            row.p99,
            row.resp / 1e6,
            row.http / 1e6,
            row.read_bytes,
            row.majflt
        );
        rows.push(row);
        drop(server);
        let _ = std::fs::remove_dir_all(&d);
    }
    println!("\n| file | bytes | single p50 µs | single p99 µs | RESP MEXISTS M/s | HTTP batch M/s | disk reads after warm-up |");
    println!("|---|---:|---:|---:|---:|---:|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {} bytes, {} major faults |",
            r.name,
            r.bytes,
            r.p50,
            r.p99,
            r.resp / 1e6,
            r.http / 1e6,
            r.read_bytes,
            r.majflt
        );
    }
    Ok(())
}
