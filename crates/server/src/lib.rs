//! `bloomgate serve`: filter files on the network.
//!
//! Every `*.bgf` file in a data directory is served under its file stem,
//! memory-mapped, through two front ends that share one [`store::Store`]
//! (the storage interface; the front ends do not know which implementation
//! serves a filter — today the local files of [`store::LocalStore`]):
//!
//! * an HTTP/JSON API ([`http`], documented in `docs/http-api.md`), and
//! * the Redis protocol, RESP2 and RESP3 ([`resp`]), compatible with
//!   RedisBloom's `BF.*` commands, so `redis-cli`, `redis-benchmark` and
//!   client libraries (`redis-py`'s `r.bf()`) work unchanged.
//!
//! Queries go through the same key rules as the CLI (`bloomgate-url`'s
//! canonicalization, key kinds and match modes, `bloomgate-blacklist`'s
//! whitelist semantics), so a URL is a hit over the network exactly when
//! `bloomgate check` says it is.
//!
//! Live additions are made durable by a write-ahead log ([`wal`]): an add is
//! acknowledged only once its record is on disk (`fdatasync`, group commit).
//! Snapshots rewrite the filter files atomically and trim the log, first
//! copying the trimmed adds into per-filter journals ([`journal`]) that are
//! replayed onto any reloaded filter file; startup replays both. Security
//! and resource limits are in [`auth`], [`budget`] and [`Limits`]; counters
//! and their Prometheus rendering in [`metrics`].
//!
//! | module | role |
//! |---|---|
//! | [`store`] | the storage interface ([`store::Store`], [`store::Filter`], [`store::Ack`], [`store::StoreError`]) and the local store (`store/local/`) |
//! | [`http`] | HTTP handlers, the one HTTP mapping of store errors, the accept loop |
//! | [`resp`] | Redis protocol: `codec` (frames, replies), `conn` (connection loop, pipelining), `commands` and `bf` (command semantics) |
//! | [`socketmap`], [`ask`] | Postfix's socketmap tables (`--socketmap`); one item asked of a filter by name (socketmap, nginx `auth_request`) |
//! | [`wal`], [`journal`] | the local store's write-ahead log and live-add journals |
//! | [`auth`], [`budget`], [`metrics`] | access, input memory, counters |
//!
//! The entry point is [`run`], which blocks and builds its own Tokio runtime.
//! What the server has to say (startup, replay, failures, SIGHUP reports) it
//! says through `tracing` events; the binary decides where they go.
#![deny(missing_docs)]

