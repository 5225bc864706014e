//! Counting and cuckoo filters from the command line: `build --layout
//! counting|cuckoo`, and `add`, `remove`, `check` and `info` on their files.
//!
//! # Why beside the Bloom path, not inside it
//!
//! A Bloom filter file goes through [`bloomgate_blacklist::Blacklist`]: a
//! chain of layers with growth rules, updated in place (bits are only ever
//! set, so a half-finished update loses nothing and is resealed), with the
//! live adds of a served data directory replayed into it. A deletable filter
//! (`bloomgate_engine::deletable`) differs in the two ways that matter here:
//!
//! * **It is never changed in place.** A delete clears what an insert set
//!   and a cuckoo insert moves fingerprints between buckets, so a crash in
//!   the middle of an in-place write could lose an item stored long before.
//!   The file is mapped copy-on-write, changed in this process's memory,
//!   and written whole by the engine's `save` (temporary file, fsync,
//!   rename, fsync of the directory). An `add` or `remove` that fails, is
//!   interrupted or is killed therefore leaves the previous file, byte for
//!   byte; one that succeeds replaces it in one rename.
//! * **One file is one table.** No layers, no growth: a cuckoo filter with
//!   no room left is an error (nothing is ever evicted), a counting filter
//!   past its planned count says its false-positive rate went up.
//!
//! What they share with Bloom files is everything a user sees: entries and
//! queries become keys by the same rules (`bloomgate_url::entry_key`,
//! `query_keys`, stored key kind and match mode), the same whitelist file
//! beside the filter is consulted by the same rule
//! ([`bloomgate_blacklist::verdict_ref`]), and `check` prints the same
//! output with the same exit codes (see `cmd::check`).
//!
//! # Multisets, and the one risk of deleting
//!
//! Every entry line adds one copy: a counting filter adds one to each of the
//! item's counters, a cuckoo filter stores one more fingerprint (as
//! RedisBloom's `CF.ADD`), so an entry added twice stays present after one
//! `remove`. A delete takes back one copy's trace. Deleting an item that
//! was never added but tests present (a false positive, at the filter's
//! rate) takes away *another* item's counts or fingerprint, and that item
//! may then test absent: a false negative. Neither filter can tell, so the
//! user must guarantee it: remove only entries that were added, and as many
//! times as they were added at most (`remove --help`, README "Deleting
//! entries").

use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};

use bloomgate_blacklist::cf_file::CfLayout;
use bloomgate_blacklist::DeletableSpec;
use bloomgate_engine::format::{peek_layout_code, DeletableKind};
use bloomgate_engine::{random_seed, DeletableTable, Removal, Table as _};
use bloomgate_list::{List, OpenOptions, TablePlan};
use bloomgate_url::{entry_key, is_single_label_host, KeyKind, MatchMode};

use crate::args::{BuildArgs, KeysArg};
use crate::cmd::UsageError;
use crate::input::{self, Progress};
use crate::keynotes;
use crate::report::{self, bytes, thousands};

/// How many absent entries of a remove are named before only counting.
const SHOW: usize = 10;

/// How many single-label host entries are named before only counting.
const SHOW_SINGLE_LABEL: usize = 5;

/// The deletable kind of the filter file at `path`; `None` for a Bloom
/// filter, and for anything that cannot be read as a filter (the Bloom path
/// then reports why, as it always has).
pub fn kind_of(path: &str) -> Option<DeletableKind> {
    peek_layout_code(Path::new(path))
        .ok()
        .and_then(DeletableKind::from_code)
}

/// What is done to each entry.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Add one copy.
    Add,
    /// Remove one copy.
    Remove,
}

/// What one pass of adds or removes did.
#[derive(Default)]
pub struct Tally {
    /// Non-empty input lines read.
    pub lines: u64,
    /// Lines that are not valid entries of the key kind (skipped).
    pub invalid: u64,
    /// Add: copies added. Remove: copies removed.
    pub done: u64,
    /// Add: of those, entries that tested present already (a repeat, or a
    /// false positive): one more copy each.
    /// Remove: entries not present (nothing changed).
    pub other: u64,
    /// Remove: the first few entries that were not present (`file:line`).
    pub absent_at: Vec<String>,
    single_label: u64,
    single_label_at: Vec<String>,
}

