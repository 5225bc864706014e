//! The write-ahead log: live additions survive crashes.
//!
//! The log lives in `DIR/.bloomgate-wal/` as numbered segments; the record
//! format, and how records are matched to filters by lineage, is
//! [`bloomgate_blacklist::wal`] (re-exported here), shared with every other
//! reader of a data directory.
//!
//! Every acknowledged add is logged, also one answered "exists": the bits
//! that answered it may be a false positive or belong to the file's own
//! items, and a reload can replace them.
//!
//! # Group commit
//!
//! One thread owns the open segment. Writers send encoded records over a
//! channel with a one-shot acknowledgement; the thread takes everything
//! queued, writes it with one `write`, calls `fdatasync` once, and then acks
//! the whole group. Under load many adds share one sync, so throughput is
//! bounded by bandwidth rather than by sync latency.
//!
//! # When the disk fails or fills up
//!
//! A group whose write or sync fails is answered with the error: none of its
//! adds is acknowledged. The segment it was written to is abandoned (its
//! tail may be torn; readers keep the intact prefix, see below), because
//! after a failed `fdatasync` the kernel may have dropped dirty pages
//! silently and a later sync of the same file would prove nothing. The log
//! is then *refusing*: appends fail at once ([`Wal::refusing`] lets callers
//! refuse before they change anything) with the error that stopped it, and
//! reads are unaffected. Every [`RETRY`] the writer tries to start a new
//! segment (also when no one writes, so health reports recover by
//! themselves); once one is created and synced, the log accepts writes
//! again. Every acknowledged record was synced in a segment before its
//! acknowledgement, so abandoning a segment loses nothing acknowledged. A
//! log that cannot start a segment at startup (a full disk) starts refusing
//! in the same way, so the server still comes up and serves reads.
//!
//! # Snapshots and replay
//!
//! A snapshot first *rotates* (the thread syncs, opens the next segment and
//! reports the older ones), then saves every changed filter atomically, then
//! appends the add records of the older segments to their filters' journals
//! (`NAME.live`, fsynced), then deletes the older segments. Every record in an older segment was applied
//! to memory before it was queued, hence before the rotation, hence before
//! the filter was copied: the saved files contain it. A crash anywhere in
//! between only means some records are replayed onto files that already
//! contain them, which is harmless because insertion is idempotent.
//!
//! Cuckoo filter changes (`CF.ADD`, `CF.DEL`, …) are logged too, but a
//! delete is not idempotent: they carry sequence numbers and are replayed
//! exactly once, after the changes their filter's file already holds (see
//! `store/local/deletable/`).
//!
//! At startup all segments are read in order. A record whose length is
//! impossible, whose bytes end early or whose checksum does not match is
//! either a *torn tail* (no intact record follows it: a crash during an
//! append, or a segment abandoned after a failed write) or *damage* (see
//! [`bloomgate_blacklist::wal`] for the rule). A torn tail is repaired: the
//! intact prefix is replayed, the loss (records/bytes) is reported in the
//! log (a `tracing` warning) and in the metrics, and the segment is trimmed
//! by the start-up snapshot like any other. Damage stops the start before
//! anything is replayed, saved or trimmed, with an error naming the segment
//! and the byte offset ([`DamagedFile`]); the segment stays byte for byte
//! until `bloomgate repair` salvages it. The shared log cannot tell which
//! filter a damaged record belonged to (its name is among the damaged
//! bytes), so no filter can be trusted and the whole server stops. So does
//! a file in the log directory that looks like a segment but is not named
//! like one ([`strays`]): its records would otherwise be skipped.
//! A segment found damaged while the server runs (by a reload or a
//! snapshot) fails that operation, and the snapshot then trims nothing.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

pub use bloomgate_blacklist::wal::{
    encode_add, encode_chunk, encode_cuckoo, encode_lineage, read_bytes, read_segment,
    read_segment_all, segment_path, segments, strays, AnyRecord, CuckooOp, CuckooRecord,
    DamagedFile, Fault, FaultKind, Record, SegmentReport, MAGIC, MAX_RECORD,
};

use crate::metrics::Metrics;

/// Error of a log operation.
#[derive(Debug, Clone, thiserror::Error)]
#[error("write-ahead log: {message}")]
pub struct WalError {
    /// What kind of failure.
    pub kind: WalErrorKind,
    /// What failed, for people.
    pub message: String,
}

