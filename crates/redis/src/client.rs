//! Connections to one Redis server or to a Redis Cluster, behind one type.
//!
//! Built on the `redis` crate's blocking API. A batch arrives encoded
//! ([`Batch`]); for one server, its bytes are written as they are on a
//! pooled connection and the replies read one by one.
//!
//! For a cluster, a batch is cut by this module's copy of the slot map
//! (`CLUSTER SLOTS`) into one pipeline per node; every pipeline is sent
//! before any reply is read, so the nodes work at once. Commands answered
//! with a redirection (`MOVED` after a reshard, `ASK` while a slot
//! migrates, `TRYAGAIN`, `CLUSTERDOWN`) were not run; they are sent again
//! one by one through `redis::cluster::ClusterConnection`, which follows
//! redirections (sending `ASKING`), re-reads the slot map and retries with
//! backoff, and the slot map here is re-read for the next batch. So each
//! command runs once. (Adds are transactions, which the cluster client
//! cannot carry: they go through the crate's `txn` module, on connections
//! from the pools here, and follow redirections themselves.)
//!
//! Why not the crate's cluster pipeline (`cluster_pipe`): it fails the
//! whole pipeline when one command is redirected, after the other commands
//! ran, so an add's answers would be lost during every reshard. Checked
//! with redis 1.8.1 against Redis 7.0.15: a cluster pipeline of two `GET`s,
//! one of a key whose slot had just moved, returned
//! `Err(Pipeline failure: [(Index 0, error: Moved: 7629 …)])` (and `Ask`
//! while the slot was migrating), where a single `GET` followed the
//! redirection. (Its replies are read as values, and an error value fails
//! `query`; cluster pipelines have no `ignore_errors`.)
//!
//! A connection that failed (a node down, a timeout) is dropped with the
//! node's idle ones, and the slot map is re-read before the next batch,
//! which finds the promoted replica after a failover. A batch of reads is
//! then sent once more; a batch with writes is an error
//! ([`Error::Unavailable`]), as is a read that fails twice.
//!
//! Several batches that must fail apart (a server's lookups, grouped by
//! the master of their keys) can go at once on one thread
//! ([`Store::run_batches_into`]): every batch's pipelines are sent before
//! any reply is read, and each batch gets the outcome it would get alone,
//! its retry included. A caller that runs batch after batch passes its
//! own buffer of replies ([`Store::run_batch_into`]); a batch that goes to
//! a single node is written as it was encoded, not copied command by
//! command into a pipeline of its own.
//!
//! A [`Store`] is shared by threads: each node has a pool of idle
//! connections, and a busy pool opens another.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterConnection};
use redis::{
    Cmd, Connection, ConnectionAddr, ConnectionInfo, ConnectionLike, IntoConnectionInfo,
    RedisConnectionInfo, Value,
};

use crate::address::Address;
use crate::batch::{Batch, READ, REPLICA_OK};
use crate::error::{Error, Result};
use crate::layout::SLOTS;

/// How long to wait for a connection, and for the reply to a batch.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Retries of a redirected command on the cluster client's path, each after
/// a short backoff: enough to ride out a reshard, few enough that a down
/// master turns into an error within a few seconds.
const CLUSTER_RETRIES: u32 = 5;

/// The TCP settings of every connection to Redis: `TCP_NODELAY` on, as
/// Redis sets it on its side. redis-rs leaves Nagle's algorithm on by
/// default, which may hold a small write (a lone `HINCRBY`, the tail of a
/// pipeline) until the previous segment is acknowledged — and the peer
/// delays acknowledgements by up to 40 ms.
pub fn tcp_settings() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

/// Which commands of a batch go to one node.
enum Group {
    /// All of them, in order (one server).
    All,
    /// These, in this order.
    Some(Vec<usize>),
}

impl Group {
    fn indexes(&self, len: usize) -> Box<dyn Iterator<Item = usize> + '_> {
        match self {
            Group::All => Box::new(0..len),
            Group::Some(idx) => Box::new(idx.iter().copied()),
        }
    }
}

/// A node: `(host, port)`.
pub type Node = (String, u16);

/// Which master serves each slot now: the server itself, or a cluster's
/// slot map as last read.
pub(crate) enum Routes {
    Single(Node),
    Cluster(Arc<SlotMap>),
}

