//! `bloomgate.List`: one open list, shared by threads.
//!
//! # Threads
//!
//! The library's `List` is `Send + Sync`; here it sits behind a
//! reader-writer lock, so lookups from many threads run at once and an add,
//! remove or whitelist edit runs alone. Every call takes its items' bytes
//! first (GIL held; `items`), and never needs the GIL while holding the
//! lock, so a thread waiting for the GIL never blocks one that holds the
//! lock and the two cannot deadlock.
//!
//! A batch, and every call on a list in Redis (a network round trip),
//! releases the GIL, then takes the lock: other Python threads run while
//! the library works. A single lookup or add of a file's list (a few
//! hundred nanoseconds, less than releasing and taking back the GIL) keeps
//! the GIL and only *tries* the lock: when a writer holds it, the call
//! releases the GIL and waits for it as a batch does, so a long add never
//! stalls the other Python threads.
//!
//! # fork()
//!
//! The forks seen when a list was opened are recorded (a counter bumped
//! in every child by a `pthread_atfork` handler: one atomic load per call,
//! where asking the process id is a system call). In a child made by `fork()`
//! (multiprocessing's default on Linux before Python 3.14, a pre-forking
//! server), a list opened read-only from a file keeps answering lookups:
//! its memory map is shared with the parent, copy-on-write, and nothing is
//! written. Every other use — any call on a list in Redis (its connections
//! are the parent's sockets, and two processes talking on one socket would
//! read each other's replies), and changes to a file opened for update
//! (its lock belongs to the parent) — raises `bloomgate.Error` telling the
//! child to open the list again.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Once, RwLock, RwLockReadGuard, RwLockWriteGuard};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use bloomgate_engine::Removal;
use bloomgate_list::{CheckScratch, Claim, List as Inner, OpenOptions};

use crate::errors::{list_err, Error, InvalidItem, ReadOnly};
use crate::items::{bytes_of, Batch, Packed};

/// Forks of this process's ancestry since the module was loaded: bumped in
/// each child by [`count_forks`]'s handler.
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn forked_child() {
    FORKS.fetch_add(1, Relaxed);
}

/// Registers the fork counter's handler (once per process; children
/// inherit it).
pub fn count_forks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the handler only bumps an atomic (async-signal-safe).
        unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    });
}

/// Batches up to this many items are answered without releasing the GIL
/// (about the cost of releasing it and taking it back).
const SMALL: usize = 8;

thread_local! {
    /// A lookup's buffers, kept per thread between calls.
    static SCRATCH: RefCell<CheckScratch> = RefCell::new(CheckScratch::default());
}

/// The answers of a batch of lookups.
#[derive(Default)]
struct Answers {
    /// Per query: 0 absent, 1 a hit, 2 not a valid query of the key kind.
    codes: Vec<u8>,
    /// The first invalid query: its position and why.
    invalid: Option<(usize, String)>,
}

impl Answers {
    /// Answers `queries` from `list`, on this thread's buffers.
    fn of(list: &Inner, queries: &[&[u8]]) -> Result<Answers, bloomgate_list::Error> {
        let mut a = Answers {
            codes: Vec::with_capacity(queries.len()),
            invalid: None,
        };
        let mut each =
            |v: Result<bloomgate_blacklist::VerdictRef<'_>, bloomgate_url::KeyError>| match v {
                Ok(v) => a.codes.push(v.hit as u8),
                Err(e) => {
                    if a.invalid.is_none() {
                        a.invalid = Some((a.codes.len(), format!("{e}")));
                    }
                    a.codes.push(2);
                }
            };
        SCRATCH.with(|s| match s.try_borrow_mut() {
            Ok(mut s) => list.check_each(queries, &mut s, &mut each),
            Err(_) => list.check_each(queries, &mut CheckScratch::default(), &mut each),
        })?;
        Ok(a)
    }
}

/// A list opened by `bloomgate.open`.
#[pyclass(module = "bloomgate._core", name = "List", frozen)]
pub struct List {
    inner: RwLock<Option<Inner>>,
    address: String,
    layout: &'static str,
    key_kind: String,
    match_mode: String,
    redis: bool,
    update: bool,
    pid: u32,
    forks: u64,
}

fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Inner>();
}

/// The name of a claim, as Python sees it.
fn claim_name(c: Claim) -> &'static str {
    match c {
        Claim::New => "new",
        Claim::Present => "present",
        Claim::Unknown => "unknown",
        Claim::NotAdded => "not_added",
    }
}

