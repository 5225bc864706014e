//! `bloomgate build --layout ribbon`: a static filter solved from all its
//! entries, in bounded memory and disk.
//!
//! Every entry is read, canonicalized and hashed exactly once. The first
//! and only pass over the inputs writes each key hash (the engine's 64-bit
//! ribbon key hash, `bloomgate_engine::ribbon::key_hash`) to one of 256
//! *partition* files by its top 8 bits, 7 bytes each (the top byte is the
//! partition's), in a temporary directory beside the output (or in
//! `--tmp-dir`). Then the partitions are read back in order, as many at a
//! time as `--memory` allows, sorted, cut into the filter's shards (the
//! top bits of the key hash again, so a partition holds whole shards, or a
//! shard whole partitions), solved on all cores and streamed into the
//! output's temporary file by the engine's `RibbonWriter`.
//!
//! The output depends on the keys, the seed and the rate only: a shard's
//! solution is a function of its set of keys, and the shard count of the
//! number of valid entries read. `--memory` changes how many partitions are
//! in memory at once and the thread count how many shards are solved at
//! once, never a byte of the file (test `ribbon_build_same_bytes_any_memory`).
//! A failed or interrupted build removes the partition files and the
//! output's temporary; the output appears only by its final rename.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rayon::prelude::*;

use bloomgate_blacklist::per_lookup_rate;
use bloomgate_engine::random_seed;
use bloomgate_engine::ribbon::{key_hash, shard_of, RibbonSpec, RibbonWriter, SolvedShard};
use bloomgate_url::{entry_key, KeyKind, MatchMode};

use crate::args::BuildArgs;
use crate::cmd::UsageError;
use crate::input::{self, Progress};
use crate::report::{self, bytes, thousands};

/// Bits of key hash that choose a partition file.
const PARTITION_BITS: u32 = 8;
const PARTITIONS: usize = 1 << PARTITION_BITS;
/// Bytes a key hash takes in a partition file.
const RECORD: usize = 7;
/// Bytes of memory per key while a group of partitions is solved: the key
/// hash, the shard's copy while it is solved and its rows and band (a
/// fraction of the group at a time).
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
    shown: u64,
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
    // Refuse a rate the layout cannot plan before reading anything.
    spec.header(1).map_err(|e| UsageError(e.to_string()))?;
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
    std::fs::create_dir(&tmp.0).with_context(|| format!("{}: cannot create", tmp.0.display()))?;
    let read = partition_inputs(&a, (kind, mode), spec.seed, &tmp.0)?;
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
    let bits = header.shard_bits();
    let mut writer = RibbonWriter::create(Path::new(&a.output), header.clone())?;
    let groups = plan_groups(&read.per_partition, bits, memory);
    let solving = Instant::now();
    let mut retried = 0u64;
    for (gi, group) in groups.iter().enumerate() {
        if input::interrupted() {
            bail!("interrupted");
        }
        let mut keys =
            Vec::with_capacity(group.clone().map(|p| read.per_partition[p] as usize).sum());
        for p in group.clone() {
            read_partition(&tmp.0, p, &mut keys)?;
        }
        keys.par_sort_unstable();
        let first_shard = writer.shards_done();
        let last_shard = match group.end {
            end if end == PARTITIONS => 1u64 << bits,
            end => shard_of((end as u64) << (64 - PARTITION_BITS), bits),
        };
        let mut cuts = Vec::new();
        let mut at = 0usize;
        for s in first_shard..last_shard {
            cuts.push(at);
            at += keys[at..].partition_point(|&g| shard_of(g, bits) == s);
        }
        cuts.push(keys.len());
        let solved: Vec<Result<SolvedShard>> = (0..(last_shard - first_shard) as usize)
            .into_par_iter()
            .map(|i| {
                let mut shard = keys[cuts[i]..cuts[i + 1]].to_vec();
                Ok(spec.solve(&header, &mut shard)?)
            })
            .collect();
        drop(keys);
        for s in solved {
            let s = s?;
            retried += (s.entry.attempt > 0) as u64;
            writer.push(s)?;
        }
        if groups.len() > 1 {
            eprintln!(
                "bloomgate: solved partitions {}..{} ({}/{}), shards up to {}, {:.1} s",
                group.start,
                group.end,
                gi + 1,
                groups.len(),
                thousands(last_shard),
                solving.elapsed().as_secs_f64()
            );
        }
    }
    drop(tmp);
    let header = writer.finish()?;
    let secs = started.elapsed().as_secs_f64();
    let filter = bloomgate_engine::Ribbon::open(&a.output)?;
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

