//! A blacklist as users see it: a filter file, the rules that turn entries and
//! queries into keys, and an exact whitelist of known false positives.
//!
//! The CLI and the service both go through [`Blacklist`], so a URL is
//! canonicalized, expanded into lookups, and checked against the whitelist in
//! exactly one way everywhere.
//!
//! # The whitelist
//!
//! A Bloom filter answers "yes" for some items that were never added (at the
//! planned rate, e.g. 1 in 10,000). When such a false positive is found, the
//! seeds' remedy is an exact list consulted before a hit is reported. It is
//! stored beside the filter as `FILE.whitelist` (see [`whitelist`]) and written
//! atomically like the filter itself.
//!
//! A query is reported as a hit when one of its lookup keys is in the filter
//! and that key is not whitelisted, unless the query's own first key (its
//! canonical form: the full URL, the exact host) is whitelisted, which exempts
//! the whole query. **The risk:** a whitelisted item that really is on the
//! blacklist is let through; whitelist only items you have confirmed.
//!
//! ```
//! use bloomgate_blacklist::Blacklist;
//! use bloomgate_engine::{plan, Filter, Layout, Params};
//! use bloomgate_url::{KeyKind, MatchMode};
//!
//! let mut params = Params::from_plan(&plan(Layout::Blocked, 100, 1e-4).unwrap(), 1);
//! params.key_kind = KeyKind::Url.as_u8();
//! params.match_mode = MatchMode::Prefix.as_u8();
//! let list = Blacklist::from_filter(Filter::new(params).unwrap()).unwrap();
//! list.add(b"http://evil.example/phish/").unwrap();
//! let mut scratch = Vec::new();
//! let v = list.check(b"HTTP://EVIL.example:80/phish/./login.php#x", &mut scratch).unwrap();
//! assert!(v.hit);
//! assert_eq!(v.matched.as_deref(), Some("evil.example/phish/"));
//! assert!(!list.check(b"http://evil.example/", &mut scratch).unwrap().hit);
//! ```
#![deny(missing_docs)]

pub mod cf_file;
pub mod datadir;
pub mod delta;
pub mod journal;
pub mod layers;
pub mod repair;
pub mod spec;
pub mod wal;
pub mod whitelist;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bloomgate_engine::{math, Access, Filter, Params};
use bloomgate_url::{entry_key, max_lookups, query_keys, KeyError, KeyKind, MatchMode};

use datadir::{DirLock, ReplayStats};
use layers::{layer_path, FillPolicy, GrowLimits, Layers};
pub use spec::{DeletableArgs, DeletablePlan, DeletableSpec, FilterSpec, SpecError};
pub use whitelist::Whitelist;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The filter file or engine failed.
    #[error(transparent)]
    Engine(#[from] bloomgate_engine::Error),
    /// The whitelist file failed.
    #[error(transparent)]
    Whitelist(#[from] whitelist::WhitelistError),
    /// The file's header names a key kind or mode this build does not know.
    #[error("{path}: unknown key kind code {kind} or match mode code {mode}")]
    UnknownKind {
        /// The filter file.
        path: PathBuf,
        /// Key kind code found.
        kind: u8,
        /// Match mode code found.
        mode: u8,
    },
    /// The layers of a filter do not fit together.
    #[error("{path}: {problem}")]
    Layers {
        /// The file at fault.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A scaling filter cannot append another layer.
    #[error("filter cannot grow further ({0})")]
    CannotGrow(String),
    /// A fill policy cannot be used here (see [`layers::FillPolicy`]).
    #[error("{0}")]
    Policy(String),
    /// A filter specification out of range (see [`spec::FilterSpec`]).
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    /// Another process holds the data directory (see [`datadir::DirLock`]).
    #[error(
        "{0}: a running bloomgate serve (or another bloomgate writing to it) holds this data directory; change the filter through the server (BF.ADD, or the HTTP API in docs/http-api.md), or stop the server first: a direct change would be overwritten by its next snapshot"
    )]
    DirBusy(PathBuf),
    /// The data directory kept changing while it was read.
    #[error("{0}: the data directory kept changing while it was read (a server is snapshotting or reloading it); try again")]
    Changing(PathBuf),
    /// The log holds bulk-loaded bits an in-place update cannot fold in.
    #[error(
        "{0}: the write-ahead log holds BF.LOADCHUNK data not yet in the filter files; start bloomgate serve on this directory once (it folds the log in at startup), then retry"
    )]
    PendingChunks(PathBuf),
    /// A write-ahead log segment or a journal is damaged other than at its
    /// tail (see [`log`]).
    #[error(transparent)]
    DamagedLog(#[from] wal::DamagedFile),
    /// The delta file of a static list (its added keys) failed: damaged,
    /// of other key rules, unreadable (see [`delta`]).
    #[error(transparent)]
    Delta(#[from] delta::DeltaError),
    /// A file of the data directory failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
}

/// The answer to one query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// True if the query is (probably) blacklisted and not whitelisted.
    pub hit: bool,
    /// True if the filter matched but the whitelist exempted the query.
    pub whitelisted: bool,
    /// The lookup key that matched (for url/prefix the Safe Browsing
    /// expression, for host the domain), when `hit` or `whitelisted`.
    pub matched: Option<String>,
}

