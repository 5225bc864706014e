//! Arguments of the commands on filters in Redis: `push`, `pull`, and the
//! Redis options of the commands that take a Redis address.

use clap::Args;

/// Options of commands that accept a Redis filter address.
#[derive(Args, Debug, Clone, Default)]
pub struct RedisOpts {
    /// For a Redis filter address: read the password from the first line
    /// of this file (instead of the address, where `ps` shows it).
    #[arg(long, value_name = "FILE")]
    pub redis_password_file: Option<std::path::PathBuf>,
}

/// `bloomgate push`.
#[derive(Args, Debug)]
pub struct PushArgs {
    /// The filter file (blocked layout, one layer).
    pub file: String,
    /// Where to store it: redis://[USER[:PASSWORD]@]HOST[:PORT][/DB]/NAME or
    /// redis+cluster://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...]/NAME.
    pub address: String,
    /// Replace a filter of that name that exists already.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub redis: RedisOpts,
}

/// `bloomgate pull`.
#[derive(Args, Debug)]
pub struct PullArgs {
    /// The Redis filter address (as for push).
    pub address: String,
    /// The filter file to write (atomically), with its whitelist beside it.
    pub file: String,
    /// Overwrite the file if it exists.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub redis: RedisOpts,
}
