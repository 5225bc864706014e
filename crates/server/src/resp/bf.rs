//! The RedisBloom commands: `BF.RESERVE`, `BF.ADD`, `BF.MADD`,
//! `BF.INSERT`, `BF.EXISTS`, `BF.MEXISTS`, `BF.INFO`, `BF.CARD`,
//! `BF.DEBUG`, `BF.SCANDUMP`, `BF.LOADCHUNK`, with RedisBloom's replies
//! and error texts.

use bloomgate_url::KeyError;

use super::codec::Out;
use super::commands::{error_reply, lossy, parse_f64, parse_i64, upper};
use super::conn::{Conn, Later};
use bloomgate_blacklist::layers::{DEFAULT_EXPANSION, MAX_EXPANSION};
use bloomgate_blacklist::spec::check_rate;

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

impl Conn {
    /// `BF.LOADCHUNK key iter data`, with RedisBloom's error texts: a bad
    /// header, a header for an existing filter, an iterator below 1 for an
    /// existing filter, or a chunk that does not fit the iterator (or the
    /// 8-byte alignment of bloomgate's bit arrays) is `ERR received bad
    /// data`; a chunk that starts past the end is `ERR invalid offset - no
    /// link found`; one that runs past the end of its layer is `ERR invalid
    /// chunk - Too big for current filter`.
    pub(super) fn loadchunk(&mut self, argv: &[&[u8]], out: &mut Out) {
        let Some(iter) = parse_i64(argv[2]) else {
            return out.error("ERR Second argument must be numeric");
        };
        let name = lossy(argv[1]);
        let exists = self.app.store.get(&name).is_some();
        if iter < 1 || (iter == 1 && exists) {
            // Only iteration 1 creates; a header cannot be loaded into a filter.
            return out.error(if exists { BAD_DATA } else { "ERR not found" });
        }
        match self.app.store.loadchunk(&name, iter as u64, argv[3]) {
            Ok(ack) => {
                self.ack = Some(ack);
                out.ok()
            }
            // Created meanwhile by another client.
            Err(StoreError::Exists(_)) => out.error(BAD_DATA),
            Err(e) => out.error(&error_reply(&e)),
        }
    }

