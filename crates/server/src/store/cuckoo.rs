//! The store's cuckoo and counting filters (`CF.*`, and the HTTP API on
//! these deletable filters): served by the [`LocalStore`](super::LocalStore) (see
//! `store/local/cuckoo.rs` for the model, the files and exactly-once
//! replay); the [`RedisStore`](super::RedisStore) does not offer them.

use std::sync::Arc;

pub use super::local::cuckoo::{
    redisbloom_rate, CfAdded, CfInfo, CfLayout, CfNamed, CfSpec, CF_DUMP_CHUNK,
    DEFAULT_BUCKET_SIZE, DEFAULT_CAPACITY, DEFAULT_EXPANSION, DEFAULT_MAX_ITERATIONS, MAX_FILTERS,
};
use super::{Ack, Store, StoreError};

const UNSUPPORTED: &str = "cuckoo filters (CF.*) in Redis";

impl Store {
    /// The cuckoo filter called `name`, if there is one. A store without
    /// cuckoo filters answers `Ok(None)`.
    pub fn cf_get(&self, name: &str) -> Option<Arc<CfNamed>> {
        match self {
            Store::Local(s) => s.cf_get(name),
            Store::Redis(_) => None,
        }
    }

    /// Whether `name` is a cuckoo filter (or one being loaded): a Bloom
    /// command on it answers `WRONGTYPE`.
    pub fn cf_has(&self, name: &str) -> bool {
        match self {
            Store::Local(s) => s.cf_has(name),
            Store::Redis(_) => false,
        }
    }

    /// The cuckoo filter called `name`, or [`StoreError::NotFound`]
    /// ([`StoreError::Unsupported`] for a store without cuckoo filters).
    pub fn cf_need(&self, name: &str) -> Result<Arc<CfNamed>, StoreError> {
        match self {
            Store::Local(s) => s
                .cf_get(name)
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

    /// All cuckoo filters, sorted by name.
    pub fn cf_all(&self) -> Vec<Arc<CfNamed>> {
        match self {
            Store::Local(s) => s.cf_all(),
            Store::Redis(_) => Vec::new(),
        }
    }

    /// Creates a cuckoo filter (durable when it returns).
    pub fn cf_create(&self, name: &str, spec: &CfSpec) -> Result<Arc<CfNamed>, StoreError> {
        match self {
            Store::Local(s) => s.cf_create(name, spec),
            Store::Redis(_) => Err(StoreError::Unsupported(UNSUPPORTED)),
        }
    }

    /// Adds `items` to a cuckoo filter (`nx`: only those absent): one
    /// outcome per item, up to and including the first [`CfAdded::Full`]
    /// if `stop_at_full`. Visible at once, durable once the [`Ack`] resolves.
    pub fn cf_add(
        &self,
        named: &CfNamed,
        items: &[&[u8]],
        nx: bool,
        stop_at_full: bool,
        out: &mut Vec<CfAdded>,
    ) -> Result<Ack, StoreError> {
        match self {
            Store::Local(s) => s
                .cf_add(named, items, nx, stop_at_full, out)
                .map(|rx| Ack::from(Some(rx))),
            Store::Redis(_) => Err(StoreError::Unsupported(UNSUPPORTED)),
        }
    }

    /// Deletes one copy of `item`; returns whether one was found.
    pub fn cf_delete_item(&self, named: &CfNamed, item: &[u8]) -> Result<(bool, Ack), StoreError> {
        match self {
            Store::Local(s) => s
                .cf_delete_item(named, item)
                .map(|(found, rx)| (found, Ack::from(Some(rx)))),
            Store::Redis(_) => Err(StoreError::Unsupported(UNSUPPORTED)),
        }
    }

    /// `CF.SCANDUMP`: iteration 0 gives the header, later ones the
    /// sub-filters' bytes, [`CF_DUMP_CHUNK`] at a time; `(0, [])` ends.
    pub fn cf_scandump(&self, named: &CfNamed, iter: u64) -> Result<(u64, Vec<u8>), StoreError> {
        match self {
            Store::Local(s) => Ok(s.cf_scandump(named, iter)),
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
