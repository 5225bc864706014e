//! Deletes in a grown cuckoo filter, through the real server: a delete of
//! an added item removes that item's copy and no other item's, over the
//! Redis protocol and HTTP, and after a restart that replays the log.
//!
//! The script is the one RedisBloom answers without a single miss:
//! `CF.RESERVE t 1000 …`, `CF.ADD item-0 … item-5999`, `CF.DEL item-0 …
//! item-2999`; then every delete must have answered 1 and every item never
//! deleted must still answer 1. Sub-filters hashed with separate seeds
//! failed it (a delete matched another item's equal fingerprint in a newer
//! sub-filter, leaving its own copy and removing the other item's).

use testkit::{Server, V};

const ADDED: usize = 6000;
const DELETED: usize = 3000;

fn item(i: usize) -> String {
    format!("item-{i}")
}

/// What the script saw: deletes of added items that answered 0, items
/// never deleted that answer 0, and the sub-filters the chain grew to.
#[derive(Debug, PartialEq)]
struct Outcome {
    failed_deletes: Vec<usize>,
    missing: Vec<usize>,
    filters: i64,
}

/// `CF.INFO`'s "Number of filters".
fn filters(s: &Server, key: &str) -> i64 {
    let info = s.resp().cmd(&["CF.INFO", key]);
    let a = info.arr();
    let at = a
        .iter()
        .position(|v| *v == V::Simple("Number of filters".into()))
        .unwrap_or_else(|| panic!("CF.INFO {key}: {info:?}"));
    a[at + 1].int()
}

/// Items `item-DELETED … item-ADDED−1` that `CF.MEXISTS` answers 0 for.
fn missing(s: &Server, key: &str) -> Vec<usize> {
    let mut c = s.resp();
    let mut out = Vec::new();
    for chunk in (DELETED..ADDED).collect::<Vec<_>>().chunks(500) {
        let names: Vec<String> = chunk.iter().map(|&i| item(i)).collect();
        let mut args = vec!["CF.MEXISTS", key];
        args.extend(names.iter().map(String::as_str));
        let r = c.cmd(&args);
        assert_eq!(r.arr().len(), chunk.len(), "{r:?}");
        out.extend(
            chunk
                .iter()
                .zip(r.arr())
                .filter(|(_, v)| v.int() != 1)
                .map(|(&i, _)| i),
        );
    }
    out
}

/// Reserves `key` with `options`, adds the items with `CF.ADD` (pipelined),
/// deletes the first ones with `CF.DEL` or HTTP remove.
fn run(s: &Server, key: &str, options: &[&str], http: bool) -> Outcome {
    let mut c = s.resp();
    let mut reserve = vec!["CF.RESERVE", key, "1000"];
    reserve.extend_from_slice(options);
    assert_eq!(c.cmd(&reserve), V::Simple("OK".into()), "{reserve:?}");
    let names: Vec<String> = (0..ADDED).map(item).collect();
    for chunk in names.chunks(1000) {
        for n in chunk {
            c.send(&[b"CF.ADD", key.as_bytes(), n.as_bytes()]);
        }
        for n in chunk {
            assert_eq!(c.read().unwrap(), V::Int(1), "CF.ADD {key} {n}");
        }
    }
    let mut failed_deletes = Vec::new();
    if http {
        for (at, chunk) in names[..DELETED].chunks(250).enumerate() {
            let body = serde_json::to_string(chunk).unwrap();
            let (st, v) = s.http(
                "POST",
                &format!("/v1/filters/{key}/remove"),
                Some(&body),
                None,
            );
            assert_eq!(st, 200, "{v}");
            let results = v["results"].as_array().unwrap();
            assert_eq!(results.len(), chunk.len(), "{v}");
            for (j, r) in results.iter().enumerate() {
                if r["removed"] != true {
                    failed_deletes.push(at * 250 + j);
                }
            }
        }
    } else {
        for (at, chunk) in names[..DELETED].chunks(1000).enumerate() {
            for n in chunk {
                c.send(&[b"CF.DEL", key.as_bytes(), n.as_bytes()]);
            }
            for (j, n) in chunk.iter().enumerate() {
                match c.read().unwrap() {
                    V::Int(1) => {}
                    V::Int(0) => failed_deletes.push(at * 1000 + j),
                    other => panic!("CF.DEL {key} {n}: {other:?}"),
                }
            }
        }
    }
    Outcome {
        failed_deletes,
        missing: missing(s, key),
        filters: filters(s, key),
    }
}

fn clean(o: &Outcome) -> bool {
    o.failed_deletes.is_empty() && o.missing.is_empty()
}

