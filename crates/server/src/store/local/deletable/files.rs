//! A served deletable filter's files: `NAME.cf` (the library's codec,
//! [`bloomgate_blacklist::cf_file`]), and the `NAME.bgf` a filter built by
//! the CLI is imported from and exported back to.
//!
//! # Files built by the CLI
//!
//! A counting or cuckoo filter file that `bloomgate build --layout
//! counting|cuckoo` wrote into the data directory as `NAME.bgf` is served
//! too, so that the CLI and the server read the same data: its key rules
//! (canonicalized URLs, hosts, …) and its whitelist `NAME.bgf.whitelist`
//! apply as the CLI's `check`, `add` and `remove` apply them; it never
//! grows (`EXPANSION 0`, as the CLI's `add` stops at a full table). At its
//! first start the server writes `NAME.cf` for it and from then on
//! `NAME.cf` is the filter (its changes are logged and replayed); each
//! save also copies the table back to `NAME.bgf` (atomically), which the
//! CLI reads. `NAME.cf` records the hashes of the last two copies it
//! wrote, before writing the next one, so at a start a `NAME.bgf` it does
//! not name was replaced by someone else: it is then left alone and no
//! longer written, with a warning saying how to serve it instead (deleting
//! `NAME.cf` drops the changes it holds; nothing is dropped silently).
//! Deleting the filter deletes both files.

use std::path::{Path, PathBuf};

use bloomgate_blacklist::cf_file::{self, CfLayout};
use bloomgate_blacklist::Whitelist;

use super::chain::Chain;

/// `NAME.cf` in `dir`.
pub fn cf_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.cf"))
}

/// `NAME.bgf` in `dir`.
pub(super) fn bgf_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.bgf"))
}

/// The chain in the file `path`, with its export hashes.
pub(super) fn load(path: &Path) -> Result<(Chain, Option<Vec<u64>>), String> {
    let c = cf_file::load(path).map_err(|e| e.to_string())?;
    let export = c.header.bgf.clone();
    Ok((Chain::from_contents(c)?, export))
}

/// The layout of a counting or cuckoo filter file; `None` for a Bloom
/// filter or an unreadable file (the Bloom loader reports those).
pub(in crate::store::local) fn deletable_layout(path: &Path) -> Option<CfLayout> {
    let code = bloomgate_engine::format::peek_layout_code(path).ok()?;
    bloomgate_engine::format::DeletableKind::from_code(code).map(CfLayout::of)
}

/// The whitelist's file of the filter `name` in `dir`: `NAME.bgf.whitelist`
/// while it is `exported` to the CLI's `NAME.bgf`, else
/// `NAME.cf.whitelist` (see `named.rs`, "The whitelist").
pub(super) fn whitelist_path(dir: &Path, name: &str, exported: bool) -> PathBuf {
    Whitelist::path_for(&match exported {
        true => bgf_path(dir, name),
        false => cf_path(dir, name),
    })
}

/// The whitelist of the filter file `bgf` (empty if it has none; a
/// damaged one is reported and ignored, as the CLI's file always was).
pub(super) fn load_whitelist(bgf: &Path) -> Whitelist {
    let path = Whitelist::path_for(bgf);
    Whitelist::load(&path).unwrap_or_else(|e| {
        tracing::warn!("bloomgate serve: ignoring {}: {e}", path.display());
        Whitelist::default()
    })
}
