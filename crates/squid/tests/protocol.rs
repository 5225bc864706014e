//! Property tests of the helper protocol: whatever bytes Squid (or anything
//! else) writes, every request line gets exactly one answer line, and an
//! answer is one well-formed line.

use std::path::PathBuf;
use std::sync::OnceLock;

use bloomgate_squid::protocol::{
    expand_redirect, parse_line, percent_decode, write_answer, Answer, Kind,
};
use bloomgate_squid::{Category, Helper, Options};
use proptest::prelude::*;

/// A small list on disk (built once by the real binary): `evil.example`.
fn list() -> &'static PathBuf {
    static LIST: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &LIST
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let input = dir.path().join("in.txt");
            std::fs::write(&input, "evil.example/\n").unwrap();
            let out = dir.path().join("adult.bgf");
            testkit::ok(&testkit::bg(&[
                "build",
                "--match",
                "prefix",
                "--fp",
                "1e-4",
                "-o",
                testkit::p(&out),
                testkit::p(&input),
            ]));
            (dir, out)
        })
        .1
}

fn answers(input: &[u8], kind: Kind, concurrency: bool) -> Vec<u8> {
    let cat = Category::open("adult", testkit::p(list())).unwrap();
    let mut helper = Helper::new(
        vec![cat],
        Options {
            kind,
            concurrency,
            redirect: "http://block.example/?u=%u".into(),
        },
    );
    let mut out = Vec::new();
    let stats = helper.run(input, &mut out, &mut Vec::new()).unwrap();
    assert_eq!(
        stats.requests as usize,
        out.iter().filter(|&&b| b == b'\n').count()
    );
    out
}

fn lines_in(input: &[u8]) -> usize {
    let n = input.iter().filter(|&&b| b == b'\n').count();
    n + usize::from(!input.is_empty() && !input.ends_with(b"\n"))
}

