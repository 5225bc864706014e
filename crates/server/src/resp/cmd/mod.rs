//! The commands, in the shape of tokio's mini-redis: each command is a
//! type parsed from its frame ([`Command::parse`], the arguments only: no
//! connection, no store), then applied to the store through the
//! connection's [`Session`] (`apply`), writing its reply to [`Out`].
//!
//! | file | commands |
//! |---|---|
//! | `server` | the connection and keyspace commands (`PING`, `HELLO`, `AUTH`, `CONFIG`, `KEYS`, `DEL`, …) |
//! | `bf` | RedisBloom's `BF.*` commands |
//! | `cf` | RedisBloom's `CF.*` commands (cuckoo and counting filters) |
//! | `glob` | Redis's pattern matching, for `KEYS`, `SCAN` and `CONFIG GET` |
//!
//! Parsing is pure, so the order of the replies stays Redis's: a refusal
//! found while parsing ([`Refusal`]) is only sent after the checks that
//! Redis makes against the keyspace first (a damaged filter's name, a
//! `BF.*` command on a cuckoo filter's name, `CF.*` on a store in Redis),
//! which [`execute`] makes. Where RedisBloom looks the key up before it
//! parses an argument (`BF.SCANDUMP`'s iterator, `BF.INFO`'s field), the
//! command keeps the argument as sent and its `apply` parses it.
//!
//! Adding a command touches its family's file: its type, a line of its
//! family's `parse`, and its `apply`; [`classify`] names its access class
//! and timing kind.

mod bf;
mod cf;
mod glob;
mod server;

use std::borrow::Cow;

pub use glob::{glob, glob_reference};

pub(super) use bf::{add_replies, exists_replies};

use super::codec::Out;
use super::session::Session;
use crate::metrics::Op;
use crate::store::StoreError;

pub(super) fn upper(a: &[u8]) -> Vec<u8> {
    a.to_ascii_uppercase()
}

pub(super) fn lossy(a: &[u8]) -> String {
    String::from_utf8_lossy(a).into_owned()
}

pub(super) fn parse_i64(a: &[u8]) -> Option<i64> {
    std::str::from_utf8(a).ok()?.parse().ok()
}

pub(super) fn parse_f64(a: &[u8]) -> Option<f64> {
    let v: f64 = std::str::from_utf8(a).ok()?.trim().parse().ok()?;
    v.is_finite().then_some(v)
}

/// The Redis error reply to a store error: the one place where store errors
/// become RESP errors. A store that cannot answer now gets `TRYAGAIN`
/// (clients retry it); a write refused for a full disk says so and that
/// reads go on (the log's own errors say it already); a damaged filter gets
/// `DAMAGED` and the file and fault (redis-py raises it as a
/// `ResponseError` with the whole text).
pub(super) fn error_reply(e: &StoreError) -> String {
    match e {
        StoreError::NotFound(_) => "ERR not found".into(),
        StoreError::Exists(_) => "ERR item exists".into(),
        // RedisBloom's `CF.ADD` text, without the lengths.
        StoreError::TooLong { .. } => "ERR item is too long".into(),
        StoreError::Unavailable(_) => format!("TRYAGAIN {e}"),
        StoreError::Wal(_) => format!("ERR {e}"),
        StoreError::Damaged(_) => format!("DAMAGED {e}"),
        // Redis's own text past its `maxmemory`, which clients recognize.
        StoreError::OutOfMemory(_) => {
            "OOM command not allowed when used memory > 'maxmemory'.".into()
        }
        e if e.is_no_space() => {
            format!("ERR {e}; the disk is full: writes fail until space is freed, reads go on")
        }
        other => format!("ERR {other}"),
    }
}

/// Redis's reply to a command with the wrong number of arguments.
pub(super) fn wrong_arity(out: &mut Out, cmd: &[u8]) {
    out.error(&format!(
        "ERR wrong number of arguments for '{}' command",
        lossy(cmd).to_ascii_lowercase()
    ));
}

/// Why a frame is not a command that can be applied, found while parsing.
pub(super) enum Refusal<'a> {
    /// The wrong number of arguments for the command named so.
    Arity(&'a [u8]),
    /// Any other refusal: its error text.
    Error(Cow<'static, str>),
}

impl Refusal<'_> {
    fn error(text: impl Into<Cow<'static, str>>) -> Self {
        Refusal::Error(text.into())
    }

    fn reply(self, out: &mut Out) {
        match self {
            Refusal::Arity(name) => wrong_arity(out, name),
            Refusal::Error(text) => out.error(&text),
        }
    }
}

