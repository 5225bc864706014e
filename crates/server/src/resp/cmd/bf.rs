//! The RedisBloom commands: `BF.RESERVE`, `BF.ADD`, `BF.MADD`,
//! `BF.INSERT`, `BF.EXISTS`, `BF.MEXISTS`, `BF.INFO`, `BF.CARD`,
//! `BF.DEBUG`, `BF.SCANDUMP`, `BF.LOADCHUNK`, with RedisBloom's replies
//! and error texts.

use bloomgate_blacklist::layers::{DEFAULT_EXPANSION, MAX_EXPANSION};
use bloomgate_blacklist::spec::check_rate;
use bloomgate_url::KeyError;

use super::{error_reply, lossy, parse_f64, parse_i64, upper, Parsed, Refusal};
use crate::resp::codec::Out;
use crate::resp::session::{Later, Session};
use crate::store::{AddOutcome, Checked, FillPolicy, FilterSpec, Info, StoreError};

/// The expansions RedisBloom accepts (the limit of every front end,
/// [`MAX_EXPANSION`]); 0 makes a non-scaling filter.
const EXPANSION_RANGE: std::ops::RangeInclusive<i64> = 0..=MAX_EXPANSION as i64;
/// `BF.RESERVE`'s answer to an expansion outside [`EXPANSION_RANGE`].
const EXPANSION_RANGE_ERROR: &str = "ERR expansion must be in the range [0, 32768]";
/// `BF.RESERVE`'s answer to an error rate outside (0, 1).
const ERROR_RATE_RANGE: &str = "ERR error rate must be in the range (0.000000, 1.000000)";
/// `BF.RESERVE`'s answer to a capacity below 1. (RedisBloom also refuses
/// capacities above 2^30 with it; bloomgate takes them, up to its filter
/// size limit.)
const CAPACITY_RANGE: &str = "ERR capacity must be in the range [1, 1073741824]";
/// `BF.LOADCHUNK`'s answer to a chunk or header that cannot be loaded.
const BAD_DATA: &str = "ERR received bad data";
/// `BF.INFO`'s field names, in its order.
const INFO_FIELDS: [&str; 5] = [
    "Capacity",
    "Size",
    "Number of filters",
    "Number of items inserted",
    "Expansion rate",
];

/// The fill policy of RedisBloom's growth options: `NONSCALING` (or
/// `EXPANSION 0`) refuses adds when full, else the filter grows.
fn fill_policy(expansion: u32, nonscaling: bool) -> FillPolicy {
    if nonscaling {
        FillPolicy::Refuse
    } else {
        FillPolicy::Grow { expansion }
    }
}

/// A `BF.*` command.
pub(in crate::resp) enum Bf<'a> {
    /// `BF.RESERVE key rate capacity [EXPANSION e] [NONSCALING]`.
    Reserve { key: &'a [u8], spec: FilterSpec },
    /// `BF.ADD`, `BF.MADD`, `BF.INSERT`.
    Add(Add<'a>),
    /// `BF.EXISTS` (one item) and `BF.MEXISTS` (`multi`).
    Exists {
        key: &'a [u8],
        items: &'a [&'a [u8]],
        multi: bool,
    },
    /// `BF.INFO key [field]`: the field is parsed once the filter is found.
    Info {
        key: &'a [u8],
        field: Option<&'a [u8]>,
    },
    /// `BF.CARD key`.
    Card(&'a [u8]),
    /// `BF.SCANDUMP key iter`: the iterator is parsed once the filter is
    /// found, as RedisBloom does.
    Scandump { key: &'a [u8], iter: &'a [u8] },
    /// `BF.LOADCHUNK key iter data`.
    Loadchunk {
        key: &'a [u8],
        iter: i64,
        data: &'a [u8],
    },
    /// `BF.DEBUG key`.
    Debug(&'a [u8]),
}

/// An add of items to a Bloom filter, created with `create` if missing
/// (`None`: `NOCREATE`); `multi` answers with an array.
pub(in crate::resp) struct Add<'a> {
    key: &'a [u8],
    items: &'a [&'a [u8]],
    multi: bool,
    create: Option<FilterSpec>,
}

