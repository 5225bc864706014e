//! The single-writer insert path: a filter its caller holds exclusively
//! (`&mut Filter`, e.g. the one `bloomgate build` is filling) needs none of
//! the synchronisation a shared, served filter does.
//!
//! The shared path ([`Filter::insert`], [`Filter::insert_batch`]) pays, per
//! item, for readers and writers it cannot rule out: the region's spin lock
//! (a locked `cmpxchg`, a full barrier that also stops the cache misses of
//! successive items from overlapping), the shared item counter (a locked
//! `xadd`), the "touched" flag and the in-place update's page log, and
//! eight separate atomic word stores the compiler may not merge. With
//! `&mut self` none of that can be observed by anyone, so the owned path
//! keeps the counters in plain fields, writes the block with plain stores
//! (one vector load, test and store where the loop is compiled for AVX2 or
//! AVX-512) and overlaps the misses with a rolling prefetch window instead
//! of sorting the batch by region.
//!
//! The bits are the same as the shared path's, and so is the count of new
//! items: both set each item's probes ([`arch::block_mask`]) in the block
//! [`Filter::prepare`] names, and both apply the items of one block in
//! input order (the shared batch's counting sort by region is stable), so
//! the test "did this item set a new bit" sees the same block each time
//! (test `owned_and_shared_inserts_give_the_same_bytes`).
//!
//! The classic layout and a filter inside an in-place update take the
//! shared path: the classic layout's k words are far apart (its cost is k
//! cache misses, not locks), and an update must log the pages it changes.

use crate::arch::{self, Kernel, Probes};
use crate::hash::HashId;
use crate::math::Layout;
use crate::place::Locator;

use super::{Filter, REGION_SORT_MIN_BYTES};

/// Items ahead whose blocks a batch prefetches ([`set_all`]).
const PIPELINE: usize = 32;

/// The first word of `item`'s block among `blocks` and its in-block hash
/// under hash `id`: what [`Filter::prepare`] computes for the blocked layout.
#[inline(always)]
fn locate(locator: &Locator, id: HashId, blocks: u64, item: &[u8]) -> (usize, u32) {
    let (block, h) = locator.block_as(id, item, blocks);
    (block * 8, h)
}

/// Sets the probes of `h` in the block at word `at`; whether one was new.
#[inline(always)]
fn set(kernel: Kernel, probes: Probes, words: &mut [u64], at: usize, h: u32, k: u32) -> bool {
    let block: &mut [u64; 8] = (&mut words[at..at + 8])
        .try_into()
        .expect("a block is 8 words");
    arch::block_insert(kernel, probes, block, h, k)
}

impl Filter {
    /// Whether the owned path applies: the blocked layout outside an
    /// in-place update.
    #[inline(always)]
    fn owned_path(&self) -> bool {
        self.params.layout == Layout::Blocked && self.update.is_none()
    }

    /// [`Filter::insert`] for a filter the caller holds exclusively: the
    /// same bits and the same answer, without locks or atomic
    /// read-modify-writes.
    ///
    /// The item is hashed here, outside the kernel's function (compiled for
    /// AVX-512, where LLVM vectorizes the hash's mixes, see
    /// [`Filter::contains`]), and the kernel gets the block and one word
    /// holding h and k, which travel in two registers. Measured on the AMD
    /// EPYC of BENCHMARKS.md ("The floors on the AMD EPYC after this pass"):
    /// in-cache single inserts 2.15× → 2.08× sbbf-rs's time (six paired
    /// rounds each); hashed outside with three captures through the stack,
    /// 2.17×.
    #[inline]
    pub fn insert_owned(&mut self, item: &[u8]) -> bool {
        if !self.owned_path() {
            return self.insert(item);
        }
        let (k, kernel, locator) = (self.params.k, self.kernel, &self.locator);
        *self.touched.get_mut() = true;
        let words = self.bits.words_mut();
        let (at, h) = locate(locator, locator.id(), (words.len() / 8) as u64, item);
        let block: &mut [u64; 8] = (&mut words[at..at + 8])
            .try_into()
            .expect("a block is 8 words");
        let hk = u64::from(h) | u64::from(k) << 32;
        // One closure per probe scheme, each kernel compiled for its own.
        let new = match locator.probes() {
            Probes::Words => arch::dispatch(
                kernel,
                #[inline(always)]
                move |kernel| {
                    let (h, k) = (hk as u32, (hk >> 32) as u32);
                    arch::block_insert(kernel, Probes::Words, block, h, k)
                },
            ),
            Probes::Anywhere => arch::dispatch(
                kernel,
                #[inline(always)]
                move |kernel| {
                    let (h, k) = (hk as u32, (hk >> 32) as u32);
                    arch::block_insert(kernel, Probes::Anywhere, block, h, k)
                },
            ),
        };
        *self.items.get_mut() += new as u64;
        new
    }

