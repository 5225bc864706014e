//! `bloomgate build` and `bloomgate add`: entries in, bits set, on every core.

use std::borrow::Cow;
use std::ops::Range;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use std::sync::Arc;

use bloomgate_blacklist::layers::{FillPolicy, Purpose};
use bloomgate_blacklist::{Blacklist, FilterSpec};
use bloomgate_engine::slice::{self, Slice, SliceWriter};
use bloomgate_engine::{random_seed, Filter, Params};
use bloomgate_url::{entry_key, is_single_label_host, KeyKind, MatchMode};

use crate::args::{AddArgs, BuildArgs};
use crate::cmd::spill::{self, Spill};
use crate::input::{self, Progress};
use crate::keynotes::{self, Collapse};
use crate::report::{self, bytes, thousands};

/// What inserting the lines of all inputs did.
#[derive(Default)]
struct Stats {
    lines: u64,
    new: u64,
    invalid: u64,
    /// Host entries of a single label, and the first few of them
    /// (`file:line`).
    single_label: u64,
    single_label_at: Vec<String>,
    /// Distinct lines against distinct keys (see `keynotes`).
    collapse: Collapse,
    /// Invalid email entries that are bare domains.
    bare_domains: u64,
}

/// How many single-label host entries are named before only counting.
const SHOW_SINGLE_LABEL: usize = 5;

struct ChunkOut {
    lines: u64,
    new: u64,
    invalid: Vec<(u64, String)>,
    /// The filter refused the write (only in-place updates can fail).
    failed: Option<String>,
    /// Normalized keys left for the writer, which runs in input order
    /// (every sink but [`Sink::Update`]).
    keys: Packed,
    /// Lines of single-label host entries.
    single_label: Vec<u64>,
    /// The records of the items of spilled later slices, one list per slice.
    spills: Vec<Vec<u8>>,
    /// (line, key) hashes of the chunk's first valid lines.
    pairs: Vec<keynotes::Pair>,
    /// Invalid email entries that are bare domains.
    bare_domains: u64,
}

/// The keys of one chunk packed in one buffer: one allocation per chunk
/// for the trip from a worker to the writer, not one per key.
#[derive(Default)]
struct Packed {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Packed {
    fn push(&mut self, key: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    /// Room for the keys of a chunk of `bytes` input bytes (a key is never
    /// longer than its line; a URL line is rarely under 32 bytes).
    fn for_chunk(bytes: usize) -> Packed {
        Packed {
            bytes: Vec::with_capacity(bytes),
            ends: Vec::with_capacity(bytes / 32),
        }
    }

    fn keys(&self) -> Vec<&[u8]> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let key = &self.bytes[start..end];
                start = end;
                key
            })
            .collect()
    }
}

/// Which entries of a sliced classic build set a clear bit in some slice so
/// far, one bit each by their order among the valid entries: a classic
/// item's bits lie in several slices, and it is new when it changed any
/// of them, so its count is only known after the last pass (the same count
/// as an in-memory build's). Costs one bit per entry beside the slice.
#[derive(Default)]
struct Changed {
    bits: Vec<u64>,
    /// Entries seen in the current pass.
    next: u64,
}

impl Changed {
    fn take(&mut self, flags: &[bool]) {
        for &f in flags {
            let (w, b) = ((self.next / 64) as usize, self.next % 64);
            if w >= self.bits.len() {
                self.bits.resize(w + 1, 0);
            }
            self.bits[w] |= (f as u64) << b;
            self.next += 1;
        }
    }

    fn count(&self) -> u64 {
        self.bits.iter().map(|w| w.count_ones() as u64).sum()
    }
}

