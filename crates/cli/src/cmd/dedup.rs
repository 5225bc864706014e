//! `bloomgate dedup`: print each input line the first time its entry is
//! seen, remembering entries in a filter.
//!
//! The seeds' `addIfNotExist`, for a whole stream: a crawler pipes the URLs
//! it found through `bloomgate dedup --state seen.bgf` and fetches only what
//! comes out. Entries are compared by their canonical key (the key kinds of
//! `build`, default url), so `HTTP://A.com/x#top` and `http://a.com/x` are
//! one entry; the line printed is the first original line.
//!
//! # How a run goes
//!
//! Worker threads canonicalize whole input chunks (in parallel, as `check`
//! does); one thread takes the chunks in input order and adds their keys
//! through [`Layers::add_batch`], which hashes each key once and keeps the
//! next keys' blocks prefetched, and prints the lines whose key was new.
//! Output order is input order, so the adds themselves are sequential; the
//! filter's add-if-absent is exact ([`bloomgate_engine::Filter::insert`]).
//!
//! # The state file
//!
//! `--state FILE` is a filter file with a `.meta` (its fill policy, purpose
//! `dedup`), created on first use and sized by `--items` and `--fp`
//! (a [`FilterSpec`]); an existing state keeps the settings it was created
//! with, and a setting given that differs from them is refused. It is read copy-on-write and written only at the end of
//! a run that succeeded, by [`Layers::save`]: each file replaced
//! atomically, the `.meta` last as the commit. A run that fails or is
//! killed leaves the previous state as it was (lines it printed may then be
//! printed again by the next run: a duplicate, never a loss). `FILE.lock`
//! keeps two runs from using one state at once.
//!
//! A false positive of the filter is a new entry wrongly taken as seen (and
//! dropped); the summary on stderr gives the predicted rate of that at the
//! filter's current fill. When the state is full its policy applies
//! (`--policy`, default grow; see `bloomgate_blacklist::layers`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use bloomgate_blacklist::layers::{unix_now, Added, FillPolicy, Layers, Purpose};
use bloomgate_blacklist::spec::FillArgs;
use bloomgate_blacklist::FilterSpec;
use bloomgate_engine::{random_seed, Access};
use bloomgate_list::{Claim, Error as ListError, List, OpenOptions};
use bloomgate_url::{entry_key, KeyKind, MatchMode};

use crate::args::{DedupArgs, LayoutArg, PolicyArg, PolicyArgs};
use crate::cmd::UsageError;
use crate::input::{self, Progress};
use crate::keynotes::{self, Collapse};
use crate::report::{self, thousands};

/// Entries a new dedup state is sized for when `--items` is left out.
const DEFAULT_ITEMS: u64 = 1_000_000;
/// The rate of a new dedup state when `--fp` is left out.
const DEFAULT_FP: f64 = 1e-6;

/// The fill-policy options of the command line, in the library's terms
/// ([`FillArgs`]: the defaults and limits are [`FilterSpec`]'s).
pub(crate) fn fill_args(a: &PolicyArgs) -> FillArgs<'_> {
    FillArgs {
        policy: a.policy.map(|p| match p {
            PolicyArg::Grow => "grow",
            PolicyArg::Refuse => "refuse",
            PolicyArg::Rotate => "rotate",
            PolicyArg::Clear => "clear",
        }),
        expansion: a.expansion.map(|v| ("--expansion", v)),
        generations: a.generations.map(|v| ("--generations", u64::from(v))),
        window: a.window.map(|v| ("--window", v)),
        window_secs: a.window_secs.map(|v| ("--window-secs", v)),
        clear_at: a.clear_at.map(|v| ("--clear-at", v)),
    }
}

/// The policy the arguments ask for (`default` when `--policy` is not
/// given); `items` is rotate's default window. Settings of another
/// policy are usage errors.
pub(crate) fn policy_from(
    a: &PolicyArgs,
    items: u64,
    default: &str,
) -> Result<FillPolicy, UsageError> {
    fill_args(a)
        .resolve(items, default)
        .map_err(|e| UsageError(e.to_string()))
}

