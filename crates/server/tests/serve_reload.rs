//! Zero false negatives across reloads: acknowledged live adds (before and
//! after a snapshot) survive swapping in a rebuilt filter file — through
//! HTTP, through SIGHUP, and across SIGKILL — unless the operator explicitly
//! asks to drop them.

use std::path::Path;
use std::time::{Duration, Instant};

use bloomgate_engine::{plan, random_seed, Filter, Layout, Params};
use bloomgate_url::{entry_key, KeyKind, MatchMode};
use testkit::{Server, V};

/// Writes a filter file (like `bloomgate build`) holding `items` only.
fn build(path: &Path, kind: KeyKind, mode: MatchMode, items: &[String]) {
    let plan = plan(Layout::Blocked, 20_000, 1e-5).unwrap();
    let mut p = Params::from_plan(&plan, random_seed());
    p.key_kind = kind.as_u8();
    p.match_mode = mode.as_u8();
    let mut f = Filter::create_file(path, p).unwrap();
    for it in items {
        let k = entry_key(kind, mode, it.as_bytes()).unwrap();
        f.insert(&k);
    }
    f.persist().unwrap();
}

fn urls(tag: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("http://{tag}{i}.example/bad/"))
        .collect()
}

fn raws(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}-{i}")).collect()
}

