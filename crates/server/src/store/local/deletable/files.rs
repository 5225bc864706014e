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
use std::sync::atomic::Ordering::Relaxed;

use bloomgate_blacklist::cf_file::{self, CfLayout};
use bloomgate_blacklist::Whitelist;

use super::chain::Chain;
use super::lock;
use super::named::CfNamed;
use crate::store::StoreError;

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

/// Writes `NAME.cf` for `c`, the chain of `named`, then, for a filter
/// exported to `NAME.bgf`, that file (the new file's hash is in `NAME.cf`
/// before the file is written, so a crash between the two leaves a
/// `NAME.bgf` that `NAME.cf` still names).
pub(super) fn save_to(dir: &Path, named: &CfNamed, c: &Chain) -> Result<(), StoreError> {
    use std::io::Write;
    let (mut h, body) = c.image();
    let mut export = lock(&named.export);
    let mut hashes = export.clone();
    if hashes.is_some() && body.len() != 1 {
        // A replayed add grew it past one table: one engine file cannot
        // hold it.
        tracing::warn!(
            "bloomgate serve: cuckoo filter '{}' has {} sub-filters and is no longer exported to {}.bgf",
            named.name,
            body.len(),
            named.name
        );
        hashes = None;
    }
    let image = match (hashes.as_mut(), body.first()) {
        (Some(list), Some(one)) => {
            let mut sum = xxhash_rust::xxh3::Xxh3::new();
            one.pieces().iter().for_each(|p| sum.update(p));
            let sum = sum.digest();
            if list.last() != Some(&sum) {
                list.push(sum);
            }
            if list.len() > 2 {
                list.remove(0);
            }
            Some(one)
        }
        _ => None,
    };
    h.bgf = hashes.clone();
    named.dirty.store(false, Relaxed);
    let failed = |path: PathBuf, e: std::io::Error| {
        named.dirty.store(true, Relaxed);
        StoreError::io(path.display(), e)
    };
    let path = cf_path(dir, &named.name);
    bloomgate_engine::atomic::replace_with(&path, |f| cf_file::write(f, &h, &body))
        .map_err(|e| failed(path.clone(), e.into()))?;
    *export = hashes;
    if let Some(image) = image {
        let bgf = bgf_path(dir, &named.name);
        bloomgate_engine::atomic::replace_with(&bgf, |f| {
            image.pieces().iter().try_for_each(|p| f.write_all(p))
        })
        .map_err(|e| failed(bgf.clone(), e.into()))?;
    }
    Ok(())
}

/// The layout of a counting or cuckoo filter file; `None` for a Bloom
/// filter or an unreadable file (the Bloom loader reports those).
pub(in crate::store::local) fn deletable_layout(path: &Path) -> Option<CfLayout> {
    let code = bloomgate_engine::format::peek_layout_code(path).ok()?;
    bloomgate_engine::format::DeletableKind::from_code(code).map(CfLayout::of)
}

/// The whitelist of the filter file `bgf` (empty if it has none; a
/// damaged one is reported and ignored).
pub(super) fn load_whitelist(bgf: &Path) -> Whitelist {
    let path = Whitelist::path_for(bgf);
    Whitelist::load(&path).unwrap_or_else(|e| {
        tracing::warn!("bloomgate serve: ignoring {}: {e}", path.display());
        Whitelist::default()
    })
}
