//! [`RedisStore`]: filters stored in Redis or Redis Cluster by
//! `bloomgate push` (the layout of `bloomgate_redis`, `docs/redis-layout.md`),
//! served unchanged over HTTP and the Redis protocol.
//!
//! * **Names.** The filters served are those whose metadata keys
//!   (`bg:{NAME}`) exist in the deployment: found with `SCAN` on every
//!   master when the server starts, and opened on first use when a request
//!   names one created later (by a push or another server).
//! * **Lookups** are the crate's batch lookups (one `GETRANGE` per key,
//!   pipelined per node), answered with the same key rules, match mode and
//!   whitelist as the filter's file. A shard that cannot be read is
//!   [`StoreError::Unavailable`] (HTTP 503, RESP `-TRYAGAIN`), never "absent".
//! * **Adds** are the crate's guarded adds: an item is new exactly when
//!   some of its bits was 0, so among servers racing on one item
//!   exactly one answers "new". An add is acknowledged when Redis has run
//!   it; with [`RedisOptions::wait_replicas`] only once `WAIT` reports that
//!   many replicas have it (see [`RedisStore`]). An add that fails is
//!   [`StoreError::Unavailable`] whose outcome is unknown: some of its
//!   items may have been added (their bits set), so a retry may answer
//!   "exists" for them; the message says so, and the client must treat
//!   every item of a failed add as new.
//! * **Damaged filters.** A shard key missing under existing metadata
//!   (evicted by an `allkeys-*` `maxmemory-policy`, deleted) is
//!   [`StoreError::Unavailable`] naming the shard, never "absent"; the
//!   server warns at startup when a master's policy may evict keys.
//! * **Redis down at startup** is not fatal: the server starts, answers
//!   unavailable, and finds the filters when Redis answers
//!   ([`RedisStore::health`] for `/healthz`).
//! * **Several servers share one filter.** Each server keeps a handle per
//!   filter with the metadata and whitelist it read when it opened it, and
//!   re-validates it before a request at most every [`REVALIDATE_EVERY`]
//!   (one `HMGET` of the metadata's `generation` and `whitelist_changes`,
//!   `bloomgate_redis::RedisFilter::revalidate`): a whitelist change made
//!   through another server or the CLI is applied, a filter replaced by
//!   `push --force` is read again, and a deleted one answers "not found",
//!   within that interval. Until then a request is answered by what the
//!   handle read.
//! * **Batching.** Lookups and adds from all connections are queued per
//!   filter and sent as a few large pipelines, per node, as soon as the
//!   previous batch returns (`named::coalesce`): a pipelined single-key workload
//!   from many clients costs Redis what the CLI's batches cost it.
//! * **Credentials.** A password or user that Redis refuses is a clear
//!   error (`ERR … authentication failed …`, HTTP 400), at startup and on
//!   any request, not `TRYAGAIN`: retrying cannot fix it.
//! * **One layer.** A Redis filter cannot add layers: a scaling filter
//!   (`BF.RESERVE` without `NONSCALING`, an auto-create by `BF.ADD`) is
//!   made one layer planned for at least `Limits::redis_scaling_items`,
//!   and no filter is refused adds past its capacity: its false-positive
//!   rate rises instead.
//! * **Not offered:** `BF.SCANDUMP`/`BF.LOADCHUNK`, snapshots and reloads
//!   ([`StoreError::Unsupported`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bloomgate_blacklist::layers::FillPolicy;
use bloomgate_blacklist::FilterSpec;
use bloomgate_engine::{random_seed, Layout};
use bloomgate_redis::{layout, Address, RedisFilter};
use bloomgate_url::KeyError;
use redis::{ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};

use super::{AddOutcome, StoreError};
use crate::Limits;

mod named;

use named::Broken;
pub use named::{AddReply, Added, CheckReply, Checked, RedisNamed};

/// How long a server answers from a filter's metadata and whitelist
/// before it checks them again (one `HMGET` per filter per interval).
pub const REVALIDATE_EVERY: Duration = Duration::from_secs(1);

