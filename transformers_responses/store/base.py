"""The `ResponseStore` interface: what every store backend keeps, and the rules all of them obey.

A store holds four kinds of thing, all plain JSON-ready dicts:

* **responses** — a `ResponseRecord`: the `Response` object as last known, the request as received, the id of the
  previous response in its chain, the conversation it belongs to, and the replica (`owner`) generating it while it
  is unfinished. Responses expire `ttl` seconds after creation (`expires_at`); expired ones read as missing.
* **items**, in ordered *scopes*: a response's input items (scope = the response id, listed by
  `GET /v1/responses/{id}/input_items`), its output items (scope = `output_scope(id)`, so `item_reference` can find
  them), and a conversation's items (scope = the conversation id). Item ids are unique within a scope; the same item
  may be in several scopes (a response's output appended to its conversation keeps its id).
* **events** of background responses, by `sequence_number`, so a stream can be replayed from any point.
* **conversations** — `{id, object, created_at, metadata}`; they do not expire.

Rules every backend keeps (the contract tests in `tests/test_store.py` check them on all backends):

* every method is safe to call from concurrent tasks and, for the shared backends, concurrent processes; the lock is
  inside the store;
* `update_response(…, only_if_status=…)` is a compare-and-set on the stored status, atomic with the write;
* `delete_response` removes the response, its input and output items and its events;
* `chain(id)` returns the records from the oldest ancestor to `id` following `previous_response_id`; it stops at a
  missing (deleted or expired) ancestor; it is empty when `id` itself is missing;
* `fail_orphans` marks `queued`/`in_progress` responses whose owner replica is gone as `failed` — the crash recovery.

Backends are chosen by URL (`open_store` in `store/__init__.py`); third-party ones register through the
`transformers_responses.stores` entry-point group with the URL scheme as the name.
"""

from __future__ import annotations

import abc
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]

UNFINISHED = ("queued", "in_progress")
DEFAULT_TTL = 30 * 24 * 3600
HEARTBEAT_TTL = 15.0  # seconds a replica is alive for after its last heartbeat

ORPHAN_ERROR: Json = {
    "code": "server_error",
    "message": "The server stopped while generating this response (crash or restart); it was not finished. "
               "Create it again.",
}


def orphan_event(response: Json, events: Sequence[Json]) -> Json:
    """The `response.failed` event that ends the stored event log of a response failed by crash recovery."""
    last = max((e["sequence_number"] for e in events), default=-1)
    return {"type": "response.failed", "response": response, "sequence_number": last + 1}


def output_scope(response_id: str) -> str:
    """The item scope holding a response's output items."""
    return f"{response_id}/output"


def _pid_namespace() -> str:
    """Which pid namespace pids are numbered in: containers sharing a host name do not share pids."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "-"


def new_owner() -> str:
    """This process's replica identity: host, pid and pid namespace (for a local liveness check), and a nonce."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}:{_pid_namespace()}"


def owner_alive(owner: str, heartbeat_expires_at: float | None, now: float) -> bool:
    """Is the replica `owner` still alive? A live heartbeat says yes — unless the owner is a process of this host
    that no longer exists (a restart after `kill -9` recovers at once instead of waiting out the heartbeat)."""
    host, pid_text, _, namespace = (owner.split(":") + ["", "", "", ""])[:4]
    if host == socket.gethostname() and namespace == _pid_namespace() and pid_text.isdigit():
        pid = int(pid_text)
        if pid == os.getpid():
            return heartbeat_expires_at is not None and heartbeat_expires_at > now
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
    return heartbeat_expires_at is not None and heartbeat_expires_at > now


@dataclass
class ResponseRecord:
    """One stored response."""

    id: str
    response: Json  # the Response object as last known; `response["status"]` is the status
    request: Json  # the request body as received, without `input` (the input items are stored as items)
    previous_response_id: str | None = None
    conversation_id: str | None = None
    owner: str | None = None  # the replica generating it while unfinished
    created_at: int = field(default_factory=lambda: int(time.time()))
    expires_at: float | None = None  # None: never

    @property
    def status(self) -> str:
        return str(self.response.get("status"))

    def to_json(self) -> Json:
        return {"id": self.id, "response": self.response, "request": self.request,
                "previous_response_id": self.previous_response_id, "conversation_id": self.conversation_id,
                "owner": self.owner, "created_at": self.created_at, "expires_at": self.expires_at}

    @classmethod
    def from_json(cls, data: Json) -> ResponseRecord:
        return cls(**data)


@dataclass
class Page:
    """One page of a list of items."""

    data: list[Json]
    has_more: bool

    def body(self) -> Json:
        return {"object": "list", "data": self.data, "first_id": self.data[0]["id"] if self.data else None,
                "last_id": self.data[-1]["id"] if self.data else None, "has_more": self.has_more}


