//! `bloomgate serve --store redis://…`: filters stored in a real
//! redis-server, served over the Redis protocol (our client, redis-py's
//! `r.bf()`, redis-cli) and HTTP by two servers at once, answering as
//! `bloomgate check` on the filter's file; a Redis that is down is an
//! error (`-TRYAGAIN`, HTTP 503), never "absent"; `--redis-wait`
//! acknowledges adds only once a replica has them.

mod common;
#[path = "../../redis/tests/servers/mod.rs"]
mod servers;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{bg, ok, p, write_lines, Server, V};
use servers::{redis_missing, Cluster, RedisServer};

/// Builds a url/prefix filter of 2000 entries with one whitelisted entry,
/// pushes it as `urls` to `redis`; returns the file.
fn build_and_push(d: &Path, redis: &RedisServer) -> std::path::PathBuf {
    let entries = d.join("entries.txt");
    let lines: Vec<String> = (0..2000)
        .map(|i| format!("http://evil{i}.example/phish/"))
        .collect();
    write_lines(&entries, &lines);
    let file = d.join("urls.bgf");
    ok(&bg(&[
        "build",
        "--match",
        "prefix",
        "-n",
        "10000",
        "-p",
        "1e-4",
        "-o",
        p(&file),
        p(&entries),
    ]));
    ok(&bg(&[
        "whitelist",
        "add",
        p(&file),
        "http://evil7.example/phish/",
    ]));
    ok(&bg(&[
        "push",
        p(&file),
        &format!("redis://{}/urls", redis.addr()),
    ]));
    file
}

/// Queries: entries, URLs under them, misses, the whitelisted entry, invalid lines.
fn queries() -> Vec<String> {
    let mut q = Vec::new();
    for i in 0..150 {
        q.push(format!("http://evil{i}.example/phish/"));
        q.push(format!("HTTP://EVIL{i}.example:80/phish/./login.php#frag"));
        q.push(format!("http://good{i}.example/"));
        q.push(format!("http://evil{i}.example/other/"));
    }
    q.push("http://evil7.example/phish/x".into());
    q.push("http://[::1".into());
    q
}

fn serve(d: &Path, redis: &RedisServer, extra: &[&str]) -> Server {
    let store = format!("redis://{}", redis.addr());
    let mut args = vec!["--store", store.as_str()];
    args.extend_from_slice(extra);
    Server::start_args(d, &args)
}

fn mexists(s: &Server, items: &[String]) -> V {
    let mut args: Vec<&str> = vec!["BF.MEXISTS", "urls"];
    args.extend(items.iter().map(String::as_str));
    s.resp().cmd(&args)
}

