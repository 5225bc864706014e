from typing import Any, Optional

import bloomgate

class BloomDupeFilter:
    address: str
    keys: str
    list: bloomgate.List
    def __init__(
        self,
        address: Optional[str] = None,
        *,
        capacity: int = ...,
        rate: float = ...,
        keys: str = "fingerprint",
        debug: bool = False,
        stats: Any = None,
        fingerprinter: Any = None,
    ) -> None: ...
    @classmethod
    def from_crawler(cls, crawler: Any) -> "BloomDupeFilter": ...
    @classmethod
    def from_spider(cls, spider: Any) -> "BloomDupeFilter": ...
    def key(self, request: Any) -> Any: ...
    def request_seen(self, request: Any) -> bool: ...
    def log(self, request: Any, spider: Any) -> None: ...
    def clear(self) -> None: ...
    def close(self, reason: str = "") -> None: ...
