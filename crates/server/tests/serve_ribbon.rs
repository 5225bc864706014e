//! A static ribbon filter file in a served data directory, through the real
//! `bloomgate serve` and real clients: every member answered present over
//! HTTP (single and batch) and RESP (`BF.EXISTS`, `BF.MEXISTS`) for every
//! key kind, the same verdicts as `bloomgate check` on the same file and
//! queries, the whitelist, `BF.INFO` and HTTP info; adds into its delta
//! (`BF.ADD`, `BF.MADD`, `BF.INSERT`, HTTP add) acknowledged only once
//! durable, so they survive `kill -9`; every other change (and every add
//! to a file built without room for them) refused with an error naming
//! the ribbon layout (never a silent no-op, never "absent"); a damaged
//! ribbon file answered with errors, served again once restored; reload
//! and delete.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use testkit::{bg, ok, p, percent_encode, write_lines, Dir, Server, V};

fn urls(tag: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("http://{tag}{i}.example/page/{i}?q={i}"))
        .collect()
}

fn hosts(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}{i}.example.org")).collect()
}

fn raws(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}:{i:08x}")).collect()
}

/// Builds a ribbon file of `entries` (key kind `keys`) at `out`.
fn build(out: &Path, keys: &str, entries: &[String]) {
    build_with(out, keys, entries, &[]);
}

/// [`build`] with more arguments.
fn build_with(out: &Path, keys: &str, entries: &[String], extra: &[&str]) {
    build_at(out, keys, entries, "1e-2", extra);
}

/// [`build`] at rate `fp`, with more arguments.
fn build_at(out: &Path, keys: &str, entries: &[String], fp: &str, extra: &[&str]) {
    let input = out.with_extension("txt");
    write_lines(&input, entries);
    let mut args = vec![
        "build", "--layout", "ribbon", "--fp", fp, "--keys", keys, "-o",
    ];
    args.push(p(out));
    args.extend_from_slice(extra);
    args.push(p(&input));
    ok(&bg(&args));
    std::fs::remove_file(input).unwrap();
}

/// `bloomgate check --json FILE` of `queries`: per query (hit, whitelisted,
/// matched).
fn cli_verdicts(dir: &Path, file: &Path, queries: &[String]) -> Vec<(bool, bool, Value)> {
    let q = dir.join("queries.txt");
    write_lines(&q, queries);
    // `check` exits 1 when nothing is on the list, which is an answer too.
    let out = bg(&["check", "--json", p(file), p(&q)]);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<(bool, bool, Value)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["hit"].as_bool().unwrap(),
                v["whitelisted"].as_bool().unwrap(),
                v["matched"].clone(),
            )
        })
        .collect();
    assert_eq!(v.len(), queries.len());
    v
}

/// The served HTTP batch verdicts on `queries` (in batches of 500).
fn http_verdicts(s: &Server, name: &str, queries: &[String]) -> Vec<(bool, bool, Value)> {
    let mut out = Vec::new();
    for part in queries.chunks(500) {
        let (st, v) = s.http(
            "POST",
            &format!("/v1/filters/{name}/check"),
            Some(&json!(part).to_string()),
            None,
        );
        assert_eq!(st, 200, "{v}");
        for r in v["results"].as_array().unwrap() {
            assert!(r.get("error").is_none(), "{r}");
            out.push((
                r["hit"].as_bool().unwrap(),
                r["whitelisted"].as_bool().unwrap(),
                r["matched"].clone(),
            ));
        }
    }
    out
}

/// The served `BF.MEXISTS` answers on `queries` (in batches of 500).
fn resp_hits(s: &Server, name: &str, queries: &[String]) -> Vec<bool> {
    let mut c = s.resp();
    let mut out = Vec::new();
    for part in queries.chunks(500) {
        let mut args = vec!["BF.MEXISTS", name];
        args.extend(part.iter().map(String::as_str));
        for v in c.cmd(&args).arr() {
            out.push(v.int() == 1);
        }
    }
    out
}

fn assert_err_names_ribbon(v: &V, what: &str) {
    match v {
        V::Err(e) => assert!(e.contains("ribbon"), "{what}: {e}"),
        other => panic!("{what}: not an error but {other:?}"),
    }
}

