//! Command dispatch (with the access check and per-kind timing), and the
//! connection and keyspace commands: `PING`, `ECHO`, `HELLO`, `AUTH`,
//! `SELECT`, `CLIENT`, `COMMAND`, `CONFIG`, `INFO`, `DBSIZE`, `KEYS`,
//! `SCAN`, `EXISTS`, `TYPE`, `DEL`/`UNLINK`. The `BF.*` commands are in
//! `bf`.

use std::sync::atomic::Ordering::Relaxed;

use super::codec::Out;
use super::conn::Conn;
use crate::metrics::Proto;
use crate::store::{Filter, FilterSpec, StoreError};

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

/// Glob matching as Redis's `KEYS` and `SCAN MATCH` do (`stringmatchlen`):
/// `*` any run, `?` any byte, `[abc]`, `[^abc]`, `[a-z]` (reversed ranges
/// swapped, `\` escaping inside), `\x` a literal `x`; a `[` without its
/// `]` takes the rest of the pattern as its class.
///
/// Redis's matcher recursed at every `*`, which made `*a*a*a*a*a*b` against
/// a long run of `a`s exponential (CVE-2022-36021, 40 s for a 200-byte
/// name here); Redis then cut the recursion short. This one is iterative:
/// every token but `*` consumes exactly one byte, so on a mismatch only
/// the last `*` needs to take one more byte (an earlier `*` taking more
/// could only leave less to the tokens after the last one), which bounds
/// the work by `pattern.len() × name.len()` token steps (a class costs its
/// length). [`glob_reference`] is the recursive definition it is tested
/// against.
pub fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    // The last `*` seen: the pattern position after it, and the name
    // position it has been tried up to.
    let mut star: Option<(usize, usize)> = None;
    loop {
        if pi < p.len() && p[pi] == b'*' {
            while pi < p.len() && p[pi] == b'*' {
                pi += 1;
            }
            if pi == p.len() {
                return true;
            }
            star = Some((pi, si));
            continue;
        }
        if si == s.len() {
            // Only stars may be left (handled above): Redis's trailing `*`s.
            return pi == p.len();
        }
        if pi < p.len() {
            if let Some(next) = token_matches(p, pi, s[si]) {
                pi = next;
                si += 1;
                continue;
            }
        }
        // Mismatch (or pattern done with name left): the last `*` takes one
        // more byte, if there was one.
        match star {
            Some((after, from)) if from < s.len() => {
                star = Some((after, from + 1));
                pi = after;
                si = from + 1;
            }
            _ => return false,
        }
    }
}

/// If the single-byte token at `p[i]` (not `*`) matches `c`, the pattern
/// position after it.
fn token_matches(p: &[u8], i: usize, c: u8) -> Option<usize> {
    match p[i] {
        b'?' => Some(i + 1),
        b'[' => {
            let (hit, next) = class(p, i + 1, c);
            hit.then_some(next)
        }
        b'\\' if i + 1 < p.len() => (p[i + 1] == c).then_some(i + 2),
        x => (x == c).then_some(i + 1),
    }
}

/// A `[...]` class whose body starts at `p[i]`: whether `c` is in it, and
/// the pattern position after it (Redis's parsing, quirks included).
fn class(p: &[u8], mut i: usize, c: u8) -> (bool, usize) {
    let not = p.get(i) == Some(&b'^');
    if not {
        i += 1;
    }
    let mut hit = false;
    loop {
        if p.get(i) == Some(&b'\\') && i + 1 < p.len() {
            i += 1;
            hit |= p[i] == c;
        } else if p.get(i) == Some(&b']') {
            break;
        } else if i >= p.len() {
            // Unterminated: the class ends with the pattern.
            return (hit != not, p.len());
        } else if i + 2 < p.len() && p[i + 1] == b'-' {
            let (a, b) = (p[i].min(p[i + 2]), p[i].max(p[i + 2]));
            hit |= (a..=b).contains(&c);
            i += 2;
        } else {
            hit |= p[i] == c;
        }
        i += 1;
    }
    (hit != not, i + 1)
}

