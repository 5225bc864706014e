//! One Redis-protocol connection: reads, pipelined execution with
//! prefetch, timeouts, the input budget, waiting for durability
//! acknowledgements, and writes (see the [module doc](super) for the design).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use super::cmd::{self, add_replies, classify, error_reply, exists_replies, lossy, Class};
use super::codec::{Out, Parsed, ProtocolError, MAX_PARSED};
use super::session::{Later, Session};
use crate::metrics::{Op, Proto};
use crate::store::{add_failed, worker_gone, Ack, StoreError};
use crate::App;

/// One connection's state beside its socket and buffers: the [`Session`]
/// its commands read and change, and what the connection does after them
/// (waiting for acknowledgements, answering queued requests, timing).
pub(super) struct Conn {
    pub(super) s: Session,
    /// Writes of this batch waiting to be durable, each with the range of
    /// `Out::buf` holding its command's reply (replaced by an error if the
    /// log fails to write it).
    pub(super) pending: Vec<(Ack, std::ops::Range<usize>)>,
    /// The run of commands being timed (see [`Conn::execute`]).
    pub(super) run: Run,
    /// Commands of this batch whose replies come later, each with the
    /// place in `Out::buf` where its reply goes.
    pub(super) queued: Vec<(Later, usize)>,
}

/// Requests a connection queues before it waits for their answers: a
/// client's pipeline of more commands is taken in several batches.
const MAX_QUEUED: usize = 1024;

/// Consecutive commands of one kind, timed together: reading the clock
/// twice per command cost more than a pipelined `BF.EXISTS` itself.
pub(super) struct Run {
    pub(super) op: Op,
    pub(super) n: u64,
    pub(super) errors: u64,
    pub(super) start: Instant,
}