/// Reads every input once: canonical keys, hashed, into the partition
/// files. Invalid entries are reported as `build` reports them.
fn partition_inputs(
    a: &BuildArgs,
    (kind, mode): (KeyKind, MatchMode),
    seed: u64,
    dir: &Path,
) -> Result<Read1> {
    let mut files = Vec::with_capacity(PARTITIONS);
    for p in 0..PARTITIONS {
        let path = partition_path(dir, p);
        let f =
            File::create(&path).with_context(|| format!("{}: cannot create", path.display()))?;
        files.push(BufWriter::with_capacity(64 << 10, f));
    }
    let mut read = Read1 {
        per_partition: vec![0; PARTITIONS],
        ..Read1::default()
    };
    let progress = Progress::default();
    let bar = report::progress_bar(input::total_size(&a.inputs), &progress, None);
    let names = a.inputs.clone();
    let result = input::process(
        a.inputs.clone(),
        progress,
        |chunk| {
            let mut parts: Vec<Vec<u8>> = vec![Vec::new(); PARTITIONS];
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
                        let p = (g >> (64 - PARTITION_BITS)) as usize;
                        parts[p].extend_from_slice(&g.to_le_bytes()[..RECORD]);
                    }
                    Err(e) => invalid.push((line_no, e.to_string())),
                }
            });
            (lines, invalid, parts)
        },
        |chunk, (lines, invalid, parts)| {
            read.lines += lines;
            for (line, reason) in invalid {
                read.invalid += 1;
                let msg = format!(
                    "{}:{line}: invalid {kind} entry: {reason}",
                    names[chunk.input]
                );
                if a.strict {
                    bail!("{msg} (stopping at the first invalid entry: --strict)");
                }
                if read.shown < 10 {
                    eprintln!("bloomgate: {msg}");
                    read.shown += 1;
                }
            }
            for (p, bytes) in parts.iter().enumerate() {
                let n = (bytes.len() / RECORD) as u64;
                read.per_partition[p] += n;
                read.keys += n;
                files[p]
                    .write_all(bytes)
                    .with_context(|| format!("{}: cannot write", dir.display()))?;
            }
            Ok(())
        },
    );
    report::finish(bar);
    result?;
    for f in files {
        f.into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("{}: cannot write", dir.display()))?;
    }
    if read.invalid > read.shown {
        eprintln!(
            "bloomgate: ... and {} more invalid entries ({} in all, skipped)",
            thousands(read.invalid - read.shown),
            thousands(read.invalid)
        );
    }
    Ok(read)
}

fn partition_path(dir: &Path, p: usize) -> PathBuf {
    dir.join(format!("part-{p:03}"))
}

/// Appends partition `p`'s key hashes to `keys`.
fn read_partition(dir: &Path, p: usize, keys: &mut Vec<u64>) -> Result<()> {
    let path = partition_path(dir, p);
    let mut r = BufReader::with_capacity(
        1 << 20,
        File::open(&path).with_context(|| format!("{}: cannot open", path.display()))?,
    );
    let top = (p as u64) << (64 - PARTITION_BITS);
    let mut buf = vec![0u8; RECORD * 8192];
    loop {
        let n = input::read_full(&mut r, &mut buf)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        if n % RECORD != 0 {
            bail!("{}: damaged partition file", path.display());
        }
        for rec in buf[..n].chunks_exact(RECORD) {
            let mut b = [0u8; 8];
            b[..RECORD].copy_from_slice(rec);
            keys.push(top | u64::from_le_bytes(b));
        }
        if n < buf.len() {
            return Ok(());
        }
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

/// Refuses `what` (an add, a union) on a static ribbon file with a usage
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