#[test]
fn ribbon_file_is_served_as_check_answers_for_every_key_kind() {
    let dir = Dir::new();
    let work = Dir::new();
    let sets = [
        ("u", "url", urls("m", 3000), urls("n", 3000)),
        ("h", "host", hosts("m", 3000), hosts("n", 3000)),
        ("r", "raw", raws("m", 3000), raws("n", 3000)),
    ];
    for (name, keys, members, _) in &sets {
        build(&dir.path(&format!("{name}.bgf")), keys, members);
    }
    let s = Server::start(dir.0.path(), &[]);
    let (st, h) = s.http("GET", "/healthz", None, None);
    assert_eq!(st, 200, "{h}");
    for (name, keys, members, strangers) in &sets {
        let file = dir.path(&format!("{name}.bgf"));
        // Members as given, and (url, host) as a client spells them.
        let mut queries = members.clone();
        match *keys {
            "url" => queries.extend(
                members
                    .iter()
                    .take(500)
                    .map(|u| u.replacen("http://", "HTTP://", 1) + "#frag"),
            ),
            "host" => queries.extend(
                members
                    .iter()
                    .take(500)
                    .map(|h| format!("http://www.{h}/x")),
            ),
            _ => {}
        }
        let present = queries.len();
        queries.extend(strangers.iter().cloned());
        let cli = cli_verdicts(work.0.path(), &file, &queries);
        let http = http_verdicts(&s, name, &queries);
        let resp = resp_hits(&s, name, &queries);
        assert_eq!(http, cli, "{name}: HTTP and `bloomgate check` differ");
        let cli_hits: Vec<bool> = cli.iter().map(|v| v.0).collect();
        assert_eq!(resp, cli_hits, "{name}: RESP and `bloomgate check` differ");
        let missed = resp[..present].iter().filter(|h| !**h).count();
        assert_eq!(missed, 0, "{name}: {missed} false negatives");
        let fp = resp[present..].iter().filter(|h| **h).count();
        assert!(
            fp < strangers.len() / 20,
            "{name}: {fp} of {} strangers hit",
            strangers.len()
        );
        // Single lookups: HTTP GET and BF.EXISTS.
        let mut c = s.resp();
        for q in queries[..present].iter().step_by(97) {
            let (st, v) = s.http(
                "GET",
                &format!("/v1/filters/{name}/check?item={}", percent_encode(q)),
                None,
                None,
            );
            assert_eq!((st, &v["hit"]), (200, &json!(true)), "{name} {q}: {v}");
            assert_eq!(c.cmd(&["BF.EXISTS", name, q]).int(), 1, "{name} {q}");
        }
    }
    // The whitelist: a served edit is answered at once and written where
    // `bloomgate check` reads it.
    let (_, _, members, _) = &sets[0];
    let (st, v) = s.http(
        "POST",
        "/v1/filters/u/whitelist",
        Some(&json!([members[7]]).to_string()),
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["results"][0]["was_hit"], true, "{v}");
    let q = vec![members[7].clone(), members[8].clone()];
    let http = http_verdicts(&s, "u", &q);
    assert_eq!((http[0].0, http[0].1), (false, true), "{http:?}");
    assert_eq!(http, cli_verdicts(work.0.path(), &dir.path("u.bgf"), &q));
    assert_eq!(resp_hits(&s, "u", &q), vec![false, true]);
    let (st, v) = s.http(
        "DELETE",
        "/v1/filters/u/whitelist",
        Some(&json!([members[7]]).to_string()),
        None,
    );
    assert_eq!(
        (st, &v["results"][0]["removed"]),
        (200, &json!(true)),
        "{v}"
    );
    assert_eq!(resp_hits(&s, "u", &q), vec![true, true]);
}

