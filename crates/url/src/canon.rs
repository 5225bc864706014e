//! URL canonicalization following Google Safe Browsing's published rules.
//!
//! # Design
//!
//! The algorithm is the one in "URLs and Hashing" (Safe Browsing v4/v5),
//! applied to raw bytes so that invalid UTF-8 never causes a panic or a
//! silent replacement:
//!
//! 1. Reject inputs longer than [`MAX_INPUT_LEN`]; trim surrounding ASCII
//!    whitespace; remove every tab, CR and LF; cut at the first `#` (the
//!    fragment).
//! 2. **Repeatedly percent-unescape** until no `%XX` remains. This is done in
//!    a single left-to-right pass with a stack: after each byte is appended to
//!    the output, the last three output bytes are re-examined and decoded while
//!    they form `%XX`. Because `%XX` redexes can never overlap (hex digits are
//!    not `%`) and every decode shortens the string, the rewrite system is
//!    confluent and terminating, so this pass yields exactly the fixpoint of
//!    repeated whole-string passes — in O(n) instead of O(n²) for inputs like
//!    `%252525…`. Malformed escapes (`%zz`, a lone `%`) are left alone.
//! 3. **Split** the unescaped bytes: an optional scheme
//!    (`[A-Za-z][A-Za-z0-9+.-]*://`, lowercased; `http` when absent; like
//!    browsers, `http:host` and `http:/host` are accepted for http(s)), the
//!    authority up to the first `/` or `?`, the path up to the first `?`, and
//!    the query. User info (up to the last `@`) and the port (digits after
//!    the last `:`, or after `]` for IPv6) are dropped. Because unescaping
//!    happens first, `http%3A%2F%2Fhost/` is the URL `http://host/`, and a
//!    `#` that was written `%23` is data, not a fragment.
//! 4. **Host**: see [`crate::host`] (dots, IPv4 forms, IPv6, IDN, lowercase).
//! 5. **Path**: `.` and `..` segments are resolved and empty segments (`//`)
//!    dropped; a path that ended in a directory (`/`, `/.`, `/..`) keeps its
//!    trailing slash; a missing path becomes `/`. The query is kept verbatim
//!    (including an empty `?`), `//` and dots in it are not touched.
//! 6. **Escape** every byte `<= 0x20`, `>= 0x7f`, `#` and `%` as `%XX`
//!    (uppercase hex). The output is therefore always ASCII.
//!
//! The result is idempotent: unescaping the output reproduces exactly the
//! unescaped text it was built from (step 6 only escapes bytes that step 2
//! could not have left as `%XX`), and every structural step is a no-op on its
//! own output. Property tests in `tests/properties.rs` check this.
//!
//! ## Fast path
//!
//! Most URLs seen at query time are already canonical. [`canonical_key`] first
//! runs one conservative scan ([`fast_key_start`]) that accepts an input only
//! if the full algorithm would return it unchanged (minus the scheme): an
//! optional lowercase scheme + `://`, a host of lowercase `[a-z0-9_-]` labels
//! (or a canonical dotted quad; nothing the IPv4 parser would rewrite), then a
//! `/`, and a path/query of printable ASCII without `%`, `#`, `//` or dot
//! segments in the path. Such inputs are returned as a borrowed sub-slice with
//! no allocation. Everything else takes the general path above. A property
//! test asserts that both paths agree on every input the fast path accepts.
//! The scan itself lives in [`crate::fast`] (SSE2 on x86-64, a byte-class
//! table elsewhere).

use std::borrow::Cow;

use memchr::{memchr, memrchr};

use crate::bytes::{push_escaped, MAX_INPUT_LEN};
use crate::error::UrlError;
use crate::fast::fast_key_start;
use crate::host::{canonicalize_host_into, HostKind};

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-unescape until no `%XX` remains (single pass, see module docs).
pub(crate) fn unescape_fully(buf: &mut Vec<u8>) {
    if memchr(b'%', buf).is_none() {
        return;
    }
    let mut w = 0usize;
    for r in 0..buf.len() {
        let b = buf[r];
        buf[w] = b;
        w += 1;
        while w >= 3 && buf[w - 3] == b'%' {
            match (hex_val(buf[w - 2]), hex_val(buf[w - 1])) {
                (Some(h), Some(l)) => {
                    buf[w - 3] = (h << 4) | l;
                    w -= 2;
                }
                _ => break,
            }
        }
    }
    buf.truncate(w);
}

