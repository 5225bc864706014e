//! Postfix's `socketmap` lookup tables on `bloomgate serve --socketmap
//! ADDR` (TCP `127.0.0.1:PORT`, or `unix:/path`): every served filter is a
//! map of that name, so `check_sender_access
//! socketmap:inet:127.0.0.1:PORT:disposable` asks the filter `disposable`
//! about each sender address (`socketmap_table(5)`; README, "Rejecting mail
//! from listed domains with Postfix").
//!
//! A request `NAME KEY` (one netstring, [`netstring`]) is answered:
//!
//! * `OK VALUE` when the filter says the key is listed (and not
//!   whitelisted). VALUE is `--socketmap-reply`'s template
//!   ([`DEFAULT_REPLY`]: an access(5) action, `REJECT listed in NAME
//!   (MATCHED)`), with `{filter}`, `{matched}` and `{key}` replaced;
//! * `NOTFOUND ` when it is not listed, and for a key that cannot be a key
//!   of the filter's kind (`user@` for a `host` filter: Postfix's access
//!   lookups send forms that a list of that kind cannot hold, and an error
//!   there would fail every message);
//! * `TEMP reason` when the filter cannot tell (a damaged filter, a store
//!   that cannot be reached, the server's input budget spent, too many
//!   connections): Postfix defers the message (4xx), it never passes it;
//! * `PERM reason` for what will fail again: a malformed request, a map
//!   name that is no served filter, a key over `--max-item-bytes`. After a
//!   framing error (a length that is not digits or over 100,000 bytes, a
//!   missing `,`) the connection closes, as its stream cannot be resynced.
//!
//! Connections are bounded as the RESP listener's are: at most
//! `--max-connections`, each closed when idle for `--idle-secs` or when a
//! started request does not arrive whole within `--request-secs`; a long
//! request holds its share of the input budget while it arrives. A hostile
//! client is cut off without holding up the others (one task each).
//!
//! Socketmap clients cannot present a token: the listener serves only when
//! reads are open (no `--token-file`, or `--open-reads`), and a unix socket
//! is then made connectable by every local user (mode 0666), as the
//! loopback listeners are; restrict it with its directory's permissions.

pub mod netstring;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Semaphore;
use tokio::time::{timeout_at, Instant};

use crate::ask::{ask, Asked};
use crate::store::StoreError;
use crate::App;
use netstring::{Parsed, Reply, MAX_NETSTRING};

/// The `OK` value of a listed key unless `--socketmap-reply` says otherwise:
/// an access(5) action, so that `check_*_access` rejects with this text.
pub const DEFAULT_REPLY: &str = "REJECT listed in {filter} ({matched})";

/// Where the socketmap listener listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SocketmapAddr {
    /// A TCP address (`127.0.0.1:PORT`; `inet:` in front is taken too).
    Tcp(SocketAddr),
    /// A unix socket's path (`unix:/path`).
    Unix(PathBuf),
}

impl std::str::FromStr for SocketmapAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a path, e.g. unix:/run/bloomgate/socketmap".into());
            }
            return Ok(SocketmapAddr::Unix(PathBuf::from(path)));
        }
        let tcp = s.strip_prefix("inet:").unwrap_or(s);
        tcp.parse().map(SocketmapAddr::Tcp).map_err(|_| {
            format!("{s:?} is not a socketmap address like 127.0.0.1:8081 or unix:/path/socket")
        })
    }
}

impl std::fmt::Display for SocketmapAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SocketmapAddr::Tcp(a) => write!(f, "inet:{a}"),
            SocketmapAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// Checks a `--socketmap-reply` template: one line of printable text, at
/// most 1,000 bytes before its fields are filled in.
pub fn check_reply_template(t: &str) -> Result<(), String> {
    if t.trim().is_empty() || t.len() > 1000 || t.bytes().any(|b| b.is_ascii_control()) {
        return Err("the socketmap reply must be one line of 1 to 1000 printable bytes".into());
    }
    Ok(())
}

fn render(template: &str, filter: &str, matched: &str, key: &[u8]) -> Vec<u8> {
    let printable = |s: &str| s.replace(|c: char| c.is_control(), "?");
    template
        .replace("{filter}", filter)
        .replace("{matched}", &printable(matched))
        .replace("{key}", &printable(&String::from_utf8_lossy(key)))
        .into_bytes()
}