impl<'a> Bf<'a> {
    /// Parses a `BF.*` command; `None` if `name` is not one.
    pub(super) fn parse(name: &[u8], argv: &'a [&'a [u8]]) -> Option<Parsed<'a, Bf<'a>>> {
        let argc = argv.len();
        let add = |multi| {
            Ok(Bf::Add(Add {
                key: argv[1],
                items: &argv[2..],
                multi,
                create: Some(FilterSpec::redis_default()),
            }))
        };
        Some(match name {
            b"BF.RESERVE" => parse_reserve(argv),
            b"BF.ADD" if argc == 3 => add(false),
            b"BF.MADD" if argc >= 3 => add(true),
            b"BF.INSERT" => parse_insert(argv).map(Bf::Add),
            b"BF.EXISTS" | b"BF.MEXISTS" if argc >= 3 && (argc == 3 || name == b"BF.MEXISTS") => {
                Ok(Bf::Exists {
                    key: argv[1],
                    items: &argv[2..],
                    multi: name == b"BF.MEXISTS",
                })
            }
            b"BF.INFO" if argc == 2 || argc == 3 => Ok(Bf::Info {
                key: argv[1],
                field: argv.get(2).copied(),
            }),
            b"BF.CARD" if argc == 2 => Ok(Bf::Card(argv[1])),
            b"BF.SCANDUMP" if argc == 3 => Ok(Bf::Scandump {
                key: argv[1],
                iter: argv[2],
            }),
            b"BF.LOADCHUNK" if argc == 4 => match parse_i64(argv[2]) {
                Some(iter) => Ok(Bf::Loadchunk {
                    key: argv[1],
                    iter,
                    data: argv[3],
                }),
                None => Err(Refusal::error("ERR Second argument must be numeric")),
            },
            b"BF.DEBUG" if argc == 2 => Ok(Bf::Debug(argv[1])),
            b"BF.ADD" | b"BF.MADD" | b"BF.EXISTS" | b"BF.MEXISTS" | b"BF.INFO" | b"BF.CARD"
            | b"BF.SCANDUMP" | b"BF.LOADCHUNK" | b"BF.DEBUG" => Err(Refusal::Arity(argv[0])),
            _ => return None,
        })
    }

    /// True for the Bloom commands that a cuckoo filter's name refuses
    /// with `WRONGTYPE` (RedisBloom: `BF.EXISTS` and `BF.MEXISTS` answer
    /// "absent" instead).
    pub(super) fn wrong_on_cuckoo(name: &[u8]) -> bool {
        matches!(
            name,
            b"BF.RESERVE"
                | b"BF.ADD"
                | b"BF.MADD"
                | b"BF.INSERT"
                | b"BF.INFO"
                | b"BF.CARD"
                | b"BF.SCANDUMP"
                | b"BF.LOADCHUNK"
                | b"BF.DEBUG"
        )
    }

    /// Applies the command.
    pub(super) fn apply(self, s: &mut Session, out: &mut Out) {
        match self {
            Bf::Reserve { key, spec } => match s.app.store.create(&lossy(key), &spec) {
                Ok(_) => out.ok(),
                Err(e) => out.error(&error_reply(&e)),
            },
            Bf::Add(add) => add.apply(s, out),
            Bf::Exists { key, items, multi } => exists(s, key, items, multi, out),
            Bf::Info { key, field } => info(s, key, field, out),
            Bf::Card(key) => match s.named(key).map(|n| n.info(false)) {
                Some(Ok(i)) => out.int(i.items as i64),
                Some(Err(e)) => out.error(&error_reply(&e)),
                // A missing key has no items.
                None => out.int(0),
            },
            Bf::Scandump { key, iter } => scandump(s, key, iter, out),
            Bf::Loadchunk { key, iter, data } => loadchunk(s, key, iter, data, out),
            Bf::Debug(key) => debug(s, key, out),
        }
    }
}

