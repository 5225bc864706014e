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
//! A batch is copied into one buffer with the end of each item (one
//! allocation per batch, not per item) while the GIL is held; the library
//! then works on the buffer with the GIL released.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView, PyString};

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
            match s.to_cow() {
                Ok(c) => self.bytes.extend_from_slice(c.as_bytes()),
                Err(_) => {
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
