//! Zero false negatives across crashes: several clients stream adds, the
//! server is killed with SIGKILL mid-stream, restarted, and every
//! acknowledged item must answer hit. Also: a torn log tail is detected and
//! the intact prefix kept; SIGTERM snapshots.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use testkit::{Server, V};

#[test]
fn sigkill_mid_stream_loses_no_acknowledged_add() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &["--snapshot-secs", "1"]);
    {
        let mut c = server.resp();
        assert_eq!(
            c.cmd(&["BF.RESERVE", "k", "0.001", "1000"]),
            V::Simple("OK".into())
        );
        // An HTTP-created URL filter too, added to over HTTP.
        let (st, _) = server.http(
            "POST",
            "/v1/filters",
            Some(r#"{"name":"urls","items":100000,"fp":0.0001,"kind":"url","mode":"prefix"}"#),
            None,
        );
        assert_eq!(st, 201);
    }
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let acked_urls: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for t in 0..4 {
        let (acked, stop, addr) = (acked.clone(), stop.clone(), server.resp);
        threads.push(std::thread::spawn(move || {
            let mut c = testkit::Resp::connect(addr);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Pipelined MADD of 10 plus single ADDs, alternately.
                let items: Vec<String> = (0..10).map(|j| format!("t{t}-{i}-{j}")).collect();
                let mut args: Vec<&[u8]> = vec![b"BF.MADD", b"k"];
                args.extend(items.iter().map(|s| s.as_bytes()));
                c.send(&args);
                match c.read() {
                    Ok(V::Arr(v)) if v.len() == 10 => acked.lock().unwrap().extend(items),
                    _ => return,
                }
                let one = format!("t{t}-{i}-single");
                c.send(&[b"BF.ADD", b"k", one.as_bytes()]);
                match c.read() {
                    Ok(V::Int(_)) => acked.lock().unwrap().push(one),
                    _ => return,
                }
                i += 1;
            }
        }));
    }
    {
        let (acked, stop, addr) = (acked_urls.clone(), stop.clone(), server.http);
        threads.push(std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let url = format!("http://evil{i}.example/path/");
                let body = format!("[\"{url}\"]");
                let r = std::panic::catch_unwind(|| {
                    testkit::http(addr, "POST", "/v1/filters/urls/add", Some(&body), None)
                });
                match r {
                    Ok((200, _)) => acked.lock().unwrap().push(url),
                    _ => return,
                }
                i += 1;
            }
        }));
    }
    // At least 2.5 s of adds, and until both protocols have had adds
    // acknowledged (a loaded machine may need longer for the count below).
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_millis(2500)
        || ((acked.lock().unwrap().len() <= 100 || acked_urls.lock().unwrap().is_empty())
            && t.elapsed() < Duration::from_secs(120))
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill9();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let acked = acked.lock().unwrap().clone();
    let acked_urls = acked_urls.lock().unwrap().clone();
    assert!(acked.len() > 100, "only {} adds acknowledged", acked.len());
    assert!(!acked_urls.is_empty());

    let server = Server::start(dir.path(), &[]);
    let mut c = server.resp();
    let mut missing = Vec::new();
    for chunk in acked.chunks(500) {
        let mut args: Vec<&[u8]> = vec![b"BF.MEXISTS", b"k"];
        args.extend(chunk.iter().map(|s| s.as_bytes()));
        c.send(&args);
        let v = c.read().unwrap();
        for (item, r) in chunk.iter().zip(v.arr()) {
            if r.int() != 1 {
                missing.push(item.clone());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{} acknowledged items lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    // Canonicalized lookups of the HTTP-added URLs.
    for url in &acked_urls {
        let q = url.replace("http://", "HTTP://").to_string() + "deeper/page.html";
        let (st, v) = server.http(
            "POST",
            "/v1/filters/urls/check",
            Some(&format!("[\"{q}\"]")),
            None,
        );
        assert_eq!(st, 200);
        assert_eq!(v["results"][0]["hit"], true, "{q}");
    }
    let distinct: HashSet<&String> = acked.iter().collect();
    let card = c.cmd(&["BF.CARD", "k"]).int() as usize;
    assert!(
        card + card / 50 >= distinct.len(),
        "card {card} vs {}",
        distinct.len()
    );
}

#[test]
fn torn_log_tail_is_detected_and_prefix_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    let mut c = server.resp();
    for i in 0..50 {
        c.cmd(&["BF.ADD", "f", &format!("item{i}")]);
    }
    server.kill9();
    // Tear the last record in the newest segment and append garbage.
    let wal = dir.path().join(".bloomgate-wal");
    let mut segs: Vec<_> = std::fs::read_dir(&wal)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    segs.sort();
    let last = segs.last().unwrap();
    let mut bytes = std::fs::read(last).unwrap();
    assert!(bytes.len() > 100);
    bytes.truncate(bytes.len() - 3);
    bytes.extend_from_slice(b"\xff\xff\xff\xffgarbage");
    std::fs::write(last, &bytes).unwrap();

    let mut server = Server::start(dir.path(), &[]);
    let mut c = server.resp();
    for i in 0..49 {
        assert_eq!(
            c.cmd(&["BF.EXISTS", "f", &format!("item{i}")]).int(),
            1,
            "item{i}"
        );
    }
    assert!(server.term().success());
    let err = server.stderr();
    assert!(
        err.contains("discarded") && err.contains("torn tail"),
        "{err}"
    );
}

#[test]
fn sigterm_snapshots_and_trims_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    let mut c = server.resp();
    c.cmd(&["BF.MADD", "g", "a", "b", "c"]);
    assert!(server.term().success());
    let wal = dir.path().join(".bloomgate-wal");
    for e in std::fs::read_dir(&wal).unwrap().flatten() {
        // Only empty segments (the magic) remain.
        assert!(e.metadata().unwrap().len() <= 8, "{:?}", e.path());
    }
    let f = bloomgate_engine::Filter::open(
        dir.path().join("g.bgf"),
        bloomgate_engine::Access::ReadOnly,
    )
    .unwrap();
    f.verify().unwrap();
    assert!(f.contains(b"a") && f.contains(b"b") && f.contains(b"c"));
}
