//! One memory budget for the input every client makes the server buffer.
//!
//! Per-connection limits ([`crate::Limits::max_command_bytes`])
//! bound what one client can make the server hold, but not what many can:
//! 60 connections each sending the first 30 MB of a huge `BF.ADD` argument
//! hold 1.8 GB. [`InputBudget`] bounds the sum, as Redis's
//! `maxmemory-clients` does:
//!
//! * every Redis-protocol connection accounts the capacity of its read buffer
//!   ([`Account::set`], after each read and each shrink). When the sum passes
//!   the budget, the connections holding the **largest** buffers are told to
//!   close ([`Account::killed`]) until what the others hold fits; each gets
//!   `-ERR client input buffer budget exceeded …` and is closed. Small
//!   clients, whose buffers are a few KiB, keep being served;
//! * every HTTP request with a body reserves its `Content-Length` (or the
//!   largest body allowed, when it has none) while it runs
//!   ([`InputBudget::reserve`]); a body that does not fit, even after the
//!   largest Redis-protocol buffers are closed, is refused with 503;
//! * clients that have not presented the token (when one is configured)
//!   count against a second, smaller [`InputBudget`] of their own
//!   ([`crate::App::input_unauth`]), so what they hold can never make the
//!   server refuse or close an authenticated client.
//!
//! What is accounted is buffer capacity, the memory really allocated for
//! input, not bytes received: a 30 MB argument arrives into a buffer that
//! grew to 32 MiB. The process's resident memory stays under the budget plus
//! what is not input: the filters, the replies being sent (a connection
//! flushes every 1 MiB of replies) and the allocator's slack, which
//! [`crate::malloc`] keeps small (measured by the 60-client attack in
//! `crates/cli/tests/serve_memory.rs`: peaks of 220–241 MiB for 256 MiB).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// The shared budget. Cheap to account against: one atomic add per change;
/// the registry of connections is only scanned when the budget is passed.
pub struct InputBudget {
    limit: usize,
    used: AtomicUsize,
    conns: Mutex<HashMap<u64, Arc<Holder>>>,
    next: AtomicU64,
    /// Connections closed to keep within the budget.
    evicted: AtomicU64,
    /// HTTP bodies refused for want of budget.
    refused: AtomicU64,
    /// Woken when a connection told to close has let its buffers go.
    released: Notify,
}

/// One connection's share.
#[derive(Default)]
struct Holder {
    size: AtomicUsize,
    killed: AtomicBool,
    kill: Notify,
}

/// A Redis-protocol connection's account; releases its share when dropped.
pub struct Account {
    budget: Arc<InputBudget>,
    holder: Arc<Holder>,
    id: u64,
}

/// Budget held by one HTTP body while its request runs.
pub struct Reservation {
    budget: Arc<InputBudget>,
    bytes: usize,
}

impl InputBudget {
    /// A budget of `limit` bytes (0: no limit).
    pub fn new(limit: usize) -> Arc<InputBudget> {
        Arc::new(InputBudget {
            limit: if limit == 0 { usize::MAX } else { limit },
            used: AtomicUsize::new(0),
            conns: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            released: Notify::new(),
        })
    }

    /// Bytes accounted now.
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// The budget in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Connections closed to keep within the budget, and HTTP bodies refused.
    pub fn pressure(&self) -> (u64, u64) {
        (self.evicted.load(Relaxed), self.refused.load(Relaxed))
    }

    /// Registers a connection, holding nothing yet.
    pub fn register(self: &Arc<Self>) -> Account {
        let id = self.next.fetch_add(1, Relaxed);
        let holder = Arc::new(Holder::default());
        self.lock().insert(id, holder.clone());
        Account {
            budget: self.clone(),
            holder,
            id,
        }
    }