/// How to reach the Redis deployment, and how durable an add must be.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// `redis://[USER[:PASSWORD]@]HOST[:PORT][/DB]` or
    /// `redis+cluster://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT…]` (the
    /// filter addresses of `bloomgate_redis::address` without the name).
    pub address: String,
    /// A file whose first line is the password (replaces one in the address).
    pub password_file: Option<PathBuf>,
    /// Replicas that must have a batch of adds before it is acknowledged
    /// (`WAIT`); 0 acknowledges when the master has run it.
    pub wait_replicas: u32,
    /// How long `WAIT` may take.
    pub wait_timeout: Duration,
}

/// Filters in a Redis server or cluster.
///
/// # Durability
///
/// An acknowledged add is in the memory of the master that ran it; it
/// survives a restart of that master as far as its persistence goes
/// (`appendonly yes` with `appendfsync always` loses nothing, `everysec`
/// up to a second), and a failover as far as the replica had it. With
/// [`RedisOptions::wait_replicas`] = N, after each batch of adds the store
/// sends, on its own connection to every master written, a write of one of
/// the batch's bits (setting it again: no change, but it enters the
/// replication stream after the batch) and `WAIT N timeout`; the batch is
/// acknowledged only if `WAIT` reports at least N replicas, else the add
/// is answered with [`StoreError::Unavailable`] (the bits are set on the
/// master, the acknowledgement is refused).
pub struct RedisStore {
    opts: RedisOptions,
    /// The deployment with no filter name: the scheme, credentials, nodes, db.
    base: Address,
    filters: RwLock<BTreeMap<String, Arc<RedisNamed>>>,
    generation: AtomicU64,
    limits: Limits,
    /// Connections for `WAIT`, per node.
    waiters: Mutex<BTreeMap<(String, u16), redis::Connection>>,
    /// Unavailable answers and the last error, shared with every filter.
    health: Arc<Health>,
    /// When the filter names were last looked for (`SCAN`), and whether
    /// that succeeded: a server started while Redis was down looks again.
    scanned: Mutex<(Option<std::time::Instant>, bool)>,
}

/// Unavailable answers of the store, for `/healthz` and `/metrics`.
#[derive(Default)]
struct Health {
    unavailable: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Health {
    /// Counts an unavailable answer (and keeps its reason).
    fn note<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Unavailable(why)) = &r {
            self.unavailable.fetch_add(1, Relaxed);
            *lock(&self.last_error) = Some(why.clone());
        }
        r
    }
}

/// The state of the Redis deployment, as `/healthz` reports it.
#[derive(Clone, Debug)]
pub struct StoreHealth {
    /// Every master answered `PING` just now.
    pub reachable: bool,
    /// Why not, when not.
    pub error: Option<String>,
    /// The reason of the last unavailable answer, if any.
    pub last_error: Option<String>,
    /// Requests answered unavailable (HTTP 503, RESP `-TRYAGAIN`) so far.
    pub unavailable_answers: u64,
}

/// A crate error as a store error: every failure to reach or use Redis is
/// [`StoreError::Unavailable`] (nothing may read as "absent"), but refused
/// credentials, which no retry fixes, are [`StoreError::Invalid`] with
/// the reason.
fn store_err(e: bloomgate_redis::Error) -> StoreError {
    use bloomgate_redis::Error as E;
    match e {
        E::NotFound { name, .. } => StoreError::NotFound(name),
        E::Exists { name, .. } => StoreError::Exists(name),
        E::Address { .. } | E::WrongLayout(_) | E::InvalidItem { .. } | E::Auth { .. } => {
            StoreError::Invalid(e.to_string())
        }
        other => StoreError::Unavailable(other.to_string()),
    }
}

/// True for an error of the Redis client that says the credentials were refused.
fn is_auth(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
}

/// A receiver with its answer already in.
fn ready<T>(v: T) -> tokio::sync::oneshot::Receiver<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let _ = tx.send(v);
    rx
}