/// Redis's `stringmatchlen`, recursive at every `*` as Redis wrote it
/// (exponential on some patterns): the definition [`glob`] is tested
/// against, on small inputs.
pub fn glob_reference(p: &[u8], s: &[u8]) -> bool {
    if p.is_empty() {
        return s.is_empty();
    }
    if p[0] == b'*' {
        return (0..=s.len()).any(|k| glob_reference(&p[1..], &s[k..]));
    }
    if s.is_empty() {
        return false;
    }
    let next = match p[0] {
        b'?' => Some(1),
        b'[' => {
            let (hit, next) = class(p, 1, s[0]);
            hit.then_some(next)
        }
        b'\\' if p.len() > 1 => (p[1] == s[0]).then_some(2),
        x => (x == s[0]).then_some(1),
    };
    next.is_some_and(|n| glob_reference(&p[n..], &s[1..]))
}

impl Conn {
    pub(super) fn wrong_arity(out: &mut Out, cmd: &[u8]) {
        out.error(&format!(
            "ERR wrong number of arguments for '{}' command",
            lossy(cmd).to_ascii_lowercase()
        ));
    }

    pub(super) fn dispatch(&mut self, cmd: &[u8], argv: &[&[u8]], out: &mut Out) {
        let argc = argv.len();
        // Every command on a damaged filter's name (its files failed to
        // load) gets the error naming the file and the fault: not "absent",
        // and no create over it.
        if argc >= 2
            && self.app.store.has_damaged()
            && (cmd.starts_with(b"BF.") || cmd.starts_with(b"CF.") || cmd == b"TYPE")
        {
            if let Some(e) = self.app.store.damaged_error(&lossy(argv[1])) {
                return out.error(&error_reply(&e));
            }
        }
        if cmd.starts_with(b"CF.") && self.cf_dispatch(cmd, argv, out) {
            return;
        }
        // A Bloom command on a cuckoo filter (RedisBloom: BF.EXISTS and
        // BF.MEXISTS answer "absent", the others WRONGTYPE).
        if argc >= 2
            && matches!(
                cmd,
                b"BF.RESERVE"
                    | b"BF.ADD"
                    | b"BF.MADD"
                    | b"BF.INSERT"
                    | b"BF.INFO"
                    | b"BF.CARD"
                    | b"BF.SCANDUMP"
                    | b"BF.LOADCHUNK"
                    | b"BF.DEBUG"
            )
            && self.app.store.cf_has(&lossy(argv[1]))
        {
            return out.error(super::cf::WRONGTYPE);
        }
        match cmd {
            b"PING" => match argc {
                1 => out.simple("PONG"),
                2 => out.bulk(argv[1]),
                _ => Self::wrong_arity(out, argv[0]),
            },
            b"ECHO" if argc == 2 => out.bulk(argv[1]),
            b"QUIT" => {
                out.ok();
                self.quit = true;
            }
            b"RESET" => {
                out.proto = 2;
                self.authed = false;
                self.name = None;
                out.simple("RESET");
            }
            b"HELLO" => self.hello(argv, out),
            b"AUTH" => {
                let token = match argc {
                    2 => Some(argv[1]),
                    3 if argv[1] == b"default" => Some(argv[2]),
                    3 => None,
                    _ => return Self::wrong_arity(out, argv[0]),
                };
                if !self.app.access.has_token() {
                    out.error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
                } else if token.is_some_and(|t| self.app.access.token_matches(t)) {
                    self.authed = true;
                    out.ok();
                } else {
                    out.error("WRONGPASS invalid username-password pair or user is disabled.");
                }
            }
            b"SELECT" if argc == 2 => {
                if argv[1] == b"0" {
                    out.ok()
                } else {
                    out.error("ERR DB index is out of range")
                }
            }
            b"CLIENT" if argc >= 2 => match upper(argv[1]).as_slice() {
                b"SETINFO" | b"NO-EVICT" | b"NO-TOUCH" | b"REPLY" => out.ok(),
                b"SETNAME" if argc == 3 => {
                    self.name = Some(argv[2].to_vec());
                    out.ok()
                }
                b"GETNAME" => match &self.name {
                    Some(n) => {
                        let n = n.clone();
                        out.bulk(&n)
                    }
                    None => out.null(),
                },
                b"ID" => out.int(self.id as i64),
                _ => out.error(&format!(
                    "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                    lossy(argv[1])
                )),
            },
            b"COMMAND" => {
                // Enough for redis-cli: no command table (it falls back to
                // plain behaviour), a count, empty docs.
                match argv.get(1).map(|a| upper(a)).as_deref() {
                    Some(b"COUNT") => out.int(0),
                    Some(b"DOCS") => out.map(0),
                    _ => out.array(0),
                }
            }
            b"CONFIG" if argc >= 2 => match upper(argv[1]).as_slice() {
                b"GET" if argc >= 3 => self.config_get(&argv[2..], out),
                b"GET" => Self::wrong_arity(out, b"config|get"),
                b"SET" | b"RESETSTAT" | b"REWRITE" => out.error(&format!(
                    "ERR CONFIG {} is not supported: bloomgate's settings are the command-line options of `bloomgate serve`",
                    lossy(&upper(argv[1]))
                )),
                _ => out.error(&format!(
                    "ERR unknown subcommand '{}'. Try CONFIG HELP.",
                    lossy(argv[1])
                )),
            },
            b"INFO" => {
                let names = self.app.store.names();
                let text = format!(
                    "# Server\r\nredis_version:7.4.0\r\nbloomgate_version:{}\r\nredis_mode:standalone\r\nprocess_id:{}\r\n\r\n# Clients\r\nconnected_clients:{}\r\n\r\n# Modules\r\nmodule:name=bf,ver=20800,api=1,filters=0,usedby=[],using=[],options=[]\r\n\r\n# Keyspace\r\ndb0:keys={},expires=0,avg_ttl=0\r\n",
                    env!("CARGO_PKG_VERSION"),
                    std::process::id(),
                    self.app.metrics.connections[Proto::Resp as usize].load(Relaxed),
                    names.len()
                );
                if out.proto >= 3 {
                    // Verbatim string.
                    let body = format!("txt:{text}");
                    out.buf
                        .extend_from_slice(format!("={}\r\n{}\r\n", body.len(), body).as_bytes());
                } else {
                    out.bulk(text.as_bytes());
                }
            }
            b"DBSIZE" => out.int(self.app.store.names().len() as i64),
            b"KEYS" if argc == 2 => {
                let names: Vec<String> = self
                    .app
                    .store
                    .names()
                    .into_iter()
                    .filter(|n| glob(argv[1], n.as_bytes()))
                    .collect();
                out.array(names.len());
                for n in names {
                    out.bulk(n.as_bytes());
                }
            }
            b"SCAN" if argc >= 2 => self.scan(argv, out),
            b"EXISTS" if argc >= 2 => {
                let n = argv[1..]
                    .iter()
                    .filter(|k| {
                        self.named(k).is_some()
                            || self.app.store.cf_has(&lossy(k))
                            || self.app.store.damaged_error(&lossy(k)).is_some()
                    })
                    .count();
                out.int(n as i64)
            }
            b"TYPE" if argc == 2 => {
                if self.named(argv[1]).is_some() {
                    out.simple("MBbloom--")
                } else if self.app.store.cf_has(&lossy(argv[1])) {
                    out.simple("MBbloomCF")
                } else {
                    out.simple("none")
                }
            }
            b"DEL" | b"UNLINK" if argc >= 2 => {
                let mut n = 0;
                for k in &argv[1..] {
                    match self.app.store.delete(&lossy(k)) {
                        Ok(true) => n += 1,
                        Ok(false) => {}
                        Err(e) => return out.error(&error_reply(&e)),
                    }
                }
                out.int(n)
            }
            b"BF.RESERVE" => self.reserve(argv, out),
            b"BF.ADD" if argc == 3 => self.add(
                argv[1],
                &argv[2..],
                false,
                Some(FilterSpec::redis_default()),
                out,
            ),
            b"BF.MADD" if argc >= 3 => self.add(
                argv[1],
                &argv[2..],
                true,
                Some(FilterSpec::redis_default()),
                out,
            ),
            b"BF.INSERT" => self.insert(argv, out),
            b"BF.EXISTS" if argc == 3 => self.exists(argv[1], &argv[2..], false, out),
            b"BF.MEXISTS" if argc >= 3 => self.exists(argv[1], &argv[2..], true, out),
            b"BF.INFO" if argc == 2 || argc == 3 => self.info(argv, out),
            b"BF.CARD" if argc == 2 => self.card(argv[1], out),
            b"BF.SCANDUMP" if argc == 3 => self.scandump(argv, out),
            b"BF.LOADCHUNK" if argc == 4 => self.loadchunk(argv, out),
            b"BF.DEBUG" if argc == 2 => self.debug(argv[1], out),
            b"ECHO" | b"SELECT" | b"CLIENT" | b"CONFIG" | b"KEYS" | b"SCAN" | b"EXISTS"
            | b"TYPE" | b"DEL" | b"UNLINK" | b"BF.ADD" | b"BF.MADD" | b"BF.EXISTS"
            | b"BF.MEXISTS" | b"BF.INFO" | b"BF.CARD" | b"BF.SCANDUMP" | b"BF.LOADCHUNK"
            | b"BF.DEBUG" => Self::wrong_arity(out, argv[0]),
            _ => {
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
                out.error(&msg)
            }
        }
    }

