//! Key kinds and matching modes: how blacklist entries and queries become
//! the byte strings that are inserted into / looked up in a filter.
//!
//! # Design
//!
//! A filter stores opaque byte keys. What a key *means* is decided here, once,
//! so that the CLI (building filters) and the server (answering queries)
//! cannot drift apart. The pair ([`KeyKind`], [`MatchMode`]) is stored in the
//! filter file header (see [`KeyKind::as_u8`], [`MatchMode::as_u8`]).
//!
//! | kind  | mode   | entry → key              | query → lookups                                   |
//! |-------|--------|--------------------------|---------------------------------------------------|
//! | url   | exact  | [`canonical_key`]        | [`canonical_key`] (1)                             |
//! | url   | prefix | [`canonical_key`]        | [`expressions`](crate::expressions) (≤ 30)        |
//! | host  | any    | [`canonical_host`]       | host + every parent domain with ≥ 2 labels (sized for [`MAX_HOST_LOOKUPS`]) |
//! | email | any    | `local@canonical-domain` | same normalization (1)                            |
//! | raw   | any    | bytes unchanged          | bytes unchanged (1)                               |
//!
//! * **url/prefix** entries are Safe Browsing expressions: `evil.com/` blocks
//!   every URL on `evil.com` and its subdomains (within the 5-host window of
//!   the spec), `evil.com/phish/` everything under that path.
//! * **host** is always suffix matching; the mode is ignored. The query may
//!   be a bare host, a URL or an email address. Its canonical host is looked
//!   up, then each parent domain with at least two labels, most specific
//!   first, however many there are (a listed domain must match any depth of
//!   subdomain). Filters are sized for [`MAX_HOST_LOOKUPS`] lookups per query;
//!   a deeper host makes more lookups, with a proportionally higher
//!   false-positive rate. An IP address is only looked up as itself.
//! * **url** entries and queries must look like URLs before they are
//!   canonicalized ([`url_shape`]): either a scheme (`http://`, any
//!   `letter[letters digits + - .]*://`), or, without user info, a host
//!   that has a dot, is a bracketed IPv6 address or is followed by a path
//!   (`localhost/`, the canonical key of `http://localhost`). `user:1`, `5` and `a@b.com`
//!   are not URLs: the Safe Browsing rules would make them `user/`,
//!   `0.0.0.5/` and `b.com/`, merging distinct lines into one key.
//! * **email**: surrounding whitespace is trimmed, exactly one `@` is
//!   required, the local part is kept byte-for-byte (case included) and the
//!   domain is canonicalized as a host (lowercase, Punycode).
//! * **raw**: no normalization at all; only the empty key is rejected.
//!
//! Query functions write into a caller-owned `Vec<Vec<u8>>` and reuse its
//! inner buffers, so a server loop performs no per-query allocation once warm
//! (apart from the slow canonicalization path for messy URLs).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use crate::canon::{canonical_host, canonical_key};
use crate::error::{KeyError, UrlError};
use crate::expressions::{expressions_from_key, for_each_expression, MAX_EXPRESSIONS};
use crate::host::parse_ipv4;

/// Number of lookups per `host` query that filters are sized for (the host
/// itself plus seven parent domains). Deeper hosts still look up every parent
/// (no false negatives), at a proportionally higher false-positive rate.
pub const MAX_HOST_LOOKUPS: u32 = 8;

/// Error returned when parsing a [`KeyKind`] or [`MatchMode`] from a string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{value}' (expected one of: {expected})")]
pub struct ParseKindError {
    what: &'static str,
    value: String,
    expected: &'static str,
}

/// What the entries of a filter are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyKind {
    /// Opaque bytes, no normalization (code 0).
    Raw,
    /// URLs, canonicalized with the Safe Browsing rules (code 1).
    Url,
    /// Host names / domains, suffix-matched (code 2).
    Host,
    /// Email addresses with a canonicalized domain (code 3).
    Email,
}

