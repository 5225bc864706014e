//! Replies in which bloomgate answers exactly as the RedisBloom module does:
//! reply shapes and error texts, pinned as literals (RedisBloom's own
//! answers to the same commands), over RESP2 and RESP3, through our RESP
//! client (exact types), `redis-cli` and redis-py.

use std::process::Command;

use testkit::{Resp, Server, V};

fn simple(s: &str) -> V {
    V::Simple(s.into())
}

fn ok() -> V {
    simple("OK")
}

/// A client on a RESP3 connection.
fn resp3(s: &Server) -> Resp {
    let mut c = s.resp();
    assert!(matches!(c.cmd(&["HELLO", "3"]), V::Map(_)));
    c
}

/// The filter's `BF.DEBUG` layer lines, split into `(field, value)` pairs.
fn debug_layers(c: &mut Resp, key: &str) -> Vec<Vec<(String, String)>> {
    let v = c.cmd(&["BF.DEBUG", key]);
    v.arr()[1..]
        .iter()
        .map(|l| {
            let V::Bulk(b) = l else { panic!("{l:?}") };
            String::from_utf8(b.clone())
                .unwrap()
                .split(' ')
                .map(|kv| {
                    let (k, v) = kv.split_once(':').unwrap();
                    (k.to_string(), v.to_string())
                })
                .collect()
        })
        .collect()
}

fn field<'a>(line: &'a [(String, String)], name: &str) -> &'a str {
    &line.iter().find(|(k, _)| k == name).unwrap().1
}

#[test]
fn expansion_zero_makes_a_nonscaling_filter_and_the_range_is_redisbloom_s() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let mut c = s.resp();
    let reserve = |c: &mut Resp, key: &str, rest: &[&str]| {
        let mut a = vec!["BF.RESERVE", key, "0.01", "2"];
        a.extend_from_slice(rest);
        c.cmd(&a)
    };
    assert_eq!(reserve(&mut c, "e0", &["EXPANSION", "0"]), ok());
    assert_eq!(c.cmd(&["BF.INFO", "e0", "EXPANSION"]), V::Arr(vec![V::Nil]));
    assert_eq!(c.cmd(&["BF.MADD", "e0", "a", "b"]).arr().len(), 2);
    assert_eq!(
        c.cmd(&["BF.ADD", "e0", "c"]).err(),
        "ERR non scaling filter is full"
    );
    assert_eq!(
        c.cmd(&["BF.INFO", "e0", "FILTERS"]),
        V::Arr(vec![V::Int(1)])
    );
    assert_eq!(
        reserve(&mut c, "e0n", &["NONSCALING", "EXPANSION", "0"]),
        ok()
    );
    assert_eq!(
        reserve(&mut c, "e0m", &["EXPANSION", "0", "NONSCALING"]),
        ok()
    );
    assert_eq!(reserve(&mut c, "emax", &["EXPANSION", "32768"]), ok());
    assert_eq!(
        c.cmd(&["BF.INFO", "emax", "EXPANSION"]),
        V::Arr(vec![V::Int(32768)])
    );
    for bad in ["-1", "32769", "4294967297"] {
        assert_eq!(
            reserve(&mut c, "x", &["EXPANSION", bad]).err(),
            "ERR expansion must be in the range [0, 32768]",
            "{bad}"
        );
    }
    assert_eq!(
        reserve(&mut c, "x", &["EXPANSION", "two"]).err(),
        "ERR bad expansion"
    );
    assert_eq!(
        reserve(&mut c, "x", &["EXPANSION"]).err(),
        "ERR no expansion"
    );
    for rest in [
        &["NONSCALING", "EXPANSION", "2"][..],
        &["EXPANSION", "2", "NONSCALING"],
        &["NONSCALING", "EXPANSION", "99999"],
    ] {
        assert_eq!(
            reserve(&mut c, "x", rest).err(),
            "Nonscaling filters cannot expand",
            "{rest:?}"
        );
    }

    // BF.INSERT: the same range, its own text.
    let v = c.cmd(&["BF.INSERT", "i0", "EXPANSION", "0", "ITEMS", "a"]);
    assert_eq!(v, V::Arr(vec![V::Int(1)]));
    assert_eq!(c.cmd(&["BF.INFO", "i0", "EXPANSION"]), V::Arr(vec![V::Nil]));
    let v = c.cmd(&["BF.INSERT", "imax", "EXPANSION", "32768", "ITEMS", "a"]);
    assert_eq!(v, V::Arr(vec![V::Int(1)]));
    for bad in ["-1", "32769", "x"] {
        assert_eq!(
            c.cmd(&["BF.INSERT", "x", "EXPANSION", bad, "ITEMS", "a"])
                .err(),
            "Bad expansion",
            "{bad}"
        );
    }
    assert_eq!(c.cmd(&["EXISTS", "x"]).int(), 0);
}