    pub(super) fn named(&self, key: &[u8]) -> Option<Filter> {
        std::str::from_utf8(key)
            .ok()
            .and_then(|k| self.app.store.get(k))
    }

    pub(super) fn hello(&mut self, argv: &[&[u8]], out: &mut Out) {
        let mut i = 1;
        let mut proto = out.proto;
        if let Some(v) = argv.get(1) {
            match parse_i64(v) {
                Some(2) => proto = 2,
                Some(3) => proto = 3,
                _ => return out.error("NOPROTO unsupported protocol version"),
            }
            i = 2;
        }
        while i < argv.len() {
            match upper(argv[i]).as_slice() {
                b"AUTH" if i + 2 < argv.len() => {
                    if !self.app.access.has_token() {
                        return out.error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
                    }
                    if argv[i + 1] != b"default" || !self.app.access.token_matches(argv[i + 2]) {
                        return out.error(
                            "WRONGPASS invalid username-password pair or user is disabled.",
                        );
                    }
                    self.authed = true;
                    i += 3;
                }
                b"SETNAME" if i + 1 < argv.len() => {
                    self.name = Some(argv[i + 1].to_vec());
                    i += 2;
                }
                _ => {
                    return out.error(&format!(
                        "ERR Syntax error in HELLO option '{}'",
                        lossy(argv[i])
                    ))
                }
            }
        }
        if self.app.access.check_read(self.authed).is_err() {
            return out.error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
        }
        out.proto = proto;
        out.map(7);
        out.bulk(b"server");
        out.bulk(b"redis");
        out.bulk(b"version");
        out.bulk(b"7.4.0");
        out.bulk(b"proto");
        out.int(proto as i64);
        out.bulk(b"id");
        out.int(self.id as i64);
        out.bulk(b"mode");
        out.bulk(b"standalone");
        out.bulk(b"role");
        out.bulk(b"master");
        out.bulk(b"modules");
        out.array(1);
        out.map(2);
        out.bulk(b"name");
        out.bulk(b"bf");
        out.bulk(b"ver");
        out.int(20800);
    }

