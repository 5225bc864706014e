//! Property tests: no panics, idempotence, fast path == slow path.

use bloomgate_url::__private::{fast_key_start, fast_key_start_scalar, slow_canonical_key};
use bloomgate_url::{
    canonical_host, canonical_key, canonicalize, entry_key, expressions, push_query_keys,
    query_keys, KeyKind, MatchMode, MAX_EXPRESSIONS,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;

const KINDS: [KeyKind; 4] = [KeyKind::Raw, KeyKind::Url, KeyKind::Host, KeyKind::Email];
const MODES: [MatchMode; 2] = [MatchMode::Exact, MatchMode::Prefix];

/// URL-ish strings built from a grammar full of the tricky pieces.
fn urlish() -> impl Strategy<Value = Vec<u8>> {
    let scheme = prop::sample::select(vec![
        "",
        "",
        "http://",
        "https://",
        "HTTP://",
        "hTtPs://",
        "ftp://",
        "http:",
        "http:/",
        "http%3A%2F%2F",
        "a+b.c-d://",
        "://",
    ]);
    let userinfo = prop::sample::select(vec!["", "", "", "user@", "u:p@", "a@b@", "@", "%40"]);
    let label = prop::sample::select(vec![
        "www",
        "evil",
        "com",
        "a",
        "b",
        "GOOgle",
        "xn--bcher-kva",
        "bücher",
        "ü",
        "0",
        "1",
        "255",
        "256",
        "0x7f",
        "0XC0",
        "0300",
        "08",
        "3279880203",
        "",
        "%2e",
        "%2E",
        "%25",
        "%31",
        "host%23",
        " ",
        "\u{3002}",
        "\u{ff11}",
        "\u{ff0f}",
        "-",
        "_",
        "W!eird<>",
        "\x01",
        "\u{80}",
        "[",
        "]",
    ]);
    let host_labels = prop::collection::vec(label, 1..6);
    let ip6 = prop::sample::select(vec![
        "",
        "",
        "",
        "",
        "[::1]",
        "[2001:DB8::1]",
        "[::ffff:1.2.3.4]",
        "[64:ff9b::102:304]",
        "[0:0::0:0:8]",
        "[::g]",
        "[",
        "[]",
    ]);
    let port = prop::sample::select(vec!["", "", "", ":80", ":", ":8080", ":99999", ":x"]);
    let seg = prop::sample::select(vec![
        "a",
        "b.html",
        ".",
        "..",
        "",
        "%2e",
        "%2E%2E",
        "%2F",
        "%25",
        "%2525",
        "%252F",
        " ",
        "%20",
        "#",
        "%23",
        "?",
        "%3F",
        "ü",
        "%C3%BC",
        "x%zz",
        "%",
        "\t",
        "\r\n",
        "~!$&'()*+,;=:@",
        "A",
    ]);
    let path = prop::collection::vec(seg, 0..6);
    let query = prop::sample::select(vec![
        "",
        "",
        "?",
        "?a=1",
        "?a=1&b=//x/../",
        "?%41%2525",
        "?q?r?",
        "?ü #x",
    ]);
    let frag = prop::sample::select(vec!["", "", "#", "#frag", "#a#b", "#%41"]);
    let ws = prop::sample::select(vec!["", "", " ", "\t", "\n "]);
    (
        ws.clone(),
        scheme,
        userinfo,
        host_labels,
        ip6,
        port,
        path,
        query,
        frag,
        ws,
    )
        .prop_map(|(w1, s, u, labels, ip6, port, path, q, f, w2)| {
            let mut out = String::new();
            out.push_str(w1);
            out.push_str(s);
            out.push_str(u);
            if ip6.is_empty() {
                out.push_str(&labels.join("."));
            } else {
                out.push_str(ip6);
            }
            out.push_str(port);
            for p in path {
                out.push('/');
                out.push_str(p);
            }
            out.push_str(q);
            out.push_str(f);
            out.push_str(w2);
            out.into_bytes()
        })
}

/// Strings that are often already canonical, to exercise the fast path.
fn canonicalish() -> impl Strategy<Value = Vec<u8>> {
    "(http://|https://|ftp://|)[a-z0-9._-]{0,12}(/[a-zA-Z0-9._~=&?!$'()*+,;:@/-]{0,20}){0,4}"
        .prop_map(String::into_bytes)
}

/// Canonical URLs and URLs one to three small edits away from canonical,
/// with lengths spread over ~10..~230 bytes so that the edits also land on
/// the block boundaries of the SIMD fast-path scan (16, 32, 64, 128 bytes).
fn almost_canonical() -> impl Strategy<Value = Vec<u8>> {
    let scheme = prop::sample::select(vec![
        "",
        "http://",
        "http://",
        "https://",
        "ftp://",
        "a+b.c-d://",
        "x_y://",
        "h://",
        "HTTP://",
        "http:",
        "http:/",
        "9p://",
    ]);
    let host = prop::sample::select(vec![
        "www.evil5.example",
        "host123.example",
        "a",
        "a-b_c.d",
        "xn--bcher-kva.example",
        "9.evil.com",
        "cafe.de",
        "face.b00c",
        "1.2.3.4",
        "0.0.0.0",
        "255.255.255.255",
        "10.0.100.199",
        "01.2.3.4",
        "1.2.3",
        "1.2.3.256",
        "1.2.3.4.5",
        "0x7f.0.0.1",
        "3279880203",
        "0x7f000001",
    ]);
    let seg = prop::sample::select(vec![
        "a",
        "login.php",
        "456",
        "index.html",
        "a.b",
        ".well-known",
        "..a",
        "a..",
        "...",
        ".a.",
        "~user",
        "!$&'()*+,;=:@",
        "-",
        "_",
        "A",
    ]);
    let path = prop::collection::vec(seg, 0..6);
    let query = prop::sample::select(vec![
        "",
        "",
        "?",
        "?x=5",
        "?q=789&r=//a/../b",
        "?a?b",
        "?/./",
        "?.",
    ]);
    let edit = prop::sample::select(vec![
        "/", ".", "..", "/./", "/../", "//", "/.", "/..", "%41", "%2e", "%2E", "%", "%2", "#",
        "#x", "?", ":80", ":", "@", "u@", "\t", "\n", "\r", " ", "\u{e9}", "\u{80}", "\u{7f}", "A",
        "Z", "_", "+", "-", "0", "x", "\\", "[", "]", "\u{3002}", "\u{ff0e}",
    ]);
    // Replace one byte, insert a string, or delete one byte.
    let op = (0u8..3, any::<prop::sample::Index>(), edit);
    (
        scheme,
        host,
        path,
        any::<bool>(),
        0usize..150,
        query,
        prop::collection::vec(op, 0..4),
    )
        .prop_map(|(scheme, host, path, slash, pad, query, ops)| {
            let mut s = String::new();
            s.push_str(scheme);
            s.push_str(host);
            s.push('/');
            s.push_str(&path.join("/"));
            if slash && !path.is_empty() {
                s.push('/');
            }
            // A long plain segment moves everything across block boundaries.
            s.extend((0..pad).map(|i| char::from(b'a' + (i % 26) as u8)));
            s.push_str(query);
            let mut v = s.into_bytes();
            for (kind, at, text) in ops {
                let i = at.index(v.len() + 1);
                match kind {
                    0 if i < v.len() => v[i] = text.as_bytes()[0],
                    1 => {
                        v.splice(i..i, text.bytes());
                    }
                    _ if i < v.len() => {
                        v.remove(i);
                    }
                    _ => {}
                }
            }
            v
        })
}

fn any_input() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        almost_canonical(),
        prop::collection::vec(any::<u8>(), 0..96),
        urlish(),
        canonicalish(),
        // Byte-level mutations of URL-ish strings.
        (
            urlish(),
            prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4)
        )
            .prop_map(|(mut v, muts)| {
                for (i, b) in muts {
                    if !v.is_empty() {
                        let idx = i.index(v.len());
                        v[idx] = b;
                    }
                }
                v
            }),
    ]
}

