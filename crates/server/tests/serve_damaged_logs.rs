//! Damaged write-ahead log segments and journals are never cut short
//! silently: a torn tail (an unfinished append) is repaired at start, damage
//! anywhere else stops the server with an error naming file and offset and
//! leaves the file byte for byte, and `bloomgate repair` salvages every
//! intact record (before and after the damage) and says what was lost.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bloomgate_engine::{plan, random_seed, Filter, Layout, Params};
use testkit::{bg, ok, p, Server, V};

/// Starts `bloomgate serve` on `dir` and expects it to refuse: returns its
/// stderr. Fails at once if the server becomes ready instead.
fn serve_refuses(dir: &Path) -> String {
    let ready = dir
        .parent()
        .unwrap()
        .join(format!("ready-{}", std::process::id()));
    let _ = std::fs::remove_file(&ready);
    let mut child = Command::new(testkit::bin())
        .args(["serve", "--http", "127.0.0.1:0", "--resp", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir)
        .arg("--ready-file")
        .arg(&ready)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            assert_eq!(st.code(), Some(1), "{err}");
            return err;
        }
        if ready.exists() || t.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(&ready);
            panic!("the server started on a damaged data directory");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn items(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}-{i}")).collect()
}

/// Adds `items` with `BF.MADD` (100 at a time), each acknowledged.
fn madd(s: &Server, name: &str, items: &[String]) {
    let mut c = s.resp();
    for chunk in items.chunks(100) {
        let mut args = vec!["BF.MADD", name];
        args.extend(chunk.iter().map(String::as_str));
        match c.cmd(&args) {
            V::Arr(v) => assert_eq!(v.len(), chunk.len()),
            other => panic!("{other:?}"),
        }
    }
}

/// How many of `items` `BF.MEXISTS` answers 1 for.
fn present(s: &Server, name: &str, items: &[String]) -> usize {
    let mut c = s.resp();
    let mut n = 0;
    for chunk in items.chunks(500) {
        let mut args = vec!["BF.MEXISTS", name];
        args.extend(chunk.iter().map(String::as_str));
        n += c.cmd(&args).arr().iter().filter(|v| v.int() == 1).count();
    }
    n
}

/// The log segments holding records (longer than the magic).
fn full_segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join(".bloomgate-wal"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().unwrap().to_string_lossy().starts_with("wal-")
                && std::fs::metadata(p).unwrap().len() > 8
        })
        .collect();
    v.sort();
    v
}

/// The issue's case: log-only adds (no snapshot since), SIGKILL, one flipped
/// byte in the first record of the only segment with records. The server
/// refuses to start naming segment and offset, the segment stays byte for
/// byte, the CLI refuses to answer from it, and `bloomgate repair` keeps
/// exactly the 1,999 intact records, after which the server serves them.
fn flipped_first_log_record(reserve: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let mut server = Server::start(&data, &["--snapshot-secs", "100000"]);
    let mut args = vec!["BF.RESERVE", "f"];
    args.extend_from_slice(reserve);
    assert_eq!(server.resp().cmd(&args), V::Simple("OK".into()));
    let all = items("item", 2000);
    madd(&server, "f", &all);
    server.kill9();
    let segs = full_segments(&data);
    assert_eq!(segs.len(), 1, "{segs:?}");
    let seg = &segs[0];
    let mut bytes = std::fs::read(seg).unwrap();
    // Magic (8), record header (12), kind, name length: a byte of the name.
    bytes[8 + 12 + 3] ^= 0x20;
    std::fs::write(seg, &bytes).unwrap();

    let err = serve_refuses(&data);
    let seg_name = seg.file_name().unwrap().to_string_lossy().into_owned();
    assert!(err.contains(&seg_name), "{err}");
    assert!(err.contains("damaged at byte 8"), "{err}");
    assert!(err.contains("bloomgate repair"), "{err}");
    assert_eq!(std::fs::read(seg).unwrap(), bytes, "the segment changed");
    // Twice: a refused start changes nothing either.
    serve_refuses(&data);
    assert_eq!(std::fs::read(seg).unwrap(), bytes);
    // A read-only reader does not answer from a prefix either.
    let o = bg(&["check", p(&data.join("f.bgf")), "--count"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains(&seg_name));

    // Dry run: reports, changes nothing.
    let out = ok(&bg(&["repair", "--dry-run", p(&data)]));
    assert!(
        out.contains("kept 1999 record(s)") && out.contains("at offset 8"),
        "{out}"
    );
    assert_eq!(std::fs::read(seg).unwrap(), bytes);
    let out = ok(&bg(&["repair", p(&data)]));
    assert!(out.contains("kept 1999 record(s)"), "{out}");
    assert!(out.contains("1 file(s) repaired"), "{out}");
    let aside: Vec<PathBuf> = std::fs::read_dir(data.join(".bloomgate-wal"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".damaged-"))
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(std::fs::read(&aside[0]).unwrap(), bytes, "original kept");

    let server = Server::start(&data, &[]);
    // The first record (item-0) is lost and was reported; all others serve.
    assert_eq!(present(&server, "f", &all[1..]), 1999);
}

#[test]
fn flipped_byte_in_first_log_record_stops_the_server_and_repair_salvages() {
    flipped_first_log_record(&["0.001", "10000"]);
}

#[test]
fn flipped_byte_in_first_log_record_of_a_scaling_filter() {
    flipped_first_log_record(&["0.01", "100", "EXPANSION", "2"]);
}

/// A torn tail (the last record cut short, as a crash during an append
/// leaves it) is repaired at start: every complete record is served.
#[test]
fn torn_log_tail_is_repaired_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    server.resp().cmd(&["BF.RESERVE", "f", "0.001", "10000"]);
    let all = items("t", 300);
    madd(&server, "f", &all);
    server.kill9();
    let seg = full_segments(dir.path()).pop().unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    std::fs::write(&seg, &bytes[..bytes.len() - 5]).unwrap();
    let mut server = Server::start(dir.path(), &[]);
    assert_eq!(present(&server, "f", &all[..299]), 299);
    assert!(server.term().success());
    let err = server.stderr();
    assert!(err.contains("torn tail"), "{err}");
}

