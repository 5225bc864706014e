//! Fuzz targets: every parser that reads bytes from outside the process.
//!
//! Each target takes arbitrary bytes and must return without panicking,
//! hanging or allocating without bound, whatever they are; where a parser
//! has a round trip or an invariant, the target asserts it too (a failed
//! assertion is a finding like a crash). The AFL++ binary
//! (`src/bin/fuzz.rs`, built by `scripts/fuzz.sh`) runs one target chosen
//! by name; `tests/replay.rs` runs every target over its corpus
//! (`fuzz/corpus/TARGET/`) and the inputs that once failed
//! (`fuzz/regressions/TARGET/`, when there are any) in the ordinary test
//! run.
//!
//! ```
//! bloomgate_fuzz::run("url", b"HTTP://WWW.Evil.COM:80/a/./b/../c#top");
//! ```

use bloomgate_url::{KeyKind, MatchMode};

/// The targets, by name.
pub const TARGETS: [&str; 17] = [
    "resp",
    "socketmap",
    "http_json",
    "bgf_header",
    "deletable_header",
    "ribbon",
    "delta",
    "log",
    "journal",
    "dump",
    "cf_dump",
    "cf_file",
    "meta",
    "whitelist",
    "whitelist_file",
    "url",
    "squid",
];

/// Runs target `name` on `data`. Panics on an unknown name.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "resp" => resp(data),
        "socketmap" => socketmap(data),
        "http_json" => http_json(data),
        "bgf_header" => bgf_header(data),
        "log" => log(data),
        "journal" => journal(data),
        "dump" => dump(data),
        "deletable_header" => deletable_header(data),
        "ribbon" => ribbon(data),
        "delta" => delta(data),
        "cf_dump" => cf_dump(data),
        "cf_file" => cf_file(data),
        "meta" => meta(data),
        "whitelist" => whitelist(data),
        "whitelist_file" => whitelist_file(data),
        "url" => url(data),
        "squid" => squid(data),
        other => panic!("unknown fuzz target {other:?}"),
    }
}

/// The Redis-protocol framing: as many commands as parse from the bytes,
/// with small caps so that the limits are reached too. Every argument range
/// lies inside the buffer, and a parsed command consumes at least one byte.
pub fn resp(data: &[u8]) {
    let mut args = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        match bloomgate_server::resp::parse(&data[pos..], 1 << 12, 64, &mut args) {
            Ok(Some(used)) => {
                assert!(used > 0 && pos + used <= data.len());
                for r in &args {
                    assert!(r.start <= r.end && r.end <= used, "{r:?} outside {used}");
                }
                pos += used;
            }
            Ok(None) | Err(_) => break,
        }
    }
}

/// Postfix socketmap requests: as many netstrings as parse from the bytes
/// (a small limit, so that it is reached too), each split into a request;
/// every frame lies inside the buffer and within the limit, a promised
/// length is past what is there, and a reply built from the request
/// parses back whole.
pub fn socketmap(data: &[u8]) {
    use bloomgate_server::socketmap::netstring::{self, Parsed, Reply};
    let max = 64;
    let mut pos = 0;
    while pos < data.len() {
        match netstring::parse(&data[pos..], max) {
            Ok(Parsed::Frame { payload, consumed }) => {
                assert!(payload.end < consumed && pos + consumed <= data.len());
                assert!(payload.len() <= max);
                let p = &data[pos..][payload];
                let mut out = Vec::new();
                match netstring::request(p) {
                    Ok(r) => netstring::reply(&mut out, Reply::Ok(r.key)),
                    Err(e) => netstring::reply(&mut out, Reply::Perm(&e.to_string())),
                }
                let back = netstring::parse(&out, netstring::MAX_NETSTRING);
                assert!(
                    matches!(back, Ok(Parsed::Frame { consumed, .. }) if consumed == out.len()),
                    "{back:?}"
                );
                pos += consumed;
            }
            Ok(Parsed::Need(n)) => {
                assert!(n.is_none_or(|n| n > data.len() - pos));
                break;
            }
            Err(_) => break,
        }
    }
}

