//! The Redis protocol front end (RESP2 and RESP3), RedisBloom-compatible.
//!
//! # Connection handling
//!
//! Connections are served by one or more threads, each running a
//! single-threaded Tokio runtime (see [`serve`] for why). Each connection
//! reads into one buffer with one `read` (a short read clears the socket's
//! readiness, so no `read` is spent on `EAGAIN`), parses as many complete
//! commands as it holds (pipelining), executes them in order and writes all
//! replies with one `write`. While one `BF.EXISTS` of a pipeline executes,
//! the filter memory of a later one is prefetched; the filter of the last
//! lookup is cached per connection (no map lock, hashing or shared
//! reference count per command while no filter is created or deleted), and
//! lookup counters and request timings are added to the shared metrics once
//! per batch, for runs of commands of one kind. Writes (`BF.ADD`, …) apply to memory at once and
//! queue a log record; before the replies of a batch that contains writes
//! are sent, the connection waits for the *last* write's acknowledgement —
//! the log acks in order, so that covers all of them, and a whole pipeline
//! of adds shares one fsync. If the log fails, the connection is closed
//! without sending the unacknowledged replies: no ack, no promise.
//!
//! # Limits
//!
//! Bulk strings longer than `max_bulk_bytes`, arrays longer than
//! `max_array_len`, commands whose bulk strings add up to more than
//! `max_command_bytes`, inline commands longer than 64 KiB, malformed framing,
//! more than `max_connections` clients, silence longer than `idle_timeout`,
//! and a command that takes longer than `request_timeout` to arrive once
//! started (a slow drip) each get a Redis error and a closed connection. A
//! length header is checked before anything is allocated for it, so a
//! `$4294967296` header costs nothing.
//!
//! A command that arrives in pieces is not parsed again from its start on
//! every read: a failed parse records the least buffer length at which the
//! next attempt can get further (the end of the bulk string it stopped in,
//! plus the smallest possible size of the elements still missing), and no
//! parse is attempted before the buffer reaches it. A million-element
//! command dripped in small reads therefore costs a few parses, not one per
//! read (which was quadratic in its length). The price: a framing error or
//! an over-limit header inside a partial command is reported once the
//! command's smallest possible rest has arrived (as it does from a client
//! that sends whole commands), or else the request timeout cuts it off;
//! memory stays bounded by the limits either way.
//!
//! # Commands
//!
//! `BF.RESERVE`, `BF.ADD`, `BF.MADD`, `BF.INSERT`, `BF.EXISTS`, `BF.MEXISTS`,
//! `BF.INFO`, `BF.CARD`, `BF.DEBUG`, `BF.SCANDUMP`, `BF.LOADCHUNK`, plus what clients
//! send on connect: `PING`, `ECHO`, `HELLO`, `AUTH`, `SELECT 0`, `CLIENT …`,
//! `INFO`, `COMMAND`, `CONFIG GET`, `QUIT`, `RESET`, `DEL`/`UNLINK`,
//! `EXISTS`, `TYPE`, `KEYS`, `SCAN`, `DBSIZE`. Replies and error strings
//! follow Redis and RedisBloom; RESP3 connections get maps for `HELLO` and
//! `BF.INFO`, booleans for `BF.EXISTS`/`BF.ADD` results and `_` nulls.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bloomgate_url::KeyError;
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::metrics::{Op, Proto};
use crate::store::{AddOutcome, CreateSpec, Growth, LookupScratch, Meta, Named, StoreError};
use crate::wal::{AckRx, WalError};
use crate::App;

const MAX_INLINE: usize = 64 << 10;

/// RedisBloom's default expansion of a scaling filter.
const DEFAULT_EXPANSION: u32 = 2;
/// The expansions RedisBloom accepts; 0 makes a non-scaling filter.
const EXPANSION_RANGE: std::ops::RangeInclusive<i64> = 0..=32768;
/// `BF.RESERVE`'s answer to an expansion outside [`EXPANSION_RANGE`].
const EXPANSION_RANGE_ERROR: &str = "ERR expansion must be in the range [0, 32768]";
/// `BF.RESERVE`'s answer to an error rate outside (0, 1).
const ERROR_RATE_RANGE: &str = "ERR error rate must be in the range (0.000000, 1.000000)";
/// `BF.RESERVE`'s answer to a capacity below 1. (RedisBloom also refuses
/// capacities above 2^30 with it; bloomgate takes them, up to its filter
/// size limit.)
const CAPACITY_RANGE: &str = "ERR capacity must be in the range [1, 1073741824]";
/// `BF.LOADCHUNK`'s answer to a chunk or header that cannot be loaded.
const BAD_DATA: &str = "ERR received bad data";
/// `BF.INFO`'s field names, in its order.
const INFO_FIELDS: [&str; 5] = [
    "Capacity",
    "Size",
    "Number of filters",
    "Number of items inserted",
    "Expansion rate",
];

/// A framing error: the client is told and disconnected.
#[derive(Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// Parses one command from `buf`. `Ok(None)` means incomplete. On success
/// returns the argument ranges (into `buf`) and the bytes consumed.
pub fn parse(
    buf: &[u8],
    max_bulk: usize,
    max_array: usize,
    args: &mut Vec<std::ops::Range<usize>>,
) -> Result<Option<usize>, ProtocolError> {
    args.clear();
    let caps = Caps {
        bulk: max_bulk,
        array: max_array,
        command: usize::MAX,
    };
    parse_append(buf, &caps, args, &mut 0)
}

/// The framing limits of one command.
struct Caps {
    bulk: usize,
    array: usize,
    command: usize,
}

/// The smallest possible encoding of one more element: `$0\r\n\r\n`.
const MIN_ELEMENT: usize = 6;

/// [`parse`] that appends to `args` (left as it was unless a whole command
/// was parsed).
///
/// When the command is incomplete, `need` is set to the least length of
/// `buf` at which parsing it again can succeed or get further.
fn parse_append(
    buf: &[u8],
    caps: &Caps,
    args: &mut Vec<std::ops::Range<usize>>,
    need: &mut usize,
) -> Result<Option<usize>, ProtocolError> {
    let base = args.len();
    let r = parse_one(buf, caps, base, args, need);
    if !matches!(r, Ok(Some(_))) {
        args.truncate(base);
    }
    r
}

