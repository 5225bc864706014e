//! The bytes every path of the canonicalizer agrees on: the input limit, one
//! table of byte classes, and percent-escaping.
//!
//! The general path ([`crate::canon`]), its fast scan ([`crate::fast`]) and
//! the host rules ([`crate::host`]) must classify a byte the same way, or
//! the fast path could accept an input the general path would rewrite. So
//! the classes live here, in one 256-entry table built at compile time, and
//! each of those modules reads it; none of them imports another for it.
//!
//! A byte's class is a bit set: [`ESC`] (escaped in canonical output:
//! `<= 0x20`, `>= 0x7f`, `#`, `%`), [`HOST_OK`] (a fast-path host byte),
//! [`PLAIN`] (a fast-path path or query byte) and [`IP_CHAR`] (may appear in
//! an IPv4 spelling).

/// Maximum accepted input length in bytes (8 KiB). Longer inputs are rejected
/// with [`UrlError::TooLong`](crate::UrlError::TooLong); real URLs are far shorter, and the limit bounds
/// the work (and output size, at most 3× the input) per call.
pub const MAX_INPUT_LEN: usize = 8 * 1024;

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Byte classes used by the escaper and the fast path.
pub(crate) const ESC: u8 = 1; // must be percent-escaped in canonical output
pub(crate) const HOST_OK: u8 = 2; // allowed in a fast-path host: [a-z0-9._-]
pub(crate) const PLAIN: u8 = 4; // plain path/query byte for the fast path (no '/', '?')
pub(crate) const IP_CHAR: u8 = 8; // may appear in an IPv4 spelling: [0-9a-fx.]

static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0usize;
    while i < 256 {
        let b = i as u8;
        let mut c = 0u8;
        if b <= 0x20 || b >= 0x7f || b == b'#' || b == b'%' {
            c |= ESC;
        }
        if b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-' || b == b'_' {
            c |= HOST_OK;
        }
        if c & ESC == 0 && b != b'/' && b != b'?' {
            c |= PLAIN;
        }
        if b.is_ascii_digit() || matches!(b, b'a'..=b'f' | b'x' | b'.') {
            c |= IP_CHAR;
        }
        t[i] = c;
        i += 1;
    }
    t
};

#[inline]
pub(crate) fn class(b: u8) -> u8 {
    CLASS[usize::from(b)]
}

/// Append `bytes` to `out`, percent-escaping bytes `<= 0x20`, `>= 0x7f`, `#`
/// and `%` (uppercase hex), optionally ASCII-lowercasing the others.
pub(crate) fn push_escaped(out: &mut Vec<u8>, bytes: &[u8], lowercase: bool) {
    out.reserve(bytes.len());
    let mut run = 0usize;
    for (i, &b) in bytes.iter().enumerate() {
        if class(b) & ESC != 0 {
            push_run(out, &bytes[run..i], lowercase);
            out.extend_from_slice(&[
                b'%',
                HEX_UPPER[usize::from(b >> 4)],
                HEX_UPPER[usize::from(b & 0xf)],
            ]);
            run = i + 1;
        }
    }
    push_run(out, &bytes[run..], lowercase);
}

#[inline]
fn push_run(out: &mut Vec<u8>, run: &[u8], lowercase: bool) {
    let start = out.len();
    out.extend_from_slice(run);
    if lowercase {
        out[start..].make_ascii_lowercase();
    }
}