/// `BF.RESERVE`, with RedisBloom's checks in its order.
fn parse_reserve<'a>(argv: &'a [&'a [u8]]) -> Parsed<'a, Bf<'a>> {
    let argc = argv.len();
    if !(4..=7).contains(&argc) {
        return Err(Refusal::Arity(argv[0]));
    }
    let Some(error) = parse_f64(argv[2]) else {
        return Err(Refusal::error("ERR bad error rate"));
    };
    if check_rate(error).is_err() {
        return Err(Refusal::error(ERROR_RATE_RANGE));
    }
    let Some(capacity) = parse_i64(argv[3]) else {
        return Err(Refusal::error("ERR bad capacity"));
    };
    if capacity <= 0 {
        return Err(Refusal::error(CAPACITY_RANGE));
    }
    let mut nonscaling = false;
    let mut expansion: Option<&[u8]> = None;
    let mut i = 4;
    while i < argc {
        match upper(argv[i]).as_slice() {
            b"NONSCALING" => {
                nonscaling = true;
                i += 1;
            }
            b"EXPANSION" => {
                let Some(v) = argv.get(i + 1) else {
                    return Err(Refusal::error("ERR no expansion"));
                };
                expansion = Some(v);
                i += 2;
            }
            _ => return Err(Refusal::error("ERR unknown argument received")),
        }
    }
    // RedisBloom's order: `EXPANSION 0` makes a non-scaling filter, any
    // other expansion conflicts with `NONSCALING`, then the range.
    let expansion = match expansion {
        None => DEFAULT_EXPANSION,
        Some(v) => {
            let Some(e) = parse_i64(v) else {
                return Err(Refusal::error("ERR bad expansion"));
            };
            if e == 0 {
                nonscaling = true;
            } else if nonscaling {
                return Err(Refusal::error("Nonscaling filters cannot expand"));
            }
            if !EXPANSION_RANGE.contains(&e) {
                return Err(Refusal::error(EXPANSION_RANGE_ERROR));
            }
            e as u32
        }
    };
    let spec = FilterSpec {
        fill: fill_policy(expansion, nonscaling),
        ..FilterSpec::new(capacity as u64, error)
    };
    Ok(Bf::Reserve { key: argv[1], spec })
}

/// `BF.INSERT`. Its option errors carry no `ERR ` prefix, as in RedisBloom.
fn parse_insert<'a>(argv: &'a [&'a [u8]]) -> Parsed<'a, Add<'a>> {
    let argc = argv.len();
    let arity = || Err(Refusal::Arity(argv[0]));
    if argc < 4 {
        return arity();
    }
    let mut spec = FilterSpec::redis_default();
    let mut autocreate = true;
    let mut nonscaling = false;
    let mut expansion = DEFAULT_EXPANSION as i64;
    let mut items_at = None;
    let mut i = 2;
    while i < argc && items_at.is_none() {
        match upper(argv[i]).as_slice() {
            b"ITEMS" => items_at = Some(i + 1),
            b"ERROR" => {
                let Some(v) = argv.get(i + 1) else {
                    return arity();
                };
                match parse_f64(v) {
                    Some(e) if check_rate(e).is_ok() => spec.rate = e,
                    _ => return Err(Refusal::error("Bad error rate")),
                }
                i += 2;
            }
            b"CAPACITY" => {
                let Some(v) = argv.get(i + 1) else {
                    return arity();
                };
                match parse_i64(v) {
                    Some(c) if c >= 1 => spec.items = c as u64,
                    _ => return Err(Refusal::error("Bad capacity")),
                }
                i += 2;
            }
            b"EXPANSION" => {
                let Some(v) = argv.get(i + 1) else {
                    return arity();
                };
                match parse_i64(v) {
                    Some(e) if EXPANSION_RANGE.contains(&e) => expansion = e,
                    _ => return Err(Refusal::error("Bad expansion")),
                }
                i += 2;
            }
            b"NOCREATE" => {
                autocreate = false;
                i += 1;
            }
            b"NONSCALING" => {
                nonscaling = true;
                i += 1;
            }
            _ => return Err(Refusal::error("Unknown argument received")),
        }
    }
    let Some(items_at) = items_at.filter(|&k| k < argc) else {
        return arity();
    };
    spec.fill = fill_policy(expansion as u32, nonscaling || expansion == 0);
    Ok(Add {
        key: argv[1],
        items: &argv[items_at..],
        multi: true,
        create: autocreate.then_some(spec),
    })
}

