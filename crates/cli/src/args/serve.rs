//! Arguments of `bloomgate serve`.

use clap::Args;

use super::parse_size_or_zero;
use super::redis::RedisOpts;

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
    /// Postfix socketmap listen address (`127.0.0.1:PORT` or `unix:/PATH`); off unless given.
    #[arg(long, value_name = "ADDR")]
    pub socketmap: Option<bloomgate_server::socketmap::SocketmapAddr>,
    /// The socketmap's value for a listed key; `{filter}`, `{matched}`, `{key}` are filled in.
    #[arg(long, value_name = "TEXT", default_value = bloomgate_server::socketmap::DEFAULT_REPLY)]
    pub socketmap_reply: String,
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
    use crate::args::{Cli, Command};
    use clap::Parser;

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
}
