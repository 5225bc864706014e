#!/usr/bin/env bash
# Service benchmarks for BENCHMARKS.md "## Service": redis-benchmark against
# bloomgate's BF.EXISTS/BF.MEXISTS next to a real redis-server's GET/MGET in
# the same run (alternating rounds, medians, ratios, CPU time of each
# server), wrk against the HTTP batch check, and RSS over 60 s.
# Needs: redis-server, redis-benchmark, wrk, a release build of bloomgate (cargo build --release).
# Usage: crates/server/bench/service.sh [N_REQUESTS]   (from the repo root)
#        ROUNDS=N alternating rounds (default 5); BG_ARGS="--resp-threads 2" etc.;
#        SKIP_HTTP=1 stops after redis-benchmark.
set -euo pipefail
N=${1:-500000}
ROUNDS=${ROUNDS:-5}
BIN=${BIN:-target/release/bloomgate}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
RPORT=16479; BPORT=16480; HPORT=18480
cleanup() { kill "$RPID" "$BPID" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

redis-server --port $RPORT --save "" --appendonly no --daemonize no >"$WORK/redis.log" 2>&1 & RPID=$!
"$BIN" serve ${BG_ARGS:-} --data-dir "$WORK" --http 127.0.0.1:$HPORT --resp 127.0.0.1:$BPORT --ready-file "$WORK/ready" 2>"$WORK/bg.log" & BPID=$!
for _ in $(seq 100); do [ -f "$WORK/ready" ] && redis-cli -p $RPORT ping >/dev/null 2>&1 && break; sleep 0.1; done

# Data: a raw filter of 1M planned items holding 100k items; a URL filter.
redis-cli -p $BPORT BF.RESERVE bf 0.001 1000000 >/dev/null
python3 - "$BPORT" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
buf = b""
for chunk in range(100):
    items = [f"item:{chunk*1000+i}".encode() for i in range(1000)]
    args = [b"BF.MADD", b"bf"] + items
    buf = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
    s.sendall(buf)
    need = 1000; got = b""
    while got.count(b"\r\n") < need + 1:
        got += s.recv(1 << 20)
PY
redis-cli -p $RPORT SET key:__rand_int__ v >/dev/null
redis-cli -p $RPORT SET key v >/dev/null
curl -s -XPOST "127.0.0.1:$HPORT/v1/filters" -H "Content-Type: application/json" -d '{"name":"urls","items":1000000,"fp":0.0001,"kind":"url","mode":"prefix"}' >/dev/null
python3 - "$HPORT" <<'PY'
import json, sys, urllib.request
port = sys.argv[1]
for b in range(10):
    items = [f"http://evil{b*1000+i}.example/phish/" for i in range(1000)]
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/filters/urls/add", data=json.dumps(items).encode(), method="POST", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req).read()
PY

MEX="BF.MEXISTS bf"; for i in $(seq 1 100); do MEX="$MEX item:$((i*997))"; done
MGET="MGET"; for i in $(seq 100); do MGET="$MGET key:$i"; done
M=$((N/10))
# Each case: label, pid of the server, redis-benchmark arguments. Every round
# runs all of them, not pipelined then -P 16, redis-server and bloomgate
# alternating (the order reversed every other round); the tables give
# medians over the rounds, and the CPU time the server process used.
CASES=(
  "redis-server GET|$RPID|-n $N -p $RPORT -t get"
  "bloomgate BF.EXISTS|$BPID|-n $N -p $BPORT -r 200000 BF.EXISTS bf item:__rand_int__"
  "redis-server MGET 100 keys|$RPID|-n $M -p $RPORT $MGET"
  "bloomgate BF.MEXISTS 100 items|$BPID|-n $M -p $BPORT $MEX"
  "bloomgate BF.ADD (durable)|$BPID|-n $M -p $BPORT -r 100000000 BF.ADD bf new:__rand_int__"
)
mkdir -p "$WORK/res"
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
# one LABEL PID PIPELINE ARGS...: appends "req/s p50_ms server_cpu_ticks" to the case's results.
one() {
  local label=$1 pid=$2 pl=$3; shift 3
  local c0 c1 line
  c0=$(cpu "$pid")
  line=$(redis-benchmark -q -c 50 -P "$pl" "$@" 2>/dev/null | tr '\r' '\n' | grep -E "requests per second" | tail -1)
  c1=$(cpu "$pid")
  echo "$line" | sed -E "s/.*: ([0-9.]+) requests per second, p50=([0-9.]+) msec.*/\1 \2 $((c1 - c0))/" >> "$WORK/res/$label.P$pl"
}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  order=("${CASES[@]}")
  if [ $((r % 2)) -eq 0 ]; then
    order=(); for ((i=${#CASES[@]}-1; i>=0; i--)); do order+=("${CASES[$i]}"); done
  fi
  for pl in 1 16; do
    for c in "${order[@]}"; do
      IFS='|' read -r label pid args <<<"$c"
      # shellcheck disable=SC2086
      one "$label" "$pid" "$pl" $args
    done
  done
  echo "round $r done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$WORK/res" "$N" "$M" "$ROUNDS" "$(getconf CLK_TCK)" <<'PY'
import statistics, sys
res, n, m, rounds, tick = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def load(label, pl):
    rows = [l.split() for l in open(f"{res}/{label}.P{pl}") if l.strip()]
    return [(float(a), float(b), int(c) / tick) for a, b, c in rows]
def med(label, pl, i):
    return statistics.median(r[i] for r in load(label, pl))
labels = ["redis-server GET", "bloomgate BF.EXISTS", "redis-server MGET 100 keys",
          "bloomgate BF.MEXISTS 100 items", "bloomgate BF.ADD (durable)"]
print(f"\n### redis-benchmark -c 50: medians of {rounds} alternating rounds (-n {n}; MGET, MEXISTS, ADD -n {m})")
print("| target | not pipelined: req/s (p50 ms) | server CPU s | `-P 16`: req/s (p50 ms) | server CPU s |")
print("|---|---|---|---|---|")
for l in labels:
    cells = []
    for pl in (1, 16):
        cells += [f"{med(l, pl, 0):,.0f} ({med(l, pl, 1):.3f})", f"{med(l, pl, 2):.2f}"]
    print(f"| {l} | " + " | ".join(cells) + " |")
for a, b in (("bloomgate BF.EXISTS", "redis-server GET"),
             ("bloomgate BF.MEXISTS 100 items", "redis-server MGET 100 keys")):
    # Ratio of the medians, and the median of the per-round ratios (the two
    # ran back to back, under about the same load).
    per = {pl: [x[0] / y[0] for x, y in zip(load(a, pl), load(b, pl))] for pl in (1, 16)}
    cells = []
    for pl in (1, 16):
        cells += [f"{med(a, pl, 0) / med(b, pl, 0):.2f}; per round {statistics.median(per[pl]):.2f} "
                  f"({', '.join(f'{x:.2f}' for x in per[pl])})",
                  f"{med(a, pl, 2) / med(b, pl, 2):.2f}"]
    print(f"| ratio {a.split(' ', 1)[1]} / {b.split(' ', 1)[1]} | " + " | ".join(cells) + " |")
print("\nper round, req/s:")
for l in labels:
    for pl in (1, 16):
        print(f"  {l} -P {pl}: " + ", ".join(f"{r[0]:,.0f}" for r in load(l, pl)))
PY
[ -n "${SKIP_HTTP:-}" ] && exit 0

echo
echo "### wrk: HTTP batch check of 100 URLs (POST /v1/filters/urls/check), 60 s, RSS sampled every 10 s"
python3 - > "$WORK/body.json" <<'PY'
import json
print(json.dumps([f"https://www.evil{i*37}.example/phish/login.php?x={i}" if i % 2 else f"http://good{i}.example/a/b.html" for i in range(100)]))
PY
cat > "$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$WORK/body.json"); wrk.body = f:read("*a"); f:close()
LUA
rss() { awk '/VmRSS/{print $2}' /proc/$BPID/status; }
echo "RSS before: $(rss) kB"
( for t in 10 20 30 40 50 60; do sleep 10; echo "RSS at ${t}s: $(rss) kB"; done ) > "$WORK/rss.txt" &
wrk -t2 -c32 -d60s --latency -s "$WORK/post.lua" "http://127.0.0.1:$HPORT/v1/filters/urls/check" | grep -E "Requests/sec|Latency|50%|99%|requests in"
wait %% 2>/dev/null || sleep 1
cat "$WORK/rss.txt"
echo
echo "### wrk: HTTP single check (GET ?item=URL), 15 s"
wrk -t2 -c32 -d15s --latency "http://127.0.0.1:$HPORT/v1/filters/urls/check?item=https://www.evil37.example/phish/x" | grep -E "Requests/sec|50%|99%"