#[test]
fn info_with_one_field_is_a_map_in_resp3_and_an_array_in_resp2() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let mut c2 = s.resp();
    let mut c3 = resp3(&s);
    assert_eq!(c2.cmd(&["BF.RESERVE", "bf", "0.001", "100"]), ok());
    assert_eq!(
        c2.cmd(&["BF.RESERVE", "ns", "0.01", "10", "NONSCALING"]),
        ok()
    );
    c2.cmd(&["BF.MADD", "bf", "a", "b", "c"]);
    for (arg, name, value) in [
        ("CAPACITY", "Capacity", V::Int(100)),
        ("capacity", "Capacity", V::Int(100)),
        ("FILTERS", "Number of filters", V::Int(1)),
        ("ITEMS", "Number of items inserted", V::Int(3)),
        ("EXPANSION", "Expansion rate", V::Int(2)),
    ] {
        assert_eq!(
            c3.cmd(&["BF.INFO", "bf", arg]),
            V::Map(vec![(simple(name), value.clone())]),
            "{arg}"
        );
        assert_eq!(
            c2.cmd(&["BF.INFO", "bf", arg]),
            V::Arr(vec![value]),
            "{arg}"
        );
    }
    let V::Map(m) = c3.cmd(&["BF.INFO", "bf", "SIZE"]) else {
        panic!()
    };
    assert!(matches!(&m[..], [(k, V::Int(n))] if *k == simple("Size") && *n > 0));
    assert!(matches!(c2.cmd(&["BF.INFO", "bf", "SIZE"]).arr(), [V::Int(n)] if *n > 0));
    assert_eq!(
        c3.cmd(&["BF.INFO", "ns", "EXPANSION"]),
        V::Map(vec![(simple("Expansion rate"), V::Nil)])
    );
    assert_eq!(
        c2.cmd(&["BF.INFO", "ns", "EXPANSION"]),
        V::Arr(vec![V::Nil])
    );
}

