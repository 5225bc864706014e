#!/usr/bin/env bash
# End-to-end CLI comparison: `bloomgate build` / `bloomgate check` against the
# Debian `bloom` CLI (package golang-github-dcso-bloom-cli) at the same n and p,
# on N synthetic URLs (default 10 million).
#
#   crates/bench/run-cli-bench.sh                 # N=10000000 P=0.0001 RUNS=5
#   N=1000000 RUNS=3 crates/bench/run-cli-bench.sh
#
# Inputs: $WORK/urls.txt (N URLs, inserted) and $WORK/queries.txt (N URLs: the
# first N/2 inserted ones + N/2 never inserted). Times with hyperfine if
# installed (median of RUNS), else /usr/bin/time. Also checks the answers:
# both tools must report every inserted URL and a plausible number of false
# positives among the absent half.
set -euo pipefail

N=${N:-10000000}
P=${P:-0.0001}
RUNS=${RUNS:-5}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BG=${BLOOMGATE:-$ROOT/target/release/bloomgate}
BLOOM=${BLOOM:-/usr/bin/bloom}
WORK=${WORK:-${TMPDIR:-/tmp}/bloomgate-cli-bench}
mkdir -p "$WORK"

[ -x "$BLOOM" ] || { echo "missing $BLOOM (apt-get install golang-github-dcso-bloom-cli)" >&2; exit 2; }
[ -x "$BG" ] || { echo "missing $BG (cargo build --release -p bloomgate-cli)" >&2; exit 2; }

gen() { # gen FROM TO -> URL lines for ids FROM..TO-1 (same scheme as the filters bench)
  awk -v a="$1" -v b="$2" 'BEGIN { for (i = a; i < b; i++) printf "http://host%d.example/path/%d\n", (i * 2654435761) % 1000003, i }'
}
if [ ! -s "$WORK/urls.txt" ] || [ "$(wc -l < "$WORK/urls.txt")" -ne "$N" ]; then
  echo "generating $N URLs into $WORK ..." >&2
  gen 0 "$N" > "$WORK/urls.txt"
  { head -n $((N / 2)) "$WORK/urls.txt"; gen "$N" $((N + N - N / 2)); } > "$WORK/queries.txt"
fi
HALF_IN=$((N / 2)); HALF_OUT=$((N - N / 2))
echo "inputs: $(du -h "$WORK/urls.txt" | cut -f1) urls.txt, $(du -h "$WORK/queries.txt" | cut -f1) queries.txt; nproc=$(nproc)"

BUILD_BLOOM="$BLOOM create -n $N -p $P $WORK/out.bloom < $WORK/urls.txt"
BUILD_BG="$BG build --items $N --fp $P -o $WORK/out.bg $WORK/urls.txt"
CHECK_BLOOM="$BLOOM check $WORK/out.bloom < $WORK/queries.txt > $WORK/bloom-check.out"
CHECK_BG="$BG check --count $WORK/out.bg $WORK/queries.txt > $WORK/bg-check.out"

# --- correctness first (one run each) -----------------------------------------
rm -f "$WORK/out.bloom" "$WORK/out.bg"
bash -c "$BUILD_BLOOM"; bash -c "$BUILD_BG"
bash -c "$CHECK_BLOOM"; bash -c "$CHECK_BG"
bloom_hits=$(wc -l < "$WORK/bloom-check.out")
bg_hits=$(grep -Eo '[0-9]+' "$WORK/bg-check.out" | head -n1 || true)
echo "bloom check matched $bloom_hits of $N queries; bloomgate check --count says: $(tr '\n' ' ' < "$WORK/bg-check.out")"
python3 - "$bloom_hits" "${bg_hits:-0}" "$HALF_IN" "$HALF_OUT" "$P" <<'EOF'
import sys
bloom, bg, inn, out, p = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
bad = []
for name, hits in (("bloom", bloom), ("bloomgate", bg)):
    fp = hits - inn
    print(f"{name}: {hits} matches = {inn} inserted + {fp} false positives among {out} absent "
          f"(measured FP {fp/out:.3e}, target {p:.0e})")
    if fp < 0:
        bad.append(f"{name} missed {-fp} inserted URLs (false negatives)")
    elif fp > 3 * p * out + 50:
        bad.append(f"{name}: implausible false-positive count {fp}")
if bad:
    sys.exit("CLI CHECK FAILED: " + "; ".join(bad))
EOF

# --- timing -----------------------------------------------------------------
if command -v hyperfine >/dev/null; then
  hyperfine --runs "$RUNS" --warmup 1 --export-json "$WORK/build.json" --export-markdown "$WORK/build.md" \
    --prepare "rm -f $WORK/out.bloom" --prepare "rm -f $WORK/out.bg" -n "bloom create" "$BUILD_BLOOM" -n "bloomgate build" "$BUILD_BG"
  hyperfine --runs "$RUNS" --warmup 1 --export-json "$WORK/check.json" --export-markdown "$WORK/check.md" \
    -n "bloom check" "$CHECK_BLOOM" -n "bloomgate check --count" "$CHECK_BG"
  python3 - "$WORK/build.json" "$WORK/check.json" "$N" <<'EOF'
import json, sys, statistics
n = int(sys.argv[3])
print("\n| command | wall median s | user+sys s (mean) | wall Mlines/s | Mlines per CPU-second | speed-up vs bloom (wall) |")
print("|---|---:|---:|---:|---:|---:|")
for path in sys.argv[1:3]:
    res = json.load(open(path))["results"]
    base = statistics.median(res[0]["times"])
    for r in res:
        wall = statistics.median(r["times"])
        cpu = r["user"] + r["system"]
        print(f"| `{r['command']}` | {wall:.3f} | {cpu:.3f} | {n/wall/1e6:.2f} | {n/cpu/1e6:.2f} | {base/wall:.2f}× |")
EOF
else
  for c in "$BUILD_BLOOM" "$BUILD_BG" "$CHECK_BLOOM" "$CHECK_BG"; do
    for _ in $(seq "$RUNS"); do
      # A build does not overwrite its output (as hyperfine's --prepare above).
      case "$c" in "$BUILD_BLOOM") rm -f "$WORK/out.bloom";; "$BUILD_BG") rm -f "$WORK/out.bg";; esac
      rm -f "$WORK/out.bloom.tmp"; /usr/bin/time -f "%e s wall %U user %S sys  $c" bash -c "$c"
    done
  done
fi
ls -l "$WORK"/out.bloom "$WORK"/out.bg
