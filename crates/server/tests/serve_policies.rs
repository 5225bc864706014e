//! Fill policies on the server (`bloomgate serve` started from the shipped
//! binary): filters created over HTTP with `"policy": "rotate"` or
//! `"clear"`, fed through the Redis protocol, the rotation reproduced
//! exactly by the log's replay after SIGKILL, the files the CLI reads, and
//! the forgetting policies refused for url and host blacklists.

use testkit::{bg, ok, p, Server, V};

fn create(s: &Server, body: &str) -> (u16, serde_json::Value) {
    s.http("POST", "/v1/filters", Some(body), None)
}

fn madd(s: &Server, name: &str, items: impl IntoIterator<Item = String>) -> Vec<i64> {
    let items: Vec<String> = items.into_iter().collect();
    let mut args = vec!["BF.MADD", name];
    args.extend(items.iter().map(String::as_str));
    s.resp().cmd(&args).arr().iter().map(V::int).collect()
}

fn exists(s: &Server, name: &str, item: &str) -> bool {
    s.resp().cmd(&["BF.EXISTS", name, item]).int() == 1
}

const SNAP: [&str; 2] = ["--snapshot-secs", "100000"];

/// A ring of 3 generations over a window of 100 adds (50 per generation):
/// an entry stays for its window, is forgotten after at most 150 further
/// adds, and a replay after SIGKILL starts the same generations at the same
/// adds (the log holds every add since the last snapshot).
#[test]
fn a_served_rotation_forgets_after_its_window_never_within_and_replays_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &SNAP);
    let (st, v) = create(
        &s,
        r#"{"name": "seen", "items": 100, "fp": 1e-9, "policy": "rotate", "generations": 3, "window": 100}"#,
    );
    assert_eq!(st, 201, "{v}");
    assert!(
        v["policy"]
            .as_str()
            .unwrap()
            .starts_with("rotate (3 generations, window 100"),
        "{v}"
    );
    assert_eq!(madd(&s, "seen", ["first".to_string()]), [1]);
    let new = madd(&s, "seen", (0..99).map(|i| format!("e{i}")));
    assert!(new.iter().all(|&n| n == 1), "{new:?}");
    assert!(exists(&s, "seen", "first"), "forgotten within its window");
    assert_eq!(
        madd(&s, "seen", ["first".to_string()]),
        [0],
        "seen, not new"
    );
    s.kill9();

    let mut s = Server::start(dir.path(), &SNAP);
    assert!(exists(&s, "seen", "first"), "lost by a crash");
    assert!((0..99).all(|i| exists(&s, "seen", &format!("e{i}"))));
    // 150 more: generations 2, 3 and 4 start; 0 and 1 are dropped.
    let new = madd(&s, "seen", (0..150).map(|i| format!("later{i}")));
    assert!(new.iter().all(|&n| n == 1), "{new:?}");
    assert!(!exists(&s, "seen", "first"), "kept past its window");
    assert!(!exists(&s, "seen", "e60"));
    let (_, before) = s.http("GET", "/v1/filters/seen", None, None);
    assert_eq!(before["layers"], 3, "{before}");
    s.kill9();

    // The replay (no snapshot since the restart) rotates where the live
    // adds did: the same generations, the same answers.
    let s = Server::start(dir.path(), &SNAP);
    let (_, after) = s.http("GET", "/v1/filters/seen", None, None);
    for f in ["layers", "items", "policy"] {
        assert_eq!(before[f], after[f], "{f}: {before} / {after}");
    }
    assert!((0..150).all(|i| exists(&s, "seen", &format!("later{i}"))));
    assert!(!exists(&s, "seen", "first") && !exists(&s, "seen", "e60"));
    // The CLI reads the files the server saved: same ring, same answers.
    let (st, _) = s.http("POST", "/v1/snapshot", None, None);
    assert_eq!(st, 200);
    let base = dir.path().join("seen.bgf");
    let info: serde_json::Value =
        serde_json::from_str(&ok(&bg(&["info", "--json", p(&base)]))).unwrap();
    assert_eq!(info["policy"]["name"], "rotate", "{info}");
    assert_eq!(info["policy"]["live_generations"], 3, "{info}");
    let list = dir.path().join("q.txt");
    testkit::write_lines(&list, ["later0", "later149", "first"]);
    let out = bg(&["check", p(&base), p(&list)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text, "later0\nlater149\n", "{out:?}");
    // A rotating filter is the server's own state: never reloaded from a file.
    let (st, v) = s.http("POST", "/v1/filters/seen/reload", None, None);
    assert_eq!(st, 400, "{v}");
}

