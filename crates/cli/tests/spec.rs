//! One filter specification for every front end: the same out-of-range
//! value refused with the same limit over HTTP, the Redis protocol and the
//! CLI; one vocabulary (`--items`/`--fp`, with `--capacity`/`--error-rate`
//! as aliases); settings that cannot apply to an existing dedup state
//! refused; `create`; and rates shown per query first.

use std::io::Write;
use std::process::{Command, Stdio};

use testkit::{bg, ok, p, write_lines, Server, V};

fn dedup(args: &[&str], input: &str) -> std::process::Output {
    let mut child = Command::new(testkit::bin())
        .arg("dedup")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A refused run exits before it reads its input: the write then fails
    // with a broken pipe, and what the run said is still read below.
    match child.stdin.take().unwrap().write_all(input.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        r => r.unwrap(),
    }
    child.wait_with_output().unwrap()
}

fn info(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&ok(&bg(&["info", "--json", p(path)]))).unwrap()
}

fn err(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// An expansion past RedisBloom's 32768 is refused by `POST /v1/filters`,
/// `BF.RESERVE`, `BF.INSERT`, `build` and `create`, each naming 32768;
/// 32768 itself is taken by all of them. (Today's HTTP and RESP limits
/// were written separately: 1..=32768 and 0..=32768.)
#[test]
fn the_same_out_of_range_expansion_is_refused_on_every_protocol_with_the_same_limit() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let s = Server::start(&data, &[]);
    let body = |name: &str, e: u64| {
        format!(
            r#"{{"name": "{name}", "items": 100, "fp": 0.01, "policy": "grow", "expansion": {e}}}"#
        )
    };
    let (st, v) = s.http("POST", "/v1/filters", Some(&body("h", 32769)), None);
    assert_eq!(st, 400, "{v}");
    let http = v.to_string();
    assert!(http.contains("32768"), "{http}");
    let (st, v) = s.http("POST", "/v1/filters", Some(&body("h", 32768)), None);
    assert_eq!(st, 201, "{v}");
    // A grow filter of expansion 0 is no grow filter, on HTTP as in the
    // library (RESP's `EXPANSION 0` is RedisBloom's way to say NONSCALING).
    let (st, v) = s.http("POST", "/v1/filters", Some(&body("h0", 0)), None);
    assert_eq!(st, 400, "{v}");
    assert!(v.to_string().contains("1..=32768"), "{v}");

    let mut c = s.resp();
    let resp = c.cmd(&["BF.RESERVE", "r", "0.01", "100", "EXPANSION", "32769"]);
    assert!(resp.err().contains("32768"), "{resp:?}");
    assert_eq!(
        c.cmd(&["BF.RESERVE", "r", "0.01", "100", "EXPANSION", "32768"]),
        V::Simple("OK".into())
    );
    let insert = c.cmd(&["BF.INSERT", "i", "EXPANSION", "32769", "ITEMS", "a"]);
    assert!(insert.err().contains("expansion"), "{insert:?}");

    let list = dir.path().join("list.txt");
    write_lines(&list, ["a", "b"]);
    for cmd in ["build", "create"] {
        let out = dir.path().join(format!("{cmd}.bgf"));
        let mut args = vec![
            cmd, "--keys", "raw", "-n", "100", "-p", "0.01", "--policy", "grow", "-o",
        ];
        if cmd == "create" {
            args.pop();
        }
        args.push(p(&out));
        let mut refused = args.clone();
        refused.extend(["--expansion", "32769"]);
        if cmd == "build" {
            refused.push(p(&list));
        }
        let o = bg(&refused);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {o:?}");
        assert!(err(&o).contains("1..=32768"), "{cmd}: {}", err(&o));
        assert!(!out.exists(), "{cmd}");
        let mut taken = args.clone();
        taken.extend(["--expansion", "32768"]);
        if cmd == "build" {
            taken.push(p(&list));
        }
        ok(&bg(&taken));
        assert_eq!(info(&out)["expansion"], 32768, "{cmd}");
    }
    // The same message on HTTP and the CLI: it comes from one place.
    let o = bg(&[
        "create",
        "-n",
        "100",
        "-p",
        "0.01",
        "--keys",
        "raw",
        "--policy",
        "grow",
        "--expansion",
        "32769",
        p(&dir.path().join("x.bgf")),
    ]);
    assert!(
        http.contains(err(&o).trim().trim_start_matches("bloomgate: ")),
        "{http} / {}",
        err(&o)
    );
}

