//! The filter itself: insertion, lookup, batches, union, statistics. Its
//! parameters are [`Params`] (`params.rs`); its file (open, save, verify,
//! in-place updates) is `filter/file.rs`, a child of this module; batched
//! inserts into a shared filter are `filter/batch.rs`.
//!
//! A [`Filter`] is one bit array plus the parameters needed to address it. It
//! is `Sync`: any number of threads may insert and look up at once through
//! `&Filter`. Lookups never lock; blocked inserts take a per-region lock and
//! classic inserts use atomic `fetch_or` (see [`Regions`]). Insertion never
//! clears a bit, so a completed insertion is visible to every later lookup:
//! there are no false negatives, even under concurrency. A writer that holds
//! the filter alone (`&mut Filter`, as `build` does) inserts through
//! `filter/owned.rs` instead: no locks or atomics, the same bits.
//!
//! # Add-if-absent
//!
//! [`Filter::insert`] (and [`Filter::insert_prepared`]) answer "was this item
//! absent?" **exactly under concurrency**: of N threads inserting the same
//! absent item at once, exactly one is told `true`; for an item already
//! (probably) present, none is. A crawler's "have I fetched this URL?" and
//! `bloomgate dedup` rely on it.
//!
//! Atomic `fetch_or` alone cannot decide it. An item has k bits; each
//! `fetch_or` tells its caller only whether *that* bit was new. Two threads
//! inserting the same item interleave: thread A sets bits 1–6 first, thread B
//! bits 7–12 first, and each finds at least one bit it set itself, so both
//! answer "new". (Measured with the lock-free path on 2 cores: 8 threads ×
//! the same 10⁴ classic items, 20 rounds, 877 items told "new" more than once
//! in a release build, 6,311 in a debug build; the test
//! `lock_free_classic_inserts_can_both_claim_an_item`.) Deciding needs
//! the read of all k bits and the writes to be one atomic step with respect
//! to other inserts of the same item, i.e. a lock that every insert of that
//! item takes:
//!
//! * **Blocked**: every write to a block already happens under its region's
//!   lock (see [`Regions`]), and the test for missing bits and the stores are
//!   inside it (`or_block_locked`), so the second inserter sees all the
//!   first one's bits and answers `false`.
//! * **Classic**: the k bits are spread over the whole array, so no region
//!   covers them. The single insert takes one of the same striped locks
//!   chosen by the item's hash (`Regions::of_hash`): two inserts of one item
//!   always take the same stripe; inserts of different items rarely share
//!   one (1024 stripes). The k words are prefetched before the lock, so the
//!   lock is not held across k cache misses one after another.
//!
//! A lookup that races an insert may answer either way, as for any reader;
//! only the inserts' answers are exact. The bulk paths ([`Filter::insert_batch`],
//! in-place updates, [`crate::slice`]) count new items but do not promise
//! exactness against a concurrent insert of the same item, and stay lock-free
//! for classic: they take no stripe lock.
//!
//! # Layouts
//!
//! * **Classic** — positions `reduce(x_i, m)` with enhanced double hashing
//!   over 64-bit values (Dillinger & Manolios 2004): `x_0 = hi`, `y_0 = lo`,
//!   `x_{i+1} = x_i + y_i`, `y_{i+1} = y_i + i` (mod 2⁶⁴). Kirsch & Mitzenmacher
//!   showed two hash values suffice asymptotically; doing the arithmetic on
//!   64 bits *before* range reduction avoids the short cycles that
//!   `(h1 + i·h2) mod m` has for small or even `m`, and the cubic term of the
//!   enhanced variant breaks the remaining `h2 = 0` degeneracy. Predicted
//!   FP: `math::classic_fp`.
//! * **Blocked** — a block of 512 bits chosen by the hash's high bits, then
//!   `k` probes inside it derived from 32 other bits (see `arch`): the
//!   block `reduce(h, m/512)` and the probes from the low 32 bits of `h` for
//!   XXH3-64 (hash ids 3 and 2: new filters get 3, whose probes lie in
//!   consecutive words, `arch::Probes`), `reduce(hi, m/512)` and the low 32
//!   bits of `lo` for XXH3-128 (hash id 1, older files); all in `place.rs`.
//!   Predicted FP: `math::blocked_fp` (hash ids 1 and 2), `math::words_fp`
//!   (hash id 3).
//!
//! # Prepare, then probe
//!
//! [`Filter::prepare`] hashes an item and computes where it lives;
//! [`Filter::prefetch`] asks the CPU to start loading that memory;
//! [`Filter::contains_prepared`] probes it. [`Filter::contains_batch`] keeps a
//! rolling window of lookups in flight and [`Filter::insert_batch`] (in
//! `filter/batch.rs`) one of inserts, or for a large filter sorts the batch
//! by region first, so that the cache misses of a DRAM-resident filter
//! overlap instead of being paid one after another.
//!
//! # Kernels
//!
//! The in-block probes run on the best instruction set of the CPU
//! ([`Kernel::best`]: AVX-512, AVX2, or the scalar reference). Lookup loops
//! are compiled once per kernel through [`arch::dispatch`], so hashing, range
//! reduction and probing inline into one body.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use rayon::prelude::*;

