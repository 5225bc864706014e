//! The store's deletable filters (cuckoo chains and counting Bloom
//! filters) as the `CF.*` commands reach them, served by the
//! [`LocalStore`](super::LocalStore) (see `store/local/deletable/` for the
//! log, the registry, the files and exactly-once replay around the
//! library's `TableList`); the [`RedisStore`](super::RedisStore) does not
//! offer them.
//!
//! A deletable filter is a [`Filter`] like any other, and both front ends
//! reach it through the store's one interface: lookups
//! ([`Filter::check_many`]), adds ([`Store::add_with`]: a copy each, or
//! only if absent), removes ([`Store::remove`]), whitelist edits
//! ([`Store::whitelist`]) and dumps ([`Store::scandump`]) are the calls
//! every filter answers; each logs and acknowledges its own changes. What
//! concerns the name (find, create, load: [`Store::cf_get`],
//! [`Store::cf_create`], [`Store::cf_loadchunk`]) goes through the store,
//! under its locks. Only what RedisBloom's `CF.*` protocol asks and no
//! other front end does is here, as narrow methods of [`Filter`]: the
//! copies of an item (`CF.COUNT`), the chain's length (`CF.ADD`'s
//! "Maximum expansions reached") and `CF.INFO`'s figures.

/// The served filter behind [`Filter::Deletable`] (public because that
/// variant is; the front ends call the store and the [`Filter`], never it).
pub use super::local::deletable::CfNamed;
pub use super::local::deletable::{
    redisbloom_rate, CfInfo, CfLayout, DeletableSpec, CF_DUMP_CHUNK,
};
use super::{Filter, Store, StoreError};
pub use bloomgate_engine::MAX_TABLES;

const UNSUPPORTED: &str = "cuckoo filters (CF.*) in Redis";

impl Store {
    /// The deletable filter called `name`, if there is one (never in a
    /// store without them): the filters of the `CF.*` commands.
    pub fn cf_get(&self, name: &str) -> Option<Filter> {
        match self {
            Store::Local(s) => s.deletables().get(name).map(Filter::Deletable),
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
            Some(n) => n.add_would_block(),
            // An add that creates the filter writes its file.
            None => is(b"CF.ADD") || is(b"CF.ADDNX") || is(b"CF.INSERT") || is(b"CF.INSERTNX"),
        }
    }

    /// All deletable filters, sorted by name.
    pub fn cf_all(&self) -> Vec<Filter> {
        match self {
            Store::Local(s) => s
                .deletables()
                .all()
                .into_iter()
                .map(Filter::Deletable)
                .collect(),
            Store::Redis(_) => Vec::new(),
        }
    }

    /// Creates a deletable filter (durable when it returns).
    pub fn cf_create(&self, name: &str, spec: &DeletableSpec) -> Result<Filter, StoreError> {
        match self {
            Store::Local(s) => s.cf_create(name, spec).map(Filter::Deletable),
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

impl Filter {
    /// `CF.COUNT`: the copies of `item` a deletable filter may hold (its
    /// matching fingerprints, an upper bound; a counting filter's smallest
    /// counter); 0 for an item not valid for its key rules, and for any
    /// other filter, which keeps no copies.
    pub fn copies(&self, item: &[u8]) -> u64 {
        match self.deletable() {
            Ok(n) => n.count(item),
            Err(_) => 0,
        }
    }

    /// The tables in a deletable filter's chain (at most [`MAX_TABLES`]:
    /// `CF.ADD` refuses every add once there are that many, as
    /// RedisBloom); 0 for any other filter. Cheap, unlike
    /// [`Filter::cf_info`].
    pub fn chain_len(&self) -> usize {
        self.deletable().map_or(0, |n| n.filters())
    }

    /// `CF.INFO`'s figures (also the description HTTP gives of a
    /// deletable filter); [`StoreError::NotDeletable`] for any other
    /// filter, whose figures are [`Filter::info`]'s.
    pub fn cf_info(&self) -> Result<CfInfo, StoreError> {
        Ok(self.deletable()?.info())
    }
}
