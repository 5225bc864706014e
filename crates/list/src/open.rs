//! How each shape is opened from an address ([`crate::List::open_with`]): a
//! Redis address, a counting or cuckoo file (the `table` module's
//! opener), a static ribbon file, or a Bloom filter's files; the data
//! directory's lock an update takes, and the key rules a header records.

use std::path::Path;

use bloomgate_blacklist::datadir::{self, DirLock};
use bloomgate_blacklist::{Blacklist, LogMode, Whitelist};
use bloomgate_engine::format::{peek_layout_code, LAYOUT_RIBBON};
use bloomgate_engine::Ribbon;
use bloomgate_redis::{Address, RedisFilter};
use bloomgate_url::{KeyKind, MatchMode};

use crate::{delta, Error, OpenOptions, Static, Store};

/// True if `path` is a static ribbon filter file.
pub(crate) fn is_static(path: &str) -> bool {
    peek_layout_code(Path::new(path)).ok() == Some(LAYOUT_RIBBON)
}

/// Opens a static ribbon filter file (mapped read-only) with its
/// whitelist and its delta of added keys; for an update (adds into the
/// delta) its data directory locked, as for any file.
pub(crate) fn open_static(path: &str, options: &OpenOptions) -> Result<Opening, Error> {
    let lock = match (options.lock || options.update) && !options.served {
        true => lock_dir(path)?,
        false => None,
    };
    let filter = match options.in_memory {
        true => Ribbon::open_in_memory(path)?,
        false => Ribbon::open(path)?,
    };
    let h = filter.header();
    let (kind, mode) = rules_of(path, h.key_kind, h.match_mode)?;
    let whitelist = Whitelist::load(&Whitelist::path_for(Path::new(path)))
        .map_err(bloomgate_blacklist::Error::from)?;
    if options.verify {
        filter.verify()?;
    }
    let delta = delta::Delta::open(
        Path::new(path),
        &filter,
        (kind.as_u8(), mode.as_u8()),
        options.update,
    )?;
    let list = Static {
        filter,
        kind,
        mode,
        whitelist,
        delta,
    };
    Ok((path.to_string(), Store::Static(Box::new(list)), lock))
}

/// What an opener returns: the address to show, the store, and the data
/// directory's lock when one was taken.
pub(crate) type Opening = (String, Store, Option<DirLock>);

/// Opens a filter in Redis. The options of files are refused before any
/// connection is made.
pub(crate) fn open_redis(address: &str, options: &OpenOptions) -> Result<Opening, Error> {
    let mut a = Address::parse(address)?;
    let shown = a.display();
    let refuse = |problem: &str| Error::Unsupported {
        address: shown.clone(),
        problem: problem.into(),
    };
    if options.verify {
        return Err(refuse(
            "a filter in Redis has no checksum to verify (--verify applies to filter files)",
        ));
    }
    if options.snapshot_only {
        return Err(refuse("a filter in Redis has no snapshot apart from its live state (--snapshot-only applies to filter files)"));
    }
    if let Some(p) = &options.password_file {
        a = a.with_password_file(p)?;
    }
    let f = RedisFilter::open(&a).map_err(|source| Error::RedisOpen {
        address: shown.clone(),
        source: Box::new(source),
    })?;
    Ok((shown, Store::Redis(Box::new(f)), None))
}

/// Opens a Bloom filter file with all its layers: for an update writable
/// (its data directory locked by the opener), otherwise read-only with a
/// served data directory's live adds replayed (unless snapshot-only).
pub(crate) fn open_bloom(path: &str, options: &OpenOptions) -> Result<Opening, Error> {
    if options.verify {
        verify_layers(path)?;
    }
    if options.update {
        let list = Blacklist::open_for_update(path)?;
        return Ok((path.to_string(), Store::Bloom(Box::new(list)), None));
    }
    let lock = match options.lock {
        true => lock_dir(path)?,
        false => None,
    };
    let log = match options.snapshot_only {
        true => LogMode::SnapshotOnly,
        false => LogMode::Replay,
    };
    let list = Blacklist::open_read(path, log)?;
    Ok((path.to_string(), Store::Bloom(Box::new(list)), lock))
}

/// The data directory's lock, if `path` is in one.
pub(crate) fn lock_dir(path: &str) -> Result<Option<DirLock>, Error> {
    Ok(match datadir::locate(Path::new(path)) {
        Some((dir, _)) => Some(DirLock::acquire(&dir)?),
        None => None,
    })
}

/// Checks every layer file of a Bloom filter against its checksum.
pub(crate) fn verify_layers(path: &str) -> Result<(), Error> {
    let files = Blacklist::open_read(path, LogMode::SnapshotOnly)?;
    for f in &files.layers().layers {
        f.verify()?;
    }
    Ok(())
}

/// The key kind and match mode a file's header records.
pub(crate) fn rules_of(path: &str, kind: u8, mode: u8) -> Result<(KeyKind, MatchMode), Error> {
    let unknown = |what, code| Error::UnknownRules {
        address: path.to_string(),
        what,
        code,
    };
    Ok((
        KeyKind::from_u8(kind).ok_or_else(|| unknown("key kind", kind))?,
        MatchMode::from_u8(mode).ok_or_else(|| unknown("match mode", mode))?,
    ))
}
