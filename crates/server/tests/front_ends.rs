//! `bloomgate serve` behind the programs that ask blacklists for real:
//! nginx (`auth_request` to `GET /v1/filters/NAME/auth`) and Postfix
//! (`check_sender_access socketmap:…`, served by `--socketmap`), each with
//! the config README.md shows — read from the README here, with only its
//! ports replaced, so the README cannot drift from what is tested — plus the
//! two protocols spoken directly: the endpoint's refusals, and hostile
//! socketmap clients.
//!
//! nginx and Postfix are the Debian packages `scripts/test.sh` installs.
//! Without them (or, for Postfix, whose master needs root, without root)
//! a test skips with a note, unless `BLOOMGATE_REQUIRE_CLIENTS` is set
//! (`scripts/test.sh`, CI): then it fails. Every wait is bounded and
//! generous; nothing depends on timing.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testkit::{bg, free_port, ok, program, skip, write_lines, Dir, Server};

/// The fenced block after the README line containing `marker`.
fn readme_block(marker: &str) -> String {
    let text = include_str!("../../../README.md");
    let mut lines = text.lines().skip_while(|l| !l.contains(marker));
    assert!(lines.next().is_some(), "README.md has no {marker:?}");
    let fence = lines.next().unwrap_or_default();
    assert!(fence.starts_with("```"), "no block after {marker:?}");
    let body: Vec<&str> = lines.take_while(|l| !l.starts_with("```")).collect();
    body.join("\n") + "\n"
}

/// `text` with `from` (which must occur exactly once) replaced by `to`.
fn substitute(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "the README block must hold {from:?} once:\n{text}"
    );
    text.replace(from, to)
}

/// A loopback port free when asked (the program given it binds it soon
/// after; a start that loses the race is retried with another).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Waits until `addr` accepts a connection; false if `alive` says the
/// program exited first or 120 s pass.
fn wait_listening(addr: SocketAddr, mut alive: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(120) {
        if TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_ok() {
            return true;
        }
        if !alive() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// One raw HTTP/1.1 request (`Connection: close` is added); the status,
/// the headers (names lowercased) and the body.
fn raw_http(addr: SocketAddr, head: &str, body: &str) -> (u16, Vec<(String, String)>, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let req = format!("{head}\r\nConnection: close\r\n\r\n{body}");
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp).into_owned();
    let (h, b) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = h.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, b.to_string())
}

fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// An nginx master (`daemon off`) with its own prefix, pid, logs and temp
/// directories; stopped (SIGTERM, which stops its workers) on drop.
struct Nginx {
    child: Child,
    addr: SocketAddr,
    error_log: PathBuf,
}

