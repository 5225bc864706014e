//! Command-line arguments: each flag defined once, with its help text and
//! validation. Parsing does no I/O; values that are invalid (p ≤ 0, n = 0,
//! non-numbers) are usage errors, exit code 2.

use clap::{Args, Parser, Subcommand, ValueEnum};

use bloomgate_engine::Layout;
use bloomgate_url::{KeyKind, MatchMode};

/// The exit-code rule of every command (also in the README).
pub const EXIT_CODES: &str = "\
Exit codes (every command):
  0  done: every line handled, every answer given (build and add skip invalid
     entries with a warning on stderr)
  1  not done: an error (file, I/O, damage, Redis), a query that could not be
     answered (check: an invalid query line; the other answers are printed),
     or a build whose filter would be useless (no valid entry, or a predicted
     rate more than 10 times the target; --allow-useless writes it anyway)
  2  usage error: bad arguments, nothing was done
  check -q answers with its exit code, as grep -q: 0 a hit, 1 no hit,
     2 no hit and unsure (an invalid query or an error)
  A closed standard output (`| head`) is a success.";

/// bloomgate: is this URL or key on the blacklist? Bloom filters for
/// blacklists of billions of entries.
#[derive(Parser, Debug)]
#[command(name = "bloomgate", version, about, propagate_version = true, after_help = EXIT_CODES)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Compute filter sizes for N items at false-positive rate P.
    Plan(PlanArgs),
    /// Create an empty filter: a file, or a Redis filter address.
    ///
    /// The filter is sized by --items and --fp as `build` sizes it, with a
    /// fill policy for a filter that takes adds (`--policy grow|refuse`;
    /// rotate and clear for dedup and cache filters with `--purpose
    /// dedup`). A Redis address gets a blocked, fixed or refuse filter,
    /// pushed as `bloomgate push` does.
    Create(CreateArgs),
    /// Build a filter file from lists of entries (one per line).
    Build(BuildArgs),
    /// Print the input lines that are (probably) in the filter.
    Check(CheckArgs),
    /// Add entries to an existing filter file in place.
    Add(AddArgs),
    /// Delete entries from a counting or cuckoo filter file.
    ///
    /// Each entry (canonicalized by the filter's key kind, as `add` does)
    /// loses one copy; the file is replaced whole, atomically, at the end:
    /// an error or Ctrl-C leaves it unchanged. Entries that are not present
    /// are counted and named on stderr, and change nothing. Bloom filters
    /// (blocked, classic) cannot delete and are refused; build a deletable
    /// one with `bloomgate build --layout counting|cuckoo`.
    ///
    /// RISK — remove only entries that were added. An entry that was never
    /// added may still test present (a false positive, at the filter's
    /// rate); removing it takes away another entry's counts (counting) or
    /// fingerprint (cuckoo), and that other entry may then test absent: a
    /// false negative, which the filter cannot detect. Entries added twice
    /// are stored twice: remove them as many times as they were added, never
    /// more.
    Remove(RemoveArgs),
    /// Show a filter file's parameters and statistics.
    Info(InfoArgs),
    /// Combine two compatible filters (same layout, size, k, seed).
    Union(UnionArgs),
    /// Manage the exact whitelist of known false positives.
    #[command(subcommand)]
    Whitelist(WhitelistCmd),
    /// URL canonicalization tools.
    #[command(subcommand)]
    Url(UrlCmd),
    /// Serve the filters of a directory, or of a Redis server or cluster
    /// (`--store`), over HTTP/JSON and the Redis protocol.
    Serve(ServeArgs),
    /// Upload a filter file to Redis or Redis Cluster (blocked layout only).
    ///
    /// The filter's data goes up shard by shard (1 MB strings,
    /// byte-identical to the file), in parallel per master node; its
    /// whitelist goes with it. `check`, `add`, `info` and `whitelist` then
    /// take the address in place of a file. See docs/redis-layout.md.
    Push(PushArgs),
    /// Download a filter from Redis or Redis Cluster into a filter file.
    ///
    /// The file's header and data checksum equal the pushed file's (the
    /// very bytes, if the filter was not changed since the push).
    Pull(PullArgs),
    /// Print each input line the first time its entry is seen (a crawler's
    /// "have I fetched this URL?"), remembering entries in a filter that
    /// persists between runs (`--state FILE`).
    Dedup(DedupArgs),
    /// Salvage a served data directory's damaged write-ahead log segments
    /// and live-add journals (`NAME.live`), with the server stopped.
    ///
    /// Every intact record, before and after the damage, is kept; each
    /// damaged file is replaced by its repaired copy and the original kept
    /// aside as `FILE.damaged-UNIXTIME`. Prints, per file, what was kept and
    /// what was lost (bytes, offsets). Refuses while a server runs on the
    /// directory. See docs/http-api.md, "Damaged log or journal".
    Repair(RepairArgs),
}

