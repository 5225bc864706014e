//! `bloomgate squid-helper` as Squid runs it: the real binary on a pipe,
//! answering each request while the pipe stays open, on real files and a
//! real redis-server.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use testkit::redis::{redis_missing, RedisServer};
use testkit::{bg, bin, ok, p, Server};

/// A helper process with its pipes.
struct Helper {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Helper {
    fn start(args: &[&str]) -> Helper {
        let mut child = Command::new(bin())
            .arg("squid-helper")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Helper {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            child,
        }
    }

    /// Sends one line and reads one answer (the pipe stays open).
    fn ask(&mut self, line: &str) -> String {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        assert!(answer.ends_with('\n'), "no answer to {line:?}: {answer:?}");
        answer.trim_end().to_string()
    }

    /// Closes the pipe as Squid does; the exit status and stderr.
    fn close(mut self) -> (std::process::ExitStatus, String) {
        drop(self.stdin.take());
        let out = self.child.wait_with_output().unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

fn build(dir: &Path, name: &str, entries: &str) -> String {
    let input = dir.join(format!("{name}.txt"));
    std::fs::write(&input, entries).unwrap();
    let out = dir.join(format!("{name}.bgf"));
    ok(&bg(&[
        "build",
        "--match",
        "prefix",
        "--fp",
        "1e-4",
        "--force",
        "-o",
        p(&out),
        p(&input),
    ]));
    out.to_string_lossy().into_owned()
}

#[test]
fn bad_lines_get_bh_in_place_and_the_helper_keeps_answering_until_eof() {
    let dir = tempfile::tempdir().unwrap();
    let list = build(dir.path(), "adult", "evil.example/\n");
    let mut h = Helper::start(&["--concurrency", &list]);
    assert_eq!(
        h.ask("1 http://evil.example/x"),
        "1 OK tag=adult message=\"adult: evil.example/\""
    );
    assert!(h.ask("").starts_with("BH message="));
    assert!(h
        .ask("not-a-channel http://evil.example/")
        .starts_with("BH message="));
    assert!(h.ask("2").starts_with("2 BH message="));
    assert!(h.ask("3 \u{1}\u{7f}\u{ff}garbage").starts_with("3 "));
    let long = format!("4 http://evil.example/{}", "a".repeat(100_000));
    assert!(h.ask(&long).starts_with("4 BH message="));
    assert_eq!(h.ask("5 http://clean.example/"), "5 ERR");
    // Several requests in one write: one answer each, channel IDs kept.
    let stdin = h.stdin.as_mut().unwrap();
    let many: String = (0..500)
        .map(|i| {
            format!(
                "{i} http://{}.example/\n",
                if i % 2 == 0 { "evil" } else { "clean" }
            )
        })
        .collect();
    stdin.write_all(many.as_bytes()).unwrap();
    stdin.flush().unwrap();
    for i in 0..500 {
        let mut a = String::new();
        h.stdout.read_line(&mut a).unwrap();
        let want = if i % 2 == 0 { "OK" } else { "ERR" };
        assert!(a.starts_with(&format!("{i} {want}")), "{i}: {a}");
    }
    let (status, stderr) = h.close();
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("standard input closed after 507 requests"),
        "{stderr}"
    );
}

#[test]
fn a_damaged_replacement_keeps_the_file_it_had_and_a_good_one_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let list = build(dir.path(), "adult", "evil.example/\n");
    let mut h = Helper::start(&[&list]);
    assert!(h.ask("http://evil.example/").starts_with("OK "));
    assert_eq!(h.ask("http://newly.example/"), "ERR");
    // A damaged file renamed over the list: still the old answers.
    let mut bytes = std::fs::read(&list).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 0xff;
    bytes.truncate(n - 8);
    std::fs::write(dir.path().join("bad.bgf"), &bytes).unwrap();
    std::fs::rename(dir.path().join("bad.bgf"), &list).unwrap();
    assert!(h.ask("http://evil.example/").starts_with("OK "));
    assert_eq!(h.ask("http://newly.example/"), "ERR");
    // A good one renamed over it: the new answers from the next request.
    let staged = build(dir.path(), "staged", "evil.example/\nnewly.example/\n");
    std::fs::rename(&staged, &list).unwrap();
    assert!(h.ask("http://newly.example/").starts_with("OK "));
    let (status, stderr) = h.close();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("does not open"), "{stderr}");
    assert!(stderr.contains("reopened"), "{stderr}");
}

#[test]
fn live_adds_to_a_served_data_directory_are_answered_without_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    std::fs::create_dir(&dir).unwrap();
    let list = build(&dir, "adult", "evil.example/\n");
    // No snapshot during the test: the add reaches the files only in the
    // server's log, which is what the helper must see.
    let serve = Server::start(&dir, &["--snapshot-secs", "3600"]);
    let mut h = Helper::start(&["--concurrency", &list]);
    assert!(h.ask("1 http://evil.example/").starts_with("1 OK "));
    assert_eq!(h.ask("2 http://newly.example/a"), "2 ERR");
    // The server acknowledges the add once it is in its log; the helper
    // reopens the list (replaying the log) at most once a second.
    assert_eq!(
        serve
            .resp()
            .cmd(&["BF.ADD", "adult", "newly.example/"])
            .int(),
        1
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let answer = loop {
        let answer = h.ask("3 http://newly.example/a");
        if answer != "3 ERR" || std::time::Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(answer.starts_with("3 OK "), "{answer}");
    assert!(h.ask("4 http://evil.example/").starts_with("4 OK "));
    assert_eq!(h.ask("5 http://clean.example/"), "5 ERR");
    let (status, stderr) = h.close();
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_redis_that_dies_under_the_helper_gives_bh_never_err() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = build(dir.path(), "adult", "evil.example/\n");
    let other = build(dir.path(), "gambling", "casino.example/\n");
    let mut redis = RedisServer::start(dir.path(), &[]);
    let address = format!("redis://127.0.0.1:{}/adult", redis.port);
    ok(&bg(&["push", &file, &address]));
    let mut h = Helper::start(&["--concurrency", &address, &other]);
    assert!(h
        .ask("1 http://evil.example/")
        .starts_with("1 OK tag=adult "));
    assert_eq!(h.ask("2 http://clean.example/"), "2 ERR");
    redis.kill9();
    let a = h.ask("3 http://clean.example/");
    assert!(a.starts_with("3 BH message=\"adult: "), "{a}");
    // A definite hit on another list is still a hit.
    assert!(h
        .ask("4 http://casino.example/")
        .starts_with("4 OK tag=gambling "));
    let (status, stderr) = h.close();
    assert!(status.success(), "{stderr}");
}