/// The policy `build` is asked for (`Fixed` without `--policy`), checked
/// as [`FilterSpec::validate`] checks it. A built filter can grow or
/// refuse; rotate and clear are dedup and cache state, made by `dedup` or
/// `create --purpose dedup`, and refused for url and host blacklists.
pub(crate) fn build_policy(
    a: &PolicyArgs,
    items: u64,
    kind: KeyKind,
) -> Result<FillPolicy, UsageError> {
    let policy = policy_from(a, items, "fixed")?;
    bloomgate_blacklist::layers::fill::check_fill(&policy, kind, Purpose::Blacklist)
        .map_err(|e| UsageError(e.to_string()))?;
    if policy.forgets() {
        return Err(UsageError(format!(
            "a {} filter is dedup or cache state: create it with `bloomgate dedup --state FILE --policy {}` or `bloomgate create --purpose dedup --policy {}`",
            policy.name(),
            policy.name(),
            policy.name()
        )));
    }
    Ok(policy)
}

/// Writes the `.meta` of a freshly built filter file `output` for
/// `policy` (none for a fixed filter); `rate` is the whole filter's
/// per-lookup rate.
pub(crate) fn write_policy(
    output: &str,
    policy: &FillPolicy,
    purpose: Purpose,
    rate: f64,
) -> Result<()> {
    if *policy == FillPolicy::Fixed {
        return Ok(());
    }
    let path = Path::new(output);
    let mut layers = Layers::single(bloomgate_engine::Filter::open(path, Access::ReadOnly)?)?;
    layers.set_policy(policy, purpose, rate, unix_now())?;
    let json = layers
        .meta_json()
        .expect("a policy other than fixed has a .meta");
    let meta = bloomgate_blacklist::layers::meta_path(path);
    bloomgate_engine::atomic::write_atomic(&meta, &json)
        .with_context(|| format!("{}: cannot write the fill policy", meta.display()))?;
    Ok(())
}

/// One chunk's lines, canonicalized by a worker. Reused from chunk to
/// chunk (see `run_to`): fresh multi-megabyte buffers per chunk cost page
/// faults and zeroing on every chunk.
#[derive(Default)]
struct ChunkKeys {
    /// The keys, back to back, and where each ends.
    arena: Vec<u8>,
    ends: Vec<usize>,
    /// Per key, its line's byte range in the chunk.
    lines: Vec<(usize, usize)>,
    /// Lines that are no valid entry: number and reason.
    invalid: Vec<(u64, String)>,
    /// (line, key) hashes of the chunk's first valid lines.
    pairs: Vec<keynotes::Pair>,
    /// Invalid email entries that are bare domains.
    bare_domains: u64,
}

fn canonicalize(
    chunk: &input::Chunk,
    kind: KeyKind,
    sample: bool,
    mut out: ChunkKeys,
) -> ChunkKeys {
    out.arena.clear();
    out.ends.clear();
    out.lines.clear();
    out.invalid.clear();
    out.pairs.clear();
    out.bare_domains = 0;
    out.arena.reserve(chunk.data.len());
    let base = chunk.data.as_ptr() as usize;
    chunk.for_each_line(|line_no, line| match line {
        Ok(line) => match entry_key(kind, MatchMode::Exact, line) {
            Ok(key) => {
                if sample && out.pairs.len() < keynotes::SAMPLE {
                    out.pairs.push(keynotes::pair(line, &key));
                }
                out.arena.extend_from_slice(&key);
                out.ends.push(out.arena.len());
                let start = line.as_ptr() as usize - base;
                out.lines.push((start, start + line.len()));
            }
            Err(e) => {
                out.bare_domains += u64::from(keynotes::bare_domain(kind, line, &e));
                out.invalid.push((line_no, e.to_string()))
            }
        },
        Err(reason) => out.invalid.push((line_no, reason)),
    });
    out
}

/// Holds `FILE.lock` while a run uses the state `FILE` (removed after).
fn lock_state(state: &Path) -> Result<crate::lockfile::Lock> {
    let mut name = state.as_os_str().to_os_string();
    name.push(".lock");
    let path = PathBuf::from(name);
    let msg = format!(
        "{}: another bloomgate dedup is using this state (its lock {} is held)",
        state.display(),
        path.display()
    );
    crate::lockfile::lock(&path, crate::lockfile::Busy::Fail(&msg))
}