/// Steps 1–2: length check, trim, drop tab/CR/LF, cut fragment, unescape.
///
/// Borrows the input when there is nothing to remove or unescape.
fn prepare(input: &[u8]) -> Result<Cow<'_, [u8]>, UrlError> {
    if input.len() > MAX_INPUT_LEN {
        return Err(UrlError::TooLong {
            len: input.len(),
            max: MAX_INPUT_LEN,
        });
    }
    let trimmed = input.trim_ascii();
    // Cut at the fragment, then drop tab/CR/LF (runs copied with memchr).
    let no_frag = match memchr(b'#', trimmed) {
        Some(p) => &trimmed[..p],
        None => trimmed,
    };
    if trimmed.is_empty() {
        return Err(UrlError::Empty);
    }
    if memchr::memchr3(b'\t', b'\r', b'\n', no_frag).is_none() && memchr(b'%', no_frag).is_none() {
        return Ok(Cow::Borrowed(no_frag));
    }
    let mut buf = Vec::with_capacity(no_frag.len() + 8);
    let mut rest = no_frag;
    while let Some(p) = memchr::memchr3(b'\t', b'\r', b'\n', rest) {
        buf.extend_from_slice(&rest[..p]);
        rest = &rest[p + 1..];
    }
    buf.extend_from_slice(rest);
    if buf.is_empty() && no_frag.len() == trimmed.len() {
        // Nothing but whitespace/tab/CR/LF (a fragment alone is "no host").
        return Err(UrlError::Empty);
    }
    unescape_fully(&mut buf);
    Ok(Cow::Owned(buf))
}

/// A scheme (any case) and where the authority starts, if present.
///
/// `scheme://` is recognized for every scheme. For `http` and `https` only,
/// browsers' leniency is partly mirrored: `http:host/` and `http:/host/`
/// mean `http://host/` (otherwise they would parse as host `http`). Three or
/// more slashes (`http:///path`) still mean "no host", an error.
fn scheme_split(buf: &[u8]) -> Option<(usize, usize)> {
    let first = *buf.first()?;
    if !first.is_ascii_alphabetic() {
        return None;
    }
    let n = buf[1..]
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')))
        .map_or(buf.len(), |p| p + 1);
    let special = buf[..n].eq_ignore_ascii_case(b"http") || buf[..n].eq_ignore_ascii_case(b"https");
    if buf[n..].starts_with(b"://") {
        return Some((n, n + 3));
    }
    if special && buf.get(n) == Some(&b':') {
        let slash = usize::from(buf.get(n + 1) == Some(&b'/'));
        return Some((n, n + 1 + slash));
    }
    None
}

/// The parts of an unescaped URL.
pub(crate) struct Split<'a> {
    /// Scheme as written (not yet lowercased), if any.
    pub scheme: Option<&'a [u8]>,
    /// Host (brackets kept for IPv6), non-empty.
    pub host: &'a [u8],
    /// Path, empty or starting with `/`.
    pub path: &'a [u8],
    /// Query after `?`, if a `?` was present.
    pub query: Option<&'a [u8]>,
}

fn check_port(port: &[u8]) -> Result<(), UrlError> {
    if port.is_empty() {
        return Ok(());
    }
    let mut v: u32 = 0;
    for &b in port {
        if !b.is_ascii_digit() {
            return Err(UrlError::InvalidPort);
        }
        v = v * 10 + u32::from(b - b'0');
        if v > 65535 {
            return Err(UrlError::InvalidPort);
        }
    }
    Ok(())
}

/// Step 3: split an unescaped URL into scheme, host, path, query.
pub(crate) fn split(buf: &[u8]) -> Result<Split<'_>, UrlError> {
    let (scheme, rest) = match scheme_split(buf) {
        Some((n, auth)) => (Some(&buf[..n]), &buf[auth..]),
        None => (None, buf),
    };
    let auth_end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    let authority = &rest[..auth_end];
    let after = &rest[auth_end..];
    let (path, query) = match memchr(b'?', after) {
        Some(q) => (&after[..q], Some(&after[q + 1..])),
        None => (after, None),
    };
    let hostport = match memrchr(b'@', authority) {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    let host = if hostport.first() == Some(&b'[') {
        let close =
            memchr(b']', hostport).ok_or(UrlError::InvalidIpv6("missing closing bracket"))?;
        match &hostport[close + 1..] {
            [] => {}
            [b':', port @ ..] => check_port(port)?,
            _ => return Err(UrlError::InvalidHost("unexpected text after IPv6 literal")),
        }
        &hostport[..=close]
    } else {
        match memrchr(b':', hostport) {
            Some(c) => {
                check_port(&hostport[c + 1..])?;
                &hostport[..c]
            }
            None => hostport,
        }
    };
    if host.is_empty() {
        return Err(UrlError::MissingHost);
    }
    Ok(Split {
        scheme,
        host,
        path,
        query,
    })
}