/// The kinds of [`WalError`], for choosing a reply (HTTP 507 for a full disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalErrorKind {
    /// The disk (or a quota) is full.
    NoSpace,
    /// Any other I/O error.
    Io,
    /// The log is shut down.
    Stopped,
}

impl WalError {
    /// An I/O error `e` of `what`.
    pub fn io(what: impl std::fmt::Display, e: &std::io::Error) -> WalError {
        let kind = if is_no_space(e) {
            WalErrorKind::NoSpace
        } else {
            WalErrorKind::Io
        };
        let hint = if kind == WalErrorKind::NoSpace {
            "; writes are refused until space is freed, reads go on"
        } else {
            ""
        };
        WalError {
            kind,
            message: format!("{what}: {e}{hint}"),
        }
    }

    fn stopped(message: &str) -> WalError {
        WalError {
            kind: WalErrorKind::Stopped,
            message: message.into(),
        }
    }
}

/// Whether `e` says the disk or a quota is full.
pub fn is_no_space(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{QuotaExceeded, StorageFull};
    matches!(e.kind(), StorageFull | QuotaExceeded)
}

/// How long a refusing log waits before it tries a new segment again.
pub const RETRY: Duration = Duration::from_millis(500);

/// Whether the log accepts writes, shared by the writer and its callers.
#[derive(Default)]
struct Health {
    /// The error that stopped the log, while it refuses writes.
    failed: Mutex<Option<(WalError, Instant)>>,
    /// Quick check of `failed.is_some()`.
    refusing: AtomicBool,
    /// Failures so far (counted before the failed group is answered).
    failures: AtomicU64,
}

impl Health {
    fn fail(&self, e: WalError, metrics: &Metrics) {
        self.failures.fetch_add(1, Relaxed);
        let mut f = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            tracing::error!("bloomgate serve: {e}");
            metrics.wal_failures.fetch_add(1, Relaxed);
        }
        *f = Some((e, Instant::now()));
        self.refusing.store(true, Relaxed);
    }

    /// The error that stopped the log, while it refuses writes.
    fn error(&self) -> Option<WalError> {
        let f = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        f.as_ref().map(|(e, _)| e.clone())
    }

    fn recover(&self) {
        let mut f = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        if f.take().is_some() {
            tracing::info!("bloomgate serve: write-ahead log: writable again");
        }
        self.refusing.store(false, Relaxed);
    }
}

type Ack<T> = tokio::sync::oneshot::Sender<Result<T, WalError>>;

enum Msg {
    Append(Vec<u8>, Ack<()>),
    Rotate(Ack<Vec<PathBuf>>),
    Stop,
}

/// Handle to the log thread.
pub struct Wal {
    tx: Mutex<mpsc::Sender<Msg>>,
    bytes: Arc<AtomicU64>,
    health: Arc<Health>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Waits for one append to be durable.
pub type AckRx = tokio::sync::oneshot::Receiver<Result<(), WalError>>;

impl Wal {
    /// Starts a new segment after every existing one in `dir` and the thread
    /// that owns it. If the segment cannot be started (a full disk), the log
    /// starts refusing writes instead of failing, and retries.
    pub fn start(dir: &Path, metrics: Arc<Metrics>) -> Result<Wal, WalError> {
        std::fs::create_dir_all(dir).map_err(|e| WalError::io(dir.display(), &e))?;
        let next = segments(dir)
            .map_err(|e| WalError::io(dir.display(), &e))?
            .last()
            .map_or(1, |(n, _)| n + 1);
        let health = Arc::new(Health::default());
        let (file, current) = match new_segment(dir, next) {
            Ok(f) => (Some(f), next),
            Err(e) => {
                health.fail(e, &metrics);
                (None, next - 1)
            }
        };
        let (tx, rx) = mpsc::channel();
        let bytes = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            dir: dir.to_path_buf(),
            current,
            file,
            bytes: bytes.clone(),
            health: health.clone(),
            metrics,
        };
        let thread = std::thread::Builder::new()
            .name("bloomgate-wal".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| WalError::io("cannot start log thread", &e))?;
        Ok(Wal {
            tx: Mutex::new(tx),
            bytes,
            health,
            thread: Mutex::new(Some(thread)),
        })
    }

    fn send(&self, m: Msg) -> bool {
        self.tx.lock().map(|tx| tx.send(m).is_ok()).unwrap_or(false)
    }

