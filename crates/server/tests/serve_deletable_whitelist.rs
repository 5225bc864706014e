//! Whitelist edits of deletable (cuckoo and counting) filters over HTTP,
//! against the real server: the same endpoints and the same replies as a
//! Bloom filter's, served at once, written to `NAME.cf.whitelist` before
//! the reply, kept across SIGKILL, the log's replay, a snapshot, a chain
//! that grows and a restart; deleted with the filter, never inherited by
//! a namesake; a damaged whitelist file makes the filter damaged, as a
//! Bloom filter's does. A counting or cuckoo file the CLI built keeps its
//! whitelist in the CLI's `NAME.bgf.whitelist`, which `bloomgate check`
//! reads.

use std::path::Path;

use serde_json::{json, Value};
use testkit::{Server, V};

/// The filters compared: a Bloom filter and one of each deletable layout.
const FILTERS: [(&str, &str); 3] = [
    ("bloom", "blocked"),
    ("cuckoo", "cuckoo"),
    ("counting", "counting"),
];

fn start(dir: &Path) -> Server {
    Server::start(dir, &["--snapshot-secs", "100000"])
}

/// `POST` (`add`) or `DELETE` `/v1/filters/NAME/whitelist` with `items`:
/// the reply's status and body.
fn whitelist(s: &Server, name: &str, add: bool, items: &[&str]) -> (u16, Value) {
    let method = if add { "POST" } else { "DELETE" };
    let body = serde_json::to_string(items).unwrap();
    s.http(
        method,
        &format!("/v1/filters/{name}/whitelist"),
        Some(&body),
        None,
    )
}

/// The verdict on `item`, without its `item` field.
fn verdict(s: &Server, name: &str, item: &str) -> Value {
    let v = s.check(name, item);
    json!({"hit": v["hit"], "whitelisted": v["whitelisted"], "matched": v["matched"]})
}

fn info(s: &Server, name: &str) -> Value {
    let (st, v) = s.http("GET", &format!("/v1/filters/{name}"), None, None);
    assert_eq!(st, 200, "{name}: {v}");
    v
}

/// Every filter answers `check` on `item` as `want`, and its info counts
/// `entries` whitelist entries.
fn assert_all(s: &Server, item: &str, want: &Value, entries: u64, when: &str) {
    for (name, _) in FILTERS {
        assert_eq!(&verdict(s, name, item), want, "{name} {item}: {when}");
        assert_eq!(
            info(s, name)["whitelist_entries"],
            entries,
            "{name}: {when}"
        );
    }
}

/// Every filter answers the whitelist edit (`add`) or removal of the
/// items with 200 and, per item, the answer given (`was_hit` or
/// `removed`).
fn same_replies(s: &Server, add: bool, answers: [(&str, bool); 2]) {
    let key = if add { "was_hit" } else { "removed" };
    let items: Vec<&str> = answers.iter().map(|a| a.0).collect();
    let results: Vec<Value> = answers
        .iter()
        .map(|(item, b)| json!({"item": item, key: b}))
        .collect();
    for (name, _) in FILTERS {
        let (st, v) = whitelist(s, name, add, &items);
        assert_eq!((st, &v), (200, &json!({ "results": results })), "{name}");
    }
}

