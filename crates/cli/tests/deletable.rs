//! Counting and cuckoo filters through the real binary, on real files:
//! build → check → remove → check (removed entries miss, every other entry
//! still hits), canonical forms, duplicates counted, a cuckoo filter filled
//! past capacity by `add`, `remove` on a Bloom file, `info` fields, damaged
//! files, and `add` killed or interrupted in the middle of a large input.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::{run, Dir};

const LAYOUTS: [&str; 2] = ["counting", "cuckoo"];

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs bloomgate and expects success; returns stdout and stderr.
fn ok(args: &[&str]) -> (String, String) {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "bloomgate {args:?} failed: {err}");
    (out, err)
}

/// The input lines `check` prints as hits.
fn hits(filter: &Path, queries: &Path) -> Vec<String> {
    let (out, _) = ok(&["check", s(filter), s(queries)]);
    out.lines().map(str::to_owned).collect()
}

fn info(filter: &Path) -> Value {
    let (out, _) = ok(&["info", "--json", s(filter)]);
    serde_json::from_str(&out).unwrap()
}

fn urls(range: std::ops::Range<usize>) -> Vec<String> {
    range
        .map(|i| format!("http://site{i}.example/page/{i}"))
        .collect()
}

#[test]
fn build_check_remove_check_counting() {
    build_check_remove_check("counting");
}

#[test]
fn build_check_remove_check_cuckoo() {
    build_check_remove_check("cuckoo");
}

fn build_check_remove_check(layout: &str) {
    let d = Dir::new();
    let f = d.path("f.bgf");
    let mut entries = urls(0..2000);
    entries.push("http://a.com/x".into());
    let list = d.lines("list.txt", &entries);
    let (_, err) = ok(&[
        "build",
        "--layout",
        layout,
        "--items",
        "2001",
        "--fp",
        "1e-4",
        "--seed",
        "7",
        "-o",
        s(&f),
        s(&list),
    ]);
    assert!(err.contains(&format!("in the {layout} filter")), "{err}");
    assert_eq!(hits(&f, &list).len(), 2001, "{layout}: every entry hits");

    // Remove the first 500 in other spellings of the same URLs, and
    // `HTTP://A.com/x#top` for `http://a.com/x`.
    let mut gone: Vec<String> = (0..500)
        .map(|i| format!("HTTP://SITE{i}.Example:80/page/./{i}#frag"))
        .collect();
    gone.push("HTTP://A.com/x#top".into());
    let gone_file = d.lines("gone.txt", &gone);
    let (_, err) = ok(&["remove", s(&f), s(&gone_file)]);
    assert!(err.contains("501 removed, 0 not present"), "{err}");

    // Zero false negatives: every entry not removed still hits.
    let kept = d.lines("kept.txt", &entries[500..2000]);
    assert_eq!(
        hits(&f, &kept).len(),
        1500,
        "{layout}: a kept entry was lost"
    );
    // Removed entries miss (at a 1e-4 rate, 501 lookups expect 0.05
    // false positives; the seed is fixed, so this is deterministic).
    let removed = d.lines("removed.txt", &entries[..500]);
    assert_eq!(hits(&f, &removed), Vec::<String>::new(), "{layout}");
    let ax = d.lines("ax.txt", &["http://a.com/x"]);
    assert!(
        hits(&f, &ax).is_empty(),
        "{layout}: http://a.com/x still hits"
    );
    assert_eq!(info(&f)["items"], 1500);

    // Removing them again changes nothing and says so.
    let (_, err) = ok(&["remove", s(&f), s(&gone_file)]);
    assert!(err.contains("0 removed, 501 not present"), "{err}");
    assert!(err.contains("not present (nothing changed)"), "{err}");
    assert_eq!(hits(&f, &kept).len(), 1500);

    // `add` takes them back, in any spelling.
    let (_, err) = ok(&["add", s(&f), s(&gone_file)]);
    assert!(err.contains("501 added"), "{err}");
    assert_eq!(hits(&f, &list).len(), 2001, "{layout}");
}

/// `bloomgate build --layout LAYOUT -n 100 -p 1e-4 -o F LIST`.
fn build_small(layout: &str, f: &Path, list: &Path) {
    ok(&[
        "build",
        "--layout",
        layout,
        "-n",
        "100",
        "-p",
        "1e-4",
        "-o",
        s(f),
        s(list),
    ]);
}