use crate::arch::{self, Block, Kernel, WordsItem};
use crate::error::{Error, Result};
use crate::hash::{reduce, HashId};
use crate::math::{self, Layout, Plan, BLOCK_BITS};
use crate::params::{random_seed, Params};
pub use crate::place::Prepared;
use crate::place::{Locator, INLINE_LENGTHS};
#[cfg(test)]
use crate::spin::MAX_STRIPES_LOG2 as MAX_REGIONS_LOG2;
use crate::spin::{SpinGuard as RegionGuard, SpinLock as Region};
use crate::storage::Bits;

mod batch;
mod file;
mod owned;

pub(crate) use file::{FileState, UpdateLog};

/// What a blocked lookup reads, held in locals (see `Filter::blocked_view`).
#[derive(Copy, Clone)]
struct BlockedView<'a> {
    blocks: &'a [Block],
    locator: &'a Locator,
    id: HashId,
    k: u32,
}

impl BlockedView<'_> {
    /// The block `item` lives in and its 32-bit in-block hash.
    #[inline(always)]
    fn locate(&self, item: &[u8]) -> (usize, u32) {
        self.locate_as(self.id, item)
    }

    /// [`BlockedView::locate`] under hash `id` (a constant where a loop
    /// was compiled for one hash, see [`BlockedView::contains_batch`]).
    #[inline(always)]
    fn locate_as(&self, id: HashId, item: &[u8]) -> (usize, u32) {
        self.locator.block_as(id, item, self.blocks.len() as u64)
    }

    /// The rolling-window pipeline of [`Filter::contains_batch`]; `out` has
    /// one slot per item. The hash id is tested once, and the loop
    /// compiled once per hash.
    #[inline(always)]
    fn contains_batch<T: AsRef<[u8]>>(&self, kernel: Kernel, items: &[T], out: &mut [bool]) {
        match self.id {
            HashId::Xxh3_64Words => {
                self.contains_batch_as(HashId::Xxh3_64Words, kernel, items, out)
            }
            HashId::Xxh3_64 => self.contains_batch_as(HashId::Xxh3_64, kernel, items, out),
            HashId::Xxh3_128 => self.contains_batch_as(HashId::Xxh3_128, kernel, items, out),
        }
    }

    #[inline(always)]
    fn contains_batch_as<T: AsRef<[u8]>>(
        &self,
        id: HashId,
        kernel: Kernel,
        items: &[T],
        out: &mut [bool],
    ) {
        let mut ring = [(0usize, 0u32); PIPELINE];
        for (slot, item) in ring.iter_mut().zip(items) {
            *slot = self.locate_as(id, item.as_ref());
            arch::prefetch(self.blocks.as_ptr().wrapping_add(slot.0));
        }
        for (i, answer) in out.iter_mut().enumerate() {
            let slot = &mut ring[i % PIPELINE];
            let (block, h) = *slot;
            if let Some(next) = items.get(i + PIPELINE) {
                *slot = self.locate_as(id, next.as_ref());
                arch::prefetch(self.blocks.as_ptr().wrapping_add(slot.0));
            }
            *answer = arch::block_contains(kernel, id.probes(), &self.blocks[block], h, self.k);
        }
    }
}

