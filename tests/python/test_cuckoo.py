#!/usr/bin/env python3
"""redis-py's cuckoo filter client (`r.cf()`) against bloomgate's `CF.*`
commands, over RESP2 and RESP3: reserve, add, addnx, insert, insertnx,
exists, mexists, count, delete, info, and a scandump/loadchunk round trip
(the copy's dump is the same bytes, and it answers the same).

Usage: test_cuckoo.py --port PORT [--password TOKEN]

The server must not hold filters named `cf-*` or `py3-cf-*`. Exit status 0
on success; assertion errors otherwise.
"""
import argparse

import redis


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def check(r, proto, p):
    cf = r.cf()
    resp3 = proto == 3
    yes, no = (True, False) if resp3 else (1, 0)

    assert cf.reserve(p + "f", 1000, bucket_size=4, max_iterations=50, expansion=2)
    try:
        cf.reserve(p + "f", 1000)
        raise AssertionError("a second reserve must fail")
    except redis.ResponseError as e:
        assert str(e) == "item exists", str(e)

    assert cf.add(p + "f", "apple") == yes
    assert cf.add(p + "f", "apple") == yes  # a second copy
    assert cf.addnx(p + "f", "apple") == no
    assert cf.addnx(p + "f", "pear") == yes
    assert cf.insert(p + "f", ["plum", "fig"]) == [yes, yes]
    # CF.INSERTNX answers integers in RESP3 too (as RedisBloom).
    assert cf.insertnx(p + "f", ["fig", "kiwi"]) == [0, 1]
    try:
        cf.insert(p + "nope", ["x"], nocreate=True)
        raise AssertionError("NOCREATE must fail on a missing filter")
    except redis.ResponseError as e:
        assert str(e) == "not found", str(e)
    assert cf.insert(p + "auto", ["x", "y"], capacity=100) == [yes, yes]

    assert cf.exists(p + "f", "apple") == yes
    assert cf.exists(p + "f", "nothing") == no
    assert cf.mexists(p + "f", "apple", "kiwi", "nothing") == [yes, yes, no]
    assert cf.exists(p + "missing", "apple") == no
    assert cf.count(p + "f", "apple") == 2
    assert cf.delete(p + "f", "apple") == yes
    assert cf.count(p + "f", "apple") == 1
    assert cf.exists(p + "f", "apple") == yes, "added twice, deleted once"
    assert cf.delete(p + "f", "apple") == yes
    assert cf.exists(p + "f", "apple") == no
    assert cf.delete(p + "f", "nothing") == no

    # redis-py parses CF.INFO into an object in RESP2, a dict in RESP3.
    info = cf.info(p + "f")
    info = info if isinstance(info, dict) else vars(info)
    want = {
        "Number of items inserted": 4, "insertedNum": 4,
        "Number of items deleted": 2, "deletedNum": 2,
        "Number of filters": 1, "filterNum": 1,
        "Bucket size": 4, "bucketSize": 4,
        "Expansion rate": 2, "expansionRate": 2,
        "Max iterations": 50, "maxIteration": 50,
    }
    got = {text(k): v for k, v in info.items()}
    for k, v in want.items():
        if k in got:
            assert got[k] == v, (k, got)
    assert sum(k in got for k in want) == 6, got

    # SCANDUMP / LOADCHUNK round trip, as redis-py's docs show it.
    chunks = []
    it = 0
    while True:
        it, data = cf.scandump(p + "f", it)
        if it == 0:
            break
        chunks.append((it, data))
    assert len(chunks) >= 2
    for it, data in chunks:
        assert cf.loadchunk(p + "copy", it, data) in (True, b"OK", "OK")
    again = []
    it = 0
    while True:
        it, data = cf.scandump(p + "copy", it)
        if it == 0:
            break
        again.append((it, data))
    assert again == chunks, "the copy dumps the same bytes"
    for item in ("pear", "plum", "fig", "kiwi"):
        assert cf.exists(p + "copy", item) == yes, item
    assert cf.count(p + "copy", "fig") == 1
    assert cf.exists(p + "copy", "apple") == no


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--password")
    a = ap.parse_args()
    for proto, p in ((2, "cf-"), (3, "py3-cf-")):
        r = redis.Redis(port=a.port, password=a.password, protocol=proto)
        check(r, proto, p)
    print("ok")


if __name__ == "__main__":
    main()
