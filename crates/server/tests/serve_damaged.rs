//! A filter whose files cannot be loaded is *damaged*, not absent: after
//! 4,000 acknowledged adds, a flipped header byte, a `.bgf` one byte short
//! or empty, a damaged `.layer1` header, a garbage `.meta`, a bad first line
//! in the whitelist or a damaged `NAME.cf` make every command on the name
//! answer an error naming the file and the fault (RESP `-DAMAGED …`, HTTP
//! 503 `damaged`); nothing creates a filter over it or changes its files;
//! `/healthz`, the list and `/metrics` say so; restoring the file brings all
//! 4,000 back. Also: stale temporaries are removed at start, healthy Bloom
//! filters start without warnings, and a refused `BF.LOADCHUNK` leaves no
//! file behind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use testkit::{Resp, Server, V};

const ITEMS: usize = 4000;

fn item(i: usize) -> String {
    format!("item-{i}")
}

/// Every file of the data directory outside the log, with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// The files of the filter `name` (its `.bgf` and companions, `.cf`, `.live`).
fn files_of(all: &BTreeMap<String, Vec<u8>>, name: &str) -> BTreeMap<String, Vec<u8>> {
    all.iter()
        .filter(|(f, _)| {
            f.starts_with(&format!("{name}.bgf"))
                || *f == &format!("{name}.cf")
                || *f == &format!("{name}.live")
        })
        .map(|(f, b)| (f.clone(), b.clone()))
        .collect()
}

/// `BF.MADD`s (or `CF.INSERT`s) the 4,000 items in batches; each must be acknowledged.
fn add_all(c: &mut Resp, cmd: &str, name: &str) {
    for chunk in (0..ITEMS).collect::<Vec<_>>().chunks(500) {
        let items: Vec<String> = chunk.iter().map(|&i| item(i)).collect();
        let mut args: Vec<&str> = vec![cmd, name];
        if cmd == "CF.INSERT" {
            args.push("ITEMS");
        }
        args.extend(items.iter().map(String::as_str));
        let r = c.cmd(&args);
        assert_eq!(r.arr().len(), chunk.len(), "{cmd} {name}: {r:?}");
        for v in r.arr() {
            assert!(matches!(v, V::Int(_) | V::Bool(_)), "{cmd} {name}: {v:?}");
        }
    }
}

/// How many of the 4,000 items `BF.MEXISTS`/`CF.MEXISTS` finds.
fn found(c: &mut Resp, cmd: &str, name: &str) -> usize {
    let items: Vec<String> = (0..ITEMS).map(item).collect();
    let mut args: Vec<&str> = vec![cmd, name];
    args.extend(items.iter().map(String::as_str));
    let r = c.cmd(&args);
    r.arr().iter().filter(|v| v.int() == 1).count()
}

fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x40;
    std::fs::write(path, b).unwrap();
}

