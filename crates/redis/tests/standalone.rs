//! The Redis filter store against a real standalone redis-server: the
//! stored bytes, lookups and adds compared with the same filter in a file.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use bloomgate_engine::{plan, Access, Filter, Layout, Params};
use bloomgate_redis::layout::{self, BLOCK_BYTES};
use bloomgate_redis::{pull, push, Added, Address, Error, RedisFilter};
use testkit::redis::{redis_missing, RedisServer};

/// A blocked raw-key filter file holding `item-0..n`: planned for 2·10⁶
/// items at 10⁻³, 3.6 MB of data, so four shards of 16,383 blocks (the
/// last one short).
fn build_file(path: &Path, n: u32) -> Filter {
    let mut params = Params::from_plan(&plan(Layout::Blocked, 2_000_000, 1e-3).unwrap(), 99);
    params.key_kind = 0;
    let f = Filter::new(params).unwrap();
    for i in 0..n {
        f.insert(format!("item-{i}").as_bytes());
    }
    f.save(path).unwrap();
    Filter::open(path, Access::ReadOnly).unwrap()
}

fn address(server: &RedisServer, name: &str) -> Address {
    Address::parse(&format!("redis://{}/{name}", server.addr())).unwrap()
}

#[test]
fn shards_are_the_files_bytes_and_lookups_agree() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(dir.path(), &[]);
    let path = dir.path().join("f.bgf");
    let file = build_file(&path, 20_000);
    let addr = address(&server, "f");
    let sent = AtomicU64::new(0);
    let t = push(&path, &addr, false, &|n| {
        sent.fetch_add(n, Ordering::Relaxed);
    })
    .unwrap();
    assert!(t.shards >= 3, "{} shards", t.shards);
    assert_eq!(sent.load(Ordering::Relaxed), file.as_bytes().len() as u64);

    let rf = RedisFilter::open(&addr).unwrap();
    let meta = rf.meta().clone();
    assert_eq!(&meta.params, file.params());
    // Bit order pinned: the block of an item, read with redis-cli GETRANGE,
    // is the file's 64 bytes at that place, and one of its bits read with
    // GETBIT is the Redis bit number the layout computes.
    for key in ["item-1", "item-17", "item-19999"] {
        let place = meta.place(key.as_bytes());
        let skey = layout::shard_key("f", place.shard);
        let got = server.cli_raw(&[
            "GETRANGE",
            &skey,
            &place.offset.to_string(),
            &(place.offset + BLOCK_BYTES - 1).to_string(),
        ]);
        let start = (meta.shard_bytes(place.shard).start + place.offset) as usize;
        let want = &file.as_bytes()[start..start + 64];
        assert_eq!(&got[..64], want, "{key}");
        let bit = place.redis_bits().next().unwrap();
        assert_eq!(
            server.cli(&["GETBIT", &skey, &bit.to_string()]).trim(),
            "(integer) 1"
        );
    }
    // Every shard is exactly its bytes of the file.
    for i in 0..meta.shards() {
        let r = meta.shard_bytes(i);
        let got = server.cli_raw(&["GET", &layout::shard_key("f", i)]);
        assert_eq!(
            got.len() as u64,
            r.end - r.start + 1,
            "shard {i} (+ newline)"
        );
        assert!(got[..got.len() - 1] == file.as_bytes()[r.start as usize..r.end as usize]);
    }
    // Lookups answer as the file: every added item, and the same false
    // positives among items never added.
    let keys: Vec<String> = (0..60_000).map(|i| format!("item-{i}")).collect();
    let found = rf.contains_keys(&keys).unwrap();
    for (k, f) in keys.iter().zip(&found) {
        assert_eq!(*f, file.contains(k.as_bytes()), "{k}");
    }
    assert!(found[..20_000].iter().all(|&f| f));

    // Pull: the very file, byte for byte.
    let back = dir.path().join("back.bgf");
    let t2 = pull(&addr, &back, false, &|_| {}).unwrap();
    assert_eq!(t2.data_checksum, t.data_checksum);
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&path).unwrap());
    // Pushing over an existing filter needs force.
    assert!(matches!(
        push(&path, &addr, false, &|_| {}),
        Err(Error::Exists { .. })
    ));
    push(&path, &addr, true, &|_| {}).unwrap();
}

