//! Adds to a static ribbon file through the real binary: `add` goes into
//! the file's delta (`--print-new` prints what was new), `check` and
//! `info` answer for the union, a rebuild with `--fold` equals byte for
//! byte a build whose inputs held the added entries and empties the delta,
//! a file built with `--delta-share 0` refuses adds, and a damaged file of
//! added keys fails `check` instead of answering "absent".

use std::path::Path;

use serde_json::Value;
use testkit::{run, Dir};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn ok(args: &[&str]) -> (String, String) {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "bloomgate {args:?} failed: {err}");
    (out, err)
}

fn urls(tag: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range
        .map(|i| format!("http://{tag}{i}.example/page/{i}"))
        .collect()
}

fn info(filter: &Path) -> Value {
    serde_json::from_str(&ok(&["info", "--json", s(filter)]).0).unwrap()
}

fn build(out: &Path, inputs: &[&Path], extra: &[&str]) -> String {
    let mut args = vec![
        "build", "--layout", "ribbon", "--fp", "1e-3", "--seed", "11", "-o",
    ];
    args.push(s(out));
    args.extend_from_slice(extra);
    args.extend(inputs.iter().map(|p| s(p)));
    ok(&args).1
}

fn count(filter: &Path, queries: &Path) -> u64 {
    let (code, out, err) = run(&["check", "--count", s(filter), s(queries)]);
    assert!(code == 0 || code == 1, "{err}");
    out.trim().parse().unwrap()
}

#[test]
fn ribbon_add_goes_to_the_delta_and_check_info_answer_the_union() {
    let d = Dir::new();
    let list = d.lines("list.txt", &urls("m", 0..20_000));
    let f = d.path("r.bgf");
    build(&f, &[&list], &[]);
    let before = std::fs::read(&f).unwrap();
    let mut new = urls("a", 0..500);
    new.push("HTTP://M7.example/page/7".into()); // a member, spelled otherwise
    new.push("not a url".into());
    let adds = d.lines("adds.txt", &new);
    let (out, err) = ok(&["add", "--print-new", s(&f), s(&adds)]);
    assert_eq!(out.lines().count(), 500, "{out}");
    assert!(out.lines().all(|l| l.starts_with("http://a")), "{out}");
    assert!(
        err.contains("500 new items") && err.contains("1 invalid"),
        "{err}"
    );
    // The solution is untouched; the keys are in FILE.delta.
    assert_eq!(std::fs::read(&f).unwrap(), before);
    assert!(d.path("r.bgf.delta").exists());
    let added = d.lines("added.txt", &urls("a", 0..500));
    assert_eq!(count(&f, &added), 500);
    assert_eq!(count(&f, &list), 20_000);
    let v = info(&f);
    assert_eq!(v["delta"]["added_keys"], 501, "{v}");
    assert_eq!(v["delta"]["items"], 500, "{v}");
    assert_eq!(v["items"], 20_500, "{v}");
    assert!(v["predicted_fp"].as_f64().unwrap() <= 1e-3, "{v}");
    let text = ok(&["info", s(&f)]).0;
    assert!(text.contains("delta           501 added key(s)"), "{text}");
    // Again: nothing is new, nothing printed, the file does not grow.
    let size = std::fs::metadata(d.path("r.bgf.delta")).unwrap().len();
    let (out, _) = ok(&["add", "--print-new", s(&f), s(&added)]);
    assert!(out.is_empty(), "{out}");
    assert_eq!(
        std::fs::metadata(d.path("r.bgf.delta")).unwrap().len(),
        size
    );
}

