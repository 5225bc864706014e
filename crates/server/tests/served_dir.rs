//! The CLI on a data directory that `bloomgate serve` writes to: grown
//! filters, acknowledged adds still in the write-ahead log (server running,
//! or killed), and the directory lock. Everything runs the real binary:
//! `bloomgate serve` on loopback, fed by the real `redis-cli`, then
//! `bloomgate check|info|add|union|whitelist` on the same files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

fn bin() -> &'static std::path::Path {
    testkit::bin()
}

/// `redis-cli` if installed. Required (the test fails) when
/// `BLOOMGATE_REQUIRE_CLIENTS` is set, as `scripts/test.sh` does.
fn redis_cli() -> Option<&'static str> {
    let ok = Command::new("redis-cli")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        testkit::skip("redis-cli is not installed (apt-get install redis-tools)");
        return None;
    }
    Some("redis-cli")
}

use testkit::Server;

/// One command through `redis-cli` to `server`; its stdout lines.
fn cli(server: &Server, redis_cli: &str, args: &[&str]) -> Vec<String> {
    let out = Command::new(redis_cli)
        .args(["-p", &server.resp.port().to_string()])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn run(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `BF.MADD` of `items` in batches of 1000; every reply must be 1 (new) or 0
/// (a false positive of the filter: acknowledged too, and logged).
fn madd(serve: &Server, redis_cli: &str, name: &str, items: &[String]) {
    for batch in items.chunks(1000) {
        let mut args = vec!["BF.MADD", name];
        args.extend(batch.iter().map(String::as_str));
        let replies = cli(serve, redis_cli, &args);
        assert_eq!(replies.len(), batch.len(), "{replies:?}");
        assert!(replies.iter().all(|r| r == "1" || r == "0"), "{replies:?}");
    }
}

fn items(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:06}")).collect()
}

fn write_items(dir: &Path, name: &str, items: &[String]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, items.join("\n") + "\n").unwrap();
    p
}