impl List {
    /// Opens `address` as `options` say (GIL released by the caller).
    pub fn open(address: &str, options: &OpenOptions) -> Result<List, bloomgate_list::Error> {
        let inner = Inner::open_with(address, options)?;
        Ok(List {
            address: inner.address().to_string(),
            layout: inner.layout(),
            key_kind: inner.kind().to_string(),
            match_mode: inner.mode().to_string(),
            redis: bloomgate_redis::is_redis_address(address),
            update: options.update,
            pid: std::process::id(),
            forks: FORKS.load(Relaxed),
            inner: RwLock::new(Some(inner)),
        })
    }

    /// Refuses what a forked child may not do (see the module essay).
    fn forked(&self, changing: bool) -> PyResult<()> {
        if self.in_child() && (self.redis || self.update || changing) {
            return Err(Error::new_err(format!(
                "{}: opened in process {} before a fork(); this process ({}) must open it again (bloomgate.open)",
                self.address,
                self.pid,
                std::process::id()
            )));
        }
        Ok(())
    }

    /// True in a child forked after the list was opened.
    fn in_child(&self) -> bool {
        FORKS.load(Relaxed) != self.forks
    }

    fn closed(&self) -> PyErr {
        Error::new_err(format!("{}: the list is closed", self.address))
    }

    /// Refuses a change of a file opened for reading before any lock.
    fn may_change(&self) -> PyResult<()> {
        self.forked(true)?;
        if !self.redis && !self.update {
            return Err(ReadOnly::new_err(format!(
                "{}: opened for reading only; open it with bloomgate.open(path, update=True) to change it",
                self.address
            )));
        }
        Ok(())
    }

    fn read(&self) -> RwLockReadGuard<'_, Option<Inner>> {
        // A panic while the lock was held left no half-done change behind
        // that a reader could see (every change is one library call).
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Option<Inner>> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the open list under the read lock: with the GIL held
    /// when `small` and the lock is free at once (a file's list), else
    /// with the GIL released (see the module essay).
    fn with_read<R: Send>(
        &self,
        py: Python<'_>,
        small: bool,
        f: impl FnOnce(&Inner) -> PyResult<R> + Send,
    ) -> PyResult<R> {
        self.forked(false)?;
        if small && !self.redis {
            if let Ok(guard) = self.inner.try_read() {
                return f(guard.as_ref().ok_or_else(|| self.closed())?);
            }
        }
        py.detach(|| {
            let guard = self.read();
            f(guard.as_ref().ok_or_else(|| self.closed())?)
        })
    }

    /// [`List::with_read`] under the write lock, for a change.
    fn with_write<R: Send>(
        &self,
        py: Python<'_>,
        small: bool,
        f: impl FnOnce(&mut Inner) -> PyResult<R> + Send,
    ) -> PyResult<R> {
        if small && !self.redis {
            if let Ok(mut guard) = self.inner.try_write() {
                return f(guard.as_mut().ok_or_else(|| self.closed())?);
            }
        }
        py.detach(|| {
            let mut guard = self.write();
            f(guard.as_mut().ok_or_else(|| self.closed())?)
        })
    }

    /// The answers for queries.
    fn answers(&self, py: Python<'_>, queries: &[Cow<'_, [u8]>]) -> PyResult<Answers> {
        let qs: Vec<&[u8]> = queries.iter().map(|q| q.as_ref()).collect();
        self.with_read(py, qs.len() <= SMALL, |list| {
            Answers::of(list, &qs).map_err(list_err)
        })
    }

    /// The normalized keys of entries; the first invalid one is an
    /// `InvalidItem` naming its position.
    fn keys<'e>(list: &Inner, entries: &[&'e [u8]]) -> PyResult<Vec<Cow<'e, [u8]>>> {
        entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                list.entry_key(e)
                    .map_err(|err| InvalidItem::new_err(format!("item {i}: {err}")))
            })
            .collect()
    }

    /// Adds entries; the claims, or the error with the claims.
    fn claim(&self, py: Python<'_>, entries: &[Cow<'_, [u8]>]) -> PyResult<Vec<Claim>> {
        self.may_change()?;
        let es: Vec<&[u8]> = entries.iter().map(|e| e.as_ref()).collect();
        let (claims, error) = self.with_write(py, es.len() <= SMALL, |list| {
            let keys = Self::keys(list, &es)?;
            let c = list.add_keys(&keys);
            Ok::<_, PyErr>((c.outcomes, c.error))
        })?;
        if let Some(e) = error {
            let err = list_err(e);
            let names: Vec<&str> = claims.iter().map(|&c| claim_name(c)).collect();
            err.value(py).setattr("claims", names)?;
            return Err(err);
        }
        Ok(claims)
    }
}