/// The spec of a new state as the arguments ask (the defaults filled in).
fn new_spec(a: &DedupArgs, kind: KeyKind) -> Result<FilterSpec, UsageError> {
    let items = a.items.unwrap_or(DEFAULT_ITEMS);
    let spec = FilterSpec {
        kind,
        layout: a.layout.unwrap_or(LayoutArg::Blocked).into(),
        fill: policy_from(&a.policy, items, "grow")?,
        purpose: Purpose::Dedup,
        ..FilterSpec::new(items, a.fp.unwrap_or(DEFAULT_FP))
    };
    spec.validate().map_err(|e| UsageError(e.to_string()))?;
    Ok(spec)
}

/// The settings given for a new state that an existing one does not have:
/// each as `--option value (the state has …)`. A state keeps the settings
/// it was created with, so a setting that differs cannot apply; one that
/// matches (the same command line run again) is accepted.
fn settings_that_cannot_apply(a: &DedupArgs, layers: &Layers) -> Result<Vec<String>, UsageError> {
    let mut differ = Vec::new();
    let state = layers.policy();
    // Another policy, or settings of another policy than the state's.
    let asked = policy_from(&a.policy, 1, state.name())?;
    if asked.name() != state.name() {
        return Err(UsageError(format!(
            "{} has the fill policy {state}; it cannot be changed to {} (start a new state)",
            a.state.as_deref().unwrap_or(Path::new("")).display(),
            asked.name()
        )));
    }
    let l0 = layers.layers[0].params();
    let mut asked = FilterSpec {
        kind: layers.kind,
        layout: l0.layout,
        fill: state.clone(),
        purpose: layers.rules.purpose,
        ..FilterSpec::new(a.items.unwrap_or(1), a.fp.unwrap_or(0.5))
    };
    let p = &a.policy;
    match &mut asked.fill {
        FillPolicy::Grow { expansion } => {
            if let Some(e) = p.expansion.filter(|&e| e != u64::from(*expansion)) {
                differ.push(format!("--expansion {e} (the state has {expansion})"));
            }
        }
        FillPolicy::Rotate(r) => {
            if let Some(g) = p.generations.filter(|&g| g != r.generations) {
                differ.push(format!(
                    "--generations {g} (the state has {})",
                    r.generations
                ));
            }
            if let Some(w) = p.window.filter(|&w| w != r.window) {
                differ.push(format!("--window {w} (the state has {})", r.window));
            }
            if p.window_secs.is_some() && p.window_secs != r.window_secs {
                differ.push(format!(
                    "--window-secs {} (the state has {})",
                    p.window_secs.unwrap_or_default(),
                    r.window_secs.map_or("none".into(), |t| t.to_string())
                ));
            }
        }
        FillPolicy::Clear { at } => {
            if let Some(c) = p.clear_at.filter(|&c| c != *at) {
                differ.push(format!("--clear-at {c} (the state has {at})"));
            }
        }
        FillPolicy::Fixed | FillPolicy::Refuse => {}
    }
    if let Some(n) = a.items {
        // The first layer's (a generation's) planned size for these
        // settings, against the state's.
        if asked.layer_rate().0 != l0.planned_items {
            differ.push(format!(
                "--items {} (the state was made for {})",
                thousands(n),
                thousands(match &state {
                    FillPolicy::Rotate(r) => r.window,
                    _ => l0.planned_items,
                })
            ));
        }
    }
    if let Some(fp) = a.fp {
        asked.rate = fp;
        let have = layers.target_fp();
        if (asked.lookup_rate() - have).abs() > have * 1e-9 {
            differ.push(format!(
                "--fp {fp:e} (the state was made for {:e})",
                bloomgate_blacklist::spec::per_query_rate(layers.kind, layers.mode, have)
            ));
        }
    }
    if let Some(l) = a.layout.map(bloomgate_engine::Layout::from) {
        if l != l0.layout {
            differ.push(format!("--layout {l} (the state is {})", l0.layout));
        }
    }
    Ok(differ)
}

