//! Synthetic URLs for the benchmarks at scale: deterministic, distinct,
//! cheap to make (~25 ns each), 20–64 bytes after the scheme like real URLs.
//!
//! Positives and negatives are disjoint by construction, and every URL is
//! distinct: a URL's host is `[www.]` + `p` (positive) or `n` (negative) +
//! its number in base 32 + `.` + a TLD, so two URLs share a host only if
//! they share marker and number. The rest (scheme, `www.`, TLD, path depth
//! and length) varies with a hash of the number, giving 20–64 bytes after
//! the scheme.

use std::ops::Range;

use bloomgate_cli::input::Generate;

use crate::mix64;

/// Top-level domains with their dot, padded to eight bytes, and their
/// length.
const TLDS: [(&[u8; 8], usize); 8] = [
    (b".com\0\0\0\0", 4),
    (b".net\0\0\0\0", 4),
    (b".org\0\0\0\0", 4),
    (b".io\0\0\0\0\0", 3),
    (b".de\0\0\0\0\0", 3),
    (b".co.uk\0\0", 6),
    (b".info\0\0\0", 5),
    (b".ru\0\0\0\0\0", 3),
];
/// 32 URL characters (lowercase letters, digits 2–7): 5 bits of a hash each.
const CHARS: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// Eight URL characters (from [`CHARS`]) from the low five bits of each
/// byte of `r`, computed in all eight bytes at once.
#[inline(always)]
fn chars8(r: u64) -> [u8; 8] {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let v = r & (31 * ONES);
    // A byte's top bit is set iff its value is ≥ 26 (no carries: v ≤ 31).
    let high = ((v + (128 - 26) * ONES) >> 7) & ONES;
    // 0..25 → 'a'..'z'; 26..31 → '2'..'7', i.e. 73 below 'a' + v (no
    // borrows: 'a' + v ≥ 123 where it is taken).
    (v + u64::from(b'a') * ONES - 73 * high).to_le_bytes()
}

/// Appends URL number `i` of the stream `marker` (`p` or `n`) and a newline.
#[inline]
pub fn url(out: &mut Vec<u8>, marker: u8, i: u64) {
    // Written in place with fixed-size stores (no variable-length copies):
    // the longest URL is "https://" + 64 + "\n", and the last path segment
    // may be written up to 9 bytes past the end before it is cut off.
    let at = out.len();
    out.resize(at + 96, 0);
    let n = write_url(
        (&mut out[at..at + 96]).try_into().expect("96 bytes"),
        marker,
        i,
    );
    out.truncate(at + n);
}

/// Writes URL number `i` and a newline at the start of `buf`; returns its
/// length.
#[inline(always)]
fn write_url(buf: &mut [u8; 96], marker: u8, i: u64) -> usize {
    let h = mix64(i ^ (u64::from(marker) << 56));
    let https = (h & 1) as usize;
    buf[..8].copy_from_slice(if https == 1 {
        b"https://"
    } else {
        b"http://\0"
    });
    let start = 7 + https;
    buf[start..start + 4].copy_from_slice(b"www.");
    let mut n = start + if h >> 1 & 3 == 0 { 4 } else { 0 };
    buf[n] = marker;
    n += 1;
    // `i` in base 32, most significant digit first, no leading zeros: one
    // spelling per number, so distinct numbers give distinct hosts.
    let digits = (64 - (i | 1).leading_zeros()).div_ceil(5) as usize;
    for d in (0..digits).rev() {
        buf[n] = CHARS[(i >> (5 * d)) as usize & 31];
        n += 1;
    }
    let (tld, len) = TLDS[(h >> 3 & 7) as usize];
    buf[n..n + 8].copy_from_slice(tld);
    n += len;
    // The path brings the URL (scheme excluded) to 20–64 bytes: segments
    // of eight letters and digits after each slash, the last one cut short.
    let end = (start + 20 + ((h >> 6) % 45) as usize).max(n + 1);
    // One more hash of the number gives every segment its characters:
    // segment j takes the low five bits of each byte of the hash rotated
    // by 3j bits (no chain of multiplications per segment).
    let r = mix64(h);
    let mut rot = 0;
    while n < end {
        buf[n] = b'/';
        buf[n + 1..n + 9].copy_from_slice(&chars8(r.rotate_right(rot)));
        rot += 3;
        n += 9;
    }
    buf[end] = b'\n';
    end + 1
}

/// URLs `0..count` of one stream.
pub struct Urls {
    marker: u8,
    count: u64,
}

impl Urls {
    /// URLs `0..count` of the stream `marker`.
    pub fn new(marker: u8, count: u64) -> Urls {
        Urls { marker, count }
    }
}

impl Generate for Urls {
    fn lines(&self) -> u64 {
        self.count
    }

    fn fill(&self, range: Range<u64>, out: &mut Vec<u8>) {
        for i in range {
            url(out, self.marker, i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chars8_maps_every_value_like_the_table() {
        for v in 0..32u64 {
            let r = (v * 0x0101_0101_0101_0101) ^ 0xE0E0_E0E0_E0E0_E0E0;
            assert_eq!(chars8(r), [CHARS[v as usize]; 8]);
        }
    }

    #[test]
    fn urls_are_distinct_lengths_spread_and_streams_disjoint() {
        let mut seen = std::collections::HashSet::new();
        let mut lengths = std::collections::BTreeSet::new();
        for marker in [b'p', b'n'] {
            for i in (0..200_000u64).chain([1 << 33, 1e10 as u64 - 1]) {
                let mut line = Vec::new();
                url(&mut line, marker, i);
                assert_eq!(line.pop(), Some(b'\n'));
                let rest = line.split(|&b| b == b'/').skip(2).collect::<Vec<_>>();
                let key_len = line.len() - if line.starts_with(b"https") { 8 } else { 7 };
                assert!(
                    (20..=64).contains(&key_len),
                    "{}",
                    String::from_utf8_lossy(&line)
                );
                assert!(!rest.is_empty());
                lengths.insert(key_len);
                assert!(seen.insert(line), "duplicate URL {i}");
            }
        }
        assert_eq!(lengths.len(), 45, "lengths 20..=64 all occur");
    }
}
