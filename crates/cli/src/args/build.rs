//! Arguments of the commands that make a filter: `plan`, `create`, `build`,
//! `dedup`, `union`, and the fill policy (`--policy` and its settings).

use clap::{Args, ValueEnum};

use super::redis::RedisOpts;
use super::{
    parse_fp, parse_items, parse_seed, parse_size, parse_size_or_zero, BuildLayoutArg, KeyArgs,
    KeysArg, LayoutArg, SizeArgs,
};

/// What a mutable filter does when it is full (`--policy` and its settings).
#[derive(Args, Debug, Clone, Default)]
pub struct PolicyArgs {
    /// What to do when the filter is full: grow (add a layer twice as large
    /// at half the rate), rotate (a ring of --generations generations over a
    /// --window of adds: entries are forgotten after the window), clear
    /// (empty it when --clear-at of its bits are set), refuse (adds fail).
    /// url and host blacklists (`build`, `create`) refuse rotate and clear; dedup states take them.
    #[arg(long, value_enum)]
    pub policy: Option<PolicyArg>,
    /// grow: capacity multiplier of each new layer (default 2, at most 32768).
    #[arg(long)]
    pub expansion: Option<u64>,
    /// rotate: generations in the ring (default 4).
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=64))]
    pub generations: Option<u32>,
    /// rotate: an entry stays at least this many new adds (default: the capacity).
    #[arg(long, value_parser = parse_items)]
    pub window: Option<u64>,
    /// rotate: an entry also stays at least this many seconds, unless the
    /// --window of adds ends first.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub window_secs: Option<u64>,
    /// clear: the fraction of bits set that clears the filter (default 0.8).
    #[arg(long, value_parser = parse_ratio)]
    pub clear_at: Option<f64>,
}

/// Fill policy on the command line.
#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum PolicyArg {
    /// Add layers (scalable Bloom filter).
    Grow,
    /// A ring of generations over a window.
    Rotate,
    /// Clear at a fill threshold.
    Clear,
    /// Refuse adds past capacity.
    Refuse,
}

/// Parses a ratio strictly between 0 and 1.
pub fn parse_ratio(s: &str) -> Result<f64, String> {
    let r: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    if !(r > 0.0 && r < 1.0) {
        return Err(format!("must be strictly between 0 and 1, got {s}"));
    }
    Ok(r)
}

/// Parses a share of a rate: a number from 0 to 0.5 (`0.03125`, `1/32`).
pub fn parse_share(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let r = match t.split_once('/') {
        Some((a, b)) => match (a.trim().parse::<f64>(), b.trim().parse::<f64>()) {
            (Ok(a), Ok(b)) if b != 0.0 => a / b,
            _ => return Err(format!("{s:?} is not a number or a fraction")),
        },
        None => t
            .parse()
            .map_err(|_| format!("{s:?} is not a number or a fraction"))?,
    };
    if !(0.0..=0.5).contains(&r) {
        return Err(format!("a share of the rate from 0 to 0.5, got {s}"));
    }
    Ok(r)
}

/// `bloomgate dedup`.
#[derive(Args, Debug)]
pub struct DedupArgs {
    /// The filter that remembers the entries seen, kept between runs: a
    /// filter file created on first use and saved atomically at the end of
    /// each successful run (default: in memory only); or a filter in Redis,
    /// redis://HOST[:PORT]/NAME or redis+cluster://HOST:PORT[,…]/NAME,
    /// made once with `bloomgate create ADDRESS --purpose dedup` and shared
    /// by every process that dedups through it (each entry passes in
    /// exactly one of them).
    #[arg(long, value_name = "FILE|ADDRESS")]
    pub state: Option<std::path::PathBuf>,
    /// What the entries are (default: url, or the state's kind). Entries are
    /// compared in canonical form: `HTTP://A.com/x#top` and `http://a.com/x`
    /// are one URL.
    #[arg(long, value_enum)]
    pub keys: Option<KeysArg>,
    /// Entries a new state is sized for (default 1000000; for rotate: the
    /// default window). An existing state keeps its size: a different value
    /// is refused.
    #[arg(long, short = 'n', visible_alias = "capacity", value_parser = parse_items)]
    pub items: Option<u64>,
    /// Rate of new entries wrongly taken as seen, for a new state (default
    /// 1e-6). An existing state keeps its rate: a different value is refused.
    #[arg(long, short = 'p', visible_alias = "error-rate", value_parser = parse_fp)]
    pub fp: Option<f64>,
    /// Bit layout of a new state (default blocked).
    #[arg(long, value_enum)]
    pub layout: Option<LayoutArg>,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub redis: RedisOpts,
    /// Input files, one entry per line (`-` for standard input; `.gz`, `.zst` decompressed).
    #[arg(default_value = "-")]
    pub inputs: Vec<String>,
}

/// `bloomgate plan`.
#[derive(Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    pub size: SizeArgs,
    #[command(flatten)]
    pub keys: KeyArgs,
    /// Print JSON (`{"layouts": [...]}`).
    #[arg(long)]
    pub json: bool,
    /// Also size this layout, beside blocked and classic: counting or
    /// cuckoo (the filters that can delete entries) show their cost.
    #[arg(long, value_enum)]
    pub layout: Option<BuildLayoutArg>,
}

