//! `BF.ADD` through `bloomgate serve --store redis://…`, whose adds are
//! transactions (`WATCH`, `STRLEN`s and `GETRANGE`s of the blocks, `MULTI`,
//! `SETRANGE`s, `EXEC`) of the adds of many connections at once, a
//! pipeline in one transaction: a shard evicted while adds run is an error
//! and is never recreated, and writers racing on the same keys — two
//! servers' many connections and the CLI, all at once — are each told
//! "new" for a key exactly once, with each connection's adds taking effect
//! in its order.

use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use bloomgate_redis::layout;
use testkit::redis::{redis_missing, RedisServer};
use testkit::{ok, p, write_lines, Resp, Server, V};

/// Commands a client sends before it reads their replies.
const PIPELINE: usize = 16;

/// The length of every shard key of filter `name` (0: missing), and the
/// length each should have, from `redis-cli`.
fn shard_lengths(redis: &RedisServer, name: &str, shards: u64, data: u64) -> Vec<(u64, u64)> {
    (0..shards)
        .map(|i| {
            let n = redis.cli(&["STRLEN", &layout::shard_key(name, i)]);
            let have = n.trim().trim_start_matches("(integer) ").parse().unwrap();
            let whole = (data - i * layout::SHARD_BLOCKS * 64).min(layout::SHARD_BLOCKS * 64);
            (have, whole)
        })
        .collect()
}

/// The filter's data bytes and shard count, from its metadata.
fn geometry(redis: &RedisServer, name: &str) -> (u64, u64) {
    let bits: u64 = redis
        .cli(&["HGET", &layout::meta_key(name), "bits"])
        .trim()
        .trim_matches('"')
        .parse()
        .unwrap();
    let data = bits / 8;
    (data, data.div_ceil(layout::SHARD_BLOCKS * 64))
}

#[test]
fn an_evicted_shard_during_adds_is_an_error_never_a_zero_key() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Redis as a cache that evicts keys when full. Which key it evicts is
    // chosen for the test: one shard is given a time to live, and the
    // policy evicts only such keys (volatile-random), so that the shard,
    // not the metadata, is what goes while the adds run.
    let redis = RedisServer::start(
        d,
        &[
            "--maxmemory",
            "24mb",
            "--maxmemory-policy",
            "volatile-random",
        ],
    );
    let s = Server::start_args(d, &["--store", &format!("redis://{}", redis.addr())]);
    // 2·10⁶ items at 10⁻⁴: 4.8 MB, 5 shards.
    assert_eq!(
        s.resp()
            .cmd(&["BF.RESERVE", "f", "0.0001", "2000000", "NONSCALING"]),
        V::Simple("OK".into())
    );
    let (data, shards) = geometry(&redis, "f");
    assert!(shards >= 4, "{shards} shards");
    let doomed = layout::shard_key("f", 1);
    assert_eq!(
        redis.cli(&["PEXPIRE", &doomed, "3600000"]).trim(),
        "(integer) 1"
    );

    let done = AtomicBool::new(false);
    let addr = s.resp;
    let (answers, errors) = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..8)
            .map(|c| {
                let done = &done;
                scope.spawn(move || {
                    let mut conn = Resp::connect(addr);
                    let (mut answers, mut errors, mut round) = (0u64, 0u64, 0u64);
                    loop {
                        // The pipeline that starts after the eviction is the last.
                        let last = done.load(SeqCst);
                        for i in 0..PIPELINE {
                            let key = format!("c{c}-r{round}-{i}");
                            conn.send(&[b"BF.ADD", b"f", key.as_bytes()]);
                        }
                        for _ in 0..PIPELINE {
                            match conn.read().expect("a reply") {
                                V::Int(0 | 1) => answers += 1,
                                V::Err(e) => {
                                    assert!(e.starts_with("TRYAGAIN"), "{e}");
                                    errors += 1;
                                }
                                other => panic!("BF.ADD answered {other:?}"),
                            }
                        }
                        round += 1;
                        if last {
                            return (answers, errors);
                        }
                    }
                })
            })
            .collect();
        // Other keys of 1 MB each (SETRANGE pads with zeros) until the
        // shard is evicted.
        for i in 0..200 {
            redis.cli(&["SETRANGE", &format!("filler-{i}"), "1048575", "x"]);
            if shard_lengths(&redis, "f", shards, data)
                .iter()
                .any(|&(have, _)| have == 0)
            {
                break;
            }
        }
        done.store(true, SeqCst);
        clients
            .into_iter()
            .map(|c| c.join().unwrap())
            .fold((0, 0), |(a, e), (a1, e1)| (a + a1, e + e1))
    });
    let lengths = shard_lengths(&redis, "f", shards, data);
    let missing: Vec<u64> = (0..shards)
        .filter(|&i| lengths[i as usize].0 == 0)
        .collect();
    assert_eq!(missing, vec![1], "{lengths:?}");
    // No shard was recreated: each is whole or missing.
    for (i, &(have, whole)) in lengths.iter().enumerate() {
        assert!(
            have == 0 || have == whole,
            "shard {i}: {have} of {whole} bytes"
        );
    }
    // Every client's last pipeline started after the eviction: with 16
    // keys over 5 shards, some of its adds failed.
    assert!(
        errors >= 1 && answers >= 1,
        "answers {answers}, errors {errors}"
    );
    // An add and a lookup of a key in the missing shard: errors naming the
    // shard, not "absent", and the shard stays missing.
    let lost = missing[0];
    let meta = bloomgate_redis::RedisFilter::open(
        &bloomgate_redis::Address::parse(&format!("redis://{}/f", redis.addr())).unwrap(),
    )
    .unwrap()
    .meta()
    .clone();
    let key = (0..)
        .map(|i| format!("probe-{i}"))
        .find(|k| meta.place(k.as_bytes()).shard == lost)
        .unwrap();
    let mut c = s.resp();
    for cmd in ["BF.ADD", "BF.EXISTS"] {
        let e = c.cmd(&[cmd, "f", &key]);
        let V::Err(e) = e else {
            panic!("{cmd} of a key in a missing shard answered {e:?}");
        };
        assert!(
            e.starts_with("TRYAGAIN") && e.contains(&format!("shard {lost} ")),
            "{e}"
        );
    }
    assert_eq!(
        redis.cli(&["EXISTS", &layout::shard_key("f", lost)]).trim(),
        "(integer) 0"
    );
}