/// A bound socketmap listener.
pub enum Listener {
    /// On TCP.
    Tcp(tokio::net::TcpListener),
    /// On a unix socket (removed when the listener stops).
    Unix(tokio::net::UnixListener, PathBuf),
}

impl Listener {
    /// Binds `addr`. A unix socket's path is taken over if no server
    /// answers on it (a stale socket of a stopped server), refused if one
    /// does; the socket is made connectable by every local user.
    pub async fn bind(addr: &SocketmapAddr) -> std::io::Result<Listener> {
        match addr {
            SocketmapAddr::Tcp(a) => Ok(Listener::Tcp(tokio::net::TcpListener::bind(a).await?)),
            SocketmapAddr::Unix(path) => {
                use std::os::unix::fs::{FileTypeExt, PermissionsExt};
                if let Ok(m) = std::fs::symlink_metadata(path) {
                    if !m.file_type().is_socket() {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::AlreadyExists,
                            "the path exists and is not a socket",
                        ));
                    }
                    if std::os::unix::net::UnixStream::connect(path).is_ok() {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::AddrInUse,
                            "a server answers on this socket",
                        ));
                    }
                    std::fs::remove_file(path)?;
                }
                let l = tokio::net::UnixListener::bind(path)?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
                Ok(Listener::Unix(l, path.clone()))
            }
        }
    }

    /// What it listens on (a TCP port resolved).
    pub fn addr(&self) -> std::io::Result<SocketmapAddr> {
        Ok(match self {
            Listener::Tcp(l) => SocketmapAddr::Tcp(l.local_addr()?),
            Listener::Unix(_, p) => SocketmapAddr::Unix(p.clone()),
        })
    }
}

/// Accepts socketmap connections until `stop` turns true; `reply` is the
/// `OK` value's template (checked by [`check_reply_template`]).
pub async fn serve(
    listener: Listener,
    app: Arc<App>,
    reply: String,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let sem = Arc::new(Semaphore::new(app.limits.max_connections));
    let reply: Arc<str> = reply.into();
    loop {
        let accepted = tokio::select! {
            a = accept(&listener) => a,
            _ = stop.changed() => break,
        };
        let Some(stream) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let Ok(permit) = sem.clone().try_acquire_owned() else {
            tokio::spawn(async move {
                let mut out = Vec::new();
                netstring::reply(&mut out, Reply::Temp("too many connections"));
                let mut stream = stream;
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&out)).await;
            });
            continue;
        };
        let (app, reply) = (app.clone(), reply.clone());
        tokio::spawn(async move {
            connection(stream, &app, &reply).await;
            drop(permit);
        });
    }
    if let Listener::Unix(_, path) = &listener {
        let _ = std::fs::remove_file(path);
    }
}

/// A TCP or unix connection.
enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

async fn accept(l: &Listener) -> Option<Stream> {
    match l {
        Listener::Tcp(l) => l.accept().await.ok().map(|(s, _)| {
            let _ = s.set_nodelay(true);
            Stream::Tcp(s)
        }),
        Listener::Unix(l, _) => l.accept().await.ok().map(|(s, _)| Stream::Unix(s)),
    }
}

impl Stream {
    async fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(b).await,
            Stream::Unix(s) => s.write_all(b).await,
        }
    }
}

async fn connection(stream: Stream, app: &Arc<App>, reply: &str) {
    match stream {
        Stream::Tcp(s) => session(s, app, reply).await,
        Stream::Unix(s) => session(s, app, reply).await,
    }
}

/// Requests up to this size are read without reserving input budget.
const SMALL: usize = 4096;

