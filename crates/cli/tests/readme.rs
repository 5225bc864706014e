//! Every example of README.md, run in order in a temporary directory
//! against the built binary, so that the README cannot drift from what the
//! commands do: a command that fails, a shown output that differs, a Redis
//! or HTTP error reply, fails the test, naming the README line.
//!
//! The rules the README is written to:
//! * ` ```sh ` blocks are run line by line with bash (`pipefail`) in one
//!   directory, `data/` linked in. In a block with `$ ` lines, those are
//!   the commands and the lines after each (if any) its exact output;
//!   otherwise every line is a command.
//! * ` ```python ` blocks run with python3 (skipped without redis-py,
//!   unless `BLOOMGATE_REQUIRE_CLIENTS` is set).
//! * `bloomgate serve …` runs in the background until the end; the
//!   README's ports (8080, 6380, 8081, 6381 for the service; 6379 for a
//!   redis-server the test starts) are replaced by free ones.
//! * A block whose previous line is `<!-- not run by the README test:
//!   REASON -->` is not run; the reason must be given.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testkit::redis::{redis_missing, RedisServer};

const SKIP: &str = "<!-- not run by the README test:";

struct Block {
    line: usize,
    lang: String,
    skip: Option<String>,
    lines: Vec<(usize, String)>,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut prev = "";
    let mut cur: Option<Block> = None;
    for (i, l) in text.lines().enumerate() {
        match cur.as_mut() {
            Some(_) if l.starts_with("```") => out.push(cur.take().unwrap()),
            Some(b) => b.lines.push((i + 1, l.to_string())),
            None => {
                if let Some(lang) = l.strip_prefix("```") {
                    let skip = prev
                        .trim()
                        .strip_prefix(SKIP)
                        .and_then(|r| r.strip_suffix("-->"))
                        .map(|r| r.trim().to_string());
                    cur = Some(Block {
                        line: i + 1,
                        lang: lang.trim().to_string(),
                        skip,
                        lines: Vec::new(),
                    });
                }
            }
        }
        if !l.trim().is_empty() {
            prev = l;
        }
    }
    assert!(cur.is_none(), "an unclosed code block");
    out
}

/// One command and the output shown for it (empty: not compared).
struct Step {
    line: usize,
    command: String,
    shown: Vec<String>,
}

fn steps(b: &Block) -> Vec<Step> {
    let console = b.lines.iter().any(|(_, l)| l.starts_with("$ "));
    let mut out: Vec<Step> = Vec::new();
    for (n, l) in &b.lines {
        if console {
            match (l.strip_prefix("$ "), out.last_mut()) {
                (Some(c), _) => out.push(Step {
                    line: *n,
                    command: c.to_string(),
                    shown: Vec::new(),
                }),
                (None, Some(s)) => s.shown.push(l.clone()),
                (None, None) => panic!("README.md:{n}: output before any command"),
            }
        } else if !l.trim().is_empty() && !l.trim_start().starts_with('#') {
            out.push(Step {
                line: *n,
                command: l.clone(),
                shown: Vec::new(),
            });
        }
    }
    out
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Run {
    dir: PathBuf,
    path: String,
    ports: Vec<(String, String)>,
    servers: Vec<Child>,
}

impl Drop for Run {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
    }
}

impl Run {
    fn subst(&self, s: &str) -> String {
        let mut s = s.to_string();
        for (from, to) in &self.ports {
            s = s.replace(from.as_str(), to);
        }
        s
    }

    fn bash(&self, command: &str) -> Command {
        let mut c = Command::new("bash");
        c.args(["-o", "pipefail", "-c", command])
            .current_dir(&self.dir)
            .env("PATH", &self.path)
            .stdin(Stdio::null());
        c
    }