/// Squid helper request lines, under both helper kinds, with and without
/// channel IDs: a channel ID read is a prefix of digits of the line, and
/// each answer to it is exactly one line without control bytes.
pub fn squid(data: &[u8]) {
    use bloomgate_squid::protocol::{parse_line, write_answer, Answer, Kind};
    for line in data.split(|&b| b == b'\n') {
        for (concurrency, kind) in [
            (false, Kind::Acl),
            (true, Kind::Acl),
            (false, Kind::Rewrite),
            (true, Kind::Rewrite),
        ] {
            let r = parse_line(line, concurrency, kind, line.len() % 7 == 0);
            if let Some(id) = r.channel {
                assert!(concurrency && line.starts_with(id));
                assert!(id.iter().all(u8::is_ascii_digit));
            }
            let first = r.queries.as_ref().ok().and_then(|q| q.first());
            let query = first.map(|q| q.as_ref()).unwrap_or(b"");
            let text = String::from_utf8_lossy(line);
            for answer in [
                Answer::NotListed,
                Answer::Unknown(&text),
                Answer::Listed {
                    category: "cat",
                    matched: line,
                    query,
                },
            ] {
                let mut out = Vec::new();
                write_answer(
                    &mut out,
                    r.channel,
                    kind,
                    "http://b.example/?u=%u&t=%t%",
                    answer,
                );
                assert_eq!(
                    out.iter().position(|&b| b < b' ' || b == 0x7f),
                    Some(out.len() - 1)
                );
                assert_eq!(out.last(), Some(&b'\n'));
            }
        }
    }
}

/// HTTP batch bodies (`["a", …]` or `{"items": […]}`).
pub fn http_json(data: &[u8]) {
    let _ = bloomgate_server::http::parse_item_list(data);
}

/// A `.bgf` header, checked against a file of every plausible length.
pub fn bgf_header(data: &[u8]) {
    let (lens, header) = data.split_at(data.len().min(8));
    let mut len = [0u8; 8];
    len[..lens.len()].copy_from_slice(lens);
    let file_len = u64::from_le_bytes(len);
    for l in [file_len, header.len() as u64, 4096, u64::MAX] {
        if let Ok(h) = bloomgate_engine::Header::decode(header, l) {
            // What decodes re-encodes to a header that decodes the same.
            let again = h.encode();
            let back = bloomgate_engine::Header::decode(&again, l).expect("re-encoded header");
            assert_eq!(format!("{h:?}"), format!("{back:?}"));
        }
    }
}

/// Write-ahead-log segments (the journal's format too): records are read up
/// to the first damaged one, and what was kept plus what was discarded is
/// the whole segment.
pub fn log(data: &[u8]) {
    let mut n = 0u64;
    let rep = bloomgate_blacklist::wal::read_bytes(data, |_| n += 1);
    assert_eq!(rep.records, n);
    assert!(rep.lost_bytes <= data.len() as u64);
    // Fed behind a valid magic as well, so the records themselves are reached.
    let mut seg = bloomgate_blacklist::wal::MAGIC.to_vec();
    seg.extend_from_slice(data);
    let rep = bloomgate_blacklist::wal::read_bytes(&seg, |_| {});
    assert!(rep.lost_bytes <= data.len() as u64);
    salvage(data);
    salvage(&seg);
}

