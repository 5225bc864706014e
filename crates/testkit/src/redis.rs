//! Real Redis servers for tests: a standalone `redis-server`, or a Redis
//! Cluster of three masters and three replicas made by
//! `redis-cli --cluster create`, each on a free loopback port in a
//! temporary directory, killed when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Skips a test because redis-server or redis-cli is missing, or fails it
/// when the test command requires everything (`BLOOMGATE_REQUIRE_CLIENTS`,
/// set by `scripts/test.sh`, which installs them).
pub fn redis_missing() -> bool {
    if crate::have("redis-server") && crate::have("redis-cli") {
        return false;
    }
    assert!(
        std::env::var_os("BLOOMGATE_REQUIRE_CLIENTS").is_none(),
        "required by scripts/test.sh but missing: redis-server and redis-cli (apt install redis-server redis-tools)"
    );
    eprintln!("SKIPPED: redis-server or redis-cli is not installed");
    true
}

/// The RedisBloom module to compare with: `REDISBLOOM_MODULE`, else
/// `shared/bench/redisbloom.so` in the nearest folder above the workspace
/// that has one (the team's machines keep it beside the checkouts). `None`,
/// said on stderr, where there is none: the module is not shipped with
/// bloomgate, so its absence skips a comparison with it, never a test.
pub fn redisbloom_module() -> Option<PathBuf> {
    let module = match std::env::var_os("REDISBLOOM_MODULE") {
        Some(m) => Some(PathBuf::from(m)),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .skip(2)
            .map(|d| d.join("shared/bench/redisbloom.so"))
            .find(|m| m.is_file()),
    };
    match module {
        Some(m) if m.is_file() => Some(m),
        m => {
            eprintln!(
                "NOTE: no RedisBloom module ({}): the live comparison with it is skipped",
                m.map_or("set REDISBLOOM_MODULE".into(), |m| m.display().to_string())
            );
            None
        }
    }
}

/// A port that is free, and whose cluster bus port (+10000) is free too.
///
/// Both lie below the kernel's ephemeral range (`ip_local_port_range`,
/// 32768 and up by default), which every outgoing connection and every
/// `bind(0)` of the tests running beside this one draw from: a port found
/// free there could be taken again before redis-server binds it.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768)
        .clamp(21_000, 65_535);
    // Ports in 10000..ephemeral-10000, bus ports in 20000..ephemeral;
    // starting at a place given by the process id, so that parallel test
    // binaries rarely try the same ports.
    let span = ephemeral - 20_000;
    let start = std::process::id() % (span / 10).max(1) * 10;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = (10_000 + (start + n) % span) as u16;
        let ok = |port: u16| TcpListener::bind(("127.0.0.1", port)).is_ok();
        if ok(p) && ok(p + 10_000) {
            return p;
        }
    }
}

/// One redis-server process.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
}

impl RedisServer {
    /// Starts a server in `dir` with extra arguments, and waits for PING.
    /// A server that exits before answering (its port taken in the
    /// meantime by another process) is started again on another port.
    pub fn start(dir: &Path, extra: &[&str]) -> RedisServer {
        let mut last = String::new();
        for _ in 0..5 {
            match RedisServer::try_start_on(dir, free_port(), extra) {
                Ok(s) => return s,
                Err(e) => last = e,
            }
        }
        panic!("redis-server did not start (five ports tried): {last}");
    }

