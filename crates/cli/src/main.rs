//! The `bloomgate` command: argument parsing, dispatch and exit codes only;
//! the work is done by the library crates.
//!
//! Exit codes: 0 success, 1 runtime error (bad file, I/O, invalid input
//! reported on stderr), 2 usage error. A closed stdout (e.g. `| head`) is a
//! success.

use bloomgate_cli::{args, cmd, report};
use clap::Parser;

/// Process exit codes.
const EXIT_RUNTIME: i32 = 1;
const EXIT_USAGE: i32 = 2;

fn main() {
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

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