impl Routes {
    /// The master of `slot`, or `None` when no node serves it now.
    pub(crate) fn master(&self, slot: u16) -> Option<&Node> {
        match self {
            Routes::Single(node) => Some(node),
            Routes::Cluster(map) => match map.master[slot as usize] {
                u32::MAX => None,
                m => map.nodes.get(m as usize),
            },
        }
    }
}

/// Pipelines sent, their replies not read yet: per node, its connection
/// and which commands it was sent; and the first failure to send.
struct Sent {
    open: Vec<(Node, bool, Group, Connection)>,
    first_err: Option<Error>,
}

/// A batch sent to a cluster's nodes, and its commands that no node
/// served (sent after the replies are read, through the cluster client).
struct ClusterSent {
    sent: Sent,
    unmapped: Vec<usize>,
}

/// Which master serves each slot, as [`Store::slot_masters`] read it.
pub struct SlotMasters(Option<Arc<SlotMap>>);

impl SlotMasters {
    /// The index of the master of `slot` (0 for a single server;
    /// `u32::MAX` when no node serves it now).
    pub fn of(&self, slot: u16) -> u32 {
        match &self.0 {
            None => 0,
            Some(map) => map.master[slot as usize],
        }
    }
}

/// Which node serves each slot (and its replicas).
pub(crate) struct SlotMap {
    nodes: Vec<Node>,
    /// Per slot: index of the master in `nodes`, or `u32::MAX` when no
    /// node serves it.
    master: Vec<u32>,
    /// Per slot: indexes of its replicas.
    replicas: Vec<Vec<u32>>,
}

struct Cluster {
    client: ClusterClient,
    /// The client's own connection, for redirected commands.
    fallback: Mutex<Option<ClusterConnection>>,
    map: RwLock<Option<Arc<SlotMap>>>,
    seeds: Vec<Node>,
    read_from_replicas: bool,
}

/// A server or cluster, with pools of connections.
pub struct Store {
    server: String,
    redis_info: RedisConnectionInfo,
    single: Option<Node>,
    cluster: Option<Cluster>,
    /// Idle connections per node (replica connections are in READONLY mode
    /// and pooled under a separate key).
    idle: Mutex<HashMap<(Node, bool), Vec<Connection>>>,
    /// Commands resent because a node redirected them.
    redirected: AtomicU64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("server", &self.server)
            .finish()
    }
}

impl Store {
    /// Prepares connections to the address's server or cluster (nothing is
    /// opened until the first command).
    pub fn new(addr: &Address) -> Result<Store> {
        let server = addr.server();
        let mut redis_info = RedisConnectionInfo::default().set_db(addr.db);
        if let Some(u) = &addr.username {
            redis_info = redis_info.set_username(u);
        }
        if let Some(p) = &addr.password {
            redis_info = redis_info.set_password(p);
        }
        let mut store = Store {
            server: server.clone(),
            redis_info,
            single: None,
            cluster: None,
            idle: Mutex::new(HashMap::new()),
            redirected: AtomicU64::new(0),
        };
        if addr.cluster {
            let infos: Vec<ConnectionInfo> = addr
                .nodes
                .iter()
                .map(|n| store.info(n))
                .collect::<Result<_>>()?;
            let mut b = ClusterClient::builder(infos)
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .retries(CLUSTER_RETRIES)
                .min_retry_wait(50)
                .max_retry_wait(1000)
                .tcp_settings(tcp_settings());
            if let Some(u) = &addr.username {
                b = b.username(u);
            }
            if let Some(p) = &addr.password {
                b = b.password(p);
            }
            store.cluster = Some(Cluster {
                client: b.build().map_err(|e| Error::from_redis(&server, e))?,
                fallback: Mutex::new(None),
                map: RwLock::new(None),
                seeds: addr.nodes.clone(),
                read_from_replicas: addr.read_from_replicas,
            });
        } else {
            store.single = Some(addr.nodes[0].clone());
        }
        Ok(store)
    }

    /// The server or cluster, for messages.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// How many commands were resent because a node redirected them
    /// (`MOVED`, `ASK`, …: slots moving during a reshard or a failover).
    pub fn redirected(&self) -> u64 {
        self.redirected.load(Relaxed)
    }

