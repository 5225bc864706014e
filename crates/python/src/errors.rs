//! The library's errors as Python exceptions.
//!
//! One base class, `bloomgate.Error`, and a subclass per kind a caller
//! handles differently. The one that matters most is `Unavailable`: the
//! store could not answer (a Redis node down, a shard evicted). A lookup
//! that meets it raises; it never returns `False`, because "absent" would
//! be a false negative, which is the one answer bloomgate never gives
//! without knowing.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use bloomgate_list::Error as ListError;
use bloomgate_redis::Error as RedisError;

create_exception!(
    bloomgate,
    Error,
    PyException,
    "Base class of every bloomgate error."
);
create_exception!(
    bloomgate,
    Unavailable,
    Error,
    "The store cannot answer now (a Redis node down, a shard missing): the item's membership is unknown, never \"absent\"."
);
create_exception!(
    bloomgate,
    InvalidItem,
    Error,
    "An item is not valid for the list's key kind (a URL that does not parse, a host that is not one)."
);
create_exception!(
    bloomgate,
    CannotRemove,
    Error,
    "The list's layout cannot delete (a Bloom filter): use a counting or cuckoo list."
);
create_exception!(
    bloomgate,
    ReadOnly,
    Error,
    "A change was asked of a list opened for reading: open it with update=True."
);
create_exception!(
    bloomgate,
    Full,
    Error,
    "A cuckoo table has no room for another item (nothing was changed)."
);
create_exception!(
    bloomgate,
    NotFound,
    Error,
    "No filter of that name in Redis."
);
create_exception!(
    bloomgate,
    Exists,
    Error,
    "A filter exists already where a new one was to be made."
);

/// The error and its causes on one line, as the CLI prints them.
pub fn one_line(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cause = c.source();
    }
    s
}

/// The exception class for a Redis error.
fn redis_class(e: &RedisError, message: String) -> PyErr {
    match e {
        RedisError::Unavailable { .. } | RedisError::Damaged { .. } => {
            Unavailable::new_err(message)
        }
        RedisError::NotFound { .. } => NotFound::new_err(message),
        RedisError::Exists { .. } => Exists::new_err(message),
        RedisError::InvalidItem { .. } => InvalidItem::new_err(message),
        _ => Error::new_err(message),
    }
}

/// The exception for a list's error.
pub fn list_err(e: ListError) -> PyErr {
    let message = one_line(&e);
    match &e {
        ListError::Redis(r) => redis_class(r, message),
        ListError::RedisOpen { source, .. } => redis_class(source, message),
        ListError::InvalidItem { .. } => InvalidItem::new_err(message),
        ListError::CannotRemove { .. } => CannotRemove::new_err(message),
        ListError::ReadOnly(_) => ReadOnly::new_err(message),
        ListError::Full { .. } => Full::new_err(message),
        _ => Error::new_err(message),
    }
}

/// The exception for a Redis error met outside a list (creating one).
pub fn redis_err(e: RedisError) -> PyErr {
    let message = one_line(&e);
    redis_class(&e, message)
}

/// A `bloomgate.Error` for any other library error.
pub fn other_err(e: &dyn std::error::Error) -> PyErr {
    Error::new_err(one_line(e))
}

/// Registers the classes in the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("Unavailable", py.get_type::<Unavailable>())?;
    m.add("InvalidItem", py.get_type::<InvalidItem>())?;
    m.add("CannotRemove", py.get_type::<CannotRemove>())?;
    m.add("ReadOnly", py.get_type::<ReadOnly>())?;
    m.add("Full", py.get_type::<Full>())?;
    m.add("NotFound", py.get_type::<NotFound>())?;
    m.add("Exists", py.get_type::<Exists>())?;
    Ok(())
}
