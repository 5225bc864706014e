//! A cuckoo filter (Fan, Andersen, Kaminsky & Mitzenmacher, CoNEXT 2014):
//! set membership with deletion, in about `f / 0.95` bits per item.
//!
//! The math (false-positive rate, fingerprint width, load factor, why buckets
//! of 4, why any number of buckets) is in [`crate::math`], section
//! "Cuckoo filter". This module is the table.
//!
//! # Where an item lives
//!
//! `h = XXH3-128(item, seed)`. The fingerprint is
//! `fp = reduce(h.lo, 2^f − 1) + 1` (uniform over `1..2^f`; 0 marks an
//! empty slot), the first bucket `i1 = reduce(h.hi, nb)` (multiply-shift:
//! any `nb`), and the other `i2 = (H(fp) − i1) mod nb` with
//! `H(fp) = reduce(fp · 0x9E3779B97F4A7C15 mod 2⁶⁴, nb)`: partial-key cuckoo
//! hashing. `alt(i) = (H − i) mod nb` is an involution for every `nb`
//! (`alt(alt(i)) = H − (H − i) = i`), so a fingerprint can be moved to its
//! other bucket knowing only the bucket it is in, and the table has exactly
//! as many buckets as planned (no rounding to a power of two, which cost up
//! to twice the memory). Given `i1`, `H ↦ H − i1` is a bijection of
//! `0..nb`, so `i2` is exactly as uniform as `H(fp)`, as with
//! `i1 XOR H(fp)`. The two buckets coincide when `2·i1 ≡ H (mod nb)`: at
//! most 2 of the `nb` buckets per fingerprint, so for a fraction ≤ `2/nb` of
//! items, which then have one bucket (lookups and counts read it once; XOR
//! has the same case when `H = 0`). Files written before exact sizes (no
//! [`format::FLAG_CUCKOO_EXACT`]) have a power-of-two `nb` and
//! `i2 = i1 XOR H(fp)`; they are opened, answered and saved that way.
//! Slot `j` of bucket `i` is slot `s = i·b + j` of the table, stored
//! at exactly `f` bits: bits `s·f` up to `s·f + f` of the little-endian
//! 64-bit word array (a slot may span two words).
//!
//! # Inserting into a full table never loses anything
//!
//! When both buckets are full, an insert evicts a random fingerprint of one
//! of them, puts its own there, and moves the evicted one to *its* other
//! bucket, and so on up to `max_kicks` times. Every eviction is logged; if
//! the last evicted fingerprint still finds no room, the log is replayed
//! backwards, restoring each slot, and the insert returns [`CuckooFull`]:
//! the table is exactly as before the call. (The reference implementation
//! keeps the last victim in a one-slot stash and reports the filter full;
//! RedisBloom's `CF.ADD` reports "Filter is full". Neither drops an item,
//! but the stash makes the table's contents depend on the failed insert; the
//! undo log keeps "failed" meaning "did nothing".)
//!
//! # Concurrency: one writer lock, lock-free readers (a sequence lock)
//!
//! A kick chain moves fingerprints between arbitrary buckets, so striping
//! locks by bucket would need every bucket of the chain locked in a global
//! order, or path-search-then-move protocols as in libcuckoo. Writers here
//! take one `Mutex` instead (inserts and deletes are single-threaded in
//! RedisBloom too). Readers take no lock at all: every write is bracketed by
//! a version counter made odd before and even after (a seqlock), and a
//! lookup that saw the version change, or odd, retries. Without that a
//! reader could miss an item that a concurrent kick was moving from the
//! bucket it had not yet read to the one it already had (a false negative
//! under concurrency), or read a slot half-written across two words.
//!
//! A `RwLock` would make every lookup write the lock's shared reader count
//! (a locked instruction, and a cache line that bounces between the cores
//! of concurrent readers); the sequence lock's readers only read. Measured
//! (`deletable` bench, last line; 10⁶ items, one thread, on the 2-vCPU
//! development machine while another benchmark kept its load average at
//! 11–15): 7–11 M lookups/s lock-free against 5–7 M/s through a `RwLock`
//! read guard. The two-thread figures there are noise (no core was idle);
//! the bench prints them for a quiet machine. Writers do contend on the one
//! mutex: a workload of many concurrent kick-heavy writers would want
//! libcuckoo's fine-grained locking, which this does not attempt. The test
//! `readers_never_miss_stable_items_under_concurrent_writes` finds false
//! negatives when the readers' retry is removed. The writer lock also makes insert's "was it new?" exact: of several threads
//! inserting the same absent item, exactly one is told so.
//!
//! # Chains: a delete takes only the item's own copy
//!
//! One `CuckooFilter` is one table of fixed capacity; inserting into a full
//! one is an error. A chain of them ([`crate::chain::Chain`]) grows like RedisBloom's `EXPANSION`: when
//! its newest table is full it appends a table `2^e` times larger (the
//! false-positive rate then grows with the number of tables, as in
//! RedisBloom: each table is planned at the full rate). The server's
//! `CF.*` filters are such chains too.
//!
//! A lookup asks every table, so it never misses. A delete must pick *one*
//! copy to take, and a fingerprint does not say whose it is: if item X's
//! fingerprint in table k equals that of item Y stored in one of X's
//! buckets there, taking Y's copy instead of X's is harmless only if X's
//! own copy, wherever it is, answers Y's lookups as well. With a seed per
//! table that fails: X's copy in table j sits where Y's hash in table j
//! never looks, so Y is lost (a false negative) while X stays: 6,000 adds
//! and 3,000 deletes in chains of 3 to 6 tables (the server's
//! `tests/serve_cuckoo_delete.rs`) lost 24 to 91 of the 3,000 items kept.
//!
//! So a chain hashes every table alike, and the tables nest. Write the
//! first table's bucket count `n`; table k has `n·2^s` buckets (`s` =
//! [`CuckooParams::bucket_shift`]: 0 for the first table, growing by `e`
//! per table; equal for all with expansion 1) and the same seed and
//! fingerprint width. Bucket `i` of it is base bucket `q = i >> s` and
//! split bits `r = i mod 2^s`, and
//!
//! * `fp` as above (the same in every table), `i1 = reduce(h.hi, n·2^s)`;
//! * `alt(q·2^s + r) = ((H − q) mod n)·2^s + (r XOR G)`, with `H =
//!   reduce(fp · 0x9E3779B97F4A7C15 mod 2⁶⁴, n)` and `G` the top `s` bits
//!   of `fp · 0xC2B2AE3D27D4EB4F mod 2⁶⁴`. An involution (each part is
//!   one). With `s = 0` it is the exact-size map above: a table on its own
//!   and a chain's first table are the tables of every earlier release.
//!
//! Let `π(i) = i >> (s − t)` map table k's buckets (shift `s`) onto an
//! earlier table j's (shift `t ≤ s`). Then `π(i1_k) = i1_j` (`reduce` is
//! a floor of `h.hi · n·2^s / 2⁶⁴`, and flooring twice is flooring once)
//! and `π(alt_k(i)) = alt_j(π(i))` (the base part is the same map; the top
//! `s − t` split bits of `G_s` are `G_t`). So X's buckets in table j are
//! the image of its buckets in table k: `B_j(X) = π(B_k(X))`.
//!
//! Now let a delete of X take, from the **newest** table that has X's
//! fingerprint in X's buckets (say k), one such copy, which belongs to Y.
//! In table k, Y's copy is in a bucket of both `B_k(X)` and `B_k(Y)` and
//! the fingerprints are equal, so the two bucket pairs are one pair: the
//! orbit of that bucket under `alt_k(·, fp)`. Then for every earlier table
//! `B_j(X) = π(B_k(X)) = π(B_k(Y)) = B_j(Y)`. X's own copy is in k or in an
//! earlier table (no newer one has a match), in a bucket of X's that is a
//! bucket of Y's, with Y's fingerprint: it now answers for Y. Formally: the
//! invariant "each stored copy of each item is matched to its own slot,
//! which holds the item's fingerprint in one of its buckets of that table"
//! holds after an insert (its slot), a kick (a slot moves to the other
//! bucket of the same orbit), an undone insert (nothing moved), and such a
//! delete (Y takes X's slot). A lookup of an item with a copy finds its
//! slot. That holds for every `n` — `(H − q) mod n` needs no power of two —
//! and only needs each table's shift to be at least that of every earlier
//! table holding a match: [`CuckooFilter::refines`].
//!
//! Deleting from an older table first would not be safe (a pair that meets
//! in table j can be two pairs in table k), and neither is any table of a
//! chain whose tables were hashed apart (files written before chains
//! nested). [`crate::table::delete_table`] applies the rule: when no
//! table holding a match refines all the others holding one, the delete is
//! refused ([`crate::table::AmbiguousDelete`]) and nothing changes. A chain built here
//! never refuses; an old chain refuses only when the item's fingerprint
//! shows up in two separately hashed tables.