impl KeyKind {
    /// Stable numeric code stored in the filter file header.
    pub fn as_u8(self) -> u8 {
        match self {
            KeyKind::Raw => 0,
            KeyKind::Url => 1,
            KeyKind::Host => 2,
            KeyKind::Email => 3,
        }
    }

    /// Inverse of [`KeyKind::as_u8`]; `None` for unknown codes.
    pub fn from_u8(code: u8) -> Option<Self> {
        match code {
            0 => Some(KeyKind::Raw),
            1 => Some(KeyKind::Url),
            2 => Some(KeyKind::Host),
            3 => Some(KeyKind::Email),
            _ => None,
        }
    }

    /// The lowercase name (`"url"`, `"host"`, `"email"`, `"raw"`).
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Raw => "raw",
            KeyKind::Url => "url",
            KeyKind::Host => "host",
            KeyKind::Email => "email",
        }
    }
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for KeyKind {
    type Err = ParseKindError;

    /// Parses `url`, `host`, `email` or `raw` (ASCII case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [KeyKind::Url, KeyKind::Host, KeyKind::Email, KeyKind::Raw]
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| ParseKindError {
                what: "key kind",
                value: s.to_owned(),
                expected: "url, host, email, raw",
            })
    }
}

/// How a query matches entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MatchMode {
    /// The normalized query must equal an entry (code 0).
    Exact,
    /// URL entries are Safe Browsing host-suffix/path-prefix expressions
    /// (code 1).
    Prefix,
}

impl MatchMode {
    /// Stable numeric code stored in the filter file header.
    pub fn as_u8(self) -> u8 {
        match self {
            MatchMode::Exact => 0,
            MatchMode::Prefix => 1,
        }
    }

    /// Inverse of [`MatchMode::as_u8`]; `None` for unknown codes.
    pub fn from_u8(code: u8) -> Option<Self> {
        match code {
            0 => Some(MatchMode::Exact),
            1 => Some(MatchMode::Prefix),
            _ => None,
        }
    }

    /// The lowercase name (`"exact"`, `"prefix"`).
    pub fn as_str(self) -> &'static str {
        match self {
            MatchMode::Exact => "exact",
            MatchMode::Prefix => "prefix",
        }
    }
}

impl fmt::Display for MatchMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MatchMode {
    type Err = ParseKindError;

    /// Parses `exact` or `prefix` (ASCII case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [MatchMode::Exact, MatchMode::Prefix]
            .into_iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| ParseKindError {
                what: "match mode",
                value: s.to_owned(),
                expected: "exact, prefix",
            })
    }
}

/// Normalize one blacklist entry for insertion.
///
/// # Errors
///
/// A [`KeyError`] describing why the entry is invalid (the CLI reports it
/// with the line number).
///
/// ```
/// use bloomgate_url::{entry_key, KeyKind, MatchMode};
/// let k = entry_key(KeyKind::Host, MatchMode::Exact, b"WWW.Example.COM.").unwrap();
/// assert_eq!(&*k, b"www.example.com");
/// ```
pub fn entry_key(kind: KeyKind, mode: MatchMode, entry: &[u8]) -> Result<Cow<'_, [u8]>, KeyError> {
    let _ = mode; // url exact and url prefix entries normalize identically
    match kind {
        KeyKind::Url => {
            url_shape(entry)?;
            Ok(canonical_key(entry)?)
        }
        KeyKind::Host => Ok(Cow::Owned(canonical_host(entry)?.into_bytes())),
        KeyKind::Email => Ok(Cow::Owned(email_key(entry)?)),
        KeyKind::Raw => {
            if entry.is_empty() {
                Err(KeyError::Empty)
            } else {
                Ok(Cow::Borrowed(entry))
            }
        }
    }
}