/// `f.bgf` of `layout`, built from two URLs, in a new directory.
fn two_urls(layout: &str) -> (Dir, PathBuf) {
    let d = Dir::new();
    let f = d.path("f.bgf");
    let list = d.lines(
        "list.txt",
        &["http://evil.example/a", "http://bad.example/"],
    );
    build_small(layout, &f, &list);
    (d, f)
}

#[test]
fn check_output_whitelist_and_exit_codes_as_for_bloom() {
    for layout in LAYOUTS {
        let (d, f) = two_urls(layout);
        let q = d.lines(
            "q.txt",
            &[
                "HTTP://EVIL.example/a#x",
                "http://good.example/",
                "http://bad.example/",
            ],
        );
        let (out, _) = ok(&["check", "--count", s(&f), s(&q)]);
        assert_eq!(out, "2\n");
        let (out, _) = ok(&["check", "--json", s(&f), s(&q)]);
        let v: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(v[0]["hit"], true);
        assert_eq!(v[0]["matched"], "evil.example/a");
        assert_eq!(v[0]["whitelisted"], false);
        assert_eq!(v[1]["hit"], false);

        // The whitelist beside the file still applies.
        std::fs::write(
            d.path("f.bgf.whitelist"),
            "# bloomgate whitelist v1\nbad.example/\n",
        )
        .unwrap();
        let (out, _) = ok(&["check", "--json", s(&f), s(&q)]);
        let v: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(v[2]["hit"], false, "{layout}: whitelisted");
        assert_eq!(v[2]["whitelisted"], true);
        assert_eq!(v[0]["hit"], true);
        assert_eq!(info(&f)["whitelist_items"], 1);

        // An invalid query: reported, exit code 1, the others answered.
        let bad = d.lines("bad.txt", &["http://evil.example/a", "http://[::1"]);
        let (code, out, err) = run(&["check", s(&f), s(&bad)]);
        assert_eq!(code, 1, "{err}");
        assert_eq!(out, "http://evil.example/a\n");
        assert!(err.contains("invalid url query"), "{err}");

        // Rules that do not match the file's: a usage error.
        let (code, _, err) = run(&["check", "--keys", "host", s(&f), s(&q)]);
        assert_eq!(code, 2);
        assert!(err.contains("holds url keys"), "{err}");
        let (code, _, err) = run(&["check", "--memory", "64", s(&f), s(&q)]);
        assert_eq!(code, 2);
        assert!(err.contains("leave out --memory"), "{err}");
    }
}

#[test]
fn host_keys_match_parent_domains_until_removed() {
    for layout in LAYOUTS {
        let d = Dir::new();
        let f = d.path("f.bgf");
        let list = d.lines("list.txt", &["Evil.Example", "other.example"]);
        ok(&[
            "build",
            "--layout",
            layout,
            "--keys",
            "host",
            "-n",
            "100",
            "-p",
            "1e-4",
            "-o",
            s(&f),
            s(&list),
        ]);
        let q = d.lines(
            "q.txt",
            &["https://a.b.evil.example/x", "joe@other.example"],
        );
        assert_eq!(hits(&f, &q).len(), 2);
        let gone = d.lines("gone.txt", &["EVIL.example."]);
        ok(&["remove", s(&f), s(&gone)]);
        assert_eq!(hits(&f, &q), vec!["joe@other.example".to_string()]);
        let (code, _, err) = run(&["remove", "--keys", "raw", s(&f), s(&gone)]);
        assert_eq!(code, 2, "{err}");
    }
}

#[test]
fn duplicates_are_counted() {
    for layout in LAYOUTS {
        let d = Dir::new();
        let f = d.path("f.bgf");
        let list = d.lines("list.txt", &["x", "x", "y"]);
        let (_, err) = ok(&[
            "build",
            "--layout",
            layout,
            "--keys",
            "raw",
            "-n",
            "100",
            "-p",
            "1e-4",
            "-o",
            s(&f),
            s(&list),
        ]);
        assert!(
            err.contains("3 added (1 of them tested present already"),
            "{err}"
        );
        let x = d.lines("x.txt", &["x"]);
        ok(&["remove", s(&f), s(&x)]);
        assert_eq!(hits(&f, &x).len(), 1, "{layout}: x was added twice");
        ok(&["remove", s(&f), s(&x)]);
        assert!(hits(&f, &x).is_empty(), "{layout}");
        assert_eq!(hits(&f, &d.lines("y.txt", &["y"])).len(), 1);
    }
}