    pub(super) fn reserve(&mut self, argv: &[&[u8]], out: &mut Out) {
        let argc = argv.len();
        if !(4..=7).contains(&argc) {
            return Self::wrong_arity(out, argv[0]);
        }
        let Some(error) = parse_f64(argv[2]) else {
            return out.error("ERR bad error rate");
        };
        if check_rate(error).is_err() {
            return out.error(ERROR_RATE_RANGE);
        }
        let Some(capacity) = parse_i64(argv[3]) else {
            return out.error("ERR bad capacity");
        };
        if capacity <= 0 {
            return out.error(CAPACITY_RANGE);
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
                        return out.error("ERR no expansion");
                    };
                    expansion = Some(v);
                    i += 2;
                }
                _ => return out.error("ERR unknown argument received"),
            }
        }
        // RedisBloom's order: `EXPANSION 0` makes a non-scaling filter, any
        // other expansion conflicts with `NONSCALING`, then the range.
        let expansion = match expansion {
            None => DEFAULT_EXPANSION,
            Some(v) => {
                let Some(e) = parse_i64(v) else {
                    return out.error("ERR bad expansion");
                };
                if e == 0 {
                    nonscaling = true;
                } else if nonscaling {
                    return out.error("Nonscaling filters cannot expand");
                }
                if !EXPANSION_RANGE.contains(&e) {
                    return out.error(EXPANSION_RANGE_ERROR);
                }
                e as u32
            }
        };
        let spec = FilterSpec {
            fill: fill_policy(expansion, nonscaling),
            ..FilterSpec::new(capacity as u64, error)
        };
        match self.app.store.create(&lossy(argv[1]), &spec) {
            Ok(_) => out.ok(),
            Err(e) => out.error(&error_reply(&e)),
        }
    }

    /// `BF.INSERT`. Its option errors carry no `ERR ` prefix, as in RedisBloom.
    pub(super) fn insert(&mut self, argv: &[&[u8]], out: &mut Out) {
        let argc = argv.len();
        if argc < 4 {
            return Self::wrong_arity(out, argv[0]);
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
                        return Self::wrong_arity(out, argv[0]);
                    };
                    match parse_f64(v) {
                        Some(e) if check_rate(e).is_ok() => spec.rate = e,
                        _ => return out.error("Bad error rate"),
                    }
                    i += 2;
                }
                b"CAPACITY" => {
                    let Some(v) = argv.get(i + 1) else {
                        return Self::wrong_arity(out, argv[0]);
                    };
                    match parse_i64(v) {
                        Some(c) if c >= 1 => spec.items = c as u64,
                        _ => return out.error("Bad capacity"),
                    }
                    i += 2;
                }
                b"EXPANSION" => {
                    let Some(v) = argv.get(i + 1) else {
                        return Self::wrong_arity(out, argv[0]);
                    };
                    match parse_i64(v) {
                        Some(e) if EXPANSION_RANGE.contains(&e) => expansion = e,
                        _ => return out.error("Bad expansion"),
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
                _ => return out.error("Unknown argument received"),
            }
        }
        let Some(items_at) = items_at.filter(|&k| k < argc) else {
            return Self::wrong_arity(out, argv[0]);
        };
        spec.fill = fill_policy(expansion as u32, nonscaling || expansion == 0);
        let create = autocreate.then_some(spec);
        self.add(argv[1], &argv[items_at..], true, create, out)
    }

    pub(super) fn add(
        &mut self,
        key: &[u8],
        items: &[&[u8]],
        multi: bool,
        create: Option<FilterSpec>,
        out: &mut Out,
    ) {
        let name = lossy(key);
        let named = match self.app.store.get(&name) {
            Some(n) => n,
            None => {
                let Some(spec) = create else {
                    return out.error("ERR not found");
                };
                match self.app.store.create(&name, &spec) {
                    Ok(n) => n,
                    Err(StoreError::Exists(_)) => match self.app.store.get(&name) {
                        Some(n) => n,
                        None => return out.error("ERR not found"),
                    },
                    Err(e) => return out.error(&error_reply(&e)),
                }
            }
        };
        let batch = self.app.limits.max_batch.max(1);
        if self.queueing && items.len() <= batch {
            if let Some(rx) = self.app.store.add_later(&named, items) {
                self.later = Some(Later::Add { rx, multi });
                return;
            }
        }
        self.outcomes.clear();
        let mut outcomes = std::mem::take(&mut self.outcomes);
        // RedisBloom takes any number of items (the input budget bounds a
        // command's memory): more than a batch are added a batch at a
        // time, in order, with the same replies; the log is written in
        // order, so the last batch's acknowledgement covers the others.
        for part in items.chunks(batch) {
            match self.app.store.add(&named, part, &mut outcomes) {
                Ok(ack) => self.ack = Some(ack),
                Err(e) => {
                    self.outcomes = outcomes;
                    return out.error(&error_reply(&e));
                }
            }
            if matches!(outcomes.last(), Some(AddOutcome::Full)) {
                break;
            }
        }
        add_replies(out, multi, &outcomes);
        self.outcomes = outcomes;
    }

    pub(super) fn exists(&mut self, key: &[u8], items: &[&[u8]], multi: bool, out: &mut Out) {
        let batch = self.app.limits.max_batch.max(1);
        self.look_up(key);
        if self.last.named.is_none() {
            self.app
                .metrics
                .unknown_filter_lookups
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if self.app.limits.unknown_filter_error {
                return out.error("ERR not found");
            }
        }
        if self.queueing && items.len() <= batch {
            if let Some(rx) = self.last.named.as_ref().and_then(|n| n.check_later(items)) {
                self.items_checked += items.len() as u64;
                let filter = self.last.named.clone().expect("a filter");
                self.later = Some(Later::Check { rx, multi, filter });
                return;
            }
        }
        let start = out.buf.len();
        if multi {
            out.array(items.len());
        }
        self.items_checked += items.len() as u64;
        let l = &mut self.last;
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
            if let Err(e) = named.contains_batch(part, &mut self.lookup_scratch, &mut reply) {
                // No partial answer: the replies given so far are void.
                out.buf.truncate(start);
                return out.error(&error_reply(&e));
            }
        }
        l.checks += checks;
        l.hits += hits;
        self.hits += hits;
    }

    /// `BF.CARD key`: the items in the filter, 0 for a missing key.
    pub(super) fn card(&mut self, key: &[u8], out: &mut Out) {
        match self.named(key).map(|n| n.info(false)) {
            Some(Ok(i)) => out.int(i.items as i64),
            Some(Err(e)) => out.error(&error_reply(&e)),
            None => out.int(0),
        }
    }

    /// `BF.SCANDUMP key iter`.
    pub(super) fn scandump(&mut self, argv: &[&[u8]], out: &mut Out) {
        let Some(n) = self.named(argv[1]) else {
            return out.error("ERR not found");
        };
        let Some(iter) = parse_i64(argv[2]) else {
            return out.error("Second argument must be numeric");
        };
        // A negative iterator is past the end, as in RedisBloom.
        let (next, data) = match u64::try_from(iter) {
            Ok(iter) => match self.app.store.scandump(&n, iter) {
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
    fn info_of(&self, key: &[u8], out: &mut Out) -> Option<Info> {
        let Some(n) = self.named(key) else {
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
    pub(super) fn info(&mut self, argv: &[&[u8]], out: &mut Out) {
        let Some(info) = self.info_of(argv[1], out) else {
            return;
        };
        let capacity = info.capacity as i64;
        let size = info.size_bytes as i64 + 64 * info.layers as i64;
        let filters = info.layers as i64;
        let items = info.items as i64;
        let expansion = info.expansion.map(i64::from);
        if let Some(field) = argv.get(2) {
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
    /// block); `hashwidth` is 128 (one XXH3-128 hash per item, where
    /// RedisBloom says 64); `capacity` is the items the layer was planned
    /// for; `size` the items it took; `ratio` the false-positive rate it was
    /// planned for (as RedisBloom's: half the requested rate for the first
    /// layer of a scaling filter), printed as C's `%g`.
    pub(super) fn debug(&self, key: &[u8], out: &mut Out) {
        let Some(info) = self.info_of(key, out) else {
            return;
        };
        out.array(1 + info.layer_info.len());
        out.bulk(format!("size:{}", info.items).as_bytes());
        for l in &info.layer_info {
            let line = format!(
                "bytes:{} bits:{} hashes:{} hashwidth:128 capacity:{} size:{} ratio:{}",
                l.bytes,
                l.bits,
                l.k,
                l.capacity,
                l.items,
                fmt_g(l.target_fp)
            );
            out.bulk(line.as_bytes());
        }
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
pub(super) fn add_replies(out: &mut Out, multi: bool, outcomes: &[AddOutcome]) {
    if multi {
        out.array(outcomes.len());
    }
    for o in outcomes {
        match o {
            AddOutcome::New => out.boolean(true),
            AddOutcome::Exists => out.boolean(false),
            AddOutcome::Full => out.error("ERR non scaling filter is full"),
            AddOutcome::TooLong => out.error("ERR item is too long"),
            AddOutcome::Invalid(e) => out.error(&format!("ERR invalid item: {e}")),
        }
    }
}

/// The reply to a queued `BF.EXISTS`/`BF.MEXISTS`; returns (lookups
/// answered, hits). An error is the whole reply: no partial answer.
pub(super) fn exists_replies(out: &mut Out, multi: bool, checked: Checked) -> (u64, u64) {
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