/// Every key a query must look up, in order (most specific first).
///
/// `out` is cleared first and then holds one key per lookup; the key bytes
/// double as the human-readable label of what matched (for url/prefix they are
/// the Safe Browsing expression, e.g. `evil.com/phish/`; for host the domain).
/// Inner buffers of `out` are reused. On error `out` is left empty.
///
/// # Errors
///
/// A [`KeyError`] if the query cannot be normalized.
///
/// ```
/// use bloomgate_url::{query_keys, KeyKind, MatchMode};
/// let mut out = Vec::new();
/// query_keys(KeyKind::Host, MatchMode::Exact, b"https://a.b.evil.com/x", &mut out).unwrap();
/// assert_eq!(out, [b"a.b.evil.com".to_vec(), b"b.evil.com".to_vec(), b"evil.com".to_vec()]);
/// ```
pub fn query_keys(
    kind: KeyKind,
    mode: MatchMode,
    query: &[u8],
    out: &mut Vec<Vec<u8>>,
) -> Result<(), KeyError> {
    let r = query_keys_inner(kind, mode, query, out);
    if r.is_err() {
        out.clear();
    }
    r
}

/// [`query_keys`] appending to flat storage: each key's bytes to `arena`
/// and its end in `arena` to `ends`, so a batch of queries keeps all its
/// keys in two buffers (no allocation per query or key once they have
/// grown). Returns how many keys the query has. On error nothing is
/// appended.
///
/// # Errors
///
/// A [`KeyError`] if the query cannot be normalized.
///
/// ```
/// use bloomgate_url::{push_query_keys, KeyKind, MatchMode};
/// let (mut arena, mut ends) = (Vec::new(), Vec::new());
/// let n = push_query_keys(KeyKind::Host, MatchMode::Exact, b"a.evil.com", &mut arena, &mut ends).unwrap();
/// assert_eq!((n, &arena[..], &ends[..]), (2, &b"a.evil.comevil.com"[..], &[10, 18][..]));
/// ```
pub fn push_query_keys(
    kind: KeyKind,
    mode: MatchMode,
    query: &[u8],
    arena: &mut Vec<u8>,
    ends: &mut Vec<usize>,
) -> Result<usize, KeyError> {
    let before = ends.len();
    let mut push = |key: &[u8]| {
        arena.extend_from_slice(key);
        ends.push(arena.len());
    };
    match (kind, mode) {
        (KeyKind::Url, MatchMode::Prefix) => {
            url_shape(query)?;
            let key = canonical_key(query)?;
            for_each_expression(&key, |h, p| {
                arena.extend_from_slice(h);
                arena.extend_from_slice(p);
                ends.push(arena.len());
            });
        }
        (KeyKind::Url, _) => {
            url_shape(query)?;
            push(&canonical_key(query)?);
        }
        (KeyKind::Host, _) => {
            let host = canonical_host(query)?;
            for_each_host_lookup(host.as_bytes(), push);
        }
        (KeyKind::Email, _) => push(&email_key(query)?),
        (KeyKind::Raw, _) => {
            if query.is_empty() {
                return Err(KeyError::Empty);
            }
            push(query);
        }
    }
    Ok(ends.len() - before)
}

fn set_single(out: &mut Vec<Vec<u8>>, key: &[u8]) {
    out.truncate(1);
    match out.first_mut() {
        Some(slot) => {
            slot.clear();
            slot.extend_from_slice(key);
        }
        None => out.push(key.to_vec()),
    }
}

fn query_keys_inner(
    kind: KeyKind,
    mode: MatchMode,
    query: &[u8],
    out: &mut Vec<Vec<u8>>,
) -> Result<(), KeyError> {
    match (kind, mode) {
        (KeyKind::Url, MatchMode::Prefix) => {
            url_shape(query)?;
            let key = canonical_key(query)?;
            expressions_from_key(&key, out);
        }
        (KeyKind::Url, _) => {
            url_shape(query)?;
            let key = canonical_key(query)?;
            set_single(out, &key);
        }
        (KeyKind::Host, _) => {
            let host = canonical_host(query)?;
            host_lookups(host.as_bytes(), out);
        }
        (KeyKind::Email, _) => {
            let key = email_key(query)?;
            set_single(out, &key);
        }
        (KeyKind::Raw, _) => {
            if query.is_empty() {
                return Err(KeyError::Empty);
            }
            set_single(out, query);
        }
    }
    Ok(())
}

