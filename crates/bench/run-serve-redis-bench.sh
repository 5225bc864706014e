#!/usr/bin/env bash
# `bloomgate serve --store` against the CLI on the same Redis, in the same run:
# single-key BF.EXISTS / BF.ADD from redis-benchmark (`-c 50 -P 16`, random keys)
# through the server, and `bloomgate check` / `bloomgate add` of the same kind of
# keys straight to Redis; then the server's latency at half its pipelined rate
# (crates/bench/src/bin/resp_paced.rs: an open-loop client sending pipelines of
# 16 from 50 connections at a fixed rate, latency measured from each pipeline's
# scheduled start).
#
#   crates/bench/run-serve-redis-bench.sh                  # standalone, RUNS=3
#   CLUSTER=1 crates/bench/run-serve-redis-bench.sh        # 3 masters + 3 replicas, AOF everysec
#   REDISBLOOM_MODULE=../shared/bench/redisbloom.so ...    # + RedisBloom's latency at the same rates
#   ADD_RATES="20000 10000" ...                            # + paced BF.ADD at these fixed rates too
#
# Starts its own redis-server(s) on free ports in $WORK and kills them at the end.
# The filter: BF.RESERVE f 0.0001 10000000 NONSCALING through the server (raw keys,
# blocked layout, pushed to Redis). Prints one line per measurement and, at the end,
# the medians and the ratios server / CLI (per round, and their median).
set -euo pipefail