/// BF.INFO with an unknown field or a missing key, BF.RESERVE of an
/// existing key or with bad numbers, BF.INSERT's option errors, BF.ADD to a
/// full NONSCALING filter, wrong arity: RedisBloom's texts, in both protocols.
#[test]
fn nearby_errors_are_redisbloom_s() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let mut c2 = s.resp();
    let mut c3 = resp3(&s);
    assert_eq!(c2.cmd(&["BF.RESERVE", "bf", "0.01", "100"]), ok());
    assert_eq!(
        c2.cmd(&["BF.RESERVE", "ns", "0.01", "2", "NONSCALING"]),
        ok()
    );
    for c in [&mut c2, &mut c3] {
        let cases: &[(&[&str], &str)] = &[
            (&["BF.INFO", "bf", "bogus"], "Invalid information value"),
            (&["BF.INFO", "missing"], "ERR not found"),
            (&["BF.INFO", "missing", "bogus"], "ERR not found"),
            (&["BF.RESERVE", "bf", "0.01", "10"], "ERR item exists"),
            (
                &["BF.RESERVE", "x", "0", "10"],
                "ERR error rate must be in the range (0.000000, 1.000000)",
            ),
            (
                &["BF.RESERVE", "x", "1", "10"],
                "ERR error rate must be in the range (0.000000, 1.000000)",
            ),
            (
                &["BF.RESERVE", "x", "0.01", "0"],
                "ERR capacity must be in the range [1, 1073741824]",
            ),
            (
                &["BF.RESERVE", "x", "0.01", "-5"],
                "ERR capacity must be in the range [1, 1073741824]",
            ),
            (
                &["BF.INSERT", "x", "ERROR", "0", "ITEMS", "a"],
                "Bad error rate",
            ),
            (
                &["BF.INSERT", "x", "ERROR", "1", "ITEMS", "a"],
                "Bad error rate",
            ),
            (
                &["BF.INSERT", "x", "ERROR", "x", "ITEMS", "a"],
                "Bad error rate",
            ),
            (
                &["BF.INSERT", "x", "CAPACITY", "0", "ITEMS", "a"],
                "Bad capacity",
            ),
            (
                &["BF.INSERT", "x", "CAPACITY", "x", "ITEMS", "a"],
                "Bad capacity",
            ),
            (
                &["BF.INSERT", "x", "BOGUS", "ITEMS", "a"],
                "Unknown argument received",
            ),
            (
                &["BF.SCANDUMP", "bf", "x"],
                "Second argument must be numeric",
            ),
            (&["BF.SCANDUMP", "missing", "0"], "ERR not found"),
        ];
        for (args, want) in cases {
            assert_eq!(c.cmd(args).err(), *want, "{args:?}");
        }
        assert_eq!(
            c.cmd(&["BF.SCANDUMP", "bf", "-1"]),
            V::Arr(vec![V::Int(0), V::Bulk(Vec::new())])
        );
        for args in [
            &["BF.INFO"][..],
            &["BF.INFO", "bf", "CAPACITY", "x"],
            &["BF.DEBUG"],
            &["BF.DEBUG", "bf", "x"],
            &["BF.RESERVE", "x", "0.01"],
            &["BF.RESERVE", "x", "0.01", "1", "NONSCALING", "A", "B", "C"],
            &["BF.ADD", "bf"],
            &["BF.ADD", "bf", "a", "b"],
            &["BF.INSERT", "bf", "ITEMS"],
            &["BF.LOADCHUNK", "bf", "1"],
        ] {
            assert_eq!(
                c.cmd(args).err(),
                format!(
                    "ERR wrong number of arguments for '{}' command",
                    args[0].to_ascii_lowercase()
                ),
                "{args:?}"
            );
        }
    }
    assert_eq!(c2.cmd(&["EXISTS", "x"]).int(), 0);
    // A full NONSCALING filter: an error, and a multi-item reply ends at it.
    c2.cmd(&["BF.MADD", "ns", "a", "b"]);
    assert_eq!(
        c2.cmd(&["BF.ADD", "ns", "c"]).err(),
        "ERR non scaling filter is full"
    );
    let full = || V::Err("ERR non scaling filter is full".into());
    assert_eq!(c3.cmd(&["BF.MADD", "ns", "c", "d"]), V::Arr(vec![full()]));
    assert_eq!(
        c3.cmd(&["BF.INSERT", "ns", "ITEMS", "c", "d"]),
        V::Arr(vec![full()])
    );
}

