//! The socketmap protocol's bytes, without a socket: netstrings
//! (`LEN:PAYLOAD,`, D. J. Bernstein's framing), the request inside one
//! (`NAME KEY`) and the replies (`OK data`, `NOTFOUND `, `TEMP reason`,
//! `PERM reason`), as Postfix's `socketmap_table(5)` defines them.
//!
//! Everything here is a pure function of a byte slice, so that the
//! connection loop (`socketmap/mod.rs`) only moves bytes, and the parser is
//! fuzzed (`fuzz/`, target `socketmap`) and property-tested on its own.
//!
//! # Limits
//!
//! A netstring announces its length before its payload; a client could
//! announce any number. The length is checked against the limit while its
//! digits arrive ([`parse`] stops at the first digit that takes it over),
//! so no buffer is ever sized from a number that was not range-checked.
//! [`MAX_NETSTRING`] is Postfix's own limit on a socketmap reply (100,000
//! bytes); a request is a map name and one lookup key, far smaller.
//!
//! After a framing error (a length that is not digits, over the limit, or a
//! payload not followed by `,`) the stream cannot be resynchronized: the
//! connection answers `PERM` and closes. A request that is framed but not
//! `NAME KEY` is answered `PERM` and the connection goes on.

use std::ops::Range;

/// The longest netstring payload read or written (Postfix's limit on a
/// socketmap reply, `socketmap_table(5)`).
pub const MAX_NETSTRING: usize = 100_000;

/// The most digits a length may have (leading zeros included).
const MAX_DIGITS: usize = 20;

/// What [`parse`] found at the start of a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A whole netstring: its payload's range in the buffer and how many
    /// bytes it took (header, payload and comma).
    Frame {
        /// Where the payload lies in the buffer.
        payload: Range<usize>,
        /// Bytes to drop from the front of the buffer.
        consumed: usize,
    },
    /// Not complete yet. `Some(n)`: the whole netstring is `n` bytes (its
    /// header has arrived and was checked); `None`: the header is still
    /// arriving.
    Need(Option<usize>),
}

/// Why a byte stream is not a netstring (the connection cannot go on).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NetstringError {
    /// The length is missing or has a byte other than a decimal digit.
    #[error("malformed netstring: the length must be decimal digits followed by ':'")]
    BadLength,
    /// The announced length is over the limit.
    #[error("netstring longer than {0} bytes")]
    TooLong(usize),
    /// The payload is not followed by `,`.
    #[error("malformed netstring: the payload is not followed by ','")]
    NoComma,
}

/// Parses the netstring at the start of `buf`, whose payload may be at most
/// `max` bytes.
pub fn parse(buf: &[u8], max: usize) -> Result<Parsed, NetstringError> {
    let mut len: usize = 0;
    let mut digits = 0;
    for (i, &b) in buf.iter().enumerate() {
        match b {
            b'0'..=b'9' => {
                len = len
                    .checked_mul(10)
                    .and_then(|l| l.checked_add(usize::from(b - b'0')))
                    .filter(|&l| l <= max)
                    .ok_or(NetstringError::TooLong(max))?;
                digits += 1;
                // Leading zeros do not grow the length, but they would grow
                // the header without end.
                if digits > MAX_DIGITS {
                    return Err(NetstringError::TooLong(max));
                }
            }
            b':' if digits > 0 => {
                let start = i + 1;
                let total = start + len + 1;
                if buf.len() < total {
                    return Ok(Parsed::Need(Some(total)));
                }
                if buf[start + len] != b',' {
                    return Err(NetstringError::NoComma);
                }
                return Ok(Parsed::Frame {
                    payload: start..start + len,
                    consumed: total,
                });
            }
            _ => return Err(NetstringError::BadLength),
        }
    }
    Ok(Parsed::Need(None))
}

/// Appends `payload` as one netstring.
pub fn encode(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(payload.len().to_string().as_bytes());
    out.push(b':');
    out.extend_from_slice(payload);
    out.push(b',');
}

/// A socketmap request: the map's name (the served filter's) and the key.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// The map name: what follows `socketmap:…:` in Postfix's table name.
    pub name: &'a str,
    /// The lookup key (any bytes but empty).
    pub key: &'a [u8],
}

/// Why a framed request is not `NAME KEY`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// No space between a name and a key.
    #[error("malformed request: expected 'NAME KEY'")]
    NoSpace,
    /// The name is empty or not UTF-8.
    #[error("malformed request: the map name is empty or not UTF-8")]
    BadName,
    /// The key is empty.
    #[error("malformed request: the key is empty")]
    EmptyKey,
}

/// Splits a request payload at its first space: `NAME KEY` (the key may
/// hold spaces of its own).
pub fn request(payload: &[u8]) -> Result<Request<'_>, RequestError> {
    let sp = payload
        .iter()
        .position(|&b| b == b' ')
        .ok_or(RequestError::NoSpace)?;
    let name = std::str::from_utf8(&payload[..sp]).map_err(|_| RequestError::BadName)?;
    if name.is_empty() {
        return Err(RequestError::BadName);
    }
    let key = &payload[sp + 1..];
    if key.is_empty() {
        return Err(RequestError::EmptyKey);
    }
    Ok(Request { name, key })
}

