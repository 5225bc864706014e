//! `bloomgate` with filters stored in Redis: every command against a real
//! standalone redis-server and a real Redis Cluster (three masters, three
//! replicas) started on loopback ports, compared with the same filter in a
//! file. Covers concurrent writers, a reshard during adds, and a master
//! killed with SIGKILL until its replica takes over.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bloomgate_redis::layout;
use testkit::redis::{redis_missing, Cluster, RedisServer};
use testkit::{bg, ok, p, write_lines};

/// `check` on the file and on its Redis copy print the same, exit the same.
fn same_check(file: &Path, addr: &str, queries: &Path, extra: &[&str]) -> String {
    let mut a = vec!["check", p(file), p(queries)];
    a.extend_from_slice(extra);
    let from_file = bg(&a);
    a[1] = addr;
    let from_redis = bg(&a);
    assert_eq!(
        String::from_utf8_lossy(&from_file.stdout),
        String::from_utf8_lossy(&from_redis.stdout),
        "check {extra:?}"
    );
    assert_eq!(
        from_file.status.code(),
        from_redis.status.code(),
        "{extra:?}"
    );
    assert_eq!(
        String::from_utf8_lossy(&from_file.stderr),
        String::from_utf8_lossy(&from_redis.stderr),
        "{extra:?}"
    );
    String::from_utf8_lossy(&from_file.stdout).into_owned()
}

