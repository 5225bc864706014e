//! The write-ahead log: live additions survive crashes.
//!
//! The log lives in `DIR/.bloomgate-wal/` as numbered segments; the record
//! format, and how records are matched to filters by lineage, is
//! [`bloomgate_blacklist::log`] (re-exported here), shared with every other
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
//! bounded by bandwidth rather than by sync latency. After any I/O error the
//! log is *poisoned*: every later append fails (an fsync error may have lost
//! data silently, so pretending later syncs are meaningful would be a lie).
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
//! At startup all segments are read in order. A record whose length is
//! impossible, whose bytes end early or whose checksum does not match ends
//! that segment: the intact prefix is kept and the loss (records/bytes) is
//! reported on stderr and in the metrics.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc};

pub use bloomgate_blacklist::log::{
    encode_add, encode_chunk, encode_lineage, read_bytes, read_segment, segment_path, segments,
    Record, SegmentReport, MAGIC, MAX_RECORD,
};

use crate::metrics::Metrics;

/// Error of a log operation.
#[derive(Debug, Clone, thiserror::Error)]
#[error("write-ahead log: {0}")]
pub struct WalError(pub String);

type Ack<T> = tokio::sync::oneshot::Sender<Result<T, WalError>>;

enum Msg {
    Append(Vec<u8>, Ack<()>),
    Rotate(Ack<Vec<PathBuf>>),
    Stop,
}

/// Handle to the log thread.
pub struct Wal {
    tx: std::sync::Mutex<mpsc::Sender<Msg>>,
    bytes: Arc<AtomicU64>,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Waits for one append to be durable.
pub type AckRx = tokio::sync::oneshot::Receiver<Result<(), WalError>>;

impl Wal {
    /// Starts a new segment after every existing one in `dir` and the thread that owns it.
    pub fn start(dir: &Path, metrics: Arc<Metrics>) -> Result<Wal, WalError> {
        std::fs::create_dir_all(dir).map_err(|e| WalError(format!("{}: {e}", dir.display())))?;
        let next = segments(dir)
            .map_err(|e| WalError(format!("{}: {e}", dir.display())))?
            .last()
            .map_or(1, |(n, _)| n + 1);
        let file = new_segment(dir, next)?;
        let (tx, rx) = mpsc::channel();
        let bytes = Arc::new(AtomicU64::new(0));
        let b2 = bytes.clone();
        let dir = dir.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("bloomgate-wal".into())
            .spawn(move || writer(dir, next, file, rx, b2, metrics))
            .map_err(|e| WalError(format!("cannot start log thread: {e}")))?;
        Ok(Wal {
            tx: std::sync::Mutex::new(tx),
            bytes,
            thread: std::sync::Mutex::new(Some(thread)),
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
            let _ = ack.send(Err(WalError("log is shut down".into())));
            return rx;
        }
        rx
    }

    /// Starts a new segment; returns the paths of all older segments (blocking).
    pub fn rotate(&self) -> Result<Vec<PathBuf>, WalError> {
        let (ack, rx) = tokio::sync::oneshot::channel();
        if !self.send(Msg::Rotate(ack)) {
            return Err(WalError("log is shut down".into()));
        }
        rx.blocking_recv()
            .map_err(|_| WalError("log thread stopped".into()))?
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
    let err = |e: std::io::Error| WalError(format!("{}: {e}", path.display()));
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

fn writer(
    dir: PathBuf,
    mut current: u64,
    mut file: File,
    rx: mpsc::Receiver<Msg>,
    bytes: Arc<AtomicU64>,
    metrics: Arc<Metrics>,
) {
    let mut poisoned: Option<WalError> = None;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut acks: Vec<Ack<()>> = Vec::new();
    let mut stop = false;
    while !stop {
        let Ok(first) = rx.recv() else { break };
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
            let result = match &poisoned {
                Some(e) => Err(e.clone()),
                None => file
                    .write_all(&buf)
                    .and_then(|_| file.sync_data())
                    .map_err(|e| WalError(format!("segment {current}: {e}"))),
            };
            if let Err(e) = &result {
                poisoned.get_or_insert_with(|| e.clone());
            } else {
                bytes.fetch_add(buf.len() as u64, Relaxed);
                metrics.wal_syncs.fetch_add(1, Relaxed);
                metrics.wal_records.fetch_add(acks.len() as u64, Relaxed);
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
            let result = match &poisoned {
                Some(e) => Err(e.clone()),
                None => new_segment(&dir, current + 1).map(|f| {
                    file = f;
                    current += 1;
                    bytes.store(0, Relaxed);
                    segments(&dir)
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|(n, _)| *n < current)
                        .map(|(_, p)| p)
                        .collect()
                }),
            };
            let _ = ack.send(result);
        }
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
        // Corrupt a byte in the second record.
        let mut bad = buf.clone();
        bad[MAGIC.len() + 12 + 20] ^= 0xff;
        std::fs::write(&path, &bad).unwrap();
        let rep = read_segment(&path, |_| {}).unwrap();
        assert_eq!(rep.records, 1);
        assert!(rep.problem.unwrap().contains("checksum"));
        // A 4 GB length is refused, not allocated.
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(&[0; 8]);
        std::fs::write(&path, &huge).unwrap();
        let rep = read_segment(&path, |_| {}).unwrap();
        assert_eq!(rep.records, 0);
        assert!(rep.problem.unwrap().contains("impossible"));
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
