//! URL, host and email normalization for bloomgate's blacklist filters.
//!
//! A Bloom filter answers "have I seen *exactly these bytes*?". Whether
//! `HTTP://WWW.Evil.COM:80/a/./b/../c#top` is on a list containing
//! `http://www.evil.com/a/c` is therefore decided *before* the filter, by
//! turning both into the same bytes. This crate does that, with no I/O:
//!
//! * [`canonicalize`] / [`canonical_key`] implement Google Safe Browsing's
//!   published URL canonicalization (tab/CR/LF removal, fragment removal,
//!   repeated percent-unescaping, host cleanup including every legal IPv4
//!   spelling, IPv6 per the v5 rules and IDN → Punycode, dot-segment
//!   resolution, final percent-escaping). [`canonical_key`] has an
//!   allocation-free fast path for inputs that are already canonical.
//! * [`expressions`] produces the ≤ 30 host-suffix/path-prefix expressions
//!   Safe Browsing looks up for a URL.
//! * [`canonical_host`] normalizes a bare host, a URL's host or an email
//!   domain.
//! * [`KeyKind`], [`MatchMode`], [`entry_key`], [`query_keys`] and
//!   [`max_lookups`] define, in one place, how blacklist entries and queries
//!   become filter keys for each kind of list.
//!
//! The modules depend one way: `canon` (the general algorithm) uses `fast`
//! (the scan for inputs already canonical) and `host` (host rules), `fast`
//! uses `host`'s IPv4 check, and all three read the byte classes and the
//! escaper in `bytes`; none imports a module that imports it.
//!
//! Every function takes `&[u8]` (input may be invalid UTF-8), never panics,
//! and reports failures through the [`UrlError`] / [`KeyError`] enums.
//!
//! # Example
//!
//! ```
//! use bloomgate_url::{canonical_key, canonicalize, entry_key, query_keys, KeyKind, MatchMode};
//!
//! assert_eq!(
//!     canonicalize(b"http://3279880203/blah").unwrap(),
//!     "http://195.127.0.11/blah"
//! );
//! assert_eq!(&*canonical_key(b"http://www.GOOgle.com/").unwrap(), b"www.google.com/");
//!
//! // A prefix list entry blocks everything under it.
//! let entry = entry_key(KeyKind::Url, MatchMode::Prefix, b"evil.com/phish/").unwrap();
//! let mut lookups = Vec::new();
//! query_keys(KeyKind::Url, MatchMode::Prefix, b"https://x.evil.com/phish/a.html", &mut lookups).unwrap();
//! assert!(lookups.iter().any(|k| k[..] == entry[..]));
//! # Ok::<(), bloomgate_url::UrlError>(())
//! ```

#![deny(missing_docs)]
// The only `unsafe` is the call into the AVX2 fast-path scan, after the run-time
// CPU feature check (see `fast.rs`).
#![deny(unsafe_code)]

mod bytes;
mod canon;
mod error;
mod expressions;
mod fast;
mod host;
mod keys;

pub use bytes::MAX_INPUT_LEN;
pub use canon::{canonical_host, canonical_key, canonicalize};
pub use error::{KeyError, UrlError};
pub use expressions::{expressions, MAX_EXPRESSIONS};
pub use keys::{
    entry_key, is_single_label_host, max_lookups, push_query_keys, query_keys, url_shape, KeyKind,
    MatchMode, ParseKindError, MAX_HOST_LOOKUPS,
};

#[doc(hidden)]
pub mod __private {
    //! Internals exposed only for this crate's tests and benchmarks. Not part
    //! of the public API; may change at any time.

    /// The general (slow-path) canonical key, bypassing the fast path.
    ///
    /// # Errors
    ///
    /// Same as [`crate::canonical_key`].
    pub fn slow_canonical_key(input: &[u8]) -> Result<String, crate::UrlError> {
        crate::canon::slow_key(input)
    }

    /// Whether the fast path accepts `input` (and where the key starts).
    pub fn fast_key_start(input: &[u8]) -> Option<usize> {
        crate::fast::fast_key_start(input)
    }

    /// The byte-at-a-time fast-path scan, whatever the input length and
    /// target. Accepts exactly the inputs [`fast_key_start`] accepts.
    pub fn fast_key_start_scalar(input: &[u8]) -> Option<usize> {
        crate::fast::scalar::fast_key_start(input)
    }
}
