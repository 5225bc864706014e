#!/usr/bin/env bash
# bloomgate squid-helper against squidGuard (BENCHMARKS.md, "Squid helpers"):
# the same synthetic blacklist of N domains (half of them also as URLs), in a
# squidGuard directory; build time, size on disk and peak RSS of each
# program's build; lookups/s through each program's own helper protocol
# (url_rewrite_program lines, no channel IDs, fed by a pipe from a file),
# median of RUNS runs, same machine, same run. The answers are checked: both
# programs must block the same listed queries (bloomgate may add its few
# false positives), or the script fails.
#
#   bash scripts/bench-squid.sh [N] [QUERIES] [RUNS]     (default 1000000 2000000 3)
#
# Needs squidGuard (Debian squidguard) and GNU time; builds bloomgate.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
Q=${2:-2000000}
RUNS=${3:-3}
command -v squidGuard >/dev/null || { echo "needs squidGuard (apt-get install squidguard)"; exit 2; }
cargo build --release -q
B=$PWD/target/release/bloomgate
W=$(mktemp -d "${TMPDIR:-/tmp}/bench-squid.XXXXXX")
trap 'rm -rf "$W"' EXIT
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# squidGuard: $(squidGuard -v 2>&1 | head -1)"
echo "# N=$N entries, $Q queries (half listed), median of $RUNS runs"

mkdir -p "$W/bl/bench" "$W/db" "$W/log"
python3 - "$W" "$N" "$Q" <<'EOF'
import random, sys
w, n, q = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(42)
doms = ["d%x-%x.example.com" % (i, r.getrandbits(40)) for i in range(n)]
with open(w + "/bl/bench/domains", "w") as f:
    f.write("\n".join(doms[: n // 2]) + "\n")
with open(w + "/bl/bench/urls", "w") as f:
    f.write("\n".join("%s/p/%d" % (d, i) for i, d in enumerate(doms[n // 2 :])) + "\n")
with open(w + "/queries", "w") as f:
    for i in range(q):
        if i % 2:
            j = r.randrange(n)
            if j < n // 2:
                f.write("http://www.%s/some/page?x=%d 10.0.0.1/- - GET\n" % (doms[j], i))
            else:
                f.write("http://%s/p/%d/below 10.0.0.1/- - GET\n" % (doms[j], j - n // 2))
        else:
            f.write("http://n%d-%x.other.org/page 10.0.0.1/- - GET\n" % (i, r.getrandbits(32)))
EOF

cat > "$W/squidGuard.conf" <<EOF
dbhome $W/bl
logdir $W/log
dest bench {
	domainlist bench/domains
	urllist bench/urls
}
acl {
	default {
		pass !bench all
		redirect http://blocked.example/?category=%t&url=%u
	}
}
EOF

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# wall seconds, peak RSS (KiB) and CPU seconds (user + system) of a
# command: "SECONDS KIB CPU". On a loaded machine the CPU seconds say what
# a program costs; the wall seconds also count the waits for a core.
measure() { /usr/bin/time -f '%e %M %U %S' -o "$W/time" "$@"; awk '{print $1, $2, $3 + $4}' "$W/time"; }

echo "## build"
read -r sg_s sg_kb _ < <(measure squidGuard -c "$W/squidGuard.conf" -C all 2>/dev/null)
sg_size=$(du -cb "$W/bl/bench/"*.db | tail -1 | cut -f1)
read -r bg_s bg_kb _ < <(measure "$B" build --squidguard "$W/bl" --fp 1e-4 -o "$W/lists" 2>/dev/null)
bg_size=$(stat -c %s "$W/lists/bench.bgf")
printf '| %-12s | %8s s | %12s bytes | %8s KiB RSS |\n' squidGuard "$sg_s" "$sg_size" "$sg_kb" bloomgate "$bg_s" "$bg_size" "$bg_kb"

echo "## lookups through the helper protocol (url_rewrite lines on a pipe)"
run() { # NAME INPUT OUTFILE COMMAND...
  local name=$1 in=$2 out=$3; shift 3
  local times=() cpus=()
  for _ in $(seq "$RUNS"); do
    read -r s kb cpu < <(measure sh -c 'in=$0 out=$1; shift; cat "$in" | "$@" > "$out"' "$in" "$out" "$@" 2>/dev/null)
    times+=("$s"); cpus+=("$cpu"); rss=$kb
  done
  local med; med=$(printf '%s\n' "${times[@]}" | median)
  local cmed; cmed=$(printf '%s\n' "${cpus[@]}" | median)
  local blocked; blocked=$(grep -c -E '^([0-9]+ )?OK' "$out" || true)
  printf '| %-28s | %8s s | %10.0f lookups/s | %6s s CPU | %10.0f lookups/CPU-s | %8s KiB RSS | %s blocked | wall: %s; CPU: %s\n' \
    "$name" "$med" "$(echo "$Q / $med" | bc -l)" "$cmed" "$(echo "$Q / $cmed" | bc -l)" "$rss" "$blocked" "${times[*]}" "${cpus[*]}"
  echo "$blocked" > "$out.blocked"
}
run "squidGuard" "$W/queries" "$W/sg.out" squidGuard -c "$W/squidGuard.conf"
run "bloomgate squid-helper" "$W/queries" "$W/bg.out" "$B" squid-helper --redirect 'http://blocked.example/?category=%t&url=%u' "$W/lists/bench.bgf"
# external_acl_type lines: a channel ID and %URI
awk '{print NR % 100, $1}' "$W/queries" > "$W/acl-queries"
run "bloomgate (acl, concurrency)" "$W/acl-queries" "$W/bga.out" "$B" squid-helper --concurrency "$W/lists/bench.bgf"

sg=$(cat "$W/sg.out.blocked"); bg=$(cat "$W/bg.out.blocked"); bga=$(cat "$W/bga.out.blocked")
listed=$((Q / 2))
echo "# blocked: squidGuard $sg, bloomgate $bg (rewrite) / $bga (acl); listed queries $listed"
# Zero false negatives: every listed query blocked; at most 0.1 % more (false positives).
for got in "$sg" "$bg" "$bga"; do
  [ "$got" -ge "$listed" ] || { echo "FAIL: $got blocked of $listed listed"; exit 1; }
done
[ "$bg" -le $((listed + listed / 1000)) ] || { echo "FAIL: bloomgate blocked $bg (too many false positives)"; exit 1; }
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