/// The script over the Redis protocol (EXPANSION 2, EXPANSION 1,
/// BUCKETSIZE 4) and over HTTP remove: every delete of an added item
/// answers 1, every item never deleted stays present, before and after
/// a SIGKILL and the restart that replays the log.
#[test]
fn deletes_in_a_grown_cuckoo_filter_remove_only_the_deleted_items() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    let cases: [(&str, &[&str], bool); 4] = [
        ("e2", &["EXPANSION", "2"], false),
        ("e1", &["EXPANSION", "1"], false),
        ("b4", &["BUCKETSIZE", "4", "EXPANSION", "2"], false),
        ("http", &["EXPANSION", "2"], true),
    ];
    let mut report = Vec::new();
    for (key, options, http) in cases {
        let o = run(&s, key, options, http);
        assert!(o.filters > 1, "{key}: the chain did not grow: {o:?}");
        report.push((key, o));
    }
    let bad: Vec<String> = report
        .iter()
        .filter(|(_, o)| !clean(o))
        .map(|(k, o)| {
            format!(
                "{k}: {} of {DELETED} deletes answered 0, {} of {} items never deleted \
                 answer 0 ({} sub-filters)",
                o.failed_deletes.len(),
                o.missing.len(),
                ADDED - DELETED,
                o.filters
            )
        })
        .collect();
    assert!(bad.is_empty(), "{}", bad.join("; "));
    // The log replays the same deletes into the file's chains.
    s.kill9();
    let s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    for (key, _) in &report {
        assert_eq!(missing(&s, key), Vec::<usize>::new(), "{key} after restart");
    }
}

/// A chain saved by a release from before nested chains: `tests/data/
/// legacy-cuckoo-chain.cf`, written by that release's server after
/// `CF.RESERVE legacy 64 EXPANSION 2` and `CF.ADD item-0 … item-399`
/// (three sub-filters with a seed each, 8-bit fingerprints). It is served
/// as it is: every item answers 1; a delete of an added item takes a copy
/// (1) or, when its fingerprint shows up in sub-filters hashed apart, is
/// refused with an error (RESP and HTTP), never answered 0; no item kept
/// is lost, before or after a restart; adds grow it by nested sub-filters.
#[test]
fn a_chain_saved_by_an_older_release_refuses_deletes_it_cannot_tell_apart() {
    let dir = tempfile::tempdir().unwrap();
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/legacy-cuckoo-chain.cf");
    std::fs::copy(&fixture, dir.path().join("legacy.cf")).unwrap();
    let mut s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    let mut c = s.resp();
    assert_eq!(filters(&s, "legacy"), 3);
    let present = |s: &Server, items: &[usize]| -> Vec<usize> {
        let mut c = s.resp();
        items
            .iter()
            .copied()
            .filter(|&i| c.cmd(&["CF.EXISTS", "legacy", &item(i)]) != V::Int(1))
            .collect()
    };
    let all: Vec<usize> = (0..400).collect();
    assert_eq!(present(&s, &all), Vec::<usize>::new(), "as loaded");
    let (mut taken, mut refused) = (Vec::new(), Vec::new());
    for i in 0..200 {
        match c.cmd(&["CF.DEL", "legacy", &item(i)]) {
            V::Int(1) => taken.push(i),
            V::Err(e) if e.contains("cannot delete this item from 'legacy' safely") => {
                refused.push(i)
            }
            other => panic!("CF.DEL legacy {}: {other:?}", item(i)),
        }
    }
    // Both paths ran (the file and the hash are fixed: so are these).
    assert!(!taken.is_empty() && !refused.is_empty(), "{refused:?}");
    let kept: Vec<usize> = (200..400).chain(refused.iter().copied()).collect();
    assert_eq!(present(&s, &kept), Vec::<usize>::new(), "after deletes");
    // HTTP says it per item, and changes nothing.
    let body = serde_json::to_string(&[item(refused[0])]).unwrap();
    let (st, v) = s.http("POST", "/v1/filters/legacy/remove", Some(&body), None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["removed"], 0, "{v}");
    assert!(
        v["results"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("safely")),
        "{v}"
    );
    // Adds grow it; deletes of the new items take a copy or are refused
    // (a new item may match in an old sub-filter too), never lose one.
    for i in 1000..1600 {
        assert_eq!(c.cmd(&["CF.ADD", "legacy", &item(i)]), V::Int(1));
    }
    assert!(filters(&s, "legacy") > 3);
    let mut kept_new = Vec::new();
    for i in 1000..1300 {
        match c.cmd(&["CF.DEL", "legacy", &item(i)]) {
            V::Int(1) => {}
            V::Err(e) if e.contains("safely") => kept_new.push(i),
            other => panic!("CF.DEL legacy {}: {other:?}", item(i)),
        }
    }
    let kept: Vec<usize> = kept.into_iter().chain(kept_new).chain(1300..1600).collect();
    assert_eq!(present(&s, &kept), Vec::<usize>::new(), "after growing");
    s.kill9();
    let s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    assert_eq!(present(&s, &kept), Vec::<usize>::new(), "after a restart");
}
