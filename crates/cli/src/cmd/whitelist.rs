//! `bloomgate whitelist add|remove|list`, on a list of any layout or store
//! ([`bloomgate_list::List`]): items are normalized by the list's key
//! rules, adding one that is not a hit says so, and a file's whitelist is
//! written beside it atomically (a filter in Redis takes each change at
//! once).

use std::io::Write;

use anyhow::Result;
use bloomgate_list::OpenOptions;

use crate::args::WhitelistCmd;
use crate::cmd::list_error;

pub fn run(c: WhitelistCmd) -> Result<i32> {
    let (filter, items, redis, adding) = match c {
        WhitelistCmd::Add {
            filter,
            items,
            redis,
        } => (filter, items, redis, Some(true)),
        WhitelistCmd::Remove {
            filter,
            items,
            redis,
        } => (filter, items, redis, Some(false)),
        WhitelistCmd::List { filter, redis } => (filter, Vec::new(), redis, None),
    };
    // An edit holds a data directory's lock (a running server keeps its
    // own copy of the whitelist and would write it back over this change),
    // with every layer and live add open so that "is it a hit?" is
    // answered as the server would.
    let options = OpenOptions {
        lock: adding.is_some(),
        password_file: redis.redis_password_file,
        ..OpenOptions::default()
    };
    let mut list = crate::cmd::open_list(&filter, &options)?;
    let Some(adding) = adding else {
        let mut out = std::io::stdout().lock();
        for key in list.whitelist().iter() {
            out.write_all(key)?;
            out.write_all(b"\n")?;
        }
        return Ok(0);
    };
    for item in &items {
        if adding {
            if !list.whitelist_add(item.as_bytes()).map_err(list_error)? {
                eprintln!(
                    "bloomgate: warning: {item:?} is not a hit in {filter}; whitelisting it has no effect now"
                );
            }
        } else if !list.whitelist_remove(item.as_bytes()).map_err(list_error)? {
            eprintln!("bloomgate: warning: {item:?} was not whitelisted");
        }
    }
    list.save_whitelist().map_err(list_error)?;
    eprintln!(
        "{}: whitelist has {} items",
        list.address(),
        list.whitelist().len()
    );
    Ok(0)
}
