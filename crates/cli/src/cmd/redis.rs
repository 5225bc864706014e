//! Filters stored in Redis (`bloomgate_redis`): `push`, `pull`, and the
//! Redis side of `add` (`check`, `info` and `whitelist` go through
//! `bloomgate_list::List`, as for files).

use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{Context, Result};

use bloomgate_redis::{Address, RedisFilter};
use bloomgate_url::entry_key;

use crate::args::{AddArgs, PullArgs, PushArgs, RedisOpts};
use crate::cmd::UsageError;
use crate::input::{self, Progress};
use crate::report::{self, bytes, thousands};

/// True if `filter` names a Redis filter rather than a file.
pub fn is_address(filter: &str) -> bool {
    bloomgate_redis::is_redis_address(filter)
}

/// Parses an address (a usage error if it does not parse) and applies the
/// password file.
pub fn address(s: &str, opts: &RedisOpts) -> Result<Address> {
    let a = match Address::parse(s) {
        Ok(a) => a,
        Err(e @ bloomgate_redis::Error::Address { .. }) => {
            return Err(UsageError(e.to_string()).into())
        }
        Err(e) => return Err(e.into()),
    };
    match &opts.redis_password_file {
        Some(p) => Ok(a.with_password_file(p)?),
        None => Ok(a),
    }
}

/// Opens a Redis filter.
pub fn open(s: &str, opts: &RedisOpts) -> Result<RedisFilter> {
    let a = address(s, opts)?;
    RedisFilter::open(&a).with_context(|| format!("opening {}", a.display()))
}

/// Runs `bloomgate push`.
pub fn push(a: PushArgs) -> Result<i32> {
    let started = Instant::now();
    let addr = address(&a.address, &a.redis)?;
    if bloomgate_blacklist::datadir::locate(Path::new(&a.file)).is_some() {
        eprintln!(
            "bloomgate: warning: {}: pushing the filter file as it is; adds a server has logged in its data directory since its last snapshot are not included",
            a.file
        );
    }
    let size = std::fs::metadata(&a.file)
        .with_context(|| a.file.clone())?
        .len();
    warn_eviction(&addr);
    let progress = Progress::default();
    let bar = report::progress_bar(Some(size), &progress, Some("push".into()));
    let result = bloomgate_redis::push(Path::new(&a.file), &addr, a.force, &|n| {
        progress.fetch_add(n, Ordering::Relaxed);
    });
    report::finish(bar);
    let t = result.with_context(|| format!("pushing {} to {}", a.file, addr.display()))?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "pushed {} to {}: {} shards, {}, {} items, {} whitelisted, {secs:.2} s ({}/s)",
        a.file,
        addr.display(),
        thousands(t.shards),
        bytes(t.bytes),
        thousands(t.items),
        thousands(t.whitelist),
        bytes((t.bytes as f64 / secs.max(1e-9)) as u64)
    );
    Ok(0)
}

/// Warns when the target's masters may evict shard keys
/// (`maxmemory-policy allkeys-*`), or when that could not be checked.
fn warn_eviction(addr: &Address) {
    match bloomgate_redis::Store::new(addr) {
        Ok(store) => {
            for w in store.eviction_warnings() {
                eprintln!("bloomgate: warning: {w}");
            }
        }
        Err(e) => eprintln!("bloomgate: warning: could not check the maxmemory-policy: {e}"),
    }
}

/// Runs `bloomgate pull`.
pub fn pull(a: PullArgs) -> Result<i32> {
    let started = Instant::now();
    let addr = address(&a.address, &a.redis)?;
    let progress = Progress::default();
    // The size is known once the metadata is read; a spinner until then
    // would say little, so the bar counts bytes without a total.
    let bar = report::progress_bar(None, &progress, Some("pull".into()));
    let result = bloomgate_redis::pull(&addr, Path::new(&a.file), a.force, &|n| {
        progress.fetch_add(n, Ordering::Relaxed);
    });
    report::finish(bar);
    let t = result.with_context(|| format!("pulling {} into {}", addr.display(), a.file))?;
    eprintln!(
        "pulled {} into {}: {} shards, {}, {} items, {} whitelisted, checksum {:#018x}, {:.2} s",
        addr.display(),
        a.file,
        thousands(t.shards),
        bytes(t.bytes),
        thousands(t.items),
        thousands(t.whitelist),
        t.data_checksum,
        started.elapsed().as_secs_f64()
    );
    Ok(0)
}

/// What one chunk of an add did.
struct AddOut {
    lines: u64,
    new: u64,
    /// Entries sent whose reply never came back (they may have been added).
    unknown: u64,
    /// Valid entries not added (not sent after a failure, or refused).
    not_added: u64,
    invalid: Vec<(u64, String)>,
    /// With --print-new: the new entries' lines and those of unknown
    /// outcome, each ending in a newline.
    new_lines: Vec<u8>,
    /// The failure that stopped the chunk's adds.
    error: Option<bloomgate_redis::Error>,
}

