//! Who may read and who may write.
//!
//! One shared secret, read from `--token-file` (first line, surrounding
//! whitespace trimmed, at least 16 bytes). HTTP clients send it as
//! `Authorization: Bearer TOKEN`; Redis clients with `AUTH TOKEN`,
//! `AUTH default TOKEN` or `HELLO 3 AUTH default TOKEN`. Tokens are compared
//! in constant time ([`subtle`]) so response timing does not leak a prefix.
//!
//! | token file | `--open-reads` | reads | writes |
//! |---|---|---|---|
//! | yes | no | token | token |
//! | yes | yes | everyone | token |
//! | no | – | everyone | everyone **if every listener is on loopback**, else nobody |
//!
//! The last row is the safe default: without a token, a server bound to
//! `127.0.0.1`/`::1` is as private as the machine, but one bound to a public
//! address would let anyone rewrite the blacklist, so it serves reads only.
//! "As private as the machine" includes its browser: a web page cannot
//! write across sites (`Origin`, `Sec-Fetch-Site` and JSON-only bodies,
//! see `http`), nor reach the server through DNS rebinding (its own name
//! made to resolve to 127.0.0.1, so that its requests are same-origin):
//! such a server answers HTTP only to a loopback `Host` (`localhost`,
//! `*.localhost`, a loopback address).
//!
//! Writes are: adds, whitelist changes, create, reload, delete, snapshot,
//! `BF.RESERVE`, `BF.ADD`/`MADD`/`INSERT`, `BF.LOADCHUNK`, `DEL`.

use std::path::Path;

use subtle::ConstantTimeEq;

use crate::{ServeConfig, ServerError};

/// The access rules in force.
#[derive(Clone)]
pub struct AccessPolicy {
    token: Option<Vec<u8>>,
    open_reads: bool,
    loopback_only: bool,
}

impl std::fmt::Debug for AccessPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Why a request is refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Denied {
    /// The token is needed and was not (correctly) given.
    NeedToken,
    /// Writes are disabled (no token configured, non-loopback listener).
    WritesDisabled,
}

impl Denied {
    /// A human-readable explanation.
    pub fn message(self) -> &'static str {
        match self {
            Denied::NeedToken => "authentication required: send the access token",
            Denied::WritesDisabled => "writes are disabled: no --token-file is configured and the server listens beyond loopback",
        }
    }
}

impl AccessPolicy {
    /// Builds the policy from the configuration (reads the token file).
    pub fn from_config(config: &ServeConfig) -> Result<AccessPolicy, ServerError> {
        let token = match &config.token_file {
            Some(path) => Some(read_token(path)?),
            None => None,
        };
        let loopback_only = [config.http, config.resp]
            .iter()
            .flatten()
            .all(|a| a.ip().is_loopback());
        Ok(AccessPolicy {
            token,
            open_reads: config.open_reads,
            loopback_only,
        })
    }

    /// A policy from parts (for tests and embedding).
    pub fn new(token: Option<Vec<u8>>, open_reads: bool, loopback_only: bool) -> AccessPolicy {
        AccessPolicy {
            token,
            open_reads,
            loopback_only,
        }
    }

    /// True if requests need no token because every listener is on
    /// loopback ("as private as the machine"). Such a server answers HTTP
    /// only to the loopback names (see `http`: DNS rebinding).
    pub fn open_on_loopback(&self) -> bool {
        self.token.is_none() && self.loopback_only
    }

    /// True if a token is configured.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Constant-time check of a presented token.
    pub fn token_matches(&self, presented: &[u8]) -> bool {
        match &self.token {
            Some(t) => bool::from(t.as_slice().ct_eq(presented)),
            None => false,
        }
    }

    /// May a client that is (or is not) authenticated read?
    pub fn check_read(&self, authed: bool) -> Result<(), Denied> {
        if authed || self.open_reads || self.token.is_none() {
            Ok(())
        } else {
            Err(Denied::NeedToken)
        }
    }

    /// May a client that is (or is not) authenticated write?
    pub fn check_write(&self, authed: bool) -> Result<(), Denied> {
        match &self.token {
            Some(_) if authed => Ok(()),
            Some(_) => Err(Denied::NeedToken),
            None if self.loopback_only => Ok(()),
            None => Err(Denied::WritesDisabled),
        }
    }

    /// One line for the startup banner.
    pub fn describe(&self) -> String {
        match (&self.token, self.open_reads, self.loopback_only) {
            (Some(_), false, _) => "token required for reads and writes".into(),
            (Some(_), true, _) => "reads open, token required for writes".into(),
            (None, _, true) => "no token (loopback only: reads and writes open)".into(),
            (None, _, false) => "no token (non-loopback listener: read-only)".into(),
        }
    }
}

fn read_token(path: &Path) -> Result<Vec<u8>, ServerError> {
    let text = std::fs::read(path).map_err(|source| ServerError::TokenFile {
        path: path.into(),
        source,
    })?;
    let line = text.split(|&b| b == b'\n').next().unwrap_or_default();
    let token = line.trim_ascii();
    if token.len() < 16 {
        return Err(ServerError::ShortToken(path.into()));
    }
    Ok(token.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let t = AccessPolicy::new(Some(b"0123456789abcdef".to_vec()), false, false);
        assert!(t.check_read(false).is_err());
        assert!(t.check_read(true).is_ok());
        assert_eq!(t.check_write(false), Err(Denied::NeedToken));
        assert!(t.token_matches(b"0123456789abcdef"));
        assert!(!t.token_matches(b"0123456789abcdeX"));
        assert!(!t.token_matches(b"0123"));
        let open = AccessPolicy::new(Some(b"0123456789abcdef".to_vec()), true, false);
        assert!(open.check_read(false).is_ok());
        assert!(open.check_write(false).is_err());
        let lo = AccessPolicy::new(None, false, true);
        assert!(lo.check_write(false).is_ok());
        let public = AccessPolicy::new(None, false, false);
        assert!(public.check_read(false).is_ok());
        assert_eq!(public.check_write(false), Err(Denied::WritesDisabled));
        assert!(!public.token_matches(b""));
    }
}
