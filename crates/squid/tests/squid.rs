//! `bloomgate squid-helper` behind a real Squid (Debian `squid`, installed
//! by scripts/test.sh): a Squid started on a free loopback port with the
//! README's squid.conf (paths and port replaced), in front of an origin
//! server the test runs (Squid forwards everything to it as its parent), and
//! curl through the proxy. Skipped without squid or curl unless
//! `BLOOMGATE_REQUIRE_CLIENTS` is set.
//!
//! No step depends on timing: Squid's startup and a replaced file are
//! waited for in bounded loops with generous limits; each request uses a
//! URL not asked before, so Squid's cache of helper answers never answers
//! for the helper.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testkit::redis::RedisServer;
use testkit::{bin, free_port, p, skip};

/// The README's blocks in ```conf fences, in order.
fn readme_confs() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for l in text.lines() {
        match &mut cur {
            Some(c) if l.starts_with("```") => out.push(std::mem::take(c)),
            Some(c) => {
                c.push_str(l);
                c.push('\n');
                continue;
            }
            None => {}
        }
        cur = (l == "```conf").then(String::new);
    }
    out
}

fn squid_bin() -> Option<PathBuf> {
    ["/usr/sbin/squid", "/usr/local/sbin/squid"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

fn have_tools() -> bool {
    if squid_bin().is_none() {
        skip("squid (Debian package squid)");
        return false;
    }
    if !testkit::have("curl") {
        skip("curl");
        return false;
    }
    true
}

/// An origin server answering 200 `origin` to every request.
fn origin() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut s = s;
                let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\norigin",
                );
            });
        }
    });
    port
}

