//! Where a filter's bits live: zeroed heap memory or a memory-mapped file.
//!
//! Both are exposed as one `&[AtomicU64]` so that the layouts never care.
//! Atomics make concurrent writers and readers race-free (`Relaxed` loads and
//! stores compile to plain `mov`s; the classic layout's `fetch_or` is a single
//! `lock or`; the SIMD kernels read blocks with single vector loads in `arch`).
//! Bits are only ever set, never cleared, so a reader racing a writer sees
//! either the old or the new word and never a false negative for an item whose
//! insertion completed before the read began.
//!
//! In-memory filters live in an anonymous mapping (zeroed by the kernel,
//! page-aligned, costing nothing until touched). Mapped files are page-aligned
//! and the bit array starts at byte 4096, so blocks are cache-line aligned in
//! both cases. Large arrays ask for transparent huge pages (`MADV_HUGEPAGE`):
//! every lookup of a DRAM-resident filter is a random access, and with 4 KiB
//! pages each one also misses the TLB (a nested page walk under
//! virtualization). The advice is a hint; where THP is off it changes nothing.

use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use memmap2::{Advice, MmapMut};

/// Alignment of heap bit arrays: one cache line.
const ALIGN: usize = 64;

/// Arrays from this size on ask for huge pages.
const HUGE_PAGE_MIN: usize = 4 << 20;

enum Owner {
    /// Held only so that dropping `Bits` unmaps the memory.
    Anon {
        _map: MmapMut,
    },
    Map {
        map: MmapMut,
        offset: usize,
    },
}

/// The bit array of one filter.
pub(crate) struct Bits {
    ptr: NonNull<AtomicU64>,
    words: usize,
    owner: Owner,
}

// SAFETY: `Bits` owns its memory exclusively (a heap allocation or a mapping)
// and only hands out `&[AtomicU64]`, which is itself Send + Sync.
unsafe impl Send for Bits {}
// SAFETY: as above; all shared access goes through atomics.
unsafe impl Sync for Bits {}

impl Bits {
    /// Zeroed in-memory storage for `words` 64-bit words. `None` if the
    /// memory cannot be mapped.
    pub(crate) fn heap(words: usize) -> Option<Bits> {
        let size = words.checked_mul(8)?.max(ALIGN);
        let mut map = MmapMut::map_anon(size).ok()?;
        if size >= HUGE_PAGE_MIN {
            let _ = map.advise(Advice::HugePage);
        }
        let ptr = NonNull::new(map.as_mut_ptr() as *mut AtomicU64)?;
        Some(Bits {
            ptr,
            words,
            owner: Owner::Anon { _map: map },
        })
    }

    /// Storage inside a mapping: `words` words starting at byte `offset`.
    ///
    /// Returns `None` unless `offset` is 64-byte aligned and the mapping holds
    /// `offset + 8·words` bytes.
    pub(crate) fn mapped(mut map: MmapMut, offset: usize, words: usize) -> Option<Bits> {
        let end = offset.checked_add(words.checked_mul(8)?)?;
        if !offset.is_multiple_of(ALIGN) || end > map.len() {
            return None;
        }
        // SAFETY: `offset` is within the mapping (checked above), so the
        // pointer stays inside the same allocation.
        let raw = unsafe { map.as_mut_ptr().add(offset) } as *mut AtomicU64;
        let ptr = NonNull::new(raw)?;
        if !(raw as usize).is_multiple_of(ALIGN) {
            return None;
        }
        Some(Bits {
            ptr,
            words,
            owner: Owner::Map { map, offset },
        })
    }

    /// The words, shared.
    #[inline(always)]
    pub(crate) fn words(&self) -> &[AtomicU64] {
        // SAFETY: `ptr` points at `words` initialised (zeroed or file-backed)
        // u64-sized, 64-byte-aligned slots that live as long as `self` (the
        // heap allocation or mapping is freed only in Drop), and AtomicU64 has
        // the same size and alignment as u64. All mutation happens through the
        // atomics, so shared references are sound.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.words) }
    }

    /// The words as plain integers, for a writer that holds the filter
    /// exclusively (the single-writer insert path): no atomics, no locks.
    #[inline(always)]
    pub(crate) fn words_mut(&mut self) -> &mut [u64] {
        // SAFETY: same memory as `words()` (initialised, 64-byte aligned,
        // alive as long as `self`), and u64 has AtomicU64's size and
        // alignment. `&mut self` guarantees no shared view (atomic or not)
        // is alive, so this is the only reference to it for its lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr() as *mut u64, self.words) }
    }

    /// The words grouped in 512-bit blocks (the blocked layout's unit; the
    /// word count is always a multiple of 8).
    #[inline(always)]
    pub(crate) fn blocks(&self) -> &[crate::arch::Block] {
        self.words().as_chunks::<8>().0
    }

    /// The words as plain bytes (for checksums and writing), read through a
    /// shared view. Callers must not race writers if they need a stable snapshot.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: same memory as `words()`, viewed as `8·words` bytes; u8 has
        // alignment 1. Concurrent atomic writers only set bits; the engine
        // reads these bytes only for checksums/serialisation, where it has
        // documented that writers must be quiescent.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr() as *const u8, self.words * 8) }
    }

    /// The words as plain bytes to fill (e.g. from a file), with exclusive
    /// access.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: same memory as `words()`, viewed as `8·words` bytes; `&mut
        // self` guarantees no shared view (atomic or not) is alive, so this
        // is the only reference to it for its lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr() as *mut u8, self.words * 8) }
    }

    /// The mapping and the data offset in it, for file-backed storage.
    pub(crate) fn map(&self) -> Option<(&MmapMut, usize)> {
        match &self.owner {
            Owner::Map { map, offset } => Some((map, *offset)),
            Owner::Anon { .. } => None,
        }
    }

    /// Overwrites the first `bytes.len()` bytes of the mapping (the file
    /// header), which lie before the bit array. Returns false for heap storage
    /// or if the bytes would reach into the bit array.
    ///
    /// Takes `&mut self`, so no other header write can race it; readers of the
    /// bit array are unaffected because the ranges are disjoint.
    pub(crate) fn write_prefix(&mut self, bytes: &[u8]) -> bool {
        match &mut self.owner {
            Owner::Map { map, offset } if bytes.len() <= *offset => {
                let base = self.ptr.as_ptr() as *mut u8;
                // SAFETY: `base` was derived from `map.as_mut_ptr()` plus
                // `offset` (see `mapped`), so `base - offset` is the start of the
                // mapping, writable, and the `bytes.len() ≤ offset` bytes written
                // end before the bit array, so they alias no `&[AtomicU64]`.
                unsafe {
                    let start = base.sub(*offset);
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), start, bytes.len());
                }
                let _ = map;
                true
            }
            _ => false,
        }
    }
}

/// The memory the kernel says is available now (`MemAvailable` of
/// `/proc/meminfo`, in bytes): free memory plus the page cache it could
/// reclaim. `None` where unknown.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// How lookups will read a mapped filter file of `len` bytes. A file the
/// page cache cannot keep (more than half the memory available) is read at
/// random: without the hint every fault reads ahead a window around its
/// page (128 KiB by default: 32 pages for the one a lookup needs), evicting
/// pages later lookups would have found (BENCHMARKS.md, "Filters larger
/// than memory"). Smaller files keep the kernel's read-ahead, which warms
/// them faster. Only a hint.
pub(crate) fn lookup_advice(len: u64) -> memmap2::Advice {
    if mem_available().is_none_or(|avail| len > avail / 2) {
        memmap2::Advice::Random
    } else {
        memmap2::Advice::Normal
    }
}