/// Whether `input` looks like a URL (see the module docs): a scheme
/// (`letter[letters digits + - .]*://`), or else a host (up to the first `/`,
/// `?` or `#`, less a `:port`) that has a dot, is a bracketed IPv6
/// address or is followed by a `/` path, and no user info (`@`). Leading whitespace is ignored, as the
/// canonicalization ignores it.
///
/// # Errors
///
/// [`KeyError::NotUrl`] saying which rule the input breaks.
pub fn url_shape(input: &[u8]) -> Result<(), KeyError> {
    let s = input.trim_ascii_start();
    if s.is_empty() {
        return Err(KeyError::Url(UrlError::Empty));
    }
    if let Some(colon) = s.iter().position(|&b| !is_scheme_byte(b)) {
        if colon > 0 && s[0].is_ascii_alphabetic() && s[colon..].starts_with(b"://") {
            return Ok(());
        }
    }
    let end = s
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(s.len());
    let authority = &s[..end];
    if authority.contains(&b'@') {
        return Err(KeyError::NotUrl(
            "user info ('@') without a scheme (an email address? write http://... for a URL)",
        ));
    }
    if authority.first() == Some(&b'[') {
        return Ok(());
    }
    let host = match memchr::memrchr(b':', authority) {
        Some(i) => &authority[..i],
        None => authority,
    };
    if !host.contains(&b'.') && s.get(end) != Some(&b'/') {
        return Err(KeyError::NotUrl(
            "no scheme, and a host without a dot or path (a bare name or number is not a URL; write http://NAME/ for a single-label host)",
        ));
    }
    Ok(())
}

fn is_scheme_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')
}

/// Host + parent domains with at least two labels, capped (see module docs).
fn host_lookups(host: &[u8], out: &mut Vec<Vec<u8>>) {
    let mut n = 0usize;
    for_each_host_lookup(host, |k| {
        if n == out.len() {
            out.push(Vec::with_capacity(k.len()));
        }
        out[n].clear();
        out[n].extend_from_slice(k);
        n += 1;
    });
    out.truncate(n);
}

/// Calls `f` with the host, then each parent domain of at least two
/// labels (see [`host_lookups`]).
fn for_each_host_lookup(host: &[u8], mut f: impl FnMut(&[u8])) {
    let is_ip = host.first() == Some(&b'[') || parse_ipv4(host).is_some();
    f(host);
    if !is_ip {
        // Every parent domain with at least two labels, most specific
        // first. No cap: an entry must match however deep the query's
        // subdomain is (zero false negatives). Sizing assumes at most
        // MAX_HOST_LOOKUPS lookups (see `max_lookups`); a deeper host makes
        // proportionally more lookups and so has a proportionally higher
        // false-positive rate.
        for (i, &b) in host.iter().enumerate() {
            if b == b'.' {
                let parent = &host[i + 1..];
                if parent.contains(&b'.') {
                    f(parent);
                }
            }
        }
    }
}

/// The address of a mail header's `Display Name <local@domain>` (or
/// `<local@domain>`): what lies between the last `<` and a final `>`;
/// anything else as it is.
fn angle_address(s: &[u8]) -> &[u8] {
    match (s.last(), memchr::memrchr(b'<', s)) {
        (Some(b'>'), Some(open)) => s[open + 1..s.len() - 1].trim_ascii(),
        _ => s,
    }
}