/// `bloomgate repair`.
#[derive(Args, Debug)]
pub struct RepairArgs {
    /// The data directory (the `--data-dir` of bloomgate serve).
    pub dir: std::path::PathBuf,
    /// Report what would be kept and lost; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

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

/// `bloomgate dedup`.
#[derive(Args, Debug)]
pub struct DedupArgs {
    /// The filter that remembers the entries seen, kept between runs: a
    /// filter file created on first use and saved atomically at the end of
    /// each successful run (default: in memory only).
    #[arg(long, value_name = "FILE")]
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
    /// Input files, one entry per line (`-` for standard input; `.gz`, `.zst` decompressed).
    #[arg(default_value = "-")]
    pub inputs: Vec<String>,
}

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

/// Parses a size in bytes: `12G`, `800M`, `64K`, `1.5GiB`, `4096` (binary
/// multiples: 1K = 1024 bytes).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(format!("{s:?}: unknown size unit (use K, M, G or T)")),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 12G, 800M)"))?;
    let bytes = n * (1u64 << shift) as f64;
    if !bytes.is_finite() || !(1.0..9.2e18).contains(&bytes) {
        return Err(format!("{s:?} is not a usable size"));
    }
    Ok(bytes as u64)
}

/// Parses a size as [`parse_size`] does, also accepting `0` (none).
pub fn parse_size_or_zero(s: &str) -> Result<u64, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    parse_size(s)
}

/// Parses an item count: `10000000000`, `1e10`, `10_000_000`.
pub fn parse_items(s: &str) -> Result<u64, String> {
    let clean: String = s.chars().filter(|&c| c != '_' && c != ',').collect();
    let n = match clean.parse::<u64>() {
        Ok(n) => n,
        Err(_) => {
            let f: f64 = clean
                .parse()
                .map_err(|_| format!("{s:?} is not a number of items"))?;
            if !f.is_finite() || f.fract() != 0.0 || !(0.0..9.2e18).contains(&f) {
                return Err(format!("{s:?} is not a whole number of items"));
            }
            f as u64
        }
    };
    if n == 0 {
        return Err("the number of items must be at least 1".into());
    }
    Ok(n)
}

/// Parses a false-positive rate strictly between 0 and 1 (`0.0001`, `1e-4`, `0.01%`).
pub fn parse_fp(s: &str) -> Result<f64, String> {
    let (num, scale) = match s.strip_suffix('%') {
        Some(n) => (n, 0.01),
        None => (s, 1.0),
    };
    let p: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number"))?;
    let p = p * scale;
    if !(p > 0.0 && p < 1.0) {
        return Err(format!(
            "the false-positive rate must be strictly between 0 and 1, got {s}"
        ));
    }
    Ok(p)
}

/// Parses a seed in decimal or `0x` hex.
pub fn parse_seed(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("{s:?} is not a 64-bit seed (decimal or 0x-hex)"))
}

/// Filter layout on the command line.
#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum LayoutArg {
    /// One 512-bit cache line per item: one cache miss per lookup (default).
    Blocked,
    /// The textbook layout: fewest bits, k cache misses per lookup.
    Classic,
}

impl From<LayoutArg> for Layout {
    fn from(l: LayoutArg) -> Layout {
        match l {
            LayoutArg::Blocked => Layout::Blocked,
            LayoutArg::Classic => Layout::Classic,
        }
    }
}

/// Filter layout of `build` and `plan --layout`: the two Bloom layouts and
/// the two that can delete.
#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum BuildLayoutArg {
    /// One 512-bit cache line per item: one cache miss per lookup (default).
    Blocked,
    /// The textbook layout: fewest bits, k cache misses per lookup.
    Classic,
    /// A counting Bloom filter (4-bit counters): can delete; about 5-6 times
    /// the memory of a blocked filter.
    Counting,
    /// A cuckoo filter (packed fingerprints): can delete; a fixed capacity
    /// (adds fail when it is full).
    Cuckoo,
}

impl BuildLayoutArg {
    /// The Bloom layout, or `None` for a deletable one.
    pub fn bloom(self) -> Option<Layout> {
        match self {
            BuildLayoutArg::Blocked => Some(Layout::Blocked),
            BuildLayoutArg::Classic => Some(Layout::Classic),
            BuildLayoutArg::Counting | BuildLayoutArg::Cuckoo => None,
        }
    }

