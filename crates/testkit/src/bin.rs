//! The `bloomgate` binary under test, found the same way from every crate.
//!
//! Cargo gives the path of a binary (`CARGO_BIN_EXE_bloomgate`) only to the
//! tests of the crate that defines it, the CLI. The tests of the server and
//! of the libraries run it too, so the harness builds it itself, once per
//! test process: `$CARGO build --profile P -p bloomgate-cli --bin bloomgate`,
//! with `P` the profile of the running test (read from the test's own path,
//! `<target>/<profile>/deps/<test>`). Cargo releases its lock on the target
//! directory while tests run, so this is safe from inside `cargo test`, and
//! a test never runs a binary older than the sources. A binary newer than
//! every source file of the workspace (`crates/*/src`, the manifests,
//! `Cargo.lock`) is used as it is. `BLOOMGATE_BIN` names a binary to use
//! instead (nothing is built then).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The path of the `bloomgate` binary: `BLOOMGATE_BIN` if set, otherwise
/// the one in this test's target directory and profile, built (or found
/// up to date) by cargo on the first call.
pub fn bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(find)
}

fn find() -> PathBuf {
    if let Some(p) = std::env::var_os("BLOOMGATE_BIN") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "BLOOMGATE_BIN={} is not a file", p.display());
        return p;
    }
    let exe = std::env::current_exe().expect("the path of the running test");
    // <target>[/<triple>]/<profile>/deps/<test>
    let profile_dir = exe
        .parent()
        .filter(|d| d.file_name().is_some_and(|n| n == "deps"))
        .and_then(Path::parent)
        .unwrap_or_else(|| {
            panic!(
                "{} is not in <target>/<profile>/deps: set BLOOMGATE_BIN to the bloomgate binary",
                exe.display()
            )
        })
        .to_path_buf();
    let binary = profile_dir.join(format!("bloomgate{}", std::env::consts::EXE_SUFFIX));
    let dir_name = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a UTF-8 profile directory");
    // Cargo names the directory of the `dev` and `test` profiles `debug`.
    let profile = if dir_name == "debug" { "dev" } else { dir_name };
    let mut root = profile_dir
        .parent()
        .expect("a target directory")
        .to_path_buf();
    let mut triple = None;
    if !root.join("CACHEDIR.TAG").exists()
        && root
            .parent()
            .is_some_and(|r| r.join("CACHEDIR.TAG").exists())
    {
        triple = root.file_name().and_then(|t| t.to_str()).map(str::to_owned);
        root = root.parent().unwrap().to_path_buf();
    }
    if up_to_date(&binary) {
        // Built after every source file of the workspace changed last (as
        // by the `cargo test --workspace` running this test): building
        // again from `-p bloomgate-cli` alone would only resolve features
        // differently and rebuild dependencies for the same code.
        return binary;
    }
    let Some(cargo) = std::env::var_os("CARGO") else {
        assert!(
            binary.is_file(),
            "no bloomgate binary at {} and no CARGO to build it: run `cargo build --profile {profile} -p bloomgate-cli --bin bloomgate` or set BLOOMGATE_BIN",
            binary.display()
        );
        return binary;
    };
    let mut cmd = Command::new(&cargo);
    cmd.args(["build", "--quiet", "--profile", profile])
        .args(["-p", "bloomgate-cli", "--bin", "bloomgate", "--target-dir"])
        .arg(&root)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if let Some(t) = &triple {
        cmd.args(["--target", t]);
    }
    let status = cmd.status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "`cargo build --profile {profile} -p bloomgate-cli --bin bloomgate` failed ({s})"
        ),
        Err(e) if binary.is_file() => {
            eprintln!("NOTE: cannot run cargo ({e}); testing the existing {}", binary.display())
        }
        Err(e) => panic!(
            "cannot run cargo ({e}) and no bloomgate binary at {}: run `cargo build --profile {profile} -p bloomgate-cli --bin bloomgate` or set BLOOMGATE_BIN",
            binary.display()
        ),
    }
    assert!(binary.is_file(), "cargo built no {}", binary.display());
    binary
}

/// True if `binary` was written after the last change to any source file
/// of the workspace: the crates' `src` trees and manifests, the root
/// manifest and `Cargo.lock`.
fn up_to_date(binary: &Path) -> bool {
    let Ok(built) = binary.metadata().and_then(|m| m.modified()) else {
        return false;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut newest = None;
    for f in ["Cargo.toml", "Cargo.lock"] {
        newer(&root.join(f), &mut newest);
    }
    let Ok(crates) = std::fs::read_dir(root.join("crates")) else {
        return false;
    };
    for c in crates.flatten() {
        newer(&c.path().join("Cargo.toml"), &mut newest);
        walk(&c.path().join("src"), &mut newest);
    }
    newest.is_some_and(|t| t <= built)
}

fn newer(path: &Path, newest: &mut Option<std::time::SystemTime>) {
    if let Ok(t) = path.metadata().and_then(|m| m.modified()) {
        if newest.is_none_or(|n| t > n) {
            *newest = Some(t);
        }
    }
}

fn walk(dir: &Path, newest: &mut Option<std::time::SystemTime>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            walk(&path, newest);
        } else {
            newer(&path, newest);
        }
    }
}

/// Runs the `bloomgate` binary with `args` (standard input empty, as
/// `Command::output` leaves it) and returns its exit code,
/// standard output and standard error; fails the test if it panicked or was
/// killed by a signal.
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .args(args)
        .output()
        .expect("run bloomgate");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !stderr.contains("panicked"),
        "bloomgate {args:?} panicked: {stderr}"
    );
    (
        out.status.code().expect("exited, not killed"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
    )
}
