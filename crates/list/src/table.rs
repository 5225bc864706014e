//! Lists of the table shape: a chain of counting or cuckoo tables
//! ([`bloomgate_engine::Chain`] of [`DeletableTable`]s), with key rules and
//! a whitelist.
//!
//! Every deletable list is such a chain, whoever holds it. A counting or
//! cuckoo file that `bloomgate build --layout counting|cuckoo` wrote is a
//! chain of one table that never grows ([`List::open`]); a server's
//! deletable filter (`CF.RESERVE`, or such a file served) is a chain it
//! holds under its lock, grows within its limits and makes durable through
//! its log: a [`TableList`], the same [`List`] over the chain it holds,
//! as a [`BloomList`](crate::BloomList) is for its Bloom filters. Lookups
//! (the verdict), adds, removes (the engine's delete rule,
//! [`bloomgate_engine::delete_table`]) and the normalization of items are
//! this module's for both; what stays the server's is the log, replay, the
//! registry and the wire.
//!
//! # The empty raw item
//!
//! A served raw list takes the empty item as an entry, as RedisBloom's
//! `CF.ADD` does: it is added, counted, removed and looked up like any
//! other. Everywhere else (a file opened by [`List::open`], every other
//! shape) the empty item is not a valid entry ([`bloomgate_url::KeyError::Empty`]),
//! as the CLI has always said; a [`TableList`] alone sets the rule, so a
//! file answers the same through the CLI, the Python package and the
//! server's lists of other shapes as before.
//!
//! # A new table
//!
//! [`TablePlan`] plans a new, empty counting or cuckoo table from a
//! [`DeletableSpec`]: what `bloomgate build --layout counting|cuckoo` and
//! the Python package's `build` fill and hand to [`List::from_table`].
//! Planning and making are two steps ([`TablePlan::bytes`], then
//! [`TablePlan::create`]) so that a front end can refuse a table larger than
//! the memory it was given before any of it is allocated. The sizing is the
//! spec's ([`DeletableSpec::plan`], which `bloomgate plan` shows too).

use std::borrow::Cow;
use std::convert::Infallible;
use std::path::Path;

use bloomgate_blacklist::{DeletablePlan, DeletableSpec, SpecError, VerdictRef, Whitelist};
use bloomgate_engine::{
    Chain, ChainAdd, ChainError, CountingFilter, CountingParams, CuckooFilter, CuckooParams,
    DeletableTable, Removal,
};
use bloomgate_url::{KeyError, KeyKind, MatchMode};

use crate::check::CheckScratch;
use crate::open::{lock_dir, rules_of, Opening};
use crate::{Error, List, OpenOptions, Store};

/// A chain of counting or cuckoo tables with its key rules and whitelist:
/// the store of every deletable list.
#[derive(Debug)]
pub(crate) struct Table {
    chain: Chain<DeletableTable>,
    pub(crate) kind: KeyKind,
    pub(crate) mode: MatchMode,
    pub(crate) whitelist: Whitelist,
    /// Served: the empty raw item is an entry (see the module
    /// documentation).
    served: bool,
}

impl Table {
    /// A file's table: a chain of one that never grows.
    pub(crate) fn file(table: DeletableTable, rules: (KeyKind, MatchMode), wl: Whitelist) -> Table {
        Table {
            chain: Chain::new(table, 0),
            kind: rules.0,
            mode: rules.1,
            whitelist: wl,
            served: false,
        }
    }

    /// The newest table (the only one of a file).
    pub(crate) fn newest(&self) -> &DeletableTable {
        let t = self.chain.tables();
        // A chain holds at least one table (`Chain::new`, `from_tables`).
        &t[t.len() - 1]
    }

    /// Bytes of all tables.
    pub(crate) fn bytes(&self) -> u64 {
        self.chain.bytes()
    }

    /// Whether the empty item is an entry: a served raw list's.
    pub(crate) fn takes_empty(&self) -> bool {
        self.served && self.kind == KeyKind::Raw && self.mode == MatchMode::Exact
    }

    /// Whether the chain holds the empty item.
    pub(crate) fn holds_empty(&self) -> bool {
        self.chain.contains(b"")
    }

    /// One answer per key: a lookup in every table of the chain.
    pub(crate) fn contains_many(&self, keys: &[&[u8]], found: &mut Vec<bool>) {
        found.clear();
        found.extend(keys.iter().map(|k| self.chain.contains(k)));
    }

