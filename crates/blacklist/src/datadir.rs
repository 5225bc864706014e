//! A filter inside a data directory served by `bloomgate serve`.
//!
//! The server acknowledges a live add once it is in the write-ahead log
//! (`DIR/.bloomgate-wal/`); a snapshot later writes it into `NAME.bgf` and
//! moves the log records into the filter's journal `NAME.live`. Between the
//! two — while the server runs, or after it was killed — the filter files
//! alone lack acknowledged adds. A reader that answered from the files
//! would give false negatives, so every reader does what the server does at
//! startup: it reads the journal and the log (never changing them) and
//! re-inserts their adds into its own copy of the filter ([`read_pending`],
//! [`replay`]). Read-only opens map the files copy-on-write, so this costs
//! memory only for the pages it touches and never writes a file.
//!
//! # Who owns a data directory
//!
//! A running server holds an exclusive lock on `.bloomgate-wal/lock`
//! ([`DirLock`]) for as long as it runs. Tools that *write* filter files
//! (`bloomgate add`, `bloomgate whitelist add|remove`) take the same lock,
//! so they refuse to run beside a server — whose snapshots would overwrite
//! their changes — and a server does not start while they run. Readers take
//! no lock: they replay, and [`served`] tells them whether a server is
//! running (the view is then as of the moment of reading).
//!
//! # Reading a consistent state
//!
//! A server's snapshot replaces `NAME.bgf`, appends the trimmed log records
//! to `NAME.live` and only then deletes the log segments. A reader opens the
//! files, then reads the journal, then the log; if the filter file or the
//! journal changed meanwhile ([`Pending::still_current`]), a record may have
//! moved from the log to the journal behind its back, and it reads again.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use bloomgate_engine::{Filter, Params};
use bloomgate_url::{entry_key, KeyError};

use crate::journal::{self, Lineage, Repair};
use crate::layers::{GrowLimits, Layers};
use crate::wal::{self, Record, LOCK_FILE, WAL_DIR};
use crate::Error;

/// Where a filter file lives: its data directory and name, if it is in one
/// (a `NAME.bgf` beside a `.bloomgate-wal/` directory or a `NAME.live`).
pub fn locate(path: &Path) -> Option<(PathBuf, String)> {
    if path.extension().and_then(|x| x.to_str()) != Some("bgf") {
        return None;
    }
    let name = path.file_stem()?.to_str()?.to_owned();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    (dir.join(WAL_DIR).is_dir() || journal::path(&dir, &name).exists()).then_some((dir, name))
}

/// True if a process (a running `bloomgate serve`, or a tool writing to
/// its files) holds the data directory's lock right now.
pub fn served(dir: &Path) -> bool {
    let Ok(f) = File::open(dir.join(WAL_DIR).join(LOCK_FILE)) else {
        return false;
    };
    match f.try_lock_shared() {
        Ok(()) => {
            let _ = f.unlock();
            false
        }
        Err(_) => true,
    }
}

/// The exclusive lock on a data directory, held while this value lives.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes the lock of data directory `dir`, creating the log directory
    /// if needed. Fails with [`Error::DirBusy`] if another process holds it.
    pub fn acquire(dir: &Path) -> Result<DirLock, Error> {
        let wal = dir.join(WAL_DIR);
        let io = |e: std::io::Error| Error::Io {
            path: wal.clone(),
            source: e,
        };
        std::fs::create_dir_all(&wal).map_err(io)?;
        let path = wal.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::Io {
                path: path.clone(),
                source: e,
            })?;
        match file.try_lock() {
            Ok(()) => Ok(DirLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(Error::DirBusy(dir.to_path_buf())),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::Io { path, source: e }),
        }
    }

    /// [`DirLock::acquire`], retrying for up to `patience` while the lock is
    /// busy (a reader's probe in [`served`] holds it for an instant).
    pub fn acquire_waiting(dir: &Path, patience: std::time::Duration) -> Result<DirLock, Error> {
        let start = std::time::Instant::now();
        loop {
            match DirLock::acquire(dir) {
                Err(Error::DirBusy(_)) if start.elapsed() < patience => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                other => return other,
            }
        }
    }
}