#[test]
fn standalone_every_command_answers_as_the_file() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = RedisServer::start(d, &[]);
    let addr = format!("redis://{}/urls", server.addr());

    // A url/prefix filter with a whitelist, pushed with it.
    let entries = d.join("entries.txt");
    write_lines(
        &entries,
        (0..3000).map(|i| format!("http://evil{i}.example/phish/")),
    );
    let file = d.join("f.bgf");
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
    let pushed = ok(&bg(&["push", p(&file), &addr]));
    assert!(pushed.is_empty());
    // Pushing again needs --force.
    let again = bg(&["push", p(&file), &addr]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists already"));

    // Hits (entries, URLs under them), misses, the whitelisted entry, and
    // invalid lines: identical answers, exit codes and messages.
    let queries = d.join("q.txt");
    let mut q: Vec<String> = Vec::new();
    for i in 0..200 {
        q.push(format!("http://evil{i}.example/phish/"));
        q.push(format!("HTTP://EVIL{i}.example:80/phish/./login.php#frag"));
        q.push(format!("http://good{i}.example/"));
        q.push(format!("http://evil{i}.example/other/"));
    }
    q.push("http://evil7.example/phish/x".into());
    q.push("http://[::1".into());
    q.push("http://a.example:99999/".into());
    write_lines(&queries, q);
    let plain = same_check(&file, &addr, &queries, &[]);
    assert_eq!(
        plain.lines().count(),
        398,
        "200 entries and 200 URLs under them, less the two of the whitelisted entry (which exempts every query it is the first key of or a key of)"
    );
    let json = same_check(&file, &addr, &queries, &["--json"]);
    assert!(json.contains("\"whitelisted\":true"));
    assert_eq!(
        same_check(&file, &addr, &queries, &["--count"]).trim(),
        "398"
    );

    // Whitelist, info.
    assert_eq!(
        ok(&bg(&["whitelist", "list", &addr])),
        ok(&bg(&["whitelist", "list", p(&file)]))
    );
    let info: serde_json::Value =
        serde_json::from_str(&ok(&bg(&["info", &addr, "--json"]))).unwrap();
    let finfo: serde_json::Value =
        serde_json::from_str(&ok(&bg(&["info", p(&file), "--json"]))).unwrap();
    for field in [
        "bits",
        "k",
        "seed",
        "items",
        "key_kind",
        "match_mode",
        "planned_items",
    ] {
        assert_eq!(info[field], finfo[field], "{field}");
    }
    assert_eq!(info["shards_present"], info["shards"]);
    assert_eq!(info["whitelist_items"], 1);

    // Pull: the very same file and whitelist.
    let back = d.join("back.bgf");
    ok(&bg(&["pull", &addr, p(&back)]));
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&file).unwrap());
    assert_eq!(
        std::fs::read(d.join("back.bgf.whitelist")).unwrap(),
        std::fs::read(d.join("f.bgf.whitelist")).unwrap()
    );
    assert_eq!(bg(&["pull", &addr, p(&back)]).status.code(), Some(1));

    // Add: --print-new names exactly the new entries; a second add of the
    // same entries names none. The file gets the same adds.
    let more = d.join("more.txt");
    write_lines(
        &more,
        (2990..3100)
            .map(|i| format!("http://evil{i}.example/phish/"))
            .chain(["http://bad:port:x/".to_string()]),
    );
    let first = bg(&["add", &addr, p(&more), "--print-new"]);
    let new_lines = String::from_utf8_lossy(&first.stdout).into_owned();
    let want: Vec<String> = (3000..3100)
        .map(|i| format!("http://evil{i}.example/phish/"))
        .collect();
    assert_eq!(new_lines.lines().collect::<Vec<_>>(), want);
    assert!(String::from_utf8_lossy(&first.stderr).contains("100 new items"));
    let second = ok(&bg(&["add", &addr, p(&more), "--print-new"]));
    assert_eq!(second, "");
    ok(&bg(&["add", p(&file), p(&more)]));
    let queries2 = d.join("q2.txt");
    write_lines(
        &queries2,
        (2900..3200).map(|i| format!("http://evil{i}.example/phish/a")),
    );
    assert_eq!(
        same_check(&file, &addr, &queries2, &["--count"]).trim(),
        "200"
    );
    // The bits set by BITFIELD are the bits the file's add set.
    let back2 = d.join("back2.bgf");
    ok(&bg(&["pull", &addr, p(&back2)]));
    assert!(std::fs::read(&back2).unwrap()[4096..] == std::fs::read(&file).unwrap()[4096..]);

    // Whitelist changes act on checks at once.
    ok(&bg(&[
        "whitelist",
        "remove",
        &addr,
        "http://evil7.example/phish/",
    ]));
    ok(&bg(&[
        "whitelist",
        "remove",
        p(&file),
        "http://evil7.example/phish/",
    ]));
    assert_eq!(
        same_check(&file, &addr, &queries, &["--count"]).trim(),
        "401"
    );
    let w = bg(&["whitelist", "add", &addr, "http://never.example/"]);
    assert!(String::from_utf8_lossy(&w.stderr).contains("is not a hit"));

    // Refusals: a classic filter (with the reason), a missing filter, a bad
    // address (usage error), a file-only option.
    let classic = d.join("c.bgf");
    ok(&bg(&[
        "build",
        "--layout",
        "classic",
        "-n",
        "100",
        "-p",
        "1e-3",
        // Over-full on purpose: only its layout matters here.
        "--allow-useless",
        "-o",
        p(&classic),
        p(&entries),
    ]));
    let c = bg(&["push", p(&classic), &format!("redis://{}/c", server.addr())]);
    assert_eq!(c.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&c.stderr).contains("--layout blocked"));
    let missing = bg(&[
        "check",
        &format!("redis://{}/nope", server.addr()),
        p(&queries),
    ]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no filter named"));
    assert_eq!(bg(&["info", "redis://h:1/"]).status.code(), Some(2));
    assert_eq!(
        bg(&["check", &addr, "--memory", "1G", p(&queries)])
            .status
            .code(),
        Some(2)
    );

    // A password from a file (ACL user), and a wrong one refused.
    server.cli(&["ACL", "SETUSER", "app", "on", ">s3cret", "~*", "+@all"]);
    let pw = d.join("pw");
    std::fs::write(&pw, "s3cret\n").unwrap();
    let with_user = format!("redis://app@{}/urls", server.addr());
    ok(&bg(&["info", &with_user, "--redis-password-file", p(&pw)]));
    std::fs::write(&pw, "wrong\n").unwrap();
    let refused = bg(&["info", &with_user, "--redis-password-file", p(&pw)]);
    assert_eq!(refused.status.code(), Some(1));
}

