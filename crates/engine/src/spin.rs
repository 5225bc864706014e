//! The one-word spin lock behind the engine's striped write locks (the
//! blocked Bloom filter's regions in `filter.rs`, the counting filter's
//! stripes in `counting.rs`).
//!
//! A spin lock rather than a `Mutex` because releasing it is a plain store
//! (a `Mutex` unlock is another locked instruction), and holders only ever
//! run a few dozen instructions per item, so waiters spin briefly and then
//! yield. Each lock sits alone on its cache line, so two writers in
//! neighbouring stripes do not bounce a line between cores.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// At most this many stripes (2^10): 1024 locks are 64 KiB, and with 2–64
/// writer threads contention is negligible.
pub(crate) const MAX_STRIPES_LOG2: u32 = 10;

/// One lock, alone on its cache line.
#[repr(align(64))]
pub(crate) struct SpinLock {
    locked: AtomicBool,
}

/// Holds a [`SpinLock`]; dropping it unlocks.
pub(crate) struct SpinGuard<'a>(&'a SpinLock);

impl SpinLock {
    /// An unlocked lock.
    pub(crate) const fn new() -> SpinLock {
        SpinLock {
            locked: AtomicBool::new(false),
        }
    }

    /// The lock if it is free now.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<SpinGuard<'_>> {
        self.locked
            .compare_exchange(false, true, Acquire, Relaxed)
            .ok()
            .map(|_| SpinGuard(self))
    }

    /// Waits for the lock: spins briefly, then yields to a holder that may
    /// have been descheduled.
    #[inline]
    pub(crate) fn lock(&self) -> SpinGuard<'_> {
        let mut spins = 0u32;
        loop {
            if let Some(guard) = self.try_lock() {
                return guard;
            }
            while self.locked.load(Relaxed) {
                if spins < 64 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

impl Drop for SpinGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: the next holder sees every word this holder stored.
        self.0.locked.store(false, Release);
    }
}

/// Locks for runs of consecutive blocks: at most 2^[`MAX_STRIPES_LOG2`] of
/// them, block `b` under lock `b >> shift`. Returns `(shift, locks)`.
pub(crate) fn stripes(blocks: u64) -> (u32, Box<[SpinLock]>) {
    let bits_needed = 64 - blocks.saturating_sub(1).leading_zeros();
    let shift = bits_needed.saturating_sub(MAX_STRIPES_LOG2);
    let count = ((blocks.max(1) - 1) >> shift) as usize + 1;
    (shift, (0..count).map(|_| SpinLock::new()).collect())
}