/// A Bloom filter of either layout.
pub struct Filter {
    pub(crate) params: Params,
    pub(crate) bits: Bits,
    pub(crate) items: AtomicU64,
    /// Where items live: the hash `params.hash` keyed by `params.seed`,
    /// its secret seeded once.
    locator: Locator,
    regions: Regions,
    kernel: Kernel,
    /// [`Filter::contains`]'s lookup of blocked filters of hash id 3,
    /// compiled for `kernel`.
    words_item: WordsItem<Locator>,
    /// How many item lengths from 17 up take that lookup: all of
    /// [`INLINE_LENGTHS`] for blocked filters of hash id 3, none for others.
    words_span: usize,
    pub(crate) file: Option<FileState>,
    /// Set during an in-place update of the file (see `format`).
    pub(crate) update: Option<Box<UpdateLog>>,
    /// Set by any write since the filter was opened or created: the file
    /// header's set-bit count no longer describes these bits.
    pub(crate) touched: AtomicBool,
}

/// Write locks of the blocked layout, one per contiguous region of blocks.
///
/// An atomic read-modify-write (`lock or`/`lock cmpxchg`) costs ~20 cycles
/// even on a cache-resident line, and a blocked insert touches ~7 of the
/// block's 8 words: profiling `build` showed 35 % of all time on that one
/// instruction. Instead, every write to a blocked filter happens under the
/// lock of the block's region, with plain (Relaxed) loads and stores: one
/// uncontended lock per insert, or per *region* in [`Filter::insert_batch`]
/// on a filter beyond the caches, which sorts a batch by region first (that
/// also keeps the region's memory in cache while it is updated). Readers never lock: they see each word's old
/// or new value, and words only gain bits.
///
/// The lock is a one-word spin lock rather than a `Mutex` because releasing it
/// is then a plain store (a `Mutex` unlock is another locked instruction).
/// Holders only ever run a few dozen instructions per item, so waiters spin
/// briefly and then yield.
///
/// The classic layout's k positions fall in k different regions, so it keeps
/// lock-free `fetch_or` and never uses plain stores. Its single inserts use
/// the same locks as stripes chosen by the item's hash ([`Regions::of_hash`]),
/// only to make their answer exact (see the module docs, "Add-if-absent").
struct Regions {
    /// `region = block >> shift`.
    shift: u32,
    regions: Box<[Region]>,
}

impl Regions {
    fn new(blocks: u64) -> Regions {
        let (shift, regions) = crate::spin::stripes(blocks);
        Regions { shift, regions }
    }

    #[inline]
    fn of_word(&self, word: u64) -> usize {
        ((word / 8) >> self.shift) as usize
    }

    #[inline]
    fn of_block(&self, block: usize) -> usize {
        block >> self.shift
    }

    /// The stripe of a classic item whose first hash value is `a`: every
    /// insert of one item maps to the same lock.
    #[inline]
    fn of_hash(&self, a: u64) -> usize {
        reduce(a.rotate_left(32), self.regions.len() as u64) as usize
    }

    #[inline]
    fn lock(&self, region: usize) -> RegionGuard<'_> {
        self.regions[region].lock()
    }
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter")
            .field("params", &self.params)
            .field("items", &self.items())
            .field("kernel", &self.kernel)
            .field("file", &self.file.as_ref().map(|s| &s.path))
            .finish()
    }
}

/// Batch size of the prepare/prefetch/insert loop of classic inserts: enough
/// misses in flight to cover DRAM latency, small enough to stay in L1.
const BATCH: usize = 32;

/// How many items ahead a blocked [`Filter::insert_batch`] prefetches, across
/// region boundaries (2 GiB filter, 16 Ki-item batches: 8 → 47.5 ns per
/// item, 16 → 46 ns; prefetching only within a region's group: 81 ns).
const INSERT_PREFETCH: usize = 16;

/// Blocked filters from this size on have their batches sorted by region
/// (shared [`Filter::insert_batch`] and owned [`Filter::insert_batch_owned`]):
/// past what the caches hold, where the TLB misses begin to cost more than
/// the sort.
const REGION_SORT_MIN_BYTES: u64 = 64 << 20;