RUNS=${RUNS:-3}
N=${N:-1000000}           # redis-benchmark requests per run
CLI_N=${CLI_N:-1000000}   # keys per CLI command
CLUSTER=${CLUSTER:-0}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BG=${BLOOMGATE:-$ROOT/target/release/bloomgate}
PACED=${PACED:-$ROOT/target/release/resp_paced}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bloomgate-serve-bench.XXXXXX")
[ -x "$BG" ] || { echo "missing $BG (cargo build --release -p bloomgate-cli)" >&2; exit 2; }
[ -x "$PACED" ] || { echo "missing $PACED (cargo build --release -p bloomgate-bench --bin resp_paced)" >&2; exit 2; }

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
free_port_pair() { # a port whose +10000 (cluster bus) is free too
  while :; do
    p=$(shuf -i 20000-50000 -n 1)
    python3 -c "import socket,sys
for q in ($p, $p+10000):
    s=socket.socket(); s.bind(('127.0.0.1',q)); s.close()" 2>/dev/null && { echo "$p"; return; }
  done
}
start_redis() { # start_redis PORT EXTRA... ; waits for PING
  local port=$1; shift
  mkdir -p "$WORK/redis-$port"
  redis-server --port "$port" --bind 127.0.0.1 --save "" --dir "$WORK/redis-$port" \
    --logfile "$WORK/redis-$port/log" "$@" &
  PIDS+=($!)
  for _ in $(seq 200); do [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && return; sleep 0.05; done
  echo "redis-server on $port did not start" >&2; exit 1
}

PORTS=()
if [ "$CLUSTER" = 1 ]; then
  for i in 0 1 2 3 4 5; do
    p=$(free_port_pair); PORTS+=("$p")
    start_redis "$p" --appendonly yes --appendfsync everysec --cluster-enabled yes \
      --cluster-config-file "$WORK/nodes-$p.conf" --cluster-node-timeout 2000
  done
  redis-cli --cluster create $(for p in "${PORTS[@]}"; do echo "127.0.0.1:$p"; done) \
    --cluster-replicas 1 --cluster-yes > "$WORK/cluster-create.log"
  for _ in $(seq 300); do
    ok=1; for p in "${PORTS[@]}"; do redis-cli -p "$p" CLUSTER INFO | grep -q cluster_state:ok || ok=0; done
    [ $ok = 1 ] && break; sleep 0.1
  done
  STORE="redis+cluster://$(for p in "${PORTS[@]:0:3}"; do printf '127.0.0.1:%s,' "$p"; done | sed 's/,$//')"
  TARGET="Redis Cluster, 3 masters + 3 replicas, appendonly yes, appendfsync everysec"
else
  p=$(free_port); PORTS+=("$p")
  start_redis "$p" --appendonly no
  STORE="redis://127.0.0.1:$p"
  TARGET="one redis-server, no persistence"
fi

# The peer for latency: RedisBloom's BF.EXISTS/BF.ADD in one redis-server (no
# persistence) at the same paced rates, in the same run: what a pipeline's p99 is
# on this machine when Redis alone answers it. Skipped without REDISBLOOM_MODULE.
RB_PORT=
if [ -n "${REDISBLOOM_MODULE:-}" ] && [ -f "$REDISBLOOM_MODULE" ]; then
  RB_PORT=$(free_port)
  start_redis "$RB_PORT" --appendonly no --loadmodule "$(realpath "$REDISBLOOM_MODULE")"
  redis-cli -p "$RB_PORT" BF.RESERVE f 0.0001 10000000 NONSCALING > /dev/null
fi

RESP_PORT=$(free_port)
"$BG" serve --store "$STORE" --http off --resp "127.0.0.1:$RESP_PORT" > "$WORK/serve.log" 2>&1 &
SERVE_PID=$!
PIDS+=($SERVE_PID)
for _ in $(seq 200); do [ "$(redis-cli -p "$RESP_PORT" PING 2>/dev/null)" = PONG ] && break; sleep 0.05; done
redis-cli -p "$RESP_PORT" BF.RESERVE f 0.0001 10000000 NONSCALING > /dev/null

# Keys as redis-benchmark writes __rand_int__ (12 digits, uniform in 0..10^8), fresh
# ones for each run: a BITFIELD that changes no bit is not replicated nor written to
# the AOF, so re-adding known keys would cost Redis less than adding new ones.
gen_keys() { # gen_keys SEED
python3 - "$WORK" "$CLI_N" "$1" <<'EOF'
import random, sys
work, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(seed)
with open(f"{work}/keys.txt", "w") as f:
    f.writelines(f"{r.randrange(100_000_000):012d}\n" for _ in range(n))
EOF
}

now() { date +%s.%N; }
# Redis CPU seconds (user + sys) over all nodes.
redis_cpu() { for p in "${PORTS[@]}"; do redis-cli -p "$p" INFO cpu; done | tr -d '\r' |
  awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {print s}'; }
node_cpu() { for p in "${PORTS[@]}"; do
  echo "$p $(redis-cli -p "$p" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {print s}') $(redis-cli -p "$p" ROLE | head -1)"; done; }
# The server's CPU seconds (user + sys).
serve_cpu() { awk -v t="$(getconf CLK_TCK)" '{print ($14 + $15) / t}' "/proc/$SERVE_PID/stat"; }
per_op_us() { python3 -c "print(round(($2 - $1) / $3 * 1e6, 2))"; }
rate() { python3 -c "print(round($1 / ($3 - $2)))"; }
# redis-benchmark: "throughput summary: X requests per second" and the p50/p99 of
# its "latency summary" (msec): avg min p50 p95 p99 max.
rb() { # rb CMD... -> "rps p50 p99"
  redis-benchmark -p "$RESP_PORT" -c 50 -P 16 -n "$N" -r 100000000 "$@" 2>/dev/null | tr '\r' '\n' > "$WORK/rb.out"
  local rps lat
  rps=$(awk '/throughput summary/ {print $3}' "$WORK/rb.out")
  lat=$(awk '/latency summary/ {getline; getline; print $3, $5}' "$WORK/rb.out")
  echo "$rps $lat"
}

ADDR="$STORE/f"
echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $TARGET"
echo "# bloomgate $(git -C "$ROOT" rev-parse --short HEAD); redis-benchmark -c 50 -P 16 -n $N -r 100000000; CLI: $CLI_N keys per command"
for run in $(seq "$RUNS"); do
  gen_keys "$run"
  # Adds first (fresh keys), then lookups, each through the server and the CLI.
  redis-cli -p "$RESP_PORT" BF.ADD f warmup > /dev/null
  c0=$(redis_cpu); s0=$(serve_cpu)
  read -r a_rps a_p50 a_p99 < <(rb BF.ADD f __rand_int__)
  c1=$(redis_cpu); s1=$(serve_cpu)
  srv_add=$(per_op_us "$s0" "$s1" "$N")
  node_cpu > "$WORK/nodes-before"
  t0=$(now); "$BG" add "$ADDR" "$WORK/keys.txt" > /dev/null; t1=$(now)
  c2=$(redis_cpu)
  node_cpu > "$WORK/nodes-after"
  cli_add=$(rate "$CLI_N" "$t0" "$t1")
  cpu_server_add=$(per_op_us "$c0" "$c1" "$N"); cpu_cli_add=$(per_op_us "$c1" "$c2" "$CLI_N")
  c3=$(redis_cpu); s3=$(serve_cpu)
  read -r e_rps e_p50 e_p99 < <(rb BF.EXISTS f __rand_int__)
  c4=$(redis_cpu); s4=$(serve_cpu)
  srv_exists=$(per_op_us "$s3" "$s4" "$N"); redis_exists=$(per_op_us "$c3" "$c4" "$N")
  t0=$(now); "$BG" check --count "$ADDR" "$WORK/keys.txt" > "$WORK/check.out"; t1=$(now)
  cli_check=$(rate "$CLI_N" "$t0" "$t1")
  [ "$(cat "$WORK/check.out")" = "$CLI_N" ] || { echo "the CLI found $(cat "$WORK/check.out") of $CLI_N added keys" >&2; exit 1; }
  # Latency at half the pipelined rate just measured.
  half_e=$(python3 -c "print(int(float('$e_rps') / 2))")
  half_a=$(python3 -c "print(int(float('$a_rps') / 2))")
  read -r pe_rps pe_p50 pe_p99 < <("$PACED" --port "$RESP_PORT" --command BF.EXISTS --rate "$half_e" --seconds 10 --connections 50)
  read -r pa_rps pa_p50 pa_p99 < <("$PACED" --port "$RESP_PORT" --command BF.ADD --rate "$half_a" --seconds 10 --connections 50)
  rb_lat="RedisBloom paced: skipped (no REDISBLOOM_MODULE)"; rbe_p99=nan; rba_p99=nan
  if [ -n "$RB_PORT" ]; then
    read -r _ rbe_p50 rbe_p99 < <("$PACED" --port "$RB_PORT" --command BF.EXISTS --rate "$half_e" --seconds 10 --connections 50)
    read -r _ rba_p50 rba_p99 < <("$PACED" --port "$RB_PORT" --command BF.ADD --rate "$half_a" --seconds 10 --connections 50)
    rb_lat="RedisBloom paced at the same rates: BF.EXISTS p50 $rbe_p50 p99 $rbe_p99 ms, BF.ADD p50 $rba_p50 p99 $rba_p99 ms"
  fi
  # BF.ADD paced at fixed rates, the server and RedisBloom one after the other.
  for r in ${ADD_RATES:-}; do
    read -r fa_rps fa_p50 fa_p99 < <("$PACED" --port "$RESP_PORT" --command BF.ADD --rate "$r" --seconds 10 --connections 50)
    line="run $run: BF.ADD paced at $r/s: server $fa_rps/s p50 $fa_p50 p99 $fa_p99 ms"
    if [ -n "$RB_PORT" ]; then
      read -r _ fb_p50 fb_p99 < <("$PACED" --port "$RB_PORT" --command BF.ADD --rate "$r" --seconds 10 --connections 50)
      line="$line; RedisBloom p50 $fb_p50 p99 $fb_p99 ms"
    fi
    echo "$line" | tee -a "$WORK/fixed.txt"
  done
  echo "run $run: server BF.EXISTS $e_rps/s (p50 $e_p50 p99 $e_p99 ms), CLI check $cli_check/s;" \
    "server BF.ADD $a_rps/s (p50 $a_p50 p99 $a_p99 ms), CLI add $cli_add/s;" \
    "paced BF.EXISTS $pe_rps/s p50 $pe_p50 p99 $pe_p99 ms; paced BF.ADD $pa_rps/s p50 $pa_p50 p99 $pa_p99 ms;" \
    "Redis CPU per add: server $cpu_server_add us, CLI $cpu_cli_add us;" \
    "through the server, CPU per request: server $srv_exists us + Redis $redis_exists us per BF.EXISTS, server $srv_add us per BF.ADD;" \
    "$rb_lat" \
    | tee -a "$WORK/runs.txt"
  echo "$e_rps $cli_check $a_rps $cli_add $e_p99 $a_p99 $pe_rps $pe_p99 $pa_rps $pa_p99 $cpu_server_add $cpu_cli_add $rbe_p99 $rba_p99" >> "$WORK/nums.txt"
done
python3 - "$WORK/nums.txt" <<'EOF'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
m = [statistics.median(c) for c in zip(*rows)]
# The ratios are paired: server / CLI within each round (both measured
# minutes apart on the same machine state), then the median of those. The
# machine's speed drifts between rounds, so the ratio of the medians of
# two columns would pair one round's server with another round's CLI.
e_ratios = [r[0] / r[1] for r in rows]
a_ratios = [r[2] / r[3] for r in rows]
fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
print(f"medians of {len(rows)}: server BF.EXISTS {m[0]:,.0f}/s, CLI check {m[1]:,.0f}/s, "
      f"ratio per round {fmt(e_ratios)}: median {statistics.median(e_ratios):.2f}; "
      f"server BF.ADD {m[2]:,.0f}/s, CLI add {m[3]:,.0f}/s, "
      f"ratio per round {fmt(a_ratios)}: median {statistics.median(a_ratios):.2f}; "
      f"p99 -P 16: EXISTS {m[4]} ms, ADD {m[5]} ms; at half load: EXISTS {m[6]:,.0f}/s p99 {m[7]} ms, ADD {m[8]:,.0f}/s p99 {m[9]} ms; "
      f"Redis CPU per add (all nodes): server {m[10]} us, CLI {m[11]} us; "
      f"RedisBloom at the same half loads: EXISTS p99 {m[12]} ms, ADD p99 {m[13]} ms")
EOF
echo "# Redis CPU per add of the last run's CLI add, per node (us):"
paste "$WORK/nodes-before" "$WORK/nodes-after" |
  awk -v n="$CLI_N" '{printf "%s %s %.2f\n", $1, $3, ($5 - $2) / n * 1e6}' 