/// The seeds' `autoClearRate`: at half the bits set the filter starts
/// over, and a restart keeps the cleared state.
#[test]
fn a_served_clear_filter_empties_at_its_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &SNAP);
    let (st, v) = create(
        &s,
        r#"{"name": "cache", "items": 1000, "fp": 0.01, "policy": "clear", "clear_at": 0.5}"#,
    );
    assert_eq!(st, 201, "{v}");
    for chunk in 0..30 {
        madd(
            &s,
            "cache",
            (0..100).map(|i| format!("k{}", chunk * 100 + i)),
        );
    }
    let (_, v) = s.http("GET", "/v1/filters/cache", None, None);
    let items = v["items"].as_u64().unwrap();
    assert!(items < 3000 && items > 0, "cleared at least once: {v}");
    assert!(v["fill_ratio"].as_f64().unwrap() < 0.52, "{v}");
    assert_eq!(v["layers"], 1, "{v}");
    // The newest keys are there; the first ones were cleared.
    assert!(exists(&s, "cache", "k2999"));
    assert!(!(0..100).all(|i| exists(&s, "cache", &format!("k{i}"))));
    s.kill9();
    let s = Server::start(dir.path(), &SNAP);
    let (_, after) = s.http("GET", "/v1/filters/cache", None, None);
    assert_eq!(after["items"].as_u64(), Some(items), "{after}");
    assert!(exists(&s, "cache", "k2999"));
}