/// The acknowledged adds of one filter that its files may lack.
#[derive(Debug, Default)]
pub struct Pending {
    /// Seeds (with key rules) whose records belong to the filter: the
    /// journal's markers plus the current file's.
    pub lineage: Vec<Lineage>,
    /// Adds from the journal, then from the log, in order: (seed the key
    /// was added under, normalized key).
    pub adds: Vec<(u64, Vec<u8>)>,
    /// Bit chunks (`BF.LOADCHUNK`) from the log: (layer, byte offset, bytes).
    pub chunks: Vec<(u32, u64, Vec<u8>)>,
    /// Log records read (of all filters).
    pub log_records: u64,
    /// Torn journal or log tails that were skipped (one line each).
    pub damaged: Vec<String>,
    fingerprint: Fingerprint,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Fingerprint {
    base: Option<(u64, Option<std::time::SystemTime>, u64)>,
    journal_len: u64,
}

fn file_id(path: &Path) -> Option<(u64, Option<std::time::SystemTime>, u64)> {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let ino = 0;
    Some((m.len(), m.modified().ok(), ino))
}

impl Pending {
    /// True while the filter file and the journal are as they were when
    /// [`read_pending`] started (see the module docs).
    pub fn still_current(&self, dir: &Path, name: &str) -> bool {
        let base = dir.join(format!("{name}.bgf"));
        let journal_len = std::fs::metadata(journal::path(dir, name))
            .map(|m| m.len())
            .unwrap_or(0);
        self.fingerprint
            == Fingerprint {
                base: file_id(&base),
                journal_len,
            }
    }
}

/// Reads (without changing anything) the journal and the log of filter
/// `name` in data directory `dir`, whose current first layer has lineage
/// marker `current`. Call it after opening the filter's files and check
/// [`Pending::still_current`] after using it.
pub fn read_pending(dir: &Path, name: &str, current: Lineage) -> Result<Pending, Error> {
    let base = dir.join(format!("{name}.bgf"));
    let jpath = journal::path(dir, name);
    let base_id = file_id(&base);
    let loaded = journal::load(&jpath, Repair::No).map_err(|e| Error::Io {
        path: jpath.clone(),
        source: e,
    })?;
    let mut p = Pending {
        lineage: loaded.contents.lineage,
        adds: loaded.contents.adds,
        fingerprint: Fingerprint {
            base: base_id,
            journal_len: loaded.len,
        },
        ..Pending::default()
    };
    loaded.report.check(&jpath)?;
    if let Some(fault) = &loaded.report.fault {
        p.damaged.push(format!(
            "{}: {fault}: {} byte(s) of torn tail skipped",
            jpath.display(),
            loaded.report.lost_bytes
        ));
    }
    if !p.lineage.iter().any(|l| l.seed == current.seed) {
        p.lineage.push(current);
    }
    let wal_dir = dir.join(WAL_DIR);
    let segments = match wal::segments(&wal_dir) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(Error::Io {
                path: wal_dir,
                source: e,
            })
        }
    };
    for (_, seg) in &segments {
        let rep = match wal::read_segment(seg, |rec| {
            p.log_records += 1;
            match rec {
                Record::Add { name: n, seed, key } => {
                    if n == name && p.lineage.iter().any(|l| l.seed == seed) {
                        p.adds.push((seed, key));
                    }
                }
                Record::Chunk {
                    name: n,
                    seed,
                    layer,
                    offset,
                    data,
                } => {
                    if n == name && seed == current.seed {
                        p.chunks.push((layer, offset, data));
                    }
                }
                Record::Lineage { .. } => {}
            }
        }) {
            Ok(rep) => rep,
            // Trimmed by a snapshot since it was listed: its records are in
            // the journal now, which `still_current` notices.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(Error::Io {
                    path: seg.clone(),
                    source: e,
                })
            }
        };
        rep.check(seg)?;
        if let Some(fault) = &rep.fault {
            p.damaged.push(format!(
                "{}: {fault}: {} byte(s) of torn tail skipped",
                seg.display(),
                rep.lost_bytes
            ));
        }
    }
    Ok(p)
}