pub mod ask;
pub mod auth;
pub mod budget;
pub mod fds;
pub mod http;
pub mod journal;
pub mod malloc;
pub mod memory;
pub mod metrics;
pub mod resp;
pub mod socketmap;
pub mod store;
pub mod wal;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Resource limits that protect the service from hostile or broken clients.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest HTTP request body, in bytes.
    pub max_body_bytes: usize,
    /// Most items in one HTTP check or add; Redis-protocol commands of more
    /// items (`BF.MADD`, `BF.MEXISTS`, `BF.INSERT`) are done this many at
    /// a time, as RedisBloom takes any number.
    pub max_batch: usize,
    /// Longest item, in bytes.
    pub max_item_bytes: usize,
    /// Largest RESP bulk string (bounds `BF.LOADCHUNK` chunks too); Redis's
    /// `proto-max-bulk-len`. A command that cannot fit the input budget
    /// ([`Limits::max_input_bytes`]) is refused at its header whatever this
    /// says.
    pub max_bulk_bytes: usize,
    /// Most elements in one RESP command array.
    pub max_array_len: usize,
    /// Largest RESP command in all (the sum of its bulk strings): bounds
    /// what one connection can make the server buffer, whatever the
    /// combination of array and bulk lengths (like Redis's
    /// `client-query-buffer-limit`). The input budget caps it too.
    pub max_command_bytes: usize,
    /// Most simultaneous connections, per listener.
    pub max_connections: usize,
    /// A connection that sends nothing for this long is closed.
    pub idle_timeout: Duration,
    /// A request (HTTP headers + body, or one RESP command) must arrive
    /// completely within this time once it has started (slow-drip defence).
    pub request_timeout: Duration,
    /// Largest filter that `create` / `BF.RESERVE` may allocate, in bytes.
    pub max_filter_bytes: u64,
    /// All clients' buffered input together (Redis-protocol read buffers
    /// and HTTP bodies in flight), in bytes; past it the largest are closed
    /// ([`budget`]). 0: no limit.
    pub max_input_bytes: usize,
    /// The filter memory of all filters together (`--max-memory`, see
    /// [`memory`]); shared by every copy of these limits.
    pub memory: Arc<memory::MemoryBudget>,
    /// What clients that have not presented the token (when one is
    /// configured) may make the server buffer, all together: a budget of
    /// their own, so that they can never make the server refuse or close
    /// an authenticated client ([`budget`]). 0: an eighth of
    /// [`Limits::max_input_bytes`] (no limit if that is 0).
    pub max_unauth_input_bytes: usize,
    /// A Redis-protocol lookup (`BF.EXISTS`, `BF.MEXISTS`, `CF.EXISTS`,
    /// `CF.MEXISTS`) of a filter that does not exist answers `ERR not
    /// found` instead of RedisBloom's 0 (counted either way:
    /// `bloomgate_unknown_filter_lookups_total`).
    pub unknown_filter_error: bool,
    /// With a Redis store, a scaling filter (`BF.RESERVE` without
    /// `NONSCALING`, an auto-create by `BF.ADD`) is one layer planned for
    /// at least this many items at the rate asked: a filter in Redis
    /// cannot add layers.
    pub redis_scaling_items: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 8 << 20,
            max_batch: 10_000,
            max_item_bytes: 64 << 10,
            max_bulk_bytes: 512 << 20,
            max_array_len: 1 << 20,
            max_command_bytes: 1 << 30,
            max_connections: 10_000,
            idle_timeout: Duration::from_secs(300),
            request_timeout: Duration::from_secs(30),
            max_filter_bytes: 8 << 30,
            max_input_bytes: 256 << 20,
            memory: Arc::new(memory::MemoryBudget::new(memory::default_limit())),
            max_unauth_input_bytes: 0,
            unknown_filter_error: false,
            redis_scaling_items: 1_000_000,
        }
    }
}

/// Everything `bloomgate serve` needs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Directory of `*.bgf` filter files (and the write-ahead log, in `.bloomgate-wal/`).
    pub data_dir: PathBuf,
    /// HTTP listen address; `None` disables HTTP. Default `127.0.0.1:8080`.
    pub http: Option<SocketAddr>,
    /// Redis-protocol listen address; `None` disables it. Default `127.0.0.1:6380`.
    pub resp: Option<SocketAddr>,
    /// File whose first line is the access token (see [`auth`]).
    pub token_file: Option<PathBuf>,
    /// Allow reads without the token even when a token is configured.
    pub open_reads: bool,
    /// Resource limits.
    pub limits: Limits,
    /// Snapshot (rewrite changed filter files, trim the log) this often.
    pub snapshot_interval: Duration,
    /// Also snapshot as soon as the log grows past this many bytes.
    pub snapshot_wal_bytes: u64,
    /// Once listening, write `{"http": "ADDR", "resp": "ADDR"}` here (useful with port 0).
    pub ready_file: Option<PathBuf>,
    /// Worker threads of the runtime (0 = one per core).
    pub threads: usize,
    /// Threads serving Redis-protocol connections, each with a
    /// single-threaded runtime of its own (0 = one per two cores, at least
    /// one). See [`resp::serve`].
    pub resp_threads: usize,
    /// Serve the filters of a Redis server or cluster instead of
    /// `data_dir`'s files (see [`store::RedisStore`]).
    pub redis: Option<store::RedisOptions>,
    /// Postfix socketmap listen address ([`socketmap`]); `None`: off.
    pub socketmap: Option<socketmap::SocketmapAddr>,
    /// The socketmap's `OK` value for a listed key (see
    /// [`socketmap::DEFAULT_REPLY`]).
    pub socketmap_reply: String,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            data_dir: PathBuf::from("."),
            http: Some(SocketAddr::from(([127, 0, 0, 1], 8080))),
            resp: Some(SocketAddr::from(([127, 0, 0, 1], 6380))),
            token_file: None,
            open_reads: false,
            limits: Limits::default(),
            snapshot_interval: Duration::from_secs(300),
            snapshot_wal_bytes: 256 << 20,
            ready_file: None,
            threads: 0,
            resp_threads: 0,
            redis: None,
            socketmap: None,
            socketmap_reply: socketmap::DEFAULT_REPLY.into(),
        }
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The token file could not be read.
    #[error("{}: cannot read token file: {source}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The token file's first line is too short to be a secret.
    #[error("{}: the token must be at least 16 bytes on the first line", .0.display())]
    ShortToken(PathBuf),
    /// A startup or shutdown task panicked or was cancelled.
    #[error("{what} failed: {source}")]
    Task {
        /// Which task.
        what: &'static str,
        /// The cause.
        source: tokio::task::JoinError,
    },
    /// A store operation failed during startup or shutdown.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// The configuration cannot work (e.g. a socketmap listener where
    /// reads need the token, which socketmap clients cannot present).
    #[error("{0}")]
    Config(String),
    /// Other I/O failure.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// The addresses the server actually listens on (ports resolved when 0 was asked).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct BoundAddrs {
    /// HTTP address, if enabled.
    pub http: Option<SocketAddr>,
    /// Redis-protocol address, if enabled.
    pub resp: Option<SocketAddr>,
    /// Socketmap address (`inet:IP:PORT` or `unix:PATH`), if enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socketmap: Option<String>,
}

