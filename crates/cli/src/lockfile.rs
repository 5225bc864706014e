//! `FILE.lock`: the lock a command holds beside a filter file while it
//! changes it, removed when the command is done.
//!
//! The lock is an advisory `flock` on the lock file. Removing a lock file
//! while others may wait on it needs care: a waiter that was blocked on the
//! removed file would get "its" lock on a file nobody else can see, while a
//! newcomer creates and locks a new one — two holders. So whoever takes the
//! lock checks that the path still names the very file it locked (same
//! device and inode) and starts over if not; the holder removes the path
//! before it unlocks. Every holder therefore holds the lock of the file the
//! path names, and no lock file is left beside the filter after a run (one
//! killed with SIGKILL leaves it, harmlessly: the next run takes it).

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// A held `FILE.lock`; dropping it removes the file and unlocks.
#[derive(Debug)]
pub struct Lock {
    /// Held for its lock, released when it closes.
    _file: File,
    path: PathBuf,
}

impl Drop for Lock {
    fn drop(&mut self) {
        // Removed while still locked (see the module doc); the unlock
        // follows when `_file` closes.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What to do when another process holds the lock.
#[derive(Clone, Copy, Debug)]
pub enum Busy<'a> {
    /// Wait for it, after saying this on stderr.
    Wait(&'a str),
    /// Fail with this message.
    Fail(&'a str),
}

/// Takes the lock at `path` (created if absent).
pub fn lock(path: &Path, busy: Busy<'_>) -> Result<Lock> {
    let shown = path.display();
    loop {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("{shown}: cannot create the lock file"))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => match busy {
                Busy::Wait(msg) => {
                    eprintln!("bloomgate: {msg}");
                    file.lock()
                        .with_context(|| format!("{shown}: cannot lock"))?;
                }
                Busy::Fail(msg) => anyhow::bail!("{msg}"),
            },
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("{shown}: cannot lock"))
            }
        }
        let held = file
            .metadata()
            .with_context(|| format!("{shown}: cannot stat"))?;
        match std::fs::metadata(path) {
            Ok(now) if now.dev() == held.dev() && now.ino() == held.ino() => {
                return Ok(Lock {
                    _file: file,
                    path: path.to_path_buf(),
                })
            }
            // Removed (or replaced) by the holder we waited for: take the
            // lock of the file the path names now.
            _ => continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_is_removed_when_dropped_and_excludes_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bgf.lock");
        let held = lock(&path, Busy::Fail("busy")).unwrap();
        assert!(path.exists());
        let e = lock(&path, Busy::Fail("busy")).unwrap_err();
        assert_eq!(e.to_string(), "busy");
        drop(held);
        assert!(!path.exists());
        let again = lock(&path, Busy::Fail("busy")).unwrap();
        drop(again);
        assert!(!path.exists());
    }

    #[test]
    fn waiters_never_both_hold() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bgf.lock");
        let inside = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let _l = lock(&path, Busy::Wait("waiting")).unwrap();
                        let n = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        assert_eq!(n, 0, "two holders at once");
                        inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    }
                });
            }
        });
        assert!(!path.exists());
    }
}
