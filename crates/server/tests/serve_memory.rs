//! The input budget under attack: sixty authenticated Redis-protocol
//! connections each send the first 30 MB of a 30 MB `BF.ADD` argument (1.8 GB
//! that the server would otherwise buffer). The server's resident memory
//! stays under the budget plus a margin, the connections holding the most
//! are closed with an error, and a well-behaved client is served throughout.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use testkit::{Server, V};

const TOKEN: &str = "budget-token-0123456789";

/// Resident and peak resident memory of `pid`, in bytes.
fn rss(pid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap()
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// One attacker: AUTH, then the start of a 30 MB argument, 1 MiB at a time,
/// never finished. Returns the error line the server closed it with, if any.
fn attack(addr: std::net::SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = format!("*2\r\n$4\r\nAUTH\r\n${}\r\n{TOKEN}\r\n", TOKEN.len());
    s.write_all(auth.as_bytes()).unwrap();
    let mut ok = [0u8; 5];
    s.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    let len = 30 << 20;
    let head = format!("*3\r\n$6\r\nBF.ADD\r\n$4\r\nseen\r\n${len}\r\n");
    if s.write_all(head.as_bytes()).is_err() {
        return None;
    }
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..30 {
        if s.write_all(&chunk).is_err() {
            break;
        }
    }
    // Closed by the server (an error line), or left waiting for the rest
    // (a read timeout): the reply, if one came.
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply).into_owned();
    (!text.is_empty()).then_some(text)
}