#[test]
fn fold_equals_a_build_with_the_added_entries() {
    let d = Dir::new();
    let list = d.lines("list.txt", &urls("m", 0..30_000));
    let new = d.lines("new.txt", &urls("a", 0..2_000));
    let f = d.path("r.bgf");
    build(&f, &[&list], &[]);
    ok(&["add", s(&f), s(&new)]);
    // The rebuild over the file folds its added keys in.
    let err = build(&f, &[&list], &["--fold", s(&f), "--force"]);
    assert!(err.contains("folded 2,000 added key(s)"), "{err}");
    assert!(!d.path("r.bgf.delta").exists(), "{err}");
    // The same bytes as a build whose inputs hold the added entries.
    let whole = d.path("whole.bgf");
    build(&whole, &[&list, &new], &[]);
    assert_eq!(std::fs::read(&f).unwrap(), std::fs::read(&whole).unwrap());
    let v = info(&f);
    assert_eq!(v["delta"]["added_keys"], 0, "{v}");
    assert_eq!(v["items"], 32_000, "{v}");
    assert_eq!(count(&f, &new), 2_000);
    // Folded into another file, the old one keeps its delta.
    let g = d.path("g.bgf");
    build(&g, &[&list], &[]);
    ok(&["add", s(&g), s(&new)]);
    let other = d.path("other.bgf");
    build(&other, &[&list], &["--fold", s(&g)]);
    assert_eq!(
        std::fs::read(&other).unwrap(),
        std::fs::read(&whole).unwrap()
    );
    assert!(d.path("g.bgf.delta").exists());
    // A rebuild that does not fold keeps the delta beside the new file,
    // and says so.
    let err = build(&g, &[&list], &["--force"]);
    assert!(err.contains("not folded"), "{err}");
    assert_eq!(count(&g, &new), 2_000);
}

#[test]
fn ribbon_without_room_refuses_adds_and_bad_shares_are_usage_errors() {
    let d = Dir::new();
    let list = d.lines("list.txt", &urls("m", 0..1000));
    let f = d.path("r.bgf");
    build(&f, &[&list], &["--delta-share", "0"]);
    let before = std::fs::read(&f).unwrap();
    let adds = d.lines("adds.txt", &urls("a", 0..10));
    let (code, _, err) = run(&["add", s(&f), s(&adds)]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("ribbon") && err.contains("--delta-share"),
        "{err}"
    );
    assert_eq!(std::fs::read(&f).unwrap(), before);
    assert!(!d.path("r.bgf.delta").exists());
    assert_eq!(info(&f)["delta"]["takes_adds"], false);
    // A larger share: a smaller solution rate, the same target.
    let q = d.path("q.bgf");
    build(&q, &[&list], &["--delta-share", "1/4"]);
    let v = info(&q);
    assert!(
        (v["target_fp"].as_f64().unwrap() - 1e-3).abs() < 1e-12,
        "{v}"
    );
    assert!(v["predicted_fp"].as_f64().unwrap() < 0.8e-3, "{v}");
    for bad in ["0.6", "-1", "x", "1/0"] {
        let (code, _, err) = run(&[
            "build",
            "--layout",
            "ribbon",
            "--delta-share",
            bad,
            "-o",
            "/nonexistent/x.bgf",
            s(&list),
        ]);
        assert_eq!(code, 2, "{bad}: {err}");
    }
    let (code, _, err) = run(&[
        "build",
        "--fold",
        s(&f),
        "-o",
        s(&d.path("b.bgf")),
        s(&list),
    ]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn ribbon_damaged_delta_fails_check_instead_of_answering_absent() {
    let d = Dir::new();
    let list = d.lines("list.txt", &urls("m", 0..3000));
    let f = d.path("r.bgf");
    build(&f, &[&list], &[]);
    let adds = d.lines("adds.txt", &urls("a", 0..100));
    ok(&["add", s(&f), s(&adds)]);
    let delta = d.path("r.bgf.delta");
    let good = std::fs::read(&delta).unwrap();
    let mut flipped = good.clone();
    let at = good.len() - 30;
    flipped[at] ^= 0x04;
    for (bytes, what) in [(&flipped[..], "flipped"), (&good[..good.len() - 5], "cut")] {
        std::fs::write(&delta, bytes).unwrap();
        let (code, out, err) = run(&["check", s(&f), s(&adds)]);
        assert!(code == 1 && out.is_empty(), "{what}: {code} {out} {err}");
        assert!(err.contains("damaged"), "{what}: {err}");
        let (code, _, err) = run(&["add", s(&f), s(&adds)]);
        assert_eq!(code, 1, "{what}: {err}");
    }
    std::fs::write(&delta, &good).unwrap();
    assert_eq!(count(&f, &adds), 100);
}