/// Runs `bloomgate add` on a Redis filter: every line's key gets one add
/// (`BITFIELD` in a script); the new ones are counted (and printed with
/// --print-new).
///
/// A claim is never lost: when a node fails, the replies that came back
/// are still honoured (their new entries printed), and entries sent
/// without a reply — which may have been added, so that a later run would
/// call them present — are printed too and counted as "outcome unknown".
/// After a failure no further chunk is sent; the run exits 1 with what
/// happened: new, unknown, and not added (run again for those).
pub fn add(a: AddArgs) -> Result<i32> {
    let started = Instant::now();
    let filter = open(&a.filter, &a.redis)?;
    if let Some(k) = a.keys {
        let k: bloomgate_url::KeyKind = k.into();
        if k != filter.kind() {
            return Err(UsageError(format!(
                "{} holds {} keys, but --keys {k} was given",
                a.filter,
                filter.kind()
            ))
            .into());
        }
    }
    let (kind, mode) = (filter.kind(), filter.mode());
    let progress = Progress::default();
    let bar = report::progress_bar(input::total_size(&a.inputs), &progress, None);
    let (mut lines, mut new) = (0u64, 0u64);
    let mut invalid = report::Invalid::new(kind, a.strict);
    let (mut unknown, mut not_added) = (0u64, 0u64);
    let mut failure: Option<bloomgate_redis::Error> = None;
    // Set at the first failure: chunks that start after it send nothing.
    let failed = std::sync::atomic::AtomicBool::new(false);
    let names = a.inputs.clone();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = input::process(
        a.inputs.clone(),
        progress,
        |chunk| -> Result<AddOut, bloomgate_redis::Error> {
            let mut o = AddOut {
                lines: 0,
                new: 0,
                unknown: 0,
                not_added: 0,
                invalid: Vec::new(),
                new_lines: Vec::new(),
                error: None,
            };
            let mut keys = Vec::new();
            let mut entries = Vec::new();
            chunk.for_each_line(|line_no, line| {
                o.lines += 1;
                match line.map(|l| (l, entry_key(kind, mode, l).map_err(|e| e.to_string()))) {
                    Ok((l, Ok(k))) => {
                        keys.push(k);
                        entries.push(l);
                    }
                    Ok((_, Err(reason))) | Err(reason) => o.invalid.push((line_no, reason)),
                }
            });
            // --strict: nothing of a chunk with an invalid entry is added.
            if a.strict && !o.invalid.is_empty() {
                return Ok(o);
            }
            if failed.load(Ordering::Relaxed) {
                o.not_added = keys.len() as u64;
                return Ok(o);
            }
            let report = filter.add_keys(&keys);
            for (entry, outcome) in entries.iter().zip(&report.outcomes) {
                use bloomgate_redis::Added;
                let print = match outcome {
                    Added::New => {
                        o.new += 1;
                        true
                    }
                    Added::Unknown => {
                        o.unknown += 1;
                        true
                    }
                    Added::NotAdded => {
                        o.not_added += 1;
                        false
                    }
                    Added::Present => false,
                };
                if print && a.print_new {
                    o.new_lines.extend_from_slice(entry);
                    o.new_lines.push(b'\n');
                }
            }
            if report.error.is_some() {
                failed.store(true, Ordering::Relaxed);
            }
            o.error = report.error;
            Ok(o)
        },
        |chunk, o| {
            let mut o = o?;
            lines += o.lines;
            new += o.new;
            unknown += o.unknown;
            not_added += o.not_added;
            // Printed even after a failure: these are claims.
            out.write_all(&o.new_lines)?;
            if chunk.paused {
                out.flush()?;
            }
            if let Some(e) = o.error {
                failure.get_or_insert(e);
            }
            invalid.chunk(&names[chunk.input], &mut o.invalid)
        },
    );
    report::finish(bar);
    out.flush()?;
    let counts = || {
        format!(
            "{} new items were added{}, {} items may or may not have been added (sent, no reply{}), {} valid items were not added (run again to add them)",
            thousands(new),
            if a.print_new { " and printed" } else { "" },
            thousands(unknown),
            if a.print_new {
                "; printed with the new ones: treat them as new"
            } else {
                ""
            },
            thousands(not_added)
        )
    };
    result.with_context(|| format!("adding to {}: {}", filter.address().display(), counts()))?;
    if let Some(e) = failure {
        return Err(anyhow::Error::new(e).context(format!(
            "adding to {}: {}",
            filter.address().display(),
            counts()
        )));
    }
    invalid.finish();
    let invalid = invalid.count();
    let items = filter.items()?;
    let planned = filter.meta().params.planned_items;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "added to {}: {}, {} ({} in filter), {} invalid, {secs:.2} s, {} lines/s, {}",
        filter.address().display(),
        report::count(lines, "line", "lines"),
        report::count(new, "new item", "new items"),
        thousands(items),
        thousands(invalid),
        thousands((lines as f64 / secs.max(1e-9)) as u64),
        report::rates(
            filter.kind(),
            filter.mode(),
            filter.predicted_fp(items),
            filter.meta().params.target_fp
        )
    );
    let redirected = filter.store().redirected();
    if redirected > 0 {
        eprintln!(
            "bloomgate: {} adds were redirected to other nodes (slots moving) and resent",
            thousands(redirected)
        );
    }
    if items > planned {
        eprintln!(
            "bloomgate: warning: {} items exceed the planned {}; the predicted false-positive rate is now {:.3e} per lookup instead of {:.3e}",
            thousands(items),
            thousands(planned),
            filter.predicted_fp(items),
            filter.meta().params.target_fp
        );
    }
    Ok(0)
}
