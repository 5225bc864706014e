//! Salvaging a data directory's damaged write-ahead log segments and
//! journals (`bloomgate repair DIR`).
//!
//! The server refuses to start on a segment or a journal that is damaged
//! other than at its tail ([`crate::wal`]): records after the damage were
//! acknowledged, and the damaged stretch may hold records of any filter.
//! Repair is the operator's decision, with the server stopped:
//!
//! 1. The data directory's lock is taken ([`DirLock`]), so no server runs
//!    while files are rewritten (a running server makes repair refuse).
//! 2. Every segment (`.bloomgate-wal/wal-N.log`) and every journal
//!    (`NAME.live`) is read whole with [`wal::salvage`]: every intact
//!    record, before and after each damaged stretch (resynchronising), is
//!    kept in file order; every stretch that is not one is reported with its
//!    offset, length and fault.
//! 3. Unless it is a dry run, each file that lost anything is replaced: the
//!    original is first linked aside as `FILE.damaged-UNIXTIME` (never
//!    deleted; readers and the server ignore such names), then the repaired
//!    copy (the magic and the kept records, byte for byte) is renamed over
//!    `FILE` atomically.
//!
//! Records in a damaged stretch are gone; repair says how many bytes, and
//! where. Adds in a repaired journal under a seed whose lineage marker was
//! lost are counted ([`FileRepair::orphans`]): the server replays them only
//! if the filter's current file has that seed. Files in the log directory
//! that look like segments but are not named like one are listed
//! ([`Report::strays`]) and left alone: only the operator knows where their
//! records belong.

use std::path::{Path, PathBuf};

use crate::datadir::DirLock;
use crate::wal::{self, AnyRecord, Lost, Record, WAL_DIR};
use crate::Error;

/// What repair found (and did) for one segment or journal.
#[derive(Debug, Clone)]
pub struct FileRepair {
    /// The segment or journal.
    pub path: PathBuf,
    /// Its length.
    pub len: u64,
    /// Intact records kept.
    pub records: u64,
    /// Bytes of intact records kept (without the magic).
    pub kept_bytes: u64,
    /// The stretches that are not intact records, in file order.
    pub lost: Vec<Lost>,
    /// Journal adds whose seed no kept lineage marker claims.
    pub orphans: u64,
    /// Where the original was kept, if the file was replaced.
    pub kept_aside: Option<PathBuf>,
}

impl FileRepair {
    /// Whether anything was lost (a torn tail counts).
    pub fn lost_anything(&self) -> bool {
        !self.lost.is_empty()
    }

    /// Whether anything but a torn tail was lost.
    pub fn damaged(&self) -> bool {
        self.lost.iter().any(|l| !l.tail)
    }
}

/// What repair found in a data directory.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Every segment and journal, segments first (by number), then journals
    /// (by name).
    pub files: Vec<FileRepair>,
    /// Files in the log directory that look like segments but are not named
    /// like one (left alone).
    pub strays: Vec<PathBuf>,
}

/// Salvages every segment and journal of the data directory `dir` (see the
/// module docs). With `dry_run` nothing is changed; otherwise the lock is
/// taken and every file that lost anything is replaced by its repaired copy,
/// the original kept aside.
pub fn repair(dir: &Path, dry_run: bool) -> Result<Report, Error> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |e: std::io::Error| Error::Io { path, source: e }
    };
    if !dir.is_dir() {
        return Err(Error::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
        });
    }
    // Even a dry run takes the lock: a running server's files change under
    // a reader, and its torn current tail is not damage.
    let _lock = DirLock::acquire(dir)?;
    let wal_dir = dir.join(WAL_DIR);
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut report = Report::default();
    if wal_dir.is_dir() {
        paths.extend(
            wal::segments(&wal_dir)
                .map_err(io(&wal_dir))?
                .into_iter()
                .map(|(_, p)| p),
        );
        report.strays = wal::strays(&wal_dir).map_err(io(&wal_dir))?;
    }
    let mut journals: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "live") && p.is_file())
        .collect();
    journals.sort();
    let first_journal = paths.len();
    paths.extend(journals);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for (i, path) in paths.into_iter().enumerate() {
        let bytes = std::fs::read(&path).map_err(io(&path))?;
        let s = wal::salvage(&bytes);
        let mut orphans = 0;
        if i >= first_journal {
            let mut seeds = Vec::new();
            let mut adds = Vec::new();
            for r in &s.kept {
                match wal::decode_record(&bytes[r.clone()]) {
                    Some(AnyRecord::Bloom(Record::Lineage { seed, .. })) => seeds.push(seed),
                    Some(AnyRecord::Bloom(Record::Add { seed, .. })) => adds.push(seed),
                    _ => {}
                }
            }
            orphans = adds.iter().filter(|s| !seeds.contains(s)).count() as u64;
        }
        let mut fr = FileRepair {
            path: path.clone(),
            len: bytes.len() as u64,
            records: s.kept.len() as u64,
            kept_bytes: s.kept_bytes(),
            lost: s.lost.clone(),
            orphans,
            kept_aside: None,
        };
        if fr.lost_anything() && !dry_run {
            let aside = aside_path(&path, stamp);
            keep_aside(&path, &aside).map_err(io(&aside))?;
            bloomgate_engine::atomic::write_atomic(&path, &s.repaired(&bytes))
                .map_err(|e| io(&path)(e.into()))?;
            fr.kept_aside = Some(aside);
        }
        report.files.push(fr);
    }
    Ok(report)
}

