//! Safe Browsing host-suffix / path-prefix expressions.
//!
//! # Design
//!
//! A blacklist written in Safe Browsing style contains *expressions* such as
//! `evil.com/` (everything on `evil.com` and its subdomains) or
//! `a.evil.com/phish/` (everything under that path on that host). To check a
//! URL, the client canonicalizes it and looks up a bounded set of candidate
//! expressions, combining:
//!
//! * up to **5 hosts**: the exact host, then the suffixes formed from the last
//!   five labels by successively removing the leading label, down to two
//!   labels (so the bare TLD is never tried). An IPv4 or IPv6 host is only
//!   tried as itself;
//! * up to **6 paths**: the exact path with the query, the exact path
//!   without the query, then the root `/` and up to three more directory
//!   prefixes (`/1/`, `/1/2/`, `/1/2/3/`).
//!
//! Order is host-major (exact host first), path order as listed, matching the
//! example in the spec (`a.b.c/1/2.html?param=1`, `a.b.c/1/2.html`,
//! `a.b.c/`, `a.b.c/1/`, `b.c/1/2.html?param=1`, ...). Duplicates (a path
//! that equals its own prefix, an empty query) are emitted once, at their
//! first position. At most [`MAX_EXPRESSIONS`] = 30 expressions result.
//!
//! The generator works on the canonical key (no scheme) and writes into a
//! caller-provided `Vec<Vec<u8>>`, reusing its inner buffers, so the query
//! path in [`crate::query_keys`] allocates nothing in steady state.

use memchr::memchr;

use crate::canon::canonical_key;
use crate::error::UrlError;
use crate::host::parse_ipv4;

/// Maximum number of expressions for one URL (5 hosts × 6 paths).
pub const MAX_EXPRESSIONS: usize = 30;

/// Writes the expressions for an already-canonical key into `out`, reusing
/// its buffers; `out` ends up holding exactly the expressions.
pub(crate) fn expressions_from_key(key: &[u8], out: &mut Vec<Vec<u8>>) {
    let mut n = 0usize;
    for_each_expression(key, |h, p| {
        if n == out.len() {
            out.push(Vec::with_capacity(h.len() + p.len()));
        }
        let slot = &mut out[n];
        slot.clear();
        slot.extend_from_slice(h);
        slot.extend_from_slice(p);
        n += 1;
    });
    out.truncate(n);
}

/// Calls `f(host, path)` for each expression of an already-canonical key,
/// in the spec's order, without duplicates: the expression is `host`
/// followed by `path`. Host variants are distinct suffixes and a host holds
/// no `/`, so two expressions are equal only when their paths are: the
/// paths are deduplicated once, not the expressions pairwise.
pub(crate) fn for_each_expression(key: &[u8], mut f: impl FnMut(&[u8], &[u8])) {
    let slash = memchr(b'/', key).unwrap_or(key.len());
    let host = &key[..slash];
    let rest: &[u8] = if slash < key.len() {
        &key[slash..]
    } else {
        b"/"
    };
    let is_ip = host.first() == Some(&b'[') || parse_ipv4(host).is_some();

    // Host variants.
    let mut hosts: [&[u8]; 5] = [host; 5];
    let mut nh = 1;
    if !is_ip {
        let mut dots = [0usize; 5];
        let mut nd = 0;
        for (i, &b) in host.iter().enumerate().rev() {
            if b == b'.' {
                dots[nd] = i;
                nd += 1;
                if nd == dots.len() {
                    break;
                }
            }
        }
        for k in (2..=nd).rev() {
            hosts[nh] = &host[dots[k - 1] + 1..];
            nh += 1;
        }
    }

    // Path variants.
    let q = memchr(b'?', rest);
    let path = &rest[..q.unwrap_or(rest.len())];
    let mut paths: [&[u8]; 6] = [path; 6];
    let mut np = 0;
    if q.is_some() {
        paths[np] = rest;
        np += 1;
    }
    paths[np] = path;
    np += 1;
    paths[np] = &path[..1.min(path.len())];
    np += 1;
    let mut prefixes = 0;
    for (i, &b) in path.iter().enumerate().skip(1) {
        if b == b'/' {
            paths[np] = &path[..=i];
            np += 1;
            prefixes += 1;
            if prefixes == 3 {
                break;
            }
        }
    }

    // Equal paths: "/" twice, or a path ending in '/' equal to a prefix.
    let mut unique: [&[u8]; 6] = [path; 6];
    let mut nu = 0;
    for p in &paths[..np] {
        if !unique[..nu].contains(p) {
            unique[nu] = p;
            nu += 1;
        }
    }
    for h in &hosts[..nh] {
        for p in &unique[..nu] {
            f(h, p);
        }
    }
}

