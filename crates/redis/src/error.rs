//! The errors of this crate, as kinds a front end can map to its own
//! answers: [`Error::Unavailable`] is HTTP 503 or RESP `-TRYAGAIN` (retry
//! later), never "not present".

use std::path::PathBuf;

/// Errors of the Redis filter store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The address of a Redis filter did not parse.
    #[error("{address:?} is not a Redis filter address: {problem}")]
    Address {
        /// The address as given (without its password).
        address: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The address asks for something this build cannot do (TLS).
    #[error("{0}")]
    Unsupported(String),
    /// No filter of that name exists on the server.
    #[error("{server}: no filter named {name:?} (push one with `bloomgate push FILE ADDRESS`)")]
    NotFound {
        /// The server or cluster, as `host:port[,host:port…]`.
        server: String,
        /// The filter's name.
        name: String,
    },
    /// A filter of that name exists already.
    #[error("{server}: a filter named {name:?} exists already (replace it with --force)")]
    Exists {
        /// The server or cluster.
        server: String,
        /// The filter's name.
        name: String,
    },
    /// The filter cannot be stored in Redis in this layout.
    #[error("{0}")]
    WrongLayout(String),
    /// A shard or the metadata could not be read or written because a node
    /// is down, unreachable, failing over or refusing service for now
    /// (CLUSTERDOWN, TRYAGAIN, LOADING, timeouts, refused connections).
    /// The answer is unknown: a lookup that meets this is an error, never
    /// "absent", so a down node cannot create false negatives.
    #[error("{server}: Redis unavailable: {source}")]
    Unavailable {
        /// The server or cluster.
        server: String,
        /// The client's error.
        #[source]
        source: redis::RedisError,
    },
    /// Redis refused the credentials: a wrong password or user, a password
    /// given to a server that has none, or none given to one that needs
    /// one (`WRONGPASS`, `NOAUTH`). Retrying will not help; the address's
    /// `USER:PASSWORD` or the password file must be fixed.
    #[error("{server}: Redis authentication failed ({source}): check the user and password in the address or the --redis-password-file")]
    Auth {
        /// The server or cluster.
        server: String,
        /// The client's error.
        #[source]
        source: redis::RedisError,
    },
    /// Redis answered with an error that retrying will not fix (no
    /// permission, out of memory, wrong key type).
    #[error("{server}: Redis refused: {source}")]
    Refused {
        /// The server or cluster.
        server: String,
        /// The client's error.
        #[source]
        source: redis::RedisError,
    },
    /// Redis sent a reply this crate does not expect (a key of another
    /// type, metadata of another program, a shard of the wrong length).
    #[error("{server}: {problem}")]
    Protocol {
        /// The server or cluster.
        server: String,
        /// What was unexpected.
        problem: String,
    },
    /// A shard key of a filter whose metadata exists is missing or not of
    /// its length. A push writes every shard whole and nothing in this
    /// crate deletes one under its metadata, so this is lost data: a key
    /// evicted by Redis (`maxmemory` with an `allkeys-*` policy), deleted
    /// or overwritten by hand. Its bits are unknown, so lookups and adds
    /// that need it are errors, never "absent"; push the filter again.
    #[error("{server}: shard {shard} of filter {name:?} ({key}) is {problem}: the filter is damaged (a key evicted by Redis's maxmemory policy, or deleted); lookups in it cannot be answered — push the filter again (and set maxmemory-policy noeviction)")]
    Damaged {
        /// The server or cluster node.
        server: String,
        /// The filter's name.
        name: String,
        /// The shard's index.
        shard: u64,
        /// The shard's key.
        key: String,
        /// What is wrong: "missing", or "N bytes long instead of M".
        problem: String,
    },
    /// An entry is not valid for the filter's key kind.
    #[error("{item:?}: invalid {kind} item: {reason}")]
    InvalidItem {
        /// The entry.
        item: String,
        /// The filter's key kind.
        kind: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The filter file failed.
    #[error(transparent)]
    Engine(#[from] bloomgate_engine::Error),
    /// A local file failed.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Classifies an error of the Redis client: refused credentials are
    /// [`Error::Auth`], a down or moving node is [`Error::Unavailable`],
    /// anything else [`Error::Refused`].
    pub(crate) fn from_redis(server: &str, e: redis::RedisError) -> Error {
        let server = server.to_string();
        if e.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
        {
            return Error::Auth { server, source: e };
        }
        let transient_code = matches!(
            e.code(),
            Some("CLUSTERDOWN" | "TRYAGAIN" | "MASTERDOWN" | "LOADING" | "BUSY" | "MOVED" | "ASK")
        );
        if e.is_io_error()
            || e.is_cluster_error()
            || e.is_connection_refusal()
            || e.is_connection_dropped()
            || e.is_timeout()
            || transient_code
            || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
        {
            Error::Unavailable { server, source: e }
        } else {
            Error::Refused { server, source: e }
        }
    }

    /// True for [`Error::Unavailable`]: the operation may succeed if retried later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable { .. })
    }
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
