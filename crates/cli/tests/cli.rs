//! End-to-end tests of the real `bloomgate` binary in temporary directories.

use std::io::Write;
use std::path::Path;

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;
use testkit::Dir;

fn bg() -> Command {
    Command::cargo_bin("bloomgate").unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn json(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap()
}

#[test]
fn plan_worked_example() {
    for items in ["10000000000", "1e10"] {
        let out = bg()
            .args(["plan", "--items", items, "--fp", "0.0001", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let v = json(&out.stdout);
        let layouts = v["layouts"].as_array().unwrap();
        let classic = layouts.iter().find(|l| l["layout"] == "classic").unwrap();
        assert_eq!(classic["bits"], 200_000_000_000u64);
        assert_eq!(classic["bytes"], 25_000_000_000u64);
        assert_eq!(classic["k"], 14);
        assert_eq!(classic["bits_per_item"], 20.0);
        let fp = classic["predicted_fp"].as_f64().unwrap();
        assert!((0.00006..0.00007).contains(&fp), "{fp}");
        let blocked = layouts.iter().find(|l| l["layout"] == "blocked").unwrap();
        let bpi = blocked["bits_per_item"].as_f64().unwrap();
        // Sized for hash id 3's probes (22.03 for hash ids 1 and 2).
        assert!((22.1..22.2).contains(&bpi), "{bpi}");
        assert!(blocked["bytes"].as_u64().unwrap() < 30_000_000_000);
        assert!(blocked["predicted_fp"].as_f64().unwrap() <= 1e-4);
        let opt = v["classic_optimum"]["bits_per_item"].as_f64().unwrap();
        assert!((opt - 19.17).abs() < 0.01);
    }
    bg().args(["plan", "-n", "1e10", "-p", "1e-4"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("19.17 bits per item")
                .and(predicate::str::contains("classic")),
        );
}

#[test]
fn plan_usage_errors_exit_2() {
    for (n, p) in [
        ("0", "0.01"),
        ("10", "0"),
        ("10", "1"),
        ("10", "-0.5"),
        ("ten", "0.1"),
        ("10", "x"),
        ("1.5", "0.1"),
    ] {
        bg().args(["plan", "--items", n, "--fp", p])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("error"));
    }
    bg().args(["frobnicate"]).assert().code(2);
}

#[test]
fn plan_prefix_sizes_per_query() {
    let out = bg()
        .args([
            "plan", "-n", "1000000", "-p", "1e-4", "--match", "prefix", "--json",
        ])
        .output()
        .unwrap();
    let v = json(&out.stdout);
    assert_eq!(v["lookups_per_query"], 30);
    for l in v["layouts"].as_array().unwrap() {
        let per_query = l["predicted_fp_per_query"].as_f64().unwrap();
        assert!(per_query <= 1e-4, "{per_query}");
        assert!(l["bits_per_item"].as_f64().unwrap() > 25.0);
    }
}

fn urls(n: usize, tag: &str) -> String {
    (0..n)
        .map(|i| format!("http://{tag}{i}.example/path/{i}\n"))
        .collect()
}

#[test]
fn build_check_count_json_and_info() {
    let d = Dir::new();
    let input = d.write("list.txt", urls(20_000, "evil").as_bytes());
    let f = d.path("f.bgf");
    bg().args([
        "build",
        "-n",
        "20000",
        "-p",
        "0.001",
        "-o",
        s(&f),
        s(&input),
    ])
    .assert()
    .success()
    .stderr(predicate::str::contains("20,000 lines").and(predicate::str::contains("lines/s")));
    // Every entry is found (zero false negatives), even written messily.
    let messy: String = (0..20_000)
        .map(|i| format!("HTTP://EVIL{i}.example:80/path/./x/../{i}#frag\n"))
        .collect();
    let q = d.write("q.txt", messy.as_bytes());
    bg().args(["check", "--count", s(&f), s(&q)])
        .assert()
        .success()
        .stdout("20000\n");
    // Non-members: about p of them.
    let good = d.write("good.txt", urls(20_000, "good").as_bytes());
    let out = bg()
        .args(["check", "--count", s(&f), s(&good)])
        .output()
        .unwrap();
    let fp: u64 = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(fp < 100, "{fp} false positives of 20000 at p = 0.001");
    // Lines mode prints exactly the hits, in input order.
    let mixed = d.write(
        "mixed.txt",
        b"http://good1.example/\nhttp://evil7.example/path/7\nhttp://evil3.example/path/3\n",
    );
    bg().args(["check", s(&f), s(&mixed)])
        .assert()
        .success()
        .stdout("http://evil7.example/path/7\nhttp://evil3.example/path/3\n");
    // JSON lines.
    let out = bg()
        .args(["check", "--json", s(&f)])
        .write_stdin("http://evil5.example/path/5\n")
        .output()
        .unwrap();
    let v = json(&out.stdout);
    assert_eq!(v["hit"], true);
    assert_eq!(v["whitelisted"], false);
    assert_eq!(v["matched"], "evil5.example/path/5");
    // info
    let out = bg()
        .args(["info", "--json", "--verify", s(&f)])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v = json(&out.stdout);
    assert_eq!(v["layout"], "blocked");
    // `items` counts insertions that set a new bit: an entry that was already
    // a false positive (about p of them) is not counted.
    let items = v["items"].as_u64().unwrap();
    assert!((19_950..=20_000).contains(&items), "{items}");
    assert_eq!(v["key_kind"], "url");
    assert!(v["bits"].as_u64().unwrap() > 20000 * 14);
    assert!(v["k"].as_u64().unwrap() >= 8);
    let fill = v["fill_ratio"].as_f64().unwrap();
    assert!(fill > 0.3 && fill < 0.6, "{fill}");
    assert!(v["predicted_fp"].as_f64().unwrap() <= 0.001);
    bg().args(["info", s(&f)])
        .assert()
        .success()
        .stdout(predicate::str::contains("layout          blocked"));
}

#[test]
fn build_from_stdin_gz_and_zst_with_crlf() {
    let d = Dir::new();
    let text = "raw-a\r\nraw-b\n\n\nraw-c";
    let gz = d.path("in.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::default(),
    );
    enc.write_all(b"raw-gz-1\nraw-gz-2\n").unwrap();
    enc.finish().unwrap();
    let zst = d.path("in.zst");
    std::fs::write(
        &zst,
        zstd::encode_all(&b"raw-zst-1\r\nraw-zst-2\n"[..], 3).unwrap(),
    )
    .unwrap();
    let f = d.path("r.bgf");
    bg().args([
        "build",
        "--keys",
        "raw",
        "--layout",
        "classic",
        "-n",
        "100",
        "-p",
        "0.0001",
        "-o",
        s(&f),
        "-",
        s(&gz),
        s(&zst),
    ])
    .write_stdin(text)
    .assert()
    .success()
    .stderr(predicate::str::contains("7 lines"));
    bg().args(["check", s(&f)])
        .write_stdin(
            "raw-a\nraw-b\nraw-c\nraw-gz-1\nraw-gz-2\nraw-zst-1\nraw-zst-2\nraw-a\r\nnope\n",
        )
        .assert()
        .success()
        // A query line is printed without its line ending (CR included).
        .stdout("raw-a\nraw-b\nraw-c\nraw-gz-1\nraw-gz-2\nraw-zst-1\nraw-zst-2\nraw-a\n");
}

#[test]
fn over_planned_items_warns_with_new_rate() {
    let d = Dir::new();
    let f = d.path("o.bgf");
    bg().args([
        "build",
        "--keys",
        "raw",
        "-n",
        "100",
        "-p",
        "0.01",
        // Over-planned on purpose: such a build is useless, written only
        // when asked for explicitly.
        "--allow-useless",
        "-o",
        s(&f),
    ])
    .write_stdin((0..1000).map(|i| format!("k{i}\n")).collect::<String>())
    .assert()
    .success()
    .stderr(
        predicate::str::contains("exceed the planned 100")
            .and(predicate::str::contains("false-positive rate is now")),
    );
}

#[test]
fn invalid_and_too_long_lines_are_reported_with_line_numbers() {
    let d = Dir::new();
    let long = "a".repeat(70_000);
    let input = d.write(
        "in.txt",
        format!("http://ok.example/\nhttp:///nohost\n{long}\nhttp://fine.example/x\n").as_bytes(),
    );
    let f = d.path("u.bgf");
    bg().args(["build", "-n", "10", "-p", "0.01", "-o", s(&f), s(&input)])
        .assert()
        .success()
        .stderr(
            predicate::str::contains("in.txt:2: invalid url entry")
                .and(predicate::str::contains(
                    "in.txt:3: invalid url entry: line longer than 65536 bytes",
                ))
                .and(predicate::str::contains("2 new items")),
        );
    bg().args(["check", "--count", s(&f)])
        .write_stdin("http://ok.example/\nhttp://fine.example/x\n")
        .assert()
        .stdout("2\n");
    // --strict: the first invalid entry is fatal and no file is written.
    let g = d.path("strict.bgf");
    bg().args([
        "build",
        "--strict",
        "-n",
        "10",
        "-p",
        "0.01",
        "-o",
        s(&g),
        s(&input),
    ])
    .assert()
    .code(1)
    .stderr(predicate::str::contains("in.txt:2: invalid url entry"));
    assert!(!g.exists());
    // Only in.txt and u.bgf: no temporary file left behind.
    assert_eq!(
        std::fs::read_dir(d.0.path()).unwrap().count(),
        2,
        "no temp file left"
    );
}

#[test]
fn add_in_place_and_union() {
    let d = Dir::new();
    let a = d.path("a.bgf");
    let b = d.path("b.bgf");
    for (f, tag) in [(&a, "a"), (&b, "b")] {
        bg().args([
            "build",
            "--keys",
            "raw",
            "--seed",
            "0x1234",
            "-n",
            "5000",
            "-p",
            "0.001",
            "-o",
            s(f),
        ])
        .write_stdin((0..2000).map(|i| format!("{tag}{i}\n")).collect::<String>())
        .assert()
        .success();
    }
    bg().args(["add", s(&a)])
        .write_stdin("late-1\nlate-2\n")
        .assert()
        .success();
    bg().args(["info", "--verify", s(&a)]).assert().success();
    bg().args(["check", "--count", s(&a)])
        .write_stdin("late-1\nlate-2\na5\n")
        .assert()
        .stdout("3\n");
    // A filter of hundreds of checksum pages: `add` rehashes only the pages
    // it changes, and the result must still verify.
    let big = d.path("big.bgf");
    bg().args([
        "build",
        "--keys",
        "raw",
        "-n",
        "1000000",
        "-p",
        "0.001",
        "-o",
        s(&big),
    ])
    .write_stdin("x1\nx2\n")
    .assert()
    .success();
    bg().args(["add", s(&big)])
        .write_stdin("y1\ny2\ny3\n")
        .assert()
        .success();
    bg().args(["info", "--verify", s(&big)]).assert().success();
    bg().args(["check", "--count", s(&big)])
        .write_stdin("x1\nx2\ny1\ny2\ny3\n")
        .assert()
        .stdout("5\n");
    let c = d.path("c.bgf");
    bg().args(["union", s(&a), s(&b), "-o", s(&c)])
        .assert()
        .success();
    let all: String = (0..2000)
        .map(|i| format!("a{i}\nb{i}\n"))
        .collect::<String>()
        + "late-1\n";
    bg().args(["check", "--count", s(&c)])
        .write_stdin(all)
        .assert()
        .stdout("4001\n");
    bg().args(["info", "--verify", s(&c)]).assert().success();
    // Different seeds cannot be combined.
    let e = d.path("e.bgf");
    bg().args([
        "build",
        "--keys",
        "raw",
        "--seed",
        "7",
        "-n",
        "5000",
        "-p",
        "0.001",
        "-o",
        s(&e),
    ])
    .write_stdin("x\n")
    .assert()
    .success();
    bg().args(["union", s(&a), s(&e), "-o", s(&d.path("bad.bgf"))])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("seed"));
    // Output exists: refuse without --force.
    bg().args(["union", s(&a), s(&b), "-o", s(&c)])
        .assert()
        .code(2);
}

/// `union` reads every byte of its inputs: one whose data was zeroed (its
/// header, seed and size intact) is refused with exit 1 naming it, and no
/// output is left, instead of a union that verifies and lacks its items.
#[test]
fn union_refuses_an_input_whose_data_fails_its_checksum() {
    let d = Dir::new();
    let (a, z) = (d.path("a.bgf"), d.path("z.bgf"));
    for (f, tag) in [(&a, "a"), (&z, "z")] {
        bg().args([
            "build",
            "--keys",
            "raw",
            "--seed",
            "42",
            "-n",
            "20000",
            "-p",
            "0.001",
            "-o",
            s(f),
        ])
        .write_stdin(
            (0..20000)
                .map(|i| format!("{tag}{i}\n"))
                .collect::<String>(),
        )
        .assert()
        .success();
    }
    // Zero the data (everything after the header).
    let mut bytes = std::fs::read(&z).unwrap();
    bytes[bloomgate_engine::format::HEADER_LEN..].fill(0);
    std::fs::write(&z, &bytes).unwrap();
    let u = d.path("u.bgf");
    for (x, y) in [(&a, &z), (&z, &a)] {
        bg().args(["union", s(x), s(y), "-o", s(&u)])
            .assert()
            .code(1)
            .stderr(predicate::str::contains("z.bgf").and(predicate::str::contains("checksum")));
        assert!(!u.exists(), "a refused union left {}", u.display());
    }
    // Two sound inputs still combine, and the result verifies.
    let b = d.path("b.bgf");
    bg().args([
        "build",
        "--keys",
        "raw",
        "--seed",
        "42",
        "-n",
        "20000",
        "-p",
        "0.001",
        "-o",
        s(&b),
    ])
    .write_stdin((0..20000).map(|i| format!("z{i}\n")).collect::<String>())
    .assert()
    .success();
    bg().args(["union", s(&a), s(&b), "-o", s(&u)])
        .assert()
        .success();
    bg().args(["info", "--verify", s(&u)]).assert().success();
    bg().args(["check", "--count", s(&u)])
        .write_stdin((0..20000).map(|i| format!("z{i}\n")).collect::<String>())
        .assert()
        .stdout("20000\n");
}

#[test]
fn corrupted_files_give_one_line_errors() {
    let d = Dir::new();
    let f = d.path("c.bgf");
    bg().args([
        "build",
        "--keys",
        "raw",
        "-n",
        "1000",
        "-p",
        "0.01",
        "-o",
        s(&f),
    ])
    .write_stdin("a\nb\n")
    .assert()
    .success();
    let good = std::fs::read(&f).unwrap();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (good[..good.len() - 10].to_vec(), "truncated"),
        (
            {
                let mut b = good.clone();
                b[0] = b'X';
                b
            },
            "wrong magic",
        ),
        (
            {
                let mut b = good.clone();
                b[8] = 9;
                b
            },
            "newer",
        ),
        (
            {
                let mut b = good.clone();
                b[40] ^= 1;
                b
            },
            "header is corrupted",
        ),
        (b"hello\n".to_vec(), "not a bloomgate filter"),
    ];
    for (bytes, needle) in cases {
        std::fs::write(&f, &bytes).unwrap();
        for cmd in [vec!["info"], vec!["check"]] {
            let out = bg()
                .args(&cmd)
                .arg(s(&f))
                .write_stdin("a\n")
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(1), "{needle}");
            let err = String::from_utf8(out.stderr).unwrap();
            assert!(
                err.contains("c.bgf") && err.contains(needle),
                "{needle}: {err}"
            );
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        }
    }
    // Data corruption is caught by --verify.
    let mut b = good.clone();
    let n = b.len();
    b[n - 1] ^= 0x55;
    std::fs::write(&f, &b).unwrap();
    bg().args(["info", s(&f)]).assert().success();
    bg().args(["info", "--verify", s(&f)])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("data is corrupted"));
    bg().args(["check", "--verify", s(&f)])
        .write_stdin("a\n")
        .assert()
        .code(1);
    bg().args(["info", s(&d.path("missing.bgf"))])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("missing.bgf"));
}

