//! The store's errors ([`StoreError`]: every failure of an operation,
//! typed, so that each front end maps it once to its protocol: HTTP's
//! `ApiError`, RESP's `error_reply`) and what a damaged filter is
//! ([`Damaged`]).

use serde::Serialize;

use crate::wal;

/// A filter whose files are in the data directory but failed to load (a
/// flipped byte, a truncated or empty file, a garbage `.meta` or
/// whitelist, a damaged `NAME.cf`). It is *damaged*, not absent: every
/// command on its name gets [`StoreError::Damaged`], nothing creates a
/// filter of that name, and the server neither rewrites nor deletes its
/// files or its journal (new log records of it are only appended to the
/// journal, or the log segment holding them is kept) until the operator
/// repairs it: restores or rebuilds the file and reloads (SIGHUP, HTTP
/// reload, or a restart), or removes its files and reloads to discard it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Damaged {
    /// The filter's name.
    pub name: String,
    /// `bloom` (`NAME.bgf` and its companions), `cuckoo` (`NAME.cf`, or a
    /// counting or cuckoo `NAME.bgf` built by the CLI), or the layout of a
    /// file served through the library's `List` (`ribbon`).
    pub kind: &'static str,
    /// The filter's main file (`NAME.bgf` or `NAME.cf`).
    pub file: String,
    /// What failed, naming the file that failed (which may be a companion:
    /// a layer, `.meta`, the whitelist).
    pub fault: String,
}

/// Errors of store operations. Each maps to an HTTP status and a Redis error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No filter of that name.
    #[error("filter '{0}' not found")]
    NotFound(String),
    /// A filter of that name exists already.
    #[error("filter '{0}' already exists")]
    Exists(String),
    /// The name is not usable as a file name.
    #[error(
        "invalid filter name '{0}': use 1-200 of A-Z a-z 0-9 _ - . : and do not start with '.'"
    )]
    BadName(String),
    /// The store cannot serve the request now (a remote store's shard
    /// cannot be reached); try again later.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store does not offer this operation.
    #[error("not supported by this store: {0}")]
    Unsupported(&'static str),
    /// Bad parameters.
    #[error("{0}")]
    Invalid(String),
    /// An item longer than the server takes (its item size limit): a
    /// deletable filter refuses the whole batch for it.
    #[error("item is too long ({bytes} bytes; the limit is {limit})")]
    TooLong {
        /// The item's length.
        bytes: usize,
        /// The server's limit.
        limit: usize,
    },
    /// A delete that cannot tell which copy is the item's (a deletable
    /// filter whose sub-filters holding a match were hashed apart); nothing
    /// was changed.
    #[error("{0}")]
    Ambiguous(String),
    /// A file of the store failed to read or write; `what` names it.
    #[error("{what}: {source}")]
    Io {
        /// The file (and what was done to it).
        what: String,
        /// The cause: its kind tells a full disk from other failures.
        #[source]
        source: std::io::Error,
    },
    /// A filter file failed to open, verify or write.
    #[error(transparent)]
    File(#[from] bloomgate_engine::Error),
    /// A filter's files in the data directory (its layers, growth settings
    /// or whitelist) failed to load or write.
    #[error(transparent)]
    Files(bloomgate_blacklist::Error),
    /// Another process uses the data directory.
    #[error("{}: another bloomgate serve, or a bloomgate add or whitelist change, is using this data directory", .0.display())]
    DirBusy(std::path::PathBuf),
    /// The log failed.
    #[error(transparent)]
    Wal(#[from] wal::WalError),
    /// The filter's files failed to load: it is not served, and nothing
    /// replaces it until it is repaired (see [`Damaged`]).
    #[error("filter '{}' is damaged: {}; it is not served until its file is restored or rebuilt and reloaded", .0.name, .0.fault)]
    Damaged(Box<Damaged>),
    /// The filter cannot remove items: a Bloom filter, whose bits other
    /// items share.
    #[error(
        "'{0}' is a Bloom filter, which cannot remove items: its bits are shared \
         with other items, and clearing them would make those false negatives; a \
         list that needs removals belongs in a cuckoo or counting filter (CF.RESERVE, or \
         a create with \"layout\": \"cuckoo\" or \"counting\")"
    )]
    NotDeletable(String),
    /// The filter takes no changes (a static ribbon filter, served
    /// read-only): an add, a remove, or a create or load over its name.
    #[error("{0}")]
    ReadOnly(String),
    /// A filter file served through the library's `List` failed to open,
    /// verify, or write its whitelist.
    #[error(transparent)]
    List(#[from] bloomgate_list::Error),
    /// The filters would take more memory than the server allows
    /// (`--max-memory`, see [`crate::memory`]); nothing was allocated.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
}

impl From<Damaged> for StoreError {
    fn from(d: Damaged) -> Self {
        StoreError::Damaged(Box::new(d))
    }
}

impl StoreError {
    /// An I/O error `source` of `what` (a file, and what was done to it).
    pub fn io(what: impl std::fmt::Display, source: std::io::Error) -> StoreError {
        StoreError::Io {
            what: what.to_string(),
            source,
        }
    }

    /// The I/O error underneath, if there is one.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        fn engine(e: &bloomgate_engine::Error) -> Option<&std::io::Error> {
            match e {
                bloomgate_engine::Error::Io { source, .. } => Some(source),
                _ => None,
            }
        }
        match self {
            StoreError::Io { source, .. } => Some(source),
            StoreError::File(e) => engine(e),
            StoreError::List(e) => {
                let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
                while let Some(c) = cause {
                    if let Some(io) = c.downcast_ref::<std::io::Error>() {
                        return Some(io);
                    }
                    cause = c.source();
                }
                None
            }
            StoreError::Files(e) => match e {
                bloomgate_blacklist::Error::Io { source, .. } => Some(source),
                bloomgate_blacklist::Error::Engine(e) => engine(e),
                bloomgate_blacklist::Error::Whitelist(
                    bloomgate_blacklist::whitelist::WhitelistError::Io { source, .. },
                ) => Some(source),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether the disk (or a quota) is full: the front ends answer HTTP
    /// 507 `no_space`, and a RESP error that says so.
    pub fn is_no_space(&self) -> bool {
        match self {
            StoreError::Wal(e) => e.kind == wal::WalErrorKind::NoSpace,
            other => other.io_error().is_some_and(wal::is_no_space),
        }
    }
}

impl From<bloomgate_blacklist::Error> for StoreError {
    fn from(e: bloomgate_blacklist::Error) -> Self {
        match e {
            bloomgate_blacklist::Error::CannotGrow(_) => StoreError::Invalid(e.to_string()),
            bloomgate_blacklist::Error::Engine(bloomgate_engine::Error::OutOfMemory(n)) => {
                StoreError::OutOfMemory(format!(
                    "a layer of {n} bytes would pass the server's --max-memory"
                ))
            }
            bloomgate_blacklist::Error::DirBusy(d) => StoreError::DirBusy(d),
            other => StoreError::Files(other),
        }
    }
}
