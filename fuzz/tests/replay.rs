//! Replays every target's seed corpus (`fuzz/corpus/TARGET/`) and the inputs
//! that once made a target fail (`fuzz/regressions/TARGET/`, kept there once
//! fixed): each must run cleanly. No fuzzing happens here; `scripts/fuzz.sh`
//! does that.

use std::path::Path;

#[test]
fn every_corpus_and_regression_input_runs_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for target in bloomgate_fuzz::TARGETS {
        let mut seeds = 0;
        for kind in ["corpus", "regressions"] {
            let Ok(rd) = std::fs::read_dir(root.join(kind).join(target)) else {
                continue;
            };
            for e in rd.flatten() {
                let data = std::fs::read(e.path()).unwrap();
                let r = std::panic::catch_unwind(|| bloomgate_fuzz::run(target, &data));
                assert!(r.is_ok(), "{target}: {} fails", e.path().display());
                seeds += (kind == "corpus") as usize;
            }
        }
        assert!(seeds > 0, "no seed corpus for {target}");
    }
}