#[test]
fn counting_counters_saturate_and_never_reach_zero() {
    let d = Dir::new();
    let f = d.path("f.bgf");
    let x15 = d.lines("x15.txt", &["x"; 15]);
    ok(&[
        "build",
        "--layout",
        "counting",
        "--keys",
        "raw",
        "-n",
        "100",
        "-p",
        "1e-3",
        "-o",
        s(&f),
        s(&x15),
    ]);
    let v = info(&f);
    let k = v["k"].as_u64().unwrap();
    // x alone is in the filter: every counter it touches is at 15. Its k
    // probes may share a counter (8 probes among a block's 128 counters
    // collide about one time in five), so it touches at most k of them.
    let touched = v["nonzero_counters"].as_u64().unwrap();
    assert!((1..=k).contains(&touched), "{v}");
    assert_eq!(v["saturated_counters"].as_u64().unwrap(), touched, "{v}");
    // Saturated counters are never decremented: 15 removes leave x present
    // (a false positive, never a false negative).
    ok(&["remove", s(&f), s(&x15)]);
    let x = d.lines("x.txt", &["x"]);
    assert_eq!(hits(&f, &x).len(), 1);
    assert_eq!(info(&f)["items"], 0);
    let (out, _) = ok(&["info", s(&f)]);
    assert!(
        out.contains(&format!("saturated       {touched} counters at 15")),
        "{out}"
    );
}

#[test]
fn info_fields() {
    let d = Dir::new();
    let list = d.lines("list.txt", &urls(0..300));
    let c = d.path("c.bgf");
    ok(&[
        "build",
        "--layout",
        "counting",
        "-n",
        "1000",
        "-p",
        "1e-4",
        "-o",
        s(&c),
        s(&list),
    ]);
    let v = info(&c);
    assert_eq!(v["layout"], "counting");
    assert_eq!(v["deletable"], true);
    assert_eq!(v["items"], 300);
    assert_eq!(v["planned_items"], 1000);
    assert_eq!(v["key_kind"], "url");
    assert_eq!(v["match_mode"], "exact");
    assert_eq!(v["counter_bits"], 4);
    assert_eq!(v["saturated_counters"], 0);
    let counters = v["counters"].as_u64().unwrap();
    assert_eq!(counters % 128, 0);
    assert_eq!(v["bytes"].as_u64().unwrap(), counters / 2);
    let nonzero = v["nonzero_counters"].as_u64().unwrap();
    // 300 items with k counters each (distinct within an item).
    let k = v["k"].as_u64().unwrap();
    assert!(nonzero <= 300 * k && nonzero > 300 * k / 2, "{v}");
    assert!((v["fill_ratio"].as_f64().unwrap() - nonzero as f64 / counters as f64).abs() < 1e-12);
    assert!((v["load"].as_f64().unwrap() - 0.3).abs() < 1e-12);
    let fp = v["predicted_fp"].as_f64().unwrap();
    assert!(fp > 0.0 && fp < 1e-4, "{v}");

    let q = d.path("q.bgf");
    ok(&[
        "build",
        "--layout",
        "cuckoo",
        "-n",
        "1000",
        "-p",
        "1e-4",
        "-o",
        s(&q),
        s(&list),
    ]);
    let v = info(&q);
    assert_eq!(v["layout"], "cuckoo");
    assert_eq!(v["items"], 300);
    assert_eq!(v["occupied_slots"], 300);
    assert_eq!(v["bucket_size"], 4);
    // f = ceil(log2(2 * 4 / 1e-4)) = 17 bits.
    assert_eq!(v["fingerprint_bits"], 17);
    let slots = v["slots"].as_u64().unwrap();
    assert_eq!(slots, v["buckets"].as_u64().unwrap() * 4);
    assert!((v["load"].as_f64().unwrap() - 300.0 / slots as f64).abs() < 1e-12);
    let (out, _) = ok(&["info", "--verify", s(&q)]);
    for want in [
        "cuckoo (17-bit fingerprints, buckets of 4 slots",
        "300 of",
        "slots occupied",
        "false positives",
        "checksum        verified",
    ] {
        assert!(out.contains(want), "{want:?} not in {out}");
    }
}

