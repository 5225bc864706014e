//! `bloomgate build --memory` and `check --memory`: a filter larger than the
//! memory budget is built, and checked, one slice of its bit array at a
//! time, with the real binary on real files: the build must be the in-memory
//! build bit for bit, and the check must answer as the in-memory check does.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const HEADER: usize = 4096;

fn bin() -> &'static std::path::Path {
    testkit::bin()
}

fn run(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// 40,000 URL lines (some invalid, some duplicated), ~1.2 MB.
fn urls(dir: &Path) -> PathBuf {
    let p = dir.join("urls.txt");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
    for i in 0..40_000u32 {
        match i % 1000 {
            7 => writeln!(f, "http://[::1/broken-{i}").unwrap(),
            8 => writeln!(f, "http://dup.example/again").unwrap(),
            _ => writeln!(f, "HTTP://Host{}.Example:80/a/./b/{i}#frag", i % 613).unwrap(),
        }
    }
    drop(f);
    p
}

fn info(path: &Path) -> serde_json::Value {
    let out = run(&["info", "--json", "--verify", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn build(dir: &Path, name: &str, extra: &[&str], input: &Path) -> (PathBuf, Output) {
    let out_path = dir.join(name);
    let mut args = vec!["build", "--seed", "99", "-n", "40000", "-p", "1e-5", "-o"];
    args.push(out_path.to_str().unwrap());
    args.extend_from_slice(extra);
    args.push(input.to_str().unwrap());
    let out = run(&args);
    (out_path, out)
}

/// Same header fields and the same bytes; the item count may differ by the
/// few items whose bits all happen to be set by others before them (an
/// in-memory build on several threads is not reproducible in that field
/// either), and for the classic layout by the `duplicates` lines given
/// again, which a sliced build cannot recognize when their bits span
/// slices (`bloomgate_engine::slice::Slice::insert_batch`).
fn assert_same_filter(a: &Path, b: &Path, duplicates: i64) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert_eq!(x.len(), y.len());
    assert!(
        x[HEADER..] == y[HEADER..],
        "{} and {} differ",
        a.display(),
        b.display()
    );
    let (ia, ib) = (info(a), info(b));
    for field in [
        "layout",
        "bits",
        "k",
        "seed",
        "key_kind",
        "match_mode",
        "planned_items",
        "target_fp",
        "data_checksum",
        "fill_ratio",
    ] {
        assert_eq!(ia[field], ib[field], "{field}");
    }
    let (na, nb) = (ia["items"].as_i64().unwrap(), ib["items"].as_i64().unwrap());
    assert!(
        nb >= na - 4 && nb <= na + duplicates + 4,
        "items {na} vs {nb}"
    );
}

#[test]
fn sliced_builds_are_the_in_memory_build() {
    let tmp = tempfile::tempdir().unwrap();
    let input = urls(tmp.path());
    for layout in ["blocked", "classic"] {
        let (whole, out) = build(
            tmp.path(),
            &format!("whole-{layout}.bgf"),
            &["--layout", layout],
            &input,
        );
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(!stderr(&out).contains("slices"), "{}", stderr(&out));
        let bytes = std::fs::metadata(&whole).unwrap().len() - HEADER as u64;
        // Budgets giving 2, 5 and many slices (the last one ragged).
        for budget in [bytes / 2 + 4096, bytes / 5, 8192] {
            let slices = bytes.div_ceil(budget / 4096 * 4096);
            // Records of 40,000 items are ~320 KB: by default every slice
            // but the first is built from records (blocked layout); with
            // `--spill 0` each gets a pass; with room for about two slices'
            // records, the last two are spilled and the others get passes.
            let two = (40_000 * 8 * 21 / 20 / slices + 4096) * 2 + 1000;
            let variants: &[(&str, u64)] = match layout {
                "blocked" => &[
                    ("", slices - 1),
                    ("0", 0),
                    (&two.to_string(), 2.min(slices - 1)),
                ],
                _ => &[("", 0)],
            };
            for (spill, spilled) in variants {
                let name = format!("sliced-{layout}-{budget}-{spill}.bgf");
                let budget = budget.to_string();
                let mut args = vec!["--layout", layout, "--memory", &budget];
                if !spill.is_empty() {
                    args.extend(["--spill", spill]);
                }
                let (sliced, out) = build(tmp.path(), &name, &args, &input);
                let err = stderr(&out);
                assert!(out.status.success(), "{err}");
                assert!(err.contains(&format!("in {slices} slices")), "{err}");
                let passes = slices - spilled;
                let s = if passes == 1 { "" } else { "es" };
                assert!(
                    err.contains(&format!("{passes} pass{s} over the inputs")),
                    "{err}"
                );
                assert_eq!(
                    err.matches("(spilled records)").count() as u64,
                    *spilled,
                    "{err}"
                );
                assert_eq!(err.matches("(pass)").count() as u64, passes, "{err}");
                // Invalid entries are reported once, not once per pass.
                assert_eq!(err.matches("urls.txt:8: invalid").count(), 1, "{err}");
                // 40 lines of one URL: 39 repeats.
                let duplicates = if layout == "classic" { 39 } else { 0 };
                assert_same_filter(&whole, &sliced, duplicates);
            }
        }
    }
    // No spill file is left beside the outputs.
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("spill"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_spill_larger_than_planned_falls_back_to_a_pass() {
    // --items 10,000 for 40,000 lines: the records outgrow their planned
    // size, the spill is given up, and the slice gets a pass of its own:
    // the same filter as in memory.
    let tmp = tempfile::tempdir().unwrap();
    let input = urls(tmp.path());
    let small = |name: &str, extra: &[&str]| {
        let out_path = tmp.path().join(name);
        // Over-planned on purpose (useless, so written only when asked).
        let mut args = vec![
            "build",
            "--seed",
            "7",
            "-n",
            "10000",
            "-p",
            "1e-3",
            "--allow-useless",
            "-o",
        ];
        args.push(out_path.to_str().unwrap());
        args.extend_from_slice(extra);
        args.push(input.to_str().unwrap());
        (out_path.clone(), run(&args))
    };
    let (whole, out) = small("whole.bgf", &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (sliced, out) = small("sliced.bgf", &["--memory", "8K"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("not spilling slice"), "{err}");
    assert!(err.contains("it gets a pass of its own"), "{err}");
    let (x, y) = (
        std::fs::read(&whole).unwrap(),
        std::fs::read(&sliced).unwrap(),
    );
    assert!(x[HEADER..] == y[HEADER..]);
    assert_eq!(
        info(&whole)["data_checksum"],
        info(&sliced)["data_checksum"]
    );
}

#[test]
fn standard_input_is_spooled_and_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let input = urls(tmp.path());
    let (whole, out) = build(tmp.path(), "whole.bgf", &[], &input);
    assert!(out.status.success(), "{}", stderr(&out));
    let spool = tmp.path().join("spool");
    std::fs::create_dir(&spool).unwrap();
    let target = tmp.path().join("stdin.bgf");
    let mut child = Command::new(bin())
        .args([
            "build", "--seed", "99", "-n", "40000", "-p", "1e-5", "--memory", "32K",
        ])
        .arg("--tmp-dir")
        .arg(&spool)
        .arg("-o")
        .arg(&target)
        .arg("-")
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let data = std::fs::read(&input).unwrap();
    child.stdin.take().unwrap().write_all(&data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_same_filter(&whole, &target, 0);
    assert_eq!(
        std::fs::read_dir(&spool).unwrap().count(),
        0,
        "spool left behind"
    );
}

#[test]
fn peak_memory_is_reported_and_within_the_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let input = urls(tmp.path());
    let (_, out) = build(tmp.path(), "m.bgf", &["--memory", "64K"], &input);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    // "peak memory 31.2 MiB (budget 64.0 KiB)": budget + 1 GiB at most.
    let peak = err
        .split("peak memory ")
        .nth(1)
        .and_then(|r| r.split(" (").next())
        .unwrap_or_else(|| panic!("{err}"));
    let (num, unit) = peak.split_once(' ').unwrap();
    let mib = num.parse::<f64>().unwrap()
        * match unit {
            "KiB" => 1.0 / 1024.0,
            "MiB" => 1.0,
            "GiB" => 1024.0,
            u => panic!("unit {u}"),
        };
    assert!(mib < 1024.0 + 0.0625, "{peak}");
}

#[test]
fn a_full_disk_fails_cleanly() {
    // A 1 MiB tmpfs for a ~2 MiB filter: the slice writes fail. Needs root
    // to mount; elsewhere the test says so and checks nothing.
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1M", "tmpfs"])
        .arg(&mnt)
        .output()
        .is_ok_and(|o| o.status.success());
    if !mounted {
        assert!(
            std::env::var_os("CI").is_none() || not_root(),
            "CI runs as root: the tmpfs must mount"
        );
        eprintln!("skipping: cannot mount a tmpfs here (not root)");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mnt.clone());
    let input = urls(tmp.path());
    let target = mnt.join("big.bgf");
    let out = run(&[
        "build",
        "-n",
        "600000",
        "-p",
        "1e-4",
        "--memory",
        "256K",
        "-o",
        target.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("No space left on device"),
        "{}",
        stderr(&out)
    );
    let left: Vec<_> = std::fs::read_dir(&mnt).unwrap().flatten().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

fn not_root() -> bool {
    // `id -u` rather than libc: the tests need no unsafe code.
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() != "0")
        .unwrap_or(true)
}

/// `check` in memory and in slices, same arguments otherwise: same stdout,
/// same exit code.
fn assert_same_check(filter: &Path, queries: &Path, budget: &str) {
    for mode in [&["--json"][..], &["--count"], &[]] {
        let mut base = vec!["check"];
        base.extend_from_slice(mode);
        let mut whole = base.clone();
        whole.extend([filter.to_str().unwrap(), queries.to_str().unwrap()]);
        let mut sliced = base.clone();
        sliced.extend([
            "--memory",
            budget,
            filter.to_str().unwrap(),
            queries.to_str().unwrap(),
        ]);
        let (w, s) = (run(&whole), run(&sliced));
        assert!(stderr(&s).contains("checking in"), "{}", stderr(&s));
        assert_eq!(w.status.code(), s.status.code(), "{}", stderr(&s));
        assert!(
            w.stdout == s.stdout,
            "{mode:?}: {} vs {} bytes",
            w.stdout.len(),
            s.stdout.len()
        );
    }
}

#[test]
fn sliced_checks_answer_as_in_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // Entries and queries for every key kind: hits, misses, invalid
    // queries, whitelisted ones, prefix expressions spanning slices.
    let mut entries = String::new();
    let mut queries = String::new();
    for i in 0..20_000u32 {
        entries.push_str(&format!("http://evil{i}.example/phish/{i}/\n"));
        if i % 3 == 0 {
            queries.push_str(&format!(
                "HTTPS://EVIL{i}.example:443/phish/{i}/login.php?x#y\n"
            ));
        }
        queries.push_str(&format!("http://good{i}.example/{i}\n"));
        if i % 997 == 0 {
            queries.push_str("http://[::1/broken\n");
        }
    }
    let entries_path = d.join("entries.txt");
    std::fs::write(&entries_path, &entries).unwrap();
    let queries_path = d.join("queries.txt");
    std::fs::write(&queries_path, &queries).unwrap();
    for (layout, keys, mode) in [
        ("blocked", "url", "prefix"),
        ("classic", "url", "prefix"),
        ("blocked", "url", "exact"),
        ("blocked", "raw", "exact"),
    ] {
        let filter = d.join(format!("{layout}-{keys}-{mode}.bgf"));
        let out = run(&[
            "build",
            "-n",
            "20000",
            "-p",
            "1e-3",
            "--layout",
            layout,
            "--keys",
            keys,
            "--match",
            mode,
            "-o",
            filter.to_str().unwrap(),
            entries_path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        if mode == "prefix" {
            // A whitelisted exact URL and a whitelisted expression.
            for item in [
                "https://evil3.example/phish/3/login.php",
                "evil6.example/phish/6/",
            ] {
                let out = run(&["whitelist", "add", filter.to_str().unwrap(), item]);
                assert!(out.status.success(), "{}", stderr(&out));
            }
        }
        assert_same_check(&filter, &queries_path, "16K");
        // The answers are not trivial: hits, misses and errors all occur.
        let out = run(&[
            "check",
            "--count",
            filter.to_str().unwrap(),
            queries_path.to_str().unwrap(),
        ]);
        let hits: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        if keys == "raw" {
            // The queries are not the entries' bytes: false positives only
            // (rate 1e-3 over ~27,000 queries).
            assert!(hits < 80, "{hits}");
        } else if mode == "prefix" {
            assert!((6660..6700).contains(&hits), "{hits}");
        }
    }
}

#[test]
fn sliced_checks_of_many_chunks_answer_in_input_order() {
    // Inputs of several 4 MiB chunks each, two of them, checked in several
    // slices: the last pass answers in the workers from where the first
    // pass found each chunk's keys, so the order of the answers and the bits
    // of the earlier passes must line up across chunks and inputs.
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let pad = "p".repeat(300);
    let mut entries = String::new();
    let (mut a, mut b) = (String::new(), String::new());
    for i in 0..60_000u32 {
        if i % 2 == 0 {
            entries.push_str(&format!("http://bad{i}.example/{pad}/{i}\n"));
        }
        let q = if i % 5 == 0 {
            "http://[::1/broken\n".to_string()
        } else {
            format!("http://bad{i}.example/{pad}/{i}\n")
        };
        if i < 45_000 {
            a.push_str(&q)
        } else {
            b.push_str(&q)
        }
    }
    assert!(a.len() > 2 * (4 << 20), "{} bytes", a.len());
    let paths = [("entries.txt", &entries), ("a.txt", &a), ("b.txt", &b)].map(|(name, text)| {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        p
    });
    let filter = d.join("f.bgf");
    let out = run(&[
        "build",
        "-n",
        "30000",
        "-p",
        "1e-4",
        "-o",
        filter.to_str().unwrap(),
        paths[0].to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    for mode in [&["--json"][..], &[]] {
        let mut args = vec!["check"];
        args.extend_from_slice(mode);
        args.extend([
            filter.to_str().unwrap(),
            paths[1].to_str().unwrap(),
            paths[2].to_str().unwrap(),
        ]);
        let whole = run(&args);
        args.splice(1..1, ["--memory", "16K"]);
        let sliced = run(&args);
        assert!(
            stderr(&sliced).contains("checking in 6 slices"),
            "{}",
            stderr(&sliced)
        );
        assert_eq!(whole.status.code(), Some(1), "{}", stderr(&whole));
        assert_eq!(sliced.status.code(), Some(1), "{}", stderr(&sliced));
        assert!(whole.stdout == sliced.stdout, "{mode:?}: answers differ");
        assert_eq!(
            stderr(&whole)
                .lines()
                .filter(|l| l.contains("invalid"))
                .count(),
            stderr(&sliced)
                .lines()
                .filter(|l| l.contains("invalid"))
                .count()
        );
        if mode.is_empty() {
            // Every entry is a hit, in order; of the others only false
            // positives (rate 1e-4) may be.
            let hits: Vec<&[u8]> = sliced
                .stdout
                .split(|&c| c == b'\n')
                .filter(|l| !l.is_empty())
                .collect();
            let expected: Vec<String> = (0..60_000u32)
                .filter(|i| i % 2 == 0 && i % 5 != 0)
                .map(|i| format!("http://bad{i}.example/{pad}/{i}"))
                .collect();
            let mut want = expected.iter().peekable();
            for h in &hits {
                if want.peek().is_some_and(|w| w.as_bytes() == *h) {
                    want.next();
                }
            }
            assert!(want.peek().is_none(), "a hit is missing or out of order");
            assert!(
                hits.len() - expected.len() < 10,
                "{} extra hits",
                hits.len() - expected.len()
            );
        }
    }
}

#[test]
fn sliced_check_reads_standard_input() {
    let tmp = tempfile::tempdir().unwrap();
    let input = urls(tmp.path());
    let (filter, out) = build(tmp.path(), "f.bgf", &[], &input);
    assert!(out.status.success(), "{}", stderr(&out));
    let whole = run(&[
        "check",
        "--count",
        filter.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    let sliced = testkit::run_with_input(
        Command::new(bin())
            .args(["check", "--count", "--memory", "32K", "--tmp-dir"])
            .arg(tmp.path())
            .arg(&filter),
        &std::fs::read(&input).unwrap(),
    );
    assert!(
        stderr(&sliced).contains("checking in"),
        "{}",
        stderr(&sliced)
    );
    assert_eq!(whole.stdout, sliced.stdout);
    assert_eq!(whole.status.code(), sliced.status.code());
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("stdin"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn an_interrupted_build_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let target = out_dir.join("f.bgf");
    // Standard input that never ends, so the build is certainly still
    // running when the signal comes, however fast the machine. Sliced, it
    // is spilled or spooled to the temporary directory (the output's, by
    // default), which must be left empty too.
    for memory in [None, Some("4K")] {
        let mut cmd = Command::new(bin());
        cmd.args(["build", "-n", "5000000", "-p", "1e-5", "-o"])
            .arg(&target)
            .arg("-")
            .stdin(Stdio::piped());
        if let Some(m) = memory {
            cmd.args(["--memory", m]);
        }
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let (reading, read) = std::sync::mpsc::channel();
        let feeder = std::thread::spawn(move || {
            let mut i = 0u64;
            loop {
                let mut chunk = String::new();
                for _ in 0..10_000 {
                    i += 1;
                    chunk.push_str(&format!("http://h{i}.example/some/path/{i}\n"));
                }
                // Fails once the build has stopped reading and exited.
                if stdin.write_all(chunk.as_bytes()).is_err() {
                    return i;
                }
                // A chunk (400 kB) larger than a pipe's buffer was taken
                // whole: the build is reading its input, so its signal
                // handler is in place.
                let _ = reading.send(());
            }
        });
        // The signal comes once the build reads, not after a guessed delay
        // (a loaded machine may take longer than that to start it).
        read.recv_timeout(std::time::Duration::from_secs(120))
            .expect("the build never read its input");
        assert!(
            child.try_wait().unwrap().is_none(),
            "finished before the signal"
        );
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(feeder.join().unwrap() > 0);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains("interrupted"), "{}", stderr(&out));
        let left: Vec<_> = std::fs::read_dir(&out_dir).unwrap().flatten().collect();
        assert!(left.is_empty(), "{memory:?}: left behind {left:?}");
    }
}