#[test]
fn two_servers_share_a_filter_stored_in_redis() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let redis = RedisServer::start(d, &[]);
    let file = build_and_push(d, &redis);
    let q = queries();
    let qfile = d.join("q.txt");
    write_lines(&qfile, &q);
    // (Exit status 2: the invalid line is reported.)
    let checked = bg(&["check", p(&file), p(&qfile)]);
    assert!(String::from_utf8_lossy(&checked.stderr).contains("invalid url query"));
    let hits = String::from_utf8(checked.stdout).unwrap();
    let hit_lines: Vec<&str> = hits.lines().collect();
    assert_eq!(hit_lines.len(), 298, "{hits}");
    std::fs::write(d.join("hits.txt"), &hits).unwrap();

    let a = serve(d, &redis, &[]);
    let b = serve(d, &redis, &[]);
    // The same file served from a data directory: the reference answers
    // of the Redis protocol (invalid lines included).
    let local_dir = d.join("local");
    std::fs::create_dir(&local_dir).unwrap();
    std::fs::copy(&file, local_dir.join("urls.bgf")).unwrap();
    std::fs::copy(
        d.join("urls.bgf.whitelist"),
        local_dir.join("urls.bgf.whitelist"),
    )
    .unwrap();
    let local = Server::start(&local_dir, &[]);
    let reference = mexists(&local, &q);
    for (i, v) in reference.arr().iter().enumerate() {
        match v {
            V::Int(n) => assert_eq!(*n == 1, hit_lines.contains(&q[i].as_str()), "{}", q[i]),
            V::Err(_) => assert_eq!(q[i], "http://[::1"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(mexists(&a, &q), reference);
    assert_eq!(mexists(&b, &q), reference);
    for (i, query) in q.iter().enumerate().step_by(37) {
        assert_eq!(
            a.resp().cmd(&["BF.EXISTS", "urls", query]),
            local.resp().cmd(&["BF.EXISTS", "urls", query]),
            "{i}: {query}"
        );
    }

    // redis-cli against both.
    for s in [&a, &b] {
        let cli = |item: &str| {
            let out = Command::new("redis-cli")
                .args(["-p", &s.resp.port().to_string()])
                .args(["BF.EXISTS", "urls", item])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        assert_eq!(cli("http://evil3.example/phish/login"), "1");
        assert_eq!(cli("http://good3.example/"), "0");
        assert_eq!(cli("http://evil7.example/phish/"), "0", "whitelisted");
    }

    // An add through A is a hit through B; of two adds of one new item
    // (A, then B) only the first is new.
    let card0 = b.resp().cmd(&["BF.CARD", "urls"]).int();
    let item = "http://fresh.example/path";
    assert_eq!(b.resp().cmd(&["BF.EXISTS", "urls", item]), V::Int(0));
    assert_eq!(a.resp().cmd(&["BF.ADD", "urls", item]), V::Int(1));
    assert_eq!(b.resp().cmd(&["BF.EXISTS", "urls", item]), V::Int(1));
    let item2 = "http://fresh2.example/";
    assert_eq!(a.resp().cmd(&["BF.ADD", "urls", item2]), V::Int(1));
    assert_eq!(b.resp().cmd(&["BF.ADD", "urls", item2]), V::Int(0));
    // The metadata's count follows (BF.CARD from the other server).
    assert_eq!(b.resp().cmd(&["BF.CARD", "urls"]).int(), card0 + 2);

    // redis-py's r.bf(): exists/mexists/madd on both servers.
    common::run_redis_py(
        "test_redis_store.py",
        &[
            "shared".into(),
            "--a".into(),
            a.resp.port().to_string(),
            "--b".into(),
            b.resp.port().to_string(),
            "--name".into(),
            "urls".into(),
            "--queries".into(),
            p(&qfile).into(),
            "--hits".into(),
            p(&d.join("hits.txt")).into(),
            "--invalid".into(),
            "http://[::1".into(),
        ],
    );

    // HTTP through the Redis store: check (as the file), add, info.
    let (st, v) = a.http(
        "GET",
        "/v1/filters/urls/check?item=HTTP%3A%2F%2FEVIL5.example%3A80%2Fphish%2F.%2Flogin.php",
        None,
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["hit"], true);
    assert_eq!(v["matched"], "evil5.example/phish/");
    let (st, v) = b.http(
        "GET",
        "/v1/filters/urls/check?item=http://evil7.example/phish/",
        None,
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (v["hit"].as_bool(), v["whitelisted"].as_bool()),
        (Some(false), Some(true))
    );
    let body = serde_json::to_string(&q).unwrap();
    let (st, va) = a.http("POST", "/v1/filters/urls/check", Some(&body), None);
    assert_eq!(st, 200, "{va}");
    let (_, vl) = local.http("POST", "/v1/filters/urls/check", Some(&body), None);
    assert_eq!(va, vl, "HTTP batch check: Redis store and file agree");
    let (st, v) = b.http(
        "POST",
        "/v1/filters/urls/add",
        Some(r#"{"items": ["http://http-added.example/a", "http://evil1.example/phish/", "http://[bad"]}"#),
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["added"], 1, "{v}");
    let (_, v) = a.http(
        "GET",
        "/v1/filters/urls/check?item=http://http-added.example/a",
        None,
        None,
    );
    assert_eq!(v["hit"], true, "{v}");
    let (st, v) = a.http("GET", "/v1/filters/urls", None, None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["layout"], "blocked");
    assert_eq!(v["match_mode"], "prefix");
    assert_eq!(v["whitelist_entries"], 1);
    let (st, v) = a.http("GET", "/v1/filters", None, None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["filters"].as_array().unwrap().len(), 1, "{v}");

    // What a Redis store cannot do is said, not faked.
    let e = a.resp().cmd(&["BF.SCANDUMP", "urls", "0"]);
    assert!(e.err().contains("not supported"), "{e:?}");
    let e = a.resp().cmd(&["BF.RESERVE", "grow", "0.01", "100"]);
    assert!(e.err().contains("not supported"), "{e:?}");
    // A non-scaling filter is created in Redis and served by the other server.
    assert_eq!(
        a.resp()
            .cmd(&["BF.RESERVE", "fixed", "0.01", "1000", "NONSCALING"]),
        V::Simple("OK".into())
    );
    assert_eq!(b.resp().cmd(&["BF.ADD", "fixed", "x"]), V::Int(1));
    assert_eq!(a.resp().cmd(&["BF.EXISTS", "fixed", "x"]), V::Int(1));
    assert_eq!(redis.cli(&["EXISTS", "bg:{fixed}"]).trim(), "(integer) 1");
    // Deleting removes its keys.
    assert_eq!(a.resp().cmd(&["DEL", "fixed"]), V::Int(1));
    assert_eq!(redis.cli(&["EXISTS", "bg:{fixed}"]).trim(), "(integer) 0");

    // Whitelist changes through HTTP are stored in Redis (the set
    // `bg:{urls}:whitelist`) and answered by the server that made them.
    let (st, v) = a.http(
        "POST",
        "/v1/filters/urls/whitelist",
        Some(r#"["http://evil3.example/phish/"]"#),
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["results"][0]["was_hit"], true, "{v}");
    let (_, v) = a.http(
        "GET",
        "/v1/filters/urls/check?item=http://evil3.example/phish/x",
        None,
        None,
    );
    assert_eq!(
        (v["hit"].as_bool(), v["whitelisted"].as_bool()),
        (Some(false), Some(true)),
        "{v}"
    );
    assert_eq!(
        redis.cli(&["SCARD", "bg:{urls}:whitelist"]).trim(),
        "(integer) 2"
    );
    let (st, v) = a.http(
        "DELETE",
        "/v1/filters/urls/whitelist",
        Some(r#"["http://evil3.example/phish/"]"#),
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["results"][0]["removed"], true, "{v}");
    assert_eq!(
        a.resp()
            .cmd(&["BF.EXISTS", "urls", "http://evil3.example/phish/x"]),
        V::Int(1)
    );
}

#[test]
fn a_cluster_is_served_and_waits_for_every_master_written() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cluster = Cluster::start(d);
    let entries = d.join("entries.txt");
    let lines: Vec<String> = (0..3000).map(|i| format!("key-{i}")).collect();
    write_lines(&entries, &lines);
    let file = d.join("keys.bgf");
    // 2·10⁶ raw keys at 1e-4: 4.6 MB, five shards over the three masters.
    ok(&bg(&[
        "build",
        "--keys",
        "raw",
        "-n",
        "2000000",
        "-p",
        "1e-4",
        "-o",
        p(&file),
        p(&entries),
    ]));
    ok(&bg(&["push", p(&file), &cluster.address("keys")]));
    // Every master's replica in sync (after `--cluster create` they may still be syncing).
    let t = Instant::now();
    for m in cluster.masters() {
        let master = cluster.nodes.iter().find(|n| n.port == m.port).unwrap();
        while !master
            .cli(&["INFO", "replication"])
            .contains("state=online")
        {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "replica of {} not online",
                m.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let address = cluster.address("keys");
    let store = address.strip_suffix("/keys").unwrap();
    let s = Server::start_args(d, &["--store", store, "--redis-wait", "1"]);

    // Found by SCAN on the masters; answers as the file.
    let (st, v) = s.http("GET", "/v1/filters", None, None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["filters"][0]["name"], "keys", "{v}");
    let q: Vec<String> = (0..400)
        .map(|i| {
            if i % 2 == 0 {
                format!("key-{i}")
            } else {
                format!("other-{i}")
            }
        })
        .collect();
    let mut args: Vec<&str> = vec!["BF.MEXISTS", "keys"];
    args.extend(q.iter().map(String::as_str));
    let got = s.resp().cmd(&args);
    let expected: Vec<V> = (0..400).map(|i| V::Int((i % 2 == 0) as i64)).collect();
    let hits = got.arr().iter().filter(|v| **v == V::Int(1)).count();
    // Misses may be false positives at 1e-4: compare with the file.
    let qfile = d.join("q.txt");
    write_lines(&qfile, &q);
    let from_file = ok(&bg(&["check", p(&file), p(&qfile)]));
    assert_eq!(hits, from_file.lines().count());
    for (i, v) in got.arr().iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(*v, expected[i]);
        }
        assert_eq!(
            *v == V::Int(1),
            from_file.lines().any(|l| l == q[i]),
            "{}",
            q[i]
        );
    }

    // Adds over many shards (so several masters), each acknowledged only
    // once WAIT on every master written saw its replica.
    let new: Vec<String> = (0..200).map(|i| format!("new-{i}")).collect();
    let mut args: Vec<&str> = vec!["BF.MADD", "keys"];
    args.extend(new.iter().map(String::as_str));
    let added = s.resp().cmd(&args);
    assert_eq!(
        added.arr().iter().filter(|v| **v == V::Int(1)).count(),
        200,
        "{added:?}"
    );
    args[0] = "BF.MEXISTS";
    assert_eq!(s.resp().cmd(&args).arr(), vec![V::Int(1); 200].as_slice());
}

#[test]
fn redis_down_is_an_error_never_absent() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let mut redis = RedisServer::start(d, &aof);
    build_and_push(d, &redis);
    let port = redis.port;
    let s = serve(d, &redis, &[]);
    let hit = "http://evil1.example/phish/";
    assert_eq!(s.resp().cmd(&["BF.EXISTS", "urls", hit]), V::Int(1));
    assert_eq!(
        s.resp()
            .cmd(&["BF.ADD", "urls", "http://before-kill.example/"]),
        V::Int(1)
    );

    redis.kill9();
    for item in [hit, "http://never.example/"] {
        let v = s.resp().cmd(&["BF.EXISTS", "urls", item]);
        assert!(v.err().starts_with("TRYAGAIN"), "{v:?}");
    }
    let v = s
        .resp()
        .cmd(&["BF.MEXISTS", "urls", hit, "http://x.example/"]);
    assert!(v.err().starts_with("TRYAGAIN"), "{v:?}");
    let v = s
        .resp()
        .cmd(&["BF.ADD", "urls", "http://while-down.example/"]);
    assert!(v.err().starts_with("TRYAGAIN"), "{v:?}");
    let (st, v) = s.http(
        "GET",
        "/v1/filters/urls/check?item=http://evil1.example/phish/",
        None,
        None,
    );
    assert_eq!(st, 503, "{v}");
    assert_eq!(v["error"]["code"], "unavailable", "{v}");
    let (st, v) = s.http(
        "POST",
        "/v1/filters/urls/check",
        Some(r#"["http://evil1.example/phish/"]"#),
        None,
    );
    assert_eq!(st, 503, "{v}");
    let (st, v) = s.http(
        "POST",
        "/v1/filters/urls/add",
        Some(r#"{"items": ["http://while-down.example/"]}"#),
        None,
    );
    assert_eq!(st, 503, "{v}");
    common::run_redis_py(
        "test_redis_store.py",
        &[
            "down".into(),
            "--a".into(),
            s.resp.port().to_string(),
            "--name".into(),
            "urls".into(),
        ],
    );

    // The same server again, with its data (AOF): answers again, the add
    // acknowledged before the kill included.
    let _redis = RedisServer::start_on(d, port, &aof);
    let t = Instant::now();
    loop {
        let v = s.resp().cmd(&["BF.EXISTS", "urls", hit]);
        if v == V::Int(1) {
            break;
        }
        assert!(v.err().starts_with("TRYAGAIN"), "{v:?}");
        assert!(t.elapsed() < Duration::from_secs(10), "{v:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        s.resp()
            .cmd(&["BF.EXISTS", "urls", "http://before-kill.example/"]),
        V::Int(1)
    );
    let (st, v) = s.http(
        "GET",
        "/v1/filters/urls/check?item=http://evil1.example/phish/",
        None,
        None,
    );
    assert_eq!((st, v["hit"].as_bool()), (200, Some(true)), "{v}");
}

#[test]
fn redis_wait_acknowledges_only_what_a_replica_has() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let redis = RedisServer::start(d, &[]);
    build_and_push(d, &redis);
    let s = serve(d, &redis, &["--redis-wait", "1", "--redis-wait-ms", "1500"]);

    // No replica: not acknowledged, over both protocols.
    let v = s.resp().cmd(&["BF.ADD", "urls", "http://unacked.example/"]);
    assert!(v.err().starts_with("TRYAGAIN"), "{v:?}");
    assert!(v.err().contains("0 of 1 replicas"), "{v:?}");
    let (st, v) = s.http(
        "POST",
        "/v1/filters/urls/add",
        Some(r#"{"items": ["http://unacked2.example/"]}"#),
        None,
    );
    assert_eq!(st, 503, "{v}");
    // Lookups need no replica.
    assert_eq!(
        s.resp()
            .cmd(&["BF.EXISTS", "urls", "http://evil1.example/phish/"]),
        V::Int(1)
    );

    // A replica that has caught up: acknowledged.
    let master = redis.addr();
    let (host, port) = master.split_once(':').unwrap();
    let replica = RedisServer::start(d, &["--replicaof", host, port]);
    let t = Instant::now();
    // Online as the master sees it (it counts the replica for WAIT from then on).
    while !redis.cli(&["INFO", "replication"]).contains("state=online") {
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "replica did not sync"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        s.resp().cmd(&["BF.ADD", "urls", "http://acked.example/"]),
        V::Int(1)
    );
    let (st, v) = s.http(
        "POST",
        "/v1/filters/urls/add",
        Some(r#"{"items": ["http://acked2.example/"]}"#),
        None,
    );
    assert_eq!((st, v["added"].as_u64()), (200, Some(1)), "{v}");
    // The replica has the bits: a `bloomgate check` against it finds the item.
    let q = d.join("acked.txt");
    write_lines(&q, &["http://acked.example/".to_string()]);
    let out = ok(&bg(&[
        "check",
        &format!("redis://{}/urls", replica.addr()),
        p(&q),
    ]));
    assert_eq!(out.trim(), "http://acked.example/");
}
