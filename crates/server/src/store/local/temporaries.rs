//! Stale temporaries: files are replaced by writing a temporary beside
//! them (`NAME.tmp-PID`, `NAME.bgf.tmp-PID-RANDOM`) and renaming it; a crash
//! between the two leaves the temporary behind, and a start removes it
//! ([`remove_stale_temporaries`]) unless the process that writes it is
//! still running.

use std::path::Path;

use bloomgate_engine::atomic::sync_parent;

/// Removes the temporaries a crash between writing and renaming left in
/// `dir` (`NAME.tmp-PID`, `NAME.bgf.tmp-PID-RANDOM`, see
/// [`bloomgate_engine::atomic`]). Called with the data directory's lock
/// held, before this process writes anything: no other server and no
/// locking CLI writer (`add`, whitelist changes) can be writing here, so a
/// temporary is stale unless its PID belongs to a live process other than
/// this one — a `bloomgate build -o DIR/NAME.bgf` that does not take the
/// lock may still be writing it, and it is kept. A temporary that carries
/// this process's own PID predates it (a container restarts as the same
/// PID) and is removed. Only the names of the filter files' temporaries
/// are touched (`.bgf`, `.cf`, `.live` and their companions).
pub(super) fn remove_stale_temporaries(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let (mut removed, mut bytes) = (0u64, 0u64);
    for e in rd.flatten() {
        let Some(file) = e.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let Some(pid) = stale_temporary_pid(&file) else {
            continue;
        };
        if pid != std::process::id() && process_alive(pid) {
            tracing::info!(
                "bloomgate serve: keeping {}: process {pid} that writes it is running",
                e.path().display()
            );
            continue;
        }
        let len = e.metadata().map_or(0, |m| m.len());
        if std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
            bytes += len;
        }
    }
    if removed > 0 {
        sync_parent(&dir.join("x"));
        tracing::info!(
            "bloomgate serve: removed {removed} stale temporary file(s) ({bytes} bytes) left by an interrupted write"
        );
    }
}

/// The PID in the name of a filter file's temporary (`….bgf….tmp-PID`,
/// `….tmp-PID-HEX`, likewise for `.cf`, `.cf.whitelist` and `.live`), or `None` for any
/// other name.
pub(super) fn stale_temporary_pid(file: &str) -> Option<u32> {
    let (stem, tail) = file.rsplit_once(".tmp-")?;
    let ours = stem.contains(".bgf")
        || stem.ends_with(".cf")
        || stem.ends_with(".cf.whitelist")
        || stem.ends_with(".live");
    if !ours || stem.starts_with('.') {
        return None;
    }
    let (pid, rand) = match tail.split_once('-') {
        Some((p, r)) => (p, Some(r)),
        None => (tail, None),
    };
    let digits = |s: &str, hex: bool| {
        !s.is_empty()
            && s.len() <= 16
            && s.bytes().all(|b| {
                if hex {
                    b.is_ascii_hexdigit()
                } else {
                    b.is_ascii_digit()
                }
            })
    };
    if !digits(pid, false) || rand.is_some_and(|r| !digits(r, true)) {
        return None;
    }
    pid.parse().ok()
}

/// Whether process `pid` exists (`kill(pid, 0)`: success, or a process we
/// may not signal). Unknown on other systems: assumed alive.
fn process_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        if pid <= 0 {
            return true;
        }
        // SAFETY: `kill` with signal 0 sends nothing; it only checks that
        // the process exists and may be signalled.
        let r = unsafe { libc::kill(pid, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}
