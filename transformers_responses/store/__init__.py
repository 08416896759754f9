"""Response stores: `open_store(url)` picks the backend for a `--responses-store` URL.

Built in: `sqlite:///path` (the embedded, durable default), `memory://` (bounded, throwaway) and `redis://host:port/db`
(shared by several replicas). A third-party backend registers a `ResponseStore` subclass in the entry-point group
`transformers_responses.stores` under its URL scheme; see docs/store.md.
"""

from __future__ import annotations

import os
from importlib.metadata import entry_points
from pathlib import Path

from .base import DEFAULT_TTL, Page, ResponseRecord, ResponseStore

__all__ = ["BUILTIN", "DEFAULT_TTL", "ENTRY_POINT_GROUP", "Page", "ResponseRecord", "ResponseStore", "default_url",
           "open_store", "parse_ttl"]

ENTRY_POINT_GROUP = "transformers_responses.stores"
BUILTIN = {
    "sqlite": "transformers_responses.store.sqlite:SqliteStore",
    "memory": "transformers_responses.store.memory:MemoryStore",
    "redis": "transformers_responses.store.redis:RedisStore",
}


def default_url() -> str:
    """`sqlite:///<HF cache>/transformers-responses/responses.db` (HF_HOME honoured)."""
    from huggingface_hub.constants import HF_HOME

    return f"sqlite:///{Path(HF_HOME) / 'transformers-responses' / 'responses.db'}"


def backend_class(url: str) -> type[ResponseStore]:
    from importlib import import_module

    from ..errors import ConfigurationError

    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in ("rediss", "unix"):
        scheme = "redis"
    target = BUILTIN.get(scheme)
    if target is None:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name == scheme:
                return ep.load()  # type: ignore[no-any-return]
        known = sorted({*BUILTIN, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))})
        raise ConfigurationError(f"Unknown response store URL {url!r}: the scheme must be one of {', '.join(known)} "
                                 "(e.g. sqlite:///path/responses.db, memory://, redis://127.0.0.1:6379/0).")
    module, _, name = target.partition(":")
    return getattr(import_module(module), name)  # type: ignore[no-any-return]


def parse_ttl(text: str | float | None) -> float | None:
    """`--responses-ttl`: "3600", "90s", "15m", "12h", "30d" → seconds; "0" → None (kept forever)."""
    from ..errors import ConfigurationError

    if text is None or isinstance(text, (int, float)):
        return None if not text else float(text)
    raw = text.strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(raw[-1:], None)
    number = raw[:-1] if scale else raw
    try:
        seconds = float(number) * (scale or 1)
    except ValueError:
        raise ConfigurationError(f"Invalid --responses-ttl {text!r}: use seconds, or a number with s, m, h or d "
                                 "(e.g. 30d); 0 keeps responses forever.") from None
    if seconds < 0:
        raise ConfigurationError(f"Invalid --responses-ttl {text!r}: it cannot be negative.")
    return seconds or None


def open_store(url: str | None = None, *, ttl: float | None = DEFAULT_TTL) -> ResponseStore:
    """The (not yet started) store for `url`; None or "" means the SQLite default. Call `await store.start()`."""
    url = url or os.environ.get("TRANSFORMERS_RESPONSES_STORE") or default_url()
    return backend_class(url)(url, ttl=ttl)
