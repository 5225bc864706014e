//! Who may make the server do what, and what a client can make it hold:
//! cross-site and cross-protocol writes, the input budget before the
//! token, hostile `KEYS` patterns, big `BF.LOADCHUNK` chunks, and the
//! answers to malformed requests (JSON errors, `NOAUTH`, `CONFIG SET`, an
//! error on a half-sent frame that arrives instead of a reset).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use testkit::{Server, V};

const TOKEN: &str = "access-token-0123456789";

/// Sends `req` as is, reads until the server closes (or `timeout` passes
/// without a byte); returns status (0 if none), the header block and the
/// JSON body (`{"text": …}` when it is not JSON).
fn raw_http(addr: SocketAddr, req: &[u8], timeout: Duration) -> (u16, String, serde_json::Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(timeout)).unwrap();
    s.write_all(req).unwrap();
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    parse_response(&resp)
}

fn parse_response(resp: &[u8]) -> (u16, String, serde_json::Value) {
    let text = String::from_utf8_lossy(resp).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let json = serde_json::from_str(body).unwrap_or_else(|_| serde_json::json!({ "text": body }));
    (status, head.to_ascii_lowercase(), json)
}

/// A request with `headers` (each ending in CRLF) and `body`.
fn request(method: &str, path: &str, headers: &str, body: &str) -> Vec<u8> {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn code(v: &serde_json::Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

fn hit(s: &Server, filter: &str, item: &str) -> bool {
    let (st, v) = s.http(
        "GET",
        &format!("/v1/filters/{filter}/check?item={item}"),
        None,
        None,
    );
    assert_eq!(st, 200, "{v}");
    v["hit"].as_bool().unwrap()
}

/// A page on another site can make a browser send "simple" requests
/// (`text/plain`, forms) anywhere, with its `Origin`: none of them may
/// change anything. JSON from the server's own origin (or from no
/// browser at all) still does.
#[test]
fn cross_site_http_writes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let (st, v) = s.http(
        "POST",
        "/v1/filters",
        Some(r#"{"name":"phish","items":1000,"fp":0.01}"#),
        None,
    );
    assert_eq!(st, 201, "{v}");
    let (st, _) = s.http(
        "POST",
        "/v1/filters/phish/add",
        Some(r#"["evil.example"]"#),
        None,
    );
    assert_eq!(st, 200);
    let t = Duration::from_secs(30);
    // The issue's request: text/plain from attacker.example.
    let (st, _, v) = raw_http(
        s.http,
        &request(
            "POST",
            "/v1/filters/phish/whitelist",
            "Content-Type: text/plain\r\nOrigin: http://attacker.example\r\n",
            r#"["evil.example"]"#,
        ),
        t,
    );
    assert_eq!((st, code(&v)), (403, "cross_origin"), "{v}");
    assert!(
        hit(&s, "phish", "evil.example"),
        "delisted by a cross-site request"
    );
    // JSON from another origin (it would need a CORS preflight; no CORS is granted).
    for headers in [
        "Content-Type: application/json\r\nOrigin: http://attacker.example\r\n",
        "Content-Type: application/json\r\nOrigin: null\r\n",
        "Content-Type: application/json\r\nOrigin: http://127.0.0.1.attacker.example\r\n",
        "Content-Type: application/json\r\nSec-Fetch-Site: cross-site\r\n",
        "Content-Type: application/json\r\nSec-Fetch-Site: same-site\r\n",
    ] {
        let (st, _, v) = raw_http(
            s.http,
            &request(
                "POST",
                "/v1/filters/phish/whitelist",
                headers,
                r#"["evil.example"]"#,
            ),
            t,
        );
        assert_eq!((st, code(&v)), (403, "cross_origin"), "{headers}: {v}");
    }
    // No Origin at all, but not JSON: a form or text/plain body.
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let (st, _, v) = raw_http(
            s.http,
            &request(
                "POST",
                "/v1/filters/phish/whitelist",
                &format!("Content-Type: {ct}\r\n"),
                r#"["evil.example"]"#,
            ),
            t,
        );
        assert_eq!((st, code(&v)), (415, "unsupported_media_type"), "{ct}: {v}");
    }
    let (st, _, v) = raw_http(
        s.http,
        &request(
            "POST",
            "/v1/filters/phish/add",
            "",
            r#"["planted.example"]"#,
        ),
        t,
    );
    assert_eq!(st, 415, "{v}");
    // A body-less write from another origin (fetch with mode no-cors).
    let (st, _, v) = raw_http(
        s.http,
        &request(
            "DELETE",
            "/v1/filters/phish",
            "Origin: http://attacker.example\r\n",
            "",
        ),
        t,
    );
    assert_eq!((st, code(&v)), (403, "cross_origin"), "{v}");
    assert!(hit(&s, "phish", "evil.example"));
    assert!(!hit(&s, "phish", "planted.example"));
    // Reads stay simple, whatever their origin.
    let (st, _, v) = raw_http(
        s.http,
        &request(
            "GET",
            "/v1/filters/phish/check?item=evil.example",
            "Origin: http://attacker.example\r\n",
            "",
        ),
        t,
    );
    assert_eq!((st, v["hit"].as_bool()), (200, Some(true)), "{v}");
    // The server's own origin, with JSON, may write.
    let own = format!(
        "Content-Type: application/json; charset=utf-8\r\nOrigin: http://{}\r\nSec-Fetch-Site: same-origin\r\n",
        s.http
    );
    let req = format!(
        "POST /v1/filters/phish/whitelist HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n{own}Content-Length: 16\r\n\r\n[\"evil.example\"]",
        s.http
    );
    let (st, _, v) = raw_http(s.http, req.as_bytes(), t);
    assert_eq!(st, 200, "{v}");
    assert!(
        !hit(&s, "phish", "evil.example"),
        "whitelisted by its own origin"
    );
    // A body-less DELETE without an Origin (curl -X DELETE) still works.
    let (st, _, v) = raw_http(s.http, &request("DELETE", "/v1/filters/phish", "", ""), t);
    assert_eq!(st, 200, "{v}");
}

/// An HTTP request sent to the Redis-protocol port (a browser made to
/// POST there, its body being Redis commands) runs nothing and is closed.
/// DNS rebinding: a page on attacker.example makes its own name resolve
/// to 127.0.0.1, so its requests reach a loopback server as same-origin
/// ones (`Origin` equals `Host`). Without a token such a server answers
/// only loopback names; a token holder may use any name.
#[test]
fn rebound_names_reach_nothing_on_an_open_loopback_server() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let (st, v) = s.http(
        "POST",
        "/v1/filters",
        Some(r#"{"name":"bl","items":1000,"fp":0.01}"#),
        None,
    );
    assert_eq!(st, 201, "{v}");
    let t = Duration::from_secs(30);
    let port = s.http.port();
    let with_host = |method: &str, path: &str, host: &str, body: &str| {
        let headers = if body.is_empty() {
            format!("Origin: http://{host}\r\n")
        } else {
            format!("Content-Type: application/json\r\nOrigin: http://{host}\r\nSec-Fetch-Site: same-origin\r\n")
        };
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        raw_http(s.http, req.as_bytes(), t)
    };
    let rebound = format!("attacker.example:{port}");
    let (st, _, v) = with_host(
        "POST",
        "/v1/filters/bl/add",
        &rebound,
        r#"["planted.example"]"#,
    );
    assert_eq!((st, code(&v)), (403, "foreign_host"), "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("attacker.example"),
        "{v}"
    );
    let (st, _, v) = with_host("GET", "/v1/filters", &rebound, "");
    assert_eq!((st, code(&v)), (403, "foreign_host"), "{v}");
    let (st, _, v) = with_host(
        "GET",
        "/v1/filters/bl/check?item=planted.example",
        &rebound,
        "",
    );
    assert_eq!((st, code(&v)), (403, "foreign_host"), "{v}");
    assert!(!hit(&s, "bl", "planted.example"));
    // The machine's own names work, for reads and writes.
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let (st, _, v) = with_host("POST", "/v1/filters/bl/add", &host, r#"["ok.example"]"#);
        assert_eq!(st, 200, "{host}: {v}");
        let (st, _, v) = with_host("GET", "/v1/filters/bl/check?item=ok.example", &host, "");
        assert_eq!((st, v["hit"].as_bool()), (200, Some(true)), "{host}: {v}");
    }

    // With a token, the token decides: any Host may be used by its holder.
    let tdir = tempfile::tempdir().unwrap();
    let token_file = tdir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let data = tdir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let s2 = Server::start(&data, &["--token-file", token_file.to_str().unwrap()]);
    let req = format!(
        "GET /v1/filters HTTP/1.1\r\nHost: bloomgate.internal:{}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n",
        s2.http.port()
    );
    let (st, _, v) = raw_http(s2.http, req.as_bytes(), t);
    assert_eq!(st, 200, "{v}");
}

#[test]
fn http_sent_to_the_resp_port_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let mut c = s.resp();
    assert_eq!(c.cmd(&["BF.ADD", "victim", "x"]).int(), 1);
    let body = "BF.ADD planted attacker\r\nDEL victim\r\n";
    let attacks = [
        format!(
            "POST / HTTP/1.1\r\nHost: {}\r\nContent-Type: text/plain\r\nOrigin: http://attacker.example\r\nContent-Length: {}\r\n\r\n{body}",
            s.resp,
            body.len()
        ),
        // A request line alone, the commands right after it.
        format!("PUT /x HTTP/1.1\r\n{body}"),
        format!("GET / HTTP/1.0\r\n{body}"),
        // A proxy's header first.
        format!("Host: {}\r\n{body}", s.resp),
    ];
    for a in &attacks {
        let mut t = TcpStream::connect(s.resp).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        t.write_all(a.as_bytes()).unwrap();
        let mut got = Vec::new();
        let _ = t.read_to_end(&mut got);
        assert!(
            got.is_empty(),
            "answered an HTTP request: {:?}",
            String::from_utf8_lossy(&got)
        );
    }
    assert_eq!(
        c.cmd(&["EXISTS", "planted"]).int(),
        0,
        "a line of the body ran"
    );
    assert_eq!(
        c.cmd(&["EXISTS", "victim"]).int(),
        1,
        "a line of the body ran"
    );
    assert_eq!(c.cmd(&["BF.EXISTS", "victim", "x"]).int(), 1);
    // A Redis client whose item happens to be "POST" is unaffected.
    assert_eq!(c.cmd(&["BF.ADD", "victim", "POST"]).int(), 1);
}

/// Unauthenticated clients cannot take the input budget from
/// authenticated ones, and an over-limit body is refused at once.
#[test]
fn unauthenticated_clients_cannot_starve_authenticated_ones() {
    let dir = tempfile::tempdir().unwrap();
    let tok = dir.path().join("token");
    std::fs::write(&tok, format!("{TOKEN}\n")).unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "--token-file",
            tok.to_str().unwrap(),
            "--open-reads",
            "--request-secs",
            "120",
        ],
    );
    let (st, v) = s.http(
        "POST",
        "/v1/filters",
        Some(r#"{"name":"bl","items":10000,"fp":0.01}"#),
        Some(TOKEN),
    );
    assert_eq!(st, 201, "{v}");
    // Over the 8 MiB body limit: 413 from the headers, not a 408 once the
    // (never sent) body times out.
    let big = "POST /v1/filters/bl/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n";
    for _ in 0..8 {
        let t = Instant::now();
        let (st, _, v) = raw_http(s.http, big.as_bytes(), Duration::from_secs(60));
        assert_eq!((st, code(&v)), (413, "too_large"), "{v}");
        assert!(t.elapsed() < Duration::from_secs(60));
    }
    // 32 clients without the token announce bodies of the largest size
    // allowed and send none: together the whole default budget (256 MiB).
    let (tx, rx) = mpsc::channel();
    let addr = s.http;
    let mut held = Vec::new();
    for _ in 0..32 {
        let tx = tx.clone();
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(
            b"POST /v1/filters/bl/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 8388608\r\n\r\n",
        )
        .unwrap();
        held.push(c.try_clone().unwrap());
        std::thread::spawn(move || {
            c.set_read_timeout(Some(Duration::from_secs(200))).unwrap();
            let mut resp = Vec::new();
            let _ = c.read_to_end(&mut resp);
            let _ = tx.send(parse_response(&resp));
        });
    }
    // Their own allowance (an eighth of the budget, 32 MiB) takes four;
    // the others are refused.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut refused = 0;
    while refused < 28 {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok((st, _, v)) = rx.recv_timeout(left) else {
            panic!("only {refused} of 32 unauthenticated bodies refused");
        };
        assert_eq!((st, code(&v)), (503, "input_budget"), "{v}");
        refused += 1;
    }
    // Meanwhile authenticated clients are served: HTTP adds, and new
    // Redis-protocol clients.
    for i in 0..20 {
        let body = format!(r#"["item-{i}"]"#);
        let (st, v) = s.http("POST", "/v1/filters/bl/add", Some(&body), Some(TOKEN));
        assert_eq!(st, 200, "authenticated add refused: {v}");
    }
    for i in 0..10 {
        let mut c = s.resp();
        assert_eq!(c.cmd(&["AUTH", TOKEN]), V::Simple("OK".into()));
        let item = format!("resp-{i}");
        assert_eq!(c.cmd(&["BF.ADD", "bl", &item]).int(), 1);
        assert_eq!(c.cmd(&["BF.EXISTS", "bl", &item]).int(), 1);
    }
    // The held ones were never answered.
    assert!(rx.try_recv().is_err());
    drop(held);
}

/// Where reads need the token, a client without it is refused before its
/// body is read, and Redis's limits for unauthenticated clients apply until
/// `AUTH` (also when `AUTH` is pipelined with a big command).
#[test]
fn without_the_token_nothing_is_buffered() {
    let dir = tempfile::tempdir().unwrap();
    let tok = dir.path().join("token");
    std::fs::write(&tok, format!("{TOKEN}\n")).unwrap();
    let s = Server::start(
        dir.path(),
        &[
            "--token-file",
            tok.to_str().unwrap(),
            "--request-secs",
            "120",
        ],
    );
    let head = "POST /v1/filters/bl/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n";
    let (st, head, v) = raw_http(s.http, head.as_bytes(), Duration::from_secs(60));
    assert_eq!((st, code(&v)), (401, "unauthorized"), "{v}");
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    // /healthz stays open.
    let (st, _) = s.http("GET", "/healthz", None, None);
    assert_eq!(st, 200);

    // RESP: a 100 KB argument before AUTH is a protocol error, said so.
    let mut t = TcpStream::connect(s.resp).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    t.write_all(b"*3\r\n$6\r\nBF.ADD\r\n$1\r\nf\r\n$100000\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = t.read_to_end(&mut got);
    let got = String::from_utf8_lossy(&got);
    assert!(
        got.starts_with("-ERR Protocol error: invalid bulk length (unauthenticated"),
        "{got}"
    );
    // AUTH and a command of 200 arguments in one write.
    let mut c = s.resp();
    let mut args: Vec<Vec<u8>> = vec![b"BF.MADD".to_vec(), b"f".to_vec()];
    args.extend((0..200).map(|i| format!("item-{i}").into_bytes()));
    let mut wire = format!("*2\r\n$4\r\nAUTH\r\n${}\r\n{TOKEN}\r\n", TOKEN.len()).into_bytes();
    wire.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in &args {
        wire.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        wire.extend_from_slice(a);
        wire.extend_from_slice(b"\r\n");
    }
    c.r.get_mut().write_all(&wire).unwrap();
    assert_eq!(c.read().unwrap(), V::Simple("OK".into()));
    let added = c.read().unwrap();
    assert_eq!(added.arr().len(), 200);
    assert!(
        added.arr().iter().all(|v| matches!(v, V::Int(_))),
        "{added:?}"
    );
    let exists = c.cmd(&["BF.EXISTS", "f", "item-199"]);
    assert_eq!(exists.int(), 1);
}

/// `KEYS` and `SCAN MATCH` with patterns that made the recursive matcher
/// exponential answer at once; and a `KEYS` with a huge pattern does not
/// stop another client (on the same thread) from being served.
#[test]
fn hostile_key_patterns_answer_and_do_not_stall_others() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["--resp-threads", "1"]);
    let mut c = s.resp();
    let name = "a".repeat(200);
    assert_eq!(c.cmd(&["BF.ADD", &name, "x"]).int(), 1);
    assert_eq!(c.cmd(&["BF.ADD", "other", "x"]).int(), 1);
    // Reads time out after 30 s: today's minutes-long answers fail here.
    for stars in [4, 5, 8, 20] {
        let miss = format!("{}b", "*a".repeat(stars));
        assert_eq!(c.cmd(&["KEYS", &miss]), V::Arr(vec![]), "{miss}");
        let r = c.cmd(&["SCAN", "0", "MATCH", &miss]);
        assert_eq!(r.arr()[1], V::Arr(vec![]));
        let hit = "*a".repeat(stars);
        assert_eq!(
            c.cmd(&["KEYS", &hit]),
            V::Arr(vec![V::Bulk(name.clone().into_bytes())])
        );
    }
    assert_eq!(
        c.cmd(&["KEYS", "[o]th?r"]),
        V::Arr(vec![V::Bulk(b"other".to_vec())])
    );
    // A 2 MB pattern against the 200-byte name: about 4·10⁸ steps, on the
    // blocking pool; a PING on the same thread is answered meanwhile.
    let huge = format!("{}b", "*a".repeat(1 << 20));
    let mut p = s.resp();
    c.send(&[b"KEYS", huge.as_bytes()]);
    for _ in 0..5 {
        assert_eq!(p.cmd(&["PING"]), V::Simple("PONG".into()));
    }
    assert_eq!(c.read().unwrap(), V::Arr(vec![]));
}

