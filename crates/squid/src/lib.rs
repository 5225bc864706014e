//! Squid's helper protocols over bloomgate lists: `bloomgate squid-helper`.
//!
//! Squid asks external programs ("helpers") whether a request is allowed,
//! over a pipe, one line per request: `external_acl_type` helpers answer
//! `OK` (the ACL matches), `ERR` or `BH` (broken helper: could not tell);
//! `url_rewrite_program` helpers answer with a redirect or `ERR` (leave the
//! URL alone). This crate is that front end for [`bloomgate_list::List`]:
//! [`protocol`] parses the request lines and writes the answers (pure
//! functions on bytes, property-tested and fuzzed), [`helper`] answers
//! them from one or more lists, each with a category (`tag=`, `message=`,
//! the block page's `%t`), in batches, reopening replaced files. The
//! verdict itself (key rules, whitelist, "cannot tell" as an error) is the
//! list's; this crate only translates.
//!
//! [`squidguard`] reads squidGuard/UT1 blacklist directories
//! (`CATEGORY/domains`, `CATEGORY/urls`) as entries of one `url` filter in
//! `prefix` mode per category, so that a squidGuard user's lists move over
//! with `bloomgate build --squidguard DIR`.
#![deny(missing_docs)]

pub mod helper;
pub mod protocol;
pub mod squidguard;

pub use helper::{Category, Helper, Options, Stats};
pub use protocol::Kind;
