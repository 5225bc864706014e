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
//! `dedup`), created on first use and sized by `--capacity` and
//! `--error-rate`. It is read copy-on-write and written only at the end of
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

use bloomgate_blacklist::layers::{unix_now, Added, Layers, Policy, Purpose, Rotate};
use bloomgate_engine::{random_seed, Access, Params};
use bloomgate_url::{entry_key, KeyKind, MatchMode};

use crate::args::{DedupArgs, PolicyArg, PolicyArgs};
use crate::cmd::UsageError;
use crate::input::{self, Progress};
use crate::report::thousands;

/// How many invalid entries are shown before only counting.
const SHOW_INVALID: u64 = 10;

/// The policy the arguments ask for (`default` when `--policy` is not
/// given); `capacity` is rotate's default window. Settings of another
/// policy are usage errors.
pub(crate) fn policy_from(
    a: &PolicyArgs,
    capacity: u64,
    default: PolicyArg,
) -> Result<Policy, UsageError> {
    let which = a.policy.unwrap_or(default);
    if which != PolicyArg::Rotate
        && (a.generations.is_some() || a.window.is_some() || a.window_secs.is_some())
    {
        return Err(UsageError(
            "--generations, --window and --window-secs apply to --policy rotate".into(),
        ));
    }
    if which != PolicyArg::Clear && a.clear_at.is_some() {
        return Err(UsageError("--clear-at applies to --policy clear".into()));
    }
    Ok(match which {
        PolicyArg::Grow => Policy::Grow { expansion: 2 },
        PolicyArg::Refuse => Policy::Refuse,
        PolicyArg::Rotate => Policy::Rotate(Rotate {
            generations: a.generations.unwrap_or(4),
            window: a.window.unwrap_or(capacity),
            window_secs: a.window_secs,
        }),
        PolicyArg::Clear => Policy::Clear {
            at: a.clear_at.unwrap_or(0.8),
        },
    })
}

/// The policy `build` is asked for (`None`: fixed, without `--policy`).
/// A built filter can grow or refuse; rotate and clear are dedup and cache
/// state, made by `dedup`, and refused for url and host blacklists.
pub(crate) fn build_policy(
    a: &PolicyArgs,
    items: u64,
    kind: KeyKind,
) -> Result<Option<Policy>, UsageError> {
    if a.policy.is_none() {
        return policy_from(a, items, PolicyArg::Grow).map(|_| None);
    }
    let policy = policy_from(a, items, PolicyArg::Grow)?;
    bloomgate_blacklist::layers::check_policy(&policy, kind, Purpose::Blacklist)
        .map_err(|e| UsageError(e.to_string()))?;
    if policy.forgets() {
        return Err(UsageError(format!(
            "a {} filter is dedup or cache state: create it with `bloomgate dedup --state FILE --policy {}`",
            policy.name(),
            policy.name()
        )));
    }
    Ok(Some(policy))
}

/// Writes the `.meta` of a freshly built filter file `output` for
/// `policy` (`None`: a fixed filter, no `.meta`); `rate` is the whole
/// filter's per-lookup rate.
pub(crate) fn write_policy(output: &str, policy: Option<&Policy>, rate: f64) -> Result<()> {
    let Some(policy) = policy else {
        return Ok(());
    };
    let path = Path::new(output);
    let mut layers = Layers::single(bloomgate_engine::Filter::open(path, Access::ReadOnly)?)?;
    layers.set_policy(policy, Purpose::Blacklist, rate, unix_now())?;
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
}

fn canonicalize(chunk: &input::Chunk, kind: KeyKind, mut out: ChunkKeys) -> ChunkKeys {
    out.arena.clear();
    out.ends.clear();
    out.lines.clear();
    out.invalid.clear();
    out.arena.reserve(chunk.data.len());
    let base = chunk.data.as_ptr() as usize;
    chunk.for_each_line(|line_no, line| match line {
        Ok(line) => match entry_key(kind, MatchMode::Exact, line) {
            Ok(key) => {
                out.arena.extend_from_slice(&key);
                out.ends.push(out.arena.len());
                let start = line.as_ptr() as usize - base;
                out.lines.push((start, start + line.len()));
            }
            Err(e) => out.invalid.push((line_no, e.to_string())),
        },
        Err(reason) => out.invalid.push((line_no, reason)),
    });
    out
}

