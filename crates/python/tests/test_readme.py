"""README's "From Python" and "Deduplicating a Scrapy crawl" code, run as
written (the README test of crates/cli skips these blocks: they need this
package)."""

import re
import subprocess
import sys

from conftest import ROOT
from test_scrapy import Site, crawl, finish

MARK = "crates/python/tests/test_readme.py"


def blocks():
    text = (ROOT / "README.md").read_text()
    found = re.findall(r"<!-- not run by the README test:[^\n]*" + re.escape(MARK)
                       + r"[^\n]*-->\n```python\n(.*?)```", text, re.S)
    assert len(found) == 2, "README's two Python blocks, each after its marker"
    return found


def test_readme_from_python(tmp_path):
    code = blocks()[0]
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "http://example.com/a/c" in r.stdout


def test_readme_scrapy_settings_crawl(tmp_path):
    settings = {}
    exec(blocks()[1], {}, settings)
    assert settings["DUPEFILTER_CLASS"] == "bloomgate.scrapy.BloomDupeFilter"
    settings["BLOOMGATE_DUPEFILTER_STATE"] = str(tmp_path / settings["BLOOMGATE_DUPEFILTER_STATE"])
    s = Site(pages=500)
    try:
        p, out = crawl(tmp_path, settings, s.url("/page/0"), "readme")
        stats = finish(p, out, tmp_path, "readme")
        assert set(s.hits) == {f"page/{i}" for i in range(500)}
        assert max(s.hits.values()) == 1
        assert stats["bloomgate/new"] == 500
    finally:
        s.stop()
