//! The `.cf` codec: pinned bytes, round trips, and every fault refused.

use super::*;
use bloomgate_engine::Table;

fn header(layout: CfLayout) -> CfHeader {
    CfHeader {
        layout,
        id: 7,
        seq: 42,
        capacity: 1000,
        bucket_size: 2,
        max_iterations: 20,
        expansion: 1,
        error_rate: 0.01,
        items: 3,
        deletes: 1,
        subs: Vec::new(),
        body_hash: 0,
        bgf: None,
    }
}

/// A chain's header and table images for `layout`, with three items.
fn file(layout: CfLayout, tables: usize) -> (CfHeader, Vec<Vec<u8>>) {
    let mut ts = Vec::new();
    for t in 0..tables {
        let table = DeletableTable::new(layout.kind(), 100 << t, 0.01, 2, 20, 9 + t as u64, (0, 0))
            .unwrap();
        for i in 0..3u32 {
            table.insert(&i.to_le_bytes()).unwrap();
        }
        ts.push(table);
    }
    let mut h = header(layout);
    let images: Vec<TableImage<'_>> = ts.iter().map(TableImage::of).collect();
    h.describe(&images);
    let body = images.iter().map(|i| i.pieces().concat()).collect();
    (h, body)
}

/// The header's bytes are pinned: a change of the frame or of the JSON
/// field names or order cannot slip in unnoticed.
#[test]
fn golden_cf_header_bytes() {
    let mut h = header(CfLayout::Cuckoo);
    h.subs = vec![64, 128];
    h.body_hash = 0x0123_4567_89ab_cdef;
    let bytes = encode(&h, &[]);
    let json = br#"{"id":7,"seq":42,"capacity":1000,"bucket_size":2,"max_iterations":20,"expansion":1,"error_rate":0.01,"items":3,"deletes":1,"subs":[64,128],"body_hash":81985529216486895}"#;
    assert_eq!(&bytes[..8], b"BGCUCKO1");
    assert_eq!(&bytes[8..12], &(json.len() as u32).to_le_bytes());
    assert_eq!(&bytes[12..12 + json.len()], json);
    assert_eq!(bytes.len(), 12 + json.len() + 8);
    assert_eq!(
        bytes[bytes.len() - 8..],
        xxh3_64(&bytes[..bytes.len() - 8]).to_le_bytes()
    );
    // A counting filter says so; the export hashes follow the body hash.
    let mut h = header(CfLayout::Counting);
    h.bgf = Some(vec![5]);
    let json = String::from_utf8(h.to_json()).unwrap();
    assert!(
        json.starts_with(r#"{"layout":"counting","id":7,"#),
        "{json}"
    );
    assert!(json.ends_with(r#""body_hash":0,"bgf":[5]}"#), "{json}");
    // The dump's header chunk: its magic line, then the same JSON.
    let dump = encode_dump_header(&h);
    assert_eq!(&dump[..DUMP_MAGIC.len()], b"BLOOMGATE-CF-DUMP-1\n");
    assert_eq!(&dump[DUMP_MAGIC.len()..], json.as_bytes());
}

/// What is written reads back the same, from bytes and from a file, for
/// both layouts; [`write`] streams exactly what [`encode`] builds.
#[test]
fn cf_file_round_trip_both_layouts() {
    let dir = tempfile::tempdir().unwrap();
    for (layout, tables) in [(CfLayout::Cuckoo, 3), (CfLayout::Counting, 1)] {
        let (h, body) = file(layout, tables);
        let bytes = encode(&h, &body);
        let images: Vec<TableImage<'_>> = body
            .iter()
            .map(|b| TableImage {
                head: Vec::new(),
                data: b,
            })
            .collect();
        let mut streamed = Vec::new();
        write(&mut streamed, &h, &images).unwrap();
        assert_eq!(streamed, bytes);
        let p = dir.path().join("t.cf");
        std::fs::write(&p, &bytes).unwrap();
        for c in [decode(&bytes).unwrap(), load(&p).unwrap()] {
            assert_eq!(c.header, h);
            assert_eq!(c.tables.len(), tables);
            assert_eq!((c.kind, c.mode), (KeyKind::Raw, MatchMode::Exact));
            assert!(c.tables.iter().all(|t| t.layout() == layout.kind()));
            assert!(c.tables[0].contains(&1u32.to_le_bytes()));
        }
    }
}

/// Any flipped byte or cut is refused, from bytes and from a file alike,
/// with the same error.
#[test]
fn cf_file_damage_is_refused_the_same_way_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let (h, body) = file(CfLayout::Cuckoo, 2);
    let bytes = encode(&h, &body);
    let on_disk = |b: &[u8]| {
        let p = dir.path().join("t.cf");
        std::fs::write(&p, b).unwrap();
        load(&p).err()
    };
    for at in [0, 9, 20, bytes.len() / 2, bytes.len() - 1] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x40;
        assert!(decode(&bad).is_err(), "byte {at}");
        assert_eq!(on_disk(&bad), decode(&bad).err(), "byte {at}");
    }
    for cut in [0, 5, 8, 15, 19, 30, bytes.len() - 1] {
        assert_eq!(on_disk(&bytes[..cut]), decode(&bytes[..cut]).err(), "{cut}");
        assert!(decode(&bytes[..cut]).is_err());
    }
    assert_eq!(decode(b"").err(), Some(CfFileError::BadMagic));
    // The same bytes read as the other layout are refused, not misread.
    let mut other = h.clone();
    other.layout = CfLayout::Counting;
    assert!(matches!(
        decode_body(other, &body.concat()),
        Err(CfFileError::Table(_))
    ));
}

/// The header's numbers are checked before they size anything: the one
/// table limit, overflowing lengths, rates, counts.
#[test]
fn cf_header_check_refuses_what_cannot_be() {
    let mut h = header(CfLayout::Cuckoo);
    h.subs = vec![64; MAX_TABLES];
    assert_eq!(h.check(), Ok(64 * MAX_TABLES as u64));
    h.subs.push(64);
    assert_eq!(h.check(), Err(CfFileError::Tables(MAX_TABLES + 1)));
    h.subs = Vec::new();
    assert_eq!(h.check(), Err(CfFileError::Tables(0)));
    h.subs = vec![u64::MAX, 1];
    assert_eq!(h.check(), Err(CfFileError::LengthsOverflow));
    for bad in [0.0, 1.0, f64::NAN, -0.5] {
        let h = CfHeader {
            error_rate: bad,
            subs: vec![64],
            ..header(CfLayout::Cuckoo)
        };
        assert_eq!(h.check(), Err(CfFileError::Parameters), "{bad}");
    }
    let h = CfHeader {
        items: 257,
        subs: vec![64],
        ..header(CfLayout::Cuckoo)
    };
    assert!(matches!(h.check(), Err(CfFileError::TooManyItems { .. })));
    // A counting filter counts repeated adds: no bound from its size.
    assert!(CfHeader {
        layout: CfLayout::Counting,
        ..h
    }
    .check()
    .is_ok());
}

/// A `CF.LOADCHUNK` header: RedisBloom's "Invalid header" for anything
/// that is not one, the size limit before any allocation.
#[test]
fn cf_dump_header_is_checked_before_it_sizes_anything() {
    let (h, body) = file(CfLayout::Cuckoo, 2);
    let chunk = encode_dump_header(&h);
    let total: u64 = body.iter().map(|b| b.len() as u64).sum();
    assert_eq!(parse_dump_header(&chunk, 1 << 30), Ok((h.clone(), total)));
    assert_eq!(
        parse_dump_header(&chunk, total - 1),
        Err(CfFileError::TooLarge {
            bytes: total,
            limit: total - 1
        })
    );
    for bad in [&b""[..], b"BLOOMGATE-CF-DUMP-1\n{", &chunk[1..]] {
        assert_eq!(
            parse_dump_header(bad, 1 << 30),
            Err(CfFileError::DumpHeader)
        );
    }
    let mut many = h;
    many.subs = vec![64; MAX_TABLES + 1];
    assert_eq!(
        parse_dump_header(&encode_dump_header(&many), 1 << 30),
        Err(CfFileError::DumpHeader)
    );
    // Once complete, the body is checked against the header's hash.
    let (h, body) = file(CfLayout::Cuckoo, 2);
    let mut flat = body.concat();
    assert!(decode_body(h.clone(), &flat).is_ok());
    flat[3] ^= 1;
    assert_eq!(decode_body(h, &flat).err(), Some(CfFileError::BodyChecksum));
}