#[test]
fn key_kind_is_stored_and_mismatch_is_refused() {
    let d = Dir::new();
    let f = d.path("h.bgf");
    bg().args([
        "build",
        "--keys",
        "host",
        "-n",
        "100",
        "-p",
        "0.001",
        "-o",
        s(&f),
    ])
    .write_stdin("Evil.COM\n")
    .assert()
    .success();
    bg().args(["check", "--keys", "url", s(&f)])
        .write_stdin("evil.com\n")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("holds host keys"));
    bg().args(["check", "--keys", "host", s(&f)])
        .write_stdin("evil.com\nsub.evil.com\nhttps://a.b.evil.com/x?y\nbob@mail.evil.com\ngood.com\nevil.com.good.org\n")
        .assert()
        .success()
        .stdout("evil.com\nsub.evil.com\nhttps://a.b.evil.com/x?y\nbob@mail.evil.com\n");
}

#[test]
fn email_and_prefix_modes() {
    let d = Dir::new();
    let e = d.path("e.bgf");
    bg().args([
        "build",
        "--keys",
        "email",
        "-n",
        "100",
        "-p",
        "0.001",
        "-o",
        s(&e),
    ])
    .write_stdin("Spammer@Evil.COM\n")
    .assert()
    .success();
    bg().args(["check", s(&e)])
        .write_stdin("Spammer@evil.com\nspammer@evil.com\nSpammer@EVIL.com\n")
        .assert()
        .success()
        .stdout("Spammer@evil.com\nSpammer@EVIL.com\n");
    let p = d.path("p.bgf");
    bg().args([
        "build",
        "--match",
        "prefix",
        "-n",
        "100",
        "-p",
        "0.001",
        "-o",
        s(&p),
    ])
    .write_stdin("evil.com/\nhttp://bad.org/phish/\n")
    .assert()
    .success();
    let out = bg()
        .args(["check", "--json", s(&p)])
        .write_stdin("http://www.evil.com/any/thing?q=1\nhttp://bad.org/phish/login.html\nhttp://bad.org/other\n")
        .output()
        .unwrap();
    let lines: Vec<Value> = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(json)
        .collect();
    assert_eq!(lines[0]["matched"], "evil.com/");
    assert_eq!(lines[1]["matched"], "bad.org/phish/");
    assert_eq!(lines[2]["hit"], false);
}

