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
//! target/release/scale --items 1e10 --memory 12G --layout ribbon --dir /work/scale
//! ```
//!
//! `scale --help` lists the options (`--keep`, `--reuse` and `--skip` let a
//! long run be split over several sittings). It prints one table row per
//! phase: wall time and peak resident memory of the phase (VmHWM, reset
//! before each phase through `/proc/self/clear_refs`).
//!
//! The URLs are `bloomgate_bench::urls`: positives and negatives disjoint,
//! every URL distinct, 20–64 bytes after the scheme.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bloomgate_bench::cpu_model;
use bloomgate_bench::urls::{url, Urls};
use bloomgate_cli::args::{Cli, Command};
use bloomgate_cli::input::register_generated;
use clap::Parser;

/// Options of the run.
#[derive(Parser)]
#[command(about = "Build, verify and check a filter of N synthetic URLs in bounded memory")]
struct Opts {
    /// Distinct URLs inserted (1e10 for the real run).
    #[arg(long, value_parser = count)]
    items: u64,
    /// Memory budget of the build and the checks.
    #[arg(long, default_value = "12G")]
    memory: String,
    /// Target false-positive rate.
    #[arg(long, default_value_t = 1e-4)]
    fp: f64,
    /// Never-inserted URLs checked for the false-positive rate (default: a
    /// tenth of --items, at least 10⁶).
    #[arg(long, value_parser = count)]
    negatives: Option<u64>,
    /// Filter layout: blocked, classic or ribbon.
    #[arg(long, default_value = "blocked")]
    layout: String,
    /// The filter's hash seed (default: random).
    #[arg(long)]
    seed: Option<String>,
    /// Directory of the filter file.
    #[arg(long, default_value = "scale-run")]
    dir: PathBuf,
    /// Keep the filter file afterwards (default: delete it).
    #[arg(long)]
    keep: bool,
    /// Check the filter a previous run kept instead of building it again.
    #[arg(long)]
    reuse: bool,
    /// Phases to leave out: verify, positives, negatives (comma-separated).
    #[arg(long, value_delimiter = ',')]
    skip: Vec<Phase>,
    /// Only measure the URL generator.
    #[arg(long)]
    generator_only: bool,
}

/// A phase that `--skip` can leave out.
#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum Phase {
    Verify,
    Positives,
    Negatives,
}

/// A count written as an integer or in exponent form (`1e10`).
fn count(s: &str) -> Result<u64, String> {
    let v: f64 = s.parse().map_err(|_| format!("not a number: {s:?}"))?;
    if v < 0.0 || v.fract() != 0.0 || v > 1e18 {
        return Err(format!("not a count: {s:?}"));
    }
    Ok(v as u64)
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
    let o = Opts::parse();
    let (items, fp, memory, layout, dir) = (o.items, o.fp, &o.memory, &o.layout, &o.dir);
    let negatives = o.negatives.unwrap_or((items / 10).max(1_000_000));
    std::fs::create_dir_all(dir)?;
    let filter = dir.join(format!("scale-{layout}.bgf"));
    // --reuse: the filter a previous run built (and kept) is checked again
    // without rebuilding it.
    let reuse = o.reuse && filter.exists();
    if !reuse {
        let _ = std::fs::remove_file(&filter);
    }
    let f = filter.to_string_lossy().into_owned();
    register_generated("generated:positives", Arc::new(Urls::new(b'p', items)));
    register_generated("generated:negatives", Arc::new(Urls::new(b'n', negatives)));

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
    if o.generator_only {
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
        layout,
        "--memory",
        memory,
        "-o",
        &f,
    ]
    .map(String::from)
    .to_vec();
    build.extend(["-p".into(), fp.to_string()]);
    if let Some(seed) = &o.seed {
        build.extend(["--seed".into(), seed.clone()]);
    }
    build.push("generated:positives".into());
    if reuse {
        println!("--reuse: {f} exists, not rebuilt");
    } else {
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
    }
    let size = std::fs::metadata(&filter)?.len();

    if !o.skip.contains(&Phase::Verify) {
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
    }
    let (predicted, k) = if layout == "ribbon" {
        // A static ribbon file: its rate from its shards' result bits
        // (no probes: k is shown as 0).
        let r = bloomgate_engine::Ribbon::open(&f)?;
        println!(
            "ribbon: {:.3} bits per item, {} shards ({} solved at a later seed)",
            r.bits_per_item(),
            r.header().shards,
            r.retried_shards()
        );
        (r.predicted_fp(), 0)
    } else {
        let list = bloomgate_blacklist::Blacklist::open(&f, bloomgate_engine::Access::ReadOnly)?;
        let k = list.layers().layers[0].params().k;
        (list.layers().predicted_fp(), k)
    };

    let check = |input: &str| -> anyhow::Result<(u64, f64, String)> {
        let argv = [
            "bloomgate",
            "check",
            "--count",
            "--memory",
            memory,
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
    let mut false_negatives = None;
    if !o.skip.contains(&Phase::Positives) {
        let (hits, secs, peak) = check("generated:positives")?;
        let missed = items - hits.min(items);
        false_negatives = Some(missed);
        rows.push((
            "check all positives",
            secs,
            peak,
            format!("{hits} hits, {missed} false negatives"),
        ));
    }
    if !o.skip.contains(&Phase::Negatives) {
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
    }

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
        false_negatives.map_or("not checked".into(), |n| (n == 0).to_string())
    );
    if !o.keep {
        let _ = std::fs::remove_file(&filter);
    }
    assert!(false_negatives.unwrap_or(0) == 0, "false negatives");
    Ok(())
}