/// `check` prints exactly the hits: every acknowledged item must be among them.
fn assert_all_hits(filter: &Path, input: &Path, items: &[String]) {
    let out = run(&["check", filter.to_str().unwrap(), input.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let hits: std::collections::HashSet<&str> =
        std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    let missing: Vec<&String> = items
        .iter()
        .filter(|i| !hits.contains(i.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged item(s) missing, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    let count = run(&[
        "check",
        "--count",
        filter.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&count.stdout).trim(),
        items.len().to_string()
    );
}

fn info(filter: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["info", "--json"];
    args.extend_from_slice(extra);
    args.push(filter.to_str().unwrap());
    let out = run(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A temporary data directory with a server on it, and a filter created by
/// `reserve` (`BF.RESERVE` arguments).
fn served(rc: &str, extra: &[&str], reserve: &[&str]) -> (tempfile::TempDir, PathBuf, Server) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    let serve = Server::start(&dir, extra);
    let mut args = vec!["BF.RESERVE"];
    args.extend_from_slice(reserve);
    assert_eq!(cli(&serve, rc, &args), ["OK"]);
    (tmp, dir, serve)
}

#[test]
fn grown_filter_is_read_whole_by_every_command() {
    let Some(rc) = redis_cli() else { return };
    let (tmp, dir, mut serve) = served(rc, &[], &["seen", "0.001", "1000"]);
    let added = items("seen", 5000);
    madd(&serve, rc, "seen", &added);
    let filter = dir.join("seen.bgf");
    let input = write_items(tmp.path(), "items.txt", &added);

    // While the server runs: its live adds are in the log, and its grown
    // layers only in its memory; the CLI replays them.
    assert_all_hits(&filter, &input, &added);
    let v = info(&filter, &[]);
    assert_eq!(v["served"], true);
    assert!(v["layers"].as_u64().unwrap() >= 3, "{v}");
    // A writer is refused while the server owns the directory.
    let out = run(&["add", filter.to_str().unwrap(), input.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("running bloomgate serve"),
        "{}",
        stderr(&out)
    );
    let out = run(&["whitelist", "add", filter.to_str().unwrap(), "seen-000001"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("running bloomgate serve"),
        "{}",
        stderr(&out)
    );
    assert!(!Path::new(&format!("{}.whitelist", filter.display())).exists());

    assert!(serve.term().success());
    // After a clean stop every layer is a file: the CLI reads them all.
    assert!(dir.join("seen.bgf.layer1").exists() && dir.join("seen.bgf.layer2").exists());
    assert_all_hits(&filter, &input, &added);
    let v = info(&filter, &[]);
    assert_eq!(v["served"], false);
    // RedisBloom's sub-filter count for capacity 1000, expansion 2, 5000
    // items: 1000 + 2000 + 4000 ≥ 5000 > 1000 + 2000.
    assert_eq!(v["layers"], 3, "{v}");
    assert_eq!(v["growth"], "scaling");
    assert_eq!(v["target_fp"], 0.001);
    let per_layer: u64 = v["layer_details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["items"].as_u64().unwrap())
        .sum();
    assert_eq!(v["items"].as_u64().unwrap(), per_layer);
    assert!(v["predicted_fp"].as_f64().unwrap() < 0.001, "{v}");
    let out = run(&["info", "--verify", filter.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));

    // `add` follows the growth rules: 5000 more items need a fourth layer
    // (capacity 8000), written as a file, seen by the next server.
    let more = items("more", 5000);
    let more_input = write_items(tmp.path(), "more.txt", &more);
    let out = run(&[
        "add",
        filter.to_str().unwrap(),
        more_input.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.join("seen.bgf.layer3").exists());
    assert_all_hits(&filter, &more_input, &more);
    assert_all_hits(&filter, &input, &added);
    let mut serve = Server::start(&dir, &[]);
    for probe in ["seen-004999", "more-004999", "more-000000"] {
        assert_eq!(
            cli(&serve, rc, &["BF.EXISTS", "seen", probe]),
            ["1"],
            "{probe}"
        );
    }
    assert!(serve.term().success());

    // Whitelisting answers "was it a hit" over every layer.
    let out = run(&["whitelist", "add", filter.to_str().unwrap(), "more-004999"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("not a hit"), "{}", stderr(&out));

    // A check in slices takes single-layer filters only, and says so.
    let out = run(&[
        "check",
        "--memory",
        "4K",
        filter.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot be checked in slices"),
        "{}",
        stderr(&out)
    );

    // union combines single-layer filters only, and says why not otherwise.
    let out = run(&[
        "union",
        filter.to_str().unwrap(),
        filter.to_str().unwrap(),
        "-o",
        tmp.path().join("u.bgf").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("has grown to 4 layers"),
        "{}",
        stderr(&out)
    );
    assert!(!tmp.path().join("u.bgf").exists());
}

#[test]
fn acknowledged_adds_survive_a_killed_server_for_the_cli() {
    let Some(rc) = redis_cli() else { return };
    let (tmp, dir, mut serve) = served(rc, &[], &["seen", "0.001", "100000", "NONSCALING"]);
    let added = items("crash", 5000);
    madd(&serve, rc, "seen", &added);
    serve.kill9();
    let filter = dir.join("seen.bgf");
    let input = write_items(tmp.path(), "items.txt", &added);

    // The files alone hold none of them; the CLI answers from files + log.
    assert_all_hits(&filter, &input, &added);
    let out = run(&["check", filter.to_str().unwrap(), input.to_str().unwrap()]);
    assert!(
        stderr(&out).contains("included 5000 live add(s)"),
        "{}",
        stderr(&out)
    );
    let v = info(&filter, &[]);
    assert_eq!(v["live_adds_included"], 5000);
    assert_eq!(v["items"], 5000);
    // In slices too: the live adds are applied to every slice.
    let out = run(&[
        "check",
        "--count",
        "--memory",
        "64K",
        filter.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    // Several slices (the count follows the filter's size: 4 for the
    // 192 KiB this plan gives).
    let slices: u32 = stderr(&out)
        .split("checking in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(slices >= 3, "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "5000");
    // Asked for explicitly, the last snapshot alone (and said so).
    let out = run(&[
        "check",
        "--count",
        "--snapshot-only",
        filter.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");
    assert!(stderr(&out).contains("--snapshot-only"), "{}", stderr(&out));
    let v = info(&filter, &["--snapshot-only"]);
    assert_eq!(v["items"], 0);
    assert_eq!(v["live_adds_included"], Value::Null);
    // Nothing was written by the readers: the log is still there, whole.
    let wal: Vec<_> = std::fs::read_dir(dir.join(".bloomgate-wal"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .collect();
    assert!(!wal.is_empty());

    // An in-place add (no server now) folds the logged adds into the file
    // too, so the file alone holds every acknowledged add afterwards.
    let extra = tmp.path().join("extra.txt");
    std::fs::write(&extra, "crash-extra\n").unwrap();
    let out = run(&["add", filter.to_str().unwrap(), extra.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(&[
        "check",
        "--count",
        "--snapshot-only",
        filter.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "5000");
    let out = run(&["info", "--verify", filter.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));

    // And the server, restarted, agrees (it replays the same log again).
    let mut serve = Server::start(&dir, &[]);
    for probe in ["crash-000000", "crash-004999", "crash-extra"] {
        assert_eq!(
            cli(&serve, rc, &["BF.EXISTS", "seen", probe]),
            ["1"],
            "{probe}"
        );
    }
    assert!(serve.term().success());
    assert_all_hits(&filter, &input, &added);
}

#[test]
fn server_refuses_a_directory_another_process_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let _lock = bloomgate_blacklist::datadir::DirLock::acquire(tmp.path()).unwrap();
    let out = Command::new(bin())
        .args(["serve", "--data-dir"])
        .arg(tmp.path())
        .args(["--http", "127.0.0.1:0", "--resp", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is using this data directory"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn cli_sees_every_acknowledged_add_while_the_server_adds_and_snapshots() {
    // Adds keep arriving and the server snapshots every second (moving log
    // records into the journal and rewriting the file) while `check` reads
    // the same directory: every add acknowledged before a check started
    // must be a hit in it.
    let Some(rc) = redis_cli() else { return };
    let (tmp, dir, mut serve) = served(rc, &["--snapshot-secs", "1"], &["live", "0.001", "500"]);
    let all = items("live", 12_000);
    let acked = std::sync::atomic::AtomicUsize::new(0);
    let filter = dir.join("live.bgf");
    let mut checks = 0;
    std::thread::scope(|scope| {
        let serve = &serve;
        let (all, acked) = (&all, &acked);
        scope.spawn(move || {
            for (i, batch) in all.chunks(300).enumerate() {
                madd(serve, rc, "live", batch);
                acked.store((i + 1) * 300, std::sync::atomic::Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(60));
            }
        });
        while acked.load(std::sync::atomic::Ordering::SeqCst) < all.len() {
            let n = acked.load(std::sync::atomic::Ordering::SeqCst);
            if n == 0 {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            let input = write_items(tmp.path(), "acked.txt", &all[..n]);
            let out = run(&[
                "check",
                "--count",
                filter.to_str().unwrap(),
                input.to_str().unwrap(),
            ]);
            assert!(out.status.success(), "{}", stderr(&out));
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                n.to_string(),
                "after {n} acknowledged adds: {}",
                stderr(&out)
            );
            checks += 1;
        }
    });
    assert!(checks >= 5, "only {checks} checks overlapped the adds");
    // It grew, and snapshots ran meanwhile (layer files on disk).
    assert!(dir.join("live.bgf.layer1").exists());
    assert!(serve.term().success());
}