    /// [`Filter::insert_batch`] for a filter the caller holds exclusively:
    /// the same bits and the same count of new items.
    ///
    /// A filter that fits in cache takes a rolling window: item
    /// `i + PIPELINE` is hashed and its block prefetched while item `i` is
    /// set. A larger one is walked in region order, as the shared batch
    /// does, because the region (at most 2 MiB, one huge page on the
    /// benchmark machine's filters) is what a TLB entry covers: without the
    /// sort every item's block is also a TLB miss, a nested page walk under
    /// virtualization. (2 GiB filter, 1 M-item batches: the rolling window
    /// 80–93 ns per item, the shared region-sorted batch 52–74 ns.) The
    /// counting sort is stable, so the items of one block keep their input
    /// order and the count of new items does not change.
    pub fn insert_batch_owned<T: AsRef<[u8]>>(&mut self, items: &[T]) -> u64 {
        let sort = self.params.bits / 8 >= REGION_SORT_MIN_BYTES && items.len() >= 256;
        self.insert_batch_owned_as(items, sort)
    }

    /// [`Filter::insert_batch_owned`], sorted by region or not as `sort`
    /// says (the tests run both on small filters).
    pub(crate) fn insert_batch_owned_as<T: AsRef<[u8]>>(&mut self, items: &[T], sort: bool) -> u64 {
        if !self.owned_path() {
            return self.insert_batch(items);
        }
        let (locator, k, kernel) = (&self.locator, self.params.k, self.kernel);
        let (shift, regions) = (self.regions.shift, self.regions.regions.len());
        *self.touched.get_mut() = true;
        let words = self.bits.words_mut();
        let blocks = (words.len() / 8) as u64;
        let (id, probes) = (locator.id(), locator.probes());
        let new = arch::dispatch(
            kernel,
            #[inline(always)]
            |kernel| {
                if sort {
                    let mut starts = vec![0usize; regions + 1];
                    let located: Vec<(usize, u32)> = items
                        .iter()
                        .map(|item| {
                            let (at, h) = locate(locator, id, blocks, item.as_ref());
                            starts[((at / 8) >> shift) + 1] += 1;
                            (at, h)
                        })
                        .collect();
                    for r in 0..regions {
                        starts[r + 1] += starts[r];
                    }
                    let mut sorted = vec![(0usize, 0u32); located.len()];
                    for &(at, h) in &located {
                        let r = (at / 8) >> shift;
                        sorted[starts[r]] = (at, h);
                        starts[r] += 1;
                    }
                    drop(located);
                    set_all(kernel, probes, words, k, sorted.into_iter())
                } else {
                    set_all(
                        kernel,
                        probes,
                        words,
                        k,
                        items
                            .iter()
                            .map(|item| locate(locator, id, blocks, item.as_ref())),
                    )
                }
            },
        );
        *self.items.get_mut() += new;
        new
    }
}

/// Sets the items `(block's first word, in-block hash)` in order through a
/// rolling window: the block of item `i + PIPELINE` is prefetched (and for
/// a lazy iterator, the item hashed) while item `i` is set, so that the
/// cache misses of successive items overlap. Returns how many were new.
///
/// The loop is compiled once per probe scheme, each with its own kernel.
#[inline(always)]
fn set_all(
    kernel: Kernel,
    probes: Probes,
    words: &mut [u64],
    k: u32,
    items: impl Iterator<Item = (usize, u32)>,
) -> u64 {
    match probes {
        Probes::Words => set_all_as(kernel, Probes::Words, words, k, items),
        Probes::Anywhere => set_all_as(kernel, Probes::Anywhere, words, k, items),
    }
}

/// [`set_all`] for one probe scheme (a constant where it is inlined).
#[inline(always)]
fn set_all_as(
    kernel: Kernel,
    probes: Probes,
    words: &mut [u64],
    k: u32,
    mut items: impl Iterator<Item = (usize, u32)>,
) -> u64 {
    let mut ring = [(0usize, 0u32); PIPELINE];
    let mut queued = 0usize;
    for slot in ring.iter_mut() {
        let Some(item) = items.next() else { break };
        *slot = item;
        arch::prefetch(words.as_ptr().wrapping_add(item.0));
        queued += 1;
    }
    let mut new = 0u64;
    let mut i = 0usize;
    while i < queued {
        let slot = &mut ring[i % PIPELINE];
        let (at, h) = *slot;
        if let Some(next) = items.next() {
            *slot = next;
            arch::prefetch(words.as_ptr().wrapping_add(next.0));
            queued += 1;
        }
        new += set(kernel, probes, words, at, h, k) as u64;
        i += 1;
    }
    new
}
