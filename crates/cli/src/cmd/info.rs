//! `bloomgate info`: what a list is (its layout, size, fill, rates, key
//! rules, whitelist), as the list describes itself
//! ([`bloomgate_list::List::info`]), for a filter file of any layout or a
//! filter in Redis.

use std::io::Write;

use anyhow::Result;
use bloomgate_list::OpenOptions;

use crate::args::InfoArgs;

/// Runs `bloomgate info`. Exit code 1 when the list cannot answer every
/// lookup (shards of a filter in Redis missing), after the description.
pub fn run(a: InfoArgs) -> Result<i32> {
    let options = OpenOptions {
        snapshot_only: a.snapshot_only,
        verify: a.verify,
        password_file: a.redis.redis_password_file.clone(),
        ..OpenOptions::default()
    };
    let list = crate::cmd::open_list(&a.filter, &options)?;
    let info = list.info().map_err(crate::cmd::list_error)?;
    let mut o = std::io::stdout().lock();
    if a.json {
        writeln!(o, "{}", serde_json::to_string_pretty(&info.json)?)?;
    } else {
        for line in &info.lines {
            writeln!(o, "{line}")?;
        }
    }
    o.flush()?;
    for problem in &info.problems {
        eprintln!("bloomgate: {problem}");
    }
    Ok(if info.problems.is_empty() { 0 } else { 1 })
}
