//! An open-loop Redis-protocol load at a fixed rate, for latency at a
//! given load (redis-benchmark has no rate limit: it measures latency at
//! the most its clients can push).
//!
//! `--connections` threads each send pipelines of `--pipeline` commands
//! `COMMAND f KEY` (keys random in 0..10⁸, written as redis-benchmark's
//! `__rand_int__`: 12 digits) on a fixed schedule that adds up to
//! `--rate` commands/s. A pipeline's latency is measured from its
//! *scheduled* start to its last reply, so a server that falls behind is
//! charged for the wait (no coordinated omission). Every reply must be an
//! integer 0/1 (an error reply fails the run).
//!
//! Prints one line: `achieved-rate p50-ms p99-ms`. With
//! `RESP_PACED_TRACE=FILE` it also writes every pipeline to `FILE`, in
//! order of schedule: a first line `# T0` (the schedule's start, µs since
//! the Unix epoch, to line it up with a server's or Redis's own logs),
//! then `START LATENCY` per pipeline (µs after `T0`, µs): where the slow
//! pipelines bunch is where the server stalled.
//!
//! ```text
//! target/release/resp_paced --port 6380 --command BF.EXISTS --rate 100000 --seconds 10
//! ```

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// The server's Redis-protocol port on 127.0.0.1.
    #[arg(long)]
    port: u16,
    /// `BF.EXISTS` or `BF.ADD`.
    #[arg(long, default_value = "BF.EXISTS")]
    command: String,
    /// The filter.
    #[arg(long, default_value = "f")]
    filter: String,
    /// Commands per second, all connections together.
    #[arg(long)]
    rate: u64,
    /// How long to send.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Connections (one thread each).
    #[arg(long, default_value_t = 10)]
    connections: u64,
    /// Commands per pipeline.
    #[arg(long, default_value_t = 16)]
    pipeline: u64,
}

fn main() -> Result<()> {
    let a = Args::parse();
    if a.rate == 0 || a.connections == 0 || a.pipeline == 0 || a.seconds == 0 {
        bail!("--rate, --connections, --pipeline and --seconds must be at least 1");
    }
    // Pipelines per second per connection, and the gap between them.
    let per_conn = a.rate as f64 / a.pipeline as f64 / a.connections as f64;
    let gap = Duration::from_secs_f64(1.0 / per_conn);
    let start = Instant::now() + Duration::from_millis(100);
    let end = start + Duration::from_secs(a.seconds);
    let workers: Vec<_> = (0..a.connections)
        .map(|c| {
            let (port, cmd, filter, pipeline) =
                (a.port, a.command.clone(), a.filter.clone(), a.pipeline);
            // Connections start spread over one gap.
            let first = start + gap.mul_f64(c as f64 / a.connections as f64);
            std::thread::spawn(move || -> Result<Vec<(Duration, Duration)>> {
                run(port, &cmd, &filter, pipeline, (start, first), gap, end, c)
            })
        })
        .collect();
    let mut timed = Vec::new();
    for w in workers {
        timed.extend(w.join().expect("a connection thread panicked")?);
    }
    if let Some(path) = std::env::var_os("RESP_PACED_TRACE") {
        timed.sort_unstable();
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_micros()
            - start.elapsed().as_micros();
        let mut out = format!("# {epoch}\n");
        for (at, l) in &timed {
            out.push_str(&format!("{} {}\n", at.as_micros(), l.as_micros()));
        }
        std::fs::write(path, out).context("writing the trace")?;
    }
    let mut lat: Vec<Duration> = timed.iter().map(|t| t.1).collect();
    if lat.is_empty() {
        bail!("no pipeline completed");
    }
    let sent = lat.len() as f64 * a.pipeline as f64;
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e3;
    println!(
        "{:.0} {:.3} {:.3}",
        sent / a.seconds as f64,
        pct(0.50),
        pct(0.99)
    );
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn run(
    port: u16,
    cmd: &str,
    filter: &str,
    pipeline: u64,
    (start, first): (Instant, Instant),
    gap: Duration,
    end: Instant,
    seed: u64,
) -> Result<Vec<(Duration, Duration)>> {
    let stream = TcpStream::connect(("127.0.0.1", port)).context("connect")?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut w = stream.try_clone()?;
    let mut r = BufReader::new(stream);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (seed + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut buf = Vec::new();
    let mut line = String::new();
    let mut lat = Vec::new();
    let mut due = first;
    while due < end {
        let now = Instant::now();
        if now < due {
            std::thread::sleep(due - now);
        }
        buf.clear();
        for _ in 0..pipeline {
            // xorshift64*
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            let key = format!(
                "{:012}",
                rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % 100_000_000
            );
            write!(
                buf,
                "*3\r\n${}\r\n{cmd}\r\n${}\r\n{filter}\r\n${}\r\n{key}\r\n",
                cmd.len(),
                filter.len(),
                key.len()
            )?;
        }
        w.write_all(&buf)?;
        for _ in 0..pipeline {
            line.clear();
            r.read_line(&mut line)?;
            if !matches!(line.as_str(), ":0\r\n" | ":1\r\n") {
                bail!("unexpected reply {line:?}");
            }
        }
        lat.push((due - start, due.elapsed()));
        due += gap;
    }
    Ok(lat)
}
