//! RedisBloom's cuckoo filter commands: `CF.RESERVE`, `CF.ADD`,
//! `CF.ADDNX`, `CF.INSERT`, `CF.INSERTNX`, `CF.EXISTS`, `CF.MEXISTS`,
//! `CF.COUNT`, `CF.DEL`, `CF.INFO`, `CF.COMPACT`, `CF.SCANDUMP`,
//! `CF.LOADCHUNK`, with RedisBloom's replies and error texts (compared
//! byte for byte with the module in `crates/cli/tests/serve_cuckoo.rs`).
//!
//! Where bloomgate differs, on purpose:
//!
//! * `CF.RESERVE … ERROR rate` (bloomgate only) plans each sub-filter for
//!   that false-positive rate: the engine sizes the fingerprints for it.
//!   Without it the rate is RedisBloom's for the bucket size, 2·b/255
//!   (1.6 % at the default b = 2), so a RedisBloom client gets what it
//!   expects. `BUCKETSIZE` is checked and reported as RedisBloom does and
//!   sets that default rate; the tables themselves use the engine's buckets.
//! * `CF.RESERVE … LAYOUT COUNTING` (bloomgate only) makes the filter one
//!   counting Bloom filter instead of cuckoo tables: never full, about 7×
//!   the memory (`crate::store::deletable`, "Counting filters"). Every `CF.*`
//!   command works on it; `CF.COUNT` is the item's smallest counter.
//! * Capacities above RedisBloom's 2³⁰ are accepted, up to the server's
//!   filter size limit (as for `BF.RESERVE`).
//! * `CF.INFO`'s `Size` and `Number of buckets` are those of bloomgate's
//!   tables, not RedisBloom's for the same parameters.
//! * `CF.SCANDUMP` of an empty filter dumps it (RedisBloom answers
//!   `0, nil` at once and the filter is not restorable). The stream is
//!   bloomgate's own: a header (a magic line and JSON: parameters,
//!   counters, each sub-filter's byte length and a checksum), then the
//!   sub-filters' bytes in chunks; it loads back, with `CF.LOADCHUNK`,
//!   into a bloomgate server bit for bit, not into RedisBloom.
//! * `CF.COMPACT` answers `OK` and changes nothing (the chain's deletes
//!   leave no space that moving fingerprints to older sub-filters would
//!   need to reclaim for correctness).
//!
//! Each command is a translation: its frame parsed into the store's
//! arguments, one call of the store's interface that every filter and
//! front end shares (lookups [`Filter::check_many`], adds
//! [`Store::add_with`](crate::store::Store::add_with), removes
//! [`Store::remove`](crate::store::Store::remove), dumps
//! [`Store::scandump`](crate::store::Store::scandump)), and the answer
//! written as RedisBloom writes it. What only this protocol asks
//! (`CF.COUNT`'s copies, the chain's length, `CF.INFO`'s figures) is a
//! narrow method of the filter ([`crate::store::deletable`]).

use super::{error_reply, lossy, parse_f64, parse_i64, upper, Parsed, Refusal};
use crate::resp::codec::Out;
use crate::resp::session::Session;
use crate::store::deletable::{CfLayout, DeletableSpec, MAX_TABLES};
use crate::store::{AddMode, AddOutcome, Filter, StoreError};
use bloomgate_blacklist::spec::{DeletableArgs, Setting, SpecError};

/// Redis' answer to a command on a key of another type.
pub(in crate::resp) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
/// RedisBloom's largest capacity (bloomgate takes more, see the module doc).
const REDISBLOOM_MAX_CAPACITY: i64 = 1 << 30;

/// Where a key stands for a `CF.*` command.
enum Key {
    /// A cuckoo (or counting) filter.
    Cuckoo(Filter),
    /// A Bloom filter.
    Bloom,
    /// Nothing of that name.
    Missing,
}

fn cf_key(s: &Session, key: &[u8]) -> Key {
    let name = lossy(key);
    if let Some(n) = s.app.store.cf_get(&name) {
        Key::Cuckoo(n)
    } else if s.named(key).is_some() {
        Key::Bloom
    } else {
        Key::Missing
    }
}

