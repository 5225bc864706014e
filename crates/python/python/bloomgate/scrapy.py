"""A Scrapy duplicate filter over a bloomgate list: ``BloomDupeFilter``.

Use it as Scrapy's ``DUPEFILTER_CLASS`` (or scrapy-redis's
``SCHEDULER_DUPEFILTER_CLASS``)::

    DUPEFILTER_CLASS = "bloomgate.scrapy.BloomDupeFilter"
    BLOOMGATE_DUPEFILTER_STATE = "crawl-state/seen.bgf"   # persists between runs
    # or, shared by a fleet of crawlers:
    # BLOOMGATE_DUPEFILTER_REDIS = "redis+cluster://10.0.0.1:7000/seen"

Settings:

``BLOOMGATE_DUPEFILTER_STATE``
    A filter file that persists between runs (made when missing). Default:
    ``JOBDIR/bloomgate-seen.bgf`` when ``JOBDIR`` is set, otherwise a
    temporary file removed at close (one run, like Scrapy's own filter).
``BLOOMGATE_DUPEFILTER_REDIS``
    ``redis://HOST:PORT/NAME`` or ``redis+cluster://HOST:PORT[,…]/NAME``: one
    filter shared by every crawler that names it. Each request is claimed
    with one add-if-absent round trip: of several crawlers meeting the same
    URL at once, exactly one is told it is new. Made when missing; create it
    before starting a fleet (``bloomgate.create``) so that two crawlers do not
    both make it at once.
``BLOOMGATE_DUPEFILTER_CAPACITY`` (default 10,000,000) and ``BLOOMGATE_DUPEFILTER_RATE``
    (default 1e-6)
    The size of a new filter: requests it must hold, and the chance that a
    new request is taken for a seen one (and not crawled). Past the capacity
    the rate grows; the filter's fill and predicted rate are logged at close.
``BLOOMGATE_DUPEFILTER_KEYS``
    ``"fingerprint"`` (default): Scrapy's request fingerprint (method, URL,
    body), as Scrapy's own filter. ``"url"``: bloomgate's canonical URL
    (Safe Browsing rules: case, ``..``, fragments, escapes), so URL variants
    that canonicalize equal are one request whatever the method or body.

Stats: ``bloomgate/new`` (requests let through), ``bloomgate/filtered``
(requests dropped as seen), ``bloomgate/unavailable`` (requests let through
because the filter could not answer: a request is never dropped unless the
filter said it was seen; the cost of an outage is a possible second
download, never a lost page).
"""

import logging
import os
import tempfile

import bloomgate

try:  # Scrapy ≥ 2.7
    from scrapy.dupefilters import BaseDupeFilter
except ImportError:  # pragma: no cover
    BaseDupeFilter = object

logger = logging.getLogger(__name__)

DEFAULT_CAPACITY = 10_000_000
DEFAULT_RATE = 1e-6
STATE_NAME = "bloomgate-seen.bgf"