fn parse_one(
    buf: &[u8],
    caps: &Caps,
    base: usize,
    args: &mut Vec<std::ops::Range<usize>>,
    need: &mut usize,
) -> Result<Option<usize>, ProtocolError> {
    *need = buf.len() + 1;
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        // Inline command: one line, split on blanks.
        let Some(nl) = memchr(b'\n', buf) else {
            if buf.len() > MAX_INLINE {
                return Err(ProtocolError("too big inline request".into()));
            }
            return Ok(None);
        };
        let line_end = if nl > 0 && buf[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        let mut i = 0;
        while i < line_end {
            while i < line_end && buf[i].is_ascii_whitespace() {
                i += 1;
            }
            let start = i;
            while i < line_end && !buf[i].is_ascii_whitespace() {
                i += 1;
            }
            if i > start {
                if args.len() - base >= caps.array {
                    return Err(ProtocolError("invalid multibulk length".into()));
                }
                args.push(start..i);
            }
        }
        return Ok(Some(nl + 1));
    }
    let Some((n, mut pos)) = read_int_line(buf, 1)? else {
        return Ok(None);
    };
    if n < 0 || n as usize > caps.array {
        return Err(ProtocolError("invalid multibulk length".into()));
    }
    let n = n as usize;
    let mut declared = 0usize;
    for i in 0..n {
        if pos >= buf.len() {
            *need = pos + (n - i) * MIN_ELEMENT;
            return Ok(None);
        }
        if buf[pos] != b'$' {
            return Err(ProtocolError(format!(
                "expected '$', got '{}'",
                (buf[pos] as char).escape_default()
            )));
        }
        let Some((len, p)) = read_int_line(buf, pos + 1)? else {
            *need = (buf.len() + 1).max(pos + (n - i) * MIN_ELEMENT);
            return Ok(None);
        };
        if len < 0 || len as usize > caps.bulk {
            return Err(ProtocolError("invalid bulk length".into()));
        }
        let len = len as usize;
        declared += len;
        if declared > caps.command {
            return Err(ProtocolError("command too big".into()));
        }
        if buf.len() < p + len + 2 {
            *need = p + len + 2 + (n - i - 1) * MIN_ELEMENT;
            return Ok(None);
        }
        if &buf[p + len..p + len + 2] != b"\r\n" {
            return Err(ProtocolError("bulk string not terminated by CRLF".into()));
        }
        args.push(p..p + len);
        pos = p + len + 2;
    }
    Ok(Some(pos))
}

fn memchr(b: u8, s: &[u8]) -> Option<usize> {
    s.iter().position(|&c| c == b)
}

/// Reads a decimal integer terminated by CRLF starting at `start`.
fn read_int_line(buf: &[u8], start: usize) -> Result<Option<(i64, usize)>, ProtocolError> {
    let mut i = start;
    let mut v: i64 = 0;
    let mut neg = false;
    if i < buf.len() && buf[i] == b'-' {
        neg = true;
        i += 1;
    }
    let digits_start = i;
    while i < buf.len() && buf[i].is_ascii_digit() {
        if i - digits_start >= 18 {
            return Err(ProtocolError("invalid length".into()));
        }
        v = v * 10 + (buf[i] - b'0') as i64;
        i += 1;
    }
    if i + 1 >= buf.len() {
        if i - digits_start > 18 {
            return Err(ProtocolError("invalid length".into()));
        }
        return Ok(None);
    }
    if i == digits_start || buf[i] != b'\r' || buf[i + 1] != b'\n' {
        return Err(ProtocolError("invalid length".into()));
    }
    Ok(Some((if neg { -v } else { v }, i + 2)))
}

/// Reply encoder for one connection's protocol version.
pub struct Out {
    /// Encoded bytes.
    pub buf: Vec<u8>,
    /// 2 or 3.
    pub proto: u8,
}

impl Out {
    fn simple(&mut self, s: &str) {
        self.buf.push(b'+');
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }
    fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }
    fn error(&mut self, s: &str) {
        self.buf.push(b'-');
        // Error lines must not contain CR/LF.
        self.buf.extend(
            s.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        self.buf.extend_from_slice(b"\r\n");
    }
    fn int(&mut self, v: i64) {
        self.buf.push(b':');
        self.buf.extend_from_slice(v.to_string().as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }
    fn boolean(&mut self, v: bool) {
        if self.proto >= 3 {
            self.buf
                .extend_from_slice(if v { b"#t\r\n" } else { b"#f\r\n" });
        } else {
            self.buf
                .extend_from_slice(if v { b":1\r\n" } else { b":0\r\n" });
        }
    }
    fn bulk(&mut self, b: &[u8]) {
        self.buf.push(b'$');
        self.buf.extend_from_slice(b.len().to_string().as_bytes());
        self.buf.extend_from_slice(b"\r\n");
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(b"\r\n");
    }
    fn null(&mut self) {
        if self.proto >= 3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"$-1\r\n");
        }
    }
    fn array(&mut self, n: usize) {
        self.buf.push(b'*');
        self.buf.extend_from_slice(n.to_string().as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }
    fn map(&mut self, n: usize) {
        if self.proto >= 3 {
            self.buf.push(b'%');
            self.buf.extend_from_slice(n.to_string().as_bytes());
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.array(n * 2);
        }
    }
}

struct Conn {
    app: Arc<App>,
    authed: bool,
    scratch: Vec<Vec<u8>>,
    outcomes: Vec<AddOutcome>,
    /// Writes of this batch waiting to be durable, each with the range of
    /// `Out::buf` holding its command's reply (replaced by an error if the
    /// log fails to write it).
    pending: Vec<(AckRx, std::ops::Range<usize>)>,
    /// The acknowledgement of the command being executed, if it wrote.
    ack: Option<AckRx>,
    quit: bool,
    name: Option<Vec<u8>>,
    id: u64,
    /// The filter of the last lookup (see [`Lookup`]).
    last: Lookup,
    lookup_scratch: LookupScratch,
    /// Items looked up and hits not yet added to the shared metrics.
    items_checked: u64,
    hits: u64,
    /// The run of commands being timed (see [`Conn::execute`]).
    run: Run,
}

/// A connection's cached name lookup. Pipelined lookups usually name one
/// filter over and over; while the store's generation is unchanged (no
/// filter created, replaced or deleted) the cached `Arc` is the one
/// [`Store::get`](crate::store::Store::get) would return, without taking the
/// map's lock, hashing the name or touching the `Arc`'s shared count. The
/// filter's lookup counters are accumulated here and added once per batch.
#[derive(Default)]
struct Lookup {
    valid: bool,
    generation: u64,
    key: Vec<u8>,
    named: Option<Arc<Named>>,
    checks: u64,
    hits: u64,
}

/// Longest filter name worth caching (longer ones are looked up each time).
const MAX_CACHED_NAME: usize = 256;

/// Consecutive commands of one kind, timed together: reading the clock
/// twice per command cost more than a pipelined `BF.EXISTS` itself.
struct Run {
    op: Op,
    n: u64,
    errors: u64,
    start: Instant,
}

/// The threads that run Redis-protocol connections, each a single-threaded
/// Tokio runtime. They end (cancelling their connections) when the pool is
/// dropped.
struct Pool {
    handles: Vec<tokio::runtime::Handle>,
    next: usize,
    _alive: tokio::sync::watch::Sender<()>,
}

impl Pool {
    fn start(threads: usize) -> std::io::Result<Pool> {
        let (alive, _) = tokio::sync::watch::channel(());
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(rt.handle().clone());
            let mut gone = alive.subscribe();
            std::thread::Builder::new()
                .name(format!("bloomgate-resp-{i}"))
                .spawn(move || {
                    // `changed` fails once the pool (the sender) is dropped.
                    rt.block_on(async move { while gone.changed().await.is_ok() {} });
                    rt.shutdown_timeout(Duration::from_secs(1));
                })?;
        }
        Ok(Pool {
            handles,
            next: 0,
            _alive: alive,
        })
    }

    /// The runtime of the next connection (round robin).
    fn next(&mut self) -> &tokio::runtime::Handle {
        self.next = (self.next + 1) % self.handles.len();
        &self.handles[self.next]
    }
}

