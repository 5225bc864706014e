#!/usr/bin/env bash
# Service benchmarks for BENCHMARKS.md "## Service": redis-benchmark against
# bloomgate's BF.EXISTS/BF.MEXISTS next to a real redis-server's GET in the
# same run, wrk against the HTTP batch check, and RSS over 60 s.
# Needs: redis-server, redis-benchmark, wrk, a release build of bloomgate-server.
# Usage: crates/server/bench/service.sh [N_REQUESTS]   (from the repo root)
set -euo pipefail
N=${1:-500000}
BIN=${BIN:-target/release/bloomgate-server}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
RPORT=16479; BPORT=16480; HPORT=18480
cleanup() { kill "$RPID" "$BPID" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

redis-server --port $RPORT --save "" --appendonly no --daemonize no >"$WORK/redis.log" 2>&1 & RPID=$!
"$BIN" ${BG_ARGS:-} --data-dir "$WORK" --http 127.0.0.1:$HPORT --resp 127.0.0.1:$BPORT --ready-file "$WORK/ready" 2>"$WORK/bg.log" & BPID=$!
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
curl -s -XPOST "127.0.0.1:$HPORT/v1/filters" -d '{"name":"urls","items":1000000,"fp":0.0001,"kind":"url","mode":"prefix"}' >/dev/null
python3 - "$HPORT" <<'PY'
import json, sys, urllib.request
port = sys.argv[1]
for b in range(10):
    items = [f"http://evil{b*1000+i}.example/phish/" for i in range(1000)]
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/filters/urls/add", data=json.dumps(items).encode(), method="POST")
    urllib.request.urlopen(req).read()
PY

MEX="BF.MEXISTS bf"; for i in $(seq 1 100); do MEX="$MEX item:$((i*997))"; done
rb() { redis-benchmark -q -n "$N" -c 50 "$@" 2>/dev/null | tr '\r' '\n' | grep -E "requests per second" | tail -1 | sed -E 's/.*: ([0-9.]+) requests per second, p50=([0-9.]+) msec.*/\1 req\/s (p50 \2 ms)/'; }
echo "### redis-benchmark (-c 50, -n $N)"
echo "| target | not pipelined | pipelined -P 16 |"
echo "|---|---|---|"
echo "| redis-server GET | $(rb -p $RPORT -t get) | $(rb -p $RPORT -t get -P 16) |"
echo "| bloomgate BF.EXISTS (random of 100k/1M, ~50% hits) | $(rb -p $BPORT -r 200000 BF.EXISTS bf item:__rand_int__) | $(rb -p $BPORT -r 200000 -P 16 BF.EXISTS bf item:__rand_int__) |"
N=$((N/10))
echo "| bloomgate BF.MEXISTS 100 items (n=$N) | $(rb -p $BPORT $MEX) | $(rb -p $BPORT -P 16 $MEX) |"
echo "| redis-server MGET 100 keys (n=$N) | $(rb -p $RPORT MGET $(for i in $(seq 100); do printf 'key:%d ' $i; done)) | $(rb -p $RPORT -P 16 MGET $(for i in $(seq 100); do printf 'key:%d ' $i; done)) |"
echo "| bloomgate BF.ADD (durable, group commit) (n=$N) | $(rb -p $BPORT -r 100000000 BF.ADD bf new:__rand_int__) | $(rb -p $BPORT -r 100000000 -P 16 BF.ADD bf new:__rand_int__) |"

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