/// The resynchronising reader of `bloomgate repair` agrees with the plain
/// reader: the same intact prefix; records after the fault exactly when the
/// fault is damage rather than a torn tail; kept and lost stretches tile the
/// file; the repaired copy reads whole, with every kept record.
fn salvage(bytes: &[u8]) {
    use bloomgate_blacklist::wal::{self, FaultKind};
    let rep = wal::read_bytes_all(bytes, |_| {});
    let s = wal::salvage(bytes);
    let mut at = wal::MAGIC.len().min(bytes.len());
    let mut spans: Vec<(usize, usize)> = s.kept.iter().map(|r| (r.start, r.end)).collect();
    spans.extend(
        s.lost
            .iter()
            .map(|l| (l.offset as usize, (l.offset + l.len) as usize)),
    );
    spans.sort();
    if s.lost.first().is_some_and(|l| l.offset == 0) {
        at = 0;
    }
    for (a, b) in spans {
        assert_eq!(a, at);
        at = b;
    }
    assert_eq!(at, bytes.len());
    match &rep.fault {
        None => assert!(s.lost.is_empty() && s.kept.len() as u64 == rep.records),
        Some(f) => {
            let after = s.kept.iter().filter(|r| r.start as u64 > f.offset).count();
            match f.kind {
                FaultKind::TornTail => {
                    assert_eq!(after, 0);
                    assert!(!s.damaged());
                }
                FaultKind::Damaged => assert!(after > 0 || f.offset == 0),
            }
        }
    }
    let repaired = s.repaired(bytes);
    let again = wal::read_bytes_all(&repaired, |_| {});
    assert_eq!((again.records, again.fault), (s.kept.len() as u64, None));
}