/// `FILE.damaged-STAMP`, or with `-2`, `-3`, … if that exists.
fn aside_path(path: &Path, stamp: u64) -> PathBuf {
    let mut n = 1;
    loop {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".damaged-{stamp}"));
        if n > 1 {
            name.push(format!("-{n}"));
        }
        let p = PathBuf::from(name);
        if !p.exists() {
            return p;
        }
        n += 1;
    }
}

/// Keeps the original under `aside` (a hard link, or a copy where links are
/// not possible), durably, before anything replaces it.
fn keep_aside(path: &Path, aside: &Path) -> std::io::Result<()> {
    if std::fs::hard_link(path, aside).is_err() {
        std::fs::copy(path, aside)?;
        std::fs::File::open(aside)?.sync_all()?;
    }
    bloomgate_engine::atomic::sync_parent(aside);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::{encode_add, encode_lineage, MAGIC};

    #[test]
    fn repairs_keep_aside_and_report() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let wal = d.join(WAL_DIR);
        std::fs::create_dir_all(&wal).unwrap();
        let mut seg = MAGIC.to_vec();
        let mut starts = Vec::new();
        for i in 0..10u32 {
            starts.push(seg.len());
            encode_add(&mut seg, "f", 7, format!("k{i}").as_bytes());
        }
        let mut bad = seg.clone();
        bad[starts[3] + 14] ^= 0x40;
        let seg_path = wal.join("wal-00000001.log");
        std::fs::write(&seg_path, &bad).unwrap();
        let mut j = MAGIC.to_vec();
        encode_lineage(&mut j, "f", 7, 0, 0);
        encode_add(&mut j, "f", 7, b"x");
        encode_add(&mut j, "f", 8, b"y");
        let jpath = d.join("f.live");
        std::fs::write(&jpath, &j).unwrap();
        std::fs::write(wal.join("wal-x.log"), MAGIC).unwrap();

        let dry = repair(d, true).unwrap();
        assert_eq!(dry.files.len(), 2);
        let f = &dry.files[0];
        assert_eq!((f.records, f.lost.len()), (9, 1));
        assert_eq!(f.lost[0].offset, starts[3] as u64);
        assert_eq!(f.lost[0].len, (starts[4] - starts[3]) as u64);
        assert!(f.damaged() && f.kept_aside.is_none());
        assert_eq!(dry.files[1].orphans, 1);
        assert!(!dry.files[1].lost_anything());
        assert_eq!(dry.strays, vec![wal.join("wal-x.log")]);
        assert_eq!(std::fs::read(&seg_path).unwrap(), bad);

        let done = repair(d, false).unwrap();
        let aside = done.files[0].kept_aside.clone().unwrap();
        assert_eq!(std::fs::read(&aside).unwrap(), bad);
        let rep = wal::read_segment(&seg_path, |_| {}).unwrap();
        assert_eq!((rep.records, rep.fault), (9, None));
        assert_eq!(std::fs::read(&jpath).unwrap(), j);
        // The kept-aside original is neither a segment nor a stray.
        let again = repair(d, false).unwrap();
        assert!(again.files.iter().all(|f| !f.lost_anything()));
        assert_eq!(again.strays.len(), 1);
        // A held lock refuses.
        let _held = DirLock::acquire(d).unwrap();
        assert!(matches!(repair(d, true), Err(Error::DirBusy(_))));
    }
}
