//! bloomgate filters stored in Redis and Redis Cluster, shared by every
//! process that can reach the server: a fleet of crawlers that must not
//! fetch a URL twice, app servers guarding one database against lookups of
//! missing keys.
//!
//! One huge Redis value blocks Redis while it is written, copied or
//! migrated, and is capped at 512 MB. A filter here is many small strings
//! (shards of 16,383 blocks, about 1 MB), each byte-identical to its range
//! of a `.bgf` file's data, plus one metadata hash and a whitelist set
//! ([`layout`], `docs/redis-layout.md`). Only the blocked layout fits: an
//! item's `k` bits are in one 64-byte block, so in one shard, so
//!
//! * a lookup is one `GETRANGE` of 64 bytes, probed locally;
//! * an add reads the item's block and writes it back with the item's
//!   bits ORed in, in a transaction that first checks that its shard is
//!   whole (`WATCH`, `STRLEN`, `GETRANGE`, then `MULTI`, `SETRANGE`,
//!   `EXEC`): the item was new when some of its bits was 0, and `EXEC`
//!   runs only if nothing wrote the shard since it was read —
//!   add-if-absent;
//! * in a cluster, shard keys carry hash tags that spread a filter's shards
//!   evenly over all slots, so over all masters.
//!
//! Batches are pipelined (per node, in a cluster); a node that cannot
//! answer is an error ([`Error::Unavailable`]), never "absent".
//!
//! ```no_run
//! use bloomgate_redis::{Address, RedisFilter};
//!
//! let address = Address::parse("redis+cluster://10.0.0.1:7000,10.0.0.2:7000/crawl")?;
//! let filter = RedisFilter::open(&address)?;
//! let key = filter.entry_key(b"http://example.com/a").expect("a valid URL");
//! // Claim the URL: exactly one of the crawlers racing on it is told "new".
//! if filter.insert_keys(&[key.as_ref()])?[0] {
//!     // fetch it
//! }
//! # Ok::<(), bloomgate_redis::Error>(())
//! ```
#![deny(missing_docs)]

pub mod address;
mod batch;
mod client;
mod error;
mod filter;
pub mod layout;
pub mod transfer;
mod txn;

pub use address::{is_redis_address, Address};
pub use client::{tcp_settings, Node, Store};
pub use error::{Error, Result};
pub use filter::{AddLane, AddReport, Added, Info, RedisFilter, Revalidated, LANES, LANE_MIN};
pub use transfer::{delete, pull, push, Transferred};

/// Now, in µs since the Unix epoch: the time stamp of the `trace` events
/// that say where an add batch's time went (lined up with a client's own
/// record of its requests, such as `resp_paced`'s `RESP_PACED_TRACE`).
pub fn epoch_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
