//! The delta file of a static list: `NAME.bgf.delta`, every key added to a
//! static (ribbon) filter since it was built.
//!
//! A ribbon filter is solved once from all its keys and cannot take one
//! more. Adds go into a small Bloom filter beside it (the *delta*, kept in
//! memory by `bloomgate_list`), and the keys themselves go into this file,
//! for two reasons: a Bloom filter cannot list its keys, and a rebuild must
//! fold them into the next solution (`bloomgate build --fold`), so the
//! exact keys are what has to be durable; and the delta's bits follow from
//! its keys, so one file of keys is the whole durable state — there is no
//! second file to keep consistent with it. Opening the list reads the file
//! and inserts into the delta every key that the solution does not already
//! hold.
//!
//! # Format
//!
//! ```text
//! header, 32 bytes:
//!   0..8    magic "BGDELTA\x01"
//!   8..12   version, u32 little-endian (1)
//!   12      key kind code      13  match mode code      14..24  zero
//!   24..32  xxh3-64 of bytes 0..24
//! records, one per key, appended:
//!   u32 LE  key length n (at most MAX_DELTA_KEY)
//!   n bytes the normalized key
//!   u32 LE  the low 32 bits of xxh3-64 of the length and the key
//! ```
//!
//! # Durable before acknowledged, and never "absent" when damaged
//!
//! [`DeltaWriter::append`] writes a batch of records with one `write` and
//! makes it durable (`fdatasync`) before it returns, so an add that a front
//! end acknowledged survives a `kill -9` or a power cut. A write that fails
//! is cut back off the file (the file keeps its previous length). A
//! record that does not check (a flipped bit, a length past
//! [`MAX_DELTA_KEY`]), a header that does not, and a file that ends inside
//! a record are each [`DeltaError::Damaged`], naming the offset: never
//! read as "no more keys", since a key lost would be a false negative.
//! (A file cut exactly between two records cannot be told from a shorter
//! one; the checksums guard the bytes, not the count.)
//!
//! # Several writers
//!
//! Each append holds an exclusive `flock` on the file for its write and
//! sync; [`DeltaKeys::read`] holds a shared one while it reads, so it never
//! sees half a batch. Appends of several processes interleave whole
//! batches. A rebuild that folds the keys in removes the keys it folded
//! under the same lock ([`trim`]): the file is replaced by one holding only
//! the keys appended since it read it, or removed, and a writer that finds
//! its file replaced after taking the lock opens the new one.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_64;

/// First bytes of every delta file.
pub const DELTA_MAGIC: [u8; 8] = *b"BGDELTA\x01";

/// The format version this build writes and reads.
pub const DELTA_VERSION: u32 = 1;

/// Bytes of the header.
pub const DELTA_HEADER_LEN: usize = 32;

/// The longest key a record may hold (a length field above it is damage).
pub const MAX_DELTA_KEY: usize = 1 << 20;

/// Bytes a record adds to its key: the length and the check.
const RECORD_OVERHEAD: usize = 8;

/// The delta file of the static filter file `base`: `BASE.delta`.
pub fn delta_path(base: &Path) -> PathBuf {
    let mut s = base.as_os_str().to_os_string();
    s.push(".delta");
    PathBuf::from(s)
}

/// Errors of a delta file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeltaError {
    /// Reading, writing or syncing failed.
    #[error("{path}: cannot {op}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// The file does not check: its keys cannot all be read, so the list
    /// cannot answer.
    #[error("{path}: the delta file of added keys is damaged at byte {offset}: {problem}; restore it from a backup (the list cannot answer without every added key)")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// Where.
        offset: u64,
        /// What is wrong.
        problem: String,
    },
    /// The keys were normalized by other rules than the filter's.
    #[error("{path}: holds {found_kind}/{found_mode} keys (codes), the filter {kind}/{mode}: it belongs to another filter; fold it into a rebuild of that filter or move it away")]
    Rules {
        /// The file.
        path: PathBuf,
        /// The file's key kind code.
        found_kind: u8,
        /// The file's match mode code.
        found_mode: u8,
        /// The filter's key kind code.
        kind: u8,
        /// The filter's match mode code.
        mode: u8,
    },
    /// A key longer than [`MAX_DELTA_KEY`] was to be added.
    #[error("a key of {0} bytes is longer than a delta file holds ({MAX_DELTA_KEY})")]
    KeyTooLong(usize),
}

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> DeltaError + 'a {
    move |source| DeltaError::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// The header of a new file.