/// A `CF.*` command.
pub(in crate::resp) enum Cf<'a> {
    /// `CF.RESERVE key capacity [options]`.
    Reserve { key: &'a [u8], spec: DeletableSpec },
    /// `CF.ADD`, `CF.ADDNX`, `CF.INSERT`, `CF.INSERTNX`.
    Add(Add<'a>),
    /// `CF.EXISTS` (one item) and `CF.MEXISTS` (`multi`).
    Exists {
        key: &'a [u8],
        items: &'a [&'a [u8]],
        multi: bool,
    },
    /// `CF.COUNT key item`.
    Count { key: &'a [u8], item: &'a [u8] },
    /// `CF.DEL key item`.
    Del { key: &'a [u8], item: &'a [u8] },
    /// `CF.INFO key`.
    Info(&'a [u8]),
    /// `CF.COMPACT key`.
    Compact(&'a [u8]),
    /// `CF.SCANDUMP key iter`.
    Scandump { key: &'a [u8], iter: u64 },
    /// `CF.LOADCHUNK key iter data` (`iter` is not 0).
    Loadchunk {
        key: &'a [u8],
        iter: i64,
        data: &'a [u8],
    },
}

/// An add of items to a cuckoo filter: `nx` adds only items not found
/// (`CF.ADDNX`, `CF.INSERTNX`); `multi` answers with an array
/// (`CF.INSERT*`); the filter is created with `create` if missing
/// (`None`: `NOCREATE`).
pub(in crate::resp) struct Add<'a> {
    key: &'a [u8],
    items: &'a [&'a [u8]],
    nx: bool,
    multi: bool,
    create: Option<DeletableSpec>,
}

impl<'a> Cf<'a> {
    /// True if `name` (upper-cased) is a `CF.*` command.
    pub(super) fn knows(name: &[u8]) -> bool {
        matches!(
            name,
            b"CF.RESERVE"
                | b"CF.ADD"
                | b"CF.ADDNX"
                | b"CF.INSERT"
                | b"CF.INSERTNX"
                | b"CF.EXISTS"
                | b"CF.MEXISTS"
                | b"CF.COUNT"
                | b"CF.DEL"
                | b"CF.INFO"
                | b"CF.COMPACT"
                | b"CF.SCANDUMP"
                | b"CF.LOADCHUNK"
        )
    }

    /// Parses a `CF.*` command; `None` if `name` is not one.
    pub(super) fn parse(name: &[u8], argv: &'a [&'a [u8]]) -> Option<Parsed<'a, Cf<'a>>> {
        if !Self::knows(name) {
            return None;
        }
        let argc = argv.len();
        let arity_ok = match name {
            b"CF.RESERVE" => argc >= 3 && argc % 2 == 1,
            b"CF.ADD" | b"CF.ADDNX" | b"CF.EXISTS" | b"CF.COUNT" | b"CF.DEL" => argc == 3,
            b"CF.MEXISTS" => argc >= 3,
            b"CF.INSERT" | b"CF.INSERTNX" => argc >= 4,
            b"CF.INFO" | b"CF.COMPACT" => argc == 2,
            b"CF.SCANDUMP" => argc == 3,
            _ => argc == 4,
        };
        if !arity_ok {
            return Some(Err(Refusal::Arity(argv[0])));
        }
        let key = argv[1];
        Some(match name {
            b"CF.RESERVE" => parse_reserve(argv),
            b"CF.ADD" | b"CF.ADDNX" => Ok(Cf::Add(Add {
                key,
                items: &argv[2..],
                nx: name == b"CF.ADDNX",
                multi: false,
                create: Some(DeletableSpec::redis_default(
                    DeletableSpec::DEFAULT_CAPACITY,
                )),
            })),
            b"CF.INSERT" | b"CF.INSERTNX" => {
                parse_insert(argv, name == b"CF.INSERTNX").map(Cf::Add)
            }
            b"CF.EXISTS" | b"CF.MEXISTS" => Ok(Cf::Exists {
                key,
                items: &argv[2..],
                multi: name == b"CF.MEXISTS",
            }),
            b"CF.COUNT" => Ok(Cf::Count { key, item: argv[2] }),
            b"CF.DEL" => Ok(Cf::Del { key, item: argv[2] }),
            b"CF.INFO" => Ok(Cf::Info(key)),
            b"CF.COMPACT" => Ok(Cf::Compact(key)),
            b"CF.SCANDUMP" => match parse_i64(argv[2]).and_then(|i| u64::try_from(i).ok()) {
                Some(iter) => Ok(Cf::Scandump { key, iter }),
                None => Err(Refusal::error("Invalid position")),
            },
            _ => match parse_i64(argv[2]) {
                None | Some(0) => Err(Refusal::error("Invalid position")),
                Some(iter) => Ok(Cf::Loadchunk {
                    key,
                    iter,
                    data: argv[3],
                }),
            },
        })
    }

    /// Applies the command.
    pub(super) fn apply(self, s: &mut Session, out: &mut Out) {
        match self {
            Cf::Reserve { key, spec } => reserve(s, key, &spec, out),
            Cf::Add(add) => add.apply(s, out),
            Cf::Exists { key, items, multi } => exists(s, key, items, multi, out),
            Cf::Count { key, item } => match cf_key(s, key) {
                Key::Cuckoo(n) => out.int(n.copies(item) as i64),
                _ => out.int(0),
            },
            Cf::Del { key, item } => del(s, key, item, out),
            Cf::Info(key) => info(s, key, out),
            Cf::Compact(key) => match cf_key(s, key) {
                Key::Cuckoo(_) => out.ok(),
                _ => out.error("Cuckoo filter was not found"),
            },
            Cf::Scandump { key, iter } => scandump(s, key, iter, out),
            Cf::Loadchunk { key, iter, data } => loadchunk(s, key, iter, data, out),
        }
    }
}

