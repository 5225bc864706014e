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