use std::path::Path;
use std::sync::atomic::{
    fence, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::format::{
    self, DeletableFile, DeletableHeader, DeletableKind, Geometry, OpenedDeletable, Origin,
    FORMAT_VERSION,
};
use crate::hash::{hash_item, reduce, HASH_XXH3_128};
use crate::math::{self, CuckooPlan, CUCKOO_DEFAULT_MAX_KICKS};
use crate::storage::Bits;
pub use crate::table::CuckooFull;
use crate::table::{Removal, Table};

/// Multiplier that spreads a fingerprint into the alternate-bucket offset
/// (2⁶⁴ / golden ratio: Fibonacci hashing, whose top bits `reduce` takes).
const ALT_MULT: u64 = 0x9E37_79B9_7F4A_7C15;

/// Multiplier whose top bits give a split table's low-bit offset
/// (XXH64's second prime: odd, and unrelated to [`ALT_MULT`], so the two
/// parts of the second bucket are independent).
const SPLIT_MULT: u64 = 0xC2B2_AE3D_27D4_EB4F;

/// The parameters of a cuckoo filter.
#[derive(Clone, Debug, PartialEq)]
pub struct CuckooParams {
    /// Buckets, at least 1 (any number: see the module documentation).
    pub buckets: u64,
    /// Slots per bucket, 1..=8.
    pub bucket_size: u32,
    /// Fingerprint width in bits, 2..=32.
    pub fingerprint_bits: u32,
    /// Evictions an insert may make before it fails (RedisBloom's
    /// MAXITERATIONS), 0..=65535.
    pub max_kicks: u32,
    /// Hash seed.
    pub seed: u64,
    /// 0 for a table on its own or the first table of a chain; for a later
    /// table of a chain, each of the first table's `buckets >> bucket_shift`
    /// buckets split in `2^bucket_shift` (see "Chains" in the module
    /// documentation), 0..=63.
    pub bucket_shift: u32,
    /// How keys are normalized before hashing (interpreted by `bloomgate-url`; 0 = raw bytes).
    pub key_kind: u8,
    /// How queries are matched (interpreted by `bloomgate-url`; 0 = exact).
    pub match_mode: u8,
    /// Items the filter was sized for.
    pub planned_items: u64,
    /// False-positive rate the filter was sized for.
    pub target_fp: f64,
}

impl CuckooParams {
    /// Parameters from a sizing plan ([`math::plan_cuckoo`]) with the given
    /// seed, raw keys and the default 500 evictions per insert.
    pub fn from_plan(plan: &CuckooPlan, seed: u64) -> CuckooParams {
        CuckooParams {
            buckets: plan.buckets,
            bucket_size: plan.bucket_size,
            fingerprint_bits: plan.fingerprint_bits,
            max_kicks: CUCKOO_DEFAULT_MAX_KICKS,
            seed,
            bucket_shift: 0,
            key_kind: 0,
            match_mode: 0,
            planned_items: plan.items,
            target_fp: plan.target_fp,
        }
    }

    /// Checks that the parameters describe an addressable filter.
    pub fn validate(&self) -> Result<()> {
        self.geometry().validate().map_err(Error::InvalidParams)
    }

    fn geometry(&self) -> Geometry {
        Geometry::Cuckoo {
            buckets: self.buckets,
            bucket_size: self.bucket_size,
            fingerprint_bits: self.fingerprint_bits,
            max_kicks: self.max_kicks,
            bucket_shift: self.bucket_shift,
        }
    }

    /// The parameters of the table a chain appends after a table with
    /// these: the same seed, fingerprint width, bucket size and kicks, and
    /// every bucket split in `2^extra_shift` (so `2^extra_shift` times the
    /// buckets and the planned items). `None` if the shift would pass 63
    /// or the count overflow.
    pub fn next_in_chain(&self, extra_shift: u32) -> Option<CuckooParams> {
        let shift = self.bucket_shift.checked_add(extra_shift)?;
        if shift > format::MAX_CUCKOO_BUCKET_SHIFT {
            return None;
        }
        let base = self.buckets >> self.bucket_shift;
        let buckets = base.checked_mul(1u64 << shift)?;
        Some(CuckooParams {
            buckets,
            bucket_shift: shift,
            planned_items: self
                .planned_items
                .saturating_mul(1u64 << extra_shift.min(63)),
            ..self.clone()
        })
    }

    /// Slots in the table.
    pub fn slots(&self) -> u64 {
        self.buckets * self.bucket_size as u64
    }

    /// Bytes of table data (packed slots, rounded up to whole 64-byte lines).
    pub fn bytes(&self) -> u64 {
        self.geometry().data_len().unwrap_or(u64::MAX)
    }
}

/// What only the writer touches.
struct Writer {
    /// xorshift64 state: which bucket and slot to evict from.
    rng: u64,
    /// The current insert's evictions: (slot, fingerprint it held).
    log: Vec<(u64, u64)>,
}

/// The sequence-lock version, alone on its cache line so that readers'
/// loads of it do not share a line with anything writers change often.
#[repr(align(64))]
struct Version(AtomicU64);

/// A cuckoo filter. See the [module documentation](self).
pub struct CuckooFilter {
    params: CuckooParams,
    data: Bits,
    /// Fingerprints stored.
    items: AtomicU64,
    version: Version,
    writer: Mutex<Writer>,
    mask: u64,
    /// The chain's first table's bucket count (`buckets >> bucket_shift`).
    base: u64,
    /// The second bucket is `i1 XOR H(fp)` (a file without
    /// [`format::FLAG_CUCKOO_EXACT`]); otherwise `(H(fp) − i1) mod nb`.
    xor_alt: bool,
    /// The file this filter was opened from, if any, and its header.
    origin: Option<Origin>,
}

impl std::fmt::Debug for CuckooFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuckooFilter")
            .field("params", &self.params)
            .field("items", &self.items())
            .field("path", &self.path())
            .finish()
    }
}

