//! What a list's answers were read from, to see when it changed.
//!
//! A long-running reader — a Squid helper, a Python crawler — opens a list
//! once and answers from it for hours. Two things can change under it:
//!
//! - **The files are replaced.** `build -o` and `whitelist add` write a new
//!   file and rename it over the old one; the reader keeps the old file
//!   mapped and would answer from it forever. The file's identity (device,
//!   inode, size, modification time) and its whitelist file's change.
//! - **A server takes live adds.** In a data directory that `bloomgate
//!   serve` runs on, an acknowledged add is first only in the write-ahead
//!   log (`DIR/.bloomgate-wal/`), later in the filter's journal
//!   `NAME.live` and file. A reader replays them when it opens the list
//!   ([`crate::List::open`]); adds made after that are in log segments it
//!   has not read. The log segments' and the journal's identities change.
//!
//! [`Stamp::of`] reads both (a few `stat` calls and one directory listing)
//! and [`Stamp::compare`] says which changed; the reader reopens the list.
//! A list in Redis has no stamp: it is always read where it is stored.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use bloomgate_blacklist::{datadir, journal, wal};

/// One file's identity: device, inode, size, modification time (s, ns).
type Identity = (u64, u64, u64, i64, i64);

fn identity(path: &Path) -> Option<Identity> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// The identities of a list's files ([`Stamp::of`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The filter file and its whitelist file (zero when it has none).
    files: [Identity; 2],
    /// In a data directory: the journal and every log segment, by name.
    live: Vec<(String, Identity)>,
}

/// What changed between two [`Stamp`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing.
    None,
    /// Only the live adds (journal or log): a server took adds.
    LiveAdds,
    /// The filter file or its whitelist was replaced or written.
    Files,
}

impl Stamp {
    /// The stamp of the list at `address`: `None` for a Redis address
    /// (nothing to watch) or a file that cannot be read now (being
    /// replaced: look again later).
    pub fn of(address: &str) -> Option<Stamp> {
        if bloomgate_redis::is_redis_address(address) {
            return None;
        }
        let path = Path::new(address);
        let file = identity(path)?;
        let whitelist = identity(Path::new(&format!("{address}.whitelist"))).unwrap_or_default();
        let mut live = Vec::new();
        if let Some((dir, name)) = datadir::locate(path) {
            let journal = journal::path(&dir, &name);
            live.push((String::new(), identity(&journal).unwrap_or_default()));
            if let Ok(entries) = std::fs::read_dir(dir.join(wal::WAL_DIR)) {
                for e in entries.flatten() {
                    let Ok(n) = e.file_name().into_string() else {
                        continue;
                    };
                    if n == wal::LOCK_FILE {
                        continue;
                    }
                    live.push((n, identity(&e.path()).unwrap_or_default()));
                }
            }
            live.sort_unstable();
        }
        Some(Stamp {
            files: [file, whitelist],
            live,
        })
    }

    /// What changed from `self` (read earlier) to `now`.
    pub fn compare(&self, now: &Stamp) -> Change {
        if self.files != now.files {
            Change::Files
        } else if self.live != now.live {
            Change::LiveAdds
        } else {
            Change::None
        }
    }
}
