//! Python items as bytes: the one encoding rule.
//!
//! A `str` is encoded as UTF-8; a `bytes`, `bytearray` or `memoryview` is
//! taken as it is. Both then go to the library exactly as a line of the
//! CLI's input does, so bytes that are not UTF-8 are handled as the CLI
//! handles them (a URL's are percent-escaped by canonicalization, a raw
//! key's are the key). A `str` holding lone surrogates (what Python's
//! `surrogateescape` makes of undecodable bytes, as in `os.fsdecode`) is
//! encoded back to those bytes, so such a string and the bytes it came
//! from are one item. Anything else is a `TypeError`.
//!
//! Lookups and adds read a `str`'s UTF-8 and a `bytes`' contents where
//! they are ([`bytes_of`], [`Batch`]): both are immutable, and the batch
//! holds a reference to each item, so the library may read them with the
//! GIL released. A `bytearray` or `memoryview` (mutable: another thread
//! could change it meanwhile) and a `str` with lone surrogates are copied.
//! Other calls copy a batch into one buffer ([`Packed`]: one allocation
//! per batch, not per item) while the GIL is held.

use std::borrow::Cow;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyMemoryView, PyString, PyTuple};

/// One item's bytes by the encoding rule: borrowed from a `str` or
/// `bytes` object (immutable), copied from anything mutable.
pub fn bytes_of<'a>(item: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(s) = item.cast::<PyString>() {
        if let Some(b) = utf8(s) {
            return Ok(Cow::Borrowed(b));
        }
        let b = s.call_method1("encode", ("utf-8", "surrogateescape"))?;
        return Ok(Cow::Owned(b.cast::<PyBytes>()?.as_bytes().to_vec()));
    }
    if let Ok(b) = item.cast::<PyBytes>() {
        return Ok(Cow::Borrowed(b.as_bytes()));
    }
    if let Ok(b) = item.cast::<PyByteArray>() {
        return Ok(Cow::Owned(b.to_vec()));
    }
    if item.is_instance_of::<PyMemoryView>() {
        let b = item.call_method0("tobytes")?;
        return Ok(Cow::Owned(b.cast::<PyBytes>()?.as_bytes().to_vec()));
    }
    Err(type_error(item))
}

/// The items of an iterable, each held by a reference so that their bytes
/// ([`bytes_of`]) stay valid while the GIL is released.
pub struct Batch<'py> {
    objs: Vec<Bound<'py, PyAny>>,
}

impl<'py> Batch<'py> {
    /// Takes a reference to every item (a list or tuple without the
    /// iterator protocol).
    pub fn of(items: &Bound<'py, PyAny>) -> PyResult<Batch<'py>> {
        let objs = if let Ok(l) = items.cast::<PyList>() {
            l.iter().collect()
        } else if let Ok(t) = items.cast::<PyTuple>() {
            t.iter().collect()
        } else {
            items.try_iter()?.collect::<PyResult<_>>()?
        };
        Ok(Batch { objs })
    }

    /// Every item's bytes, in order.
    pub fn bytes(&self) -> PyResult<Vec<Cow<'_, [u8]>>> {
        self.objs.iter().map(bytes_of).collect()
    }
}

/// Items packed in one buffer.
#[derive(Default)]
pub struct Packed {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Packed {
    /// Appends one Python item.
    pub fn push(&mut self, item: &Bound<'_, PyAny>) -> PyResult<()> {
        if let Ok(b) = item.cast::<PyBytes>() {
            self.bytes.extend_from_slice(b.as_bytes());
        } else if let Ok(s) = item.cast::<PyString>() {
            match utf8(s) {
                Some(b) => self.bytes.extend_from_slice(b),
                None => {
                    let b = s.call_method1("encode", ("utf-8", "surrogateescape"))?;
                    self.bytes
                        .extend_from_slice(b.cast::<PyBytes>()?.as_bytes());
                }
            }
        } else if let Ok(b) = item.cast::<PyByteArray>() {
            self.bytes.extend_from_slice(&b.to_vec());
        } else if item.is_instance_of::<PyMemoryView>() {
            let b = item.call_method0("tobytes")?;
            self.bytes
                .extend_from_slice(b.cast::<PyBytes>()?.as_bytes());
        } else {
            return Err(type_error(item));
        }
        self.ends.push(self.bytes.len());
        Ok(())
    }

    /// Packs every item of an iterable.
    pub fn from_iter(items: &Bound<'_, PyAny>) -> PyResult<Packed> {
        let mut p = Packed::default();
        for item in items.try_iter()? {
            p.push(&item?)?;
        }
        Ok(p)
    }

    /// Packs one item.
    pub fn one(item: &Bound<'_, PyAny>) -> PyResult<Packed> {
        let mut p = Packed::default();
        p.push(item)?;
        Ok(p)
    }

    /// How many items.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// The items, in order.
    pub fn items(&self) -> Vec<&[u8]> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let item = &self.bytes[start..end];
                start = end;
                item
            })
            .collect()
    }

    /// Empties the buffer, keeping its memory.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }
}

extern "C" {
    // Part of the stable ABI from CPython 3.10, and exported with the same
    // signature by 3.9 (where it is public but outside the limited API):
    // the string's UTF-8, cached in the object, without a temporary
    // `bytes` (which `to_cow` makes under abi3-py39 and which cost 40 % of
    // a batched lookup of `str` URLs).
    fn PyUnicode_AsUTF8AndSize(
        unicode: *mut pyo3::ffi::PyObject,
        size: *mut pyo3::ffi::Py_ssize_t,
    ) -> *const std::os::raw::c_char;
}

/// The UTF-8 of a string, borrowed from the string object; `None` when it
/// has none (lone surrogates), the Python error cleared.
fn utf8<'a>(s: &'a Bound<'_, PyString>) -> Option<&'a [u8]> {
    let mut size: pyo3::ffi::Py_ssize_t = 0;
    // SAFETY: `s` is a live `str` (the GIL is held: `Bound`); the returned
    // buffer belongs to the object and lives as long as it, which `'a`
    // ties the slice to; `size` is its length without the final NUL.
    let p = unsafe { PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut size) };
    if p.is_null() {
        // The UnicodeEncodeError set by the call: the caller falls back.
        drop(PyErr::take(s.py()));
        return None;
    }
    // SAFETY: as above; a non-null result has `size` valid bytes.
    Some(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), size as usize) })
}

fn type_error(item: &Bound<'_, PyAny>) -> PyErr {
    let name = item
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    PyTypeError::new_err(format!(
        "bloomgate items are str (encoded as UTF-8) or bytes, not {name}"
    ))
}
