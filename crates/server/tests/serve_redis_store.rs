//! `bloomgate serve --store redis://…`: filters stored in a real
//! redis-server, served over the Redis protocol (our client, redis-py's
//! `r.bf()`, redis-cli) and HTTP by two servers at once, answering as
//! `bloomgate check` on the filter's file; a Redis that is down is an
//! error (`-TRYAGAIN`, HTTP 503), never "absent"; `--redis-wait`
//! acknowledges adds only once a replica has them.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use testkit::redis::{redis_missing, Cluster, RedisServer};
use testkit::{bg, ok, p, write_lines, Server, V};

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
    testkit::run_redis_py(
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
    // A scaling filter is one layer in Redis, planned for at least
    // --redis-scaling-items (default 1,000,000): RedisBloom's default
    // reserve and redis-py's auto-creating add work.
    assert_eq!(
        a.resp().cmd(&["BF.RESERVE", "grow", "0.01", "100"]),
        V::Simple("OK".into())
    );
    let info = format!("{:?}", b.resp().cmd(&["BF.INFO", "grow", "CAPACITY"]));
    assert!(info.contains("1000000"), "{info}");
    assert_eq!(b.resp().cmd(&["BF.ADD", "auto", "x"]), V::Int(1));
    assert_eq!(a.resp().cmd(&["BF.EXISTS", "auto", "x"]), V::Int(1));
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
    // Listed as Redis holds them now, by either server (the CLI's entry
    // and this one, normalized).
    let (st, v) = b.http("GET", "/v1/filters/urls/whitelist", None, None);
    assert_eq!(st, 200, "{v}");
    let want = ["evil3.example/phish/", "evil7.example/phish/"];
    let members = redis.cli(&["SMEMBERS", "bg:{urls}:whitelist"]);
    assert!(want.iter().all(|w| members.contains(w)), "{members}");
    assert_eq!(
        v,
        serde_json::json!({"count": 2, "entries": want, "next": null}),
        "{members}"
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
    cluster.wait_replicas_online(Duration::from_secs(20));
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
    // A failed add's outcome is unknown: the client is told to treat the
    // items as new (they may have been added; a retry may say "exists").
    assert!(
        v.err().contains("add outcome unknown")
            && v.err().contains("treat every item of this add as new"),
        "{v:?}"
    );
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
    testkit::run_redis_py(
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
    // A master without the replicas asked for is named at the start.
    let warned = {
        let mut first = serve(d, &redis, &["--redis-wait", "1", "--redis-wait-ms", "1500"]);
        first.term();
        first.stderr()
    };
    assert!(
        warned.contains(&format!(
            "{}: --redis-wait 1 but this master has 0 replicas connected",
            redis.addr()
        )),
        "{warned}"
    );

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
    // Online as the master sees it (it counts the replica for WAIT from then on).
    redis.wait_replica_online(Duration::from_secs(15));
    // Once a replica is connected, a start names no master.
    let started_alone = {
        let mut again = serve(d, &redis, &["--redis-wait", "1"]);
        again.term();
        again.stderr()
    };
    assert!(
        !started_alone.contains("but this master has"),
        "no warning once a replica is connected: {started_alone}"
    );
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

/// Builds a raw-key filter planned for `planned` keys at 10⁻⁴ holding
/// `keys`, pushes it to the cluster as `name`, and waits until every
/// master's replica is online (the master counts it for `WAIT` from then).
fn push_to_cluster(d: &Path, cluster: &Cluster, name: &str, planned: &str, keys: &[String]) {
    let entries = d.join(format!("{name}-entries.txt"));
    write_lines(&entries, keys);
    let file = d.join(format!("{name}.bgf"));
    ok(&bg(&[
        "build",
        "--keys",
        "raw",
        "-n",
        planned,
        "-p",
        "1e-4",
        "-o",
        p(&file),
        p(&entries),
    ]));
    ok(&bg(&["push", p(&file), &cluster.address(name)]));
    cluster.wait_replicas_online(Duration::from_secs(30));
}

/// The `--store` address of a cluster (its filter address without the name).
fn cluster_store(cluster: &Cluster) -> String {
    let a = cluster.address("x");
    a.strip_suffix("/x").unwrap().to_string()
}

/// `BF.MADD name items…` through `s`: per item, whether it was new.
fn madd(s: &Server, name: &str, items: &[String]) -> Result<Vec<bool>, String> {
    let mut args: Vec<&str> = vec!["BF.MADD", name];
    args.extend(items.iter().map(String::as_str));
    match s.resp().cmd(&args) {
        V::Arr(v) => Ok(v
            .iter()
            .map(|x| match x {
                V::Int(n) => *n == 1,
                other => panic!("{other:?}"),
            })
            .collect()),
        V::Err(e) => Err(e),
        other => panic!("{other:?}"),
    }
}

#[test]
fn cli_and_two_servers_write_one_cluster_filter_at_once() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cluster = Cluster::start(d);
    // 10⁷ planned keys: 24 MB, 23 shards over the three masters. At
    // 11,000 keys the chance that a fresh key is a false positive (then
    // "new" to no one) is below 10⁻³⁰: each fresh key is new to exactly one.
    push_to_cluster(d, &cluster, "shared", "1e7", &["seed-key".to_string()]);
    let store = cluster_store(&cluster);
    let a = Server::start_args(d, &["--store", &store]);
    let b = Server::start_args(d, &["--store", &store]);

    // Four writers at once: two `bloomgate add` processes and two threads
    // sending BF.MADD to servers A and B. Each adds 2,000 keys of its own
    // and the same 3,000 shared keys (half of them in reverse order).
    let shared: Vec<String> = (0..3000).map(|i| format!("shared-{i}")).collect();
    let lists: Vec<Vec<String>> = (0..4)
        .map(|w| {
            let mut l: Vec<String> = (0..2000).map(|i| format!("w{w}-{i}")).collect();
            l.extend(shared.iter().cloned());
            if w % 2 == 1 {
                l.reverse();
            }
            l
        })
        .collect();
    let address = cluster.address("shared");
    let mut children = Vec::new();
    for (w, list) in lists.iter().enumerate().take(2) {
        let input = d.join(format!("w{w}.txt"));
        write_lines(&input, list);
        children.push(
            Command::new(testkit::bin())
                .args(["add", &address, p(&input), "--print-new"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    let told: Vec<Vec<String>> = std::thread::scope(|scope| {
        let servers = [&a, &b];
        let threads: Vec<_> = (2..4)
            .map(|w| {
                let (s, list) = (servers[w - 2], &lists[w]);
                scope.spawn(move || {
                    let mut new = Vec::new();
                    for batch in list.chunks(100) {
                        let answers = madd(s, "shared", batch).expect("acknowledged");
                        new.extend(
                            batch
                                .iter()
                                .zip(answers)
                                .filter(|(_, n)| *n)
                                .map(|(k, _)| k.clone()),
                        );
                    }
                    new
                })
            })
            .collect();
        let mut told: Vec<Vec<String>> = children
            .into_iter()
            .map(|c| {
                ok(&c.wait_with_output().unwrap())
                    .lines()
                    .map(String::from)
                    .collect()
            })
            .collect();
        told.extend(threads.into_iter().map(|t| t.join().unwrap()));
        told
    });
    let mut claims: std::collections::HashMap<&str, usize> = Default::default();
    for (w, new) in told.iter().enumerate() {
        let own = format!("w{w}-");
        assert_eq!(
            new.iter().filter(|k| k.starts_with(&own)).count(),
            2000,
            "writer {w} was told all its own keys were new"
        );
        for k in new {
            *claims.entry(k.as_str()).or_default() += 1;
        }
    }
    for s in &shared {
        assert_eq!(
            claims.get(s.as_str()),
            Some(&1),
            "{s}: new to exactly one writer"
        );
    }
    // Every acknowledged add is a hit: through the CLI and both servers.
    let all: Vec<String> = shared
        .iter()
        .cloned()
        .chain((0..4).flat_map(|w| (0..2000).map(move |i| format!("w{w}-{i}"))))
        .collect();
    let all_file = d.join("all.txt");
    write_lines(&all_file, &all);
    assert_eq!(
        ok(&bg(&["check", &address, p(&all_file), "--count"])).trim(),
        "11000"
    );
    for s in [&a, &b] {
        for batch in all.chunks(500) {
            let mut args: Vec<&str> = vec!["BF.MEXISTS", "shared"];
            args.extend(batch.iter().map(String::as_str));
            assert_eq!(
                s.resp().cmd(&args).arr(),
                vec![V::Int(1); batch.len()].as_slice()
            );
        }
    }
    // The metadata's count has every new key once.
    assert_eq!(a.resp().cmd(&["BF.CARD", "shared"]).int(), 1 + 11000);
}

#[test]
fn acknowledged_adds_survive_a_master_failover_with_redis_wait() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut cluster = Cluster::start(d);
    push_to_cluster(d, &cluster, "durable", "1e7", &["seed-key".to_string()]);
    let store = cluster_store(&cluster);
    let s = Server::start_args(
        d,
        &[
            "--store",
            &store,
            "--redis-wait",
            "1",
            "--redis-wait-ms",
            "1000",
        ],
    );
    // The victim: a master that holds shards but not the metadata.
    let meta_slot = bloomgate_redis::layout::key_slot(b"bg:{durable}");
    let masters = cluster.masters();
    let owner = |slot: u16| {
        masters
            .iter()
            .find(|m| m.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .unwrap()
            .port
    };
    let victim = masters
        .iter()
        .map(|m| m.port)
        .find(|&port| port != owner(meta_slot))
        .unwrap();
    assert!(
        (0..23).any(|i| owner(bloomgate_redis::layout::shard_slot("durable", i)) == victim),
        "the victim holds shards"
    );

    // A writer adds batches of 20 keys without pause; a batch is
    // acknowledged only once WAIT saw a replica of every master written.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (batches, refusals) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let (acked, refused) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let (mut acked, mut refused) = (Vec::new(), 0usize);
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let batch: Vec<String> = (n..n + 20).map(|i| format!("durable-{i}")).collect();
                n += 20;
                match madd(&s, "durable", &batch) {
                    Ok(_) => acked.extend(batch),
                    Err(e) => {
                        assert!(e.starts_with("TRYAGAIN"), "{e}");
                        refused += 1;
                        refusals.fetch_add(1, SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
                batches.fetch_add(1, SeqCst);
            }
            (acked, refused)
        });
        // Batches before the kill: at least 1.5 s of them, and at least
        // ten (a loaded machine is slower).
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(1500)
            || (batches.load(SeqCst) < 10 && t.elapsed() < Duration::from_secs(60))
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        cluster.node(victim).kill9();
        let t = Instant::now();
        cluster.wait_failover(victim, Duration::from_secs(30));
        eprintln!("failover after {:.1} s", t.elapsed().as_secs_f64());
        // Adds go on after the failover: a batch that writes to the
        // promoted replica (which has no replica of its own now) is
        // refused, WAIT seeing 0 of 1; the others are acknowledged. At
        // least 1.5 s of them, and until the writer has met a refusal and
        // written more batches since the failover.
        let (t, after) = (Instant::now(), batches.load(SeqCst));
        while t.elapsed() < Duration::from_millis(1500)
            || ((refusals.load(SeqCst) == 0 || batches.load(SeqCst) < after + 10)
                && t.elapsed() < Duration::from_secs(60))
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        writer.join().unwrap()
    });
    eprintln!(
        "{} keys acknowledged, {refused} batches refused",
        acked.len()
    );
    assert!(acked.len() >= 200, "{}", acked.len());
    assert!(refused > 0, "the kill was met by the writer");
    // Every acknowledged key is in the filter after the failover.
    let file = d.join("acked.txt");
    write_lines(&file, &acked);
    assert_eq!(
        ok(&bg(&[
            "check",
            &cluster.address("durable"),
            p(&file),
            "--count"
        ]))
        .trim(),
        acked.len().to_string()
    );
    for batch in acked.chunks(500) {
        let mut args: Vec<&str> = vec!["BF.MEXISTS", "durable"];
        args.extend(batch.iter().map(String::as_str));
        assert_eq!(
            s.resp().cmd(&args).arr(),
            vec![V::Int(1); batch.len()].as_slice()
        );
    }
}

/// Polls `BF.EXISTS name item` on `s` until it answers `want` (fails after 5 s).
fn eventually(s: &Server, name: &str, item: &str, want: i64) -> Duration {
    let t = Instant::now();
    loop {
        let v = s.resp().cmd(&["BF.EXISTS", name, item]);
        if v == V::Int(want) {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{item}: {v:?}, want {want}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_server_sees_changes_made_elsewhere_and_refused_passwords() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let redis = RedisServer::start(d, &[]);
    build_and_push(d, &redis);
    let s = serve(d, &redis, &[]);
    let address = format!("redis://{}/urls", redis.addr());
    let hit = "http://evil3.example/phish/";
    assert_eq!(s.resp().cmd(&["BF.EXISTS", "urls", hit]), V::Int(1));

    // A whitelist change through the CLI is applied by the running server
    // within its revalidation interval (1 s), and so is its removal.
    ok(&bg(&["whitelist", "add", &address, hit]));
    let took = eventually(&s, "urls", hit, 0);
    eprintln!("whitelist change seen after {:.2} s", took.as_secs_f64());
    ok(&bg(&["whitelist", "remove", &address, hit]));
    eventually(&s, "urls", hit, 1);

    // A replacement with another filter (other entries, size and seed):
    // the server answers by the new one.
    let entries = d.join("new-entries.txt");
    write_lines(&entries, ["http://replaced.example/only/"]);
    let other = d.join("other.bgf");
    ok(&bg(&[
        "build",
        "--match",
        "prefix",
        "-n",
        "500",
        "-p",
        "1e-6",
        "-o",
        p(&other),
        p(&entries),
    ]));
    ok(&bg(&["push", "--force", p(&other), &address]));
    eventually(&s, "urls", "http://replaced.example/only/x", 1);
    eventually(&s, "urls", hit, 0);
    // `bloomgate info` on the Redis filter: the fill and the rate from it.
    let info: serde_json::Value =
        serde_json::from_str(&ok(&bg(&["info", &address, "--json"]))).unwrap();
    let fill = info["fill_ratio"].as_f64().unwrap();
    assert!(fill > 0.0 && fill < 0.01, "{info}");
    assert!(info["fp_at_fill"].as_f64().unwrap() < 1e-6, "{info}");
    let (_, v) = s.http("GET", "/v1/filters/urls", None, None);
    assert!(
        (v["fill_ratio"].as_f64().unwrap() - fill).abs() < 1e-12,
        "{v}"
    );

    // A refused password is an authentication error, not "unavailable":
    // for a running server, on a filter it opens after the change (a new
    // connection), over both protocols; the CLI says so, and a server
    // refuses to start.
    ok(&bg(&[
        "push",
        p(&other),
        &format!("redis://{}/later", redis.addr()),
    ]));
    redis.cli(&["CONFIG", "SET", "requirepass", "s3cret"]);
    let v = s
        .resp()
        .cmd(&["BF.EXISTS", "later", "http://replaced.example/only/"]);
    assert!(v.err().starts_with("ERR"), "{v:?}");
    assert!(v.err().contains("authentication failed"), "{v:?}");
    let (st, v) = s.http(
        "GET",
        "/v1/filters/later/check?item=http://replaced.example/only/",
        None,
        None,
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("authentication failed"),
        "{v}"
    );
    let wrong = format!("redis://:wrong@{}/urls", redis.addr());
    let q = d.join("q.txt");
    write_lines(&q, [hit]);
    let out = bg(&["check", &wrong, p(&q)]);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("authentication failed"), "{err}");
    assert!(!err.contains("unavailable"), "{err}");
    let mut child = Command::new(testkit::bin())
        .args(["serve", "--http", "127.0.0.1:0", "--resp", "127.0.0.1:0"])
        .args(["--store", &format!("redis://:wrong@{}", redis.addr())])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("serve started with a refused password");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("authentication failed"), "{err}");
}

/// An orchestrator starts bloomgate before Redis: the server starts,
/// `/healthz` reports the store unavailable (503), lookups answer
/// `-TRYAGAIN`/503 (counted in `/metrics`), and once Redis is up with a
/// filter the same server answers, lists it, and reports healthy.
#[test]
fn a_server_started_before_redis_answers_once_redis_is_up() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A free port, with no Redis on it yet.
    let mut probe = RedisServer::start(d, &[]);
    let port = probe.port;
    probe.kill9();
    drop(probe);
    let s = Server::start_args(d, &["--store", &format!("redis://127.0.0.1:{port}")]);
    let (st, v) = s.http("GET", "/healthz", None, None);
    assert_eq!(st, 503, "{v}");
    assert_eq!(v["status"], "store_unavailable", "{v}");
    assert_eq!(v["store"]["reachable"], false, "{v}");
    assert!(
        v["store"]["error"]
            .as_str()
            .unwrap()
            .contains(&port.to_string()),
        "{v}"
    );
    let hit = "http://evil1.example/phish/";
    let e = s.resp().cmd(&["BF.EXISTS", "urls", hit]);
    assert!(e.err().starts_with("TRYAGAIN"), "{e:?}");
    let (st, v) = s.http(
        "GET",
        &format!("/v1/filters/urls/check?item={hit}"),
        None,
        None,
    );
    assert_eq!(st, 503, "{v}");
    let (_, v) = s.http("GET", "/healthz", None, None);
    assert!(
        v["store"]["unavailable_answers"].as_u64().unwrap() >= 2,
        "{v}"
    );
    let metrics = testkit::http(s.http, "GET", "/metrics", None, None);
    let text = metrics.1["text"].as_str().unwrap().to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("bloomgate_store_unavailable_total "))
        .unwrap_or_else(|| panic!("{text}"));
    let n: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= 2, "{line}");

    // Redis comes up, and the filter is pushed into it.
    let redis = RedisServer::start_on(d, port, &[]);
    build_and_push(d, &redis);
    let t = Instant::now();
    loop {
        let v = s.resp().cmd(&["BF.EXISTS", "urls", hit]);
        if v == V::Int(1) {
            break;
        }
        assert!(v.err().starts_with("TRYAGAIN"), "{v:?}");
        assert!(t.elapsed() < Duration::from_secs(30), "{v:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (st, v) = s.http("GET", "/healthz", None, None);
    assert_eq!((st, &v["status"]), (200, &serde_json::json!("ok")), "{v}");
    assert_eq!(v["store"]["reachable"], true, "{v}");
    let (st, v) = s.http("GET", "/v1/filters", None, None);
    assert_eq!(st, 200, "{v}");
    assert!(v.to_string().contains("\"urls\""), "{v}");
}
