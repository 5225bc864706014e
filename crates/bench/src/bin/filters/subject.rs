//! What every filter under test is to the harness: the [`Subject`] trait
//! (inserts, lookups, batched paths where a filter has them, untimed
//! fills), the keys fed to it, and the settings every subject shares.

use bloomgate_bench::push_key;

pub(crate) const TARGET_FP: f64 = 1e-4;
pub(crate) const SEED: u64 = 0x5EED_B100_u64;
/// Prefetch pipeline depth used by the harness's own batched loops (sbbf-rs),
/// the same as the engine's BATCH.
pub(crate) const PIPE: usize = 32;

// ---------------------------------------------------------------------------
// The subjects

pub(crate) trait Subject {
    fn name(&self) -> String;
    fn bits(&self) -> u64;
    fn k(&self) -> String;
    fn predicted_fp(&self, n: u64) -> f64;
    fn insert(&mut self, key: &[u8]);
    fn contains(&self, key: &[u8]) -> bool;
    /// Whether the batched (hash + prefetch pipelined) paths exist.
    fn has_batch(&self) -> bool {
        false
    }
    /// Insert every key, one at a time.
    fn insert_all(&mut self, keys: &[&[u8]]) {
        for k in keys {
            self.insert(k);
        }
    }
    /// Insert every key with the batched path (only called if `has_batch`).
    fn insert_all_batch(&mut self, keys: &[&[u8]]) {
        self.insert_all(keys)
    }
    /// Whether the subject also has a shared (`&self`, thread-safe) insert
    /// path beside the one timed as its inserts (bloomgate's blocked
    /// filter: `insert_owned` is timed as its insert, `insert` here).
    fn has_shared(&self) -> bool {
        false
    }
    /// Insert every key through the shared path, one at a time, then
    /// batched (only called if `has_shared`).
    fn insert_all_shared(&mut self, keys: &[&[u8]], batched: bool) {
        let _ = batched;
        self.insert_all(keys)
    }
    /// How many keys are reported present, one lookup at a time.
    fn count(&self, keys: &[&[u8]]) -> u64 {
        let mut c = 0u64;
        for k in keys {
            c += self.contains(k) as u64;
        }
        c
    }
    /// Same, batched (only called if `has_batch`).
    fn count_batch(&self, keys: &[&[u8]], _out: &mut Vec<bool>) -> u64 {
        self.count(keys)
    }
    /// Replace the bit array by random bits at the density `n` inserted items
    /// would give (untimed; only for the slow classic peers at DRAM size).
    /// The memory holding the filter's bits, where the harness can see it
    /// (to report how much of it is on huge pages).
    fn memory(&self) -> Option<(*const u8, usize)> {
        None
    }
    fn prefill_synthetic(&mut self, _n: u64) -> bool {
        false
    }
    /// Untimed bulk load of keys `lo..hi` (generated on the fly, in chunks).
    fn fill(&mut self, lo: u64, hi: u64) {
        let batch = self.has_batch();
        for_key_chunks(lo, hi, |keys| {
            if batch {
                self.insert_all_batch(keys)
            } else {
                self.insert_all(keys)
            }
        });
    }
}

/// Calls `f` with consecutive chunks of the keys numbered `lo..hi`.
pub(crate) fn for_key_chunks(lo: u64, hi: u64, mut f: impl FnMut(&[&[u8]])) {
    const CHUNK: u64 = 1 << 14;
    let mut data = Vec::with_capacity(CHUNK as usize * 64);
    let mut ends = Vec::with_capacity(CHUNK as usize);
    let mut s = lo;
    while s < hi {
        let e = (s + CHUNK).min(hi);
        data.clear();
        ends.clear();
        for i in s..e {
            push_key(&mut data, i);
            ends.push(data.len());
        }
        let mut start = 0;
        let slices: Vec<&[u8]> = ends
            .iter()
            .map(|&x| {
                let r = &data[start..x];
                start = x;
                r
            })
            .collect();
        f(&slices);
        s = e;
    }
}