impl Add<'_> {
    fn apply(self, s: &mut Session, out: &mut Out) {
        let Add {
            key,
            items,
            multi,
            create,
        } = self;
        let name = lossy(key);
        let named = match s.app.store.get(&name) {
            Some(n) => n,
            None => {
                let Some(spec) = create else {
                    return out.error("ERR not found");
                };
                match s.app.store.create(&name, &spec) {
                    Ok(n) => n,
                    Err(StoreError::Exists(_)) => match s.app.store.get(&name) {
                        Some(n) => n,
                        None => return out.error("ERR not found"),
                    },
                    Err(e) => return out.error(&error_reply(&e)),
                }
            }
        };
        let batch = s.app.limits.max_batch.max(1);
        if s.queueing && items.len() <= batch {
            if let Some(rx) = s.app.store.add_later(&named, items) {
                s.later = Some(Later::Add { rx, multi });
                return;
            }
        }
        s.outcomes.clear();
        let mut outcomes = std::mem::take(&mut s.outcomes);
        // RedisBloom takes any number of items (the input budget bounds a
        // command's memory): more than a batch are added a batch at a
        // time, in order, with the same replies; the log is written in
        // order, so the last batch's acknowledgement covers the others.
        for part in items.chunks(batch) {
            match s.app.store.add(&named, part, &mut outcomes) {
                Ok(ack) => s.ack = Some(ack),
                Err(e) => {
                    s.outcomes = outcomes;
                    return out.error(&error_reply(&e));
                }
            }
            if matches!(outcomes.last(), Some(AddOutcome::Full)) {
                break;
            }
        }
        add_replies(out, multi, &outcomes);
        s.outcomes = outcomes;
    }
}

/// `BF.EXISTS` / `BF.MEXISTS`, through the connection's cached lookup.
fn exists(s: &mut Session, key: &[u8], items: &[&[u8]], multi: bool, out: &mut Out) {
    let batch = s.app.limits.max_batch.max(1);
    s.look_up(key);
    if s.last.named.is_none() {
        s.app
            .metrics
            .unknown_filter_lookups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if s.app.limits.unknown_filter_error {
            return out.error("ERR not found");
        }
    }
    if s.queueing && items.len() <= batch {
        if let Some(rx) = s
            .last
            .named
            .as_ref()
            .and_then(|n| n.check_later(items, false))
        {
            s.items_checked += items.len() as u64;
            let filter = s.last.named.clone().expect("a filter");
            s.later = Some(Later::Check { rx, multi, filter });
            return;
        }
    }
    let start = out.buf.len();
    if multi {
        out.array(items.len());
    }
    s.items_checked += items.len() as u64;
    let l = &mut s.last;
    let Some(named) = &l.named else {
        // RedisBloom answers 0 for a missing key.
        for _ in items {
            out.boolean(false);
        }
        return;
    };
    let (mut checks, mut hits) = (0, 0);
    let reply = |r: Result<bool, KeyError>| match r {
        Ok(h) => {
            checks += 1;
            hits += h as u64;
            out.boolean(h)
        }
        Err(e) => out.error(&format!("ERR invalid item: {e}")),
    };
    let mut reply = reply;
    for part in items.chunks(batch) {
        if let Err(e) = named.contains_batch(part, &mut s.lookup_scratch, &mut reply) {
            // No partial answer: the replies given so far are void.
            out.buf.truncate(start);
            return out.error(&error_reply(&e));
        }
    }
    l.checks += checks;
    l.hits += hits;
    s.hits += hits;
}