    /// Starts a server on a given port (e.g. again, after killing one).
    pub fn start_on(dir: &Path, port: u16, extra: &[&str]) -> RedisServer {
        RedisServer::try_start_on(dir, port, extra).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a server on `port` and waits for PING; says why not, with
    /// the end of its log, when it exits first or does not answer.
    #[allow(clippy::zombie_processes)] // waited for in Drop or below
    fn try_start_on(dir: &Path, port: u16, extra: &[&str]) -> Result<RedisServer, String> {
        let dir = dir.join(format!("redis-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("log");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(&log)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let mut s = RedisServer { child, port, dir };
        let tail = |why: &str| {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let end = lines[lines.len().saturating_sub(5)..].join("\n");
            format!("redis-server on port {port} {why}; its log ends:\n{end}")
        };
        let t = Instant::now();
        while s.cli(&["PING"]).trim() != "PONG" {
            if let Ok(Some(status)) = s.child.try_wait() {
                return Err(tail(&format!("exited ({status}) before answering")));
            }
            if t.elapsed() > Duration::from_secs(60) {
                return Err(tail("did not answer PING within 60 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(s)
    }

    /// A server with the RedisBloom module loaded ([`redisbloom_module`]),
    /// or `None` (after saying why) without the module or redis-server.
    pub fn start_redisbloom(dir: &Path) -> Option<RedisServer> {
        let module = redisbloom_module()?;
        if !crate::have("redis-server") || !crate::have("redis-cli") {
            eprintln!("NOTE: no redis-server or redis-cli: the live comparison with RedisBloom is skipped");
            return None;
        }
        let module = module.to_str().expect("a UTF-8 module path");
        Some(RedisServer::start(dir, &["--loadmodule", module]))
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Runs redis-cli against this server (raw output).
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "--no-raw"])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs redis-cli with `--raw` output (strings as they are).
    pub fn cli_raw(&self, args: &[&str]) -> Vec<u8> {
        Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "--raw"])
            .args(args)
            .output()
            .expect("redis-cli")
            .stdout
    }

    /// Waits until this master sees a replica online (`state=online` in
    /// `INFO replication`: it counts the replica for `WAIT` from then on).
    pub fn wait_replica_online(&self, limit: Duration) {
        let t = Instant::now();
        while !self.cli(&["INFO", "replication"]).contains("state=online") {
            assert!(
                t.elapsed() < limit,
                "no replica of {} came online",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A Redis Cluster of three masters with one replica each.
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub id: String,
    pub port: u16,
    pub master: bool,
    pub failed: bool,
    /// Slot ranges, inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl Cluster {
    /// Starts six cluster-enabled servers and joins them with
    /// `redis-cli --cluster create … --cluster-replicas 1`; waits until
    /// every node reports `cluster_state:ok`.
    pub fn start(dir: &Path) -> Cluster {
        Cluster::start_with(dir, 1, &[])
    }

    /// Starts three masters with `replicas` replicas each, every server
    /// with the `extra` arguments (e.g. `--loadmodule`), and waits until
    /// the cluster is ok.
    pub fn start_with(dir: &Path, replicas: usize, extra: &[&str]) -> Cluster {
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|i| {
                let conf = dir.join(format!("nodes-{i}.conf"));
                let mut args = vec![
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    conf.to_str().unwrap(),
                    "--cluster-node-timeout",
                    "1000",
                ];
                args.extend_from_slice(extra);
                RedisServer::start(dir, &args)
            })
            .collect();
        let addrs: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let c = Cluster { nodes };
        c.wait_ok(Duration::from_secs(30));
        c
    }

    /// Waits until every live node says `cluster_state:ok` and sees three
    /// masters that cover all slots.
    pub fn wait_ok(&self, limit: Duration) {
        let t = Instant::now();
        loop {
            let ok = self
                .nodes
                .iter()
                .filter(|n| n.cli(&["PING"]).trim() == "PONG")
                .all(|n| {
                    n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok")
                        && parse_nodes(&n.cli_raw(&["CLUSTER", "NODES"]))
                            .iter()
                            .filter(|x| x.master && !x.failed && !x.slots.is_empty())
                            .map(|x| x.slots.iter().map(|(a, b)| (b - a) as u32 + 1).sum::<u32>())
                            .sum::<u32>()
                            == 16384
                });
            if ok {
                return;
            }
            assert!(t.elapsed() < limit, "the cluster did not become ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the master on `port` no longer serves slots (its
    /// replica took over) and the cluster is ok again.
    pub fn wait_failover(&self, port: u16, limit: Duration) {
        let t = Instant::now();
        while self.masters().iter().any(|m| m.port == port) {
            assert!(t.elapsed() < limit, "no failover of the master on {port}");
            std::thread::sleep(Duration::from_millis(100));
        }
        self.wait_ok(
            limit
                .saturating_sub(t.elapsed())
                .max(Duration::from_secs(1)),
        );
    }

    /// Waits until every master that serves slots sees its replica online
    /// (after `--cluster create` they may still be syncing).
    pub fn wait_replicas_online(&self, limit: Duration) {
        let t = Instant::now();
        for m in self.masters() {
            let master = self.nodes.iter().find(|n| n.port == m.port).unwrap();
            master.wait_replica_online(
                limit
                    .saturating_sub(t.elapsed())
                    .max(Duration::from_secs(1)),
            );
        }
    }

    /// The first live node.
    pub fn any(&self) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.cli(&["PING"]).trim() == "PONG")
            .expect("a live node")
    }

    /// The cluster's view of its nodes, from a live node.
    pub fn topology(&self) -> Vec<NodeInfo> {
        parse_nodes(&self.any().cli_raw(&["CLUSTER", "NODES"]))
    }

    /// Masters that serve slots.
    pub fn masters(&self) -> Vec<NodeInfo> {
        self.topology()
            .into_iter()
            .filter(|n| n.master && !n.failed && !n.slots.is_empty())
            .collect()
    }

    /// The server process listening on `port`.
    pub fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node on that port")
    }

    /// `redis+cluster://` address of filter `name` (seeds: every node).
    pub fn address(&self, name: &str) -> String {
        let addrs: Vec<String> = self.nodes.iter().map(RedisServer::addr).collect();
        format!("redis+cluster://{}/{name}", addrs.join(","))
    }
}

/// Parses `CLUSTER NODES`.
pub fn parse_nodes(text: &[u8]) -> Vec<NodeInfo> {
    String::from_utf8_lossy(text)
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            let port = f[1].split('@').next()?.rsplit(':').next()?.parse().ok()?;
            let flags = f[2];
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(NodeInfo {
                id: f[0].to_string(),
                port,
                master: flags.contains("master"),
                failed: flags.contains("fail"),
                slots,
            })
        })
        .collect()
}