fn encode_header(key_kind: u8, match_mode: u8) -> [u8; DELTA_HEADER_LEN] {
    let mut h = [0u8; DELTA_HEADER_LEN];
    h[..8].copy_from_slice(&DELTA_MAGIC);
    h[8..12].copy_from_slice(&DELTA_VERSION.to_le_bytes());
    h[12] = key_kind;
    h[13] = match_mode;
    let sum = xxh3_64(&h[..24]);
    h[24..].copy_from_slice(&sum.to_le_bytes());
    h
}

/// The check of one record: over its length field and its key.
fn record_check(len: &[u8; 4], key: &[u8]) -> u32 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(len);
    h.update(key);
    h.digest() as u32
}

/// Appends the record of `key` to `out`.
fn encode_record(out: &mut Vec<u8>, key: &[u8]) -> Result<(), DeltaError> {
    if key.len() > MAX_DELTA_KEY {
        return Err(DeltaError::KeyTooLong(key.len()));
    }
    let len = (key.len() as u32).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(key);
    out.extend_from_slice(&record_check(&len, key).to_le_bytes());
    Ok(())
}

/// The keys of a delta file, read whole and checked.
#[derive(Debug, Clone)]
pub struct DeltaKeys {
    /// Key kind code the keys were normalized with.
    pub key_kind: u8,
    /// Match mode code.
    pub match_mode: u8,
    buf: Vec<u8>,
    count: u64,
}