#[pymethods]
impl List {
    /// The list's path as given, or its Redis address without the password.
    #[getter]
    fn address(&self) -> &str {
        &self.address
    }

    /// The layout: "blocked", "classic", "counting" or "cuckoo".
    #[getter]
    fn layout(&self) -> &str {
        self.layout
    }

    /// What the entries are: "url", "host", "email", "raw", ...
    #[getter]
    fn key_kind(&self) -> &str {
        &self.key_kind
    }

    /// How queries match the entries: "exact", "domain", ...
    #[getter]
    fn match_mode(&self) -> &str {
        &self.match_mode
    }

    /// True when the list takes changes (a list in Redis always does; a
    /// file when opened with update=True).
    #[getter]
    fn writable(&self) -> bool {
        self.redis || self.update
    }

    /// `item in lst`: whether the list (probably) holds the item. Raises
    /// `Unavailable` when the store cannot tell, never returns False then;
    /// `InvalidItem` when the item is not a valid query of the key kind.
    fn __contains__(&self, py: Python<'_>, item: &Bound<'_, PyAny>) -> PyResult<bool> {
        let q = bytes_of(item)?;
        let q: &[u8] = &q;
        let answer = self.with_read(py, true, |list| {
            let mut answer = None;
            let mut each = |v: Result<bloomgate_blacklist::VerdictRef<'_>, _>| {
                answer = Some(
                    v.map(|v| v.hit)
                        .map_err(|e: bloomgate_url::KeyError| e.to_string()),
                )
            };
            SCRATCH
                .with(|s| match s.try_borrow_mut() {
                    Ok(mut s) => list.check_each(&[q], &mut s, &mut each),
                    Err(_) => list.check_each(&[q], &mut CheckScratch::default(), &mut each),
                })
                .map_err(list_err)?;
            Ok(answer)
        })?;
        match answer {
            Some(Ok(hit)) => Ok(hit),
            Some(Err(reason)) => Err(InvalidItem::new_err(format!("{}: {reason}", item.repr()?))),
            None => Err(Error::new_err("no answer")),
        }
    }

    /// Answers many items at once (one batch for the store: the engine's
    /// pipelined lookup, one Redis round trip per node), the GIL released
    /// while the library works. With invalid="raise" (the default) an item
    /// that is not a valid query raises `InvalidItem`; with invalid="none"
    /// its answer is None.
    #[pyo3(signature = (items, *, invalid = "raise"))]
    fn check_many<'py>(
        &self,
        py: Python<'py>,
        items: &Bound<'py, PyAny>,
        invalid: &str,
    ) -> PyResult<Bound<'py, PyList>> {
        let raise = match invalid {
            "raise" => true,
            "none" => false,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "invalid={other:?}: \"raise\" or \"none\""
                )))
            }
        };
        let batch = Batch::of(items)?;
        let a = self.answers(py, &batch.bytes()?)?;
        match a.invalid {
            Some((i, reason)) if raise => Err(InvalidItem::new_err(format!("item {i}: {reason}"))),
            Some(_) => PyList::new(py, a.codes.iter().map(|&c| (c != 2).then_some(c == 1))),
            None => PyList::new(py, a.codes.iter().map(|&c| c == 1)),
        }
    }

    /// Adds one item; True when it was new (add-if-absent: of several
    /// processes adding one item to one list in Redis at once, exactly one
    /// is told True). Raises `Unavailable` when Redis failed (the
    /// exception's `claims` says whether the add may have run).
    fn add(&self, py: Python<'_>, item: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.claim(py, &[bytes_of(item)?])? == [Claim::New])
    }

    /// Adds many items in order; a list with True for each that was new
    /// (of equal items in one call, the first). On failure the exception's
    /// `claims` holds one of "new", "present", "unknown" (sent, no reply:
    /// treat as new), "not_added" per item.
    fn add_many(&self, py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let batch = Batch::of(items)?;
        Ok(self
            .claim(py, &batch.bytes()?)?
            .into_iter()
            .map(|c| c == Claim::New)
            .collect())
    }

    /// Adds many items; one claim per item: "new", "present", "unknown" or
    /// "not_added" (raises only when no item could be sent).
    fn claim_many(&self, py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<Vec<&'static str>> {
        let batch = Batch::of(items)?;
        match self.claim(py, &batch.bytes()?) {
            Ok(c) => Ok(c.into_iter().map(claim_name).collect()),
            Err(e) => {
                let claims: Option<Vec<String>> = e
                    .value(py)
                    .getattr("claims")
                    .ok()
                    .and_then(|c| c.extract().ok());
                match claims {
                    Some(c) if c.iter().any(|c| c != "not_added") => Ok(c
                        .iter()
                        .map(|c| match c.as_str() {
                            "new" => "new",
                            "present" => "present",
                            "unknown" => "unknown",
                            _ => "not_added",
                        })
                        .collect()),
                    _ => Err(e),
                }
            }
        }
    }

    /// Removes one copy of an item from a counting or cuckoo list; True if
    /// one was there. Only remove what was added. A Bloom filter raises
    /// `CannotRemove`.
    fn remove(&self, py: Python<'_>, item: &Bound<'_, PyAny>) -> PyResult<bool> {
        let p = Packed::one(item)?;
        self.forked(true)?;
        let removal = py.detach(|| {
            let mut guard = self.write();
            let list = guard.as_mut().ok_or_else(|| self.closed())?;
            list.removable().map_err(list_err)?;
            list.remove(p.items()[0]).map_err(list_err)
        })?;
        Ok(removal == Removal::Removed)
    }

    /// Whitelists an item (a known false positive); returns whether the
    /// list reported it as a hit. A file's whitelist is written at once.
    fn whitelist_add(&self, py: Python<'_>, item: &Bound<'_, PyAny>) -> PyResult<bool> {
        let p = Packed::one(item)?;
        self.may_change()?;
        py.detach(|| {
            let mut guard = self.write();
            let list = guard.as_mut().ok_or_else(|| self.closed())?;
            let hit = list.whitelist_add(p.items()[0]).map_err(list_err)?;
            list.save_whitelist().map_err(list_err)?;
            Ok(hit)
        })
    }

    /// Takes an item off the whitelist; returns whether it was there.
    fn whitelist_remove(&self, py: Python<'_>, item: &Bound<'_, PyAny>) -> PyResult<bool> {
        let p = Packed::one(item)?;
        self.may_change()?;
        py.detach(|| {
            let mut guard = self.write();
            let list = guard.as_mut().ok_or_else(|| self.closed())?;
            let was = list.whitelist_remove(p.items()[0]).map_err(list_err)?;
            list.save_whitelist().map_err(list_err)?;
            Ok(was)
        })
    }

    /// The whitelisted keys (normalized), as bytes, sorted.
    fn whitelist<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        self.forked(false)?;
        let keys: Vec<Vec<u8>> = py.detach(|| {
            let guard = self.read();
            let list = guard.as_ref().ok_or_else(|| self.closed())?;
            Ok::<_, PyErr>(list.whitelist().iter().map(<[u8]>::to_vec).collect())
        })?;
        Ok(keys.iter().map(|k| PyBytes::new(py, k)).collect())
    }

    /// Describes the list: what `bloomgate info --json` prints, as a dict.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.forked(false)?;
        let json = py.detach(|| {
            let guard = self.read();
            let list = guard.as_ref().ok_or_else(|| self.closed())?;
            let info = list.info().map_err(list_err)?;
            Ok::<_, PyErr>(info.json.to_string())
        })?;
        Ok(py
            .import("json")?
            .call_method1("loads", (json,))?
            .cast_into()?)
    }

    /// Reads every file of the list whole and compares it with its
    /// checksum; raises `bloomgate.Error` when one differs.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        self.forked(false)?;
        py.detach(|| {
            let guard = self.read();
            let list = guard.as_ref().ok_or_else(|| self.closed())?;
            list.verify().map_err(list_err)
        })
    }

    /// Makes the changes of a file opened with update=True durable (a list
    /// in Redis took each change at once).
    fn save(&self, py: Python<'_>) -> PyResult<()> {
        if self.redis {
            return Ok(());
        }
        self.may_change()?;
        py.detach(|| {
            let mut guard = self.write();
            let list = guard.as_mut().ok_or_else(|| self.closed())?;
            list.save().map_err(list_err)
        })
    }

    /// Saves a file opened for update, then closes the list (its data
    /// directory's lock is released). Closing twice is harmless.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.in_child() {
            // The parent's list: forget it here without touching its files.
            return Ok(());
        }
        py.detach(|| {
            let mut guard = self.write();
            if let Some(list) = guard.as_mut() {
                if self.update && !self.redis {
                    list.save().map_err(list_err)?;
                }
            }
            *guard = None;
            Ok(())
        })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<bloomgate.List {:?} {} {} keys{}>",
            self.address,
            self.layout,
            self.key_kind,
            if self.redis || self.update {
                ", writable"
            } else {
                ""
            }
        )
    }
}