/// Where an add found a cuckoo filter full: the entry that found no room
/// (it and every later one were not added; every earlier one was).
pub struct Full {
    /// `input:line` of the entry.
    pub at: String,
    /// Evictions tried before giving up (all undone by the engine).
    pub kicks: u32,
}

/// The keys of one input chunk, made on a worker: back to back in `arena`,
/// with their line numbers.
struct ChunkKeys {
    arena: Vec<u8>,
    ends: Vec<usize>,
    lines: Vec<u64>,
    invalid: Vec<(u64, String)>,
    single_label: Vec<u64>,
}

/// Applies `op` to every entry of `inputs`, in input order: the lines are
/// turned into keys on every core, and the keys go into the filter one at a
/// time in the order of the input, so that "the first N entries were added"
/// is exact when a cuckoo filter fills up (`full` then says where).
///
/// Returns what was done and how the pass ended; on an error the filter
/// holds the changes made before it, and the caller decides whether to save.
pub fn apply(
    list: &mut List,
    inputs: &[String],
    strict: bool,
    op: Op,
    full: &mut Option<Full>,
) -> (Tally, Result<()>) {
    let mut t = Tally::default();
    let (kind, mode) = (list.kind(), list.mode());
    let names = inputs.to_vec();
    let progress = Progress::default();
    let bar = report::progress_bar(input::total_size(inputs), &progress, None);
    let mut invalid = report::Invalid::new(kind, strict);
    let result = input::process(
        inputs.to_vec(),
        progress,
        |chunk| {
            let mut out = ChunkKeys {
                arena: Vec::with_capacity(chunk.data.len()),
                ends: Vec::new(),
                lines: Vec::new(),
                invalid: Vec::new(),
                single_label: Vec::new(),
            };
            chunk.for_each_line(|line_no, line| {
                match line.map(|l| entry_key(kind, mode, l).map_err(|e| e.to_string())) {
                    Ok(Ok(k)) => {
                        if kind == KeyKind::Host && is_single_label_host(&k) {
                            out.single_label.push(line_no);
                        }
                        out.arena.extend_from_slice(&k);
                        out.ends.push(out.arena.len());
                        out.lines.push(line_no);
                    }
                    Ok(Err(reason)) | Err(reason) => out.invalid.push((line_no, reason)),
                }
            });
            out
        },
        |chunk, mut out| {
            let name = &names[chunk.input];
            // Lines are counted as they are dealt with: an add that stops
            // at a full table has not read the rest of the chunk.
            t.lines += out.invalid.len() as u64;
            let reported = invalid.chunk(name, &mut out.invalid);
            t.invalid = invalid.count();
            reported?;
            t.single_label += out.single_label.len() as u64;
            for line in out.single_label {
                if t.single_label_at.len() < SHOW_SINGLE_LABEL {
                    t.single_label_at.push(format!("{name}:{line}"));
                }
            }
            let mut start = 0;
            for (&end, &line) in out.ends.iter().zip(&out.lines) {
                let key = &out.arena[start..end];
                start = end;
                t.lines += 1;
                match op {
                    Op::Add => match list.add_key(key) {
                        Ok(new) => {
                            t.done += 1;
                            t.other += !new as u64;
                        }
                        Err(e) => {
                            if let bloomgate_list::Error::Full { kicks } = e {
                                *full = Some(Full {
                                    at: format!("{name}:{line}"),
                                    kicks,
                                });
                            }
                            return Err(e.into());
                        }
                    },
                    Op::Remove => match list.remove_key(key)? {
                        Removal::Removed => t.done += 1,
                        Removal::NotPresent => {
                            t.other += 1;
                            if t.absent_at.len() < SHOW {
                                t.absent_at.push(format!(
                                    "{name}:{line} ({})",
                                    String::from_utf8_lossy(key)
                                ));
                            }
                        }
                    },
                }
            }
            Ok(())
        },
    );
    report::finish(bar);
    invalid.finish();
    if let Some(w) = keynotes::single_label_warning(t.single_label, &t.single_label_at) {
        eprintln!("bloomgate: {w}");
    }
    (t, result)
}

/// Holds `FILE.lock` (created beside the filter, removed when done) while
/// an `add` or `remove` changes `FILE`, or a `build --force` replaces it.
/// Each reads the file, changes it in memory and replaces it whole, so two
/// at once would each save without the other's changes: entries one of
/// them reported added would be lost (false negatives). A second one waits
/// for the first, then reads what that one saved.
fn lock_file(path: &str) -> Result<crate::lockfile::Lock> {
    let lock = format!("{path}.lock");
    let msg = format!("waiting for another bloomgate that is changing {path} ({lock} is held)");
    crate::lockfile::lock(Path::new(&lock), crate::lockfile::Busy::Wait(&msg))
}

