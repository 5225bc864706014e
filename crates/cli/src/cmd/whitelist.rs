//! `bloomgate whitelist add|remove|list`.

use std::io::Write;

use anyhow::Result;

use bloomgate_blacklist::datadir::{self, DirLock};
use bloomgate_blacklist::Blacklist;

use crate::args::WhitelistCmd;

/// Opens a filter to edit its whitelist: in a data directory under its lock
/// (a running server keeps its own copy of the whitelist and would write it
/// back over this change), with every layer and live add so that "is it a
/// hit?" is answered as the server would.
fn open_for_edit(filter: &str) -> Result<(Blacklist, Option<DirLock>)> {
    let lock = match datadir::locate(filter.as_ref()) {
        Some((dir, _)) => Some(DirLock::acquire(&dir)?),
        None => None,
    };
    Ok((crate::cmd::open_read(filter, false)?, lock))
}

pub fn run(c: WhitelistCmd) -> Result<i32> {
    let filter = match &c {
        WhitelistCmd::Add { filter, .. }
        | WhitelistCmd::Remove { filter, .. }
        | WhitelistCmd::List { filter, .. } => filter,
    };
    if crate::cmd::redis::is_address(filter) {
        return crate::cmd::redis::whitelist(c);
    }
    if crate::cmd::deletable::kind_of(filter).is_some() {
        return deletable(c);
    }
    match c {
        WhitelistCmd::Add { filter, items, .. } => {
            let (mut list, _lock) = open_for_edit(&filter)?;
            for item in &items {
                match list.whitelist_add(item.as_bytes()) {
                    Ok(true) => {}
                    Ok(false) => eprintln!(
                        "bloomgate: warning: {item:?} is not a hit in {filter}; whitelisting it has no effect now"
                    ),
                    Err(e) => anyhow::bail!("{item:?}: invalid {} item: {e}", list.kind()),
                }
            }
            list.save_whitelist()?;
            eprintln!("{filter}: whitelist has {} items", list.whitelist().len());
        }
        WhitelistCmd::Remove { filter, items, .. } => {
            let (mut list, _lock) = open_for_edit(&filter)?;
            for item in &items {
                match list.whitelist_remove(item.as_bytes()) {
                    Ok(true) => {}
                    Ok(false) => eprintln!("bloomgate: warning: {item:?} was not whitelisted"),
                    Err(e) => anyhow::bail!("{item:?}: invalid {} item: {e}", list.kind()),
                }
            }
            list.save_whitelist()?;
            eprintln!("{filter}: whitelist has {} items", list.whitelist().len());
        }
        WhitelistCmd::List { filter, .. } => {
            let list = crate::cmd::open_read(&filter, false)?;
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            for key in list.whitelist().iter() {
                out.write_all(key)?;
                out.write_all(b"\n")?;
            }
        }
    }
    Ok(0)
}

/// The whitelist of a counting or cuckoo filter file: the same
/// `FILE.whitelist` beside it, keys normalized by the filter's key rules,
/// and the same warnings as for a Bloom filter. (Removing a false positive
/// from a deletable filter instead would remove another item's trace: the
/// whitelist is how a known false positive is silenced in every layout.)
fn deletable(c: WhitelistCmd) -> Result<i32> {
    use bloomgate_blacklist::Whitelist;
    use bloomgate_url::{entry_key, query_keys};
    use std::path::Path;

    let (filter, items, adding) = match c {
        WhitelistCmd::Add { filter, items, .. } => (filter, items, Some(true)),
        WhitelistCmd::Remove { filter, items, .. } => (filter, items, Some(false)),
        WhitelistCmd::List { filter, .. } => (filter, Vec::new(), None),
    };
    let mut d = crate::cmd::deletable::Deletable::open(&filter)?;
    let Some(adding) = adding else {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        for key in d.whitelist.iter() {
            out.write_all(key)?;
            out.write_all(b"\n")?;
        }
        return Ok(0);
    };
    for item in &items {
        let key = entry_key(d.kind, d.mode, item.as_bytes())
            .map_err(|e| anyhow::anyhow!("{item:?}: invalid {} item: {e}", d.kind))?
            .into_owned();
        if adding {
            let mut scratch = Vec::new();
            let hit = d.filter.contains(&key)
                || query_keys(d.kind, d.mode, item.as_bytes(), &mut scratch)
                    .map(|_| scratch.iter().any(|k| d.filter.contains(k)))
                    .unwrap_or(false);
            if !hit {
                eprintln!(
                    "bloomgate: warning: {item:?} is not a hit in {filter}; whitelisting it has no effect now"
                );
            }
            d.whitelist.insert(key);
        } else if !d.whitelist.remove(&key) {
            eprintln!("bloomgate: warning: {item:?} was not whitelisted");
        }
    }
    d.whitelist.save(&Whitelist::path_for(Path::new(&filter)))?;
    eprintln!("{filter}: whitelist has {} items", d.whitelist.len());
    Ok(0)
}