/// `--capacity`/`--error-rate` are aliases of `--items`/`--fp` everywhere,
/// and the help names the one vocabulary.
#[test]
fn one_vocabulary_with_the_others_as_aliases() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.bgf");
    let b = dir.path().join("b.bgf");
    let input = "k1\nk2\nk1\n";
    let o = dedup(
        &[
            "--state",
            p(&a),
            "--keys",
            "raw",
            "--items",
            "5000",
            "--fp",
            "1e-5",
        ],
        input,
    );
    assert_eq!(ok(&o), "k1\nk2\n");
    let o = dedup(
        &[
            "--state",
            p(&b),
            "--keys",
            "raw",
            "--capacity",
            "5000",
            "--error-rate",
            "1e-5",
        ],
        input,
    );
    assert_eq!(ok(&o), "k1\nk2\n");
    let (va, vb) = (info(&a), info(&b));
    for field in ["bits", "k", "planned_items", "target_fp", "policy"] {
        assert_eq!(va[field], vb[field], "{field}");
    }
    assert_eq!(va["planned_items"], 5000);
    let list = dir.path().join("l.txt");
    write_lines(&list, ["http://a.example/"]);
    let c = dir.path().join("c.bgf");
    ok(&bg(&[
        "build",
        "--capacity",
        "1000",
        "--error-rate",
        "1e-4",
        "-o",
        p(&c),
        p(&list),
    ]));
    assert_eq!(info(&c)["planned_items"], 1000);
    for cmd in ["dedup", "build", "plan", "create"] {
        let help = ok(&bg(&[cmd, "--help"]));
        assert!(help.contains("--items"), "{cmd}: {help}");
        assert!(help.contains("--fp"), "{cmd}: {help}");
        // clap writes one visible alias as `[alias: --x]`.
        assert!(help.contains("alias: --capacity]"), "{cmd}: {help}");
        assert!(help.contains("alias: --error-rate]"), "{cmd}: {help}");
    }
}

/// On an existing state, a size, rate, layout or policy setting that
/// differs from the state's is refused (exit 2) and named, and the state
/// is left as it was; the same command line run again is accepted.
#[test]
fn a_setting_that_cannot_apply_to_an_existing_state_is_refused_not_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("seen.bgf");
    ok(&dedup(&["--state", p(&state)], "http://a.example/\n"));
    let before = std::fs::read(&state).unwrap();
    let o = dedup(
        &[
            "--state",
            p(&state),
            "--capacity",
            "1e8",
            "--error-rate",
            "1e-9",
        ],
        "http://b.example/\n",
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let e = err(&o);
    assert!(e.contains("existing state"), "{e}");
    assert!(
        e.contains("--items 100,000,000 (the state was made for 1,000,000)"),
        "{e}"
    );
    assert!(e.contains("--fp 1e-9 (the state was made for 1e-6)"), "{e}");
    assert!(o.stdout.is_empty(), "nothing passed");
    assert_eq!(
        std::fs::read(&state).unwrap(),
        before,
        "the state is unchanged"
    );
    for (args, named) in [
        (&["--layout", "classic"][..], "--layout classic"),
        (&["--expansion", "4"], "--expansion 4"),
        (&["--window", "5"], "does not apply to the grow policy"),
        (&["--policy", "refuse"], "cannot be changed to refuse"),
    ] {
        let mut all = vec!["--state", p(&state)];
        all.extend_from_slice(args);
        let o = dedup(&all, "http://b.example/\n");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        assert!(err(&o).contains(named), "{args:?}: {}", err(&o));
    }
    // The values it was made with, given again: accepted.
    let o = dedup(
        &[
            "--state",
            p(&state),
            "--items",
            "1e6",
            "--fp",
            "1e-6",
            "--layout",
            "blocked",
            "--policy",
            "grow",
            "--expansion",
            "2",
        ],
        "http://a.example/\nhttp://b.example/\n",
    );
    assert_eq!(ok(&o), "http://b.example/\n");
    // A ring's settings are compared too.
    let ring = dir.path().join("ring.bgf");
    let args = [
        "--state",
        p(&ring),
        "--keys",
        "raw",
        "--policy",
        "rotate",
        "--generations",
        "3",
        "--window",
        "100",
    ];
    ok(&dedup(&args, "x\n"));
    ok(&dedup(&args, "y\n"));
    let o = dedup(&["--state", p(&ring), "--generations", "4"], "z\n");
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        err(&o).contains("--generations 4 (the state has 3)"),
        "{}",
        err(&o)
    );
}

