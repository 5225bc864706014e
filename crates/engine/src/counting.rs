//! A counting Bloom filter: a Bloom filter that can delete.
//!
//! Every bit of a blocked Bloom filter becomes a 4-bit counter. An insert
//! adds one to each of the item's counters, a delete takes one away, and an
//! item is present while all of its counters are above zero. The math (the
//! false-positive rate, why the counters are blocked 128 to a cache line,
//! what that costs against the classic arrangement, and why 4 bits) is in
//! [`crate::math`], section "Counting Bloom filter".
//!
//! # Where an item's counters are
//!
//! `h = XXH3-128(item, seed)`; the block is `reduce(h.hi, counters / 128)`;
//! with `g = (h.lo mod 2³²) | 1` and `G = 0x9E3779B9`, probe `i` (0-based)
//! is counter `(g · G^(i+1) mod 2³²) >> 25` of the block: the blocked Bloom
//! layout's derivation with 7-bit positions. Probes that fall on the same
//! counter count once: an item adds exactly one to each of its *distinct*
//! counters, so a delete can always take back what the insert added.
//! Counter `c` of block `b` is nibble `c mod 16` (low nibble first) of the
//! little-endian 64-bit word `8·b + c / 16`.
//!
//! # Saturation
//!
//! A counter that reaches 15 is never changed again, neither by inserts nor
//! by deletes. The count it stands for is then unknown, so it must never
//! reach zero: a false negative is impossible, at the price of a counter
//! that stays set (a little false-positive rate) once an item was inserted 15
//! times or more.
//!
//! # Concurrency
//!
//! All methods take `&self`. Lookups never lock: they load the block's
//! words atomically. Writers lock the item's block through a striped spin
//! lock (at most 1024 stripes, one per run of consecutive blocks, each
//! alone on its cache line), then load, change and store the words. Because
//! one lock covers all of an item's counters, "test, then increment"
//! ([`CountingFilter::insert`] telling whether the item was new,
//! [`CountingFilter::insert_if_absent`]) and "check that all are above zero,
//! then decrement" ([`CountingFilter::remove`]) are atomic: of several
//! threads inserting the same absent item, exactly one is told it was new.
//! A counter that holds an item's contribution is never decremented below
//! one by anyone else's operation, so a reader racing writers never misses
//! an item whose insertion completed.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::error::{Error, Result};
use crate::format::{
    self, DeletableFile, DeletableHeader, DeletableKind, Geometry, OpenedDeletable, Origin,
    FORMAT_VERSION,
};
use crate::hash::{hash_item, reduce, HASH_XXH3_128};
use crate::math::{self, CountingPlan, COUNTER_MAX, COUNTING_BLOCK_COUNTERS, MAX_COUNTING_K};
use crate::spin::{SpinGuard, SpinLock};
use crate::storage::Bits;
use crate::table::{CuckooFull, Removal, Table};

/// Multiplier of the in-block probe sequence (as in the blocked Bloom layout).
const G: u32 = 0x9E37_79B9;

/// Words in one block of 128 4-bit counters.
const BLOCK_WORDS: usize = 8;

/// The parameters of a counting filter: where an item's counters are, plus
/// descriptive metadata stored in the file.
#[derive(Clone, Debug, PartialEq)]
pub struct CountingParams {
    /// Number of counters, a positive multiple of 128.
    pub counters: u64,
    /// Counters per item (probes), 1..=32.
    pub k: u32,
    /// Hash seed.
    pub seed: u64,
    /// How keys are normalized before hashing (interpreted by `bloomgate-url`; 0 = raw bytes).
    pub key_kind: u8,
    /// How queries are matched (interpreted by `bloomgate-url`; 0 = exact).
    pub match_mode: u8,
    /// Items the filter was sized for.
    pub planned_items: u64,
    /// False-positive rate the filter was sized for.
    pub target_fp: f64,
}