#[test]
fn whitelist_round_trip() {
    let d = Dir::new();
    let f = d.path("w.bgf");
    bg().args(["build", "-n", "100", "-p", "0.001", "-o", s(&f)])
        .write_stdin("http://fp.example/\n")
        .assert()
        .success();
    bg().args(["whitelist", "add", s(&f), "HTTP://FP.example:80/"])
        .assert()
        .success();
    bg().args(["whitelist", "add", s(&f), "http://not-a-hit.example/"])
        .assert()
        .success()
        .stderr(predicate::str::contains("is not a hit"));
    bg().args(["whitelist", "list", s(&f)])
        .assert()
        .stdout("fp.example/\nnot-a-hit.example/\n");
    let out = bg()
        .args(["check", "--json", s(&f)])
        .write_stdin("http://fp.example/\n")
        .output()
        .unwrap();
    let v = json(&out.stdout);
    assert_eq!(v["hit"], false);
    assert_eq!(v["whitelisted"], true);
    bg().args(["check", "--count", s(&f)])
        .write_stdin("http://fp.example/\n")
        .assert()
        .stdout("0\n");
    bg().args(["whitelist", "remove", s(&f), "http://fp.example/"])
        .assert()
        .success();
    bg().args(["check", "--count", s(&f)])
        .write_stdin("http://fp.example/\n")
        .assert()
        .stdout("1\n");
    // A damaged whitelist is an error, not an empty list.
    std::fs::write(d.path("w.bgf.whitelist"), "garbage\n").unwrap();
    bg().args(["check", s(&f)])
        .write_stdin("x\n")
        .assert()
        .code(1)
        .stderr(predicate::str::contains("whitelist"));
}