/// One connection: answers its requests in order until it closes, idles,
/// drips, or breaks the framing.
async fn session<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, app: &Arc<App>, reply: &str) {
    let limits = &app.limits;
    // Socketmap clients never present the token: with one configured they
    // are anonymous, and buffer from the anonymous clients' budget.
    let budget = if app.access.has_token() {
        &app.input_unauth
    } else {
        &app.input
    };
    let mut buf: Vec<u8> = Vec::with_capacity(512);
    let mut out: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; SMALL];
    let mut reserved = None;
    let mut started: Option<Instant> = None;
    loop {
        let mut close = false;
        loop {
            match netstring::parse(&buf, MAX_NETSTRING) {
                Ok(Parsed::Frame { payload, consumed }) => {
                    answer(app, reply, &buf[payload], &mut out).await;
                    buf.drain(..consumed);
                    started = None;
                    reserved = None;
                }
                Ok(Parsed::Need(total)) => {
                    if let Some(n) = total.filter(|&n| n > SMALL) {
                        if reserved.is_none() {
                            reserved = budget.reserve(n);
                            if reserved.is_none() {
                                netstring::reply(
                                    &mut out,
                                    Reply::Temp("the server's input budget is spent; retry later"),
                                );
                                close = true;
                            }
                        }
                    }
                    break;
                }
                Err(e) => {
                    netstring::reply(&mut out, Reply::Perm(&e.to_string()));
                    close = true;
                    break;
                }
            }
        }
        if !out.is_empty() {
            let deadline = Instant::now() + limits.request_timeout;
            if !matches!(timeout_at(deadline, s.write_all(&out)).await, Ok(Ok(()))) {
                return;
            }
            out.clear();
        }
        if close {
            return linger(&mut s).await;
        }
        if buf.capacity() > 4 * SMALL && buf.len() <= SMALL {
            buf.shrink_to(SMALL);
        }
        let deadline = match started {
            Some(t) => t + limits.request_timeout,
            None => Instant::now() + limits.idle_timeout,
        };
        match timeout_at(deadline, s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
            Ok(Ok(n)) => {
                started.get_or_insert_with(Instant::now);
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// Ends a connection that is being refused so that its client reads the
/// reply: our side of the stream ends, and what the client still sends is
/// read and dropped (up to 2 s or 8 MiB) before the close; closing with it
/// unread would send a reset, and the client's system would drop the reply.
async fn linger<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
    let deadline = Instant::now() + Duration::from_secs(2);
    if !matches!(timeout_at(deadline, s.shutdown()).await, Ok(Ok(()))) {
        return;
    }
    let mut sink = vec![0u8; 16 << 10];
    let mut total = 0;
    while total < 8 << 20 {
        match timeout_at(deadline, s.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => total += n,
            _ => return,
        }
    }
}

/// Answers one framed request into `out`.
async fn answer(app: &Arc<App>, template: &str, payload: &[u8], out: &mut Vec<u8>) {
    let req = match netstring::request(payload) {
        Ok(r) => r,
        Err(e) => return netstring::reply(out, Reply::Perm(&e.to_string())),
    };
    match ask(app, req.name, req.key).await {
        Ok(Asked::Verdict(v)) if v.hit => {
            let matched = v.matched.as_deref().unwrap_or_default();
            let value = render(template, req.name, matched, req.key);
            netstring::reply(out, Reply::Ok(&value))
        }
        Ok(_) => netstring::reply(out, Reply::NotFound),
        Err(e @ (StoreError::NotFound(_) | StoreError::BadName(_) | StoreError::Invalid(_))) => {
            netstring::reply(out, Reply::Perm(&e.to_string()))
        }
        Err(e) => netstring::reply(out, Reply::Temp(&e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let tcp: SocketmapAddr = "127.0.0.1:8081".parse().unwrap();
        assert_eq!(tcp, "inet:127.0.0.1:8081".parse().unwrap());
        assert_eq!(tcp.to_string(), "inet:127.0.0.1:8081");
        let unix: SocketmapAddr = "unix:/run/bg.sock".parse().unwrap();
        assert_eq!(unix, SocketmapAddr::Unix("/run/bg.sock".into()));
        for bad in ["unix:", "localhost", "127.0.0.1", ""] {
            assert!(bad.parse::<SocketmapAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn reply_templates() {
        assert!(check_reply_template(DEFAULT_REPLY).is_ok());
        assert!(check_reply_template("").is_err());
        assert!(check_reply_template("REJECT a\nb").is_err());
        assert_eq!(
            render(DEFAULT_REPLY, "disposable", "evil.test", b"a@evil.test"),
            b"REJECT listed in disposable (evil.test)"
        );
        assert_eq!(render("{key}", "f", "", b"a\r\nb"), b"a??b");
    }
}