fn truncate(path: &Path, by: u64) {
    let len = std::fs::metadata(path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(len.saturating_sub(by)).unwrap();
}

/// One damage per filter: (name, the damaged file, what was done).
fn damage(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let d = |f: &str| dir.join(f);
    flip(&d("flip.bgf"), 40);
    truncate(&d("short.bgf"), 1);
    truncate(&d("empty.bgf"), u64::MAX);
    flip(&d("layer.bgf.layer1"), 40);
    std::fs::write(d("meta.bgf.meta"), b"{garbage").unwrap();
    let wl = std::fs::read(d("wl.bgf.whitelist")).unwrap();
    let rest = &wl[wl.iter().position(|&b| b == b'\n').unwrap()..];
    std::fs::write(
        d("wl.bgf.whitelist"),
        [b"not a whitelist".as_slice(), rest].concat(),
    )
    .unwrap();
    let cf = d("cf.cf");
    let len = std::fs::metadata(&cf).unwrap().len();
    flip(&cf, len / 2);
    vec![
        ("flip", d("flip.bgf")),
        ("short", d("short.bgf")),
        ("empty", d("empty.bgf")),
        ("layer", d("layer.bgf.layer1")),
        ("meta", d("meta.bgf.meta")),
        ("wl", d("wl.bgf.whitelist")),
        ("cf", cf),
    ]
}

const BLOOM: [&str; 6] = ["flip", "short", "empty", "layer", "meta", "wl"];

/// Creates the six Bloom filters (scaling, grown past layer 0 by the 4,000
/// adds) and the cuckoo filter, each with the 4,000 items acknowledged, and
/// a whitelist entry for `wl`.
fn populate(server: &Server) {
    let mut c = server.resp();
    for name in BLOOM {
        assert_eq!(
            c.cmd(&["BF.RESERVE", name, "0.01", "1000"]),
            V::Simple("OK".into())
        );
        add_all(&mut c, "BF.MADD", name);
    }
    assert_eq!(c.cmd(&["CF.RESERVE", "cf", "8000"]), V::Simple("OK".into()));
    add_all(&mut c, "CF.INSERT", "cf");
    let (st, v) = server.http(
        "POST",
        "/v1/filters/wl/whitelist",
        Some(r#"["not-an-item"]"#),
        None,
    );
    assert_eq!(st, 200, "{v}");
}

/// Every command on a damaged name answers the damaged error (naming the
/// file and the fault), over RESP and HTTP, and nothing creates over it.
fn assert_refused(server: &Server, name: &str, file: &Path) {
    let file_name = file.file_name().unwrap().to_string_lossy().into_owned();
    let is_damaged = |v: &V, what: &str| {
        let e = match v {
            V::Err(e) => e,
            other => panic!("{name}: {what}: not an error but {other:?}"),
        };
        assert!(e.starts_with("DAMAGED "), "{name}: {what}: {e}");
        assert!(e.contains(&format!("'{name}'")), "{name}: {what}: {e}");
        assert!(
            e.contains(&file_name),
            "{name}: {what}: {e} (file {file_name})"
        );
    };
    let mut c = server.resp();
    let some: Vec<String> = (0..10).map(item).collect();
    for cmd in ["BF.MEXISTS", "CF.MEXISTS", "BF.MADD", "CF.INSERT"] {
        let mut args: Vec<&str> = vec![cmd, name];
        if cmd == "CF.INSERT" {
            args.push("ITEMS");
        }
        args.extend(some.iter().map(String::as_str));
        is_damaged(&c.cmd(&args), cmd);
    }
    for args in [
        vec!["BF.EXISTS", name, "item-1"],
        vec!["BF.ADD", name, "new"],
        vec!["CF.ADD", name, "new"],
        vec!["CF.EXISTS", name, "item-1"],
        vec!["CF.DEL", name, "item-1"],
        vec!["BF.INSERT", name, "ITEMS", "new"],
        vec!["BF.RESERVE", name, "0.01", "100"],
        vec!["CF.RESERVE", name, "100"],
        vec!["BF.INFO", name],
        vec!["CF.INFO", name],
        vec!["BF.CARD", name],
        vec!["BF.SCANDUMP", name, "0"],
        vec!["BF.LOADCHUNK", name, "1", "x"],
        vec!["DEL", name],
        vec!["TYPE", name],
    ] {
        is_damaged(&c.cmd(&args), args[0]);
    }
    assert_eq!(c.cmd(&["EXISTS", name]), V::Int(1), "{name}");
    let keys = c.cmd(&["KEYS", "*"]);
    assert!(
        keys.arr().contains(&V::Bulk(name.as_bytes().to_vec())),
        "{name}: {keys:?}"
    );

    let http_damaged = |(st, v): (u16, serde_json::Value), what: &str| {
        assert_eq!(st, 503, "{name}: {what}: {v}");
        assert_eq!(v["error"]["code"], "damaged", "{name}: {what}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(&file_name), "{name}: {what}: {msg}");
    };
    let p = |s: &str| format!("/v1/filters/{name}{s}");
    http_damaged(
        server.http("GET", &p("/check?item=item-1"), None, None),
        "check",
    );
    http_damaged(
        server.http("POST", &p("/check"), Some(r#"["item-1"]"#), None),
        "check batch",
    );
    http_damaged(
        server.http("POST", &p("/add"), Some(r#"["new"]"#), None),
        "add",
    );
    http_damaged(
        server.http("POST", &p("/remove"), Some(r#"["item-1"]"#), None),
        "remove",
    );
    http_damaged(server.http("GET", &p(""), None, None), "info");
    http_damaged(
        server.http("POST", &p("/whitelist"), Some(r#"["x"]"#), None),
        "whitelist",
    );
    http_damaged(
        server.http("DELETE", &p("/whitelist"), Some(r#"["x"]"#), None),
        "unlist",
    );
    http_damaged(server.http("DELETE", &p(""), None, None), "delete");
    let body = format!(r#"{{"name":"{name}","items":1000,"fp":0.01}}"#);
    http_damaged(
        server.http("POST", "/v1/filters", Some(&body), None),
        "create",
    );
}

/// Damage of every kind after a clean stop: each filter is refused (not
/// absent) and its files are left byte for byte; restoring them brings
/// every acknowledged item back.
#[test]
fn damaged_filter_files_are_refused_kept_and_served_again_once_restored() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    populate(&server);
    assert!(server.term().success());
    let intact = files(dir.path());
    let damaged = damage(dir.path());
    let before = files(dir.path());

    let mut server = Server::start(dir.path(), &[]);
    for (name, file) in &damaged {
        assert_refused(&server, name, file);
    }
    // The health check, the list and the metrics name them.
    let (st, h) = server.http("GET", "/healthz", None, None);
    assert_eq!(st, 200);
    assert_eq!(h["status"], "degraded", "{h}");
    let listed: Vec<&str> = h["damaged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        ["cf", "empty", "flip", "layer", "meta", "short", "wl"],
        "{h}"
    );
    for d in h["damaged"].as_array().unwrap() {
        let (name, file) = damaged.iter().find(|(n, _)| d["name"] == *n).unwrap();
        let fault = d["fault"].as_str().unwrap();
        assert!(
            fault.contains(&*file.file_name().unwrap().to_string_lossy()),
            "{name}: {fault}"
        );
    }
    let (st, list) = server.http("GET", "/v1/filters", None, None);
    assert_eq!(st, 200, "{list}");
    assert_eq!(
        list["damaged_filters"].as_array().unwrap().len(),
        7,
        "{list}"
    );
    assert_eq!(list["filters"].as_array().unwrap().len(), 0, "{list}");
    let (st, m) = server.http("GET", "/metrics", None, None);
    assert_eq!(st, 200);
    let text = m["text"].as_str().unwrap();
    assert!(text.contains("\nbloomgate_damaged_filters 7\n"), "{text}");
    assert!(
        text.contains("bloomgate_filter_damaged{filter=\"flip\"} 1"),
        "{text}"
    );
    // A snapshot (as after the next adds elsewhere) writes none of them.
    let (st, v) = server.http("POST", "/v1/snapshot", None, None);
    assert_eq!(st, 200, "{v}");
    assert!(server.term().success());
    let log = server.stderr();
    for (name, file) in &damaged {
        let line = log
            .lines()
            .find(|l| l.contains("ERROR") && l.contains(&format!("filter '{name}' is damaged")))
            .unwrap_or_else(|| panic!("no ERROR for {name} in:\n{log}"));
        assert!(line.contains(&*file.display().to_string()), "{line}");
    }
    assert!(!log.contains("unusable name"), "{log}");
    // No file was changed, created or removed.
    assert_eq!(files(dir.path()), before);

    // Restored: everything acknowledged is back, and adds work again.
    for (f, b) in &intact {
        std::fs::write(dir.path().join(f), b).unwrap();
    }
    let server = Server::start(dir.path(), &[]);
    let mut c = server.resp();
    for name in BLOOM {
        assert_eq!(found(&mut c, "BF.MEXISTS", name), ITEMS, "{name}");
    }
    assert_eq!(found(&mut c, "CF.MEXISTS", "cf"), ITEMS);
    assert_eq!(c.cmd(&["BF.ADD", "flip", "new"]), V::Int(1));
    let (_, h) = server.http("GET", "/healthz", None, None);
    assert_eq!(h["status"], "ok", "{h}");
}

/// After a SIGKILL the log holds the adds: they are kept for the damaged
/// filter (appended to its journal, never cut), and once the operator
/// restores the file a SIGHUP serves it again with all 4,000.
#[test]
fn damaged_filter_after_sigkill_keeps_its_logged_adds_and_sighup_repairs_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &["--snapshot-secs", "3600"]);
    let mut c = server.resp();
    assert_eq!(
        c.cmd(&["BF.RESERVE", "k", "0.01", "100000"]),
        V::Simple("OK".into())
    );
    add_all(&mut c, "BF.MADD", "k");
    assert_eq!(found(&mut c, "BF.MEXISTS", "k"), ITEMS);
    server.kill9();
    let intact = files(dir.path());
    flip(&dir.path().join("k.bgf"), 40);
    let before = files_of(&files(dir.path()), "k");

    let mut server = Server::start(dir.path(), &["--snapshot-secs", "3600"]);
    assert_refused(&server, "k", &dir.path().join("k.bgf"));
    // The startup snapshot trimmed the log: the filter's adds went to its
    // journal (appended to, never rewritten) and its other files are as
    // they were.
    let after = files_of(&files(dir.path()), "k");
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    for (f, b) in &before {
        if f.ends_with(".live") {
            assert!(after[f].starts_with(b), "{f} was rewritten");
            assert!(
                after[f].len() > b.len(),
                "{f}: the log's adds were not kept"
            );
        } else {
            assert_eq!(&after[f], b, "{f} changed");
        }
    }
    // The operator restores the file; a SIGHUP serves it again.
    std::fs::write(dir.path().join("k.bgf"), &intact["k.bgf"]).unwrap();
    let pid = server.child.id().to_string();
    let mut c = server.resp();
    let t = Instant::now();
    loop {
        std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        if !matches!(c.cmd(&["BF.EXISTS", "k", "item-1"]), V::Err(_)) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "SIGHUP did not repair k"
        );
    }
    assert_eq!(found(&mut c, "BF.MEXISTS", "k"), ITEMS);
    assert_eq!(c.cmd(&["BF.ADD", "k", "new"]), V::Int(1));
    let (_, h) = server.http("GET", "/healthz", None, None);
    assert_eq!(h["status"], "ok", "{h}");
    assert!(server.term().success());
    let server = Server::start(dir.path(), &[]);
    let mut c = server.resp();
    assert_eq!(found(&mut c, "BF.MEXISTS", "k"), ITEMS);
    assert_eq!(c.cmd(&["BF.EXISTS", "k", "new"]), V::Int(1));
}

/// A damaged filter is discarded by removing its files and reloading;
/// the name is then free again.
#[test]
fn damaged_filter_is_discarded_by_removing_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    let mut c = server.resp();
    assert_eq!(c.cmd(&["BF.ADD", "gone", "a"]), V::Int(1));
    assert!(server.term().success());
    truncate(&dir.path().join("gone.bgf"), u64::MAX);
    let server = Server::start(dir.path(), &[]);
    let mut c = server.resp();
    assert!(c
        .cmd(&["BF.ADD", "gone", "b"])
        .err()
        .starts_with("DAMAGED "));
    for f in ["gone.bgf", "gone.bgf.meta", "gone.live"] {
        std::fs::remove_file(dir.path().join(f)).unwrap();
    }
    let pid = server.child.id().to_string();
    let t = Instant::now();
    loop {
        std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        if c.cmd(&["EXISTS", "gone"]) == V::Int(0) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "SIGHUP did not discard it"
        );
    }
    assert_eq!(c.cmd(&["BF.ADD", "gone", "b"]), V::Int(1));
}

/// Temporaries a crash left are removed at start (those of dead processes
/// and of this process's PID); one a live process is writing is kept, and
/// so are files that are not a filter's temporaries. Healthy Bloom
/// filters start without an "unusable name" warning.
#[test]
fn stale_temporaries_are_removed_at_start_and_healthy_filters_start_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    let mut c = server.resp();
    assert_eq!(c.cmd(&["BF.ADD", "k", "a"]), V::Int(1));
    assert_eq!(c.cmd(&["BF.ADD", "j", "a"]), V::Int(1));
    assert_eq!(c.cmd(&["CF.ADD", "c", "a"]), V::Int(1));
    assert!(server.term().success());
    let mut live = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let big = vec![7u8; 1 << 20];
    // PIDs above any pid_max: no such process.
    let stale = [
        "k.bgf.tmp-2147480000-1a2b3c4d",
        "k.bgf.layer1.tmp-2147480001-ff",
        "k.live.tmp-2147480002",
        "k.bgf.meta.tmp-2147480003",
        "c.cf.tmp-2147480004",
    ];
    for f in stale {
        std::fs::write(dir.path().join(f), &big).unwrap();
    }
    let kept = [
        format!("j.bgf.tmp-{}-abc", live.id()),
        "notes.tmp-2147480000".to_string(),
        "k.bgf.tmp-x".to_string(),
    ];
    for f in &kept {
        std::fs::write(dir.path().join(f), b"x").unwrap();
    }
    let mut server = Server::start(dir.path(), &[]);
    let mut c = server.resp();
    assert_eq!(c.cmd(&["BF.EXISTS", "k", "a"]), V::Int(1));
    assert_eq!(c.cmd(&["CF.EXISTS", "c", "a"]), V::Int(1));
    for f in stale {
        assert!(!dir.path().join(f).exists(), "{f} is still there");
    }
    for f in &kept {
        assert!(dir.path().join(f).exists(), "{f} was removed");
    }
    assert!(server.term().success());
    let _ = live.kill();
    let _ = live.wait();
    let log = server.stderr();
    assert!(!log.contains("unusable name"), "{log}");
    assert!(log.contains("removed 5 stale temporary file(s)"), "{log}");
}

/// A `BF.LOADCHUNK` header the server refuses (an unknown key kind) leaves
/// no file behind, and the name stays free.
#[test]
fn refused_loadchunk_leaves_no_file_behind() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let mut c = server.resp();
    let before = files(dir.path());
    let header = "BLOOMGATE-DUMP-1\n{\"layers\":[{\"layout\":2,\"bits\":11776,\"k\":7,\"seed\":1,\"key_kind\":77,\"match_mode\":0,\"planned_items\":1000,\"target_fp\":0.005,\"items\":0}],\"meta\":null}";
    let r = c.cmd(&["BF.LOADCHUNK", "evil", "1", header]);
    assert!(matches!(r, V::Err(_)), "{r:?}");
    assert_eq!(files(dir.path()), before);
    assert_eq!(c.cmd(&["EXISTS", "evil"]), V::Int(0));
    assert_eq!(c.cmd(&["BF.ADD", "evil", "a"]), V::Int(1));
}
