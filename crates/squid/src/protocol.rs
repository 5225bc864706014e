//! Squid's helper line protocol: one request line in, one answer line out.
//!
//! Squid talks to its helpers over a pipe, one line per request. With
//! `concurrency=N` (N > 0) in the helper's configuration, each request
//! starts with a channel ID (a decimal number) and a space, and the answer
//! to it must start with the same ID; answers may then come in any order.
//! Without it, answers come in the order of the requests. What follows the
//! channel ID depends on the helper kind:
//!
//! - `external_acl_type`: the tokens of the configured format (`%URI`,
//!   `%DST`, …) separated by spaces, each escaped as a URL component
//!   (`quote=url`, Squid's default: `%20` for a space); a value Squid does
//!   not have, and the empty argument list of an `acl … external NAME`
//!   line, are sent as `-`, which is no query. The answer is `OK`
//!   (the ACL matches: the item is listed), `ERR` (it does not) or `BH`
//!   (the helper could not tell), followed by `key=value` pairs such as
//!   `tag=` and `message=`.
//! - `url_rewrite_program`: the URL, then the configured extras
//!   (`url_rewrite_extras`, by default the client address, user, method
//!   and local address): only the URL is a query. The answer is
//!   `OK status=302 url=…` (redirect to a block page), `ERR` (leave the URL
//!   alone) or `BH`.
//!
//! A `key=value` value with a space, a quote or a backslash is sent
//! quoted, with `\` before `"` and `\`, as Squid's reply parser reads it;
//! control bytes are never sent (a newline would end the answer early),
//! they become `?`.
//!
//! Every line gets exactly one answer, whatever its bytes: an empty line,
//! a line longer than [`MAX_LINE`], a line with only a channel ID or a
//! channel ID that is not a number get `BH` with a message, so that
//! Squid's count of pending requests stays right and the helper keeps
//! going. A line whose channel ID cannot be read is answered without one
//! (Squid then logs an unexpected answer, which is all it can do).

use std::borrow::Cow;

use smallvec::SmallVec;

/// The longest request line read whole (64 KiB, above Squid's longest URL).
/// Longer lines are answered `BH` and the rest of them skipped.
pub const MAX_LINE: usize = 64 * 1024;

/// Longest channel ID accepted (Squid's are small counters).
const MAX_CHANNEL: usize = 20;

/// Which Squid helper interface is spoken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `external_acl_type`: `OK` when listed, `ERR` when not.
    Acl,
    /// `url_rewrite_program`: `OK status=302 url=…` when listed, `ERR`
    /// when not.
    Rewrite,
}

/// Why a request line is answered `BH` without a lookup.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BadRequest {
    /// The line is empty (or only a channel ID).
    #[error("empty request")]
    Empty,
    /// The line is longer than [`MAX_LINE`].
    #[error("request line longer than 65536 bytes")]
    TooLong,
    /// `concurrency` is set and the line does not start with a channel ID.
    #[error("no channel ID (the helper runs with --concurrency: set concurrency=N > 0 in squid.conf, or leave the flag out)")]
    BadChannel,
}

/// A request's queries: up to four inline (a line rarely has more), so a
/// request line costs no allocation.
pub type Queries<'a> = SmallVec<[Cow<'a, [u8]>; 4]>;

/// One request line, parsed.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// The channel ID as sent, when concurrency is on and it was valid.
    pub channel: Option<&'a [u8]>,
    /// The queries (percent-decoded tokens for `external_acl_type`, the URL
    /// for `url_rewrite_program`), or why there are none.
    pub queries: Result<Queries<'a>, BadRequest>,
}

/// Parses one request line (without its `\n`; a trailing `\r` is
/// ignored). `too_long` says the line was cut at [`MAX_LINE`]: its channel
/// ID is still read, so that the `BH` reaches the right request.
pub fn parse_line(line: &[u8], concurrency: bool, kind: Kind, too_long: bool) -> Request<'_> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut rest = line;
    let mut channel = None;
    if concurrency {
        let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        let id = &rest[..end];
        if id.is_empty() || id.len() > MAX_CHANNEL || !id.iter().all(u8::is_ascii_digit) {
            return Request {
                channel: None,
                queries: Err(if line.is_empty() {
                    BadRequest::Empty
                } else {
                    BadRequest::BadChannel
                }),
            };
        }
        channel = Some(id);
        rest = &rest[end..];
    }
    if too_long {
        return Request {
            channel,
            queries: Err(BadRequest::TooLong),
        };
    }
    let mut tokens = rest
        .split(|&b| b == b' ' || b == b'\t')
        .filter(|t| !t.is_empty());
    let queries: Queries<'_> = match kind {
        Kind::Acl => tokens.filter(|t| t != b"-").map(percent_decode).collect(),
        Kind::Rewrite => tokens.next().map(Cow::Borrowed).into_iter().collect(),
    };
    Request {
        channel,
        queries: if queries.is_empty() {
            Err(BadRequest::Empty)
        } else {
            Ok(queries)
        },
    }
}

