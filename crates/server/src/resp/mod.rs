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
//! without sending the unacknowledged replies: no ack, no promise. With a
//! store in Redis, a connection's pipelined `BF.EXISTS`/`BF.MEXISTS` (or
//! `BF.ADD`/`BF.MADD`) are queued in the store's batches together with
//! other connections' requests, and their replies written in order when
//! the answers arrive (`session::Later`); other Redis-store commands run on
//! the blocking pool.
//!
//! # Limits
//!
//! Bulk strings longer than `max_bulk_bytes`, arrays longer than
//! `max_array_len`, commands whose bulk strings add up to more than
//! `max_command_bytes`, inline commands longer than 64 KiB, malformed framing,
//! more than `max_connections` clients, silence longer than `idle_timeout`,
//! and a command that takes longer than `request_timeout` to arrive once
//! started (a slow drip) each get a Redis error and a closed connection
//! (closed gracefully, so that the client reads the error: see
//! `conn::close_gracefully`). A length header is checked before anything
//! is allocated for it, so a `$4294967296` header costs nothing; a command
//! is also capped by the input budget ([`crate::budget`]), so one that
//! could never fit is refused at its header. Until a client has presented
//! the token that reads need, it may send Redis's unauthenticated maximum
//! (10 arguments of 16 KiB), its input counts against the separate budget
//! of such clients, and every command but `AUTH`, `HELLO`, `QUIT` and
//! `RESET` answers `NOAUTH`. A connection whose command is `POST`, `Host:`
//! or an HTTP request line is closed without running it or anything after
//! it, and without a reply, as Redis does: it is a browser or proxy made to
//! talk to this port (cross-protocol scripting).
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
//! `EXISTS`, `TYPE`, `KEYS`, `SCAN`, `DBSIZE`; and the cuckoo filters'
//! `CF.RESERVE`, `CF.ADD`, `CF.ADDNX`, `CF.INSERT`, `CF.INSERTNX`,
//! `CF.EXISTS`, `CF.MEXISTS`, `CF.COUNT`, `CF.DEL`, `CF.INFO`,
//! `CF.COMPACT`, `CF.SCANDUMP`, `CF.LOADCHUNK` (see `cmd/cf.rs`). Replies and error strings
//! follow Redis and RedisBloom; RESP3 connections get maps for `HELLO` and
//! `BF.INFO`, booleans for `BF.EXISTS`/`BF.ADD` results and `_` nulls.
//!
//! # Files
//!
//! | file | role |
//! |---|---|
//! | [`codec`] | the wire format: command parser, pipelined batches, reply writer ([`Out`]) |
//! | `conn` | one connection: reads, pipelining with prefetch, timeouts, input budget, access checks, waiting for acks and queued answers, writes |
//! | `session` | what a command may read and change of its connection (`Session`): authentication, name, the write to acknowledge, the queued request, the cached filter lookup |
//! | `cmd` | the commands, mini-redis style: each parsed from its frame into a type (no connection, no store), then applied to the store through the session; `cmd/server.rs` the connection and keyspace commands, `cmd/bf.rs` the `BF.*` commands, `cmd/cf.rs` the `CF.*` commands, `cmd/glob.rs` Redis's patterns |
//!
//! The modules depend one way: `conn` uses `cmd`, `session` and `codec`;
//! `cmd` uses `session` and `codec`; none imports `conn`.
//!
//! This file holds the listener and the pool of connection threads.

mod cmd;
pub mod codec;
mod conn;
mod session;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

pub use cmd::{glob, glob_reference};
pub use codec::{parse, Out, ProtocolError};
pub(crate) use conn::close_gracefully;

use crate::metrics::Proto;
use crate::App;

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
            tracing::error!("bloomgate serve: cannot start the Redis-protocol threads: {e}");
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
                    conn::handle(stream, app.clone(), id).await;
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