/// What re-inserting one acknowledged add did.
#[derive(Clone, Debug, PartialEq)]
pub enum Replayed {
    /// The filter lacked it; now it has it.
    New,
    /// The filter already had it.
    Present,
    /// It was added under other key rules (the file was since rebuilt with
    /// another key kind or match mode) and cannot be expressed in the new
    /// ones.
    Unconvertible(KeyError),
}

/// An acknowledged add made under `seed`, as a key of `layers`' rules: as
/// it was logged, or — if the file was since rebuilt with another key kind
/// or match mode (per its lineage marker) — normalized again with the
/// current rules, which can fail.
pub fn converted_key<'k>(
    layers: &Layers,
    lineage: &[Lineage],
    seed: u64,
    key: &'k [u8],
) -> Result<std::borrow::Cow<'k, [u8]>, KeyError> {
    let (kind, mode) = (layers.kind, layers.mode);
    let same = lineage
        .iter()
        .find(|l| l.seed == seed)
        .is_none_or(|l| l.key_kind == kind.as_u8() && l.match_mode == mode.as_u8());
    if same {
        Ok(key.into())
    } else {
        entry_key(kind, mode, key)
    }
}

/// Re-inserts an acknowledged add made under `seed` into `layers`
/// ([`converted_key`]). Never refuses for lack of room (see
/// [`Layers::insert`]'s `force`); returns the grown chain if it grew.
pub fn replay_key(
    layers: &Layers,
    lineage: &[Lineage],
    seed: u64,
    key: &[u8],
    limits: GrowLimits,
    new_layer: &mut dyn FnMut(Params) -> Result<Filter, Error>,
) -> Result<(Replayed, Option<Layers>), Error> {
    let key = match converted_key(layers, lineage, seed, key) {
        Ok(k) => k,
        Err(e) => return Ok((Replayed::Unconvertible(e), None)),
    };
    let (added, grown) = if layers.policy().forgets() {
        // Rotate and clear replay through their own rules, in log order, so
        // generations start where they started before.
        layers.add_published(&key, crate::layers::unix_now())?
    } else {
        layers.insert(&key, true, limits, new_layer)?
    };
    Ok((
        if added == crate::layers::Added::New {
            Replayed::New
        } else {
            Replayed::Present
        },
        grown,
    ))
}

/// What [`replay`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Acknowledged adds read from the journal and the log.
    pub adds: u64,
    /// Of those, the ones the files lacked.
    pub new: u64,
    /// Adds that could not be expressed in the current key rules.
    pub unconvertible: u64,
    /// Bit chunks OR-ed in.
    pub chunks: u64,
    /// The keys re-inserted (in the current key rules), for readers that
    /// apply them elsewhere too (a check in slices applies them to every
    /// slice it loads from the file).
    pub keys: Vec<Vec<u8>>,
}

