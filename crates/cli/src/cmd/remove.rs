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
/// (entries that were not present are counted and named, not errors). A
/// list whose layout cannot delete (a Bloom file, a filter in Redis) is
/// refused before anything is read ([`bloomgate_list::List::removable`]).
pub fn run(a: RemoveArgs) -> Result<i32> {
    deletable::edit(&a.filter, &a.inputs, a.keys, a.strict, Op::Remove)
}