/// `BF.LOADCHUNK key iter data`, with RedisBloom's error texts: a bad
/// header, a header for an existing filter, an iterator below 1 for an
/// existing filter, or a chunk that does not fit the iterator (or the
/// 8-byte alignment of bloomgate's bit arrays) is `ERR received bad
/// data`; a chunk that starts past the end is `ERR invalid offset - no
/// link found`; one that runs past the end of its layer is `ERR invalid
/// chunk - Too big for current filter`.
fn loadchunk(s: &mut Session, key: &[u8], iter: i64, data: &[u8], out: &mut Out) {
    let name = lossy(key);
    let exists = s.app.store.get(&name).is_some();
    if iter < 1 || (iter == 1 && exists) {
        // Only iteration 1 creates; a header cannot be loaded into a filter.
        return out.error(if exists { BAD_DATA } else { "ERR not found" });
    }
    match s.app.store.loadchunk(&name, iter as u64, data) {
        Ok(ack) => {
            s.ack = Some(ack);
            out.ok()
        }
        // Created meanwhile by another client.
        Err(StoreError::Exists(_)) => out.error(BAD_DATA),
        Err(e) => out.error(&error_reply(&e)),
    }
}

/// `BF.SCANDUMP key iter`.
fn scandump(s: &mut Session, key: &[u8], iter: &[u8], out: &mut Out) {
    let Some(n) = s.named(key) else {
        return out.error("ERR not found");
    };
    let Some(iter) = parse_i64(iter) else {
        return out.error("Second argument must be numeric");
    };
    // A negative iterator is past the end, as in RedisBloom.
    let (next, data) = match u64::try_from(iter) {
        Ok(iter) => match s.app.store.scandump(&n, iter) {
            Ok(r) => r,
            Err(e) => return out.error(&error_reply(&e)),
        },
        Err(_) => (0, Vec::new()),
    };
    out.array(2);
    out.int(next as i64);
    out.bulk(&data);
}

/// The information about the filter called `key`, or the error reply.
fn info_of(s: &Session, key: &[u8], out: &mut Out) -> Option<Info> {
    let Some(n) = s.named(key) else {
        out.error("ERR not found");
        return None;
    };
    match n.info(false) {
        Ok(i) => Some(i),
        Err(e) => {
            out.error(&error_reply(&e));
            None
        }
    }
}

/// `BF.INFO key [field]`. `Size` is the bytes this filter uses (its bit
/// arrays plus 64 per layer), not RedisBloom's figure for the same
/// parameters: the layouts differ.
fn info(s: &Session, key: &[u8], field: Option<&[u8]>, out: &mut Out) {
    let Some(info) = info_of(s, key, out) else {
        return;
    };
    let capacity = info.capacity as i64;
    let size = info.size_bytes as i64 + 64 * info.layers as i64;
    let filters = info.layers as i64;
    let items = info.items as i64;
    let expansion = info.expansion.map(i64::from);
    if let Some(field) = field {
        let (k, v) = match upper(field).as_slice() {
            b"CAPACITY" => (0, Some(capacity)),
            b"SIZE" => (1, Some(size)),
            b"FILTERS" => (2, Some(filters)),
            b"ITEMS" => (3, Some(items)),
            b"EXPANSION" => (4, expansion),
            _ => return out.error("Invalid information value"),
        };
        // One field: a one-entry map in RESP3, a one-element array in RESP2.
        if out.proto >= 3 {
            out.map(1);
            out.simple(INFO_FIELDS[k]);
        } else {
            out.array(1);
        }
        match v {
            Some(v) => out.int(v),
            None => out.null(),
        }
        return;
    }
    out.map(5);
    for (k, v) in INFO_FIELDS.into_iter().zip([
        Some(capacity),
        Some(size),
        Some(filters),
        Some(items),
        expansion,
    ]) {
        out.simple(k);
        match v {
            Some(v) => out.int(v),
            None => out.null(),
        }
    }
}

