"""bloomgate's Python API against real files of every layout, a served data
directory, a real Redis Cluster, and a real redis-server killed mid-use."""

import math
import os
import subprocess
import threading

import pytest

import bloomgate
from conftest import Cluster, RedisServer, bloomgate_bin

LAYOUTS = ["blocked", "classic", "counting", "cuckoo"]


def urls(n, prefix="http://site{}.example/page/{}"):
    return [prefix.format(i % 97, i) for i in range(n)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_from_a_file(tmp_path, layout):
    path = str(tmp_path / f"{layout}.bgf")
    entries = urls(5000)
    new = bloomgate.build(path, entries, fp=1e-4, keys="url", layout=layout, seed=7)
    assert 4990 <= new <= 5000  # "new" is "probably absent before": a false positive is not
    with pytest.raises(bloomgate.Exists):
        bloomgate.build(path, entries, keys="url", layout=layout)
    lst = bloomgate.open(path)
    assert lst.layout == layout and lst.key_kind == "url" and not lst.writable
    # Zero false negatives: every entry, in any spelling that canonicalizes equal.
    assert all(lst.check_many(entries))
    assert "HTTP://SITE3.EXAMPLE/page/../page/3#frag" in lst
    absent = urls(20000, "http://other{}.example/x/{}")
    fp = sum(lst.check_many(absent))
    assert fp <= 20, f"{fp} false positives of 20,000 at 1e-4"
    info = lst.info()
    assert info["layout"] == layout and info["items"] == new
    lst.verify()
    with pytest.raises(bloomgate.ReadOnly):
        lst.add("http://new.example/")
    lst.close()

    w = bloomgate.open(path, update=True)
    assert w.add("http://new.example/") is True
    if layout in ("blocked", "classic"):
        assert w.add("http://new.example/") is False
        with pytest.raises(bloomgate.CannotRemove):
            w.remove(entries[0])
    else:
        assert w.remove("http://new.example/") is True
        assert "http://new.example/" not in w
        assert w.remove(entries[1]) is True
        assert w.add(entries[1]) is True
    assert w.add_many(["http://a.example/", "http://b.example/", "http://a.example/"]) == [
        True, True, False
    ]
    if layout in ("counting", "cuckoo"):  # a table keeps both copies: one remove leaves one
        assert w.remove("http://a.example/") is True
        assert "http://a.example/" in w
    w.close()
    again = bloomgate.open(path)
    assert "http://a.example/" in again and all(again.check_many(entries))


def test_classic_is_the_least_filter_that_meets_the_rate(tmp_path):
    # The classic list is the least whole-k filter with a predicted rate at
    # or below the target: the textbook optimum's 19.17 bits per item at
    # 1e-4 (what rbloom and pybloomfiltermmap3 allocate), not the CLI's 20.
    n = 10**6
    path = str(tmp_path / "c.bgf")
    bloomgate.create(path, n, 1e-4, keys="raw", layout="classic")
    info = bloomgate.open(path).info()
    assert info["layout"] == "classic"
    row = bloomgate.plan(n, 1e-4)["layouts"][1]
    assert row["layout"] == "classic" and row["k"] == 13
    assert row["predicted_fp"] <= 1e-4 and row["bits_per_item"] < 19.18
    optimum = math.ceil(n * -math.log(1e-4) / math.log(2) ** 2) / 8
    assert row["bytes"] <= optimum * 1.0002
    assert os.path.getsize(path) <= row["bytes"] + 8192


def test_ribbon_list_built_from_entries(tmp_path):
    path = str(tmp_path / "r.bgf")
    entries = urls(20000)
    assert bloomgate.build(path, iter(entries), fp=1e-4, keys="url", layout="ribbon", seed=3) == 20000
    lst = bloomgate.open(path)
    assert lst.layout == "ribbon"
    assert all(lst.check_many(entries)) and "HTTP://SITE3.EXAMPLE/page/../page/3#frag" in lst
    fp = sum(lst.check_many(urls(20000, "http://other{}.example/x/{}")))
    assert fp <= 20, f"{fp} false positives of 20,000 at 1e-4"
    lst.verify()
    classic = str(tmp_path / "c.bgf")
    bloomgate.build(classic, entries, fp=1e-4, keys="url", layout="classic")
    assert os.path.getsize(path) < 0.85 * os.path.getsize(classic)  # with its 4 KiB header
    with pytest.raises(ValueError):
        bloomgate.create(str(tmp_path / "x.bgf"), 10, layout="ribbon")
    with pytest.raises(bloomgate.InvalidItem):
        bloomgate.build(str(tmp_path / "bad.bgf"), ["http://a.example/", "http://[bad"],
                        keys="url", layout="ribbon")
    assert not os.path.exists(str(tmp_path / "bad.bgf"))


def test_ribbon_list_takes_adds_into_its_delta(tmp_path):
    path = str(tmp_path / "r.bgf")
    entries = urls(20000)
    bloomgate.build(path, entries, fp=1e-4, keys="url", layout="ribbon", seed=3)
    with pytest.raises(bloomgate.ReadOnly):
        bloomgate.open(path).add("http://new.example/x")
    lst = bloomgate.open(path, update=True)
    assert lst.add("http://new.example/x") is True
    assert lst.add("HTTP://NEW.example/x#frag") is False
    assert lst.add_many(["http://new.example/y", entries[5]]) == [True, False]
    lst.close()
    assert os.path.exists(path + ".delta")
    again = bloomgate.open(path)
    assert "http://new.example/x" in again and "http://new.example/y" in again
    info = again.info()
    assert info["delta"]["added_keys"] == 3 and info["predicted_fp"] <= 1e-4


def test_build_streams_a_generator_and_refuses_an_invalid_entry(tmp_path):
    path = str(tmp_path / "g.bgf")
    n = bloomgate.build(path, (f"host{i}.example" for i in range(70000)), keys="host", seed=7)
    assert 69950 <= n <= 70000  # "new": probably absent before (a false positive is not)
    lst = bloomgate.open(path)
    assert lst.info()["planned_items"] >= 70000
    assert "www.host5.example" in lst  # host keys match subdomains' queries
    bad = str(tmp_path / "bad.bgf")
    with pytest.raises(bloomgate.InvalidItem):
        bloomgate.build(bad, ["http://ok.example/", "http://[bad"], keys="url", items=10)
    assert not os.path.exists(bad)


def test_str_bytes_and_invalid_utf8(tmp_path):
    raw = str(tmp_path / "raw.bgf")
    bloomgate.build(raw, ["é", b"\xff\xfe", "plain"], keys="raw")
    lst = bloomgate.open(raw)
    # str is UTF-8; bytes as they are.
    assert "é".encode() in lst and "é" in lst
    assert bytearray(b"plain") in lst and memoryview(b"plain") in lst
    assert b"\xff\xfe" in lst
    # A str from surrogateescape is the bytes it came from.
    assert b"\xff\xfe".decode("utf-8", "surrogateescape") in lst
    assert "\xff\xfe" not in lst  # the code points U+00FF U+00FE are other bytes
    with pytest.raises(TypeError):
        _ = 5 in lst
    # URLs with invalid UTF-8 are canonicalized as the CLI canonicalizes them.
    url = b"http://example.com/caf\xe9/\xff"
    cli = subprocess.run([bloomgate_bin(), "url", "canon", os.fsdecode(url)],
                         capture_output=True, check=True).stdout.decode().strip()
    assert bloomgate.canonicalize(url) == cli
    assert bloomgate.canonicalize(os.fsdecode(url)) == cli
    u = str(tmp_path / "u.bgf")
    bloomgate.build(u, [url], keys="url")
    assert bloomgate.open(u).check_many([url, cli, "http://example.com/cafe/"]) == [
        True, True, False
    ]


def test_canonicalize_expressions_plan():
    assert bloomgate.canonicalize("HTTP://Example.COM:80/a/./b/../c#x") == "http://example.com/a/c"
    with pytest.raises(bloomgate.InvalidItem):
        bloomgate.canonicalize("http://[bad")
    ex = bloomgate.expressions("http://a.b.c/1/2.html?param=1")
    assert ex[0] == "a.b.c/1/2.html?param=1" and "b.c/" in ex
    p = bloomgate.plan(10**7, 1e-4)
    names = [l["layout"] for l in p["layouts"]]
    assert names == ["blocked", "classic", "counting", "cuckoo"]
    classic = p["layouts"][1]
    assert 19 < classic["bits_per_item"] < 20.5 and classic["predicted_fp"] <= 1e-4
    with pytest.raises(ValueError):
        bloomgate.plan(10, 2.0)


def test_invalid_queries_raise_or_answer_none(tmp_path):
    path = str(tmp_path / "h.bgf")
    bloomgate.build(path, ["example.com"], keys="host")
    lst = bloomgate.open(path)
    with pytest.raises(bloomgate.InvalidItem):
        lst.check_many(["example.com", "http://[bad"])
    assert lst.check_many(["example.com", "http://[bad"], invalid="none") == [True, None]


def test_whitelist_on_a_file(tmp_path):
    path = str(tmp_path / "w.bgf")
    bloomgate.build(path, ["http://bad.example/"], keys="url")
    ro = bloomgate.open(path)
    with pytest.raises(bloomgate.ReadOnly):
        ro.whitelist_add("http://bad.example/")
    with bloomgate.open(path, update=True) as w:
        assert w.whitelist_add("http://bad.example/") is True
        assert "http://bad.example/" not in w
        assert w.whitelist() == [b"bad.example/"]
    again = bloomgate.open(path)
    assert "http://bad.example/" not in again
    with bloomgate.open(path, update=True) as w:
        assert w.whitelist_remove("http://bad.example/") is True
        assert w.whitelist() == []
    assert "http://bad.example/" in bloomgate.open(path)


def test_served_data_directory(served):
    server, data = served
    server.request("POST", "/v1/filters", {"name": "seen", "items": 10000, "fp": 1e-4,
                                           "kind": "url"})
    server.request("POST", "/v1/filters/seen/add", ["http://live.example/a", "http://live.example/b"])
    # The file plus the adds in the server's write-ahead log, read while it runs.
    lst = bloomgate.open(str(data / "seen.bgf"))
    assert lst.check_many(["http://live.example/a", "http://LIVE.example/b#x",
                           "http://not.example/"]) == [True, True, False]
    assert lst.info()["served"] is True
    # A running server holds its data directory: no writer beside it.
    with pytest.raises(bloomgate.Error):
        bloomgate.open(str(data / "seen.bgf"), update=True)


def test_redis_cluster_list(cluster):
    addr = cluster.address("py-list")
    bloomgate.create(addr, 100000, 1e-4, keys="url")
    with pytest.raises(bloomgate.Exists):
        bloomgate.create(addr, 100000, 1e-4, keys="url")
    lst = bloomgate.open(addr)
    assert lst.writable and lst.layout == "blocked"
    entries = urls(3000)
    assert lst.add_many(entries) == [True] * 3000
    assert lst.add_many(entries[:10]) == [False] * 10
    assert lst.claim_many([entries[0], "http://fresh.example/"]) == ["present", "new"]
    assert all(lst.check_many(entries))
    assert "http://site1.example/page/1" in lst
    assert sum(lst.check_many(urls(5000, "http://o{}.example/{}"))) <= 10
    assert lst.add(b"http://bytes.example/\xff") is True
    assert lst.whitelist_add(entries[5]) is True
    assert entries[5] not in lst
    assert lst.whitelist_remove(entries[5]) is True
    info = lst.info()
    assert info["cluster"] is True and info["items"] == 3002
    with pytest.raises(bloomgate.CannotRemove):
        lst.remove(entries[0])
    with pytest.raises(bloomgate.NotFound):
        bloomgate.open(cluster.address("no-such-filter"))


def holder_of_a_shard(c, name):
    """The master that holds one of the filter's shards."""
    for port in c.masters():
        node = c.node(port)
        if any(f":{name}:" in k and k.rsplit(":", 1)[1].isdigit()
               for k in node.cli("--scan", "--pattern", "bg:*").split()):
            return node
    raise AssertionError("no master holds a shard")


def test_unavailable_never_false_when_a_redis_node_is_killed(tmp_path):
    single = RedisServer(tmp_path / "single")
    c = Cluster(tmp_path / "cluster", replicas=0)
    try:
        for addr, kill in [
            (f"redis://{single.addr}/down", single.kill9),
            (c.address("down"), lambda: holder_of_a_shard(c, "down").kill9()),
        ]:
            bloomgate.create(addr, 200000, 1e-4, keys="raw")
            lst = bloomgate.open(addr)
            keys = [f"k{i}" for i in range(20000)]
            lst.add_many(keys)
            assert all(lst.check_many(keys))
            kill()
            with pytest.raises(bloomgate.Unavailable):
                lst.check_many(keys)
            answers = []
            for k in keys[:300]:
                try:
                    answers.append(k in lst)
                except bloomgate.Unavailable:
                    answers.append("unavailable")
            assert False not in answers
            assert "unavailable" in answers
            with pytest.raises(bloomgate.Unavailable) as e:
                lst.add_many([f"new{i}" for i in range(2000)])
            assert len(e.value.claims) == 2000
            assert set(e.value.claims) <= {"new", "present", "unknown", "not_added"}
            assert e.value.claims.count("new") < 2000
    finally:
        single.stop()
        c.stop()


@pytest.mark.parametrize("where", ["file", "redis"])
def test_threads_hammering_one_list(tmp_path, redis_server, where):
    if where == "file":
        addr = str(tmp_path / "t.bgf")
        bloomgate.create(addr, 200000, 1e-6, keys="raw")
        lst = bloomgate.open(addr, update=True)
    else:
        addr = f"redis://{redis_server.addr}/threads"
        bloomgate.create(addr, 200000, 1e-6, keys="raw")
        lst = bloomgate.open(addr)
    shared = [f"shared-{i}" for i in range(5000)]
    threads_n = 8
    new_counts = [0] * threads_n
    missing = []

    def work(t):
        own = [f"own-{t}-{i}" for i in range(3000)]
        for i in range(0, 3000, 300):
            assert all(lst.add_many(own[i:i + 300]))
            # Every add is seen at once, by this thread and any other.
            if not all(lst.check_many(own[: i + 300])):
                missing.append(t)
        for i in range(0, 5000, 500):
            new_counts[t] += sum(lst.add_many(shared[i:i + 500]))
        for k in own[:200]:
            if k not in lst:
                missing.append(k)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert missing == []
    # Add-if-absent: each shared key was new for exactly one thread.
    assert sum(new_counts) == len(shared)
    assert all(lst.check_many(shared))
    lst.close()


def test_fork(tmp_path, redis_server):
    path = str(tmp_path / "f.bgf")
    bloomgate.build(path, ["a", "b"], keys="raw")
    ro = bloomgate.open(path)
    addr = f"redis://{redis_server.addr}/fork"
    bloomgate.create(addr, 1000, 1e-4, keys="raw")
    rl = bloomgate.open(addr)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a read-only file answers; Redis must be reopened
        code = 0
        try:
            if not ("a" in ro and "zz" not in ro):
                code = 1
            try:
                _ = "a" in rl
                code = 2
            except bloomgate.Error:
                again = bloomgate.open(addr)
                if not again.add("child"):
                    code = 3
        except BaseException:
            code = 4
        os.write(w, bytes([code]))
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"\x00"
    assert "child" in rl
