//! The static ribbon layout through the real binary, on real files: build
//! from files and standard input, the same bytes for any `--memory` and
//! thread count, check (batched, and within a `--memory` smaller than the
//! file), info and `--verify`, host keys and the whitelist, what a static
//! filter refuses (add without room, union, remove), damaged files, and a
//! failed build that leaves nothing behind. Adds into the delta:
//! `ribbon_delta.rs`.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use serde_json::Value;
use testkit::{run, Dir};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn ok(args: &[&str]) -> (String, String) {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "bloomgate {args:?} failed: {err}");
    (out, err)
}

fn urls(range: std::ops::Range<usize>) -> Vec<String> {
    range
        .map(|i| format!("http://site{i}.example/page/{i}"))
        .collect()
}

fn info(filter: &Path) -> Value {
    serde_json::from_str(&ok(&["info", "--json", s(filter)]).0).unwrap()
}

fn build(out: &Path, input: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "build", "--layout", "ribbon", "--fp", "1e-3", "--seed", "11", "-o",
    ];
    args.push(s(out));
    args.extend_from_slice(extra);
    args.push(s(input));
    ok(&args).1
}

#[test]
fn ribbon_build_check_info_verify() {
    let d = Dir::new();
    let mut entries = urls(0..50_000);
    entries.extend(urls(0..1000)); // duplicates
    entries.push("HTTP://SITE7.example/page/7#frag".into()); // another spelling
    let list = d.lines("list.txt", &entries);
    let f = d.path("r.bgf");
    let err = build(&f, &list, &[]);
    assert!(err.contains("50,000 distinct keys"), "{err}");
    let v = info(&f);
    assert_eq!(v["layout"], "ribbon");
    assert_eq!(v["items"], 50_000);
    assert_eq!(v["planned_items"], 51_001);
    assert!(v["bits_per_item"].as_f64().unwrap() < 11.5, "{v}");
    let hits = ok(&["check", "--count", s(&f), s(&list)]).0;
    assert_eq!(hits.trim(), "51001");
    let strangers = d.lines("out.txt", &urls(100_000..200_000));
    let fp: u64 = ok(&["check", "--count", s(&f), s(&strangers)])
        .0
        .trim()
        .parse()
        .unwrap();
    assert!(fp < 200, "{fp} false positives of 100,000 at 1e-3");
    // A budget far below the file's size gives the same answers.
    let all = d.lines("mixed.txt", &urls(49_000..51_000));
    let whole = ok(&["check", s(&f), s(&all)]).0;
    let sliced = ok(&["check", "--memory", "4K", s(&f), s(&all)]).0;
    assert_eq!(whole, sliced);
    assert!(whole.lines().count() >= 1000);
    let v: Value = serde_json::from_str(&ok(&["info", "--verify", "--json", s(&f)]).0).unwrap();
    assert_eq!(v["verified"], true);
}

#[test]
fn ribbon_build_same_bytes_any_memory() {
    let d = Dir::new();
    let entries: Vec<String> = (0..700_000).map(|i| format!("key-{i}")).collect();
    let list = d.lines("keys.txt", &entries);
    let a = d.path("a.bgf");
    let err = build(&a, &list, &["--keys", "raw"]);
    assert!(err.contains("4 shards"), "{err}");
    let b = d.path("b.bgf");
    let err = build(&b, &list, &["--keys", "raw", "--memory", "1"]);
    assert!(err.contains("4 groups"), "{err}");
    // From standard input, on one thread.
    let c = d.path("c.bgf");
    let mut child = std::process::Command::new(testkit::bin())
        .args([
            "build", "--layout", "ribbon", "--fp", "1e-3", "--seed", "11",
        ])
        .args(["--keys", "raw", "-o", s(&c), "-"])
        .env("RAYON_NUM_THREADS", "1")
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&std::fs::read(&list).unwrap())
        .unwrap();
    assert!(child.wait().unwrap().success());
    let bytes = std::fs::read(&a).unwrap();
    assert_eq!(bytes, std::fs::read(&b).unwrap());
    assert_eq!(bytes, std::fs::read(&c).unwrap());
}

#[test]
fn ribbon_host_keys_and_whitelist() {
    let d = Dir::new();
    let list = d.lines(
        "hosts.txt",
        &["evil.example", "phish.test", "bad.example.org"],
    );
    let f = d.path("h.bgf");
    build(&f, &list, &["--keys", "host"]);
    let q = d.lines(
        "q.txt",
        &[
            "http://www.evil.example/x",
            "http://good.example/",
            "mail.phish.test",
        ],
    );
    let out = ok(&["check", s(&f), s(&q)]).0;
    assert_eq!(out, "http://www.evil.example/x\nmail.phish.test\n");
    ok(&["whitelist", "add", s(&f), "mail.phish.test"]);
    let out = ok(&["check", s(&f), s(&q)]).0;
    assert_eq!(out, "http://www.evil.example/x\n");
    assert_eq!(info(&f)["whitelist_items"], 1);
}