/// `BF.DEBUG key`: RedisBloom's reply, an array of bulk strings: the
/// line `size:<items>`, then per layer (oldest first)
/// `bytes:<n> bits:<n> hashes:<k> hashwidth:<w> capacity:<n> size:<items> ratio:<fp>`.
///
/// From bloomgate's layers: `bytes`/`bits` are the layer's bit array
/// (a multiple of 512 bits); `hashes` is the probes per item (in the
/// blocked layout of Redis-created filters all fall in one 512-bit
/// block); `hashwidth` is the bits of the layer's hash (64 for XXH3-64,
/// what new layers use, as RedisBloom's; 128 for layers of files from
/// before hash id 2); `capacity` is the items the layer was planned
/// for; `size` the items it took; `ratio` the false-positive rate it was
/// planned for (as RedisBloom's: half the requested rate for the first
/// layer of a scaling filter), printed as C's `%g`.
fn debug(s: &Session, key: &[u8], out: &mut Out) {
    let Some(info) = info_of(s, key, out) else {
        return;
    };
    out.array(1 + info.layer_info.len());
    out.bulk(format!("size:{}", info.items).as_bytes());
    for l in &info.layer_info {
        let line = format!(
            "bytes:{} bits:{} hashes:{} hashwidth:{} capacity:{} size:{} ratio:{}",
            l.bytes,
            l.bits,
            l.k,
            l.hash_bits,
            l.capacity,
            l.items,
            fmt_g(l.target_fp)
        );
        out.bulk(line.as_bytes());
    }
}

/// `v` as C's `printf("%g")` prints it: six significant digits, trailing
/// zeros dropped, exponent form below 1e-4 and from 1e6 on (`5e-07`).
fn fmt_g(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    // Rounded to six significant digits first: that fixes the exponent.
    let sci = format!("{v:.5e}");
    let (mantissa, exp) = sci.split_once('e').expect("exponent form");
    let exp: i32 = exp.parse().expect("integer exponent");
    let trim = |s: &str| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        trim(&format!("{v:.*}", (5 - exp) as usize))
    }
}

/// The replies to an add's outcomes (an array for `BF.MADD`/`BF.INSERT`).
pub(in crate::resp) fn add_replies(out: &mut Out, multi: bool, outcomes: &[AddOutcome]) {
    if multi {
        out.array(outcomes.len());
    }
    for o in outcomes {
        match o {
            AddOutcome::New => out.boolean(true),
            AddOutcome::Exists => out.boolean(false),
            AddOutcome::Full => out.error("ERR non scaling filter is full"),
            AddOutcome::NoRoom => out.error("Filter is full"),
            AddOutcome::TooLong => out.error("ERR item is too long"),
            AddOutcome::Invalid(e) => out.error(&format!("ERR invalid item: {e}")),
        }
    }
}

/// The reply to a queued `BF.EXISTS`/`BF.MEXISTS`; returns (lookups
/// answered, hits). An error is the whole reply: no partial answer.
pub(in crate::resp) fn exists_replies(out: &mut Out, multi: bool, checked: Checked) -> (u64, u64) {
    let verdicts = match checked {
        Ok(v) => v,
        Err(e) => {
            out.error(&error_reply(&e));
            return (0, 0);
        }
    };
    if multi {
        out.array(verdicts.len());
    }
    let (mut checks, mut hits) = (0, 0);
    for v in verdicts {
        match v {
            Ok(v) => {
                checks += 1;
                hits += v.hit as u64;
                out.boolean(v.hit)
            }
            Err(e) => out.error(&format!("ERR invalid item: {e}")),
        }
    }
    (checks, hits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fmt_g_prints_like_c() {
        for (v, want) in [
            (0.01, "0.01"),
            (0.0005, "0.0005"),
            (0.000625, "0.000625"),
            (5e-7, "5e-07"),
            (1e-15, "1e-15"),
            (0.1, "0.1"),
            (0.00012345678, "0.000123457"),
            (0.000099999999, "0.0001"),
            (0.5, "0.5"),
            (1.0, "1"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (0.0, "0"),
        ] {
            assert_eq!(fmt_g(v), want, "{v}");
        }
    }
}
