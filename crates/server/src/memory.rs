//! The memory all served filters may take together (`serve --max-memory`).
//!
//! Each filter is capped on its own (`Limits::max_filter_bytes`), but a
//! server of many filters, or one that grows a filter by a large step, can
//! still ask for more than the machine has, and the kernel then kills it,
//! losing every client's connection. So every allocation of filter memory
//! a client can cause (a create, `BF.LOADCHUNK`/`CF.LOADCHUNK`, a growth
//! layer or sub-filter) first reserves its bytes here, and is refused with
//! an out-of-memory error (RESP `-OOM …`, as Redis answers past its
//! `maxmemory`; HTTP 507) before anything is allocated when the total would
//! pass the limit. What is already stored is never touched, and the replay
//! of acknowledged adds at start is never refused.
//!
//! The count is of filter bytes (the mapped Bloom layers, the counting and
//! cuckoo tables), not of the process's resident memory: a mapped filter is
//! page cache the kernel can drop and read again, but it is what the
//! filters need to be served at full speed, and it is what clients make
//! grow. The store recounts it from its filters after each create, delete
//! and snapshot ([`MemoryBudget::set_used`]); between recounts each
//! reservation adds to it.
//!
//! The default is [`DEFAULT_FRACTION`] of the smaller of the machine's
//! memory and the cgroup's limit (v2 `memory.max`, v1
//! `memory.limit_in_bytes`): room is left for connections' buffers, the
//! log, and the page cache of the files being written.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The default limit's share of the memory available to the process.
pub const DEFAULT_FRACTION: f64 = 0.75;

/// Filter bytes in use, against a limit.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    used: AtomicU64,
}

impl MemoryBudget {
    /// A budget of `limit` bytes (`u64::MAX`: none).
    pub fn new(limit: u64) -> MemoryBudget {
        MemoryBudget {
            limit,
            used: AtomicU64::new(0),
        }
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Filter bytes counted now.
    pub fn used(&self) -> u64 {
        self.used.load(Relaxed)
    }

    /// Sets the count from a recount of the filters.
    pub fn set_used(&self, bytes: u64) {
        self.used.store(bytes, Relaxed);
    }

    /// Reserves `bytes` more, or refuses (`Err` with what is used) if the
    /// total would pass the limit. Atomic: two creates cannot both take the
    /// last room.
    pub fn reserve(&self, bytes: u64) -> Result<(), u64> {
        self.used
            .fetch_update(Relaxed, Relaxed, |u| {
                u.checked_add(bytes).filter(|&t| t <= self.limit)
            })
            .map(|_| ())
    }
}

/// The default `--max-memory`: [`DEFAULT_FRACTION`] of the smaller of the
/// machine's memory and the cgroup's limit; `u64::MAX` if neither can be
/// read.
pub fn default_limit() -> u64 {
    match available_memory() {
        Some(m) => (m as f64 * DEFAULT_FRACTION) as u64,
        None => u64::MAX,
    }
}

/// The smaller of the machine's memory (`MemTotal`) and the cgroup's
/// memory limit, in bytes.
pub fn available_memory() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        let line = t.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    });
    [total, cgroup_limit()].into_iter().flatten().min()
}

/// The memory limit of this process's cgroup (v2 `memory.max`, v1
/// `memory.limit_in_bytes`), if it has one.
fn cgroup_limit() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut found = None;
    for line in own.lines() {
        // v2: "0::/path"; v1: "N:memory:/path" (or "N:…,memory,…:/path").
        let mut parts = line.splitn(3, ':');
        let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
        let file = if ctrl.is_empty() {
            format!("/sys/fs/cgroup{path}/memory.max")
        } else if ctrl.split(',').any(|c| c == "memory") {
            format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
        } else {
            continue;
        };
        let v = std::fs::read_to_string(&file)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        // "max" (v2) or a huge v1 value: no limit.
        if let Some(v) = v.filter(|&v| v < 1 << 60) {
            found = Some(found.map_or(v, |f: u64| f.min(v)));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stop_at_the_limit() {
        let b = MemoryBudget::new(100);
        assert_eq!(b.reserve(60), Ok(()));
        assert_eq!(b.reserve(50), Err(60));
        assert_eq!(b.reserve(40), Ok(()));
        assert_eq!(b.reserve(1), Err(100));
        assert_eq!(b.reserve(u64::MAX), Err(100));
        b.set_used(10);
        assert_eq!(b.reserve(90), Ok(()));
    }

    #[test]
    fn the_default_is_a_share_of_the_memory() {
        if let Some(m) = available_memory() {
            assert!(m > 0);
            assert!(default_limit() < m);
        }
    }
}
