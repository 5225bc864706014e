"""bloomgate from Python: open a list (a filter file of any layout, one in a
served data directory, or a filter in Redis / Redis Cluster), ask it, add to
it; build, plan, canonicalize.

Items are ``str`` or ``bytes``: a ``str`` is encoded as UTF-8 (lone
surrogates, as ``surrogateescape`` makes them, back to the bytes they stand
for); ``bytes`` are taken as they are, exactly as a line of the CLI's input,
so invalid UTF-8 is handled as the CLI handles it.

When a store cannot answer (a Redis node down, a shard missing) every call
raises :class:`Unavailable`; a lookup never answers ``False`` then.
"""

from ._core import (  # noqa: F401
    CannotRemove,
    Error,
    Exists,
    Full,
    InvalidItem,
    List,
    NotFound,
    ReadOnly,
    Unavailable,
    __version__,
    build,
    canonicalize,
    create,
    expressions,
    open,
    plan,
)

__all__ = [
    "CannotRemove",
    "Error",
    "Exists",
    "Full",
    "InvalidItem",
    "List",
    "NotFound",
    "ReadOnly",
    "Unavailable",
    "build",
    "canonicalize",
    "create",
    "expressions",
    "open",
    "plan",
]