    /// Adds one copy of a normalized key to a file's table (which never
    /// grows): whether it was absent before, or [`Error::Full`].
    pub(crate) fn add_file_key(&mut self, key: &[u8]) -> Result<bool, Error> {
        let kicks = self.newest().cuckoo_settings().map_or(0, |(_, k)| k);
        self.chain.insert(key).map_err(|e| match e {
            ChainError::Grow(e) => Error::Engine(e),
            _ => Error::Full { kicks },
        })
    }

    /// Removes one copy of a normalized key, from the table the engine's
    /// rule picks; [`Error::Ambiguous`] (nothing changed) when the tables
    /// holding a match were hashed apart.
    pub(crate) fn remove_key(&mut self, key: &[u8]) -> Result<Removal, Error> {
        Ok(self.chain.remove(key)?)
    }

    /// Writes a file's table to `path`, atomically; a chain of several
    /// tables has no such file.
    pub(crate) fn save(&self, path: &Path) -> Result<(), Error> {
        match self.chain.tables() {
            [one] => Ok(one.save(path)?),
            many => Err(Error::Unsupported {
                address: path.display().to_string(),
                problem: format!("a chain of {} tables is not one filter file", many.len()),
            }),
        }
    }

    /// Checks every table read from a file against its checksum.
    pub(crate) fn verify(&self) -> Result<(), Error> {
        for t in self.chain.tables() {
            t.verify()?;
        }
        Ok(())
    }
}

/// True if `path` is a counting or cuckoo filter file. Anything else,
/// including a file that cannot be read, is opened as another shape,
/// whose opener says why it cannot be read.
pub(crate) fn is_table(path: &str) -> bool {
    bloomgate_engine::format::peek_layout_code(Path::new(path))
        .ok()
        .and_then(bloomgate_engine::format::DeletableKind::from_code)
        .is_some()
}

/// Opens a counting or cuckoo filter file (mapped copy-on-write: changes
/// reach the file only through [`List::save`], whole).
pub(crate) fn open(path: &str, options: &OpenOptions) -> Result<Opening, Error> {
    let lock = match options.lock || options.update {
        true => lock_dir(path)?,
        false => None,
    };
    let Some(table) = DeletableTable::open(path)? else {
        return Err(Error::Unsupported {
            address: path.into(),
            problem: "not a counting or cuckoo filter".into(),
        });
    };
    let (kind, mode) = table.key_rules();
    let rules = rules_of(path, kind, mode)?;
    let whitelist = Whitelist::load(&Whitelist::path_for(Path::new(path)))
        .map_err(bloomgate_blacklist::Error::from)?;
    if options.verify {
        table.verify()?;
    }
    let table = Table::file(table, rules, whitelist);
    Ok((path.to_string(), Store::Table(Box::new(table)), lock))
}

/// A [`List`] of the table shape over a chain a caller holds, grows and
/// makes durable: a server's deletable filter (see the module
/// documentation). Its lookups, adds and removes are the library's; the
/// empty raw item is an entry.
#[derive(Debug)]
pub struct TableList {
    list: List,
}

impl TableList {
    /// The list of `chain` with key rules `rules` and `whitelist`.
    pub fn new(
        chain: Chain<DeletableTable>,
        rules: (KeyKind, MatchMode),
        whitelist: Whitelist,
    ) -> TableList {
        let table = Table {
            chain,
            kind: rules.0,
            mode: rules.1,
            whitelist,
            served: true,
        };
        TableList {
            list: List::held(String::new(), Store::Table(Box::new(table)), true),
        }
    }

    fn table(&self) -> &Table {
        match &self.list.store {
            Store::Table(t) => t,
            // `new` is the only maker of a TableList's list.
            _ => unreachable!("a TableList is made of a chain of tables"),
        }
    }

    fn table_mut(&mut self) -> &mut Table {
        match &mut self.list.store {
            Store::Table(t) => t,
            _ => unreachable!("a TableList is made of a chain of tables"),
        }
    }

    /// The list.
    pub fn list(&self) -> &List {
        &self.list
    }

    /// The chain of tables.
    pub fn chain(&self) -> &Chain<DeletableTable> {
        &self.table().chain
    }

    /// Replaces the whitelist (read from its file, or edited by
    /// [`TableList::whitelist_edited`] and made durable).
    pub fn set_whitelist(&mut self, whitelist: Whitelist) {
        self.table_mut().whitelist = whitelist;
    }