#[test]
fn adds_say_new_once_and_missing_shards_are_errors() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(dir.path(), &[]);
    let path = dir.path().join("e.bgf");
    let file = build_file(&path, 0);
    let addr = address(&server, "e");
    push(&path, &addr, false, &|_| {}).unwrap();
    let rf = RedisFilter::open(&addr).unwrap();

    let keys: Vec<String> = (0..5000).map(|i| format!("new-{i}")).collect();
    assert!(rf.contains_keys(&keys).unwrap().iter().all(|&f| !f));
    let first = rf.insert_keys(&keys).unwrap();
    // At 2e6 planned items a few of 5000 collide with earlier ones at most.
    assert!(first.iter().filter(|&&n| n).count() >= 4990);
    assert!(rf.insert_keys(&keys).unwrap().iter().all(|&n| !n));
    assert!(rf.contains_keys(&keys).unwrap().iter().all(|&f| f));
    // The same item twice in one batch: new once.
    assert_eq!(
        rf.insert_keys(&["twice", "twice"]).unwrap(),
        vec![true, false]
    );
    assert_eq!(
        rf.items().unwrap(),
        first.iter().filter(|&&n| n).count() as u64 + 1
    );
    // The bits are the engine's: the same inserts into the file's filter
    // give the bytes a pull writes.
    let mem = Filter::new(file.params().clone()).unwrap();
    for k in keys.iter().map(String::as_str).chain(["twice"]) {
        mem.insert(k.as_bytes());
    }
    let back = dir.path().join("back.bgf");
    pull(&addr, &back, false, &|_| {}).unwrap();
    let pulled = Filter::open(&back, Access::ReadOnly).unwrap();
    pulled.verify().unwrap();
    assert!(pulled.as_bytes() == mem.as_bytes());

    // A shard that is missing (evicted, deleted) is lost data, never
    // zeros: every path that needs it is an error naming it.
    let place = rf.meta().place(b"new-0");
    let skey = layout::shard_key("e", place.shard);
    let other = keys
        .iter()
        .find(|k| rf.meta().place(k.as_bytes()).shard != place.shard)
        .unwrap();
    server.cli(&["DEL", &skey]);
    let damaged = |e: Error| match e {
        Error::Damaged {
            shard,
            key,
            problem,
            ..
        } => {
            assert_eq!((shard, key.as_str()), (place.shard, skey.as_str()));
            assert_eq!(problem, "missing");
        }
        e => panic!("{e}"),
    };
    damaged(rf.contains_keys(&["new-0"]).unwrap_err());
    // In a batch with keys of sound shards too, and on parallel lanes.
    damaged(rf.contains_keys(&keys).unwrap_err());
    assert_eq!(rf.contains_keys(&[other]).unwrap(), vec![true]);
    // An add does not recreate the shard as zeros.
    let report = rf.add_keys(&["new-0", other.as_str()]);
    damaged(report.error.unwrap());
    assert_eq!(report.outcomes, vec![Added::NotAdded, Added::Present]);
    damaged(rf.insert_keys(&keys).unwrap_err());
    assert_eq!(server.cli(&["EXISTS", &skey]).trim(), "(integer) 0");
    let info = rf.info().unwrap();
    assert_eq!(info.damaged, vec![(place.shard, "missing".to_string())]);
    assert_eq!(info.shards_present, info.shards - 1);
    damaged(pull(&addr, &dir.path().join("lost.bgf"), false, &|_| {}).unwrap_err());
    assert!(!dir.path().join("lost.bgf").exists());
    // Another shard overwritten shorter: lookups past its end and adds fail too.
    let last = (place.shard + 1) % rf.meta().shards();
    let lkey = layout::shard_key("e", last);
    server.cli(&["SET", &lkey, "short"]);
    let in_last: Vec<&String> = keys
        .iter()
        .filter(|k| rf.meta().place(k.as_bytes()).shard == last)
        .take(50)
        .collect();
    assert!(!in_last.is_empty());
    assert!(matches!(
        rf.contains_keys(&in_last).unwrap_err(),
        Error::Damaged { shard, .. } if shard == last
    ));
    match rf.add_keys(&in_last).error.unwrap() {
        Error::Damaged { shard, problem, .. } => {
            assert_eq!(shard, last);
            assert!(problem.starts_with("5 bytes long instead of"), "{problem}");
        }
        e => panic!("{e}"),
    }
    assert_eq!(server.cli(&["STRLEN", &lkey]).trim(), "(integer) 5");
    assert_eq!(rf.info().unwrap().damaged.len(), 2);
}

#[test]
fn a_push_verifies_its_shards_and_warns_of_eviction() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let safe = RedisServer::start(dir.path(), &[]);
    let lru = RedisServer::start(
        dir.path(),
        &["--maxmemory", "80mb", "--maxmemory-policy", "allkeys-lru"],
    );
    let store = |s: &RedisServer| bloomgate_redis::Store::new(&address(s, "x")).unwrap();
    assert_eq!(store(&safe).eviction_warnings(), Vec::<String>::new());
    let w = store(&lru).eviction_warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains(&lru.addr())
            && w[0].contains("allkeys-lru")
            && w[0].contains("maxmemory-policy noeviction"),
        "{w:?}"
    );
    // volatile-* evicts only keys with a time to live, which bloomgate
    // never sets.
    lru.cli(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]);
    assert_eq!(store(&lru).eviction_warnings(), Vec::<String>::new());
    // CONFIG refused (as managed services do): a warning that it could
    // not be checked.
    lru.cli(&["ACL", "SETUSER", "default", "-config"]);
    let w = store(&lru).eviction_warnings();
    assert!(w.len() == 1 && w[0].contains("could not check"), "{w:?}");

    // A push into a Redis too small for the filter, which evicts: shards
    // pushed first are evicted by the later ones, and the push says so.
    let tiny = RedisServer::start(
        dir.path(),
        &["--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru"],
    );
    let path = dir.path().join("big.bgf");
    build_file(&path, 100);
    match push(&path, &address(&tiny, "big"), false, &|_| {}) {
        Err(Error::Damaged { problem, key, .. }) => {
            assert!(problem.contains("right after the push"), "{problem}");
            assert!(key.contains(":big:"), "{key}");
        }
        other => panic!("{other:?}"),
    }
    push(&path, &address(&safe, "big"), false, &|_| {}).unwrap();
}