#[test]
fn debug_has_redisbloom_s_shape_and_line_format() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let mut c2 = s.resp();
    let mut c3 = resp3(&s);
    assert_eq!(
        c2.cmd(&["BF.RESERVE", "g", "0.01", "10", "EXPANSION", "3"]),
        ok()
    );
    for i in 0..25 {
        c2.cmd(&["BF.ADD", "g", &format!("i{i}")]);
    }
    let items = c2.cmd(&["BF.CARD", "g"]).int();
    let filters = c2.cmd(&["BF.INFO", "g", "FILTERS"]).arr()[0].int() as usize;
    assert!(filters >= 2, "{filters}");
    for c in [&mut c2, &mut c3] {
        let v = c.cmd(&["BF.DEBUG", "g"]);
        let a = v.arr();
        assert_eq!(a.len(), 1 + filters, "{a:?}");
        assert_eq!(a[0], V::Bulk(format!("size:{items}").into_bytes()));
        let layers = debug_layers(c, "g");
        let mut capacity = 10;
        // A scaling filter's first layer is planned at half the requested
        // rate, each later one at half the one before (as RedisBloom's).
        let mut ratio = 0.005;
        let mut total = 0;
        for l in &layers {
            let names: Vec<&str> = l.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                names,
                [
                    "bytes",
                    "bits",
                    "hashes",
                    "hashwidth",
                    "capacity",
                    "size",
                    "ratio"
                ]
            );
            let num = |n| field(l, n).parse::<u64>().unwrap();
            assert_eq!(num("bits"), 8 * num("bytes"));
            assert!(num("bits") % 512 == 0 && num("hashes") > 0);
            // New layers are hashed with XXH3-64 (hash id 2).
            assert_eq!(num("hashwidth"), 64);
            assert_eq!(num("capacity"), capacity);
            let r: f64 = field(l, "ratio").parse().unwrap();
            assert!((r - ratio).abs() < ratio * 1e-9, "{l:?}");
            total += num("size");
            capacity *= 3;
            ratio /= 2.0;
        }
        assert_eq!(total as i64, items);
        // Full layers took what they were planned for.
        assert_eq!(field(&layers[0], "size"), "10");
        assert_eq!(c.cmd(&["BF.DEBUG", "missing"]).err(), "ERR not found");
    }
    // The ratio is printed as C's %g.
    c2.cmd(&["BF.RESERVE", "tiny", "0.000001", "1000", "NONSCALING"]);
    let layers = debug_layers(&mut c2, "tiny");
    assert_eq!(field(&layers[0], "ratio"), "1e-06");
    assert_eq!(field(&layers[0], "capacity"), "1000");
    assert_eq!(field(&layers[0], "size"), "0");
}

#[test]
fn loadchunk_errors_are_redisbloom_s() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let mut c = s.resp();
    let load = |c: &mut Resp, key: &str, iter: &str, data: &[u8]| {
        c.send(&[b"BF.LOADCHUNK", key.as_bytes(), iter.as_bytes(), data]);
        c.read().unwrap()
    };
    // No such filter: only iteration 1 (a header) can create one.
    let bad = V::Err("ERR received bad data".into());
    assert_eq!(load(&mut c, "new", "1", b"junk"), bad);
    assert_eq!(load(&mut c, "new", "1", b""), bad);
    assert_eq!(load(&mut c, "new", "0", b"junk").err(), "ERR not found");
    assert_eq!(load(&mut c, "new", "2", b"junk").err(), "ERR not found");
    assert_eq!(
        load(&mut c, "new", "x", b"junk").err(),
        "ERR Second argument must be numeric"
    );
    assert_eq!(c.cmd(&["EXISTS", "new"]).int(), 0);

    assert_eq!(c.cmd(&["BF.RESERVE", "lc", "0.01", "100"]), ok());
    let layer: usize = field(&debug_layers(&mut c, "lc")[0], "bytes")
        .parse()
        .unwrap();
    // A header for an existing filter, an iterator below 1, a chunk longer
    // than its iterator allows, a misaligned chunk.
    let mut header = c.cmd(&["BF.SCANDUMP", "lc", "0"]).arr()[1].clone();
    let V::Bulk(header) = &mut header else {
        panic!()
    };
    assert_eq!(load(&mut c, "lc", "1", header), bad);
    assert_eq!(load(&mut c, "lc", "1", b"junk"), bad);
    assert_eq!(load(&mut c, "lc", "0", b"junk"), bad);
    assert_eq!(load(&mut c, "lc", "-1", b"junk"), bad);
    assert_eq!(load(&mut c, "lc", "3", b"junk"), bad);
    assert_eq!(load(&mut c, "lc", "6", b"x"), bad);
    // Starts inside the layer, runs past its end.
    let it = (layer + 9).to_string();
    assert_eq!(
        load(&mut c, "lc", &it, &[0; 16]).err(),
        "ERR invalid chunk - Too big for current filter"
    );
    // Starts at or past the end.
    assert_eq!(
        load(&mut c, "lc", &it, &[0; 8]).err(),
        "ERR invalid offset - no link found"
    );
    assert_eq!(
        load(&mut c, "lc", "8", &[0; 8]).err(),
        "ERR invalid offset - no link found"
    );
    assert_eq!(
        load(&mut c, "lc", "100000", &[0; 8]).err(),
        "ERR invalid offset - no link found"
    );
    // A chunk that fits is loaded.
    assert_eq!(load(&mut c, "lc", "9", &[0; 8]), ok());
    let last = (layer + 1).to_string();
    assert_eq!(load(&mut c, "lc", &last, &[0; 8]), ok());

    // A bloomgate header into a missing filter still creates it.
    assert_eq!(load(&mut c, "copy", "1", header), ok());
    assert_eq!(c.cmd(&["EXISTS", "copy"]).int(), 1);
}