/// Undoes Squid's `quote=url` escaping of one token (`%XX` → the byte; a
/// `%` not followed by two hex digits stays as it is).
pub fn percent_decode(token: &[u8]) -> Cow<'_, [u8]> {
    if !token.contains(&b'%') {
        return Cow::Borrowed(token);
    }
    let mut out = Vec::with_capacity(token.len());
    let mut i = 0;
    while i < token.len() {
        if token[i] == b'%' && i + 2 < token.len() {
            if let (Some(h), Some(l)) = (hex(token[i + 1]), hex(token[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(token[i]);
        i += 1;
    }
    Cow::Owned(out)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// What the helper answers to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer<'a> {
    /// Listed: the first list (in the order given) that holds a query.
    Listed {
        /// That list's category.
        category: &'a str,
        /// The lookup key that matched.
        matched: &'a [u8],
        /// The query that matched (the URL the block page names).
        query: &'a [u8],
    },
    /// On none of the lists.
    NotListed,
    /// The helper could not tell (a bad request, a store that did not
    /// answer): `BH` with this message, never `ERR`.
    Unknown(&'a str),
}

/// Appends the answer line (with its `\n`) for a request on `channel`.
/// `redirect` is the block page template of `url_rewrite_program` (see
/// [`expand_redirect`]).
pub fn write_answer(
    out: &mut Vec<u8>,
    channel: Option<&[u8]>,
    kind: Kind,
    redirect: &str,
    answer: Answer<'_>,
) {
    if let Some(id) = channel {
        out.extend_from_slice(id);
        out.push(b' ');
    }
    match answer {
        Answer::Listed {
            category,
            matched,
            query,
        } => match kind {
            Kind::Acl => {
                out.extend_from_slice(b"OK tag=");
                write_value(out, category.as_bytes());
                out.extend_from_slice(b" message=\"");
                write_quoted(out, category.as_bytes());
                out.extend_from_slice(b": ");
                write_quoted(out, matched);
                out.push(b'"');
            }
            Kind::Rewrite => {
                out.extend_from_slice(b"OK status=302 url=");
                // The URL goes in percent-encoded, which is always plain: only
                // the template and the category can make the value need quotes.
                if plain(redirect.as_bytes()) && plain(category.as_bytes()) {
                    expand_redirect_into(out, redirect, category, query);
                } else {
                    write_value(out, &expand_redirect(redirect, category, query));
                }
            }
        },
        Answer::NotListed => out.extend_from_slice(b"ERR"),
        Answer::Unknown(message) => {
            out.extend_from_slice(b"BH message=");
            write_value(out, message.as_bytes());
        }
    }
    out.push(b'\n');
}

/// Whether a value goes out bare: not empty, and no space, quote,
/// backslash or control byte.
fn plain(value: &[u8]) -> bool {
    !value.is_empty()
        && value
            .iter()
            .all(|&b| b > b' ' && b != b'"' && b != b'\\' && b != 0x7f)
}

/// Writes one `key=value` value: bare when [`plain`], else quoted.
fn write_value(out: &mut Vec<u8>, value: &[u8]) {
    if plain(value) {
        out.extend_from_slice(value);
    } else {
        out.push(b'"');
        write_quoted(out, value);
        out.push(b'"');
    }
}

/// Writes the inside of a quoted value: `\` before `"` and `\`, control
/// bytes as `?`.
fn write_quoted(out: &mut Vec<u8>, value: &[u8]) {
    for &b in value {
        match b {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', b]),
            b if b < b' ' || b == 0x7f => out.push(b'?'),
            b => out.push(b),
        }
    }
}

/// The block page address for a listed URL, from a squidGuard-style
/// template: `%t` the category, `%u` the URL (percent-encoded, for a query
/// string), `%%` a percent sign; anything else is copied.
pub fn expand_redirect(template: &str, category: &str, url: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(template.len() + url.len() * 3);
    expand_redirect_into(&mut out, template, category, url);
    out
}

/// [`expand_redirect`], appending to `out`: the template's literal runs
/// are copied whole.
fn expand_redirect_into(out: &mut Vec<u8>, template: &str, category: &str, url: &[u8]) {
    let mut t = template.as_bytes();
    while !t.is_empty() {
        let literal = t.iter().position(|&b| b == b'%').unwrap_or(t.len());
        out.extend_from_slice(&t[..literal]);
        // `t` is now empty or starts with '%'.
        t = &t[literal..];
        match t.get(..2) {
            Some(b"%t") => out.extend_from_slice(category.as_bytes()),
            Some(b"%u") => percent_encode_into(out, url),
            Some(b"%%") => out.push(b'%'),
            Some(_) | None => {
                // A lone '%' (or the end) is copied as it is.
                out.extend_from_slice(&t[..t.len().min(1)]);
                t = &t[t.len().min(1)..];
                continue;
            }
        }
        t = &t[2..];
    }
}

/// RFC 3986's unreserved bytes (letters, digits, `-._~`): the bytes a
/// percent-encoded query value keeps as they are.
const UNRESERVED: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~');
        b += 1;
    }
    t
};

/// Appends `url` percent-encoded for a query string: [`UNRESERVED`] bytes as
/// they are, every other byte as `%XX`. Written into room made once (at
/// most three bytes per byte), not pushed byte by byte: a block answer's
/// cost is mostly this loop.
fn percent_encode_into(out: &mut Vec<u8>, url: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let start = out.len();
    out.resize(start + url.len() * 3, 0);
    let room = &mut out[start..];
    let mut n = 0;
    for &b in url {
        if UNRESERVED[usize::from(b)] {
            room[n] = b;
            n += 1;
        } else {
            room[n..n + 3].copy_from_slice(&[
                b'%',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]);
            n += 3;
        }
    }
    out.truncate(start + n);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(channel: Option<&[u8]>, kind: Kind, a: Answer<'_>) -> String {
        let mut out = Vec::new();
        write_answer(
            &mut out,
            channel,
            kind,
            "http://block.example/?c=%t&u=%u",
            a,
        );
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn acl_lines_with_channels_and_escaped_tokens() {
        let r = parse_line(
            b"7 http%3A//evil.example/a%20b evil.example",
            true,
            Kind::Acl,
            false,
        );
        assert_eq!(r.channel, Some(&b"7"[..]));
        let q = r.queries.unwrap();
        assert_eq!(q[0].as_ref(), b"http://evil.example/a b");
        assert_eq!(q[1].as_ref(), b"evil.example");
    }

    #[test]
    fn rewrite_lines_query_only_the_url() {
        let r = parse_line(
            b"0 http://evil.example/x 127.0.0.1/- - GET myip=127.0.0.1 myport=3128\r",
            true,
            Kind::Rewrite,
            false,
        );
        assert_eq!(r.channel, Some(&b"0"[..]));
        assert_eq!(
            r.queries.unwrap().as_slice(),
            [Cow::Borrowed(&b"http://evil.example/x"[..])]
        );
    }

    #[test]
    fn bad_lines_are_named() {
        assert_eq!(
            parse_line(b"", false, Kind::Acl, false).queries,
            Err(BadRequest::Empty)
        );
        assert_eq!(
            parse_line(b"", true, Kind::Acl, false).queries,
            Err(BadRequest::Empty)
        );
        let r = parse_line(b"12", true, Kind::Acl, false);
        assert_eq!(
            (r.channel, r.queries),
            (Some(&b"12"[..]), Err(BadRequest::Empty))
        );
        let r = parse_line(b"x1 http://a.example/", true, Kind::Acl, false);
        assert_eq!((r.channel, r.queries), (None, Err(BadRequest::BadChannel)));
        let r = parse_line(b"3 http://a.example/aaaa", true, Kind::Acl, true);
        assert_eq!(
            (r.channel, r.queries),
            (Some(&b"3"[..]), Err(BadRequest::TooLong))
        );
    }

    #[test]
    fn percent_decoding_keeps_broken_escapes() {
        assert_eq!(percent_decode(b"a%2").as_ref(), b"a%2");
        assert_eq!(percent_decode(b"%zz%41").as_ref(), b"%zzA");
        assert_eq!(percent_decode(b"%").as_ref(), b"%");
        assert_eq!(percent_decode(b"%41").as_ref(), b"A");
    }

    #[test]
    fn answers_are_squid_lines() {
        let listed = Answer::Listed {
            category: "adult",
            matched: b"evil.example/",
            query: b"http://evil.example/a?b=1",
        };
        assert_eq!(
            answer(Some(b"4"), Kind::Acl, listed),
            "4 OK tag=adult message=\"adult: evil.example/\"\n"
        );
        assert_eq!(
            answer(None, Kind::Rewrite, listed),
            "OK status=302 url=http://block.example/?c=adult&u=http%3A%2F%2Fevil.example%2Fa%3Fb%3D1\n"
        );
        assert_eq!(
            answer(Some(b"9"), Kind::Rewrite, Answer::NotListed),
            "9 ERR\n"
        );
        assert_eq!(
            answer(None, Kind::Acl, Answer::Unknown("redis \"down\"\n\\")),
            "BH message=\"redis \\\"down\\\"?\\\\\"\n"
        );
    }
}