/// A `BF.LOADCHUNK` of a 36 MB chunk (RedisBloom's
/// `test_scandump_load_big`) loads; a command that cannot fit the input
/// budget gets an error the client can read.
#[test]
fn a_36_mb_chunk_loads() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &[]);
    let mut c = s.resp();
    assert_eq!(
        c.cmd(&["BF.RESERVE", "src", "0.01", "32000000"]),
        V::Simple("OK".into())
    );
    assert_eq!(c.cmd(&["BF.MADD", "src", "a", "b", "c"]).arr().len(), 3);
    // The dump: its header, then all its data as one chunk.
    let V::Arr(first) = c.cmd(&["BF.SCANDUMP", "src", "0"]) else {
        panic!()
    };
    let V::Bulk(header) = &first[1] else { panic!() };
    let mut data = Vec::new();
    let mut iter = first[0].int();
    loop {
        let r = c.cmd(&["BF.SCANDUMP", "src", &iter.to_string()]);
        let (next, chunk) = (r.arr()[0].int(), r.arr()[1].clone());
        if next == 0 {
            break;
        }
        let V::Bulk(b) = chunk else { panic!() };
        data.extend_from_slice(&b);
        iter = next;
    }
    assert!(
        data.len() >= 36_000_000,
        "only {} bytes of data",
        data.len()
    );
    c.send(&[b"BF.LOADCHUNK", b"dst", b"1", header]);
    assert_eq!(c.read().unwrap(), V::Simple("OK".into()));
    let end = (data.len() + 1).to_string();
    c.send(&[b"BF.LOADCHUNK", b"dst", end.as_bytes(), &data]);
    assert_eq!(c.read().unwrap(), V::Simple("OK".into()));
    for item in ["a", "b", "c"] {
        assert_eq!(c.cmd(&["BF.EXISTS", "dst", item]).int(), 1);
    }
    drop(s);

    // With a 16 MiB budget the same chunk cannot fit: refused at its
    // header, with an error the client reads (not a reset).
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &["--max-input-memory", "16M"]);
    let mut t = TcpStream::connect(s.resp).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut wire = format!(
        "*4\r\n$12\r\nBF.LOADCHUNK\r\n$3\r\ndst\r\n${}\r\n{end}\r\n${}\r\n",
        end.len(),
        data.len()
    )
    .into_bytes();
    wire.extend_from_slice(&data[..4 << 20]);
    let _ = t.write_all(&wire);
    let mut got = Vec::new();
    let _ = t.read_to_end(&mut got);
    let got = String::from_utf8_lossy(&got);
    assert!(
        got.starts_with("-ERR Protocol error: command too big"),
        "{got:?}"
    );
}