#[test]
fn racing_writers_are_told_new_exactly_once() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(dir.path(), &[]);
    let path = dir.path().join("r.bgf");
    build_file(&path, 0);
    let addr = address(&server, "r");
    push(&path, &addr, false, &|_| {}).unwrap();
    // Four writers add the same 4000 items in different orders, in
    // batches of 100 (interleaved pipelines).
    let keys: Vec<String> = (0..4000).map(|i| format!("race-{i}")).collect();
    let told: Vec<Vec<bool>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4usize)
            .map(|w| {
                let (addr, keys) = (&addr, &keys);
                s.spawn(move || {
                    let rf = RedisFilter::open(addr).unwrap();
                    let mut order: Vec<usize> = (0..keys.len()).collect();
                    order.rotate_left(w * 1000);
                    if w % 2 == 1 {
                        order.reverse();
                    }
                    let mut new = vec![false; keys.len()];
                    for batch in order.chunks(100) {
                        let ks: Vec<&str> = batch.iter().map(|&i| keys[i].as_str()).collect();
                        for (&i, n) in batch.iter().zip(rf.insert_keys(&ks).unwrap()) {
                            new[i] = n;
                        }
                    }
                    new
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let rf = RedisFilter::open(&addr).unwrap();
    let found = rf.contains_keys(&keys).unwrap();
    let mut claimed_once = 0;
    for i in 0..keys.len() {
        assert!(found[i], "{} lost", keys[i]);
        let n = told.iter().filter(|t| t[i]).count();
        // At most one writer is told "new"; none only when the item's bits
        // were all set already by other items (a false positive).
        assert!(n <= 1, "{} claimed {n} times", keys[i]);
        claimed_once += n;
    }
    assert!(claimed_once >= keys.len() - 5, "{claimed_once}");
    assert_eq!(rf.items().unwrap(), claimed_once as u64);
}

#[test]
fn a_down_server_is_an_error_never_absent() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut server = RedisServer::start(dir.path(), &[]);
    let path = dir.path().join("d.bgf");
    build_file(&path, 100);
    let addr = address(&server, "d");
    push(&path, &addr, false, &|_| {}).unwrap();
    let rf = RedisFilter::open(&addr).unwrap();
    assert_eq!(rf.contains_keys(&["item-1"]).unwrap(), vec![true]);
    // A second handle with several pooled connections, idle while the
    // server is down.
    let idle = RedisFilter::open(&addr).unwrap();
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for _ in 0..50 {
                    assert_eq!(idle.contains_keys(&["item-2"]).unwrap(), vec![true]);
                }
            });
        }
    });
    server.kill9();
    let e = rf.contains_keys(&["item-1", "never-added"]).unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");
    assert!(rf.insert_keys(&["x"]).unwrap_err().is_unavailable());
    assert!(RedisFilter::open(&addr).unwrap_err().is_unavailable());

    // The server comes back (empty: no persistence) and the filter is
    // pushed again: the same handle reconnects by itself.
    let _again = RedisServer::start_on(dir.path(), server.port, &[]);
    push(&path, &addr, false, &|_| {}).unwrap();
    assert_eq!(
        rf.contains_keys(&["item-1", "never-added"]).unwrap(),
        vec![true, false]
    );
    assert_eq!(rf.insert_keys(&["after"]).unwrap(), vec![true]);
    // Its dead idle connections are dropped and the reads sent again: the
    // first lookup after the restart is answered.
    assert_eq!(
        idle.contains_keys(&["item-1", "after", "never-added"])
            .unwrap(),
        vec![true, true, false]
    );
}

#[test]
fn classic_filters_are_refused_with_the_reason() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(dir.path(), &[]);
    let path = dir.path().join("c.bgf");
    let params = Params::from_plan(&plan(Layout::Classic, 1000, 1e-3).unwrap(), 1);
    Filter::new(params).unwrap().save(&path).unwrap();
    let e = push(&path, &address(&server, "c"), false, &|_| {}).unwrap_err();
    assert!(matches!(e, Error::WrongLayout(_)), "{e:?}");
    assert!(e.to_string().contains("blocked"), "{e}");
    assert!(matches!(
        RedisFilter::open(&address(&server, "c")),
        Err(Error::NotFound { .. })
    ));
}