/// The host-suffix/path-prefix expressions Safe Browsing looks up for a URL
/// (at most 5 hosts × 6 paths = 30, no scheme), in the spec's order,
/// deduplicated. The input is any URL; it is canonicalized first.
///
/// # Errors
///
/// Any [`UrlError`] from canonicalization.
///
/// ```
/// use bloomgate_url::expressions;
/// assert_eq!(
///     expressions(b"http://a.b.c/1/2.html?param=1").unwrap(),
///     ["a.b.c/1/2.html?param=1", "a.b.c/1/2.html", "a.b.c/", "a.b.c/1/",
///      "b.c/1/2.html?param=1", "b.c/1/2.html", "b.c/", "b.c/1/"]
/// );
/// ```
pub fn expressions(input: &[u8]) -> Result<Vec<String>, UrlError> {
    let key = canonical_key(input)?;
    let mut out = Vec::new();
    expressions_from_key(&key, &mut out);
    Ok(out
        .into_iter()
        .map(|v| match String::from_utf8(v) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(s: &str) -> Vec<String> {
        expressions(s.as_bytes()).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn spec_examples() {
        assert_eq!(
            ex("http://a.b.c.d.e.f.g/1.html"),
            [
                "a.b.c.d.e.f.g/1.html",
                "a.b.c.d.e.f.g/",
                "c.d.e.f.g/1.html",
                "c.d.e.f.g/",
                "d.e.f.g/1.html",
                "d.e.f.g/",
                "e.f.g/1.html",
                "e.f.g/",
                "f.g/1.html",
                "f.g/",
            ]
        );
        assert_eq!(ex("http://1.2.3.4/1/"), ["1.2.3.4/1/", "1.2.3.4/"]);
    }

    #[test]
    fn reference_client_vectors() {
        assert_eq!(
            ex("http://a.b.c/1/2.html?param=1/2"),
            [
                "a.b.c/1/2.html?param=1/2",
                "a.b.c/1/2.html",
                "a.b.c/",
                "a.b.c/1/",
                "b.c/1/2.html?param=1/2",
                "b.c/1/2.html",
                "b.c/",
                "b.c/1/",
            ]
        );
        assert_eq!(
            ex("http://a.b.c/1/2/3/4/5/"),
            [
                "a.b.c/1/2/3/4/5/",
                "a.b.c/",
                "a.b.c/1/",
                "a.b.c/1/2/",
                "a.b.c/1/2/3/",
                "b.c/1/2/3/4/5/",
                "b.c/",
                "b.c/1/",
                "b.c/1/2/",
                "b.c/1/2/3/",
            ]
        );
        assert_eq!(
            ex("http://a.b.c.d.e.f.g.h.i/"),
            [
                "a.b.c.d.e.f.g.h.i/",
                "e.f.g.h.i/",
                "f.g.h.i/",
                "g.h.i/",
                "h.i/"
            ]
        );
        assert_eq!(ex("http://a.b/?"), ["a.b/?", "a.b/"]);
        assert_eq!(
            ex("http://[2001:470:1:18::114]/a/b"),
            [
                "[2001:470:1:18::114]/a/b",
                "[2001:470:1:18::114]/",
                "[2001:470:1:18::114]/a/"
            ]
        );
        assert_eq!(ex("http://b/"), ["b/"]);
        assert_eq!(ex("a.b"), ["a.b/"]);
        assert!(expressions(b"/asdf").is_err());
    }

    #[test]
    fn bounded_by_30() {
        let e = ex("http://a.b.c.d.e.f.g.h/1/2/3/4/5/6/7.html?q=1");
        assert_eq!(e.len(), 30);
        let mut sorted = e.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 30);
    }

    #[test]
    fn reuses_buffers() {
        let mut out: Vec<Vec<u8>> = (0..40).map(|_| Vec::with_capacity(100)).collect();
        expressions_from_key(b"a.b/x", &mut out);
        assert_eq!(out, [b"a.b/x".to_vec(), b"a.b/".to_vec()]);
        assert!(out[0].capacity() >= 100);
    }
}