/// Lookups in flight in [`Filter::contains_batch`]: the number of line-fill
/// buffers of a core (10–16 on recent x86) is what bounds useful memory-level
/// parallelism; measured best at 16 on the benchmark machine (2 GiB filter).
const PIPELINE: usize = 16;

impl Filter {
    /// An empty in-memory filter.
    pub fn new(params: Params) -> Result<Filter> {
        params.validate()?;
        let words =
            usize::try_from(params.words()).map_err(|_| Error::OutOfMemory(params.bits / 8))?;
        let bits = Bits::heap(words).ok_or(Error::OutOfMemory(params.bits / 8))?;
        Ok(Filter::from_parts(params, bits, 0, None))
    }

    /// An empty in-memory filter sized by `plan`, with a fresh random seed.
    pub fn with_plan(plan: &Plan) -> Result<Filter> {
        Filter::new(Params::from_plan(plan, random_seed()))
    }

    pub(crate) fn from_parts(
        params: Params,
        bits: Bits,
        items: u64,
        file: Option<FileState>,
    ) -> Filter {
        let blocks = params.bits / BLOCK_BITS;
        let words_span = if params.layout == Layout::Blocked && params.hash == HashId::Xxh3_64Words
        {
            INLINE_LENGTHS.count()
        } else {
            0
        };
        let kernel = Kernel::best();
        Filter {
            locator: Locator::new(&params),
            params,
            bits,
            items: AtomicU64::new(items),
            regions: Regions::new(blocks),
            kernel,
            words_item: WordsItem::new(kernel),
            words_span,
            file,
            update: None,
            touched: AtomicBool::new(false),
        }
    }