/// Which master (port) serves each slot now.
fn slot_owners(cluster: &Cluster) -> HashMap<u16, u16> {
    let mut owner = HashMap::new();
    for m in cluster.masters() {
        for &(a, b) in &m.slots {
            for s in a..=b {
                owner.insert(s, m.port);
            }
        }
    }
    owner
}

/// Shard keys of `name` on each master.
fn shard_keys_per_master(cluster: &Cluster, name: &str) -> HashMap<u16, usize> {
    cluster
        .masters()
        .iter()
        .map(|m| {
            let out = cluster
                .nodes
                .iter()
                .find(|n| n.port == m.port)
                .unwrap()
                .cli_raw(&["--scan", "--pattern", &format!("bg:{{*}}:{name}:*")]);
            (m.port, String::from_utf8_lossy(&out).lines().count())
        })
        .collect()
}

#[test]
fn cluster_shards_writers_reshard_and_failover() {
    if redis_missing() {
        return;
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut cluster = Cluster::start(d);
    eprintln!("cluster up in {:.1} s", started.elapsed().as_secs_f64());
    let addr = cluster.address("big");

    // 2·10⁷ planned URLs: 55 MB, 53 shards; 5,000 in it.
    let entries = d.join("entries.txt");
    write_lines(
        &entries,
        (0..5000).map(|i| format!("http://site{i}.example/page")),
    );
    let file = d.join("big.bgf");
    ok(&bg(&[
        "build",
        "-n",
        "2e7",
        "-p",
        "1e-4",
        "-o",
        p(&file),
        p(&entries),
    ]));
    ok(&bg(&["push", p(&file), &addr]));
    let info: serde_json::Value =
        serde_json::from_str(&ok(&bg(&["info", &addr, "--json"]))).unwrap();
    let shards = info["shards"].as_u64().unwrap();
    assert!(shards >= 50, "{shards}");
    assert_eq!(info["shards_present"].as_u64(), Some(shards));

    // Shards on every master, in the slots the layout gives them.
    let per_master = shard_keys_per_master(&cluster, "big");
    assert_eq!(per_master.len(), 3);
    assert!(
        per_master.values().all(|&n| n as u64 >= shards / 5),
        "{per_master:?}"
    );
    assert_eq!(per_master.values().sum::<usize>() as u64, shards);
    for i in [0, 1, shards - 1] {
        let key = layout::shard_key("big", i);
        let slot = cluster.any().cli(&["CLUSTER", "KEYSLOT", &key]);
        assert_eq!(
            slot.trim(),
            format!("(integer) {}", layout::shard_slot("big", i))
        );
    }

    // Pull is the file; check answers as the file.
    let back = d.join("back.bgf");
    ok(&bg(&["pull", &addr, p(&back)]));
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&file).unwrap());
    let queries = d.join("q.txt");
    write_lines(
        &queries,
        (0..3000)
            .map(|i| format!("http://site{}.example/page", i * 2))
            .chain(["http://[x".to_string()]),
    );
    assert_eq!(
        same_check(&file, &addr, &queries, &["--count"]).trim(),
        "2500"
    );
    same_check(&file, &addr, &queries, &["--json"]);

    // With read_from_replicas, replicas answer the lookups, once CLUSTER
    // SLOTS lists them (Redis lists a replica after it has replicated
    // data) and they have caught up (replication is asynchronous).
    let from_replicas = format!("{addr}?read_from_replicas=yes");
    let master_ports: Vec<u16> = cluster.masters().iter().map(|m| m.port).collect();
    let replica_getranges = || -> u64 {
        cluster
            .nodes
            .iter()
            .filter(|n| !master_ports.contains(&n.port))
            .map(|n| {
                n.cli(&["INFO", "commandstats"])
                    .lines()
                    .find_map(|l| l.strip_prefix("cmdstat_getrange:calls="))
                    .and_then(|v| v.split(',').next())
                    .map_or(0, |v| v.parse::<u64>().unwrap())
            })
            .sum()
    };
    let t = Instant::now();
    loop {
        let before = replica_getranges();
        let n = ok(&bg(&["check", &from_replicas, p(&entries), "--count"]));
        if n.trim() == "5000" && replica_getranges() - before == 5000 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "replicas did not answer: {n}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Four concurrent writers: own items, plus 3,000 items all four add.
    // Every item hits afterwards; each shared item is "new" to exactly one.
    let shared: Vec<String> = (0..3000)
        .map(|i| format!("http://shared{i}.example/"))
        .collect();
    let mut children = Vec::new();
    for w in 0..4 {
        let input = d.join(format!("w{w}.txt"));
        let mut lines: Vec<String> = (0..2000)
            .map(|i| format!("http://w{w}-{i}.example/"))
            .collect();
        lines.extend(shared.iter().cloned());
        if w % 2 == 1 {
            lines.reverse();
        }
        write_lines(&input, lines);
        children.push(
            Command::new(testkit::bin())
                .args(["add", &addr, p(&input), "--print-new"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    let mut told: HashMap<String, usize> = HashMap::new();
    for (w, c) in children.into_iter().enumerate() {
        let out = ok(&c.wait_with_output().unwrap());
        let mine = out
            .lines()
            .filter(|l| l.starts_with(&format!("http://w{w}-")))
            .count();
        assert_eq!(mine, 2000, "writer {w} told about its own items");
        for l in out.lines() {
            *told.entry(l.to_string()).or_default() += 1;
        }
    }
    for s in &shared {
        assert_eq!(told.get(s), Some(&1), "{s}");
    }
    let all_added = d.join("all_added.txt");
    write_lines(
        &all_added,
        shared.iter().cloned().chain(
            (0..4).flat_map(|w| (0..2000).map(move |i| format!("http://w{w}-{i}.example/"))),
        ),
    );
    assert_eq!(
        ok(&bg(&["check", &addr, p(&all_added), "--count"])).trim(),
        "11000"
    );

    // A reshard of 2,000 slots from the master with the most shards while
    // 150,000 adds stream in: no error, nothing lost, shard keys moved.
    let (&src_port, _) = per_master.iter().max_by_key(|(_, &n)| n).unwrap();
    let masters = cluster.masters();
    let src = masters.iter().find(|m| m.port == src_port).unwrap().clone();
    let dst = masters.iter().find(|m| m.port != src_port).unwrap().clone();
    let stream = d.join("stream.txt");
    write_lines(
        &stream,
        (0..150_000).map(|i| format!("http://stream{i}.example/x")),
    );
    // The adds go round after round over the same lines while the reshard
    // runs (one round may be over before a slot moves: adds are fast), so
    // that some of them meet the moving slots.
    let t = Instant::now();
    let mut reshard = Command::new("redis-cli")
        .args(["--cluster", "reshard", &format!("127.0.0.1:{src_port}")])
        .args(["--cluster-from", &src.id, "--cluster-to", &dst.id])
        .args(["--cluster-slots", "2000", "--cluster-yes"])
        // To a file, not a pipe: it prints a line per slot moved, and a
        // pipe nobody reads until it ends would stop it.
        .stdout(std::fs::File::create(d.join("reshard.out")).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut rounds: Vec<String> = Vec::new();
    loop {
        let resharding = reshard.try_wait().unwrap().is_none();
        if !rounds.is_empty() && !resharding {
            break;
        }
        assert!(rounds.len() < 200, "the reshard did not end");
        let added = bg(&["add", &addr, p(&stream)]);
        let err = String::from_utf8_lossy(&added.stderr).into_owned();
        ok(&added);
        assert!(err.contains("150,000 lines"), "{err}");
        assert!(!err.contains("error"), "{err}");
        rounds.push(err);
    }
    let reshard_status = reshard.wait().unwrap();
    eprintln!(
        "reshard and {} rounds of adds: {:.1} s",
        rounds.len(),
        t.elapsed().as_secs_f64()
    );
    assert!(
        reshard_status.success(),
        "{}",
        std::fs::read_to_string(d.join("reshard.out")).unwrap_or_default()
    );
    // The first round added every line; the adds did meet the moving
    // slots (MOVED/ASK), and were resent.
    assert!(rounds[0].contains("150,000 new items"), "{}", rounds[0]);
    let redirected = rounds
        .iter()
        .flat_map(|r| r.lines())
        .find(|l| l.contains("redirected"));
    assert!(redirected.is_some(), "{rounds:?}");
    eprintln!("{}", redirected.unwrap());
    let after = shard_keys_per_master(&cluster, "big");
    assert!(
        after[&src_port] < per_master[&src_port],
        "{per_master:?} -> {after:?}"
    );
    assert_eq!(after.values().sum::<usize>() as u64, shards);
    assert_eq!(
        ok(&bg(&["check", &addr, p(&stream), "--count"])).trim(),
        "150000"
    );

    // SIGKILL a master: lookups of items in its slots fail (exit 1, no
    // answer printed), the others are answered; after its replica takes
    // over, every acknowledged item hits.
    let owners = slot_owners(&cluster);
    let everything: Vec<String> = std::fs::read_to_string(&all_added)
        .unwrap()
        .lines()
        .map(String::from)
        .chain((0..150_000).map(|i| format!("http://stream{i}.example/x")))
        .collect();
    let meta_slot = layout::key_slot(layout::meta_key("big").as_bytes());
    let victim = *owners
        .values()
        .find(|&&port| port != owners[&meta_slot])
        .unwrap();
    let rf = bloomgate_redis::RedisFilter::open(&bloomgate_redis::Address::parse(&addr).unwrap())
        .unwrap();
    let (on_victim, elsewhere): (Vec<String>, Vec<String>) =
        everything.iter().cloned().partition(|u| {
            let key = rf.entry_key(u.as_bytes()).unwrap();
            let place = rf.meta().place(&key);
            owners[&layout::shard_slot("big", place.shard)] == victim
        });
    assert!(!on_victim.is_empty() && !elsewhere.is_empty());
    // Acknowledged writes reach the replica asynchronously: wait until it
    // has them all, then kill the master.
    let replica_caught_up = || {
        let info = cluster
            .nodes
            .iter()
            .find(|n| n.port == victim)
            .unwrap()
            .cli(&["INFO", "replication"]);
        let master_off = info
            .lines()
            .find_map(|l| l.strip_prefix("master_repl_offset:"))
            .map(|v| v.trim().to_string());
        let slave = info
            .lines()
            .find(|l| l.starts_with("slave0:"))
            .map(String::from);
        matches!((master_off, slave), (Some(m), Some(s)) if s.contains(&format!("offset={m},")))
    };
    let t = Instant::now();
    while !replica_caught_up() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "replica did not catch up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(rf);
    let victim_file = d.join("victim.txt");
    write_lines(&victim_file, on_victim.iter().cloned());
    let elsewhere_file = d.join("elsewhere.txt");
    write_lines(&elsewhere_file, elsewhere.iter().cloned());
    cluster.node(victim).kill9();
    let down = bg(&["check", &addr, p(&victim_file), "--count"]);
    assert_eq!(
        down.status.code(),
        Some(1),
        "lookups on a dead master must fail"
    );
    assert_eq!(
        String::from_utf8_lossy(&down.stdout),
        "",
        "no answer, not 'absent'"
    );
    let msg = String::from_utf8_lossy(&down.stderr).into_owned();
    assert!(msg.contains("unavailable"), "{msg}");
    // The node that failed is named, not only the seed list.
    assert!(
        msg.contains(&format!("127.0.0.1:{victim} (node of cluster")),
        "{msg}"
    );
    let down_plain = bg(&["check", &addr, p(&victim_file)]);
    assert_eq!(down_plain.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&down_plain.stdout), "");
    assert_eq!(
        ok(&bg(&["check", &addr, p(&elsewhere_file), "--count"])).trim(),
        elsewhere.len().to_string()
    );
    let t = Instant::now();
    cluster.wait_failover(victim, Duration::from_secs(30));
    eprintln!("failover after {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(
        ok(&bg(&["check", &addr, p(&victim_file), "--count"])).trim(),
        on_victim.len().to_string()
    );
    let every = d.join("every.txt");
    write_lines(&every, everything.iter().cloned());
    assert_eq!(
        ok(&bg(&["check", &addr, p(&every), "--count"])).trim(),
        everything.len().to_string()
    );
    eprintln!("cluster test took {:.1} s", started.elapsed().as_secs_f64());
}

/// Redis as a cache (`maxmemory` + `allkeys-lru`): push warns; other keys
/// written later evict shard keys; then `check`, `info` and `pull` exit 1
/// naming a missing shard (never "absent" with exit 0), and a server
/// answers `-TRYAGAIN` / HTTP 503 for lookups that need it.
#[test]
fn evicted_shards_are_errors_never_absent() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = RedisServer::start(
        d,
        // Every key is sampled for eviction (at most 64 keys live here), so
        // that Redis evicts the least recently used key, not the least
        // recently used of five sampled ones: with five, a sample without
        // a shard key could evict the metadata key (see below).
        &[
            "--maxmemory",
            "24mb",
            "--maxmemory-policy",
            "allkeys-lru",
            "--maxmemory-samples",
            "64",
        ],
    );
    let addr = format!("redis://{}/cache", server.addr());
    // 2·10⁶ planned URLs at 10⁻⁴: 5-6 MB, 5 shards or more; 20,000 URLs in it.
    let entries = d.join("entries.txt");
    let urls: Vec<String> = (0..20_000)
        .map(|i| format!("http://site{i}.example/page"))
        .collect();
    write_lines(&entries, &urls);
    let file = d.join("cache.bgf");
    ok(&bg(&[
        "build",
        "-n",
        "2e6",
        "-p",
        "1e-4",
        "-o",
        p(&file),
        p(&entries),
    ]));
    let pushed = bg(&["push", p(&file), &addr]);
    ok(&pushed);
    let warned = String::from_utf8_lossy(&pushed.stderr);
    assert!(
        warned.contains("maxmemory-policy is allkeys-lru")
            && warned.contains("set maxmemory-policy noeviction"),
        "{warned}"
    );
    let found = ok(&bg(&["check", &addr, p(&entries)]));
    assert_eq!(found.lines().count(), urls.len());

    // Other keys, 1 MB each, until Redis has evicted a shard key (bounded:
    // 24 MB of memory cannot hold 60 more).
    // The shards the push wrote (every one whole, so all present now).
    let shards = (0u64..)
        .take_while(|&i| {
            server
                .cli(&["EXISTS", &layout::shard_key("cache", i)])
                .trim()
                == "(integer) 1"
        })
        .count() as u64;
    assert!(shards >= 5, "{shards} shards");
    let evicted = |s: &RedisServer| -> Vec<u64> {
        (0..shards)
            .filter(|&i| s.cli(&["EXISTS", &layout::shard_key("cache", i)]).trim() == "(integer) 0")
            .collect()
    };
    // Redis's LRU clock ticks once a second: keys touched in the same
    // second look equally old. Two seconds after the check above, every
    // shard key is older than the metadata key and the other keys touched
    // below, so LRU evicts shards first.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let blob = "x".repeat(1 << 20);
    let mut n = 0;
    while evicted(&server).is_empty() {
        assert!(n < 60, "no shard was evicted");
        // The metadata is read by every command; keep it recently used, so
        // that LRU picks shards (an evicted metadata key is "no filter").
        server.cli(&["HGET", &layout::meta_key("cache"), "items"]);
        let out = Command::new("redis-cli")
            .args([
                "-p",
                &server.port.to_string(),
                "-x",
                "SET",
                &format!("other:{n}"),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(blob.as_bytes())?;
                c.wait()
            })
            .unwrap();
        assert!(out.success());
        n += 1;
    }
    // Free the memory again, so that no further key is evicted while the
    // commands below run (Redis evicts before any command when full): first
    // lift the limit, so that not even the DELs below evict another shard.
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    for i in 0..n {
        server.cli(&["DEL", &format!("other:{i}")]);
    }
    let gone = evicted(&server);
    let key = layout::shard_key("cache", gone[0]);

    let checked = bg(&["check", &addr, p(&entries)]);
    assert_eq!(checked.status.code(), Some(1), "{checked:?}");
    let err = String::from_utf8_lossy(&checked.stderr);
    assert!(
        err.contains("is missing")
            && err.contains("damaged")
            && gone.iter().any(|&i| err.contains(&format!("shard {i} "))),
        "{err}"
    );
    let count = bg(&["check", &addr, p(&entries), "--count"]);
    assert_eq!(count.status.code(), Some(1));

    let info = bg(&["info", &addr]);
    assert_eq!(info.status.code(), Some(1));
    let err = String::from_utf8_lossy(&info.stderr);
    assert!(
        err.contains("the filter is damaged") && err.contains(&key),
        "{err}"
    );
    let json = bg(&["info", &addr, "--json"]);
    assert_eq!(json.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["shards_damaged"].as_array().unwrap().len(), gone.len());

    let pulled = bg(&["pull", &addr, p(&d.join("back.bgf"))]);
    assert_eq!(pulled.status.code(), Some(1));
    assert!(!d.join("back.bgf").exists());

    // An add whose shard is gone fails and does not recreate it.
    let f = bloomgate_redis::RedisFilter::open(&bloomgate_redis::Address::parse(&addr).unwrap())
        .unwrap();
    let in_gone = urls
        .iter()
        .find(|u| f.meta().place(&f.entry_key(u.as_bytes()).unwrap()).shard == gone[0])
        .unwrap();
    let one = d.join("one.txt");
    write_lines(&one, [in_gone]);
    let added = bg(&["add", "--print-new", &addr, p(&one)]);
    assert_eq!(added.status.code(), Some(1), "{added:?}");
    assert_eq!(server.cli(&["EXISTS", &key]).trim(), "(integer) 0");

    // The server: an error, never 0.
    let s = testkit::Server::start_args(d, &["--store", &format!("redis://{}", server.addr())]);
    let v = s.resp().cmd(&["BF.EXISTS", "cache", in_gone]);
    assert!(
        v.err().starts_with("TRYAGAIN") && v.err().contains("missing"),
        "{v:?}"
    );
    let (st, body) = s.http(
        "GET",
        &format!("/v1/filters/cache/check?item={in_gone}"),
        None,
        None,
    );
    assert_eq!(st, 503, "{body}");
    let (st, body) = s.http("GET", "/v1/filters/cache", None, None);
    assert_eq!(st, 503, "{body}");
    assert!(body.to_string().contains("damaged"), "{body}");
}

/// A crawler fleet: four `add --print-new` over overlapping URL sets while
/// one of three masters cannot answer (its writes paused, then killed);
/// the replies of the other masters are honoured, the URLs whose outcome
/// is unknown are printed too, and after the failover a rerun prints the
/// rest: every URL is printed at least once.
#[test]
fn a_fleet_loses_no_claim_when_a_master_fails() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut cluster = Cluster::start(d);
    let name = "fleet";
    // 4·10⁶ planned URLs at 10⁻⁶: about 14 MB, 14 shards over the masters;
    // 7,500 URLs make false positives (never told "new") unlikely (10⁻²).
    let file = d.join("fleet.bgf");
    let empty = d.join("empty.txt");
    write_lines(&empty, Vec::<String>::new());
    ok(&bg(&[
        "build",
        "-n",
        "4e6",
        "-p",
        "1e-6",
        // Empty on purpose: the fleet fills it.
        "--allow-useless",
        "-o",
        p(&file),
        p(&empty),
    ]));
    ok(&bg(&["push", p(&file), &cluster.address(name)]));

    // The master to fail: one holding shards, not the metadata's slot.
    let owners = slot_owners(&cluster);
    let meta_port = owners[&layout::key_slot(layout::meta_key(name).as_bytes())];
    let shards = 14u64;
    let victim = *owners
        .values()
        .find(|&&port| {
            port != meta_port && (0..shards).any(|i| owners[&layout::shard_slot(name, i)] == port)
        })
        .expect("a master with shards and without the metadata");
    // Seeds without the victim (a client tries seeds in order).
    let seeds: Vec<String> = cluster
        .nodes
        .iter()
        .filter(|n| n.port != victim)
        .map(|n| n.addr())
        .collect();
    let addr = format!("redis+cluster://{}/{name}", seeds.join(","));

    let urls: Vec<String> = (0..7500)
        .map(|i| format!("http://fleet{i}.example/a"))
        .collect();
    let inputs: Vec<std::path::PathBuf> = (0..4)
        .map(|j| {
            let f = d.join(format!("in{j}.txt"));
            write_lines(&f, &urls[j * 1500..j * 1500 + 3000]);
            f
        })
        .collect();
    let run_fleet = |addr: &str| -> Vec<std::process::Output> {
        let children: Vec<_> = inputs
            .iter()
            .map(|f| {
                Command::new(testkit::bin())
                    .args(["add", "--print-new", addr, p(f)])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect()
    };

    // The victim runs no write (CLIENT PAUSE WRITE) but looks alive, so
    // the adds are sent to it and its replies never come (10 s timeout).
    let v = cluster.node(victim);
    assert_eq!(v.cli(&["CLIENT", "PAUSE", "120000", "WRITE"]).trim(), "OK");
    let first = run_fleet(&addr);
    let mut printed: std::collections::HashSet<String> = Default::default();
    let mut honoured = 0;
    for o in &first {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("127.0.0.1:{victim}")),
            "the failed node is named: {err}"
        );
        let out = String::from_utf8_lossy(&o.stdout);
        honoured += out.lines().count();
        // The message counts what happened: the lines printed are the
        // new and the unknown ones.
        let count = |what: &str| -> usize {
            let at = err.find(what).unwrap_or_else(|| panic!("{what}: {err}"));
            err[..at]
                .rsplit(|c: char| !c.is_ascii_digit() && c != ',')
                .find(|s| !s.is_empty())
                .unwrap()
                .replace(',', "")
                .parse()
                .unwrap()
        };
        assert_eq!(
            count(" new items were added") + count(" items may or may not have been added"),
            out.lines().count(),
            "{err}"
        );
        assert!(count(" items may or may not have been added") > 0, "{err}");
        printed.extend(out.lines().map(String::from));
    }
    // Replies of the sound masters were honoured: about two thirds of the
    // URLs were printed as new (or unknown) although every run failed.
    assert!(honoured >= urls.len() / 2, "{honoured}");

    // The victim dies; its replica takes over; the fleet runs again.
    cluster.node(victim).kill9();
    cluster.wait_failover(victim, Duration::from_secs(60));
    let second = run_fleet(&addr);
    for o in &second {
        ok(o);
        printed.extend(String::from_utf8_lossy(&o.stdout).lines().map(String::from));
    }
    let never: Vec<&String> = urls.iter().filter(|u| !printed.contains(*u)).collect();
    assert!(
        never.is_empty(),
        "{} URLs claimed by nobody: {:?}",
        never.len(),
        &never[..never.len().min(5)]
    );
}

/// `create` makes an empty filter at a Redis address from the same
/// settings as a file (pushed as `push` does): empty, then taking adds;
/// it refuses to replace one without `--force`, and refuses a policy a
/// one-layer Redis filter cannot keep.
#[test]
fn create_makes_an_empty_redis_filter() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = RedisServer::start(d, &[]);
    let addr = format!("redis://{}/made", server.addr());
    ok(&bg(&["create", "-n", "1000", "-p", "1e-4", &addr]));
    let file = d.join("made.bgf");
    ok(&bg(&["create", "-n", "1000", "-p", "1e-4", p(&file)]));
    let info = |what: &str| -> serde_json::Value {
        serde_json::from_str(&ok(&bg(&["info", "--json", what]))).unwrap()
    };
    let (r, f) = (info(&addr), info(p(&file)));
    assert_eq!(r["items"], 0, "{r}");
    for field in ["bits", "k", "planned_items"] {
        assert_eq!(r[field], f[field], "{field}: {r} / {f}");
    }
    let entries = d.join("e.txt");
    write_lines(&entries, ["http://evil.example/"]);
    ok(&bg(&["add", &addr, p(&entries)]));
    let o = bg(&["check", &addr, p(&entries)]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "http://evil.example/\n");
    let o = bg(&["create", "-n", "10", "-p", "0.01", &addr]);
    assert!(!o.status.success(), "{o:?}");
    assert_eq!(info(&addr)["items"], 1, "not replaced");
    let o = bg(&[
        "create", "-n", "10", "-p", "0.01", "--policy", "grow", &addr,
    ]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--policy grow needs a file"));
}