/// Writes a raw-key filter file holding `items` only (a rebuilt list).
fn build(path: &Path, items: &[String]) {
    let plan = plan(Layout::Blocked, 20_000, 1e-5).unwrap();
    let p = Params::from_plan(&plan, random_seed());
    let mut f = Filter::create_file(path, p).unwrap();
    for it in items {
        f.insert(it.as_bytes());
    }
    f.persist().unwrap();
}

/// One flipped byte in the middle of `NAME.live`: a reload refuses (the
/// filter keeps serving every acknowledged add instead of a truncated set),
/// a restart refuses naming journal and offset, the journal stays byte for
/// byte; `bloomgate repair` keeps every other record.
#[test]
fn flipped_byte_in_journal_refuses_reload_and_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let mut server = Server::start(&data, &["--snapshot-secs", "100000"]);
    assert_eq!(
        server.resp().cmd(&["BF.RESERVE", "fx", "0.0001", "100000"]),
        V::Simple("OK".into())
    );
    let all = items("acked", 4000);
    madd(&server, "fx", &all);
    let (st, v) = server.http("POST", "/v1/snapshot", None, None);
    assert_eq!(st, 200, "{v}");
    let jpath = data.join("fx.live");
    let mut bytes = std::fs::read(&jpath).unwrap();
    let at = bytes.len() / 3;
    bytes[at] ^= 0x01;
    std::fs::write(&jpath, &bytes).unwrap();

    let rebuilt = dir.path().join("rebuilt.bgf");
    build(&rebuilt, &items("rebuilt", 100));
    let body = format!(r#"{{"path":"{}"}}"#, rebuilt.display());
    let (st, v) = server.http("POST", "/v1/filters/fx/reload", Some(&body), None);
    assert_ne!(st, 200, "{v}");
    assert!(v.to_string().contains("fx.live"), "{v}");
    assert_eq!(present(&server, "fx", &all), 4000);
    assert_eq!(std::fs::read(&jpath).unwrap(), bytes);
    server.kill9();

    let err = serve_refuses(&data);
    assert!(
        err.contains("fx.live") && err.contains("damaged at byte"),
        "{err}"
    );
    assert_eq!(std::fs::read(&jpath).unwrap(), bytes, "the journal changed");

    let out = ok(&bg(&["repair", p(&data)]));
    assert!(out.contains("fx.live: kept 4000 record(s)"), "{out}");
    assert!(out.contains("the original is kept as"), "{out}");
    let server = Server::start(&data, &[]);
    assert_eq!(present(&server, "fx", &all), 4000);
}

/// A segment renamed so that it is not read is reported, not skipped.
#[test]
fn misnamed_segment_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &["--snapshot-secs", "100000"]);
    server.resp().cmd(&["BF.RESERVE", "f", "0.001", "10000"]);
    madd(&server, "f", &items("m", 50));
    server.kill9();
    let seg = full_segments(dir.path()).pop().unwrap();
    let name = seg
        .file_name()
        .unwrap()
        .to_string_lossy()
        .replace("wal-", "wal-x");
    std::fs::rename(&seg, seg.with_file_name(&name)).unwrap();
    let err = serve_refuses(dir.path());
    assert!(err.contains(&name), "{err}");
    let out = ok(&bg(&["repair", "--dry-run", p(dir.path())]));
    assert!(out.contains(&name), "{out}");
}
