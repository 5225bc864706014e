//! Replacing a file atomically and durably: the one helper every crate of
//! the workspace uses for it (whitelists, journals, growth settings, the
//! server's ready file).
//!
//! The new contents go to a temporary file beside the target (same
//! directory, so the same filesystem), which is fsynced and renamed over the
//! target; then the directory is fsynced so that the rename itself survives
//! a crash. A reader sees the old file or the new one, never a mix; after a
//! crash the target is one of the two, and at worst a stray temporary
//! (`NAME.tmp-PID`) is left behind. A failed replace removes its temporary
//! and leaves the target as it was.
//!
//! Filter files are written differently (see `filter/file.rs` and
//! `slice.rs`): their temporary is created first with a unique name
//! (`create_temp`), memory-mapped and filled over time, and its header is
//! written last; they share [`sync_parent`] (through `sync_dir`) with the
//! replace above.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::error::{io_err, Result};

/// Why a file could not be replaced: the step that failed, and its error
/// (whose kind tells a full disk, [`io::ErrorKind::StorageFull`], from
/// other failures).
#[derive(Debug, thiserror::Error)]
#[error("{op}: {source}")]
pub struct ReplaceError {
    /// The step: `create`, `write`, `fsync` or `rename into place`.
    pub op: &'static str,
    /// The cause.
    #[source]
    pub source: io::Error,
}

impl From<ReplaceError> for io::Error {
    fn from(e: ReplaceError) -> io::Error {
        io::Error::new(e.source.kind(), e)
    }
}

/// Replaces `path` with a file holding `bytes`, atomically and durably.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReplaceError> {
    replace_with(path, |f| f.write_all(bytes))
}

/// Replaces `path` with a file whose contents `fill` writes (into the
/// temporary file), atomically and durably.
pub fn replace_with(
    path: &Path,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> Result<(), ReplaceError> {
    let tmp = unique_temp_path(path);
    let step = |op: &'static str| move |source| ReplaceError { op, source };
    let result = (|| {
        let mut f = File::create(&tmp).map_err(step("create"))?;
        fill(&mut f).map_err(step("write"))?;
        f.sync_all().map_err(step("fsync"))?;
        std::fs::rename(&tmp, path).map_err(step("rename into place"))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    sync_parent(path);
    Ok(())
}

/// The temporary file beside `path` that [`replace_with`] writes:
/// `NAME.tmp-PID`.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    PathBuf::from(name)
}

/// Syncs the directory holding `path`, which makes a rename or removal in
/// it durable. Best effort: some filesystems refuse to open directories for
/// syncing, and that is not worth failing a write for.
pub fn sync_parent(path: &Path) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Creates a new temporary file beside `path` (readable and writable; never
/// an existing file), for writers that rename it into place when done.
pub(crate) fn create_temp(path: &Path) -> Result<(PathBuf, File)> {
    let tmp = unique_temp_path(path);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(io_err(&tmp, "create"))?;
    Ok((tmp, file))
}

fn unique_temp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "filter".into());
    name.push(format!(
        ".tmp-{}-{:x}",
        std::process::id(),
        crate::params::random_seed() as u32
    ));
    path.with_file_name(name)
}

/// Makes a rename into the directory of `path` durable
/// ([`sync_parent`]). Filter files are not replaced with
/// [`replace_with`]: their temporary is created with a
/// unique name first, memory-mapped and filled over time, and renamed by
/// `persist`/`save` once its header is written.
pub(crate) fn sync_dir(path: &Path) -> Result<()> {
    crate::atomic::sync_parent(path);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_failed_fill_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        write_atomic(&p, b"old").unwrap();
        let e = replace_with(&p, |f| {
            f.write_all(b"half")?;
            Err(io::Error::new(io::ErrorKind::StorageFull, "full"))
        })
        .unwrap_err();
        assert_eq!(e.op, "write");
        assert_eq!(e.source.kind(), io::ErrorKind::StorageFull);
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
