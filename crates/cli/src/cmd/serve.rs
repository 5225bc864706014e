//! `bloomgate serve`: hands the arguments to the `bloomgate-server` library.
//! These options (`args::ServeArgs`) are the service's only command line.

use std::time::Duration;

use anyhow::{Context, Result};

use bloomgate_server::store::RedisOptions;
use bloomgate_server::ServeConfig;

use crate::args::ServeArgs;

/// `serve`'s choices where RedisBloom's behaviour is a trap, and the rule
/// that a directory or a store is served (one of the two, named together
/// when neither is given). Flattened into [`ServeArgs`].
#[derive(clap::Args, Debug)]
#[command(group = clap::ArgGroup::new("source").required(true).args(["data_dir", "store"]))]
pub struct Compat {
    /// With --store: a scaling filter (`BF.RESERVE` without `NONSCALING`,
    /// an auto-create by `BF.ADD`) is one layer in Redis, planned for at
    /// least this many items.
    #[arg(long, value_name = "N", default_value = "1000000", value_parser = crate::args::parse_items)]
    pub redis_scaling_items: u64,
    /// A Redis-protocol lookup (`BF.EXISTS`, `CF.EXISTS`, …) of a filter
    /// that does not exist answers `ERR not found` instead of RedisBloom's 0.
    #[arg(long)]
    pub unknown_filter_error: bool,
}

/// Runs the service until it is stopped.
pub fn run(a: ServeArgs) -> Result<i32> {
    if a.store.is_none() && (a.redis_wait.is_some() || a.redis_wait_ms.is_some()) {
        return Err(crate::cmd::UsageError(
            "--redis-wait and --redis-wait-ms need --store redis://…".into(),
        )
        .into());
    }
    let mut config = ServeConfig {
        data_dir: a.data_dir.unwrap_or_default(),
        http: a.http.0,
        resp: a.resp.0,
        socketmap: a.socketmap,
        socketmap_reply: a.socketmap_reply,
        token_file: a.token_file,
        open_reads: a.open_reads,
        snapshot_interval: Duration::from_secs(a.snapshot_secs),
        ready_file: a.ready_file,
        threads: a.threads,
        resp_threads: a.resp_threads,
        redis: a.store.map(|address| RedisOptions {
            address,
            password_file: a.redis.redis_password_file,
            wait_replicas: a.redis_wait.unwrap_or(0),
            wait_timeout: Duration::from_millis(a.redis_wait_ms.unwrap_or(1000)),
        }),
        ..ServeConfig::default()
    };
    config.limits.unknown_filter_error = a.compat.unknown_filter_error;
    config.limits.redis_scaling_items = a.compat.redis_scaling_items;
    if let Some(s) = a.idle_secs {
        config.limits.idle_timeout = Duration::from_secs(s);
    }
    if let Some(s) = a.request_secs {
        config.limits.request_timeout = Duration::from_secs(s);
    }
    if let Some(n) = a.max_connections {
        config.limits.max_connections = n;
    }
    config.limits.max_input_bytes = usize::try_from(a.max_input_memory).unwrap_or(usize::MAX);
    if let Some(m) = a.max_memory {
        let limit = if m == 0 { u64::MAX } else { m };
        config.limits.memory =
            std::sync::Arc::new(bloomgate_server::memory::MemoryBudget::new(limit));
    }
    if config.http.is_none() && config.resp.is_none() && config.socketmap.is_none() {
        return Err(crate::cmd::UsageError(
            "both --http and --resp are off: nothing to serve".into(),
        )
        .into());
    }
    bloomgate_server::run(config).context("serve")?;
    Ok(0)
}