#[test]
fn deletable_filters_take_whitelist_edits_as_bloom_filters_do() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut s = start(d);
    let items: Vec<String> = ["a", "b", "c"].iter().map(|i| i.to_string()).collect();
    for (name, layout) in FILTERS {
        let body = format!(r#"{{"name":"{name}","items":1000,"fp":0.0001,"layout":"{layout}"}}"#);
        let (st, v) = s.http("POST", "/v1/filters", Some(&body), None);
        assert_eq!(st, 201, "{name}: {v}");
        s.add(name, &items);
    }

    // The same replies, filter for filter.
    same_replies(&s, true, [("a", true), ("never-added", false)]);
    let whitelisted = json!({"hit": false, "whitelisted": true, "matched": "a"});
    let listed = json!({"hit": true, "whitelisted": false, "matched": "b"});
    assert_all(&s, "a", &whitelisted, 2, "whitelisted");
    assert_all(&s, "b", &listed, 2, "not whitelisted");
    // The Redis protocol's lookups apply the same whitelist.
    let mut c = s.resp();
    assert_eq!(c.cmd(&["CF.EXISTS", "cuckoo", "a"]), V::Int(0));
    assert_eq!(c.cmd(&["CF.EXISTS", "counting", "b"]), V::Int(1));
    assert_eq!(c.cmd(&["BF.EXISTS", "bloom", "a"]), V::Int(0));
    drop(c);
    same_replies(&s, false, [("never-added", true), ("not-there", false)]);
    for name in ["cuckoo", "counting"] {
        assert!(d.join(format!("{name}.cf.whitelist")).exists(), "{name}");
    }
    assert!(d.join("bloom.bgf.whitelist").exists());

    // Durable when answered: SIGKILL, with adds in the log only, which
    // replay leaves the whitelist out of.
    s.add("cuckoo", &["d".to_string()]);
    s.add("counting", &["d".to_string()]);
    s.kill9();
    let s = start(d);
    assert_all(&s, "a", &whitelisted, 1, "after SIGKILL");
    for name in ["cuckoo", "counting"] {
        assert_eq!(verdict(&s, name, "d")["hit"], true, "{name}: replayed");
    }

    // The chain grows: one whitelist, kept.
    let more: Vec<String> = (0..3000).map(|i| format!("k{i}")).collect();
    s.add("cuckoo", &more);
    assert!(
        info(&s, "cuckoo")["filters"].as_u64().unwrap() > 1,
        "the chain grew"
    );
    assert_eq!(verdict(&s, "cuckoo", "a"), whitelisted, "after growth");
    let (st, v) = whitelist(&s, "cuckoo", true, &["k7"]);
    assert_eq!((st, v["results"][0]["was_hit"].clone()), (200, json!(true)));
    // A snapshot (SIGTERM), then a restart.
    let mut s = s;
    assert!(s.term().success());
    let s = start(d);
    for (name, entries) in [("bloom", 1), ("cuckoo", 2), ("counting", 1)] {
        assert_eq!(
            verdict(&s, name, "a"),
            whitelisted,
            "{name}: after a snapshot"
        );
        assert_eq!(info(&s, name)["whitelist_entries"], entries, "{name}");
    }
    assert_eq!(verdict(&s, "cuckoo", "k7")["whitelisted"], true);
    assert_eq!(verdict(&s, "cuckoo", "k8")["hit"], true);

    // Deleted with the filter; a namesake starts with none.
    let (st, _) = s.http("DELETE", "/v1/filters/cuckoo", None, None);
    assert_eq!(st, 200);
    assert!(!d.join("cuckoo.cf.whitelist").exists());
    let body = r#"{"name":"cuckoo","items":1000,"fp":0.0001,"layout":"cuckoo"}"#;
    let (st, v) = s.http("POST", "/v1/filters", Some(body), None);
    assert_eq!(st, 201, "{v}");
    s.add("cuckoo", &items);
    assert_eq!(
        verdict(&s, "cuckoo", "a"),
        json!({"hit": true, "whitelisted": false, "matched": "a"})
    );
    assert_eq!(info(&s, "cuckoo")["whitelist_entries"], 0);
}