/// Holds `FILE.lock` while a run uses the state `FILE`.
fn lock_state(state: &Path) -> Result<std::fs::File> {
    let mut name = state.as_os_str().to_os_string();
    name.push(".lock");
    let path = PathBuf::from(name);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("{}: cannot create the state's lock file", path.display()))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "{}: another bloomgate dedup is using this state (its lock {} is held)",
            state.display(),
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("{}: cannot lock", path.display()))
        }
    }
}

/// The state to run with: the file's, or a new one as the arguments ask.
fn open_state(a: &DedupArgs, now: u64) -> Result<Layers> {
    let explicit = a.policy.policy.is_some()
        || a.policy.generations.is_some()
        || a.policy.window.is_some()
        || a.policy.window_secs.is_some()
        || a.policy.clear_at.is_some();
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
        if explicit {
            // The state keeps the settings it was created with; a different
            // policy is refused rather than silently ignored.
            let asked = policy_from(&a.policy, a.capacity, PolicyArg::Grow)?;
            if asked.name() != layers.policy().name() {
                return Err(UsageError(format!(
                    "{} has the fill policy {}; it cannot be changed to {} (start a new state)",
                    path.display(),
                    layers.policy(),
                    asked.name()
                ))
                .into());
            }
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
    let policy = policy_from(&a.policy, a.capacity, PolicyArg::Grow)?;
    let plan = Layers::plan_first(&policy, a.layout.into(), a.capacity, a.error_rate)
        .map_err(|e| UsageError(e.to_string()))?;
    let mut params = Params::from_plan(&plan, random_seed());
    params.key_kind = kind.as_u8();
    params.match_mode = MatchMode::Exact.as_u8();
    Layers::create(params, &policy, Purpose::Dedup, a.error_rate, now)
        .map_err(|e| UsageError(e.to_string()).into())
}

/// What a run counted.
#[derive(Default)]
struct Counts {
    lines: u64,
    passed: u64,
    seen: u64,
    invalid: u64,
}

/// Runs `bloomgate dedup`, printing on standard output.
pub fn run(a: DedupArgs) -> Result<i32> {
    run_to(a, std::io::stdout().lock())
}

/// Runs `bloomgate dedup`, printing into `out`. Returns the exit code.
pub fn run_to(a: DedupArgs, out: impl Write) -> Result<i32> {
    let started = Instant::now();
    let _lock = a.state.as_deref().map(lock_state).transpose()?;
    let mut layers = open_state(&a, unix_now())?;
    let kind = layers.kind;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, out);
    let mut counts = Counts::default();
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
    let result = input::process(
        a.inputs.clone(),
        Progress::default(),
        |chunk| canonicalize(chunk, kind, take_spare()),
        |chunk, mut ck| {
            ck.invalid.sort_by_key(|(l, _)| *l);
            for (line, reason) in ck.invalid.drain(..) {
                counts.invalid += 1;
                if counts.invalid <= SHOW_INVALID {
                    eprintln!(
                        "bloomgate: {}:{line}: invalid {kind} entry: {reason}",
                        names[chunk.input]
                    );
                }
            }
            let mut keys: Vec<&[u8]> = Vec::with_capacity(ck.ends.len());
            let mut start = 0;
            for &end in &ck.ends {
                keys.push(&ck.arena[start..end]);
                start = end;
            }
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
                        "the dedup state is full ({} entries) and its policy is refuse; use a larger --capacity or another --policy for a new state",
                        thousands(layers.items())
                    ),
                }
            }
            drop(keys);
            spare.lock().unwrap_or_else(|e| e.into_inner()).push(ck);
            Ok(())
        },
    );
    counts.lines += counts.invalid;
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
        "dedup: {} lines read, {} passed, {} dropped as seen, {} invalid; {} lines/s; state: {} entries, {}, policy {}; predicted rate of new entries wrongly taken as seen: {:.3e}",
        thousands(counts.lines),
        thousands(counts.passed),
        thousands(counts.seen),
        thousands(counts.invalid),
        thousands((counts.lines as f64 / secs.max(1e-9)) as u64),
        thousands(layers.items()),
        match (layers.policy(), layers.layers.len()) {
            (Policy::Rotate(_), n) => format!("{n} generation(s)"),
            (_, 1) => "1 layer".into(),
            (_, n) => format!("{n} layers"),
        },
        layers.policy(),
        layers.predicted_fp(),
    );
    if counts.invalid > SHOW_INVALID {
        eprintln!(
            "bloomgate: ... and {} more invalid entries",
            counts.invalid - SHOW_INVALID
        );
    }
    Ok(0)
}