#[test]
fn leftovers_of_a_failed_push_do_not_count() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(dir.path(), &[]);
    let path = dir.path().join("l.bgf");
    build_file(&path, 10);
    // What a push that died before its metadata leaves: a whitelist and a
    // shard, but no filter.
    server.cli(&["SADD", &layout::whitelist_key("l"), "stale"]);
    server.cli(&["SET", &layout::shard_key("l", 0), "junk"]);
    let addr = address(&server, "l");
    assert!(matches!(
        RedisFilter::open(&addr),
        Err(Error::NotFound { .. })
    ));
    push(&path, &addr, false, &|_| {}).unwrap();
    let rf = RedisFilter::open(&addr).unwrap();
    assert!(rf.whitelist().is_empty());
    assert_eq!(rf.contains_keys(&["item-3"]).unwrap(), vec![true]);
    let back = dir.path().join("back.bgf");
    pull(&addr, &back, false, &|_| {}).unwrap();
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&path).unwrap());
}

#[test]
fn adds_go_by_sha_and_survive_a_script_flush() {
    // Adds run no script: each is its block read and written back in a
    // transaction (`WATCH`, `STRLEN`, `GETRANGE`, `MULTI`, `SETRANGE`s,
    // `EXEC`), so a server that lost its script cache
    // (restart, SCRIPT FLUSH, a promoted replica) changes nothing: every
    // item is still added and told "new" once, and Redis ran no `EVAL` nor
    // `EVALSHA`.
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(dir.path(), &[]);
    let path = dir.path().join("s.bgf");
    build_file(&path, 0);
    let addr = address(&server, "s");
    push(&path, &addr, false, &|_| {}).unwrap();
    server.cli(&["SCRIPT", "FLUSH"]);
    server.cli(&["CONFIG", "RESETSTAT"]);

    let rf = RedisFilter::open(&addr).unwrap();
    for round in 0..3 {
        let keys: Vec<String> = (0..3000).map(|i| format!("r{round}-{i}")).collect();
        let new = rf.insert_keys(&keys).unwrap();
        assert!(new.iter().filter(|&&n| n).count() >= 2990, "round {round}");
        assert!(rf.insert_keys(&keys).unwrap().iter().all(|&n| !n));
        assert!(rf.contains_keys(&keys).unwrap().iter().all(|&f| f));
        if round == 0 {
            server.cli(&["SCRIPT", "FLUSH"]);
        }
    }
    let stats = server.cli(&["INFO", "commandstats"]);
    let calls = |cmd: &str| -> u64 {
        stats
            .lines()
            .find(|l| l.starts_with(&format!("cmdstat_{cmd}:")))
            .and_then(|l| l.split("calls=").nth(1))
            .and_then(|v| v.split(',').next())
            .map_or(0, |v| v.parse().unwrap())
    };
    assert_eq!((calls("eval"), calls("evalsha")), (0, 0), "{stats}");
    // Each item added read once (nothing else wrote: no abort, no retry)
    // beside the lookups' reads; one write per block that gained bits, so
    // none for the second add of the same keys, and one per new item but
    // for the few that share a block with another new item of their
    // transaction; several items per transaction (at most 64 each), each
    // transaction watched and checked once; each transaction that added
    // new items counts them with an HINCRBY run by its EXEC (those of the
    // first add of each round, none of the second: the same keys, cut into
    // as many transactions).
    assert_eq!(calls("bitfield"), 0, "{stats}");
    assert_eq!(calls("getrange"), 6 * 3000 + 3 * 3000, "{stats}");
    let setrange = calls("setrange");
    assert!((3 * 2900..=3 * 3000).contains(&setrange), "{stats}");
    let exec = calls("exec");
    assert!((6 * 3000 / 64..=6 * 3000 / 8).contains(&exec), "{stats}");
    assert_eq!(calls("watch"), exec, "{stats}");
    assert!(calls("strlen") >= exec, "{stats}");
    assert_eq!(calls("hincrby") * 2, exec, "{stats}");
}