/// The error of a queued request whose worker is gone (it cannot have
/// answered "absent": no answer is an error).
pub fn worker_gone() -> StoreError {
    StoreError::Unavailable("the Redis batch worker stopped before answering".into())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RedisStore {
    /// Connects to the deployment and opens every filter found in it.
    pub fn open(opts: RedisOptions, limits: Limits) -> Result<RedisStore, StoreError> {
        let base = Self::address_of(&opts, "_")?;
        let store = RedisStore {
            opts,
            base,
            filters: RwLock::new(BTreeMap::new()),
            generation: AtomicU64::new(0),
            limits,
            waiters: Mutex::new(BTreeMap::new()),
            health: Arc::new(Health::default()),
            scanned: Mutex::new((None, false)),
        };
        match store.rescan(true) {
            // Redis down: serve anyway (every request answers unavailable
            // until it is back); refused credentials stop the start.
            Ok(()) | Err(StoreError::Unavailable(_)) => {}
            Err(e) => return Err(e),
        }
        Ok(store)
    }

    /// Looks for the filters (`SCAN`) and opens them, unless a scan
    /// succeeded already, or was tried less than [`REVALIDATE_EVERY`] ago
    /// (unless `now`). Warns about eviction policies after each scan that
    /// succeeds.
    fn rescan(&self, now: bool) -> Result<(), StoreError> {
        {
            let mut s = lock(&self.scanned);
            if s.1 || (!now && s.0.is_some_and(|t| t.elapsed() < REVALIDATE_EVERY)) {
                return Ok(());
            }
            s.0 = Some(std::time::Instant::now());
        }
        let names = match self.scan_names() {
            Ok(n) => n,
            Err(e) => {
                if now {
                    tracing::warn!(
                        "bloomgate serve: {}: {e}; serving anyway: requests answer unavailable until Redis answers",
                        self.describe()
                    );
                }
                return self.health.note(Err(e));
            }
        };
        lock(&self.scanned).1 = true;
        if let Ok(store) = bloomgate_redis::Store::new(&self.base) {
            for w in store.eviction_warnings() {
                tracing::warn!("bloomgate serve: warning: {w}");
            }
        }
        for w in self.replica_warnings() {
            tracing::warn!("bloomgate serve: warning: {w}");
        }
        for name in names {
            match self.open_named(&name) {
                Ok(Some(_)) | Ok(None) => {}
                Err(e) => tracing::warn!("bloomgate serve: filter {name:?} not served: {e}"),
            }
        }
        Ok(())
    }

    /// Whether every master answers now (`PING`), and the unavailable
    /// answers so far.
    pub fn health(&self) -> StoreHealth {
        let error = self
            .masters()
            .and_then(|masters| {
                for node in masters {
                    let mut c = self.connect(&node)?;
                    redis::cmd("PING").query::<String>(&mut c).map_err(|e| {
                        StoreError::Unavailable(format!("{}:{}: {e}", node.0, node.1))
                    })?;
                }
                Ok(())
            })
            .err()
            .map(|e| e.to_string());
        StoreHealth {
            reachable: error.is_none(),
            error,
            last_error: lock(&self.health.last_error).clone(),
            unavailable_answers: self.health.unavailable.load(Relaxed),
        }
    }

    /// Requests answered unavailable so far.
    pub fn unavailable_answers(&self) -> u64 {
        self.health.unavailable.load(Relaxed)
    }

    /// The address of filter `name`: the deployment's address with the
    /// name appended to its path (before any `?options`).
    fn address_of(opts: &RedisOptions, name: &str) -> Result<Address, StoreError> {
        let (head, query) = match opts.address.split_once('?') {
            Some((h, q)) => (h, Some(q)),
            None => (opts.address.as_str(), None),
        };
        let mut s = format!("{}/{name}", head.trim_end_matches('/'));
        if let Some(q) = query {
            s.push('?');
            s.push_str(q);
        }
        let mut a = Address::parse(&s).map_err(|e| match e {
            bloomgate_redis::Error::Address { .. } if name != "_" => {
                StoreError::BadName(name.into())
            }
            e => StoreError::Invalid(e.to_string()),
        })?;
        if let Some(p) = &opts.password_file {
            a = a.with_password_file(p).map_err(store_err)?;
        }
        Ok(a)
    }

    /// The deployment, for messages (`redis://host:port`).
    pub fn describe(&self) -> String {
        let a = self.base.display();
        a.strip_suffix("/_").unwrap_or(&a).to_string()
    }

    /// A connection of our own to `node` (for SCAN and WAIT).
    fn connect(&self, node: &(String, u16)) -> Result<redis::Connection, StoreError> {
        let unavailable = |e: redis::RedisError| {
            if is_auth(&e) {
                StoreError::Invalid(format!(
                    "{}:{}: Redis authentication failed ({e}): check the user and password in --store or --redis-password-file",
                    node.0, node.1
                ))
            } else {
                StoreError::Unavailable(format!("{}:{}: {e}", node.0, node.1))
            }
        };
        let mut settings = RedisConnectionInfo::default().set_db(self.base.db);
        if let Some(u) = &self.base.username {
            settings = settings.set_username(u);
        }
        if let Some(p) = &self.base.password {
            settings = settings.set_password(p);
        }
        let info = ConnectionAddr::Tcp(node.0.clone(), node.1)
            .into_connection_info()
            .map_err(unavailable)?
            .set_redis_settings(settings)
            .set_tcp_settings(bloomgate_redis::tcp_settings());
        let client = redis::Client::open(info).map_err(unavailable)?;
        let c = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .map_err(unavailable)?;
        let timeout = Some(self.opts.wait_timeout + Duration::from_secs(10));
        c.set_read_timeout(timeout).map_err(unavailable)?;
        c.set_write_timeout(timeout).map_err(unavailable)?;
        Ok(c)
    }

    /// The masters of the deployment.
    fn masters(&self) -> Result<Vec<(String, u16)>, StoreError> {
        let store = bloomgate_redis::Store::new(&self.base).map_err(store_err)?;
        let (nodes, master_of) = store.masters_by_slot().map_err(store_err)?;
        let mut idx: Vec<u32> = master_of.into_iter().filter(|&m| m != u32::MAX).collect();
        idx.sort_unstable();
        idx.dedup();
        Ok(idx.into_iter().map(|i| nodes[i as usize].clone()).collect())
    }

    /// With [`RedisOptions::wait_replicas`] = N: one warning per master
    /// with fewer than N replicas connected now (`INFO replication`), whose
    /// every add would wait out `--redis-wait-ms` and fail unacknowledged
    /// until enough replicas connect.
    fn replica_warnings(&self) -> Vec<String> {
        let want = self.opts.wait_replicas;
        if want == 0 {
            return Vec::new();
        }
        let masters = match self.masters() {
            Ok(m) => m,
            Err(e) => return vec![format!("could not count the replicas: {e}")],
        };
        let mut out = Vec::new();
        for node in masters {
            let info: Result<String, _> = self.connect(&node).and_then(|mut c| {
                redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut c)
                    .map_err(|e| StoreError::Unavailable(e.to_string()))
            });
            let connected = info.as_deref().ok().and_then(|i| {
                i.lines()
                    .find_map(|l| l.strip_prefix("connected_slaves:"))
                    .and_then(|n| n.trim().parse::<u32>().ok())
            });
            match connected {
                Some(n) if n >= want => {}
                Some(n) => out.push(format!(
                    "{}:{}: --redis-wait {want} but this master has {n} replica{} connected: every add to it waits {} ms and fails (not acknowledged) until {want} connect{}",
                    node.0,
                    node.1,
                    if n == 1 { "" } else { "s" },
                    self.opts.wait_timeout.as_millis(),
                    if want == 1 { "s" } else { "" },
                )),
                None => out.push(format!(
                    "{}:{}: could not count its replicas (INFO replication); --redis-wait {want} fails every add while fewer are connected",
                    node.0, node.1
                )),
            }
        }
        out
    }

    /// The names of the filters whose metadata keys exist, from `SCAN` on
    /// every master.
    fn scan_names(&self) -> Result<Vec<String>, StoreError> {
        let mut names = Vec::new();
        for node in self.masters()? {
            let mut c = self.connect(&node)?;
            let mut cursor: u64 = 0;
            loop {
                let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg("bg:{*}")
                    .arg("TYPE")
                    .arg("hash")
                    .arg("COUNT")
                    .arg(1000)
                    .query(&mut c)
                    .map_err(|e| match is_auth(&e) {
                        true => StoreError::Invalid(format!(
                            "{}:{}: Redis authentication failed ({e}): check the user and password in --store or --redis-password-file",
                            node.0, node.1
                        )),
                        false => StoreError::Unavailable(format!("SCAN: {e}")),
                    })?;
                for k in keys {
                    let name = k
                        .strip_prefix(b"bg:{")
                        .and_then(|r| r.strip_suffix(b"}"))
                        .filter(|n| !n.contains(&b'}'))
                        .and_then(|n| std::str::from_utf8(n).ok());
                    if let Some(n) = name {
                        names.push(n.to_string());
                    }
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Opens filter `name` from Redis and serves it; `None` if it does not exist.
    fn open_named(&self, name: &str) -> Result<Option<Arc<RedisNamed>>, StoreError> {
        let addr = Self::address_of(&self.opts, name)?;
        let f = match RedisFilter::open(&addr) {
            Ok(f) => f,
            Err(bloomgate_redis::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(store_err(e)),
        };
        let named = RedisNamed::new(name, Ok(RwLock::new(f)), &self.limits, self.health.clone());
        let mut m = self.filters.write().unwrap_or_else(|p| p.into_inner());
        let named = m.entry(name.to_string()).or_insert(named).clone();
        self.generation.fetch_add(1, Relaxed);
        Ok(Some(named))
    }

    /// The filter called `name`: served already, or opened from Redis now.
    pub fn need(&self, name: &str) -> Result<Arc<RedisNamed>, StoreError> {
        if let Some(n) = self.cached(name) {
            return Ok(n);
        }
        self.open_named(name)?
            .ok_or_else(|| StoreError::NotFound(name.into()))
    }

    /// Whether `name` is served already (asks nothing of Redis).
    pub fn serves(&self, name: &str) -> bool {
        self.cached(name).is_some()
    }

    fn cached(&self, name: &str) -> Option<Arc<RedisNamed>> {
        self.filters
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// The filter called `name`, if it is served or can be opened. When
    /// Redis cannot be asked, a handle whose every operation is
    /// [`StoreError::Unavailable`] (or [`StoreError::Invalid`] when Redis
    /// refused the credentials): a name that cannot be looked up must not
    /// read as a missing filter (whose lookups answer "absent").
    ///
    /// A name not served yet changes the [generation](Self::generation),
    /// so that callers caching the answer ask again: a filter created by
    /// another server, or a Redis back up, is seen at the next request.
    pub fn get(&self, name: &str) -> Option<Arc<RedisNamed>> {
        if let Some(n) = self.cached(name) {
            return Some(n);
        }
        let r = self.open_named(name);
        self.generation.fetch_add(1, Relaxed);
        let broken = match r {
            Ok(n) => return n,
            Err(StoreError::Unavailable(why)) => Broken::Unavailable(why),
            Err(StoreError::Invalid(why)) => Broken::Refused(why),
            Err(_) => return None,
        };
        Some(RedisNamed::new(
            name,
            Err(broken),
            &self.limits,
            self.health.clone(),
        ))
    }

    /// Changes when a filter is opened, created or deleted.
    pub fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }

    /// The filters served, sorted by name.
    pub fn all(&self) -> Vec<Arc<RedisNamed>> {
        // Started while Redis was down: look for the filters again.
        let _ = self.rescan(false);
        self.filters
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Names of the filters served, sorted.
    pub fn names(&self) -> Vec<String> {
        self.all().iter().map(|n| n.name().to_string()).collect()
    }

    /// Creates an empty filter in Redis (the blocked layout only): a zero
    /// file of the planned size is written to a temporary directory and
    /// pushed. A filter in Redis has one layer, so a scaling filter is
    /// made one non-scaling layer planned for at least
    /// [`Limits::redis_scaling_items`](crate::Limits) items.
    pub fn create(&self, name: &str, spec: &FilterSpec) -> Result<Arc<RedisNamed>, StoreError> {
        let scaled;
        let spec = match spec.fill {
            FillPolicy::Grow { .. } => {
                scaled = FilterSpec {
                    items: spec.items.max(self.limits.redis_scaling_items),
                    fill: FillPolicy::Fixed,
                    ..spec.clone()
                };
                &scaled
            }
            _ => spec,
        };
        let addr = Self::address_of(&self.opts, name)?;
        spec.validate()
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        match spec.fill {
            FillPolicy::Rotate(_) | FillPolicy::Clear { .. } => return Err(StoreError::Unsupported(
                "the rotate and clear fill policies: a filter stored in Redis has one layer that is never replaced; serve it from a data directory",
            )),
            FillPolicy::Grow { .. } | FillPolicy::Fixed | FillPolicy::Refuse => {}
        }
        if spec.layout != Layout::Blocked {
            return Err(StoreError::Invalid(
                "only the blocked layout can be stored in Redis".into(),
            ));
        }
        if self.cached(name).is_some() {
            return Err(StoreError::Exists(name.into()));
        }
        let params = super::first_params(spec, &self.limits)?;
        let dir = std::env::temp_dir().join(format!(
            "bloomgate-create-{}-{}",
            std::process::id(),
            random_seed()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| StoreError::io(dir.display(), e))?;
        let file = dir.join("new.bgf");
        let pushed = (|| {
            let mut f = bloomgate_engine::Filter::create_file(&file, params)?;
            f.persist()?;
            drop(f);
            bloomgate_redis::push(&file, &addr, false, &|_| {}).map_err(store_err)
        })();
        let _ = std::fs::remove_dir_all(&dir);
        pushed?;
        self.open_named(name)?
            .ok_or_else(|| StoreError::Unavailable(format!("{name}: created, then not found")))
    }

    /// Deletes a filter's keys. Returns whether it existed.
    pub fn delete(&self, name: &str) -> Result<bool, StoreError> {
        let addr = Self::address_of(&self.opts, name)?;
        let existed = bloomgate_redis::delete(&addr).map_err(store_err)?;
        let removed = self
            .filters
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name)
            .is_some();
        self.generation.fetch_add(1, Relaxed);
        Ok(existed || removed)
    }

    /// Adds entries (one outcome each), then waits for replicas if asked.
    ///
    /// An error here means the outcome is unknown: some items may have
    /// been added (their bits set on a master, the reply or the replicas'
    /// acknowledgement lost), so a retry may answer "exists" for them. The
    /// error says so; a client must treat every item of a failed add as
    /// new.
    pub fn add(
        &self,
        named: &RedisNamed,
        entries: &[&[u8]],
        out: &mut Vec<AddOutcome>,
    ) -> Result<(), StoreError> {
        let r = self.add_inner(named, entries, out).map_err(add_failed);
        self.health.note(r)
    }

    fn add_inner(
        &self,
        named: &RedisNamed,
        entries: &[&[u8]],
        out: &mut Vec<AddOutcome>,
    ) -> Result<(), StoreError> {
        let outcomes = named.wait(named.queue_add(entries))?;
        if self.opts.wait_replicas > 0 {
            let f = named.read()?;
            let keys: Vec<Vec<u8>> = entries
                .iter()
                .zip(&outcomes)
                .filter(|(_, o)| matches!(o, AddOutcome::New | AddOutcome::Exists))
                .filter_map(|(e, _)| f.entry_key(e).ok().map(|k| k.into_owned()))
                .collect();
            if !keys.is_empty() {
                self.wait_replicas(&f, &keys)?;
            }
        }
        out.extend(outcomes);
        Ok(())
    }

    /// Whether adds are queued ([`RedisStore::add_later`]): unless they
    /// must wait for replicas.
    pub fn queues_adds(&self) -> bool {
        self.opts.wait_replicas == 0
    }

    /// Queues an add of `entries` with the filter's other adds (see
    /// `coalesce`) and returns where its outcomes will arrive, for a caller
    /// that must not block; `None` when an add must also wait for replicas
    /// ([`RedisOptions::wait_replicas`]): [`RedisStore::add`] then.
    pub fn add_later(&self, named: &RedisNamed, entries: &[&[u8]]) -> Option<AddReply> {
        self.queues_adds().then(|| named.queue_add(entries))
    }

    /// On each master that `keys` were written to: sets one of its written
    /// bits again (a write that enters the replication stream after the
    /// batch) and `WAIT`s for the configured replicas, on one connection.
    fn wait_replicas(&self, f: &RedisFilter, keys: &[Vec<u8>]) -> Result<(), StoreError> {
        let (nodes, master_of) = f.store().masters_by_slot().map_err(store_err)?;
        let name = &f.address().name;
        // One written (shard, bit) per master.
        let mut fence: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for k in keys {
            let place = f.meta().place(k);
            let master = master_of[layout::shard_slot(name, place.shard) as usize];
            let first = place.redis_bits().next();
            if let Some(bit) = first {
                fence.entry(master).or_insert((place.shard, bit));
            }
        }
        let want = self.opts.wait_replicas;
        for (master, (shard, bit)) in fence {
            let node = nodes
                .get(master as usize)
                .cloned()
                .ok_or_else(|| StoreError::Unavailable("a slot has no master".into()))?;
            let mut waiters = lock(&self.waiters);
            let mut conn = match waiters.remove(&node) {
                Some(c) => c,
                None => self.connect(&node)?,
            };
            // A guarded add, not a bare BITFIELD: it never recreates a
            // shard evicted since the batch as zeros.
            f.set_bit_again(&mut conn, shard, bit).map_err(store_err)?;
            let got: i64 = redis::cmd("WAIT")
                .arg(want)
                .arg(self.opts.wait_timeout.as_millis() as u64)
                .query(&mut conn)
                .map_err(|e| {
                    StoreError::Unavailable(format!("{}:{}: WAIT: {e}", node.0, node.1))
                })?;
            waiters.insert(node.clone(), conn);
            if got < want as i64 {
                return Err(StoreError::Unavailable(format!(
                    "{}:{}: the add ran on the master but only {} of {want} replicas acknowledged it within {} ms (not acknowledged)",
                    node.0,
                    node.1,
                    got,
                    self.opts.wait_timeout.as_millis()
                )));
            }
        }
        Ok(())
    }

    /// Adds (`add`) or removes whitelist entries.
    pub fn whitelist(
        &self,
        named: &RedisNamed,
        items: &[&[u8]],
        add: bool,
    ) -> Result<Vec<Result<bool, KeyError>>, StoreError> {
        let lock = self
            .health
            .note(named.filter.as_ref().map_err(Broken::error))?;
        self.health.note(named.revalidate_if_due(lock))?;
        let mut f = lock.write().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            if let Err(e) = f.entry_key(item) {
                out.push(Err(e));
                continue;
            }
            let r = if add {
                f.whitelist_add(item)
            } else {
                f.whitelist_remove(item)
            };
            out.push(Ok(r.map_err(store_err)?));
        }
        Ok(out)
    }
}

/// The error of an add that failed: an unavailable store's says that the
/// outcome is unknown (some items may have been added, so a retry may
/// answer that they exist) and that the client must treat every item of
/// the add as new. Every add path (blocking or queued) answers through it.
pub fn add_failed(e: StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(why) => StoreError::Unavailable(format!(
            "{why} (add outcome unknown: items may have been added, and a retry may answer that they exist; treat every item of this add as new)"
        )),
        e => e,
    }
}

#[cfg(test)]
mod tests;
