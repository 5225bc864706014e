//! What a new user trips on, end to end with the real binary: lines that
//! are not of the key kind asked for, exit codes, compressed standard
//! input, streaming answers, reproducible builds and mail address forms.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{bg, ok, p, write_lines};

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

#[test]
fn useless_builds_fail_unless_allowed_and_check_answers_like_grep() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("urls.txt");
    write_lines(&list, (0..2000).map(|i| format!("http://h.example/{i}")));
    let f = dir.path().join("small.bgf");
    let o = bg(&["build", "-n", "100", "-p", "1e-3", "-o", p(&f), p(&list)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("not written"), "{}", stderr(&o));
    assert!(!f.exists());
    let o = bg(&[
        "build",
        "-n",
        "100",
        "-p",
        "1e-3",
        "--allow-useless",
        "-o",
        p(&f),
        p(&list),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let e = dir.path().join("empty.bgf");
    let o = bg(&["build", "-n", "100", "-p", "1e-3", "-o", p(&e), "/dev/null"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(!e.exists());

    let g = dir.path().join("good.bgf");
    let o = bg(&["build", "-n", "2000", "-p", "1e-4", "-o", p(&g), p(&list)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let hit = with_stdin(&["check", "-q", p(&g)], b"http://h.example/5\n");
    assert_eq!(hit.status.code(), Some(0));
    assert_eq!(stdout(&hit), "");
    let miss = with_stdin(&["check", "-q", p(&g)], b"http://other.example/\n");
    assert_eq!(miss.status.code(), Some(1));
    let unsure = with_stdin(&["check", "-q", p(&g)], b"http://other.example/\n5\n");
    assert_eq!(unsure.status.code(), Some(2));
    let gone = with_stdin(
        &["check", "-q", p(&dir.path().join("nosuch.bgf"))],
        b"x.y/\n",
    );
    assert_eq!(gone.status.code(), Some(2));
    let misses = with_stdin(
        &["check", "--misses", p(&g)],
        b"http://h.example/5\nhttp://other.example/\n",
    );
    assert_eq!(stdout(&misses), "http://other.example/\n");
}

#[test]
fn compressed_standard_input_is_detected_and_errors_name_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = Vec::new();
    for i in 0..1000 {
        text.extend_from_slice(format!("http://z.example/{i}\n").as_bytes());
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&text).unwrap();
    let gz = gz.finish().unwrap();
    let zst = zstd::encode_all(&text[..], 1).unwrap();
    for (name, bytes) in [("gz", &gz), ("zst", &zst)] {
        let f = dir.path().join(format!("{name}.bgf"));
        // --memory small enough for a sliced build: standard input spooled.
        for extra in [&[][..], &["--memory", "1K"][..]] {
            let mut args = vec!["build", "-n", "1000", "-p", "1e-3", "--force", "-o", p(&f)];
            args.extend_from_slice(extra);
            args.push("-");
            let o = with_stdin(&args, bytes);
            assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
            assert!(stderr(&o).contains("1,000 lines"), "{name}: {}", stderr(&o));
            assert!(stderr(&o).contains("0 invalid"), "{name}: {}", stderr(&o));
        }
    }
    let truncated = &gz[..gz.len() / 2];
    let f = dir.path().join("t.bgf");
    for extra in [&[][..], &["--memory", "1K"][..]] {
        let mut args = vec!["build", "-n", "1000", "-p", "1e-3", "--force", "-o", p(&f)];
        args.extend_from_slice(extra);
        args.push("-");
        let o = with_stdin(&args, truncated);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains("-: read error"), "{}", stderr(&o));
        assert!(!stderr(&o).contains(".bloomgate-stdin"), "{}", stderr(&o));
    }
}

/// A line followed by a pause is answered before any more input arrives.
#[test]
fn answers_stream_when_the_writer_pauses() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("urls.txt");
    write_lines(&list, ["http://s.example/1"]);
    let f = dir.path().join("s.bgf");
    ok(&bg(&[
        "build",
        "-n",
        "10",
        "-p",
        "1e-3",
        "-o",
        p(&f),
        p(&list),
    ]));
    for args in [vec!["check", p(&f)], vec!["dedup"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bloomgate"))
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"http://s.example/1\n").unwrap();
        stdin.flush().unwrap();
        // The answer must come while standard input is still open and idle:
        // read it on a thread, bounded by a generous timeout.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(60));
        drop(stdin);
        let _ = child.wait();
        assert_eq!(got.as_deref(), Ok("http://s.example/1\n"), "{args:?}");
    }
}

/// The same inputs and seed give the same file, byte for byte, whatever the
/// thread count and the memory budget (so a slicing): which of two colliding
/// items counts as new — the header's item count — follows the inputs'
/// order, not the threads'. The filter is small for its items, so that many
/// items collide and an order-dependent count would show.
#[test]
fn builds_are_reproducible_across_threads_and_memory() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.txt");
    let b = dir.path().join("b.txt");
    write_lines(&a, (0..150_000).map(|i| format!("http://a.example/p/{i}")));
    write_lines(
        &b,
        (100_000..250_000).map(|i| format!("http://a.example/p/{i}")),
    );
    for layout in ["blocked", "classic"] {
        let mut files = Vec::new();
        // In memory on 1 and 2 threads; sliced with a pass per slice; sliced
        // with the blocked layout's spilled records.
        let runs = [
            ("1", None, "0"),
            ("2", None, "0"),
            ("3", Some("64K"), "0"),
            ("2", Some("40K"), "1G"),
        ];
        for (threads, memory, spill) in runs {
            let out = dir
                .path()
                .join(format!("{layout}-{threads}-{memory:?}.bgf"));
            let mut args = vec![
                "build",
                "--seed",
                "7",
                "--layout",
                layout,
                "-n",
                "300000",
                "-p",
                "0.05",
                "-o",
                p(&out),
                p(&a),
                p(&b),
            ];
            if let Some(m) = memory {
                args.extend(["--memory", m, "--spill", spill]);
            }
            let o = Command::new(env!("CARGO_BIN_EXE_bloomgate"))
                .args(&args)
                .env("RAYON_NUM_THREADS", threads)
                .output()
                .unwrap();
            ok(&o);
            let err = stderr(&o);
            assert!(memory.is_none() || err.contains("slices"), "{err}");
            files.push((out, err));
        }
        let first = std::fs::read(&files[0].0).unwrap();
        for (f, err) in &files[1..] {
            assert!(
                std::fs::read(f).unwrap() == first,
                "{layout}: {} differs from {}\n{err}\n{}",
                p(f),
                p(&files[0].0),
                files[0].1
            );
        }
        // Some items did collide: the count is below the distinct entries.
        assert!(!files[0].1.contains("250,000 new items"), "{}", files[0].1);
    }
}

/// The address forms mail systems pass are keys of `--keys email`: a
/// display name with the address in angle brackets, and address literals;
/// a bracketed domain that is no address literal says what is expected.
#[test]
fn mail_address_forms_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("senders.txt");
    write_lines(
        &list,
        [
            "joe@mailinator.com",
            "Ann Example <ann@example.org>",
            "spam@[127.0.0.1]",
            "v6@[IPv6:2001:DB8::1]",
        ],
    );
    let f = dir.path().join("mail.bgf");
    let o = bg(&[
        "build",
        "--keys",
        "email",
        "-n",
        "100",
        "-p",
        "1e-6",
        "-o",
        p(&f),
        p(&list),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("0 invalid"), "{}", stderr(&o));
    let queries = "Joe Bloggs <joe@mailinator.com>\n\"Bloggs, Joe\" <joe@MAILINATOR.com>\n<ann@example.org>\nann@example.org\nspam@[127.0.0.1]\nv6@[ipv6:2001:db8:0::1]\nother@example.org\n";
    let out = with_stdin(&["check", p(&f)], queries.as_bytes());
    let shown = stdout(&out);
    for hit in [
        "Joe Bloggs <joe@mailinator.com>",
        "\"Bloggs, Joe\" <joe@MAILINATOR.com>",
        "<ann@example.org>",
        "spam@[127.0.0.1]",
        "v6@[ipv6:2001:db8:0::1]",
    ] {
        assert!(
            shown.lines().any(|l| l.contains(hit)),
            "{hit}: {shown}\n{}",
            stderr(&out)
        );
    }
    assert!(!shown.contains("other@example.org"), "{shown}");
    let bad = with_stdin(&["check", p(&f)], b"x@[1.2.3]\n");
    assert!(
        stderr(&bad).contains("email address literal is not [IPv4 address] or [IPv6:IPv6 address]"),
        "{}",
        stderr(&bad)
    );
}

/// The smaller surprises: `serve` without a source names both sources,
/// `BLOOMGATE_KERNEL` must name a kernel, `dedup --help` says which
/// commands refuse rotate and clear, and counts of one are singular.
#[test]
fn smaller_surprises() {
    let o = bg(&["serve"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("--data-dir") && err.contains("--store"),
        "{err}"
    );
    assert!(!err.contains("--http"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("one.txt");
    write_lines(&list, ["http://one.example/"]);
    let f = dir.path().join("one.bgf");
    let o = bg(&["build", "-n", "10", "-p", "1e-3", "-o", p(&f), p(&list)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(": 1 line, 1 new item ("),
        "{}",
        stderr(&o)
    );

    let o = Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .args(["info", p(&f)])
        .env("BLOOMGATE_KERNEL", "bogus")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("BLOOMGATE_KERNEL=\"bogus\" is not a kernel"),
        "{}",
        stderr(&o)
    );
    let o = Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .args(["info", p(&f)])
        .env("BLOOMGATE_KERNEL", "scalar")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));

    let help = stdout(&bg(&["dedup", "--help"]));
    assert!(
        !help.contains("rotate and clear are refused for url and host blacklists"),
        "{help}"
    );
    assert!(help.contains("dedup states take them"), "{help}");
    let out = with_stdin(
        &["dedup", "--policy", "rotate", "--window", "10"],
        b"http://a.example/\nhttp://a.example/\n",
    );
    assert_eq!(stdout(&out), "http://a.example/\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("dedup: 2 lines read, 1 passed"),
        "{}",
        stderr(&out)
    );

    // Lock files are removed when the command is done.
    let state = dir.path().join("seen.bgf");
    let o = with_stdin(&["dedup", "--state", p(&state)], b"http://a.example/\n");
    assert!(o.status.success(), "{}", stderr(&o));
    let cf = dir.path().join("del.bgf");
    let o = bg(&[
        "build",
        "--layout",
        "cuckoo",
        "-n",
        "100",
        "-p",
        "1e-3",
        "-o",
        p(&cf),
        p(&list),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = with_stdin(&["add", p(&cf)], b"http://two.example/\n");
    assert!(o.status.success(), "{}", stderr(&o));
    let locks: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".lock"))
        .collect();
    assert!(locks.is_empty(), "{locks:?}");
}

/// Runs `command` (a shell command line) under `script`, so that its
/// standard streams are a pseudo-terminal; returns what the terminal
/// showed.
fn on_a_terminal(dir: &std::path::Path, command: &str) -> String {
    let o = Command::new("script")
        .args(["-qec", command, "/dev/null"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux) runs the command on a pseudo-terminal");
    let shown = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success() || o.status.code() == Some(1), "{shown}");
    shown
}

#[test]
fn check_and_dedup_summarize_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("urls.txt");
    write_lines(&list, (0..100).map(|i| format!("http://h.example/{i}")));
    let f = dir.path().join("urls.bgf");
    ok(&bg(&[
        "build",
        "-n",
        "1000",
        "-p",
        "1e-6",
        "-o",
        p(&f),
        p(&list),
    ]));
    ok(&bg(&["whitelist", "add", p(&f), "http://h.example/7"]));
    let queries = dir.path().join("q.txt");
    write_lines(
        &queries,
        [
            "http://h.example/1",
            "http://h.example/2",
            "http://h.example/7",
            "http://elsewhere.example/",
            "not a url",
        ],
    );
    let bin = env!("CARGO_BIN_EXE_bloomgate");
    // Standard output to a file, standard error on the terminal.
    let shown = on_a_terminal(
        dir.path(),
        &format!("{bin} check urls.bgf q.txt > hits.txt"),
    );
    assert!(
        shown.contains("check: 5 lines, 2 on the list, 1 whitelisted, 1 invalid"),
        "{shown}"
    );
    let hits = std::fs::read_to_string(dir.path().join("hits.txt")).unwrap();
    assert_eq!(hits, "http://h.example/1\nhttp://h.example/2\n");
    // Piped, the same run says nothing but the invalid line.
    let o = bg(&["check", p(&f), p(&queries)]);
    assert_eq!(stdout(&o), hits);
    assert!(!stderr(&o).contains("check:"), "{}", stderr(&o));
    // dedup's summary, on the terminal.
    let shown = on_a_terminal(
        dir.path(),
        &format!("cat urls.txt urls.txt q.txt | {bin} dedup > new.txt"),
    );
    assert!(
        shown.contains("dedup: 205 lines read, 101 passed, 103 dropped as seen, 1 invalid"),
        "{shown}"
    );
}