/// A dump header whose numbers would drive the rate math forever (2⁶⁴ − 1
/// items in 11,776 bits), or are out of range in other ways, is refused;
/// the server keeps answering on every path, and nothing is left behind.
/// The same header in a `.bgf` file makes `bloomgate info` fail at once.
#[test]
fn loadchunk_refuses_headers_out_of_range_and_the_server_keeps_answering() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let mut c = s.resp();
    let layer = |field: &str| {
        let mut l = serde_json::json!({"layout":2,"bits":11776,"k":7,"seed":1,"key_kind":0,
            "match_mode":0,"planned_items":1000,"target_fp":0.005,"items":5});
        let (k, v) = field.split_once('=').unwrap();
        l[k] = serde_json::from_str(v).unwrap();
        format!("BLOOMGATE-DUMP-1\n{{\"layers\":[{l}],\"meta\":null}}")
    };
    let bad = V::Err("ERR received bad data".into());
    for (i, field) in [
        "items=18446744073709551615",
        "items=11777",
        "planned_items=0",
        "target_fp=0.0",
        "target_fp=1.5",
        "k=0",
        "k=65",
        "key_kind=200",
        "match_mode=200",
        "layout=9",
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("evil{i}");
        c.send(&[
            b"BF.LOADCHUNK",
            name.as_bytes(),
            b"1",
            layer(field).as_bytes(),
        ]);
        assert_eq!(c.read().unwrap(), bad, "{field}");
        assert_eq!(c.cmd(&["EXISTS", &name]).int(), 0, "{field}");
    }
    // Growth settings out of range.
    let grow = "BLOOMGATE-DUMP-1\n{\"layers\":[{\"layout\":2,\"bits\":11776,\"k\":7,\"seed\":1,\"key_kind\":0,\"match_mode\":0,\"planned_items\":1000,\"target_fp\":0.005,\"items\":5}],\"meta\":{\"expansion\":4000000000,\"nonscaling\":false}}";
    c.send(&[b"BF.LOADCHUNK", b"evilgrow", b"1", grow.as_bytes()]);
    assert_eq!(c.read().unwrap(), bad);
    // The largest count the header may hold is accepted and answers.
    c.send(&[
        b"BF.LOADCHUNK",
        b"full",
        b"1",
        layer("items=11776").as_bytes(),
    ]);
    assert_eq!(c.read().unwrap(), ok());
    assert!(matches!(c.cmd(&["BF.INFO", "full"]), V::Arr(_)));
    assert_eq!(c.cmd(&["BF.CARD", "full"]).int(), 11776);
    assert!(matches!(c.cmd(&["BF.INFO", "evil0"]), V::Err(_)));
    for path in ["/v1/filters", "/metrics", "/healthz"] {
        let (code, _) = s.http("GET", path, None, None);
        assert_eq!(code, 200, "{path}");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("evil"))
        .collect();
    assert!(left.is_empty(), "files of refused loads: {left:?}");
    drop(s);

    // The same count written into a file's header (its checksum redone):
    // `info` reports the fault instead of hanging.
    let f = dir.path().join("full.bgf");
    let mut bytes = std::fs::read(&f).unwrap();
    let len = bytes.len() as u64;
    let hl = bloomgate_engine::format::HEADER_LEN;
    let mut h = bloomgate_engine::Header::decode(&bytes[..hl], len).unwrap();
    h.items = u64::MAX;
    bytes[..hl].copy_from_slice(&h.encode());
    let evil = dir.path().join("evil.bgf");
    std::fs::write(&evil, &bytes).unwrap();
    let out = Command::new(testkit::bin())
        .args(["info", evil.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("evil.bgf") && err.contains("item count"),
        "{err}"
    );
}

