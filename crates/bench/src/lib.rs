//! Shared helpers of the bloomgate benchmarks (`src/bin/filters.rs`, `src/bin/memlimit.rs`):
//! synthetic URL keys, a flat key arena, cache-line-aligned buffers and timing.

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

/// A zeroed, 64-byte-aligned heap buffer (large ones come from `mmap`, so
/// pages are only materialised when touched, like the engine's filters).
pub struct AlignedBuf {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: plain owned memory.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access is read-only unless the owner has `&mut`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `bytes` zeroed bytes aligned to 64 (panics on allocation failure).
    pub fn zeroed(bytes: usize) -> AlignedBuf {
        let layout = Layout::from_size_align(bytes.max(64), 64).unwrap();
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "allocation of {bytes} bytes failed");
        AlignedBuf { ptr, layout }
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
        self.layout.size()
    }
    /// True if empty (never: the minimum is 64 bytes).
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The buffer as u64 words.
    pub fn words(&self) -> &[u64] {
        // SAFETY: 64-byte aligned, initialised (zeroed), owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u64, self.len() / 8) }
    }
    /// The buffer as u64 words, writable.
    pub fn words_mut(&mut self) -> &mut [u64] {
        // SAFETY: as above, exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u64, self.len() / 8) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `zeroed`.
        unsafe { dealloc(self.ptr, self.layout) }
    }
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
    fn sample_is_distinct() {
        for (n, r) in [(10, 1000u64), (900, 1000), (1000, 1000)] {
            let s = sample_ids(n, r, 7);
            let set: std::collections::HashSet<_> = s.iter().collect();
            assert_eq!(set.len(), n);
            assert!(s.iter().all(|&x| x < r));
        }
    }
}
