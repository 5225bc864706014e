//! `bloomgate build --layout ribbon`: a static filter solved from all its
//! entries, in bounded memory and disk.
//!
//! Every entry is read, canonicalized and hashed exactly once. The first
//! and only pass over the inputs writes each key hash (the engine's 64-bit
//! ribbon key hash, `bloomgate_engine::ribbon::key_hash`) to one of 256
//! *partition* files by its top 8 bits, about 5.25 bytes each (the
//! partition module: blocks of hashes grouped by their next 16 bits), in a
//! temporary directory beside the output (or in `--tmp-dir`). Then the
//! partitions are read back in groups of consecutive partitions, as many
//! keys at a time as `--memory` allows. In a group each partition (or, when
//! a shard spans several, each shard's partitions) is read and its file
//! removed as soon as its hashes are in memory, grouped by shard (the top
//! bits of the key hash again, so a partition holds whole shards, or a
//! shard whole partitions) with a counting sort, and its shards solved —
//! partitions and shards alike on all cores, while the next group's files
//! are read ahead into the page cache and a writer thread streams the
//! previous group's solutions into the output's temporary file through the
//! engine's `RibbonWriter`. The build prints where the time went (thread
//! seconds of reading, grouping, solving and writing).
//!
//! Disk: the partition files shrink as the output grows, so the peak is
//! `max(P(n), O(n))` for `n` keys (duplicates included), `P(n) ≈ 5.25·n`
//! bytes of partition files and `O(n)` the output (1.72 bytes per key at
//! 1e-4): 52.5 GB for 10¹⁰ keys at 1e-4, then the 17.2 GB file. With
//! `--tmp-dir` on another filesystem each needs its own. The build checks
//! this before it reads anything when `--items` says how many keys to
//! expect, and again every 64 MiB of partition files (projected from the
//! share of the inputs read), and stops with the need and the free space
//! named rather than run out of disk hours in (`Room`).
//!
//! The output depends on the keys, the seed and the rate only: a shard's
//! solution is a function of its set of keys, and the shard count of the
//! number of valid entries read. `--memory` changes how many partitions are
//! in memory at once and the thread count how many shards are solved at
//! once, never a byte of the file (test `ribbon_build_same_bytes_any_memory`).
//! A failed or interrupted build removes the partition files and the
//! output's temporary; the output appears only by its final rename.
//!
//! # Room for adds, and folding them in
//!
//! The solution is planned for `--fp × (1 − --delta-share)` (default
//! 1/32 kept back), so that keys added later (`bloomgate add`, `BF.ADD`)
//! have a delta whose rate and the solution's stay within `--fp`
//! together (`bloomgate_engine::math`, "Room for adds"). `--fold FILE`
//! reads the keys added to FILE since its build (`FILE.delta`, already
//! normalized) into the partitions beside the inputs' keys, each counted
//! as one key read, so the output is byte for byte the build whose inputs
//! held those entries (test `fold_equals_a_build_with_the_added_entries`).
//! When FILE is the output, the folded keys are taken off `FILE.delta`
//! after the new file is renamed into place (keys added meanwhile stay):
//! a crash between the two leaves keys that both the file and its delta
//! hold, never a key that neither does.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rayon::prelude::*;

use bloomgate_blacklist::delta::{delta_path, DeltaKeys};
use bloomgate_blacklist::per_lookup_rate;
use bloomgate_engine::math::{plan_ribbon, RIBBON_DELTA_SHARE};
use bloomgate_engine::random_seed;
use bloomgate_engine::ribbon::{
    group_by_shard, key_hash, shard_of, RibbonSpec, RibbonWriter, SolvedShard,
};
use bloomgate_url::{entry_key, KeyKind, MatchMode};

use crate::args::BuildArgs;
use crate::cmd::partition::{self, PartitionWriter, PARTITIONS, PARTITION_BITS};
use crate::cmd::spill::{free_space, same_filesystem};
use crate::cmd::UsageError;
use crate::input::{self, Progress};
use crate::report::{self, bytes, thousands};

/// Bytes of memory per key while a group of partitions is solved: the key
/// hash as read and grouped by shard (a partition or two per core at a
/// time, the whole group at worst) and the solutions waiting to be written.
const BYTES_PER_KEY: u64 = 16;
/// Memory the build needs besides the keys in memory (input chunks in
/// flight, the shards being solved, buffers).
const FIXED_BYTES: u64 = 256 << 20;