    /// The in-block kernel lookups use (the best this CPU supports, see
    /// [`Kernel::best`]).
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Uses `kernel` for lookups from now on (all kernels give identical
    /// answers; tests and benchmarks compare them).
    pub fn set_kernel(&mut self, kernel: Kernel) {
        self.kernel = kernel;
        self.words_item = WordsItem::new(kernel);
    }

    /// The filter's parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Items inserted that set at least one new bit (duplicates and items that
    /// were already false positives are not counted).
    pub fn items(&self) -> u64 {
        self.items.load(Relaxed)
    }

    /// Overrides the item counter (used when a count is known from elsewhere,
    /// e.g. after a union).
    /// A count above the bit count is stored as the bit count: every
    /// counted item set a clear bit (see [`crate::format::check_items`]).
    pub fn set_items(&self, items: u64) {
        self.items.store(items.min(self.params.bits), Relaxed);
    }

    /// Hashes `item` and resolves where it lives.
    #[inline]
    pub fn prepare(&self, item: &[u8]) -> Prepared {
        self.locator.prepare(item)
    }

    /// Starts loading the memory a lookup of `p` will touch: the block, or
    /// for classic the words of the first two probes (a miss usually stops
    /// there, and prefetching all k words would spend bandwidth on lines a
    /// miss never reads: measured 2× slower batched misses at 2 GiB).
    #[inline]
    pub fn prefetch(&self, p: &Prepared) {
        self.prefetch_probes(p, 2);
    }

    /// Prefetches the block, or the words of the first `probes` classic probes.
    #[inline]
    fn prefetch_probes(&self, p: &Prepared, probes: u32) {
        let words = self.bits.words();
        match self.params.layout {
            Layout::Blocked => arch::prefetch(words.as_ptr().wrapping_add(p.a as usize)),
            Layout::Classic => {
                let mut left = probes;
                self.classic_positions(p, |pos| {
                    arch::prefetch(words.as_ptr().wrapping_add((pos >> 6) as usize));
                    left -= 1;
                    left > 0
                });
            }
        }
    }

    /// Calls `f` with each classic bit position until it returns false.
    /// Returns whether every call returned true.
    #[inline(always)]
    fn classic_positions(&self, p: &Prepared, mut f: impl FnMut(u64) -> bool) -> bool {
        let m = self.params.bits;
        let (mut x, mut y) = (p.a, p.b);
        for i in 0..self.params.k as u64 {
            if !f(reduce(x, m)) {
                return false;
            }
            x = x.wrapping_add(y);
            y = y.wrapping_add(i);
        }
        true
    }

    /// The block starting at word `word` (a multiple of 8 below `words`).
    #[inline(always)]
    fn block(&self, word: u64) -> &Block {
        let w = word as usize;
        // `word` is reduce(hi, blocks)·8 < 8·blocks = words.len(), so w+7 is in bounds.
        self.bits.words()[w..w + 8]
            .try_into()
            .expect("a block is 8 words")
    }

    /// True if the prepared item is (probably) in the set.
    #[inline]
    pub fn contains_prepared(&self, p: &Prepared) -> bool {
        arch::dispatch(
            self.kernel,
            #[inline(always)]
            |kernel| self.contains_prepared_with(kernel, p),
        )
    }

    /// [`Filter::contains_prepared`] with the kernel already chosen (inlines
    /// into the dispatched loops).
    #[inline(always)]
    fn contains_prepared_with(&self, kernel: Kernel, p: &Prepared) -> bool {
        match self.params.layout {
            Layout::Blocked => {
                let probes = self.params.hash.probes();
                arch::block_contains(kernel, probes, self.block(p.a), p.b as u32, self.params.k)
            }
            Layout::Classic => {
                let words = self.bits.words();
                self.classic_positions(p, |pos| {
                    words[(pos >> 6) as usize].load(Relaxed) & (1 << (pos & 63)) != 0
                })
            }
        }
    }

    /// Sets the prepared item's bits. Returns true if the item was not
    /// (probably) present before: exact under concurrency, of several
    /// threads inserting the same absent item exactly one gets `true` (see
    /// the module docs, "Add-if-absent").
    #[inline]
    pub fn insert_prepared(&self, p: &Prepared) -> bool {
        self.note_write();
        match self.params.layout {
            // The region lock taken by every blocked write already makes the
            // test and the stores one step.
            Layout::Blocked => self.insert_prepared_unlogged(p),
            Layout::Classic => {
                // All k words are written (or found set): start their misses
                // before the lock, which is a full barrier that later loads
                // cannot pass (prefetches are not ordered by it).
                self.prefetch_probes(p, self.params.k);
                let _guard = self.regions.lock(self.regions.of_hash(p.a));
                self.insert_prepared_unlogged(p)
            }
        }
    }

    /// Tells a running in-place update that a write bypassed its page log.
    #[inline(always)]
    fn note_write(&self) {
        if let Some(log) = &self.update {
            log.note_untracked();
        }
        // Read first: after the first write this is a load of a line every
        // writer shares, not a store that bounces it between cores.
        if !self.touched.load(Relaxed) {
            self.touched.store(true, Relaxed);
        }
    }

    /// Calls `f` with the checksum page (4096 bytes of data) of every word
    /// an insert of `p` may write.
    pub(crate) fn pages_of(&self, p: &Prepared, mut f: impl FnMut(u64)) {
        const WORDS_PER_PAGE: u64 = 4096 / 8;
        match self.params.layout {
            // A block (64 bytes, 64-byte aligned) never straddles a page.
            Layout::Blocked => f(p.a / WORDS_PER_PAGE),
            Layout::Classic => {
                self.classic_positions(p, |pos| {
                    f(pos / 64 / WORDS_PER_PAGE);
                    true
                });
            }
        }
    }

    /// [`Filter::insert_prepared`] without telling an update's page log,
    /// and for classic without the stripe lock: the bulk paths' insert, whose
    /// answer may count an item twice when another thread inserts the same
    /// item at the same moment.
    #[inline]
    pub(crate) fn insert_prepared_unlogged(&self, p: &Prepared) -> bool {
        let changed = match self.params.layout {
            Layout::Blocked => {
                // Start the block's cache miss before taking the lock: the
                // lock is a locked instruction, a full barrier that later
                // loads cannot pass, but a prefetch issued before it can
                // (prefetches are not ordered by locked instructions), so
                // successive inserts' misses overlap instead of queueing.
                self.prefetch(p);
                // The mask needs no lock: built before it, its work is not
                // held up behind the barrier.
                let probes = self.params.hash.probes();
                let mask = arch::block_mask_with(self.kernel, probes, p.b as u32, self.params.k);
                let _guard = self.regions.lock(self.regions.of_word(p.a));
                or_block_locked(self.block(p.a), &mask)
            }
            Layout::Classic => self.insert_classic(p),
        };
        if changed {
            self.items.fetch_add(1, Relaxed);
        }
        changed
    }

    #[inline(always)]
    fn insert_classic(&self, p: &Prepared) -> bool {
        let words = self.bits.words();
        let mut changed = false;
        self.classic_positions(p, |pos| {
            let w = &words[(pos >> 6) as usize];
            let bit = 1u64 << (pos & 63);
            // Skip the locked RMW when the bit is already there.
            if w.load(Relaxed) & bit == 0 {
                changed |= w.fetch_or(bit, Relaxed) & bit == 0;
            }
            true
        });
        changed
    }

    /// True if `item` is (probably) in the set. Never false for an inserted item.
    ///
    /// A blocked filter of hash id 3 (every new one) answers an item of
    /// 17–128 bytes ([`INLINE_LENGTHS`]) with one call through the
    /// function pointer chosen with the kernel (`arch::WordsItem`): the
    /// hash, the block and its test all run in that one function, about
    /// 91 instructions per lookup with the AVX-512 kernel. A lookup in
    /// DRAM is one dependent miss, and a caller's loop overlaps as many of
    /// them as fit in the CPU's reorder window, so the count is what sets
    /// the speed there:
    /// at 111–125 instructions the AMD EPYC of BENCHMARKS.md took 1.24×
    /// sbbf-rs's time per lookup on a 2 GiB filter, at 91 about 1.0×
    /// ("Single lookups in DRAM: the reorder window"). Other lengths, hash
    /// ids 1 and 2 and the classic layout are one call away
    /// ([`Filter::contains_other`]).
    #[inline]
    pub fn contains(&self, item: &[u8]) -> bool {
        if item.len().wrapping_sub(*INLINE_LENGTHS.start()) < self.words_span {
            return self.words_item.contains(
                self.bits.blocks(),
                self.params.k,
                item,
                &self.locator,
            );
        }
        self.contains_other(item)
    }

    /// [`Filter::contains`] for the items `arch::WordsItem` does not take:
    /// other lengths, blocked filters of hash ids 1 and 2, the classic
    /// layout.
    #[inline(never)]
    fn contains_other(&self, item: &[u8]) -> bool {
        let item = &item;
        match self.params.layout {
            Layout::Blocked => {
                let view = self.blocked_view();
                let (block, h) = view.locate(item);
                arch::block_contains_at(
                    self.kernel,
                    view.id.probes(),
                    view.blocks,
                    block,
                    h,
                    view.k,
                )
            }
            // The closure captures two references (`self` and `&item`), which
            // travel in two registers.
            Layout::Classic => arch::dispatch(
                self.kernel,
                #[inline(always)]
                move |kernel| self.contains_prepared_with(kernel, &self.prepare(item)),
            ),
        }
    }

    /// The blocked layout's lookup state, copied out of `self`.
    ///
    /// `Filter` holds atomics (interior mutability), so the compiler must
    /// assume any store in a loop may change its fields and reloads them on
    /// every iteration; the hot loops read these locals instead. (Together
    /// with one layout test per call instead of three: on a 2 GiB filter,
    /// single lookups 100–115 → 85–95 ns, batched 33 → 29 ns.)
    #[inline(always)]
    fn blocked_view(&self) -> BlockedView<'_> {
        BlockedView {
            blocks: self.bits.blocks(),
            locator: &self.locator,
            id: self.params.hash,
            k: self.params.k,
        }
    }

