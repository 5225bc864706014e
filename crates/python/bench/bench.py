"""bloomgate from Python against the Python Bloom filters crawlers and caches
use, and (fleet) against Redis-backed dedup. Run by hand, not in CI:

    target/pyenv/bin/pip install rbloom pybloomfiltermmap3 pybloom-live
    /work/p99/quiet.sh target/pyenv/bin/python crates/python/bench/bench.py local --items 10000000
    /work/p99/quiet.sh target/pyenv/bin/python crates/python/bench/bench.py fleet --items 1000000

`local`: lookups/s and adds/s, single (one call per item) and batched (one
call per 100,000 items where the library has such a call; a list
comprehension of single calls where it has none), memory per item and the
false-positive rate measured on absent keys, at `--items` and 1e-4. Lookups
are measured `--reps` times per library (the median is reported). The
ribbon list takes no adds: its batched "adds" are its build from the keys.
`fleet`: a filter shared through one redis-server started here: bloomgate's
filter in Redis (claim_many / check_many: one pipeline per node), a
scrapy-redis-style Redis set (SADD/SISMEMBER) and a per-bit Redis Bloom filter
(SETBIT/GETBIT, k commands per item in one pipeline, as
scrapy-redis-bloomfilter does). Every result is checked: a library that
misses a present key fails the run."""

import argparse
import hashlib
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import bloomgate

FP = 1e-4
BATCH = 100_000


def keys(prefix, start, n):
    return [f"https://{prefix}{i % 1000}.example/page/{i}?q={i * 7}" for i in range(start, start + n)]


def timed(fn):
    t = time.perf_counter()
    r = fn()
    return time.perf_counter() - t, r


class Peer:
    """One library: add(list), add1(key), has(key), has_many(list), bytes."""


def bloomgate_peer(dirpath, n, layout):
    path = os.path.join(dirpath, f"bg-{layout}.bgf")
    bloomgate.create(path, n, FP, keys="raw", layout=layout)
    lst = bloomgate.open(path, update=True)
    p = Peer()
    p.name = f"bloomgate ({layout})"
    p.add1 = lst.add
    p.add = lst.add_many
    p.has = lst.__contains__
    p.has_many = lst.check_many
    p.bytes = lambda: sum(os.path.getsize(os.path.join(dirpath, f)) for f in os.listdir(dirpath)
                          if f.startswith(f"bg-{layout}"))
    return p


def rbloom_peer(dirpath, n):
    import rbloom
    f = rbloom.Bloom(n, FP)
    p = Peer()
    p.name = "rbloom"
    p.add1 = f.add
    p.add = f.update
    p.has = f.__contains__
    p.has_many = lambda ks: [k in f for k in ks]
    p.bytes = lambda: f.size_in_bits / 8
    return p


def pbfm_peer(dirpath, n):
    import pybloomfilter
    f = pybloomfilter.BloomFilter(n, FP, os.path.join(dirpath, "pbfm.bloom"))
    p = Peer()
    p.name = "pybloomfiltermmap3"
    p.add1 = f.add
    p.add = f.update
    p.has = f.__contains__
    p.has_many = lambda ks: [k in f for k in ks]
    p.bytes = lambda: f.num_bits / 8
    return p


def pybloom_live_peer(dirpath, n):
    import pybloom_live
    f = pybloom_live.BloomFilter(capacity=n, error_rate=FP)
    p = Peer()
    p.name = "pybloom-live"
    p.add1 = f.add
    p.add = lambda ks: [f.add(k) for k in ks]
    p.has = f.__contains__
    p.has_many = lambda ks: [k in f for k in ks]
    p.bytes = lambda: f.num_bits / 8
    return p


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def build_ribbon(dirpath, n):
    """bloomgate's static ribbon list, built whole from the keys (it takes
    no adds): the build's rate stands in for batched adds."""
    path = os.path.join(dirpath, "bg-ribbon.bgf")

    def gen():
        for s in range(0, n, BATCH):
            yield from keys("a", s, min(BATCH, n - s))

    t, _ = timed(lambda: bloomgate.build(path, gen(), items=n, fp=FP, keys="raw",
                                         layout="ribbon"))
    lst = bloomgate.open(path)
    p = Peer()
    p.name = "bloomgate (ribbon)"
    p.add1 = None
    p.has = lst.__contains__
    p.has_many = lst.check_many
    p.bytes = lambda: os.path.getsize(path)
    return p, t