pub(super) async fn handle(mut stream: TcpStream, app: Arc<App>, id: u64) {
    // A command must fit the input budget: one whose headers say it cannot
    // is refused at once rather than closed halfway through by the budget.
    let mut limits = app.limits.clone();
    limits.max_command_bytes = limits.max_command_bytes.min(app.input.limit());
    // Until a client has presented the token that reads need, it gets
    // Redis's caps for unauthenticated clients (since 7.0: 10 arguments,
    // 16 KiB each), enough for `AUTH` and `HELLO 3 AUTH … SETNAME …`.
    let gated = app.access.check_read(false).is_err();
    let pre_auth = crate::Limits {
        max_bulk_bytes: PRE_AUTH_BULK,
        max_array_len: PRE_AUTH_ARGS,
        max_command_bytes: PRE_AUTH_BULK * PRE_AUTH_ARGS,
        ..limits.clone()
    };
    let now = Instant::now();
    let mut conn = Conn {
        s: Session::new(app, id),
        pending: Vec::new(),
        run: Run {
            op: Op::Other,
            n: 0,
            errors: 0,
            start: now,
        },
        queued: Vec::new(),
    };
    let mut buf = BytesMut::with_capacity(INITIAL_BUF);
    let mut out = Out {
        buf: Vec::with_capacity(16 << 10),
        proto: 2,
    };
    // This connection's share of the input budget (see crate::budget): of
    // the separate budget of clients without the token while it has not
    // presented it (when one is configured).
    let mut authed_account = !conn.s.anonymous();
    let mut account = conn.budget().register();
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
            let parsed_pre_auth = gated && !conn.s.authed;
            let error = batch.parse(&buf, if parsed_pre_auth { &pre_auth } else { &limits });
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
                    conn.s.queueing = false;
                    conn.execute_at(&buf, &args, &mut out);
                    conn.s.queueing = true;
                    (conn, out, buf)
                });
                let Ok(back) = job.await else {
                    return;
                };
                (conn, out, buf) = back;
                next += 1;
                if conn.s.quit || out.buf.len() > (1 << 20) {
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
            if conn.s.quit {
                break;
            }
            if stopped {
                // Send these replies, then go on with the buffer (its
                // commands may be all the client will send).
                more = !buf.is_empty();
                break;
            }
            if conn.s.hang_up {
                break;
            }
            if let Some(ProtocolError(msg)) = error {
                if parsed_pre_auth && conn.s.authed {
                    // Parsed ahead under the unauthenticated caps; the
                    // `AUTH` before it succeeded: parse it again.
                    batch.need = 0;
                    continue;
                }
                conn.s.app.metrics.connections_rejected[Proto::Resp as usize].fetch_add(1, Relaxed);
                let unauthenticated = if parsed_pre_auth {
                    " (unauthenticated clients may send up to 10 arguments of up to 16 KiB: AUTH first)"
                } else {
                    ""
                };
                out.error(&format!("ERR Protocol error: {msg}{unauthenticated}"));
                if flush(&mut stream, &mut conn, &mut out).await.is_ok() {
                    close_gracefully(&mut stream).await;
                }
                return;
            }
            if batch.cmds.len() < MAX_PARSED {
                break;
            }
        }
        if conn.s.hang_up {
            // Not a Redis client: nothing more is run, nothing is answered.
            return;
        }
        let Ok(now) = flush(&mut stream, &mut conn, &mut out).await else {
            return;
        };
        if conn.s.quit {
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
            buf = BytesMut::with_capacity(INITIAL_BUF);
        }
        if batch.args.capacity() > (1 << 16) {
            batch.args = Vec::new();
        }
        if buf.capacity() - buf.len() < 4096 {
            grow(&mut buf, batch.need);
        }
        if authed_account == conn.s.anonymous() {
            // `AUTH` (or `RESET`) moved the connection between budgets.
            authed_account = !conn.s.anonymous();
            account = conn.budget().register();
        }
        // A buffer that just grew is read into only once the budget holds
        // it (see `Account::until_released`). A client without the token
        // accounts only what its buffer grew past the first one: that one
        // is part of the connection's fixed cost (bounded by the connection
        // limit), and a client that connects to send `AUTH` while others
        // fill the budget of such clients must not be closed for it.
        let held = if authed_account {
            buf.capacity()
        } else {
            buf.capacity().saturating_sub(INITIAL_BUF)
        };
        let mut waiting = account.set(held);
        let deadline = match partial_since {
            Some(t) => t + limits.request_timeout,
            None => now + limits.idle_timeout,
        };
        if deadline < armed {
            armed = deadline;
            timer.as_mut().reset(armed.into());
        }
        loop {
            // Reading is preferred, but not by a connection already told to
            // close: while its client keeps sending it would read, and grow,
            // on (its `killed` branch then resolves at once).
            let killed = account.is_killed();
            tokio::select! {
                biased;
                r = read_some(&stream, &mut buf), if !killed && !waiting => match r {
                    Ok(0) | Err(_) => return,
                    Ok(_) => break,
                },
                () = account.until_released(), if waiting && !killed => {
                    waiting = false;
                    continue;
                }
                () = account.killed() => {
                    conn.s.app.metrics.connections_rejected[Proto::Resp as usize]
                        .fetch_add(1, Relaxed);
                    out.error(&if authed_account {
                        format!(
                            "ERR client input buffer budget exceeded ({} MiB for all clients, --max-input-memory): this connection held the most and is closed",
                            conn.s.app.input.limit() >> 20
                        )
                    } else {
                        format!(
                            "ERR client input buffer budget exceeded ({} MiB for all clients without the token): this connection held the most and is closed",
                            conn.s.app.input_unauth.limit() >> 20
                        )
                    });
                    // The buffer goes before the reply is sent.
                    drop(std::mem::take(&mut buf));
                    account.set(0);
                    if flush(&mut stream, &mut conn, &mut out).await.is_ok() {
                        close_gracefully(&mut stream).await;
                    }
                    return;
                }
                () = &mut timer => {
                    if Instant::now() < deadline {
                        armed = deadline;
                        timer.as_mut().reset(armed.into());
                        continue;
                    }
                    conn.s.app.metrics.connections_rejected[Proto::Resp as usize]
                        .fetch_add(1, Relaxed);
                    out.error(if partial_since.is_some() {
                        "ERR request timeout: command not completed in time"
                    } else {
                        "ERR idle timeout"
                    });
                    if flush(&mut stream, &mut conn, &mut out).await.is_ok() {
                        close_gracefully(&mut stream).await;
                    }
                    return;
                }
            }
        }
        conn.run.start = Instant::now();
    }
}

/// A connection's read buffer to begin with.
const INITIAL_BUF: usize = 16 << 10;

/// Unauthenticated clients' largest argument (Redis's, since 7.0).
const PRE_AUTH_BULK: usize = 16 << 10;
/// Unauthenticated clients' most arguments (Redis's, since 7.0).
const PRE_AUTH_ARGS: usize = 10;