/// Step 5 + 6 for the path: resolve dot segments, drop empty segments, escape.
fn push_canonical_path(out: &mut Vec<u8>, path: &[u8]) {
    out.push(b'/');
    let base = out.len();
    let body = path.strip_prefix(b"/").unwrap_or(path);
    if body.is_empty() {
        return;
    }
    let mut ends_in_dir = false;
    for seg in body.split(|&b| b == b'/') {
        match seg {
            b"" | b"." => ends_in_dir = true,
            b".." => {
                if out.len() > base {
                    // out ends with "seg/"; remove it back to the previous '/'.
                    out.pop();
                    let cut = memrchr(b'/', out).map_or(base, |p| p + 1).max(base);
                    out.truncate(cut);
                }
                ends_in_dir = true;
            }
            s => {
                push_escaped(out, s, false);
                out.push(b'/');
                ends_in_dir = false;
            }
        }
    }
    if !ends_in_dir && out.len() > base {
        out.pop();
    }
}

/// The full (slow-path) algorithm. Appends the canonical URL to `out`, with
/// `scheme://` if `with_scheme`, and says what kind of host it has.
pub(crate) fn canon_into(
    input: &[u8],
    out: &mut Vec<u8>,
    with_scheme: bool,
) -> Result<HostKind, UrlError> {
    let buf = prepare(input)?;
    let parts = split(&buf)?;
    out.reserve(buf.len() + 16);
    if with_scheme {
        match parts.scheme {
            Some(s) => push_escaped(out, s, true),
            None => out.extend_from_slice(b"http"),
        }
        out.extend_from_slice(b"://");
    }
    let host_kind = canonicalize_host_into(parts.host, false, out)?;
    push_canonical_path(out, parts.path);
    if let Some(q) = parts.query {
        out.push(b'?');
        push_escaped(out, q, false);
    }
    Ok(host_kind)
}

/// Turn ASCII output bytes into a `String` (never fails in practice; the
/// lossy branch only exists to avoid a panic path).
fn ascii_string(v: Vec<u8>) -> String {
    match String::from_utf8(v) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// Canonical form with scheme, e.g. `"http://www.evil.com/a/c"`, following
/// Google Safe Browsing's canonicalization rules.
///
/// Input is bytes and may be invalid UTF-8: non-ASCII bytes are
/// percent-escaped (or Punycode-encoded in a valid-UTF-8 host). Borrowed when
/// the input is already canonical and has a scheme.
///
/// # Errors
///
/// [`UrlError`] for an empty input, an input over [`MAX_INPUT_LEN`], no host,
/// an invalid port, IPv6 literal or internationalized host.
///
/// ```
/// use bloomgate_url::canonicalize;
/// assert_eq!(canonicalize(b"HTTP://www.GOOgle.com:80/a/./b/../c#x").unwrap(), "http://www.google.com/a/c");
/// ```
pub fn canonicalize(input: &[u8]) -> Result<Cow<'_, str>, UrlError> {
    if let Some(start) = fast_key_start(input) {
        if let Ok(s) = std::str::from_utf8(input) {
            if start > 0 {
                return Ok(Cow::Borrowed(s));
            }
            let mut out = String::with_capacity(s.len() + 7);
            out.push_str("http://");
            out.push_str(s);
            return Ok(Cow::Owned(out));
        }
    }
    let mut out = Vec::with_capacity(input.len() + 16);
    canon_into(input, &mut out, true)?;
    Ok(Cow::Owned(ascii_string(out)))
}

