//! Host canonicalization: dots, IPv4 in every legal spelling, IPv6, IDN.
//!
//! # Design
//!
//! The host arrives here already *fully percent-unescaped* (the URL layer
//! unescapes the whole URL before splitting it, as the Safe Browsing rules
//! require), with port and user info removed. The steps, in order:
//!
//! 1. **Bracketed IPv6** (`[...]`): parsed with [`std::net::Ipv6Addr`] and
//!    re-printed in RFC 5952 form (lowercase, no leading zeroes, the longest
//!    run of two or more zero groups collapsed to `::`), keeping the brackets.
//!    Following the v5 rules, an IPv4-mapped address (`[::ffff:1.2.3.4]`) and a
//!    NAT64 address with the well-known prefix (`[64:ff9b::1.2.3.4]`) become
//!    the plain IPv4 address `1.2.3.4`. A bracketed host that does not parse
//!    is an error ([`UrlError::InvalidIpv6`]).
//! 2. **Dots**: leading and trailing dots are removed and runs of dots are
//!    collapsed to one. A host that is empty afterwards is
//!    [`UrlError::MissingHost`].
//! 3. **IDN**: a host containing non-ASCII bytes that form valid UTF-8 is run
//!    through UTS #46 ToASCII (the `idna` crate, WHATWG URL deny list), which
//!    lowercases, maps compatibility characters (fullwidth digits, ideographic
//!    full stops, ...) and Punycode-encodes. The result is dot-cleaned again.
//!    A host with invalid UTF-8 is kept as bytes and later percent-escaped,
//!    exactly as the spec example `http://\x01\x80.com/` → `http://%01%80.com/`
//!    demands — except in *strict* mode (bare hosts and email domains), where
//!    it is rejected with [`UrlError::InvalidUtf8Host`].
//! 4. **IPv4**: if the host parses as an IPv4 address in any legal encoding
//!    (1 to 4 parts; each part decimal, octal with a leading `0`, or hex with
//!    `0x`; the last part fills the remaining bytes, so `3279880203`, `1.2`
//!    and `0xc0.0xa8.0.1` all work), it is printed as a dotted quad. A host
//!    that merely *looks* numeric but is not a legal encoding (`1.2.3.999`,
//!    `0308.1.1.1`, five parts) is treated as an ordinary host name, like
//!    Chromium's tests for Safe Browsing expect.
//! 5. **Everything else** is lowercased (ASCII) and percent-escaped (bytes
//!    `<= 0x20`, `>= 0x7f`, `#`, `%`).
//!
//! Host names containing `:`, `[` or `]` outside the bracketed IPv6 form are
//! rejected: they could not be re-parsed from the canonical URL, which would
//! break idempotence.
//!
//! The module also provides a building block of the fast path in
//! [`crate::canon`]: a cheap check that an IPv4-looking host is already a
//! canonical dotted quad.

use std::borrow::Cow;
use std::net::Ipv6Addr;

use crate::bytes::push_escaped;
use crate::error::UrlError;

/// What kind of host a canonical host string is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostKind {
    /// A (possibly escaped) host name.
    Name,
    /// A dotted-quad IPv4 address.
    Ipv4,
    /// A bracketed IPv6 address.
    Ipv6,
}

