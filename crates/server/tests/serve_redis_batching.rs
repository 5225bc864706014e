//! `bloomgate serve --store redis://…` under many connections of
//! single-key commands, which the server gathers into batches per Redis
//! node: every answer is the one a request sent alone gets (each distinct
//! item is "new" to exactly one of the clients racing to add it, every
//! added item is found, misses answer as `bloomgate check`), a
//! connection's commands still take effect in its order, and a Redis node
//! that dies turns requests into errors — only those with a key on that
//! node — never into "absent".

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use testkit::redis::{redis_missing, Cluster, RedisServer};
use testkit::{bg, ok, p, write_lines, Resp, Server, V};

/// Client connections at once.
const CLIENTS: usize = 50;
/// Commands a client sends before it reads their replies.
const PIPELINE: usize = 16;

/// Sends `cmd name item` for each item of each list, one connection and
/// thread per list, in pipelines of [`PIPELINE`]; the replies, per list.
fn pipelined(s: &Server, cmd: &str, name: &str, lists: Vec<Vec<String>>) -> Vec<Vec<V>> {
    let addr = s.resp;
    let workers: Vec<_> = lists
        .into_iter()
        .map(|items| {
            let (cmd, name) = (cmd.to_string(), name.to_string());
            std::thread::spawn(move || {
                let mut c = Resp::connect(addr);
                let mut out = Vec::with_capacity(items.len());
                for chunk in items.chunks(PIPELINE) {
                    for item in chunk {
                        c.send(&[cmd.as_bytes(), name.as_bytes(), item.as_bytes()]);
                    }
                    for _ in chunk {
                        out.push(c.read().expect("a reply"));
                    }
                }
                out
            })
        })
        .collect();
    workers.into_iter().map(|w| w.join().unwrap()).collect()
}

/// `n` keys, and per client the keys it adds: each key by three clients,
/// in an order of its own.
fn overlapping_adds(n: usize) -> (Vec<String>, Vec<Vec<String>>) {
    let keys: Vec<String> = (0..n).map(|i| format!("key-{i}")).collect();
    let lists = (0..CLIENTS)
        .map(|c| {
            let mut mine: Vec<String> = keys
                .iter()
                .enumerate()
                .filter(|(i, _)| [c, (c + 1) % CLIENTS, (c + 7) % CLIENTS].contains(&(i % CLIENTS)))
                .map(|(_, k)| k.clone())
                .collect();
            let turn = c * 13 % mine.len().max(1);
            mine.rotate_left(turn);
            if c % 2 == 1 {
                mine.reverse();
            }
            mine
        })
        .collect();
    (keys, lists)
}

/// Many clients add overlapping keys and look them up (and misses) through
/// `s`; checks every answer against the filter `address` read by the CLI.
/// Returns the connections `redis` received while the clients added and
/// looked up (the CLI's not counted), if it is given.
fn many_clients_answer_as_the_cli(
    d: &Path,
    s: &Server,
    address: &str,
    redis: Option<&RedisServer>,
) -> u64 {
    let connections = || {
        redis.map_or(0, |r| {
            let stats = r.cli(&["INFO", "stats"]);
            stats
                .lines()
                .find_map(|l| l.strip_prefix("total_connections_received:"))
                .map(|n| n.trim().parse::<u64>().unwrap())
                .unwrap()
        })
    };
    let before = connections();
    let (keys, lists) = overlapping_adds(6000);
    let replies = pipelined(s, "BF.ADD", "f", lists.clone());
    let mut opened = connections() - before;
    let mut new: HashMap<&str, usize> = HashMap::new();
    for (list, got) in lists.iter().zip(&replies) {
        assert_eq!(list.len(), got.len());
        for (k, v) in list.iter().zip(got) {
            match v {
                V::Int(1) => *new.entry(k.as_str()).or_default() += 1,
                V::Int(0) => {}
                other => panic!("BF.ADD {k}: {other:?}"),
            }
        }
    }
    // Exactly one of the three clients adding a key is told it is new (a
    // false positive would make it none: at 6,000 items in a filter planned
    // for 10⁷ at 10⁻⁴, far below one in a million).
    for k in &keys {
        assert_eq!(new.get(k.as_str()), Some(&1), "{k}");
    }
    let keys_file = d.join("keys.txt");
    write_lines(&keys_file, &keys);
    assert_eq!(
        ok(&bg(&["check", "--count", address, p(&keys_file)])).trim(),
        "6000"
    );

    // Lookups: each client half added keys, half misses.
    let misses: Vec<String> = (0..6000).map(|i| format!("miss-{i}")).collect();
    let misses_file = d.join("misses.txt");
    write_lines(&misses_file, &misses);
    let cli_hits = ok(&bg(&["check", address, p(&misses_file)]));
    let cli_hits: std::collections::HashSet<&str> = cli_hits.lines().collect();
    let lists: Vec<Vec<String>> = (0..CLIENTS)
        .map(|c| {
            (0..240)
                .map(|i| {
                    let j = (c * 240 + i) % 6000;
                    if i % 2 == 0 {
                        keys[j].clone()
                    } else {
                        misses[j].clone()
                    }
                })
                .collect()
        })
        .collect();
    let before = connections();
    let replies = pipelined(s, "BF.EXISTS", "f", lists.clone());
    opened += connections() - before;
    for (list, got) in lists.iter().zip(&replies) {
        for (q, v) in list.iter().zip(got) {
            let want = q.starts_with("key-") || cli_hits.contains(q.as_str());
            assert_eq!(*v, V::Int(want as i64), "BF.EXISTS {q}");
        }
    }
    opened
}