/// A socketmap reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `OK data`: the key is in the map; `data` is the table's value.
    Ok(&'a [u8]),
    /// `NOTFOUND `: the key is not in the map.
    NotFound,
    /// `TEMP reason`: the lookup failed and may succeed later.
    Temp(&'a str),
    /// `PERM reason`: the lookup failed and will fail again.
    Perm(&'a str),
}

/// Appends `reply` as one netstring. A reason or value that would take the
/// reply over [`MAX_NETSTRING`] is cut; control characters in a reason
/// (which Postfix would log) become `?`.
pub fn reply(out: &mut Vec<u8>, reply: Reply<'_>) {
    let (status, text): (&[u8], &[u8]) = match reply {
        Reply::Ok(d) => (b"OK ", d),
        Reply::NotFound => (b"NOTFOUND ", b""),
        Reply::Temp(r) => (b"TEMP ", r.as_bytes()),
        Reply::Perm(r) => (b"PERM ", r.as_bytes()),
    };
    let text = &text[..text.len().min(MAX_NETSTRING - status.len())];
    let mut payload = Vec::with_capacity(status.len() + text.len());
    payload.extend_from_slice(status);
    let reason = !matches!(reply, Reply::Ok(_));
    payload.extend(text.iter().map(|&b| {
        if reason && b.is_ascii_control() {
            b'?'
        } else {
            b
        }
    }));
    encode(out, &payload);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frames_of_the_protocol() {
        let buf = b"22:disposable a@evil.test,";
        let Ok(Parsed::Frame { payload, consumed }) = parse(buf, MAX_NETSTRING) else {
            panic!()
        };
        assert_eq!(consumed, buf.len());
        let r = request(&buf[payload]).unwrap();
        assert_eq!((r.name, r.key), ("disposable", &b"a@evil.test"[..]));
        assert_eq!(parse(b"", 10), Ok(Parsed::Need(None)));
        assert_eq!(parse(b"12", 100), Ok(Parsed::Need(None)));
        assert_eq!(parse(b"3:ab", 100), Ok(Parsed::Need(Some(6))));
        assert_eq!(parse(b"3:abc;", 100), Err(NetstringError::NoComma));
        assert_eq!(parse(b":abc,", 100), Err(NetstringError::BadLength));
        assert_eq!(parse(b"-1:", 100), Err(NetstringError::BadLength));
        assert_eq!(
            parse(b"GET / HTTP/1.1", 100),
            Err(NetstringError::BadLength)
        );
        assert_eq!(parse(b"101:", 100), Err(NetstringError::TooLong(100)));
        // Refused at the digit that takes the length over, before the ':'.
        assert_eq!(
            parse(b"999999999", 100_000),
            Err(NetstringError::TooLong(100_000))
        );
        assert_eq!(
            parse(b"99999999999999999999999999", usize::MAX),
            Err(NetstringError::TooLong(usize::MAX))
        );
        assert_eq!(parse(&[b'0'; 64], 10), Err(NetstringError::TooLong(10)));
        assert_eq!(
            parse(b"0:,", 10),
            Ok(Parsed::Frame {
                payload: 2..2,
                consumed: 3
            })
        );
    }

    #[test]
    fn requests_and_replies() {
        assert_eq!(request(b"nospace"), Err(RequestError::NoSpace));
        assert_eq!(request(b" key"), Err(RequestError::BadName));
        assert_eq!(request(b"\xff key"), Err(RequestError::BadName));
        assert_eq!(request(b"name "), Err(RequestError::EmptyKey));
        assert_eq!(request(b"n a b").unwrap().key, b"a b");
        let mut out = Vec::new();
        reply(&mut out, Reply::NotFound);
        reply(&mut out, Reply::Ok(b"REJECT listed"));
        reply(&mut out, Reply::Temp("store\r\ndown"));
        reply(&mut out, Reply::Perm(""));
        assert_eq!(
            out,
            b"9:NOTFOUND ,16:OK REJECT listed,16:TEMP store??down,5:PERM ,"
        );
        let mut big = Vec::new();
        reply(&mut big, Reply::Ok(&vec![b'x'; 200_000]));
        let Ok(Parsed::Frame { payload, .. }) = parse(&big, MAX_NETSTRING) else {
            panic!()
        };
        assert_eq!(payload.len(), MAX_NETSTRING);
    }

    proptest! {
        /// Any payload within the limit comes back whole, whatever the
        /// pieces the stream arrives in; a prefix is never a frame.
        #[test]
        fn round_trip_in_pieces(payload in proptest::collection::vec(any::<u8>(), 0..300), cut in 0usize..400) {
            let mut buf = Vec::new();
            encode(&mut buf, &payload);
            encode(&mut buf, b"next");
            let one = buf.len() - 7;
            let Ok(Parsed::Frame { payload: r, consumed }) = parse(&buf, 300) else {
                panic!("not a frame")
            };
            prop_assert_eq!(&buf[r], &payload[..]);
            prop_assert_eq!(consumed, one);
            let cut = cut.min(one - 1);
            match parse(&buf[..cut], 300) {
                Ok(Parsed::Need(Some(n))) => prop_assert_eq!(n, one),
                Ok(Parsed::Need(None)) => {}
                other => panic!("a prefix gave {other:?}"),
            }
        }

        /// Arbitrary bytes: no panic; a frame lies inside the buffer and
        /// within the limit; a promised size is over what is there.
        #[test]
        fn arbitrary_bytes(buf in proptest::collection::vec(any::<u8>(), 0..64), max in 0usize..40) {
            match parse(&buf, max) {
                Ok(Parsed::Frame { payload, consumed }) => {
                    prop_assert!(payload.end < consumed && consumed <= buf.len());
                    prop_assert!(payload.len() <= max);
                    prop_assert_eq!(buf[consumed - 1], b',');
                }
                Ok(Parsed::Need(Some(n))) => prop_assert!(n > buf.len() && n <= max + 22),
                Ok(Parsed::Need(None)) | Err(_) => {}
            }
        }
    }
}