def run_local(args):
    n = args.items
    out = []
    single = min(n, 200_000)
    for make in args.peers.split(","):
        d = tempfile.mkdtemp(prefix="bgbench-")
        try:
            t_build = None
            if make == "ribbon":
                peer, t_build = build_ribbon(d, n)
            else:
                peer = {
                    "blocked": lambda: bloomgate_peer(d, n, "blocked"),
                    "classic": lambda: bloomgate_peer(d, n, "classic"),
                    "rbloom": lambda: rbloom_peer(d, n),
                    "pybloomfiltermmap3": lambda: pbfm_peer(d, n),
                    "pybloom-live": lambda: pybloom_live_peer(d, n),
                }[make]()
            # pure Python: its build of every item would take minutes; it
            # is filled with `--slow-items` and measured on those.
            fill = n if make != "pybloom-live" else min(n, args.slow_items)
            t_add1 = t_add = None
            if peer.add1 is not None:
                ks = keys("a", 0, single)
                t_add1, _ = timed(lambda: [peer.add1(k) for k in ks])
                t_add = 0.0
                for s in range(single, fill, BATCH):
                    ks = keys("a", s, min(BATCH, fill - s))
                    dt, _ = timed(lambda: peer.add(ks))
                    t_add += dt
            batched_adds = fill - single
            present = keys("a", 0, single)
            looked_keys = [keys("a", s, min(BATCH, fill - s))
                           for s in range(0, min(fill, 1_000_000), BATCH)]
            looked = sum(len(ks) for ks in looked_keys)
            singles, manys = [], []
            for _ in range(args.reps):
                t_has1, r = timed(lambda: [peer.has(k) for k in present])
                assert all(r), f"{peer.name}: a false negative"
                singles.append(single / t_has1)
                t_many = 0.0
                for ks in looked_keys:
                    dt, r = timed(lambda: peer.has_many(ks))
                    assert all(r), f"{peer.name}: a false negative"
                    t_many += dt
                manys.append(looked / t_many)
            absent_n = args.absent if make != "pybloom-live" else 200_000
            fps = 0
            for s in range(0, absent_n, BATCH):
                fps += sum(1 for x in peer.has_many(keys("b", s, min(BATCH, absent_n - s))) if x)
            row = {
                "peer": peer.name,
                "items": fill,
                "capacity": n,
                "adds_per_s_single": single / t_add1 if t_add1 else None,
                "adds_per_s_batched": (batched_adds / t_add if t_add else
                                       (n / t_build if t_build else None)),
                "lookups_per_s_single": median(singles),
                "lookups_per_s_batched": median(manys),
                "lookups_single_runs": [round(x) for x in singles],
                "lookups_batched_runs": [round(x) for x in manys],
                "bytes": peer.bytes(),
                "bytes_per_item": peer.bytes() / n,
                "fp_measured": fps / absent_n,
            }
            out.append(row)
            print(json.dumps(row), flush=True)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_fleet(args):
    import redis
    n = args.items
    port = free_port()
    d = tempfile.mkdtemp(prefix="bgbench-redis-")
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly",
                             "no", "--dir", d], stdout=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port)
        for _ in range(200):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        base = r.info("memory")["used_memory"]
        single = min(n, 20_000)
        rows = []

        def measure(name, add1, add_many, has_many, mem):
            ks = keys("a", 0, single)
            t1, claims = timed(lambda: [add1(k) for k in ks])
            # A new key taken for a present one (a false positive of the
            # filter so far) is not claimed: counted, bounded.
            unclaimed = claims.count(False)
            ta = 0.0
            for s in range(single, n, 10_000):
                ks = keys("a", s, min(10_000, n - s))
                dt, c = timed(lambda: add_many(ks))
                unclaimed += list(c).count(False)
                ta += dt
            assert unclaimed <= 10 * FP * n, f"{name}: {unclaimed} new keys not claimed"
            tl = 0.0
            looked = 0
            for s in range(0, min(n, 200_000), 10_000):
                ks = keys("a", s, 10_000)
                dt, c = timed(lambda: has_many(ks))
                assert all(c), f"{name}: a false negative"
                tl += dt
                looked += len(ks)
            fps = sum(sum(has_many(keys("b", s, 10_000))) for s in range(0, 200_000, 10_000))
            row = {"peer": name, "items": n,
                   "claims_per_s_single": single / t1,
                   "claims_per_s_batched": (n - single) / ta,
                   "lookups_per_s_batched": looked / tl,
                   "bytes_per_item": mem() / n,
                   "unclaimed_new_keys": unclaimed,
                   "fp_measured": fps / 200_000}
            rows.append(row)
            print(json.dumps(row), flush=True)

        want = args.fleet_peers.split(",")
        # bloomgate's filter in Redis.
        addr = f"redis://127.0.0.1:{port}/bench"
        bloomgate.create(addr, n, FP, keys="raw")
        lst = bloomgate.open(addr)
        if "bloomgate" in want:
            measure("bloomgate (Redis)", lst.add, lst.add_many, lst.check_many,
                lambda: r.info("memory")["used_memory"] - base)
        r.flushall()
        base = r.info("memory")["used_memory"]

        # scrapy-redis: SADD of the request's fingerprint (a sha1 hex).
        def fp(k):
            return hashlib.sha1(k.encode()).hexdigest()

        def sadd_many(ks):
            p = r.pipeline(transaction=False)
            for k in ks:
                p.sadd("dupefilter", fp(k))
            return [x == 1 for x in p.execute()]

        def sis_many(ks):
            p = r.pipeline(transaction=False)
            for k in ks:
                p.sismember("dupefilter", fp(k))
            return [bool(x) for x in p.execute()]

        if "set" in want:
            measure("Redis set (scrapy-redis SADD)", lambda k: r.sadd("dupefilter", fp(k)) == 1,
                sadd_many, sis_many, lambda: r.info("memory")["used_memory"] - base)
        r.flushall()
        base = r.info("memory")["used_memory"]

        # A per-bit Bloom filter (scrapy-redis-bloomfilter): k SETBITs in one
        # pipeline per item, keys split over 256 MiB strings.
        m = math.ceil(-n * math.log(FP) / math.log(2) ** 2)
        k = round(m / n * math.log(2))

        def positions(key):
            h = hashlib.md5(key.encode()).digest()
            a = int.from_bytes(h[:8], "little")
            b = int.from_bytes(h[8:], "little") | 1
            return [(a + i * b) % m for i in range(k)]

        def setbit_many(ks):
            p = r.pipeline(transaction=False)
            for key in ks:
                for pos in positions(key):
                    p.setbit(f"bloom:{pos >> 31}", pos & (2**31 - 1), 1)
            res = p.execute()
            return [not all(res[i * k:(i + 1) * k]) for i in range(len(ks))]

        def getbit_many(ks):
            p = r.pipeline(transaction=False)
            for key in ks:
                for pos in positions(key):
                    p.getbit(f"bloom:{pos >> 31}", pos & (2**31 - 1))
            res = p.execute()
            return [all(res[i * k:(i + 1) * k]) for i in range(len(ks))]

        if "perbit" in want:
            measure("Redis per-bit Bloom (SETBIT/GETBIT)", lambda key: setbit_many([key])[0],
                setbit_many, getbit_many, lambda: r.info("memory")["used_memory"] - base)
        return rows
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["local", "fleet"])
    ap.add_argument("--items", type=int, default=10_000_000)
    ap.add_argument("--slow-items", type=int, default=1_000_000)
    ap.add_argument("--fleet-peers", default="bloomgate,set,perbit")
    ap.add_argument("--peers",
                    default="blocked,classic,ribbon,rbloom,pybloomfiltermmap3,pybloom-live")
    ap.add_argument("--reps", type=int, default=3, help="lookup measurements per peer (median)")
    ap.add_argument("--absent", type=int, default=1_000_000, help="absent keys for the FP rate")
    args = ap.parse_args()
    print(f"# {args.what}: {args.items:,} items at {FP}, python {sys.version.split()[0]}",
          flush=True)
    (run_local if args.what == "local" else run_fleet)(args)


if __name__ == "__main__":
    main()
