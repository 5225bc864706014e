//! The connection and keyspace commands: `PING`, `ECHO`, `QUIT`, `RESET`,
//! `HELLO`, `AUTH`, `SELECT`, `CLIENT`, `COMMAND`, `CONFIG`, `INFO`,
//! `DBSIZE`, `KEYS`, `SCAN`, `EXISTS`, `TYPE`, `DEL`/`UNLINK`, with Redis's
//! replies and error texts.

use std::sync::atomic::Ordering::Relaxed;

use super::glob::glob;
use super::{error_reply, lossy, parse_i64, upper, Parsed, Refusal};
use crate::metrics::Proto;
use crate::resp::codec::Out;
use crate::resp::session::Session;

/// Redis's answer to `AUTH` when no token is configured.
const NO_PASSWORD: &str = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?";
/// Redis's answer to a wrong token.
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// A connection or keyspace command.
pub(in crate::resp) enum Server<'a> {
    /// `PING [message]`.
    Ping(Option<&'a [u8]>),
    /// `ECHO message`.
    Echo(&'a [u8]),
    Quit,
    Reset,
    Hello(Hello<'a>),
    /// `AUTH [default] token`: the token, or none for another user.
    Auth(Option<&'a [u8]>),
    /// `SELECT 0` (the only database).
    Select,
    Client(Client<'a>),
    /// `COMMAND`, `COMMAND COUNT`, `COMMAND DOCS`: enough for redis-cli.
    Command(CommandInfo),
    /// `CONFIG GET pattern…`.
    ConfigGet(&'a [&'a [u8]]),
    Info,
    Dbsize,
    /// `KEYS pattern`.
    Keys(&'a [u8]),
    /// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]`: one pass.
    Scan(Option<&'a [u8]>),
    /// `EXISTS key…`.
    Exists(&'a [&'a [u8]]),
    /// `TYPE key`.
    Type(&'a [u8]),
    /// `DEL key…` / `UNLINK key…`.
    Del(&'a [&'a [u8]]),
}

/// `HELLO [protover [AUTH user token] [SETNAME name]]`.
pub(in crate::resp) struct Hello<'a> {
    proto: Option<u8>,
    /// The options, in order; a bad one ends them (Redis applies the ones
    /// before it).
    options: Vec<HelloOption<'a>>,
}

enum HelloOption<'a> {
    Auth { user: &'a [u8], token: &'a [u8] },
    SetName(&'a [u8]),
    Bad(&'a [u8]),
}

/// `CLIENT` subcommands.
pub(in crate::resp) enum Client<'a> {
    /// `SETINFO`, `NO-EVICT`, `NO-TOUCH`, `REPLY`: accepted, no effect.
    Ok,
    SetName(&'a [u8]),
    GetName,
    Id,
}

/// What `COMMAND` was asked.
pub(in crate::resp) enum CommandInfo {
    Count,
    Docs,
    List,
}

impl<'a> Server<'a> {
    /// Parses a connection or keyspace command; `None` if `name` is not one.
    pub(super) fn parse(name: &[u8], argv: &'a [&'a [u8]]) -> Option<Parsed<'a, Server<'a>>> {
        let argc = argv.len();
        let arity = || Err(Refusal::Arity(argv[0]));
        Some(match name {
            b"PING" => match argc {
                1 => Ok(Server::Ping(None)),
                2 => Ok(Server::Ping(Some(argv[1]))),
                _ => arity(),
            },
            b"ECHO" if argc == 2 => Ok(Server::Echo(argv[1])),
            b"QUIT" => Ok(Server::Quit),
            b"RESET" => Ok(Server::Reset),
            b"HELLO" => Hello::parse(argv).map(Server::Hello),
            b"AUTH" => match argc {
                2 => Ok(Server::Auth(Some(argv[1]))),
                3 if argv[1] == b"default" => Ok(Server::Auth(Some(argv[2]))),
                3 => Ok(Server::Auth(None)),
                _ => arity(),
            },
            b"SELECT" if argc == 2 => {
                if argv[1] == b"0" {
                    Ok(Server::Select)
                } else {
                    Err(Refusal::error("ERR DB index is out of range"))
                }
            }
            b"CLIENT" if argc >= 2 => match upper(argv[1]).as_slice() {
                b"SETINFO" | b"NO-EVICT" | b"NO-TOUCH" | b"REPLY" => Ok(Server::Client(Client::Ok)),
                b"SETNAME" if argc == 3 => Ok(Server::Client(Client::SetName(argv[2]))),
                b"GETNAME" => Ok(Server::Client(Client::GetName)),
                b"ID" => Ok(Server::Client(Client::Id)),
                _ => Err(Refusal::error(format!(
                    "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                    lossy(argv[1])
                ))),
            },
            b"COMMAND" => Ok(Server::Command(
                match argv.get(1).map(|a| upper(a)).as_deref() {
                    Some(b"COUNT") => CommandInfo::Count,
                    Some(b"DOCS") => CommandInfo::Docs,
                    _ => CommandInfo::List,
                },
            )),
            b"CONFIG" if argc >= 2 => match upper(argv[1]).as_slice() {
                b"GET" if argc >= 3 => Ok(Server::ConfigGet(&argv[2..])),
                b"GET" => Err(Refusal::Arity(b"config|get")),
                b"SET" | b"RESETSTAT" | b"REWRITE" => Err(Refusal::error(format!(
                    "ERR CONFIG {} is not supported: bloomgate's settings are the command-line options of `bloomgate serve`",
                    lossy(&upper(argv[1]))
                ))),
                _ => Err(Refusal::error(format!(
                    "ERR unknown subcommand '{}'. Try CONFIG HELP.",
                    lossy(argv[1])
                ))),
            },
            b"INFO" => Ok(Server::Info),
            b"DBSIZE" => Ok(Server::Dbsize),
            b"KEYS" if argc == 2 => Ok(Server::Keys(argv[1])),
            b"SCAN" if argc >= 2 => parse_scan(argv).map(Server::Scan),
            b"EXISTS" if argc >= 2 => Ok(Server::Exists(&argv[1..])),
            b"TYPE" if argc == 2 => Ok(Server::Type(argv[1])),
            b"DEL" | b"UNLINK" if argc >= 2 => Ok(Server::Del(&argv[1..])),
            b"ECHO" | b"SELECT" | b"CLIENT" | b"CONFIG" | b"KEYS" | b"SCAN" | b"EXISTS"
            | b"TYPE" | b"DEL" | b"UNLINK" => arity(),
            _ => return None,
        })
    }

    /// Applies the command.
    pub(super) fn apply(self, s: &mut Session, out: &mut Out) {
        match self {
            Server::Ping(None) => out.simple("PONG"),
            Server::Ping(Some(m)) | Server::Echo(m) => out.bulk(m),
            Server::Quit => {
                out.ok();
                s.quit = true;
            }
            Server::Reset => {
                out.proto = 2;
                s.authed = false;
                s.name = None;
                out.simple("RESET");
            }
            Server::Hello(h) => h.apply(s, out),
            Server::Auth(token) => {
                if !s.app.access.has_token() {
                    out.error(NO_PASSWORD);
                } else if token.is_some_and(|t| s.app.access.token_matches(t)) {
                    s.authed = true;
                    out.ok();
                } else {
                    out.error(WRONGPASS);
                }
            }
            Server::Select => out.ok(),
            Server::Client(Client::Ok) => out.ok(),
            Server::Client(Client::SetName(n)) => {
                s.name = Some(n.to_vec());
                out.ok()
            }
            Server::Client(Client::GetName) => match &s.name {
                Some(n) => out.bulk(n),
                None => out.null(),
            },
            Server::Client(Client::Id) => out.int(s.id as i64),
            Server::Command(CommandInfo::Count) => out.int(0),
            Server::Command(CommandInfo::Docs) => out.map(0),
            Server::Command(CommandInfo::List) => out.array(0),
            Server::ConfigGet(patterns) => config_get(s, patterns, out),
            Server::Info => info(s, out),
            Server::Dbsize => out.int(s.app.store.names().len() as i64),
            Server::Keys(pattern) => {
                let names: Vec<String> = s
                    .app
                    .store
                    .names()
                    .into_iter()
                    .filter(|n| glob(pattern, n.as_bytes()))
                    .collect();
                out.array(names.len());
                for n in names {
                    out.bulk(n.as_bytes());
                }
            }
            Server::Scan(pattern) => {
                let names: Vec<String> = s
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
            Server::Exists(keys) => {
                let n = keys
                    .iter()
                    .filter(|k| {
                        s.named(k).is_some()
                            || s.app.store.cf_has(&lossy(k))
                            || s.app.store.damaged_error(&lossy(k)).is_some()
                    })
                    .count();
                out.int(n as i64)
            }
            Server::Type(key) => {
                if s.named(key).is_some() {
                    out.simple("MBbloom--")
                } else if s.app.store.cf_has(&lossy(key)) {
                    out.simple("MBbloomCF")
                } else {
                    out.simple("none")
                }
            }
            Server::Del(keys) => {
                let mut n = 0;
                for k in keys {
                    match s.app.store.delete(&lossy(k)) {
                        Ok(true) => n += 1,
                        Ok(false) => {}
                        Err(e) => return out.error(&error_reply(&e)),
                    }
                }
                out.int(n)
            }
        }
    }
}

impl<'a> Hello<'a> {
    fn parse(argv: &'a [&'a [u8]]) -> Parsed<'a, Hello<'a>> {
        let mut i = 1;
        let mut proto = None;
        if let Some(v) = argv.get(1) {
            match parse_i64(v) {
                Some(2) => proto = Some(2),
                Some(3) => proto = Some(3),
                _ => return Err(Refusal::error("NOPROTO unsupported protocol version")),
            }
            i = 2;
        }
        let mut options = Vec::new();
        while i < argv.len() {
            match upper(argv[i]).as_slice() {
                b"AUTH" if i + 2 < argv.len() => {
                    options.push(HelloOption::Auth {
                        user: argv[i + 1],
                        token: argv[i + 2],
                    });
                    i += 3;
                }
                b"SETNAME" if i + 1 < argv.len() => {
                    options.push(HelloOption::SetName(argv[i + 1]));
                    i += 2;
                }
                _ => {
                    options.push(HelloOption::Bad(argv[i]));
                    break;
                }
            }
        }
        Ok(Hello { proto, options })
    }

    fn apply(self, s: &mut Session, out: &mut Out) {
        let proto = self.proto.unwrap_or(out.proto);
        for option in self.options {
            match option {
                HelloOption::Auth { user, token } => {
                    if !s.app.access.has_token() {
                        return out.error(NO_PASSWORD);
                    }
                    if user != b"default" || !s.app.access.token_matches(token) {
                        return out.error(WRONGPASS);
                    }
                    s.authed = true;
                }
                HelloOption::SetName(n) => s.name = Some(n.to_vec()),
                HelloOption::Bad(arg) => {
                    return out.error(&format!(
                        "ERR Syntax error in HELLO option '{}'",
                        lossy(arg)
                    ))
                }
            }
        }
        if s.app.access.check_read(s.authed).is_err() {
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
        out.int(s.id as i64);
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
}

/// `SCAN`'s options (checked before the cursor, as Redis does): the
/// `MATCH` pattern; `COUNT` and `TYPE` are accepted and ignored.
fn parse_scan<'a>(argv: &'a [&'a [u8]]) -> Parsed<'a, Option<&'a [u8]>> {
    let mut pattern = None;
    let mut i = 2;
    while i < argv.len() {
        match upper(argv[i]).as_slice() {
            b"MATCH" if i + 1 < argv.len() => {
                pattern = Some(argv[i + 1]);
                i += 2;
            }
            b"COUNT" | b"TYPE" if i + 1 < argv.len() => i += 2,
            _ => return Err(Refusal::error("ERR syntax error")),
        }
    }
    if parse_i64(argv[1]).is_none() {
        return Err(Refusal::error("ERR invalid cursor"));
    }
    Ok(pattern)
}

/// `INFO`: the sections clients look at (a verbatim string in RESP3).
fn info(s: &Session, out: &mut Out) {
    let names = s.app.store.names();
    let text = format!(
        "# Server\r\nredis_version:7.4.0\r\nbloomgate_version:{}\r\nredis_mode:standalone\r\nprocess_id:{}\r\n\r\n# Clients\r\nconnected_clients:{}\r\n\r\n# Modules\r\nmodule:name=bf,ver=20800,api=1,filters=0,usedby=[],using=[],options=[]\r\n\r\n# Keyspace\r\ndb0:keys={},expires=0,avg_ttl=0\r\n",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        s.app.metrics.connections[Proto::Resp as usize].load(Relaxed),
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

/// `CONFIG GET pattern…`: the settings that have a Redis name and a
/// real value here (what `redis-benchmark` and client libraries ask
/// for), matched as Redis matches them; others are not listed.
fn config_get(s: &Session, patterns: &[&[u8]], out: &mut Out) {
    let l = &s.app.limits;
    let local = !s.app.store.is_remote();
    // What is really accepted: the input budget caps a command.
    let command = l.max_command_bytes.min(s.app.input.limit());
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