/// The temporary directory of partition files, removed when dropped
/// (after success, an error or an interrupt alike).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the pass over the inputs found.
#[derive(Default)]
struct Read1 {
    lines: u64,
    keys: u64,
    invalid: u64,
    per_partition: Vec<u64>,
}

pub fn build(a: BuildArgs) -> Result<i32> {
    let started = Instant::now();
    let kind: KeyKind = a.keys.keys.into();
    let mode: MatchMode = a.keys.match_mode.into();
    let p = &a.policy;
    if p.policy.is_some() || p.generations.is_some() || p.window.is_some() {
        return Err(UsageError(
            "--policy and its settings apply to Bloom filters; a ribbon filter is static".into(),
        )
        .into());
    }
    if a.spill.is_some() {
        return Err(UsageError(
            "--spill applies to sliced Bloom builds; a ribbon build partitions its key hashes in --tmp-dir".into(),
        )
        .into());
    }
    if !a.force && Path::new(&a.output).exists() {
        return Err(UsageError(format!(
            "{}: already exists (use --force to overwrite)",
            a.output
        ))
        .into());
    }
    let per_lookup = per_lookup_rate(kind, mode, a.size.fp);
    let mut spec = RibbonSpec::new(per_lookup, a.seed.unwrap_or_else(random_seed));
    spec.key_kind = kind.as_u8();
    spec.match_mode = mode.as_u8();
    spec.reserve = a.delta_share.unwrap_or(RIBBON_DELTA_SHARE);
    // Refuse a rate the layout cannot plan before reading anything.
    spec.header(1).map_err(|e| UsageError(e.to_string()))?;
    let folds = read_folds(&a.fold, (kind, mode))?;
    let output_delta = delta_path(Path::new(&a.output));
    if output_delta.exists() && !folds.iter().any(|f| same_path(&f.delta, &output_delta)) {
        eprintln!(
            "bloomgate: warning: {} holds keys added to {}; not folded (--fold {}), they stay beside the new file and are answered with it",
            output_delta.display(),
            a.output,
            a.output
        );
    }
    let memory = match a.memory {
        Some(m) => m,
        None => bloomgate_engine::mem_available().map_or(4 << 30, |m| m / 10 * 6),
    };
    let out_dir = Path::new(&a.output)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let base = a.tmp_dir.clone().unwrap_or_else(|| out_dir.to_path_buf());
    let tmp = TempDir(base.join(format!(
        ".bloomgate-ribbon-{}-{:x}",
        std::process::id(),
        random_seed() as u32
    )));
    let mut room = Room {
        tmp: base.clone(),
        out_dir: out_dir.to_path_buf(),
        same: same_filesystem(&base, out_dir),
        planned: a.size.items,
        total: input::total_size(&a.inputs),
        progress: Progress::default(),
        rate: spec.solution_fp(),
        next: 0,
    };
    if let Some(n) = a.size.items {
        // Refuse a build the disk cannot hold before reading anything.
        room.fits(n, 0)?;
    }
    std::fs::create_dir(&tmp.0).with_context(|| format!("{}: cannot create", tmp.0.display()))?;
    let read = partition_inputs(&a, (kind, mode), spec.seed, &folds, &tmp.0, &mut room)?;
    if read.keys == 0 && !a.allow_useless {
        bail!(
            "{}: not written: no valid {kind} entry in {} lines ({} invalid): the filter would be empty (--allow-useless writes it anyway)",
            a.output,
            thousands(read.lines),
            thousands(read.invalid)
        );
    }
    let read_secs = started.elapsed().as_secs_f64();
    let header = spec.header(read.keys)?;
    let writer = RibbonWriter::create(Path::new(&a.output), header.clone())?;
    let groups = plan_groups(&read.per_partition, header.shard_bits(), memory);
    let solving = Instant::now();
    let (retried, writer) =
        solve_groups(&spec, &header, &groups, &read.per_partition, &tmp.0, writer)?;
    drop(tmp);
    let header = writer.finish()?;
    let secs = started.elapsed().as_secs_f64();
    let filter = bloomgate_engine::Ribbon::open(&a.output)?;
    for f in &folds {
        let here = same_path(&f.delta, &output_delta);
        let kept = match here {
            true => bloomgate_blacklist::delta::trim(&f.delta, f.keys.bytes())
                .with_context(|| format!("{} is built; its delta was kept whole", a.output))?,
            false => 0,
        };
        eprintln!(
            "bloomgate: folded {} added key(s) of {}{}",
            thousands(f.keys.len()),
            f.delta.display(),
            match (here, kept) {
                (false, _) => String::new(),
                (true, 0) => "; it is removed".into(),
                (true, n) => format!(
                    "; {} key(s) added during the build stay in it",
                    thousands(n)
                ),
            }
        );
    }
    eprintln!(
        "built {}: {}, {} distinct keys ({} repeated), {} invalid, {} ({:.2} bits per key), {secs:.2} s ({read_secs:.1} s reading, {:.1} s solving {} in {}), {} lines/s, {}{}",
        a.output,
        report::count(read.lines, "line", "lines"),
        thousands(header.items),
        thousands(read.keys - header.items),
        thousands(read.invalid),
        bytes(filter.file_len()),
        filter.bits_per_item(),
        solving.elapsed().as_secs_f64(),
        report::count(header.shards, "shard", "shards"),
        report::count(groups.len() as u64, "group", "groups"),
        thousands((read.lines as f64 / secs.max(1e-9)) as u64),
        report::rates(kind, mode, filter.predicted_fp(), per_lookup),
        if retried > 0 {
            format!("; {retried} shards solved at a second seed or later")
        } else {
            String::new()
        }
    );
    eprintln!(
        "bloomgate: peak memory {} (budget {})",
        report::peak_rss().map_or_else(|| "unknown".into(), bytes),
        bytes(memory)
    );
    Ok(0)
}