#[test]
fn url_canon_and_expressions() {
    bg().args([
        "url",
        "canon",
        "HTTP://WWW.Evil.COM:80/a/./b/../c#top",
        "http://3279880203/blah",
    ])
    .assert()
    .success()
    .stdout("http://www.evil.com/a/c\nhttp://195.127.0.11/blah\n");
    bg().args(["url", "canon"])
        .write_stdin("http://ok.example/\nhttp:///nohost\nhttp://also.ok/\n")
        .assert()
        .code(1)
        .stdout("http://ok.example/\nhttp://also.ok/\n")
        .stderr(predicate::str::contains("line 2"));
    let out = bg()
        .args(["url", "expressions", "http://a.b.c/1/2.html?param=1"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for e in [
        "a.b.c/1/2.html?param=1",
        "a.b.c/1/2.html",
        "a.b.c/",
        "a.b.c/1/",
        "b.c/1/2.html?param=1",
        "b.c/",
    ] {
        assert!(text.lines().any(|l| l == e), "{e} missing from {text}");
    }
    assert_eq!(text.lines().count(), 8);
}

#[test]
fn build_counts_entries_when_items_is_left_out() {
    let d = Dir::new();
    let a = d.write("a.txt", b"http://one.example/\n\nhttp://two.example/\n");
    let b = d.write("b.txt", b"http://three.example/\r\n");
    let f = d.path("f.bgf");
    let out = bg()
        .args(["build", "-p", "1e-4", "-o", s(&f), s(&a), s(&b)])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("counted 3 entries"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(
        &bg()
            .args(["info", "--json", s(&f)])
            .output()
            .unwrap()
            .stdout,
    );
    assert_eq!(v["planned_items"], 3);
    // Standard input cannot be counted first: a usage error, nothing written.
    bg().args(["build", "-p", "1e-4", "-o", s(&d.path("g.bgf"))])
        .write_stdin("http://one.example/\n")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--items is required"));
    assert!(!d.path("g.bgf").exists());
}

#[test]
fn serve_options_are_checked_by_the_one_definition() {
    // Zero would mean "never" or "at once": refused, not silently changed.
    for opt in ["--snapshot-secs", "--idle-secs", "--request-secs"] {
        bg().args(["serve", "--data-dir", ".", opt, "0"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(opt));
    }
    bg().args(["serve", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("--request-secs"));
}

#[test]
fn info_reports_the_fill_from_the_header() {
    let d = Dir::new();
    let list = d.write(
        "l.txt",
        (0..5000)
            .map(|i| format!("http://h{i}.example/\n"))
            .collect::<String>()
            .as_bytes(),
    );
    let f = d.path("f.bgf");
    bg().args(["build", "-n", "5000", "-p", "1e-4", "-o", s(&f), s(&list)])
        .assert()
        .success();
    let before = json(
        &bg()
            .args(["info", "--json", s(&f)])
            .output()
            .unwrap()
            .stdout,
    );
    assert_eq!(before["ones_recorded"], true);
    // Flip bits of the data, not the header: `info` does not read the data,
    // so it reports the sealed fill; `--verify` reads it and refuses.
    let mut bytes = std::fs::read(&f).unwrap();
    for b in &mut bytes[4096 + 64..4096 + 128] {
        *b = !*b;
    }
    std::fs::write(&f, &bytes).unwrap();
    let after = json(
        &bg()
            .args(["info", "--json", s(&f)])
            .output()
            .unwrap()
            .stdout,
    );
    assert_eq!(after["fill_ratio"], before["fill_ratio"]);
    assert_eq!(after["estimated_items"], before["estimated_items"]);
    bg().args(["info", "--verify", s(&f)])
        .assert()
        .code(1)
        .stderr(predicate::str::contains("corrupted"));
}

#[test]
fn single_label_host_entries_are_reported_at_build() {
    let d = Dir::new();
    let list = d.write(
        "hosts.txt",
        b"evil.com\ncom12786312634\nlocalhost\n1.2.3.4\n[::1]\nok.example\n",
    );
    let f = d.path("h.bgf");
    let out = bg()
        .args([
            "build",
            "--keys",
            "host",
            "-n",
            "100",
            "-p",
            "1e-4",
            "-o",
            s(&f),
            s(&list),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: 2 host entries of a single label")
            && err.contains("hosts.txt:2, ")
            && err.contains("hosts.txt:3)"),
        "{err}"
    );
    // Still added, and matched exactly — but not as a parent domain.
    bg().args(["check", "--count", s(&f)])
        .write_stdin("com12786312634\nsub.com12786312634\nsub.evil.com\n")
        .assert()
        .success()
        .stdout("2\n");
    // A warning, not an invalid entry: --strict does not fail on it.
    let out = bg()
        .args([
            "build", "--strict", "--keys", "host", "-n", "100", "-p", "1e-4", "-o",
        ])
        .arg(d.path("strict.bgf"))
        .arg(&list)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("single label"));
    // Lists without such entries say nothing.
    let clean = d.write("clean.txt", b"evil.com\nok.example\n");
    let out = bg()
        .args(["build", "--keys", "host", "-n", "100", "-p", "1e-4", "-o"])
        .arg(d.path("c.bgf"))
        .arg(&clean)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("single label"));
}

#[test]
fn url_arguments_are_bytes_and_dash_is_standard_input() {
    use std::os::unix::ffi::OsStrExt;
    // Safe Browsing's own example: bytes that are not UTF-8, given as an
    // argument, are escaped as on standard input.
    let raw = std::ffi::OsStr::from_bytes(b"http://\x01\x80.com/");
    bg().arg("url")
        .arg("canon")
        .arg(raw)
        .assert()
        .success()
        .stdout("http://%01%80.com/\n");
    bg().args(["url", "canon"])
        .write_stdin(&b"http://\x01\x80.com/\n"[..])
        .assert()
        .success()
        .stdout("http://%01%80.com/\n");
    // `-` reads standard input, between arguments too; it is not the host "-".
    bg().args([
        "url",
        "canon",
        "http://first.example/",
        "-",
        "http://last.example/",
    ])
    .write_stdin("HTTP://MIDDLE.example:80/a/../b\n")
    .assert()
    .success()
    .stdout("http://first.example/\nhttp://middle.example/b\nhttp://last.example/\n");
    bg().args(["url", "expressions", "-"])
        .write_stdin("http://a.b/x\n")
        .assert()
        .success()
        .stdout("a.b/x\na.b/\n");
    bg().arg("url")
        .arg("expressions")
        .arg(std::ffi::OsStr::from_bytes(b"http://\xff.example/p"))
        .assert()
        .success()
        .stdout(predicate::str::contains("%FF.example/"));
}

#[test]
fn real_disposable_domain_list_as_hosts() {
    let list =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/disposable-email-domains.txt");
    let d = Dir::new();
    let f = d.path("disposable.bgf");
    bg().args([
        "build",
        "--keys",
        "host",
        "-n",
        "130000",
        "-p",
        "1e-4",
        "-o",
        s(&f),
        s(&list),
    ])
    .assert()
    .success()
    .stderr(predicate::str::contains("121,570 lines"));
    let domains: Vec<String> = std::fs::read_to_string(&list)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    // Every listed domain, as an address, a URL and a subdomain, is a hit.
    let queries: String = domains
        .iter()
        .map(|dm| format!("someone@{dm}\nhttps://www.{dm}/signup?x=1\nmx1.{dm}\n"))
        .collect();
    bg().args(["check", "--count", s(&f)])
        .write_stdin(queries)
        .assert()
        .success()
        .stdout(format!("{}\n", domains.len() * 3));
    // Real mail providers are not.
    bg().args(["check", s(&f)])
        .write_stdin(
            "alice@gmail.com\nbob@outlook.com\nhttps://www.wikipedia.org/\ncarol@posteo.de\n",
        )
        .assert()
        .success()
        .stdout("");
}

#[test]
fn closed_stdout_is_success() {
    let d = Dir::new();
    let f = d.path("b.bgf");
    bg().args([
        "build",
        "--keys",
        "raw",
        "-n",
        "300000",
        "-p",
        "0.01",
        "-o",
        s(&f),
    ])
    .write_stdin((0..300_000).map(|i| format!("{i}\n")).collect::<String>())
    .assert()
    .success();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("bloomgate"))
        .args(["check", s(&f)])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let data: String = (0..300_000).map(|i| format!("{i}\n")).collect();
        let _ = stdin.write_all(data.as_bytes());
    });
    drop(child.stdout.take()); // the reader goes away at once, like `| head -0`
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