impl DeltaKeys {
    /// Reads and checks the delta file at `path` (under a shared lock);
    /// `Ok(None)` when there is none.
    pub fn read(path: &Path) -> Result<Option<DeltaKeys>, DeltaError> {
        let mut file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(path, "open")(e)),
        };
        file.lock_shared().map_err(io(path, "lock"))?;
        let mut buf = Vec::new();
        let read = file.read_to_end(&mut buf);
        let _ = file.unlock();
        read.map_err(io(path, "read"))?;
        DeltaKeys::decode(path, buf).map(Some)
    }

    /// Checks the bytes of a delta file (`path` names it in errors).
    pub fn decode(path: &Path, buf: Vec<u8>) -> Result<DeltaKeys, DeltaError> {
        let damaged = |offset: usize, problem: String| DeltaError::Damaged {
            path: path.to_path_buf(),
            offset: offset as u64,
            problem,
        };
        if buf.len() < DELTA_HEADER_LEN {
            return Err(damaged(
                0,
                format!("{} bytes, shorter than its header", buf.len()),
            ));
        }
        if buf[..8] != DELTA_MAGIC {
            return Err(damaged(
                0,
                "not a bloomgate delta file (wrong magic)".into(),
            ));
        }
        let sum = u64::from_le_bytes(buf[24..32].try_into().expect("8 bytes"));
        if sum != xxh3_64(&buf[..24]) {
            return Err(damaged(0, "the header checksum does not match".into()));
        }
        let version = u32::from_le_bytes(buf[8..12].try_into().expect("4 bytes"));
        if version != DELTA_VERSION {
            return Err(damaged(
                8,
                format!("format version {version} (written by a newer bloomgate?)"),
            ));
        }
        if buf[14..24].iter().any(|&b| b != 0) {
            return Err(damaged(14, "reserved header bytes are not zero".into()));
        }
        let mut at = DELTA_HEADER_LEN;
        let mut count = 0u64;
        while at < buf.len() {
            let rest = buf.len() - at;
            if rest < 4 {
                return Err(damaged(
                    at,
                    format!("the file ends {rest} byte(s) into a record's length (truncated, or an add cut short)"),
                ));
            }
            let len: [u8; 4] = buf[at..at + 4].try_into().expect("4 bytes");
            let n = u32::from_le_bytes(len) as usize;
            if n > MAX_DELTA_KEY {
                return Err(damaged(
                    at,
                    format!("a record's length {n} is past the limit {MAX_DELTA_KEY}"),
                ));
            }
            if rest < n + RECORD_OVERHEAD {
                return Err(damaged(
                    at,
                    format!("the file ends {rest} byte(s) into a record of {} (truncated, or an add cut short)", n + RECORD_OVERHEAD),
                ));
            }
            let key = &buf[at + 4..at + 4 + n];
            let check =
                u32::from_le_bytes(buf[at + 4 + n..at + 8 + n].try_into().expect("4 bytes"));
            if check != record_check(&len, key) {
                return Err(damaged(at, "a record's checksum does not match".into()));
            }
            at += n + RECORD_OVERHEAD;
            count += 1;
        }
        Ok(DeltaKeys {
            key_kind: buf[12],
            match_mode: buf[13],
            buf,
            count,
        })
    }

    /// Keys in the file.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether the file holds no key.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of the file.
    pub fn bytes(&self) -> u64 {
        self.buf.len() as u64
    }

    /// Fails with [`DeltaError::Rules`] unless the keys were normalized by
    /// key kind `kind` and match mode `mode` (codes).
    pub fn check_rules(&self, path: &Path, kind: u8, mode: u8) -> Result<(), DeltaError> {
        if (self.key_kind, self.match_mode) == (kind, mode) {
            return Ok(());
        }
        Err(DeltaError::Rules {
            path: path.to_path_buf(),
            found_kind: self.key_kind,
            found_mode: self.match_mode,
            kind,
            mode,
        })
    }

    /// The keys, in the order they were added (checked by
    /// [`DeltaKeys::decode`]).
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.iter_from(0)
    }

    /// The keys from byte `offset` of the file on (`offset` a record
    /// boundary this value's file had, such as an earlier read's length).
    fn iter_from(&self, offset: u64) -> impl Iterator<Item = &[u8]> + '_ {
        let start = (offset as usize).max(DELTA_HEADER_LEN);
        let mut at = start;
        std::iter::from_fn(move || {
            let len = self.buf.get(at..at + 4)?;
            let n = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
            let key = &self.buf[at + 4..at + 4 + n];
            at += n + RECORD_OVERHEAD;
            Some(key)
        })
    }
}

/// Appends keys to a delta file, durably (see the module documentation).
#[derive(Debug)]
pub struct DeltaWriter {
    path: PathBuf,
    key_kind: u8,
    match_mode: u8,
    file: Option<File>,
    buf: Vec<u8>,
}

