//! Error types.
//!
//! Two layers of errors exist. [`UrlError`] is produced by the URL/host
//! machinery ([`canonicalize`](crate::canonicalize),
//! [`canonical_key`](crate::canonical_key), [`expressions`](crate::expressions),
//! [`canonical_host`](crate::canonical_host)) and says *why an input has no
//! canonical form*. [`KeyError`] is produced by the key layer
//! ([`entry_key`](crate::entry_key), [`query_keys`](crate::query_keys)); it
//! wraps a [`UrlError`] and adds the reasons that are specific to one key kind
//! (an email address without `@`, an empty raw entry, ...).
//!
//! Every message is a short, lowercase, human-readable reason with no trailing
//! punctuation, so a caller can print `line 17: invalid host entry: {err}`.
//!
//! Note what is *not* an error: a malformed percent-escape such as `%zz` or a
//! lone `%`. The Safe Browsing rules simply leave such bytes alone (and the
//! final escaping step turns the `%` into `%25`).
//!
//! Both enums are `#[non_exhaustive]`: new reasons may be added without a
//! breaking change, so match them with a wildcard arm.

use thiserror::Error;

/// Why a URL, host or email domain could not be canonicalized.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum UrlError {
    /// The input is empty, or contains only whitespace/tab/CR/LF.
    #[error("empty input")]
    Empty,
    /// The input is longer than [`MAX_INPUT_LEN`](crate::MAX_INPUT_LEN) bytes.
    #[error("input too long: {len} bytes (limit {max})")]
    TooLong {
        /// Length of the rejected input in bytes.
        len: usize,
        /// The limit that was exceeded.
        max: usize,
    },
    /// The input has no host component (e.g. `http:///path`, `/path`, `:80`).
    #[error("no host")]
    MissingHost,
    /// The host is not acceptable; the payload says why.
    #[error("invalid host: {0}")]
    InvalidHost(&'static str),
    /// A bracketed host (`[...]`) is not a valid IPv6 address.
    #[error("invalid IPv6 address: {0}")]
    InvalidIpv6(&'static str),
    /// The host contains non-ASCII characters that IDNA (UTS #46) rejects.
    #[error("invalid internationalized domain name (IDNA conversion failed)")]
    InvalidIdn,
    /// The host is not valid UTF-8 (only rejected where a strict host is
    /// required: [`canonical_host`](crate::canonical_host) and the host/email
    /// key kinds; full URLs escape such bytes as the Safe Browsing rules say).
    #[error("host is not valid UTF-8")]
    InvalidUtf8Host,
    /// The port after `:` is not a decimal number in `0..=65535`.
    #[error("invalid port")]
    InvalidPort,
}

/// Why a blacklist entry or a query could not be turned into filter keys.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The URL/host part is invalid.
    #[error(transparent)]
    Url(#[from] UrlError),
    /// The entry or query is empty (raw kind).
    #[error("empty key")]
    Empty,
    /// An email address has no `@`.
    #[error("email address has no '@' (expected local@domain, `Name <local@domain>` or local@[IP address])")]
    EmailMissingAt,
    /// An email address has more than one `@`.
    #[error("email address has more than one '@'")]
    EmailMultipleAt,
    /// The part before `@` is empty.
    #[error("email address has an empty local part")]
    EmailEmptyLocal,
    /// The part after `@` is empty.
    #[error("email address has an empty domain")]
    EmailEmptyDomain,
    /// The part after `@` is not a bare domain (it contains URL syntax such as
    /// `/`, `?`, `#` or a port).
    #[error("email domain is not a bare domain (expected local@domain, `Name <local@domain>` or local@[IP address])")]
    EmailBadDomain,
    /// The part after `@` is bracketed but not an address literal
    /// (`[127.0.0.1]`, `[IPv6:2001:db8::1]`).
    #[error("email address literal is not [IPv4 address] or [IPv6:IPv6 address]")]
    EmailBadLiteral,
    /// A `url` entry or query that is not a URL by the shape rules of
    /// [`entry_key`](crate::entry_key): no scheme and a host without a dot
    /// (`user:1`, `5`), or user info without a scheme (`a@b.com`).
    #[error("not a URL: {0}")]
    NotUrl(&'static str),
}