/// Malformed requests get answers in the protocol's own error form.
#[test]
fn errors_are_answered_in_the_protocols_form() {
    let dir = tempfile::tempdir().unwrap();
    let tok = dir.path().join("token");
    std::fs::write(&tok, format!("{TOKEN}\n")).unwrap();
    let s = Server::start(dir.path(), &["--token-file", tok.to_str().unwrap()]);
    let t = Some(TOKEN);
    // A misspelt field is an error naming it, not a default.
    let (st, v) = s.http(
        "POST",
        "/v1/filters",
        Some(r#"{"name":"p","items":1000,"fp":0.01,"polcy":"grow"}"#),
        t,
    );
    assert_eq!((st, code(&v)), (400, "bad_request"), "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("polcy"),
        "{v}"
    );
    let (st, v) = s.http("GET", "/v1/filters/p", None, t);
    assert_eq!(st, 404, "created anyway: {v}");
    let (st, v) = s.http(
        "POST",
        "/v1/filters",
        Some(r#"{"name":"p","items":1000,"fp":0.01,"policy":"grow"}"#),
        t,
    );
    assert_eq!(st, 201, "{v}");
    let (st, v) = s.http(
        "POST",
        "/v1/filters/p/add",
        Some(r#"{"items":["a"],"itme":1}"#),
        t,
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("itme"),
        "{v}"
    );
    let (st, v) = s.http("POST", "/v1/filters/p/reload", Some(r#"{"pth":"/x"}"#), t);
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("pth"),
        "{v}"
    );
    // 405 and a duplicated query parameter: JSON like every other error.
    let (st, v) = s.http("PUT", "/v1/filters/p/check", None, t);
    assert_eq!((st, code(&v)), (405, "method_not_allowed"), "{v}");
    let (st, v) = s.http("GET", "/v1/filters/p/check?item=a&item=b", None, t);
    assert_eq!((st, code(&v)), (400, "bad_request"), "{v}");

    // RESP: NOAUTH before the token, for every command but AUTH/HELLO/QUIT.
    let mut c = s.resp();
    for cmd in [
        &["FOO", "bar"][..],
        &["CLIENT", "SETNAME", "x"],
        &["PING"],
        &["CONFIG", "GET", "*"],
    ] {
        assert_eq!(
            c.cmd(cmd),
            V::Err("NOAUTH Authentication required.".into()),
            "{cmd:?}"
        );
    }
    assert_eq!(c.cmd(&["AUTH", TOKEN]), V::Simple("OK".into()));
    assert!(c
        .cmd(&["FOO"])
        .err()
        .starts_with("ERR unknown command 'FOO'"));
    // CONFIG SET does not pretend; CONFIG GET lists what is real.
    assert!(c
        .cmd(&["CONFIG", "SET", "maxmemory", "1"])
        .err()
        .starts_with("ERR CONFIG SET is not supported"));
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "save"]),
        V::Arr(vec![V::Bulk(b"save".to_vec()), V::Bulk(Vec::new())])
    );
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "proto-max-bulk-len"]),
        V::Arr(vec![
            V::Bulk(b"proto-max-bulk-len".to_vec()),
            V::Bulk(b"268435456".to_vec())
        ])
    );
    assert_eq!(c.cmd(&["CONFIG", "GET", "nosuch"]), V::Arr(vec![]));

    // A framing error with more of the frame still coming: the client
    // reads the error, not a reset.
    for _ in 0..5 {
        let mut t = TcpStream::connect(s.resp).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut wire = format!("*2\r\n$4\r\nAUTH\r\n${}\r\n{TOKEN}\r\n", TOKEN.len()).into_bytes();
        wire.extend_from_slice(b"*2\r\n$4\r\nPING\r\n:12\r\n");
        wire.extend_from_slice(&vec![b'x'; 4 << 20]);
        let _ = t.write_all(&wire);
        let mut got = Vec::new();
        let r = t.read_to_end(&mut got);
        let got = String::from_utf8_lossy(&got);
        assert!(
            got.starts_with("+OK\r\n-ERR Protocol error: expected '$', got ':'"),
            "{r:?}: {got:?}"
        );
    }
}