/// `CF.RESERVE key capacity [BUCKETSIZE b] [MAXITERATIONS m]
/// [EXPANSION e] [ERROR rate] [LAYOUT l]`. As RedisBloom: options are
/// found by name anywhere after the capacity, unknown words are ignored,
/// and the checks run in RedisBloom's order.
fn parse_reserve<'a>(argv: &'a [&'a [u8]]) -> Parsed<'a, Cf<'a>> {
    let Some(capacity) = parse_i64(argv[2]) else {
        return Err(Refusal::error("Bad capacity"));
    };
    // The value after the first occurrence of `name` (RMUtil_ArgIndex).
    let opt = |name: &[u8]| -> Option<Option<&[u8]>> {
        let at = argv[3..].iter().position(|a| upper(a) == name)? + 3;
        Some(argv.get(at + 1).copied())
    };
    let int_opt = |name: &str| -> Result<Option<i64>, Refusal<'a>> {
        opt(name.as_bytes())
            .map(|v| {
                v.and_then(parse_i64)
                    .ok_or_else(|| Refusal::error(format!("Couldn't parse {name}")))
            })
            .transpose()
    };
    let max_iterations = int_opt("MAXITERATIONS")?;
    let bucket_size = int_opt("BUCKETSIZE")?;
    let expansion = int_opt("EXPANSION")?;
    let error_rate = match opt(b"ERROR") {
        None => None,
        Some(v) => Some(
            v.and_then(parse_f64)
                .ok_or_else(|| Refusal::error("Couldn't parse ERROR"))?,
        ),
    };
    let layout = match opt(b"LAYOUT") {
        None => CfLayout::Cuckoo,
        Some(v) => match v.map(upper).as_deref() {
            Some(b"CUCKOO") => CfLayout::Cuckoo,
            Some(b"COUNTING") => CfLayout::Counting,
            _ => return Err(Refusal::error("LAYOUT: must be CUCKOO or COUNTING")),
        },
    };
    // Defaults and limits are the library's, the same as the HTTP API's;
    // the texts of the refusals are RedisBloom's.
    let args = DeletableArgs {
        capacity,
        bucket_size,
        max_iterations,
        expansion,
        error_rate,
    };
    let defaults = DeletableSpec {
        layout,
        ..DeletableSpec::redis_default(DeletableSpec::DEFAULT_CAPACITY)
    };
    let spec = args
        .settle(&defaults)
        .map_err(|e| Refusal::error(reserve_refusal(&e)))?;
    Ok(Cf::Reserve { key: argv[1], spec })
}

/// RedisBloom's text for a `CF.RESERVE` value out of its range.
fn reserve_refusal(e: &SpecError) -> String {
    match e {
        SpecError::Setting { setting, .. } => {
            let name = match setting {
                Setting::BucketSize => "BUCKETSIZE",
                Setting::MaxIterations => "MAXITERATIONS",
                Setting::Expansion => "EXPANSION",
            };
            let r = setting.range();
            format!(
                "{name}: value must be in the range [{}, {}]",
                r.start(),
                r.end()
            )
        }
        SpecError::Rate(_) => "ERROR: value must be in the range (0, 1)".into(),
        SpecError::Capacity { .. } => {
            format!("Capacity must be in the range [2 * BUCKETSIZE, {REDISBLOOM_MAX_CAPACITY}]")
        }
        other => other.to_string(),
    }
}

fn reserve(s: &mut Session, key: &[u8], spec: &DeletableSpec, out: &mut Out) {
    let name = lossy(key);
    match cf_key(s, key) {
        Key::Cuckoo(_) => return out.error("ERR item exists"),
        Key::Bloom => return out.error(WRONGTYPE),
        Key::Missing => {}
    }
    match s.app.store.cf_create(&name, spec) {
        Ok(_) => out.ok(),
        Err(StoreError::Exists(_)) => match cf_key(s, key) {
            Key::Bloom => out.error(WRONGTYPE),
            _ => out.error("ERR item exists"),
        },
        Err(e) => out.error(&error_reply(&e)),
    }
}