/// HTTP batch check: how many of `items` hit.
fn hits(s: &Server, name: &str, items: &[String]) -> usize {
    let mut n = 0;
    for chunk in items.chunks(1000) {
        let body = serde_json::to_string(chunk).unwrap();
        let (st, v) = s.http(
            "POST",
            &format!("/v1/filters/{name}/check"),
            Some(&body),
            None,
        );
        assert_eq!(st, 200, "{v}");
        n += v["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["hit"] == true)
            .count();
    }
    n
}

/// Every URL also hits through a canonicalized, deeper variant.
fn url_variants(items: &[String]) -> Vec<String> {
    items
        .iter()
        .map(|u| u.replace("http://", "HTTP://") + "deeper/page.html?x=1")
        .collect()
}

fn resp_hits(s: &Server, name: &str, items: &[String]) -> usize {
    let mut c = s.resp();
    let mut args: Vec<&[u8]> = vec![b"BF.MEXISTS", name.as_bytes()];
    args.extend(items.iter().map(|s| s.as_bytes()));
    c.send(&args);
    c.read()
        .unwrap()
        .arr()
        .iter()
        .filter(|v| v.int() == 1)
        .count()
}

fn resp_madd(s: &Server, name: &str, items: &[String]) {
    let mut c = s.resp();
    let mut args: Vec<&[u8]> = vec![b"BF.MADD", name.as_bytes()];
    args.extend(items.iter().map(|s| s.as_bytes()));
    c.send(&args);
    assert_eq!(c.read().unwrap().arr().len(), items.len());
}

fn snapshot(s: &Server) {
    let (st, v) = s.http("POST", "/v1/snapshot", None, None);
    assert_eq!(st, 200, "{v}");
}

fn reload(s: &Server, name: &str, body: &str) -> serde_json::Value {
    let (st, v) = s.http(
        "POST",
        &format!("/v1/filters/{name}/reload"),
        Some(body),
        None,
    );
    assert_eq!(st, 200, "{v}");
    v
}

fn metric(s: &Server, name: &str) -> f64 {
    let (_, v) = s.http("GET", "/metrics", None, None);
    let text = v["text"].as_str().unwrap().to_string();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} not in metrics"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn http_reload_keeps_live_adds_unless_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    let (st, _) = s.http(
        "POST",
        "/v1/filters",
        Some(r#"{"name":"urls","items":10000,"fp":0.0001,"kind":"url","mode":"prefix"}"#),
        None,
    );
    assert_eq!(st, 201);
    // A Redis-style scaling filter that has grown past its first layer.
    assert_eq!(
        s.resp().cmd(&["BF.RESERVE", "k", "0.001", "50"]),
        V::Simple("OK".into())
    );
    let (a, ka) = (urls("before", 300), raws("before", 300));
    s.add("urls", &a);
    resp_madd(&s, "k", &ka);
    snapshot(&s);
    let (b, kb) = (urls("after", 300), raws("after", 300));
    s.add("urls", &b);
    resp_madd(&s, "k", &kb);

    // Rebuilt files with other items only.
    let (c, kc) = (urls("rebuilt", 300), raws("rebuilt", 300));
    let c_path = out.path().join("urls-rebuilt.bgf");
    build(&c_path, KeyKind::Url, MatchMode::Prefix, &c);
    let kc_path = out.path().join("k-rebuilt.bgf");
    build(&kc_path, KeyKind::Raw, MatchMode::Exact, &kc);
    reload(
        &s,
        "urls",
        &serde_json::json!({ "path": c_path }).to_string(),
    );
    reload(&s, "k", &serde_json::json!({ "path": kc_path }).to_string());
    for set in [&a, &b, &c] {
        assert_eq!(hits(&s, "urls", set), set.len());
        assert_eq!(hits(&s, "urls", &url_variants(set)), set.len());
    }
    for set in [&ka, &kb, &kc] {
        assert_eq!(resp_hits(&s, "k", set), set.len());
    }
    assert!(metric(&s, "bloomgate_journal_replayed_total") >= 1200.0);

    // Survives a restart (clean) and a second reload.
    assert!(s.term().success());
    let s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    for set in [&a, &b, &c] {
        assert_eq!(hits(&s, "urls", set), set.len());
    }
    let d = urls("second", 200);
    let d_path = out.path().join("urls-second.bgf");
    build(&d_path, KeyKind::Url, MatchMode::Prefix, &d);
    reload(
        &s,
        "urls",
        &serde_json::json!({ "path": d_path }).to_string(),
    );
    for set in [&a, &b, &d] {
        assert_eq!(hits(&s, "urls", set), set.len());
    }
    // Live adds still only in the log when the drop comes.
    let x = urls("unsnapshotted", 200);
    s.add("urls", &x);
    let kx = raws("unsnapshotted", 200);
    resp_madd(&s, "k", &kx);

    // The explicit opt-out: only the new file's items remain.
    let e = urls("dropped", 200);
    let e_path = out.path().join("urls-drop.bgf");
    build(&e_path, KeyKind::Url, MatchMode::Prefix, &e);
    reload(
        &s,
        "urls",
        &serde_json::json!({ "path": e_path, "drop_live_adds": true }).to_string(),
    );
    assert_eq!(hits(&s, "urls", &e), e.len());
    let stale = hits(&s, "urls", &a) + hits(&s, "urls", &b) + hits(&s, "urls", &x);
    assert!(stale <= 3, "{stale} dropped live adds still hit");
    // ... also after a crash: dropped adds are not resurrected from the log.
    drop(s);
    let s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    assert_eq!(hits(&s, "urls", &e), e.len());
    let stale = hits(&s, "urls", &a) + hits(&s, "urls", &b) + hits(&s, "urls", &x);
    assert!(
        stale <= 3,
        "{stale} dropped live adds still hit after restart"
    );

    // Delete removes the journal; a new filter of that name starts empty.
    let live = dir.path().join("k.live");
    assert!(live.exists());
    let (st, _) = s.http("DELETE", "/v1/filters/k", None, None);
    assert_eq!(st, 200);
    assert!(!live.exists());
    assert_eq!(
        s.resp().cmd(&["BF.RESERVE", "k", "0.0001", "1000"]),
        V::Simple("OK".into())
    );
    let old_k = || {
        [&ka, &kb, &kx]
            .iter()
            .map(|set| resp_hits(&s, "k", set))
            .sum::<usize>()
    };
    assert!(old_k() <= 3);
    assert!(live.exists());
    snapshot(&s);
    drop(s);
    let s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    let old_k = || {
        [&ka, &kb, &kx]
            .iter()
            .map(|set| resp_hits(&s, "k", set))
            .sum::<usize>()
    };
    assert!(old_k() <= 3);
}

