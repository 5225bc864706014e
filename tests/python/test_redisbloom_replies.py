#!/usr/bin/env python3
"""redis-py against bloomgate's Redis protocol: the replies in which bloomgate
must answer exactly as the RedisBloom module does (its reply shapes and error
texts, pinned here as literals), over RESP2 and RESP3.

Usage: test_redisbloom_replies.py --port PORT [--password TOKEN]

The server must be empty. Everything checked here is also what RedisBloom
itself answers, so the script passes against a redis-server with the
RedisBloom module loaded too. Exit status 0 on success; assertion errors
otherwise.
"""
import argparse
import re
import sys

import redis

DEBUG_LINE = re.compile(
    r"bytes:(\d+) bits:(\d+) hashes:(\d+) hashwidth:(\d+) capacity:(\d+) size:(\d+) ratio:(\S+)"
)


def error_of(r, *args):
    """The error text of a command that must fail, as redis-py reports it
    (redis-py drops a leading `ERR `)."""
    try:
        reply = r.execute_command(*args)
    except redis.ResponseError as e:
        return str(e)
    raise AssertionError(f"{args} should fail, got {reply!r}")


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def check(r, proto, p):
    """`r` is a plain client (no `r.bf()`, whose callbacks would reshape
    BF.INFO); `p` prefixes the keys."""
    resp3 = proto == 3

    # 1. EXPANSION 0 makes a non-scaling filter; the range is [0, 32768].
    assert r.execute_command("BF.RESERVE", p + "e0", "0.01", "2", "EXPANSION", "0")
    assert r.execute_command("BF.RESERVE", p + "e0n", "0.01", "2", "NONSCALING", "EXPANSION", "0")
    assert r.execute_command("BF.RESERVE", p + "emax", "0.01", "2", "EXPANSION", "32768")
    for bad in ("-1", "32769"):
        assert error_of(r, "BF.RESERVE", p + "x", "0.01", "2", "EXPANSION", bad) == (
            "expansion must be in the range [0, 32768]"
        )
    assert error_of(r, "BF.RESERVE", p + "x", "0.01", "2", "EXPANSION", "x") == "bad expansion"
    assert error_of(r, "BF.RESERVE", p + "x", "0.01", "2", "EXPANSION") == "no expansion"
    assert error_of(r, "BF.RESERVE", p + "x", "0.01", "2", "NONSCALING", "EXPANSION", "2") == (
        "Nonscaling filters cannot expand"
    )
    assert r.execute_command("BF.INSERT", p + "i0", "EXPANSION", "0", "ITEMS", "a") == [1]
    for bad in ("-1", "32769", "x"):
        assert error_of(r, "BF.INSERT", p + "x", "EXPANSION", bad, "ITEMS", "a") == "Bad expansion"
    assert r.execute_command("BF.EXISTS", p + "x", "a") == 0, "no filter may be left behind"

    # 2. BF.INFO with one field: a one-entry map in RESP3, a one-element array in RESP2.
    assert r.execute_command("BF.RESERVE", p + "bf", "0.001", "100")
    fields = [
        ("CAPACITY", "Capacity", 100),
        ("FILTERS", "Number of filters", 1),
        ("ITEMS", "Number of items inserted", 0),
        ("EXPANSION", "Expansion rate", 2),
    ]
    for arg, name, value in fields:
        got = r.execute_command("BF.INFO", p + "bf", arg)
        want = {name.encode(): value} if resp3 else [value]
        assert got == want, (arg, got, want)
    size = r.execute_command("BF.INFO", p + "bf", "size")
    if resp3:
        assert list(size) == [b"Size"] and size[b"Size"] > 0, size
    else:
        assert isinstance(size, list) and len(size) == 1 and size[0] > 0, size
    for key in ("e0", "i0"):
        got = r.execute_command("BF.INFO", p + key, "EXPANSION")
        assert got == ({b"Expansion rate": None} if resp3 else [None]), got
    whole = r.execute_command("BF.INFO", p + "e0")
    if resp3:
        assert list(whole) == [
            b"Capacity",
            b"Size",
            b"Number of filters",
            b"Number of items inserted",
            b"Expansion rate",
        ], whole
        assert whole[b"Expansion rate"] is None
    else:
        assert whole[0::2] == [
            b"Capacity",
            b"Size",
            b"Number of filters",
            b"Number of items inserted",
            b"Expansion rate",
        ], whole
        assert whole[9] is None

    # Nearby: unknown field, missing key, existing key, a full non-scaling filter, arity.
    assert error_of(r, "BF.INFO", p + "bf", "bogus") == "Invalid information value"
    assert error_of(r, "BF.INFO", p + "missing") == "not found"
    assert error_of(r, "BF.INFO", p + "missing", "CAPACITY") == "not found"
    assert error_of(r, "BF.RESERVE", p + "bf", "0.01", "10") == "item exists"
    assert error_of(r, "BF.RESERVE", p + "x", "0", "10") == (
        "error rate must be in the range (0.000000, 1.000000)"
    )
    assert error_of(r, "BF.RESERVE", p + "x", "0.01", "0") == (
        "capacity must be in the range [1, 1073741824]"
    )
    assert error_of(r, "BF.INSERT", p + "x", "ERROR", "1", "ITEMS", "a") == "Bad error rate"
    assert error_of(r, "BF.INSERT", p + "x", "CAPACITY", "0", "ITEMS", "a") == "Bad capacity"
    assert error_of(r, "BF.INSERT", p + "x", "BOGUS", "ITEMS", "a") == "Unknown argument received"
    assert r.execute_command("BF.MADD", p + "e0", "a", "b") == [1, 1]
    assert error_of(r, "BF.ADD", p + "e0", "c") == "non scaling filter is full"
    # The reply ends at the first refusal.
    madd = r.execute_command("BF.MADD", p + "e0", "c", "d")
    assert len(madd) == 1 and isinstance(madd[0], redis.ResponseError), madd
    assert str(madd[0]) == "non scaling filter is full", madd
    for args in (
        ("BF.INFO",),
        ("BF.INFO", p + "bf", "CAPACITY", "x"),
        ("BF.DEBUG",),
        ("BF.DEBUG", p + "bf", "x"),
        ("BF.RESERVE", p + "x", "0.01"),
        ("BF.ADD", p + "bf"),
        ("BF.LOADCHUNK", p + "bf", "1"),
    ):
        assert error_of(r, *args) == (
            f"wrong number of arguments for '{args[0].lower()}' command"
        ), args

    # 3. BF.DEBUG: the item count, then one line per layer.
    debug = [text(x) for x in r.execute_command("BF.DEBUG", p + "e0")]
    assert len(debug) == 2 and debug[0] == "size:2", debug
    m = DEBUG_LINE.fullmatch(debug[1])
    assert m, debug
    nbytes, bits, hashes, _width, capacity, items, ratio = m.groups()
    assert int(bits) == 8 * int(nbytes) and int(hashes) > 0, debug
    assert (capacity, items, ratio) == ("2", "2", "0.01"), debug
    assert error_of(r, "BF.DEBUG", p + "missing") == "not found"

    # 4. BF.LOADCHUNK's error texts (a chunk of n bytes ending before byte iter - 1).
    assert r.execute_command("BF.RESERVE", p + "lc", "0.01", "100")
    layer = int(DEBUG_LINE.fullmatch(text(r.execute_command("BF.DEBUG", p + "lc")[1])).group(1))
    assert error_of(r, "BF.LOADCHUNK", p + "new", "1", "junk") == "received bad data"
    assert error_of(r, "BF.LOADCHUNK", p + "new", "0", "junk") == "not found"
    assert error_of(r, "BF.LOADCHUNK", p + "new", "2", "junk") == "not found"
    assert error_of(r, "BF.LOADCHUNK", p + "new", "x", "junk") == "Second argument must be numeric"
    assert r.execute_command("EXISTS", p + "new") == 0
    assert error_of(r, "BF.LOADCHUNK", p + "lc", "1", "junk") == "received bad data"
    assert error_of(r, "BF.LOADCHUNK", p + "lc", "0", "junk") == "received bad data"
    assert error_of(r, "BF.LOADCHUNK", p + "lc", "-1", "junk") == "received bad data"
    assert error_of(r, "BF.LOADCHUNK", p + "lc", "3", "junk") == "received bad data"
    assert error_of(r, "BF.LOADCHUNK", p + "lc", str(layer + 9), b"\0" * 16) == (
        "invalid chunk - Too big for current filter"
    )
    assert error_of(r, "BF.LOADCHUNK", p + "lc", str(layer + 9), b"\0" * 8) == (
        "invalid offset - no link found"
    )
    assert error_of(r, "BF.LOADCHUNK", p + "lc", "100000", b"\0" * 8) == (
        "invalid offset - no link found"
    )
    assert r.execute_command("BF.LOADCHUNK", p + "lc", "9", b"\0" * 8)
    assert error_of(r, "BF.SCANDUMP", p + "lc", "x") == "Second argument must be numeric"
    assert r.execute_command("BF.SCANDUMP", p + "lc", "-1") == [0, b""]
    assert error_of(r, "BF.SCANDUMP", p + "missing", "0") == "not found"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--password")
    a = ap.parse_args()
    for proto in (3, 2):
        r = redis.Redis(host="127.0.0.1", port=a.port, password=a.password, protocol=proto)
        check(r, proto, f"rb{proto}:")
    print("redis-py: RedisBloom replies match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