/// `bloomgate add` or `bloomgate remove` on a counting or cuckoo filter
/// file: the changes are made in memory and the file is replaced whole,
/// atomically, at the end.
///
/// * Success: saved.
/// * A cuckoo filter that fills up during an add: the entries before the
///   one that found no room are saved (no entry is evicted by a full
///   table, so nothing stored before is lost), and the error says how many
///   and where it stopped.
/// * Any other failure (an I/O error, `--strict`, Ctrl-C): nothing is
///   saved; the file is as it was.
pub fn edit(
    path: &str,
    inputs: &[String],
    keys: Option<KeysArg>,
    strict: bool,
    op: Op,
) -> Result<i32> {
    let started = Instant::now();
    let verb = match op {
        Op::Add => "added to",
        Op::Remove => "removed from",
    };
    // Refused before anything is locked or changed: a Bloom file or a
    // filter in Redis cannot delete.
    if op == Op::Remove {
        List::open(path)
            .and_then(|list| list.removable())
            .map_err(crate::cmd::list_error)?;
    }
    let _file_lock = lock_file(path)?;
    // Opened for update: in a data directory under its lock (refused while
    // a server runs there: the change would be lost to, or lose, the
    // server's state, as `add` is for Bloom files).
    let update = OpenOptions {
        update: true,
        ..OpenOptions::default()
    };
    let mut list = crate::cmd::open_list(path, &update)?;
    crate::cmd::check_kind(path, (list.kind(), list.mode()), keys, None)?;
    // The file is rewritten whole with a fresh checksum: check the data it
    // holds first, or damage would be sealed in as if it were valid.
    list.verify()
        .with_context(|| format!("refusing to change {path}: its data is damaged"))?;
    let mut full = None;
    let (t, result) = apply(&mut list, inputs, strict, op, &mut full);
    match (result, full) {
        (Ok(()), _) => {
            list.save()?;
            summary(verb, op, path, &list, &t, started);
            Ok(0)
        }
        (Err(_), Some(full)) => {
            list.save()?;
            summary(verb, op, path, &list, &t, started);
            bail!(
                "{path}: the cuckoo filter is full: the entry at {} found no room after {} evictions (all undone); the {} entries before it were added and saved, it and the rest were not. Nothing stored was lost. Build a larger filter (bloomgate build --layout cuckoo --items …) for more",
                full.at,
                full.kicks,
                thousands(t.done)
            )
        }
        (Err(e), None) => Err(anyhow!(
            "{}; nothing was saved: {path} is unchanged",
            report::one_line(&e)
        )),
    }
}

/// The last line of `build`, `add` and `remove`: what was done and what the
/// filter holds now.
fn summary(verb: &str, op: Op, path: &str, list: &List, t: &Tally, started: Instant) {
    let Some(filter) = list.table() else {
        return;
    };
    let secs = started.elapsed().as_secs_f64();
    let what = match op {
        Op::Add if t.other > 0 => format!(
            "{} added ({} of them tested present already, a repeat or a false positive: stored once more)",
            thousands(t.done),
            thousands(t.other)
        ),
        Op::Add => format!("{} added", thousands(t.done)),
        Op::Remove => format!(
            "{} removed, {} not present",
            thousands(t.done),
            thousands(t.other)
        ),
    };
    let load = match filter {
        DeletableTable::Cuckoo(f) => format!(", load {:.1} %", f.load() * 100.0),
        _ => String::new(),
    };
    eprintln!(
        "{verb} {path}: {} lines, {what}, {} invalid; {} items in the {} filter ({} planned{load}), {}, {secs:.2} s, {} lines/s, predicted FP {:.3e} per lookup (target {:.3e})",
        thousands(t.lines),
        thousands(t.invalid),
        thousands(filter.items()),
        filter.kind(),
        thousands(filter.planned()),
        bytes(filter.bytes()),
        thousands((t.lines as f64 / secs.max(1e-9)) as u64),
        filter.predicted_fp(),
        filter.target_fp(),
    );
    if op == Op::Remove && t.other > 0 {
        eprintln!(
            "bloomgate: not present (nothing changed): {}{}",
            t.absent_at.join(", "),
            if t.other > t.absent_at.len() as u64 {
                ", …"
            } else {
                ""
            }
        );
    }
    if matches!(filter, DeletableTable::Counting(_)) && filter.items() > filter.planned() {
        eprintln!(
            "bloomgate: warning: {} items exceed the planned {}; the predicted false-positive rate is now {:.3e} per lookup instead of {:.3e}",
            thousands(filter.items()),
            thousands(filter.planned()),
            filter.predicted_fp(),
            filter.target_fp()
        );
    }
}

