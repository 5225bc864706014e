//! Shared helpers of the bloomgate benchmarks (`src/bin/filters/`, `src/bin/memlimit.rs`):
//! synthetic URL keys, a flat key arena, cache-line-aligned buffers and timing.

pub mod sbbf;
pub mod urls;

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::time::Instant;

/// SplitMix64 finaliser: a cheap bijective mixer.
#[inline(always)]
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[inline(always)]
fn push_dec(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Appends synthetic URL-like key number `i` to `out`: distinct for distinct
/// `i`, 35–60 bytes, e.g. `http://host123456.example/path/42?q=977`.
#[inline]
pub fn push_key(out: &mut Vec<u8>, i: u64) {
    let h = mix64(i);
    out.extend_from_slice(b"http://host");
    push_dec(out, h % 1_000_003);
    out.extend_from_slice(b".example/path/");
    push_dec(out, i);
    if h >> 62 == 0 {
        out.extend_from_slice(b"?q=");
        push_dec(out, (h >> 20) & 0xFFFF);
    }
}

/// One key as an owned vector (slow path, for tests and spot checks).
pub fn key(i: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(64);
    push_key(&mut v, i);
    v
}

/// Many keys stored back to back in one buffer, with slices into it.
pub struct Keys {
    data: Vec<u8>,
    ends: Vec<usize>,
}

impl Keys {
    /// The keys numbered by `ids`, in that order.
    pub fn from_ids(ids: impl Iterator<Item = u64>) -> Keys {
        let n = ids.size_hint().0;
        let mut data = Vec::with_capacity(n * 48);
        let mut ends = Vec::with_capacity(n);
        for i in ids {
            push_key(&mut data, i);
            ends.push(data.len());
        }
        Keys { data, ends }
    }

    /// The keys as slices (what every filter is fed).
    pub fn slices(&self) -> Vec<&[u8]> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&e| {
                let s = &self.data[start..e];
                start = e;
                s
            })
            .collect()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True if there are no keys.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Average key length in bytes.
    pub fn mean_len(&self) -> f64 {
        self.data.len() as f64 / self.len().max(1) as f64
    }
}

/// `n` distinct pseudo-random numbers in `0..range` (a random affine
/// bijection of `0..range` would be nicer; rejection is fine for n ≪ range).
pub fn sample_ids(n: usize, range: u64, seed: u64) -> Vec<u64> {
    assert!(n as u64 <= range);
    if n as u64 * 2 > range {
        // Dense: a strided walk with a step coprime to range.
        let mut step = (mix64(seed) % range) | 1;
        while gcd(step, range) != 1 {
            step += 2;
        }
        return (0..n as u64).map(|j| (j * step + seed) % range).collect();
    }
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    let mut j = seed;
    while out.len() < n {
        j += 1;
        let x = ((mix64(j) as u128 * range as u128) >> 64) as u64;
        if seen.insert(x) {
            out.push(x);
        }
    }
    out
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Size and alignment of a transparent huge page on x86-64 and most arm64 kernels.
pub const HUGE_PAGE: usize = 2 << 20;

/// Where an [`AlignedBuf`]'s memory came from (decides how it is freed).
enum Backing {
    /// The global allocator, with this layout.
    Heap(Layout),
    /// An anonymous mapping of `map_len` bytes starting at the buffer's pointer.
    Mmap { map_len: usize },
}

/// A zeroed, aligned buffer: either from the global allocator (64-byte
/// aligned, see [`AlignedBuf::zeroed`]) or from an anonymous mapping that is
/// 2 MiB aligned and advised `MADV_HUGEPAGE` before its first touch (see
/// [`AlignedBuf::zeroed_huge`]).
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
    backing: Backing,
    huge_advised: bool,
}