/// The canonical form of an address literal's inside (`127.0.0.1` of
/// `[127.0.0.1]`, `IPv6:2001:db8::1` of `[IPv6:2001:db8::1]`, RFC 5321
/// 4.1.3), bracketed: `[127.0.0.1]`, `[2001:db8::1]`.
fn address_literal(inner: &[u8]) -> Result<String, KeyError> {
    let bad = || KeyError::EmailBadLiteral;
    let tagged = inner.len() > 5 && inner[..5].eq_ignore_ascii_case(b"IPv6:");
    if tagged || inner.contains(&b':') {
        // The tag is RFC 5321's; an untagged `[::1]` is taken as well.
        let v6 = if tagged { &inner[5..] } else { inner };
        let v6 = [&b"["[..], v6, &b"]"[..]].concat();
        return canonical_host(&v6).map_err(|_| bad());
    }
    let text = std::str::from_utf8(inner).map_err(|_| bad())?;
    let ip: std::net::Ipv4Addr = text.parse().map_err(|_| bad())?;
    Ok(format!("[{ip}]"))
}

/// Normalize an email address: `local@canonical-domain`. The forms mail
/// systems pass are accepted: a display name with the address in angle
/// brackets (`Joe Bloggs <joe@example.com>`, keyed as `joe@example.com`)
/// and address literals (`joe@[127.0.0.1]`, `joe@[IPv6:2001:db8::1]`,
/// keyed with the address canonical and bracketed).
fn email_key(input: &[u8]) -> Result<Vec<u8>, KeyError> {
    let s = angle_address(input.trim_ascii());
    if s.is_empty() {
        return Err(KeyError::Url(UrlError::Empty));
    }
    let at = memchr::memchr(b'@', s).ok_or(KeyError::EmailMissingAt)?;
    let (local, domain) = (&s[..at], &s[at + 1..]);
    if memchr::memchr(b'@', domain).is_some() {
        return Err(KeyError::EmailMultipleAt);
    }
    if local.is_empty() {
        return Err(KeyError::EmailEmptyLocal);
    }
    if domain.is_empty() {
        return Err(KeyError::EmailEmptyDomain);
    }
    let host = match domain {
        [b'[', inner @ .., b']'] => address_literal(inner)?,
        [b'[', ..] => return Err(KeyError::EmailBadLiteral),
        _ => {
            if domain
                .iter()
                .any(|&b| matches!(b, b'/' | b'?' | b'#' | b'\\' | b':' | b'<' | b'>'))
            {
                return Err(KeyError::EmailBadDomain);
            }
            canonical_host(domain)?
        }
    };
    let mut key = Vec::with_capacity(local.len() + 1 + host.len());
    key.extend_from_slice(local);
    key.push(b'@');
    key.extend_from_slice(host.as_bytes());
    Ok(key)
}

/// True for a normalized host entry of a single label (`localhost`, or junk
/// such as `com12786312634`): queries look up a host and its parent domains
/// of at least two labels, so such an entry matches only that exact host,
/// never a subdomain of it. IP addresses are not labels.
pub fn is_single_label_host(key: &[u8]) -> bool {
    !key.is_empty() && !key.contains(&b'.') && !key.starts_with(b"[")
}