/// A [`Verdict`] whose matched key is borrowed from the lookup keys (no
/// allocation; see [`verdict_ref`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerdictRef<'k> {
    /// As [`Verdict::hit`].
    pub hit: bool,
    /// As [`Verdict::whitelisted`].
    pub whitelisted: bool,
    /// As [`Verdict::matched`], the key's bytes.
    pub matched: Option<&'k [u8]>,
}

impl VerdictRef<'_> {
    /// The owned verdict.
    pub fn to_verdict(&self) -> Verdict {
        Verdict {
            hit: self.hit,
            whitelisted: self.whitelisted,
            matched: self
                .matched
                .map(|k| String::from_utf8_lossy(k).into_owned()),
        }
    }
}

impl Verdict {
    /// The verdict with its matched key borrowed.
    pub fn as_ref(&self) -> VerdictRef<'_> {
        VerdictRef {
            hit: self.hit,
            whitelisted: self.whitelisted,
            matched: self.matched.as_deref().map(str::as_bytes),
        }
    }
}

/// Whether a read-only open includes the live adds of a served data directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogMode {
    /// Re-insert the journal's and the log's acknowledged adds (the default:
    /// the filter as the server would answer).
    Replay,
    /// The files alone: the last snapshot, lacking adds made since.
    SnapshotOnly,
}

/// What opening a filter found around its files.
#[derive(Clone, Debug, Default)]
pub struct Opened {
    /// The data directory of a served filter (`.bloomgate-wal/` or
    /// `NAME.live` beside it).
    pub data_dir: Option<PathBuf>,
    /// A process held the data directory's lock when it was opened.
    pub served: bool,
    /// What re-inserting the journal's and the log's adds did (`None`
    /// outside a data directory, or with [`LogMode::SnapshotOnly`]).
    pub replay: Option<ReplayStats>,
    /// Damaged journal or log tails that were skipped (one line each).
    pub damaged: Vec<String>,
}

/// How many times a read-only open retries while a server changes the files.
const OPEN_TRIES: usize = 8;

/// A filter (all its layers) plus its key rules and whitelist.
#[derive(Debug)]
pub struct Blacklist {
    layers: Layers,
    whitelist: Whitelist,
    base: Option<PathBuf>,
    opened: Opened,
    /// For an in-place update: layers that existed when it began (later
    /// ones are new files, persisted at commit), and the directory lock.
    update: Option<(usize, Option<DirLock>)>,
}

impl Blacklist {
    /// Opens the filter whose first layer is the file at `path`: every
    /// layer, memory-mapped, and its whitelist.
    ///
    /// * [`Access::ReadOnly`]: as [`Blacklist::open_read`] with
    ///   [`LogMode::Replay`]. Nothing is written.
    /// * [`Access::ReadWrite`]: as [`Blacklist::open_for_update`].
    pub fn open(path: impl AsRef<Path>, access: Access) -> Result<Blacklist, Error> {
        match access {
            Access::ReadOnly => Blacklist::open_read(path, LogMode::Replay),
            Access::ReadWrite => Blacklist::open_for_update(path),
        }
    }

