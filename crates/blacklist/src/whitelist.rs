//! The exact whitelist stored beside a filter file as `FILE.whitelist`.
//!
//! Format (text, so it can be read and diffed by people):
//!
//! ```text
//! # bloomgate whitelist v1
//! evil.example/false-positive
//! key\x0awith a newline
//! ```
//!
//! One normalized key per line, sorted. Bytes outside printable ASCII and the
//! backslash are written as `\xNN`, so any raw key survives a round trip;
//! the empty key (a raw filter's empty item) is the line `\e`, since an
//! empty line is skipped. A first line other than the version line is
//! refused (a newer or foreign file), as is a malformed escape (so a build
//! that predates `\e` refuses such a file rather than drop the key). Writes are atomic: temp file, fsync,
//! rename, directory fsync.
//!
//! # One whitelist per filter
//!
//! A served filter publishes a new list for lookups whenever its layers
//! grow or its whitelist changes, and each list holds the whitelist. Its
//! keys are therefore shared, not copied: cloning a [`Whitelist`] is one
//! reference count, and the set is copied only by the first edit of a
//! clone that shares it (copy on write), which is what an edit made on
//! the side and published once durable needs anyway. However often a
//! filter grows, it holds one whitelist.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// First line of every whitelist file.
pub const WHITELIST_HEADER: &str = "# bloomgate whitelist v1";

/// The line that stands for the empty key (an empty line is skipped).
const EMPTY_KEY_LINE: &[u8] = b"\\e";

/// Errors reading or writing a whitelist file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WhitelistError {
    /// An I/O error.
    #[error("{path}: cannot {op}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a whitelist this build can read.
    #[error("{path}: line {line}: {reason}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

/// An exact set of keys. A clone shares the keys until one of the two
/// is edited (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Whitelist {
    keys: Arc<BTreeSet<Vec<u8>>>,
}

impl Whitelist {
    /// The whitelist path for a filter file: `FILE.whitelist`.
    pub fn path_for(filter_path: &Path) -> PathBuf {
        let mut s = filter_path.as_os_str().to_os_string();
        s.push(".whitelist");
        PathBuf::from(s)
    }

    /// Loads `path`; a missing file is an empty whitelist.
    pub fn load(path: &Path) -> Result<Whitelist, WhitelistError> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Whitelist::default()),
            Err(source) => {
                return Err(WhitelistError::Io {
                    path: path.into(),
                    op: "read",
                    source,
                })
            }
        };
        Whitelist::parse(&bytes).map_err(|(line, reason)| WhitelistError::Malformed {
            path: path.into(),
            line,
            reason,
        })
    }

    /// Parses the file format. Errors carry (line number, reason).
    pub fn parse(bytes: &[u8]) -> Result<Whitelist, (usize, String)> {
        let mut lines = bytes.split(|&b| b == b'\n');
        match lines.next() {
            Some(first) if first == WHITELIST_HEADER.as_bytes() => {}
            _ => {
                return Err((
                    1,
                    format!("not a bloomgate whitelist (expected {WHITELIST_HEADER:?})"),
                ))
            }
        }
        let mut keys = BTreeSet::new();
        for (i, line) in lines.enumerate() {
            if line.is_empty() {
                continue;
            }
            if line == EMPTY_KEY_LINE {
                keys.insert(Vec::new());
                continue;
            }
            keys.insert(unescape(line).map_err(|r| (i + 2, r))?);
        }
        Ok(Whitelist {
            keys: Arc::new(keys),
        })
    }

    /// Serializes to the file format.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.keys.iter().map(|k| k.len() + 1).sum::<usize>());
        out.extend_from_slice(WHITELIST_HEADER.as_bytes());
        out.push(b'\n');
        for k in self.keys.iter() {
            if k.is_empty() {
                out.extend_from_slice(EMPTY_KEY_LINE);
            } else {
                escape_into(k, &mut out);
            }
            out.push(b'\n');
        }
        out
    }

    /// Writes to `path` atomically.
    pub fn save(&self, path: &Path) -> Result<(), WhitelistError> {
        let io = |op: &'static str| {
            move |source| WhitelistError::Io {
                path: path.into(),
                op,
                source,
            }
        };
        bloomgate_engine::atomic::write_atomic(path, &self.to_bytes())
            .map_err(|e| io(e.op)(e.source))
    }

    /// True if `key` is whitelisted.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.keys.contains(key)
    }

    /// Adds a key; returns true if it was new.
    pub fn insert(&mut self, key: Vec<u8>) -> bool {
        if self.keys.contains(&key) {
            return false;
        }
        Arc::make_mut(&mut self.keys).insert(key)
    }

    /// Removes a key; returns true if it was there.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        self.keys.contains(key) && Arc::make_mut(&mut self.keys).remove(key)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.keys.iter().map(Vec::as_slice)
    }

    /// The keys after `after` (all of them for `None`), sorted: one page
    /// of a listing after another.
    pub fn iter_after(&self, after: Option<&[u8]>) -> impl Iterator<Item = &[u8]> {
        use std::ops::Bound::{Excluded, Unbounded};
        let start = after.map_or(Unbounded, Excluded);
        self.keys
            .range::<[u8], _>((start, Unbounded))
            .map(Vec::as_slice)
    }
}

