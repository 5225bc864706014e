//! Property tests: no panics, idempotence, fast path == slow path.

use bloomgate_url::__private::{fast_key_start, slow_canonical_key};
use bloomgate_url::{
    canonical_host, canonical_key, canonicalize, entry_key, expressions, query_keys, KeyKind,
    MatchMode, MAX_EXPRESSIONS,
};
use proptest::prelude::*;

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

fn any_input() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
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
    // Fast path agrees with the slow path whenever it accepts.
    if let Some(start) = fast_key_start(input) {
        let slow = slow_canonical_key(input);
        prop_assert_eq!(
            slow.as_deref().map(str::as_bytes),
            Ok(&input[start..]),
            "fast path disagrees"
        );
    }
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
            if query_keys(kind, mode, input, &mut out).is_ok() {
                prop_assert!(!out.is_empty());
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
        if let Some(start) = fast_key_start(&input) {
            let slow = slow_canonical_key(&input);
            prop_assert_eq!(slow.as_deref().map(str::as_bytes), Ok(&input[start..]));
        }
        if let Ok(c) = slow_canonical_key(&input) {
            let again = slow_canonical_key(c.as_bytes());
            prop_assert_eq!(again.as_deref(), Ok(c.as_str()));
        }
    }
}

#[test]
fn fast_path_is_exercised() {
    // Sanity check that the generator above reaches the fast path at all.
    let accepted = [
        &b"http://a.b/c"[..],
        b"a.b/",
        b"https://x-y_z.example/p/q.html?x=1",
        b"1.2.3.4/",
    ]
    .iter()
    .filter(|s| fast_key_start(s).is_some())
    .count();
    assert_eq!(accepted, 4);
}