impl CountingParams {
    /// Parameters from a sizing plan ([`math::plan_counting`]), with the
    /// given seed and raw keys.
    pub fn from_plan(plan: &CountingPlan, seed: u64) -> CountingParams {
        CountingParams {
            counters: plan.counters,
            k: plan.k,
            seed,
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
        Geometry::Counting {
            counters: self.counters,
            k: self.k,
        }
    }

    /// Bytes of counter data (4 bits per counter).
    pub fn bytes(&self) -> u64 {
        self.counters / 2
    }
}

/// A counting Bloom filter of 4-bit counters, blocked 128 to a cache line.
/// See the [module documentation](self).
pub struct CountingFilter {
    params: CountingParams,
    data: Bits,
    /// Inserts minus successful deletes.
    items: AtomicU64,
    stripes: Stripes,
    /// The file this filter was opened from, if any.
    /// The file this filter was opened from, if any, and its header.
    origin: Option<Origin>,
}

impl std::fmt::Debug for CountingFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountingFilter")
            .field("params", &self.params)
            .field("items", &self.items())
            .field("path", &self.path())
            .finish()
    }
}

/// Where one item's counters are: its block and the set of distinct counters
/// in it (bit `c` of the mask = counter `c` of the block).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Slots {
    block: usize,
    mask: u128,
}

impl CountingFilter {
    /// An empty in-memory filter.
    pub fn new(params: CountingParams) -> Result<CountingFilter> {
        params.validate()?;
        let words = usize::try_from(params.counters / 16)
            .map_err(|_| Error::OutOfMemory(params.bytes()))?;
        let data = Bits::heap(words).ok_or(Error::OutOfMemory(params.bytes()))?;
        Ok(CountingFilter::from_parts(params, data, 0, None))
    }

    /// An empty in-memory filter sized by `plan` with hash seed `seed`.
    pub fn with_plan(plan: &CountingPlan, seed: u64) -> Result<CountingFilter> {
        CountingFilter::new(CountingParams::from_plan(plan, seed))
    }