/// `CF.INSERT` / `CF.INSERTNX key [CAPACITY c] [NOCREATE] ITEMS item…`.
/// Options are told apart by their first letter, as RedisBloom does.
fn parse_insert<'a>(argv: &'a [&'a [u8]], nx: bool) -> Parsed<'a, Add<'a>> {
    let argc = argv.len();
    let mut capacity = DeletableSpec::DEFAULT_CAPACITY as i64;
    let mut create = true;
    let mut items_at = None;
    let mut i = 2;
    while i < argc && items_at.is_none() {
        match argv[i].first().map(u8::to_ascii_lowercase) {
            Some(b'c') => {
                i += 1;
                let Some(v) = argv.get(i) else {
                    return Err(Refusal::Arity(argv[0]));
                };
                let Some(c) = parse_i64(v) else {
                    return Err(Refusal::error("Bad capacity"));
                };
                if c < 2 * i64::from(DeletableSpec::DEFAULT_BUCKET_SIZE) {
                    return Err(Refusal::error(format!(
                        "Capacity must be in the range [cf-bucket-size * 2, {REDISBLOOM_MAX_CAPACITY}]"
                    )));
                }
                capacity = c;
                i += 1;
            }
            Some(b'i') => {
                i += 1;
                items_at = Some(i);
            }
            Some(b'n') => {
                create = false;
                i += 1;
            }
            _ => return Err(Refusal::error("Unknown argument received")),
        }
    }
    let Some(at) = items_at.filter(|&k| k < argc) else {
        return Err(Refusal::Arity(argv[0]));
    };
    Ok(Add {
        key: argv[1],
        items: &argv[at..],
        nx,
        multi: true,
        create: create.then(|| DeletableSpec::redis_default(capacity as u64)),
    })
}

impl Add<'_> {
    /// The adds of `CF.ADD`, `CF.ADDNX` (single: a full filter is the
    /// error `Filter is full`) and `CF.INSERT`, `CF.INSERTNX` (multi: a
    /// full filter is -1, or false for `CF.INSERT` in RESP3).
    fn apply(self, s: &mut Session, out: &mut Out) {
        let Add {
            key,
            items,
            nx,
            multi,
            create,
        } = self;
        let named = match cf_key(s, key) {
            Key::Cuckoo(n) => n,
            Key::Bloom => return out.error(WRONGTYPE),
            Key::Missing => {
                let Some(spec) = create else {
                    return out.error("ERR not found");
                };
                match s.app.store.cf_create(&lossy(key), &spec) {
                    Ok(n) => n,
                    Err(StoreError::Exists(_)) => match cf_key(s, key) {
                        Key::Cuckoo(n) => n,
                        Key::Bloom => return out.error(WRONGTYPE),
                        Key::Missing => return out.error("ERR not found"),
                    },
                    Err(e) => return out.error(&error_reply(&e)),
                }
            }
        };
        if named.chain_len() >= MAX_TABLES {
            return out.error("Maximum expansions reached");
        }
        let mode = match nx {
            true => AddMode::IfAbsent,
            false => AddMode::Copy,
        };
        let mut outcomes = Vec::with_capacity(items.len());
        match s.app.store.add_with(&named, items, mode, &mut outcomes) {
            Ok(ack) => s.ack = Some(ack),
            Err(e) => return out.error(&error_reply(&e)),
        }
        if multi {
            out.array(outcomes.len());
        }
        // RESP3 booleans everywhere but CF.INSERTNX's array, as RedisBloom.
        let booleans = !(nx && multi);
        for o in outcomes {
            match o {
                AddOutcome::New if booleans => out.boolean(true),
                AddOutcome::New => out.int(1),
                AddOutcome::Exists if booleans => out.boolean(false),
                AddOutcome::Exists => out.int(0),
                AddOutcome::NoRoom | AddOutcome::Full if !multi => out.error("Filter is full"),
                AddOutcome::NoRoom | AddOutcome::Full if out.proto >= 3 && !nx => {
                    out.boolean(false)
                }
                AddOutcome::NoRoom | AddOutcome::Full => out.int(-1),
                // A deletable filter refuses the whole batch instead.
                AddOutcome::TooLong => out.error("ERR item is too long"),
                AddOutcome::Invalid(e) => out.error(&format!("ERR invalid item: {e}")),
            }
        }
    }
}