#[test]
fn two_servers_and_the_cli_tell_each_key_new_once() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let redis = RedisServer::start(d, &[]);
    let store = format!("redis://{}", redis.addr());
    let a = Server::start_args(d, &["--store", &store]);
    let b = Server::start_args(d, &["--store", &store]);
    // 10⁷ items at 10⁻⁴: 23 shards, so a pipeline's keys spread over many
    // shards. At 8,000 keys a fresh key is a false positive (then "new"
    // to no one) with a chance far below 10⁻²⁰.
    assert_eq!(
        a.resp()
            .cmd(&["BF.RESERVE", "f", "0.0001", "10000000", "NONSCALING"]),
        V::Simple("OK".into())
    );
    let keys: Vec<String> = (0..8000).map(|i| format!("key-{i}")).collect();
    // 16 connections (8 per server) and one `bloomgate add`: each key is
    // added by three of the 17 writers, each in an order of its own, as
    // BF.ADD pipelines with every key sent twice in a row (the second add
    // of a key on one connection is never the "new" one) and BF.MADD of
    // 1–7 keys (a request spread over several shards).
    let writers = 17;
    let lists: Vec<Vec<String>> = (0..writers)
        .map(|w| {
            let mut mine: Vec<String> = keys
                .iter()
                .enumerate()
                .filter(|(i, _)| [w, (w + 1) % writers, (w + 5) % writers].contains(&(i % writers)))
                .map(|(_, k)| k.clone())
                .collect();
            let turn = w * 97 % mine.len();
            mine.rotate_left(turn);
            if w % 2 == 1 {
                mine.reverse();
            }
            mine
        })
        .collect();
    let address = format!("{store}/f");
    let input = d.join("cli.txt");
    write_lines(&input, &lists[16]);
    let cli = Command::new(testkit::bin())
        .args(["add", &address, p(&input), "--print-new"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let servers = [a.resp, b.resp];
    let told: Vec<Vec<String>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..16)
            .map(|w| {
                let (addr, list) = (servers[w % 2], &lists[w]);
                scope.spawn(move || {
                    let mut c = Resp::connect(addr);
                    let mut new = Vec::new();
                    for (n, chunk) in list.chunks(PIPELINE).enumerate() {
                        if n % 2 == 0 {
                            // Single adds, each key twice.
                            for k in chunk {
                                c.send(&[b"BF.ADD", b"f", k.as_bytes()]);
                                c.send(&[b"BF.ADD", b"f", k.as_bytes()]);
                            }
                            for k in chunk {
                                let first = c.read().unwrap();
                                let second = c.read().unwrap();
                                assert_eq!(second, V::Int(0), "{k}: the second add");
                                match first {
                                    V::Int(1) => new.push(k.clone()),
                                    V::Int(0) => {}
                                    other => panic!("BF.ADD {k}: {other:?}"),
                                }
                            }
                        } else {
                            // BF.MADD of 1–7 keys.
                            let parts: Vec<&[String]> = chunk.chunks(1 + (n + w) % 7).collect();
                            for part in &parts {
                                let mut args: Vec<&[u8]> = vec![&b"BF.MADD"[..], &b"f"[..]];
                                args.extend(part.iter().map(|k| k.as_bytes()));
                                c.send(&args);
                            }
                            for part in &parts {
                                let got = c.read().unwrap();
                                assert_eq!(got.arr().len(), part.len(), "{got:?}");
                                for (k, v) in part.iter().zip(got.arr()) {
                                    match v {
                                        V::Int(1) => new.push(k.clone()),
                                        V::Int(0) => {}
                                        other => panic!("BF.MADD {k}: {other:?}"),
                                    }
                                }
                            }
                        }
                    }
                    new
                })
            })
            .collect();
        let mut told: Vec<Vec<String>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        told.push(
            ok(&cli.wait_with_output().unwrap())
                .lines()
                .map(String::from)
                .collect(),
        );
        told
    });
    let mut claims: HashMap<&str, usize> = HashMap::new();
    for new in &told {
        for k in new {
            *claims.entry(k.as_str()).or_default() += 1;
        }
    }
    for k in &keys {
        assert_eq!(
            claims.get(k.as_str()),
            Some(&1),
            "{k}: new to exactly one writer"
        );
    }
    // The metadata's count has every key once.
    assert_eq!(a.resp().cmd(&["BF.CARD", "f"]).int(), 8000);
    assert_eq!(b.resp().cmd(&["BF.CARD", "f"]).int(), 8000);
}