    /// Opens a filter for reading. Inside a served data directory, with
    /// [`LogMode::Replay`], the acknowledged adds that the files lack (in
    /// the journal and the write-ahead log, see [`datadir`]) are
    /// re-inserted into this process's copy-on-write mapping, so it answers
    /// as the server does; the files are not changed.
    pub fn open_read(path: impl AsRef<Path>, log: LogMode) -> Result<Blacklist, Error> {
        let path = path.as_ref();
        let located = datadir::locate(path);
        let mut tries = 0;
        loop {
            let layers = Layers::open(path, Access::ReadOnly)?;
            let whitelist = Whitelist::load(&Whitelist::path_for(path))?;
            let mut opened = Opened::default();
            let Some((dir, name)) = &located else {
                return Ok(Blacklist::assemble(layers, whitelist, path, opened));
            };
            opened.data_dir = Some(dir.clone());
            opened.served = datadir::served(dir);
            if log == LogMode::SnapshotOnly {
                return Ok(Blacklist::assemble(layers, whitelist, path, opened));
            }
            let pending = datadir::read_pending(dir, name, layers.lineage())?;
            let (layers, stats) = datadir::replay(layers, &pending)?;
            if pending.still_current(dir, name) {
                opened.replay = Some(stats);
                opened.damaged = pending.damaged;
                return Ok(Blacklist::assemble(layers, whitelist, path, opened));
            }
            tries += 1;
            if tries >= OPEN_TRIES {
                return Err(Error::Changing(dir.clone()));
            }
            std::thread::sleep(std::time::Duration::from_millis(20 << tries.min(5)));
        }
    }

    /// Opens a filter for an in-place update: every layer mapped writable,
    /// each marked dirty ([`Filter::begin_update`]) until
    /// [`Blacklist::commit`].
    ///
    /// Inside a data directory it takes the directory's lock, so it fails
    /// with [`Error::DirBusy`] while a server runs there (the server's next
    /// snapshot would overwrite the change), and first inserts the
    /// acknowledged adds that the files lack (a server that was killed
    /// before its snapshot), so that the files hold them too.
    pub fn open_for_update(path: impl AsRef<Path>) -> Result<Blacklist, Error> {
        let path = path.as_ref();
        let located = datadir::locate(path);
        let lock = match &located {
            Some((dir, _)) => Some(DirLock::acquire(dir)?),
            None => None,
        };
        let mut layers = Layers::open(path, Access::ReadWrite)?;
        for f in &mut layers.layers {
            Arc::get_mut(f)
                .expect("freshly opened layers are not shared")
                .begin_update()?;
        }
        let whitelist = Whitelist::load(&Whitelist::path_for(path))?;
        let existing = layers.layers.len();
        let mut opened = Opened::default();
        let pending = match &located {
            Some((dir, name)) => {
                opened.data_dir = Some(dir.clone());
                Some(datadir::read_pending(dir, name, layers.lineage())?)
            }
            None => None,
        };
        let mut list = Blacklist::assemble(layers, whitelist, path, opened);
        list.update = Some((existing, lock));
        if let Some(pending) = pending {
            // Bulk-loaded bits must be in the files already: OR-ing them in
            // here would bypass the update's checksum log, and they are rare.
            for (layer, offset, data) in &pending.chunks {
                let have = list.layers.layers.get(*layer as usize).and_then(|f| {
                    f.as_bytes()
                        .get(*offset as usize..*offset as usize + data.len())
                });
                let covered = have.is_some_and(|h| h.iter().zip(data).all(|(&h, &d)| h & d == d));
                if !covered && have.is_some() {
                    return Err(Error::PendingChunks(path.to_path_buf()));
                }
            }
            let mut stats = ReplayStats::default();
            let mut keys = Vec::new();
            for (seed, key) in &pending.adds {
                stats.adds += 1;
                match datadir::converted_key(&list.layers, &pending.lineage, *seed, key) {
                    Ok(k) => keys.push(k.into_owned()),
                    Err(_) => stats.unconvertible += 1,
                }
            }
            stats.new = list.update_keys(&keys, true)?;
            stats.keys = keys;
            list.opened.replay = Some(stats);
            list.opened.damaged = pending.damaged;
        }
        Ok(list)
    }

