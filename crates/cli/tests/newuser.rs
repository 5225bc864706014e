//! What a new user trips on, end to end with the real binary: lines that
//! are not of the key kind asked for, exit codes, compressed standard
//! input, streaming answers, reproducible builds and mail address forms.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{bg, p, write_lines};

/// Runs `bloomgate ARGS` with `input` on standard input.
fn with_stdin(args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bloomgate");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn url_keys_refuse_lines_that_are_not_urls() {
    let out = with_stdin(&["dedup"], b"user:1\nuser:2\nuser:3\n");
    let err = stderr(&out);
    assert_eq!(stdout(&out), "", "{err}");
    assert!(err.contains("-:1: invalid url entry: not a URL"), "{err}");
    assert!(err.contains("3 invalid"), "{err}");
    let out = with_stdin(&["dedup"], b"a@b.com\nc@b.com\n5\nhttp://a.com/x\n");
    assert_eq!(stdout(&out), "http://a.com/x\n", "{}", stderr(&out));
    assert!(stderr(&out).contains("3 invalid"), "{}", stderr(&out));

    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("users.txt");
    write_lines(
        &list,
        (0..1000)
            .map(|i| format!("user:{i}"))
            .chain(["http://evil.example/".to_string()]),
    );
    let f = dir.path().join("u.bgf");
    let o = bg(&["build", "-n", "2000", "-p", "1e-3", "-o", p(&f), p(&list)]);
    let err = stderr(&o);
    assert!(err.contains("1,000 invalid"), "{err}");
    let queries = dir.path().join("q.txt");
    write_lines(&queries, ["user:77", "http://evil.example/"]);
    let o = bg(&["check", p(&f), p(&queries)]);
    assert_eq!(stdout(&o), "http://evil.example/\n");
    assert!(
        stderr(&o).contains(":1: invalid url query: not a URL"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn summaries_warn_when_keys_collapse_or_domains_are_given_as_email() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("frag.txt");
    write_lines(
        &list,
        (0..500).map(|i| format!("http://a.example/page#{i}")),
    );
    let f = dir.path().join("f.bgf");
    let o = bg(&["build", "-n", "1000", "-p", "1e-3", "-o", p(&f), p(&list)]);
    let err = stderr(&o);
    assert!(
        err.contains("warning: the url key rules merged 500 distinct lines into 1 distinct keys"),
        "{err}"
    );
    let o = bg(&["dedup", p(&list)]);
    assert_eq!(stdout(&o).lines().count(), 1);
    assert!(
        stderr(&o).contains("merged 500 distinct lines into 1"),
        "{}",
        stderr(&o)
    );

    let domains = dir.path().join("domains.txt");
    write_lines(&domains, (0..300).map(|i| format!("d{i}.example")));
    let e = dir.path().join("e.bgf");
    let o = bg(&[
        "build",
        "--keys",
        "email",
        "-n",
        "1000",
        "-p",
        "1e-3",
        "-o",
        p(&e),
        p(&domains),
    ]);
    let err = stderr(&o);
    assert!(
        err.contains("300 of the 300 invalid email entries are bare domains")
            && err.contains("--keys host"),
        "{err}"
    );
    // Distinct URLs that are only spelled differently are no warning.
    let urls = dir.path().join("urls.txt");
    write_lines(&urls, (0..500).map(|i| format!("HTTP://A.example/{i}")));
    let g = dir.path().join("g.bgf");
    let o = bg(&["build", "-n", "1000", "-p", "1e-3", "-o", p(&g), p(&urls)]);
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
}