class BloomDupeFilter(BaseDupeFilter):
    """Scrapy duplicate filter backed by a bloomgate list (a file or Redis)."""

    def __init__(
        self,
        address=None,
        *,
        capacity=DEFAULT_CAPACITY,
        rate=DEFAULT_RATE,
        keys="fingerprint",
        debug=False,
        stats=None,
        fingerprinter=None,
    ):
        if keys not in ("fingerprint", "url"):
            raise ValueError(
                f"BLOOMGATE_DUPEFILTER_KEYS={keys!r}: 'fingerprint' or 'url'"
            )
        self.keys = keys
        self.debug = debug
        self.stats = stats
        self.fingerprinter = fingerprinter
        self._tmpdir = None
        if address is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="bloomgate-dupefilter-")
            address = os.path.join(self._tmpdir.name, STATE_NAME)
        self.address = address
        kind = "raw" if keys == "fingerprint" else "url"
        redis = address.startswith(("redis://", "rediss://", "redis+cluster://"))
        if redis:
            try:
                self.list = bloomgate.open(address)
            except bloomgate.NotFound:
                try:
                    bloomgate.create(address, capacity, rate, keys=kind)
                except bloomgate.Exists:  # another crawler made it meanwhile
                    pass
                self.list = bloomgate.open(address)
        else:
            if not os.path.exists(address):
                parent = os.path.dirname(address)
                if parent:
                    os.makedirs(parent, exist_ok=True)
                bloomgate.create(address, capacity, rate, keys=kind)
            self.list = bloomgate.open(address, update=True)
        if self.list.key_kind != kind:
            raise bloomgate.Error(
                f"{address}: holds {self.list.key_kind} keys, but "
                f"BLOOMGATE_DUPEFILTER_KEYS={keys!r} needs {kind} keys"
            )

    # Scrapy's constructors.
    @classmethod
    def from_crawler(cls, crawler):
        s = crawler.settings
        address = s.get("BLOOMGATE_DUPEFILTER_REDIS") or s.get("BLOOMGATE_DUPEFILTER_STATE")
        if not address and s.get("JOBDIR"):
            address = os.path.join(s.get("JOBDIR"), STATE_NAME)
        fingerprinter = getattr(crawler, "request_fingerprinter", None)
        return cls(
            address or None,
            capacity=s.getint("BLOOMGATE_DUPEFILTER_CAPACITY", DEFAULT_CAPACITY),
            rate=s.getfloat("BLOOMGATE_DUPEFILTER_RATE", DEFAULT_RATE),
            keys=s.get("BLOOMGATE_DUPEFILTER_KEYS", "fingerprint"),
            debug=s.getbool("DUPEFILTER_DEBUG"),
            stats=crawler.stats,
            fingerprinter=fingerprinter,
        )

    @classmethod
    def from_spider(cls, spider):
        """scrapy-redis's scheduler makes its filter from the spider."""
        return cls.from_crawler(spider.crawler)

    def key(self, request):
        """The key a request is filtered by."""
        if self.keys == "url":
            return request.url
        if self.fingerprinter is not None:
            return self.fingerprinter.fingerprint(request)
        from scrapy.utils.request import fingerprint

        return fingerprint(request)

    def _inc(self, name):
        if self.stats is not None:
            self.stats.inc_value(name)

    def request_seen(self, request):
        """True when the request was seen (by this crawler, an earlier run,
        or another crawler sharing the filter): Scrapy drops it then."""
        try:
            key = self.key(request)
        except bloomgate.InvalidItem:
            # Not a URL bloomgate can canonicalize: let it through.
            self._inc("bloomgate/new")
            return False
        try:
            claim = self.list.claim_many([key])[0]
        except bloomgate.InvalidItem:
            self._inc("bloomgate/new")
            return False
        except bloomgate.Error as e:
            claim = "unknown"
            logger.warning("bloomgate: %s: %s; letting %s through", self.address, e, request)
        if claim == "present":
            self._inc("bloomgate/filtered")
            return True
        if claim != "new":
            self._inc("bloomgate/unavailable")
        self._inc("bloomgate/new")
        return False

    def log(self, request, spider):
        if self.debug:
            logger.debug("Filtered duplicate request: %(request)s", {"request": request},
                         extra={"spider": spider})
        if self.stats is not None:
            self.stats.inc_value("dupefilter/filtered")

    def clear(self):
        """scrapy-redis calls this at close unless SCHEDULER_PERSIST: a
        shared filter is never cleared by one crawler (use `bloomgate delete`)."""

    def close(self, reason=""):
        try:
            info = self.list.info()
            items = info.get("items")
            planned = info.get("planned_items") or info.get("capacity")
            logger.info(
                "bloomgate dupefilter %s: %s items (planned %s), fill %.4f, predicted false-positive rate %.3g",
                self.list.address,
                items,
                planned,
                info.get("fill_ratio") or 0.0,
                info.get("predicted_fp") or 0.0,
            )
            if self.stats is not None:
                self.stats.set_value("bloomgate/fill_ratio", info.get("fill_ratio"))
                self.stats.set_value("bloomgate/predicted_fp", info.get("predicted_fp"))
        except bloomgate.Error as e:
            logger.warning("bloomgate dupefilter %s: cannot describe the filter: %s", self.address, e)
        finally:
            self.list.close()
            if self._tmpdir is not None:
                self._tmpdir.cleanup()