/// The fast path (SIMD where available) accepts exactly what the scalar scan
/// accepts, and agrees with the slow path whenever it accepts.
fn check_fast_path(input: &[u8]) -> Result<(), TestCaseError> {
    let fast = fast_key_start(input);
    prop_assert_eq!(
        fast,
        fast_key_start_scalar(input),
        "SIMD and scalar fast-path scans disagree"
    );
    if let Some(start) = fast {
        let slow = slow_canonical_key(input);
        prop_assert_eq!(
            slow.as_deref().map(str::as_bytes),
            Ok(&input[start..]),
            "fast path disagrees"
        );
    }
    Ok(())
}

fn check_all(input: &[u8]) -> Result<(), TestCaseError> {
    // Canonicalize: idempotent, and the key is the canonical form minus scheme.
    match canonicalize(input) {
        Ok(c) => {
            prop_assert!(c.is_ascii());
            let again = canonicalize(c.as_bytes());
            prop_assert_eq!(again.as_deref(), Ok(&*c), "not idempotent");
            let key = canonical_key(input);
            let sep = c.find("://").map_or(0, |p| p + 3);
            prop_assert_eq!(key.as_deref(), Ok(c[sep..].as_bytes()));
            let key2 = canonical_key(&c.as_bytes()[sep..]);
            prop_assert_eq!(
                key2.as_deref(),
                Ok(c[sep..].as_bytes()),
                "key not idempotent"
            );

            let ex = expressions(input);
            prop_assert!(ex.is_ok());
            let ex = ex.unwrap_or_default();
            prop_assert!(!ex.is_empty() && ex.len() <= MAX_EXPRESSIONS);
            prop_assert_eq!(ex[0].as_bytes(), &c.as_bytes()[sep..]);
            let mut sorted = ex.clone();
            sorted.sort();
            sorted.dedup();
            prop_assert_eq!(sorted.len(), ex.len(), "duplicate expressions");
        }
        Err(e) => {
            prop_assert!(canonical_key(input).is_err());
            prop_assert!(!e.to_string().is_empty());
        }
    }
    check_fast_path(input)?;
    // Host: idempotent.
    if let Ok(h) = canonical_host(input) {
        let again = canonical_host(h.as_bytes());
        prop_assert_eq!(again.as_deref(), Ok(h.as_str()));
    }
    // Keys: no panics, bounds respected, entry normalization idempotent.
    let mut out = Vec::new();
    for kind in KINDS {
        for mode in MODES {
            if let Ok(k) = entry_key(kind, mode, input) {
                let k = k.into_owned();
                let again = entry_key(kind, mode, &k).map(|c| c.into_owned());
                prop_assert_eq!(again.as_ref(), Ok(&k), "entry not idempotent");
            }
            // The flat form appends exactly the same keys (nothing on error).
            let (mut arena, mut ends) = (b"before".to_vec(), vec![6]);
            let pushed = push_query_keys(kind, mode, input, &mut arena, &mut ends);
            let got = query_keys(kind, mode, input, &mut out);
            prop_assert_eq!(pushed.as_ref().err(), got.as_ref().err());
            prop_assert_eq!(pushed.unwrap_or(0), out.len());
            let flat: Vec<&[u8]> = ends.windows(2).map(|w| &arena[w[0]..w[1]]).collect();
            prop_assert_eq!(&arena[..6], b"before");
            prop_assert_eq!(flat, out.iter().map(Vec::as_slice).collect::<Vec<_>>());
            if got.is_ok() {
                prop_assert!(!out.is_empty());
                // No key twice.
                for (i, k) in out.iter().enumerate() {
                    prop_assert!(!out[..i].contains(k), "{:?} twice", k);
                }
                if kind == KeyKind::Host {
                    // Host lookups are not capped (zero false negatives for
                    // deep subdomains): the host plus every parent with at
                    // least two labels, i.e. at most max(1, dots) keys.
                    let dots = out[0].iter().filter(|&&b| b == b'.').count();
                    prop_assert!(out.len() <= dots.max(1));
                } else {
                    prop_assert!(out.len() <= bloomgate_url::max_lookups(kind, mode) as usize);
                }
            } else {
                prop_assert!(out.is_empty());
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_and_invariants_hold(input in any_input()) {
        check_all(&input)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// Canonical outputs of the slow path are themselves fixed points, and
    /// plain lowercase inputs frequently take (and agree with) the fast path.
    #[test]
    fn fast_path_agrees_with_slow_path(input in canonicalish()) {
        check_fast_path(&input)?;
        if let Ok(c) = slow_canonical_key(&input) {
            let again = slow_canonical_key(c.as_bytes());
            prop_assert_eq!(again.as_deref(), Ok(c.as_str()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10000, ..ProptestConfig::default() })]

    /// Inputs at most a few edits away from canonical: the fast path must
    /// still give exactly the slow path's answer (and the SIMD scan exactly
    /// the scalar scan's), and all other invariants hold.
    #[test]
    fn almost_canonical_urls(input in almost_canonical()) {
        check_all(&input)?;
    }
}

/// Canonical URLs of every length from 1 to 200 bytes, each with every byte
/// in turn replaced by each of a set of bytes that matter to the fast path:
/// the SIMD and scalar scans agree, and accepted inputs are fixed points of
/// the slow path. Covers every block boundary of the SIMD scan.
#[test]
fn fast_path_single_byte_edits() {
    let specials: &[u8] = b"/.?#%A:@_-+0x\\[] \t\n\x7f\x80\xff";
    let bases: &[&[u8]] = &[
        b"http://host123.example/path/456?q=789",
        b"https://www.evil5.example/phish/login.php?x=5",
        b"www.a.b/c/d.e/",
        b"ftp://1.2.3.4/a/b",
        b"x.y/?",
        // Scheme and host long enough to cross the 16-, 32- and 64-byte
        // blocks.
        b"abcdefghijklmnopqrstuvwxyz0123456789-.abc://h.example/p",
        b"abcdefghijklmnopqrstuvwxyz0123456789-.abcdefghijklmnopqrstuvwxyz0123456789://h.example/p",
        b"http://a-very-long-subdomain-name.for-testing.example.com/x",
    ];
    let mut checked = 0usize;
    for base in bases {
        for len in 1..=200usize {
            // Stretch (or cut) the base to `len` bytes with a plain path tail.
            let mut url = base.to_vec();
            if url.contains(&b'?') {
                url.extend((0..len).map(|i| b'a' + (i % 26) as u8));
            } else {
                url.push(b'/');
                url.extend((0..len).map(|i| b'a' + (i % 26) as u8));
            }
            url.truncate(len);
            for i in 0..url.len() {
                for &b in specials {
                    let mut v = url.clone();
                    v[i] = b;
                    let fast = fast_key_start(&v);
                    assert_eq!(
                        fast,
                        fast_key_start_scalar(&v),
                        "SIMD and scalar scans disagree on {:?}",
                        String::from_utf8_lossy(&v)
                    );
                    if let Some(start) = fast {
                        assert_eq!(
                            slow_canonical_key(&v).as_deref().map(str::as_bytes),
                            Ok(&v[start..]),
                            "fast path disagrees on {:?}",
                            String::from_utf8_lossy(&v)
                        );
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 100_000);
}

/// The fast path really is taken for plain canonical URLs of every length
/// (a scan that bails out too often would be correct but slow).
#[test]
fn fast_path_accepts_canonical_urls_of_every_length() {
    for (prefix, start) in [
        (&b"http://host123.example/"[..], 7),
        (b"https://www.evil5.example/", 8),
        (b"www.evil5.example/", 0),
        (b"http://10.0.100.199/", 7),
        (b"git+ssh://a.b/", 10),
    ] {
        for len in prefix.len()..=300 {
            let mut url = prefix.to_vec();
            url.extend((url.len()..len).map(|i| match i % 7 {
                3 => b'/',
                5 => b'.',
                _ => b'a' + (i % 26) as u8,
            }));
            if url.last() == Some(&b'.') {
                url.pop();
            }
            assert_eq!(
                fast_key_start(&url),
                Some(start),
                "{:?}",
                String::from_utf8_lossy(&url)
            );
        }
    }
}

/// The share of generated inputs that take the fast path.
fn fast_share(strategy: impl Strategy<Value = Vec<u8>>, samples: usize) -> f64 {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let taken = (0..samples)
        .filter(|_| {
            let input = strategy.new_tree(&mut runner).unwrap().current();
            fast_key_start(&input).is_some()
        })
        .count();
    taken as f64 / samples as f64
}

/// The generators of the fast-path properties really reach the fast path
/// (a property over inputs that all fall back to the slow path would only
/// compare the slow path with itself), and do not only take it either.
#[test]
fn fast_path_is_exercised() {
    for (name, share) in [
        ("canonicalish", fast_share(canonicalish(), 4000)),
        ("almost_canonical", fast_share(almost_canonical(), 4000)),
    ] {
        eprintln!(
            "{name}: {:.1} % of inputs take the fast path",
            share * 100.0
        );
        assert!(
            (0.15..0.95).contains(&share),
            "{name}: {:.1} % take the fast path",
            share * 100.0
        );
    }
}