    /// Adds `item`. Returns true if it was not (probably) present before.
    #[inline]
    pub fn insert(&self, item: &[u8]) -> bool {
        self.insert_prepared(&self.prepare(item))
    }

    /// Looks up many items, writing one answer per item into `out`
    /// (which is cleared first).
    ///
    /// A software pipeline: item `i + PIPELINE` is hashed and its memory
    /// prefetched while item `i` is probed, so that ~`PIPELINE` cache misses
    /// are always in flight (a DRAM-resident filter then runs near the
    /// machine's random-read limit instead of one miss at a time). A rolling
    /// window keeps the memory system busy without the bursts, and the idle
    /// gaps between them, of hashing a whole group and then probing it.
    pub fn contains_batch<T: AsRef<[u8]>>(&self, items: &[T], out: &mut Vec<bool>) {
        out.clear();
        if self.params.layout == Layout::Blocked {
            out.resize(items.len(), false);
            let view = self.blocked_view();
            return arch::dispatch(
                self.kernel,
                #[inline(always)]
                |kernel| view.contains_batch(kernel, items, out),
            );
        }
        out.reserve(items.len());
        arch::dispatch(
            self.kernel,
            #[inline(always)]
            |kernel| {
                let mut ring = [Prepared { a: 0, b: 0 }; PIPELINE];
                let ahead = items.len().min(PIPELINE);
                for (slot, item) in ring.iter_mut().zip(&items[..ahead]) {
                    *slot = self.prepare(item.as_ref());
                    self.prefetch(slot);
                }
                for i in 0..items.len() {
                    let slot = &mut ring[i % PIPELINE];
                    let p = *slot;
                    if let Some(next) = items.get(i + PIPELINE) {
                        *slot = self.prepare(next.as_ref());
                        self.prefetch(slot);
                    }
                    out.push(self.contains_prepared_with(kernel, &p));
                }
            },
        )
    }