/// Solves the shards of every group of partitions and streams them into
/// `writer` in shard order; returns the shards solved at a later attempt
/// and the writer, for [`RibbonWriter::finish`].
///
/// Within a group, each *unit* (one partition holding whole shards, or
/// the partitions of one shard when shards span several) is read,
/// removed from disk, grouped by shard (a counting sort) and its shards
/// solved, units and shards alike on all cores. While a group is solved,
/// the next group's partition files are read ahead into the page cache,
/// and a writer thread writes the previous group's solutions, so neither
/// the disk nor the writing leaves a core idle.
fn solve_groups(
    spec: &RibbonSpec,
    header: &bloomgate_engine::ribbon::RibbonHeader,
    groups: &[std::ops::Range<usize>],
    per_partition: &[u64],
    dir: &Path,
    mut writer: RibbonWriter,
) -> Result<(u64, RibbonWriter)> {
    let bits = header.shard_bits();
    let unit = 1usize << PARTITION_BITS.saturating_sub(bits);
    let shards_per_unit = 1usize << bits.saturating_sub(PARTITION_BITS);
    let solving = Instant::now();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<SolvedShard>>(1);
    let times = PhaseTimes::default();
    let result = std::thread::scope(|scope| -> Result<(u64, RibbonWriter)> {
        let times = &times;
        let written = scope.spawn(move || -> Result<RibbonWriter> {
            for group in rx {
                let started = Instant::now();
                for s in group {
                    writer.push(s)?;
                }
                times.add(3, started.elapsed());
            }
            Ok(writer)
        });
        let mut retried = 0u64;
        let mut outcome = Ok(());
        for (gi, group) in groups.iter().enumerate() {
            if input::interrupted() {
                outcome = Err(anyhow::anyhow!("interrupted"));
                break;
            }
            if let Some(next) = groups.get(gi + 1).cloned() {
                let dir = dir.to_path_buf();
                std::thread::spawn(move || next.for_each(|p| partition::will_need(&dir, p)));
            }
            let units: Vec<usize> = group.clone().step_by(unit).collect();
            let solved: Result<Vec<Vec<SolvedShard>>> = units
                .into_par_iter()
                .map(|u| -> Result<Vec<SolvedShard>> {
                    let started = Instant::now();
                    let want: u64 = per_partition[u..u + unit].iter().sum();
                    let mut raw = Vec::with_capacity(want as usize);
                    for (p, &count) in per_partition.iter().enumerate().skip(u).take(unit) {
                        partition::read(dir, p, count, &mut raw)?;
                        // Its keys are in memory now: the disk it took is the output's.
                        let path = partition::path(dir, p);
                        std::fs::remove_file(&path)
                            .with_context(|| format!("{}: cannot remove", path.display()))?;
                    }
                    let read_at = Instant::now();
                    let first = shard_of((u as u64) << (64 - PARTITION_BITS), bits);
                    let (keys, cuts) = group_by_shard(&raw, bits, first, shards_per_unit);
                    drop(raw);
                    times.add(0, read_at - started);
                    times.add(1, read_at.elapsed());
                    (0..shards_per_unit)
                        .into_par_iter()
                        .map(|i| -> Result<SolvedShard> {
                            let started = Instant::now();
                            let solved = spec.solve(header, &keys[cuts[i]..cuts[i + 1]]);
                            times.add(2, started.elapsed());
                            Ok(solved?)
                        })
                        .collect()
                })
                .collect();
            let solved: Vec<SolvedShard> = match solved {
                Ok(s) => s.into_iter().flatten().collect(),
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            };
            retried += solved.iter().filter(|s| s.entry.attempt > 0).count() as u64;
            if tx.send(solved).is_err() {
                break; // the writer failed: its error is below
            }
            if groups.len() > 1 {
                eprintln!(
                    "bloomgate: solved partitions {}..{} ({}/{}), shards up to {}, {:.1} s",
                    group.start,
                    group.end,
                    gi + 1,
                    groups.len(),
                    thousands(((group.end / unit) * shards_per_unit) as u64),
                    solving.elapsed().as_secs_f64()
                );
            }
        }
        drop(tx);
        let writer = written.join().expect("the writer thread does not panic")?;
        outcome?;
        Ok((retried, writer))
    });
    let keys: u64 = per_partition.iter().sum();
    let t = |i: usize| times.0[i].load(std::sync::atomic::Ordering::Relaxed) as f64;
    let result = result?;
    eprintln!(
        "bloomgate: solving took {:.1} s: thread time {:.1} s reading partitions, {:.1} s grouping by shard, {:.1} s solving shards ({:.0} ns per key), {:.1} s writing",
        solving.elapsed().as_secs_f64(),
        t(0) / 1e9,
        t(1) / 1e9,
        t(2) / 1e9,
        t(2) / keys.max(1) as f64,
        t(3) / 1e9,
    );
    Ok(result)
}