#[test]
fn sighup_reload_keeps_live_adds() {
    let dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    // A CLI-built filter, served from the start.
    let base = urls("base", 100);
    build(
        &dir.path().join("cli.bgf"),
        KeyKind::Url,
        MatchMode::Prefix,
        &base,
    );
    let s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    let a = urls("before", 300);
    s.add("cli", &a);
    snapshot(&s);
    let b = urls("after", 300);
    s.add("cli", &b);
    // The operator drops a rebuilt file into place (atomic rename) and sends SIGHUP.
    let c = urls("rebuilt", 300);
    let tmp = out.path().join("cli.bgf");
    build(&tmp, KeyKind::Url, MatchMode::Prefix, &c);
    std::fs::copy(&tmp, dir.path().join("cli.bgf.incoming")).unwrap();
    std::fs::rename(
        dir.path().join("cli.bgf.incoming"),
        dir.path().join("cli.bgf"),
    )
    .unwrap();
    let pid = s.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let t = Instant::now();
    while hits(&s, "cli", &c) < c.len() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "SIGHUP reload not seen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for set in [&a, &b, &c] {
        assert_eq!(hits(&s, "cli", set), set.len());
        assert_eq!(hits(&s, "cli", &url_variants(set)), set.len());
    }
}

#[test]
fn sigkill_around_snapshot_and_reload_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    let (st, _) = s.http(
        "POST",
        "/v1/filters",
        Some(r#"{"name":"urls","items":10000,"fp":0.0001,"kind":"url","mode":"prefix"}"#),
        None,
    );
    assert_eq!(st, 201);
    let a = urls("before", 300);
    s.add("urls", &a);
    snapshot(&s);
    let b = urls("after", 300);
    s.add("urls", &b);
    // Crash between the snapshot and the reload.
    s.kill9();
    let mut s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    let c = urls("rebuilt", 300);
    let c_path = out.path().join("c.bgf");
    build(&c_path, KeyKind::Url, MatchMode::Prefix, &c);
    reload(
        &s,
        "urls",
        &serde_json::json!({ "path": c_path }).to_string(),
    );
    for set in [&a, &b, &c] {
        assert_eq!(hits(&s, "urls", set), set.len());
    }
    // More adds, then a crash right after another reload (no snapshot since).
    let d = urls("later", 300);
    s.add("urls", &d);
    let e = urls("second", 300);
    let e_path = out.path().join("e.bgf");
    build(&e_path, KeyKind::Url, MatchMode::Prefix, &e);
    reload(
        &s,
        "urls",
        &serde_json::json!({ "path": e_path }).to_string(),
    );
    let f = urls("final", 300);
    s.add("urls", &f);
    s.kill9();
    let mut s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    for set in [&a, &b, &d, &e, &f] {
        assert_eq!(hits(&s, "urls", set), set.len());
    }
    // The file replaced while the server is down (after a crash with
    // unsnapshotted adds): the journal and the log are replayed at startup.
    let g = urls("whiledown", 300);
    s.add("urls", &g);
    s.kill9();
    let h = urls("offline", 300);
    build(
        &out.path().join("urls.bgf"),
        KeyKind::Url,
        MatchMode::Prefix,
        &h,
    );
    std::fs::copy(out.path().join("urls.bgf"), dir.path().join("urls.bgf")).unwrap();
    let mut s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    for set in [&a, &b, &d, &f, &g, &h] {
        assert_eq!(hits(&s, "urls", set), set.len());
    }
    // A torn journal tail is cut off and reported; the intact prefix is kept.
    s.kill9();
    let live = dir.path().join("urls.live");
    let mut bytes = std::fs::read(&live).unwrap();
    assert!(bytes.len() > 1000);
    bytes.truncate(bytes.len() - 5);
    bytes.extend_from_slice(b"\xff\xff\xffgarbage");
    std::fs::write(&live, &bytes).unwrap();
    let mut s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    assert_eq!(metric(&s, "bloomgate_journal_damaged_total"), 1.0);
    for set in [&a, &b, &d, &f, &g, &h] {
        assert_eq!(hits(&s, "urls", set), set.len());
    }
    assert!(s.term().success());
    let err = s.stderr();
    assert!(
        err.contains("live-add journal") && err.contains("torn tail"),
        "{err}"
    );
}

