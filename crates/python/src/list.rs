//! `bloomgate.List`: one open list, shared by threads.
//!
//! # Threads
//!
//! The library's `List` is `Send + Sync`; here it sits behind a
//! reader-writer lock, so lookups from many threads run at once and an add,
//! remove or whitelist edit runs alone. Every call copies its items out of
//! Python objects first (GIL held), then releases the GIL and only then
//! takes the lock, and never needs the GIL while holding it: a thread
//! waiting for the lock never blocks one that holds it, so the two locks
//! cannot deadlock, and other Python threads run while the library works.
//!
//! # fork()
//!
//! The process that opened a list is recorded. In a child made by `fork()`
//! (multiprocessing's default on Linux before Python 3.14, a pre-forking
//! server), a list opened read-only from a file keeps answering lookups:
//! its memory map is shared with the parent, copy-on-write, and nothing is
//! written. Every other use — any call on a list in Redis (its connections
//! are the parent's sockets, and two processes talking on one socket would
//! read each other's replies), and changes to a file opened for update
//! (its lock belongs to the parent) — raises `bloomgate.Error` telling the
//! child to open the list again.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use bloomgate_engine::Removal;
use bloomgate_list::{CheckScratch, Claim, List as Inner, OpenOptions};

use crate::errors::{list_err, Error, InvalidItem, ReadOnly};
use crate::items::Packed;

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
            inner: RwLock::new(Some(inner)),
        })
    }

    /// Refuses what a forked child may not do (see the module essay).
    fn forked(&self, changing: bool) -> PyResult<()> {
        if self.pid != std::process::id() && (self.redis || self.update || changing) {
            return Err(Error::new_err(format!(
                "{}: opened in process {} before a fork(); this process ({}) must open it again (bloomgate.open)",
                self.address,
                self.pid,
                std::process::id()
            )));
        }
        Ok(())
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

    /// The answers for packed queries: `Ok(Some(hit))`, `Ok(None)` for a
    /// query not valid for the key kind (with its reason).
    fn answers(&self, py: Python<'_>, p: &Packed) -> PyResult<Vec<Result<bool, String>>> {
        self.forked(false)?;
        py.detach(|| {
            let guard = self.read();
            let list = guard.as_ref().ok_or_else(|| self.closed())?;
            let mut out = Vec::with_capacity(p.len());
            list.check_many(p.items(), &mut CheckScratch::default(), &mut out)
                .map_err(list_err)?;
            Ok(out
                .into_iter()
                .map(|v| v.map(|v| v.hit()).map_err(|e| e.to_string()))
                .collect())
        })
    }

    /// The normalized keys of packed entries; the first invalid one is an
    /// `InvalidItem` naming its position.
    fn keys(list: &Inner, p: &Packed) -> PyResult<Vec<Vec<u8>>> {
        p.items()
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                list.entry_key(e)
                    .map(|k| k.into_owned())
                    .map_err(|err| InvalidItem::new_err(format!("item {i}: {err}")))
            })
            .collect()
    }

    /// Adds packed entries; the claims, or the error with the claims.
    fn claim(&self, py: Python<'_>, p: &Packed) -> PyResult<Vec<Claim>> {
        self.may_change()?;
        let (claims, error) = py.detach(|| {
            let mut guard = self.write();
            let list = guard.as_mut().ok_or_else(|| self.closed())?;
            let keys = Self::keys(list, p)?;
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
        let p = Packed::one(item)?;
        match self.answers(py, &p)?.pop() {
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
        let p = Packed::from_iter(items)?;
        let answers = self.answers(py, &p)?;
        let out = PyList::empty(py);
        for (i, a) in answers.into_iter().enumerate() {
            match a {
                Ok(hit) => out.append(hit)?,
                Err(reason) if raise => {
                    return Err(InvalidItem::new_err(format!("item {i}: {reason}")))
                }
                Err(_) => out.append(py.None())?,
            }
        }
        Ok(out)
    }

    /// Adds one item; True when it was new (add-if-absent: of several
    /// processes adding one item to one list in Redis at once, exactly one
    /// is told True). Raises `Unavailable` when Redis failed (the
    /// exception's `claims` says whether the add may have run).
    fn add(&self, py: Python<'_>, item: &Bound<'_, PyAny>) -> PyResult<bool> {
        let p = Packed::one(item)?;
        Ok(self.claim(py, &p)? == [Claim::New])
    }

    /// Adds many items in order; a list with True for each that was new
    /// (of equal items in one call, the first). On failure the exception's
    /// `claims` holds one of "new", "present", "unknown" (sent, no reply:
    /// treat as new), "not_added" per item.
    fn add_many(&self, py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let p = Packed::from_iter(items)?;
        Ok(self
            .claim(py, &p)?
            .into_iter()
            .map(|c| c == Claim::New)
            .collect())
    }

    /// Adds many items; one claim per item: "new", "present", "unknown" or
    /// "not_added" (raises only when no item could be sent).
    fn claim_many(&self, py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<Vec<&'static str>> {
        let p = Packed::from_iter(items)?;
        match self.claim(py, &p) {
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
        if self.pid != std::process::id() {
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
