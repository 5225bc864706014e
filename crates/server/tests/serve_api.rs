//! The HTTP API, the Redis protocol (our client, `redis-cli`, redis-py),
//! authentication, reload and hostile clients, against the real binary.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bloomgate_engine::{plan, Filter, Layout, Params};
use serde_json::json;
use testkit::{Server, V};

fn url_filter(path: &std::path::Path, entries: &[&str]) {
    let mut p = Params::from_plan(&plan(Layout::Blocked, 1000, 1e-6).unwrap(), 42);
    p.key_kind = bloomgate_url::KeyKind::Url.as_u8();
    p.match_mode = bloomgate_url::MatchMode::Prefix.as_u8();
    let f = Filter::new(p).unwrap();
    let list = bloomgate_blacklist::Blacklist::from_filter(f).unwrap();
    for e in entries {
        list.add(e.as_bytes()).unwrap();
    }
    list.filter().save(path).unwrap();
}

#[test]
fn http_api_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    url_filter(
        &dir.path().join("phish.bgf"),
        &["http://evil.example/phish/"],
    );
    let s = Server::start(dir.path(), &[]);

    let (st, v) = s.http("GET", "/healthz", None, None);
    assert_eq!((st, v["status"].as_str()), (200, Some("ok")));
    let (st, v) = s.http("GET", "/v1/filters", None, None);
    assert_eq!(st, 200);
    assert_eq!(v["filters"][0]["name"], "phish");
    let (st, v) = s.http("GET", "/v1/filters/phish", None, None);
    assert_eq!(st, 200);
    assert_eq!(v["key_kind"], "url");
    assert_eq!(v["match_mode"], "prefix");
    assert_eq!(v["layout"], "blocked");
    assert_eq!(v["items"], 1);
    assert!(v["fill_ratio"].as_f64().unwrap() > 0.0);
    assert!(v["k"].as_u64().unwrap() > 0);

    // Single check, canonicalized like the CLI.
    let (st, v) = s.http(
        "GET",
        "/v1/filters/phish/check?item=HTTP%3A%2F%2FEVIL.example%3A80%2Fphish%2F.%2Flogin.php",
        None,
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["hit"], true);
    assert_eq!(v["matched"], "evil.example/phish/");
    // Batch.
    let (st, v) = s.http(
        "POST",
        "/v1/filters/phish/check",
        Some(r#"["http://evil.example/phish/x", "http://good.example/", "http://[bad"]"#),
        None,
    );
    assert_eq!(st, 200);
    assert_eq!(v["results"][0]["hit"], true);
    assert_eq!(v["results"][1]["hit"], false);
    assert!(v["results"][2]["error"].is_string());
    // Add, then check.
    let (st, v) = s.http(
        "POST",
        "/v1/filters/phish/add",
        Some(r#"{"items": ["http://new.example/bad"]}"#),
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["added"], 1);
    let (_, v) = s.http(
        "GET",
        "/v1/filters/phish/check?item=http://new.example/bad",
        None,
        None,
    );
    assert_eq!(v["hit"], true);
    // Whitelist: exempt one URL, then remove the exemption.
    let (st, v) = s.http(
        "POST",
        "/v1/filters/phish/whitelist",
        Some(r#"["http://evil.example/phish/ok"]"#),
        None,
    );
    assert_eq!(st, 200);
    assert_eq!(v["results"][0]["was_hit"], true);
    let (_, v) = s.http(
        "GET",
        "/v1/filters/phish/check?item=http://evil.example/phish/ok",
        None,
        None,
    );
    assert_eq!(
        (v["hit"].clone(), v["whitelisted"].clone()),
        (json!(false), json!(true))
    );
    assert_eq!(v["matched"], "evil.example/phish/");
    assert!(dir.path().join("phish.bgf.whitelist").exists());
    let (st, v) = s.http(
        "DELETE",
        "/v1/filters/phish/whitelist",
        Some(r#"["http://evil.example/phish/ok"]"#),
        None,
    );
    assert_eq!((st, v["results"][0]["removed"].clone()), (200, json!(true)));
    let (_, v) = s.http(
        "GET",
        "/v1/filters/phish/check?item=http://evil.example/phish/ok",
        None,
        None,
    );
    assert_eq!(v["hit"], true);

    // Create from n and p.
    let (st, v) = s.http(
        "POST",
        "/v1/filters",
        Some(r#"{"name":"hosts","items":1000,"fp":0.001,"kind":"host"}"#),
        None,
    );
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["key_kind"], "host");
    let (st, _) = s.http(
        "POST",
        "/v1/filters",
        Some(r#"{"name":"hosts","items":1000,"fp":0.001}"#),
        None,
    );
    assert_eq!(st, 409);
    s.http(
        "POST",
        "/v1/filters/hosts/add",
        Some(r#"["Evil.COM"]"#),
        None,
    );
    let (_, v) = s.http(
        "GET",
        "/v1/filters/hosts/check?item=https://a.b.evil.com/x",
        None,
        None,
    );
    assert_eq!(
        (v["hit"].clone(), v["matched"].clone()),
        (json!(true), json!("evil.com"))
    );

    // Reload: a corrupt file is refused and the old filter keeps serving;
    // a good rebuilt file is swapped in.
    let bad = dir.path().join("incoming-bad.bin");
    url_filter(&bad, &["http://other.example/"]);
    let mut bytes = std::fs::read(&bad).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 0xff;
    std::fs::write(&bad, &bytes).unwrap();
    let body = json!({"path": bad}).to_string();
    let (st, v) = s.http("POST", "/v1/filters/phish/reload", Some(&body), None);
    assert_eq!(st, 422, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("corrupt"),
        "{v}"
    );
    let (_, v) = s.http(
        "GET",
        "/v1/filters/phish/check?item=http://evil.example/phish/",
        None,
        None,
    );
    assert_eq!(v["hit"], true);
    let good = dir.path().join("incoming-good.bin");
    url_filter(&good, &["http://other.example/"]);
    let body = json!({"path": good}).to_string();
    let (st, v) = s.http("POST", "/v1/filters/phish/reload", Some(&body), None);
    assert_eq!(st, 200, "{v}");
    let (_, v) = s.http(
        "GET",
        "/v1/filters/phish/check?item=http://other.example/",
        None,
        None,
    );
    assert_eq!(v["hit"], true);
    let (_, v) = s.http(
        "GET",
        "/v1/filters/phish/check?item=http://evil.example/phish/",
        None,
        None,
    );
    assert_eq!(v["hit"], false);

    // Errors.
    let (st, v) = s.http("GET", "/v1/filters/nope", None, None);
    assert_eq!((st, v["error"]["code"].clone()), (404, json!("not_found")));
    let (st, _) = s.http("POST", "/v1/filters/phish/check", Some("{not json"), None);
    assert_eq!(st, 400);
    let (st, _) = s.http("GET", "/v1/filters/phish/check", None, None);
    assert_eq!(st, 400);
    let many = serde_json::to_string(&vec!["x"; 20_000]).unwrap();
    let (st, _) = s.http("POST", "/v1/filters/phish/check", Some(&many), None);
    assert_eq!(st, 413);

    // Metrics.
    let (st, v) = s.http("GET", "/metrics", None, None);
    assert_eq!(st, 200);
    let text = v["text"].as_str().unwrap();
    for needle in [
        "bloomgate_requests_total{proto=\"http\",op=\"check\"}",
        "bloomgate_request_duration_seconds_bucket",
        "bloomgate_hits_total",
        "bloomgate_filter_items{filter=\"phish\"}",
        "bloomgate_filter_fill_ratio{filter=\"hosts\"}",
    ] {
        assert!(text.contains(needle), "missing {needle}");
    }
    // Delete.
    let (st, _) = s.http("DELETE", "/v1/filters/hosts", None, None);
    assert_eq!(st, 200);
    assert!(!dir.path().join("hosts.bgf").exists());
    let (st, _) = s.http("DELETE", "/v1/filters/hosts", None, None);
    assert_eq!(st, 404);
}

#[test]
fn tokens_guard_writes_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    let tok = dir.path().join("token");
    std::fs::write(&tok, "s3cret-token-0123456789\n").unwrap();
    let s = Server::start(dir.path(), &["--token-file", tok.to_str().unwrap()]);
    let t = Some("s3cret-token-0123456789");
    let (st, _) = s.http("GET", "/v1/filters", None, None);
    assert_eq!(st, 401);
    let (st, _) = s.http("GET", "/v1/filters", None, Some("wrong-token-0123456789"));
    assert_eq!(st, 401);
    let (st, _) = s.http("GET", "/v1/filters", None, t);
    assert_eq!(st, 200);
    let (st, _) = s.http(
        "POST",
        "/v1/filters",
        Some(r#"{"name":"a","items":10,"fp":0.01}"#),
        None,
    );
    assert_eq!(st, 401);
    let (st, _) = s.http(
        "POST",
        "/v1/filters",
        Some(r#"{"name":"a","items":10,"fp":0.01}"#),
        t,
    );
    assert_eq!(st, 201);
    let (st, _) = s.http("GET", "/healthz", None, None);
    assert_eq!(st, 200);

    let mut c = s.resp();
    assert!(c.cmd(&["BF.EXISTS", "a", "x"]).err().starts_with("NOAUTH"));
    assert!(c.cmd(&["AUTH", "nope"]).err().starts_with("WRONGPASS"));
    assert_eq!(
        c.cmd(&["AUTH", "s3cret-token-0123456789"]),
        V::Simple("OK".into())
    );
    assert_eq!(c.cmd(&["BF.ADD", "a", "x"]).int(), 1);
    let mut c2 = s.resp();
    let hello = c2.cmd(&["HELLO", "3", "AUTH", "default", "s3cret-token-0123456789"]);
    assert!(matches!(hello, V::Map(_)), "{hello:?}");
    assert_eq!(c2.cmd(&["BF.EXISTS", "a", "x"]), V::Bool(true));
    drop(s);

    // --open-reads: reads without a token, writes still need it.
    let s = Server::start(
        dir.path(),
        &["--token-file", tok.to_str().unwrap(), "--open-reads"],
    );
    let (st, _) = s.http("GET", "/v1/filters/a/check?item=x", None, None);
    assert_eq!(st, 200);
    let (st, _) = s.http("POST", "/v1/filters/a/add", Some(r#"["y"]"#), None);
    assert_eq!(st, 401);
    let mut c = s.resp();
    assert_eq!(c.cmd(&["BF.EXISTS", "a", "x"]).int(), 1);
    assert!(c.cmd(&["BF.ADD", "a", "y"]).err().starts_with("NOAUTH"));
    assert!(c.cmd(&["DEL", "a"]).err().starts_with("NOAUTH"));
}

#[test]
fn resp_commands_and_redisbloom_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let mut c = s.resp();
    assert_eq!(c.cmd(&["PING"]), V::Simple("PONG".into()));
    assert_eq!(
        c.cmd(&["BF.RESERVE", "r", "0.0001", "100"]),
        V::Simple("OK".into())
    );
    assert_eq!(
        c.cmd(&["BF.RESERVE", "r", "0.0001", "100"]).err(),
        "ERR item exists"
    );
    assert_eq!(
        c.cmd(&["BF.RESERVE", "x", "2", "100"]).err(),
        "ERR error rate must be in the range (0.000000, 1.000000)"
    );
    assert_eq!(
        c.cmd(&["BF.RESERVE", "x", "0.1", "0"]).err(),
        "ERR capacity must be in the range [1, 1073741824]"
    );
    assert_eq!(
        c.cmd(&["BF.RESERVE", "x", "abc", "10"]).err(),
        "ERR bad error rate"
    );
    assert!(c
        .cmd(&["BF.ADD", "r"])
        .err()
        .starts_with("ERR wrong number of arguments for 'bf.add' command"));
    assert_eq!(c.cmd(&["BF.ADD", "r", "a"]).int(), 1);
    assert_eq!(c.cmd(&["BF.ADD", "r", "a"]).int(), 0);
    let v = c.cmd(&["BF.MADD", "r", "a", "b", "c"]);
    assert_eq!(
        v.arr().iter().map(V::int).collect::<Vec<_>>(),
        vec![0, 1, 1]
    );
    let v = c.cmd(&["BF.MEXISTS", "r", "a", "b", "zz"]);
    assert_eq!(
        v.arr().iter().map(V::int).collect::<Vec<_>>(),
        vec![1, 1, 0]
    );
    assert_eq!(c.cmd(&["BF.EXISTS", "missing", "a"]).int(), 0);
    assert_eq!(c.cmd(&["BF.CARD", "r"]).int(), 3);
    assert_eq!(c.cmd(&["BF.CARD", "missing"]).int(), 0);
    let info = c.cmd(&["BF.INFO", "r"]);
    let a = info.arr();
    assert_eq!(a[0], V::Simple("Capacity".into()));
    assert_eq!(a[1], V::Int(100));
    assert_eq!(a[4], V::Simple("Number of filters".into()));
    assert_eq!(a[7], V::Int(3));
    assert_eq!(a[8], V::Simple("Expansion rate".into()));
    assert_eq!(a[9], V::Int(2));
    assert_eq!(c.cmd(&["BF.INFO", "r", "ITEMS"]), V::Arr(vec![V::Int(3)]));
    assert_eq!(c.cmd(&["BF.INFO", "missing"]).err(), "ERR not found");
    assert_eq!(
        c.cmd(&["BF.INFO", "r", "bogus"]).err(),
        "Invalid information value"
    );

    // Growth: capacity 10, expansion 3.
    c.cmd(&["BF.RESERVE", "g", "0.01", "10", "EXPANSION", "3"]);
    for i in 0..100 {
        c.cmd(&["BF.ADD", "g", &format!("i{i}")]);
    }
    let filters = c.cmd(&["BF.INFO", "g", "FILTERS"]).arr()[0].int();
    assert!(filters >= 3, "{filters}");
    assert_eq!(
        c.cmd(&["BF.INFO", "g", "CAPACITY"]).arr()[0].int(),
        (0..filters).map(|i| 10 * 3i64.pow(i as u32)).sum::<i64>()
    );
    for i in 0..100 {
        assert_eq!(c.cmd(&["BF.EXISTS", "g", &format!("i{i}")]).int(), 1);
    }
    // Non-scaling refuses.
    let v = c.cmd(&[
        "BF.INSERT",
        "ns",
        "CAPACITY",
        "5",
        "NONSCALING",
        "ITEMS",
        "1",
        "2",
        "3",
        "4",
        "5",
        "6",
        "7",
        "8",
    ]);
    let a = v.arr();
    assert!(
        matches!(a.last(), Some(V::Err(e)) if e == "ERR non scaling filter is full"),
        "{a:?}"
    );
    assert_eq!(c.cmd(&["BF.INFO", "ns", "EXPANSION"]), V::Arr(vec![V::Nil]));
    assert_eq!(
        c.cmd(&["BF.INSERT", "nc", "NOCREATE", "ITEMS", "a"]).err(),
        "ERR not found"
    );
    assert_eq!(
        c.cmd(&["BF.INSERT", "nc", "BOGUS", "ITEMS", "a"]).err(),
        "Unknown argument received"
    );

    // Keys.
    assert_eq!(c.cmd(&["EXISTS", "r", "g", "nope"]).int(), 2);
    assert_eq!(c.cmd(&["TYPE", "r"]), V::Simple("MBbloom--".into()));
    assert_eq!(c.cmd(&["TYPE", "nope"]), V::Simple("none".into()));
    let keys = c.cmd(&["KEYS", "*"]);
    assert_eq!(keys.arr().len(), 3);
    let scan = c.cmd(&["SCAN", "0", "MATCH", "n*"]);
    assert_eq!(scan.arr()[1].arr(), &[V::Bulk(b"ns".to_vec())]);
    assert_eq!(c.cmd(&["DEL", "ns", "nope"]).int(), 1);
    assert_eq!(c.cmd(&["SELECT", "0"]), V::Simple("OK".into()));
    assert_eq!(
        c.cmd(&["SELECT", "1"]).err(),
        "ERR DB index is out of range"
    );
    assert_eq!(
        c.cmd(&["foo", "a", "b"]).err(),
        "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
    );
    assert_eq!(
        c.cmd(&["CLIENT", "SETINFO", "LIB-NAME", "x"]),
        V::Simple("OK".into())
    );

    // SCANDUMP → LOADCHUNK into a second server.
    let dir2 = tempfile::tempdir().unwrap();
    let s2 = Server::start(dir2.path(), &[]);
    let mut c2 = s2.resp();
    let mut iter = 0i64;
    loop {
        let v = c.cmd(&["BF.SCANDUMP", "g", &iter.to_string()]);
        let a = v.arr();
        iter = a[0].int();
        if iter == 0 {
            break;
        }
        let V::Bulk(data) = &a[1] else { panic!() };
        let it = iter.to_string();
        c2.send(&[b"BF.LOADCHUNK", b"g", it.as_bytes(), data]);
        assert_eq!(c2.read().unwrap(), V::Simple("OK".into()));
    }
    for i in 0..100 {
        assert_eq!(c2.cmd(&["BF.EXISTS", "g", &format!("i{i}")]).int(), 1);
    }
    assert_eq!(c2.cmd(&["BF.CARD", "g"]), c.cmd(&["BF.CARD", "g"]));

    // RESP3.
    let mut c3 = s.resp();
    let hello = c3.cmd(&["HELLO", "3"]);
    let V::Map(m) = hello else {
        panic!("{hello:?}")
    };
    assert!(m.contains(&(V::Bulk(b"proto".to_vec()), V::Int(3))));
    assert_eq!(c3.cmd(&["BF.EXISTS", "r", "a"]), V::Bool(true));
    assert!(matches!(c3.cmd(&["BF.INFO", "r"]), V::Map(m) if m.len() == 5));
    assert_eq!(c3.cmd(&["QUIT"]), V::Simple("OK".into()));
}

#[test]
fn hostile_clients_are_cut_off_without_harming_others() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "--request-secs",
            "2",
            // Longer than the attacks below take on a loaded machine: the
            // well-behaved client below is never idle that long anyway.
            "--idle-secs",
            "60",
            "--max-input-memory",
            "16M",
        ],
    );
    let mut good = s.resp();
    good.cmd(&["BF.ADD", "f", "x"]);
    // The well-behaved client keeps asking while the hostile ones run, and
    // every answer must be right.
    let stop = Arc::new(AtomicBool::new(false));
    let asking = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut asked = 0u64;
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(good.cmd(&["BF.EXISTS", "f", "x"]).int(), 1);
                asked += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            (good, asked)
        })
    };

    // A 4 GB bulk header: an error, then the connection closes.
    let mut bad = TcpStream::connect(s.resp).unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    bad.write_all(b"*2\r\n$4294967296\r\n").unwrap();
    let mut buf = String::new();
    bad.read_to_string(&mut buf).unwrap();
    assert!(buf.starts_with("-ERR Protocol error"), "{buf}");
    // A huge array header.
    let mut bad = TcpStream::connect(s.resp).unwrap();
    bad.write_all(b"*2147483647\r\n").unwrap();
    let mut buf = String::new();
    bad.read_to_string(&mut buf).unwrap();
    assert!(buf.contains("invalid multibulk length"), "{buf}");
    // Bulk strings each under the bulk limit that add up past the command
    // limit (here the 16 MiB input budget): refused at the header that
    // crosses it (parsed once the command's smallest possible rest has
    // arrived).
    let mut bad = TcpStream::connect(s.resp).unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let chunk = vec![b'z'; 10_000_000];
    let mut sent = b"*3\r\n".to_vec();
    for _ in 0..2 {
        sent.extend_from_slice(b"$10000000\r\n");
        sent.extend_from_slice(&chunk);
        sent.extend_from_slice(b"\r\n");
    }
    sent.extend_from_slice(b"$1\r\nx\r\n");
    let _ = bad.write_all(&sent);
    let mut buf = String::new();
    let _ = bad.read_to_string(&mut buf);
    assert!(buf.contains("command too big"), "{buf}");
    // Garbage bytes.
    let mut bad = TcpStream::connect(s.resp).unwrap();
    bad.write_all(b"*1\r\n\x00\xff\xfe garbage\r\n").unwrap();
    let mut buf = Vec::new();
    bad.read_to_end(&mut buf).unwrap();
    assert!(buf.starts_with(b"-ERR Protocol error"));
    // A slow drip: one byte a second never completes a command.
    let t = Instant::now();
    let mut drip = TcpStream::connect(s.resp).unwrap();
    drip.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut closed = false;
    for b in b"*2\r\n$4\r\nPING\r\n$100\r\n".iter().cycle().take(20) {
        if drip.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        let mut one = [0u8; 256];
        match drip.read(&mut one) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(_) => {}
            Err(_) => {}
        }
        std::thread::sleep(Duration::from_millis(400));
    }
    assert!(closed, "slow drip was not cut off");
    assert!(t.elapsed() < Duration::from_secs(8));
    // HTTP: garbage and oversized bodies.
    let mut h = TcpStream::connect(s.http).unwrap();
    h.write_all(b"\x00\x01garbage garbage\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    let _ = h.read_to_end(&mut buf);
    let big = format!("[\"{}\"]", "a".repeat(9 << 20));
    let (st, _) = s.http("POST", "/v1/filters/f/check", Some(&big), None);
    assert_eq!(st, 413);

    // The well-behaved client was never disturbed.
    stop.store(true, Ordering::Relaxed);
    let (mut good, asked) = asking.join().unwrap();
    assert!(asked > 0);
    assert_eq!(good.cmd(&["BF.EXISTS", "f", "x"]).int(), 1);
}

#[test]
fn redis_cli_works() {
    if !testkit::have("redis-cli") {
        // scripts/test.sh installs the real clients, so CI can never pass
        // by skipping them.
        testkit::skip("redis-cli is not installed (apt-get install redis-tools)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let port = s.resp.port().to_string();
    let cli = |args: &[&str]| {
        let o = Command::new("redis-cli")
            .args(["-p", &port])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(cli(&["PING"]), "PONG");
    assert_eq!(cli(&["BF.RESERVE", "cli", "0.001", "1000"]), "OK");
    assert_eq!(cli(&["BF.ADD", "cli", "hello"]), "1");
    assert_eq!(cli(&["BF.MEXISTS", "cli", "hello", "nope"]), "1\n0");
    assert!(cli(&["BF.INFO", "cli"]).contains("Number of items inserted"));
    assert!(cli(&["foo"]).contains("unknown command 'foo'"));
    assert_eq!(cli(&["-3", "BF.EXISTS", "cli", "hello"]), "(true)");
    // Interactive-mode start-up (COMMAND DOCS etc.) via stdin.
    let out = testkit::run_with_input(
        Command::new("redis-cli").args(["-p", &port]),
        b"BF.CARD cli\nKEYS *\n",
    );
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains('1') && out.contains("cli"), "{out}");
}

#[test]
fn redis_py_client() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let dir2 = tempfile::tempdir().unwrap();
    let s2 = Server::start(dir2.path(), &[]);
    testkit::run_redis_py(
        "test_redis_py.py",
        &[
            "--port".into(),
            s.resp.port().to_string(),
            "--port2".into(),
            s2.resp.port().to_string(),
        ],
    );
}

/// Pipelines: one write of many commands is answered in order, whatever
/// happens to the filters in between (the per-connection name cache must
/// notice deletes and re-creations), a pipeline whose replies pass the
/// 1 MiB flush threshold is answered completely without the client sending
/// anything more, and pipelined lookups are all counted in the metrics.
#[test]
fn pipelines_answer_in_order_and_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let mut c = s.resp();

    // Deletes and re-creations in the middle of a pipeline.
    let script: &[&[&str]] = &[
        &["BF.ADD", "a", "x"],
        &["BF.EXISTS", "a", "x"],
        &["BF.EXISTS", "nope", "x"],
        &["DEL", "a"],
        &["BF.EXISTS", "a", "x"],
        &["BF.MEXISTS", "a", "x", "y"],
        &["BF.RESERVE", "a", "0.01", "100"],
        &["BF.EXISTS", "a", "x"],
        &["BF.ADD", "b", "y"],
        &["BF.EXISTS", "b", "y"],
        &["BF.EXISTS", "a", "x"],
        &["BF.ADD", "a", "x"],
        &["BF.MEXISTS", "a", "x", "y", ""],
        &["BF.EXISTS", "a", ""],
    ];
    let mut all = Vec::new();
    for args in script {
        all.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in *args {
            all.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    }
    c.r.get_mut().write_all(&all).unwrap();
    let replies: Vec<V> = script.iter().map(|_| c.read().unwrap()).collect();
    let ints = |v: &V| v.arr().iter().map(|x| x.int()).collect::<Vec<_>>();
    assert_eq!(replies[0].int(), 1);
    assert_eq!(replies[1].int(), 1);
    assert_eq!(replies[2].int(), 0);
    assert_eq!(replies[3].int(), 1);
    assert_eq!(replies[4].int(), 0, "a deleted filter must not answer");
    assert_eq!(ints(&replies[5]), vec![0, 0]);
    assert_eq!(replies[6], V::Simple("OK".into()));
    assert_eq!(replies[7].int(), 0, "a re-created filter starts empty");
    assert_eq!(replies[8].int(), 1);
    assert_eq!(replies[9].int(), 1);
    assert_eq!(replies[10].int(), 0);
    assert_eq!(replies[11].int(), 1);
    let m = replies[12].arr();
    assert_eq!((m[0].int(), m[1].int()), (1, 0));
    assert!(m[2].err().contains("empty"), "{m:?}");
    assert!(replies[13].err().contains("empty"), "{:?}", replies[13]);

    // Replies far past the flush threshold, all requests in one write.
    assert_eq!(
        c.cmd(&["BF.RESERVE", "big", "0.01", "2000000"]),
        V::Simple("OK".into())
    );
    c.r.get_mut()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    c.r.get_mut()
        .write_all(b"BF.SCANDUMP big 1\r\nBF.SCANDUMP big 1\r\nBF.SCANDUMP big 1\r\nPING\r\n")
        .unwrap();
    for _ in 0..3 {
        let r = c.read().expect("a dump chunk, without sending more");
        assert!(matches!(&r.arr()[1], V::Bulk(b) if b.len() > 1 << 20));
    }
    assert_eq!(c.read().unwrap(), V::Simple("PONG".into()));

    // Every pipelined lookup is counted, per filter and overall.
    let n = 1000;
    let mut all = Vec::new();
    for i in 0..n {
        let item = format!("i{i}");
        all.extend_from_slice(
            format!(
                "*3\r\n$9\r\nBF.EXISTS\r\n$1\r\nb\r\n${}\r\n{item}\r\n",
                item.len()
            )
            .as_bytes(),
        );
    }
    all.extend_from_slice(b"*3\r\n$9\r\nBF.EXISTS\r\n$1\r\nb\r\n$1\r\ny\r\n");
    c.r.get_mut().write_all(&all).unwrap();
    for _ in 0..n {
        c.read().unwrap().int();
    }
    assert_eq!(c.read().unwrap().int(), 1);
    let (st, body) = s.http("GET", "/metrics", None, None);
    assert_eq!(st, 200);
    let text = body["text"].as_str().unwrap().to_string();
    let metric = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    // b: BF.EXISTS b y once in the first pipeline, then n + 1 here.
    assert_eq!(
        metric("bloomgate_filter_checks_total{filter=\"b\"}"),
        (n + 2) as f64
    );
    assert_eq!(metric("bloomgate_filter_hits_total{filter=\"b\"}"), 2.0);
    // Check commands: 9 in the first pipeline, n + 1 here.
    assert_eq!(
        metric("bloomgate_requests_total{proto=\"resp\",op=\"check\"}"),
        (9 + n + 1) as f64
    );
    assert!(
        metric("bloomgate_request_duration_seconds_count{proto=\"resp\",op=\"check\"}")
            >= (n + 1) as f64
    );
}

/// Commands that wait for the store (a `DEL` queued behind a snapshot that is
/// writing a large filter) run off the connection threads: another
/// connection served by the same thread keeps getting answers meanwhile.
#[test]
fn a_waiting_delete_does_not_stall_other_connections() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["--resp-threads", "1"]);
    let mut a = s.resp();
    let mut b = s.resp();
    // ~120 MB of bits: the snapshot takes a while to write them.
    assert_eq!(
        a.cmd(&["BF.RESERVE", "big", "0.0001", "50000000"]),
        V::Simple("OK".into())
    );
    assert_eq!(a.cmd(&["BF.ADD", "big", "x"]).int(), 1);
    assert_eq!(
        a.cmd(&["BF.RESERVE", "other", "0.01", "100"]),
        V::Simple("OK".into())
    );
    let http = s.http;
    let snap =
        std::thread::spawn(move || testkit::http(http, "POST", "/v1/snapshot", None, None).0);
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    a.send(&[b"DEL", b"other"]);
    let mut worst = Duration::ZERO;
    while !snap.is_finished() {
        let t0 = Instant::now();
        assert_eq!(b.cmd(&["PING"]), V::Simple("PONG".into()));
        worst = worst.max(t0.elapsed());
    }
    assert_eq!(snap.join().unwrap(), 200);
    assert_eq!(a.read().unwrap().int(), 1);
    let waited = t.elapsed();
    // Inline, the PING waited as long as the DEL did.
    assert!(
        worst < (waited / 2).max(Duration::from_millis(200)),
        "a PING took {worst:?} while a DEL waited {waited:?}"
    );
}