/// An answer line is a verdict word (after the channel ID), then
/// `key=value` pairs; it has no control byte but its final `\n`.
fn well_formed(line: &[u8], channel: Option<&[u8]>) {
    let text = line.strip_suffix(b"\n").expect("ends with a newline");
    assert!(!text.iter().any(|&b| b < b' ' || b == 0x7f), "{line:?}");
    let rest = match channel {
        Some(id) => text
            .strip_prefix(id)
            .and_then(|r| r.strip_prefix(b" "))
            .unwrap(),
        None => text,
    };
    assert!(
        rest == b"ERR" || rest.starts_with(b"OK ") || rest.starts_with(b"BH message="),
        "{line:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_line_parses_and_its_answer_is_one_line(
        line in proptest::collection::vec(any::<u8>(), 0..300)
            .prop_map(|v| v.into_iter().filter(|&b| b != b'\n').collect::<Vec<u8>>()),
        concurrency in any::<bool>(),
        rewrite in any::<bool>(),
        cut in any::<bool>(),
    ) {
        let kind = if rewrite { Kind::Rewrite } else { Kind::Acl };
        let r = parse_line(&line, concurrency, kind, cut);
        if let Some(id) = r.channel {
            prop_assert!(line.starts_with(id) && id.iter().all(u8::is_ascii_digit));
        }
        prop_assert_eq!(r.channel.is_some(), concurrency && r.channel.is_some());
        let query = r.queries.as_ref().ok().and_then(|q| q.first()).map(|q| q.to_vec()).unwrap_or_default();
        let text = String::from_utf8_lossy(&line);
        for answer in [
            Answer::NotListed,
            Answer::Unknown(&text),
            Answer::Listed { category: "adult", matched: &line, query: &query },
        ] {
            let mut out = Vec::new();
            write_answer(&mut out, r.channel, kind, "http://b.example/?u=%u&c=%t", answer);
            well_formed(&out, r.channel);
        }
    }

    #[test]
    fn a_block_answer_carries_the_url_percent_encoded(
        url in proptest::collection::vec(any::<u8>(), 0..200),
        spaced in any::<bool>(),
    ) {
        // Byte by byte, as RFC 3986 says: unreserved bytes as they are,
        // every other byte as %XX (upper-case hex).
        let by_byte: String = url
            .iter()
            .map(|&b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let template = if spaced { "http://b.example/?c=%t u=%u" } else { "http://b.example/?c=%t&u=%u" };
        let expanded = expand_redirect(template, "adult", &url);
        let want = template.replace("%t", "adult").replace("%u", &by_byte);
        prop_assert_eq!(&expanded[..], want.as_bytes());
        let decoded = percent_decode(&expanded[expanded.len() - by_byte.len()..]);
        prop_assert_eq!(decoded.as_ref(), &url[..]);
        let mut out = Vec::new();
        write_answer(&mut out, None, Kind::Rewrite, template, Answer::Listed { category: "adult", matched: b"x", query: &url });
        // A template with a space makes the value quoted; otherwise it is bare.
        let want = if spaced {
            format!("OK status=302 url=\"{}\"\n", String::from_utf8_lossy(&expanded))
        } else {
            format!("OK status=302 url={}\n", String::from_utf8_lossy(&expanded))
        };
        prop_assert_eq!(String::from_utf8_lossy(&out), want);
    }

    #[test]
    fn any_template_expands_as_squidguard_reads_it(
        template in "[a%tu/?=]{0,24}",
        url in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        // The template read one byte at a time: %t, %u and %% expand, any
        // other byte (a lone % included) is copied.
        let encoded = expand_redirect("%u", "", &url);
        let t = template.as_bytes();
        let mut want = Vec::new();
        let mut i = 0;
        while i < t.len() {
            match (t[i], t.get(i + 1)) {
                (b'%', Some(b't')) => want.extend_from_slice(b"cat"),
                (b'%', Some(b'u')) => want.extend_from_slice(&encoded),
                (b'%', Some(b'%')) => want.push(b'%'),
                (b, _) => {
                    want.push(b);
                    i += 1;
                    continue;
                }
            }
            i += 2;
        }
        prop_assert_eq!(expand_redirect(&template, "cat", &url), want);
    }

    #[test]
    fn percent_decoding_undoes_encoding(token in proptest::collection::vec(any::<u8>(), 0..64)) {
        let encoded: String = token.iter().map(|b| format!("%{b:02x}")).collect();
        let decoded = percent_decode(encoded.as_bytes());
        prop_assert_eq!(decoded.as_ref(), &token[..]);
    }

    #[test]
    fn any_input_gets_one_answer_per_line(
        lines in proptest::collection::vec(
            prop_oneof![
                Just(b"1 http://evil.example/x".to_vec()),
                Just(b"2 http%3A%2F%2Fclean.example%2F".to_vec()),
                Just(Vec::new()),
                Just(b"x y z".to_vec()),
                proptest::collection::vec(any::<u8>(), 0..80)
                    .prop_map(|v| v.into_iter().filter(|&b| b != b'\n').collect()),
            ],
            0..40,
        ),
        concurrency in any::<bool>(),
        rewrite in any::<bool>(),
        newline_at_end in any::<bool>(),
    ) {
        let mut input = lines.join(&b'\n');
        if newline_at_end && !lines.is_empty() {
            input.push(b'\n');
        }
        let kind = if rewrite { Kind::Rewrite } else { Kind::Acl };
        let out = answers(&input, kind, concurrency);
        prop_assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), lines_in(&input));
        for (req, ans) in input.split(|&b| b == b'\n').zip(out.split_inclusive(|&b| b == b'\n')) {
            let r = parse_line(req, concurrency, kind, false);
            well_formed(ans, r.channel);
            if req.ends_with(b"evil.example/x") && concurrency {
                prop_assert!(ans.starts_with(b"1 OK "), "{:?}", String::from_utf8_lossy(ans));
            }
        }
    }
}

#[test]
fn an_over_long_line_is_answered_bh_on_its_channel_and_the_next_is_answered() {
    let mut input = b"5 http://evil.example/".to_vec();
    input.extend(std::iter::repeat_n(b'a', 200_000));
    input.extend_from_slice(b"\n6 http://evil.example/\n7 http://clean.example/\n");
    let out = String::from_utf8(answers(&input, Kind::Acl, true)).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("5 BH message="), "{out}");
    assert!(lines[1].starts_with("6 OK tag=adult "), "{out}");
    assert_eq!(lines[2], "7 ERR");
}