    /// Checks that `other` has the same layout, size, k and seed.
    pub fn check_compatible(&self, other: &Filter) -> Result<()> {
        let (a, b) = (&self.params, &other.params);
        let mut diffs = Vec::new();
        if a.layout != b.layout {
            diffs.push(format!("layout {} vs {}", a.layout, b.layout));
        }
        if a.bits != b.bits {
            diffs.push(format!("bits {} vs {}", a.bits, b.bits));
        }
        if a.k != b.k {
            diffs.push(format!("k {} vs {}", a.k, b.k));
        }
        if a.seed != b.seed {
            diffs.push("different hash seeds (build both with the same --seed)".into());
        }
        if a.hash != b.hash {
            diffs.push(format!(
                "hash {} vs {} (a file built before hash id 2 existed: rebuild it, or build the other with the same hash)",
                a.hash, b.hash
            ));
        }
        if a.key_kind != b.key_kind || a.match_mode != b.match_mode {
            diffs.push("different key kinds or match modes".into());
        }
        if diffs.is_empty() {
            Ok(())
        } else {
            Err(Error::Incompatible(diffs.join(", ")))
        }
    }

    /// ORs `other`'s bits into this filter: afterwards it answers yes for
    /// everything either answered yes for. The item count becomes the
    /// fill-based estimate, clamped between the larger input count and the sum.
    pub fn union_with(&self, other: &Filter) -> Result<()> {
        self.check_compatible(other)?;
        const CHUNK: usize = 1 << 14;
        other
            .bits
            .words()
            .par_chunks(CHUNK)
            .enumerate()
            .for_each(|(i, src)| {
                self.or_words((i * CHUNK) as u64, src.iter().map(|s| s.load(Relaxed)))
            });
        let (a, b) = (self.items(), other.items());
        let est = self.estimated_items();
        let lo = a.max(b) as f64;
        let hi = a.saturating_add(b) as f64;
        self.set_items(est.clamp(lo, hi.max(lo)) as u64);
        Ok(())
    }

    /// Number of bits set (parallel popcount).
    pub fn count_ones(&self) -> u64 {
        self.bits
            .words()
            .par_chunks(1 << 14)
            .map(|c| {
                c.iter()
                    .map(|w| w.load(Relaxed).count_ones() as u64)
                    .sum::<u64>()
            })
            .sum()
    }

    /// Fraction of bits set (from the file header when it records the
    /// count, see [`Filter::ones`]).
    pub fn fill_ratio(&self) -> f64 {
        self.ones() as f64 / self.params.bits as f64
    }

    /// Distinct items estimated from the fill (see [`math::estimate_items`]).
    pub fn estimated_items(&self) -> f64 {
        math::estimate_items(self.params.bits, self.params.k, self.ones())
    }

