//! The fast path of [`crate::canonical_key`]: decide, without allocating or
//! rewriting anything, whether an input is already canonical.
//!
//! # Design
//!
//! [`fast_key_start`] accepts an input only if the full algorithm in
//! [`crate::canon`] would return it unchanged (minus the scheme):
//!
//! * an optional lowercase scheme `[a-z][a-z0-9+.-]*` followed by `://`;
//! * a host of lowercase `[a-z0-9_-]` labels joined by single dots (no
//!   leading or trailing dot), which, if it could spell an IPv4 address
//!   (only `[0-9a-fx.]`), must already be a canonical dotted quad;
//! * a `/`, then a path of printable ASCII other than `%` and `#`, with no
//!   empty (`//`), `.` or `..` segment, except that the last segment may be
//!   empty (a trailing `/`);
//! * optionally `?` and a query of printable ASCII other than `%` and `#`.
//!
//! Everything else returns `None` and takes the general path; the fast path
//! never has to be complete, only exact when it says yes.
//!
//! There are two implementations of the same scan, which accept exactly the
//! same inputs (property tests check this):
//!
//! * [`scalar`]: byte at a time with the 256-entry class table of
//!   [`crate::canon`]. The reference; used for inputs shorter than 16 or
//!   longer than 127 bytes, on CPUs without AVX2/BMI2 and on targets other
//!   than x86-64.
//! * [`avx2`] (x86-64 with AVX2 and BMI2, detected once at run time):
//!   classifies 32 bytes per instruction into one bit per byte for `/`, `?`,
//!   `.`, `_` and "host byte", plus a "printable, not `#`/`%`" check. An
//!   input of 16 to 63 bytes is covered by two (possibly overlapping) 16- or
//!   32-byte loads and its positions fit in a `u64`; up to 127 bytes, four
//!   32-byte loads and a `u128`. Every rule above then becomes a handful of
//!   bit operations on those masks (first `/` = end of host, first `?` = end
//!   of path, `/.` followed by the end of a segment = dot segment, ...),
//!   with no per-byte branches; a host starting with a digit is checked for
//!   being a canonical dotted quad from its dot positions, again without
//!   per-part branches. On typical 30–80 byte URLs this is about 3× cheaper
//!   than the scalar scan, whose data-dependent branches (at every `/`, at
//!   the `?`, at the end of each part) are also hard to predict.
//!
//! The intrinsics are safe functions in a `#[target_feature]` context; the
//! one `unsafe` in this crate is the call into that context, right after the
//! run-time feature check.

use crate::bytes::{class, ESC, HOST_OK, IP_CHAR, MAX_INPUT_LEN, PLAIN};
use crate::host::ipv4_is_canonical_or_not_ip;

/// Returns the offset where the canonical key starts (after `scheme://`, or
/// 0) if `input` is already canonical, `None` otherwise (including when it is
/// merely not simple enough to tell).
#[inline]
pub(crate) fn fast_key_start(input: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if (avx2::MIN_LEN..=avx2::MAX_LEN).contains(&input.len()) && avx2::available() {
        // SAFETY: `avx2::fast_key_start` is a safe function whose only
        // requirement is the target features it is compiled with (avx2,
        // bmi1, bmi2), and `available()` just checked that this CPU has them.
        #[allow(unsafe_code)]
        return unsafe { avx2::fast_key_start(input) };
    }
    scalar::fast_key_start(input)
}

/// The fast path accepts a host that could be an IPv4 address in some
/// spelling only if it is already canonical. Called for every host made only
/// of `[0-9a-fx.]` (scalar scan) or starting with a digit (AVX2 scan); both
/// are supersets of the hosts that parse as IPv4 addresses (every part of
/// an IPv4 spelling starts with a digit), and this is true for all others.
/// `dots` has bit `i` set where `host[i]` is a dot.
#[inline]
fn ip_like_host_ok(host: &[u8], dots: u64) -> bool {
    dotted_quad_ok(host, dots) || ipv4_is_canonical_or_not_ip(host)
}

/// Bit `i` set where `host[i]` is a dot (first 64 bytes).
fn dot_bits(host: &[u8]) -> u64 {
    host.iter()
        .take(64)
        .enumerate()
        .fold(0, |m, (i, &b)| m | u64::from(b == b'.') << i)
}

