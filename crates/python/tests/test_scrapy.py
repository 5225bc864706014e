"""Real Scrapy crawls (Scrapy from PyPI, each in its own process) of a local
site served by the test: thousands of pages linking to each other many
times, through URL variants that canonicalize equal. The site counts every
download of every page."""

import json
import random
import re
import subprocess
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import bloomgate

PAGES = 2000
LINKS = 12
HERE = Path(__file__).parent


class Site:
    """Pages /page/N, each linking to LINKS others, spelled many ways."""

    def __init__(self, pages=PAGES, extra=0):
        self.pages = pages
        self.extra = extra  # pages /new/N, reached only from /new/0
        self.hits = Counter()
        self.lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                page = site.page_of(self.path)
                if page is None:
                    self.send_error(404)
                    return
                with site.lock:
                    site.hits[page] += 1
                body = site.body(page).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def page_of(self, path):
        """The page a request path names, by the server's own rules."""
        path = path.split("#", 1)[0]
        path = re.sub(r"%([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), path)
        parts = []
        for seg in path.split("/"):
            if seg == "..":
                parts and parts.pop()
            elif seg not in ("", "."):
                parts.append(seg)
        if len(parts) == 2 and parts[0] in ("page", "new") and parts[1].isdigit():
            return f"{parts[0]}/{int(parts[1])}"
        return None

    def variants(self, path):
        """Spellings of one page that canonicalize equal."""
        kind, n = path.split("/")
        return [
            f"/{kind}/{n}",
            f"/{kind}/{n}#section-{int(n) % 7}",
            f"/x/../{kind}/{n}",
            f"/./{kind}/./{n}",
            f"/%{ord(kind[0]):02X}{kind[1:]}/{n}",
            f"HTTP://127.0.0.1:{self.port}/{kind}/{n}",
            f"/{kind}//{n}",
        ]

    def body(self, page):
        kind, n = page.split("/")
        rng = random.Random(page)
        links = []
        if kind == "page":
            targets = [f"page/{rng.randrange(self.pages)}" for _ in range(LINKS)]
            targets.append(f"page/{(int(n) + 1) % self.pages}")  # all reachable
        else:
            targets = [f"page/{rng.randrange(self.pages)}" for _ in range(LINKS)]
            targets.append(f"new/{int(n) + 1}" if int(n) + 1 < self.extra else "page/0")
        for t in targets:
            links.append(rng.choice(self.variants(t)))
        return "<html><body>" + "".join(f'<a href="{h}">{h}</a> ' for h in links) + "</body></html>"

    def stop(self):
        self.server.shutdown()


@pytest.fixture
def site():
    s = Site(extra=50)
    yield s
    s.stop()


def crawl(tmp_path, settings, start, tag):
    out = tmp_path / f"stats-{tag}.json"
    return subprocess.Popen(
        [sys.executable, str(HERE / "crawl.py"), json.dumps(settings), start, str(out)],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"log-{tag}.txt", "w"),
    ), out


def finish(proc, out, tmp_path, tag):
    assert proc.wait(timeout=900) == 0, (tmp_path / f"log-{tag}.txt").read_text()[-3000:]
    return json.loads(out.read_text())


def test_scrapy_crawl_each_page_once_then_nothing_old(tmp_path, site):
    state = str(tmp_path / "state" / "seen.bgf")
    settings = {
        "DUPEFILTER_CLASS": "bloomgate.scrapy.BloomDupeFilter",
        "BLOOMGATE_DUPEFILTER_STATE": state,
        "BLOOMGATE_DUPEFILTER_KEYS": "url",
        "BLOOMGATE_DUPEFILTER_CAPACITY": 100000,
    }
    p, out = crawl(tmp_path, settings, site.url("/page/0"), "first")
    stats = finish(p, out, tmp_path, "first")
    pages = {f"page/{i}" for i in range(PAGES)}
    assert set(site.hits) == pages, f"{len(pages - set(site.hits))} pages never downloaded"
    assert max(site.hits.values()) == 1, site.hits.most_common(3)
    assert stats["bloomgate/new"] == PAGES
    assert stats["downloader/response_count"] == PAGES
    assert stats["bloomgate/filtered"] >= PAGES * (LINKS - 1)
    log = (tmp_path / "log-first.txt").read_text()
    assert "predicted false-positive rate" in log and "fill" in log

    # Second run, same state: from a new page that links to old ones.
    site.hits.clear()
    p, out = crawl(tmp_path, settings, site.url("/new/0"), "second")
    stats = finish(p, out, tmp_path, "second")
    assert set(site.hits) == {f"new/{i}" for i in range(50)}
    assert max(site.hits.values()) == 1
    assert stats["bloomgate/new"] == 50


