//! `bloomgate dedup` end to end, with the real binary: canonical
//! duplicates, input order across chunks, compressed input, a state that
//! persists between runs, and runs that fail or are killed leaving the
//! previous state as it was.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testkit::{bg, ok, p, write_lines};

/// Runs `bloomgate dedup ARGS` with `input` on standard input.
fn dedup_stdin(args: &[&str], input: &[u8]) -> std::process::Output {
    testkit::run_with_input(Command::new(testkit::bin()).arg("dedup").args(args), input)
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

#[test]
fn canonical_duplicates_are_one_entry_and_the_first_line_is_printed() {
    let input = b"HTTP://A.com/x#top\nhttp://a.com/x\nhttp://a.com:80/./x\nhttp://b.com/\r\n\nhttp://B.COM\nhttp://c.com/y\n";
    let o = dedup_stdin(&[], input);
    let out = ok(&o);
    assert_eq!(
        lines(&out),
        ["HTTP://A.com/x#top", "http://b.com/", "http://c.com/y"]
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("6 lines read, 3 passed, 3 dropped as seen"),
        "{err}"
    );
    assert!(err.contains("wrongly taken as seen"), "{err}");
    // Raw keys compare bytes: the same lines are all different.
    let o = dedup_stdin(&["--keys", "raw"], input);
    assert_eq!(lines(&ok(&o)).len(), 6);
}

#[test]
fn invalid_entries_are_reported_with_their_line_and_skipped() {
    let o = dedup_stdin(
        &[],
        b"http://ok.example/\nhttp://[::1/\nhttp://ok.example/\n",
    );
    assert_eq!(lines(&ok(&o)), ["http://ok.example/"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("-:2: invalid url entry"), "{err}");
    assert!(err.contains("1 invalid"), "{err}");
}

#[test]
fn output_is_in_input_order_across_chunks() {
    // ~9 MB: more than two of the reader's 4 MiB chunks, with repeats
    // within and across chunks.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("urls.txt");
    let all: Vec<String> = (0..300_000u64)
        .map(|i| {
            let id = if i % 3 == 0 { i / 7 } else { i };
            format!(
                "http://host{}.example/some/longer/path/{id}?q={}",
                id % 97,
                id * 31
            )
        })
        .collect();
    write_lines(&input, &all);
    let o = bg(&["dedup", "--error-rate", "1e-9", p(&input)]);
    let out = ok(&o);
    let mut seen = HashSet::new();
    let want: Vec<&str> = all
        .iter()
        .filter(|l| seen.insert(l.as_str()))
        .map(String::as_str)
        .collect();
    assert!(want.len() < all.len() && want.len() > 200_000);
    assert_eq!(lines(&out), want);
}

#[test]
fn the_state_persists_between_runs_and_reads_gzip() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("seen.bgf");
    let first = dir.path().join("first.txt");
    write_lines(&first, ["http://a.example/1", "http://b.example/2"]);
    let o = bg(&[
        "dedup",
        "--state",
        p(&state),
        "--capacity",
        "1000",
        p(&first),
    ]);
    assert_eq!(lines(&ok(&o)), ["http://a.example/1", "http://b.example/2"]);
    assert!(state.exists());
    // A second run, gzip-compressed input: what the first saw is dropped,
    // in any spelling of the same URL.
    let second = dir.path().join("second.txt.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&second).unwrap(),
        flate2::Compression::default(),
    );
    gz.write_all(b"HTTP://A.EXAMPLE/1#frag\nhttp://c.example/3\nhttp://b.example/2\n")
        .unwrap();
    gz.finish().unwrap();
    let o = bg(&["dedup", "--state", p(&state), p(&second)]);
    assert_eq!(lines(&ok(&o)), ["http://c.example/3"]);
    // The state is a filter file like any other.
    let info: serde_json::Value =
        serde_json::from_str(&ok(&bg(&["info", "--json", "--verify", p(&state)]))).unwrap();
    assert_eq!(info["items"], 3);
    assert_eq!(info["policy"]["name"], "grow");
    assert_eq!(info["purpose"], "dedup");
    assert_eq!(info["key_kind"], "url");
    let hits = ok(&bg(&["check", p(&state), p(&first)]));
    assert_eq!(lines(&hits).len(), 2);
    // --keys must agree with the state's.
    let o = bg(&["dedup", "--state", p(&state), "--keys", "raw", p(&first)]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

#[test]
fn the_state_grows_past_its_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("seen.bgf");
    let input = dir.path().join("in.txt");
    write_lines(&input, (0..5000).map(|i| format!("http://x.example/{i}")));
    let o = bg(&[
        "dedup",
        "--state",
        p(&state),
        "--capacity",
        "1000",
        p(&input),
    ]);
    assert_eq!(lines(&ok(&o)).len(), 5000);
    let o = bg(&["dedup", "--state", p(&state), p(&input)]);
    assert_eq!(ok(&o), "");
    let info: serde_json::Value =
        serde_json::from_str(&ok(&bg(&["info", "--json", p(&state)]))).unwrap();
    assert!(info["layers"].as_u64().unwrap() >= 3, "{info}");
    assert!(info["predicted_fp"].as_f64().unwrap() <= 1e-6);
}

/// Every file of the state, by name, with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("seen.bgf"))
        // The lock is no part of the state: removed by a run that ends,
        // left (empty, and free) by one that is killed.
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".lock"))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_failed_or_killed_run_keeps_the_previous_state() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("seen.bgf");
    let first = dir.path().join("first.txt");
    write_lines(&first, (0..1000).map(|i| format!("http://old.example/{i}")));
    ok(&bg(&["dedup", "--state", p(&state), p(&first)]));
    let before = snapshot(dir.path());

    // A run that fails (its second input does not exist) prints what it
    // passed of the first input but does not save.
    let more = dir.path().join("more.txt");
    write_lines(&more, (0..1000).map(|i| format!("http://new.example/{i}")));
    let missing = dir.path().join("missing.txt");
    let o = bg(&["dedup", "--state", p(&state), p(&more), p(&missing)]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("previous state is kept"), "{err}");
    assert_eq!(snapshot(dir.path()), before);

    // A run killed while it reads: the state on disk is untouched and
    // usable, and everything the first run saw is still seen.
    let mut child = Command::new(testkit::bin())
        .args(["dedup", "--state", p(&state), "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // More than one 4 MiB input chunk, and standard input left open: the
    // first chunk's lines are printed while the run waits for more.
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let mut w = std::io::BufWriter::new(&mut stdin);
        for i in 0..200_000 {
            if writeln!(w, "http://killed.example/a/longer/path/{i}").is_err() {
                return;
            }
        }
        let _ = w.flush();
        drop(w);
        // Keep standard input open until the process is gone.
        let _ = stdin.write_all(&[]);
        std::thread::sleep(Duration::from_secs(2));
    });
    // Wait until it has printed something (it is mid-run), then kill it.
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = [0u8; 64];
    let t = Instant::now();
    assert!(stdout.read(&mut buf).unwrap() > 0);
    assert!(t.elapsed() < Duration::from_secs(60));
    child.kill().unwrap();
    child.wait().unwrap();
    writer.join().unwrap();
    assert_eq!(snapshot(dir.path()), before);
    ok(&bg(&["info", "--verify", p(&state)]));
    let o = bg(&["dedup", "--state", p(&state), p(&first)]);
    assert_eq!(ok(&o), "", "entries of the saved state were lost");
    // ... and the lock of the killed run is gone with it.
    let o = bg(&["dedup", "--state", p(&state), p(&more)]);
    assert_eq!(lines(&ok(&o)).len(), 1000);
}

#[test]
fn two_runs_on_one_state_at_once_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("seen.bgf");
    let mut child = Command::new(testkit::bin())
        .args(["dedup", "--state", p(&state), "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "http://first.example/").unwrap();
    stdin.flush().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = [0u8; 8];
    // It holds the lock once it has read (and so printed) a line: the
    // output of the first chunk only comes at the end of input, so wait
    // for the lock file instead.
    let lock = dir.path().join("seen.bgf.lock");
    testkit::wait_locked(&lock, Duration::from_secs(60));
    let o = bg(&["dedup", "--state", p(&state), "-"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("another bloomgate dedup"));
    drop(stdin);
    assert!(stdout.read(&mut buf).unwrap() > 0);
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_closed_stdout_is_a_quiet_success() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    write_lines(
        &input,
        (0..200_000).map(|i| format!("http://x.example/{i}")),
    );
    let mut child = Command::new(testkit::bin())
        .args(["dedup", p(&input)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = [0u8; 100];
    stdout.read_exact(&mut buf).unwrap();
    drop(stdout);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("Broken pipe"),
        "{o:?}"
    );
}