#[test]
fn ribbon_refuses_add_union_remove() {
    let d = Dir::new();
    let list = d.lines("list.txt", &urls(0..100));
    let f = d.path("r.bgf");
    // Built without room for adds (a default build takes them into a
    // delta: `ribbon_delta.rs`).
    build(&f, &list, &["--delta-share", "0"]);
    let before = std::fs::read(&f).unwrap();
    // `add` and `union` refuse the file as an argument they cannot take
    // (exit 2, nothing done); `remove` as it refuses any layout that cannot
    // delete (exit 1, as for a blocked filter).
    for (args, want) in [
        (vec!["add", s(&f), s(&list)], 2),
        (vec!["union", s(&f), s(&f), "-o", "/nonexistent/u.bgf"], 2),
        (vec!["remove", s(&f), s(&list)], 1),
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, want, "{args:?}: {err}");
        assert!(err.contains("ribbon"), "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(&f).unwrap(), before);
}

#[test]
fn ribbon_damaged_files_are_refused() {
    let d = Dir::new();
    let list = d.lines("list.txt", &urls(0..3000));
    let f = d.path("r.bgf");
    build(&f, &list, &[]);
    let good = std::fs::read(&f).unwrap();
    let bad = d.path("bad.bgf");
    std::fs::write(&bad, &good[..good.len() - 16]).unwrap();
    let (code, out, err) = run(&["check", s(&bad), s(&list)]);
    assert!(code == 1 && out.is_empty(), "{code} {out} {err}");
    assert!(err.contains("truncated"), "{err}");
    let mut flipped = good.clone();
    let at = flipped.len() - 100;
    flipped[at] ^= 4;
    std::fs::write(&bad, &flipped).unwrap();
    let (code, _, err) = run(&["info", "--verify", s(&bad)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("data is corrupted"), "{err}");
}

#[test]
fn ribbon_failed_build_leaves_nothing() {
    let d = Dir::new();
    let mut entries = urls(0..5000);
    entries.push("not a url".into());
    let list = d.lines("list.txt", &entries);
    let f = d.path("sub/r.bgf");
    std::fs::create_dir(d.path("sub")).unwrap();
    let (code, _, err) = run(&[
        "build",
        "--layout",
        "ribbon",
        "--fp",
        "1e-3",
        "--strict",
        "-o",
        s(&f),
        s(&list),
    ]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(std::fs::read_dir(d.path("sub")).unwrap().count(), 0);
}

#[test]
fn ribbon_build_refuses_what_the_disk_cannot_hold() {
    // 10^14 keys need 525 TB of partition files: refused before reading,
    // with the need and the free space named, and nothing left behind.
    let d = Dir::new();
    let list = d.lines("list.txt", &urls(0..100));
    std::fs::create_dir(d.path("sub")).unwrap();
    let f = d.path("sub/r.bgf");
    let (code, _, err) = run(&[
        "build",
        "--layout",
        "ribbon",
        "--fp",
        "1e-4",
        "-n",
        "1e14",
        "-o",
        s(&f),
        s(&list),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("not enough disk for a ribbon build of 100,000,000,000,000 keys"),
        "{err}"
    );
    assert!(
        err.contains("TiB more at its peak") && err.contains("free"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(d.path("sub")).unwrap().count(), 0);
}

#[test]
fn ribbon_build_fails_cleanly_when_its_partitions_are_removed() {
    // The partition directory is removed while the build waits for its
    // standard input: the build fails naming a partition file, exit 1,
    // and leaves neither an output nor a temporary behind.
    let d = Dir::new();
    std::fs::create_dir(d.path("out")).unwrap();
    std::fs::create_dir(d.path("tmp")).unwrap();
    let f = d.path("out/r.bgf");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("bloomgate"))
        .args(["build", "--layout", "ribbon", "--fp", "1e-3", "--tmp-dir"])
        .arg(d.path("tmp"))
        .args(["-o", s(&f), "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut found = None;
    for _ in 0..6000 {
        found = std::fs::read_dir(d.path("tmp"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(".bloomgate-ribbon-")
            });
        if found.as_ref().is_some_and(|p| p.join("part-255").exists()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let parts = found.expect("the build made its partition directory");
    std::fs::remove_dir_all(&parts).unwrap();
    let mut input = child.stdin.take().unwrap();
    for u in urls(0..20_000) {
        writeln!(input, "{u}").unwrap();
    }
    drop(input);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("part-") && !err.contains("panicked"), "{err}");
    assert_eq!(std::fs::read_dir(d.path("out")).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(d.path("tmp")).unwrap().count(), 0);
}
