//! The ten-billion run: build, verify and check a filter of `--items`
//! distinct synthetic URLs, in bounded memory, with the `bloomgate` commands'
//! own code.
//!
//! 10¹⁰ URLs are 640 GB of text, which fits on no disk here, so the URLs are
//! generated in-process, deterministically, by the workers that consume
//! them: the harness registers two generated inputs
//! (`bloomgate_cli::input::register_generated`) and runs `bloomgate build
//! --keys url --memory …` and `bloomgate check --count --memory …` through
//! `bloomgate_cli::cmd`, exactly as the binary does after parsing its
//! arguments. Canonicalization, the sliced builder and the sliced check are
//! therefore the code users run; only the bytes come from a generator
//! instead of a file reader.
//!
//! ```text
//! cargo build --release -p bloomgate-bench --bin scale
//! target/release/scale --items 1e8 --memory 120M --dir /tmp/scale        # rehearsal, minutes
//! target/release/scale --items 1e10 --memory 12G --dir /work/scale       # the real run
//! target/release/scale --items 1e10 --memory 12G --layout classic --dir /work/scale
//! ```
//!
//! Options: `--fp` (1e-4), `--negatives` (a tenth of `--items`, at least
//! 10⁶), `--layout` (blocked), `--seed`, `--keep` (keep the filter file). It
//! prints one table row per phase: wall time, lines per second over all
//! passes, peak resident memory of the phase (VmHWM, reset before each
//! phase through `/proc/self/clear_refs`).
//!
//! Positives and negatives are disjoint by construction, and every URL is
//! distinct: a URL's host is `[www.]` + `p` (positive) or `n` (negative) +
//! its number in base 32 + `.` + a TLD, so two URLs share a host only if
//! they share marker and number. The rest (scheme, `www.`, TLD, path depth
//! and length) varies with a hash of the number, giving 20–64 bytes after
//! the scheme.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bloomgate_bench::{cpu_model, mix64, num_arg};
use bloomgate_cli::args::{Cli, Command};
use bloomgate_cli::input::{register_generated, Generate};
use clap::Parser;

/// Top-level domains with their dot, padded to eight bytes, and their
/// length.
const TLDS: [(&[u8; 8], usize); 8] = [
    (b".com\0\0\0\0", 4),
    (b".net\0\0\0\0", 4),
    (b".org\0\0\0\0", 4),
    (b".io\0\0\0\0\0", 3),
    (b".de\0\0\0\0\0", 3),
    (b".co.uk\0\0", 6),
    (b".info\0\0\0", 5),
    (b".ru\0\0\0\0\0", 3),
];
/// 32 URL characters (lowercase letters, digits 2–7): 5 bits of a hash each.
const CHARS: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// Eight URL characters (from [`CHARS`]) from the low five bits of each
/// byte of `r`, computed in all eight bytes at once.
#[inline(always)]
fn chars8(r: u64) -> [u8; 8] {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let v = r & (31 * ONES);
    // A byte's top bit is set iff its value is ≥ 26 (no carries: v ≤ 31).
    let high = ((v + (128 - 26) * ONES) >> 7) & ONES;
    // 0..25 → 'a'..'z'; 26..31 → '2'..'7', i.e. 73 below 'a' + v (no
    // borrows: 'a' + v ≥ 123 where it is taken).
    (v + u64::from(b'a') * ONES - 73 * high).to_le_bytes()
}

/// Appends URL number `i` of the stream `marker` (`p` or `n`) and a newline.
#[inline]
fn url(out: &mut Vec<u8>, marker: u8, i: u64) {
    // Written in place with fixed-size stores (no variable-length copies):
    // the longest URL is "https://" + 64 + "\n", and the last path segment
    // may be written up to 9 bytes past the end before it is cut off.
    let at = out.len();
    out.resize(at + 96, 0);
    let n = write_url(
        (&mut out[at..at + 96]).try_into().expect("96 bytes"),
        marker,
        i,
    );
    out.truncate(at + n);
}

