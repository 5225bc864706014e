//! A full disk under `bloomgate serve`, on a real 6 MB tmpfs: writes get
//! clear errors and are not acknowledged, reads go on, the server starts on
//! the still-full disk (read-only), writes resume by themselves once space
//! returns, and every acknowledged add is a hit after SIGKILL and restart.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use testkit::{Server, Tmpfs, V};

/// Fills the disk of `dir` with `dir/filler` until it is full; returns the
/// filler's length.
fn fill(dir: &Path) -> u64 {
    let path = dir.join("filler");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let chunk = vec![1u8; 4096];
    loop {
        match f.write(&chunk) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    let _ = f.sync_all();
    std::fs::metadata(&path).unwrap().len()
}

/// Leaves `bytes` free again by shortening the filler.
fn free(dir: &Path, bytes: u64) {
    let path = dir.join("filler");
    let f = File::options().write(true).open(&path).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len.saturating_sub(bytes)).unwrap();
}

fn health(s: &Server) -> serde_json::Value {
    let (st, v) = s.http("GET", "/healthz", None, None);
    assert_eq!(st, 200, "{v}");
    v
}

fn wait_writable(s: &Server) {
    let t = Instant::now();
    while health(s)["writable"] != true {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "writes did not resume: {}",
            health(s)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `BF.MADD` batches of 1,000 until one is refused; returns the
/// acknowledged items and the error.
fn add_until_refused(c: &mut testkit::Resp, from: &mut u64, acked: &mut Vec<String>) -> String {
    for _ in 0..10_000 {
        let items: Vec<String> = (*from..*from + 1000).map(|i| format!("item-{i}")).collect();
        *from += 1000;
        let mut args: Vec<&[u8]> = vec![b"BF.MADD", b"seen"];
        args.extend(items.iter().map(|s| s.as_bytes()));
        c.send(&args);
        match c.read().expect("the connection stays open on a full disk") {
            V::Arr(v) if v.len() == 1000 => acked.extend(items),
            V::Err(e) => return e,
            other => panic!("unexpected reply {other:?}"),
        }
    }
    panic!("the disk never filled up");
}

fn assert_all_present(c: &mut testkit::Resp, acked: &[String]) {
    for batch in acked.chunks(1000) {
        let mut args: Vec<&[u8]> = vec![b"BF.MEXISTS", b"seen"];
        args.extend(batch.iter().map(|s| s.as_bytes()));
        c.send(&args);
        let v = c.read().unwrap();
        let missing: Vec<&String> = v
            .arr()
            .iter()
            .zip(batch)
            .filter(|(r, _)| r.int() != 1)
            .map(|(_, s)| s)
            .collect();
        assert!(
            missing.is_empty(),
            "acknowledged adds missing: {:?}",
            &missing[..missing.len().min(5)]
        );
    }
}

#[test]
fn a_full_disk_refuses_writes_keeps_reads_and_loses_nothing() {
    let Some(fs) = Tmpfs::mount("6M") else {
        return;
    };
    let dir = fs.dir.clone();
    let mut server = Server::start(&dir, &["--snapshot-secs", "1"]);
    let mut c = server.resp();
    assert_eq!(
        c.cmd(&["BF.RESERVE", "seen", "0.001", "100000", "NONSCALING"]),
        V::Simple("OK".into())
    );
    let mut acked = Vec::new();
    let mut next = 0u64;
    // Room for some adds, then none.
    fill(&dir);
    free(&dir, 256 << 10);
    let err = add_until_refused(&mut c, &mut next, &mut acked);
    assert!(!acked.is_empty(), "no add fitted in 256 KiB");
    assert!(
        err.starts_with("ERR write-ahead log") && err.contains("No space left on device"),
        "{err}"
    );
    // Refused at once from now on, on this connection and over HTTP
    // (507), while reads go on.
    let again = c.cmd(&["BF.ADD", "seen", "later"]);
    assert!(again.err().contains("No space left"), "{again:?}");
    let (st, v) = server.http("POST", "/v1/filters/seen/add", Some(r#"["later"]"#), None);
    assert_eq!(st, 507, "{v}");
    assert_eq!(v["error"]["code"], "no_space", "{v}");
    assert_eq!(c.cmd(&["BF.EXISTS", "seen", &acked[0]]), V::Int(1));
    assert_all_present(&mut c, &acked);
    let h = health(&server);
    assert_eq!(h["status"], "read_only", "{h}");
    assert!(h["reason"].as_str().unwrap().contains("No space"), "{h}");
    let (_, m) = server.http("GET", "/metrics", None, None);
    let m = m["text"].as_str().unwrap().to_string();
    assert!(m.contains("bloomgate_writable 0"), "{m}");

    // Space returns: writes resume by themselves.
    free(&dir, 1 << 20);
    wait_writable(&server);
    assert!(matches!(
        c.cmd(&["BF.ADD", "seen", "after-space"]),
        V::Int(_)
    ));
    acked.push("after-space".into());

    // Full again, then killed: the server starts on the full disk, serves
    // every acknowledged add, refuses writes, and resumes when space returns.
    fill(&dir);
    let _ = add_until_refused(&mut c, &mut next, &mut acked);
    drop(c);
    server.kill9();
    let server = Server::start(&dir, &["--snapshot-secs", "1"]);
    let mut c = server.resp();
    assert_all_present(&mut c, &acked);
    assert_eq!(health(&server)["status"], "read_only");
    assert!(c.cmd(&["BF.ADD", "seen", "x"]).err().contains("No space"));
    free(&dir, 2 << 20);
    wait_writable(&server);
    let mut more = Vec::new();
    let _ = add_until_refused_or(&mut c, &mut next, &mut more, 20);
    acked.extend(more);
    drop(c);
    let mut server = server;
    server.kill9();
    let server = Server::start(&dir, &[]);
    let mut c = server.resp();
    assert_all_present(&mut c, &acked);
    assert_eq!(health(&server)["status"], "ok");
}

/// Like [`add_until_refused`], but at most `batches` batches; returns the
/// error if one was refused.
fn add_until_refused_or(
    c: &mut testkit::Resp,
    from: &mut u64,
    acked: &mut Vec<String>,
    batches: usize,
) -> Option<String> {
    for _ in 0..batches {
        let items: Vec<String> = (*from..*from + 1000).map(|i| format!("item-{i}")).collect();
        *from += 1000;
        let mut args: Vec<&[u8]> = vec![b"BF.MADD", b"seen"];
        args.extend(items.iter().map(|s| s.as_bytes()));
        c.send(&args);
        match c.read().unwrap() {
            V::Arr(v) if v.len() == 1000 => acked.extend(items),
            V::Err(e) => return Some(e),
            other => panic!("unexpected reply {other:?}"),
        }
    }
    None
}

/// Writes that do not go through the log — whitelist changes, creating a
/// filter — fail with the same full-disk answers (HTTP 507 `no_space`, a
/// Redis error that says the disk is full), change nothing, and work again
/// once space returns.
#[test]
fn a_full_disk_refuses_whitelist_changes_and_creations_as_no_space() {
    let Some(fs) = Tmpfs::mount("6M") else {
        return;
    };
    let dir = fs.dir.clone();
    let server = Server::start(&dir, &[]);
    let mut c = server.resp();
    assert_eq!(
        c.cmd(&["BF.RESERVE", "seen", "0.001", "1000"]),
        V::Simple("OK".into())
    );
    assert!(matches!(c.cmd(&["BF.ADD", "seen", "a"]), V::Int(1)));
    fill(&dir);

    let (st, v) = server.http("POST", "/v1/filters/seen/whitelist", Some(r#"["a"]"#), None);
    assert_eq!(st, 507, "{v}");
    assert_eq!(v["error"]["code"], "no_space", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("No space left on device"),
        "{v}"
    );
    let (st, v) = server.http(
        "POST",
        "/v1/filters",
        Some(r#"{"name": "made", "items": 1000, "fp": 0.01}"#),
        None,
    );
    assert_eq!(st, 507, "{v}");
    assert_eq!(v["error"]["code"], "no_space", "{v}");
    for cmd in [
        &["BF.RESERVE", "other", "0.01", "1000"][..],
        &["BF.ADD", "created-by-add", "x"],
    ] {
        let e = c.cmd(cmd);
        let e = e.err();
        assert!(
            e.starts_with("ERR ")
                && e.contains("No space left on device")
                && e.contains("reads go on"),
            "{cmd:?}: {e}"
        );
    }
    // Nothing changed, reads go on.
    assert_eq!(c.cmd(&["BF.EXISTS", "seen", "a"]), V::Int(1));
    assert_eq!(
        c.cmd(&["EXISTS", "other", "made", "created-by-add"]),
        V::Int(0)
    );
    let (_, v) = server.http("GET", "/v1/filters/seen", None, None);
    assert_eq!(v["whitelist_entries"], 0, "{v}");

    free(&dir, 2 << 20);
    let (st, v) = server.http("POST", "/v1/filters/seen/whitelist", Some(r#"["a"]"#), None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(c.cmd(&["BF.EXISTS", "seen", "a"]), V::Int(0));
    assert_eq!(
        c.cmd(&["BF.RESERVE", "other", "0.01", "1000"]),
        V::Simple("OK".into())
    );
}