/// What [`Command::parse`] gives: a command to apply, or why not.
pub(super) type Parsed<'a, T> = Result<T, Refusal<'a>>;

/// A command, parsed from its frame; its arguments borrow the frame.
pub(super) enum Command<'a> {
    /// A connection or keyspace command.
    Server(server::Server<'a>),
    /// A `BF.*` command.
    Bf(bf::Bf<'a>),
    /// A `CF.*` command.
    Cf(cf::Cf<'a>),
}

impl<'a> Command<'a> {
    /// Parses the frame `argv` whose command name, upper-cased, is `name`.
    /// A command name no family knows is refused with Redis's `unknown
    /// command` text.
    pub(super) fn parse(name: &[u8], argv: &'a [&'a [u8]]) -> Parsed<'a, Command<'a>> {
        if let Some(c) = cf::Cf::parse(name, argv) {
            return c.map(Command::Cf);
        }
        if let Some(c) = bf::Bf::parse(name, argv) {
            return c.map(Command::Bf);
        }
        if let Some(c) = server::Server::parse(name, argv) {
            return c.map(Command::Server);
        }
        Err(unknown(argv))
    }

    /// Applies the command to the store, writing its reply.
    pub(super) fn apply(self, s: &mut Session, out: &mut Out) {
        match self {
            Command::Server(c) => c.apply(s, out),
            Command::Bf(c) => c.apply(s, out),
            Command::Cf(c) => c.apply(s, out),
        }
    }
}

/// Redis's reply to a command it does not know: its name and the start of
/// its arguments (128 bytes of each at most).
fn unknown<'a>(argv: &'a [&'a [u8]]) -> Refusal<'a> {
    let mut msg = format!(
        "ERR unknown command '{}', with args beginning with: ",
        lossy(&argv[0][..argv[0].len().min(128)])
    );
    let mut budget = 128usize;
    for a in &argv[1..] {
        if budget == 0 {
            break;
        }
        let a = &a[..a.len().min(budget)];
        budget -= a.len();
        msg.push_str(&format!("'{}' ", lossy(a)));
    }
    Refusal::error(msg)
}

/// What a command needs of the access policy.
#[derive(PartialEq, Eq)]
pub(super) enum Class {
    /// A connection command: needs the read token unless it is one of the
    /// commands that present it (`AUTH`, `HELLO`, `QUIT`, `RESET`).
    Conn,
    Read,
    Write,
}

/// The access class and the timing kind of the command named `name`
/// (upper-cased).
pub(super) fn classify(name: &[u8]) -> (Class, Op) {
    match name {
        b"BF.EXISTS" | b"BF.MEXISTS" | b"CF.EXISTS" | b"CF.MEXISTS" | b"CF.COUNT" => {
            (Class::Read, Op::Check)
        }
        b"BF.INFO" | b"BF.CARD" | b"BF.SCANDUMP" | b"BF.DEBUG" | b"EXISTS" | b"TYPE" | b"KEYS"
        | b"SCAN" | b"DBSIZE" | b"INFO" | b"CF.INFO" | b"CF.SCANDUMP" => (Class::Read, Op::Info),
        b"BF.ADD" | b"BF.MADD" | b"BF.INSERT" | b"CF.ADD" | b"CF.ADDNX" | b"CF.INSERT"
        | b"CF.INSERTNX" | b"CF.DEL" => (Class::Write, Op::Add),
        b"BF.RESERVE" | b"BF.LOADCHUNK" | b"DEL" | b"UNLINK" | b"CF.RESERVE" | b"CF.LOADCHUNK"
        | b"CF.COMPACT" => (Class::Write, Op::Admin),
        b"PING" | b"ECHO" | b"COMMAND" | b"CONFIG" | b"SELECT" => (Class::Read, Op::Other),
        _ => (Class::Conn, Op::Other),
    }
}

/// Parses the frame `argv` (its command name upper-cased in `name`) and
/// applies it, after the checks Redis makes against the keyspace before a
/// command's own: every command on a damaged filter's name gets the error
/// naming the file and the fault (not "absent", and no create over it); a
/// `CF.*` command on a store in Redis is not supported (once its arity is
/// right); a Bloom command on a cuckoo filter's name is `WRONGTYPE`
/// (RedisBloom: `BF.EXISTS` and `BF.MEXISTS` answer "absent", so they are
/// not refused).
pub(super) fn execute(s: &mut Session, name: &[u8], argv: &[&[u8]], out: &mut Out) {
    let argc = argv.len();
    if argc >= 2
        && s.app.store.has_damaged()
        && (name.starts_with(b"BF.") || name.starts_with(b"CF.") || name == b"TYPE")
    {
        if let Some(e) = s.app.store.damaged_error(&lossy(argv[1])) {
            return out.error(&error_reply(&e));
        }
    }
    let command = Command::parse(name, argv);
    if cf::Cf::knows(name) {
        if !matches!(command, Err(Refusal::Arity(_))) && s.app.store.is_remote() {
            return out.error(&error_reply(&StoreError::Unsupported(
                "cuckoo filters (CF.*) in Redis",
            )));
        }
    } else if argc >= 2 && bf::Bf::wrong_on_cuckoo(name) && s.app.store.cf_has(&lossy(argv[1])) {
        return out.error(cf::WRONGTYPE);
    }
    match command {
        Ok(c) => c.apply(s, out),
        Err(r) => r.reply(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_become_redis_errors() {
        let full = std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device");
        assert_eq!(
            error_reply(&StoreError::NotFound("f".into())),
            "ERR not found"
        );
        assert_eq!(
            error_reply(&StoreError::Unavailable("shard 3 of f".into())),
            "TRYAGAIN store unavailable: shard 3 of f"
        );
        assert_eq!(
            error_reply(&StoreError::io("f.live", full)),
            "ERR f.live: No space left on device; the disk is full: writes fail until space is freed, reads go on"
        );
        assert_eq!(
            error_reply(&StoreError::Unsupported("BF.SCANDUMP")),
            "ERR not supported by this store: BF.SCANDUMP"
        );
    }

    /// The reply a frame gets when it is refused while parsing, or `None`
    /// when it parses into a command.
    fn refusal(argv: &[&[u8]]) -> Option<String> {
        let name = upper(argv[0]);
        let mut out = Out {
            buf: Vec::new(),
            proto: 2,
        };
        Command::parse(&name, argv).err()?.reply(&mut out);
        Some(String::from_utf8(out.buf).unwrap())
    }

    /// Commands are parsed from their frame alone, with no connection and
    /// no store, and refused with Redis's and RedisBloom's texts.
    #[test]
    fn frames_parse_without_a_connection() {
        let args: [&[u8]; 3] = [b"bf.exists", b"f", b"x"];
        assert!(matches!(
            Command::parse(b"BF.EXISTS", &args),
            Ok(Command::Bf(bf::Bf::Exists { multi: false, .. }))
        ));
        let args: [&[u8]; 4] = [b"CF.INSERTNX", b"f", b"ITEMS", b"x"];
        assert!(matches!(
            Command::parse(b"CF.INSERTNX", &args),
            Ok(Command::Cf(cf::Cf::Add(_)))
        ));
        assert_eq!(refusal(&[b"ping"]), None);
        for (argv, reply) in [
            (
                &[&b"bf.add"[..], b"f"][..],
                "-ERR wrong number of arguments for 'bf.add' command\r\n",
            ),
            (
                &[&b"BF.RESERVE"[..], b"f", b"2", b"100"][..],
                "-ERR error rate must be in the range (0.000000, 1.000000)\r\n",
            ),
            (
                &[
                    &b"BF.RESERVE"[..],
                    b"f",
                    b"0.01",
                    b"100",
                    b"NONSCALING",
                    b"EXPANSION",
                    b"2",
                ][..],
                "-Nonscaling filters cannot expand\r\n",
            ),
            (
                &[&b"BF.LOADCHUNK"[..], b"f", b"x", b"data"][..],
                "-ERR Second argument must be numeric\r\n",
            ),
            (
                &[&b"CF.SCANDUMP"[..], b"f", b"-1"][..],
                "-Invalid position\r\n",
            ),
            (
                &[&b"CF.RESERVE"[..], b"f", b"100", b"BUCKETSIZE", b"0"][..],
                "-BUCKETSIZE: value must be in the range [1, 255]\r\n",
            ),
            (
                &[&b"config"[..], b"get"][..],
                "-ERR wrong number of arguments for 'config|get' command\r\n",
            ),
            (
                &[&b"SELECT"[..], b"1"][..],
                "-ERR DB index is out of range\r\n",
            ),
            (
                &[&b"HELLO"[..], b"4"][..],
                "-NOPROTO unsupported protocol version\r\n",
            ),
            (
                &[&b"nope"[..], b"a"][..],
                "-ERR unknown command 'nope', with args beginning with: 'a' \r\n",
            ),
        ] {
            assert_eq!(refusal(argv).as_deref(), Some(reply), "{argv:?}");
        }
    }
}