/// `a.b.c.d` with each part `0` or `[1-9][0-9]{0,2}` at most 255: exactly
/// the strings that the IPv4 printer produces (a cheap sufficient condition
/// for [`ipv4_is_canonical_or_not_ip`]). `dots` as for [`ip_like_host_ok`].
///
/// The parts are found from `dots` and checked with arithmetic only: the
/// parts' lengths vary from address to address, and a byte loop branching
/// on them is mispredicted about once per part.
#[inline]
fn dotted_quad_ok(host: &[u8], dots: u64) -> bool {
    let n = host.len();
    if n > 15 || dots.count_ones() != 3 {
        return false;
    }
    let p1 = dots.trailing_zeros() as usize;
    let rest = dots & (dots - 1);
    let p2 = rest.trailing_zeros() as usize;
    let p3 = (rest & (rest - 1)).trailing_zeros() as usize;
    quad_part_ok(host, 0, p1)
        & quad_part_ok(host, p1 + 1, p2)
        & quad_part_ok(host, p2 + 1, p3)
        & quad_part_ok(host, p3 + 1, n)
}

/// `host[a..b]` is `0` or `[1-9][0-9]{0,2}` at most 255 (`a <= b <= len`,
/// `host` non-empty). Reads the part's last three bytes right-aligned (bytes
/// before the part are read, clamped into `host`, and then ignored).
#[inline(always)]
fn quad_part_ok(host: &[u8], a: usize, b: usize) -> bool {
    let len = b.wrapping_sub(a);
    let last = host.len() - 1;
    let digit = |i: usize| u32::from(host[i.min(last)].wrapping_sub(b'0'));
    let d0 = digit(b.wrapping_sub(1));
    let d1 = digit(b.wrapping_sub(2));
    let d2 = digit(b.wrapping_sub(3));
    let (two, three) = (len >= 2, len >= 3);
    // (A non-digit first byte of three needs no check: it makes the value
    // at least 1000.)
    let digits = (d0 <= 9) & (!two | (d1 <= 9));
    let value = d0 + u32::from(two) * 10 * d1 + u32::from(three) * 100 * d2;
    let leading_zero = two & (host[a.min(last)] == b'0');
    (1..=3).contains(&len) & digits & !leading_zero & (value <= 255)
}

/// [`dotted_quad_ok`] for a host alone.
#[cfg(test)]
fn is_plain_dotted_quad(host: &[u8]) -> bool {
    !host.is_empty() && dotted_quad_ok(host, dot_bits(host))
}

/// The byte-at-a-time scan (reference implementation and fallback).
pub(crate) mod scalar {
    use super::{class, dot_bits, ip_like_host_ok, ESC, HOST_OK, IP_CHAR, MAX_INPUT_LEN, PLAIN};

    /// See [`super::fast_key_start`].
    pub(crate) fn fast_key_start(input: &[u8]) -> Option<usize> {
        if input.len() > MAX_INPUT_LEN {
            return None;
        }
        // Optional lowercase scheme followed by "://".
        let key_start = if input.starts_with(b"http://") {
            7
        } else if input.starts_with(b"https://") {
            8
        } else {
            match input.first() {
                Some(b'a'..=b'z') => {
                    let n = input
                        .iter()
                        .position(|&b| !matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'+' | b'-' | b'.'))
                        .unwrap_or(input.len());
                    if input[n..].starts_with(b"://") {
                        n + 3
                    } else {
                        0
                    }
                }
                _ => 0,
            }
        };
        let n = input.len();
        // Host: [a-z0-9._-]+ without leading, trailing or doubled dots, then '/'.
        let mut i = key_start;
        let mut prev = b'.';
        let mut maybe_ip = true;
        while i < n {
            let b = input[i];
            let c = class(b);
            if c & HOST_OK == 0 || (b == b'.' && prev == b'.') {
                break;
            }
            maybe_ip &= c & IP_CHAR != 0;
            prev = b;
            i += 1;
        }
        if i == key_start || prev == b'.' || i == n || input[i] != b'/' {
            return None;
        }
        // Only hex letters, digits, 'x' and dots can spell an IPv4 address;
        // such a host must already be a canonical dotted quad (or not an
        // address at all).
        if maybe_ip && !ip_like_host_ok(&input[key_start..i], dot_bits(&input[key_start..i])) {
            return None;
        }
        i += 1;
        let mut seg_start = i;
        while i < n {
            let b = input[i];
            if class(b) & PLAIN != 0 {
                i += 1;
                continue;
            }
            match b {
                b'/' => {
                    if is_dot_or_empty(&input[seg_start..i]) {
                        return None;
                    }
                    i += 1;
                    seg_start = i;
                }
                b'?' => {
                    if is_dot_segment(&input[seg_start..i]) {
                        return None;
                    }
                    return input[i + 1..]
                        .iter()
                        .all(|&b| class(b) & ESC == 0)
                        .then_some(key_start);
                }
                _ => return None,
            }
        }
        if is_dot_segment(&input[seg_start..]) {
            return None;
        }
        Some(key_start)
    }

    fn is_dot_segment(seg: &[u8]) -> bool {
        seg == b"." || seg == b".."
    }

    fn is_dot_or_empty(seg: &[u8]) -> bool {
        seg.is_empty() || is_dot_segment(seg)
    }
}

