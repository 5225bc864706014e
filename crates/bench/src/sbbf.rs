//! sbbf-rs, the split-block Bloom filter of Parquet (256-bit buckets, eight
//! probes, one per 32-bit word), over a buffer of the benchmarks' own, as
//! every benchmark measures it: keys hashed by the caller (seeded xxh3-64),
//! buffers of [`HUGE_MIN`] bytes and more on transparent huge pages like the
//! engine's filters (2 MiB aligned, `MADV_HUGEPAGE` before the first touch).
//!
//! Its false-positive rate is a Poisson mixture over a bucket's load `j`:
//! each probe lands in its own 32-bit word, which `j` items leave unset with
//! probability `(31/32)^j`, so `fp = Σ_j P(j) · (1 − (31/32)^j)^8` with
//! `P(j)` Poisson of mean `n / buckets` ([`Sbbf::rate`]). [`Sbbf::for_rate`]
//! sizes a filter for a target rate from it, so that sbbf-rs can be compared
//! with bloomgate's layouts at an equal rate, not only at equal bits.

use crate::AlignedBuf;

/// Buffers from this size on get huge pages, the engine's threshold for its
/// own filters (`HUGE_PAGE_MIN` in the engine's storage module).
pub const HUGE_MIN: usize = 4 << 20;

/// An sbbf-rs filter and its buffer.
pub struct Sbbf {
    buf: AlignedBuf,
    buckets: usize,
    ff: sbbf_rs::FilterFn,
}

impl Sbbf {
    /// A filter of `bits` bits (a multiple of the 256-bit bucket).
    pub fn new(bits: u64) -> Sbbf {
        let bytes = (bits / 8) as usize;
        assert!(bytes.is_multiple_of(sbbf_rs::BUCKET_SIZE) && bytes > 0);
        let buckets = bytes / sbbf_rs::BUCKET_SIZE;
        assert!(
            buckets <= u32::MAX as usize,
            "sbbf-rs indexes buckets with 32 bits"
        );
        let buf = if bytes >= HUGE_MIN {
            AlignedBuf::zeroed_huge(bytes)
        } else {
            AlignedBuf::zeroed(bytes)
        };
        Sbbf {
            buf,
            buckets,
            ff: sbbf_rs::FilterFn::new(),
        }
    }

    /// The smallest filter whose predicted rate for `n` items is at most `p`.
    pub fn for_rate(n: u64, p: f64) -> Sbbf {
        // The rate falls as buckets are added: bisect on the bucket count.
        let (mut lo, mut hi) = (1u64, n.max(1));
        while Self::rate(n, hi) > p {
            hi *= 2;
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if Self::rate(n, mid) <= p {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Sbbf::new(hi * 256)
    }

    /// The predicted false-positive rate of `buckets` buckets holding `n`
    /// items (the module's formula).
    pub fn rate(n: u64, buckets: u64) -> f64 {
        let lambda = n as f64 / buckets as f64;
        let mut p = (-lambda).exp();
        let mut fp = 0.0;
        for j in 0..100_000 {
            if j > 0 {
                p *= lambda / j as f64;
            }
            let word_fill = 1.0 - (31.0f64 / 32.0).powi(j);
            fp += p * word_fill.powi(8);
            if j as f64 > lambda * 4.0 + 50.0 {
                break;
            }
        }
        fp
    }

    /// Its predicted rate with `n` items.
    pub fn predicted_fp(&self, n: u64) -> f64 {
        Self::rate(n, self.buckets as u64)
    }

    /// Size in bits.
    pub fn bits(&self) -> u64 {
        self.buckets as u64 * 256
    }

    /// Which of sbbf-rs's kernels runs, e.g. `sbbf-rs 0.2 (Avx2Filter)`.
    pub fn name(&self) -> String {
        format!("sbbf-rs 0.2 ({})", self.ff.which())
    }

    /// The buffer (for huge-page accounting).
    pub fn memory(&self) -> (*const u8, usize) {
        (self.buf.as_ptr(), self.buf.len())
    }

    /// Sets the bits of hash `h`.
    #[inline(always)]
    pub fn insert_hash(&mut self, h: u64) {
        // SAFETY: buf is 64-byte aligned and holds `buckets` buckets (> 0).
        unsafe { self.ff.insert(self.buf.as_mut_ptr(), self.buckets, h) };
    }

    /// True if every bit of hash `h` is set.
    #[inline(always)]
    pub fn contains_hash(&self, h: u64) -> bool {
        // SAFETY: as in `insert_hash`.
        unsafe { self.ff.contains(self.buf.as_ptr(), self.buckets, h) }
    }

    /// The bucket sbbf-rs will touch for `h` (its own `fastrange_32` of the
    /// rotated hash; used only to prefetch).
    #[inline(always)]
    pub fn bucket_ptr(&self, h: u64) -> *const u8 {
        let idx = ((h.rotate_left(32) as u32 as u64 * self.buckets as u64) >> 32) as usize;
        self.buf.as_ptr().wrapping_add(idx * sbbf_rs::BUCKET_SIZE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sized_for_a_rate_meets_it_and_no_smaller_one_does() {
        let n = 1_000_000;
        let f = Sbbf::for_rate(n, 1e-4);
        assert!(f.predicted_fp(n) <= 1e-4);
        assert!(Sbbf::rate(n, f.bits() / 256 - 1) > 1e-4);
        // At bloomgate's 22.03 bits per item sbbf-rs predicts 2.54e-4
        // (BENCHMARKS.md, "Filters: insert and lookup").
        let at_22 = Sbbf::rate(380_777, 8_388_608 / 256);
        assert!((at_22 - 2.543e-4).abs() < 0.01e-4, "{at_22}");
    }

    #[test]
    fn no_inserted_hash_is_missed() {
        let mut f = Sbbf::for_rate(10_000, 1e-3);
        for i in 0..10_000u64 {
            f.insert_hash(crate::mix64(i));
        }
        assert!((0..10_000u64).all(|i| f.contains_hash(crate::mix64(i))));
    }
}