// SAFETY: plain owned memory.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access is read-only unless the owner has `&mut`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `bytes` zeroed bytes aligned to 64 (panics on allocation failure).
    ///
    /// std's `alloc_zeroed` serves alignments above 16 with an aligned
    /// `malloc` plus `memset`, so every page is touched here, with 4 KiB
    /// pages: a later `madvise(MADV_HUGEPAGE)` on this buffer does not make it
    /// huge-page backed (use [`AlignedBuf::zeroed_huge`] for that).
    pub fn zeroed(bytes: usize) -> AlignedBuf {
        let layout = Layout::from_size_align(bytes.max(64), 64).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "allocation of {bytes} bytes failed");
        AlignedBuf {
            ptr,
            len: layout.size(),
            backing: Backing::Heap(layout),
            huge_advised: false,
        }
    }

    /// `bytes` zeroed bytes in a private anonymous mapping whose start is
    /// aligned to [`HUGE_PAGE`] and whose length is rounded up to a multiple
    /// of it, advised `MADV_HUGEPAGE` before anything touches it, so that
    /// (memory permitting) every fault maps a 2 MiB page. Panics if the
    /// mapping fails, like [`AlignedBuf::zeroed`]; a failed `madvise` is
    /// only reported by [`AlignedBuf::huge_advised`].
    pub fn zeroed_huge(bytes: usize) -> AlignedBuf {
        let map_len = bytes.max(64).div_ceil(HUGE_PAGE) * HUGE_PAGE;
        // Over-map by one huge page so an aligned start exists inside.
        let total = map_len
            .checked_add(HUGE_PAGE)
            .expect("buffer size overflows usize");
        // SAFETY: a fresh private anonymous mapping; no existing memory is
        // affected, and the result is checked against MAP_FAILED.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(
            raw != libc::MAP_FAILED,
            "mapping of {bytes} bytes failed: {}",
            std::io::Error::last_os_error()
        );
        let raw = raw as usize;
        let start = raw.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let head = start - raw;
        let tail = total - head - map_len;
        // SAFETY: both ranges lie inside the mapping created above, are page
        // aligned (mmap returns page-aligned memory and HUGE_PAGE is a
        // multiple of the page size) and are outside [start, start+map_len),
        // which is all this buffer keeps; nothing else refers to them.
        unsafe {
            if head > 0 {
                libc::munmap(raw as *mut libc::c_void, head);
            }
            if tail > 0 {
                libc::munmap((start + map_len) as *mut libc::c_void, tail);
            }
        }
        let ptr = start as *mut u8;
        // SAFETY: madvise on the live, untouched mapping owned by this buffer
        // only changes its paging policy.
        let huge_advised =
            unsafe { libc::madvise(ptr as *mut libc::c_void, map_len, libc::MADV_HUGEPAGE) == 0 };
        AlignedBuf {
            ptr,
            len: bytes.max(64),
            backing: Backing::Mmap { map_len },
            huge_advised,
        }
    }

    /// Whether this buffer was advised `MADV_HUGEPAGE` before its first
    /// touch (only [`AlignedBuf::zeroed_huge`] does that, and only if the
    /// kernel accepted the advice).
    pub fn huge_advised(&self) -> bool {
        self.huge_advised
    }
    /// Start of the buffer.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }
    /// Start of the buffer, writable.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True if empty (never: the minimum is 64 bytes).
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The buffer as u64 words.
    pub fn words(&self) -> &[u64] {
        // SAFETY: at least 64-byte aligned, `len` bytes initialised (zeroed
        // by the allocator or the kernel), owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u64, self.len / 8) }
    }
    /// The buffer as 512-bit blocks of atomic words, the engine's layout
    /// (for harnesses that drive the engine's kernels on their own memory).
    pub fn blocks(&self) -> &[bloomgate_engine::arch::Block] {
        // SAFETY: at least 64-byte aligned and `len` bytes initialised, as
        // above; `[AtomicU64; 8]` has the size and alignment of `[u64; 8]`
        // (AtomicU64 has u64's layout), and every access goes through the
        // atomics, so shared references are sound.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr as *const bloomgate_engine::arch::Block,
                self.len / 64,
            )
        }
    }
    /// The buffer as u64 words, writable.
    pub fn words_mut(&mut self) -> &mut [u64] {
        // SAFETY: as above, exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u64, self.len / 8) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        match self.backing {
            // SAFETY: allocated with this layout in `zeroed`.
            Backing::Heap(layout) => unsafe { dealloc(self.ptr, layout) },
            // SAFETY: `[ptr, ptr+map_len)` is exactly what `zeroed_huge` kept
            // mapped, and no reference into it outlives `self`.
            Backing::Mmap { map_len } => unsafe {
                libc::munmap(self.ptr as *mut libc::c_void, map_len);
            },
        }
    }
}

