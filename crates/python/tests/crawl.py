"""One Scrapy crawl, run as its own process by test_scrapy.py:
``python crawl.py SETTINGS_JSON START_URL STATS_OUT``. Follows every link;
the start request is filtered like any other (dont_filter=False), so a
second run with the same state downloads nothing it has seen."""

import json
import sys

import scrapy
from scrapy.crawler import CrawlerProcess


class Everything(scrapy.Spider):
    name = "everything"

    def __init__(self, start_url, **kw):
        super().__init__(**kw)
        self.first_url = start_url

    async def start(self):  # Scrapy >= 2.13
        yield scrapy.Request(self.first_url, dont_filter=False)

    def start_requests(self):  # older Scrapy 2.x
        yield scrapy.Request(self.first_url, dont_filter=False)

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


def main():
    settings, start, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    base = {
        "ROBOTSTXT_OBEY": False,
        "LOG_LEVEL": "INFO",
        "CONCURRENT_REQUESTS": 16,
        "TELNETCONSOLE_ENABLED": False,
        "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
        "DOWNLOAD_TIMEOUT": 120,
        "RETRY_ENABLED": False,
    }
    base.update(settings)
    process = CrawlerProcess(base)
    crawler = process.create_crawler(Everything)
    process.crawl(crawler, start_url=start)
    process.start()
    stats = {k: v for k, v in crawler.stats.get_stats().items()
             if isinstance(v, (int, float, str))}
    with open(out, "w") as f:
        json.dump(stats, f)


if __name__ == "__main__":
    main()