    /// Queues encoded records; the receiver resolves once they are durable.
    pub fn append(&self, records: Vec<u8>) -> AckRx {
        let (ack, rx) = tokio::sync::oneshot::channel();
        if !self.send(Msg::Append(records, ack)) {
            let (ack, rx) = tokio::sync::oneshot::channel();
            let _ = ack.send(Err(WalError::stopped("log is shut down")));
            return rx;
        }
        rx
    }

    /// The error an append would fail with now: `Some` while the log refuses
    /// writes and its next retry is not yet due (a caller refuses the write
    /// before it changes anything). `None` when an append may succeed.
    pub fn refusing(&self) -> Option<WalError> {
        if !self.health.refusing.load(Relaxed) {
            return None;
        }
        let f = self.health.failed.lock().unwrap_or_else(|e| e.into_inner());
        f.as_ref()
            .filter(|(_, since)| since.elapsed() < RETRY)
            .map(|(e, _)| e.clone())
    }

    /// How many times the log has failed since it started: a group that
    /// failed has counted it before any of its writers hears back.
    pub fn failures(&self) -> u64 {
        self.health.failures.load(Relaxed)
    }

    /// Why the log refuses writes, if it does (for health reports).
    pub fn failure(&self) -> Option<WalError> {
        self.health.error()
    }

    /// Starts a new segment; returns the paths of all older segments (blocking).
    pub fn rotate(&self) -> Result<Vec<PathBuf>, WalError> {
        let (ack, rx) = tokio::sync::oneshot::channel();
        if !self.send(Msg::Rotate(ack)) {
            return Err(WalError::stopped("log is shut down"));
        }
        rx.blocking_recv()
            .map_err(|_| WalError::stopped("log thread stopped"))?
    }

    /// Bytes written since the last rotation.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Relaxed)
    }

    /// Stops the thread after it has written everything queued.
    pub fn stop(&self) {
        self.send(Msg::Stop);
        if let Some(t) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = t.join();
        }
    }
}

fn new_segment(dir: &Path, n: u64) -> Result<File, WalError> {
    let path = segment_path(dir, n);
    let err = |e: std::io::Error| WalError::io(path.display(), &e);
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .map_err(err)?;
    f.write_all(MAGIC).map_err(err)?;
    f.sync_all().map_err(err)?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(f)
}

/// The log thread's state.
struct Writer {
    dir: PathBuf,
    /// Number of the open segment (or of the last one, while refusing).
    current: u64,
    /// The open segment; `None` while the log refuses writes.
    file: Option<File>,
    bytes: Arc<AtomicU64>,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
        let mut acks: Vec<Ack<()>> = Vec::new();
        let mut stop = false;
        while !stop {
            let first = if self.file.is_some() {
                match rx.recv() {
                    Ok(m) => m,
                    Err(_) => break,
                }
            } else {
                // Refusing: try a new segment now and then, written to or not.
                match rx.recv_timeout(RETRY) {
                    Ok(m) => m,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        self.resume();
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            };
            let mut next = Some(first);
            let mut rotate: Option<Ack<Vec<PathBuf>>> = None;
            // Take everything queued, up to a rotation or ~16 MiB.
            while let Some(m) = next.take() {
                match m {
                    Msg::Append(rec, ack) => {
                        buf.extend_from_slice(&rec);
                        acks.push(ack);
                    }
                    Msg::Rotate(ack) => {
                        rotate = Some(ack);
                        break;
                    }
                    Msg::Stop => {
                        stop = true;
                        break;
                    }
                }
                if buf.len() < (16 << 20) {
                    next = rx.try_recv().ok();
                }
            }
            if !acks.is_empty() {
                let result = self.write_group(&buf);
                if result.is_ok() {
                    self.metrics
                        .wal_records
                        .fetch_add(acks.len() as u64, Relaxed);
                }
                for a in acks.drain(..) {
                    let _ = a.send(result.clone());
                }
                buf.clear();
                if buf.capacity() > (32 << 20) {
                    buf = Vec::with_capacity(1 << 20);
                }
            }
            if let Some(ack) = rotate {
                let _ = ack.send(self.rotate());
            }
        }
    }

    /// Writes and syncs one group; on failure abandons the segment.
    fn write_group(&mut self, buf: &[u8]) -> Result<(), WalError> {
        if self.file.is_none() && !self.resume() {
            return Err(self.failure());
        }
        let file = self.file.as_mut().expect("resumed");
        let current = self.current;
        match file.write_all(buf).and_then(|_| file.sync_data()) {
            Ok(()) => {
                self.bytes.fetch_add(buf.len() as u64, Relaxed);
                self.metrics.wal_syncs.fetch_add(1, Relaxed);
                Ok(())
            }
            Err(e) => {
                let e = WalError::io(format_args!("segment {current}"), &e);
                self.file = None;
                self.health.fail(e.clone(), &self.metrics);
                Err(e)
            }
        }
    }