/// Writes URL number `i` and a newline at the start of `buf`; returns its
/// length.
#[inline(always)]
fn write_url(buf: &mut [u8; 96], marker: u8, i: u64) -> usize {
    let h = mix64(i ^ (u64::from(marker) << 56));
    let https = (h & 1) as usize;
    buf[..8].copy_from_slice(if https == 1 {
        b"https://"
    } else {
        b"http://\0"
    });
    let start = 7 + https;
    buf[start..start + 4].copy_from_slice(b"www.");
    let mut n = start + if h >> 1 & 3 == 0 { 4 } else { 0 };
    buf[n] = marker;
    n += 1;
    // `i` in base 32, most significant digit first, no leading zeros: one
    // spelling per number, so distinct numbers give distinct hosts.
    let digits = (64 - (i | 1).leading_zeros()).div_ceil(5) as usize;
    for d in (0..digits).rev() {
        buf[n] = CHARS[(i >> (5 * d)) as usize & 31];
        n += 1;
    }
    let (tld, len) = TLDS[(h >> 3 & 7) as usize];
    buf[n..n + 8].copy_from_slice(tld);
    n += len;
    // The path brings the URL (scheme excluded) to 20–64 bytes: segments
    // of eight letters and digits after each slash, the last one cut short.
    let end = (start + 20 + ((h >> 6) % 45) as usize).max(n + 1);
    // One more hash of the number gives every segment its characters:
    // segment j takes the low five bits of each byte of the hash rotated
    // by 3j bits (no chain of multiplications per segment).
    let r = mix64(h);
    let mut rot = 0;
    while n < end {
        buf[n] = b'/';
        buf[n + 1..n + 9].copy_from_slice(&chars8(r.rotate_right(rot)));
        rot += 3;
        n += 9;
    }
    buf[end] = b'\n';
    end + 1
}

/// URLs `0..count` of one stream.
struct Urls {
    marker: u8,
    count: u64,
}

impl Generate for Urls {
    fn lines(&self) -> u64 {
        self.count
    }

    fn fill(&self, range: Range<u64>, out: &mut Vec<u8>) {
        for i in range {
            url(out, self.marker, i);
        }
    }
}

/// Resets the peak resident set size (VmHWM) of this process.
fn reset_peak() {
    // "5" resets the peak RSS counter (Linux ≥ 4.0); harmless if refused.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn gib(bytes: Option<u64>) -> String {
    bytes.map_or("-".into(), |b| {
        format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
    })
}