/// How the entries are written into the filter.
enum Sink<'a> {
    /// A new filter: the keys canonicalized on all cores, the bits set in
    /// input order (so the item count is reproducible) by the one writer
    /// that holds the filter (`Filter::insert_batch_owned`: no locks).
    Build(&'a mut Filter),
    /// One slice of a new filter too large for memory (see
    /// `bloomgate_engine::slice`): as [`Sink::Build`], only the bits in the
    /// slice are set. A classic filter's items also mark in [`Changed`]
    /// whether they changed this slice.
    Slice(&'a Slice, Option<&'a mut Changed>),
    /// An in-place update of a fixed filter: batches from all cores through
    /// the engine's page log, so that only the checksum pages that change
    /// are rehashed at the end.
    Update(Arc<Filter>),
    /// An in-place update of a scaling filter: in input order, one key at
    /// a time, by its growth rules (new layers appear as needed).
    Growing(&'a mut Blacklist),
}

/// Which pass over the inputs this is, of how many (a sliced build reads
/// them once per slice; only the first pass reports invalid entries).
#[derive(Clone, Copy)]
struct Pass {
    index: usize,
    of: usize,
}

impl Pass {
    const ONLY: Pass = Pass { index: 0, of: 1 };
}

/// Inserts every line of `inputs` into the filter through `sink`, reporting
/// invalid entries on stderr.
fn insert_inputs(
    (kind, mode): (KeyKind, MatchMode),
    inputs: &[String],
    strict: bool,
    sink: Sink<'_>,
    pass: Pass,
    mut spill: Option<&mut Spill>,
) -> Result<Stats> {
    enum Par<'s> {
        Update(Arc<Filter>),
        Slice(&'s Slice),
    }
    let mut flagged = None;
    let mut owned = None;
    let (parallel, mut growing) = match sink {
        Sink::Build(f) => {
            owned = Some(f);
            (None, None)
        }
        Sink::Slice(s, changed) => {
            flagged = changed;
            if let Some(c) = flagged.as_deref_mut() {
                c.next = 0;
            }
            (Some(Par::Slice(s)), None)
        }
        Sink::Update(f) => (Some(Par::Update(f)), None),
        Sink::Growing(list) => (None, Some(list)),
    };
    let report_invalid = pass.index == 0;
    let spill_ranges: Vec<Range<u64>> = spill.as_ref().map_or(Vec::new(), |s| s.ranges.clone());
    let progress = Progress::default();
    let label = (pass.of > 1).then(|| format!("pass {}/{}", pass.index + 1, pass.of));
    let bar = report::progress_bar(input::total_size(inputs), &progress, label);
    let mut stats = Stats::default();
    let mut invalid = report::Invalid::new(kind, strict);
    if !report_invalid {
        invalid = invalid.quiet();
    }
    let names = inputs.to_vec();
    let sampling = std::sync::atomic::AtomicBool::new(report_invalid && kind != KeyKind::Raw);
    let result = input::process(
        inputs.to_vec(),
        progress,
        |chunk| {
            // Keys go straight into the packed buffer for the writer; only
            // an in-place update inserts them here, from a list of its own.
            let updating = matches!(parallel, Some(Par::Update(_)));
            let mut keys: Vec<Cow<[u8]>> = Vec::new();
            let mut out = ChunkOut {
                lines: 0,
                new: 0,
                invalid: Vec::new(),
                failed: None,
                keys: if updating {
                    Packed::default()
                } else {
                    Packed::for_chunk(chunk.data.len())
                },
                single_label: Vec::new(),
                spills: Vec::new(),
                pairs: Vec::new(),
                bare_domains: 0,
            };
            let sample = sampling.load(std::sync::atomic::Ordering::Relaxed);
            chunk.for_each_line(|line_no, line| {
                out.lines += 1;
                let line = match line {
                    Ok(l) => l,
                    Err(reason) => return out.invalid.push((line_no, reason)),
                };
                match entry_key(kind, mode, line) {
                    Ok(k) => {
                        if kind == KeyKind::Host && is_single_label_host(&k) {
                            out.single_label.push(line_no);
                        }
                        if sample && out.pairs.len() < keynotes::SAMPLE {
                            out.pairs.push(keynotes::pair(line, &k));
                        }
                        if updating {
                            keys.push(k)
                        } else {
                            out.keys.push(&k)
                        }
                    }
                    Err(e) => {
                        out.bare_domains += u64::from(keynotes::bare_domain(kind, line, &e));
                        out.invalid.push((line_no, e.to_string()))
                    }
                }
            });
            if let Some(Par::Update(f)) = &parallel {
                match f.update_batch(&keys) {
                    Ok(new) => out.new = new,
                    Err(e) => out.failed = Some(e.to_string()),
                }
            }
            out
        },
        |chunk, mut out| {
            // A new filter's bits are set here, in input order, so that
            // which of two colliding items counts as new (the header's
            // item count) is the same whatever the thread count and the
            // slicing: the workers canonicalize, the writer only hashes
            // and sets bits.
            let keys = out.keys.keys();
            if let Some(f) = owned.as_deref_mut() {
                out.new = f.insert_batch_owned(&keys);
            }
            match (&parallel, growing.as_deref_mut()) {
                (Some(Par::Slice(s)), _) if flagged.is_some() => {
                    let mut flags = vec![false; keys.len()];
                    s.insert_classic_flagged(&keys, &mut flags);
                    if let Some(c) = flagged.as_deref_mut() {
                        c.take(&flags);
                    }
                }
                // A slice counts its new items itself (Slice::new_items).
                (Some(Par::Slice(s)), _) if !spill_ranges.is_empty() => {
                    out.spills = vec![Vec::new(); spill_ranges.len()];
                    s.insert_and_spill(&keys, &spill_ranges, &mut out.spills);
                }
                (Some(Par::Slice(s)), _) => s.insert_batch(&keys),
                (_, Some(list)) => match list.update_keys(&keys, false) {
                    Ok(new) => out.new = new,
                    Err(e) => out.failed = Some(e.to_string()),
                },
                _ => {}
            }
            if let Some(e) = out.failed {
                bail!("{}: {e}", names[chunk.input]);
            }
            if let Some(sp) = spill.as_deref_mut() {
                sp.write(&out.spills);
            }
            stats.lines += out.lines;
            stats.new += out.new;
            stats.bare_domains += out.bare_domains;
            stats.collapse.take(&out.pairs);
            if !stats.collapse.wants() {
                sampling.store(false, std::sync::atomic::Ordering::Relaxed);
            }
            stats.single_label += out.single_label.len() as u64;
            for line in out.single_label {
                if stats.single_label_at.len() < SHOW_SINGLE_LABEL {
                    stats
                        .single_label_at
                        .push(format!("{}:{line}", names[chunk.input]));
                }
            }
            invalid.chunk(&names[chunk.input], &mut out.invalid)
        },
    );
    report::finish(bar);
    result?;
    stats.invalid = invalid.count();
    invalid.finish();
    if report_invalid {
        let notes = [
            keynotes::bare_domain_warning(stats.bare_domains, stats.invalid),
            stats.collapse.warning(kind),
            keynotes::single_label_warning(stats.single_label, &stats.single_label_at),
        ];
        for note in notes.into_iter().flatten() {
            eprintln!("bloomgate: {note}");
        }
    }
    Ok(stats)
}

fn summary(verb: &str, path: &str, list: &Blacklist, stats: &Stats, started: Instant) {
    let layers = list.layers();
    let secs = started.elapsed().as_secs_f64();
    let target = layers.target_fp();
    let (items, planned, predicted) = (layers.items(), layers.capacity(), layers.predicted_fp());
    let present = stats
        .lines
        .saturating_sub(stats.invalid)
        .saturating_sub(stats.new);
    eprintln!(
        "{verb} {path}: {}, {}{} ({} in filter{}), {} invalid, {}, {secs:.2} s, {} lines/s, {}",
        report::count(stats.lines, "line", "lines"),
        report::count(stats.new, "new item", "new items"),
        if present > 0 {
            format!(
                ", {} already present (a repeated entry, or a distinct one that collided with the filter's bits: a false positive)",
                thousands(present)
            )
        } else {
            String::new()
        },
        thousands(items),
        match layers.layers.len() {
            1 => String::new(),
            n => format!(", {n} layers"),
        },
        thousands(stats.invalid),
        bytes(layers.bytes()),
        thousands((stats.lines as f64 / secs.max(1e-9)) as u64),
        report::rates(list.kind(), list.mode(), predicted, target),
    );
    if layers.fill == FillPolicy::Fixed && items > planned {
        let (kind, mode) = (list.kind(), list.mode());
        let q = |p| bloomgate_blacklist::spec::per_query_rate(kind, mode, p);
        eprintln!(
            "bloomgate: warning: {} items exceed the planned {}; the predicted false-positive rate is now {:.3e} per query instead of {:.3e} ({:.3e} per lookup instead of {:.3e})",
            thousands(items),
            thousands(planned),
            q(predicted),
            q(target),
            predicted,
            target
        );
    }
}

pub fn build(a: BuildArgs) -> Result<i32> {
    if a.layout == crate::args::BuildLayoutArg::Ribbon {
        return crate::cmd::ribbon::build(a);
    }
    if a.delta_share.is_some() || !a.fold.is_empty() {
        return Err(crate::cmd::UsageError(
            "--delta-share and --fold apply to ribbon builds (--layout ribbon): a Bloom file takes adds itself".into(),
        )
        .into());
    }
    let layout = match (a.layout.bloom(), a.layout.deletable()) {
        (Some(layout), _) => layout,
        (None, Some(which)) => return crate::cmd::deletable::build(a, which),
        (None, None) => bail!(
            "--layout {:?} is neither a Bloom nor a deletable layout",
            a.layout
        ),
    };
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
    let items = match a.size.items {
        Some(n) => n,
        None => crate::cmd::count_entries(&a.inputs)?,
    };
    let spec = FilterSpec {
        kind,
        mode,
        layout,
        fill: crate::cmd::dedup::build_policy(&a.policy, items, kind)?,
        ..FilterSpec::new(items, a.size.fp)
    };
    let usage = |e: bloomgate_blacklist::SpecError| crate::cmd::UsageError(e.to_string());
    let plan = spec.plan().map_err(usage)?;
    let params = spec.params_of(&plan, a.seed.unwrap_or_else(random_seed));
    let per_lookup = spec.lookup_rate();
    let policy = &spec.fill;
    let budget = match a.memory {
        Some(m) => Budget {
            bytes: m,
            why: "--memory".into(),
        },
        None => Budget::default_share(),
    };
    if plan.bytes() > budget.bytes {
        let code = build_sliced(&a, params, (kind, mode), &budget, started)?;
        crate::cmd::dedup::write_policy(&a.output, policy, Purpose::Blacklist, per_lookup)?;
        return Ok(code);
    }
    // The engine's error already names the (temporary) file and the failure.
    let mut filter = Filter::create_file(&a.output, params)?;
    let stats = insert_inputs(
        (kind, mode),
        &a.inputs,
        a.strict,
        Sink::Build(&mut filter),
        Pass::ONLY,
        None,
    )?;
    let p = filter.params();
    refuse_useless(
        &a,
        &stats,
        filter.predicted_fp(),
        (p.target_fp, p.planned_items),
    )?;
    filter.persist()?;
    crate::cmd::dedup::write_policy(&a.output, policy, Purpose::Blacklist, per_lookup)?;
    let list = Blacklist::from_filter(filter)?;
    summary("built", &a.output, &list, &stats, started);
    Ok(0)
}

/// How far past its target a built filter's predicted rate may be before
/// the build is useless.
const USELESS_RATE: f64 = 10.0;

/// Fails a build whose filter would be useless (unless `--allow-useless`):
/// no valid entry, or a predicted per-lookup rate more than
/// [`USELESS_RATE`] times the target. The output is then not written.
fn refuse_useless(
    a: &BuildArgs,
    stats: &Stats,
    predicted: f64,
    (target, planned): (f64, u64),
) -> Result<()> {
    if a.allow_useless {
        return Ok(());
    }
    let valid = stats.lines - stats.invalid;
    let why = if valid == 0 {
        format!(
            "no valid {} entry in {} lines ({} invalid): the filter would be empty",
            KeyKind::from(a.keys.keys),
            thousands(stats.lines),
            thousands(stats.invalid)
        )
    } else if predicted > USELESS_RATE * target {
        format!(
            "its predicted false-positive rate {predicted:.3e} per lookup is more than {USELESS_RATE} times the target {target:.3e} ({} new items, {} planned): give a larger --items",
            thousands(stats.new),
            thousands(planned),
        )
    } else {
        return Ok(());
    };
    Err(anyhow::anyhow!(
        "{}: not written: {why} (--allow-useless writes it anyway)",
        a.output
    ))
}

/// The memory a build may give the filter's bits.
struct Budget {
    bytes: u64,
    /// Where the number came from, for the summary.
    why: String,
}

impl Budget {
    /// 60 % of the memory the kernel says is available now (`MemAvailable`):
    /// the rest stays for the page cache that feeds the inputs, and for
    /// whatever else runs on the machine.
    fn default_share() -> Budget {
        match bloomgate_engine::mem_available() {
            Some(avail) => Budget {
                bytes: avail / 10 * 6,
                why: format!("60 % of the {} available", bytes(avail)),
            },
            None => Budget {
                bytes: 4 << 30,
                why: "a fixed 4 GiB (available memory unknown)".into(),
            },
        }
    }
}

/// Builds a filter larger than the budget one slice of its bit array at a
/// time, each slice written to its place in the output file
/// (`bloomgate_engine::slice`). The result is bit for bit the in-memory
/// build.
///
/// The first pass over the inputs builds the first slice; with the blocked
/// layout it also writes the records of the items of as many of the last
/// slices as the disk has room for (`--spill`, [`Spill`]), which are then
/// built from their records. Every other slice gets a pass over the inputs
/// of its own: a pass needs no disk beyond the output and scales with
/// cores, but costs reading, canonicalizing and hashing every line again,
/// which on the ten-billion run is ten times slower than reading the records
/// back (see `cmd::spill`).
fn build_sliced(
    a: &BuildArgs,
    params: Params,
    rules: (KeyKind, MatchMode),
    budget: &Budget,
    started: Instant,
) -> Result<i32> {
    // The budget is for the bits; the input chunks in flight and their keys
    // add a few dozen MiB on top (peak memory is reported at the end).
    let ranges = slice::plan_slices(&params, budget.bytes);
    let out_dir = std::path::Path::new(&a.output)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let dir = a.tmp_dir.clone().unwrap_or_else(|| out_dir.to_path_buf());
    // Room for records: what --spill allows, else 90 % of the free space
    // less the output file when it is on the same filesystem.
    let room = a.spill.unwrap_or_else(|| {
        let free = spill::free_space(&dir).unwrap_or(0) / 10 * 9;
        let output = if spill::same_filesystem(&dir, out_dir) {
            params.bits / 8 + 4096
        } else {
            0
        };
        free.saturating_sub(output)
    });
    let mut spill = Spill::plan(&params, &ranges, &dir, room)?;
    let (spilled, expected) = spill
        .as_ref()
        .map_or((0, 0), |s| (s.slices.len(), s.expected));
    eprintln!(
        "bloomgate: the filter's {} exceed the memory budget of {} ({}): building it in {} slices, {} pass{} over the inputs{}",
        bytes(params.bits / 8),
        bytes(budget.bytes),
        budget.why,
        ranges.len(),
        ranges.len() - spilled,
        if ranges.len() - spilled == 1 { "" } else { "es" },
        if spilled > 0 {
            format!(
                "; the first also writes the records of the items of the last {} to {} (about {})",
                report::count(spilled as u64, "slice", "slices"),
                dir.display(),
                bytes(expected)
            )
        } else {
            String::new()
        }
    );
    let (inputs, _spool) = input::respoolable(&a.inputs, &dir)?;
    let mut writer = SliceWriter::create(&a.output, &params)?;
    let mut changed = (params.layout == bloomgate_engine::Layout::Classic).then(Changed::default);
    let mut stats = Stats::default();
    let mut steps = Vec::new();
    for (i, range) in ranges.iter().enumerate() {
        let t = Instant::now();
        let s = Slice::new(&params, range.clone())?;
        let label = format!("slice {}/{}", i + 1, ranges.len());
        if let Some(sp) = spill.as_mut().filter(|sp| sp.is_spilled(i)) {
            sp.insert_into(i, &s, format!("{label}, spilled records"))?;
            writer.write(&s)?;
            stats.new += s.new_items();
            steps.push(format!(
                "{:.1} s (spilled records)",
                t.elapsed().as_secs_f64()
            ));
            continue;
        }
        let pass = Pass {
            index: i,
            of: ranges.len(),
        };
        let first = spill.as_mut().filter(|_| i == 0);
        let sink = Sink::Slice(&s, changed.as_mut());
        let mut st = insert_inputs(rules, &inputs, a.strict, sink, pass, first)?;
        writer.write(&s)?;
        st.new = s.new_items();
        if i == 0 {
            stats = st;
        } else {
            stats.new += st.new;
            if st.lines != stats.lines {
                bail!(
                    "the inputs changed between passes ({} lines, then {}): a sliced build reads them once per slice",
                    stats.lines,
                    st.lines
                );
            }
        }
        steps.push(format!("{:.1} s (pass)", t.elapsed().as_secs_f64()));
    }
    drop(spill);
    if let Some(c) = &changed {
        stats.new = c.count();
        writer.set_items(stats.new);
    }
    let predicted = params.predicted_fp(stats.new as f64);
    refuse_useless(
        a,
        &stats,
        predicted,
        (params.target_fp, params.planned_items),
    )?;
    writer.finish()?;
    let filter = Filter::open(&a.output, bloomgate_engine::Access::ReadOnly)?;
    let list = Blacklist::from_filter(filter)?;
    summary("built", &a.output, &list, &stats, started);
    eprintln!(
        "bloomgate: slices built in {}; peak memory {} (budget {})",
        steps.join(", "),
        report::peak_rss().map_or_else(|| "unknown".into(), bytes),
        bytes(budget.bytes)
    );
    Ok(0)
}

pub fn add(a: AddArgs) -> Result<i32> {
    if crate::cmd::redis::is_address(&a.filter) {
        return crate::cmd::redis::add(a);
    }
    if crate::cmd::ribbon::is_ribbon(&a.filter) {
        return crate::cmd::ribbon::add(a);
    }
    if a.print_new {
        return Err(crate::cmd::UsageError(
            "--print-new applies to Redis filters and ribbon files (an add to a Bloom file has one writer)".into(),
        )
        .into());
    }
    if crate::cmd::deletable::kind_of(&a.filter).is_some() {
        return crate::cmd::deletable::edit(
            &a.filter,
            &a.inputs,
            a.keys,
            a.strict,
            crate::cmd::deletable::Op::Add,
        );
    }
    let started = Instant::now();
    // All layers, writable; in a data directory also its lock (refused
    // while a server runs there) and the live adds its files lack.
    let mut list = Blacklist::open_for_update(&a.filter)?;
    crate::cmd::report_opened(&a.filter, list.opened(), false);
    crate::cmd::check_kind(&a.filter, (list.kind(), list.mode()), a.keys, None)?;
    let rules = (list.kind(), list.mode());
    let result = if list.layers().fill == FillPolicy::Fixed {
        let layer = list.layers().layers[0].clone();
        insert_inputs(
            rules,
            &a.inputs,
            a.strict,
            Sink::Update(layer),
            Pass::ONLY,
            None,
        )
    } else {
        insert_inputs(
            rules,
            &a.inputs,
            a.strict,
            Sink::Growing(&mut list),
            Pass::ONLY,
            None,
        )
    };
    // Reseal the files whatever happened: bits already set stay set (never
    // a false negative), and the checksums must describe them.
    list.commit()?;
    let stats = result.context("some entries before the failure may have been added")?;
    summary("added to", &a.filter, &list, &stats, started);
    Ok(0)
}