    /// Starts `bloomgate serve …` in the background and waits until it
    /// listens.
    fn serve(&mut self, step: &Step) {
        // The README's servers listen where the defaults say; the test's
        // on free ports.
        let mut command = step.command.split("  #").next().unwrap().trim().to_string();
        if !command.contains("--http") {
            command.push_str(" --http 127.0.0.1:8080");
        }
        if !command.contains("--resp") {
            command.push_str(" --resp 127.0.0.1:6380");
        }
        let ready = self.dir.join(format!("ready-{}.json", step.line));
        let log = std::fs::File::create(self.dir.join(format!("serve-{}.log", step.line))).unwrap();
        let command = format!(
            "exec {} --ready-file {}",
            self.subst(&command),
            ready.display()
        );
        let child = self
            .bash(&command)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.servers.push(child);
        let t = Instant::now();
        while !ready.exists() {
            let log = std::fs::read_to_string(self.dir.join(format!("serve-{}.log", step.line)))
                .unwrap_or_default();
            let child = self.servers.last_mut().unwrap();
            if let Ok(Some(st)) = child.try_wait() {
                panic!("README.md:{}: `{command}` exited ({st}):\n{log}", step.line);
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "README.md:{}: `{command}` did not start:\n{log}",
                step.line
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn run(&mut self, step: &Step) {
        if step.command.contains("bloomgate serve") {
            return self.serve(step);
        }
        let command = self.subst(&step.command);
        let o = self.bash(&command).output().unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        let at = format!(
            "README.md:{}: `{}`\nstdout:\n{out}\nstderr:\n{err}",
            step.line, step.command
        );
        assert!(o.status.success(), "{at}");
        if command.starts_with("redis-cli") {
            let first = out.lines().next().unwrap_or_default();
            assert!(
                !first.starts_with("ERR") && !first.starts_with("WRONGTYPE"),
                "{at}"
            );
        }
        if command.starts_with("curl") {
            assert!(!out.contains("\"error\""), "{at}");
        }
        if !step.shown.is_empty() {
            let got: Vec<&str> = out.lines().map(str::trim_end).collect();
            let shown: Vec<&str> = step.shown.iter().map(|l| l.trim_end()).collect();
            assert_eq!(got, shown, "{at}");
        }
    }
}

fn python(run: &Run, b: &Block) {
    let ok = Command::new("python3")
        .args(["-c", "import redis"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("BLOOMGATE_REQUIRE_CLIENTS").is_none(),
            "python3 with redis-py is required"
        );
        eprintln!("SKIPPED: README.md:{}: no redis-py", b.line);
        return;
    }
    let code: Vec<String> = b.lines.iter().map(|(_, l)| run.subst(l)).collect();
    let o = Command::new("python3")
        .args(["-c", &code.join("\n")])
        .current_dir(&run.dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "README.md:{}: python block failed:\n{}",
        b.line,
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn readme_examples_run_in_order() {
    if redis_missing() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("README.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        root.join("data").canonicalize().unwrap(),
        dir.path().join("data"),
    )
    .unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let bin_dir = testkit::bin().parent().unwrap().to_path_buf();
    let mut run = Run {
        dir: dir.path().to_path_buf(),
        path: format!(
            "{}:{}",
            bin_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
        ports: ["8080", "6380", "8081", "6381"]
            .iter()
            .map(|p| (p.to_string(), free_port().to_string()))
            .chain([("6379".to_string(), redis.port.to_string())])
            .collect(),
        servers: Vec::new(),
    };
    let (mut ran, mut skipped) = (0, Vec::new());
    for b in blocks(&text) {
        if let Some(why) = &b.skip {
            assert!(
                !why.is_empty(),
                "README.md:{}: a skip without a reason",
                b.line
            );
            skipped.push(format!("README.md:{}: {why}", b.line));
            continue;
        }
        match b.lang.as_str() {
            "sh" => {
                for s in steps(&b) {
                    run.run(&s);
                    ran += 1;
                }
            }
            "python" => python(&run, &b),
            other => panic!(
                "README.md:{}: a ```{other} block the test cannot run",
                b.line
            ),
        }
    }
    eprintln!(
        "ran {ran} README commands; not run:\n{}",
        skipped.join("\n")
    );
    assert!(ran > 50, "only {ran} commands ran");
}