    fn from_parts(
        params: CountingParams,
        data: Bits,
        items: u64,
        origin: Option<Origin>,
    ) -> CountingFilter {
        let blocks = params.counters / COUNTING_BLOCK_COUNTERS;
        CountingFilter {
            stripes: Stripes::new(blocks),
            params,
            data,
            items: AtomicU64::new(items),
            origin,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &CountingParams {
        &self.params
    }

    /// Items stored: inserts minus successful deletes.
    pub fn items(&self) -> u64 {
        self.items.load(Relaxed)
    }

    /// Where `item`'s counters are.
    #[inline(always)]
    fn slots(&self, item: &[u8]) -> Slots {
        let h = hash_item(self.params.seed, item);
        let blocks = self.params.counters / COUNTING_BLOCK_COUNTERS;
        let block = reduce(h.hi, blocks) as usize;
        let mut x = h.lo as u32 | 1;
        let mut mask = 0u128;
        for _ in 0..self.params.k {
            x = x.wrapping_mul(G);
            mask |= 1u128 << (x >> 25);
        }
        Slots { block, mask }
    }

    /// The 8 words of block `block`.
    #[inline]
    fn block_words(&self, block: usize) -> &[AtomicU64] {
        &self.data.words()[block * BLOCK_WORDS..][..BLOCK_WORDS]
    }

    /// Loads the block's words (atomically, word by word).
    #[inline]
    fn load_block(&self, block: usize) -> [u64; BLOCK_WORDS] {
        let words = self.block_words(block);
        std::array::from_fn(|i| words[i].load(Relaxed))
    }

    /// True if the item may be in the filter (all its counters above zero);
    /// false if it certainly is not.
    pub fn contains(&self, item: &[u8]) -> bool {
        let s = self.slots(item);
        all_nonzero(&self.load_block(s.block), s.mask)
    }

    /// The smallest of the item's counters: 0 if it is absent, otherwise an
    /// upper bound on how many times it is stored (15 means "15 or more").
    pub fn count(&self, item: &[u8]) -> u8 {
        let s = self.slots(item);
        let words = self.load_block(s.block);
        let mut min = COUNTER_MAX;
        for_each_counter(s.mask, |c| min = min.min(nibble(&words, c)));
        min
    }

    /// Adds the item (once more, if it was there already). Returns true if
    /// it was absent before (not all of its counters were above zero).
    /// Atomic: of several threads inserting the same absent item at once,
    /// exactly one is told true.
    pub fn insert(&self, item: &[u8]) -> bool {
        self.write(item, true)
    }

    /// Adds the item only if it is absent (RedisBloom's `CF.ADDNX`). Returns
    /// true if it was added.
    pub fn insert_if_absent(&self, item: &[u8]) -> bool {
        self.write(item, false)
    }

    fn write(&self, item: &[u8], always: bool) -> bool {
        let s = self.slots(item);
        let _guard = self.stripes.lock(s.block);
        let mut words = self.load_block(s.block);
        let absent = !all_nonzero(&words, s.mask);
        if absent || always {
            for_each_counter(s.mask, |c| {
                let v = nibble(&words, c);
                if v < COUNTER_MAX {
                    set_nibble(&mut words, c, v + 1);
                }
            });
            self.store_block(s.block, &words, s.mask);
            self.items.fetch_add(1, Relaxed);
        }
        absent
    }

    /// Deletes one copy of the item: if all of its counters are above zero,
    /// takes one from each (saturated counters, at 15, stay) and returns
    /// [`Removal::Removed`]; otherwise changes nothing and returns
    /// [`Removal::NotPresent`]. Atomic with respect to other writers.
    ///
    /// Delete only items that were inserted: deleting an item that merely
    /// tests present (a false positive) takes counts that belong to other
    /// items, which can make them false negatives. This is inherent to
    /// counting filters (and to RedisBloom's `CF.DEL`).
    pub fn remove(&self, item: &[u8]) -> Removal {
        let s = self.slots(item);
        let _guard = self.stripes.lock(s.block);
        let mut words = self.load_block(s.block);
        if !all_nonzero(&words, s.mask) {
            return Removal::NotPresent;
        }
        for_each_counter(s.mask, |c| {
            let v = nibble(&words, c);
            if v < COUNTER_MAX {
                set_nibble(&mut words, c, v - 1);
            }
        });
        self.store_block(s.block, &words, s.mask);
        // Saturating: a filter whose count was restored from a file written
        // by a process that raced deletes must not wrap.
        let _ = self
            .items
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
        Removal::Removed
    }

    /// Stores the words of `block` that `mask` touches (the caller holds the
    /// block's stripe lock, so no other writer changed them since the load).
    #[inline]
    fn store_block(&self, block: usize, words: &[u64; BLOCK_WORDS], mask: u128) {
        let dst = self.block_words(block);
        for (w, word) in words.iter().enumerate() {
            if (mask >> (16 * w)) as u16 != 0 {
                dst[w].store(*word, Relaxed);
            }
        }
    }

    /// The value of counter `index` (0-based, over the whole filter).
    /// `None` past the end. For tests and inspection.
    pub fn counter(&self, index: u64) -> Option<u8> {
        if index >= self.params.counters {
            return None;
        }
        let word = self.data.words()[(index / 16) as usize].load(Relaxed);
        Some(((word >> ((index % 16) * 4)) & 0xF) as u8)
    }

    /// The indices of the item's distinct counters (ascending).
    pub fn counter_indices(&self, item: &[u8]) -> Vec<u64> {
        let s = self.slots(item);
        let mut out = Vec::with_capacity(self.params.k as usize);
        for_each_counter(s.mask, |c| {
            out.push(s.block as u64 * COUNTING_BLOCK_COUNTERS + c as u64)
        });
        out
    }

    /// Counters above zero (a pass over the data).
    pub fn nonzero_counters(&self) -> u64 {
        self.data
            .words()
            .iter()
            .map(|w| {
                let x = w.load(Relaxed);
                ((x | x >> 1 | x >> 2 | x >> 3) & 0x1111_1111_1111_1111).count_ones() as u64
            })
            .sum()
    }

    /// Counters at 15, which no delete will clear (a pass over the data).
    pub fn saturated_counters(&self) -> u64 {
        self.data
            .words()
            .iter()
            .map(|w| {
                let x = w.load(Relaxed);
                (x & x >> 1 & x >> 2 & x >> 3 & 0x1111_1111_1111_1111).count_ones() as u64
            })
            .sum()
    }

    /// The fraction of counters above zero (a pass over the data).
    pub fn fill(&self) -> f64 {
        self.nonzero_counters() as f64 / self.params.counters as f64
    }

    /// The load: items stored over items planned.
    pub fn load(&self) -> f64 {
        self.items() as f64 / self.params.planned_items.max(1) as f64
    }

    /// The false-positive rate predicted for the items stored now
    /// ([`math::counting_fp`]).
    pub fn predicted_fp(&self) -> f64 {
        math::counting_fp(self.params.counters, self.items() as f64, self.params.k)
    }

    /// The counter data as bytes (the file's data section). Concurrent
    /// writers may or may not be included.
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
            flags: 0,
            seed: self.params.seed,
            items: self.items(),
            planned_items: self.params.planned_items,
            target_fp: self.params.target_fp,
            data_len: self.params.bytes(),
            data_checksum: 0,
        }
    }

