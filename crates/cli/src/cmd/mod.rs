//! One module per subcommand. Each takes its parsed arguments and returns the
//! process exit code; errors propagate as `anyhow::Error` with context.

mod build;
pub mod check;
mod create;
pub mod dedup;
mod deletable;
mod info;
mod partition;
mod plan;
pub mod redis;
mod remove;
mod repair;
mod ribbon;
pub mod serve;
mod spill;
pub mod squid;
mod union;
mod url;
mod whitelist;

use anyhow::Result;

use crate::args::{Cli, Command};

/// An error in how bloomgate was called (exit code 2), as opposed to a
/// failure while doing the work (exit code 1).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Runs the parsed command.
pub fn run(cli: Cli) -> Result<i32> {
    check_kernel_name()?;
    // Commands that read inputs stop cleanly on Ctrl-C (the server handles
    // its signals itself).
    if matches!(
        cli.command,
        Command::Build(_)
            | Command::Add(_)
            | Command::Remove(_)
            | Command::Check(_)
            | Command::Dedup(_)
    ) {
        crate::input::stop_on_signals();
    }
    match cli.command {
        Command::Plan(a) => plan::run(a),
        Command::Create(a) => create::run(a),
        Command::Build(mut a) => match a.squidguard.take() {
            Some(dir) => squid::build_squidguard(a, &dir),
            None => build::build(a),
        },
        Command::Add(a) => build::add(a),
        Command::Remove(a) => remove::run(a),
        Command::Check(a) if a.quiet => match check::run(a) {
            // With -q the exit code is the answer: an error must not look
            // like "not on the list" (1), so it is 2, as grep's.
            Err(e) if e.downcast_ref::<UsageError>().is_none() => {
                eprintln!("bloomgate: {}", crate::report::one_line(&e));
                Ok(2)
            }
            other => other,
        },
        Command::Check(a) => check::run(a),
        Command::Info(a) => info::run(a),
        Command::Union(a) => union::run(a),
        Command::Whitelist(c) => whitelist::run(c),
        Command::Url(c) => url::run(c),
        Command::Serve(a) => serve::run(a),
        Command::Push(a) => redis::push(a),
        Command::Pull(a) => redis::pull(a),
        Command::Dedup(a) => dedup::run(a),
        Command::Repair(a) => repair::run(a),
        Command::SquidHelper(a) => squid::run(a),
    }
}

/// Opens a filter for reading, as every read-only command does: all its
/// layers and, in a served data directory, the live adds of its journal and
/// write-ahead log (unless `snapshot_only`). Says on stderr what it replayed
/// and what it skipped, so a user is never left guessing which state
/// answered.
pub fn open_read(path: &str, snapshot_only: bool) -> Result<bloomgate_blacklist::Blacklist> {
    use bloomgate_blacklist::{Blacklist, LogMode};
    let mode = if snapshot_only {
        LogMode::SnapshotOnly
    } else {
        LogMode::Replay
    };
    let list = Blacklist::open_read(path, mode)?;
    report_opened(path, list.opened(), snapshot_only);
    Ok(list)
}

/// Opens the list at `address` (a filter file of any layout, or a Redis
/// address) as `options` say, with the stderr notes of [`report_opened`].
pub fn open_list(
    address: &str,
    options: &bloomgate_list::OpenOptions,
) -> Result<bloomgate_list::List> {
    let list = bloomgate_list::List::open_with(address, options).map_err(list_error)?;
    report_opened(address, list.opened(), options.snapshot_only);
    Ok(list)
}

/// Reads every file of a list whole and checks its data checksum (a Bloom
/// filter's layers as they are on disk: before any live adds are
/// re-inserted).
pub fn verify_files(path: &str) -> Result<()> {
    let snapshot = bloomgate_list::OpenOptions {
        snapshot_only: true,
        ..bloomgate_list::OpenOptions::default()
    };
    bloomgate_list::List::open_with(path, &snapshot)
        .and_then(|list| list.verify())
        .map_err(list_error)
}