/// Bytes of `[ptr, ptr+len)` backed by transparent huge pages, from the
/// `AnonHugePages` of the `/proc/self/smaps` mappings overlapping the range
/// (each mapping's count capped at its overlap with the range, so a larger
/// merged mapping cannot inflate it). `None` if smaps cannot be read.
pub fn anon_huge_bytes(ptr: *const u8, len: usize) -> Option<usize> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let (lo, hi) = (ptr as usize, ptr as usize + len);
    let mut total = 0usize;
    let mut overlap = 0usize;
    for line in smaps.lines() {
        let mut it = line.split_whitespace();
        let first = it.next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                overlap = hi.min(b).saturating_sub(lo.max(a));
                continue;
            }
        }
        if first == "AnonHugePages:" && overlap > 0 {
            let kb: usize = it.next()?.parse().ok()?;
            total += (kb * 1024).min(overlap);
        }
    }
    Some(total)
}

/// Asks the kernel to back `[ptr, ptr+len)` with transparent huge pages
/// (the machine's THP policy is `madvise`, so without this large buffers use
/// 4 KiB pages). Returns whether the call succeeded.
pub fn advise_hugepages(ptr: *const u8, len: usize) -> bool {
    let page = 4096usize;
    let start = (ptr as usize).div_ceil(page) * page;
    let end = (ptr as usize + len) / page * page;
    if end <= start {
        return false;
    }
    // SAFETY: madvise on a range inside a live allocation only changes paging policy.
    unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) == 0 }
}

/// Runs `f` `reps` times and returns each run's seconds.
pub fn time_reps(reps: usize, mut f: impl FnMut()) -> Vec<f64> {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect()
}

/// The number after `--name` on the command line (`args` without the
/// program name), if present; panics with a clear message if it is not a number.
pub fn num_arg(args: &[String], name: &str) -> Option<f64> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} needs a number, got {v:?}"))
        })
}

/// Median of a non-empty sample.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Contents of `lscpu`'s "Model name" line, or "unknown".
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Current transparent-huge-page policy (the bracketed word).
pub fn thp_policy() -> String {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .ok()
        .and_then(|s| {
            let a = s.find('[')?;
            let b = s.find(']')?;
            Some(s[a + 1..b].to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_and_url_like() {
        let mut set = std::collections::HashSet::new();
        for i in 0..100_000 {
            let k = key(i);
            assert!(k.starts_with(b"http://host"));
            assert!(set.insert(k));
        }
    }

    #[test]
    fn huge_buffer_is_aligned_zeroed_and_writable() {
        for bytes in [1usize, 100, HUGE_PAGE + 8, 5 << 20] {
            let mut b = AlignedBuf::zeroed_huge(bytes);
            assert_eq!(b.as_ptr() as usize % HUGE_PAGE, 0);
            assert_eq!(b.len(), bytes.max(64));
            assert!(b.words().iter().all(|&w| w == 0));
            b.words_mut().iter_mut().for_each(|w| *w = !0);
            assert!(anon_huge_bytes(b.as_ptr(), b.len()).is_some_and(|h| h <= b.len()));
        }
    }

    #[test]
    fn sample_is_distinct() {
        for (n, r) in [(10, 1000u64), (900, 1000), (1000, 1000)] {
            let s = sample_ids(n, r, 7);
            let set: std::collections::HashSet<_> = s.iter().collect();
            assert_eq!(set.len(), n);
            assert!(s.iter().all(|&x| x < r));
        }
    }
}