/// Every entry of a listing of `GET /v1/filters/NAME/whitelist`, a page
/// of `limit` at a time, following `next`; and the `count` each page gave.
fn listing(s: &Server, name: &str, limit: usize) -> (Vec<Value>, Vec<Value>) {
    let (mut entries, mut counts) = (Vec::new(), Vec::new());
    let mut query = format!("limit={limit}");
    loop {
        let (st, v) = s.http(
            "GET",
            &format!("/v1/filters/{name}/whitelist?{query}"),
            None,
            None,
        );
        assert_eq!(st, 200, "{name}: {v}");
        counts.push(v["count"].clone());
        let page = v["entries"].as_array().unwrap();
        assert!(page.len() <= limit, "{name}: {v}");
        entries.extend(page.iter().cloned());
        match &v["next"] {
            Value::Null => return (entries, counts),
            Value::Object(next) => {
                let (k, after) = next.iter().next().unwrap();
                let after = after.as_str().unwrap();
                assert!(
                    !page.is_empty(),
                    "{name}: a next page after an empty one: {v}"
                );
                query = format!("limit={limit}&{k}={}", testkit::percent_encode(after));
            }
            other => panic!("{name}: next is {other}"),
        }
    }
}

/// `GET /v1/filters/NAME/whitelist` lists every kind's whitelist, sorted
/// and paged, the same after a restart from the files (SIGTERM) and after
/// SIGKILL. The empty item is an entry of a deletable filter (as in
/// RedisBloom's `CF.ADD`): whitelisted, it is listed and still whitelisted
/// after both restarts (the file's `\e` line). A Bloom filter's key rules
/// refuse it (an error for that item, nothing stored).
#[test]
fn whitelists_are_listed_and_paged_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut s = start(d);
    let items: Vec<String> = ["a", "b", "c d", "é"]
        .iter()
        .map(|i| i.to_string())
        .collect();
    for (name, layout) in FILTERS {
        let body = format!(r#"{{"name":"{name}","items":1000,"fp":0.0001,"layout":"{layout}"}}"#);
        let (st, v) = s.http("POST", "/v1/filters", Some(&body), None);
        assert_eq!(st, 201, "{name}: {v}");
        s.add(name, &items);
        if name != "bloom" {
            s.add(name, &[String::new()]);
        }
        let (st, v) = whitelist(&s, name, true, &["", "c d", "é", "a"]);
        assert_eq!(st, 200, "{name}: {v}");
        let empty = match name {
            "bloom" => json!({"item": "", "error": "invalid item: empty key"}),
            _ => json!({"item": "", "was_hit": true}),
        };
        assert_eq!(v["results"][0], empty, "{name}");
        assert_eq!(
            v["results"][3],
            json!({"item": "a", "was_hit": true}),
            "{name}"
        );
    }
    let want = |name: &str| match name {
        "bloom" => json!(["a", "c d", "é"]),
        _ => json!(["", "a", "c d", "é"]),
    };
    for limit in [1, 2, 3, 10_000] {
        for (name, _) in FILTERS {
            let (entries, counts) = listing(&s, name, limit);
            assert_eq!(Value::from(entries), want(name), "{name}, pages of {limit}");
            let n = want(name).as_array().unwrap().len();
            assert!(counts.iter().all(|c| c == n), "{name}: {counts:?}");
        }
    }
    let (st, v) = s.http("GET", "/v1/filters/bloom/whitelist?limit=0", None, None);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (400, Some("bad_request")),
        "{v}"
    );
    let (st, v) = s.http("GET", "/v1/filters/nope/whitelist", None, None);
    assert_eq!(st, 404, "{v}");

    // A restart from the files alone (snapshot on SIGTERM), then one after
    // SIGKILL: the same listing, and the entries still whitelisted.
    let empty_whitelisted = json!({"hit": false, "whitelisted": true, "matched": ""});
    assert!(s.term().success());
    let mut s = start(d);
    for (name, _) in FILTERS {
        assert_eq!(
            Value::from(listing(&s, name, 10_000).0),
            want(name),
            "{name}: restarted"
        );
        assert_eq!(
            verdict(&s, name, "a"),
            json!({"hit": false, "whitelisted": true, "matched": "a"}),
            "{name}: restarted"
        );
        assert_eq!(verdict(&s, name, "b")["hit"], true, "{name}");
        if name != "bloom" {
            assert_eq!(
                verdict(&s, name, ""),
                empty_whitelisted,
                "{name}: restarted"
            );
        }
    }
    s.kill9();
    let s = start(d);
    for (name, _) in FILTERS {
        assert_eq!(
            Value::from(listing(&s, name, 2).0),
            want(name),
            "{name}: after SIGKILL"
        );
        if name != "bloom" {
            assert_eq!(
                verdict(&s, name, ""),
                empty_whitelisted,
                "{name}: after SIGKILL"
            );
        }
    }
}