#[test]
fn the_journal_stays_bounded_and_reloads_keep_every_add() {
    // The same 5,000 keys added over and over, with a snapshot after each
    // round: the journal is compacted instead of growing with every add,
    // and a reload with a rebuilt file (and a SIGKILL) still keeps them all.
    let dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    assert_eq!(
        s.resp().cmd(&["BF.RESERVE", "seen", "0.001", "100000"]),
        V::Simple("OK".into())
    );
    let keys = raws("seen", 5000);
    let journal = dir.path().join("seen.live");
    let mut sizes = Vec::new();
    for round in 0..12 {
        for chunk in keys.chunks(1000) {
            resp_madd(&s, "seen", chunk);
        }
        // A few new keys per round as well.
        resp_madd(&s, "seen", &raws(&format!("new{round}"), 10));
        snapshot(&s);
        sizes.push(std::fs::metadata(&journal).unwrap().len());
    }
    let distinct = sizes[0];
    assert!(
        *sizes.iter().max().unwrap() <= 2 * distinct + distinct / 4,
        "journal sizes {sizes:?}: not bounded by about twice its distinct adds ({distinct} bytes)"
    );
    assert!(metric(&s, "bloomgate_journal_compactions_total") >= 1.0);
    // Every add survives a reload with a rebuilt file of other items ...
    let other = raws("rebuilt", 100);
    let rebuilt = out.path().join("seen-rebuilt.bgf");
    build(&rebuilt, KeyKind::Raw, MatchMode::Exact, &other);
    reload(
        &s,
        "seen",
        &serde_json::json!({ "path": rebuilt }).to_string(),
    );
    let news: Vec<String> = (0..12).flat_map(|r| raws(&format!("new{r}"), 10)).collect();
    for set in [&keys, &news, &other] {
        assert_eq!(resp_hits(&s, "seen", set), set.len());
    }
    // ... and a crash right after it.
    let mut s = s;
    s.kill9();
    let s = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    for set in [&keys, &news, &other] {
        assert_eq!(resp_hits(&s, "seen", set), set.len());
    }
}

/// Starts `bloomgate serve` on `dir` under a descriptor limit of `n`
/// (soft and hard, so the server cannot raise it).
fn start_with_nofile(dir: &std::path::Path, n: u32) -> Server {
    let mut sh = std::process::Command::new("sh");
    sh.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\"")]);
    Server::start_under(sh, dir, &["--data-dir", dir.to_str().unwrap()])
}

/// A served filter holds no descriptor: 1,000 auto-created filters under a
/// limit of 256 descriptors are all created, and after a restart under the
/// same limit all are served and the server listens.
#[test]
fn a_thousand_filters_are_served_under_256_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let mut s = start_with_nofile(&data, 256);
    let mut c = s.resp();
    for i in 0..1000 {
        assert_eq!(c.cmd(&["BF.ADD", &format!("f{i}"), "x"]).int(), 1, "f{i}");
    }
    drop(c);
    assert!(s.term().success());
    let s = start_with_nofile(&data, 256);
    let mut c = s.resp();
    for i in 0..1000 {
        assert_eq!(
            c.cmd(&["BF.EXISTS", &format!("f{i}"), "x"]).int(),
            1,
            "f{i}"
        );
    }
    let (code, body) = s.http("GET", "/v1/filters", None, None);
    assert_eq!(code, 200);
    assert_eq!(body["filters"].as_array().unwrap().len(), 1000);
}
