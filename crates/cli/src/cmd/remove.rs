//! `bloomgate remove`: deletes entries from a counting or cuckoo filter file.
//!
//! Each entry is turned into its key by the filter's own key kind (a URL is
//! canonicalized: `HTTP://A.com/x#top` removes `http://a.com/x`), and one
//! copy of it is removed; the file is then replaced whole, atomically (see
//! `cmd::deletable`). A Bloom filter cannot delete — clearing an item's bits
//! would clear bits other items share — so a Bloom file is refused, naming
//! the layouts that can.
//!
//! The risk that comes with deleting (an entry that was never added can
//! take away another entry's trace, a false negative for that one) is
//! documented where the user meets it: `remove --help` (the `Remove`
//! command's doc in `args.rs`) and the README's "Deleting entries".

use anyhow::Result;

use crate::args::RemoveArgs;
use crate::cmd::deletable::{self, Op};

/// Runs `bloomgate remove`. Exit code 0 when every entry was processed
/// (entries that were not present are counted and named, not errors).
pub fn run(a: RemoveArgs) -> Result<i32> {
    if crate::cmd::redis::is_address(&a.filter) {
        return Err(crate::cmd::UsageError(format!(
            "{}: filters in Redis are Bloom filters, which cannot delete entries; `remove` works on counting and cuckoo filter files (bloomgate build --layout counting|cuckoo)",
            a.filter
        ))
        .into());
    }
    if deletable::kind_of(&a.filter).is_none() {
        refuse_bloom(&a.filter)?;
    }
    deletable::edit(&a.filter, &a.inputs, a.keys, a.strict, Op::Remove)
}

/// Fails for a file that is not a counting or cuckoo filter: with the
/// reason it cannot be read, or, for a Bloom filter, why it cannot delete.
fn refuse_bloom(path: &str) -> Result<()> {
    let f = bloomgate_engine::Filter::open(path, bloomgate_engine::Access::ReadOnly)?;
    anyhow::bail!(
        "{path} is a {} Bloom filter, which cannot delete entries: clearing an entry's bits would also clear bits that other entries share (false negatives). Filters that can delete: --layout counting or --layout cuckoo (bloomgate build --layout cuckoo …; see bloomgate plan --layout cuckoo for their cost)",
        f.params().layout
    )
}