/// A whitelist file that does not parse makes its filter damaged (every
/// request on it says so, naming the file), as a Bloom filter's does;
/// the other filters are served.
#[test]
fn a_damaged_deletable_whitelist_makes_the_filter_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut s = start(d);
    for name in ["cf", "ok"] {
        let body = format!(r#"{{"name":"{name}","items":100,"fp":0.001,"layout":"cuckoo"}}"#);
        let (st, v) = s.http("POST", "/v1/filters", Some(&body), None);
        assert_eq!(st, 201, "{v}");
        let (st, v) = whitelist(&s, name, true, &["x"]);
        assert_eq!(st, 200, "{v}");
    }
    assert!(s.term().success());
    let wl = d.join("cf.cf.whitelist");
    std::fs::write(&wl, b"not a whitelist\n").unwrap();
    let s = start(d);
    let (st, v) = s.http("GET", "/v1/filters/cf/check?item=x", None, None);
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (503, Some("damaged")),
        "{v}"
    );
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("cf.cf.whitelist"), "{message}");
    let (st, v) = whitelist(&s, "cf", true, &["y"]);
    assert_eq!(st, 503, "{v}");
    assert_eq!(
        verdict(&s, "ok", "x"),
        json!({"hit": false, "whitelisted": false, "matched": null})
    );
    assert_eq!(info(&s, "ok")["whitelist_entries"], 1, "the others served");
    assert_eq!(
        std::fs::read(&wl).unwrap(),
        b"not a whitelist\n",
        "left alone"
    );
}

/// A cuckoo file the CLI built: the server's whitelist edits are written
/// to the CLI's `NAME.bgf.whitelist` (normalized as the CLI does), which
/// `bloomgate check` applies, and come back after a restart.
#[test]
fn a_cli_built_deletable_file_shares_its_whitelist_with_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let list = dir.path().join("list.txt");
    testkit::write_lines(&list, ["http://evil.example/a", "http://evil.example/b"]);
    let bgf = data.join("urls.bgf");
    testkit::ok(&testkit::bg(&[
        "build",
        "--layout",
        "cuckoo",
        "--items",
        "1000",
        "--fp",
        "0.0001",
        "-o",
        testkit::p(&bgf),
        testkit::p(&list),
    ]));
    let mut s = start(&data);
    let (st, v) = whitelist(&s, "urls", true, &["HTTP://Evil.Example/a"]);
    assert_eq!(
        (st, v["results"][0]["was_hit"].clone()),
        (200, json!(true)),
        "{v}"
    );
    assert_eq!(
        verdict(&s, "urls", "http://evil.example/a")["whitelisted"],
        true
    );
    assert!(data.join("urls.bgf.whitelist").exists());
    assert!(!data.join("urls.cf.whitelist").exists());
    let q = dir.path().join("q.txt");
    testkit::write_lines(&q, ["http://evil.example/a", "http://evil.example/b"]);
    let out = testkit::bg(&["check", testkit::p(&bgf), testkit::p(&q)]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "http://evil.example/b\n",
        "the CLI applies the server's whitelist"
    );
    s.kill9();
    let s = start(&data);
    assert_eq!(
        verdict(&s, "urls", "http://evil.example/a")["whitelisted"],
        true
    );
    assert_eq!(info(&s, "urls")["whitelist_entries"], 1);
}
