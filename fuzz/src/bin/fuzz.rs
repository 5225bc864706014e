//! The AFL++ entry point: `fuzz TARGET` reads inputs from AFL and runs
//! `bloomgate_fuzz::run(TARGET, …)` on each (see `scripts/fuzz.sh`).

fn main() {
    let target = std::env::args()
        .nth(1)
        .expect("usage: fuzz TARGET (one of bloomgate_fuzz::TARGETS)");
    assert!(
        bloomgate_fuzz::TARGETS.contains(&target.as_str()),
        "unknown target {target:?}; one of {:?}",
        bloomgate_fuzz::TARGETS
    );
    afl::fuzz!(|data: &[u8]| {
        bloomgate_fuzz::run(&target, data);
    });
}