/// Forgetting is refused where it would let a blocked URL through, and
/// the settings are checked.
#[test]
fn forgetting_policies_are_refused_for_served_url_and_host_blacklists() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &SNAP);
    for kind in ["url", "host"] {
        for policy in ["rotate", "clear"] {
            let body = format!(
                r#"{{"name": "b{kind}{policy}", "items": 100, "fp": 0.01, "kind": "{kind}", "policy": "{policy}"}}"#
            );
            let (st, v) = create(&s, &body);
            assert_eq!(st, 400, "{v}");
            assert!(
                v["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("must never forget"),
                "{v}"
            );
            assert!(!dir.path().join(format!("b{kind}{policy}.bgf")).exists());
        }
    }
    // A crawler's seen-set of URLs may forget: purpose dedup.
    let (st, v) = create(
        &s,
        r#"{"name": "crawl", "items": 100, "fp": 0.01, "kind": "url", "policy": "rotate", "purpose": "dedup"}"#,
    );
    assert_eq!(st, 201, "{v}");
    for (body, says) in [
        (
            r#"{"name": "x1", "items": 100, "fp": 0.01, "policy": "rotate", "generations": 1}"#,
            "2 to 64 generations",
        ),
        (
            r#"{"name": "x2", "items": 100, "fp": 0.01, "policy": "clear", "clear_at": 1.5}"#,
            "strictly between 0 and 1",
        ),
        (
            r#"{"name": "x3", "items": 100, "fp": 0.01, "policy": "sometimes"}"#,
            "unknown policy",
        ),
        (
            r#"{"name": "x4", "items": 100, "fp": 0.01, "policy": "grow", "clear_at": 0.5}"#,
            "does not apply",
        ),
        (
            r#"{"name": "x5", "items": 100, "fp": 0.01, "layout": "cuckoo", "policy": "grow"}"#,
            "fill policy applies to Bloom filters",
        ),
    ] {
        let (st, v) = create(&s, body);
        assert_eq!(st, 400, "{body}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(says), "{body}: {msg}");
    }
    // grow and refuse over HTTP are RedisBloom's scaling and NONSCALING.
    let (st, v) = create(
        &s,
        r#"{"name": "r", "items": 10, "fp": 0.01, "policy": "refuse"}"#,
    );
    assert_eq!((st, v["policy"].as_str()), (201, Some("refuse")), "{v}");
    let mut c = s.resp();
    let mut taken = 0;
    let mut refused = None;
    for i in 0..40 {
        match c.cmd(&["BF.ADD", "r", &format!("r{i}")]) {
            // 0: a false positive of the filter (rare at 1 %).
            V::Int(n) => taken += n,
            V::Err(e) => {
                refused = Some(e);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(refused.as_deref(), Some("ERR non scaling filter is full"));
    assert!((10..40).contains(&taken), "{taken}");
    let (st, v) = create(
        &s,
        r#"{"name": "g", "items": 10, "fp": 0.01, "policy": "grow", "expansion": 4}"#,
    );
    assert_eq!(
        (st, v["policy"].as_str()),
        (201, Some("grow (expansion 4)")),
        "{v}"
    );
    madd(&s, "g", (0..100).map(|i| format!("g{i}")));
    let (_, v) = s.http("GET", "/v1/filters/g", None, None);
    assert!(v["layers"].as_u64().unwrap() >= 2, "{v}");
    assert!(v["predicted_fp"].as_f64().unwrap() <= 0.01, "{v}");
}

/// A growing filter's whitelist and its layers are published together:
/// an entry whitelisted before the filter grows stays whitelisted in the
/// grown filter (and after a restart), an entry whitelisted after it grew
/// is whitelisted at once, and every added entry is still found.
#[test]
fn a_growing_filter_keeps_its_whitelist_across_growth() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &SNAP);
    let (st, v) = create(
        &s,
        r#"{"name": "g", "items": 100, "fp": 0.001, "kind": "host", "policy": "grow"}"#,
    );
    assert_eq!(st, 201, "{v}");
    let host = |i: u32| format!("h{i}.example");
    let add = |s: &Server, from: u32, to: u32| {
        let items: Vec<String> = (from..to).map(host).collect();
        let (st, v) = s.http(
            "POST",
            "/v1/filters/g/add",
            Some(&serde_json::to_string(&items).unwrap()),
            None,
        );
        assert_eq!(st, 200, "{v}");
    };
    let whitelist = |s: &Server, item: &str| {
        let (st, v) = s.http(
            "POST",
            "/v1/filters/g/whitelist",
            Some(&serde_json::to_string(&[item]).unwrap()),
            None,
        );
        assert_eq!((st, v["results"][0]["was_hit"].clone()), (200, true.into()));
    };
    let verdict = |s: &Server, item: &str| {
        let (st, v) = s.http(
            "GET",
            &format!("/v1/filters/g/check?item={item}"),
            None,
            None,
        );
        assert_eq!(st, 200, "{v}");
        (
            v["hit"].as_bool().unwrap(),
            v["whitelisted"].as_bool().unwrap(),
        )
    };
    add(&s, 0, 50);
    whitelist(&s, &host(7));
    assert_eq!(verdict(&s, &host(7)), (false, true));
    add(&s, 50, 1000);
    let (_, v) = s.http("GET", "/v1/filters/g", None, None);
    assert!(v["layers"].as_u64().unwrap() >= 3, "grew: {v}");
    assert_eq!(verdict(&s, &host(7)), (false, true), "after growth");
    whitelist(&s, &host(900));
    assert_eq!(verdict(&s, &host(900)), (false, true));
    add(&s, 1000, 2000);
    let all: Vec<String> = (0..2000).map(host).collect();
    let (st, v) = s.http(
        "POST",
        "/v1/filters/g/check",
        Some(&serde_json::to_string(&all).unwrap()),
        None,
    );
    assert_eq!(st, 200, "{v}");
    for (i, r) in v["results"].as_array().unwrap().iter().enumerate() {
        let want = if i == 7 || i == 900 {
            (false, true)
        } else {
            (true, false)
        };
        assert_eq!(
            (r["hit"].as_bool(), r["whitelisted"].as_bool()),
            (Some(want.0), Some(want.1)),
            "{r}"
        );
    }
    assert_eq!(v["results"].as_array().unwrap().len(), 2000);
    s.kill9();
    let s = Server::start(dir.path(), &SNAP);
    assert_eq!(verdict(&s, &host(7)), (false, true), "after a restart");
    assert_eq!(verdict(&s, &host(900)), (false, true), "after a restart");
    assert_eq!(verdict(&s, &host(1999)), (true, false), "after a restart");
}