/// Number of lookups one query makes, used to size filters for a per-query
/// false-positive rate: url+exact = 1, url+prefix = 30 (a hard bound),
/// host = [`MAX_HOST_LOOKUPS`] (the sizing assumption; a host with more than
/// nine labels makes more), email = 1, raw = 1.
pub fn max_lookups(kind: KeyKind, mode: MatchMode) -> u32 {
    match (kind, mode) {
        (KeyKind::Url, MatchMode::Prefix) => MAX_EXPRESSIONS as u32,
        (KeyKind::Host, _) => MAX_HOST_LOOKUPS,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_label_hosts() {
        let key = |s: &str| {
            entry_key(KeyKind::Host, MatchMode::Exact, s.as_bytes())
                .unwrap()
                .into_owned()
        };
        for single in ["com12786312634", "localhost", "COM"] {
            assert!(is_single_label_host(&key(single)), "{single}");
        }
        for multi in [
            "evil.com",
            "a.b.c",
            "1.2.3.4",
            "3279880203",
            "[::1]",
            "bücher.de",
        ] {
            assert!(!is_single_label_host(&key(multi)), "{multi}");
        }
    }

    fn q(kind: KeyKind, mode: MatchMode, s: &str) -> Vec<String> {
        let mut out = Vec::new();
        query_keys(kind, mode, s.as_bytes(), &mut out).unwrap_or_else(|e| panic!("{s}: {e}"));
        out.into_iter()
            .map(|v| String::from_utf8(v).unwrap_or_default())
            .collect()
    }

    fn e(kind: KeyKind, mode: MatchMode, s: &[u8]) -> Result<Vec<u8>, KeyError> {
        entry_key(kind, mode, s).map(Cow::into_owned)
    }

    #[test]
    fn codes_and_names_roundtrip() {
        for k in [KeyKind::Raw, KeyKind::Url, KeyKind::Host, KeyKind::Email] {
            assert_eq!(KeyKind::from_u8(k.as_u8()), Some(k));
            assert_eq!(k.to_string().parse::<KeyKind>(), Ok(k));
        }
        assert_eq!(KeyKind::Raw.as_u8(), 0);
        assert_eq!(KeyKind::Url.as_u8(), 1);
        assert_eq!(KeyKind::Host.as_u8(), 2);
        assert_eq!(KeyKind::Email.as_u8(), 3);
        assert_eq!(KeyKind::from_u8(4), None);
        for m in [MatchMode::Exact, MatchMode::Prefix] {
            assert_eq!(MatchMode::from_u8(m.as_u8()), Some(m));
            assert_eq!(m.to_string().parse::<MatchMode>(), Ok(m));
        }
        assert_eq!(MatchMode::Exact.as_u8(), 0);
        assert_eq!(MatchMode::Prefix.as_u8(), 1);
        assert_eq!(MatchMode::from_u8(2), None);
        assert_eq!("URL".parse::<KeyKind>(), Ok(KeyKind::Url));
        let err = "domain".parse::<KeyKind>().unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown key kind 'domain' (expected one of: url, host, email, raw)"
        );
        assert!("fuzzy".parse::<MatchMode>().is_err());
    }

    #[test]
    fn url_exact() {
        let entry = e(KeyKind::Url, MatchMode::Exact, b"http://www.evil.com/a/c").unwrap();
        assert_eq!(entry, b"www.evil.com/a/c");
        assert_eq!(
            q(
                KeyKind::Url,
                MatchMode::Exact,
                "HTTP://WWW.Evil.COM:80/a/./b/../c#top"
            ),
            ["www.evil.com/a/c"]
        );
        assert!(e(KeyKind::Url, MatchMode::Exact, b"http:///path").is_err());
    }

    #[test]
    fn url_shape_rules() {
        for not_url in ["user:1", "5", "a@b.com", "c@b.com", "  user:2", "localhost"] {
            let err = e(KeyKind::Url, MatchMode::Exact, not_url.as_bytes()).unwrap_err();
            assert!(matches!(err, KeyError::NotUrl(_)), "{not_url}: {err}");
            let mut out = Vec::new();
            assert!(
                query_keys(
                    KeyKind::Url,
                    MatchMode::Prefix,
                    not_url.as_bytes(),
                    &mut out
                )
                .is_err(),
                "{not_url}"
            );
        }
        for url in [
            "evil.com",
            "evil.com/",
            "evil.com:8080/x",
            "http://localhost/x",
            "localhost/x",
            "a/",
            "http://user:pw@evil.com/",
            "http://3279880203/blah",
            "1.2.3.4/x",
            "[::1]/x",
            "HTTPS://A.B/",
            "svn+ssh://a/b",
        ] {
            assert!(url_shape(url.as_bytes()).is_ok(), "{url}");
        }
        assert_eq!(
            e(KeyKind::Url, MatchMode::Exact, b"5").unwrap_err().to_string(),
            "not a URL: no scheme, and a host without a dot or path (a bare name or number is not a URL; write http://NAME/ for a single-label host)"
        );
    }

    #[test]
    fn url_prefix() {
        for (entry, key) in [
            ("evil.com/", "evil.com/"),
            ("evil.com", "evil.com/"),
            ("evil.com/phish/", "evil.com/phish/"),
            ("http://evil.com/phish/", "evil.com/phish/"),
        ] {
            assert_eq!(
                e(KeyKind::Url, MatchMode::Prefix, entry.as_bytes()).unwrap(),
                key.as_bytes()
            );
        }
        let keys = q(
            KeyKind::Url,
            MatchMode::Prefix,
            "https://login.evil.com/phish/page.html?x=1",
        );
        assert!(keys.iter().any(|k| k == "evil.com/"));
        assert!(keys.iter().any(|k| k == "evil.com/phish/"));
        assert!(keys
            .iter()
            .any(|k| k == "login.evil.com/phish/page.html?x=1"));
        assert!(keys.len() <= max_lookups(KeyKind::Url, MatchMode::Prefix) as usize);
    }

    #[test]
    fn host_kind() {
        assert_eq!(
            e(KeyKind::Host, MatchMode::Exact, b"  Evil.COM.  ").unwrap(),
            b"evil.com"
        );
        assert_eq!(
            e(
                KeyKind::Host,
                MatchMode::Prefix,
                b"http://user@Evil.com:8080/x"
            )
            .unwrap(),
            b"evil.com"
        );
        assert_eq!(
            q(KeyKind::Host, MatchMode::Exact, "a.b.evil.com"),
            ["a.b.evil.com", "b.evil.com", "evil.com"]
        );
        assert_eq!(
            q(KeyKind::Host, MatchMode::Prefix, "someone@Mail.Evil.com"),
            ["mail.evil.com", "evil.com"]
        );
        assert_eq!(
            q(KeyKind::Host, MatchMode::Exact, "localhost"),
            ["localhost"]
        );
        assert_eq!(
            q(KeyKind::Host, MatchMode::Exact, "http://0300.0250.0.1/x"),
            ["192.168.0.1"]
        );
        assert_eq!(
            q(KeyKind::Host, MatchMode::Exact, "[2001:DB8::1]"),
            ["[2001:db8::1]"]
        );
        let deep = q(KeyKind::Host, MatchMode::Exact, "a.b.c.d.e.f.g.h.i.j.k.com");
        // Every parent with two or more labels: no depth limit, so an entry
        // such as `c.d.e.f.g.h.i.j.k.com` (regression: a 9-label entry of the
        // disposable-domain list was missed when lookups were capped at 8).
        assert_eq!(deep.len(), 11);
        assert_eq!(deep[0], "a.b.c.d.e.f.g.h.i.j.k.com");
        assert_eq!(deep[1], "b.c.d.e.f.g.h.i.j.k.com");
        assert_eq!(deep[10], "k.com");
        for bad in [&b""[..], b"   ", b"0.0.0.0 evil.com", b"\x80.com", b"[::g]"] {
            assert!(e(KeyKind::Host, MatchMode::Exact, bad).is_err(), "{bad:?}");
        }
        let msg = e(KeyKind::Host, MatchMode::Exact, b"0.0.0.0 evil.com")
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "invalid host: contains whitespace or control characters"
        );
    }

    #[test]
    fn email_forms_of_mail_systems() {
        let k = |s: &[u8]| e(KeyKind::Email, MatchMode::Exact, s);
        assert_eq!(
            k(b"Joe Bloggs <joe@Mailinator.COM>").unwrap(),
            b"joe@mailinator.com".to_vec()
        );
        assert_eq!(
            k(b"<joe@mailinator.com>").unwrap(),
            b"joe@mailinator.com".to_vec()
        );
        assert_eq!(k(b"joe@[127.0.0.1]").unwrap(), b"joe@[127.0.0.1]".to_vec());
        assert_eq!(
            k(b"joe@[IPv6:2001:DB8::1]").unwrap(),
            b"joe@[2001:db8::1]".to_vec()
        );
        assert_eq!(k(b"joe@[::1]").unwrap(), b"joe@[::1]".to_vec());
        for bad in [
            &b"joe@[1.2.3]"[..],
            b"joe@[example.com]",
            b"joe@[127.0.0.1",
            b"joe@[IPv6:zz]",
        ] {
            assert_eq!(
                k(bad),
                Err(KeyError::EmailBadLiteral),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(k(b"Joe <joe@b.com> x"), Err(KeyError::EmailBadDomain));
    }

    #[test]
    fn email_kind() {
        assert_eq!(
            e(KeyKind::Email, MatchMode::Exact, b" John.Doe@Example.COM. ").unwrap(),
            b"John.Doe@example.com"
        );
        assert_eq!(
            e(
                KeyKind::Email,
                MatchMode::Exact,
                "a@Bücher.example".as_bytes()
            )
            .unwrap(),
            b"a@xn--bcher-kva.example"
        );
        assert_eq!(
            q(KeyKind::Email, MatchMode::Prefix, "John.Doe@EXAMPLE.com"),
            ["John.Doe@example.com"]
        );
        assert_eq!(
            e(KeyKind::Email, MatchMode::Exact, b"nobody"),
            Err(KeyError::EmailMissingAt)
        );
        assert_eq!(
            e(KeyKind::Email, MatchMode::Exact, b"a@b@c"),
            Err(KeyError::EmailMultipleAt)
        );
        assert_eq!(
            e(KeyKind::Email, MatchMode::Exact, b"@b.com"),
            Err(KeyError::EmailEmptyLocal)
        );
        assert_eq!(
            e(KeyKind::Email, MatchMode::Exact, b"a@"),
            Err(KeyError::EmailEmptyDomain)
        );
        assert_eq!(
            e(KeyKind::Email, MatchMode::Exact, b"a@b.com/x"),
            Err(KeyError::EmailBadDomain)
        );
        assert_eq!(
            e(KeyKind::Email, MatchMode::Exact, b"a@b.com:25"),
            Err(KeyError::EmailBadDomain)
        );
        assert!(e(KeyKind::Email, MatchMode::Exact, b"  ").is_err());
        assert!(e(KeyKind::Email, MatchMode::Exact, b"a@\xff.com").is_err());
    }

    #[test]
    fn raw_kind() {
        let k = entry_key(KeyKind::Raw, MatchMode::Exact, b" As Is ").unwrap();
        assert!(matches!(k, Cow::Borrowed(b" As Is ")));
        assert_eq!(e(KeyKind::Raw, MatchMode::Exact, b""), Err(KeyError::Empty));
        assert_eq!(q(KeyKind::Raw, MatchMode::Prefix, "X y"), ["X y"]);
        let mut out = vec![b"stale".to_vec()];
        assert!(query_keys(KeyKind::Raw, MatchMode::Exact, b"", &mut out).is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn max_lookups_table() {
        assert_eq!(max_lookups(KeyKind::Url, MatchMode::Exact), 1);
        assert_eq!(max_lookups(KeyKind::Url, MatchMode::Prefix), 30);
        assert_eq!(
            max_lookups(KeyKind::Host, MatchMode::Exact),
            MAX_HOST_LOOKUPS
        );
        assert_eq!(
            max_lookups(KeyKind::Host, MatchMode::Prefix),
            MAX_HOST_LOOKUPS
        );
        assert_eq!(max_lookups(KeyKind::Email, MatchMode::Exact), 1);
        assert_eq!(max_lookups(KeyKind::Raw, MatchMode::Prefix), 1);
    }

    #[test]
    fn query_reuses_buffers() {
        let mut out = Vec::new();
        query_keys(
            KeyKind::Url,
            MatchMode::Prefix,
            b"http://a.b.c/1/2/3",
            &mut out,
        )
        .unwrap();
        let n = out.len();
        let ptr = out[0].as_ptr();
        query_keys(KeyKind::Url, MatchMode::Exact, b"http://a.b.c/", &mut out).unwrap();
        assert_eq!(out, [b"a.b.c/".to_vec()]);
        assert_eq!(out[0].as_ptr(), ptr);
        assert!(n > 1);
    }
}