    /// The whitelist [`List::whitelist_edit`] of `items` would leave,
    /// with its answers per item (whether it was a hit, for an add; whether
    /// it was there, for a remove; or why it is not a valid entry), made
    /// on a copy: the list is left as it is, for a caller that makes the
    /// new whitelist durable before it serves it
    /// ([`TableList::set_whitelist`]). The copy shares the whitelist's
    /// keys until its first edit ([`Whitelist`] is copied on write).
    pub fn whitelist_edited(
        &self,
        items: &[&[u8]],
        add: bool,
    ) -> Result<(Whitelist, Vec<Result<bool, KeyError>>), Error> {
        let mut whitelist = self.table().whitelist.clone();
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let key = match self.entry_key(item) {
                Ok(k) => k.into_owned(),
                Err(Error::InvalidItem { reason, .. }) => {
                    out.push(Err(reason));
                    continue;
                }
                Err(e) => return Err(e),
            };
            out.push(Ok(match add {
                true => {
                    let hit = self.list.is_hit(item, &key)?;
                    whitelist.insert(key);
                    hit
                }
                false => whitelist.remove(&key),
            }));
        }
        Ok((whitelist, out))
    }

    /// An item as the chain stores it: normalized by the key rules, the
    /// empty raw item itself ([`List::entry_key`]).
    pub fn entry_key<'a>(&self, item: &'a [u8]) -> Result<Cow<'a, [u8]>, Error> {
        self.list.entry_key(item)
    }

    /// [`List::check_each`] on the chain, which cannot fail: a lookup in
    /// memory in every table.
    pub fn check_each(
        &self,
        queries: &[&[u8]],
        s: &mut CheckScratch,
        each: impl FnMut(Result<VerdictRef<'_>, KeyError>),
    ) {
        let t = self.table();
        let looked_up = self.list.check_each_in::<Infallible>(
            queries,
            s,
            |keys, found, _| {
                t.contains_many(keys, found);
                Ok(())
            },
            each,
        );
        let Ok(()) = looked_up;
    }

    /// Matching fingerprints of an item over the chain (an upper bound of
    /// its copies; a counting table's smallest counter). 0 for an item
    /// that is not valid for the key rules.
    pub fn count(&self, item: &[u8]) -> u64 {
        match self.entry_key(item) {
            Ok(k) => self.chain().count(&k),
            Err(_) => 0,
        }
    }

    /// Adds one copy of a normalized key (`nx`: only if absent), into the
    /// newest table with room, else into a new one if the chain may grow
    /// and `admit(bytes now, the new table)` agrees (`force`: grows past
    /// expansion 0, as a replayed add must): [`Chain::add`].
    pub fn add_key(
        &mut self,
        key: &[u8],
        nx: bool,
        force: bool,
        admit: impl FnMut(u64, &DeletableTable) -> bool,
    ) -> ChainAdd {
        self.table_mut().chain.add(key, nx, force, admit)
    }

    /// Removes one copy of a normalized key ([`List::remove_key`]).
    pub fn remove_key(&mut self, key: &[u8]) -> Result<Removal, Error> {
        self.table_mut().remove_key(key)
    }
}

/// A counting or cuckoo table's plan: its size is known, nothing is
/// allocated yet.
#[derive(Clone, Debug)]
pub struct TablePlan {
    kind: KeyKind,
    mode: MatchMode,
    seed: u64,
    plan: DeletablePlan,
}

impl TablePlan {
    /// Plans the table `spec` describes, hashed with `seed`.
    pub fn new(spec: &DeletableSpec, seed: u64) -> Result<TablePlan, SpecError> {
        Ok(TablePlan {
            kind: spec.kind,
            mode: spec.mode,
            seed,
            plan: spec.plan()?,
        })
    }

    /// The table's size in bytes.
    pub fn bytes(&self) -> u64 {
        self.plan.bytes()
    }

    /// Makes the empty table, its header recording the key rules.
    pub fn create(&self) -> Result<DeletableTable, bloomgate_engine::Error> {
        Ok(match &self.plan {
            DeletablePlan::Counting(plan) => {
                let mut params = CountingParams::from_plan(plan, self.seed);
                params.key_kind = self.kind.as_u8();
                params.match_mode = self.mode.as_u8();
                DeletableTable::Counting(CountingFilter::new(params)?)
            }
            DeletablePlan::Cuckoo(plan) => {
                let mut params = CuckooParams::from_plan(plan, self.seed);
                params.key_kind = self.kind.as_u8();
                params.match_mode = self.mode.as_u8();
                DeletableTable::Cuckoo(CuckooFilter::new(params)?)
            }
        })
    }
}
