#!/usr/bin/env python3
"""redis-py 8.x (RESP3 by default: every connection opens with HELLO 3) against
bloomgate's Redis protocol, through redis-py's own RedisBloom API `r.bf()`.

Usage: test_redis_py.py --port PORT [--port2 PORT2] [--password TOKEN]

--port2 names a second, empty server: the filter is copied to it with
BF.SCANDUMP / BF.LOADCHUNK exactly as the RedisBloom docs show.
Exit status 0 on success; assertion errors otherwise.
"""
import argparse
import sys

import redis


def client(port, password, protocol):
    return redis.Redis(host="127.0.0.1", port=port, password=password, protocol=protocol)


def field(info, attr, name):
    """redis-py returns a BFInfo object (RESP2) or a dict (RESP3)."""
    if isinstance(info, dict):
        for k, v in info.items():
            if (k.decode() if isinstance(k, bytes) else k) == name:
                return v
        raise AssertionError(f"{name} missing from {info}")
    return getattr(info, attr)


def check(r, name):
    bf = r.bf()
    assert r.ping()
    assert bf.create(name, 0.001, 1000)
    try:
        bf.create(name, 0.001, 1000)
        raise AssertionError("second create should fail")
    except redis.ResponseError as e:
        assert "item exists" in str(e), e
    assert bf.add(name, "alpha") == 1
    assert bf.add(name, "alpha") == 0
    assert list(map(int, bf.madd(name, "alpha", "beta", "gamma"))) == [0, 1, 1]
    assert bf.exists(name, "beta") == 1
    assert bf.exists(name, "nope") == 0
    assert list(map(int, bf.mexists(name, "alpha", "nope", "gamma"))) == [1, 0, 1]
    assert bf.card(name) == 3
    info = bf.info(name)
    assert field(info, "capacity", "Capacity") == 1000, info
    assert field(info, "insertedNum", "Number of items inserted") == 3
    assert field(info, "filterNum", "Number of filters") == 1
    assert field(info, "expansionRate", "Expansion rate") == 2
    # BF.INSERT with options, NONSCALING refusal.
    res = bf.insert(name + ":ns", ["a", "b", "c"], capacity=2, noScale=True)
    assert len(res) == 3 and isinstance(res[-1], redis.ResponseError), res
    try:
        bf.insert(name + ":nc", ["a"], noCreate=True)
        raise AssertionError("NOCREATE should fail")
    except redis.ResponseError as e:
        assert "not found" in str(e)
    # Growth: expansion keeps everything findable.
    bf.create(name + ":grow", 0.01, 10, expansion=2)
    items = [f"item-{i}" for i in range(200)]
    bf.madd(name + ":grow", *items)
    assert all(int(x) == 1 for x in bf.mexists(name + ":grow", *items))
    assert field(bf.info(name + ":grow"), "filterNum", "Number of filters") >= 4
    # Keys.
    assert r.exists(name) == 1
    assert r.type(name) in (b"MBbloom--", "MBbloom--")
    assert name.encode() in r.keys("*")
    assert set(r.scan_iter(match=name + "*")) >= {name.encode(), (name + ":grow").encode()}
    assert r.delete(name + ":ns") == 1
    assert r.exists(name + ":ns") == 0
    # Pipelining.
    p = r.pipeline(transaction=False)
    for i in range(100):
        p.execute_command("BF.ADD", name + ":pipe", f"p{i}")
    added = sum(int(x) for x in p.execute())
    # 1 % false positives (RedisBloom defaults) may report a new item as present.
    assert added >= 90, added
    assert bf.card(name + ":pipe") == added
    assert all(int(x) == 1 for x in bf.mexists(name + ":pipe", *[f"p{i}" for i in range(100)]))
    return items


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--port2", type=int)
    ap.add_argument("--password")
    a = ap.parse_args()

    r3 = client(a.port, a.password, 3)
    hello = r3.execute_command("HELLO", "3")
    proto = hello.get(b"proto", hello.get("proto"))
    assert proto == 3, hello
    items = check(r3, "py3")
    check(client(a.port, a.password, 2), "py2")

    if a.port2:
        src = r3.bf()
        dst = client(a.port2, a.password, 3).bf()
        chunks = []
        it = 0
        while True:
            it, data = src.scandump("py3:grow", it)
            if it == 0:
                break
            chunks.append((it, data))
        for it, data in chunks:
            dst.loadchunk("py3:grow", it, data)
        assert all(int(x) == 1 for x in dst.mexists("py3:grow", *items))
        assert dst.card("py3:grow") == src.card("py3:grow")
        nf = lambda c: field(c.info("py3:grow"), "filterNum", "Number of filters")
        assert nf(dst) == nf(src)
    print("redis-py: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
