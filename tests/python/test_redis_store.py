#!/usr/bin/env python3
"""redis-py's RedisBloom API `r.bf()` against two `bloomgate serve --store
redis://…` servers sharing one filter stored in Redis.

Usage:
  test_redis_store.py shared --a PORT --b PORT --name NAME --queries FILE --hits FILE [--invalid LINE…]
      BF.EXISTS / BF.MEXISTS of every query on both servers answer 1 exactly
      for the lines of HITS (`bloomgate check` on the filter's file), an
      error for each INVALID line (in BF.MEXISTS's array); an
      item added with BF.MADD through A is found through B, and only the
      first of two adds of one new item is told it is new.
  down --a PORT --name NAME
      the Redis behind the server is down: BF.EXISTS and BF.MEXISTS raise
      (a TRYAGAIN error), never answer 0.
Exit status 0 on success; assertion errors otherwise.
"""
import argparse

import redis


def lines(path):
    with open(path, encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f if l.rstrip("\n")]


def shared(args):
    a = redis.Redis(host="127.0.0.1", port=args.a)
    b = redis.Redis(host="127.0.0.1", port=args.b, protocol=2)
    queries = lines(args.queries)
    hits = set(lines(args.hits))
    assert hits, "some queries must be hits"
    invalid = set(args.invalid or [])
    expected = ["error" if q in invalid else 1 if q in hits else 0 for q in queries]
    for r in (a, b):
        got = [
            "error" if isinstance(x, redis.ResponseError) else int(x)
            for x in r.bf().mexists(args.name, *queries)
        ]
        assert got == expected, (got, expected)
        for q, e in list(zip(queries, expected))[:50]:
            assert int(r.bf().exists(args.name, q)) == e, q
    new = [f"http://py-added{i}.example/x" for i in range(20)]
    assert [int(x) for x in b.bf().mexists(args.name, *new)] == [0] * 20
    assert [int(x) for x in a.bf().madd(args.name, *new)] == [1] * 20
    assert [int(x) for x in b.bf().mexists(args.name, *new)] == [1] * 20
    assert [int(x) for x in b.bf().madd(args.name, *new)] == [0] * 20
    assert int(a.bf().add(args.name, "http://py-once.example/")) == 1
    assert int(b.bf().add(args.name, "http://py-once.example/")) == 0


def down(args):
    r = redis.Redis(host="127.0.0.1", port=args.a)
    for call in (
        lambda: r.bf().exists(args.name, "http://evil1.example/phish/"),
        lambda: r.bf().mexists(args.name, "http://evil1.example/phish/", "http://x.example/"),
    ):
        try:
            v = call()
        except redis.exceptions.TryAgainError:
            pass  # redis-py's class for a `-TRYAGAIN …` reply
        else:
            raise AssertionError(f"answered {v!r} with Redis down")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["shared", "down"])
    p.add_argument("--a", type=int, required=True)
    p.add_argument("--b", type=int)
    p.add_argument("--name", required=True)
    p.add_argument("--queries")
    p.add_argument("--hits")
    p.add_argument("--invalid", action="append")
    args = p.parse_args()
    {"shared": shared, "down": down}[args.mode](args)


if __name__ == "__main__":
    main()