impl Nginx {
    /// Starts nginx with `http_block` (the `http { }` contents, `{PORT}`
    /// standing for its listen port), retrying with other ports if one was
    /// taken meanwhile.
    fn start(bin: &Path, dir: &Path, http_block: &dyn Fn(u16) -> String) -> Nginx {
        for attempt in 0..5 {
            let prefix = dir.join(format!("nginx-{attempt}"));
            for sub in ["logs", "tmp"] {
                std::fs::create_dir_all(prefix.join(sub)).unwrap();
            }
            let port = free_port();
            let p = prefix.display();
            let temps: String = ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"]
                .iter()
                .map(|t| format!("    {t}_temp_path {p}/tmp/{t};\n"))
                .collect();
            let conf = format!(
                "daemon off;\nmaster_process on;\nworker_processes 1;\npid {p}/nginx.pid;\n\
                 error_log {p}/logs/error.log info;\nevents {{ worker_connections 64; }}\n\
                 http {{\n    access_log {p}/logs/access.log;\n{temps}{}\n}}\n",
                http_block(port)
            );
            let conf_path = prefix.join("nginx.conf");
            std::fs::write(&conf_path, conf).unwrap();
            let error_log = prefix.join("logs/error.log");
            let mut child = Command::new(bin)
                .arg("-p")
                .arg(&prefix)
                .arg("-c")
                .arg(&conf_path)
                .arg("-e")
                .arg(&error_log)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn nginx");
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            if wait_listening(addr, || matches!(child.try_wait(), Ok(None))) {
                return Nginx {
                    child,
                    addr,
                    error_log,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&error_log).unwrap_or_default();
            assert!(
                log.contains("Address already in use"),
                "nginx did not start:\n{log}"
            );
        }
        panic!("nginx found no free port in 5 tries");
    }

    fn get(&self, head: &str) -> (u16, Vec<(String, String)>, String) {
        raw_http(self.addr, head, "")
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(60) {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The clean URLs the tests ask about.
const CLEAN: [&str; 5] = [
    "http://good.example/",
    "http://good.example/fine",
    "http://good.example/x",
    "http://evil.example/y",
    "http://evil.example/",
];

/// A `url` filter `urls` of `listed` plus 2000 others, at a 1 % rate so
/// that a false positive is easy to find; and that false positive.
fn url_filter(dir: &Dir, listed: &[&str]) -> (PathBuf, String) {
    let data = dir.path("data");
    std::fs::create_dir_all(&data).unwrap();
    let list = dir.path("urls.txt");
    write_lines(
        &list,
        listed
            .iter()
            .map(|s| s.to_string())
            .chain((0..2000).map(|i| format!("listed-{i}.example/page"))),
    );
    // The clean URLs the tests assert on must not be false positives
    // themselves (1 % each): the first seed under which none is.
    let clean: String = CLEAN.iter().map(|u| format!("{u}\n")).collect();
    for seed in 1.. {
        ok(&bg(&[
            "build",
            "--keys",
            "url",
            "-n",
            "2100",
            "-p",
            "0.01",
            "--seed",
            &seed.to_string(),
            "-o",
            data.join("urls.bgf").to_str().unwrap(),
            list.to_str().unwrap(),
        ]));
        let mut check = Command::new(testkit::bin());
        check.args(["check", data.join("urls.bgf").to_str().unwrap()]);
        let out = testkit::run_with_input(&mut check, clean.as_bytes());
        if out.stdout.is_empty() {
            break;
        }
        assert!(
            seed < 100,
            "no seed without a false positive among {CLEAN:?}"
        );
    }
    // The first of these clean URLs that the filter calls listed.
    let candidates: String = (0..20_000)
        .map(|i| format!("http://clean-{i}.example/\n"))
        .collect();
    let mut check = Command::new(testkit::bin());
    check.args(["check", data.join("urls.bgf").to_str().unwrap()]);
    let out = testkit::run_with_input(&mut check, candidates.as_bytes());
    let fp = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .expect("a false positive among 20,000 clean URLs at a 1 % rate")
        .to_string();
    (data, fp)
}

#[test]
fn nginx_auth_request_blocks_listed_urls_and_fails_closed() {
    let Some(nginx) = program("nginx") else {
        return skip("nginx is not installed (Debian package nginx; scripts/test.sh installs it)");
    };
    let dir = Dir::new();
    let (data, fp) = url_filter(&dir, &["evil.example/x", "bad.example/"]);
    let mut server = Server::start(&data, &[]);
    // The false positive, whitelisted: served, it is a miss.
    let (st, v) = server.http(
        "POST",
        "/v1/filters/urls/whitelist",
        Some(&serde_json::json!([fp]).to_string()),
        None,
    );
    assert_eq!(st, 200, "{v}");
    let origin = free_port();
    let block = readme_block("the nginx config that crates/server/tests/front_ends.rs runs");
    let http = server.http;
    let nginx = Nginx::start(&nginx, dir.0.path(), &|port| {
        let site = substitute(&block, "listen 80;", &format!("listen 127.0.0.1:{port};"));
        let site = substitute(&site, "127.0.0.1:3000", &format!("127.0.0.1:{origin}"));
        let site = substitute(&site, "127.0.0.1:8080", &http.to_string());
        format!(
            "    server {{ listen 127.0.0.1:{origin}; location / {{ return 200 \"origin\\n\"; }} }}\n{site}"
        )
    });
    let log = || std::fs::read_to_string(&nginx.error_log).unwrap_or_default();

    // Listed, through canonicalization: a host in capitals, a dot segment,
    // the absolute form of the request line with an upper-case scheme.
    for head in [
        "GET /./x HTTP/1.1\r\nHost: EVIL.example",
        "GET HTTP://EVIL.example/./x HTTP/1.1\r\nHost: other.example",
        "GET /a/../x HTTP/1.1\r\nHost: evil.example",
        "GET / HTTP/1.1\r\nHost: BAD.example",
        "GET /page HTTP/1.1\r\nHost: listed-7.example",
    ] {
        let (status, headers, _) = nginx.get(head);
        assert_eq!(status, 403, "{head}\n{}", log());
        let by = header(&headers, "x-blocked-by").unwrap_or_default();
        assert!(!by.is_empty(), "{head}: the matched entry is passed on");
    }
    let (_, headers, _) = nginx.get("GET /./x HTTP/1.1\r\nHost: EVIL.example");
    assert_eq!(header(&headers, "x-blocked-by"), Some("evil.example/x"));

    // Clean, and the whitelisted false positive, reach the origin.
    let fp_host = fp.trim_start_matches("http://").trim_end_matches('/');
    for head in [
        "GET /fine HTTP/1.1\r\nHost: good.example".to_string(),
        "GET /y HTTP/1.1\r\nHost: evil.example".to_string(),
        format!("GET / HTTP/1.1\r\nHost: {fp_host}"),
    ] {
        let (status, _, body) = nginx.get(&head);
        assert_eq!(
            (status, body.as_str()),
            (200, "origin\n"),
            "{head}\n{}",
            log()
        );
    }
    // A POST with a body a browser could send: judged by its URL alone.
    for (host, want) in [("evil.example", 403), ("good.example", 200)] {
        let head = format!(
            "POST /x HTTP/1.1\r\nHost: {host}\r\nOrigin: http://attacker.example\r\nSec-Fetch-Site: cross-site\r\nContent-Type: text/plain\r\nContent-Length: 5"
        );
        let (status, _, _) = raw_http(nginx.addr, &head, "hello");
        assert_eq!(status, want, "{head}\n{}", log());
    }

    // bloomgate gone: an error (500), never a pass.
    server.kill9();
    for head in [
        "GET /fine HTTP/1.1\r\nHost: good.example",
        "GET /./x HTTP/1.1\r\nHost: evil.example",
    ] {
        let (status, _, _) = nginx.get(head);
        assert_eq!(status, 500, "{head}\n{}", log());
    }
}

/// `GET /v1/filters/NAME/auth` spoken directly: each verdict, each refusal.
#[test]
fn auth_endpoint_verdicts_and_refusals() {
    let dir = Dir::new();
    let (data, _) = url_filter(&dir, &["evil.example/x"]);
    let server = Server::start(&data, &[]);
    let get = |path: &str, headers: &str| {
        raw_http(
            server.http,
            &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}"),
            "",
        )
    };
    let (st, h, body) = get(
        "/v1/filters/urls/auth",
        "X-Original-URI: http://EVIL.example/./x",
    );
    assert_eq!(st, 403, "{body}");
    assert_eq!(header(&h, "x-bloomgate-verdict"), Some("hit"));
    assert_eq!(header(&h, "x-bloomgate-matched"), Some("evil.example/x"));
    let (st, h, body) = get(
        "/v1/filters/urls/auth",
        "X-Original-URI: http://good.example/",
    );
    assert_eq!((st, body.as_str()), (204, ""));
    assert_eq!(header(&h, "x-bloomgate-verdict"), Some("miss"));
    // Another header, named by the query; the filter named by a header.
    let (st, _, _) = get(
        "/v1/filters/urls/auth?header=X-Original-URL",
        "X-Original-URL: http://evil.example/x",
    );
    assert_eq!(st, 403);
    let (st, _, _) = get(
        "/v1/auth",
        "X-Bloomgate-Filter: urls\r\nX-Original-URI: http://evil.example/x",
    );
    assert_eq!(st, 403);
    // What nginx must treat as an error (not 2xx, 401 or 403).
    for (path, headers, want) in [
        ("/v1/filters/urls/auth", "", 400),
        (
            "/v1/filters/urls/auth?header=X-Other",
            "X-Original-URI: http://evil.example/x",
            400,
        ),
        (
            "/v1/filters/urls/auth",
            "X-Original-URI: http://evil.example/x\r\nX-Original-URI: http://good.example/",
            400,
        ),
        (
            "/v1/filters/urls/auth",
            "X-Original-URI: not a url at all",
            400,
        ),
        (
            "/v1/filters/nosuch/auth",
            "X-Original-URI: http://evil.example/x",
            404,
        ),
        ("/v1/auth", "X-Original-URI: http://evil.example/x", 400),
    ] {
        let (st, h, body) = get(path, headers);
        assert_eq!(st, want, "{path} {headers}: {body}");
        assert_eq!(header(&h, "x-bloomgate-verdict"), None);
    }
    // A page whose name resolves to 127.0.0.1 cannot ask (DNS rebinding).
    let (st, _, body) = raw_http(
        server.http,
        "GET /v1/filters/urls/auth HTTP/1.1\r\nHost: attacker.example\r\nX-Original-URI: http://evil.example/x",
        "",
    );
    assert_eq!(st, 403, "{body}");
    assert!(body.contains("foreign_host"), "{body}");

    // With a token, the endpoint wants it as every read does.
    // (Another server, on a copy: a data directory has one server.)
    let tdir = Dir::new();
    let token = tdir.write("token", b"0123456789abcdef0123\n");
    let tdata = tdir.path("data");
    std::fs::create_dir_all(&tdata).unwrap();
    std::fs::copy(data.join("urls.bgf"), tdata.join("urls.bgf")).unwrap();
    let tserver = Server::start(&tdata, &["--token-file", token.to_str().unwrap()]);
    let ask = |auth: &str| {
        raw_http(
            tserver.http,
            &format!("GET /v1/filters/urls/auth HTTP/1.1\r\nHost: localhost\r\nX-Original-URI: http://evil.example/x{auth}"),
            "",
        )
        .0
    };
    assert_eq!(ask(""), 401);
    assert_eq!(ask("\r\nAuthorization: Bearer 0123456789abcdef0123"), 403);
}

/// The socketmap address of `server`, as `host:port`.
fn socketmap_tcp(server: &Server) -> SocketAddr {
    let a = server
        .socketmap
        .as_deref()
        .expect("started with --socketmap");
    a.strip_prefix("inet:").unwrap().parse().unwrap()
}

fn netstring(s: &[u8]) -> Vec<u8> {
    let mut v = format!("{}:", s.len()).into_bytes();
    v.extend_from_slice(s);
    v.push(b',');
    v
}

/// Reads one netstring reply.
fn read_reply(s: &mut TcpStream) -> String {
    let mut len = Vec::new();
    let mut b = [0u8; 1];
    loop {
        s.read_exact(&mut b).expect("a reply");
        if b[0] == b':' {
            break;
        }
        len.push(b[0]);
    }
    let n: usize = String::from_utf8(len).unwrap().parse().unwrap();
    let mut payload = vec![0u8; n + 1];
    s.read_exact(&mut payload).unwrap();
    assert_eq!(payload.pop(), Some(b','));
    String::from_utf8(payload).unwrap()
}

fn host_filter(dir: &Dir) -> PathBuf {
    let data = dir.path("data");
    std::fs::create_dir_all(&data).unwrap();
    let list = dir.lines("disposable.txt", &["disposable.example", "mailinator.test"]);
    ok(&bg(&[
        "build",
        "--keys",
        "host",
        "-n",
        "1000",
        "-p",
        "1e-6",
        "-o",
        data.join("disposable.bgf").to_str().unwrap(),
        list.to_str().unwrap(),
    ]));
    data
}

/// The socketmap protocol spoken directly: each answer, pipelined
/// requests, and hostile clients cut off while an honest one is served.
#[test]
fn socketmap_answers_and_cuts_off_hostile_clients() {
    let dir = Dir::new();
    let data = host_filter(&dir);
    let server = Server::start(
        &data,
        &["--socketmap", "127.0.0.1:0", "--request-secs", "2"],
    );
    let addr = socketmap_tcp(&server);
    let mut honest = TcpStream::connect(addr).unwrap();
    honest
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let ask = |honest: &mut TcpStream, req: &[u8]| {
        honest.write_all(&netstring(req)).unwrap();
        read_reply(honest)
    };
    assert_eq!(
        ask(&mut honest, b"disposable joe@sub.disposable.example"),
        "OK REJECT listed in disposable (disposable.example)"
    );
    assert_eq!(
        ask(&mut honest, b"disposable joe@good.example"),
        "NOTFOUND "
    );
    assert_eq!(ask(&mut honest, b"disposable joe@"), "NOTFOUND ");
    assert_eq!(ask(&mut honest, b"disposable <>"), "NOTFOUND ");
    assert!(ask(&mut honest, b"nosuch joe@x.example").starts_with("PERM "));
    assert!(ask(&mut honest, b"no-key-here").starts_with("PERM "));
    assert!(ask(&mut honest, b"disposable ").starts_with("PERM "));
    let long = [&b"disposable a@"[..], &vec![b'a'; 70_000]].concat();
    assert!(ask(&mut honest, &long).starts_with("PERM "));
    // Pipelined: answered in order on one connection.
    let mut many = Vec::new();
    for i in 0..100 {
        let d = if i % 2 == 0 {
            "mailinator.test"
        } else {
            "ok.example"
        };
        many.extend(netstring(format!("disposable u{i}@{d}").as_bytes()));
    }
    honest.write_all(&many).unwrap();
    for i in 0..100 {
        let r = read_reply(&mut honest);
        assert_eq!(r.starts_with("OK "), i % 2 == 0, "{i}: {r}");
    }

    // Hostile: a huge length (refused at its digits, before any buffer),
    // garbage, a missing comma: PERM, then closed.
    for bad in [
        &b"99999999999999999999:"[..],
        b"GET / HTTP/1.1\r\n\r\n",
        b"3:abcX",
    ] {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(bad).unwrap();
        assert!(read_reply(&mut s).starts_with("PERM "));
        let mut rest = Vec::new();
        assert_eq!(s.read_to_end(&mut rest).unwrap_or(0), 0, "closed");
    }
    // A slow drip: a started request that does not arrive whole within
    // --request-secs is cut off (bounded wait, far longer than the limit).
    let mut drip = TcpStream::connect(addr).unwrap();
    drip.set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    drip.write_all(b"50000:disposable a@").unwrap();
    let mut rest = Vec::new();
    let t = Instant::now();
    assert_eq!(drip.read_to_end(&mut rest).unwrap_or(0), 0);
    assert!(t.elapsed() < Duration::from_secs(120));
    // The honest client was never held up, and still gets answers.
    assert!(ask(&mut honest, b"disposable x@mailinator.test").starts_with("OK "));
}

/// `--socketmap unix:PATH`: the same answers on a unix socket that every
/// local user may connect to; a second server cannot take a live socket.
#[test]
fn socketmap_on_a_unix_socket() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixStream;
    let dir = Dir::new();
    let data = host_filter(&dir);
    let path = dir.path("socketmap.sock");
    let arg = format!("unix:{}", path.display());
    let server = Server::start(&data, &["--socketmap", &arg]);
    assert_eq!(server.socketmap.as_deref(), Some(arg.as_str()));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o666);
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(&netstring(b"disposable joe@mailinator.test"))
        .unwrap();
    s.write_all(&netstring(b"disposable joe@good.example"))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !got.ends_with(b"9:NOTFOUND ,") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(
        String::from_utf8_lossy(&got),
        "48:OK REJECT listed in disposable (mailinator.test),9:NOTFOUND ,"
    );
    // A live socket is not taken over: the second server refuses to start.
    let other = dir.path("other");
    std::fs::create_dir_all(&other).unwrap();
    let out = bg(&[
        "serve",
        "--data-dir",
        other.to_str().unwrap(),
        "--http",
        "off",
        "--resp",
        "off",
        "--socketmap",
        &arg,
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a server answers on this socket"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private Postfix instance (its own config, queue and data directories
/// in a temporary directory), smtpd on a free loopback port, delivering
/// nowhere outside; stopped on drop.
struct Postfix {
    config: PathBuf,
    port: u16,
    maillog: PathBuf,
}

impl Postfix {
    fn start(bin: &Path, dir: &Path, restrictions: &str) -> Postfix {
        for attempt in 0..5 {
            let base = dir.join(format!("postfix-{attempt}"));
            let (config, queue, data) = (base.join("etc"), base.join("queue"), base.join("data"));
            for d in [&config, &queue, &data] {
                std::fs::create_dir_all(d).unwrap();
            }
            let status = Command::new("chown").arg("postfix").arg(&data).status();
            assert!(status.is_ok_and(|s| s.success()), "chown postfix {data:?}");
            let port = free_port();
            let maillog = base.join("maillog");
            let b = base.display();
            let main_cf = format!(
                "compatibility_level = 3.6\nqueue_directory = {b}/queue\ndata_directory = {b}/data\n\
                 mail_owner = postfix\nsetgid_group = postdrop\n\
                 myhostname = bloomgate-test.localhost\nmydomain = localhost\nmydestination = localhost\n\
                 inet_interfaces = 127.0.0.1\ninet_protocols = ipv4\nmynetworks = 127.0.0.0/8\n\
                 relayhost =\nrelay_domains =\n\
                 default_transport = error:no delivery outside this test\n\
                 relay_transport = error:no delivery outside this test\n\
                 alias_maps =\nalias_database =\nlocal_recipient_maps =\n\
                 smtpd_delay_reject = no\nsmtputf8_enable = no\nbiff = no\n\
                 maillog_file = {b}/maillog\nmaillog_file_prefixes = {b}\n\
                 {restrictions}"
            );
            std::fs::write(config.join("main.cf"), main_cf).unwrap();
            let services = [
                "pickup unix n - n 60 1 pickup",
                "cleanup unix n - n - 0 cleanup",
                "qmgr unix n - n 300 1 qmgr",
                "rewrite unix - - n - - trivial-rewrite",
                "bounce unix - - n - 0 bounce",
                "defer unix - - n - 0 bounce",
                "trace unix - - n - 0 bounce",
                "verify unix - - n - 1 verify",
                "flush unix n - n 1000? 0 flush",
                "proxymap unix - - n - - proxymap",
                "showq unix n - n - - showq",
                "error unix - - n - - error",
                "retry unix - - n - - error",
                "discard unix - - n - - discard",
                "local unix - n n - - local",
                "anvil unix - - n - 1 anvil",
                "scache unix - - n - 1 scache",
                "postlog unix-dgram n - n - 1 postlogd",
            ];
            let master_cf = format!(
                "127.0.0.1:{port} inet n - n - - smtpd\n{}\n",
                services.join("\n")
            );
            std::fs::write(config.join("master.cf"), master_cf).unwrap();
            let pf = Postfix {
                config,
                port,
                maillog,
            };
            let started = Command::new(bin)
                .arg("-c")
                .arg(&pf.config)
                .arg("start")
                .stdin(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            if started && wait_listening(addr, || pf.master_alive()) {
                return pf;
            }
            let log = pf.log();
            drop(pf);
            assert!(
                log.contains("in use") || log.contains("bind"),
                "postfix did not start:\n{log}"
            );
        }
        panic!("postfix found no free port in 5 tries");
    }

    fn pid(&self) -> Option<u32> {
        let dir = self.config.parent().unwrap().join("queue/pid/master.pid");
        std::fs::read_to_string(dir).ok()?.trim().parse().ok()
    }

    fn master_alive(&self) -> bool {
        self.pid()
            .is_some_and(|p| Path::new(&format!("/proc/{p}")).exists())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.maillog).unwrap_or_default()
    }
}

impl Drop for Postfix {
    fn drop(&mut self) {
        let pid = self.pid();
        let _ = Command::new(program("postfix").unwrap_or_else(|| "postfix".into()))
            .arg("-c")
            .arg(&self.config)
            .arg("stop")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let Some(pid) = pid else { return };
        let t = Instant::now();
        while Path::new(&format!("/proc/{pid}")).exists() && t.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `MAIL FROM` with each sender through Python's smtplib (one session,
/// `RSET` between); the replies' codes and texts.
fn smtp_mail_from(port: u16, senders: &[&str]) -> Vec<(u16, String)> {
    let script = r#"
import json, smtplib, sys
s = smtplib.SMTP("127.0.0.1", int(sys.argv[1]), timeout=120)
s.ehlo("client.test")
for a in sys.argv[2:]:
    code, msg = s.mail(a)
    print(json.dumps([code, msg.decode()]))
    s.rset()
s.quit()
"#;
    let out = Command::new("python3")
        .args(["-c", script, &port.to_string()])
        .args(senders)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "smtplib: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<(u16, String)>(l).unwrap())
        .collect()
}

#[test]
fn postfix_rejects_listed_sender_domains_through_socketmap() {
    if !is_root() {
        return skip("Postfix's master runs as root only; run this test as root (CI does)");
    }
    let Some(postfix) = program("postfix") else {
        return skip(
            "postfix is not installed (Debian package postfix; scripts/test.sh installs it)",
        );
    };
    let dir = Dir::new();
    // Postfix's daemons (user postfix) reach their directories through it.
    std::fs::set_permissions(
        dir.0.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let data = host_filter(&dir);
    let mut server = Server::start(&data, &["--socketmap", "127.0.0.1:0"]);
    let sm = socketmap_tcp(&server);
    let block = readme_block("it is the main.cf of crates/server/tests/front_ends.rs");
    let restrictions = substitute(&block, "127.0.0.1:8025", &sm.to_string());
    let pf = Postfix::start(&postfix, dir.0.path(), &restrictions);

    let replies = smtp_mail_from(
        pf.port,
        &[
            "joe@disposable.example",
            "joe@Sub.MAILINATOR.test",
            "joe@good.example",
            "",
        ],
    );
    let [listed, sub, good, null] = &replies[..] else {
        panic!("{replies:?}")
    };
    for r in [listed, sub] {
        assert_eq!(r.0, 554, "{r:?}\n{}", pf.log());
        assert!(
            r.1.contains("Sender address rejected: listed in disposable"),
            "{r:?}"
        );
    }
    assert!(sub.1.contains("(mailinator.test)"), "{sub:?}");
    assert_eq!(good.0, 250, "{good:?}\n{}", pf.log());
    assert_eq!(null.0, 250, "the null sender: {null:?}");

    // bloomgate stopped: Postfix defers (4xx), never accepts.
    server.kill9();
    for r in smtp_mail_from(pf.port, &["joe@good.example", "joe@disposable.example"]) {
        assert!((400..500).contains(&r.0), "{r:?}\n{}", pf.log());
    }
}