/// Accepts Redis-protocol connections until `stop` turns true, and serves
/// them on `threads` threads (at least one), each running a single-threaded
/// runtime; a connection stays on the thread it was given.
///
/// Why not the multi-threaded runtime: a pipelined lookup costs a few
/// hundred nanoseconds, and the work-stealing scheduler's wake-ups of idle
/// workers (futex calls, context switches) cost about as much as the
/// lookups: on 2 cores, with `redis-benchmark` on the other core, one
/// single-threaded runtime served the same load with ~15 % less CPU than
/// two work-stealing workers, at equal or higher throughput. More threads
/// scale to more cores, one connection never moves between them.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    threads: usize,
) {
    let mut pool = match Pool::start(threads) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("bloomgate serve: cannot start the Redis-protocol threads: {e}");
            return;
        }
    };
    let sem = Arc::new(Semaphore::new(app.limits.max_connections));
    let mut next_id = 0u64;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let Ok((mut stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        next_id += 1;
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        match sem.clone().try_acquire_owned() {
            Ok(permit) => {
                let id = next_id;
                // Re-registered with the reactor of the thread that serves it.
                let Ok(stream) = stream.into_std() else {
                    continue;
                };
                pool.next().spawn(async move {
                    let Ok(stream) = TcpStream::from_std(stream) else {
                        return;
                    };
                    app.metrics.connections[Proto::Resp as usize].fetch_add(1, Relaxed);
                    handle(stream, app.clone(), id).await;
                    app.metrics.connections[Proto::Resp as usize].fetch_sub(1, Relaxed);
                    drop(permit);
                });
            }
            Err(_) => {
                app.metrics.connections_rejected[Proto::Resp as usize].fetch_add(1, Relaxed);
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(
                        Duration::from_secs(1),
                        stream.write_all(b"-ERR max number of clients reached\r\n"),
                    )
                    .await;
                });
            }
        }
    }
}

async fn handle(mut stream: TcpStream, app: Arc<App>, id: u64) {
    let limits = app.limits.clone();
    let now = Instant::now();
    let mut conn = Conn {
        authed: false,
        app,
        scratch: Vec::new(),
        outcomes: Vec::new(),
        pending: Vec::new(),
        ack: None,
        quit: false,
        name: None,
        id,
        last: Lookup::default(),
        lookup_scratch: LookupScratch::default(),
        items_checked: 0,
        hits: 0,
        run: Run {
            op: Op::Other,
            n: 0,
            errors: 0,
            start: now,
        },
    };
    let mut buf = BytesMut::with_capacity(16 << 10);
    let mut out = Out {
        buf: Vec::with_capacity(16 << 10),
        proto: 2,
    };
    // This connection's share of the input budget (see crate::budget).
    let account = conn.app.input.register();
    let mut partial_since: Option<Instant> = None;
    // One timer for the idle and request timeouts, re-armed lazily: it is
    // only moved earlier when a deadline moves earlier, and when it fires
    // early (there was activity since it was set) it is moved to the real
    // deadline. Arming a timer for every read cost more than the read.
    let mut armed = now + limits.idle_timeout;
    let timer = tokio::time::sleep_until(armed.into());
    tokio::pin!(timer);
    let mut batch = Parsed::default();
    loop {
        // Execute every complete command in the buffer, up to 1 MiB of replies.
        let mut more = false;
        loop {
            let error = batch.parse(&buf, &limits);
            if !batch.cmds.is_empty() {
                partial_since = None;
            }
            let mut next = 0;
            let stopped = loop {
                let (i, stop) = conn.run_batch(&buf, &batch, next, &mut out);
                next = i;
                if stop != Stop::Blocking {
                    break stop == Stop::Full;
                }
                // Off this thread, with the connection's state moved along
                // and back (no copy of the arguments).
                let args = batch.args[batch.cmds[i].0.clone()].to_vec();
                let job = tokio::task::spawn_blocking(move || {
                    conn.execute_at(&buf, &args, &mut out);
                    (conn, out, buf)
                });
                let Ok(back) = job.await else {
                    return;
                };
                (conn, out, buf) = back;
                next += 1;
                if conn.quit || out.buf.len() > (1 << 20) {
                    break true;
                }
            };
            let done = if next > 0 { batch.cmds[next - 1].1 } else { 0 };
            buf.advance(done);
            // `need` describes the incomplete command after the last parsed
            // one; if parsed commands are still waiting, parse them first.
            batch.need = if next < batch.cmds.len() {
                0
            } else {
                batch.need.saturating_sub(done)
            };
            if conn.quit {
                break;
            }
            if stopped {
                // Send these replies, then go on with the buffer (its
                // commands may be all the client will send).
                more = !buf.is_empty();
                break;
            }
            if let Some(ProtocolError(msg)) = error {
                conn.app.metrics.connections_rejected[Proto::Resp as usize].fetch_add(1, Relaxed);
                out.error(&format!("ERR Protocol error: {msg}"));
                let _ = flush(&mut stream, &mut conn, &mut out).await;
                return;
            }
            if batch.cmds.len() < MAX_PARSED {
                break;
            }
        }
        let Ok(now) = flush(&mut stream, &mut conn, &mut out).await else {
            return;
        };
        if conn.quit {
            return;
        }
        if more {
            continue;
        }
        if !buf.is_empty() && partial_since.is_none() {
            partial_since = Some(now);
        }
        // Keep the memory of one huge command only while it is needed.
        if buf.is_empty() && buf.capacity() > (1 << 20) {
            buf = BytesMut::with_capacity(16 << 10);
        }
        if batch.args.capacity() > (1 << 16) {
            batch.args = Vec::new();
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 << 10);
        }
        account.set(buf.capacity());
        let deadline = match partial_since {
            Some(t) => t + limits.request_timeout,
            None => now + limits.idle_timeout,
        };
        if deadline < armed {
            armed = deadline;
            timer.as_mut().reset(armed.into());
        }
        loop {
            tokio::select! {
                biased;
                r = read_some(&stream, &mut buf) => match r {
                    Ok(0) | Err(_) => return,
                    Ok(_) => break,
                },
                () = account.killed() => {
                    conn.app.metrics.connections_rejected[Proto::Resp as usize]
                        .fetch_add(1, Relaxed);
                    out.error(&format!(
                        "ERR client input buffer budget exceeded ({} MiB for all clients, --max-input-memory): this connection held the most and is closed",
                        conn.app.input.limit() >> 20
                    ));
                    // The buffer goes before the reply is sent.
                    drop(std::mem::take(&mut buf));
                    account.set(0);
                    let _ = flush(&mut stream, &mut conn, &mut out).await;
                    return;
                }
                () = &mut timer => {
                    if Instant::now() < deadline {
                        armed = deadline;
                        timer.as_mut().reset(armed.into());
                        continue;
                    }
                    conn.app.metrics.connections_rejected[Proto::Resp as usize]
                        .fetch_add(1, Relaxed);
                    out.error(if partial_since.is_some() {
                        "ERR request timeout: command not completed in time"
                    } else {
                        "ERR idle timeout"
                    });
                    let _ = flush(&mut stream, &mut conn, &mut out).await;
                    return;
                }
            }
        }
        conn.run.start = Instant::now();
    }
}

/// Why [`Conn::run_batch`] returned.
#[derive(PartialEq, Eq)]
enum Stop {
    /// Every parsed command ran.
    Done,
    /// `QUIT`, or enough replies to send before going on.
    Full,
    /// The next command must run on the blocking pool.
    Blocking,
}

/// Most commands parsed ahead of their execution.
const MAX_PARSED: usize = 256;