/// How long, and for how many bytes at most, a connection closed after an
/// error reply keeps reading (and discarding) what its client still sends.
const LINGER: std::time::Duration = std::time::Duration::from_secs(2);
const LINGER_BYTES: usize = 8 << 20;

/// Closes a connection after its error reply was written, so that the
/// client gets to read it. Closing a socket whose receive queue holds bytes
/// not yet read (the rest of a refused command) sends a reset instead of
/// an orderly end, and a reset makes the client's system drop the reply it
/// has not read yet: the client saw "connection reset" instead of the
/// error. So the write side is shut first (the client reads the reply,
/// then the end of the stream), and what the client still sends is read
/// and thrown away, into a small buffer, until it stops, for at most
/// [`LINGER`] and [`LINGER_BYTES`] (a lingering close, as web servers do).
pub(crate) async fn close_gracefully(stream: &mut TcpStream) {
    use tokio::io::AsyncReadExt;
    if stream.shutdown().await.is_err() {
        return;
    }
    let deadline = tokio::time::Instant::now() + LINGER;
    let mut sink = vec![0u8; 16 << 10];
    let mut total = 0;
    while total < LINGER_BYTES {
        match tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => total += n,
            _ => return,
        }
    }
}

/// Makes room in `buf` for the next read: doubles it (at least 16 KiB
/// free), but never past what the incomplete command at its start needs
/// (`need`, the parser's lower bound on its length) plus a read's worth, so
/// that a 36 MB argument takes about 36 MB of the input budget rather than
/// the next power of two.
fn grow(buf: &mut BytesMut, need: usize) {
    let mut target = buf.capacity().saturating_mul(2);
    if need > buf.len() {
        target = target.min(need.saturating_add(16 << 10));
    }
    let target = target.max(buf.len() + (16 << 10));
    let mut grown = BytesMut::with_capacity(target);
    grown.extend_from_slice(buf);
    *buf = grown;
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

/// How many commands ahead the memory of a `BF.EXISTS` lookup is prefetched.
const PREFETCH_AHEAD: usize = 8;

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

/// Waits for the queued requests' answers and writes their replies, then
/// ends the batch (metrics), waits for its writes to be durable, and sends
/// its replies. Returns the time the batch ended (after any wait).
async fn flush(stream: &mut TcpStream, conn: &mut Conn, out: &mut Out) -> Result<Instant, ()> {
    if !conn.queued.is_empty() {
        conn.answer_queued(out).await;
    }
    let mut now = conn.end_batch();
    if !conn.pending.is_empty() {
        let mut failed = Vec::new();
        for (ack, reply) in conn.pending.drain(..) {
            if let Err(e) = ack.wait().await {
                failed.push((reply, e));
            }
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
fn replace_replies(buf: &[u8], failed: &[(std::ops::Range<usize>, StoreError)]) -> Vec<u8> {
    let mut out = Out {
        buf: Vec::with_capacity(buf.len()),
        proto: 2,
    };
    let mut at = 0;
    for (r, e) in failed {
        out.buf.extend_from_slice(&buf[at..r.start]);
        out.error(&error_reply(e));
        at = r.end;
    }
    out.buf.extend_from_slice(&buf[at..]);
    out.buf
}

/// `buf` with each of `inserts`' bytes (a range of `replies`) inserted
/// at its place (in order).
fn insert_replies(
    buf: &[u8],
    replies: &[u8],
    inserts: &[(usize, std::ops::Range<usize>)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(buf.len() + replies.len());
    let mut at = 0;
    for (place, bytes) in inserts {
        out.extend_from_slice(&buf[at..*place]);
        out.extend_from_slice(&replies[bytes.clone()]);
        at = *place;
    }
    out.extend_from_slice(&buf[at..]);
    out
}

/// Whether a command is a line of an HTTP request: `POST` and `Host:` as
/// Redis checks (any HTTP request has one or the other), and a request line
/// (`GET /path HTTP/1.1`, any method) for the rest.
fn looks_like_http(cmd: &[u8], argv: &[&[u8]]) -> bool {
    if cmd == b"POST" || cmd == b"HOST:" {
        return true;
    }
    let method = matches!(
        cmd,
        b"GET" | b"HEAD" | b"PUT" | b"DELETE" | b"OPTIONS" | b"PATCH" | b"CONNECT" | b"TRACE"
    );
    method && argv.len() == 3 && argv[2].len() >= 5 && argv[2][..5].eq_ignore_ascii_case(b"HTTP/")
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
        let (class, op) = classify(cmd);
        // Time runs of commands of one kind; adds and admin commands each
        // on their own (they can be slow).
        if self.run.n > 0 && self.run.op != op {
            self.end_run(Instant::now());
        }
        self.run.op = op;
        if looks_like_http(cmd, argv) {
            // Redis does the same (since 3.2.7): a browser or proxy made to
            // send an HTTP request here must not get its body run as
            // commands (cross-protocol scripting).
            tracing::warn!(
                "bloomgate serve: Redis-protocol connection {} sent an HTTP request ('{}'): possible cross-protocol attack, closed without running anything",
                self.s.id,
                lossy(&argv[0][..argv[0].len().min(16)])
            );
            self.s.quit = true;
            self.s.hang_up = true;
            return;
        }
        let before = out.buf.len();
        let denied = match class {
            // Before the token (where reads need it), every command but
            // these answers NOAUTH, as Redis's do.
            Class::Conn if !matches!(cmd, b"AUTH" | b"HELLO" | b"QUIT" | b"RESET") => {
                self.s.app.access.check_read(self.s.authed).err()
            }
            Class::Conn => None,
            Class::Read => self.s.app.access.check_read(self.s.authed).err(),
            Class::Write => self.s.app.access.check_write(self.s.authed).err(),
        };
        match denied {
            Some(crate::auth::Denied::NeedToken) => out.error("NOAUTH Authentication required."),
            Some(d) => out.error(&format!("NOPERM {}", d.message())),
            None => cmd::execute(&mut self.s, cmd, argv, out),
        }
        if let Some(ack) = self.s.ack.take().filter(|a| !a.is_done()) {
            self.pending.push((ack, before..out.buf.len()));
        }
        // A queued command's errors are counted, and its run timed, when
        // its answer arrives.
        let queued = match self.s.later.take() {
            Some(later) => {
                self.queued.push((later, before));
                true
            }
            None => false,
        };
        self.run.n += 1;
        self.run.errors += (out.buf.get(before) == Some(&b'-')) as u64;
        if matches!(op, Op::Add | Op::Admin) && !queued {
            self.end_run(Instant::now());
        }
    }

    /// Waits for the answers of the queued requests, in order, and inserts
    /// their replies where their commands' replies belong.
    async fn answer_queued(&mut self, out: &mut Out) {
        let mut inserts = Vec::with_capacity(self.queued.len());
        // Every reply in one buffer, each insert a range of it.
        let mut reply = Out {
            buf: Vec::new(),
            proto: out.proto,
        };
        let mut errors = 0;
        for (later, place) in std::mem::take(&mut self.queued) {
            let start = reply.buf.len();
            match later {
                Later::Check { rx, multi, filter } => {
                    let checked = rx.await.unwrap_or_else(|_| Err(worker_gone()));
                    let (checks, hits) = exists_replies(&mut reply, multi, checked);
                    filter.count(checks, hits);
                    self.s.hits += hits;
                }
                Later::Add { rx, multi } => match rx.await.unwrap_or_else(|_| Err(worker_gone())) {
                    Ok(outcomes) => add_replies(&mut reply, multi, &outcomes),
                    Err(e) => reply.error(&error_reply(&add_failed(e))),
                },
            }
            errors += (reply.buf.get(start) == Some(&b'-')) as u64;
            inserts.push((place, start..reply.buf.len()));
        }
        self.run.errors += errors;
        // Writes awaiting durability (none with a remote store) keep
        // their replies' ranges, moved by what was inserted before them.
        let mut shift = 0;
        let mut k = 0;
        for (_, r) in self.pending.iter_mut() {
            while k < inserts.len() && inserts[k].0 <= r.start {
                shift += inserts[k].1.len();
                k += 1;
            }
            *r = r.start + shift..r.end + shift;
        }
        out.buf = insert_replies(&out.buf, &reply.buf, &inserts);
    }

    /// Whether the command `args` must wait for the queued requests before
    /// it runs: anything but one more request of the same kind, or more
    /// than [`MAX_QUEUED`] of them.
    fn waits_for_queued(&self, buf: &[u8], args: &[std::ops::Range<usize>]) -> bool {
        let Some((last, _)) = self.queued.last() else {
            return false;
        };
        if self.queued.len() >= MAX_QUEUED {
            return true;
        }
        let Some(cmd) = args.first() else {
            return false;
        };
        let cmd = &buf[cmd.clone()];
        let is = |name: &[u8]| cmd.eq_ignore_ascii_case(name);
        match last {
            Later::Check { .. } => !(is(b"BF.EXISTS") || is(b"BF.MEXISTS")),
            Later::Add { .. } => !(is(b"BF.ADD") || is(b"BF.MADD")),
        }
    }

    /// The input budget this connection's buffers count against.
    fn budget(&self) -> &Arc<crate::budget::InputBudget> {
        if self.s.anonymous() {
            &self.s.app.input_unauth
        } else {
            &self.s.app.input
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
            if self.waits_for_queued(buf, args) {
                return (i, Stop::Full);
            }
            if self.blocks(buf, args) {
                if !self.queued.is_empty() {
                    return (i, Stop::Full);
                }
                return (i, Stop::Blocking);
            }
            self.execute_at(buf, args, out);
            if self.s.quit || out.buf.len() > (1 << 20) {
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
    /// deleting filters, and loading chunks; `KEYS` and `SCAN` (a pattern
    /// matched against every name); and adds while a filter's write
    /// lock is taken (by a reload, say); and every `BF.*` command of a store
    /// whose calls go over the network ([`Store::is_remote`](crate::store::Store::is_remote)).
    /// They run on Tokio's blocking pool so that they cannot stall the other
    /// connections of this thread.
    fn blocks(&mut self, buf: &[u8], args: &[std::ops::Range<usize>]) -> bool {
        let Some(cmd) = args.first() else {
            return false;
        };
        let cmd = &buf[cmd.clone()];
        let is = |name: &[u8]| cmd.eq_ignore_ascii_case(name);
        if is(b"BF.RESERVE") || is(b"BF.LOADCHUNK") || is(b"DEL") || is(b"UNLINK") {
            return true;
        }
        // Matching every name against a client's pattern costs
        // names × pattern × name length: bounded, but not small.
        if is(b"KEYS") || is(b"SCAN") {
            return true;
        }
        if self.s.app.store.is_remote() {
            // Lookups and adds of a filter served already are queued in
            // the store's batch (see `Later`); the rest may wait on Redis.
            let add = is(b"BF.ADD") || is(b"BF.MADD");
            let queues = add || is(b"BF.EXISTS") || is(b"BF.MEXISTS");
            if queues && args.len() >= 3 && self.s.app.store.can_queue(&buf[args[1].clone()], add) {
                return false;
            }
            return cmd.len() > 3 && cmd[..3].eq_ignore_ascii_case(b"BF.");
        }
        if cmd.len() > 3 && cmd[..3].eq_ignore_ascii_case(b"CF.") && args.len() >= 2 {
            let key = String::from_utf8_lossy(&buf[args[1].clone()]);
            return self.s.app.store.cf_would_block(cmd, &key);
        }
        if (is(b"BF.ADD") || is(b"BF.MADD") || is(b"BF.INSERT")) && args.len() >= 2 {
            self.s.look_up(&buf[args[1].clone()]);
            return self
                .s
                .last
                .named
                .as_ref()
                .is_none_or(|n| n.add_would_block());
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
            let l = &self.s.last;
            if let Some(n) = &l.named {
                if l.valid
                    && buf[key.clone()] == l.key[..]
                    && buf[cmd.clone()].eq_ignore_ascii_case(b"BF.EXISTS")
                    && l.generation == self.s.app.store.generation()
                {
                    n.prefetch(&buf[item.clone()]);
                }
            }
        }
    }

    /// Records the current run of commands as ending at `now`.
    fn end_run(&mut self, now: Instant) {
        let r = &mut self.run;
        self.s.app.metrics.record_many(
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
        self.s.flush_lookup_counts();
        let m = &self.s.app.metrics;
        if self.s.items_checked > 0 {
            m.items_checked.fetch_add(self.s.items_checked, Relaxed);
            self.s.items_checked = 0;
        }
        if self.s.hits > 0 {
            m.hits.fetch_add(self.s.hits, Relaxed);
            self.s.hits = 0;
        }
        now
    }
}