/// `create` makes an empty filter file from a spec; it refuses to
/// overwrite, refuses a forgetting policy for a url blacklist, and a
/// dedup state it creates is used by `dedup`.
#[test]
fn create_makes_an_empty_filter() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("f.bgf");
    let o = bg(&[
        "create",
        "-n",
        "5000",
        "-p",
        "1e-4",
        "--keys",
        "host",
        p(&f),
    ]);
    let e = err(&ok_and(o));
    assert!(e.contains("created"), "{e}");
    let v = info(&f);
    assert_eq!(v["items"], 0);
    assert_eq!(v["planned_items"], 5000);
    assert_eq!(v["key_kind"], "host");
    assert_eq!(v["policy"]["name"], "fixed");
    assert!(
        (v["target_fp_per_query"].as_f64().unwrap() - 1e-4).abs() < 1e-12,
        "{v}"
    );
    // The same spec as `build`: the same size.
    let list = dir.path().join("l.txt");
    write_lines(&list, ["a.example"]);
    let b = dir.path().join("b.bgf");
    ok(&bg(&[
        "build",
        "-n",
        "5000",
        "-p",
        "1e-4",
        "--keys",
        "host",
        "-o",
        p(&b),
        p(&list),
    ]));
    assert_eq!(info(&b)["bits"], v["bits"]);
    assert_eq!(info(&b)["k"], v["k"]);
    // No overwrite without --force.
    let o = bg(&["create", "-n", "10", "-p", "0.01", p(&f)]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    ok(&bg(&[
        "create",
        "-n",
        "10",
        "-p",
        "0.01",
        "--force",
        "--policy",
        "refuse",
        p(&f),
    ]));
    assert_eq!(info(&f)["policy"]["name"], "refuse");
    // Forgetting is for dedup and cache filters only.
    let r = dir.path().join("r.bgf");
    let o = bg(&[
        "create",
        "-n",
        "100",
        "-p",
        "0.01",
        "--policy",
        "rotate",
        p(&r),
    ]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(err(&o).contains("must never forget"), "{}", err(&o));
    ok(&bg(&[
        "create",
        "-n",
        "100",
        "-p",
        "0.01",
        "--policy",
        "rotate",
        "--purpose",
        "dedup",
        p(&r),
    ]));
    let o = dedup(
        &["--state", p(&r)],
        "http://a.example/\nhttp://a.example/\n",
    );
    assert_eq!(ok(&o), "http://a.example/\n");
    assert_eq!(info(&r)["policy"]["name"], "rotate");
}

fn ok_and(o: std::process::Output) -> std::process::Output {
    assert!(o.status.success(), "{o:?}");
    o
}

/// `--fp 1e-4` for host keys (8 lookups per query): `build`, `info` and
/// `plan` show 1e-4 per query first and the per-lookup 1.250e-5 as its
/// derivation; a repeated line is counted as already present; `union`
/// says its count is an estimate, and how good.
#[test]
fn rates_are_shown_per_query_first_and_counts_say_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("hosts.txt");
    write_lines(&list, ["a.example", "b.example", "a.example"]);
    let f = dir.path().join("h.bgf");
    let o = ok_and(bg(&[
        "build",
        "--keys",
        "host",
        "-n",
        "1000",
        "-p",
        "1e-4",
        "--seed",
        "5",
        "-o",
        p(&f),
        p(&list),
    ]));
    let e = err(&o);
    assert!(e.contains("3 lines, 2 new items, 1 already present"), "{e}");
    let per_query = e.find("per query (target 1.000e-4)").expect(&e);
    let per_lookup = e.find("per lookup").expect(&e);
    assert!(per_query < per_lookup, "{e}");
    assert!(
        e.contains("(target 1.250e-5), up to 8 lookups per query"),
        "{e}"
    );

    let text = ok(&bg(&["info", p(&f)]));
    let line = text
        .lines()
        .find(|l| l.starts_with("false positives"))
        .expect(&text);
    assert!(line.contains("(target 1.000e-4 per query)"), "{text}");
    assert!(!line.contains("1.250e-5"), "{text}");
    assert!(
        text.contains(
            "(target 1.250e-5): host keys with exact matching make up to 8 lookups per query"
        ),
        "{text}"
    );

    let plan = ok(&bg(&["plan", "-n", "1e6", "-p", "1e-4", "--keys", "host"]));
    let header = plan.lines().find(|l| l.starts_with("layout")).expect(&plan);
    assert!(
        header.find("fp/query").unwrap() < header.find("fp/lookup").unwrap(),
        "{plan}"
    );
    let blocked = plan
        .lines()
        .find(|l| l.starts_with("blocked "))
        .expect(&plan);
    let cells: Vec<&str> = blocked.split_whitespace().collect();
    let pct = |s: &str| s.trim_end_matches('%').parse::<f64>().unwrap() / 100.0;
    let (q, l) = (pct(cells[cells.len() - 2]), pct(cells[cells.len() - 1]));
    assert!((q - 1e-4).abs() < 2e-6, "{blocked}");
    assert!((l - 1.25e-5).abs() < 1e-6, "{blocked}");

    // union: ~N items, an estimate with its standard error and bounds.
    let (a, b) = (dir.path().join("a.txt"), dir.path().join("b.txt"));
    write_lines(&a, (0..5000).map(|i| format!("http://a{i}.example/")));
    write_lines(&b, (0..5000).map(|i| format!("http://b{i}.example/")));
    let (fa, fb, u) = (
        dir.path().join("a.bgf"),
        dir.path().join("b.bgf"),
        dir.path().join("u.bgf"),
    );
    for (l, f) in [(&a, &fa), (&b, &fb)] {
        ok(&bg(&[
            "build",
            "-n",
            "10000",
            "-p",
            "1e-4",
            "--seed",
            "7",
            "-o",
            p(f),
            p(l),
        ]));
    }
    let e = err(&ok_and(bg(&["union", p(&fa), p(&fb), "-o", p(&u)])));
    assert!(
        e.contains("an estimate from the bits set, not a count"),
        "{e}"
    );
    assert!(e.contains("one standard error is ±"), "{e}");
    assert!(
        e.contains("the inputs held 5,000 and 5,000, so the union holds between 5,000 and 10,000"),
        "{e}"
    );
}