    /// `CONFIG GET pattern…`: the settings that have a Redis name and a
    /// real value here (what `redis-benchmark` and client libraries ask
    /// for), matched as Redis matches them; others are not listed.
    pub(super) fn config_get(&mut self, patterns: &[&[u8]], out: &mut Out) {
        let l = &self.app.limits;
        let local = !self.app.store.is_remote();
        // What is really accepted: the input budget caps a command.
        let command = l.max_command_bytes.min(self.app.input.limit());
        let bulk = l.max_bulk_bytes.min(command);
        let table: [(&str, String); 9] = [
            ("maxclients", l.max_connections.to_string()),
            ("timeout", l.idle_timeout.as_secs().to_string()),
            ("proto-max-bulk-len", bulk.to_string()),
            ("client-query-buffer-limit", command.to_string()),
            ("maxmemory-clients", l.max_input_bytes.to_string()),
            ("databases", "1".into()),
            // No RDB snapshots; adds are logged and fsynced before the
            // reply (the local store's write-ahead log).
            ("save", String::new()),
            ("appendonly", if local { "yes" } else { "no" }.into()),
            ("appendfsync", if local { "always" } else { "no" }.into()),
        ];
        let hits: Vec<&(&str, String)> = table
            .iter()
            .filter(|(name, _)| {
                patterns
                    .iter()
                    .any(|p| glob(&p.to_ascii_lowercase(), name.as_bytes()))
            })
            .collect();
        out.map(hits.len());
        for (name, value) in hits {
            out.bulk(name.as_bytes());
            out.bulk(value.as_bytes());
        }
    }