    /// False-positive rate predicted for the number of items inserted so far.
    pub fn predicted_fp(&self) -> f64 {
        self.predicted_fp_for(self.items())
    }

    /// False-positive rate predicted for `n` items in this filter.
    pub fn predicted_fp_for(&self, n: u64) -> f64 {
        self.params.predicted_fp(n as f64)
    }

    /// False-positive rate predicted from the bits actually set: for classic
    /// `fill^k`; for blocked its probes' formula at the fill-estimated count
    /// (its per-block variance makes `fill^k` an underestimate).
    pub fn fp_at_fill(&self) -> f64 {
        let ones = self.ones();
        let fill = ones as f64 / self.params.bits as f64;
        match self.params.layout {
            Layout::Classic => fill.powi(self.params.k as i32),
            Layout::Blocked => {
                let n = math::estimate_items(self.params.bits, self.params.k, ones);
                if n.is_finite() {
                    self.params.predicted_fp(n)
                } else {
                    1.0
                }
            }
        }
    }

    /// The raw bit array, little-endian (bit `i` is bit `i % 8` of byte `i / 8`).
    /// Writers should be quiescent if a consistent snapshot is needed.
    pub fn as_bytes(&self) -> &[u8] {
        self.bits.bytes()
    }

    /// Sets bits from a byte slice at byte `offset` by OR-ing (used to load a
    /// filter copied in chunks). Fails if the range is outside the array.
    pub fn or_bytes_at(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        let total = self.params.bits / 8;
        let end = offset.checked_add(bytes.len() as u64);
        if !offset.is_multiple_of(8)
            || !bytes.len().is_multiple_of(8)
            || end.is_none_or(|e| e > total)
        {
            return Err(Error::InvalidParams(format!(
                "chunk of {} bytes at offset {offset} does not fit a {total}-byte bit array",
                bytes.len()
            )));
        }
        self.or_words(
            offset / 8,
            bytes
                .chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("chunks_exact(8)"))),
        );
        Ok(())
    }

    /// ORs `values` into the words starting at word `start`, respecting the
    /// write discipline of the layout (see [`Regions`]). In bounds by contract.
    fn or_words(&self, start: u64, values: impl Iterator<Item = u64>) {
        self.note_write();
        let words = &self.bits.words()[start as usize..];
        match self.params.layout {
            Layout::Classic => {
                for (w, v) in words.iter().zip(values) {
                    if v != 0 && w.load(Relaxed) & v != v {
                        w.fetch_or(v, Relaxed);
                    }
                }
            }
            Layout::Blocked => {
                let mut held: Option<(usize, RegionGuard<'_>)> = None;
                for (i, (w, v)) in words.iter().zip(values).enumerate() {
                    let cur = w.load(Relaxed);
                    if cur & v == v {
                        continue;
                    }
                    let r = self.regions.of_word(start + i as u64);
                    if held.as_ref().map(|(hr, _)| *hr) != Some(r) {
                        // Release the previous region before taking the next:
                        // never hold two locks, so no lock-order deadlock.
                        drop(held.take());
                        held = Some((r, self.regions.lock(r)));
                    }
                    // Re-read under the lock: another writer may have set bits.
                    let cur = w.load(Relaxed);
                    w.store(cur | v, Relaxed);
                }
            }
        }
    }
}

/// ORs `mask` into `block` with plain (Relaxed) loads and stores; whether a
/// bit was new. The caller must hold the lock of the block's region.
///
/// One branch per item, not per word: whether a given word gains bits is a
/// coin flip for a new item, and eight unpredictable branches cost more than
/// the stores. An item already present writes nothing (so a mapped file's
/// pages are not dirtied for it).
#[inline(always)]
fn or_block_locked(block: &Block, mask: &[u64; 8]) -> bool {
    let cur = arch::load_block(block);
    let missing = mask.iter().zip(&cur).fold(0, |acc, (m, c)| acc | (m & !c));
    if missing == 0 {
        return false;
    }
    for ((w, m), c) in block.iter().zip(mask).zip(&cur) {
        w.store(c | m, Relaxed);
    }
    true
}

#[cfg(test)]
mod tests;