/// `bloomgate create`.
#[derive(Args, Debug)]
pub struct CreateArgs {
    /// The filter file to create, or a Redis filter address
    /// (redis://HOST:PORT/NAME, redis+cluster://HOST:PORT,.../NAME).
    pub filter: String,
    #[command(flatten)]
    pub size: SizeArgs,
    #[command(flatten)]
    pub keys: KeyArgs,
    /// Bit layout.
    #[arg(long, value_enum, default_value = "blocked")]
    pub layout: LayoutArg,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// What the filter is for: blacklist (entries must never be forgotten)
    /// or dedup (dedup or cache state: rotate and clear are allowed).
    #[arg(long, value_enum, default_value = "blacklist")]
    pub purpose: PurposeArg,
    /// Hash seed (default: random).
    #[arg(long, value_parser = parse_seed)]
    pub seed: Option<u64>,
    /// Replace a filter of that name (file or Redis) that exists already.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub redis: RedisOpts,
}

/// What a filter is for, on the command line.
#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum PurposeArg {
    /// A blacklist: an entry once added must stay.
    Blacklist,
    /// Dedup or cache state: forgetting old entries is acceptable.
    Dedup,
}

/// `bloomgate build`.
#[derive(Args, Debug, Clone)]
pub struct BuildArgs {
    #[command(flatten)]
    pub size: SizeArgs,
    #[command(flatten)]
    pub keys: KeyArgs,
    /// Filter layout: the Bloom filters blocked and classic, or counting and
    /// cuckoo, which can delete entries (`bloomgate remove`) and cost more
    /// memory (`bloomgate plan --layout counting`). Those two are built in
    /// memory (a --memory smaller than the filter is refused) and take no
    /// --policy or --spill.
    #[arg(long, value_enum, default_value = "blocked")]
    pub layout: BuildLayoutArg,
    /// Output filter file (written atomically).
    #[arg(long, short = 'o')]
    pub output: String,
    /// Hash seed (default: random). Filters built with the same seed, size
    /// and layout can be combined with `union`.
    #[arg(long, value_parser = parse_seed)]
    pub seed: Option<u64>,
    /// Stop at the first invalid entry instead of skipping it.
    #[arg(long)]
    pub strict: bool,
    /// Overwrite the output file if it exists.
    #[arg(long)]
    pub force: bool,
    /// Write the filter even when it is useless: no valid entry (an empty
    /// filter, e.g. to fill later with `add`), or a predicted
    /// false-positive rate more than ten times the target (more entries
    /// than --items). Without it such a build fails (exit 1) and writes
    /// nothing.
    #[arg(long)]
    pub allow_useless: bool,
    /// Most memory the filter's bits may take while building (`12G`, `800M`;
    /// default: 60 % of the memory available now). A larger filter is built
    /// in slices, one pass over the inputs per slice.
    #[arg(long, value_parser = parse_size)]
    pub memory: Option<u64>,
    /// Where standard input is spooled (compressed) when a sliced build
    /// needs more than one pass over it, and where records are spilled
    /// (default: the output's directory). A ribbon build writes its
    /// partition files here: about 5.25 bytes per key, removed as the
    /// output grows, so its peak is the larger of the two on one
    /// filesystem (52.5 GB for 10^10 keys, then a 17.2 GB file at 1e-4);
    /// it refuses up front (with --items) when they cannot fit.
    #[arg(long)]
    pub tmp_dir: Option<std::path::PathBuf>,
    /// Most disk a sliced build of the blocked layout may use in --tmp-dir
    /// for 8-byte records of the items of its last slices, which then need
    /// no pass over the inputs (`30G`; `0` for none; default: 90 % of the
    /// free space, less the output file's size when on the same disk).
    #[arg(long, value_parser = parse_size_or_zero)]
    pub spill: Option<u64>,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Ribbon: the share of --fp kept for the keys added after the build
    /// (`bloomgate add`, BF.ADD), which go into a small Bloom delta beside
    /// the file: the solution is planned for fp × (1 − share), and the
    /// union of both stays within --fp. Default 1/32 (0.03125: +0.046 bits
    /// per item); 0 gives the most compact file, which takes no adds; at
    /// most 0.5.
    #[arg(long, value_parser = parse_share)]
    pub delta_share: Option<f64>,
    /// Ribbon: also take the keys added to this ribbon file since its build
    /// (its FILE.delta) as entries, so the new file holds them in its
    /// solution. When FILE is the output (`--fold X.bgf -o X.bgf --force`)
    /// the folded keys leave X.bgf.delta once the new file is in place
    /// (keys added meanwhile stay). Repeatable.
    #[arg(long, value_name = "FILE")]
    pub fold: Vec<String>,
    /// Read a squidGuard/UT1 blacklist directory (`CATEGORY/domains`,
    /// `CATEGORY/urls`) instead of input files: a `url` filter in `prefix`
    /// mode per category, `-o DIR/CATEGORY.bgf`; all in one filter when
    /// `-o` ends in `.bgf`.
    #[arg(long, value_name = "DIR")]
    pub squidguard: Option<std::path::PathBuf>,
    /// Input files, one entry per line (`-` for standard input; `.gz`, `.zst` decompressed).
    #[arg(default_value = "-")]
    pub inputs: Vec<String>,
}

/// `bloomgate union`.
#[derive(Args, Debug)]
pub struct UnionArgs {
    /// First filter.
    pub a: String,
    /// Second filter.
    pub b: String,
    /// Output filter file.
    #[arg(long, short = 'o')]
    pub output: String,
    /// Overwrite the output file if it exists.
    #[arg(long)]
    pub force: bool,
}
