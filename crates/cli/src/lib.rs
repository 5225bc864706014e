//! The `bloomgate` command as a library: argument parsing ([`args`]), one
//! module per subcommand ([`cmd`]), parallel line input ([`input`]) and
//! what the commands print ([`report`]). `src/main.rs` is a thin binary over
//! [`cmd::run`]; benchmarks link this crate to drive the very same code with
//! inputs generated in-process ([`input::register_generated`]).
//!
//! ```no_run
//! use clap::Parser;
//! let cli = bloomgate_cli::args::Cli::parse_from(["bloomgate", "plan", "-n", "1e9", "-p", "1e-4"]);
//! let exit_code = bloomgate_cli::cmd::run(cli)?;
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod args;
pub mod cmd;
pub mod input;
pub mod keynotes;
pub mod lockfile;
pub mod report;
