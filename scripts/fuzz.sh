#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of untrusted bytes with AFL++
# through cargo-afl (stable toolchain). The targets are fuzz/src/lib.rs; the
# seed corpora are fuzz/corpus/TARGET/; scripts/test.sh replays them (no
# fuzzing in CI).
#
#   bash scripts/fuzz.sh                 # every target, 10 minutes each
#   bash scripts/fuzz.sh resp url 600    # these targets, 600 s each
#
# Findings land in target/fuzz/TARGET/default/crashes (and hangs); copy each
# into fuzz/regressions/TARGET/ once fixed, so the tests replay it. A second
# run of a target resumes from its queue in target/fuzz/TARGET.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=()
secs=600
for a in "$@"; do
  if [[ "$a" =~ ^[0-9]+$ ]]; then secs="$a"; else targets+=("$a"); fi
done
if [ ${#targets[@]} -eq 0 ]; then
  targets=(resp socketmap http_json bgf_header deletable_header ribbon delta log journal dump cf_dump cf_file meta whitelist whitelist_file url squid)
fi

if ! command -v cargo-afl >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-afl"
  cargo install --locked cargo-afl
fi
# AFL++ itself is built once per cargo-afl version.
cargo afl config --build >/dev/null 2>&1 || true
# Instrumented builds get a target directory of their own, so that they and
# the ordinary builds do not rebuild each other.
export CARGO_TARGET_DIR=target/afl
cargo afl build --release -p bloomgate-fuzz --features afl --bin fuzz
bin=target/afl/release/fuzz

# AFL_AUTORESUME: a second run of a target goes on from its queue.
export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_AUTORESUME=1
# The journal target writes a file per input: keep it in memory.
[ -d /dev/shm ] && export TMPDIR=/dev/shm
for t in "${targets[@]}"; do
  out="target/fuzz/$t"
  mkdir -p "$out"
  echo "fuzz.sh: $t for ${secs}s -> $out"
  cargo afl fuzz -V "$secs" -i "fuzz/corpus/$t" -o "$out" -- "$bin" "$t" >"$out/log.txt" 2>&1 || true
  stats="$out/default/fuzzer_stats"
  if [ -f "$stats" ]; then
    val() { grep -E "^$1 " "$stats" | sed 's/.*: *//'; }
    lf=$(val last_find)
    if [ "$lf" = 0 ]; then last="no new path in this run"; else last="last new path $(( $(val last_update) - lf )) s before the end"; fi
    echo "  $t: $(val execs_done) execs in all ($(val execs_per_sec)/s), corpus $(val corpus_count), edges $(val edges_found) of $(val total_edges) ($(val bitmap_cvg)), crashes $(val saved_crashes), hangs $(val saved_hangs), $last"
  else
    echo "fuzz.sh: $t did not start; see $out/log.txt" >&2
    tail -20 "$out/log.txt" >&2
  fi
done