#[test]
fn an_add_counts_its_new_items_in_its_transaction() {
    // On one server a transaction's reads say which of its items are new
    // before its MULTI, so it counts them itself (HINCRBY run by its EXEC,
    // no round trip of its own): the count is exact after each add, an
    // add of nothing new counts nothing, and an add that failed on a
    // missing shard counts what it added.
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(dir.path(), &[]);
    let path = dir.path().join("d.bgf");
    build_file(&path, 0);
    let addr = address(&server, "d");
    push(&path, &addr, false, &|_| {}).unwrap();
    let rf = RedisFilter::open(&addr).unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    // Commands run so far (those run by EXEC included).
    let calls = |cmd: &str| -> u64 {
        server
            .cli(&["INFO", "commandstats"])
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
            .and_then(|v| v.split(',').next())
            .map_or(0, |v| v.parse().unwrap())
    };
    let first: Vec<String> = (0..40).map(|i| format!("first-{i}")).collect();
    let r = rf.add_keys(&first);
    assert!(r.error.is_none());
    let new1 = r.count(Added::New);
    assert!(new1 >= 39, "{new1}");
    // 40 items: one transaction, its count in it.
    assert_eq!(rf.items().unwrap(), new1);
    assert_eq!((calls("exec"), calls("hincrby")), (1, 1));
    // A write per block that gained bits (one per item, but for items
    // sharing a block).
    let written = calls("setrange");
    assert!((new1 - 2..=new1).contains(&written), "{written}");
    // Nothing new: nothing counted, nothing written.
    let r = rf.add_keys(&first);
    assert_eq!(r.count(Added::Present), 40);
    assert_eq!(rf.items().unwrap(), new1);
    assert_eq!((calls("exec"), calls("hincrby")), (2, 1));
    assert_eq!(calls("setrange"), written);

    // A shard missing: its items are not added, the others are, and
    // counted.
    let place = rf.meta().place(b"second-0");
    let skey = layout::shard_key("d", place.shard);
    server.cli(&["DEL", &skey]);
    let second: Vec<String> = (0..40).map(|i| format!("second-{i}")).collect();
    let r = rf.add_keys(&second);
    assert!(
        matches!(r.error, Some(Error::Damaged { .. })),
        "{:?}",
        r.error
    );
    let lost = second
        .iter()
        .filter(|k| rf.meta().place(k.as_bytes()).shard == place.shard)
        .count() as u64;
    assert!(lost >= 1 && r.count(Added::NotAdded) == lost, "{r:?}");
    assert!(r.count(Added::New) >= 39 - lost, "{r:?}");
    assert_eq!(rf.items().unwrap(), new1 + r.count(Added::New));
    assert_eq!(server.cli(&["EXISTS", &skey]).trim(), "(integer) 0");
}

#[test]
fn a_block_written_back_keeps_a_racing_writers_bits() {
    // An add reads its block and writes it back with its bits ORed in;
    // the WATCH makes EXEC run nothing when anything wrote the shard in
    // between, so no other writer's bit is lost. A foreign writer sets
    // bits with bare BITFIELDs (as earlier versions of bloomgate did) in
    // the blocks the adds write, all at once: every item of both is found
    // afterwards, and each of the adds' items was new to it exactly once.
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(dir.path(), &[]);
    // One shard of a few blocks: every write lands in the blocks the
    // other writer writes too.
    let params = Params::from_plan(&plan(Layout::Blocked, 400, 1e-2).unwrap(), 7);
    let path = dir.path().join("w.bgf");
    Filter::new(params).unwrap().save(&path).unwrap();
    let addr = address(&server, "w");
    push(&path, &addr, false, &|_| {}).unwrap();
    let rf = RedisFilter::open(&addr).unwrap();
    assert_eq!(rf.meta().shards(), 1);
    let ours: Vec<String> = (0..300).map(|i| format!("ours-{i}")).collect();
    let theirs: Vec<String> = (0..300).map(|i| format!("theirs-{i}")).collect();
    let skey = layout::shard_key("w", 0);
    let told: Vec<bool> = std::thread::scope(|s| {
        let foreign = s.spawn(|| {
            let client = redis::Client::open(format!("redis://{}/", server.addr())).unwrap();
            let mut conn = client.get_connection().unwrap();
            for k in &theirs {
                let place = rf.meta().place(k.as_bytes());
                let mut cmd = redis::cmd("BITFIELD");
                cmd.arg(&skey);
                for bit in place.redis_bits() {
                    cmd.arg("SET").arg("u1").arg(bit).arg(1);
                }
                let _: redis::Value = cmd.query(&mut conn).unwrap();
            }
        });
        let mut told = Vec::new();
        for batch in ours.chunks(5) {
            told.extend(rf.insert_keys(batch).unwrap());
        }
        foreign.join().unwrap();
        told
    });
    let all: Vec<&String> = ours.iter().chain(&theirs).collect();
    let found = rf.contains_keys(&all).unwrap();
    for (k, f) in all.iter().zip(&found) {
        assert!(f, "{k}: its bits were lost");
    }
    // Inserted again, none is new.
    assert!(rf.insert_keys(&ours).unwrap().iter().all(|&n| !n));
    // New once each, but for items whose bits others had set already (the
    // filter fills up to about its planned rate: a few).
    assert!(told.iter().filter(|&&n| n).count() >= 250, "{told:?}");
}