    /// Starts the next segment; returns the older ones.
    fn rotate(&mut self) -> Result<Vec<PathBuf>, WalError> {
        if self.file.is_none() && !self.resume() {
            return Err(self.failure());
        }
        let f = new_segment(&self.dir, self.current + 1)?;
        self.file = Some(f);
        self.current += 1;
        self.bytes.store(0, Relaxed);
        Ok(segments(&self.dir)
            .unwrap_or_default()
            .into_iter()
            .filter(|(n, _)| *n < self.current)
            .map(|(_, p)| p)
            .collect())
    }

    /// While refusing, once the retry is due: tries to start a new segment.
    /// Returns whether the log accepts writes.
    fn resume(&mut self) -> bool {
        if self.file.is_some() {
            return true;
        }
        let due = {
            let f = self.health.failed.lock().unwrap_or_else(|e| e.into_inner());
            f.as_ref().is_none_or(|(_, since)| since.elapsed() >= RETRY)
        };
        if !due {
            return false;
        }
        match new_segment(&self.dir, self.current + 1) {
            Ok(f) => {
                self.file = Some(f);
                self.current += 1;
                self.bytes.store(0, Relaxed);
                self.health.recover();
                true
            }
            Err(e) => {
                self.health.fail(e, &self.metrics);
                false
            }
        }
    }

    fn failure(&self) -> WalError {
        self.health
            .error()
            .unwrap_or_else(|| WalError::stopped("no open segment"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal-00000001.log");
        let mut buf = MAGIC.to_vec();
        encode_add(&mut buf, "a", 7, b"key1");
        encode_chunk(&mut buf, "b", 8, 1, 64, &[1, 2, 3]);
        encode_add(&mut buf, "a", 7, b"key2");
        let full = buf.len();
        std::fs::write(&path, &buf).unwrap();
        let mut got = Vec::new();
        let rep = read_segment(&path, |r| got.push(r)).unwrap();
        assert_eq!(rep.records, 3);
        assert_eq!(rep.lost_bytes, 0);
        assert_eq!(
            got[1],
            Record::Chunk {
                name: "b".into(),
                seed: 8,
                layer: 1,
                offset: 64,
                data: vec![1, 2, 3]
            }
        );
        // Torn: cut the last record in half.
        std::fs::write(&path, &buf[..full - 3]).unwrap();
        let rep = read_segment(&path, |_| {}).unwrap();
        assert_eq!(rep.records, 2);
        assert!(rep.lost_bytes > 0);
        assert_eq!(rep.fault.unwrap().kind, FaultKind::TornTail);
        // Corrupt a byte in the second record.
        let mut bad = buf.clone();
        bad[MAGIC.len() + 12 + 20] ^= 0xff;
        std::fs::write(&path, &bad).unwrap();
        let rep = read_segment(&path, |_| {}).unwrap();
        assert_eq!(rep.records, 1);
        let fault = rep.fault.unwrap();
        assert!(fault.problem.contains("checksum"));
        // The third record is intact: this is damage, not a torn tail.
        assert_eq!(fault.kind, FaultKind::Damaged);
        // A 4 GB length is refused, not allocated.
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(&[0; 8]);
        std::fs::write(&path, &huge).unwrap();
        let rep = read_segment(&path, |_| {}).unwrap();
        assert_eq!(rep.records, 0);
        assert!(rep.fault.unwrap().problem.contains("impossible"));
    }

    #[test]
    fn group_commit_and_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Wal::start(dir.path(), Arc::new(Metrics::default())).unwrap();
        let mut rxs = Vec::new();
        for i in 0..100u32 {
            let mut b = Vec::new();
            encode_add(&mut b, "f", 1, &i.to_le_bytes());
            rxs.push(wal.append(b));
        }
        for rx in rxs {
            rx.blocking_recv().unwrap().unwrap();
        }
        let old = wal.rotate().unwrap();
        assert_eq!(old.len(), 1);
        let mut n = 0;
        read_segment(&old[0], |_| n += 1).unwrap();
        assert_eq!(n, 100);
        wal.stop();
        assert_eq!(segments(dir.path()).unwrap().len(), 2);
    }
}
