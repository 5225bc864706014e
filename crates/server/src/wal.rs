//! The write-ahead log: live additions survive crashes.
//!
//! # Format
//!
//! The log lives in `DIR/.bloomgate-wal/` as numbered segments
//! `wal-00000001.log`, … Each segment starts with the 8-byte magic
//! `BGWAL001` and then holds records:
//!
//! ```text
//! u32 LE  payload length (≤ 64 MiB)
//! u64 LE  xxh3-64 of the payload
//! payload:
//!   u8      kind (1 = add key, 2 = OR a chunk of bits, 3 = lineage marker)
//!   u16 LE  filter name length, then the name
//!   u64 LE  seed of the filter's first layer (identifies this incarnation)
//!   kind 1: the normalized key bytes
//!   kind 2: u32 LE layer, u64 LE byte offset, then the bytes
//!   kind 3: u8 key kind, u8 match mode (only in live-add journals)
//! ```
//!
//! The same segment format (magic and records) is used by the per-filter
//! journals of live adds, `NAME.live` ([`crate::journal`]).
//!
//! Records carry the *normalized* key, so replay needs no URL parsing, and
//! the seed of the filter they were made against. A record is replayed onto
//! a filter only if that seed is in the filter's *lineage* (the seeds of the
//! files it has served since it was created, kept in its journal, see
//! [`crate::journal`]): records made before a reload still apply after it,
//! records of a filter that was since deleted or recreated do not.
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
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc};

use xxhash_rust::xxh3::xxh3_64;

use crate::metrics::Metrics;

/// Segment file magic.
pub const MAGIC: &[u8; 8] = b"BGWAL001";
/// Largest payload accepted when reading (anything larger is corruption).
pub const MAX_RECORD: usize = 64 << 20;
const KIND_ADD: u8 = 1;
const KIND_CHUNK: u8 = 2;
const KIND_LINEAGE: u8 = 3;

/// One decoded log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A key was added to a filter.
    Add {
        /// Filter name.
        name: String,
        /// Seed of the filter's first layer.
        seed: u64,
        /// Normalized key.
        key: Vec<u8>,
    },
    /// Bits were OR-ed into a layer (`BF.LOADCHUNK`).
    Chunk {
        /// Filter name.
        name: String,
        /// Seed of the filter's first layer.
        seed: u64,
        /// Layer index.
        layer: u32,
        /// Byte offset in the layer's bit array.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// A live-add journal's marker: filter files with this layer-0 seed
    /// belong to the journal's filter, and their keys were normalized with
    /// this key kind and match mode.
    Lineage {
        /// Filter name.
        name: String,
        /// Seed of the filter's first layer.
        seed: u64,
        /// Key kind code.
        key_kind: u8,
        /// Match mode code.
        match_mode: u8,
    },
}

fn header(out: &mut Vec<u8>, kind: u8, name: &str, seed: u64) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; 12]);
    out.push(kind);
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&seed.to_le_bytes());
    start
}

fn seal(out: &mut [u8], start: usize) {
    let payload_len = out.len() - start - 12;
    let sum = xxh3_64(&out[start + 12..]);
    out[start..start + 4].copy_from_slice(&(payload_len as u32).to_le_bytes());
    out[start + 4..start + 12].copy_from_slice(&sum.to_le_bytes());
}

/// Appends an encoded add record to `out`.
pub fn encode_add(out: &mut Vec<u8>, name: &str, seed: u64, key: &[u8]) {
    let start = header(out, KIND_ADD, name, seed);
    out.extend_from_slice(key);
    seal(out, start);
}

/// Appends an encoded chunk record to `out`.
pub fn encode_chunk(
    out: &mut Vec<u8>,
    name: &str,
    seed: u64,
    layer: u32,
    offset: u64,
    data: &[u8],
) {
    let start = header(out, KIND_CHUNK, name, seed);
    out.extend_from_slice(&layer.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(data);
    seal(out, start);
}

/// Appends an encoded lineage marker to `out`.
pub fn encode_lineage(out: &mut Vec<u8>, name: &str, seed: u64, key_kind: u8, match_mode: u8) {
    let start = header(out, KIND_LINEAGE, name, seed);
    out.push(key_kind);
    out.push(match_mode);
    seal(out, start);
}

fn decode_payload(p: &[u8]) -> Option<Record> {
    let kind = *p.first()?;
    let nlen = u16::from_le_bytes(p.get(1..3)?.try_into().ok()?) as usize;
    let name = std::str::from_utf8(p.get(3..3 + nlen)?).ok()?.to_owned();
    let rest = p.get(3 + nlen..)?;
    let seed = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
    let body = &rest[8..];
    match kind {
        KIND_ADD => Some(Record::Add {
            name,
            seed,
            key: body.to_vec(),
        }),
        KIND_CHUNK => Some(Record::Chunk {
            name,
            seed,
            layer: u32::from_le_bytes(body.get(..4)?.try_into().ok()?),
            offset: u64::from_le_bytes(body.get(4..12)?.try_into().ok()?),
            data: body.get(12..)?.to_vec(),
        }),
        KIND_LINEAGE if body.len() == 2 => Some(Record::Lineage {
            name,
            seed,
            key_kind: body[0],
            match_mode: body[1],
        }),
        _ => None,
    }
}

/// What reading one segment found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SegmentReport {
    /// Intact records.
    pub records: u64,
    /// Bytes after the intact prefix that were discarded.
    pub lost_bytes: u64,
    /// Why reading stopped early, if it did.
    pub problem: Option<String>,
}

/// Reads a segment's records. Stops at the first damaged record.
pub fn read_segment(path: &Path, f: impl FnMut(Record)) -> std::io::Result<SegmentReport> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    Ok(read_bytes(&bytes, f))
}

/// Reads the records of a segment's contents. Stops at the first damaged
/// record; the intact prefix is `bytes.len() - lost_bytes` long.
pub fn read_bytes(bytes: &[u8], mut f: impl FnMut(Record)) -> SegmentReport {
    let mut rep = SegmentReport::default();
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        rep.lost_bytes = bytes.len() as u64;
        if !bytes.is_empty() {
            rep.problem = Some("bad segment magic".into());
        }
        return rep;
    }
    let mut pos = MAGIC.len();
    while pos < bytes.len() {
        let problem = (|| {
            let head = bytes.get(pos..pos + 12).ok_or("truncated record header")?;
            let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
            if len > MAX_RECORD {
                return Err("impossible record length");
            }
            let sum = u64::from_le_bytes(head[4..12].try_into().expect("8 bytes"));
            let payload = bytes
                .get(pos + 12..pos + 12 + len)
                .ok_or("truncated record")?;
            if xxh3_64(payload) != sum {
                return Err("record checksum mismatch");
            }
            let rec = decode_payload(payload).ok_or("undecodable record")?;
            Ok((rec, 12 + len))
        })();
        match problem {
            Ok((rec, n)) => {
                f(rec);
                rep.records += 1;
                pos += n;
            }
            Err(why) => {
                rep.lost_bytes = (bytes.len() - pos) as u64;
                rep.problem = Some(format!("{why} at byte {pos}"));
                break;
            }
        }
    }
    rep
}

/// Segment paths in `dir`, sorted by number.
pub fn segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = name
            .strip_prefix("wal-")
            .and_then(|s| s.strip_suffix(".log"))
            .and_then(|s| s.parse::<u64>().ok())
        {
            out.push((n, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("wal-{n:08}.log"))
}

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