/// Parses a `bloomgate` command line (program name first).
fn parse(args: &[String]) -> Command {
    match Cli::try_parse_from(args) {
        Ok(cli) => cli.command,
        Err(e) => panic!("{args:?}: {e}"),
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let items = num_arg(&args, "--items").unwrap_or(1e10) as u64;
    let fp = num_arg(&args, "--fp").unwrap_or(1e-4);
    let negatives = num_arg(&args, "--negatives")
        .map(|n| n as u64)
        .unwrap_or((items / 10).max(1_000_000));
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let memory = opt("--memory").unwrap_or_else(|| "12G".into());
    let layout = opt("--layout").unwrap_or_else(|| "blocked".into());
    let dir = PathBuf::from(opt("--dir").unwrap_or_else(|| "scale-run".into()));
    std::fs::create_dir_all(&dir)?;
    let filter = dir.join(format!("scale-{layout}.bgf"));
    let _ = std::fs::remove_file(&filter);
    let f = filter.to_string_lossy().into_owned();
    register_generated(
        "generated:positives",
        Arc::new(Urls {
            marker: b'p',
            count: items,
        }),
    );
    register_generated(
        "generated:negatives",
        Arc::new(Urls {
            marker: b'n',
            count: negatives,
        }),
    );

    // What the generator alone costs, so the phases below can be read as
    // generation + the command's own work.
    let sample = items.min(20_000_000);
    let t = Instant::now();
    let (mut buf, mut bytes) = (Vec::with_capacity(1 << 23), 0u64);
    for i in 0..sample {
        url(&mut buf, b'p', i);
        if buf.len() > (1 << 23) - 100 {
            bytes += buf.len() as u64;
            buf.clear();
        }
    }
    bytes += buf.len() as u64;
    let gen_rate = sample as f64 / t.elapsed().as_secs_f64();
    println!(
        "scale: {items} URLs, {layout}, p = {fp}, --memory {memory}, {negatives} negatives; {}, {} cores",
        cpu_model(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "generator: {:.1} M URLs/s on one core, {:.1} bytes per line (newline included)",
        gen_rate / 1e6,
        bytes as f64 / sample as f64
    );
    if args.iter().any(|a| a == "--generator-only") {
        return Ok(());
    }
    let mut rows: Vec<(&str, f64, String, String)> = Vec::new();

    let mut build: Vec<String> = [
        "bloomgate",
        "build",
        "--keys",
        "url",
        "-n",
        &items.to_string(),
        "--layout",
        &layout,
        "--memory",
        &memory,
        "-o",
        &f,
    ]
    .map(String::from)
    .to_vec();
    build.extend(["-p".into(), fp.to_string()]);
    if let Some(seed) = opt("--seed") {
        build.extend(["--seed".into(), seed]);
    }
    build.push("generated:positives".into());
    reset_peak();
    let t = Instant::now();
    let code = bloomgate_cli::cmd::run(Cli::try_parse_from(&build)?)?;
    assert_eq!(code, 0, "build failed");
    rows.push((
        "build",
        t.elapsed().as_secs_f64(),
        gib(bloomgate_cli::report::peak_rss()),
        String::new(),
    ));
    let size = std::fs::metadata(&filter)?.len();

    reset_peak();
    let t = Instant::now();
    let verify = ["bloomgate", "info", "--verify", &f].map(String::from);
    let code = bloomgate_cli::cmd::run(Cli::try_parse_from(verify)?)?;
    assert_eq!(code, 0, "info --verify failed");
    rows.push((
        "info --verify",
        t.elapsed().as_secs_f64(),
        gib(bloomgate_cli::report::peak_rss()),
        format!("{size} bytes ({:.2} GB)", size as f64 / 1e9),
    ));
    let list = bloomgate_blacklist::Blacklist::open(&f, bloomgate_engine::Access::ReadOnly)?;
    let predicted = list.layers().predicted_fp();
    let k = list.layers().layers[0].params().k;
    drop(list);

    let check = |input: &str| -> anyhow::Result<(u64, f64, String)> {
        let argv = [
            "bloomgate",
            "check",
            "--count",
            "--memory",
            &memory,
            &f,
            input,
        ]
        .map(String::from);
        let Command::Check(a) = parse(&argv) else {
            unreachable!()
        };
        reset_peak();
        let t = Instant::now();
        let mut out = Vec::new();
        let code = bloomgate_cli::cmd::check::run_to(a, &mut out)?;
        let secs = t.elapsed().as_secs_f64();
        let text = String::from_utf8(out)?;
        let hits = text
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("check printed {text:?} (exit {code})"))?;
        Ok((hits, secs, gib(bloomgate_cli::report::peak_rss())))
    };
    let (hits, secs, peak) = check("generated:positives")?;
    let false_negatives = items - hits.min(items);
    rows.push((
        "check all positives",
        secs,
        peak,
        format!("{hits} hits, {false_negatives} false negatives"),
    ));
    let (fps, secs, peak) = check("generated:negatives")?;
    let measured = fps as f64 / negatives as f64;
    rows.push((
        "check negatives",
        secs,
        peak,
        format!(
            "{fps} false positives in {negatives}: {measured:.4e} measured, {predicted:.4e} predicted ({:+.1} %)",
            (measured / predicted - 1.0) * 100.0
        ),
    ));

    println!("\n| phase | wall | peak RSS | result |");
    println!("|---|---|---|---|");
    for (phase, secs, peak, note) in &rows {
        println!(
            "| {phase} | {secs:.0} s ({:.1} min) | {peak} | {note} |",
            secs / 60.0
        );
    }
    let total: f64 = rows.iter().map(|r| r.1).sum();
    println!(
        "\nfile {size} bytes ({:.2} GB), k = {k}, total {:.1} min, zero false negatives: {}",
        size as f64 / 1e9,
        total / 60.0,
        false_negatives == 0
    );
    if !args.iter().any(|a| a == "--keep") {
        let _ = std::fs::remove_file(&filter);
    }
    assert_eq!(false_negatives, 0, "false negatives");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chars8_maps_every_value_like_the_table() {
        for v in 0..32u64 {
            let r = v * 0x0101_0101_0101_0101 ^ 0xE0E0_E0E0_E0E0_E0E0;
            assert_eq!(chars8(r), [CHARS[v as usize]; 8]);
        }
    }

    #[test]
    fn urls_are_distinct_lengths_spread_and_streams_disjoint() {
        let mut seen = std::collections::HashSet::new();
        let mut lengths = std::collections::BTreeSet::new();
        for marker in [b'p', b'n'] {
            for i in (0..200_000u64).chain([1 << 33, 1e10 as u64 - 1]) {
                let mut line = Vec::new();
                url(&mut line, marker, i);
                assert_eq!(line.pop(), Some(b'\n'));
                let rest = line.split(|&b| b == b'/').skip(2).collect::<Vec<_>>();
                let key_len = line.len() - if line.starts_with(b"https") { 8 } else { 7 };
                assert!(
                    (20..=64).contains(&key_len),
                    "{}",
                    String::from_utf8_lossy(&line)
                );
                assert!(!rest.is_empty());
                lengths.insert(key_len);
                assert!(seen.insert(line), "duplicate URL {i}");
            }
        }
        assert_eq!(lengths.len(), 45, "lengths 20..=64 all occur");
    }
}
