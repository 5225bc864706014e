//! Arguments of the commands on a list: `check`, `add`, `remove`, `info`,
//! `whitelist`, and `repair` of a data directory.

use clap::{Args, Subcommand};

use super::redis::RedisOpts;
use super::{parse_size, KeysArg, MatchArg};

/// `bloomgate repair`.
#[derive(Args, Debug)]
pub struct RepairArgs {
    /// The data directory (the `--data-dir` of bloomgate serve).
    pub dir: std::path::PathBuf,
    /// Report what would be kept and lost; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `bloomgate check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The filter file, or a Redis filter: redis://[USER[:PASSWORD]@]HOST[:PORT][/DB]/NAME
    /// or redis+cluster://HOST:PORT[,HOST:PORT...]/NAME (see `bloomgate push`).
    pub filter: String,
    /// Input files, one query per line (`-` for standard input).
    #[arg(default_value = "-")]
    pub inputs: Vec<String>,
    /// Print only the number of hits.
    #[arg(long, conflicts_with = "json")]
    pub count: bool,
    /// Print the query lines that are NOT on the list (invalid queries are
    /// neither: they are reported on stderr).
    #[arg(long, conflicts_with_all = ["count", "json"])]
    pub misses: bool,
    /// Print nothing; the exit code answers, as `grep -q`: 0 if some query
    /// is on the list, 1 if none is, 2 if none is but some query was
    /// invalid or an error happened (never 1 when unsure).
    #[arg(long, short = 'q', conflicts_with_all = ["count", "json", "misses"])]
    pub quiet: bool,
    /// Print one JSON object per query: item, hit, whitelisted, matched.
    #[arg(long)]
    pub json: bool,
    /// Key kind of the queries; must match the filter's (default: the filter's).
    #[arg(long, value_enum)]
    pub keys: Option<KeysArg>,
    /// Matching mode; must match the filter's (default: the filter's).
    #[arg(long = "match", value_enum)]
    pub match_mode: Option<MatchArg>,
    /// Check the filter's data checksum before answering.
    #[arg(long)]
    pub verify: bool,
    /// Most memory the filter's bits may take (`12G`, `800M`). A larger
    /// filter is checked in slices: one pass over the inputs per slice (plus
    /// one bit of memory per lookup key), answering exactly as in memory.
    /// Without it, the filter is memory-mapped whatever its size.
    #[arg(long, value_parser = parse_size)]
    pub memory: Option<u64>,
    /// Where standard input is spooled (compressed) for a check in slices
    /// (default: the system's temporary directory).
    #[arg(long)]
    pub tmp_dir: Option<std::path::PathBuf>,
    /// Answer from the filter files alone (the last snapshot), without the
    /// live adds that a served data directory's journal and write-ahead log
    /// hold (by default they are re-inserted in memory; nothing is written).
    #[arg(long)]
    pub snapshot_only: bool,
    #[command(flatten)]
    pub redis: RedisOpts,
}

/// `bloomgate add`.
#[derive(Args, Debug)]
pub struct AddArgs {
    /// The filter file (modified in place; a counting or cuckoo file is
    /// replaced whole, atomically, at the end), or a Redis filter address
    /// (redis://HOST:PORT/NAME, redis+cluster://HOST:PORT,.../NAME).
    pub filter: String,
    /// Input files, one entry per line (`-` for standard input).
    #[arg(default_value = "-")]
    pub inputs: Vec<String>,
    /// Key kind of the entries; must match the filter's.
    #[arg(long, value_enum)]
    pub keys: Option<KeysArg>,
    /// Stop at the first invalid entry instead of skipping it.
    #[arg(long)]
    pub strict: bool,
    /// Redis filters: print each entry that was new (not already present)
    /// on standard output. Of several processes adding the same entry at
    /// once, exactly one is told it is new (add-if-absent).
    #[arg(long)]
    pub print_new: bool,
    #[command(flatten)]
    pub redis: RedisOpts,
}

/// `bloomgate remove`.
#[derive(Args, Debug)]
pub struct RemoveArgs {
    /// The counting or cuckoo filter file (replaced atomically).
    pub filter: String,
    /// Input files, one entry per line (`-` for standard input).
    #[arg(default_value = "-")]
    pub inputs: Vec<String>,
    /// Key kind of the entries; must match the filter's.
    #[arg(long, value_enum)]
    pub keys: Option<KeysArg>,
    /// Stop at the first invalid entry (nothing is saved then) instead of
    /// skipping it.
    #[arg(long)]
    pub strict: bool,
}

/// `bloomgate info`.
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// The filter file, or a Redis filter address.
    pub filter: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Read the whole file and check its data checksum.
    #[arg(long)]
    pub verify: bool,
    /// Answer from the filter files alone (the last snapshot), without the
    /// live adds that a served data directory's journal and write-ahead log
    /// hold (by default they are re-inserted in memory; nothing is written).
    #[arg(long)]
    pub snapshot_only: bool,
    #[command(flatten)]
    pub redis: RedisOpts,
}

/// `bloomgate whitelist …`.
#[derive(Subcommand, Debug)]
pub enum WhitelistCmd {
    /// Add items (normalized with the filter's key kind).
    Add {
        /// The filter file, or a Redis filter address.
        filter: String,
        /// Items to whitelist.
        #[arg(required = true)]
        items: Vec<String>,
        #[command(flatten)]
        redis: RedisOpts,
    },
    /// Remove items.
    Remove {
        /// The filter file, or a Redis filter address.
        filter: String,
        /// Items to remove.
        #[arg(required = true)]
        items: Vec<String>,
        #[command(flatten)]
        redis: RedisOpts,
    },
    /// List the whitelisted keys.
    List {
        /// The filter file, or a Redis filter address.
        filter: String,
        #[command(flatten)]
        redis: RedisOpts,
    },
}