/// Canonicalize an unescaped host (brackets included for IPv6) and append the
/// result to `out`.
///
/// `strict` rejects invalid UTF-8 and whitespace/control bytes instead of
/// escaping them.
pub(crate) fn canonicalize_host_into(
    raw: &[u8],
    strict: bool,
    out: &mut Vec<u8>,
) -> Result<HostKind, UrlError> {
    if raw.first() == Some(&b'[') {
        let inner = raw
            .strip_prefix(b"[")
            .and_then(|r| r.strip_suffix(b"]"))
            .ok_or(UrlError::InvalidIpv6("missing closing bracket"))?;
        return ipv6_into(inner, out);
    }
    let cleaned = clean_dots(raw);
    if cleaned.is_empty() {
        return Err(UrlError::MissingHost);
    }
    if strict && cleaned.iter().any(|&b| b <= 0x20 || b == 0x7f) {
        return Err(UrlError::InvalidHost(
            "contains whitespace or control characters",
        ));
    }
    let idna_buf: Vec<u8>;
    let host: &[u8] = if cleaned.is_ascii() {
        &cleaned
    } else {
        match std::str::from_utf8(&cleaned) {
            Ok(s) => {
                let ascii = idna::domain_to_ascii_cow(s.as_bytes(), idna::AsciiDenyList::URL)
                    .map_err(|_| UrlError::InvalidIdn)?;
                if ascii
                    .bytes()
                    .any(|b| b <= 0x20 || b >= 0x7f || b"/?#@:[]\\%".contains(&b))
                {
                    return Err(UrlError::InvalidHost(
                        "IDNA mapping produced a URL delimiter",
                    ));
                }
                idna_buf = clean_dots(ascii.as_bytes()).into_owned();
                if idna_buf.is_empty() {
                    return Err(UrlError::MissingHost);
                }
                &idna_buf
            }
            Err(_) if strict => return Err(UrlError::InvalidUtf8Host),
            Err(_) => &cleaned,
        }
    };
    if let Some(ip) = parse_ipv4(host) {
        write_ipv4(ip, out);
        return Ok(HostKind::Ipv4);
    }
    if host.iter().any(|&b| matches!(b, b':' | b'[' | b']')) {
        return Err(UrlError::InvalidHost(
            "contains ':', '[' or ']' outside an IPv6 literal",
        ));
    }
    push_escaped(out, host, true);
    Ok(HostKind::Name)
}

/// Remove leading/trailing dots and collapse runs of dots.
fn clean_dots(h: &[u8]) -> Cow<'_, [u8]> {
    let start = h.iter().position(|&b| b != b'.').unwrap_or(h.len());
    let end = h.iter().rposition(|&b| b != b'.').map_or(start, |p| p + 1);
    let t = &h[start..end.max(start)];
    if !t.windows(2).any(|w| w == b"..") {
        return Cow::Borrowed(t);
    }
    let mut v = Vec::with_capacity(t.len());
    for &b in t {
        if b == b'.' && v.last() == Some(&b'.') {
            continue;
        }
        v.push(b);
    }
    Cow::Owned(v)
}

/// Parse an IPv4 address in any legal encoding (inet_aton rules: 1–4 parts,
/// decimal/octal/hex, the last part fills the remaining bytes).
pub(crate) fn parse_ipv4(host: &[u8]) -> Option<u32> {
    if host.is_empty() {
        return None;
    }
    let mut parts = [0u64; 4];
    let mut n = 0usize;
    for part in host.split(|&b| b == b'.') {
        if n == 4 {
            return None;
        }
        parts[n] = parse_ipv4_part(part)?;
        n += 1;
    }
    let (last, init) = parts[..n].split_last()?;
    if init.iter().any(|&p| p > 255) {
        return None;
    }
    // n = 1 → last may use 32 bits, n = 4 → 8 bits.
    let bits = 8 * (5 - n as u32);
    if *last >= (1u64 << bits) {
        return None;
    }
    let mut ip = *last;
    for (i, &p) in init.iter().enumerate() {
        ip |= p << (8 * (3 - i as u32));
    }
    u32::try_from(ip).ok()
}

fn parse_ipv4_part(p: &[u8]) -> Option<u64> {
    if p.is_empty() {
        return None;
    }
    let (radix, digits) = if p.len() >= 2 && p[0] == b'0' && (p[1] | 0x20) == b'x' {
        (16u32, &p[2..])
    } else if p.len() > 1 && p[0] == b'0' {
        (8, &p[1..])
    } else {
        (10, p)
    };
    let mut v: u64 = 0;
    for &c in digits {
        let d = (c as char).to_digit(radix)?;
        v = v * u64::from(radix) + u64::from(d);
        if v > u64::from(u32::MAX) {
            return None;
        }
    }
    Some(v)
}

