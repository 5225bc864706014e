#!/usr/bin/env bash
# Throughput of `check` and `dedup` on a file and through a pipe, for two
# binaries: BEFORE (answers only at a full chunk or the end of input) and
# AFTER (answers flushed when the input pauses). Medians of RUNS (5) wall
# and CPU (user+sys) times, the binaries alternating. Usage: crates/bench/run-stream-bench.sh BEFORE AFTER [LINES]
set -euo pipefail
before=$1 after=$2 lines=${3:-1000000} runs=${RUNS:-5}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# 10^6 URLs, a tenth of them repeated, 2 of 3 on the list.
awk -v n="$lines" 'BEGIN { for (i = 0; i < n; i++) printf "http://host%d.example/path/%d/page.html?q=%d\n", i % 50000, i % (n - n / 10), i % 7 }' > "$dir/urls.txt"
awk 'NR % 3 != 0' "$dir/urls.txt" > "$dir/list.txt"
"$after" build -n "$lines" -p 1e-4 -o "$dir/f.bgf" "$dir/list.txt" 2>/dev/null
# Median of column $1 of the lines read.
median() { awk -v c="$1" '{ print $c }' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
time_of() { # command line, run in bash; prints "wall cpu" seconds
    /usr/bin/time -f '%e %U %S' -o "$dir/time" bash -c "$1" > /dev/null 2>&1
    awk '{ print $1, $2 + $3 }' "$dir/time"
}
echo "lscpu: $(lscpu | grep 'Model name' | sed 's/  */ /g')"
echo "lines: $lines, runs: $runs"
printf '%-30s %14s %14s %14s %14s\n' command before_wall_s after_wall_s before_cpu_s after_cpu_s
for cmd in "check --count F U" "cat U | B check --count F -" "dedup U" "cat U | B dedup -"; do
    # The two binaries alternate, so that a change of load hits both.
    cmds=()
    for bin in "$before" "$after"; do
        c=${cmd//F/$dir/f.bgf}
        c=${c//U/$dir/urls.txt}
        case $c in cat*) c=${c//B/$bin} ;; *) c="$bin $c" ;; esac
        cmds+=("$c")
    done
    : > "$dir/t0"; : > "$dir/t1"
    for _ in $(seq "$runs"); do
        time_of "${cmds[0]}" >> "$dir/t0"
        time_of "${cmds[1]}" >> "$dir/t1"
    done
    printf '%-30s %14.2f %14.2f %14.2f %14.2f\n' "$cmd" "$(median 1 < "$dir/t0")" "$(median 1 < "$dir/t1")" "$(median 2 < "$dir/t0")" "$(median 2 < "$dir/t1")"
done