#[test]
fn eviction_of_a_watched_shard_aborts_exec() {
    // What the adds rely on: a key evicted (maxmemory, allkeys-lru) after a
    // client WATCHed it makes that client's EXEC run nothing (nil), so a
    // BITFIELD queued for it never recreates the key as zeros.
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(
        dir.path(),
        // Every key sampled (not five), so that LRU evicts the oldest key.
        &[
            "--maxmemory",
            "8mb",
            "--maxmemory-policy",
            "allkeys-lru",
            "--maxmemory-samples",
            "64",
        ],
    );
    let client = redis::Client::open(format!("redis://{}", server.addr())).unwrap();
    let mut a = client.get_connection().unwrap();
    let mut b = client.get_connection().unwrap();
    let shard = vec![0u8; 1 << 20];
    redis::cmd("SET")
        .arg("shard")
        .arg(&shard)
        .query::<()>(&mut a)
        .unwrap();
    redis::cmd("WATCH")
        .arg("shard")
        .query::<()>(&mut a)
        .unwrap();
    let len: i64 = redis::cmd("STRLEN").arg("shard").query(&mut a).unwrap();
    assert_eq!(len, 1 << 20);
    // Redis's LRU clock ticks once a second: two seconds on, the shard is
    // older than every key written below.
    std::thread::sleep(std::time::Duration::from_secs(2));
    // Other keys written until the shard (the least recently used) is
    // evicted: at most 40 MB against 8 MB of maxmemory.
    let mut evicted = false;
    for i in 0..40 {
        redis::cmd("SET")
            .arg(format!("filler-{i}"))
            .arg(&shard)
            .query::<()>(&mut b)
            .unwrap();
        if redis::cmd("EXISTS")
            .arg("shard")
            .query::<i64>(&mut b)
            .unwrap()
            == 0
        {
            evicted = true;
            break;
        }
    }
    assert!(evicted, "the shard was never evicted");
    let replies: Vec<redis::Value> = redis::pipe()
        .cmd("MULTI")
        .cmd("BITFIELD")
        .arg("shard")
        .arg("SET")
        .arg("u1")
        .arg(8_000_000)
        .arg(1)
        .cmd("EXEC")
        .query(&mut a)
        .unwrap();
    assert_eq!(replies.last(), Some(&redis::Value::Nil), "{replies:?}");
    assert_eq!(
        redis::cmd("EXISTS")
            .arg("shard")
            .query::<i64>(&mut b)
            .unwrap(),
        0,
        "EXEC recreated the evicted key"
    );
}

