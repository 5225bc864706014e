//! `bloomgate whitelist add|remove|list`.

use std::io::Write;

use anyhow::Result;

use bloomgate_blacklist::Blacklist;
use bloomgate_engine::Access;

use crate::args::WhitelistCmd;

pub fn run(c: WhitelistCmd) -> Result<i32> {
    match c {
        WhitelistCmd::Add { filter, items } => {
            let mut list = Blacklist::open(&filter, Access::ReadOnly)?;
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
        WhitelistCmd::Remove { filter, items } => {
            let mut list = Blacklist::open(&filter, Access::ReadOnly)?;
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
        WhitelistCmd::List { filter } => {
            let list = Blacklist::open(&filter, Access::ReadOnly)?;
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