/// How many commands ahead the memory of a `BF.EXISTS` lookup is prefetched.
const PREFETCH_AHEAD: usize = 8;

/// The complete commands at the start of the read buffer, parsed before any
/// of them runs, so that the filter memory of later lookups can be fetched
/// while earlier ones execute (each `BF.EXISTS` of a pipeline is a cache
/// miss otherwise, one at a time).
#[derive(Default)]
struct Parsed {
    /// Arguments of all commands (ranges into the buffer).
    args: Vec<std::ops::Range<usize>>,
    /// Per command: its arguments (a range of `args`) and where it ends in the buffer.
    cmds: Vec<(std::ops::Range<usize>, usize)>,
    /// The buffer must be at least this long before parsing the incomplete
    /// command at its start again can get further (0: parse now).
    need: usize,
}

impl Parsed {
    /// Parses up to [`MAX_PARSED`] commands; returns the framing error that
    /// stopped it, if any (it follows the commands parsed).
    fn parse(&mut self, buf: &[u8], limits: &crate::Limits) -> Option<ProtocolError> {
        self.args.clear();
        self.cmds.clear();
        if buf.len() < self.need {
            // Not enough new bytes for the incomplete command to get further.
            return None;
        }
        self.need = 0;
        let caps = Caps {
            bulk: limits.max_bulk_bytes,
            array: limits.max_array_len,
            command: limits.max_command_bytes,
        };
        let mut pos = 0;
        while self.cmds.len() < MAX_PARSED {
            let first = self.args.len();
            let mut need = 0;
            match parse_append(&buf[pos..], &caps, &mut self.args, &mut need) {
                Ok(Some(used)) => {
                    for r in &mut self.args[first..] {
                        *r = r.start + pos..r.end + pos;
                    }
                    pos += used;
                    self.cmds.push((first..self.args.len(), pos));
                }
                Ok(None) => {
                    self.need = pos + need;
                    return None;
                }
                Err(e) => return Some(e),
            }
        }
        None
    }
}

