//! `bloomgate dedup --state redis://…/NAME`: several crawlers deduplicating
//! through one filter in a real redis-server (standalone and cluster), with
//! the same command, each entry printed by exactly one of them; and a
//! Redis that goes away mid-run, which is an error that accounts for every
//! line.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use testkit::redis::{redis_missing, Cluster, RedisServer};
use testkit::{bg, ok, write_lines};

/// `bloomgate create ADDRESS --purpose dedup` for url keys.
fn create(address: &str, items: &str) {
    ok(&bg(&[
        "create",
        address,
        "--purpose",
        "dedup",
        "--keys",
        "url",
        "--items",
        items,
        "--fp",
        "1e-7",
    ]));
}

/// Three inputs over 30,000 distinct URLs that overlap: input `i` holds
/// the URLs `n` with `n % 3 != i`, in its own order, each twice (once in
/// another spelling of the same URL), so every URL is in two inputs.
fn overlapping_inputs(dir: &Path) -> (Vec<String>, usize) {
    let distinct = 30_000;
    let mut names = Vec::new();
    for i in 0..3 {
        let mut lines = Vec::new();
        for n in (0..distinct).filter(|n| n % 3 != i) {
            // Scattered (7919 is prime to 30,000: each URL once), in the
            // same order in every input, so the writers race on the same
            // URLs.
            let n = (n * 7919) % distinct;
            lines.push(format!("http://site{}.example/page/{n}", n % 97));
            lines.push(format!("HTTP://SITE{}.example/page/{n}#frag", n % 97));
        }
        let name = dir.join(format!("in{i}.txt"));
        write_lines(&name, &lines);
        names.push(name.to_str().unwrap().to_string());
    }
    (names, distinct)
}

/// Runs three `dedup --state ADDRESS` processes at once, one per input;
/// returns each one's printed lines.
fn run_three(address: &str, inputs: &[String]) -> Vec<Vec<String>> {
    let children: Vec<_> = inputs
        .iter()
        .map(|input| {
            Command::new(testkit::bin())
                .args(["dedup", "--state", address, input])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            let out = ok(&o);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains("(shared)"), "{err}");
            out.lines().map(str::to_string).collect()
        })
        .collect()
}

/// Every distinct URL (by its canonical form) was printed exactly once in
/// total.
fn assert_exactly_once(printed: &[Vec<String>], distinct: usize) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for line in printed.iter().flatten() {
        // The canonical form: the test's two spellings differ in case and
        // fragment only.
        let key = line.to_ascii_lowercase();
        let key = key.split('#').next().unwrap().to_string();
        *seen.entry(key).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, &n)| n > 1).take(5).collect();
    assert!(twice.is_empty(), "printed more than once: {twice:?}");
    assert_eq!(seen.len(), distinct, "URLs never printed");
    // Each process printed some: they really ran concurrently on shared
    // URLs, not one after the other on disjoint ones.
    let total: usize = printed.iter().map(Vec::len).sum();
    assert_eq!(total, distinct);
}

#[test]
fn three_concurrent_dedups_through_one_redis_print_each_url_once() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let address = format!("redis://{}/crawl", redis.addr());
    create(&address, "100000");
    let (inputs, distinct) = overlapping_inputs(dir.path());
    let printed = run_three(&address, &inputs);
    assert_exactly_once(&printed, distinct);
    // No lock file for a state in Redis (nor anything else beside the
    // inputs and the server's directory).
    let mut files: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("redis-"))
        .collect();
    files.sort();
    assert_eq!(files, ["in0.txt", "in1.txt", "in2.txt"]);
    // A second round of the same command passes nothing: the state is
    // shared and kept.
    let again = run_three(&address, &inputs);
    assert!(again.iter().all(Vec::is_empty), "{again:?}");
}