/// The state to run with: the file's, or a new one as the arguments ask.
fn open_state(a: &DedupArgs, now: u64) -> Result<Layers> {
    if let Some(path) = a.state.as_deref().filter(|p| p.exists()) {
        let layers = Layers::open(path, Access::ReadOnly)
            .with_context(|| format!("{}: cannot open the dedup state", path.display()))?;
        if let Some(k) = a.keys.map(KeyKind::from) {
            if k != layers.kind {
                return Err(UsageError(format!(
                    "{} holds {} keys, but --keys {k} was given",
                    path.display(),
                    layers.kind
                ))
                .into());
            }
        }
        let differ = settings_that_cannot_apply(a, &layers)?;
        if !differ.is_empty() {
            return Err(UsageError(format!(
                "{} is an existing state and keeps the settings it was created with; {} cannot apply to it: leave {} out, or remove the state (with its .meta and .layerN files) to start a new one",
                path.display(),
                differ.join(", "),
                if differ.len() == 1 { "it" } else { "them" }
            ))
            .into());
        }
        return Ok(layers);
    }
    if let Some(path) = a.state.as_deref() {
        // Growth settings without their first layer: a state that lost a
        // file. Starting afresh would write a new `.meta` over the old one
        // and forget every entry it still names.
        let meta = bloomgate_blacklist::layers::meta_path(path);
        if meta.exists() {
            bail!(
                "{}: the state's first layer is missing but {} exists; restore it, or remove {} and its .layerN files to start a new state",
                path.display(),
                meta.display(),
                meta.display()
            );
        }
    }
    let kind = a.keys.map_or(KeyKind::Url, KeyKind::from);
    let spec = new_spec(a, kind)?;
    spec.create(random_seed(), now)
        .map_err(|e| UsageError(e.to_string()).into())
}

impl ChunkKeys {
    /// The keys, in input order.
    fn keys(&self) -> Vec<&[u8]> {
        let mut keys: Vec<&[u8]> = Vec::with_capacity(self.ends.len());
        let mut start = 0;
        for &end in &self.ends {
            keys.push(&self.arena[start..end]);
            start = end;
        }
        keys
    }
}

/// What a run counted.
struct Counts {
    lines: u64,
    passed: u64,
    seen: u64,
    invalid: report::Invalid,
    bare_domains: u64,
    collapse: Collapse,
}

impl Counts {
    /// Nothing counted yet, of a run reading entries of `kind`.
    fn new(kind: KeyKind) -> Counts {
        Counts {
            lines: 0,
            passed: 0,
            seen: 0,
            invalid: report::Invalid::new(kind, false),
            bare_domains: 0,
            collapse: Collapse::default(),
        }
    }

    /// Counts a chunk's invalid lines (taken out of `ck`), naming the
    /// first few of the run ([`report::Invalid`]); `name` is the chunk's
    /// input.
    fn report_invalid(&mut self, ck: &mut ChunkKeys, name: &str) {
        // Never strict: the report cannot fail.
        let _ = self.invalid.chunk(name, &mut ck.invalid);
    }

    /// The notes after the summary: invalid entries not shown, and what
    /// the keys' canonical forms suggest about `--keys`.
    fn notes(&self, kind: KeyKind) {
        self.invalid.finish();
        let notes = [
            keynotes::bare_domain_warning(self.bare_domains, self.invalid.count()),
            self.collapse.warning(kind),
        ];
        for note in notes.into_iter().flatten() {
            eprintln!("bloomgate: {note}");
        }
    }
}

/// Runs `bloomgate dedup`, printing on standard output.
pub fn run(a: DedupArgs) -> Result<i32> {
    run_to(a, std::io::stdout().lock())
}