    /// Reserves `bytes` for an HTTP body; `None` if they do not fit even
    /// after closing every connection that holds more.
    pub fn reserve(self: &Arc<Self>, bytes: usize) -> Option<Reservation> {
        let used = self.used.fetch_add(bytes, Relaxed) + bytes;
        if used > self.limit && !self.enforce(bytes) {
            self.used.fetch_sub(bytes, Relaxed);
            self.refused.fetch_add(1, Relaxed);
            return None;
        }
        Some(Reservation {
            budget: self.clone(),
            bytes,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Holder>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells the connections holding the largest buffers, each larger than
    /// `floor` bytes, to close, until the others fit in the budget. Returns
    /// whether they do.
    fn enforce(&self, floor: usize) -> bool {
        let conns = self.lock();
        // Memory of connections already told to close is freed when they
        // go; count it as gone.
        let mut used = self.used.load(Relaxed)
            - conns
                .values()
                .filter(|h| h.killed.load(Relaxed))
                .map(|h| h.size.load(Relaxed))
                .sum::<usize>();
        if used <= self.limit {
            return true;
        }
        let mut live: Vec<&Arc<Holder>> = conns
            .values()
            .filter(|h| !h.killed.load(Relaxed) && h.size.load(Relaxed) > floor)
            .collect();
        live.sort_by_key(|h| std::cmp::Reverse(h.size.load(Relaxed)));
        for h in live {
            if used <= self.limit {
                break;
            }
            h.killed.store(true, Relaxed);
            h.kill.notify_one();
            used -= h.size.load(Relaxed);
            self.evicted.fetch_add(1, Relaxed);
        }
        used <= self.limit
    }
}

impl Account {
    /// This connection now holds `bytes` of input buffers. Past the budget,
    /// the largest holders (perhaps this one) are told to close. Returns
    /// whether the share grew.
    pub fn set(&self, bytes: usize) -> bool {
        // Called after every read: most leave the buffer as it was.
        if self.holder.size.load(Relaxed) == bytes {
            return false;
        }
        let old = self.holder.size.swap(bytes, Relaxed);
        if bytes > old {
            let used = self.budget.used.fetch_add(bytes - old, Relaxed) + (bytes - old);
            if used > self.budget.limit && !self.holder.killed.load(Relaxed) {
                self.budget.enforce(0);
            }
            true
        } else {
            self.budget.used.fetch_sub(old - bytes, Relaxed);
            if self.holder.killed.load(Relaxed) {
                self.budget.released.notify_waiters();
            }
            false
        }
    }

    /// Resolves once what all connections hold, those told to close
    /// included, fits the budget again. [`InputBudget::enforce`] counts a
    /// closed connection's buffers as gone at once, but they are freed only
    /// when its task next runs; a connection whose buffer just grew waits
    /// here before reading into it, so that the memory really in use stays
    /// within the budget while the closed ones go.
    pub async fn until_released(&self) {
        loop {
            let released = self.budget.released.notified();
            tokio::pin!(released);
            // Registered before the check: a release between the two wakes it.
            released.as_mut().enable();
            if self.budget.used.load(Relaxed) <= self.budget.limit {
                return;
            }
            released.await;
        }
    }

    /// Resolves once this connection must close to keep within the budget.
    pub async fn killed(&self) {
        if !self.holder.killed.load(Relaxed) {
            self.holder.kill.notified().await;
        }
    }

    /// Whether this connection must close.
    pub fn is_killed(&self) -> bool {
        self.holder.killed.load(Relaxed)
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        self.set(0);
        self.budget.lock().remove(&self.id);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_holders_are_closed_first() {
        let b = InputBudget::new(100);
        let small: Vec<Account> = (0..5).map(|_| b.register()).collect();
        for a in &small {
            a.set(4);
        }
        let (big1, big2) = (b.register(), b.register());
        big1.set(50);
        assert!(!big1.is_killed());
        // 20 + 50 + 40 = 110 > 100: the largest goes, the rest fit.
        big2.set(40);
        assert!(big1.is_killed(), "largest not closed");
        assert!(!big2.is_killed() && small.iter().all(|a| !a.is_killed()));
        assert_eq!(b.pressure().0, 1);
        drop(big1);
        assert_eq!(b.used(), 60);
        // HTTP bodies: one that fits is reserved; one that fits once a
        // larger holder is closed closes it; one larger than every holder
        // that does not fit is refused and closes nobody.
        let r = b.reserve(30).expect("fits");
        assert_eq!(b.used(), 90);
        let r2 = b.reserve(35).expect("closing big2 (40) makes room");
        assert!(big2.is_killed());
        drop(big2);
        assert_eq!(b.used(), 85);
        assert!(b.reserve(90).is_none());
        assert_eq!(b.pressure(), (2, 1));
        assert!(small.iter().all(|a| !a.is_killed()));
        drop((r, r2, small));
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn growth_waits_until_closed_connections_let_go() {
        let b = InputBudget::new(100);
        let (big, small) = (b.register(), b.register());
        big.set(80);
        // 80 + 40 > 100: big is told to close but still holds its 80.
        assert!(small.set(40));
        assert!(big.is_killed() && !small.is_killed());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let wait = small.until_released();
            tokio::pin!(wait);
            let early =
                tokio::time::timeout(std::time::Duration::from_millis(20), wait.as_mut()).await;
            assert!(early.is_err(), "resolved while 120 of 100 are held");
            big.set(0);
            tokio::time::timeout(std::time::Duration::from_secs(5), wait)
                .await
                .expect("not woken by the release");
        });
    }

    #[test]
    fn a_killed_account_resolves() {
        let b = InputBudget::new(10);
        let a = b.register();
        a.set(11);
        assert!(a.is_killed());
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(a.killed());
    }
}
