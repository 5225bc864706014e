//! `bloomgate serve` (the binary of [`crate::bin`]) on ephemeral loopback
//! ports in a temporary directory, plus tiny blocking RESP and HTTP clients
//! (no client-library dependencies) and the helpers of command-line tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub http: SocketAddr,
    pub resp: SocketAddr,
    /// The socketmap listener (`inet:IP:PORT` or `unix:PATH`), when
    /// started with `--socketmap`.
    pub socketmap: Option<String>,
    pub dir: PathBuf,
}

impl Server {
    #[allow(clippy::zombie_processes)] // waited for in Drop
    pub fn start(dir: &Path, extra: &[&str]) -> Server {
        let mut args = vec!["--data-dir", dir.to_str().expect("a UTF-8 path")];
        args.extend_from_slice(extra);
        Server::start_args(dir, &args)
    }

    /// Starts `bloomgate serve ARGS` (its store given in `args`: a
    /// `--data-dir` or a `--store`); `dir` is only recorded.
    pub fn start_args(dir: &Path, args: &[&str]) -> Server {
        Server::spawn(Command::new(crate::bin()), dir, args, Stdio::piped())
    }

    /// Starts `bloomgate serve ARGS` through `wrapper`, a command that runs
    /// the binary it is given last with the arguments that follow (e.g.
    /// `sh -c 'ulimit -n 256 && exec "$0" "$@"'`). Its standard error is
    /// discarded: a server that logs more than a pipe holds while nobody
    /// reads it would stall.
    pub fn start_under(mut wrapper: Command, dir: &Path, args: &[&str]) -> Server {
        wrapper.arg(crate::bin());
        Server::spawn(wrapper, dir, args, Stdio::null())
    }

    /// [`Server::start`] at a raised scheduling priority (`nice -n -10`,
    /// which root may set; elsewhere `nice` says it cannot and runs it at
    /// the usual one): for tests that time the server's answers, so that
    /// what they measure is the server, not the other work of a loaded
    /// machine. Pair it with [`favour_this_thread`] for the timed client.
    pub fn start_favoured(dir: &Path, extra: &[&str]) -> Server {
        let mut args = vec!["--data-dir", dir.to_str().expect("a UTF-8 path")];
        args.extend_from_slice(extra);
        let mut nice = Command::new("nice");
        nice.args(["-n", "-10"]).arg(crate::bin());
        Server::spawn(nice, dir, &args, Stdio::piped())
    }

