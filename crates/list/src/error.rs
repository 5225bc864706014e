//! The errors of a [`List`](crate::List), as kinds a front end maps to its
//! own answers.
//!
//! The rule they keep: when a list cannot tell whether an item is on it (a
//! damaged or truncated file, a Redis node down, a shard evicted), the
//! operation fails with one of these; it never answers "absent". A request
//! that does not apply to the list's layout or store ([`Error::Unsupported`],
//! [`Error::CannotRemove`]) is refused before anything is read or changed.

/// Errors of a list.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A filter file, its layers, its whitelist or its data directory
    /// failed (unreadable, damaged, truncated, locked by a server).
    #[error(transparent)]
    File(#[from] bloomgate_blacklist::Error),
    /// The engine failed on a counting or cuckoo filter file.
    #[error(transparent)]
    Engine(#[from] bloomgate_engine::Error),
    /// A Redis address did not parse, or Redis failed. A lookup that meets
    /// an unavailable node or a missing shard is this error, never
    /// "absent" ([`bloomgate_redis::Error::Unavailable`],
    /// [`bloomgate_redis::Error::Damaged`]).
    #[error(transparent)]
    Redis(Box<bloomgate_redis::Error>),
    /// A filter in Redis could not be opened (not found, no connection).
    #[error("opening {address}")]
    RedisOpen {
        /// The address, without its password.
        address: String,
        /// Why.
        #[source]
        source: Box<bloomgate_redis::Error>,
    },
    /// The file's header names a key kind or match mode this build does
    /// not know.
    #[error("{address}: unknown {what} code {code} (written by a newer bloomgate?)")]
    UnknownRules {
        /// The file.
        address: String,
        /// "key kind" or "match mode".
        what: &'static str,
        /// The code found.
        code: u8,
    },
    /// An entry or whitelist item is not valid for the list's key kind.
    #[error("{item:?}: invalid {kind} item: {reason}")]
    InvalidItem {
        /// The item as given (lossily decoded).
        item: String,
        /// The list's key kind.
        kind: bloomgate_url::KeyKind,
        /// Why it is invalid.
        reason: bloomgate_url::KeyError,
    },
    /// The list's layout cannot delete: clearing an item's bits in a Bloom
    /// filter would clear bits other items share (false negatives).
    #[error("{address} is a {layout} Bloom filter, which cannot delete entries: clearing an entry's bits would also clear bits that other entries share (false negatives). Filters that can delete: --layout counting or --layout cuckoo (bloomgate build --layout cuckoo …; see bloomgate plan --layout cuckoo for their cost)")]
    CannotRemove {
        /// The list.
        address: String,
        /// Its layout (`blocked`, `classic`).
        layout: &'static str,
    },
    /// A cuckoo filter has no room for another item: it and nothing else
    /// was not added (every eviction was undone).
    #[error("the cuckoo filter is full: no room after {kicks} evictions (nothing was changed)")]
    Full {
        /// Evictions tried.
        kicks: u32,
    },
    /// A delete in a chain of tables hashed apart that cannot tell which
    /// table's copy is the item's: nothing was deleted.
    #[error(transparent)]
    Ambiguous(#[from] bloomgate_engine::AmbiguousDelete),
    /// The request does not apply to this list's layout or store (an
    /// option of the caller's, such as a checksum check of a filter in
    /// Redis): a mistake in how the list was asked, not a failure.
    #[error("{address}: {problem}")]
    Unsupported {
        /// The list.
        address: String,
        /// What does not apply, and why.
        problem: String,
    },
    /// A change was asked of a list opened for reading only
    /// ([`OpenOptions::update`](crate::OpenOptions::update)).
    #[error("{0}: opened for reading only; open it with OpenOptions::update to change it")]
    ReadOnly(String),
}

impl Error {
    /// True when the caller asked for something that does not apply (a
    /// bad address, an option of another store or layout): a usage error
    /// for a command line, as opposed to a failure while doing the work.
    pub fn is_usage(&self) -> bool {
        match self {
            Error::Unsupported { .. } => true,
            Error::Redis(e) => matches!(**e, bloomgate_redis::Error::Address { .. }),
            _ => false,
        }
    }
}

impl From<bloomgate_redis::Error> for Error {
    fn from(e: bloomgate_redis::Error) -> Error {
        Error::Redis(Box::new(e))
    }
}