#[test]
fn full_cuckoo_add_errors_and_keeps_everything() {
    let d = Dir::new();
    let f = d.path("f.bgf");
    let first: Vec<String> = (0..50).map(|i| format!("old-{i}")).collect();
    let list = d.lines("list.txt", &first);
    ok(&[
        "build",
        "--layout",
        "cuckoo",
        "--keys",
        "raw",
        "-n",
        "100",
        "-p",
        "1e-3",
        "-o",
        s(&f),
        s(&list),
    ]);
    let slots = info(&f)["slots"].as_u64().unwrap();
    let more: Vec<String> = (0..4 * slots).map(|i| format!("new-{i}")).collect();
    let more_file = d.lines("more.txt", &more);
    let (code, _, err) = run(&["add", s(&f), s(&more_file)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("the cuckoo filter is full"), "{err}");
    assert!(err.contains("Nothing stored was lost"), "{err}");
    // "the N entries before it were added and saved"
    let n: u64 = err
        .split("; the ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("no count in {err}"));
    assert!(n > 0 && n + 50 <= slots, "{n} of {slots}");
    assert!(err.contains(&format!("more.txt:{}", n + 1)), "{err}");
    // The summary counts the lines dealt with: those added and the one that
    // found no room, not the rest of the input.
    assert!(
        err.contains(&format!("{} lines, {n} added", n + 1)),
        "{err}"
    );
    // Every entry added before, and every one of this run before it filled.
    assert_eq!(hits(&f, &list).len(), 50);
    let added = d.lines("added.txt", &more[..n as usize]);
    assert_eq!(hits(&f, &added).len(), n as usize);
    assert_eq!(info(&f)["items"].as_u64().unwrap(), 50 + n);
    ok(&["info", "--verify", s(&f)]);

    // A build whose inputs exceed the table writes nothing.
    let g = d.path("g.bgf");
    let (code, _, err) = run(&[
        "build",
        "--layout",
        "cuckoo",
        "--keys",
        "raw",
        "-n",
        "10",
        "-o",
        s(&g),
        "-p",
        "1e-3",
        s(&more_file),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("nothing was written"), "{err}");
    assert!(!g.exists());
}

#[test]
fn remove_on_a_bloom_file_is_refused() {
    let d = Dir::new();
    let list = d.lines("list.txt", &urls(0..10));
    for layout in ["blocked", "classic"] {
        let f = d.path(&format!("{layout}.bgf"));
        build_small(layout, &f, &list);
        let before = std::fs::read(&f).unwrap();
        let (code, _, err) = run(&["remove", s(&f), s(&list)]);
        assert_eq!(code, 1);
        assert!(
            err.contains(&format!(
                "is a {layout} Bloom filter, which cannot delete entries"
            )),
            "{err}"
        );
        assert!(
            err.contains("--layout counting or --layout cuckoo"),
            "{err}"
        );
        assert_eq!(std::fs::read(&f).unwrap(), before);
    }
    let (code, _, err) = run(&["remove", s(&d.path("missing.bgf")), s(&list)]);
    assert_eq!(code, 1);
    assert!(err.contains("missing.bgf"), "{err}");
    let (_, out, _) = run(&["remove", "--help"]);
    assert!(out.contains("remove only entries that were added"), "{out}");
    assert!(out.contains("false negative"), "{out}");
}

#[test]
fn build_refuses_what_does_not_apply() {
    let d = Dir::new();
    let list = d.lines("list.txt", &urls(0..10));
    let f = d.path("f.bgf");
    for layout in LAYOUTS {
        for extra in [
            &["--memory", "1K"][..],
            &["--policy", "grow"],
            &["--spill", "1G"],
        ] {
            let mut args = vec![
                "build",
                "--layout",
                layout,
                "-n",
                "1000",
                "-p",
                "1e-4",
                "-o",
                s(&f),
            ];
            args.extend_from_slice(extra);
            args.push(s(&list));
            let (code, _, err) = run(&args);
            assert_eq!(code, 2, "{extra:?}: {err}");
            assert!(err.contains(extra[0]), "{err}");
            assert!(!f.exists());
        }
        let (code, _, err) = run(&[
            "build",
            "--layout",
            layout,
            "-n",
            "1000",
            "-p",
            "1e-4",
            "--memory",
            "1G",
            "-o",
            s(&f),
            s(&list),
        ]);
        assert_eq!(code, 0, "{err}");
        std::fs::remove_file(&f).unwrap();
    }
}

// `plan` is run with few items: the Bloom rows' math is slow in a debug
// build. The 10^10 figures the README gives are pinned by the engine's
// tests of `plan_counting` / `plan_cuckoo`.

#[test]
fn plan_shows_the_cost_of_counting_beside_bloom() {
    let (out, _) = ok(&[
        "plan", "-n", "1e5", "-p", "1e-4", "--layout", "counting", "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let layouts = v["layouts"].as_array().unwrap();
    let names: Vec<&str> = layouts
        .iter()
        .map(|l| l["layout"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["blocked", "classic", "counting"]);
    let counting = &layouts[2];
    let blocked_bytes = layouts[0]["bytes"].as_u64().unwrap();
    let bytes = counting["bytes"].as_u64().unwrap();
    assert_eq!(bytes, counting["counters"].as_u64().unwrap() / 2);
    assert!(bytes > 4 * blocked_bytes, "{counting}");
    let times = counting["times_blocked"].as_f64().unwrap();
    assert!((times - bytes as f64 / blocked_bytes as f64).abs() < 1e-9);
    assert!(counting["predicted_fp"].as_f64().unwrap() <= 1e-4);
}

#[test]
fn plan_shows_the_cost_of_cuckoo_beside_bloom() {
    let (out, _) = ok(&[
        "plan", "-n", "1e5", "-p", "1e-4", "--layout", "cuckoo", "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let cuckoo = &v["layouts"][2];
    assert_eq!(cuckoo["layout"], "cuckoo");
    // f = ceil(log2(2 * 4 / 1e-4)) = 17; ceil(1e5 / (4 * 0.95)) = 26316
    // buckets (exact, no power-of-two rounding).
    assert_eq!(cuckoo["fingerprint_bits"], 17);
    assert_eq!(cuckoo["buckets"], 26_316);
    let max = cuckoo["max_items"].as_u64().unwrap();
    assert_eq!(max, (4.0 * 26316.0 * 0.95f64).floor() as u64);
    // At its planned load the table costs f / 0.95 bits per item.
    let per_item = cuckoo["bits"].as_u64().unwrap() as f64 / max as f64;
    assert!((17.8..18.0).contains(&per_item), "{per_item}");
    let planned = cuckoo["bits_per_item"].as_f64().unwrap();
    assert!((17.8..18.0).contains(&planned), "{planned}");
    assert!((cuckoo["load"].as_f64().unwrap() - 1e5 / 105_264.0).abs() < 1e-12);
}

/// The deletable row of `plan` is the file `build` then writes: for each
/// layout, key kind and a few sizes, the plan's `file_bytes` is the built
/// file's length, and its `bytes` the table's size that `info` reports.
#[test]
fn plan_size_is_the_size_of_the_file_build_makes() {
    let d = Dir::new();
    let input = d.path("in.txt");
    std::fs::write(&input, "example.com\nbad.example.org/x\n").unwrap();
    for layout in LAYOUTS {
        for (items, fp, keys) in [
            ("1000", "0.01", "url"),
            ("12345", "1e-4", "host"),
            ("3", "0.001", "raw"),
        ] {
            let (out, _) = ok(&[
                "plan", "-n", items, "-p", fp, "--keys", keys, "--layout", layout, "--json",
            ]);
            let v: Value = serde_json::from_str(&out).unwrap();
            let row = &v["layouts"][2];
            assert_eq!(row["layout"], layout);
            let f = d.path(&format!("{layout}-{items}.bgf"));
            ok(&[
                "build",
                "--layout",
                layout,
                "-n",
                items,
                "-p",
                fp,
                "--keys",
                keys,
                "-o",
                s(&f),
                s(&input),
            ]);
            let len = std::fs::metadata(&f).unwrap().len();
            assert_eq!(
                row["file_bytes"].as_u64().unwrap(),
                len,
                "{layout} {items} {fp} {keys}: {row}"
            );
            let (info, _) = ok(&["info", "--json", s(&f)]);
            let info: Value = serde_json::from_str(&info).unwrap();
            assert_eq!(row["bytes"], info["bytes"], "{layout} {items}: {info}");
        }
    }
}

#[test]
fn plan_text_names_the_deletable_row() {
    let (out, _) = ok(&["plan", "-n", "1e5", "-p", "1e-4", "--layout", "cuckoo"]);
    assert!(out.contains("\ncuckoo "), "{out}");
    assert!(out.contains("bucket count is exact"), "{out}");
    assert!(!out.contains("counting"), "{out}");
}

#[test]
fn damaged_files_give_clear_errors() {
    for layout in LAYOUTS {
        let d = Dir::new();
        let list = d.lines("list.txt", &urls(0..200));
        let good = d.path("good.bgf");
        ok(&[
            "build",
            "--layout",
            layout,
            "-n",
            "1000",
            "-p",
            "1e-4",
            "-o",
            s(&good),
            s(&list),
        ]);
        let bytes = std::fs::read(&good).unwrap();

        // A damaged header: refused by every command.
        let f = d.path("header.bgf");
        let mut b = bytes.clone();
        b[40] ^= 0x5a;
        std::fs::write(&f, &b).unwrap();
        for cmd in ["check", "add", "remove"] {
            let (code, _, err) = run(&[cmd, s(&f), s(&list)]);
            assert_eq!(code, 1, "{layout} {cmd}: {err}");
            assert!(err.contains("header.bgf"), "{err}");
        }
        let (code, _, err) = run(&["info", s(&f)]);
        assert_eq!(code, 1, "{err}");
        assert_eq!(
            std::fs::read(&f).unwrap(),
            b,
            "{layout}: a damaged file was changed"
        );

        // Damaged data: add and remove refuse to seal it under a fresh
        // checksum; --verify finds it.
        let f = d.path("data.bgf");
        let mut b = bytes.clone();
        b[4096 + 77] ^= 0x11;
        std::fs::write(&f, &b).unwrap();
        for cmd in ["add", "remove"] {
            let (code, _, err) = run(&[cmd, s(&f), s(&list)]);
            assert_eq!(code, 1, "{layout} {cmd}: {err}");
            assert!(err.contains("its data is damaged"), "{err}");
            assert!(err.contains("checksum"), "{err}");
        }
        assert_eq!(std::fs::read(&f).unwrap(), b);
        for args in [&["info", "--verify"][..], &["check", "--verify"]] {
            let mut a = args.to_vec();
            a.push(s(&f));
            a.push(s(&list));
            if args[0] == "info" {
                a.pop();
            }
            let (code, _, err) = run(&a);
            assert_eq!(code, 1, "{args:?}: {err}");
            assert!(err.contains("checksum"), "{err}");
        }

        // Truncated: not a panic, a sentence.
        let f = d.path("short.bgf");
        std::fs::write(&f, &bytes[..bytes.len() - 64]).unwrap();
        for cmd in ["check", "add", "remove"] {
            let (code, _, err) = run(&[cmd, s(&f), s(&list)]);
            assert_eq!(code, 1, "{layout} {cmd}: {err}");
            assert!(err.contains("short.bgf"), "{err}");
        }
    }
}

/// Starts `bloomgate add FILE -` and writes `lines` URLs to its standard
/// input, which stays open (returned): the process has read them all and
/// waits for more when this returns.
fn add_from_stdin(f: &Path, lines: usize) -> (std::process::Child, std::process::ChildStdin) {
    let mut child = StdCommand::new(testkit::bin())
        .args(["add", s(f), "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut text = Vec::new();
    for i in 0..lines {
        writeln!(text, "http://stdin{i}.example/x").unwrap();
    }
    stdin.write_all(&text).unwrap();
    stdin.flush().unwrap();
    (child, stdin)
}

/// Asserts that `dir` holds exactly the files named (no temporary left).
fn only_files(dir: &Path, names: &[&str]) {
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(found, want);
}

#[test]
fn killed_or_interrupted_add_leaves_the_previous_counting_file() {
    killed_or_interrupted_add_leaves_the_previous_file("counting");
}

#[test]
fn killed_or_interrupted_add_leaves_the_previous_cuckoo_file() {
    killed_or_interrupted_add_leaves_the_previous_file("cuckoo");
}

fn killed_or_interrupted_add_leaves_the_previous_file(layout: &str) {
    let d = Dir::new();
    let list = d.lines("list.txt", &urls(0..1000));
    let f = d.path("f.bgf");
    ok(&[
        "build",
        "--layout",
        layout,
        "-n",
        "400000",
        "-p",
        "1e-3",
        "-o",
        s(&f),
        s(&list),
    ]);
    let before = std::fs::read(&f).unwrap();

    // SIGKILL while the add is reading its standard input.
    let (mut child, stdin) = add_from_stdin(&f, 200_000);
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "add ended early");
    child.kill().unwrap();
    drop(stdin);
    child.wait().unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), before, "{layout}: SIGKILL");
    only_files(d.0.path(), &["list.txt", "f.bgf", "f.bgf.lock"]);

    // Ctrl-C: the add stops at the end of what it is reading (here:
    // standard input closes), says nothing was saved, exit 1.
    let (mut child, stdin) = add_from_stdin(&f, 200_000);
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "add ended early");
    let pid = child.id().to_string();
    let status = StdCommand::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    std::thread::sleep(Duration::from_millis(200));
    drop(stdin);
    let t = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        assert!(t.elapsed() < Duration::from_secs(30), "add did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    assert!(err.contains("nothing was saved"), "{err}");
    assert_eq!(std::fs::read(&f).unwrap(), before, "{layout}: Ctrl-C");
    // The lock the killed add left is taken, and removed, by this one.
    only_files(d.0.path(), &["list.txt", "f.bgf"]);
    assert_eq!(hits(&f, &list).len(), 1000);
}

#[test]
fn concurrent_adds_wait_for_each_other_and_lose_nothing() {
    let d = Dir::new();
    let f = d.path("f.bgf");
    let list = d.lines("list.txt", &urls(0..100));
    ok(&[
        "build",
        "--layout",
        "cuckoo",
        "-n",
        "10000",
        "-p",
        "1e-3",
        "-o",
        s(&f),
        s(&list),
    ]);
    // The first add holds the filter's lock while it reads its standard
    // input; the second, from a file, must wait for it rather than save a
    // copy without the first one's entries.
    let (first, mut stdin) = add_from_stdin(&f, 1000);
    // Its lines fit in the pipe's buffer: wait until it holds the lock.
    testkit::wait_locked(&d.path("f.bgf.lock"), Duration::from_secs(60));
    let second_list = d.lines("second.txt", &urls(5000..6000));
    let mut second = StdCommand::new(testkit::bin())
        .args(["add", s(&f), s(&second_list)])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        second.try_wait().unwrap().is_none(),
        "the second add did not wait"
    );
    writeln!(stdin, "http://last.example/").unwrap();
    drop(stdin);
    let out = first.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = second.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("waiting for another bloomgate"), "{err}");
    let mut all = urls(0..100);
    all.extend((0..1000).map(|i| format!("http://stdin{i}.example/x")));
    all.push("http://last.example/".into());
    all.extend(urls(5000..6000));
    let all_file = d.lines("all.txt", &all);
    assert_eq!(hits(&f, &all_file).len(), all.len());
    assert_eq!(info(&f)["items"], all.len());
}

#[test]
fn whitelist_command_edits_a_deletable_filters_whitelist() {
    for layout in LAYOUTS {
        let (d, f) = two_urls(layout);
        let q = d.lines("q.txt", &["http://evil.example/a", "http://bad.example/"]);
        // Added in a non-canonical spelling: normalized by the file's key rules.
        let (_, err) = ok(&["whitelist", "add", s(&f), "HTTP://BAD.example/#top"]);
        assert!(err.contains("whitelist has 1 items"), "{layout}: {err}");
        let (out, _) = ok(&["check", s(&f), s(&q)]);
        assert_eq!(out, "http://evil.example/a\n", "{layout}");
        let (out, _) = ok(&["whitelist", "list", s(&f)]);
        assert_eq!(out, "bad.example/\n", "{layout}");
        // Not a hit: whitelisted anyway, with a warning.
        let (_, err) = ok(&["whitelist", "add", s(&f), "http://good.example/"]);
        assert!(err.contains("is not a hit"), "{layout}: {err}");
        // Removed again: the entry hits again; the filter itself is untouched.
        ok(&[
            "whitelist",
            "remove",
            s(&f),
            "http://bad.example/",
            "http://good.example/",
        ]);
        let (out, _) = ok(&["check", "--count", s(&f), s(&q)]);
        assert_eq!(out, "2\n", "{layout}");
        let (out, _) = ok(&["whitelist", "list", s(&f)]);
        assert_eq!(out, "", "{layout}");
        ok(&["info", "--verify", s(&f)]);
    }
}