/// `redis-cli` prints what RedisBloom's replies print as (its own output
/// for the same commands, RESP2 and RESP3).
#[test]
fn redis_cli_sees_redisbloom_replies() {
    if !testkit::have("redis-cli") {
        testkit::skip("redis-cli is not installed (apt-get install redis-tools)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let port = s.resp.port().to_string();
    let cli = |proto: &str, args: &[&str]| {
        let o = Command::new("redis-cli")
            .args(["-p", &port, proto])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(cli("-2", &["BF.RESERVE", "bf", "0.001", "100"]), "OK");
    assert_eq!(
        cli("-2", &["BF.RESERVE", "ns", "0.01", "2", "EXPANSION", "0"]),
        "OK"
    );
    assert_eq!(cli("-2", &["BF.MADD", "ns", "a", "b"]), "1\n1");
    for p in ["-2", "-3"] {
        let cases: &[(&[&str], &str)] = &[
            (
                &["BF.RESERVE", "x", "0.01", "10", "EXPANSION", "32769"],
                "ERR expansion must be in the range [0, 32768]",
            ),
            (
                &["BF.INSERT", "x", "EXPANSION", "-1", "ITEMS", "a"],
                "Bad expansion",
            ),
            (&["BF.INFO", "bf", "bogus"], "Invalid information value"),
            (&["BF.INFO", "missing"], "ERR not found"),
            (&["BF.RESERVE", "bf", "0.01", "10"], "ERR item exists"),
            (&["BF.ADD", "ns", "c"], "ERR non scaling filter is full"),
            (
                &["BF.MADD", "ns", "c", "d"],
                "ERR non scaling filter is full",
            ),
            (
                &["BF.DEBUG"],
                "ERR wrong number of arguments for 'bf.debug' command",
            ),
            (&["BF.DEBUG", "missing"], "ERR not found"),
            (
                &["BF.LOADCHUNK", "new", "1", "junk"],
                "ERR received bad data",
            ),
            (
                &["BF.LOADCHUNK", "ns", "3", "junk"],
                "ERR received bad data",
            ),
            (
                &["BF.LOADCHUNK", "ns", "100000", "12345678"],
                "ERR invalid offset - no link found",
            ),
        ];
        for (args, want) in cases {
            assert_eq!(cli(p, args), *want, "{p} {args:?}");
        }
        // 1000 bytes from offset 0: more than the layer of a 2-item filter.
        let chunk = "a".repeat(1000);
        assert_eq!(
            cli(p, &["BF.LOADCHUNK", "ns", "1001", &chunk]),
            "ERR invalid chunk - Too big for current filter"
        );
        let debug = cli(p, &["BF.DEBUG", "ns"]);
        let lines: Vec<&str> = debug.lines().collect();
        assert_eq!(lines.len(), 2, "{debug}");
        assert_eq!(lines[0], "size:2");
        assert!(
            lines[1].starts_with("bytes:")
                && lines[1].contains(" hashwidth:")
                && lines[1].ends_with(" capacity:2 size:2 ratio:0.01"),
            "{debug}"
        );
    }
    // One BF.INFO field: a map in RESP3 (key and value), an array in RESP2.
    assert_eq!(cli("-3", &["BF.INFO", "bf", "CAPACITY"]), "Capacity 100");
    assert_eq!(cli("-2", &["BF.INFO", "bf", "CAPACITY"]), "100");
    assert_eq!(
        cli("-3", &["BF.INFO", "bf", "EXPANSION"]),
        "Expansion rate 2"
    );
    assert_eq!(cli("-3", &["BF.INFO", "ns", "EXPANSION"]), "Expansion rate");
    assert_eq!(cli("-2", &["BF.INFO", "ns", "EXPANSION"]), "");
    assert!(cli("-3", &["BF.INFO", "ns"]).ends_with("Number of items inserted 2\nExpansion rate"));
}

/// redis-py, RESP3 and RESP2: `tests/python/test_redisbloom_replies.py`.
#[test]
fn redis_py_sees_redisbloom_replies() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    testkit::run_redis_py(
        "test_redisbloom_replies.py",
        &["--port".into(), s.resp.port().to_string()],
    );
}

/// A cache guard's traps: `BF.MADD` and `BF.MEXISTS` of more than one HTTP
/// batch (10,000) are answered whole, as RedisBloom does; a lookup of a
/// filter that does not exist answers 0 as RedisBloom does, is counted
/// (`bloomgate_unknown_filter_lookups_total`), and with
/// `--unknown-filter-error` is an error instead.
#[test]
fn large_batches_and_unknown_filters() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let mut c = s.resp();
    let items: Vec<String> = (0..25_000)
        .map(|i| format!("http://big.example/{i}"))
        .collect();
    let mut args = vec!["BF.MADD", "big"];
    args.extend(items.iter().map(String::as_str));
    let v = c.cmd(&args);
    assert_eq!(v.arr().len(), 25_000, "{:?}", &v.arr()[..1]);
    assert!(v.arr().iter().filter(|x| x.int() == 1).count() > 24_000);
    args[0] = "BF.MEXISTS";
    let v = c.cmd(&args);
    assert_eq!(v.arr().len(), 25_000);
    assert!(v.arr().iter().all(|x| x.int() == 1), "no false negative");
    // Every item was added: the count is the new ones of the first reply.
    let card = c.cmd(&["BF.CARD", "big"]).int();
    assert!(card > 24_000, "{card}");

    // A typo: RedisBloom's 0, counted.
    assert_eq!(c.cmd(&["BF.EXISTS", "bgi", "x"]), V::Int(0));
    assert_eq!(c.cmd(&["CF.EXISTS", "bgi", "x"]).int(), 0);
    let (st, m) = s.http("GET", "/metrics", None, None);
    assert_eq!(st, 200);
    let metrics = m["text"].as_str().unwrap().to_string();
    assert!(
        metrics.contains("bloomgate_unknown_filter_lookups_total 2"),
        "{m}"
    );
    drop(c);
    drop(s);

    let s = Server::start(dir.path(), &["--unknown-filter-error"]);
    let mut c = s.resp();
    assert_eq!(
        c.cmd(&["BF.EXISTS", "bgi", "x"]),
        V::Err("ERR not found".into())
    );
    assert_eq!(
        c.cmd(&["BF.MEXISTS", "bgi", "x", "y"]),
        V::Err("ERR not found".into())
    );
    assert_eq!(
        c.cmd(&["CF.EXISTS", "bgi", "x"]),
        V::Err("ERR not found".into())
    );
    // Known filters answer as ever.
    assert_eq!(
        c.cmd(&["BF.EXISTS", "big", "http://big.example/7"]).int(),
        1
    );
}
