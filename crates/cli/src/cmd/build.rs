//! `bloomgate build` and `bloomgate add`: entries in, bits set, on every core.

use std::borrow::Cow;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use std::sync::Arc;

use bloomgate_blacklist::layers::Growth;
use bloomgate_blacklist::{per_lookup_rate, Blacklist};
use bloomgate_engine::{math, random_seed, Filter, Params};
use bloomgate_url::{entry_key, KeyKind, MatchMode};

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
    /// Normalized keys left for the sequential writer ([`Sink::Growing`]).
    keys: Vec<Vec<u8>>,
}

/// How the entries are written into the filter.
enum Sink<'a> {
    /// A new filter: batches from all cores at once.
    Build(Arc<Filter>),
    /// An in-place update of a fixed filter: batches from all cores through
    /// the engine's page log, so that only the checksum pages that change
    /// are rehashed at the end.
    Update(Arc<Filter>),
    /// An in-place update of a scaling filter: in input order, one key at
    /// a time, by its growth rules (new layers appear as needed).
    Growing(&'a mut Blacklist),
}

/// Inserts every line of `inputs` into the filter through `sink`, reporting
/// invalid entries on stderr.
fn insert_inputs(
    (kind, mode): (KeyKind, MatchMode),
    inputs: &[String],
    strict: bool,
    sink: Sink<'_>,
) -> Result<Stats> {
    let (parallel, mut growing) = match sink {
        Sink::Build(f) => (Some((f, false)), None),
        Sink::Update(f) => (Some((f, true)), None),
        Sink::Growing(list) => (None, Some(list)),
    };
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
                keys: Vec::new(),
            };
            chunk.for_each_line(|line_no, line| {
                out.lines += 1;
                match line.map(|l| entry_key(kind, mode, l).map_err(|e| e.to_string())) {
                    Ok(Ok(k)) => keys.push(k),
                    Ok(Err(reason)) | Err(reason) => out.invalid.push((line_no, reason)),
                }
            });
            match &parallel {
                Some((f, false)) => out.new = f.insert_batch(&keys),
                Some((f, true)) => match f.update_batch(&keys) {
                    Ok(new) => out.new = new,
                    Err(e) => out.failed = Some(e.to_string()),
                },
                None => out.keys = keys.into_iter().map(Cow::into_owned).collect(),
            }
            out
        },
        |chunk, mut out| {
            if let Some(list) = growing.as_deref_mut() {
                match list.update_keys(&out.keys, false) {
                    Ok(new) => out.new = new,
                    Err(e) => out.failed = Some(e.to_string()),
                }
            }
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
                    "{}:{line}: invalid {kind} entry: {reason}",
                    names[chunk.input],
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
    let layers = list.layers();
    let secs = started.elapsed().as_secs_f64();
    let target = layers.target_fp();
    let (items, planned, predicted) = (layers.items(), layers.capacity(), layers.predicted_fp());
    eprintln!(
        "{verb} {path}: {} lines, {} new items ({} in filter{}), {} invalid, {}, {secs:.2} s, {} lines/s, predicted FP {:.3e} per lookup (target {:.3e})",
        thousands(stats.lines),
        thousands(stats.new),
        thousands(items),
        match layers.layers.len() {
            1 => String::new(),
            n => format!(", {n} layers"),
        },
        thousands(stats.invalid),
        bytes(layers.bytes()),
        thousands((stats.lines as f64 / secs.max(1e-9)) as u64),
        predicted,
        target,
    );
    if layers.growth == Growth::Fixed && items > planned {
        eprintln!(
            "bloomgate: warning: {} items exceed the planned {}; the predicted false-positive rate is now {:.3e} per lookup instead of {:.3e}",
            thousands(items),
            thousands(planned),
            predicted,
            target
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
    let filter = Arc::new(Filter::create_file(&a.output, params)?);
    let stats = insert_inputs(
        (kind, mode),
        &a.inputs,
        a.strict,
        Sink::Build(filter.clone()),
    )?;
    let mut filter = Arc::into_inner(filter).expect("the inserting threads are done");
    filter.persist()?;
    let list = Blacklist::from_filter(filter)?;
    summary("built", &a.output, &list, &stats, started);
    Ok(0)
}

pub fn add(a: AddArgs) -> Result<i32> {
    let started = Instant::now();
    // All layers, writable; in a data directory also its lock (refused
    // while a server runs there) and the live adds its files lack.
    let mut list = Blacklist::open_for_update(&a.filter)?;
    crate::cmd::report_opened(&a.filter, &list, false);
    crate::cmd::check_kind(&a.filter, &list, a.keys, None)?;
    let rules = (list.kind(), list.mode());
    let result = if list.layers().growth == Growth::Fixed {
        let layer = list.layers().layers[0].clone();
        insert_inputs(rules, &a.inputs, a.strict, Sink::Update(layer))
    } else {
        insert_inputs(rules, &a.inputs, a.strict, Sink::Growing(&mut list))
    };
    // Reseal the files whatever happened: bits already set stay set (never
    // a false negative), and the checksums must describe them.
    list.commit()?;
    let stats = result.context("some entries before the failure may have been added")?;
    summary("added to", &a.filter, &list, &stats, started);
    Ok(0)
}