/// `CF.EXISTS` / `CF.MEXISTS`: a missing key, or a Bloom filter's, is
/// "absent" for every item, as in RedisBloom.
fn exists(s: &mut Session, key: &[u8], items: &[&[u8]], multi: bool, out: &mut Out) {
    let hits = match cf_key(s, key) {
        Key::Cuckoo(n) => {
            // The library's verdict, as every lookup's; an item that is not
            // a valid query of a CLI-built filter's key kind is absent.
            let mut hits = Vec::with_capacity(items.len());
            let looked_up = n.check_many(items, &mut s.lookup_scratch, |v| {
                hits.push(v.is_ok_and(|v| v.hit))
            });
            if let Err(e) = looked_up {
                return out.error(&error_reply(&e));
            }
            hits
        }
        Key::Missing => {
            s.app
                .metrics
                .unknown_filter_lookups
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if s.app.limits.unknown_filter_error {
                return out.error("ERR not found");
            }
            vec![false; items.len()]
        }
        Key::Bloom => vec![false; items.len()],
    };
    if multi {
        out.array(hits.len());
    }
    for h in hits {
        out.boolean(h);
    }
}

/// `CF.DEL key item`: anything but a cuckoo filter is `Not found`.
fn del(s: &mut Session, key: &[u8], item: &[u8], out: &mut Out) {
    let Key::Cuckoo(named) = cf_key(s, key) else {
        return out.error("Not found");
    };
    match s.app.store.remove(&named, item) {
        Ok((found, ack)) => {
            s.ack = Some(ack);
            out.boolean(found)
        }
        Err(e) => out.error(&error_reply(&e)),
    }
}

/// `CF.INFO key`: RedisBloom's eight fields, in its order (simple
/// strings; a map in RESP3).
fn info(s: &mut Session, key: &[u8], out: &mut Out) {
    let named = match cf_key(s, key) {
        Key::Cuckoo(n) => n,
        Key::Bloom => return out.error(WRONGTYPE),
        Key::Missing => return out.error("ERR not found"),
    };
    let i = match named.cf_info() {
        Ok(i) => i,
        Err(e) => return out.error(&error_reply(&e)),
    };
    out.map(8);
    for (k, v) in [
        ("Size", i.size_bytes),
        ("Number of buckets", i.buckets),
        ("Number of filters", i.filters as u64),
        ("Number of items inserted", i.items),
        ("Number of items deleted", i.deletes),
        ("Bucket size", u64::from(i.bucket_size)),
        ("Expansion rate", u64::from(i.expansion)),
        ("Max iterations", u64::from(i.max_iterations)),
    ] {
        out.simple(k);
        out.int(v as i64);
    }
}

/// `CF.SCANDUMP key iter` (the stream is bloomgate's, see the module doc).
fn scandump(s: &mut Session, key: &[u8], iter: u64, out: &mut Out) {
    let named = match cf_key(s, key) {
        Key::Cuckoo(n) => n,
        Key::Bloom => return out.error(WRONGTYPE),
        Key::Missing => return out.error("ERR not found"),
    };
    let (next, data) = match s.app.store.scandump(&named, iter) {
        Ok(r) => r,
        Err(e) => return out.error(&error_reply(&e)),
    };
    out.array(2);
    out.int(next as i64);
    if next == 0 {
        out.null()
    } else {
        out.bulk(&data)
    }
}

/// `CF.LOADCHUNK key iter data`, with RedisBloom's errors: iteration 1
/// on an existing key `ERR item exists` (`WRONGTYPE` for a Bloom
/// filter's), a header that is not one of `CF.SCANDUMP`'s `Invalid
/// header`, a chunk of no load in progress `ERR not found` (or
/// `Couldn't load chunk!` for a served filter), a chunk that does not
/// fit `Couldn't load chunk!`. The last chunk answers once the filter's
/// file is written.
fn loadchunk(s: &mut Session, key: &[u8], iter: i64, data: &[u8], out: &mut Out) {
    if s.named(key).is_some() {
        return out.error(WRONGTYPE);
    }
    let Ok(iter) = u64::try_from(iter) else {
        // No chunk has a negative position.
        return match cf_key(s, key) {
            Key::Cuckoo(_) => out.error("Couldn't load chunk!"),
            _ => out.error("ERR not found"),
        };
    };
    match s.app.store.cf_loadchunk(&lossy(key), iter, data) {
        Ok(()) => out.ok(),
        Err(StoreError::Exists(_)) => out.error("ERR item exists"),
        Err(StoreError::NotFound(_)) => out.error("ERR not found"),
        Err(StoreError::Invalid(e)) => out.error(&e),
        Err(e) => out.error(&error_reply(&e)),
    }
}