    #[allow(clippy::zombie_processes)] // waited for in Drop
    fn spawn(mut command: Command, dir: &Path, args: &[&str], stderr: Stdio) -> Server {
        // Outside the data directory, which may be a full disk.
        static STARTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ready =
            std::env::temp_dir().join(format!("bloomgate-ready-{}-{n}", std::process::id()));
        let _ = std::fs::remove_file(&ready);
        let child = command
            .arg("serve")
            .args([
                "--http",
                "127.0.0.1:0",
                "--resp",
                "127.0.0.1:0",
                "--ready-file",
            ])
            .arg(&ready)
            .args(args)
            .stdin(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn bloomgate serve");
        let t = Instant::now();
        loop {
            if let Ok(b) = std::fs::read(&ready) {
                let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
                let _ = std::fs::remove_file(&ready);
                return Server {
                    child,
                    http: v["http"].as_str().unwrap().parse().unwrap(),
                    resp: v["resp"].as_str().unwrap().parse().unwrap(),
                    socketmap: v["socketmap"].as_str().map(String::from),
                    dir: dir.to_path_buf(),
                };
            }
            assert!(
                // A start that loads many filters on a loaded machine is slow.
                t.elapsed() < Duration::from_secs(300),
                "server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stderr so far (only after the process ended).
    pub fn stderr(&mut self) -> String {
        let mut s = String::new();
        if let Some(e) = self.child.stderr.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill(); // SIGKILL on unix
        let _ = self.child.wait();
    }

    pub fn term(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        self.child.wait().unwrap()
    }

    pub fn resp(&self) -> Resp {
        Resp::connect(self.resp)
    }

    pub fn http(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        token: Option<&str>,
    ) -> (u16, serde_json::Value) {
        http(self.http, method, path, body, token)
    }

    /// `GET /v1/filters/NAME/check?item=ITEM` (no token): the verdict,
    /// asserting the answer is 200.
    pub fn check(&self, name: &str, item: &str) -> serde_json::Value {
        let path = format!("/v1/filters/{name}/check?item={item}");
        let (st, v) = self.http("GET", &path, None, None);
        assert_eq!(st, 200, "{name} {item}: {v}");
        v
    }

    /// `POST /v1/filters/NAME/add` of `items` (a JSON array); asserts it
    /// was acknowledged (200) and returns the reply.
    pub fn add(&self, name: &str, items: &[String]) -> serde_json::Value {
        let body = serde_json::to_string(items).expect("strings serialize");
        let (st, v) = self.http(
            "POST",
            &format!("/v1/filters/{name}/add"),
            Some(&body),
            None,
        );
        assert_eq!(st, 200, "{name}: {v}");
        v
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `s` percent-encoded for a URL's query (every byte but the unreserved
/// ASCII letters, digits and `-._~`).
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A decoded RESP value.
#[derive(Debug, Clone, PartialEq)]
pub enum V {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Arr(Vec<V>),
    Bool(bool),
    Map(Vec<(V, V)>),
}

impl V {
    pub fn int(&self) -> i64 {
        match self {
            V::Int(i) => *i,
            V::Bool(b) => *b as i64,
            other => panic!("not an integer: {other:?}"),
        }
    }
    pub fn arr(&self) -> &[V] {
        match self {
            V::Arr(a) => a,
            other => panic!("not an array: {other:?}"),
        }
    }
    pub fn err(&self) -> &str {
        match self {
            V::Err(e) => e,
            other => panic!("not an error: {other:?}"),
        }
    }
}

pub struct Resp {
    pub r: BufReader<TcpStream>,
}

impl Resp {
    pub fn connect(addr: SocketAddr) -> Resp {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Resp {
            r: BufReader::new(s),
        }
    }

    pub fn send(&mut self, args: &[&[u8]]) {
        let mut b = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            b.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            b.extend_from_slice(a);
            b.extend_from_slice(b"\r\n");
        }
        self.r.get_mut().write_all(&b).unwrap();
    }

    pub fn cmd(&mut self, args: &[&str]) -> V {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.send(&a);
        self.read().expect("reply")
    }

    pub fn read(&mut self) -> std::io::Result<V> {
        let mut line = Vec::new();
        self.r.read_until(b'\n', &mut line)?;
        if line.len() < 3 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed",
            ));
        }
        let body = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
        Ok(match line[0] {
            b'+' => V::Simple(body),
            b'-' => V::Err(body),
            b':' => V::Int(body.parse().unwrap()),
            b'#' => V::Bool(body == "t"),
            b'_' => V::Nil,
            b'$' | b'=' => {
                let n: i64 = body.parse().unwrap();
                if n < 0 {
                    V::Nil
                } else {
                    let mut b = vec![0; n as usize + 2];
                    self.r.read_exact(&mut b)?;
                    b.truncate(n as usize);
                    V::Bulk(b)
                }
            }
            b'*' => {
                let n: i64 = body.parse().unwrap();
                if n < 0 {
                    V::Nil
                } else {
                    V::Arr((0..n).map(|_| self.read()).collect::<Result<_, _>>()?)
                }
            }
            b'%' => {
                let n: usize = body.parse().unwrap();
                let mut m = Vec::new();
                for _ in 0..n {
                    m.push((self.read()?, self.read()?));
                }
                V::Map(m)
            }
            other => panic!("unexpected RESP type {}", other as char),
        })
    }
}

/// One HTTP/1.1 request with `Connection: close`; returns status and JSON body
/// (or `{"text": ...}` for non-JSON).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> (u16, serde_json::Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.unwrap_or("");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    // A server may answer from the headers alone (413, 401) and stop reading
    // a body it refuses: the rest of the write then fails (a reset or a
    // broken pipe) while the answer already sits in this socket's receive
    // queue, which is what HTTP clients such as curl then report. So a
    // failed write is not the end: the answer is read all the same.
    let wrote = s.write_all(req.as_bytes());
    let mut resp = Vec::new();
    let read = read_until_end_or_reset(&mut s, &mut resp);
    if resp.is_empty() {
        wrote.unwrap();
        read.unwrap();
    }
    let text = String::from_utf8_lossy(&resp).into_owned();
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let rest = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    let v = serde_json::from_str(&rest).unwrap_or_else(|_| serde_json::json!({ "text": rest }));
    (status, v)
}

/// Reads to the end of the stream, keeping whatever arrived before a
/// connection reset.
fn read_until_end_or_reset(s: &mut TcpStream, out: &mut Vec<u8>) -> std::io::Result<()> {
    let mut chunk = [0u8; 64 << 10];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n..];
        s = s.strip_prefix("\r\n").unwrap_or(s);
    }
    out
}

/// A loopback TCP port the system just gave out (free unless another
/// process takes it before the caller binds it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The path of program `name` on the `PATH`, or in the sbin directories
/// (which a non-login `PATH` may lack).
pub fn program(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"])
        .map(|d| std::path::Path::new(d).join(name))
        .find(|p| p.is_file());
    found
}