    /// Wraps an in-memory (or freshly created) filter as a single fixed
    /// layer with an empty whitelist; the key kind and mode come from the
    /// filter's parameters.
    pub fn from_filter(filter: Filter) -> Result<Blacklist, Error> {
        let base = filter.path().map(Path::to_path_buf);
        let layers = Layers::single(filter)?;
        Ok(Blacklist {
            layers,
            whitelist: Whitelist::default(),
            base,
            opened: Opened::default(),
            update: None,
        })
    }

    /// The filter of `layers` and `whitelist` a caller holds (a server's
    /// published state), whose first layer's file is at `path` (its
    /// whitelist is saved beside it); nothing is read.
    pub fn from_layers(layers: Layers, whitelist: Whitelist, path: &Path) -> Blacklist {
        Blacklist::assemble(layers, whitelist, path, Opened::default())
    }

    fn assemble(layers: Layers, whitelist: Whitelist, path: &Path, opened: Opened) -> Blacklist {
        Blacklist {
            layers,
            whitelist,
            base: Some(path.to_path_buf()),
            opened,
            update: None,
        }
    }

    /// All layers of the filter, with its key rules and growth settings.
    pub fn layers(&self) -> &Layers {
        &self.layers
    }

    /// The first layer (the only one unless the filter grew).
    pub fn filter(&self) -> &Filter {
        &self.layers.layers[0]
    }

    /// What opening found around the files (data directory, replayed adds).
    pub fn opened(&self) -> &Opened {
        &self.opened
    }

    /// What the entries are.
    pub fn kind(&self) -> KeyKind {
        self.layers.kind
    }

    /// How queries are matched.
    pub fn mode(&self) -> MatchMode {
        self.layers.mode
    }

    /// The whitelist.
    pub fn whitelist(&self) -> &Whitelist {
        &self.whitelist
    }