    /// The whole file image: header and counters (`docs/file-format.md`).
    /// Inserts and deletes that run meanwhile may or may not be included,
    /// but every item stored before the call and not deleted is.
    pub fn to_bytes(&self) -> Vec<u8> {
        let header = self.header();
        format::deletable_to_bytes(&header, self.data.bytes())
    }

    /// The header of the file image of the counters as they are now: the
    /// image is this header, then [`CountingFilter::as_bytes`], with no
    /// copy of the counters. Consistent only while no insert or delete
    /// runs until the data is written (the caller holds off writers);
    /// [`CountingFilter::to_bytes`] copies instead.
    pub fn image_header(&self) -> Vec<u8> {
        format::deletable_image_header(&self.header(), self.data.bytes())
    }

    /// A filter from a file image of `len` bytes read from `r` (as
    /// [`CountingFilter::from_bytes`], the data read straight into the table:
    /// no second copy of it is held).
    pub fn read_from(r: &mut impl std::io::Read, len: u64) -> Result<CountingFilter> {
        format::read_table(r, len)
    }

    /// A filter from a file image made by [`CountingFilter::to_bytes`]
    /// (both checksums are verified): [`CountingFilter::read_from`] on the
    /// bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<CountingFilter> {
        CountingFilter::read_from(&mut &bytes[..], bytes.len() as u64)
    }

    /// Writes the filter to `path` atomically (temp file, fsync, rename,
    /// directory fsync). A copy of the counters is taken first, so the file
    /// is consistent with its checksum even if writers run meanwhile.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let header = self.header();
        let copy = self.data.bytes().to_vec();
        format::save_deletable(path.as_ref(), &header, &copy)
    }

    /// Opens a counting filter file: reads and checks the header and maps
    /// the data copy-on-write (a few microseconds whatever the size).
    /// Inserts and deletes change this process's copy only; [`save`] writes
    /// them. See [`CountingFilter::verify`] for the data checksum.
    ///
    /// [`save`]: CountingFilter::save
    pub fn open(path: impl AsRef<Path>) -> Result<CountingFilter> {
        format::open_table(path.as_ref())
    }

    /// Reads the whole data of a filter opened from a file and compares it
    /// with the header's checksum ([`crate::FormatProblem::DataChecksum`] on
    /// corruption). In-memory filters and filters changed since they were
    /// opened have nothing to check against: Ok.
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

impl Table for CountingFilter {
    fn contains(&self, item: &[u8]) -> bool {
        CountingFilter::contains(self, item)
    }

    fn count(&self, item: &[u8]) -> u64 {
        u64::from(CountingFilter::count(self, item))
    }

    /// Never full: every add raises the item's counters.
    fn insert(&self, item: &[u8]) -> std::result::Result<bool, CuckooFull> {
        Ok(CountingFilter::insert(self, item))
    }

    fn remove(&self, item: &[u8]) -> Removal {
        CountingFilter::remove(self, item)
    }

    /// Only itself: counters say nothing of whose copy they hold.
    fn refines(&self, coarser: &CountingFilter) -> bool {
        std::ptr::eq(self, coarser)
    }

    /// None: a counting filter never fills, so it never grows.
    fn next_in_chain(&self, _shift: u32) -> Option<Result<CountingFilter>> {
        None
    }

    fn items(&self) -> u64 {
        CountingFilter::items(self)
    }

    fn bytes(&self) -> u64 {
        self.params.bytes()
    }

    fn predicted_fp(&self) -> f64 {
        CountingFilter::predicted_fp(self)
    }
}

impl DeletableFile for CountingFilter {
    const KIND: DeletableKind = DeletableKind::Counting;

