//! The store's deletable filters (cuckoo chains and counting Bloom
//! filters) as the `CF.*` commands reach them, served by the
//! [`LocalStore`](super::LocalStore) (see `store/local/deletable/` for the
//! log, the registry, the files and exactly-once replay around the
//! library's `TableList`); the [`RedisStore`](super::RedisStore) does not
//! offer them. HTTP reaches them as every filter
//! ([`Store::need`](super::Store::need), [`Store::add`](super::Store::add),
//! [`Store::remove`](super::Store::remove)).
//!
//! The store hands out a filter ([`CfNamed`]) and front ends call it: an
//! add, a delete or a dump is one call on the filter, which logs and
//! acknowledges its own changes. Only what concerns the name (find,
//! create, load) goes through the store, under its locks.

use std::sync::Arc;

pub use super::local::deletable::{
    redisbloom_rate, CfAdded, CfInfo, CfLayout, CfNamed, DeletableSpec, CF_DUMP_CHUNK,
};
use super::{Store, StoreError};
pub use bloomgate_engine::MAX_TABLES;

const UNSUPPORTED: &str = "cuckoo filters (CF.*) in Redis";

impl Store {
    /// The deletable filter called `name`, if there is one (never in a
    /// store without them).
    pub fn cf_get(&self, name: &str) -> Option<Arc<CfNamed>> {
        match self {
            Store::Local(s) => s.deletables().get(name),
            Store::Redis(_) => None,
        }
    }

    /// Whether `name` is a deletable filter (or one being loaded): a Bloom
    /// command on it answers `WRONGTYPE`.
    pub fn cf_has(&self, name: &str) -> bool {
        match self {
            Store::Local(s) => s.deletables().has(name),
            Store::Redis(_) => false,
        }
    }

    /// The deletable filter called `name`, or [`StoreError::NotFound`]
    /// ([`StoreError::Unsupported`] for a store without them).
    pub fn cf_need(&self, name: &str) -> Result<Arc<CfNamed>, StoreError> {
        match self {
            Store::Local(s) => s
                .deletables()
                .get(name)
                .ok_or_else(|| StoreError::NotFound(name.into())),
            Store::Redis(_) => Err(StoreError::Unsupported(UNSUPPORTED)),
        }
    }

    /// Whether a `CF.*` command on `name` may wait (on a lock, for a
    /// snapshot's copy, or on a whole-file write: `CF.RESERVE`,
    /// `CF.LOADCHUNK`, `CF.SCANDUMP`'s copy): a front end then runs it off
    /// its event loop.
    pub fn cf_would_block(&self, cmd: &[u8], name: &str) -> bool {
        let is = |c: &[u8]| cmd.eq_ignore_ascii_case(c);
        if is(b"CF.RESERVE") || is(b"CF.LOADCHUNK") || is(b"CF.SCANDUMP") {
            return true;
        }
        match self.cf_get(name) {
            Some(n) => n.write_busy(),
            // An add that creates the filter writes its file.
            None => is(b"CF.ADD") || is(b"CF.ADDNX") || is(b"CF.INSERT") || is(b"CF.INSERTNX"),
        }
    }

    /// All deletable filters, sorted by name.
    pub fn cf_all(&self) -> Vec<Arc<CfNamed>> {
        match self {
            Store::Local(s) => s.deletables().all(),
            Store::Redis(_) => Vec::new(),
        }
    }

    /// Creates a deletable filter (durable when it returns).
    pub fn cf_create(&self, name: &str, spec: &DeletableSpec) -> Result<Arc<CfNamed>, StoreError> {
        match self {
            Store::Local(s) => s.cf_create(name, spec),
            Store::Redis(_) => Err(StoreError::Unsupported(UNSUPPORTED)),
        }
    }

    /// `CF.LOADCHUNK`: iteration 1 starts a load from a header, later ones
    /// load the chunks; the last one writes the filter's file.
    pub fn cf_loadchunk(&self, name: &str, iter: u64, data: &[u8]) -> Result<(), StoreError> {
        match self {
            Store::Local(s) => s.cf_loadchunk(name, iter, data),
            Store::Redis(_) => Err(StoreError::Unsupported(UNSUPPORTED)),
        }
    }
}