def test_scrapy_fingerprint_keys_default_state_in_jobdir(tmp_path):
    s = Site(pages=300)
    try:
        settings = {
            "DUPEFILTER_CLASS": "bloomgate.scrapy.BloomDupeFilter",
            "JOBDIR": str(tmp_path / "job"),
        }
        p, out = crawl(tmp_path, settings, s.url("/page/0"), "fp")
        stats = finish(p, out, tmp_path, "fp")
        assert (tmp_path / "job" / "bloomgate-seen.bgf").exists()
        # Scrapy's fingerprints canonicalize less than bloomgate's URLs: a
        # page may come once per spelling Scrapy tells apart, never more.
        assert set(s.hits) == {f"page/{i}" for i in range(300)}
        assert stats["bloomgate/new"] == sum(s.hits.values())
        assert bloomgate.open(str(tmp_path / "job" / "bloomgate-seen.bgf")).key_kind == "raw"
    finally:
        s.stop()


def test_two_crawlers_sharing_a_redis_cluster_filter(tmp_path, site, cluster):
    addr = cluster.address("fleet-seen")
    bloomgate.create(addr, 100000, 1e-6, keys="url")
    settings = {
        "DUPEFILTER_CLASS": "bloomgate.scrapy.BloomDupeFilter",
        "BLOOMGATE_DUPEFILTER_REDIS": addr,
        "BLOOMGATE_DUPEFILTER_KEYS": "url",
    }
    a = crawl(tmp_path, settings, site.url("/page/0"), "a")
    b = crawl(tmp_path, settings, site.url(f"/page/{PAGES // 2}"), "b")
    sa = finish(*a, tmp_path, "a")
    sb = finish(*b, tmp_path, "b")
    assert set(site.hits) == {f"page/{i}" for i in range(PAGES)}
    assert max(site.hits.values()) == 1, site.hits.most_common(3)
    assert sa.get("bloomgate/new", 0) + sb.get("bloomgate/new", 0) == PAGES
    assert "bloomgate/unavailable" not in sa and "bloomgate/unavailable" not in sb


def test_scrapy_redis_scheduler_two_crawlers(tmp_path, site, redis_server):
    """scrapy-redis's scheduler (its queue in Redis) with this filter in the
    same Redis: two crawlers, each page downloaded once in total."""
    addr = f"redis://{redis_server.addr}/srseen"
    bloomgate.create(addr, 100000, 1e-6, keys="url")
    settings = {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_PERSIST": True,
        "REDIS_URL": f"redis://{redis_server.addr}/0",
        "DUPEFILTER_CLASS": "bloomgate.scrapy.BloomDupeFilter",
        "BLOOMGATE_DUPEFILTER_REDIS": addr,
        "BLOOMGATE_DUPEFILTER_KEYS": "url",
    }
    a = crawl(tmp_path, settings, site.url("/page/0"), "sr-a")
    b = crawl(tmp_path, settings, site.url(f"/page/{PAGES // 2}"), "sr-b")
    sa = finish(*a, tmp_path, "sr-a")
    sb = finish(*b, tmp_path, "sr-b")
    # A crawler that finds the shared queue empty may stop early; what one
    # left in the queue is crawled by a third run.
    c = crawl(tmp_path, settings, site.url("/page/0"), "sr-c")
    sc = finish(*c, tmp_path, "sr-c")
    assert set(site.hits) == {f"page/{i}" for i in range(PAGES)}
    assert max(site.hits.values()) == 1, site.hits.most_common(3)
    assert sum(s.get("bloomgate/new", 0) for s in (sa, sb, sc)) == PAGES