    pub(super) fn scan(&mut self, argv: &[&[u8]], out: &mut Out) {
        let mut pattern: Option<&[u8]> = None;
        let mut i = 2;
        while i < argv.len() {
            match upper(argv[i]).as_slice() {
                b"MATCH" if i + 1 < argv.len() => {
                    pattern = Some(argv[i + 1]);
                    i += 2;
                }
                b"COUNT" | b"TYPE" if i + 1 < argv.len() => i += 2,
                _ => return out.error("ERR syntax error"),
            }
        }
        if parse_i64(argv[1]).is_none() {
            return out.error("ERR invalid cursor");
        }
        let names: Vec<String> = self
            .app
            .store
            .names()
            .into_iter()
            .filter(|n| match pattern {
                None => true,
                Some(p) => glob(p, n.as_bytes()),
            })
            .collect();
        out.array(2);
        out.bulk(b"0");
        out.array(names.len());
        for n in names {
            out.bulk(n.as_bytes());
        }
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

    #[test]
    fn globbing() {
        assert!(glob(b"*", b"abc"));
        assert!(glob(b"a?c", b"abc"));
        assert!(glob(b"a[b-d]c", b"acc"));
        assert!(!glob(b"a[^b]c", b"abc"));
        assert!(glob(b"bf:*", b"bf:1"));
        assert!(!glob(b"bf:*", b"x"));
        // Redis's quirks: reversed ranges, escapes in and out of classes,
        // an unterminated class, a trailing backslash.
        assert!(glob(b"[d-b]", b"c"));
        assert!(glob(b"[\\]]x", b"]x"));
        assert!(glob(b"a\\*", b"a*") && !glob(b"a\\*", b"ab"));
        assert!(glob(b"a[bc", b"ac") && !glob(b"a[bc", b"ad"));
        assert!(glob(b"a\\", b"a\\"));
        assert!(glob(b"[]a", b"a") == glob_reference(b"[]a", b"a"));
    }

    /// The patterns that took seconds (and then minutes) against a name of
    /// 200 `a`s answer at once, and right.
    #[test]
    fn hostile_patterns_are_linear() {
        let name = vec![b'a'; 200];
        let t = std::time::Instant::now();
        for stars in 1..=40 {
            let mut p = b"*a".repeat(stars);
            p.push(b'b');
            assert!(!glob(&p, &name));
            p.pop();
            assert!(glob(&p, &name));
        }
        let long = b"*a".repeat(5000);
        assert!(!glob(&long, &name));
        assert!(t.elapsed() < std::time::Duration::from_secs(10));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]
        /// The iterative matcher agrees with the recursive definition.
        #[test]
        fn glob_agrees_with_the_reference(
            p in proptest::collection::vec(proptest::sample::select(b"ab*?[]^-\\".to_vec()), 0..10),
            s in proptest::collection::vec(proptest::sample::select(b"ab]-*\\".to_vec()), 0..10),
        ) {
            proptest::prop_assert_eq!(glob(&p, &s), glob_reference(&p, &s));
        }
    }
}