/// Runs the service until SIGTERM/SIGINT (then snapshots and returns).
/// Blocking: builds its own multi-threaded Tokio runtime.
pub fn run(config: ServeConfig) -> Result<(), ServerError> {
    malloc::fix_mmap_threshold();
    if let Some((before, after)) = fds::raise_nofile_limit() {
        if after > before {
            tracing::info!("bloomgate serve: descriptor limit raised from {before} to {after}");
        }
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all().thread_name("bloomgate-serve");
    if config.threads > 0 {
        builder.worker_threads(config.threads);
    }
    let rt = builder.build()?;
    rt.block_on(serve(config))
}

/// The async body of [`run`], for callers that already have a runtime.
pub async fn serve(config: ServeConfig) -> Result<(), ServerError> {
    let access = auth::AccessPolicy::from_config(&config)?;
    if config.socketmap.is_some() && access.check_read(false).is_err() {
        return Err(ServerError::Config(
            "--socketmap needs reads open (no --token-file, or --open-reads): socketmap clients cannot present a token".into(),
        ));
    }
    socketmap::check_reply_template(&config.socketmap_reply).map_err(ServerError::Config)?;
    let metrics = Arc::new(metrics::Metrics::default());
    let store = tokio::task::spawn_blocking({
        let dir = config.data_dir.clone();
        let limits = config.limits.clone();
        let metrics = metrics.clone();
        let redis = config.redis.clone();
        move || match redis {
            Some(opts) => store::RedisStore::open(opts, limits).map(store::Store::Redis),
            None => store::LocalStore::open(&dir, limits, metrics).map(store::Store::Local),
        }
    })
    .await
    .map_err(|source| ServerError::Task {
        what: "startup task",
        source,
    })??;
    let store = Arc::new(store);
    let app = Arc::new(App {
        store: store.clone(),
        access,
        limits: config.limits.clone(),
        metrics,
        input: budget::InputBudget::new(config.limits.max_input_bytes),
        input_unauth: budget::InputBudget::new(match config.limits.max_unauth_input_bytes {
            0 => config.limits.max_input_bytes / 8,
            n => n,
        }),
    });

    let mut bound = BoundAddrs::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    if let Some(addr) = config.http {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })?;
        bound.http = Some(l.local_addr()?);
        tasks.push(tokio::spawn(http::serve(l, app.clone(), stop_rx.clone())));
    }
    if let Some(addr) = config.resp {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })?;
        bound.resp = Some(l.local_addr()?);
        let threads = match config.resp_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
            n => n,
        };
        tasks.push(tokio::spawn(resp::serve(
            l,
            app.clone(),
            stop_rx.clone(),
            threads,
        )));
    }
    if let Some(addr) = &config.socketmap {
        let l = socketmap::Listener::bind(addr).await.map_err(|source| {
            ServerError::Config(format!("cannot listen on socketmap {addr}: {source}"))
        })?;
        bound.socketmap = Some(l.addr()?.to_string());
        tasks.push(tokio::spawn(socketmap::serve(
            l,
            app.clone(),
            config.socketmap_reply.clone(),
            stop_rx.clone(),
        )));
    }
    tracing::info!(
        "bloomgate serve: {} filter(s) from {}; http {}; resp {}; auth: {}",
        store.names().len(),
        match &*store {
            store::Store::Redis(s) => s.describe(),
            _ => config.data_dir.display().to_string(),
        },
        bound.http.map_or("off".into(), |a| a.to_string()),
        bound.resp.map_or("off".into(), |a| a.to_string()),
        app.access.describe()
    );
    if let Some(path) = &config.ready_file {
        let json = serde_json::to_vec(&bound).unwrap_or_default();
        bloomgate_engine::atomic::write_atomic(path, &json).map_err(std::io::Error::from)?;
    }

    // Periodic snapshots.
    let snap_store = store.clone();
    let interval = config.snapshot_interval;
    let wal_limit = config.snapshot_wal_bytes;
    let mut snap_stop = stop_rx.clone();
    let snapshotter = tokio::spawn(async move {
        let mut last = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = snap_stop.changed() => return,
            }
            if last.elapsed() >= interval || snap_store.unsnapshotted_bytes() >= wal_limit {
                last = tokio::time::Instant::now();
                let s = snap_store.clone();
                match tokio::task::spawn_blocking(move || s.snapshot()).await {
                    // A store without snapshots of its own has nothing to do.
                    Ok(Ok(_)) | Ok(Err(store::StoreError::Unsupported(_))) => {}
                    Ok(Err(e)) => tracing::error!("bloomgate serve: snapshot failed: {e}"),
                    Err(e) => tracing::error!("bloomgate serve: snapshot task failed: {e}"),
                }
            }
        }
    });

    wait_for_signals(&store).await;
    tracing::info!("bloomgate serve: shutting down, writing a snapshot");
    let _ = stop_tx.send(true);
    snapshotter.abort();
    for t in tasks {
        t.abort();
    }
    let s = store.clone();
    let snap = tokio::task::spawn_blocking(move || s.snapshot())
        .await
        .map_err(|source| ServerError::Task {
            what: "shutdown snapshot task",
            source,
        })?;
    match snap {
        Ok(_) | Err(store::StoreError::Unsupported(_)) => {}
        Err(e) => return Err(e.into()),
    }
    store.shutdown();
    Ok(())
}

#[cfg(unix)]
async fn wait_for_signals(store: &Arc<store::Store>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = hup.recv() => {
                let s = store.clone();
                let res = tokio::task::spawn_blocking(move || s.reload_changed()).await;
                match res {
                    Ok(Ok(report)) => tracing::info!("bloomgate serve: SIGHUP: {report}"),
                    Ok(Err(e)) => tracing::error!("bloomgate serve: SIGHUP reload failed: {e}"),
                    Err(e) => tracing::error!("bloomgate serve: SIGHUP reload failed: {e}"),
                }
            }
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_signals(_store: &Arc<store::Store>) {
    let _ = tokio::signal::ctrl_c().await;
}

/// State shared by both front ends.
pub struct App {
    /// The filters.
    pub store: Arc<store::Store>,
    /// Who may read and write.
    pub access: auth::AccessPolicy,
    /// Resource limits.
    pub limits: Limits,
    /// Counters and histograms.
    pub metrics: Arc<metrics::Metrics>,
    /// The memory budget of all clients' buffered input.
    pub input: Arc<budget::InputBudget>,
    /// The separate, smaller budget of clients that have not presented
    /// the token (when one is configured).
    pub input_unauth: Arc<budget::InputBudget>,
}
