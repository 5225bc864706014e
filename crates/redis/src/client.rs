//! Connections to one Redis server or to a Redis Cluster, behind one type.
//!
//! Built on the `redis` crate's blocking API: `redis::Client` for a server,
//! `redis::cluster::ClusterClient` for a cluster. The cluster client keeps
//! the slot map, sends a pipeline as one sub-pipeline per node (all sent
//! before any reply is read, so the nodes work at once), follows `MOVED`
//! and `ASK` (re-reading the slot map after `MOVED`, sending `ASKING`
//! during a migration), and reconnects to nodes that dropped. A batch that
//! still fails after its retries is an error ([`Error::Unavailable`] when a
//! node is down or the cluster is failing over).
//!
//! A [`Store`] is shared by threads: it keeps a pool of idle connections and
//! opens another when all are busy, so every thread of a batch has its own.

use std::sync::Mutex;
use std::time::Duration;

use redis::cluster::{cluster_pipe, ClusterClient, ClusterConnection};
use redis::{Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, Value};

use crate::address::Address;
use crate::error::{Error, Result};

/// How long to wait for a connection, and for the reply to a batch.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Cluster retries of a redirected or failed command, each after a short
/// backoff: enough to ride out a `MOVED` storm during a reshard, few enough
/// that a down master turns into an error within seconds.
const CLUSTER_RETRIES: u32 = 5;

enum Client {
    Single(redis::Client),
    Cluster(ClusterClient),
}

/// One open connection.
pub(crate) enum Conn {
    Single(redis::Connection),
    Cluster(Box<ClusterConnection>),
}

/// A server or cluster, with a pool of connections.
pub struct Store {
    client: Client,
    server: String,
    idle: Mutex<Vec<Conn>>,
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
        let infos: Vec<ConnectionInfo> = addr
            .nodes
            .iter()
            .map(|(h, p)| {
                ConnectionAddr::Tcp(h.clone(), *p)
                    .into_connection_info()
                    .map(|i| i.set_redis_settings(redis_info.clone()))
            })
            .collect::<redis::RedisResult<_>>()
            .map_err(|e| Error::from_redis(&server, e))?;
        let client = if addr.cluster {
            let mut b = ClusterClient::builder(infos)
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .retries(CLUSTER_RETRIES)
                .min_retry_wait(50)
                .max_retry_wait(1000);
            if let Some(u) = &addr.username {
                b = b.username(u);
            }
            if let Some(p) = &addr.password {
                b = b.password(p);
            }
            if addr.read_from_replicas {
                b = b.read_routing_strategy(redis::cluster_read_routing::RandomReplicaStrategy);
            }
            Client::Cluster(b.build().map_err(|e| Error::from_redis(&server, e))?)
        } else {
            let info = infos.into_iter().next().expect("one node");
            Client::Single(redis::Client::open(info).map_err(|e| Error::from_redis(&server, e))?)
        };
        Ok(Store {
            client,
            server,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// The server or cluster, for messages.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// True for a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.client, Client::Cluster(_))
    }

    fn connect(&self) -> Result<Conn> {
        let err = |e| Error::from_redis(&self.server, e);
        match &self.client {
            Client::Single(c) => {
                let conn = c
                    .get_connection_with_timeout(CONNECT_TIMEOUT)
                    .map_err(err)?;
                conn.set_read_timeout(Some(RESPONSE_TIMEOUT)).map_err(err)?;
                conn.set_write_timeout(Some(RESPONSE_TIMEOUT))
                    .map_err(err)?;
                Ok(Conn::Single(conn))
            }
            Client::Cluster(c) => Ok(Conn::Cluster(Box::new(c.get_connection().map_err(err)?))),
        }
    }

    /// Runs `cmds` as one pipeline (per node, in a cluster) and returns one
    /// reply per command, in order. A connection that failed is dropped,
    /// not returned to the pool.
    pub(crate) fn run(&self, cmds: &[Cmd]) -> Result<Vec<Value>> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        let pooled = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut conn = match pooled {
            Some(c) => c,
            None => self.connect()?,
        };
        let result = match &mut conn {
            Conn::Single(c) => {
                let mut p = redis::pipe();
                for cmd in cmds {
                    p.add_command(cmd.clone());
                }
                p.query::<Vec<Value>>(c)
            }
            Conn::Cluster(c) => {
                let mut p = cluster_pipe();
                for cmd in cmds {
                    p.add_command(cmd.clone());
                }
                p.query::<Vec<Value>>(c)
            }
        };
        match result {
            Ok(values) => {
                self.idle
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(conn);
                if values.len() != cmds.len() {
                    return Err(self.protocol(format!(
                        "{} replies to a pipeline of {} commands",
                        values.len(),
                        cmds.len()
                    )));
                }
                for v in &values {
                    if let Value::ServerError(e) = v {
                        return Err(Error::from_redis(&self.server, e.clone().into()));
                    }
                }
                Ok(values)
            }
            Err(e) => Err(Error::from_redis(&self.server, e)),
        }
    }

    /// Runs one command.
    pub(crate) fn one(&self, cmd: Cmd) -> Result<Value> {
        Ok(self.run(&[cmd])?.pop().expect("one reply"))
    }

    /// A [`Error::Protocol`] for this store.
    pub(crate) fn protocol(&self, problem: impl Into<String>) -> Error {
        Error::Protocol {
            server: self.server.clone(),
            problem: problem.into(),
        }
    }

    /// The master nodes of a cluster as `(host, port, first slot, last
    /// slot)` ranges (`CLUSTER SLOTS`); one range of all slots for a server.
    pub fn slot_ranges(&self) -> Result<Vec<(String, u16, u16, u16)>> {
        if !self.is_cluster() {
            return Ok(vec![(self.server.clone(), 0, 0, crate::layout::SLOTS - 1)]);
        }
        let v = self.one(redis::cmd("CLUSTER").arg("SLOTS").clone())?;
        let bad = || self.protocol("unexpected CLUSTER SLOTS reply");
        let Value::Array(ranges) = v else {
            return Err(bad());
        };
        let mut out = Vec::new();
        for r in ranges {
            let Value::Array(items) = r else {
                return Err(bad());
            };
            let (Some(Value::Int(a)), Some(Value::Int(b)), Some(Value::Array(master))) =
                (items.first(), items.get(1), items.get(2))
            else {
                return Err(bad());
            };
            let host = match master.first() {
                Some(Value::BulkString(h)) => String::from_utf8_lossy(h).into_owned(),
                Some(Value::SimpleString(h)) => h.clone(),
                _ => return Err(bad()),
            };
            let Some(Value::Int(port)) = master.get(1) else {
                return Err(bad());
            };
            out.push((host, *port as u16, *a as u16, *b as u16));
        }
        Ok(out)
    }
}