    fn from_file(o: OpenedDeletable, origin: Option<Origin>) -> CountingFilter {
        CountingFilter::from_parts(params_of(&o.header), o.data, o.header.items, origin)
    }
}

fn params_of(h: &DeletableHeader) -> CountingParams {
    let (counters, k) = match h.geometry {
        Geometry::Counting { counters, k } => (counters, k),
        Geometry::Cuckoo { .. } => unreachable!("open_deletable checked the kind"),
    };
    CountingParams {
        counters,
        k,
        seed: h.seed,
        key_kind: h.key_kind,
        match_mode: h.match_mode,
        planned_items: h.planned_items,
        target_fp: h.target_fp,
    }
}

/// Calls `f` with each counter index set in `mask`, ascending.
#[inline(always)]
fn for_each_counter(mut mask: u128, mut f: impl FnMut(u32)) {
    while mask != 0 {
        let c = mask.trailing_zeros();
        f(c);
        mask &= mask - 1;
    }
}

#[inline(always)]
fn nibble(words: &[u64; BLOCK_WORDS], c: u32) -> u8 {
    ((words[(c / 16) as usize] >> ((c % 16) * 4)) & 0xF) as u8
}

#[inline(always)]
fn set_nibble(words: &mut [u64; BLOCK_WORDS], c: u32, v: u8) {
    let w = &mut words[(c / 16) as usize];
    let shift = (c % 16) * 4;
    *w = (*w & !(0xF << shift)) | ((v as u64) << shift);
}

/// True if every counter in `mask` is above zero. Per word: a nibble is
/// non-zero iff the OR of its four bits is set; the mask's 16 bits for that
/// word are spread to the nibbles' low bits and compared.
#[inline(always)]
fn all_nonzero(words: &[u64; BLOCK_WORDS], mask: u128) -> bool {
    for (w, &x) in words.iter().enumerate() {
        let m = (mask >> (16 * w)) as u16;
        if m == 0 {
            continue;
        }
        let nz = (x | x >> 1 | x >> 2 | x >> 3) & 0x1111_1111_1111_1111;
        let want = spread_nibbles(m);
        if nz & want != want {
            return false;
        }
    }
    true
}

/// Moves bit `i` of `m` to bit `4·i` of the result.
#[inline(always)]
fn spread_nibbles(m: u16) -> u64 {
    let mut x = m as u64;
    x = (x | x << 24) & 0x0000_00FF_0000_00FF;
    x = (x | x << 12) & 0x000F_000F_000F_000F;
    x = (x | x << 6) & 0x0303_0303_0303_0303;
    x = (x | x << 3) & 0x1111_1111_1111_1111;
    x
}

/// Write locks of a counting filter: one spin lock per run of consecutive
/// blocks (at most 1024), each alone on its cache line. Writers hold one for
/// a few dozen instructions; a spin lock's release is a plain store, where a
/// `Mutex` would add a second locked instruction to every insert.
struct Stripes {
    shift: u32,
    locks: Box<[SpinLock]>,
}

impl Stripes {
    fn new(blocks: u64) -> Stripes {
        let (shift, locks) = crate::spin::stripes(blocks);
        Stripes { shift, locks }
    }

    fn lock(&self, block: usize) -> SpinGuard<'_> {
        self.locks[block >> self.shift].lock()
    }
}

const _: () = assert!(MAX_COUNTING_K <= 128);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_matches_naive() {
        for m in [0u16, 1, 0x8000, 0xFFFF, 0x1234, 0xA5A5] {
            let mut want = 0u64;
            for i in 0..16 {
                if m >> i & 1 == 1 {
                    want |= 1 << (4 * i);
                }
            }
            assert_eq!(spread_nibbles(m), want, "{m:#x}");
        }
    }

    #[test]
    fn nibble_order_is_low_first() {
        let p = math::plan_counting(100, 0.01).unwrap();
        let f = CountingFilter::with_plan(&p, 7).unwrap();
        f.insert(b"x");
        for c in f.counter_indices(b"x") {
            assert_eq!(f.counter(c), Some(1));
            let byte = f.as_bytes()[(c / 2) as usize];
            let v = if c % 2 == 0 { byte & 0xF } else { byte >> 4 };
            assert_eq!(v, 1);
        }
    }
}
