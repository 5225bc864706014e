//! A filter written to a disk that fills up: a clear error and exit 1,
//! nothing left behind — never a crash. The disk is a 4 MiB tmpfs of the
//! test's own (root and `mount`; the test says why it cannot run
//! otherwise).

use std::path::Path;
use std::process::Command;

/// A small tmpfs mounted on a temporary directory, unmounted on drop.
struct Tiny {
    dir: tempfile::TempDir,
}

impl Tiny {
    /// `None` (with the reason printed) when no filesystem can be mounted.
    fn mount(bytes: u64) -> Option<Tiny> {
        let dir = tempfile::tempdir().ok()?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tiny { dir }),
            Ok(o) => {
                eprintln!(
                    "skipped: cannot mount a small tmpfs (needs root): {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipped: no mount command: {e}");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tiny {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// `build` of a 27.5 MB filter into a 4 MiB filesystem. The filter is
/// written through a memory map; with the file sparse, the first write to
/// a block the disk could not give was a SIGBUS (exit 135) and the
/// temporary stayed. Its blocks are reserved first now: ENOSPC is an error.
#[test]
fn a_build_into_a_full_disk_is_an_error_and_leaves_nothing() {
    let Some(tiny) = Tiny::mount(4 << 20) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let input = work.path().join("urls.txt");
    let lines: String = (0..20_000)
        .map(|i| format!("http://e{i}.example/\n"))
        .collect();
    std::fs::write(&input, lines).unwrap();
    let out_path = tiny.path().join("f.bgf");
    let out = Command::new(testkit::bin())
        .args(["build", "--items", "10000000", "--fp", "1e-4", "-o"])
        .arg(&out_path)
        .arg(&input)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a full disk is exit 1, not a signal; stderr: {stderr}"
    );
    assert!(
        stderr.contains("No space left on device"),
        "the error says why: {stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(tiny.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "nothing is left behind: {left:?}");
}