/// Thread time of the solving phase's parts, in nanoseconds: reading
/// partitions, grouping by shard, solving shards, writing.
#[derive(Default)]
struct PhaseTimes([std::sync::atomic::AtomicU64; 4]);

impl PhaseTimes {
    fn add(&self, part: usize, d: std::time::Duration) {
        self.0[part].fetch_add(d.as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The added keys of a file named by `--fold`.
struct Fold {
    delta: PathBuf,
    keys: DeltaKeys,
}

/// Reads the delta of every `--fold` file: checked whole, of the build's
/// key rules (its keys are normalized by them). A file without a delta
/// has nothing to fold, which is said.
fn read_folds(files: &[String], (kind, mode): (KeyKind, MatchMode)) -> Result<Vec<Fold>> {
    let mut out: Vec<Fold> = Vec::new();
    for f in files {
        let delta = delta_path(Path::new(f));
        let Some(keys) = DeltaKeys::read(&delta)? else {
            eprintln!(
                "bloomgate: {f} has no added keys ({} does not exist): nothing to fold",
                delta.display()
            );
            continue;
        };
        keys.check_rules(&delta, kind.as_u8(), mode.as_u8())
            .map_err(|e| {
                UsageError(format!(
                    "--fold {f}: {e} (this build makes {kind} keys with {mode} matching)"
                ))
            })?;
        if out.iter().any(|o| same_path(&o.delta, &delta)) {
            continue;
        }
        out.push(Fold { delta, keys });
    }
    Ok(out)
}

/// Whether two paths name one file (compared as given when either does
/// not exist).
fn same_path(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Reads every input once: canonical keys, hashed, into the partition
/// files, then the folded keys. Invalid entries are reported as `build`
/// reports them.
fn partition_inputs(
    a: &BuildArgs,
    (kind, mode): (KeyKind, MatchMode),
    seed: u64,
    folds: &[Fold],
    dir: &Path,
    room: &mut Room,
) -> Result<Read1> {
    let mut parts_out = PartitionWriter::create(dir)?;
    let mut read = Read1 {
        per_partition: vec![0; PARTITIONS],
        ..Read1::default()
    };
    let progress = room.progress.clone();
    let bar = report::progress_bar(room.total, &progress, None);
    // Thread time of the workers (generated inputs are filled in by the
    // workers before this, so it leaves out generating them).
    let worked = std::sync::atomic::AtomicU64::new(0);
    let names = a.inputs.clone();
    let mut invalid = report::Invalid::new(kind, a.strict);
    let result = input::process(
        a.inputs.clone(),
        progress,
        |chunk| {
            let started = Instant::now();
            let mut parts: Vec<Vec<u64>> = vec![Vec::new(); PARTITIONS];
            let (mut lines, mut invalid) = (0u64, Vec::new());
            chunk.for_each_line(|line_no, line| {
                lines += 1;
                let line = match line {
                    Ok(l) => l,
                    Err(reason) => return invalid.push((line_no, reason)),
                };
                match entry_key(kind, mode, line) {
                    Ok(k) => {
                        let g = key_hash(seed, &k);
                        parts[partition::partition_of(g)].push(g);
                    }
                    Err(e) => invalid.push((line_no, e.to_string())),
                }
            });
            worked.fetch_add(
                started.elapsed().as_nanos() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
            (lines, invalid, parts)
        },
        |chunk, (lines, mut bad, parts)| {
            read.lines += lines;
            invalid.chunk(&names[chunk.input], &mut bad)?;
            for (p, hashes) in parts.iter().enumerate() {
                read.keys += hashes.len() as u64;
                parts_out.extend(p, hashes)?;
            }
            room.check(read.keys, parts_out.bytes)
        },
    );
    report::finish(bar);
    result?;
    for f in folds {
        let mut parts: Vec<Vec<u64>> = vec![Vec::new(); PARTITIONS];
        for key in f.keys.iter() {
            let g = key_hash(seed, key);
            parts[partition::partition_of(g)].push(g);
        }
        for (p, hashes) in parts.iter().enumerate() {
            read.keys += hashes.len() as u64;
            parts_out.extend(p, hashes)?;
        }
        room.check(read.keys, parts_out.bytes)?;
    }
    read.per_partition = parts_out.finish()?;
    read.invalid = invalid.count();
    invalid.finish();
    let work = |ns: &std::sync::atomic::AtomicU64| {
        ns.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e9
    };
    eprintln!(
        "bloomgate: first pass: thread time {:.1} s reading, canonicalizing and hashing entries, {:.1} s encoding partition blocks, {:.1} s writing them ({:.2} bytes per key)",
        work(&worked),
        parts_out.encoding.as_secs_f64(),
        parts_out.writing.as_secs_f64(),
        parts_out.bytes as f64 / read.keys.max(1) as f64
    );
    Ok(read)
}

/// The disk a build needs, checked before it starts (when `--items`
/// says how many keys to expect) and as the partition files grow
/// (projected from the share of the inputs read).
///
/// At its peak a build holds all its partition files (just before the
/// first group is read back; each file is removed once its keys are in
/// memory, and a key takes more bytes there than in the output) or the
/// whole output (at the end), so for `n` keys it needs
/// `max(P(n), O(n))` on one filesystem, where `P(n) ≈ 5.25·n` bytes is
/// [`partition::disk_bytes`] and `O(n)` the planned output
/// (`plan_ribbon`, plus 1 % for shards solved with more room); with
/// `--tmp-dir` on another filesystem, `P(n)` there and `O(n)` beside
/// the output.
struct Room {
    tmp: PathBuf,
    out_dir: PathBuf,
    same: bool,
    planned: Option<u64>,
    total: Option<u64>,
    progress: Progress,
    rate: f64,
    /// Partition bytes at which to look again.
    next: u64,
}

impl Room {
    /// Bytes of the output for `keys` keys, with room for retried shards.
    fn output_bytes(&self, keys: u64) -> u64 {
        plan_ribbon(keys.max(1), self.rate).map_or(0, |p| p.bytes + p.bytes / 100 + (1 << 20))
    }

    /// Fails unless the filesystems have room for a build of `keys` keys
    /// whose partition files already take `written` bytes.
    fn fits(&self, keys: u64, written: u64) -> Result<()> {
        let (p, o) = (partition::disk_bytes(keys), self.output_bytes(keys));
        let needs = if self.same {
            vec![(
                &self.tmp,
                p.max(o),
                format!(
                    "{} of partition files ({:.2} bytes per key) and then the {} output",
                    bytes(p),
                    p as f64 / keys.max(1) as f64,
                    bytes(o)
                ),
            )]
        } else {
            vec![
                (
                    &self.tmp,
                    p,
                    format!(
                        "{} of partition files ({:.2} bytes per key)",
                        bytes(p),
                        p as f64 / keys.max(1) as f64
                    ),
                ),
                (&self.out_dir, o, format!("the {} output", bytes(o))),
            ]
        };
        for (i, (dir, need, what)) in needs.into_iter().enumerate() {
            let more = if i == 0 {
                need.saturating_sub(written)
            } else {
                need
            };
            let Some(free) = free_space(dir) else {
                continue;
            };
            if free < more {
                bail!(
                    "not enough disk for a ribbon build of {}{} keys: {} needs {} more at its peak ({what}), {} free; free some space or put the partition files elsewhere with --tmp-dir",
                    if self.planned.is_some() { "" } else { "about " },
                    thousands(keys),
                    dir.display(),
                    bytes(more),
                    bytes(free),
                );
            }
        }
        Ok(())
    }

    /// Checks the room again every 64 MiB of partition files, for the
    /// keys expected in all: `--items`, or those read so far scaled to
    /// the whole input when its size is known.
    fn check(&mut self, keys: u64, written: u64) -> Result<()> {
        if written < self.next {
            return Ok(());
        }
        self.next = written + (64 << 20);
        let done = self.progress.load(std::sync::atomic::Ordering::Relaxed);
        let projected = match (self.planned, self.total) {
            (Some(n), _) => n.max(keys),
            (None, Some(total)) if done > 0 => {
                ((keys as f64) * (total as f64 / done as f64)) as u64
            }
            _ => keys,
        };
        self.fits(projected.max(keys), written)
    }
}

/// Consecutive runs of partitions to solve together: whole shards each
/// (a shard of fewer hash bits than a partition spans several), as many
/// keys as `memory` allows (at least one unit).
fn plan_groups(per_partition: &[u64], shard_bits: u32, memory: u64) -> Vec<std::ops::Range<usize>> {
    let unit = 1usize << PARTITION_BITS.saturating_sub(shard_bits);
    let room = memory.saturating_sub(FIXED_BYTES).max(1 << 20) / BYTES_PER_KEY;
    let mut groups = Vec::new();
    let mut start = 0;
    let mut keys = 0u64;
    for u in (0..PARTITIONS).step_by(unit) {
        let n: u64 = per_partition[u..u + unit].iter().sum();
        if u > start && keys + n > room {
            groups.push(start..u);
            start = u;
            keys = 0;
        }
        keys += n;
    }
    groups.push(start..PARTITIONS);
    groups
}

/// True if `path` is a ribbon filter file.
pub fn is_ribbon(path: &str) -> bool {
    bloomgate_engine::format::peek_layout_code(Path::new(path)).ok()
        == Some(bloomgate_engine::format::LAYOUT_RIBBON)
}

/// What one input chunk of an add holds: its keys back to back, and each
/// key's line (for `--print-new`).
struct AddChunk {
    arena: Vec<u8>,
    ends: Vec<usize>,
    lines: Vec<(usize, usize)>,
    invalid: Vec<(u64, String)>,
}

/// `bloomgate add` to a ribbon file: the entries go into its delta through
/// the library's `List` ([`bloomgate_list::List::add_keys`]): each input
/// chunk is one synced append to `FILE.delta`, so what was added when the
/// command stops (an error, Ctrl-C, `kill -9`) is durable; `--print-new`
/// prints each entry that was new (neither the solution nor the delta
/// held it).
pub fn add(a: crate::args::AddArgs) -> Result<i32> {
    use bloomgate_list::{Claim, OpenOptions};
    use std::io::Write;
    let started = Instant::now();
    let options = OpenOptions {
        update: true,
        ..OpenOptions::default()
    };
    let mut list = crate::cmd::open_list(&a.filter, &options)?;
    list.changeable().map_err(crate::cmd::list_error)?;
    crate::cmd::check_kind(&a.filter, (list.kind(), list.mode()), a.keys, None)?;
    let (kind, mode) = (list.kind(), list.mode());
    let names = a.inputs.clone();
    let progress = Progress::default();
    let bar = report::progress_bar(input::total_size(&a.inputs), &progress, None);
    let (mut lines, mut new, mut present) = (0u64, 0u64, 0u64);
    let mut invalid = report::Invalid::new(kind, a.strict);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = input::process(
        a.inputs.clone(),
        progress,
        |chunk| {
            let mut c = AddChunk {
                arena: Vec::with_capacity(chunk.data.len()),
                ends: Vec::new(),
                lines: Vec::new(),
                invalid: Vec::new(),
            };
            let base = chunk.data.as_ptr() as usize;
            chunk.for_each_line(|line_no, line| match line {
                Ok(l) => match entry_key(kind, mode, l) {
                    Ok(k) => {
                        c.arena.extend_from_slice(&k);
                        c.ends.push(c.arena.len());
                        let at = l.as_ptr() as usize - base;
                        c.lines.push((at, at + l.len()));
                    }
                    Err(e) => c.invalid.push((line_no, e.to_string())),
                },
                Err(reason) => c.invalid.push((line_no, reason)),
            });
            c
        },
        |chunk, mut c| {
            lines += (c.ends.len() + c.invalid.len()) as u64;
            invalid.chunk(&names[chunk.input], &mut c.invalid)?;
            let mut keys = Vec::with_capacity(c.ends.len());
            let mut start = 0;
            for &end in &c.ends {
                keys.push(&c.arena[start..end]);
                start = end;
            }
            let claims = list.add_keys(&keys);
            for (claim, &(from, to)) in claims.outcomes.iter().zip(&c.lines) {
                match claim {
                    Claim::New => {
                        new += 1;
                        if a.print_new {
                            out.write_all(&chunk.data[from..to])?;
                            out.write_all(b"\n")?;
                        }
                    }
                    Claim::Present => present += 1,
                    Claim::Unknown | Claim::NotAdded => {}
                }
            }
            if chunk.paused {
                out.flush()?;
            }
            match claims.error {
                Some(e) => Err(crate::cmd::list_error(e)),
                None => Ok(()),
            }
        },
    );
    report::finish(bar);
    out.flush()?;
    result.with_context(|| {
        format!(
            "adding to {}: {} new entries were added before the failure, and are durable",
            a.filter,
            thousands(new)
        )
    })?;
    invalid.finish();
    let invalid = invalid.count();
    let v = list.info().map_err(crate::cmd::list_error)?.json;
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "added to {} (its delta {}): {}, {}, {} already present, {} invalid; {} keys added since the build, {} in the delta ({}), {secs:.2} s, {}",
        a.filter,
        v["delta"]["path"].as_str().unwrap_or(""),
        report::count(lines, "line", "lines"),
        report::count(new, "new item", "new items"),
        thousands(present),
        thousands(invalid),
        thousands(v["delta"]["added_keys"].as_u64().unwrap_or(0)),
        thousands(v["delta"]["items"].as_u64().unwrap_or(0)),
        bytes(v["delta"]["bytes"].as_u64().unwrap_or(0)),
        report::rates(kind, mode, f("predicted_fp"), f("target_fp")),
    );
    Ok(0)
}

/// Refuses `what` (a union) on a static ribbon file with a usage
/// error that says why; any other file passes.
pub fn refuse_static(path: &str, what: &str) -> Result<()> {
    let code = bloomgate_engine::format::peek_layout_code(Path::new(path)).ok();
    if code == Some(bloomgate_engine::format::LAYOUT_RIBBON) {
        return Err(UsageError(format!(
            "{path}: a ribbon filter is static: it is solved once from all its entries and cannot take {what}; rebuild it from its source with `bloomgate build --layout ribbon`"
        ))
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_cover_all_partitions_in_whole_shards() {
        let per = vec![1000u64; PARTITIONS];
        for bits in [0, 3, 8, 12] {
            for memory in [0, 300 << 20, 1 << 40] {
                let g = plan_groups(&per, bits, memory);
                assert_eq!(g.first().unwrap().start, 0);
                assert_eq!(g.last().unwrap().end, PARTITIONS);
                let unit = 1 << PARTITION_BITS.saturating_sub(bits);
                for w in g.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                    assert_eq!(w[0].end % unit, 0);
                }
            }
        }
    }
}
