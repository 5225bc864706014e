//! `bloomgate build` and `bloomgate add`: entries in, bits set, on every core.

use std::borrow::Cow;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use bloomgate_blacklist::{per_lookup_rate, Blacklist};
use bloomgate_engine::{math, random_seed, Access, Filter, Params};
use bloomgate_url::{KeyKind, MatchMode};

use crate::args::{AddArgs, BuildArgs};
use crate::input::{self, Progress};
use crate::report::{self, bytes, thousands};

/// How many invalid entries are shown before only counting.
const SHOW_INVALID: usize = 10;

/// What inserting the lines of all inputs did.
#[derive(Default)]
struct Stats {
    lines: u64,
    new: u64,
    invalid: u64,
    shown: usize,
    first_invalid: Option<String>,
}

struct ChunkOut {
    lines: u64,
    new: u64,
    invalid: Vec<(u64, String)>,
    /// The filter refused the write (only in-place updates can fail).
    failed: Option<String>,
}

/// How the entries are written into the filter.
#[derive(Clone, Copy, PartialEq)]
enum WriteMode {
    /// A new filter: batches from all cores at once.
    Build,
    /// An in-place update: through the engine's page log, so that only the
    /// checksum pages that change are rehashed at the end.
    Update,
}

/// Inserts every line of `inputs` into `list`, reporting invalid entries on stderr.
fn insert_inputs(
    list: &Blacklist,
    inputs: &[String],
    strict: bool,
    write: WriteMode,
) -> Result<Stats> {
    let progress = Progress::default();
    let bar = report::progress_bar(input::total_size(inputs), &progress);
    let mut stats = Stats::default();
    let names = inputs.to_vec();
    let result = input::process(
        inputs.to_vec(),
        progress,
        |chunk| {
            let mut keys: Vec<Cow<[u8]>> = Vec::with_capacity(chunk.data.len() / 32);
            let mut out = ChunkOut {
                lines: 0,
                new: 0,
                invalid: Vec::new(),
                failed: None,
            };
            chunk.for_each_line(|line_no, line| {
                out.lines += 1;
                match line.map(|l| list.entry_key(l).map_err(|e| e.to_string())) {
                    Ok(Ok(k)) => keys.push(k),
                    Ok(Err(reason)) | Err(reason) => out.invalid.push((line_no, reason)),
                }
            });
            match write {
                WriteMode::Build => out.new = list.filter().insert_batch(&keys),
                WriteMode::Update => match list.filter().update_batch(&keys) {
                    Ok(new) => out.new = new,
                    Err(e) => out.failed = Some(e.to_string()),
                },
            }
            out
        },
        |chunk, out| {
            if let Some(e) = out.failed {
                bail!("{}: {e}", names[chunk.input]);
            }
            stats.lines += out.lines;
            stats.new += out.new;
            let mut invalid = out.invalid;
            invalid.sort_by_key(|(l, _)| *l);
            for (line, reason) in invalid {
                stats.invalid += 1;
                let msg = format!(
                    "{}:{line}: invalid {} entry: {reason}",
                    names[chunk.input],
                    list.kind()
                );
                if strict {
                    stats.first_invalid = Some(msg);
                    bail!("stopping at the first invalid entry (--strict)");
                }
                if stats.shown < SHOW_INVALID {
                    eprintln!("bloomgate: {msg}");
                    stats.shown += 1;
                }
            }
            Ok(())
        },
    );
    report::finish(bar);
    if let Some(msg) = &stats.first_invalid {
        bail!("{msg}");
    }
    result?;
    if stats.invalid > stats.shown as u64 {
        eprintln!(
            "bloomgate: ... and {} more invalid entries ({} in all, skipped)",
            thousands(stats.invalid - stats.shown as u64),
            thousands(stats.invalid)
        );
    }
    Ok(stats)
}

fn summary(verb: &str, path: &str, list: &Blacklist, stats: &Stats, started: Instant) {
    let f = list.filter();
    let secs = started.elapsed().as_secs_f64();
    let p = f.params();
    eprintln!(
        "{verb} {path}: {} lines, {} new items ({} in filter), {} invalid, {}, {secs:.2} s, {} lines/s, predicted FP {:.3e} per lookup (target {:.3e})",
        thousands(stats.lines),
        thousands(stats.new),
        thousands(f.items()),
        thousands(stats.invalid),
        bytes(p.bits / 8),
        thousands((stats.lines as f64 / secs.max(1e-9)) as u64),
        f.predicted_fp(),
        p.target_fp,
    );
    if f.items() > p.planned_items {
        eprintln!(
            "bloomgate: warning: {} items exceed the planned {}; the predicted false-positive rate is now {:.3e} per lookup instead of {:.3e}",
            thousands(f.items()),
            thousands(p.planned_items),
            f.predicted_fp(),
            p.target_fp
        );
    }
}

pub fn build(a: BuildArgs) -> Result<i32> {
    let started = Instant::now();
    let kind: KeyKind = a.keys.keys.into();
    let mode: MatchMode = a.keys.match_mode.into();
    if !a.force && std::path::Path::new(&a.output).exists() {
        return Err(crate::cmd::UsageError(format!(
            "{}: already exists (use --force to overwrite, or `bloomgate add` to add to it)",
            a.output
        ))
        .into());
    }
    let per_lookup = per_lookup_rate(kind, mode, a.size.fp);
    let plan = math::plan(a.layout.into(), a.size.items, per_lookup)
        .map_err(|e| crate::cmd::UsageError(e.to_string()))?;
    let mut params = Params::from_plan(&plan, a.seed.unwrap_or_else(random_seed));
    params.key_kind = kind.as_u8();
    params.match_mode = mode.as_u8();
    // The engine's error already names the (temporary) file and the failure.
    let filter = Filter::create_file(&a.output, params)?;
    let list = Blacklist::from_filter(filter)?;
    let stats = insert_inputs(&list, &a.inputs, a.strict, WriteMode::Build)?;
    let mut filter = list.into_filter();
    filter.persist()?;
    let list = Blacklist::from_filter(filter)?;
    summary("built", &a.output, &list, &stats, started);
    Ok(0)
}

pub fn add(a: AddArgs) -> Result<i32> {
    let started = Instant::now();
    let mut list = Blacklist::open(&a.filter, Access::ReadWrite)?;
    crate::cmd::check_kind(&a.filter, &list, a.keys, None)?;
    list.filter_mut().begin_update()?;
    let result = insert_inputs(&list, &a.inputs, a.strict, WriteMode::Update);
    // Reseal the file whatever happened: bits already set stay set (never a
    // false negative), and the checksum must describe them.
    list.filter_mut().commit_update()?;
    let stats = result.context("some entries before the failure may have been added")?;
    summary("added to", &a.filter, &list, &stats, started);
    Ok(0)
}