impl DeltaWriter {
    /// A writer of the delta file at `path` for keys of key kind `key_kind`
    /// and match mode `match_mode` (codes). The file is made at the first
    /// append if there is none.
    pub fn new(path: &Path, key_kind: u8, match_mode: u8) -> DeltaWriter {
        DeltaWriter {
            path: path.to_path_buf(),
            key_kind,
            match_mode,
            file: None,
            buf: Vec::new(),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record per key with one write, and syncs it: durable
    /// when it returns `Ok`. On an error nothing of the batch stays in the
    /// file (a partial write is cut off again), unless cutting it off
    /// failed too, which the next read reports as damage.
    pub fn append<T: AsRef<[u8]>>(&mut self, keys: &[T]) -> Result<(), DeltaError> {
        if keys.is_empty() {
            return Ok(());
        }
        self.buf.clear();
        for k in keys {
            encode_record(&mut self.buf, k.as_ref())?;
        }
        let file = self.locked_file()?;
        let result = append_locked(&self.path, &file, &self.buf);
        let _ = file.unlock();
        self.file = Some(file);
        result
    }

    /// The file, opened (made if missing) and exclusively locked, and the
    /// one its path names (a file replaced by [`trim`] meanwhile is
    /// opened again).
    fn locked_file(&mut self) -> Result<File, DeltaError> {
        for _ in 0..8 {
            let file = match self.file.take() {
                Some(f) => f,
                None => open_or_create(&self.path, self.key_kind, self.match_mode)?,
            };
            file.lock().map_err(io(&self.path, "lock"))?;
            if same_file(&self.path, &file) {
                let h = read_header(&self.path, &file)?;
                let keys = DeltaKeys::decode(&self.path, h)?;
                keys.check_rules(&self.path, self.key_kind, self.match_mode)?;
                return Ok(file);
            }
            let _ = file.unlock();
        }
        Err(DeltaError::Io {
            path: self.path.clone(),
            op: "open",
            source: std::io::Error::other("the file kept being replaced"),
        })
    }
}

/// Writes `bytes` at the end of the locked `file` and syncs it; on an
/// error cuts the file back to its length before.
fn append_locked(path: &Path, file: &File, bytes: &[u8]) -> Result<(), DeltaError> {
    let before = file.metadata().map_err(io(path, "stat"))?.len();
    let mut f = file;
    let result = f
        .write_all(bytes)
        .map_err(io(path, "append to"))
        .and_then(|()| file.sync_data().map_err(io(path, "sync")));
    if result.is_err() {
        let _ = file.set_len(before);
        let _ = file.sync_data();
    }
    result
}

/// The header bytes of an open delta file (its first 32 bytes).
fn read_header(path: &Path, file: &File) -> Result<Vec<u8>, DeltaError> {
    use std::os::unix::fs::FileExt;
    let mut h = vec![0u8; DELTA_HEADER_LEN];
    let mut got = 0;
    while got < h.len() {
        match file.read_at(&mut h[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(io(path, "read")(e)),
        }
    }
    h.truncate(got);
    Ok(h)
}

/// Whether `path` names the open `file` (not replaced or removed since).
fn same_file(path: &Path, file: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Opens the delta file for appending, making it (header only, durably,
/// never over another's) when there is none.
fn open_or_create(path: &Path, key_kind: u8, match_mode: u8) -> Result<File, DeltaError> {
    let open = || OpenOptions::new().append(true).read(true).open(path);
    match open() {
        Ok(f) => return Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(path, "open")(e)),
    }
    // A new file: the header written and synced under a temporary name,
    // then linked into place (which fails if another writer was first).
    let mut tmp = path.as_os_str().to_os_string();
    tmp.push(format!(
        ".tmp-{}-{:x}",
        std::process::id(),
        bloomgate_engine::random_seed() as u32
    ));
    let tmp = PathBuf::from(tmp);
    let made = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(&encode_header(key_kind, match_mode))?;
        f.sync_all()?;
        match std::fs::hard_link(&tmp, path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    made.map_err(io(path, "create"))?;
    bloomgate_engine::atomic::sync_parent(path);
    open().map_err(io(path, "open"))
}

/// After a rebuild folded the keys of the delta file at `path` that an
/// earlier [`DeltaKeys::read`] found (`folded`, its length in bytes): under
/// the file's lock, removes the file when nothing was appended since, or
/// replaces it with one holding only the keys appended since. Returns how
/// many keys were kept. Damage found now is an error, and the file is
/// left as it is.
pub fn trim(path: &Path, folded: u64) -> Result<u64, DeltaError> {
    let file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(path, "open")(e)),
    };
    file.lock().map_err(io(path, "lock"))?;
    let result = (|| {
        if !same_file(path, &file) {
            return Ok(0);
        }
        let mut buf = Vec::new();
        (&file).read_to_end(&mut buf).map_err(io(path, "read"))?;
        let keys = DeltaKeys::decode(path, buf)?;
        if keys.bytes() < folded {
            return Err(DeltaError::Damaged {
                path: path.to_path_buf(),
                offset: keys.bytes(),
                problem: format!(
                    "shorter than when its keys were folded ({folded} bytes): it changed meanwhile, so it is kept as it is"
                ),
            });
        }
        if keys.bytes() == folded {
            std::fs::remove_file(path).map_err(io(path, "remove"))?;
            bloomgate_engine::atomic::sync_parent(path);
            return Ok(0);
        }
        let mut out = encode_header(keys.key_kind, keys.match_mode).to_vec();
        let mut kept = 0;
        for k in keys.iter_from(folded) {
            encode_record(&mut out, k)?;
            kept += 1;
        }
        bloomgate_engine::atomic::write_atomic(path, &out)
            .map_err(|e| io(path, "replace")(e.into()))?;
        Ok(kept)
    })();
    let _ = file.unlock();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(path: &Path) -> Vec<Vec<u8>> {
        DeltaKeys::read(path)
            .unwrap()
            .unwrap()
            .iter()
            .map(<[u8]>::to_vec)
            .collect()
    }

    #[test]
    fn appends_round_trip_and_trim_keeps_later_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = delta_path(&dir.path().join("r.bgf"));
        assert!(DeltaKeys::read(&path).unwrap().is_none());
        let mut w = DeltaWriter::new(&path, 1, 2);
        w.append(&[&b"a.example/"[..], b"", b"b.example/x"])
            .unwrap();
        let first = DeltaKeys::read(&path).unwrap().unwrap();
        assert_eq!((first.len(), first.key_kind, first.match_mode), (3, 1, 2));
        // A second writer (another process) appends whole batches too.
        DeltaWriter::new(&path, 1, 2).append(&[b"c"]).unwrap();
        w.append(&[b"d"]).unwrap();
        assert_eq!(
            keys(&path),
            vec![
                b"a.example/".to_vec(),
                vec![],
                b"b.example/x".to_vec(),
                b"c".to_vec(),
                b"d".to_vec()
            ]
        );
        // Folding the first three keeps the later two; the writer then
        // appends to the new file.
        assert_eq!(trim(&path, first.bytes()).unwrap(), 2);
        w.append(&[b"e"]).unwrap();
        assert_eq!(
            keys(&path),
            vec![b"c".to_vec(), b"d".to_vec(), b"e".to_vec()]
        );
        let all = DeltaKeys::read(&path).unwrap().unwrap().bytes();
        assert_eq!(trim(&path, all).unwrap(), 0);
        assert!(!path.exists());
        // Another filter's rules are refused.
        w.append(&[b"f"]).unwrap();
        assert!(matches!(
            DeltaWriter::new(&path, 0, 0).append(&[b"g"]),
            Err(DeltaError::Rules { .. })
        ));
    }

    #[test]
    fn every_damage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = delta_path(&dir.path().join("r.bgf"));
        DeltaWriter::new(&path, 1, 0)
            .append(&[&b"evil.example/"[..], b"phish.example/login"])
            .unwrap();
        let good = std::fs::read(&path).unwrap();
        for cut in 0..good.len() {
            let e = DeltaKeys::decode(&path, good[..cut].to_vec());
            // Cut at a record boundary: a shorter file, which checks.
            let boundary = cut == DELTA_HEADER_LEN || cut == DELTA_HEADER_LEN + 13 + 8;
            assert_eq!(e.is_ok(), boundary, "cut at {cut}");
        }
        for at in 0..good.len() {
            for bit in [0x01u8, 0x80] {
                let mut b = good.clone();
                b[at] ^= bit;
                assert!(
                    matches!(DeltaKeys::decode(&path, b), Err(DeltaError::Damaged { .. })),
                    "flip at {at}"
                );
            }
        }
        assert_eq!(DeltaKeys::decode(&path, good).unwrap().len(), 2);
    }
}