/// A `NAME.live` journal on disk, read by its owner (which cuts a torn tail
/// off the file, and leaves any other damage as it is) and then appended
/// to: the append must be readable.
pub fn journal(data: &[u8]) {
    use bloomgate_blacklist::journal;
    let dir = std::env::temp_dir().join(format!("bloomgate-fuzz-journal-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = journal::path(&dir, "f");
    let mut bytes = bloomgate_blacklist::wal::MAGIC.to_vec();
    bytes.extend_from_slice(data);
    std::fs::write(&path, &bytes).expect("write journal");
    let before = journal::load(&path, journal::Repair::Truncate).expect("load");
    if before.report.damage().is_some() {
        // Damage other than a torn tail: left exactly as it was, and
        // compaction refuses to rewrite it.
        assert_eq!(std::fs::read(&path).expect("read journal"), bytes);
        assert!(journal::compact(&path, "f").is_err());
        assert_eq!(std::fs::read(&path).expect("read journal"), bytes);
        return;
    }
    let mut rec = Vec::new();
    bloomgate_blacklist::wal::encode_add(&mut rec, "f", 7, b"after");
    journal::append(&path, &rec).expect("append");
    let after = journal::load(&path, journal::Repair::No).expect("reload");
    assert_eq!(after.contents.adds.len(), before.contents.adds.len() + 1);
    assert_eq!(after.report.lost_bytes, 0);
    if let Ok(c) = journal::compact(&path, "f") {
        assert!(c.after <= c.before);
    }
}

/// The header chunk of a `BF.LOADCHUNK` stream: what is accepted
/// validates, counts at most one item per bit, and its rate math ends.
pub fn dump(data: &[u8]) {
    let mut with_magic = b"BLOOMGATE-DUMP-1\n".to_vec();
    with_magic.extend_from_slice(data);
    for bytes in [data, &with_magic[..]] {
        if let Ok((specs, growth)) = bloomgate_server::store::parse_dump_header(bytes, 1 << 30) {
            assert!(!specs.is_empty());
            for (p, items) in specs {
                p.validate().expect("accepted parameters validate");
                assert!(items <= p.bits, "{items} items in {} bits", p.bits);
                let fp = p.layout.predicted_fp(p.bits, items as f64, p.k);
                assert!((0.0..=1.0).contains(&fp));
            }
            if let Some(m) = growth {
                m.validate().expect("accepted growth settings validate");
            }
        }
    }
}

/// The header of a counting or cuckoo filter file (inside `NAME.cf` and
/// the `.bgf` the CLI builds for deletable filters): what decodes
/// re-encodes to the same header, and its counts fit its geometry.
pub fn deletable_header(data: &[u8]) {
    use bloomgate_engine::format::DeletableHeader;
    let (lens, header) = data.split_at(data.len().min(8));
    let mut len = [0u8; 8];
    len[..lens.len()].copy_from_slice(lens);
    let file_len = u64::from_le_bytes(len);
    for l in [file_len, header.len() as u64, 4096, u64::MAX] {
        if let Ok(h) = DeletableHeader::decode(header, l) {
            assert!(h.planned_items > 0 && h.target_fp > 0.0 && h.target_fp < 1.0);
            let again = h.encode();
            let back = DeletableHeader::decode(&again, l).expect("re-encoded header");
            assert_eq!(format!("{h:?}"), format!("{back:?}"));
        }
    }
}

/// A static ribbon file's header and shard directory, as opening one
/// checks them, from the bytes as they are and with the header checksum
/// made valid (so the fields and the directory are reached). What decodes
/// has every shard's solution inside the bytes, and its header re-encodes
/// to one that decodes the same.
pub fn ribbon(data: &[u8]) {
    use bloomgate_engine::format::HEADER_LEN;
    use bloomgate_engine::ribbon::{decode_file, reseal_header, RibbonHeader};
    let mut sealed = data.to_vec();
    if sealed.len() >= HEADER_LEN {
        reseal_header(&mut sealed);
    }
    for bytes in [data, &sealed[..]] {
        let Ok((h, entries)) = decode_file(bytes) else {
            continue;
        };
        assert_eq!(entries.len() as u64, h.shards);
        let solution = HEADER_LEN as u64 + h.directory_len();
        for e in &entries {
            let end = solution + (e.offset + e.words(h.columns)) * 16;
            assert!(end <= bytes.len() as u64, "{e:?} ends past the file");
        }
        assert_eq!(entries.iter().map(|e| e.keys as u64).sum::<u64>(), h.items);
        let back =
            RibbonHeader::decode(&h.encode(), bytes.len() as u64).expect("re-encoded header");
        assert_eq!(back, h);
    }
}

/// A static list's delta file (`NAME.bgf.delta`, the keys added since its
/// build: the library's `delta::DeltaKeys::decode`), as read, and with its
/// header checksum resealed so that the records behind it are reached:
/// refused or accepted, never a panic; what is accepted holds exactly the
/// keys it counted, each within the key limit, filling the file.
pub fn delta(data: &[u8]) {
    use bloomgate_blacklist::delta::{DeltaKeys, DELTA_HEADER_LEN, MAX_DELTA_KEY};
    let path = std::path::Path::new("fuzz.delta");
    let mut sealed = data.to_vec();
    if sealed.len() >= DELTA_HEADER_LEN {
        let sum = xxhash_rust::xxh3::xxh3_64(&sealed[..24]);
        sealed[24..32].copy_from_slice(&sum.to_le_bytes());
    }
    for bytes in [data, &sealed[..]] {
        let Ok(keys) = DeltaKeys::decode(path, bytes.to_vec()) else {
            continue;
        };
        assert_eq!(keys.iter().count() as u64, keys.len());
        assert!(keys.iter().all(|k| k.len() <= MAX_DELTA_KEY));
        let stored: usize = keys.iter().map(|k| k.len() + 8).sum();
        assert_eq!(
            DELTA_HEADER_LEN + stored,
            bytes.len(),
            "records fill the file"
        );
    }
}

/// The header chunk of a `CF.LOADCHUNK` stream (the library's
/// `cf_file::parse_dump_header`): refused or accepted, never a panic; what
/// is accepted fits the size limit it was given, passes the header's
/// checks, and re-encodes to a chunk that parses to the same header.
pub fn cf_dump(data: &[u8]) {
    use bloomgate_blacklist::cf_file;
    let mut with_magic = cf_file::DUMP_MAGIC.to_vec();
    with_magic.extend_from_slice(data);
    for bytes in [data, &with_magic[..]] {
        if let Ok((h, total)) = cf_file::parse_dump_header(bytes, 1 << 30) {
            assert!(total <= 1 << 30);
            assert_eq!(h.check(), Ok(total));
            assert!(h.subs.len() <= bloomgate_engine::MAX_TABLES);
            let again = cf_file::encode_dump_header(&h);
            let back = cf_file::parse_dump_header(&again, 1 << 30).expect("re-encoded header");
            assert_eq!(back, (h, total));
        }
        // The server's entry point agrees with the library's.
        assert_eq!(
            bloomgate_server::store::parse_cf_dump_header(bytes, 1 << 30).is_ok(),
            cf_file::parse_dump_header(bytes, 1 << 30).is_ok()
        );
    }
}

/// A `NAME.cf` file as the library's codec reads it (magic, header length,
/// JSON header, tables, checksum). The bytes are also fed behind the magic,
/// and with a valid trailing checksum, so the header and the tables are
/// reached and not only the checksum test. What decodes has a header that
/// passes its checks and describes its tables, and encodes back to the
/// same bytes.
pub fn cf_file(data: &[u8]) {
    use bloomgate_blacklist::cf_file;
    let mut file = cf_file::FILE_MAGIC.to_vec();
    file.extend_from_slice(data);
    let sum = xxhash_rust::xxh3::xxh3_64(&file);
    file.extend_from_slice(&sum.to_le_bytes());
    for bytes in [data, &file[..]] {
        if let Ok(c) = cf_file::decode(bytes) {
            let total = c
                .header
                .check()
                .expect("a decoded header passes its checks");
            assert_eq!(c.tables.len(), c.header.subs.len());
            let images: Vec<cf_file::TableImage<'_>> =
                c.tables.iter().map(cf_file::TableImage::of).collect();
            assert_eq!(images.iter().map(|i| i.len()).sum::<u64>(), total);
        }
        let _ = bloomgate_server::store::check_cf_file(bytes);
    }
}

/// A `NAME.bgf.meta` (growth settings and fill policy): what parses is in
/// range, and written back parses to the same settings.
pub fn meta(data: &[u8]) {
    use bloomgate_blacklist::layers::Meta;
    let path = std::path::Path::new("f.bgf.meta");
    if let Ok(m) = Meta::parse_file(data, path) {
        m.validate().expect("parsed settings validate");
        let again = serde_json::to_vec(&m).expect("serialize");
        let back = Meta::parse_file(&again, path).expect("round trip");
        assert_eq!(m, back);
    }
}

/// A `NAME.bgf.whitelist` on disk, loaded as the server and the CLI load
/// it: a file that loads, saved and loaded again, is the same set.
pub fn whitelist_file(data: &[u8]) {
    use bloomgate_blacklist::Whitelist;
    let dir = std::env::temp_dir().join(format!("bloomgate-fuzz-wl-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("f.bgf.whitelist");
    std::fs::write(&path, data).expect("write whitelist");
    if let Ok(w) = Whitelist::load(&path) {
        std::fs::write(&path, w.to_bytes()).expect("rewrite whitelist");
        let back = Whitelist::load(&path).expect("reload");
        assert_eq!(w, back);
    }
}

/// Whitelist files: what parses, saved and parsed again, is the same set.
pub fn whitelist(data: &[u8]) {
    let mut file = b"# bloomgate whitelist v1\n".to_vec();
    file.extend_from_slice(data);
    for bytes in [data, &file[..]] {
        if let Ok(w) = bloomgate_blacklist::Whitelist::parse(bytes) {
            let again = bloomgate_blacklist::Whitelist::parse(&w.to_bytes()).expect("round trip");
            assert_eq!(w, again);
        }
    }
}

/// URL canonicalization and key extraction for every key kind and mode:
/// canonicalizing is idempotent, expressions are bounded.
pub fn url(data: &[u8]) {
    if let Ok(c) = bloomgate_url::canonicalize(data) {
        let again =
            bloomgate_url::canonicalize(c.as_bytes()).expect("canonical form canonicalizes");
        assert_eq!(c, again, "canonicalization is not idempotent");
    }
    if let Ok(e) = bloomgate_url::expressions(data) {
        assert!(e.len() <= bloomgate_url::MAX_EXPRESSIONS);
    }
    let _ = bloomgate_url::canonical_host(data);
    let mut scratch = Vec::new();
    for kind in [KeyKind::Url, KeyKind::Host, KeyKind::Email, KeyKind::Raw] {
        for mode in [MatchMode::Exact, MatchMode::Prefix] {
            let _ = bloomgate_url::entry_key(kind, mode, data);
            let _ = bloomgate_url::query_keys(kind, mode, data, &mut scratch);
        }
    }
}
