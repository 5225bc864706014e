//! Command-line arguments: each flag defined once, with its help text and
//! validation. Parsing does no I/O; values that are invalid (p ≤ 0, n = 0,
//! non-numbers) are usage errors, exit code 2.

use clap::{Args, Parser, Subcommand, ValueEnum};

use bloomgate_engine::Layout;
use bloomgate_url::{KeyKind, MatchMode};

mod build;
mod list;
mod redis;
mod serve;
mod squid;

pub use build::*;
pub use list::*;
pub use redis::*;
pub use serve::*;
pub use squid::*;

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
    /// Answer Squid's `external_acl_type` (or, with --redirect,
    /// `url_rewrite_program`) requests on stdin from lists (README,
    /// "Filtering web traffic with Squid").
    SquidHelper(SquidHelperArgs),
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
    /// A static ribbon filter: about 13.8 bits per item at 1e-4, 40 % less
    /// than blocked; built once from all entries (no adds, no union).
    Ribbon,
}

impl BuildLayoutArg {
    /// The Bloom layout, or `None` for a deletable one.
    pub fn bloom(self) -> Option<Layout> {
        match self {
            BuildLayoutArg::Blocked => Some(Layout::Blocked),
            BuildLayoutArg::Classic => Some(Layout::Classic),
            BuildLayoutArg::Counting | BuildLayoutArg::Cuckoo | BuildLayoutArg::Ribbon => None,
        }
    }

    /// The deletable kind, or `None` for a Bloom layout.
    pub fn deletable(self) -> Option<bloomgate_engine::format::DeletableKind> {
        use bloomgate_engine::format::DeletableKind;
        match self {
            BuildLayoutArg::Counting => Some(DeletableKind::Counting),
            BuildLayoutArg::Cuckoo => Some(DeletableKind::Cuckoo),
            BuildLayoutArg::Blocked | BuildLayoutArg::Classic | BuildLayoutArg::Ribbon => None,
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
#[derive(Args, Debug, Clone)]
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
    fn seed_forms() {
        assert_eq!(parse_seed("0x10"), Ok(16));
        assert_eq!(parse_seed("42"), Ok(42));
        assert!(parse_seed("zz").is_err());
    }
}