/// Refuses a filter larger than the memory it may take: counting and cuckoo
/// filters are built whole in memory (the Bloom layouts' build in slices
/// has no counterpart for them).
fn check_memory(layout: &str, need: u64, memory: Option<u64>) -> Result<()> {
    let hint = "counting and cuckoo filters are built whole in memory (only the Bloom layouts, blocked and classic, are built in slices)";
    match memory {
        Some(m) if need > m => Err(UsageError(format!(
            "the {layout} filter needs {} but --memory allows {}: {hint}; raise --memory, or plan for fewer items or a higher rate",
            bytes(need),
            bytes(m)
        ))
        .into()),
        Some(_) => Ok(()),
        None => match bloomgate_engine::mem_available() {
            Some(avail) if need > avail / 10 * 6 => bail!(
                "the {layout} filter needs {} but only {} may be used (60 % of the {} available): {hint}; pass --memory to allow more",
                bytes(need),
                bytes(avail / 10 * 6),
                bytes(avail)
            ),
            _ => Ok(()),
        },
    }
}

/// `bloomgate build --layout counting|cuckoo`: plans the filter, inserts
/// every entry in memory, and writes the file atomically at the end
/// (nothing is left at the output path on any failure).
pub fn build(a: BuildArgs, which: DeletableKind) -> Result<i32> {
    let started = Instant::now();
    let layout = which.name();
    let kind: KeyKind = a.keys.keys.into();
    let mode: MatchMode = a.keys.match_mode.into();
    let p = &a.policy;
    if p.policy.is_some()
        || p.generations.is_some()
        || p.window.is_some()
        || p.window_secs.is_some()
        || p.clear_at.is_some()
    {
        return Err(UsageError(format!(
            "--policy and its settings apply to Bloom filters; a {layout} filter is one fixed table"
        ))
        .into());
    }
    if a.spill.is_some() {
        return Err(UsageError(format!(
            "--spill applies to Bloom filters built in slices; a {layout} filter is built in memory"
        ))
        .into());
    }
    if !a.force && Path::new(&a.output).exists() {
        return Err(UsageError(format!(
            "{}: already exists (use --force to overwrite, or `bloomgate add` to add to it)",
            a.output
        ))
        .into());
    }
    let items = match a.size.items {
        Some(n) => n,
        None => crate::cmd::count_entries(&a.inputs)?,
    };
    // Replacing a file an `add` or `remove` may be changing: wait for it.
    let _file_lock = match Path::new(&a.output).exists() {
        true => Some(lock_file(&a.output)?),
        false => None,
    };
    let spec = DeletableSpec::for_build(CfLayout::of(which), items, a.size.fp, kind, mode);
    let seed = a.seed.unwrap_or_else(random_seed);
    let plan = TablePlan::new(&spec, seed).map_err(|e| UsageError(e.to_string()))?;
    check_memory(layout, plan.bytes(), a.memory)?;
    let filter = plan.create()?;
    let mut list = List::from_table(filter, &a.output)?;
    let mut full = None;
    let (t, result) = apply(&mut list, &a.inputs, a.strict, Op::Add, &mut full);
    match (result, full) {
        (Ok(()), _) => {
            list.save()?;
            summary("built", Op::Add, &a.output, &list, &t, started);
            Ok(0)
        }
        (Err(_), Some(full)) => bail!(
            "the cuckoo filter planned for {} entries is full after {} (the entry at {} found no room after {} evictions): the inputs hold more entries than --items; nothing was written to {}",
            thousands(items),
            thousands(t.done),
            full.at,
            full.kicks,
            a.output
        ),
        (Err(e), None) => Err(anyhow!(
            "{}; nothing was written to {}",
            report::one_line(&e),
            a.output
        )),
    }
}
