//! Every example of README.md and of each docs/*.md, run in order in a
//! temporary directory (one per document) against the built binary, so
//! that the documents cannot drift from what the commands do: a command
//! that fails, a shown output that differs, a Redis or HTTP error reply,
//! fails the test, naming the document and line.
//!
//! The rules the documents are written to:
//! * ` ```sh ` and ` ```console ` blocks are run line by line with bash
//!   (`pipefail`) in one directory, `data/` linked in. In a block with
//!   `$ ` lines, those are the commands and the lines after each (if any)
//!   its exact output; otherwise every line is a command.
//! * ` ```python ` blocks run with python3 (skipped without redis-py,
//!   unless `BLOOMGATE_REQUIRE_CLIENTS` is set).
//! * ` ```text ` blocks are not commands (an address grammar, a formula,
//!   a message the program prints) and must not look like one; a block
//!   that says nothing of what it is (a bare ` ``` `) fails the test.
//! * `bloomgate serve …` runs in the background until the end; the
//!   documents' ports (8080, 6380, 8081, 6381 for the service; 6379 for a
//!   redis-server the test starts) are replaced by free ones.
//! * A block whose previous line is `<!-- not run by the README test:
//!   REASON -->` (or `… the docs test: …`) is not run; the reason must be
//!   given, and each document's count of commands run and blocks not run
//!   is pinned below, so that a block skipped silently fails the test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testkit::free_port;
use testkit::redis::{redis_missing, RedisServer};

/// The markers of a block that is not run (followed by the reason).
const SKIP: [&str; 2] = [
    "<!-- not run by the README test:",
    "<!-- not run by the docs test:",
];

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
                    let skip = SKIP
                        .iter()
                        .find_map(|m| prev.trim().strip_prefix(m))
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

fn steps(doc: &str, b: &Block) -> Vec<Step> {
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
                (None, None) => panic!("{doc}:{n}: output before any command"),
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

struct Run {
    /// The document's name, in messages.
    doc: String,
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
                panic!(
                    "{}:{}: `{command}` exited ({st}):\n{log}",
                    self.doc, step.line
                );
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "{}:{}: `{command}` did not start:\n{log}",
                self.doc,
                step.line
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn run(&mut self, step: &Step) {
        if step.command.contains("bloomgate serve") {
            return self.serve(step);
        }
        let mut command = self.subst(&step.command);
        if let Some(rest) = command.strip_prefix("redis-cli ") {
            // Replies as redis-cli shows them on a terminal, where the
            // documents' readers run it (`(integer) 1`, `(error) …`).
            command = format!("redis-cli --no-raw {rest}");
        }
        let o = self.bash(&command).output().unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        let at = format!(
            "{}:{}: `{}`\nstdout:\n{out}\nstderr:\n{err}",
            self.doc, step.line, step.command
        );
        assert!(o.status.success(), "{at}");
        if command.starts_with("redis-cli") {
            let first = out.lines().next().unwrap_or_default();
            let first = first.strip_prefix("(error) ").unwrap_or(first);
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
        eprintln!("SKIPPED: {}:{}: no redis-py", run.doc, b.line);
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
        "{}:{}: python block failed:\n{}",
        run.doc,
        b.line,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// What running one document did: commands run, and the blocks not run
/// with their reasons.
struct Ran {
    commands: usize,
    skipped: Vec<String>,
}

/// Runs every example of the document at `path` (relative to the
/// repository), in order, in a fresh temporary directory with its own
/// redis-server and ports.
fn run_document(path: &str) -> Ran {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join(path)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        root.join("data").canonicalize().unwrap(),
        dir.path().join("data"),
    )
    .unwrap();
    let redis = RedisServer::start(dir.path(), &[]);
    let bin_dir = testkit::bin().parent().unwrap().to_path_buf();
    let mut run = Run {
        doc: path.to_string(),
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
    let mut ran = Ran {
        commands: 0,
        skipped: Vec::new(),
    };
    for b in blocks(&text) {
        if let Some(why) = &b.skip {
            assert!(
                !why.is_empty(),
                "{path}:{}: a skip without a reason",
                b.line
            );
            ran.skipped.push(format!("{path}:{}: {why}", b.line));
            continue;
        }
        match b.lang.as_str() {
            "sh" | "console" => {
                for s in steps(path, &b) {
                    run.run(&s);
                    ran.commands += 1;
                }
            }
            "python" => python(&run, &b),
            "text" => {
                // Shown text, never a command hidden from the test.
                for (n, l) in &b.lines {
                    let l = l.trim_start();
                    assert!(
                        !["$ ", "bloomgate ", "curl ", "redis-cli "]
                            .iter()
                            .any(|c| l.starts_with(c)),
                        "{path}:{n}: a command in a ```text block: make it a ```sh or ```console block"
                    );
                }
            }
            other => panic!(
                "{path}:{}: a ```{other} block the test cannot run (sh, console, python; text for what is not a command)",
                b.line
            ),
        }
    }
    eprintln!(
        "{path}: ran {} commands; not run:\n{}",
        ran.commands,
        ran.skipped.join("\n")
    );
    ran
}

#[test]
fn readme_examples_run_in_order() {
    if redis_missing() {
        return;
    }
    let ran = run_document("README.md");
    assert!(ran.commands > 50, "only {} commands ran", ran.commands);
}

/// Commands run and blocks not run, per document in docs/: a block that
/// stops running (or a document without examples that gains some) changes
/// a count here.
const DOCS: &[(&str, usize, usize)] = &[
    ("docs/file-format.md", 0, 0),
    ("docs/http-api.md", 23, 0),
    ("docs/redis-layout.md", 6, 1),
];

#[test]
fn docs_examples_run_in_order() {
    if redis_missing() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut found: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| format!("docs/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|n| n.ends_with(".md"))
        .collect();
    found.sort();
    let pinned: Vec<&str> = DOCS.iter().map(|(d, _, _)| *d).collect();
    assert_eq!(
        found, pinned,
        "every document in docs/ has its counts in DOCS"
    );
    for &(doc, commands, skipped) in DOCS {
        let ran = run_document(doc);
        assert_eq!(
            (ran.commands, ran.skipped.len()),
            (commands, skipped),
            "{doc}: commands run and blocks not run; not run: {:?}",
            ran.skipped
        );
    }
}