/// Format `ip` as `a.b.c.d` into a stack buffer; returns it and its length.
fn format_ipv4(ip: u32) -> ([u8; 15], usize) {
    let mut buf = [0u8; 15];
    let mut n = 0;
    for (i, b) in ip.to_be_bytes().into_iter().enumerate() {
        if i > 0 {
            buf[n] = b'.';
            n += 1;
        }
        if b >= 100 {
            buf[n] = b'0' + b / 100;
            n += 1;
        }
        if b >= 10 {
            buf[n] = b'0' + (b / 10) % 10;
            n += 1;
        }
        buf[n] = b'0' + b % 10;
        n += 1;
    }
    (buf, n)
}

/// Append `a.b.c.d` for `ip`.
pub(crate) fn write_ipv4(ip: u32, out: &mut Vec<u8>) {
    let (buf, n) = format_ipv4(ip);
    out.extend_from_slice(&buf[..n]);
}

/// True if `host` is exactly the canonical dotted-quad form of the IPv4
/// address it parses as, or does not parse as one at all.
pub(crate) fn ipv4_is_canonical_or_not_ip(host: &[u8]) -> bool {
    match parse_ipv4(host) {
        None => true,
        Some(ip) => {
            let (buf, n) = format_ipv4(ip);
            &buf[..n] == host
        }
    }
}

/// Parse the inside of `[...]` and append its canonical form.
fn ipv6_into(inner: &[u8], out: &mut Vec<u8>) -> Result<HostKind, UrlError> {
    let s = std::str::from_utf8(inner).map_err(|_| UrlError::InvalidIpv6("not ASCII"))?;
    let addr: Ipv6Addr = s
        .parse()
        .map_err(|_| UrlError::InvalidIpv6("malformed address"))?;
    let seg = addr.segments();
    let embedded_v4 = (u32::from(seg[6]) << 16) | u32::from(seg[7]);
    // IPv4-mapped ::ffff:a.b.c.d
    if seg[..5] == [0; 5] && seg[5] == 0xffff {
        write_ipv4(embedded_v4, out);
        return Ok(HostKind::Ipv4);
    }
    // NAT64 well-known prefix 64:ff9b::/96
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2..6] == [0; 4] {
        write_ipv4(embedded_v4, out);
        return Ok(HostKind::Ipv4);
    }
    out.push(b'[');
    write_ipv6(&seg, out);
    out.push(b']');
    Ok(HostKind::Ipv6)
}