/// The lookup key: the canonical form *without* the scheme
/// (`"www.evil.com/a/c"`), as Safe Browsing expressions are written.
///
/// Borrowed (no allocation) when the input is already canonical; see the
/// module documentation for the exact fast-path conditions.
///
/// # Errors
///
/// Same as [`canonicalize`].
///
/// ```
/// use bloomgate_url::canonical_key;
/// use std::borrow::Cow;
/// let k = canonical_key(b"http://www.evil.com/a/c").unwrap();
/// assert!(matches!(k, Cow::Borrowed(b"www.evil.com/a/c")));
/// assert_eq!(&*canonical_key(b"WWW.Evil.COM:80/a/../c").unwrap(), b"www.evil.com/c");
/// ```
pub fn canonical_key(input: &[u8]) -> Result<Cow<'_, [u8]>, UrlError> {
    if let Some(start) = fast_key_start(input) {
        return Ok(Cow::Borrowed(&input[start..]));
    }
    Ok(Cow::Owned(slow_key_bytes(input)?))
}

/// The general-path key, skipping the fast path (exposed for tests/benches
/// through [`canonical_key`] semantics).
pub(crate) fn slow_key(input: &[u8]) -> Result<String, UrlError> {
    slow_key_bytes(input).map(ascii_string)
}

fn slow_key_bytes(input: &[u8]) -> Result<Vec<u8>, UrlError> {
    let mut out = Vec::with_capacity(input.len() + 8);
    canon_into(input, &mut out, false)?;
    Ok(out)
}

/// Canonical host alone (lowercase, Punycode, IP normalized, dots cleaned)
/// for a bare host/domain, a URL, or an email address (its domain part).
///
/// Stricter than the host inside [`canonicalize`]: invalid UTF-8 and
/// whitespace/control bytes in the host are errors rather than escaped.
///
/// # Errors
///
/// As [`canonicalize`], plus [`UrlError::InvalidUtf8Host`] and
/// [`UrlError::InvalidHost`] for whitespace/control characters.
///
/// ```
/// use bloomgate_url::canonical_host;
/// assert_eq!(canonical_host(b"Bob@B\xc3\xbccher.Example.").unwrap(), "xn--bcher-kva.example");
/// assert_eq!(canonical_host(b"http://0x7f.1:8080/x").unwrap(), "127.0.0.1");
/// ```
pub fn canonical_host(input: &[u8]) -> Result<String, UrlError> {
    if input.len() > MAX_INPUT_LEN {
        return Err(UrlError::TooLong {
            len: input.len(),
            max: MAX_INPUT_LEN,
        });
    }
    let src = if memchr::memmem::find(input, b"://").is_none() {
        match memrchr(b'@', input) {
            Some(at) => &input[at + 1..],
            None => input,
        }
    } else {
        input
    };
    let buf = prepare(src)?;
    let parts = split(&buf)?;
    let mut out = Vec::with_capacity(parts.host.len());
    canonicalize_host_into(parts.host, true, &mut out)?;
    Ok(ascii_string(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_matches_repeated_passes() {
        fn one_pass(s: &[u8]) -> Vec<u8> {
            let mut o = Vec::new();
            let mut i = 0;
            while i < s.len() {
                if s[i] == b'%' && i + 2 < s.len() {
                    if let (Some(h), Some(l)) = (hex_val(s[i + 1]), hex_val(s[i + 2])) {
                        o.push((h << 4) | l);
                        i += 3;
                        continue;
                    }
                }
                o.push(s[i]);
                i += 1;
            }
            o
        }
        for s in [
            &b"%25%32%35"[..],
            b"%%%25%32%35asd%%",
            b"%2525252525252525",
            b"%2%35",
            b"%%30%30",
            b"%",
            b"%4",
            b"abc%zz%41",
        ] {
            let mut cur = s.to_vec();
            loop {
                let next = one_pass(&cur);
                if next == cur {
                    break;
                }
                cur = next;
            }
            let mut fast = s.to_vec();
            unescape_fully(&mut fast);
            assert_eq!(fast, cur, "{:?}", String::from_utf8_lossy(s));
        }
    }

    #[test]
    fn paths() {
        let cases: &[(&str, &str)] = &[
            ("", "/"),
            ("/", "/"),
            ("/a", "/a"),
            ("/a/", "/a/"),
            ("/a/.", "/a/"),
            ("/a/..", "/"),
            ("/..", "/"),
            ("/../a", "/a"),
            ("/a/b/..", "/a/"),
            ("/foo/.././bar/./../foo.html", "/foo.html"),
            ("//a//b///c////", "/a/b/c/"),
            ("/a/.../b", "/a/.../b"),
            ("/a/..b/.c", "/a/..b/.c"),
        ];
        for (i, o) in cases {
            let mut s = Vec::new();
            push_canonical_path(&mut s, i.as_bytes());
            assert_eq!(s, o.as_bytes(), "{i}");
        }
    }
}