    /// The deletable kind, or `None` for a Bloom layout.
    pub fn deletable(self) -> Option<bloomgate_engine::format::DeletableKind> {
        use bloomgate_engine::format::DeletableKind;
        match self {
            BuildLayoutArg::Counting => Some(DeletableKind::Counting),
            BuildLayoutArg::Cuckoo => Some(DeletableKind::Cuckoo),
            BuildLayoutArg::Blocked | BuildLayoutArg::Classic => None,
        }
    }
}

/// Key kind on the command line.
#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum KeysArg {
    /// URLs, canonicalized with Google Safe Browsing's rules.
    Url,
    /// Hosts/domains; a query matches its host and parent domains.
    Host,
    /// Email addresses, domain lowercased.
    Email,
    /// Exact bytes.
    Raw,
}

impl From<KeysArg> for KeyKind {
    fn from(k: KeysArg) -> KeyKind {
        match k {
            KeysArg::Url => KeyKind::Url,
            KeysArg::Host => KeyKind::Host,
            KeysArg::Email => KeyKind::Email,
            KeysArg::Raw => KeyKind::Raw,
        }
    }
}

/// Matching mode on the command line.
#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum MatchArg {
    /// One lookup of the canonical key.
    Exact,
    /// Safe Browsing host-suffix/path-prefix expressions (up to 30 lookups).
    Prefix,
}

impl From<MatchArg> for MatchMode {
    fn from(m: MatchArg) -> MatchMode {
        match m {
            MatchArg::Exact => MatchMode::Exact,
            MatchArg::Prefix => MatchMode::Prefix,
        }
    }
}

/// Sizing inputs shared by `plan` and `build`.
#[derive(Args, Debug)]
pub struct SizeArgs {
    /// Number of items the filter must hold (`10000000000`, `1e10`).
    /// `build` counts the entries of its input files when it is left out.
    #[arg(long, short = 'n', visible_alias = "capacity", value_parser = parse_items)]
    pub items: Option<u64>,
    /// Target false-positive rate per query (`0.0001`, `1e-4`, `0.01%`); a
    /// url or host query makes several lookups, each sized for a smaller rate.
    #[arg(long, short = 'p', visible_alias = "error-rate", value_parser = parse_fp)]
    pub fp: f64,
}