/// The AVX2 scan (x86-64 CPUs with AVX2 and BMI2, detected at run time).
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm256_add_epi8, _mm256_andnot_si256, _mm256_cmpeq_epi8,
        _mm256_cmpgt_epi8, _mm256_movemask_epi8, _mm256_or_si256, _mm256_set1_epi8,
        _mm256_set_epi64x, _mm_add_epi8, _mm_andnot_si128, _mm_cmpeq_epi8, _mm_cmpgt_epi8,
        _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8, _mm_set_epi64x,
    };
    use std::ops::{BitAnd, BitOr, Not, Shl, Shr};

    use super::ip_like_host_ok;

    /// Shortest input the scan handles (one full 16-byte load).
    pub(crate) const MIN_LEN: usize = 16;
    /// Longest input the scan handles: every position plus the 1-byte
    /// look-past-the-end of the dot-segment rule fits in a `u128`.
    pub(crate) const MAX_LEN: usize = 127;
    /// Longest input whose positions are kept in a `u64` (same look-ahead).
    const MAX_LEN_64: usize = 63;

    /// Whether this CPU can run [`fast_key_start`] (detected once).
    #[inline]
    pub(crate) fn available() -> bool {
        use std::sync::atomic::{AtomicU8, Ordering};
        // 0: not detected yet, 1: no, 2: yes.
        static STATE: AtomicU8 = AtomicU8::new(0);
        match STATE.load(Ordering::Relaxed) {
            0 => {
                let yes = std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("bmi1")
                    && std::arch::is_x86_feature_detected!("bmi2");
                STATE.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
                yes
            }
            s => s == 2,
        }
    }

    /// A set of byte positions, one bit per position (`u64` or `u128`).
    trait Bits:
        Copy
        + PartialEq
        + BitAnd<Output = Self>
        + BitOr<Output = Self>
        + Not<Output = Self>
        + Shl<u32, Output = Self>
        + Shr<u32, Output = Self>
    {
        const ZERO: Self;
        const ONE: Self;
        fn trailing_zeros(self) -> u32;
        /// The low 64 positions.
        fn low_u64(self) -> u64;
        /// Positions `0..n` (`n` below the width).
        #[inline(always)]
        fn below(n: u32) -> Self {
            !(!Self::ZERO << n)
        }
    }

    impl Bits for u64 {
        const ZERO: Self = 0;
        const ONE: Self = 1;
        #[inline(always)]
        fn trailing_zeros(self) -> u32 {
            u64::trailing_zeros(self)
        }
        #[inline(always)]
        fn low_u64(self) -> u64 {
            self
        }
    }

    impl Bits for u128 {
        const ZERO: Self = 0;
        const ONE: Self = 1;
        #[inline(always)]
        fn trailing_zeros(self) -> u32 {
            u128::trailing_zeros(self)
        }
        #[inline(always)]
        fn low_u64(self) -> u64 {
            self as u64
        }
    }

    /// Positions of some byte classes, and whether every byte is "plain".
    #[derive(Clone, Copy, Default)]
    struct Masks<T> {
        slash: T,
        query: T,
        dot: T,
        /// `[a-z0-9_./-]`: the host bytes, plus '/' (which ends the host
        /// anyway), because that makes it two ranges and one byte.
        host: T,
        /// `_` (a host byte that cannot be in a scheme).
        under: T,
    }

    impl Masks<u64> {
        #[inline(always)]
        fn or_shifted(self, o: Masks<u64>, by: u32) -> Masks<u64> {
            Masks {
                slash: self.slash | o.slash << by,
                query: self.query | o.query << by,
                dot: self.dot | o.dot << by,
                host: self.host | o.host << by,
                under: self.under | o.under << by,
            }
        }

        #[inline(always)]
        fn shr(self, by: u32) -> Masks<u64> {
            Masks {
                slash: self.slash >> by,
                query: self.query >> by,
                dot: self.dot >> by,
                host: self.host >> by,
                under: self.under >> by,
            }
        }

        #[inline(always)]
        fn widen(self, hi: Masks<u64>) -> Masks<u128> {
            let w = |l: u64, h: u64| u128::from(h) << 64 | u128::from(l);
            Masks {
                slash: w(self.slash, hi.slash),
                query: w(self.query, hi.query),
                dot: w(self.dot, hi.dot),
                host: w(self.host, hi.host),
                under: w(self.under, hi.under),
            }
        }
    }

    /// The 8 bytes at `at` (little-endian), bounds-checked.
    #[inline(always)]
    fn word(b: &[u8], at: usize) -> i64 {
        let bytes: [u8; 8] = b[at..at + 8].try_into().unwrap_or_default();
        i64::from_le_bytes(bytes)
    }

    /// 32 bytes at `off` (the caller guarantees `off + 32 <= b.len()`).
    /// Safe code; compiles to one unaligned load.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn load32(b: &[u8], off: usize) -> __m256i {
        _mm256_set_epi64x(
            word(b, off + 24),
            word(b, off + 16),
            word(b, off + 8),
            word(b, off),
        )
    }

    /// 16 bytes at `off` (the caller guarantees `off + 16 <= b.len()`).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn load16(b: &[u8], off: usize) -> __m128i {
        _mm_set_epi64x(word(b, off + 8), word(b, off))
    }

    /// Classify 32 bytes: class masks, plus a mask of "plain" bytes
    /// (0x21..=0x7e except '#' and '%').
    #[inline]
    #[target_feature(enable = "avx2")]
    fn classify32(v: __m256i) -> (Masks<u64>, u32) {
        // Bytes in lo..=hi (both below 0x80): shift the range to the bottom
        // of the signed byte range and compare once.
        let in_range = |lo: u8, hi: u8| {
            let shifted = _mm256_add_epi8(v, _mm256_set1_epi8(0x80u8.wrapping_sub(lo) as i8));
            _mm256_cmpgt_epi8(_mm256_set1_epi8((0x80 + (hi - lo) + 1) as i8), shifted)
        };
        let eq = |b: u8| _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b as i8));
        let bits = |x: __m256i| u64::from(_mm256_movemask_epi8(x) as u32);
        let plain = _mm256_andnot_si256(_mm256_or_si256(eq(b'#'), eq(b'%')), in_range(0x21, 0x7e));
        // '-' '.' '/' '0'..='9' are 0x2d..=0x39.
        let under = eq(b'_');
        let host = _mm256_or_si256(
            _mm256_or_si256(in_range(b'-', b'9'), in_range(b'a', b'z')),
            under,
        );
        let m = Masks {
            slash: bits(eq(b'/')),
            query: bits(eq(b'?')),
            dot: bits(eq(b'.')),
            host: bits(host),
            under: bits(under),
        };
        (m, _mm256_movemask_epi8(plain) as u32)
    }

    /// [`classify32`] for 16 bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn classify16(v: __m128i) -> (Masks<u64>, u32) {
        let in_range = |lo: u8, hi: u8| {
            let shifted = _mm_add_epi8(v, _mm_set1_epi8(0x80u8.wrapping_sub(lo) as i8));
            _mm_cmpgt_epi8(_mm_set1_epi8((0x80 + (hi - lo) + 1) as i8), shifted)
        };
        let eq = |b: u8| _mm_cmpeq_epi8(v, _mm_set1_epi8(b as i8));
        let bits = |x: __m128i| u64::from(_mm_movemask_epi8(x) as u16);
        let plain = _mm_andnot_si128(_mm_or_si128(eq(b'#'), eq(b'%')), in_range(0x21, 0x7e));
        let under = eq(b'_');
        let host = _mm_or_si128(
            _mm_or_si128(in_range(b'-', b'9'), in_range(b'a', b'z')),
            under,
        );
        let m = Masks {
            slash: bits(eq(b'/')),
            query: bits(eq(b'?')),
            dot: bits(eq(b'.')),
            host: bits(host),
            under: bits(under),
        };
        (m, u32::from(_mm_movemask_epi8(plain) as u16) | 0xffff_0000)
    }

    /// Bytes `start..start + len` for `32 <= len <= 64` (two loads, the
    /// second moved back to end at the last byte; overlapping bytes just
    /// set the same bits again).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn block64(b: &[u8], start: usize, len: usize) -> (Masks<u64>, bool) {
        let (m0, p0) = classify32(load32(b, start));
        let (m1, p1) = classify32(load32(b, start + len - 32));
        (m0.or_shifted(m1, (len - 32) as u32), p0 & p1 == u32::MAX)
    }

    /// See [`super::fast_key_start`]. Requires `MIN_LEN <= input.len() <=
    /// MAX_LEN` (otherwise defers to the scalar scan).
    #[target_feature(enable = "avx2,bmi1,bmi2")]
    pub(crate) fn fast_key_start(input: &[u8]) -> Option<usize> {
        let n = input.len();
        if n < 32 {
            if n < MIN_LEN {
                return super::scalar::fast_key_start(input);
            }
            let (m0, p0) = classify16(load16(input, 0));
            let (m1, p1) = classify16(load16(input, n - 16));
            if p0 & p1 != u32::MAX {
                return None;
            }
            decide(input, m0.or_shifted(m1, (n - 16) as u32))
        } else if n <= MAX_LEN_64 {
            let (m, plain) = block64(input, 0, n);
            if !plain {
                return None;
            }
            decide(input, m)
        } else if n <= MAX_LEN {
            let (lo, plain_lo) = block64(input, 0, n.min(64));
            let (hi, plain_hi) = if n > 64 {
                // Bytes n-64..n, shifted so that bit 0 is byte 64.
                let (end, plain) = block64(input, n - 64, 64);
                (end.shr((128 - n) as u32), plain)
            } else {
                (Masks::default(), true)
            };
            if !(plain_lo && plain_hi) {
                return None;
            }
            decide(input, lo.widen(hi))
        } else {
            super::scalar::fast_key_start(input)
        }
    }

    /// The rules, on masks of an input of printable ASCII without `#`/`%`
    /// whose length `n` is below the width of `T` (bit `n` is needed as
    /// "past the end" by the dot-segment rule). Always inlined, so that it
    /// is compiled with the caller's BMI2.
    #[inline(always)]
    fn decide<T: Bits>(input: &[u8], m: Masks<T>) -> Option<usize> {
        let n = input.len() as u32;
        let valid = T::below(n);

        // Scheme: the first byte that cannot be in a host (nor is '/') must
        // start "://" after a scheme `[a-z][a-z0-9.-]*` (no '_'), or be the
        // '/' that ends a host without a scheme. Anything else ('+' in a
        // scheme, ...) is rare enough for the scalar scan. No separate
        // branches for "http://" and "https://": they would be mispredicted
        // on mixed input.
        let p = ((!m.host | m.slash) & valid).trailing_zeros();
        let ks: u32 = if input.get(p as usize..p as usize + 3) == Some(b"://") {
            if !input[0].is_ascii_lowercase() || m.under & T::below(p) != T::ZERO {
                return None;
            }
            p + 3
        } else if input.get(p as usize) == Some(&b'/') {
            0
        } else if p >= n {
            return None;
        } else {
            return super::scalar::fast_key_start(input);
        };
        let key = valid & !T::below(ks);

        // Host: up to the first '/', non-empty, host bytes only, no leading,
        // trailing or doubled dot.
        let slash = m.slash & key;
        let h = slash.trailing_zeros();
        if h >= n || h == ks {
            return None;
        }
        let host = T::below(h) & key;
        let dot = m.dot & key;
        let first_last = T::ONE << ks | T::ONE << (h - 1);
        if !m.host & host != T::ZERO || dot & (first_last | dot >> 1) & host != T::ZERO {
            return None;
        }
        // Every part of an IPv4 spelling starts with a digit.
        if input[ks as usize].is_ascii_digit()
            && !ip_like_host_ok(
                &input[ks as usize..h as usize],
                ((dot & host) >> ks).low_u64(),
            )
        {
            return None;
        }

        // Path: from the host's '/' up to the first '?' (or the end). No
        // "//", and no "/./" or "/../" where the final '/' may also be the
        // end of the path.
        let q = (m.query & key).trailing_zeros().min(n);
        let in_path = T::below(q) & !T::below(h);
        let s = slash & in_path;
        let d = dot & in_path;
        let end = s | !T::below(q);
        let dd = d >> 1;
        let bad = s & (s >> 1 | dd & end >> 2 | dd & d >> 2 & end >> 3);
        if bad != T::ZERO {
            return None;
        }
        Some(ks as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_quads() {
        for h in ["0.0.0.0", "1.2.3.4", "255.255.255.255", "10.0.100.199"] {
            assert!(is_plain_dotted_quad(h.as_bytes()), "{h}");
        }
        for h in [
            "",
            "1.2.3",
            "1.2.3.4.5",
            "01.2.3.4",
            "1.2.3.256",
            "1.2.3.",
            ".1.2.3",
            "1..2.3",
            "1000.1.1.1",
            "0x1.2.3.4",
            "1.2.3.a",
            "1.2.3.00",
            "1.2.3.0255",
            "1.2.3.4.",
            "...",
            "1.2.3.-1",
            "1.2.3.4/",
        ] {
            assert!(!is_plain_dotted_quad(h.as_bytes()), "{h}");
        }
    }

    #[test]
    fn dotted_quad_is_exactly_canonical_ipv4() {
        use crate::host::parse_ipv4;
        let parts = [
            "", "0", "00", "1", "01", "9", "10", "99", "100", "199", "255", "256", "0x1", "a",
            "1000", "2a5", "a25", "25a", "1-1", "300", "249", "250", "099",
        ];
        let mut h = String::new();
        for a in parts {
            for b in parts {
                for c in ["0", "255", "07", ""] {
                    for d in parts {
                        for extra in ["", ".1", "."] {
                            h.clear();
                            h.push_str(&format!("{a}.{b}.{c}.{d}{extra}"));
                            let canonical = parse_ipv4(h.as_bytes()).is_some_and(|ip| {
                                let o = ip.to_be_bytes();
                                format!("{}.{}.{}.{}", o[0], o[1], o[2], o[3]) == h
                            });
                            assert_eq!(is_plain_dotted_quad(h.as_bytes()), canonical, "{h}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn fast_path_accepts_and_rejects() {
        assert_eq!(fast_key_start(b"http://a.com/b?c//d/../"), Some(7));
        assert_eq!(fast_key_start(b"a.com/"), Some(0));
        assert_eq!(fast_key_start(b"https://a.com/x/y.html"), Some(8));
        assert_eq!(fast_key_start(b"http://1.2.3.4/"), Some(7));
        assert_eq!(fast_key_start(b"a-b_c.d/"), Some(0));
        assert_eq!(fast_key_start(b"1.2.3.256/"), Some(0));
        assert_eq!(fast_key_start(b"cafe.de/.../..a/a..?./"), Some(0));
        for bad in [
            &b"a.com"[..],
            b"http://a.com",
            b"http://A.com/",
            b"http://a.com//x",
            b"http://a.com/./x",
            b"http://a.com/x/..",
            b"http://a.com/x/.?q",
            b"http://a.com/%41",
            b"http://a.com/#x",
            b"http://a.com:80/",
            b"http://u@a.com/",
            b"http://a..com/",
            b"http://1.2/",
            b"http://01.2.3.4/",
            b"http://0xa.1.1.1/",
            b"http://a./",
            b"http://.a/",
            b"http:///",
            b"http://a.com/?#",
            b"http://a.com/?%",
            b"http://a.com/ x",
            b"HTTP://a.com/",
            b"http://[::1]/",
            b" http://a.com/",
        ] {
            assert_eq!(
                fast_key_start(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
