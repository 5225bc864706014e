//! The log directory: its segment files (`wal-N.log`), its lock file, the
//! files in it that look like segments but are not named like one
//! ([`strays`]), and the data directory a segment or journal belongs to.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{MAGIC, WAL_DIR};

/// The lock file inside the log directory.
pub const LOCK_FILE: &str = "lock";

/// The data directory a segment (`DIR/.bloomgate-wal/wal-N.log`) or a
/// journal (`DIR/NAME.live`) belongs to.
pub fn data_dir_of(path: &Path) -> PathBuf {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if parent.file_name().is_some_and(|n| n == WAL_DIR) {
        match parent.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        }
    } else {
        parent.to_path_buf()
    }
}

/// Segment paths in `dir`, sorted by number.
pub fn segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = segment_number(name) {
            out.push((n, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// The number of a segment file called `name` (`wal-N.log`), if it is one.
fn segment_number(name: &str) -> Option<u64> {
    name.strip_prefix("wal-")
        .and_then(|s| s.strip_suffix(".log"))
        .and_then(|s| s.parse::<u64>().ok())
}

/// Files in the log directory `dir` that look like log segments but are
/// not named like one (`wal-N.log`), so that no reader reads their records:
/// a name starting with `wal-` or ending in `.log`, or contents starting
/// with the segment magic. Not counted: the lock file, a segment that
/// `bloomgate repair` kept aside (`….damaged-TIME`) and an atomic write's
/// temporary (`….tmp-PID`).
pub fn strays(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let path = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if segment_number(&name).is_some()
            || name == LOCK_FILE
            || name.contains(".damaged-")
            || name.contains(".tmp-")
            || !path.is_file()
        {
            continue;
        }
        let looks = name.starts_with("wal-") || name.ends_with(".log") || {
            let mut head = [0u8; 8];
            File::open(&path)
                .and_then(|mut f| f.read_exact(&mut head))
                .is_ok()
                && &head == MAGIC
        };
        if looks {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// The path of segment number `n` in the log directory `dir`.
pub fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("wal-{n:08}.log"))
}