    /// True for a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// The server, when this is one server (not a cluster).
    pub(crate) fn single(&self) -> Option<&Node> {
        self.single.as_ref()
    }

    fn err(&self, e: redis::RedisError) -> Error {
        Error::from_redis(&self.server, e)
    }

    /// An error of one node: named by itself (and, in a cluster, by the
    /// cluster's seeds), so that a message says which node failed.
    pub(crate) fn node_err(&self, node: &Node, e: redis::RedisError) -> Error {
        if self.cluster.is_some() {
            Error::from_redis(
                &format!("{}:{} (node of cluster {})", node.0, node.1, self.server),
                e,
            )
        } else {
            self.err(e)
        }
    }

    fn info(&self, node: &Node) -> Result<ConnectionInfo> {
        ConnectionAddr::Tcp(node.0.clone(), node.1)
            .into_connection_info()
            .map(|i| {
                i.set_redis_settings(self.redis_info.clone())
                    .set_tcp_settings(tcp_settings())
            })
            .map_err(|e| self.err(e))
    }

    /// A connection to `node` from its pool, or a new one.
    pub(crate) fn take(&self, node: &Node, replica: bool) -> Result<Connection> {
        self.take_counted(node, replica).0
    }

    /// [`Store::take`], and whether the connection was opened now.
    pub(crate) fn take_counted(&self, node: &Node, replica: bool) -> (Result<Connection>, bool) {
        let key = (node.clone(), replica);
        if let Some(c) = self.lock_idle().get_mut(&key).and_then(Vec::pop) {
            return (Ok(c), false);
        }
        (self.open(node, replica), true)
    }

    /// A new connection to `node`.
    fn open(&self, node: &Node, replica: bool) -> Result<Connection> {
        let err = |e| self.node_err(node, e);
        let client = redis::Client::open(self.info(node)?).map_err(err)?;
        let mut c = client
            .get_connection_with_timeout(CONNECT_TIMEOUT)
            .map_err(err)?;
        c.set_read_timeout(Some(RESPONSE_TIMEOUT)).map_err(err)?;
        c.set_write_timeout(Some(RESPONSE_TIMEOUT)).map_err(err)?;
        if replica {
            c.req_command(&redis::cmd("READONLY")).map_err(err)?;
        }
        Ok(c)
    }

    pub(crate) fn give_back(&self, node: &Node, replica: bool, c: Connection) {
        self.lock_idle()
            .entry((node.clone(), replica))
            .or_default()
            .push(c);
    }