#[test]
fn a_pipeline_of_adds_is_one_transaction_and_counted_before_its_answers() {
    // A connection's pipelined adds are all queued before the add worker
    // is woken, so a pipeline sent alone is one batch: one transaction
    // (one WATCH, one EXEC), a read per item and a write per block that
    // gains bits, and the count of its new items (an HINCRBY in the same
    // transaction), so the count is in Redis before the answers. Added
    // again, nothing is new: nothing is written nor counted.
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let redis = RedisServer::start(d, &[]);
    let s = Server::start_args(d, &["--store", &format!("redis://{}", redis.addr())]);
    let mut c = s.resp();
    assert_eq!(
        c.cmd(&["BF.RESERVE", "f", "0.0001", "10000000", "NONSCALING"]),
        V::Simple("OK".into())
    );
    let calls = |cmd: &str| -> u64 {
        redis
            .cli(&["INFO", "commandstats"])
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
            .and_then(|v| v.split(',').next())
            .map_or(0, |v| v.parse().unwrap())
    };
    // The add worker starts with the first add, and then waits for the next.
    assert_eq!(c.cmd(&["BF.ADD", "f", "first"]), V::Int(1));
    redis.cli(&["CONFIG", "RESETSTAT"]);
    let keys: Vec<String> = (0..PIPELINE).map(|i| format!("one-batch-{i}")).collect();
    // The whole pipeline in one write, so that the server reads it at once.
    let pipeline = |c: &mut Resp| {
        let mut all = Vec::new();
        for k in &keys {
            all.extend_from_slice(
                format!("*3\r\n$6\r\nBF.ADD\r\n$1\r\nf\r\n${}\r\n{k}\r\n", k.len()).as_bytes(),
            );
        }
        std::io::Write::write_all(c.r.get_mut(), &all).unwrap();
        (0..PIPELINE).map(|_| c.read().unwrap()).collect::<Vec<V>>()
    };
    assert_eq!(pipeline(&mut c), vec![V::Int(1); PIPELINE]);
    let stats = |names: &[&str]| names.iter().map(|n| calls(n)).collect::<Vec<u64>>();
    let names = [
        "watch", "exec", "getrange", "setrange", "hincrby", "bitfield",
    ];
    // 16 keys in 10⁷·19 bits of blocks: no two share a block.
    assert_eq!(stats(&names), vec![1, 1, 16, 16, 1, 0]);
    let items = redis.cli(&["HGET", &layout::meta_key("f"), "items"]);
    assert_eq!(items.trim().trim_matches('"'), "17");
    assert_eq!(c.cmd(&["BF.CARD", "f"]).int(), 17);
    assert_eq!(pipeline(&mut c), vec![V::Int(0); PIPELINE]);
    assert_eq!(stats(&names), vec![2, 2, 32, 16, 1, 0]);
}
