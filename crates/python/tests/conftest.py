"""Fixtures of the Python tests: the bloomgate binary, a served data
directory, redis-server and Redis Cluster processes on free ports (started
as crates/testkit starts them), temporary directories."""

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(os.environ.get("BLOOMGATE_BIN", ROOT / "target" / "release" / "bloomgate"))


def bloomgate_bin():
    if not BIN.exists():
        subprocess.run(
            ["cargo", "build", "--release", "-p", "bloomgate-cli"], cwd=ROOT, check=True
        )
    return str(BIN)


def _port_free(p):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            return False
    return True


def free_port():
    """A free port whose cluster bus port (+10000) is free too."""
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    while True:
        p = rng.randrange(20000, 55535)
        if _port_free(p) and _port_free(p + 10000):
            return p


def wait_until(cond, what, limit=60.0):
    t = time.monotonic()
    while not cond():
        if time.monotonic() - t > limit:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class RedisServer:
    def __init__(self, base, extra=(), port=None):
        self.port = port or free_port()
        self.dir = Path(base) / f"redis-{self.port}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.dir),
             "--logfile", str(self.dir / "log"), *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        )
        wait_until(lambda: self.cli("PING").strip() == "PONG", "redis-server", 20)

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    def cli(self, *args):
        r = subprocess.run(["redis-cli", "-p", str(self.port), *args],
                           capture_output=True, text=True)
        return r.stdout

    def kill9(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        self.kill9()


class Cluster:
    def __init__(self, base, replicas=1):
        self.nodes = []
        for i in range(3 * (1 + replicas)):
            conf = Path(base) / f"nodes-{i}-{os.getpid()}-{time.monotonic_ns()}.conf"
            self.nodes.append(RedisServer(base, ["--cluster-enabled", "yes",
                                                 "--cluster-config-file", str(conf),
                                                 "--cluster-node-timeout", "1000"]))
        r = subprocess.run(
            ["redis-cli", "--cluster", "create", *[n.addr for n in self.nodes],
             "--cluster-replicas", str(replicas), "--cluster-yes"],
            capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        wait_until(self.ok, "cluster_state:ok", 60)

    def ok(self):
        return all("cluster_state:ok" in n.cli("CLUSTER", "INFO") for n in self.nodes
                   if n.proc.poll() is None)

    def masters(self):
        out = []
        for line in self.nodes[0].cli("CLUSTER", "NODES").splitlines():
            f = line.split()
            if "master" in f[2] and "fail" not in f[2] and len(f) > 8:
                out.append(int(f[1].split("@")[0].rsplit(":", 1)[1]))
        return out

    def node(self, port):
        return next(n for n in self.nodes if n.port == port)

    def address(self, name):
        return "redis+cluster://" + ",".join(n.addr for n in self.nodes) + "/" + name

    def stop(self):
        for n in self.nodes:
            n.stop()


class Server:
    """`bloomgate serve` on a data directory, on free ports."""

    def __init__(self, data_dir, *extra):
        ready = Path(data_dir).parent / f"ready-{time.monotonic_ns()}"
        self.proc = subprocess.Popen(
            [bloomgate_bin(), "serve", "--http", "127.0.0.1:0", "--resp", "127.0.0.1:0",
             "--ready-file", str(ready), "--data-dir", str(data_dir), *extra],
            stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_until(ready.exists, "bloomgate serve", 300)
        v = json.loads(ready.read_text())
        self.http = v["http"]

    def request(self, method, path, body=None):
        import urllib.request
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://{self.http}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read() or b"null")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)


@pytest.fixture
def redis_server(tmp_path):
    s = RedisServer(tmp_path)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    yield c
    c.stop()


@pytest.fixture
def served(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    s = Server(d)
    yield s, d
    s.stop()


def pytest_report_header(config):
    return f"bloomgate binary: {BIN}; python {sys.version.split()[0]}"