/// RFC 5952 text form (without brackets), never with embedded IPv4.
fn write_ipv6(seg: &[u16; 8], out: &mut Vec<u8>) {
    // Longest run (>= 2) of zero groups, leftmost on ties.
    let (mut best_start, mut best_len) = (8usize, 0usize);
    let mut i = 0;
    while i < 8 {
        if seg[i] == 0 {
            let start = i;
            while i < 8 && seg[i] == 0 {
                i += 1;
            }
            if i - start > best_len {
                best_start = start;
                best_len = i - start;
            }
        } else {
            i += 1;
        }
    }
    if best_len < 2 {
        best_start = 8;
        best_len = 0;
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut i = 0;
    while i < 8 {
        if i == best_start {
            out.extend_from_slice(b"::");
            i += best_len;
            continue;
        }
        if i > 0 && i != best_start + best_len {
            out.push(b':');
        }
        let v = seg[i];
        let mut started = false;
        for shift in [12u32, 8, 4, 0] {
            let nib = ((v >> shift) & 0xf) as usize;
            if nib != 0 || started || shift == 0 {
                started = true;
                out.push(HEX[nib]);
            }
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &[u8]) -> Result<String, UrlError> {
        let mut out = Vec::new();
        canonicalize_host_into(s, false, &mut out)
            .map(|_| String::from_utf8_lossy(&out).into_owned())
    }

    #[test]
    fn ipv4_forms() {
        let cases: &[(&str, &str)] = &[
            ("0300.0250.0.1", "192.168.0.1"),
            ("0xc0.0xa8.0.1", "192.168.0.1"),
            ("0XC0.0Xa8.0x0.0x1", "192.168.0.1"),
            ("3279880203", "195.127.0.11"),
            ("1.2", "1.0.0.2"),
            ("1.2.3", "1.2.0.3"),
            ("192.168", "192.0.0.168"),
            ("192", "0.0.0.192"),
            ("0xC0a80001", "192.168.0.1"),
            ("030052000001", "192.168.0.1"),
            ("000030052000001", "192.168.0.1"),
            ("192.0x00A80001", "192.168.0.1"),
            ("12.0x12.01234", "12.18.2.156"),
            ("012.034.01.055", "10.28.1.45"),
            ("0x12.0x43.0x44.0x01", "18.67.68.1"),
            ("167838211", "10.1.2.3"),
            ("4294967295", "255.255.255.255"),
            ("255.0.0.1", "255.0.0.1"),
            ("1.2.3.4.", "1.2.3.4"),
            ("..1..2.3.4..", "1.2.3.4"),
        ];
        for (i, o) in cases {
            assert_eq!(host(i.as_bytes()).as_deref(), Ok(*o), "{i}");
        }
    }

    #[test]
    fn ipv4_lookalikes_are_hostnames() {
        for h in [
            "123.123.0.0.1",
            "1.2.3.00x0",
            "0308.0250.00.01",
            "19a.168.0.1",
            "192.168.9.com",
            "1.2.3.256",
            "276.2.3",
            "4294967296",
            "0xcg.0xa8.0x0.0x1",
        ] {
            assert_eq!(host(h.as_bytes()).as_deref(), Ok(h), "{h}");
            assert!(ipv4_is_canonical_or_not_ip(h.as_bytes()), "{h}");
        }
    }

    #[test]
    fn ipv6_forms() {
        let cases: &[(&str, &str)] = &[
            ("[2001:DB8::1]", "[2001:db8::1]"),
            ("[2001:0db8:0000::1]", "[2001:db8::1]"),
            ("[::]", "[::]"),
            ("[::1]", "[::1]"),
            ("[1::]", "[1::]"),
            ("[000:01:02:003:004:5:6:007]", "[0:1:2:3:4:5:6:7]"),
            ("[A:b:c:DE:fF:0:1:aC]", "[a:b:c:de:ff:0:1:ac]"),
            ("[1:0:0:2::3:0]", "[1::2:0:0:3:0]"),
            ("[0:0::0:0:8]", "[::8]"),
            ("[2001:db8:0:1:1:1:1:1]", "[2001:db8:0:1:1:1:1:1]"),
            ("[2001:0:0:1:0:0:0:1]", "[2001:0:0:1::1]"),
            ("[::192.9.5.5]", "[::c009:505]"),
            ("[::ffff:1.2.3.4]", "1.2.3.4"),
            ("[::FFFF:c0a8:1]", "192.168.0.1"),
            ("[64:ff9b::1.2.3.4]", "1.2.3.4"),
            ("[64:ff9b::102:304]", "1.2.3.4"),
            (
                "[FEDC:BA98:7654:3210:FEDC:BA98:7654:3210]",
                "[fedc:ba98:7654:3210:fedc:ba98:7654:3210]",
            ),
        ];
        for (i, o) in cases {
            assert_eq!(host(i.as_bytes()).as_deref(), Ok(*o), "{i}");
        }
        for bad in [
            "[",
            "[]",
            "[:]",
            "[1:2:3]",
            "[::1%eth0]",
            "[12345::]",
            "[::g]",
        ] {
            assert!(
                matches!(host(bad.as_bytes()), Err(UrlError::InvalidIpv6(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn idn() {
        assert_eq!(
            host("Bücher.example".as_bytes()).as_deref(),
            Ok("xn--bcher-kva.example")
        );
        assert_eq!(
            host("www.\u{fc}mlat.com".as_bytes()).as_deref(),
            Ok("www.xn--mlat-zra.com")
        );
        // Fullwidth digits and ideographic full stops map to an IPv4 address.
        assert_eq!(
            host("１２７。０。０。１".as_bytes()).as_deref(),
            Ok("127.0.0.1")
        );
        // Invalid UTF-8 is escaped (lenient) or rejected (strict).
        assert_eq!(host(b"\x01\x80.com").as_deref(), Ok("%01%80.com"));
        let mut s = Vec::new();
        assert_eq!(
            canonicalize_host_into(b"\x80.com", true, &mut s),
            Err(UrlError::InvalidUtf8Host)
        );
        // Fullwidth solidus maps to '/', which is not allowed in a host.
        assert!(host("a\u{ff0f}b.com".as_bytes()).is_err());
    }
}
