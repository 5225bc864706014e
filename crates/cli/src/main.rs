//! The `bloomgate` command: argument parsing, dispatch and exit codes only;
//! the work is done by the library crates.
//!
//! Exit codes: 0 success, 1 not done (an error, a query left unanswered, a
//! useless build), 2 usage error; `check -q` answers 0 hit / 1 no hit / 2
//! unsure. A closed stdout (e.g. `| head`) is a success. The rule is
//! written once, in [`args::EXIT_CODES`] (shown by `--help`).
//!
//! The libraries' log events (`tracing`: the server's startup line,
//! replay and failure reports) go to stderr, one line each, filtered by
//! `RUST_LOG` (default: `info` for bloomgate's crates, `warn` for others).

use bloomgate_cli::{args, cmd, report};
use clap::Parser;

/// Process exit codes.
const EXIT_RUNTIME: i32 = 1;
const EXIT_USAGE: i32 = 2;

/// Which log events are shown when `RUST_LOG` is not set.
const DEFAULT_LOG: &str = "warn,bloomgate_server=info,bloomgate_blacklist=info,bloomgate_engine=info,bloomgate_url=info,bloomgate_redis=info,bloomgate_cli=info";

fn main() {
    init_logging();
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    match cmd::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            if is_broken_pipe(&err) {
                std::process::exit(0);
            }
            let code = if err.downcast_ref::<cmd::UsageError>().is_some() {
                EXIT_USAGE
            } else {
                EXIT_RUNTIME
            };
            eprintln!("bloomgate: {}", report::one_line(&err));
            std::process::exit(code);
        }
    }
}

/// Sends `tracing` events to stderr: a level and the message, no time (a
/// service manager adds its own), colours only on a terminal.
fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .with_target(false)
        .try_init();
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