/// Re-inserts every pending add and chunk into `layers` (in memory: the
/// layers must be mapped copy-on-write or in-memory) and returns the
/// resulting chain. New layers of a growing filter are made in memory.
pub fn replay(mut layers: Layers, pending: &Pending) -> Result<(Layers, ReplayStats), Error> {
    let mut stats = ReplayStats::default();
    let mut in_memory = |p: Params| Filter::new(p).map_err(Error::from);
    for (seed, key) in &pending.adds {
        stats.adds += 1;
        let Ok(key) = converted_key(&layers, &pending.lineage, *seed, key) else {
            stats.unconvertible += 1;
            continue;
        };
        let (added, grown) = layers.insert(&key, true, GrowLimits::default(), &mut in_memory)?;
        stats.new += (added == crate::layers::Added::New) as u64;
        stats.keys.push(key.into_owned());
        if let Some(g) = grown {
            layers = g;
        }
    }
    for (layer, offset, data) in &pending.chunks {
        // As the server's startup replay: a chunk for a layer the filter
        // does not have (or past its end) cannot be applied by it either.
        if let Some(f) = layers.layers.get(*layer as usize) {
            if f.or_bytes_at(*offset, data).is_ok() {
                stats.chunks += 1;
            }
        }
    }
    Ok((layers, stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::FillPolicy;
    use bloomgate_engine::{plan, Layout};

    fn filter_file(path: &Path, seed: u64) -> Lineage {
        let mut p = Params::from_plan(&plan(Layout::Blocked, 1000, 1e-4).unwrap(), seed);
        p.key_kind = bloomgate_url::KeyKind::Raw.as_u8();
        let mut f = Filter::create_file(path, p).unwrap();
        f.insert(b"in-the-file");
        f.persist().unwrap();
        Lineage {
            seed,
            key_kind: 0,
            match_mode: 0,
        }
    }

    #[test]
    fn pending_adds_come_from_journal_and_log_of_this_lineage_only() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("f.bgf");
        let current = filter_file(&base, 7);
        assert!(locate(&base).is_none(), "no journal, no log: a plain file");
        // Journal: a marker of an older file (seed 5) and an add under it.
        let mut j = Vec::new();
        journal::marker(&mut j, "f", Lineage { seed: 5, ..current });
        wal::encode_add(&mut j, "f", 5, b"journaled");
        journal::append(&journal::path(dir.path(), "f"), &j).unwrap();
        // Log: this filter's add, another filter's, and one of a seed that
        // is not in the lineage (a deleted namesake).
        let wal = dir.path().join(WAL_DIR);
        std::fs::create_dir(&wal).unwrap();
        let mut seg = wal::MAGIC.to_vec();
        wal::encode_add(&mut seg, "f", 7, b"logged");
        wal::encode_add(&mut seg, "g", 7, b"other filter");
        wal::encode_add(&mut seg, "f", 99, b"stale namesake");
        std::fs::write(wal::segment_path(&wal, 1), &seg).unwrap();
        assert_eq!(locate(&base), Some((dir.path().to_path_buf(), "f".into())));
        assert!(!served(dir.path()));

        let layers = Layers::open(&base, bloomgate_engine::Access::ReadOnly).unwrap();
        assert_eq!(layers.fill, FillPolicy::Fixed);
        let p = read_pending(dir.path(), "f", current).unwrap();
        assert_eq!(
            p.adds,
            vec![(5, b"journaled".to_vec()), (7, b"logged".to_vec())]
        );
        assert_eq!(p.log_records, 3);
        assert!(p.still_current(dir.path(), "f"));
        let (layers, stats) = replay(layers, &p).unwrap();
        assert_eq!((stats.adds, stats.new), (2, 2));
        for k in [&b"in-the-file"[..], b"journaled", b"logged"] {
            assert!(layers.contains(k), "{k:?}");
        }
        assert!(!layers.contains(b"stale namesake"));
        // Replay wrote nothing: the file alone still lacks the live adds.
        let files = Layers::open(&base, bloomgate_engine::Access::ReadOnly).unwrap();
        assert!(!files.contains(b"logged"));
        files.layers[0].verify().unwrap();

        // A snapshot that moves records into the journal, or replaces the
        // file, while a reader works makes its reading stale.
        let mut more = Vec::new();
        wal::encode_add(&mut more, "f", 7, b"moved");
        journal::append(&journal::path(dir.path(), "f"), &more).unwrap();
        assert!(!p.still_current(dir.path(), "f"));
        let p = read_pending(dir.path(), "f", current).unwrap();
        assert!(p.still_current(dir.path(), "f"));
        std::fs::remove_file(&base).unwrap();
        filter_file(&base, 7);
        assert!(!p.still_current(dir.path(), "f"));
    }

    #[test]
    fn the_lock_excludes_writers_and_shows_readers_a_server() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path()).unwrap();
        assert!(served(dir.path()));
        assert!(matches!(
            DirLock::acquire(dir.path()),
            Err(Error::DirBusy(_))
        ));
        drop(lock);
        assert!(!served(dir.path()));
        let _again = DirLock::acquire(dir.path()).unwrap();
    }
}