fn escape_into(key: &[u8], out: &mut Vec<u8>) {
    for &b in key {
        if (0x21..0x7f).contains(&b) && b != b'\\' {
            out.push(b);
        } else {
            out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
        }
    }
}

fn unescape(line: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        if line[i] == b'\\' {
            let hex = line
                .get(i + 1..i + 4)
                .filter(|h| h[0] == b'x')
                .and_then(|h| std::str::from_utf8(&h[1..]).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "malformed \\x escape".to_string())?;
            out.push(hex);
            i += 4;
        } else {
            out.push(line[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_any_bytes() {
        let mut w = Whitelist::default();
        w.insert(b"evil.com/x".to_vec());
        w.insert(b"a\nb\\c \x00\xff".to_vec());
        let parsed = Whitelist::parse(&w.to_bytes()).unwrap();
        assert_eq!(parsed, w);
    }

    /// The empty key (a raw filter's empty item) survives a round trip
    /// beside a key that is a backslash and an `e`, and an empty line
    /// still stands for nothing.
    #[test]
    fn empty_key_round_trips() {
        let mut w = Whitelist::default();
        w.insert(Vec::new());
        w.insert(b"\\e".to_vec());
        let bytes = w.to_bytes();
        assert_eq!(
            bytes,
            format!("{WHITELIST_HEADER}\n\\e\n\\x5ce\n").into_bytes()
        );
        let parsed = Whitelist::parse(&bytes).unwrap();
        assert_eq!(parsed, w);
        assert!(parsed.contains(b"") && parsed.contains(b"\\e") && parsed.len() == 2);
        let blank = Whitelist::parse(format!("{WHITELIST_HEADER}\n\nx\n").as_bytes()).unwrap();
        assert!(!blank.contains(b"") && blank.len() == 1);
    }

    /// A clone shares the keys (one whitelist however often a served
    /// filter publishes a new list) until one side is edited; an edit
    /// never shows through the other side, and an edit that changes
    /// nothing copies nothing.
    #[test]
    fn clones_share_keys_until_edited() {
        let mut w = Whitelist::default();
        w.insert(b"a".to_vec());
        let mut c = w.clone();
        assert!(Arc::ptr_eq(&w.keys, &c.keys));
        assert!(!c.insert(b"a".to_vec()));
        assert!(!c.remove(b"absent"));
        assert!(Arc::ptr_eq(&w.keys, &c.keys));
        assert!(c.insert(b"b".to_vec()));
        assert!(!Arc::ptr_eq(&w.keys, &c.keys));
        assert!(!w.contains(b"b") && c.contains(b"b"));
        assert!(c.remove(b"a"));
        assert!(w.contains(b"a") && !c.contains(b"a"));
        assert_eq!((w.len(), c.len()), (1, 1));
    }

    #[test]
    fn refuses_foreign_or_malformed() {
        assert_eq!(Whitelist::parse(b"hello\n").unwrap_err().0, 1);
        let bad = format!("{WHITELIST_HEADER}\nok\nbad\\x4\n");
        assert_eq!(Whitelist::parse(bad.as_bytes()).unwrap_err().0, 3);
    }

    #[test]
    fn save_load_atomic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.bgf.whitelist");
        assert!(Whitelist::load(&p).unwrap().is_empty());
        let mut w = Whitelist::default();
        w.insert(b"k".to_vec());
        w.save(&p).unwrap();
        assert_eq!(Whitelist::load(&p).unwrap(), w);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