    /// Normalizes one entry as this blacklist's key kind requires.
    pub fn entry_key<'a>(&self, entry: &'a [u8]) -> Result<Cow<'a, [u8]>, KeyError> {
        entry_key(self.layers.kind, self.layers.mode, entry)
    }

    /// Adds one entry to the newest layer, without growing (see
    /// [`Blacklist::update_keys`] for a growing filter's rules). Returns true
    /// if it was not (probably) present.
    pub fn add(&self, entry: &[u8]) -> Result<bool, KeyError> {
        let key = self.entry_key(entry)?;
        Ok(!self.layers.contains(&key) && self.layers.layers.last().expect("a layer").insert(&key))
    }

    /// Inserts normalized keys during an in-place update
    /// ([`Blacklist::open_for_update`]). A fixed filter takes them through
    /// the engine's logged batch ([`Filter::update_batch`]); a scaling one
    /// by its growth rules, appending new layer files when the newest is
    /// full (`force`: even past a non-scaling filter's capacity — for adds
    /// that were acknowledged already). Returns how many were new; fails
    /// with [`Error::Policy`] at the first new key a full non-scaling
    /// filter refuses.
    pub fn update_keys<T: AsRef<[u8]>>(&mut self, keys: &[T], force: bool) -> Result<u64, Error> {
        self.update_keys_each(keys, force, &mut Vec::new())
    }

    /// [`Blacklist::update_keys`], pushing to `out` whether each key was
    /// new, in order: the answers of adding the keys one at a time, and
    /// the same bits. On an error, `out` holds the answers of the keys
    /// added before it.
    pub fn update_keys_each<T: AsRef<[u8]>>(
        &mut self,
        keys: &[T],
        force: bool,
        out: &mut Vec<bool>,
    ) -> Result<u64, Error> {
        let Some((_, _)) = &self.update else {
            return Err(Error::Engine(bloomgate_engine::Error::NotWritable(
                "update_keys needs a filter opened with open_for_update",
            )));
        };
        if self.layers.fill == FillPolicy::Fixed {
            return Ok(self.layers.layers[0].update_batch_each(keys, out)?);
        }
        let base = self.base.clone().expect("opened from a file");
        let mut new = 0;
        for key in keys {
            let n = self.layers.layers.len();
            let mut new_file =
                |p: Params| Filter::create_file(layer_path(&base, n), p).map_err(Error::from);
            let (added, grown) =
                self.layers
                    .insert(key.as_ref(), force, GrowLimits::default(), &mut new_file)?;
            if let Some(g) = grown {
                self.layers = g;
            }
            if added == layers::Added::Full {
                return Err(Error::Policy(format!(
                    "the filter is full ({} items, fill policy refuse): adds of new entries past its capacity are refused",
                    self.layers.items()
                )));
            }
            out.push(added == layers::Added::New);
            new += (added == layers::Added::New) as u64;
        }
        Ok(new)
    }

    /// Finishes an in-place update: reseals every layer that existed
    /// ([`Filter::commit_update`]) and moves new layer files into place.
    pub fn commit(&mut self) -> Result<(), Error> {
        let Some((existing, _lock)) = self.update.take() else {
            return Ok(());
        };
        for (i, f) in self.layers.layers.iter_mut().enumerate() {
            let f = Arc::get_mut(f).ok_or(Error::Engine(bloomgate_engine::Error::NotWritable(
                "a layer is still shared at commit",
            )))?;
            if i < existing {
                f.commit_update()?;
            } else {
                f.persist()?;
            }
        }
        Ok(())
    }

    /// Answers one query. `scratch` holds the lookup keys between calls so a
    /// loop allocates nothing once warm.
    pub fn check(&self, query: &[u8], scratch: &mut Vec<Vec<u8>>) -> Result<Verdict, KeyError> {
        query_keys(self.layers.kind, self.layers.mode, query, scratch)?;
        Ok(self.verdict(scratch))
    }

    /// The verdict for lookup keys already computed by [`bloomgate_url::query_keys`].
    pub fn verdict(&self, keys: &[Vec<u8>]) -> Verdict {
        verdict_with(|k| self.layers.contains(k), &self.whitelist, keys)
    }

    /// Adds items (normalized with the key kind) to the whitelist in memory.
    /// Returns, per item, whether the filter currently reports it as a hit:
    /// whitelisting something that is not a hit has no effect, and callers
    /// should warn about it.
    pub fn whitelist_add(&mut self, item: &[u8]) -> Result<bool, KeyError> {
        let key = self.entry_key(item)?.into_owned();
        let was_hit = self.layers.contains(&key) || {
            let mut scratch = Vec::new();
            query_keys(self.layers.kind, self.layers.mode, item, &mut scratch)
                .map(|_| scratch.iter().any(|k| self.layers.contains(k)))
                .unwrap_or(false)
        };
        self.whitelist.insert(key);
        Ok(was_hit)
    }

    /// Removes an item from the whitelist in memory. Returns whether it was there.
    pub fn whitelist_remove(&mut self, item: &[u8]) -> Result<bool, KeyError> {
        let key = self.entry_key(item)?;
        Ok(self.whitelist.remove(&key))
    }

    /// Writes the whitelist beside the filter file, atomically.
    pub fn save_whitelist(&self) -> Result<(), Error> {
        let path = self
            .base
            .as_deref()
            .ok_or(bloomgate_engine::Error::NotWritable(
                "the filter has no file to store its whitelist beside",
            ))?;
        self.whitelist.save(&Whitelist::path_for(path))?;
        Ok(())
    }

    /// Replaces the whitelist (e.g. after reloading it from disk).
    pub fn set_whitelist(&mut self, whitelist: Whitelist) {
        self.whitelist = whitelist;
    }
}

/// The whitelist rule, for any membership test (one filter, or the layers of
/// a growing filter): the first key that is in the set and not whitelisted is
/// a hit; a whitelisted first key (the query's own canonical form) exempts the
/// whole query.
pub fn verdict_with(
    contains: impl Fn(&[u8]) -> bool,
    whitelist: &Whitelist,
    keys: &[Vec<u8>],
) -> Verdict {
    // Lazy: lookups stop at the first hit that is not whitelisted.
    verdict_of(whitelist, keys.iter().map(|k| (k.as_slice(), contains(k))))
}

/// [`verdict_with`] over keys whose membership is already known: `probes`
/// yields each lookup key of one query, in order, with whether the filter
/// holds it.
pub fn verdict_of<'k>(
    whitelist: &Whitelist,
    probes: impl IntoIterator<Item = (&'k [u8], bool)>,
) -> Verdict {
    verdict_ref(whitelist, probes).to_verdict()
}