#[test]
fn fifty_connections_of_single_key_commands_answer_as_the_cli() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut redis = RedisServer::start(d, &[]);
    let s = Server::start_args(d, &["--store", &format!("redis://{}", redis.addr())]);
    let mut c = s.resp();
    assert_eq!(
        c.cmd(&["BF.RESERVE", "f", "0.0001", "10000000", "NONSCALING"]),
        V::Simple("OK".into())
    );
    let address = format!("redis://{}/f", redis.addr());
    // The 50 clients' requests share a few pipelines, on a few connections
    // (two lookup batches and one add batch in flight, each on at most
    // four), where requests sent one by one take a connection each.
    let opened = many_clients_answer_as_the_cli(d, &s, &address, Some(&redis));
    assert!(opened <= 16, "Redis received {opened} connections");

    // One connection's pipeline takes effect in its order: an add, then a
    // lookup and an add of the same item.
    for item in ["fresh-1", "fresh-2"] {
        c.send(&[b"BF.ADD", b"f", item.as_bytes()]);
        c.send(&[b"BF.EXISTS", b"f", item.as_bytes()]);
        c.send(&[b"BF.ADD", b"f", item.as_bytes()]);
        c.send(&[b"BF.MEXISTS", b"f", item.as_bytes(), b"never-added"]);
        let got: Vec<V> = (0..4).map(|_| c.read().unwrap()).collect();
        assert_eq!(
            got,
            vec![
                V::Int(1),
                V::Int(1),
                V::Int(0),
                V::Arr(vec![V::Int(1), V::Int(0)])
            ],
            "{item}"
        );
    }

    // Redis killed while clients look up added keys: every answer is a hit
    // or an error, and once it is dead every answer is an error.
    let stop = Arc::new(AtomicBool::new(false));
    let dead = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(0));
    let addr = s.resp;
    let workers: Vec<_> = (0..20)
        .map(|t| {
            let (stop, dead, rounds) = (stop.clone(), dead.clone(), rounds.clone());
            std::thread::spawn(move || {
                let mut c = Resp::connect(addr);
                let (mut hits, mut errors) = (0, 0);
                for round in 0..5000 {
                    if stop.load(SeqCst) {
                        break;
                    }
                    let was_dead = dead.load(SeqCst);
                    for i in 0..PIPELINE {
                        let k = format!("key-{}", (t * 97 + round * PIPELINE + i) % 6000);
                        c.send(&[b"BF.EXISTS", b"f", k.as_bytes()]);
                    }
                    for _ in 0..PIPELINE {
                        match c.read().expect("a reply") {
                            V::Int(1) if !was_dead => hits += 1,
                            V::Err(e) => {
                                assert!(e.starts_with("TRYAGAIN"), "{e}");
                                errors += 1;
                            }
                            other => {
                                panic!("an added key answered {other:?} (Redis dead: {was_dead})")
                            }
                        }
                    }
                    rounds.fetch_add(1, SeqCst);
                }
                (hits, errors)
            })
        })
        .collect();
    let wait_rounds = |n: usize| {
        let t = Instant::now();
        let from = rounds.load(SeqCst);
        while rounds.load(SeqCst) < from + n {
            assert!(t.elapsed() < Duration::from_secs(120), "clients stalled");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_rounds(40);
    redis.kill9();
    dead.store(true, SeqCst);
    wait_rounds(100);
    stop.store(true, SeqCst);
    let (mut hits, mut errors) = (0, 0);
    for w in workers {
        let (h, e) = w.join().unwrap();
        hits += h;
        errors += e;
    }
    assert!(hits > 0 && errors > 0, "hits {hits}, errors {errors}");
}

#[test]
fn fifty_connections_on_a_cluster_and_a_dead_master_fails_only_its_keys() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Three masters without replicas that keep serving their slots when
    // one of them is down.
    let mut cluster = Cluster::start_with(d, 0, &["--cluster-require-full-coverage", "no"]);
    let address = cluster.address("f");
    let store = address.strip_suffix("/f").unwrap().to_string();
    let s = Server::start_args(d, &["--store", &store]);
    // 10⁷ items at 10⁻⁴: 23 shards, on all three masters.
    assert_eq!(
        s.resp()
            .cmd(&["BF.RESERVE", "f", "0.0001", "10000000", "NONSCALING"]),
        V::Simple("OK".into())
    );
    many_clients_answer_as_the_cli(d, &s, &address, None);

    // One master killed: the keys on the others are still answered, those
    // on it are errors, none is "absent".
    let victim = cluster.masters()[1].port;
    cluster.node(victim).kill9();
    let (keys, _) = overlapping_adds(6000);
    let lists: Vec<Vec<String>> = (0..CLIENTS)
        .map(|c| keys.iter().skip(c).step_by(CLIENTS).cloned().collect())
        .collect();
    let replies = pipelined(&s, "BF.EXISTS", "f", lists);
    let (mut hits, mut errors) = (0, 0);
    for v in replies.iter().flatten() {
        match v {
            V::Int(1) => hits += 1,
            V::Err(e) => {
                assert!(e.starts_with("TRYAGAIN"), "{e}");
                // The node that failed, not only the seed list.
                assert!(
                    e.contains(&format!("127.0.0.1:{victim} (node of cluster")),
                    "{e}"
                );
                errors += 1;
            }
            other => panic!("an added key answered {other:?}"),
        }
    }
    assert_eq!(hits + errors, 6000);
    assert!(hits > 1000 && errors > 1000, "hits {hits}, errors {errors}");
}
