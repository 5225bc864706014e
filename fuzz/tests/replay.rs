//! Replays every target's corpus (`fuzz/corpus/TARGET/`) and the inputs that
//! once made it fail (`fuzz/regressions/TARGET/`): each must run cleanly.
//! No fuzzing happens here; `scripts/fuzz.sh` does that.

use std::path::Path;

fn replay(kind: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(kind);
    let mut n = 0;
    for target in bloomgate_fuzz::TARGETS {
        let Ok(rd) = std::fs::read_dir(root.join(target)) else {
            continue;
        };
        for e in rd.flatten() {
            let data = std::fs::read(e.path()).unwrap();
            let r = std::panic::catch_unwind(|| bloomgate_fuzz::run(target, &data));
            assert!(r.is_ok(), "{target}: {} fails", e.path().display());
            n += 1;
        }
    }
    n
}

#[test]
fn every_corpus_input_runs_cleanly() {
    let n = replay("corpus");
    // Every target has a seed corpus.
    for t in bloomgate_fuzz::TARGETS {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(t);
        assert!(
            std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0) > 0,
            "no corpus for {t} in {}",
            dir.display()
        );
    }
    eprintln!("replayed {n} corpus inputs");
}

#[test]
fn every_regression_input_runs_cleanly() {
    eprintln!("replayed {} regression inputs", replay("regressions"));
}