#[test]
fn an_evicted_shard_during_adds_is_an_error_never_a_zero_key() {
    // Adds run while other keys push a filter's shards out of a Redis used
    // as a cache (allkeys-random: the shards the adds keep using would
    // outlive the other keys under an LRU policy): every add either
    // answers or is an error,
    // and no shard is ever recreated (each is whole or missing). Once one
    // is missing, adds and lookups of its items are errors naming it.
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(
        dir.path(),
        &[
            "--maxmemory",
            "12mb",
            "--maxmemory-policy",
            "allkeys-random",
        ],
    );
    let path = dir.path().join("c.bgf");
    build_file(&path, 0);
    let addr = address(&server, "c");
    push(&path, &addr, false, &|_| {}).unwrap();
    let rf = RedisFilter::open(&addr).unwrap();
    let shards = rf.meta().shards();
    let whole = |i: u64| {
        let r = rf.meta().shard_bytes(i);
        r.end - r.start
    };
    let lengths = || -> Vec<u64> {
        (0..shards)
            .map(|i| {
                let n = server.cli(&["STRLEN", &layout::shard_key("c", i)]);
                n.trim().trim_start_matches("(integer) ").parse().unwrap()
            })
            .collect()
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let (answered, failed) = std::thread::scope(|s| {
        let adder = s.spawn(|| {
            let rf = RedisFilter::open(&addr).unwrap();
            let (mut answered, mut failed) = (0u64, 0u64);
            let mut round = 0;
            loop {
                // The round that starts after the eviction is the last.
                let last = done.load(Ordering::SeqCst);
                let keys: Vec<String> = (0..500).map(|i| format!("ev{round}-{i}")).collect();
                let report = rf.add_keys(&keys);
                match &report.error {
                    None => answered += 1,
                    Some(Error::Damaged { problem, .. }) => {
                        assert_eq!(problem, "missing");
                        failed += 1;
                    }
                    Some(e) => panic!("{e}"),
                }
                round += 1;
                if last && round >= 3 {
                    break;
                }
            }
            (answered, failed)
        });
        let client = redis::Client::open(format!("redis://{}", server.addr())).unwrap();
        let mut c = client.get_connection().unwrap();
        let filler = vec![7u8; 1 << 20];
        for i in 0..60 {
            redis::cmd("SET")
                .arg(format!("filler-{i}"))
                .arg(&filler)
                .query::<()>(&mut c)
                .unwrap();
            if lengths().contains(&0) {
                break;
            }
        }
        done.store(true, Ordering::SeqCst);
        adder.join().unwrap()
    });
    let now = lengths();
    let missing: Vec<u64> = (0..shards).filter(|&i| now[i as usize] == 0).collect();
    assert!(!missing.is_empty(), "no shard was evicted: {now:?}");
    for i in 0..shards {
        assert!(
            now[i as usize] == 0 || now[i as usize] == whole(i),
            "shard {i} is {} bytes long (whole: {})",
            now[i as usize],
            whole(i)
        );
    }
    // The adder ran after the eviction too: its last rounds failed.
    assert!(failed >= 1, "answered {answered}, failed {failed}");
    let lost = missing[0];
    let key = (0..)
        .map(|i| format!("probe-{i}"))
        .find(|k| rf.meta().place(k.as_bytes()).shard == lost)
        .unwrap();
    for e in [
        rf.add_keys(&[key.as_str()]).error.unwrap(),
        rf.contains_keys(&[key.as_str()]).unwrap_err(),
    ] {
        assert!(
            matches!(&e, Error::Damaged { shard, .. } if *shard == lost),
            "{e}"
        );
    }
    assert_eq!(
        server
            .cli(&["EXISTS", &layout::shard_key("c", lost)])
            .trim(),
        "(integer) 0"
    );
}

#[test]
fn batched_adds_answer_as_one_add_after_another() {
    // Adds spread over lanes answer exactly as the
    // same adds made one by one against the file: for each key, "new"
    // when some of its bits was not set by the keys before it.
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(dir.path(), &[]);
    // A tiny filter (one shard, 1.2 bits per key at the end) so that keys
    // often share bits and whole blocks: the order matters.
    let params = Params::from_plan(&plan(Layout::Blocked, 2_000, 1e-2).unwrap(), 5);
    let path = dir.path().join("tiny.bgf");
    Filter::new(params.clone()).unwrap().save(&path).unwrap();
    let addr = address(&server, "tiny");
    push(&path, &addr, false, &|_| {}).unwrap();
    let keys: Vec<String> = (0..12_000).map(|i| format!("k{}", i % 9_000)).collect();
    let reference = Filter::new(params).unwrap();
    let want: Vec<bool> = keys
        .iter()
        .map(|k| {
            let before = reference.contains(k.as_bytes());
            reference.insert(k.as_bytes());
            !before
        })
        .collect();
    for lanes in [1, 3, 4] {
        let name = format!("tiny{lanes}");
        let a = address(&server, &name);
        push(&path, &a, false, &|_| {}).unwrap();
        let mut rf = RedisFilter::open(&a).unwrap();
        rf.set_lanes(lanes);
        let got = rf.insert_keys(&keys).unwrap();
        assert_eq!(got, want, "{lanes} lanes");
        assert_eq!(
            rf.items().unwrap(),
            want.iter().filter(|&&n| n).count() as u64
        );
        // The bytes are the file's, bit for bit.
        let back = dir.path().join(format!("{name}.bgf"));
        pull(&a, &back, false, &|_| {}).unwrap();
        let pulled = Filter::open(&back, Access::ReadOnly).unwrap();
        assert_eq!(pulled.as_bytes(), reference.as_bytes());
        let info = rf.info().unwrap();
        assert_eq!(info.ones, pulled.ones(), "BITCOUNT of the shards");
        assert!((rf.fp_at_fill(info.ones) - pulled.fp_at_fill()).abs() < 1e-12);
    }
}

#[test]
fn handles_see_replacements_and_whitelist_changes_when_they_revalidate() {
    use bloomgate_redis::Revalidated;
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(dir.path(), &[]);
    let path = dir.path().join("f.bgf");
    build_file(&path, 1000);
    let addr = address(&server, "f");
    push(&path, &addr, false, &|_| {}).unwrap();
    let mut a = RedisFilter::open(&addr).unwrap();
    let mut b = RedisFilter::open(&addr).unwrap();
    assert_eq!(a.revalidate().unwrap(), Revalidated::Unchanged);
    // A whitelist change through B: A applies it when it revalidates.
    assert!(b.whitelist_add(b"item-3").unwrap());
    assert!(a.whitelist().is_empty());
    assert_eq!(a.revalidate().unwrap(), Revalidated::Whitelist);
    assert!(a.whitelist().contains(b"item-3"));
    assert_eq!(a.revalidate().unwrap(), Revalidated::Unchanged);
    assert!(b.whitelist_remove(b"item-3").unwrap());
    assert_eq!(a.revalidate().unwrap(), Revalidated::Whitelist);
    assert!(a.whitelist().is_empty());
    // A replacement with another seed and size: A reads it again and
    // answers by the new filter.
    let other = dir.path().join("other.bgf");
    let mut params = Params::from_plan(&plan(Layout::Blocked, 50_000, 1e-4).unwrap(), 12345);
    params.key_kind = 0;
    let f = Filter::new(params.clone()).unwrap();
    f.insert(b"only-in-the-new-one");
    f.save(&other).unwrap();
    push(&other, &addr, true, &|_| {}).unwrap();
    assert_ne!(a.meta().params, params);
    assert_eq!(a.revalidate().unwrap(), Revalidated::Replaced);
    assert_eq!(a.meta().params, params);
    assert_eq!(
        a.contains_keys(&["only-in-the-new-one", "item-1"]).unwrap(),
        vec![true, false]
    );
    // Deleted: not found, and found again once pushed again.
    bloomgate_redis::delete(&addr).unwrap();
    assert!(matches!(a.revalidate(), Err(Error::NotFound { .. })));
    push(&path, &addr, false, &|_| {}).unwrap();
    assert_eq!(a.revalidate().unwrap(), Revalidated::Replaced);
    assert_eq!(a.contains_keys(&["item-1"]).unwrap(), vec![true]);
}

#[test]
fn a_refused_password_is_an_authentication_error() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(dir.path(), &[]);
    server.cli(&["CONFIG", "SET", "requirepass", "s3cret"]);
    for url in [
        format!("redis://:wrong@{}/f", server.addr()),
        format!("redis://{}/f", server.addr()),
        format!("redis://nobody:s3cret@{}/f", server.addr()),
    ] {
        let e = RedisFilter::open(&Address::parse(&url).unwrap()).unwrap_err();
        assert!(matches!(e, Error::Auth { .. }), "{url}: {e:?}");
        assert!(!e.is_unavailable());
        assert!(e.to_string().contains("authentication failed"), "{e}");
    }
    let good = Address::parse(&format!("redis://:s3cret@{}/f", server.addr())).unwrap();
    assert!(matches!(
        RedisFilter::open(&good).unwrap_err(),
        Error::NotFound { .. }
    ));
}

