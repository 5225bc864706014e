"""Type stubs of bloomgate's native core (re-exported by ``bloomgate``)."""

from os import PathLike
from typing import Any, Iterable, Literal, Optional, Union

Item = Union[str, bytes, bytearray, memoryview]
"""An item: ``str`` is encoded as UTF-8 (lone surrogates back to the bytes
``surrogateescape`` made them from); bytes-likes are taken as they are."""

Claim = Literal["new", "present", "unknown", "not_added"]

__version__: str

class Error(Exception):
    """Base class of every bloomgate error."""

class Unavailable(Error):
    """The store cannot answer (a Redis node down, a shard missing). Never
    turned into "absent". After a failed add, ``claims`` holds one claim per
    item."""
    claims: list[Claim]

class InvalidItem(Error):
    """An item is not valid for the list's key kind."""

class CannotRemove(Error):
    """The layout cannot delete (a Bloom filter)."""

class ReadOnly(Error):
    """A change of a file opened without update=True."""

class Full(Error):
    """A cuckoo table has no room for another item."""

class NotFound(Error):
    """No filter of that name in Redis."""

class Exists(Error):
    """A filter is there already."""

class List:
    """An open list. Safe to share between threads; see the README for fork()."""
    @property
    def address(self) -> str: ...
    @property
    def layout(self) -> Literal["blocked", "classic", "counting", "cuckoo", "ribbon"]: ...
    @property
    def key_kind(self) -> str: ...
    @property
    def match_mode(self) -> str: ...
    @property
    def writable(self) -> bool: ...
    def __contains__(self, item: Item) -> bool: ...
    def check_many(
        self, items: Iterable[Item], *, invalid: Literal["raise", "none"] = "raise"
    ) -> list[Optional[bool]]: ...
    def add(self, item: Item) -> bool: ...
    def add_many(self, items: Iterable[Item]) -> list[bool]: ...
    def claim_many(self, items: Iterable[Item]) -> list[Claim]: ...
    def remove(self, item: Item) -> bool: ...
    def whitelist_add(self, item: Item) -> bool: ...
    def whitelist_remove(self, item: Item) -> bool: ...
    def whitelist(self) -> list[bytes]: ...
    def info(self) -> dict[str, Any]: ...
    def verify(self) -> None: ...
    def save(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> "List": ...
    def __exit__(self, *args: object) -> bool: ...

def open(
    address: str,
    *,
    update: bool = False,
    verify: bool = False,
    snapshot_only: bool = False,
    password_file: Optional[Union[str, PathLike[str]]] = None,
) -> List: ...
def create(
    address: str,
    items: int,
    fp: float = 1e-4,
    *,
    keys: str = "url",
    match: str = "exact",
    layout: Literal["blocked", "classic", "counting", "cuckoo"] = "blocked",
    replace: bool = False,
    seed: Optional[int] = None,
) -> None: ...
def build(
    path: str,
    entries: Iterable[Item],
    items: Optional[int] = None,
    fp: float = 1e-4,
    *,
    keys: str = "url",
    match: str = "exact",
    layout: Literal["blocked", "classic", "counting", "cuckoo", "ribbon"] = "blocked",
    replace: bool = False,
    seed: Optional[int] = None,
) -> int: ...
def plan(items: int, fp: float = 1e-4, *, keys: str = "raw", match: str = "exact") -> dict[str, Any]: ...
def canonicalize(url: Item) -> str: ...
def expressions(url: Item) -> list[str]: ...