class ResponseStore(abc.ABC):
    """A durable home for responses, their items and events, and conversations. All methods are coroutines."""

    #: URL schemes this backend serves (e.g. ("sqlite",)).
    schemes: tuple[str, ...] = ()
    #: True when several server processes can share this store (cancel signals and events cross processes).
    shared: bool = False

    def __init__(self, url: str, *, ttl: float | None = DEFAULT_TTL) -> None:
        self.url = url
        self.ttl = ttl

    def expiry(self, now: float | None = None) -> float | None:
        return None if self.ttl is None else (now or time.time()) + self.ttl

    # ---- lifecycle ----

    async def start(self) -> None:
        """Open connections, create the schema. Called once before any other method."""

    async def close(self) -> None:
        """Release connections. The store is not used after."""

    # ---- responses ----

    @abc.abstractmethod
    async def put_response(self, record: ResponseRecord, input_items: Sequence[Json] | None = None) -> None:
        """Insert or replace a response; with `input_items`, (re)write its input scope too. Output items of a
        finished response are (re)written to its output scope from `record.response["output"]`."""

    @abc.abstractmethod
    async def get_response(self, response_id: str) -> ResponseRecord | None:
        """The record, or None when missing or expired."""

    @abc.abstractmethod
    async def update_response(self, response_id: str, response: Json, *,
                              only_if_status: Sequence[str] | None = None, owner: str | None = None) -> bool:
        """Replace the `Response` object and the owner of a stored record (pass `owner` while it is unfinished:
        an unfinished response without an owner is an orphan to `fail_orphans`); with `only_if_status`, only while
        the stored status is one of those (atomically). Writes the output scope as `put_response` does. True if
        written."""

    @abc.abstractmethod
    async def delete_response(self, response_id: str) -> bool:
        """Remove a response with its items and events. True if it existed."""

    @abc.abstractmethod
    async def chain(self, response_id: str) -> list[ResponseRecord]:
        """Records from the oldest reachable ancestor to `response_id` (see the module docstring)."""

    # ---- items ----

    @abc.abstractmethod
    async def add_items(self, scope: str, items: Sequence[Json]) -> None:
        """Append items (each with an `id`) to a scope, after those already there."""

    @abc.abstractmethod
    async def list_items(self, scope: str, *, limit: int = 20, order: str = "desc", after: str | None = None) -> Page:
        """A page of a scope's items in `order` ("asc": oldest first), starting after item `after` when given."""

    async def all_items(self, scope: str) -> list[Json]:
        """Every item of a scope, oldest first."""
        out: list[Json] = []
        after = None
        while True:
            page = await self.list_items(scope, limit=100, order="asc", after=after)
            out.extend(page.data)
            if not page.has_more or not page.data:
                return out
            after = page.data[-1]["id"]

    @abc.abstractmethod
    async def get_item(self, scope: str, item_id: str) -> Json | None:
        """An item of a scope, or None."""

    @abc.abstractmethod
    async def find_item(self, item_id: str) -> Json | None:
        """An item from any scope (for `item_reference`), or None."""

    @abc.abstractmethod
    async def delete_item(self, scope: str, item_id: str) -> bool:
        """Remove an item from a scope. True if it was there."""

    # ---- background events ----

    @abc.abstractmethod
    async def append_events(self, response_id: str, events: Sequence[Json]) -> None:
        """Append stream events (each with its `sequence_number`) of a background response."""

    @abc.abstractmethod
    async def read_events(self, response_id: str, after: int = -1, *, wait: float = 0.0) -> list[Json]:
        """Events with `sequence_number > after`, in order. When there are none yet and `wait` > 0, wait up to `wait`
        seconds for some to be appended (by this or, for shared stores, any process) before answering."""

    # ---- cancel signals and replica liveness ----

    @abc.abstractmethod
    async def publish_cancel(self, response_id: str) -> None:
        """Ask whichever replica generates `response_id` to stop."""

    @abc.abstractmethod
    def cancel_requests(self) -> AsyncIterator[str]:
        """The ids of responses to stop, as `publish_cancel` is called anywhere, for as long as it is iterated."""

    @abc.abstractmethod
    async def heartbeat(self, owner: str) -> None:
        """Record that replica `owner` is alive for the next `HEARTBEAT_TTL` seconds."""

    @abc.abstractmethod
    async def fail_orphans(self, error: Json = ORPHAN_ERROR) -> list[str]:
        """Mark every unfinished response whose owner is not alive (`owner_alive`) as `failed` with `error`; return
        their ids. Their stored event log gets a terminal `response.failed` event so replays end."""

    # ---- conversations ----

    @abc.abstractmethod
    async def create_conversation(self, conversation: Json, items: Sequence[Json] = ()) -> None:
        """Store a new conversation object (`id`, `created_at`, `metadata`) with its first items."""

    @abc.abstractmethod
    async def get_conversation(self, conversation_id: str) -> Json | None: ...

    @abc.abstractmethod
    async def update_conversation(self, conversation_id: str, metadata: Json) -> Json | None:
        """Replace the metadata; the updated conversation, or None when missing."""

    @abc.abstractmethod
    async def delete_conversation(self, conversation_id: str) -> bool:
        """Remove a conversation and its items. True if it existed."""

    # ---- retention ----

    @abc.abstractmethod
    async def purge_expired(self) -> int:
        """Remove expired responses (with their items and events); return how many."""