/// [`verdict_of`] without allocating: the matched key is borrowed.
pub fn verdict_ref<'k>(
    whitelist: &Whitelist,
    probes: impl IntoIterator<Item = (&'k [u8], bool)>,
) -> VerdictRef<'k> {
    let mut probes = probes.into_iter().peekable();
    let exempt_all =
        !whitelist.is_empty() && probes.peek().is_some_and(|(k, _)| whitelist.contains(k));
    let mut whitelisted: Option<&[u8]> = None;
    for (key, present) in probes {
        if !present {
            continue;
        }
        if exempt_all || whitelist.contains(key) {
            whitelisted.get_or_insert(key);
            continue;
        }
        return VerdictRef {
            hit: true,
            whitelisted: false,
            matched: Some(key),
        };
    }
    VerdictRef {
        hit: false,
        whitelisted: whitelisted.is_some(),
        matched: whitelisted,
    }
}

/// The per-lookup false-positive rate to plan for so that one query of this
/// kind and mode stays at `per_query` (a url/prefix query makes up to 30 lookups).
pub fn per_lookup_rate(kind: KeyKind, mode: MatchMode, per_query: f64) -> f64 {
    math::per_lookup_rate(per_query, max_lookups(kind, mode))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomgate_engine::{plan, Layout, Params};

    fn list(kind: KeyKind, mode: MatchMode) -> Blacklist {
        let mut params = Params::from_plan(&plan(Layout::Blocked, 1000, 1e-6).unwrap(), 5);
        params.key_kind = kind.as_u8();
        params.match_mode = mode.as_u8();
        Blacklist::from_filter(Filter::new(params).unwrap()).unwrap()
    }

    #[test]
    fn url_exact_matches_messy_query() {
        let l = list(KeyKind::Url, MatchMode::Exact);
        l.add(b"http://www.evil.com/a/c").unwrap();
        let mut s = Vec::new();
        let v = l
            .check(b"HTTP://WWW.Evil.COM:80/a/./b/../c#top", &mut s)
            .unwrap();
        assert!(v.hit);
        assert_eq!(v.matched.as_deref(), Some("www.evil.com/a/c"));
        assert!(!l.check(b"http://www.evil.com/a/", &mut s).unwrap().hit);
    }

    #[test]
    fn host_matches_parents_urls_and_emails() {
        let l = list(KeyKind::Host, MatchMode::Exact);
        l.add(b"Evil.COM").unwrap();
        let mut s = Vec::new();
        for q in [
            &b"evil.com"[..],
            b"a.b.evil.com",
            b"https://x.evil.com/p?q",
            b"joe@mail.evil.com",
        ] {
            let v = l.check(q, &mut s).unwrap();
            assert!(v.hit, "{}", String::from_utf8_lossy(q));
            assert_eq!(v.matched.as_deref(), Some("evil.com"));
        }
        assert!(!l.check(b"notevil.com", &mut s).unwrap().hit);
        assert!(!l.check(b"evil.com.org", &mut s).unwrap().hit);
    }

    #[test]
    fn whitelist_exempts_and_reports() {
        let mut l = list(KeyKind::Url, MatchMode::Prefix);
        l.add(b"evil.com/").unwrap();
        let mut s = Vec::new();
        assert!(l.check(b"http://evil.com/ok", &mut s).unwrap().hit);
        // Whitelisting the exact URL exempts it, and only it.
        assert!(l.whitelist_add(b"http://evil.com/ok").unwrap());
        let v = l.check(b"http://EVIL.com/ok", &mut s).unwrap();
        assert_eq!(
            v,
            Verdict {
                hit: false,
                whitelisted: true,
                matched: Some("evil.com/".into())
            }
        );
        assert!(l.check(b"http://evil.com/other", &mut s).unwrap().hit);
        // Whitelisting something that is no hit says so.
        assert!(!l.whitelist_add(b"http://good.example/").unwrap());
        assert!(l.whitelist_remove(b"http://evil.com/ok").unwrap());
        assert!(l.check(b"http://evil.com/ok", &mut s).unwrap().hit);
    }

    #[test]
    fn sizing_for_prefix_queries() {
        let r = per_lookup_rate(KeyKind::Url, MatchMode::Prefix, 1e-4);
        assert!((r - 1e-4 / 30.0).abs() / r < 0.001);
        assert_eq!(per_lookup_rate(KeyKind::Url, MatchMode::Exact, 1e-4), 1e-4);
    }
}