/// A Squid running a config, killed on drop.
struct Squid {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Squid {
    /// Starts Squid with `conf` (a README block) made to run here: the
    /// README's port, bloomgate path and list directory replaced, and the
    /// lines a test needs added (its own pid, log and cache settings, and
    /// the origin as the parent of every request).
    #[allow(clippy::zombie_processes)] // killed and waited for in Drop
    fn start(dir: &Path, conf: &str, lists: &Path, origin: u16) -> Squid {
        let port = free_port();
        let sq = dir.join(format!("squid-{port}"));
        std::fs::create_dir_all(&sq).unwrap();
        let text = conf
            .replace("127.0.0.1:3128", &format!("127.0.0.1:{port}"))
            .replace("/usr/local/bin/bloomgate", p(bin()))
            .replace("/var/lib/bloomgate/", &format!("{}/", p(lists)));
        assert!(text != conf && !text.contains("/var/lib/bloomgate"));
        let root = rustix_is_root();
        let mut text = text;
        text.push_str(&format!(
            "# test only: its own files, no cache, the origin as parent\n\
             pid_filename {d}/squid.pid\n\
             cache_log {d}/cache.log\n\
             access_log stdio:{d}/access.log\n\
             cache_store_log none\n\
             coredump_dir {d}\n\
             cache deny all\n\
             cache_mem 8 MB\n\
             shutdown_lifetime 0 seconds\n\
             netdb_filename none\n\
             pinger_enable off\n\
             visible_hostname bloomgate-test\n\
             dns_nameservers 127.0.0.1\n\
             cache_peer 127.0.0.1 parent {origin} 0 no-query no-digest originserver name=origin\n\
             never_direct allow all\n",
            d = p(&sq)
        ));
        if root {
            // Squid will not run as root: it becomes `proxy`, which must
            // write its logs and read the lists and the binary.
            text.push_str("cache_effective_user proxy\n");
            open_up(dir);
        }
        std::fs::write(sq.join("squid.conf"), &text).unwrap();
        let child = Command::new(squid_bin().unwrap())
            // Its own service name: Squids of parallel tests must not
            // share their IPC sockets and shared memory names.
            .args(["-N", "-n", &format!("bgtest{port}"), "-f"])
            .arg(sq.join("squid.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(sq.join("stderr")).unwrap())
            .spawn()
            .expect("spawn squid");
        let mut s = Squid {
            child,
            port,
            dir: sq,
        };
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = s.child.try_wait() {
                panic!("squid exited ({status}): {}", s.logs());
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "squid did not listen: {}",
                s.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    fn logs(&self) -> String {
        let read = |n: &str| std::fs::read_to_string(self.dir.join(n)).unwrap_or_default();
        format!(
            "\n--- stderr\n{}\n--- cache.log\n{}",
            read("stderr"),
            read("cache.log")
        )
    }

    /// Status code and redirect target of `url` fetched through Squid.
    fn get(&self, url: &str) -> (u16, String) {
        let o = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "--path-as-is", "--max-time", "120"])
            .args(["-w", "%{http_code} %{redirect_url}", "-x"])
            .arg(format!("http://127.0.0.1:{}", self.port))
            .arg(url)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let (code, location) = out.split_once(' ').unwrap_or((&out, ""));
        (
            code.parse()
                .unwrap_or_else(|_| panic!("curl {url}: {out:?}{}", self.logs())),
            location.to_string(),
        )
    }

    fn expect(&self, url: &str, code: u16) {
        let (got, _) = self.get(url);
        assert_eq!(got, code, "{url}{}", self.logs());
    }
}

impl Drop for Squid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rustix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Lets every user into `dir` (the test's temporary directory, for Squid's
/// `proxy` user), and into the directories above the binary.
fn open_up(dir: &Path) {
    let _ = Command::new("chmod")
        .arg("-R")
        .arg("a+rwX")
        .arg(dir)
        .status();
    let mut d = bin().parent();
    while let Some(x) = d {
        let _ = Command::new("chmod").arg("a+x").arg(x).status();
        d = x.parent();
    }
}

fn bloomgate(args: &[&str]) -> String {
    testkit::ok(&testkit::bg(args))
}

/// squidGuard-style lists built into `dir/lists`: adult (a domain, 2,000
/// filler domains that give it false positives at 1 %, and a URL) and
/// gambling (a domain).
fn lists(dir: &Path) -> PathBuf {
    let sg = dir.join("blacklists");
    let mut adult = "evil.example\n# a comment\n".to_string();
    for i in 0..2000 {
        adult.push_str(&format!("filler{i}.example\n"));
    }
    for (cat, file, text) in [
        ("adult", "domains", adult.as_str()),
        ("adult", "urls", "clean.example/bad/page\n"),
        ("gambling", "domains", "casino.example\n"),
    ] {
        std::fs::create_dir_all(sg.join(cat)).unwrap();
        std::fs::write(sg.join(cat).join(file), text).unwrap();
    }
    let out = dir.join("lists");
    bloomgate(&[
        "build",
        "--squidguard",
        p(&sg),
        "--fp",
        "1e-2",
        "-o",
        p(&out),
    ]);
    out
}

/// A URL that is a false positive of `list` (found by asking it).
fn false_positive(list: &Path) -> String {
    let candidates: Vec<String> = (0..20_000)
        .map(|i| format!("http://fp{i}.example/"))
        .collect();
    let o = testkit::run_with_input(
        Command::new(bin()).args(["check", p(list), "-"]),
        candidates.join("\n").as_bytes(),
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .next()
        .expect("a false positive among 20,000 at 1 %")
        .to_string()
}

#[test]
fn readme_squid_conf_blocks_listed_urls_and_hosts_and_picks_up_a_replaced_file() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lists = lists(dir.path());
    let fp = false_positive(&lists.join("adult.bgf"));
    bloomgate(&["whitelist", "add", p(&lists.join("adult.bgf")), &fp]);
    let origin = origin();
    let conf = &readme_confs()[0];
    assert!(conf.contains("external_acl_type"), "{conf}");
    let squid = Squid::start(dir.path(), conf, &lists, origin);

    squid.expect("http://clean.example/", 200);
    // Canonicalization: the scheme and host's case, and /./, do not matter.
    squid.expect("HTTP://EVIL.example/./x", 403);
    squid.expect("http://www.evil.example/y", 403); // a listed domain's subdomain
    squid.expect("http://clean.example/bad/page", 403); // a listed URL
    squid.expect("http://clean.example/bad/page/below", 403);
    squid.expect("http://clean.example/bad/pages", 200);
    squid.expect("http://casino.example/", 403); // the second list
    squid.expect(&fp, 200); // a whitelisted false positive

    // A rebuilt file, renamed over the old one, answers from the next request.
    squid.expect("http://newly.example/0", 200);
    let new_sg = dir.path().join("new-blacklists/adult");
    std::fs::create_dir_all(&new_sg).unwrap();
    let adult = std::fs::read_to_string(dir.path().join("blacklists/adult/domains")).unwrap();
    std::fs::write(new_sg.join("domains"), adult + "newly.example\n").unwrap();
    let staged = dir.path().join("staged.bgf");
    bloomgate(&[
        "build",
        "--squidguard",
        p(new_sg.parent().unwrap()),
        "--fp",
        "1e-2",
        "-o",
        p(&staged),
    ]);
    if rustix_is_root() {
        open_up(dir.path());
    }
    std::fs::rename(&staged, lists.join("adult.bgf")).unwrap();
    let t = Instant::now();
    let mut i = 1;
    while squid.get(&format!("http://newly.example/{i}")).0 != 403 {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the replaced file was not picked up{}",
            squid.logs()
        );
        i += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    squid.expect("http://clean.example/again", 200);
    squid.expect("http://casino.example/again", 403);
}

#[test]
fn readme_url_rewrite_conf_redirects_to_the_block_page() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lists = lists(dir.path());
    let conf = &readme_confs()[1];
    assert!(conf.contains("url_rewrite_program"), "{conf}");
    let squid = Squid::start(dir.path(), conf, &lists, origin());
    let (code, location) = squid.get("http://www.casino.example/x");
    // curl shows the Location decoded or not depending on its version.
    let location = location.replace("%3A", ":").replace("%2F", "/");
    assert_eq!(
        (code, location.as_str()),
        (
            302,
            "http://blocked.example/?category=gambling&url=http://www.casino.example/x"
        ),
        "{}",
        squid.logs()
    );
    squid.expect("http://clean.example/", 200);
}

#[test]
fn a_redis_killed_behind_the_helper_is_refused_not_passed() {
    if !have_tools() {
        return;
    }
    if testkit::redis::redis_missing() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lists = lists(dir.path());
    let mut redis = RedisServer::start(dir.path(), &[]);
    let address = format!("redis://127.0.0.1:{}/adult", redis.port);
    bloomgate(&["push", p(&lists.join("adult.bgf")), &address]);
    let conf = readme_confs()[0].replace("/var/lib/bloomgate/adult.bgf", &address);
    let squid = Squid::start(dir.path(), &conf, &lists, origin());
    squid.expect("http://evil.example/", 403);
    squid.expect("http://clean.example/", 200);
    redis.kill9();
    // Never a pass when the list cannot answer: Squid gets BH and refuses.
    let (code, _) = squid.get("http://clean.example/after-redis-died");
    assert_ne!(code, 200, "{}", squid.logs());
    let (code, _) = squid.get("http://evil.example/after-redis-died");
    assert_ne!(code, 200, "{}", squid.logs());
    let cache_log = std::fs::read_to_string(squid.dir.join("cache.log")).unwrap_or_default();
    let access_log = std::fs::read_to_string(squid.dir.join("access.log")).unwrap_or_default();
    assert!(
        access_log.contains("after-redis-died"),
        "{access_log}{cache_log}"
    );
}