/// Reads once into `buf` (which has free space). A read that returns less
/// than the free space has drained the socket's receive queue, so the
/// socket's readiness is cleared right away: the next read waits for the
/// reactor instead of first making a `read` that can only fail with
/// `EAGAIN`. A batch of pipelined commands then costs one `read` and one
/// `write`. (Tokio ignores the clearing if the reactor saw new data
/// meanwhile, so no wake-up is lost.)
async fn read_some(stream: &TcpStream, buf: &mut BytesMut) -> std::io::Result<usize> {
    loop {
        stream.readable().await?;
        let free = buf.capacity() - buf.len();
        let mut got = 0;
        let r = stream.try_io(Interest::READABLE, || {
            got = stream.try_read_buf(buf)?;
            if got > 0 && got < free {
                Err(std::io::ErrorKind::WouldBlock.into())
            } else {
                Ok(())
            }
        });
        match r {
            Ok(()) => return Ok(got),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if got > 0 {
                    return Ok(got);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Ends the batch (metrics), waits for its writes to be durable, then sends
/// its replies. Returns the time the batch ended (after any wait).
async fn flush(stream: &mut TcpStream, conn: &mut Conn, out: &mut Out) -> Result<Instant, ()> {
    let mut now = conn.end_batch();
    if !conn.pending.is_empty() {
        let mut failed = Vec::new();
        for (rx, reply) in conn.pending.drain(..) {
            let e = match rx.await {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(_) => WalError::io("log thread stopped", &std::io::ErrorKind::Other.into()),
            };
            failed.push((reply, e));
        }
        if !failed.is_empty() {
            // The replies of writes that are not durable become errors: a
            // client is never told that an add it cannot count on succeeded.
            out.buf = replace_replies(&out.buf, &failed);
        }
        now = Instant::now();
    }
    if out.buf.is_empty() {
        return Ok(now);
    }
    let r = stream.write_all(&out.buf).await;
    out.buf.clear();
    if out.buf.capacity() > (4 << 20) {
        out.buf = Vec::with_capacity(16 << 10);
    }
    r.map(|()| now).map_err(|_| ())
}

/// `buf` with each of `failed`'s reply ranges (in order, disjoint) replaced
/// by its error.
fn replace_replies(buf: &[u8], failed: &[(std::ops::Range<usize>, WalError)]) -> Vec<u8> {
    let mut out = Out {
        buf: Vec::with_capacity(buf.len()),
        proto: 2,
    };
    let mut at = 0;
    for (r, e) in failed {
        out.buf.extend_from_slice(&buf[at..r.start]);
        out.error(&wal_err(e));
        at = r.end;
    }
    out.buf.extend_from_slice(&buf[at..]);
    out.buf
}

/// The reply to a write the log refused (on a full disk the message says so
/// and that reads go on).
fn wal_err(e: &WalError) -> String {
    format!("ERR {e}")
}

fn upper(a: &[u8]) -> Vec<u8> {
    a.to_ascii_uppercase()
}

fn lossy(a: &[u8]) -> String {
    String::from_utf8_lossy(a).into_owned()
}

fn parse_i64(a: &[u8]) -> Option<i64> {
    std::str::from_utf8(a).ok()?.parse().ok()
}

fn parse_f64(a: &[u8]) -> Option<f64> {
    let v: f64 = std::str::from_utf8(a).ok()?.trim().parse().ok()?;
    v.is_finite().then_some(v)
}

fn store_err(e: &StoreError) -> String {
    match e {
        StoreError::NotFound(_) => "ERR not found".into(),
        StoreError::Exists(_) => "ERR item exists".into(),
        StoreError::Wal(e) => wal_err(e),
        other => format!("ERR {other}"),
    }
}

/// Glob matching as Redis' `KEYS` does (`*`, `?`, `[...]`, `\`).
pub fn glob(p: &[u8], s: &[u8]) -> bool {
    if p.is_empty() {
        return s.is_empty();
    }
    match p[0] {
        b'*' => (0..=s.len()).any(|i| glob(&p[1..], &s[i..])),
        b'?' => !s.is_empty() && glob(&p[1..], &s[1..]),
        b'[' => {
            let Some(end) = p.iter().skip(1).position(|&c| c == b']').map(|i| i + 1) else {
                return !s.is_empty() && s[0] == b'[' && glob(&p[1..], &s[1..]);
            };
            if s.is_empty() {
                return false;
            }
            let class = &p[1..end];
            let (neg, class) = match class.first() {
                Some(b'^') => (true, &class[1..]),
                _ => (false, class),
            };
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    hit |= class[i] <= s[0] && s[0] <= class[i + 2];
                    i += 3;
                } else {
                    hit |= class[i] == s[0];
                    i += 1;
                }
            }
            hit != neg && glob(&p[end + 1..], &s[1..])
        }
        b'\\' if p.len() > 1 => !s.is_empty() && s[0] == p[1] && glob(&p[2..], &s[1..]),
        c => !s.is_empty() && s[0] == c && glob(&p[1..], &s[1..]),
    }
}

#[derive(PartialEq, Eq)]
enum Class {
    Conn,
    Read,
    Write,
}

impl Conn {
    fn execute(&mut self, argv: &[&[u8]], out: &mut Out) {
        // Upper-case the command name on the stack (no allocation).
        let mut name = [0u8; 24];
        let cmd: &[u8] = if argv[0].len() <= name.len() {
            let n = argv[0].len();
            name[..n].copy_from_slice(argv[0]);
            name[..n].make_ascii_uppercase();
            &name[..n]
        } else {
            b"\0unknown"
        };
        let (class, op) = match cmd {
            b"BF.EXISTS" | b"BF.MEXISTS" => (Class::Read, Op::Check),
            b"BF.INFO" | b"BF.CARD" | b"BF.SCANDUMP" | b"BF.DEBUG" | b"EXISTS" | b"TYPE"
            | b"KEYS" | b"SCAN" | b"DBSIZE" | b"INFO" => (Class::Read, Op::Info),
            b"BF.ADD" | b"BF.MADD" | b"BF.INSERT" => (Class::Write, Op::Add),
            b"BF.RESERVE" | b"BF.LOADCHUNK" | b"DEL" | b"UNLINK" => (Class::Write, Op::Admin),
            b"PING" | b"ECHO" | b"COMMAND" | b"CONFIG" | b"SELECT" => (Class::Read, Op::Other),
            _ => (Class::Conn, Op::Other),
        };
        // Time runs of commands of one kind; adds and admin commands each
        // on their own (they can be slow).
        if self.run.n > 0 && self.run.op != op {
            self.end_run(Instant::now());
        }
        self.run.op = op;
        let before = out.buf.len();
        let denied = match class {
            Class::Conn => None,
            Class::Read => self.app.policy.check_read(self.authed).err(),
            Class::Write => self.app.policy.check_write(self.authed).err(),
        };
        match denied {
            Some(crate::auth::Denied::NeedToken) => out.error("NOAUTH Authentication required."),
            Some(d) => out.error(&format!("NOPERM {}", d.message())),
            None => self.dispatch(cmd, argv, out),
        }
        if let Some(rx) = self.ack.take() {
            self.pending.push((rx, before..out.buf.len()));
        }
        self.run.n += 1;
        self.run.errors += (out.buf.get(before) == Some(&b'-')) as u64;
        if matches!(op, Op::Add | Op::Admin) {
            self.end_run(Instant::now());
        }
    }

    /// Executes the parsed commands from the `from`th on, in order, until
    /// the end, a `QUIT`, 1 MiB of replies, or a command that must not run
    /// on this thread ([`Conn::blocks`]). Returns the index of the first
    /// command not executed and why it stopped.
    fn run_batch(
        &mut self,
        buf: &[u8],
        batch: &Parsed,
        from: usize,
        out: &mut Out,
    ) -> (usize, Stop) {
        let cmds = &batch.cmds;
        for (args, _) in cmds.iter().skip(from).take(PREFETCH_AHEAD) {
            self.prefetch(buf, &batch.args[args.clone()]);
        }
        for i in from..cmds.len() {
            if let Some((ahead, _)) = cmds.get(i + PREFETCH_AHEAD) {
                self.prefetch(buf, &batch.args[ahead.clone()]);
            }
            let args = &batch.args[cmds[i].0.clone()];
            if self.blocks(buf, args) {
                return (i, Stop::Blocking);
            }
            self.execute_at(buf, args, out);
            if self.quit || out.buf.len() > (1 << 20) {
                return (i + 1, Stop::Full);
            }
        }
        (cmds.len(), Stop::Done)
    }

    /// Executes the command whose arguments are `args` (ranges of `buf`).
    fn execute_at(&mut self, buf: &[u8], args: &[std::ops::Range<usize>], out: &mut Out) {
        if args.is_empty() {
            return;
        }
        // Most commands have few arguments: avoid an allocation.
        let mut small: [&[u8]; 8] = [&[]; 8];
        let big: Vec<&[u8]>;
        let argv: &[&[u8]] = if args.len() <= small.len() {
            for (slot, r) in small.iter_mut().zip(args) {
                *slot = &buf[r.clone()];
            }
            &small[..args.len()]
        } else {
            big = args.iter().map(|r| &buf[r.clone()]).collect();
            &big
        };
        self.execute(argv, out);
    }

    /// True for commands that do file I/O or wait for the store's snapshot
    /// lock (which a snapshot holds while it writes filter files): creating
    /// (`BF.RESERVE`, `BF.LOADCHUNK`, an add to a missing filter) and
    /// deleting filters, and loading chunks; and adds while a filter's write
    /// lock is taken (by a reload, say). They run on Tokio's blocking pool so
    /// that they cannot stall the other connections of this thread.
    fn blocks(&mut self, buf: &[u8], args: &[std::ops::Range<usize>]) -> bool {
        let Some(cmd) = args.first() else {
            return false;
        };
        let cmd = &buf[cmd.clone()];
        let is = |name: &[u8]| cmd.eq_ignore_ascii_case(name);
        if is(b"BF.RESERVE") || is(b"BF.LOADCHUNK") || is(b"DEL") || is(b"UNLINK") {
            return true;
        }
        if (is(b"BF.ADD") || is(b"BF.MADD") || is(b"BF.INSERT")) && args.len() >= 2 {
            self.look_up(&buf[args[1].clone()]);
            return self.last.named.as_ref().is_none_or(|n| n.write_busy());
        }
        false
    }

    /// Starts loading the filter memory a `BF.EXISTS` of the filter of the
    /// last lookup will read (a hint: other commands and filters are left
    /// alone, so that a pipeline over several filters does not thrash
    /// [`Conn::last`]).
    #[inline]
    fn prefetch(&self, buf: &[u8], args: &[std::ops::Range<usize>]) {
        if let [cmd, key, item] = args {
            let l = &self.last;
            if let Some(n) = &l.named {
                if l.valid
                    && buf[key.clone()] == l.key[..]
                    && buf[cmd.clone()].eq_ignore_ascii_case(b"BF.EXISTS")
                    && l.generation == self.app.store.generation()
                {
                    n.prefetch(&buf[item.clone()]);
                }
            }
        }
    }

    /// Records the current run of commands as ending at `now`.
    fn end_run(&mut self, now: Instant) {
        let r = &mut self.run;
        self.app.metrics.record_many(
            Proto::Resp,
            r.op,
            r.n,
            now.saturating_duration_since(r.start),
            r.errors,
        );
        r.n = 0;
        r.errors = 0;
        r.start = now;
    }

    /// Ends a batch: records its timing and adds its lookup counts to the
    /// shared counters. Returns the current time.
    fn end_batch(&mut self) -> Instant {
        let now = Instant::now();
        if self.run.n > 0 {
            self.end_run(now);
        }
        self.flush_lookup_counts();
        let m = &self.app.metrics;
        if self.items_checked > 0 {
            m.items_checked.fetch_add(self.items_checked, Relaxed);
            self.items_checked = 0;
        }
        if self.hits > 0 {
            m.hits.fetch_add(self.hits, Relaxed);
            self.hits = 0;
        }
        now
    }

    fn flush_lookup_counts(&mut self) {
        let l = &mut self.last;
        if let Some(n) = &l.named {
            n.count(l.checks, l.hits);
        }
        l.checks = 0;
        l.hits = 0;
    }

    /// Points `self.last` at the filter called `key` (or at nothing).
    fn look_up(&mut self, key: &[u8]) {
        let generation = self.app.store.generation();
        let l = &self.last;
        if l.valid && l.generation == generation && l.key == key {
            return;
        }
        self.flush_lookup_counts();
        let named = self.named(key);
        let l = &mut self.last;
        l.named = named;
        l.generation = generation;
        l.key.clear();
        l.valid = key.len() <= MAX_CACHED_NAME;
        if l.valid {
            l.key.extend_from_slice(key);
        }
    }

    fn wrong_arity(out: &mut Out, cmd: &[u8]) {
        out.error(&format!(
            "ERR wrong number of arguments for '{}' command",
            lossy(cmd).to_ascii_lowercase()
        ));
    }

    fn dispatch(&mut self, cmd: &[u8], argv: &[&[u8]], out: &mut Out) {
        let argc = argv.len();
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
                if !self.app.policy.has_token() {
                    out.error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
                } else if token.is_some_and(|t| self.app.policy.token_matches(t)) {
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
                b"GET" => out.map(0),
                b"SET" | b"RESETSTAT" | b"REWRITE" => out.ok(),
                _ => out.error("ERR unknown CONFIG subcommand"),
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
                let n = argv[1..].iter().filter(|k| self.named(k).is_some()).count();
                out.int(n as i64)
            }
            b"TYPE" if argc == 2 => {
                if self.named(argv[1]).is_some() {
                    out.simple("MBbloom--")
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
                        Err(e) => return out.error(&store_err(&e)),
                    }
                }
                out.int(n)
            }
            b"BF.RESERVE" => self.reserve(argv, out),
            b"BF.ADD" if argc == 3 => self.add(
                argv[1],
                &argv[2..],
                false,
                Some(CreateSpec::redis_default()),
                out,
            ),
            b"BF.MADD" if argc >= 3 => self.add(
                argv[1],
                &argv[2..],
                true,
                Some(CreateSpec::redis_default()),
                out,
            ),
            b"BF.INSERT" => self.insert(argv, out),
            b"BF.EXISTS" if argc == 3 => self.exists(argv[1], &argv[2..], false, out),
            b"BF.MEXISTS" if argc >= 3 => self.exists(argv[1], &argv[2..], true, out),
            b"BF.INFO" if argc == 2 || argc == 3 => self.info(argv, out),
            b"BF.CARD" if argc == 2 => match self.named(argv[1]) {
                Some(n) => out.int(n.layers().items() as i64),
                None => out.int(0),
            },
            b"BF.SCANDUMP" if argc == 3 => {
                let Some(n) = self.named(argv[1]) else {
                    return out.error("ERR not found");
                };
                let Some(iter) = parse_i64(argv[2]) else {
                    return out.error("Second argument must be numeric");
                };
                // A negative iterator is past the end, as in RedisBloom.
                let (next, data) = match u64::try_from(iter) {
                    Ok(iter) => self.app.store.scandump(&n, iter),
                    Err(_) => (0, Vec::new()),
                };
                out.array(2);
                out.int(next as i64);
                out.bulk(&data);
            }
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

    fn named(&self, key: &[u8]) -> Option<Arc<crate::store::Named>> {
        std::str::from_utf8(key)
            .ok()
            .and_then(|k| self.app.store.get(k))
    }

    fn hello(&mut self, argv: &[&[u8]], out: &mut Out) {
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
                    if !self.app.policy.has_token() {
                        return out.error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
                    }
                    if argv[i + 1] != b"default" || !self.app.policy.token_matches(argv[i + 2]) {
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
        if self.app.policy.check_read(self.authed).is_err() {
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

    fn scan(&mut self, argv: &[&[u8]], out: &mut Out) {
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

    /// `BF.LOADCHUNK key iter data`, with RedisBloom's error texts: a bad
    /// header, a header for an existing filter, an iterator below 1 for an
    /// existing filter, or a chunk that does not fit the iterator (or the
    /// 8-byte alignment of bloomgate's bit arrays) is `ERR received bad
    /// data`; a chunk that starts past the end is `ERR invalid offset - no
    /// link found`; one that runs past the end of its layer is `ERR invalid
    /// chunk - Too big for current filter`.
    fn loadchunk(&mut self, argv: &[&[u8]], out: &mut Out) {
        let Some(iter) = parse_i64(argv[2]) else {
            return out.error("ERR Second argument must be numeric");
        };
        let name = lossy(argv[1]);
        let exists = self.app.store.get(&name).is_some();
        if iter < 1 || (iter == 1 && exists) {
            // Only iteration 1 creates; a header cannot be loaded into a filter.
            return out.error(if exists { BAD_DATA } else { "ERR not found" });
        }
        match self.app.store.loadchunk(&name, iter as u64, argv[3]) {
            Ok(rx) => {
                self.ack = rx;
                out.ok()
            }
            // Created meanwhile by another client.
            Err(StoreError::Exists(_)) => out.error(BAD_DATA),
            Err(e) => out.error(&store_err(&e)),
        }
    }

    fn reserve(&mut self, argv: &[&[u8]], out: &mut Out) {
        let argc = argv.len();
        if !(4..=7).contains(&argc) {
            return Self::wrong_arity(out, argv[0]);
        }
        let Some(error) = parse_f64(argv[2]) else {
            return out.error("ERR bad error rate");
        };
        if error <= 0.0 || error >= 1.0 {
            return out.error(ERROR_RATE_RANGE);
        }
        let Some(capacity) = parse_i64(argv[3]) else {
            return out.error("ERR bad capacity");
        };
        if capacity <= 0 {
            return out.error(CAPACITY_RANGE);
        }
        let mut nonscaling = false;
        let mut expansion: Option<&[u8]> = None;
        let mut i = 4;
        while i < argc {
            match upper(argv[i]).as_slice() {
                b"NONSCALING" => {
                    nonscaling = true;
                    i += 1;
                }
                b"EXPANSION" => {
                    let Some(v) = argv.get(i + 1) else {
                        return out.error("ERR no expansion");
                    };
                    expansion = Some(v);
                    i += 2;
                }
                _ => return out.error("ERR unknown argument received"),
            }
        }
        // RedisBloom's order: `EXPANSION 0` makes a non-scaling filter, any
        // other expansion conflicts with `NONSCALING`, then the range.
        let expansion = match expansion {
            None => DEFAULT_EXPANSION,
            Some(v) => {
                let Some(e) = parse_i64(v) else {
                    return out.error("ERR bad expansion");
                };
                if e == 0 {
                    nonscaling = true;
                } else if nonscaling {
                    return out.error("Nonscaling filters cannot expand");
                }
                if !EXPANSION_RANGE.contains(&e) {
                    return out.error(EXPANSION_RANGE_ERROR);
                }
                e as u32
            }
        };
        let spec = CreateSpec {
            items: capacity as u64,
            fp: error,
            growth: Growth::Redis(Meta {
                expansion,
                nonscaling,
                error_rate: None,
            }),
            ..CreateSpec::redis_default()
        };
        match self.app.store.create(&lossy(argv[1]), &spec) {
            Ok(_) => out.ok(),
            Err(e) => out.error(&store_err(&e)),
        }
    }

    /// `BF.INSERT`. Its option errors carry no `ERR ` prefix, as in RedisBloom.
    fn insert(&mut self, argv: &[&[u8]], out: &mut Out) {
        let argc = argv.len();
        if argc < 4 {
            return Self::wrong_arity(out, argv[0]);
        }
        let mut spec = CreateSpec::redis_default();
        let mut autocreate = true;
        let mut nonscaling = false;
        let mut expansion = DEFAULT_EXPANSION as i64;
        let mut items_at = None;
        let mut i = 2;
        while i < argc && items_at.is_none() {
            match upper(argv[i]).as_slice() {
                b"ITEMS" => items_at = Some(i + 1),
                b"ERROR" => {
                    let Some(v) = argv.get(i + 1) else {
                        return Self::wrong_arity(out, argv[0]);
                    };
                    match parse_f64(v) {
                        Some(e) if e > 0.0 && e < 1.0 => spec.fp = e,
                        _ => return out.error("Bad error rate"),
                    }
                    i += 2;
                }
                b"CAPACITY" => {
                    let Some(v) = argv.get(i + 1) else {
                        return Self::wrong_arity(out, argv[0]);
                    };
                    match parse_i64(v) {
                        Some(c) if c >= 1 => spec.items = c as u64,
                        _ => return out.error("Bad capacity"),
                    }
                    i += 2;
                }
                b"EXPANSION" => {
                    let Some(v) = argv.get(i + 1) else {
                        return Self::wrong_arity(out, argv[0]);
                    };
                    match parse_i64(v) {
                        Some(e) if EXPANSION_RANGE.contains(&e) => expansion = e,
                        _ => return out.error("Bad expansion"),
                    }
                    i += 2;
                }
                b"NOCREATE" => {
                    autocreate = false;
                    i += 1;
                }
                b"NONSCALING" => {
                    nonscaling = true;
                    i += 1;
                }
                _ => return out.error("Unknown argument received"),
            }
        }
        let Some(items_at) = items_at.filter(|&k| k < argc) else {
            return Self::wrong_arity(out, argv[0]);
        };
        spec.growth = Growth::Redis(Meta {
            expansion: expansion as u32,
            nonscaling: nonscaling || expansion == 0,
            error_rate: None,
        });
        let create = autocreate.then_some(spec);
        self.add(argv[1], &argv[items_at..], true, create, out)
    }

    fn add(
        &mut self,
        key: &[u8],
        items: &[&[u8]],
        multi: bool,
        create: Option<CreateSpec>,
        out: &mut Out,
    ) {
        if items.len() > self.app.limits.max_batch {
            return out.error(&format!(
                "ERR too many items in one command (limit {})",
                self.app.limits.max_batch
            ));
        }
        let name = lossy(key);
        let named = match self.app.store.get(&name) {
            Some(n) => n,
            None => {
                let Some(spec) = create else {
                    return out.error("ERR not found");
                };
                match self.app.store.create(&name, &spec) {
                    Ok(n) => n,
                    Err(StoreError::Exists(_)) => match self.app.store.get(&name) {
                        Some(n) => n,
                        None => return out.error("ERR not found"),
                    },
                    Err(e) => return out.error(&store_err(&e)),
                }
            }
        };
        self.outcomes.clear();
        let mut outcomes = std::mem::take(&mut self.outcomes);
        match self.app.store.add(&named, items, &mut outcomes) {
            Ok(rx) => {
                self.ack = rx;
            }
            Err(e) => {
                self.outcomes = outcomes;
                return out.error(&store_err(&e));
            }
        }
        if multi {
            out.array(outcomes.len());
        }
        for o in &outcomes {
            match o {
                AddOutcome::New => out.boolean(true),
                AddOutcome::Exists => out.boolean(false),
                AddOutcome::Full => out.error("ERR non scaling filter is full"),
                AddOutcome::TooLong => out.error("ERR item is too long"),
                AddOutcome::Invalid(e) => out.error(&format!("ERR invalid item: {e}")),
            }
        }
        self.outcomes = outcomes;
    }

    fn exists(&mut self, key: &[u8], items: &[&[u8]], multi: bool, out: &mut Out) {
        if items.len() > self.app.limits.max_batch {
            return out.error(&format!(
                "ERR too many items in one command (limit {})",
                self.app.limits.max_batch
            ));
        }
        self.look_up(key);
        if multi {
            out.array(items.len());
        }
        self.items_checked += items.len() as u64;
        let l = &mut self.last;
        let Some(named) = &l.named else {
            // RedisBloom answers 0 for a missing key.
            for _ in items {
                out.boolean(false);
            }
            return;
        };
        let (mut checks, mut hits) = (0, 0);
        let mut reply = |r: Result<bool, KeyError>| match r {
            Ok(h) => {
                checks += 1;
                hits += h as u64;
                out.boolean(h)
            }
            Err(e) => out.error(&format!("ERR invalid item: {e}")),
        };
        if let [item] = items {
            reply(named.lookup(item, &mut self.scratch));
        } else {
            named.lookup_batch(items, &mut self.lookup_scratch, reply);
        }
        l.checks += checks;
        l.hits += hits;
        self.hits += hits;
    }

    /// `BF.INFO key [field]`. `Size` is the bytes this filter uses (its bit
    /// arrays plus 64 per layer), not RedisBloom's figure for the same
    /// parameters: the layouts differ.
    fn info(&mut self, argv: &[&[u8]], out: &mut Out) {
        let Some(n) = self.named(argv[1]) else {
            return out.error("ERR not found");
        };
        let st = n.layers();
        let capacity = st.capacity() as i64;
        let size = st.bytes() as i64 + 64 * st.layers.len() as i64;
        let filters = st.layers.len() as i64;
        let items = st.items() as i64;
        let expansion = match &st.growth {
            Growth::Redis(m) if !m.nonscaling => Some(m.expansion as i64),
            _ => None,
        };
        if let Some(field) = argv.get(2) {
            let (k, v) = match upper(field).as_slice() {
                b"CAPACITY" => (0, Some(capacity)),
                b"SIZE" => (1, Some(size)),
                b"FILTERS" => (2, Some(filters)),
                b"ITEMS" => (3, Some(items)),
                b"EXPANSION" => (4, expansion),
                _ => return out.error("Invalid information value"),
            };
            // One field: a one-entry map in RESP3, a one-element array in RESP2.
            if out.proto >= 3 {
                out.map(1);
                out.simple(INFO_FIELDS[k]);
            } else {
                out.array(1);
            }
            match v {
                Some(v) => out.int(v),
                None => out.null(),
            }
            return;
        }
        out.map(5);
        for (k, v) in INFO_FIELDS.into_iter().zip([
            Some(capacity),
            Some(size),
            Some(filters),
            Some(items),
            expansion,
        ]) {
            out.simple(k);
            match v {
                Some(v) => out.int(v),
                None => out.null(),
            }
        }
    }

    /// `BF.DEBUG key`: RedisBloom's reply, an array of bulk strings: the
    /// line `size:<items>`, then per layer (oldest first)
    /// `bytes:<n> bits:<n> hashes:<k> hashwidth:<w> capacity:<n> size:<items> ratio:<fp>`.
    ///
    /// From bloomgate's layers: `bytes`/`bits` are the layer's bit array
    /// (a multiple of 512 bits); `hashes` is the probes per item (in the
    /// blocked layout of Redis-created filters all fall in one 512-bit
    /// block); `hashwidth` is 128 (one XXH3-128 hash per item, where
    /// RedisBloom says 64); `capacity` is the items the layer was planned
    /// for; `size` the items it took; `ratio` the false-positive rate it was
    /// planned for (as RedisBloom's: half the requested rate for the first
    /// layer of a scaling filter), printed as C's `%g`.
    fn debug(&self, key: &[u8], out: &mut Out) {
        let Some(n) = self.named(key) else {
            return out.error("ERR not found");
        };
        let st = n.layers();
        out.array(1 + st.layers.len());
        out.bulk(format!("size:{}", st.items()).as_bytes());
        for f in &st.layers {
            let p = f.params();
            let line = format!(
                "bytes:{} bits:{} hashes:{} hashwidth:128 capacity:{} size:{} ratio:{}",
                f.as_bytes().len(),
                p.bits,
                p.k,
                p.planned_items,
                f.items(),
                fmt_g(p.target_fp)
            );
            out.bulk(line.as_bytes());
        }
    }
}

/// `v` as C's `printf("%g")` prints it: six significant digits, trailing
/// zeros dropped, exponent form below 1e-4 and from 1e6 on (`5e-07`).
fn fmt_g(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    // Rounded to six significant digits first: that fixes the exponent.
    let sci = format!("{v:.5e}");
    let (mantissa, exp) = sci.split_once('e').expect("exponent form");
    let exp: i32 = exp.parse().expect("integer exponent");
    let trim = |s: &str| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        trim(&format!("{v:.*}", (5 - exp) as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Parsed = Option<(Vec<Vec<u8>>, usize)>;

    fn p(buf: &[u8]) -> Result<Parsed, ProtocolError> {
        let mut r = Vec::new();
        Ok(parse(buf, 1 << 20, 1000, &mut r)?
            .map(|n| (r.iter().map(|x| buf[x.clone()].to_vec()).collect(), n)))
    }

    #[test]
    fn parses_arrays_inline_and_partials() {
        let (a, n) = p(b"*2\r\n$4\r\nPING\r\n$2\r\nhi\r\nrest").unwrap().unwrap();
        assert_eq!(a, vec![b"PING".to_vec(), b"hi".to_vec()]);
        assert_eq!(n, 22);
        assert_eq!(p(b"*2\r\n$4\r\nPING\r\n$2\r\nh").unwrap(), None);
        assert_eq!(p(b"*2\r\n$4\r").unwrap(), None);
        let (a, _) = p(b"PING  hello\r\n").unwrap().unwrap();
        assert_eq!(a.len(), 2);
        assert!(p(b"*1\r\n$4294967296\r\n").is_err());
        assert!(p(b"*99999999\r\n").is_err());
        assert!(p(b"*1\r\n:12\r\n").is_err());
        assert!(p(b"*1\r\n$2\r\nabcd\r\n").is_err());
        assert!(p(b"*x\r\n").is_err());
        assert!(p(b"*1\r\n$99999999999999999999999\r\n").is_err());
    }

    /// The re-parse hint never asks for more bytes than the complete command
    /// has (a command whose last byte arrived is always parsed: no stall),
    /// and always asks for more than the parser already had.
    #[test]
    fn reparse_hint_is_tight_and_safe() {
        let caps = Caps {
            bulk: 1 << 20,
            array: 1 << 20,
            command: 1 << 20,
        };
        let mut cmds: Vec<Vec<u8>> = vec![
            b"*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n".to_vec(),
            b"*3\r\n$0\r\n\r\n$0\r\n\r\n$0\r\n\r\n".to_vec(),
            b"PING hello\r\n".to_vec(),
        ];
        let mut many = format!("*{}\r\n", 300).into_bytes();
        for i in 0..300 {
            let item = "x".repeat(i % 7);
            many.extend_from_slice(format!("${}\r\n{item}\r\n", item.len()).as_bytes());
        }
        cmds.push(many);
        for cmd in &cmds {
            let mut args = Vec::new();
            let mut need = 0;
            assert!(
                matches!(parse_append(cmd, &caps, &mut args, &mut need), Ok(Some(n)) if n == cmd.len())
            );
            for cut in 0..cmd.len() {
                args.clear();
                let r = parse_append(&cmd[..cut], &caps, &mut args, &mut need);
                assert_eq!(r, Ok(None), "cut {cut}");
                assert!(
                    need > cut && need <= cmd.len(),
                    "cut {cut}: need {need} of {}",
                    cmd.len()
                );
            }
        }
    }

    /// A long command dripped in small pieces is parsed a few times, not
    /// once per piece (each real parse recomputes `need`; a skipped one
    /// leaves it alone), and is parsed completely once its last byte is in.
    #[test]
    fn dripped_command_is_parsed_a_few_times_not_per_read() {
        let mut cmd = b"*1000\r\n".to_vec();
        for i in 0..1000 {
            let item = format!("item-{i}");
            cmd.extend_from_slice(format!("${}\r\n{item}\r\n", item.len()).as_bytes());
        }
        let limits = crate::Limits::default();
        let mut batch = super::Parsed::default();
        let mut parses = 0;
        let mut last_need = usize::MAX;
        for end in (0..cmd.len()).step_by(7) {
            assert_eq!(batch.parse(&cmd[..end], &limits), None);
            assert!(batch.cmds.is_empty());
            if batch.need != last_need {
                parses += 1;
                last_need = batch.need;
            }
        }
        assert!(parses < 40, "{parses} parses for {} reads", cmd.len() / 7);
        assert_eq!(batch.parse(&cmd, &limits), None);
        assert_eq!(batch.cmds.len(), 1);
        assert_eq!(batch.cmds[0].0.len(), 1000);
    }

    #[test]
    fn command_size_is_bounded_in_all() {
        let caps = Caps {
            bulk: 100,
            array: 100,
            command: 250,
        };
        // Each bulk is allowed, their sum is not: refused from the headers,
        // before the data arrives.
        let mut cmd = b"*4\r\n".to_vec();
        for _ in 0..3 {
            cmd.extend_from_slice(b"$90\r\n");
            cmd.extend_from_slice(&[b'a'; 90]);
            cmd.extend_from_slice(b"\r\n");
        }
        let mut args = Vec::new();
        let r = parse_append(&cmd, &caps, &mut args, &mut 0);
        assert_eq!(r, Err(ProtocolError("command too big".into())));
        let r = parse_append(&cmd[..cmd.len() - 10], &caps, &mut args, &mut 0);
        assert_eq!(r, Err(ProtocolError("command too big".into())));
        // Just under the cap is fine.
        let ok = b"*2\r\n$100\r\n"
            .iter()
            .copied()
            .chain([b'a'; 100])
            .chain(*b"\r\n$100\r\n")
            .chain([b'b'; 100])
            .chain(*b"\r\n")
            .collect::<Vec<u8>>();
        assert!(matches!(
            parse_append(&ok, &caps, &mut args, &mut 0),
            Ok(Some(_))
        ));
    }

    #[test]
    fn fmt_g_prints_like_c() {
        for (v, want) in [
            (0.01, "0.01"),
            (0.0005, "0.0005"),
            (0.000625, "0.000625"),
            (5e-7, "5e-07"),
            (1e-15, "1e-15"),
            (0.1, "0.1"),
            (0.00012345678, "0.000123457"),
            (0.000099999999, "0.0001"),
            (0.5, "0.5"),
            (1.0, "1"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (0.0, "0"),
        ] {
            assert_eq!(fmt_g(v), want, "{v}");
        }
    }

    #[test]
    fn globbing() {
        assert!(glob(b"*", b"abc"));
        assert!(glob(b"a?c", b"abc"));
        assert!(glob(b"a[b-d]c", b"acc"));
        assert!(!glob(b"a[^b]c", b"abc"));
        assert!(glob(b"bf:*", b"bf:1"));
        assert!(!glob(b"bf:*", b"x"));
    }
}