/// A list's error for the command line: one that says the list was asked
/// for something that does not apply to it (an option of another store, a
/// bad address) is a usage error (exit code 2).
pub fn list_error(e: bloomgate_list::Error) -> anyhow::Error {
    if e.is_usage() {
        UsageError(e.to_string()).into()
    } else {
        e.into()
    }
}

/// The stderr notes of [`open_read`] and of in-place updates.
pub fn report_opened(path: &str, o: &bloomgate_blacklist::Opened, snapshot_only: bool) {
    for d in &o.damaged {
        eprintln!("bloomgate: warning: {d}");
    }
    if let Some(r) = &o.replay {
        if r.new > 0 || r.chunks > 0 {
            eprintln!(
                "bloomgate: {path}: included {} live add(s){} from the data directory's journal and write-ahead log that the filter files do not hold yet{}",
                r.new,
                if r.chunks > 0 {
                    format!(" and {} loaded chunk(s)", r.chunks)
                } else {
                    String::new()
                },
                if o.served {
                    " (a server is running: this is the state as of now)"
                } else {
                    ""
                }
            );
        }
        if r.unconvertible > 0 {
            eprintln!(
                "bloomgate: warning: {path}: {} live add(s) were made under other key rules and cannot be expressed in this filter's",
                r.unconvertible
            );
        }
    }
    if snapshot_only && o.data_dir.is_some() {
        eprintln!(
            "bloomgate: {path}: --snapshot-only: answering from the filter files alone; live adds since the last snapshot are not included"
        );
    }
}

/// Fails with a usage error if `keys` or `mode` is given and differs from
/// the filter's key kind or match mode.
pub fn check_kind(
    path: &str,
    (kind, match_mode): (bloomgate_url::KeyKind, bloomgate_url::MatchMode),
    keys: Option<crate::args::KeysArg>,
    mode: Option<crate::args::MatchArg>,
) -> Result<()> {
    if let Some(k) = keys {
        let k: bloomgate_url::KeyKind = k.into();
        if k != kind {
            return Err(UsageError(format!(
                "{path} holds {kind} keys, but --keys {k} was given"
            ))
            .into());
        }
    }
    if let Some(m) = mode {
        let m: bloomgate_url::MatchMode = m.into();
        if m != match_mode {
            return Err(UsageError(format!(
                "{path} was built for {match_mode} matching, but --match {m} was given"
            ))
            .into());
        }
    }
    Ok(())
}

/// A `BLOOMGATE_KERNEL` that names no kernel this CPU runs is a usage
/// error, not silently the default.
fn check_kernel_name() -> Result<()> {
    use bloomgate_engine::arch::Kernel;
    match std::env::var("BLOOMGATE_KERNEL") {
        Ok(name) if Kernel::by_name(&name).is_none() => Err(UsageError(format!(
            "BLOOMGATE_KERNEL={name:?} is not a kernel this CPU supports (supported: {})",
            Kernel::supported()
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into()),
        _ => Ok(()),
    }
}

/// Counts the entries (non-empty lines) of input files, for a build whose
/// `--items` was left out: one extra pass over the inputs, said on stderr.
pub fn count_entries(inputs: &[String]) -> Result<u64> {
    if inputs.iter().any(|i| i == "-") {
        return Err(UsageError(
            "--items is required when reading standard input (it cannot be read twice to count it)"
                .into(),
        )
        .into());
    }
    let started = std::time::Instant::now();
    let mut n = 0u64;
    crate::input::process(
        inputs.to_vec(),
        crate::input::Progress::default(),
        |chunk| {
            let mut c = 0u64;
            chunk.for_each_line(|_, _| c += 1);
            c
        },
        |_, c| {
            n += c;
            Ok(())
        },
    )?;
    if n == 0 {
        anyhow::bail!("the inputs hold no entries (and --items was not given)");
    }
    eprintln!(
        "bloomgate: --items not given: counted {} entries in the inputs ({:.1} s); planning for that many",
        crate::report::thousands(n),
        started.elapsed().as_secs_f64()
    );
    Ok(n)
}