/// Key kind and matching mode options.
#[derive(Args, Debug, Clone, Copy)]
pub struct KeyArgs {
    /// What the entries are.
    #[arg(long, value_enum, default_value = "url")]
    pub keys: KeysArg,
    /// How queries match entries (prefix: Safe Browsing host/path expressions).
    #[arg(long = "match", value_enum, default_value = "exact")]
    pub match_mode: MatchArg,
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
#[derive(Args, Debug)]
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
    /// (default: the output's directory).
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
    /// Input files, one entry per line (`-` for standard input; `.gz`, `.zst` decompressed).
    #[arg(default_value = "-")]
    pub inputs: Vec<String>,
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

/// `bloomgate url …`.
#[derive(Subcommand, Debug)]
pub enum UrlCmd {
    /// Print the canonical form of each URL.
    Canon {
        /// URLs, as bytes (any encoding); `-` or none: one per line from
        /// standard input.
        urls: Vec<std::ffi::OsString>,
    },
    /// Print the host-suffix/path-prefix expressions Safe Browsing looks up.
    Expressions {
        /// URLs, as bytes (any encoding); `-` or none: one per line from
        /// standard input.
        urls: Vec<std::ffi::OsString>,
    },
}

/// A listen address, or none (`off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listen(pub Option<std::net::SocketAddr>);

/// Parses a listen address, or `off`.
pub fn parse_listen(s: &str) -> Result<Listen, String> {
    if s == "off" {
        return Ok(Listen(None));
    }
    s.parse()
        .map(|a| Listen(Some(a)))
        .map_err(|_| format!("{s:?} is not a listen address like 127.0.0.1:8080 (or `off`)"))
}

/// `bloomgate serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Directory of filter files (`NAME.bgf` is served as NAME); also holds the write-ahead log.
    #[arg(long, conflicts_with = "store")]
    pub data_dir: Option<std::path::PathBuf>,
    /// Serve the filters stored in Redis instead of a directory's files:
    /// `redis://[USER[:PASSWORD]@]HOST[:PORT][/DB]` or
    /// `redis+cluster://HOST:PORT[,HOST:PORT…]` (every filter pushed there;
    /// several servers may share them).
    #[arg(long, value_name = "ADDRESS")]
    pub store: Option<String>,
    #[command(flatten)]
    pub redis: RedisOpts,
    /// With --store: acknowledge a batch of adds only once this many
    /// replicas of each master written have it (Redis `WAIT`); otherwise
    /// answer an error (HTTP 503, RESP -TRYAGAIN). 0: when the master ran it.
    #[arg(long, value_name = "N")]
    pub redis_wait: Option<u32>,
    /// With --redis-wait: how long to wait for the replicas, in
    /// milliseconds (default 1000).
    #[arg(long, value_name = "MS")]
    pub redis_wait_ms: Option<u64>,
    #[command(flatten)]
    pub compat: crate::cmd::serve::Compat,
    /// HTTP/JSON listen address, or `off`.
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = parse_listen)]
    pub http: Listen,
    /// Redis-protocol (RESP2/RESP3, RedisBloom commands) listen address, or `off`.
    #[arg(long, default_value = "127.0.0.1:6380", value_parser = parse_listen)]
    pub resp: Listen,
    /// File whose first line is the access token required for writes
    /// (HTTP `Authorization: Bearer`, Redis `AUTH`).
    #[arg(long)]
    pub token_file: Option<std::path::PathBuf>,
    /// Allow reads without the token.
    #[arg(long)]
    pub open_reads: bool,
    /// Snapshot changed filters (and trim the log) this often, in seconds.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub snapshot_secs: u64,
    /// Close connections idle for this many seconds.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_secs: Option<u64>,
    /// A request (HTTP headers and body, or one Redis command) must arrive
    /// whole within this many seconds once it has started (default 30).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub request_secs: Option<u64>,
    /// Most simultaneous connections per listener.
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Memory for all clients' buffered input together (Redis-protocol read
    /// buffers and HTTP bodies in flight), e.g. 256M or 1G; past it the
    /// connections holding the most are closed with an error. 0: no limit.
    #[arg(long, default_value = "256M", value_parser = parse_size_or_zero)]
    pub max_input_memory: u64,
    /// The memory all filters may take together, e.g. 64M or 16G: a
    /// create, a load or a growth step past it is refused before anything
    /// is allocated (RESP `-OOM …`, HTTP 507). Default: 3/4 of the smaller
    /// of the machine's memory and the cgroup's limit.
    #[arg(long, value_parser = parse_size_or_zero)]
    pub max_memory: Option<u64>,
    /// Once listening, write the bound addresses as JSON to this file.
    #[arg(long)]
    pub ready_file: Option<std::path::PathBuf>,
    /// Worker threads (default: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Threads serving Redis-protocol connections, each a single-threaded
    /// event loop (default: one per two cores).
    #[arg(long, default_value_t = 0)]
    pub resp_threads: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn items_forms() {
        assert_eq!(parse_items("1e10"), Ok(10_000_000_000));
        assert_eq!(parse_items("10000000000"), Ok(10_000_000_000));
        assert_eq!(parse_items("10_000"), Ok(10_000));
        assert!(parse_items("0").is_err());
        assert!(parse_items("1.5").is_err());
        assert!(parse_items("-3").is_err());
        assert!(parse_items("ten").is_err());
        assert!(parse_items("1e30").is_err());
    }

    #[test]
    fn fp_forms() {
        assert_eq!(parse_fp("0.0001"), Ok(0.0001));
        assert_eq!(parse_fp("1e-4"), Ok(1e-4));
        assert!((parse_fp("0.01%").unwrap() - 1e-4).abs() < 1e-18);
        for bad in ["0", "1", "-0.1", "2", "nan", "x", "inf"] {
            assert!(parse_fp(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_forms() {
        assert_eq!(parse_listen("off"), Ok(Listen(None)));
        assert!(parse_listen("127.0.0.1:0").unwrap().0.is_some());
        assert!(parse_listen("localhost").is_err());
        let cli = Cli::try_parse_from(["bloomgate", "serve", "--data-dir", "d", "--http", "off"])
            .unwrap();
        match cli.command {
            Command::Serve(a) => {
                assert_eq!(a.http, Listen(None));
                assert!(a.resp.0.is_some());
            }
            _ => panic!(),
        }
    }

    #[test]
    fn serve_store_forms() {
        let parse = |args: &[&str]| {
            let mut all = vec!["bloomgate", "serve"];
            all.extend_from_slice(args);
            Cli::try_parse_from(all)
        };
        match parse(&["--store", "redis://h:1", "--redis-wait", "1"])
            .unwrap()
            .command
        {
            Command::Serve(a) => {
                assert_eq!(a.store.as_deref(), Some("redis://h:1"));
                assert_eq!(
                    (a.data_dir, a.redis_wait, a.redis_wait_ms),
                    (None, Some(1), None)
                );
            }
            _ => panic!(),
        }
        assert!(parse(&[]).is_err(), "a directory or a store is needed");
        assert!(parse(&["--data-dir", "d", "--store", "redis://h:1"]).is_err());
    }

    #[test]
    fn seed_forms() {
        assert_eq!(parse_seed("0x10"), Ok(16));
        assert_eq!(parse_seed("42"), Ok(42));
        assert!(parse_seed("zz").is_err());
    }
}