/// Runs `bloomgate dedup`, printing into `out`. Returns the exit code.
pub fn run_to(a: DedupArgs, out: impl Write) -> Result<i32> {
    if let Some(address) = a
        .state
        .as_deref()
        .and_then(Path::to_str)
        .filter(|s| crate::cmd::redis::is_address(s))
    {
        let address = address.to_string();
        return run_shared(a, &address, out);
    }
    let started = Instant::now();
    let _lock = a.state.as_deref().map(lock_state).transpose()?;
    let mut layers = open_state(&a, unix_now())?;
    let kind = layers.kind;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, out);
    let mut counts = Counts::new(kind);
    let mut added = Vec::new();
    let names = a.inputs.clone();
    let spare = std::sync::Mutex::new(Vec::<ChunkKeys>::new());
    let take_spare = || {
        spare
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_default()
    };
    let sampling = std::sync::atomic::AtomicBool::new(kind != KeyKind::Raw);
    let progress = Progress::default();
    let bar = report::progress_bar(input::total_size(&a.inputs), &progress, None);
    let result = input::process(
        a.inputs.clone(),
        progress,
        |chunk| {
            let sample = sampling.load(std::sync::atomic::Ordering::Relaxed);
            canonicalize(chunk, kind, sample, take_spare())
        },
        |chunk, mut ck| {
            counts.bare_domains += ck.bare_domains;
            counts.collapse.take(&ck.pairs);
            if !counts.collapse.wants() {
                sampling.store(false, std::sync::atomic::Ordering::Relaxed);
            }
            counts.report_invalid(&mut ck, &names[chunk.input]);
            let keys = ck.keys();
            layers.add_batch(&keys, unix_now(), &mut added)?;
            counts.lines += keys.len() as u64;
            for (&(s, e), what) in ck.lines.iter().zip(&added) {
                match what {
                    Added::New => {
                        counts.passed += 1;
                        out.write_all(&chunk.data[s..e])?;
                        out.write_all(b"\n")?;
                    }
                    Added::Exists => counts.seen += 1,
                    Added::Full => bail!(
                        "the dedup state is full ({} entries) and its policy is refuse; use a larger --items or another --policy for a new state",
                        thousands(layers.items())
                    ),
                }
            }
            drop(keys);
            if chunk.paused {
                out.flush()?;
            }
            spare.lock().unwrap_or_else(|e| e.into_inner()).push(ck);
            Ok(())
        },
    );
    report::finish(bar);
    counts.lines += counts.invalid.count();
    let result = result.and_then(|()| out.flush().map_err(anyhow::Error::from));
    if let Err(e) = result {
        if a.state.is_some() {
            eprintln!(
                "bloomgate: dedup stopped; the state was not saved (the previous state is kept)"
            );
        }
        return Err(e);
    }
    if let Some(path) = &a.state {
        layers
            .save(path)
            .with_context(|| format!("{}: cannot save the dedup state", path.display()))?;
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "dedup: {} read, {} passed, {} dropped as seen, {} invalid; {} lines/s; state: {}, {}, policy {}; predicted rate of new entries wrongly taken as seen: {:.3e}",
        crate::report::count(counts.lines, "line", "lines"),
        thousands(counts.passed),
        thousands(counts.seen),
        thousands(counts.invalid.count()),
        thousands((counts.lines as f64 / secs.max(1e-9)) as u64),
        crate::report::count(layers.items(), "entry", "entries"),
        match (layers.policy(), layers.layers.len()) {
            (FillPolicy::Rotate(_), 1) => "1 generation".into(),
            (FillPolicy::Rotate(_), n) => format!("{n} generations"),
            (_, 1) => "1 layer".into(),
            (_, n) => format!("{n} layers"),
        },
        layers.policy(),
        layers.predicted_fp(),
    );
    counts.notes(kind);
    Ok(0)
}