#[test]
fn three_concurrent_dedups_through_one_redis_cluster_print_each_url_once() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start_with(dir.path(), 0, &[]);
    let address = cluster.address("crawl");
    // Large enough for shards on every master.
    create(&address, "3000000");
    let (inputs, distinct) = overlapping_inputs(dir.path());
    let printed = run_three(&address, &inputs);
    assert_exactly_once(&printed, distinct);
}

#[test]
fn a_shared_state_is_made_by_create_and_keeps_its_settings() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let address = format!("redis://{}/crawl", redis.addr());
    let input = dir.path().join("in.txt");
    write_lines(&input, ["http://a.example/"]);
    let input = input.to_str().unwrap();
    // Missing: an error naming the command that makes it, nothing created.
    let o = bg(&["dedup", "--state", &address, input]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bloomgate create"), "{err}");
    assert!(o.stdout.is_empty());
    assert_eq!(redis.cli(&["DBSIZE"]).trim(), "(integer) 0");
    create(&address, "1000");
    // A setting of a new state cannot apply: a usage error, nothing added.
    let o = bg(&["dedup", "--state", &address, "--items", "5", input]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--items cannot apply"), "{err}");
    let o = bg(&["dedup", "--state", &address, "--keys", "host", input]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        ok(&bg(&["dedup", "--state", &address, input])),
        "http://a.example/\n"
    );
}

/// Reads `n` lines from the channel, waiting at most two minutes.
fn take(rx: &mpsc::Receiver<String>, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            rx.recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|e| panic!("line {i} of {n} did not come: {e}"))
        })
        .collect()
}

/// The number before `what` in `text` (`1,000 lines passed`).
fn number_before(text: &str, what: &str) -> u64 {
    let at = text
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in {text}"));
    let digits: String = text[..at]
        .trim_end()
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .collect::<String>()
        .chars()
        .rev()
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

#[test]
fn a_redis_that_goes_away_mid_run_is_an_error_that_accounts_for_every_line() {
    if redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut redis = RedisServer::start(dir.path(), &[]);
    let address = format!("redis://{}/crawl", redis.addr());
    create(&address, "100000");
    let mut child = Command::new(testkit::bin())
        .args(["dedup", "--state", &address])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    // The first 1,000 URLs, each twice: printed once each as the input
    // pauses (dedup answers when its reader would block).
    let first: String = (0..1000)
        .flat_map(|n| {
            [
                format!("http://a.example/{n}\n"),
                format!("http://a.example/{n}\n"),
            ]
        })
        .collect();
    stdin.write_all(first.as_bytes()).unwrap();
    stdin.flush().unwrap();
    let before = take(&rx, 1000);
    let expected: Vec<String> = (0..1000).map(|n| format!("http://a.example/{n}")).collect();
    assert_eq!(before, expected);
    // Redis goes away; more input comes, then its end.
    redis.kill9();
    let second: String = (1000..3000)
        .map(|n| format!("http://a.example/{n}\n"))
        .collect();
    // The process may exit at the first failed add: a broken pipe here
    // is the expected end, not an error of the test.
    let _ = stdin.write_all(second.as_bytes());
    drop(stdin);
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let after: Vec<String> = rx.try_iter().collect();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("stopped"), "{err}");
    // What the message says adds up to what was printed: lines passed and
    // lines printed without a reply, and nothing printed twice.
    let passed = number_before(&err, "lines passed (printed)");
    let unknown = number_before(&err, "printed whose add got no reply");
    let not_added = number_before(&err, "not deduplicated and not printed");
    assert_eq!(passed + unknown, 1000 + after.len() as u64, "{err}");
    let mut all = before;
    all.extend(after);
    let distinct: std::collections::HashSet<&String> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "a line was printed twice");
    // The lines after the failure were counted as not deduplicated, or not
    // read at all (the message names where to start again).
    assert!(err.contains("run it again from -:"), "{err}");
    assert!(passed + unknown + not_added <= 3000, "{err}");
}