#[test]
fn sixty_huge_half_sent_commands_stay_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let tok = dir.path().join("token");
    std::fs::write(&tok, format!("{TOKEN}\n")).unwrap();
    let budget: u64 = 256 << 20; // the default
                                 // The server and the timed client are favoured by the scheduler, so that
                                 // the latency bound below measures the server under this attack, not the
                                 // other work of a loaded machine.
    let server = Server::start_favoured(
        dir.path(),
        &[
            "--token-file",
            tok.to_str().unwrap(),
            "--request-secs",
            "60",
        ],
    );
    let pid = server.child.id();
    let mut c = server.resp();
    assert_eq!(c.cmd(&["AUTH", TOKEN]), V::Simple("OK".into()));
    assert_eq!(
        c.cmd(&["BF.RESERVE", "seen", "0.001", "100000"]),
        V::Simple("OK".into())
    );
    let (before, _) = rss(pid);

    // The well-behaved client: one add and one lookup at a time, timed.
    let stop = Arc::new(AtomicBool::new(false));
    let good = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            testkit::favour_this_thread();
            let mut times = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let item = format!("good-{}", times.len());
                let t = Instant::now();
                assert!(matches!(c.cmd(&["BF.ADD", "seen", &item]), V::Int(_)));
                assert_eq!(c.cmd(&["BF.EXISTS", "seen", &item]), V::Int(1));
                times.push(t.elapsed());
            }
            times.sort();
            let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
            (times.len(), at(0.5), at(0.99), *times.last().unwrap())
        })
    };
    let addr = server.resp;
    let attackers: Vec<_> = (0..60)
        .map(|_| std::thread::spawn(move || attack(addr)))
        .collect();
    // Sample the server's memory while the attack runs.
    let mut peak_sampled = 0;
    let t = Instant::now();
    while attackers.iter().any(|a| !a.is_finished()) && t.elapsed() < Duration::from_secs(60) {
        peak_sampled = peak_sampled.max(rss(pid).0);
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let (served, p50, p99, worst) = good.join().unwrap();
    let (_, hwm) = rss(pid);
    let (_, metrics) = server.http("GET", "/metrics", None, Some(TOKEN));
    // Each attacker is either closed with the budget's error or still
    // waiting for its last bytes (those holding least, within the budget).
    let closed: Vec<String> = attackers
        .into_iter()
        .filter_map(|a| a.join().unwrap())
        .collect();
    assert!(
        closed.len() >= 50,
        "only {} of 60 attackers closed",
        closed.len()
    );
    for e in &closed {
        assert!(
            e.starts_with("-ERR client input buffer budget exceeded"),
            "{e}"
        );
    }
    let margin: u64 = 64 << 20;
    assert!(
        hwm <= before + budget + margin,
        "peak RSS {} MiB > {} MiB before + {} MiB budget + {} MiB margin (sampled peak {} MiB)",
        hwm >> 20,
        before >> 20,
        budget >> 20,
        margin >> 20,
        peak_sampled >> 20
    );
    assert!(
        served > 100,
        "the well-behaved client made only {served} round trips"
    );
    assert!(
        p99 < Duration::from_millis(200) && worst < Duration::from_secs(2),
        "the well-behaved client waited p99 {p99:?}, at worst {worst:?}"
    );
    let text = metrics["text"].as_str().unwrap();
    assert!(
        text.lines().any(|l| l
            .strip_prefix("bloomgate_input_evictions_total ")
            .is_some_and(|v| v.trim().parse::<u64>().unwrap() >= 50)),
        "{text}"
    );
    eprintln!(
        "RSS before {} MiB, peak {} MiB (sampled {} MiB); {} attackers closed; good client: {served} round trips (BF.ADD + BF.EXISTS), p50 {p50:?}, p99 {p99:?}, worst {worst:?}",
        before >> 20,
        hwm >> 20,
        peak_sampled >> 20,
        closed.len()
    );
}

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// `--max-memory` bounds all filters together: creates, loads and growth
/// steps past it are refused before anything is allocated (RESP `-OOM`,
/// HTTP 507), and what is already served is untouched.
#[test]
fn max_memory_refuses_what_would_pass_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["--max-memory", "64M"]);
    let mut c = s.resp();
    // ~24 MB: fits.
    assert_eq!(
        c.cmd(&["BF.RESERVE", "a", "0.01", "20000000"]),
        V::Simple("OK".into())
    );
    assert_eq!(c.cmd(&["BF.ADD", "a", "kept"]).int(), 1);
    // ~48 MB more: refused, nothing left behind.
    assert_eq!(c.cmd(&["BF.RESERVE", "b", "0.01", "40000000"]).err(), OOM);
    assert_eq!(c.cmd(&["EXISTS", "b"]).int(), 0);
    assert!(!dir.path().join("b.bgf").exists());
    // ≈ 5.4 GB of counters: refused at once, never allocated.
    let r = c.cmd(&[
        "CF.RESERVE",
        "c9",
        "1000000000",
        "LAYOUT",
        "COUNTING",
        "ERROR",
        "0.01",
    ]);
    assert_eq!(r.err(), OOM);
    assert_eq!(c.cmd(&["EXISTS", "c9"]).int(), 0);
    // Four 1.44 GB filters: not one.
    assert_eq!(
        c.cmd(&["BF.RESERVE", "g1", "0.01", "1000000000"]).err(),
        OOM
    );
    let (code, body) = s.http(
        "POST",
        "/v1/filters",
        Some(r#"{"name":"h","items":40000000,"fp":0.01,"kind":"raw"}"#),
        None,
    );
    assert_eq!(code, 507, "{body}");
    assert_eq!(body["error"]["code"], "out_of_memory");
    // A growth step past the limit: EXPANSION 32768 from 2 items makes a
    // second layer of 65,536 items and a third of 2³¹ (≈ 2.5 GB).
    assert_eq!(
        c.cmd(&["BF.RESERVE", "g", "0.01", "2", "EXPANSION", "32768"]),
        V::Simple("OK".into())
    );
    let mut refused = None;
    let mut acked = Vec::new();
    'adding: for batch in 0..80 {
        let items: Vec<String> = (0..1000).map(|i| format!("g{batch}-{i}")).collect();
        let mut args = vec!["BF.MADD", "g"];
        args.extend(items.iter().map(String::as_str));
        match c.cmd(&args) {
            V::Arr(r) => {
                for (item, v) in items.iter().zip(r) {
                    match v {
                        V::Int(_) => acked.push(item.clone()),
                        V::Err(e) => {
                            refused = Some(e);
                            break 'adding;
                        }
                        other => panic!("{other:?}"),
                    }
                }
            }
            V::Err(e) => {
                refused = Some(e);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    let refused = refused.expect("the growth past --max-memory was refused");
    assert!(refused.starts_with("OOM"), "{refused}");
    assert!(acked.len() > 60_000, "{} acknowledged", acked.len());
    // Every acknowledged add is still there, and the other filter too.
    for chunk in acked.chunks(5000) {
        let mut args = vec!["BF.MEXISTS", "g"];
        args.extend(chunk.iter().map(String::as_str));
        let V::Arr(r) = c.cmd(&args) else { panic!() };
        assert!(r.iter().all(|v| *v == V::Int(1)));
    }
    assert_eq!(c.cmd(&["BF.EXISTS", "a", "kept"]).int(), 1);
    // Room freed by a delete can be used again.
    assert_eq!(c.cmd(&["DEL", "a"]).int(), 1);
    assert_eq!(
        c.cmd(&["BF.RESERVE", "b", "0.01", "40000000"]),
        V::Simple("OK".into())
    );
    let (code, _) = s.http("GET", "/healthz", None, None);
    assert_eq!(code, 200);
}

/// Creating a counting or a cuckoo filter writes its `NAME.cf` without a
/// second copy of its tables: the server's peak resident memory stays
/// about one filter above what it was before (the tables, zeroed and
/// untouched, cost little until the file is written; a copy of them, as
/// an image in one buffer, would cost their whole size on top). The
/// `--max-memory` accounting counts each filter once. `CF.SCANDUMP` of
/// the whole filter keeps to the same bound.
#[test]
fn deletable_creates_write_their_file_without_a_second_copy() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["--max-memory", "300M"]);
    let pid = s.child.id();
    let mut c = s.resp();
    let created = [
        // ≈ 120 MB of cuckoo slots.
        ("cuckoo", "100000000", "CUCKOO"),
        // ≈ 120 MB of counters.
        ("counting", "25000000", "COUNTING"),
    ];
    let mut sizes = Vec::new();
    for (name, items, layout) in created {
        let (_, before) = rss(pid);
        assert_eq!(
            c.cmd(&["CF.RESERVE", name, items, "LAYOUT", layout]),
            V::Simple("OK".into()),
            "{name}"
        );
        let size = std::fs::metadata(dir.path().join(format!("{name}.cf")))
            .unwrap()
            .len();
        assert!(size > 100 << 20, "{name}: {size} bytes");
        let (_, peak) = rss(pid);
        // One filter (the tables, the whole of it touched at worst) and a
        // bounded buffer: a second copy would add a whole `size`.
        let bound = before + size * 13 / 10;
        assert!(
            peak < bound,
            "{name}: peak {peak} bytes after creating a {size}-byte filter from {before} (bound {bound})"
        );
        sizes.push(size);
        // A whole dump, chunk by chunk, keeps to the same bound.
        let mut iter = 0i64;
        let mut dumped = 0u64;
        loop {
            let V::Arr(r) = c.cmd(&["CF.SCANDUMP", name, &iter.to_string()]) else {
                panic!("{name}: scandump")
            };
            iter = r[0].int();
            if iter == 0 {
                break;
            }
            if let V::Bulk(b) = &r[1] {
                dumped += b.len() as u64;
            }
        }
        assert!(dumped > size / 2, "{name}: dumped {dumped} of {size}");
        let (_, peak) = rss(pid);
        assert!(
            peak < bound,
            "{name}: peak {peak} bytes after a dump of a {size}-byte filter from {before} (bound {bound})"
        );
    }
    // Each filter counted once against --max-memory: the two fit in
    // it, a third as large does not.
    let total: u64 = sizes.iter().sum();
    assert!(
        total < 300 << 20 && total + sizes[0] > 300 << 20,
        "{sizes:?}"
    );
    let r = c.cmd(&["CF.RESERVE", "third", created[0].1, "LAYOUT", "CUCKOO"]);
    assert_eq!(r.err(), OOM);
    // The next start loads both without a second copy either: what fits
    // in memory once can be served again.
    drop(c);
    drop(s);
    let s = Server::start(dir.path(), &["--max-memory", "300M"]);
    let mut c = s.resp();
    assert_eq!(c.cmd(&["EXISTS", "cuckoo", "counting"]).int(), 2);
    let (_, peak) = rss(s.child.id());
    let bound = (16 << 20) + total * 13 / 10;
    assert!(
        peak < bound,
        "peak {peak} bytes after loading {total} bytes of filters (bound {bound})"
    );
}