/// Runs `bloomgate dedup --state ADDRESS`: the state is a filter in Redis
/// that several processes share, each adding its entries through
/// [`List::add_keys`], whose add-if-absent claims Redis decides per key:
/// of all the processes, exactly one prints a given entry. Nothing is
/// saved at the end and no lock is taken (each add is already in Redis);
/// the state is made once by `bloomgate create` and keeps its settings.
///
/// When Redis fails, the lines whose add was answered are printed as
/// usual, those sent without a reply are printed too (they may have been
/// added; treated as new, as `add --print-new` does), and the run exits
/// 1 saying how many lines of each sort there were and where in the
/// input it stopped: no line is dropped or passed twice without it.
fn run_shared(a: DedupArgs, given_address: &str, out: impl Write) -> Result<i32> {
    let started = Instant::now();
    // Shown without its password.
    let address = &bloomgate_redis::Address::parse(given_address)
        .map(|a| a.display())
        .map_err(|e| UsageError(e.to_string()))?;
    let p = &a.policy;
    let given: Vec<&str> = [
        (a.items.is_some(), "--items"),
        (a.fp.is_some(), "--fp"),
        (a.layout.is_some(), "--layout"),
        (p.policy.is_some(), "--policy"),
        (p.expansion.is_some(), "--expansion"),
        (p.generations.is_some(), "--generations"),
        (p.window.is_some(), "--window"),
        (p.window_secs.is_some(), "--window-secs"),
        (p.clear_at.is_some(), "--clear-at"),
    ]
    .into_iter()
    .filter_map(|(g, name)| g.then_some(name))
    .collect();
    if !given.is_empty() {
        return Err(UsageError(format!(
            "{address}: a dedup state in Redis is made once, with its settings, by `bloomgate create {address} --purpose dedup --items N --fp P`; {} cannot apply to it here: leave {} out",
            given.join(", "),
            if given.len() == 1 { "it" } else { "them" }
        ))
        .into());
    }
    let options = OpenOptions {
        update: true,
        password_file: a.redis.redis_password_file.clone(),
        ..OpenOptions::default()
    };
    let mut list = List::open_with(given_address, &options).map_err(|e| {
        let missing = matches!(&e, ListError::RedisOpen { source, .. }
            if matches!(**source, bloomgate_redis::Error::NotFound { .. }));
        let e = crate::cmd::list_error(e);
        match missing {
            true => e.context(format!(
                "the dedup state {address} does not exist; make it once (for every process that shares it) with `bloomgate create {address} --purpose dedup --keys {} --items N --fp P`",
                a.keys.map_or(KeyKind::Url, KeyKind::from)
            )),
            false => e,
        }
    })?;
    let kind = list.kind();
    if let Some(k) = a.keys.map(KeyKind::from).filter(|&k| k != kind) {
        return Err(UsageError(format!(
            "{address} holds {kind} keys, but --keys {k} was given"
        ))
        .into());
    }
    if list.mode() != MatchMode::Exact {
        return Err(UsageError(format!(
            "{address} matches {} keys by {}; a dedup state compares whole entries (make it with --match exact, the default)",
            kind,
            list.mode()
        ))
        .into());
    }
    let mut out = std::io::BufWriter::with_capacity(1 << 16, out);
    let mut counts = Counts::new(kind);
    let (mut unknown, mut not_added) = (0u64, 0u64);
    // Where the adds stopped: the input and line of the chunk that failed.
    let mut stopped: Option<(String, u64)> = None;
    let names = a.inputs.clone();
    let progress = Progress::default();
    let bar = report::progress_bar(input::total_size(&a.inputs), &progress, None);
    let result = input::process(
        a.inputs.clone(),
        progress,
        |chunk| canonicalize(chunk, kind, kind != KeyKind::Raw, ChunkKeys::default()),
        |chunk, mut ck| {
            counts.bare_domains += ck.bare_domains;
            counts.collapse.take(&ck.pairs);
            counts.report_invalid(&mut ck, &names[chunk.input]);
            let claims = list.add_keys(&ck.keys());
            counts.lines += ck.ends.len() as u64;
            for (&(s, e), claim) in ck.lines.iter().zip(&claims.outcomes) {
                let print = match claim {
                    Claim::New => {
                        counts.passed += 1;
                        true
                    }
                    // Sent without a reply: it may be in Redis now, so no
                    // other process or later run would pass it.
                    Claim::Unknown => {
                        unknown += 1;
                        true
                    }
                    Claim::Present => {
                        counts.seen += 1;
                        false
                    }
                    Claim::NotAdded => {
                        not_added += 1;
                        false
                    }
                };
                if print {
                    out.write_all(&chunk.data[s..e])?;
                    out.write_all(b"\n")?;
                }
            }
            if let Some(e) = claims.error {
                stopped = Some((names[chunk.input].clone(), chunk.first_line));
                out.flush()?;
                return Err(anyhow::Error::new(e));
            }
            if chunk.paused {
                out.flush()?;
            }
            Ok(())
        },
    );
    report::finish(bar);
    counts.lines += counts.invalid.count();
    let result = result.and_then(|()| out.flush().map_err(anyhow::Error::from));
    if let Err(e) = result {
        return Err(match stopped {
            Some((name, line)) => e.context(format!(
                "dedup through {address} stopped in the input chunk from {name}:{line}: {} lines passed (printed), {} dropped as seen, {} printed whose add got no reply (they may be in the state: treat them as new), {} not deduplicated and not printed; the input after them was not read: run it again from {name}:{line}",
                thousands(counts.passed),
                thousands(counts.seen),
                thousands(unknown),
                thousands(not_added)
            )),
            None => e.context(format!(
                "dedup through {address} stopped: {} lines passed (printed) before it",
                thousands(counts.passed)
            )),
        });
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "dedup: {} read, {} passed, {} dropped as seen, {} invalid; {} lines/s; state: {} (shared); predicted rate of new entries wrongly taken as seen: see `bloomgate info {address}`",
        crate::report::count(counts.lines, "line", "lines"),
        thousands(counts.passed),
        thousands(counts.seen),
        thousands(counts.invalid.count()),
        thousands((counts.lines as f64 / secs.max(1e-9)) as u64),
        address,
    );
    counts.notes(kind);
    Ok(0)
}