#[test]
fn ribbon_filter_info_and_refused_changes() {
    let dir = Dir::new();
    let members = urls("m", 2000);
    let file = dir.path("rib.bgf");
    // Built without room for adds, so that every change is refused (a
    // default build takes adds: `ribbon_adds_are_acknowledged_once_durable_and_survive_kill9`).
    build_with(&file, "url", &members, &["--delta-share", "0"]);
    let before = std::fs::read(&file).unwrap();
    let s = Server::start(dir.0.path(), &[]);
    let stranger = "http://never-added.example/";
    // Info.
    let (st, v) = s.http("GET", "/v1/filters/rib", None, None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["layout"], "ribbon", "{v}");
    assert_eq!(v["items"], 2000, "{v}");
    assert_eq!(v["key_kind"], "url", "{v}");
    let bpi = v["details"]["bits_per_item"].as_f64().unwrap();
    assert!((5.0..30.0).contains(&bpi), "{v}");
    let fp = v["predicted_fp"].as_f64().unwrap();
    assert!(fp > 0.0 && fp < 0.02, "{v}");
    let (_, list) = s.http("GET", "/v1/filters", None, None);
    assert!(
        list["filters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["name"] == "rib"),
        "{list}"
    );
    let mut c = s.resp();
    let info = c.cmd(&["BF.INFO", "rib", "ITEMS"]);
    assert_eq!(info.arr()[0].int(), 2000, "{info:?}");
    assert_eq!(c.cmd(&["BF.CARD", "rib"]).int(), 2000);
    assert_eq!(c.cmd(&["TYPE", "rib"]), V::Simple("MBbloom--".into()));
    // Every change over RESP: an error naming the layout.
    for args in [
        vec!["BF.ADD", "rib", stranger],
        vec!["BF.MADD", "rib", stranger, "http://x.example/"],
        vec!["BF.INSERT", "rib", "ITEMS", stranger],
        vec!["BF.INSERT", "rib", "NOCREATE", "ITEMS", stranger],
        vec!["BF.RESERVE", "rib", "0.01", "100"],
        vec!["CF.RESERVE", "rib", "100"],
    ] {
        let v = c.cmd(&args);
        if args[0] == "CF.RESERVE" {
            assert!(matches!(v, V::Err(_)), "{args:?}: {v:?}");
        } else {
            assert_err_names_ribbon(&v, args[0]);
        }
    }
    assert!(matches!(c.cmd(&["BF.SCANDUMP", "rib", "0"]), V::Err(_)));
    assert!(matches!(
        c.cmd(&["BF.LOADCHUNK", "rib", "1", "x"]),
        V::Err(_)
    ));
    // Over HTTP: 409 with a JSON error naming the layout.
    for (method, path, body) in [
        ("POST", "/v1/filters/rib/add", json!([stranger])),
        ("POST", "/v1/filters/rib/remove", json!([members[0]])),
        (
            "POST",
            "/v1/filters",
            json!({"name": "rib", "items": 100, "fp": 0.01}),
        ),
        (
            "POST",
            "/v1/filters",
            json!({"name": "rib", "items": 100, "fp": 0.01, "layout": "cuckoo"}),
        ),
    ] {
        let (st, v) = s.http(method, path, Some(&body.to_string()), None);
        assert!((400..500).contains(&st), "{path} {body}: {st} {v}");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains("ribbon"), "{path} {body}: {v}");
    }
    // Nothing was added or changed.
    assert_eq!(c.cmd(&["BF.EXISTS", "rib", stranger]).int(), 0);
    assert_eq!(c.cmd(&["BF.EXISTS", "rib", &members[5]]).int(), 1);
    assert_eq!(std::fs::read(&file).unwrap(), before);
    // A snapshot has nothing to write for it.
    let (st, v) = s.http("POST", "/v1/snapshot", None, None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(std::fs::read(&file).unwrap(), before);
    // Deleted like any filter: its file goes, the name answers absent.
    assert_eq!(c.cmd(&["DEL", "rib"]).int(), 1);
    assert!(!file.exists());
    assert_eq!(c.cmd(&["BF.EXISTS", "rib", &members[5]]).int(), 0);
}

#[test]
fn ribbon_adds_are_acknowledged_once_durable_and_survive_kill9() {
    let dir = Dir::new();
    let members = urls("m", 3000);
    let file = dir.path("rib.bgf");
    // At 10⁻⁶ (and a fixed seed) no added key is a false positive, so
    // every one of them is new.
    build_at(&file, "url", &members, "1e-6", &["--seed", "7"]);
    let before = std::fs::read(&file).unwrap();
    let added = urls("a", 600);
    let mut s = Server::start(dir.0.path(), &[]);
    let mut c = s.resp();
    // RESP: one at a time, several, through BF.INSERT; a member is no news.
    assert_eq!(c.cmd(&["BF.ADD", "rib", &added[0]]).int(), 1);
    assert_eq!(c.cmd(&["BF.ADD", "rib", &added[0]]).int(), 0);
    assert_eq!(c.cmd(&["BF.ADD", "rib", &members[3]]).int(), 0);
    let v = c.cmd(&["BF.MADD", "rib", &added[1], &added[2], &added[1]]);
    assert_eq!(
        v.arr().iter().map(V::int).collect::<Vec<_>>(),
        [1, 1, 0],
        "{v:?}"
    );
    let v = c.cmd(&["BF.INSERT", "rib", "NOCREATE", "ITEMS", &added[3]]);
    assert_eq!(v.arr()[0].int(), 1, "{v:?}");
    // HTTP, in batches.
    for part in added[4..].chunks(100) {
        let body = serde_json::to_string(part).unwrap();
        let (st, v) = s.http("POST", "/v1/filters/rib/add", Some(&body), None);
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["added"], part.len(), "{v}");
    }
    let (st, v) = s.http(
        "POST",
        "/v1/filters/rib/add",
        Some(&json!(["not a url"]).to_string()),
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert!(v["results"][0]["error"].is_string(), "{v}");
    assert!(resp_hits(&s, "rib", &added).iter().all(|h| *h));
    assert!(resp_hits(&s, "rib", &members).iter().all(|h| *h));
    let (st, v) = s.http("GET", "/v1/filters/rib", None, None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["details"]["delta"]["added_keys"], 601, "{v}");
    assert_eq!(v["items"], 3600, "{v}");
    assert!(v["predicted_fp"].as_f64().unwrap() <= 1e-6, "{v}");
    // A remove is still refused, naming the layout.
    let body = json!([added[0]]).to_string();
    let (st, v) = s.http("POST", "/v1/filters/rib/remove", Some(&body), None);
    assert!((400..500).contains(&st), "{st} {v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("ribbon"),
        "{v}"
    );
    // Killed without warning: every acknowledged add is back after a
    // restart, and `bloomgate check` on the file sees them too.
    drop(c);
    s.kill9();
    assert_eq!(std::fs::read(&file).unwrap(), before);
    let s = Server::start(dir.0.path(), &[]);
    assert!(resp_hits(&s, "rib", &added).iter().all(|h| *h));
    let verdicts = cli_verdicts(dir.0.path(), &file, &added);
    assert!(verdicts.iter().all(|(hit, _, _)| *hit));
    // A rebuild that folds them in, served by SIGHUP: the delta is gone
    // and every key still answers.
    let input = dir.path("members.txt");
    write_lines(&input, &members);
    ok(&bg(&[
        "build",
        "--layout",
        "ribbon",
        "--fp",
        "1e-6",
        "--seed",
        "7",
        "--keys",
        "url",
        "--fold",
        p(&file),
        "--force",
        "-o",
        p(&file),
        p(&input),
    ]));
    std::fs::remove_file(&input).unwrap();
    assert!(!dir.path("rib.bgf.delta").exists());
    sighup(&s);
    let t = Instant::now();
    loop {
        let (_, v) = s.http("GET", "/v1/filters/rib", None, None);
        if v["details"]["delta"]["added_keys"] == 0 {
            assert_eq!(v["details"]["base_items"], 3600, "{v}");
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "SIGHUP reload not seen: {v}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(resp_hits(&s, "rib", &added).iter().all(|h| *h));
    assert!(resp_hits(&s, "rib", &members).iter().all(|h| *h));
}

#[test]
fn damaged_delta_answers_errors_and_is_served_again_once_restored() {
    let dir = Dir::new();
    let members = urls("m", 3000);
    let added = urls("a", 200);
    let file = dir.path("rib.bgf");
    build(&file, "url", &members);
    let input = dir.path("added.txt");
    write_lines(&input, &added);
    ok(&bg(&["add", p(&file), p(&input)]));
    std::fs::remove_file(&input).unwrap();
    let delta = dir.path("rib.bgf.delta");
    let good = std::fs::read(&delta).unwrap();
    let mut flipped = good.clone();
    let at = good.len() / 2;
    flipped[at] ^= 0x08;
    std::fs::write(&delta, &flipped).unwrap();
    // Its added keys cannot all be read: errors, never "absent".
    let s = Server::start(dir.0.path(), &[]);
    let mut c = s.resp();
    for args in [
        vec!["BF.EXISTS", "rib", &added[0]],
        vec!["BF.MEXISTS", "rib", &added[0], &members[0]],
        vec!["BF.ADD", "rib", &added[1]],
    ] {
        match c.cmd(&args) {
            V::Err(e) => assert!(e.starts_with("DAMAGED "), "{args:?}: {e}"),
            other => panic!("{args:?}: {other:?}"),
        }
    }
    let (st, v) = s.http(
        "POST",
        "/v1/filters/rib/check",
        Some(&json!([added[0]]).to_string()),
        None,
    );
    assert_eq!(st, 503, "{v}");
    assert_eq!(std::fs::read(&delta).unwrap(), flipped);
    // Restored and SIGHUP: every added key answers again.
    std::fs::write(&delta, &good).unwrap();
    sighup(&s);
    let t = Instant::now();
    while !matches!(
        c.cmd(&["BF.EXISTS", "rib", &added[0]]),
        V::Int(1) | V::Bool(true)
    ) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "SIGHUP repair not seen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(resp_hits(&s, "rib", &added).iter().all(|h| *h));
}

fn sighup(s: &Server) {
    let pid = s.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
}

#[test]
fn damaged_ribbon_file_answers_errors_and_is_served_again_once_restored() {
    let dir = Dir::new();
    let work = Dir::new();
    let members = urls("m", 3000);
    let good_file = work.path("good.bgf");
    build(&good_file, "url", &members);
    let good = std::fs::read(&good_file).unwrap();
    let truncated = &good[..good.len() - 16];
    let mut flipped = good.clone();
    flipped[40] ^= 0x10; // in the checksummed header
    let cases: [(&str, &[u8]); 2] = [("trunc", truncated), ("flip", &flipped)];
    for (name, bytes) in cases {
        std::fs::write(dir.path(&format!("{name}.bgf")), bytes).unwrap();
    }
    let s = Server::start(dir.0.path(), &[]);
    let mut c = s.resp();
    for (name, _) in cases {
        for args in [
            vec!["BF.EXISTS", name, &members[0]],
            vec!["BF.MEXISTS", name, &members[0], &members[1]],
            vec!["BF.ADD", name, "x"],
        ] {
            match c.cmd(&args) {
                V::Err(e) => assert!(e.starts_with("DAMAGED "), "{name} {args:?}: {e}"),
                other => panic!("{name} {args:?}: {other:?}"),
            }
        }
        let (st, v) = s.http(
            "POST",
            &format!("/v1/filters/{name}/check"),
            Some(&json!([members[0]]).to_string()),
            None,
        );
        assert_eq!(st, 503, "{name}: {v}");
        assert_eq!(v["error"]["code"], "damaged", "{name}: {v}");
    }
    let (_, h) = s.http("GET", "/healthz", None, None);
    assert_eq!(h["damaged"].as_array().map(Vec::len), Some(2), "{h}");
    // Restored and SIGHUP: served again.
    std::fs::write(dir.path("trunc.bgf"), &good).unwrap();
    sighup(&s);
    let t = Instant::now();
    while !matches!(
        c.cmd(&["BF.EXISTS", "trunc", &members[0]]),
        V::Int(1) | V::Bool(true)
    ) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "SIGHUP repair not seen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(resp_hits(&s, "trunc", &members).iter().all(|h| *h));
    // The other is still damaged; HTTP reload of it from a good file repairs it.
    assert!(c
        .cmd(&["BF.EXISTS", "flip", &members[0]])
        .err()
        .starts_with("DAMAGED "));
    let (st, v) = s.http(
        "POST",
        "/v1/filters/flip/reload",
        Some(&json!({"path": p(&good_file)}).to_string()),
        None,
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["layout"], "ribbon", "{v}");
    assert!(resp_hits(&s, "flip", &members).iter().all(|h| *h));
    // A damaged replacement is refused; the served file keeps answering.
    let bad = work.path("bad.bgf");
    std::fs::write(&bad, truncated).unwrap();
    let (st, v) = s.http(
        "POST",
        "/v1/filters/flip/reload",
        Some(&json!({"path": p(&bad)}).to_string()),
        None,
    );
    assert!(st >= 400, "{v}");
    assert!(resp_hits(&s, "flip", &members).iter().all(|h| *h));
}

#[test]
fn ribbon_file_replaced_by_sighup_answers_its_new_entries() {
    let dir = Dir::new();
    let work = Dir::new();
    let old = urls("old", 1000);
    let new = urls("new", 1000);
    build(&dir.path("rib.bgf"), "url", &old);
    let s = Server::start(dir.0.path(), &[]);
    assert!(resp_hits(&s, "rib", &old).iter().all(|h| *h));
    // A new ribbon file dropped in beside it is served after SIGHUP too.
    let staged = work.path("rib.bgf");
    build(&staged, "url", &new);
    std::fs::copy(&staged, dir.path("rib.bgf.incoming")).unwrap();
    std::fs::rename(dir.path("rib.bgf.incoming"), dir.path("rib.bgf")).unwrap();
    std::fs::copy(&staged, dir.path("second.bgf")).unwrap();
    sighup(&s);
    let t = Instant::now();
    // One SIGHUP serves both, one after the other.
    while !["rib", "second"]
        .iter()
        .all(|n| resp_hits(&s, n, &new).iter().all(|h| *h))
    {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "SIGHUP reload not seen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