#[test]
fn an_add_lane_never_writes_a_shard_removed_behind_its_watch() {
    // An add lane keeps its shards watched between calls and sends the
    // next call's transaction without asking again. A shard deleted after
    // that watch (by another client: eviction signals the same) makes the
    // transaction abort; the watch sent behind it finds the shard missing,
    // so its items are an error naming it and the key is never recreated,
    // while the items of other shards are added. A lane answers as one
    // add after another, also after an idle second (its watch is set
    // again), and keeps the item count.
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(dir.path(), &[]);
    let path = dir.path().join("l.bgf");
    build_file(&path, 0);
    let addr = address(&server, "l");
    push(&path, &addr, false, &|_| {}).unwrap();
    let rf = RedisFilter::open(&addr).unwrap();
    let other = RedisFilter::open(&addr).unwrap();
    let mut lane = bloomgate_redis::AddLane::new();
    let shard_of = |k: &str| rf.meta().place(k.as_bytes()).shard;
    let keys: Vec<String> = (0..40).map(|i| format!("lane-{i}")).collect();
    let report = rf.add_keys_on(&mut lane, &keys);
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(report.count(Added::New), 40);
    // Again through the lane, and through another handle: present.
    let again = rf.add_keys_on(&mut lane, &keys);
    assert!(again.error.is_none(), "{:?}", again.error);
    assert_eq!(again.count(Added::Present), 40);
    assert!(other
        .add_keys(&keys)
        .outcomes
        .iter()
        .all(|&o| o == Added::Present));
    assert_eq!(rf.info().unwrap().items, 40);
    // New keys on every shard, and the shard of the first one deleted
    // behind the lane's watch.
    let fresh: Vec<String> = (0..40).map(|i| format!("fresh-{i}")).collect();
    let victim = shard_of(&fresh[0]);
    let victim_key = layout::shard_key("l", victim);
    let on_victim = fresh.iter().filter(|k| shard_of(k) == victim).count();
    assert!(on_victim < fresh.len(), "every key on one shard");
    assert_eq!(server.cli(&["DEL", &victim_key]).trim(), "(integer) 1");
    let report = rf.add_keys_on(&mut lane, &fresh);
    match &report.error {
        Some(Error::Damaged { shard, problem, .. }) => {
            assert_eq!((*shard, problem.as_str()), (victim, "missing"));
        }
        other => panic!("{other:?}"),
    }
    for (k, o) in fresh.iter().zip(&report.outcomes) {
        let want = if shard_of(k) == victim {
            Added::NotAdded
        } else {
            Added::New
        };
        assert_eq!(*o, want, "{k}");
    }
    assert_eq!(
        server.cli(&["EXISTS", &victim_key]).trim(),
        "(integer) 0",
        "an add recreated the deleted shard"
    );
    // Every add after that is the same error; the rest are added.
    let report = rf.add_keys_on(&mut lane, &fresh);
    assert!(matches!(report.error, Some(Error::Damaged { .. })));
    assert_eq!(report.count(Added::NotAdded) as usize, on_victim);
    assert_eq!(
        report.count(Added::Present) as usize,
        fresh.len() - on_victim
    );
    // The shard pushed back whole: adds through the lane after an idle
    // second (the watch is set again) are new there, once.
    push(&path, &addr, true, &|_| {}).unwrap();
    let rf = RedisFilter::open(&addr).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let report = rf.add_keys_on(&mut lane, &fresh);
    assert!(report.error.is_none(), "{:?}", report.error);
    assert_eq!(report.count(Added::New), 40);
    assert_eq!(rf.add_keys_on(&mut lane, &fresh).count(Added::Present), 40);
    assert_eq!(rf.info().unwrap().items, 40);
}