impl CuckooFilter {
    /// An empty in-memory filter.
    pub fn new(params: CuckooParams) -> Result<CuckooFilter> {
        params.validate()?;
        let bytes = params.bytes();
        let words = usize::try_from(bytes / 8).map_err(|_| Error::OutOfMemory(bytes))?;
        let data = Bits::heap(words).ok_or(Error::OutOfMemory(bytes))?;
        Ok(CuckooFilter::from_parts(params, data, 0, false, None))
    }

    /// An empty in-memory filter sized by `plan` with hash seed `seed`.
    pub fn with_plan(plan: &CuckooPlan, seed: u64) -> Result<CuckooFilter> {
        CuckooFilter::new(CuckooParams::from_plan(plan, seed))
    }

    fn from_parts(
        params: CuckooParams,
        data: Bits,
        items: u64,
        xor_alt: bool,
        origin: Option<Origin>,
    ) -> CuckooFilter {
        let mask = (1u64 << params.fingerprint_bits) - 1;
        let base = params.buckets >> params.bucket_shift;
        CuckooFilter {
            writer: Mutex::new(Writer {
                rng: params.seed ^ 0x2545_F491_4F6C_DD1D | 1,
                log: Vec::new(),
            }),
            params,
            data,
            items: AtomicU64::new(items),
            version: Version(AtomicU64::new(0)),
            mask,
            base,
            xor_alt,
            origin,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &CuckooParams {
        &self.params
    }

    /// Fingerprints stored (inserts that succeeded minus successful deletes).
    pub fn items(&self) -> u64 {
        self.items.load(Relaxed)
    }

    /// Slots in the table (its capacity at 100 % load).
    pub fn capacity(&self) -> u64 {
        self.params.slots()
    }

    /// The load: occupied fraction of the slots.
    pub fn load(&self) -> f64 {
        self.items() as f64 / self.params.slots() as f64
    }

    /// The false-positive rate predicted at the current load ([`math::cuckoo_fp`]).
    pub fn predicted_fp(&self) -> f64 {
        math::cuckoo_fp(
            self.params.fingerprint_bits,
            self.params.bucket_size,
            self.load(),
        )
    }

    /// The item's first bucket and fingerprint.
    #[inline]
    fn locate(&self, item: &[u8]) -> (u64, u64) {
        let h = hash_item(self.params.seed, item);
        let fp = reduce(h.lo, self.mask) + 1;
        (reduce(h.hi, self.params.buckets), fp)
    }

    /// The other bucket of fingerprint `fp` in bucket `i`.
    #[inline]
    fn alt(&self, i: u64, fp: u64) -> u64 {
        let x = fp.wrapping_mul(ALT_MULT);
        if self.xor_alt {
            return i ^ reduce(x, self.params.buckets);
        }
        let (n, s) = (self.base, self.params.bucket_shift);
        let h = reduce(x, n);
        // The base bucket `q` goes to `(h − q) mod n`; for a split table
        // the `s` low bits are XORed with the top `s` bits of `fp · SPLIT_MULT`.
        let q = i >> s;
        // h < n and q < n: h + (n − q) is in 1..2n, no overflow.
        let q2 = if h >= q { h - q } else { h + (n - q) };
        if s == 0 {
            return q2;
        }
        let g = fp.wrapping_mul(SPLIT_MULT) >> (64 - s);
        (q2 << s) | ((i ^ g) & ((1u64 << s) - 1))
    }

    /// The fingerprint in slot `s` (0 = empty).
    #[inline(always)]
    fn read(&self, s: u64) -> u64 {
        let words = self.data.words();
        let bit = s * self.params.fingerprint_bits as u64;
        let (w, sh) = ((bit / 64) as usize, (bit % 64) as u32);
        let mut v = words[w].load(Relaxed) >> sh;
        if sh + self.params.fingerprint_bits > 64 {
            v |= words[w + 1].load(Relaxed) << (64 - sh);
        }
        v & self.mask
    }

    /// Stores `fp` in slot `s`. Only the writer (holding `self.writer`,
    /// between `begin_write` and `end_write`) calls this, so the plain
    /// load-modify-store of each word races no other store.
    #[inline(always)]
    fn write(&self, s: u64, fp: u64) {
        let words = self.data.words();
        let f = self.params.fingerprint_bits;
        let bit = s * f as u64;
        let (w, sh) = ((bit / 64) as usize, (bit % 64) as u32);
        let x = words[w].load(Relaxed);
        words[w].store((x & !(self.mask << sh)) | (fp << sh), Relaxed);
        if sh + f > 64 {
            let high = sh + f - 64;
            let low_mask = (1u64 << high) - 1;
            let y = words[w + 1].load(Relaxed);
            words[w + 1].store((y & !low_mask) | (fp >> (64 - sh)), Relaxed);
        }
    }

    /// Slots of bucket `i`.
    #[inline(always)]
    fn bucket(&self, i: u64) -> std::ops::Range<u64> {
        let b = self.params.bucket_size as u64;
        i * b..i * b + b
    }

    #[inline(always)]
    fn find(&self, i: u64, fp: u64) -> Option<u64> {
        self.bucket(i).find(|&s| self.read(s) == fp)
    }

    #[inline(always)]
    fn matches(&self, i: u64, fp: u64) -> u32 {
        self.bucket(i).filter(|&s| self.read(s) == fp).count() as u32
    }

    /// Runs `f` until no write overlapped it (the read side of the
    /// sequence lock).
    #[inline(always)]
    fn read_stable<R>(&self, f: impl Fn() -> R) -> R {
        let mut spins = 0u32;
        loop {
            let v1 = self.version.0.load(Acquire);
            if v1 & 1 == 0 {
                let r = f();
                // Orders the data loads above before the version re-read.
                fence(Acquire);
                if self.version.0.load(Relaxed) == v1 {
                    return r;
                }
            }
            if spins < 64 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Makes the version odd: readers that overlap what follows retry.
    #[inline(always)]
    fn begin_write(&self) {
        let v = self.version.0.load(Relaxed);
        self.version.0.store(v + 1, Relaxed);
        // The odd version is visible before any data store that follows.
        fence(Release);
    }

    /// Makes the version even again, publishing the writes.
    #[inline(always)]
    fn end_write(&self) {
        let v = self.version.0.load(Relaxed);
        self.version.0.store(v + 1, Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        // A panic while holding the lock can only come from a bug between
        // begin_write and end_write; the table itself is only written
        // through complete slot stores, so continuing is sound.
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// True if the item may be in the filter; false if it certainly is not.
    /// Never locks.
    pub fn contains(&self, item: &[u8]) -> bool {
        let (i1, fp) = self.locate(item);
        let i2 = self.alt(i1, fp);
        self.read_stable(|| self.find(i1, fp).is_some() || self.find(i2, fp).is_some())
    }

    /// The number of slots in the item's two buckets that hold its
    /// fingerprint (RedisBloom's `CF.COUNT`): how many times it was inserted
    /// and not deleted, plus any other items' equal fingerprints.
    pub fn count(&self, item: &[u8]) -> u32 {
        let (i1, fp) = self.locate(item);
        let i2 = self.alt(i1, fp);
        self.read_stable(|| self.matches(i1, fp) + if i2 != i1 { self.matches(i2, fp) } else { 0 })
    }

    /// Adds the item (another copy of its fingerprint if it was there
    /// already, as RedisBloom's `CF.ADD`). Returns whether it was absent
    /// before: of several threads inserting the same absent item at once,
    /// exactly one is told true. Fails with [`CuckooFull`], changing
    /// nothing, when no slot can be freed within `max_kicks` evictions.
    pub fn insert(&self, item: &[u8]) -> std::result::Result<bool, CuckooFull> {
        self.insert_with(item, true)
    }

    /// Adds the item only if it is absent (RedisBloom's `CF.ADDNX`).
    /// Returns true if it was added; fails with [`CuckooFull`] like
    /// [`CuckooFilter::insert`].
    pub fn insert_if_absent(&self, item: &[u8]) -> std::result::Result<bool, CuckooFull> {
        self.insert_with(item, false)
    }

    fn insert_with(&self, item: &[u8], always: bool) -> std::result::Result<bool, CuckooFull> {
        let (i1, fp) = self.locate(item);
        let i2 = self.alt(i1, fp);
        let mut w = self.lock();
        // Under the writer lock nothing else changes the table: plain reads.
        let present = self.find(i1, fp).is_some() || self.find(i2, fp).is_some();
        if present && !always {
            return Ok(false);
        }
        self.begin_write();
        let placed = self.place(&mut w, i1, i2, fp);
        self.end_write();
        placed?;
        self.items.fetch_add(1, Relaxed);
        Ok(!present)
    }

    /// Puts `fp` into bucket `i1` or `i2`, evicting as needed; on failure
    /// undoes every eviction. Called between `begin_write` and `end_write`.
    fn place(
        &self,
        w: &mut Writer,
        i1: u64,
        i2: u64,
        fp: u64,
    ) -> std::result::Result<(), CuckooFull> {
        for i in [i1, i2] {
            if let Some(s) = self.find(i, 0) {
                self.write(s, fp);
                return Ok(());
            }
        }
        let b = self.params.bucket_size as u64;
        w.log.clear();
        let mut i = if next(&mut w.rng) & 1 == 0 { i1 } else { i2 };
        let mut fp = fp;
        for _ in 0..self.params.max_kicks {
            let s = i * b + next(&mut w.rng) % b;
            let victim = self.read(s);
            self.write(s, fp);
            w.log.push((s, victim));
            fp = victim;
            i = self.alt(i, fp);
            if let Some(s) = self.find(i, 0) {
                self.write(s, fp);
                return Ok(());
            }
        }
        // No room: restore every evicted fingerprint, newest first, so each
        // slot gets back exactly what it held before this insert.
        for &(s, old) in w.log.iter().rev() {
            self.write(s, old);
        }
        Err(CuckooFull {
            kicks: self.params.max_kicks,
        })
    }

    /// Deletes one copy of the item's fingerprint: [`Removal::Removed`] if
    /// one was found in its buckets, [`Removal::NotPresent`] (nothing
    /// changed) otherwise.
    ///
    /// Delete only items that were inserted: deleting an item that merely
    /// tests present (a false positive) removes another item's equal
    /// fingerprint, which can make it a false negative. This is inherent to
    /// cuckoo filters (and to RedisBloom's `CF.DEL`).
    pub fn remove(&self, item: &[u8]) -> Removal {
        let (i1, fp) = self.locate(item);
        let i2 = self.alt(i1, fp);
        let _w = self.lock();
        let Some(s) = self.find(i1, fp).or_else(|| self.find(i2, fp)) else {
            return Removal::NotPresent;
        };
        self.begin_write();
        self.write(s, 0);
        self.end_write();
        let _ = self
            .items
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
        Removal::Removed
    }

    /// True if every two items with equal fingerprints whose buckets meet
    /// in this table have equal fingerprints and equal buckets in
    /// `coarser` as well: a delete may then take a copy from this table
    /// even when `coarser` holds a match too (see "Chains" in the module
    /// documentation). True for the table itself and for the earlier
    /// tables of a chain that grew by [`CuckooParams::next_in_chain`];
    /// false for tables hashed apart (another seed, fingerprint width or
    /// base bucket count, a larger shift, or `XOR` buckets).
    pub fn refines(&self, coarser: &CuckooFilter) -> bool {
        if std::ptr::eq(self, coarser) {
            return true;
        }
        let (a, b) = (&self.params, &coarser.params);
        !self.xor_alt
            && !coarser.xor_alt
            && a.seed == b.seed
            && a.fingerprint_bits == b.fingerprint_bits
            && (a.key_kind, a.match_mode) == (b.key_kind, b.match_mode)
            && self.base == coarser.base
            && a.bucket_shift >= b.bucket_shift
    }

    /// Occupied slots, counted (a pass over the table; equals
    /// [`CuckooFilter::items`] unless the file's count was damaged).
    pub fn occupied_slots(&self) -> u64 {
        self.read_stable(|| {
            (0..self.params.slots())
                .filter(|&s| self.read(s) != 0)
                .count() as u64
        })
    }

    /// The table data as bytes (the file's data section). Concurrent
    /// writers may or may not be included; use [`CuckooFilter::to_bytes`]
    /// or [`CuckooFilter::save`] for a consistent copy.
    pub fn as_bytes(&self) -> &[u8] {
        self.data.bytes()
    }

    fn header(&self) -> DeletableHeader {
        DeletableHeader {
            version: FORMAT_VERSION,
            geometry: self.params.geometry(),
            hash_id: HASH_XXH3_128,
            key_kind: self.params.key_kind,
            match_mode: self.params.match_mode,
            flags: match (self.xor_alt, self.params.bucket_shift) {
                (true, _) => 0,
                (false, 0) => format::FLAG_CUCKOO_EXACT,
                (false, _) => format::FLAG_CUCKOO_EXACT | format::FLAG_CUCKOO_SHIFT,
            },
            seed: self.params.seed,
            items: self.items(),
            planned_items: self.params.planned_items,
            target_fp: self.params.target_fp,
            data_len: self.params.bytes(),
            data_checksum: 0,
        }
    }

    /// A consistent copy of the header and data: taken under the writer
    /// lock, so no kick chain is half done in it.
    fn snapshot(&self) -> (DeletableHeader, Vec<u8>) {
        let _w = self.lock();
        (self.header(), self.data.bytes().to_vec())
    }

    /// The whole file image: header and table (`docs/file-format.md`).
    pub fn to_bytes(&self) -> Vec<u8> {
        // One copy, the image itself, under the writer lock.
        let _w = self.lock();
        format::deletable_to_bytes(&self.header(), self.data.bytes())
    }

    /// The header of the file image of the table as it is now: the image
    /// is this header, then [`CuckooFilter::as_bytes`], with no copy of
    /// the table. Consistent only while no insert or delete runs until the
    /// data is written (the caller holds off writers, as a chain's owner
    /// does under its lock); [`CuckooFilter::to_bytes`] copies instead.
    pub fn image_header(&self) -> Vec<u8> {
        format::deletable_image_header(&self.header(), self.data.bytes())
    }

    /// A filter from a file image of `len` bytes read from `r` (as
    /// [`CuckooFilter::from_bytes`], the data read straight into the table:
    /// no second copy of it is held).
    pub fn read_from(r: &mut impl std::io::Read, len: u64) -> Result<CuckooFilter> {
        format::read_table(r, len)
    }

    /// A filter from a file image made by [`CuckooFilter::to_bytes`] (both
    /// checksums are verified): [`CuckooFilter::read_from`] on the bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<CuckooFilter> {
        CuckooFilter::read_from(&mut &bytes[..], bytes.len() as u64)
    }

    /// Writes the filter to `path` atomically (temp file, fsync, rename,
    /// directory fsync), from a consistent copy of the table.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let (header, data) = self.snapshot();
        format::save_deletable(path.as_ref(), &header, &data)
    }

    /// Opens a cuckoo filter file: reads and checks the header and maps the
    /// table copy-on-write. Inserts and deletes change this process's copy
    /// only; [`CuckooFilter::save`] writes them. See
    /// [`CuckooFilter::verify`] for the data checksum.
    pub fn open(path: impl AsRef<Path>) -> Result<CuckooFilter> {
        format::open_table(path.as_ref())
    }

    /// Reads the whole table of a filter opened from a file and compares it
    /// with the header's checksum ([`crate::FormatProblem::DataChecksum`] on
    /// corruption). In-memory filters have nothing to check against: Ok.
    pub fn verify(&self) -> Result<()> {
        self.origin
            .as_ref()
            .map_or(Ok(()), |o| o.verify(self.data.bytes()))
    }

    /// The file this filter was opened from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.origin.as_ref().map(|o| o.path.as_path())
    }
}

impl Table for CuckooFilter {
    fn contains(&self, item: &[u8]) -> bool {
        CuckooFilter::contains(self, item)
    }

    fn count(&self, item: &[u8]) -> u64 {
        u64::from(CuckooFilter::count(self, item))
    }

    fn insert(&self, item: &[u8]) -> std::result::Result<bool, CuckooFull> {
        CuckooFilter::insert(self, item)
    }

    fn remove(&self, item: &[u8]) -> Removal {
        CuckooFilter::remove(self, item)
    }

    fn refines(&self, coarser: &CuckooFilter) -> bool {
        CuckooFilter::refines(self, coarser)
    }

    fn next_in_chain(&self, shift: u32) -> Option<Result<CuckooFilter>> {
        self.params.next_in_chain(shift).map(CuckooFilter::new)
    }

    fn items(&self) -> u64 {
        CuckooFilter::items(self)
    }

    fn bytes(&self) -> u64 {
        self.params.bytes()
    }

    fn predicted_fp(&self) -> f64 {
        CuckooFilter::predicted_fp(self)
    }
}

impl DeletableFile for CuckooFilter {
    const KIND: DeletableKind = DeletableKind::Cuckoo;

    fn from_file(o: OpenedDeletable, origin: Option<Origin>) -> CuckooFilter {
        let xor_alt = o.header.flags & format::FLAG_CUCKOO_EXACT == 0;
        CuckooFilter::from_parts(
            params_of(&o.header),
            o.data,
            o.header.items,
            xor_alt,
            origin,
        )
    }
}

fn params_of(h: &DeletableHeader) -> CuckooParams {
    let Geometry::Cuckoo {
        buckets,
        bucket_size,
        fingerprint_bits,
        max_kicks,
        bucket_shift,
    } = h.geometry
    else {
        unreachable!("the opener checked the kind")
    };
    CuckooParams {
        buckets,
        bucket_size,
        fingerprint_bits,
        max_kicks,
        bucket_shift,
        seed: h.seed,
        key_kind: h.key_kind,
        match_mode: h.match_mode,
        planned_items: h.planned_items,
        target_fp: h.target_fp,
    }
}

/// xorshift64: the eviction choices need no quality beyond "not a fixed
/// pattern" (a fixed victim slot can cycle between two buckets).
#[inline(always)]
fn next(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

#[cfg(test)]
mod tests;