/// Whether `cmd --version` runs.
pub fn have(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Says that a test is skipped because `why`, which fails the test instead
/// when the test command requires everything (`BLOOMGATE_REQUIRE_CLIENTS`,
/// set by `scripts/test.sh`, which installs what the tests need).
pub fn skip(why: &str) {
    assert!(
        std::env::var_os("BLOOMGATE_REQUIRE_CLIENTS").is_none(),
        "required by scripts/test.sh but missing: {why}"
    );
    eprintln!("SKIPPED: {why}");
}

/// Runs a redis-py script from `tests/python` with `args`; fails with its
/// output if it fails. `false` (after saying so) when python3 has no redis
/// module and `BLOOMGATE_REQUIRE_CLIENTS` is unset; with it set, that fails.
pub fn run_redis_py(script: &str, args: &[String]) -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import redis"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        skip("python3 with the `redis` module is not installed (pip install redis)");
        return false;
    }
    let path = format!("{}/../../tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(path)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// A temporary directory for one test, removed when dropped.
pub struct Dir(pub tempfile::TempDir);

impl Dir {
    /// A fresh empty directory.
    pub fn new() -> Dir {
        Dir(tempfile::tempdir().unwrap())
    }

    /// `name` inside it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    /// Writes `content` to `name` inside it; returns the path.
    pub fn write(&self, name: &str, content: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    /// Writes `lines` to `name` inside it, one per line; returns the path.
    pub fn lines<S: AsRef<str>>(&self, name: &str, lines: &[S]) -> PathBuf {
        let p = self.path(name);
        write_lines(&p, lines.iter().map(|l| l.as_ref()));
        p
    }
}

impl Default for Dir {
    fn default() -> Dir {
        Dir::new()
    }
}

/// Runs `command` with `input` on its standard input (written from another
/// thread, so that a command that answers as it reads cannot dead-lock
/// with the test) and returns its output. The command may stop reading
/// early (a closed pipe is not an error); any other write error fails.
pub fn run_with_input(command: &mut Command, input: &[u8]) -> std::process::Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the command");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || match stdin.write_all(&input) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e),
        _ => Ok(()),
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().expect("write the standard input");
    out
}

/// Raises the scheduling priority of the calling thread (to nice -10) where
/// that is allowed (root), so that a client thread whose answers a test
/// times is not the one a loaded machine makes wait; elsewhere nothing.
pub fn favour_this_thread() {
    // "<pid>/task/<tid>": niceness is a property of each thread on Linux.
    let Ok(link) = std::fs::read_link("/proc/thread-self") else {
        return;
    };
    let Some(tid) = link.file_name().and_then(|t| t.to_str()) else {
        return;
    };
    let _ = Command::new("renice")
        .args(["-n", "-10", "-p", tid])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Waits until a process holds the lock on `path` (the `flock` a command
/// takes on its `.lock` file, as `File::try_lock` does), for at most
/// `limit`: the observable state a test waits for instead of a guessed
/// delay. It reads `/proc/locks`, so it never takes the lock itself (a
/// command that refuses a held lock is not disturbed).
pub fn wait_locked(path: &Path, limit: Duration) {
    use std::os::unix::fs::MetadataExt;
    let t = Instant::now();
    loop {
        if let Ok(meta) = std::fs::metadata(path) {
            // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF": the inode
            // is the last part of the sixth field.
            let ino = meta.ino().to_string();
            let locks = std::fs::read_to_string("/proc/locks").expect("/proc/locks");
            let held = locks.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 5 && f[1] == "FLOCK" && f[5].rsplit(':').next() == Some(ino.as_str())
            });
            if held {
                return;
            }
        }
        assert!(
            t.elapsed() < limit,
            "nothing took the lock on {} within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the shipped `bloomgate` with `args`, standard input empty.
pub fn bg(args: &[&str]) -> std::process::Output {
    Command::new(crate::bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run bloomgate")
}

/// The standard output of a command that must have succeeded; otherwise
/// fails with its exit code and both outputs.
pub fn ok(o: &std::process::Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Writes `lines` to `path`, one per line.
pub fn write_lines<S: std::fmt::Display>(path: &Path, lines: impl IntoIterator<Item = S>) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

/// `path` as a command-line argument.
pub fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A tmpfs of `size` mounted on a fresh directory, unmounted when dropped.
pub struct Tmpfs {
    /// The mounted directory.
    pub dir: PathBuf,
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` (after saying why) where mounting is refused, unless the test
    /// command requires it (`BLOOMGATE_REQUIRE_CLIENTS`, set by
    /// `scripts/test.sh`, which CI runs as root).
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            skip("cannot mount a tmpfs (the full-disk test needs root)");
            return None;
        }
        Some(Tmpfs {
            dir,
            _parent: parent,
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}
