//! One module per subcommand. Each takes its parsed arguments and returns the
//! process exit code; errors propagate as `anyhow::Error` with context.

mod build;
mod check;
mod info;
mod plan;
mod serve;
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
    match cli.command {
        Command::Plan(a) => plan::run(a),
        Command::Build(a) => build::build(a),
        Command::Add(a) => build::add(a),
        Command::Check(a) => check::run(a),
        Command::Info(a) => info::run(a),
        Command::Union(a) => union::run(a),
        Command::Whitelist(c) => whitelist::run(c),
        Command::Url(c) => url::run(c),
        Command::Serve(a) => serve::run(a),
    }
}

/// Fails with a usage error if `given` is set and differs from the filter's kind/mode.
pub fn check_kind(
    path: &str,
    list: &bloomgate_blacklist::Blacklist,
    keys: Option<crate::args::KeysArg>,
    mode: Option<crate::args::MatchArg>,
) -> Result<()> {
    if let Some(k) = keys {
        let k: bloomgate_url::KeyKind = k.into();
        if k != list.kind() {
            return Err(UsageError(format!(
                "{path} holds {} keys, but --keys {k} was given",
                list.kind()
            ))
            .into());
        }
    }
    if let Some(m) = mode {
        let m: bloomgate_url::MatchMode = m.into();
        if m != list.mode() {
            return Err(UsageError(format!(
                "{path} was built for {} matching, but --match {m} was given",
                list.mode()
            ))
            .into());
        }
    }
    Ok(())
}