    pub(crate) fn drop_pool(&self, node: &Node, replica: bool) {
        self.lock_idle().remove(&(node.clone(), replica));
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, HashMap<(Node, bool), Vec<Connection>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `cmds` (each a command on one key, its first argument) and
    /// returns one reply per command, in order; an error reply fails the
    /// batch.
    pub(crate) fn run(&self, cmds: &[Cmd]) -> Result<Vec<Value>> {
        let mut batch = Batch::new();
        for c in cmds {
            batch.push(c);
        }
        self.run_batch(&batch)
    }

    /// Runs the commands of `batch` (pipelined per node) and returns one
    /// reply per command, in order; an error reply fails the batch.
    pub(crate) fn run_batch(&self, batch: &Batch) -> Result<Vec<Value>> {
        let mut replies = Vec::new();
        self.run_batch_into(batch, &mut replies)?;
        Ok(replies
            .into_iter()
            .map(|v| v.expect("every reply came back"))
            .collect())
    }

    /// [`Store::run_batch`] into `replies` (emptied first, then one reply
    /// per command when it succeeds: each is `Some`), so that a caller
    /// that runs batch after batch keeps one buffer of replies.
    pub(crate) fn run_batch_into(
        &self,
        batch: &Batch,
        replies: &mut Vec<Option<Value>>,
    ) -> Result<()> {
        match self.run_once(batch, replies) {
            // A batch of reads that met a dead connection (the server
            // restarted, a replica took over) is sent once more on new
            // connections to a fresh slot map: reads can be repeated. Writes
            // cannot (they may have run), so their error stands.
            Err(e) if e.is_unavailable() && batch.all(READ) => {
                tracing::debug!(error = %e, "reads failed; retrying once on new connections");
                self.run_once(batch, replies)
            }
            other => other,
        }
    }

    fn run_once(&self, batch: &Batch, replies: &mut Vec<Option<Value>>) -> Result<()> {
        if let Some(e) = self.run_partial_into(batch, replies) {
            return Err(e);
        }
        self.no_error_reply(replies)
    }

    /// The first error reply among `replies`, as an error.
    fn no_error_reply(&self, replies: &[Option<Value>]) -> Result<()> {
        for v in replies {
            if let Some(Value::ServerError(e)) = v {
                return Err(self.err(e.clone().into()));
            }
        }
        Ok(())
    }

    /// Runs the commands of `batch` once (pipelined per node) and leaves in
    /// `replies` (emptied first, one entry per command) every reply that
    /// came back; returns the first failure. When one node fails, the
    /// replies of the others (and those it sent before failing) are still
    /// there. Error replies are replies (`Value::ServerError`). Nothing is
    /// sent again, so each command ran at most once.
    fn run_partial_into(&self, batch: &Batch, replies: &mut Vec<Option<Value>>) -> Option<Error> {
        replies.clear();
        replies.resize(batch.len(), None);
        if batch.is_empty() {
            return None;
        }
        match (&self.single, &self.cluster) {
            (Some(node), _) => self
                .pipelines(vec![(node.clone(), false, Group::All)], batch, replies)
                .err(),
            (None, Some(cluster)) => self.run_cluster(cluster, batch, replies).err(),
            (None, None) => unreachable!("a store is a server or a cluster"),
        }
    }

    /// Sends one pipeline per `(node, replica, commands)`, all before
    /// reading any reply, and stores the replies in `out` (those that came
    /// back, when a node fails).
    fn pipelines(
        &self,
        groups: Vec<(Node, bool, Group)>,
        batch: &Batch,
        out: &mut [Option<Value>],
    ) -> Result<()> {
        let sent = self.send_pipelines(groups, batch);
        self.recv_pipelines(sent, batch, out)
    }

    /// The sending half of [`Store::pipelines`].
    fn send_pipelines(&self, groups: Vec<(Node, bool, Group)>, batch: &Batch) -> Sent {
        let mut sent = Sent {
            open: Vec::with_capacity(groups.len()),
            first_err: None,
        };
        let mut packed = Vec::new();
        for (node, replica, group) in groups {
            let bytes = match &group {
                Group::All => batch.all_bytes(),
                Group::Some(idx) => {
                    packed.clear();
                    for &i in idx {
                        packed.extend_from_slice(batch.bytes(i));
                    }
                    &packed[..]
                }
            };
            match self.take(&node, replica).and_then(|mut c| {
                c.send_packed_command(bytes)
                    .map_err(|e| self.node_err(&node, e))?;
                Ok(c)
            }) {
                Ok(c) => sent.open.push((node, replica, group, c)),
                Err(e) => {
                    self.drop_pool(&node, replica);
                    sent.first_err.get_or_insert(e);
                }
            }
        }
        sent
    }

    /// The reading half of [`Store::pipelines`].
    fn recv_pipelines(&self, sent: Sent, batch: &Batch, out: &mut [Option<Value>]) -> Result<()> {
        let Sent {
            open,
            mut first_err,
        } = sent;
        for (node, replica, group, mut c) in open {
            let mut ok = true;
            for i in group.indexes(batch.len()) {
                match c.recv_response() {
                    Ok(v) => out[i] = Some(v),
                    Err(e) => {
                        // The node's other idle connections most likely
                        // died with this one (a restart, a failover).
                        self.drop_pool(&node, replica);
                        first_err.get_or_insert(self.node_err(&node, e));
                        ok = false;
                        break;
                    }
                }
            }
            if ok {
                self.give_back(&node, replica, c);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn run_cluster(
        &self,
        cluster: &Cluster,
        batch: &Batch,
        out: &mut [Option<Value>],
    ) -> Result<()> {
        let sent = self.send_cluster(cluster, batch)?;
        self.recv_cluster(cluster, sent, batch, out)
    }

    /// The sending half of [`Store::run_cluster`]: the batch cut by the
    /// slot map into one pipeline per node, each sent.
    fn send_cluster(&self, cluster: &Cluster, batch: &Batch) -> Result<ClusterSent> {
        let map = self.slot_map(cluster)?;
        let read_only = cluster.read_from_replicas && batch.all(REPLICA_OK);

        let mut groups: HashMap<(u32, bool), Vec<usize>> = HashMap::new();
        let mut unmapped = Vec::new();
        for i in 0..batch.len() {
            let slot = batch.slot(i) as usize;
            let master = map.master[slot];
            if master == u32::MAX {
                unmapped.push(i);
                continue;
            }
            let (node, replica) = match (read_only, map.replicas[slot].as_slice()) {
                (true, [_, ..]) => {
                    let r = &map.replicas[slot];
                    (r[i % r.len()], true)
                }
                _ => (master, false),
            };
            groups.entry((node, replica)).or_default().push(i);
        }
        let one_node = groups.len() == 1 && unmapped.is_empty();
        let groups: Vec<(Node, bool, Group)> = groups
            .into_iter()
            .map(|((n, r), idx)| {
                // Every command, in order: the batch's bytes as they are.
                let group = if one_node {
                    Group::All
                } else {
                    Group::Some(idx)
                };
                (map.nodes[n as usize].clone(), r, group)
            })
            .collect();
        Ok(ClusterSent {
            sent: self.send_pipelines(groups, batch),
            unmapped,
        })
    }

    /// The reading half of [`Store::run_cluster`]: the replies, and the
    /// commands redirected (or of slots no node served) sent again through
    /// the cluster client.
    fn recv_cluster(
        &self,
        cluster: &Cluster,
        sent: ClusterSent,
        batch: &Batch,
        out: &mut [Option<Value>],
    ) -> Result<()> {
        let ClusterSent { sent, unmapped } = sent;
        if let Err(e) = self.recv_pipelines(sent, batch, out) {
            // The node may have failed over: read the map again next time.
            self.forget_map(cluster);
            return Err(e);
        }
        // Redirected (not run) commands, and those of slots no node served
        // a moment ago, go through the cluster client one by one.
        let mut again = unmapped;
        for (i, v) in out.iter_mut().enumerate() {
            if let Some(Value::ServerError(e)) = v {
                if matches!(
                    e.code(),
                    "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN" | "LOADING"
                ) {
                    again.push(i);
                    // Not run: no reply until the resend answers.
                    *v = None;
                }
            }
        }
        if !again.is_empty() {
            self.redirected.fetch_add(again.len() as u64, Relaxed);
            tracing::debug!(
                commands = again.len(),
                "redirected; resending through the cluster client"
            );
            self.forget_map(cluster);
            let mut guard = cluster.fallback.lock().unwrap_or_else(|p| p.into_inner());
            if guard.is_none() {
                *guard = Some(cluster.client.get_connection().map_err(|e| self.err(e))?);
            }
            let conn = guard.as_mut().expect("connected");
            for i in again {
                match conn.req_packed_command(batch.bytes(i)) {
                    Ok(v) => out[i] = Some(v),
                    Err(e) => {
                        *guard = None;
                        return Err(self.err(e));
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs several batches, each with the outcome [`Store::run_batch_into`]
    /// would give it alone (`replies[b]` gets batch `b`'s replies), on this
    /// thread: in a cluster, every batch's pipelines are sent before any
    /// reply is read, so the nodes work at once, and a node that fails
    /// fails only the batches with commands on it. (A batch whose reads
    /// met a dead connection is sent once more after the others are read.)
    pub(crate) fn run_batches_into(
        &self,
        batches: &[Batch],
        replies: &mut [Vec<Option<Value>>],
    ) -> Vec<Result<()>> {
        let Some(cluster) = &self.cluster else {
            return batches
                .iter()
                .zip(replies.iter_mut())
                .map(|(b, r)| self.run_batch_into(b, r))
                .collect();
        };
        let sent: Vec<Option<Result<ClusterSent>>> = batches
            .iter()
            .map(|b| (!b.is_empty()).then(|| self.send_cluster(cluster, b)))
            .collect();
        batches
            .iter()
            .zip(replies.iter_mut())
            .zip(sent)
            .map(|((b, out), sent)| {
                out.clear();
                out.resize(b.len(), None);
                let Some(sent) = sent else {
                    return Ok(());
                };
                let once = sent
                    .and_then(|s| self.recv_cluster(cluster, s, b, out))
                    .and_then(|()| self.no_error_reply(out));
                match once {
                    // As in `run_batch_into`.
                    Err(e) if e.is_unavailable() && b.all(READ) => {
                        tracing::debug!(error = %e, "reads failed; retrying once on new connections");
                        self.run_once(b, out)
                    }
                    other => other,
                }
            })
            .collect()
    }

    fn forget_map(&self, cluster: &Cluster) {
        *cluster.map.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Where each slot's writes go now ([`Routes`]).
    pub(crate) fn routes(&self) -> Result<Routes> {
        match (&self.single, &self.cluster) {
            (Some(node), _) => Ok(Routes::Single(node.clone())),
            (None, Some(c)) => Ok(Routes::Cluster(self.slot_map(c)?)),
            (None, None) => unreachable!("a store is a server or a cluster"),
        }
    }

    /// Reads the slot map again before the next batch (after a
    /// redirection or a failed node); nothing for one server.
    pub(crate) fn forget_routes(&self) {
        if let Some(c) = &self.cluster {
            self.forget_map(c);
        }
    }

    /// Counts commands sent again because a node redirected them.
    pub(crate) fn count_redirected(&self, n: u64) {
        self.redirected.fetch_add(n, Relaxed);
    }

    /// The slot map, read from the first seed node that answers.
    fn slot_map(&self, cluster: &Cluster) -> Result<Arc<SlotMap>> {
        if let Some(m) = cluster
            .map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            return Ok(m.clone());
        }
        let mut last = None;
        for node in &cluster.seeds {
            let reply = self.take(node, false).and_then(|mut c| {
                let v = c
                    .req_command(&redis::cmd("CLUSTER").arg("SLOTS").clone())
                    .map_err(|e| self.err(e))?;
                self.give_back(node, false, c);
                Ok(v)
            });
            match reply.and_then(|v| self.parse_slots(node, v)) {
                Ok(map) => {
                    let map = Arc::new(map);
                    *cluster.map.write().unwrap_or_else(|p| p.into_inner()) = Some(map.clone());
                    return Ok(map);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| self.protocol("no cluster node to ask for the slot map")))
    }

    fn parse_slots(&self, asked: &Node, v: Value) -> Result<SlotMap> {
        let bad = || self.protocol("unexpected CLUSTER SLOTS reply");
        let Value::Array(ranges) = v else {
            return Err(bad());
        };
        let mut map = SlotMap {
            nodes: Vec::new(),
            master: vec![u32::MAX; SLOTS as usize],
            replicas: vec![Vec::new(); SLOTS as usize],
        };
        let index = |node: Node, nodes: &mut Vec<Node>| -> u32 {
            match nodes.iter().position(|n| *n == node) {
                Some(i) => i as u32,
                None => {
                    nodes.push(node);
                    nodes.len() as u32 - 1
                }
            }
        };
        for r in ranges {
            let Value::Array(items) = r else {
                return Err(bad());
            };
            let (Some(Value::Int(a)), Some(Value::Int(b))) = (items.first(), items.get(1)) else {
                return Err(bad());
            };
            let mut served_by = Vec::new();
            for n in &items[2..] {
                let Value::Array(n) = n else {
                    return Err(bad());
                };
                let host = match n.first() {
                    Some(Value::BulkString(h)) => String::from_utf8_lossy(h).into_owned(),
                    Some(Value::SimpleString(h)) => h.clone(),
                    _ => return Err(bad()),
                };
                // An empty or "?" host means "the node you asked".
                let host = if host.is_empty() || host == "?" {
                    asked.0.clone()
                } else {
                    host
                };
                let Some(Value::Int(port)) = n.get(1) else {
                    return Err(bad());
                };
                served_by.push(index((host, *port as u16), &mut map.nodes));
            }
            let Some((&master, replicas)) = served_by.split_first() else {
                return Err(bad());
            };
            for slot in (*a as usize)..=(*b as usize).min(SLOTS as usize - 1) {
                map.master[slot] = master;
                map.replicas[slot] = replicas.to_vec();
            }
        }
        Ok(map)
    }

    /// Runs one command.
    pub(crate) fn one(&self, cmd: Cmd) -> Result<Value> {
        Ok(self.run(&[cmd])?.pop().expect("one reply"))
    }

    /// Runs one command on one node (not routed by key: `CONFIG GET`).
    pub(crate) fn on_node(&self, node: &Node, cmd: &Cmd) -> Result<Value> {
        let mut c = self.take(node, false)?;
        match c.req_command(cmd) {
            Ok(v) => {
                self.give_back(node, false, c);
                Ok(v)
            }
            Err(e) => Err(self.node_err(node, e)),
        }
    }

    /// Which masters may evict a filter's keys: one warning per master
    /// whose `maxmemory-policy` is `allkeys-*` (Redis may then evict shard
    /// keys when it reaches `maxmemory`, and a filter missing a shard
    /// cannot answer until it is pushed again), or whose policy could not
    /// be read (`CONFIG` refused, as managed services do, or the node
    /// unreachable). `volatile-*` policies evict only keys with a time to
    /// live, which bloomgate never sets.
    pub fn eviction_warnings(&self) -> Vec<String> {
        let masters = match self.masters_by_slot() {
            Ok((nodes, master_of)) => {
                let mut idx: Vec<u32> = master_of.into_iter().filter(|&m| m != u32::MAX).collect();
                idx.sort_unstable();
                idx.dedup();
                idx.into_iter()
                    .map(|i| nodes[i as usize].clone())
                    .collect::<Vec<_>>()
            }
            Err(e) => return vec![format!("could not check the maxmemory-policy: {e}")],
        };
        let mut out = Vec::new();
        for node in masters {
            let reply = self.on_node(
                &node,
                redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy"),
            );
            let policy = match reply {
                Ok(Value::Array(kv)) => match kv.get(1) {
                    Some(Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
                    _ => None,
                },
                Ok(Value::Map(kv)) => match kv.first() {
                    Some((_, Value::BulkString(b))) => {
                        Some(String::from_utf8_lossy(b).into_owned())
                    }
                    _ => None,
                },
                Ok(_) => None,
                Err(e) => {
                    out.push(format!(
                        "{}:{}: could not check the maxmemory-policy ({e}); make sure it is noeviction (or volatile-*): a policy that evicts a shard key makes the filter unusable until pushed again",
                        node.0, node.1
                    ));
                    continue;
                }
            };
            match policy {
                Some(p) if p.starts_with("allkeys-") => out.push(format!(
                    "{}:{}: maxmemory-policy is {p}: when Redis reaches maxmemory it may evict shard keys, and a filter missing a shard cannot answer until pushed again; set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf), so that Redis refuses writes instead",
                    node.0, node.1
                )),
                Some(_) => {}
                None => out.push(format!(
                    "{}:{}: could not check the maxmemory-policy (unexpected reply); make sure it is noeviction",
                    node.0, node.1
                )),
            }
        }
        out
    }

    /// The error of an error reply.
    pub(crate) fn refused(&self, e: redis::ServerError) -> Error {
        self.err(e.into())
    }

    /// A [`Error::Protocol`] for this store.
    pub(crate) fn protocol(&self, problem: impl Into<String>) -> Error {
        Error::Protocol {
            server: self.server.clone(),
            problem: problem.into(),
        }
    }

    /// Per slot, the index of its master among the nodes of
    /// [`Store::masters_by_slot`] (`u32::MAX` for a slot no node serves),
    /// without copying the slot map: a lookup batch groups its keys by
    /// master with it, and copying the map's 16,384 entries per batch was
    /// a 64 KiB allocation each time.
    pub fn slot_masters(&self) -> Result<SlotMasters> {
        match (&self.single, &self.cluster) {
            (Some(_), _) => Ok(SlotMasters(None)),
            (None, Some(c)) => Ok(SlotMasters(Some(self.slot_map(c)?))),
            (None, None) => unreachable!("a store is a server or a cluster"),
        }
    }

    /// The nodes, and per slot the index of its master among them, for
    /// grouping work by node (one node for all slots of a single server;
    /// `u32::MAX` for a slot no node serves).
    pub fn masters_by_slot(&self) -> Result<(Vec<Node>, Vec<u32>)> {
        match (&self.single, &self.cluster) {
            (Some(node), _) => Ok((vec![node.clone()], vec![0; SLOTS as usize])),
            (None, Some(c)) => {
                let m = self.slot_map(c)?;
                Ok((m.nodes.clone(), m.master.clone()))
            }
            (None, None) => unreachable!("a store is a server or a cluster"),
        }
    }
}
