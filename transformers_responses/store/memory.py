"""`memory://` — a bounded in-process store (LRU over responses + TTL), for tests and throwaway servers.

Nothing survives the process and nothing is shared with another one. `memory://?max_responses=N` bounds it (default
10,000 responses); the least recently used response is evicted with its items and events when full. Conversations are
bounded by the same number, oldest first.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import parse_qs, urlparse

from .base import (
    DEFAULT_TTL, HEARTBEAT_TTL, ORPHAN_ERROR, UNFINISHED, Json, Page, ResponseRecord, ResponseStore, orphan_event, output_scope,
    owner_alive,
)


class MemoryStore(ResponseStore):
    schemes = ("memory",)

    def __init__(self, url: str = "memory://", *, ttl: float | None = DEFAULT_TTL) -> None:
        super().__init__(url, ttl=ttl)
        query = parse_qs(urlparse(url).query)
        self.max_responses = int(query.get("max_responses", ["10000"])[0])
        self._responses: OrderedDict[str, Json] = OrderedDict()
        self._scopes: dict[str, OrderedDict[str, Json]] = {}
        self._events: dict[str, list[Json]] = {}
        self._conversations: OrderedDict[str, Json] = OrderedDict()
        self._heartbeats: dict[str, float] = {}
        self._changed = asyncio.Condition()
        self._cancels: list[asyncio.Queue[str]] = []

    # ---- responses ----

    async def put_response(self, record: ResponseRecord, input_items: Sequence[Json] | None = None) -> None:
        if record.expires_at is None and self.ttl is not None:
            record.expires_at = self.expiry()
        self._responses[record.id] = copy.deepcopy(record.to_json())
        self._responses.move_to_end(record.id)
        if input_items is not None:
            self._scopes[record.id] = OrderedDict((i["id"], copy.deepcopy(i)) for i in input_items)
        self._write_output(record.id, record.response)
        while len(self._responses) > self.max_responses:
            oldest = next(iter(self._responses))
            self._drop(oldest)

    def _write_output(self, response_id: str, response: Json) -> None:
        if response.get("status") not in UNFINISHED:
            self._scopes[output_scope(response_id)] = OrderedDict(
                (i["id"], copy.deepcopy(i)) for i in response.get("output") or [] if "id" in i)

    def _live(self, response_id: str) -> Json | None:
        data = self._responses.get(response_id)
        if data is None:
            return None
        if data["expires_at"] is not None and data["expires_at"] <= time.time():
            self._drop(response_id)
            return None
        self._responses.move_to_end(response_id)
        return data

    async def get_response(self, response_id: str) -> ResponseRecord | None:
        data = self._live(response_id)
        return ResponseRecord.from_json(copy.deepcopy(data)) if data is not None else None

    async def update_response(self, response_id: str, response: Json, *,
                              only_if_status: Sequence[str] | None = None, owner: str | None = None) -> bool:
        data = self._live(response_id)
        if data is None or (only_if_status is not None and data["response"].get("status") not in only_if_status):
            return False
        data["response"] = copy.deepcopy(response)
        data["owner"] = owner
        self._write_output(response_id, response)
        return True

    def _drop(self, response_id: str) -> bool:
        existed = self._responses.pop(response_id, None) is not None
        self._scopes.pop(response_id, None)
        self._scopes.pop(output_scope(response_id), None)
        self._events.pop(response_id, None)
        return existed

    async def delete_response(self, response_id: str) -> bool:
        return self._live(response_id) is not None and self._drop(response_id)

    async def chain(self, response_id: str) -> list[ResponseRecord]:
        out: list[ResponseRecord] = []
        current: str | None = response_id
        seen: set[str] = set()
        while current is not None and current not in seen:
            seen.add(current)
            record = await self.get_response(current)
            if record is None:
                break
            out.append(record)
            current = record.previous_response_id
        return out[::-1]

    # ---- items ----

    async def add_items(self, scope: str, items: Sequence[Json]) -> None:
        target = self._scopes.setdefault(scope, OrderedDict())
        for item in items:
            target[item["id"]] = copy.deepcopy(item)

    async def list_items(self, scope: str, *, limit: int = 20, order: str = "desc", after: str | None = None) -> Page:
        items = list((self._scopes.get(scope) or {}).values())
        if order == "desc":
            items.reverse()
        if after is not None:
            ids = [i["id"] for i in items]
            items = items[ids.index(after) + 1:] if after in ids else []
        return Page(copy.deepcopy(items[:limit]), len(items) > limit)

    async def get_item(self, scope: str, item_id: str) -> Json | None:
        item = (self._scopes.get(scope) or {}).get(item_id)
        return copy.deepcopy(item) if item is not None else None

    async def find_item(self, item_id: str) -> Json | None:
        for scope, items in list(self._scopes.items()):
            if item_id in items and self._scope_live(scope):
                return copy.deepcopy(items[item_id])
        return None

    def _scope_live(self, scope: str) -> bool:
        response_id = scope.split("/", 1)[0]
        return not response_id.startswith("resp_") or self._live(response_id) is not None

    async def delete_item(self, scope: str, item_id: str) -> bool:
        return (self._scopes.get(scope) or {}).pop(item_id, None) is not None

    # ---- events ----

    async def append_events(self, response_id: str, events: Sequence[Json]) -> None:
        if response_id not in self._responses:  # deleted: a late writer adds nothing
            return
        self._events.setdefault(response_id, []).extend(copy.deepcopy(list(events)))
        async with self._changed:
            self._changed.notify_all()

    async def read_events(self, response_id: str, after: int = -1, *, wait: float = 0.0) -> list[Json]:
        def ready() -> list[Json]:
            return [e for e in self._events.get(response_id, []) if e["sequence_number"] > after]

        found = ready()
        if found or wait <= 0:
            return copy.deepcopy(found)
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: bool(ready())), wait)
            except asyncio.TimeoutError:
                pass
        return copy.deepcopy(ready())

    # ---- cancels and liveness ----

    async def publish_cancel(self, response_id: str) -> None:
        for queue in self._cancels:
            queue.put_nowait(response_id)

    async def cancel_requests(self) -> AsyncIterator[str]:  # type: ignore[override]
        queue: asyncio.Queue[str] = asyncio.Queue()
        self._cancels.append(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._cancels.remove(queue)

    async def heartbeat(self, owner: str) -> None:
        self._heartbeats[owner] = time.time() + HEARTBEAT_TTL

    async def fail_orphans(self, error: Json = ORPHAN_ERROR) -> list[str]:
        now = time.time()
        failed = []
        for response_id, data in list(self._responses.items()):
            owner = data.get("owner")
            if data["response"].get("status") in UNFINISHED and not (owner and owner_alive(
                    owner, self._heartbeats.get(owner), now)):
                data["response"] = {**data["response"], "status": "failed", "error": error}
                data["owner"] = None
                events = self._events.get(response_id)
                if events is not None:
                    await self.append_events(response_id, [orphan_event(data["response"], events)])
                failed.append(response_id)
        return failed

    # ---- conversations ----

    async def create_conversation(self, conversation: Json, items: Sequence[Json] = ()) -> None:
        self._conversations[conversation["id"]] = copy.deepcopy(conversation)
        self._scopes[conversation["id"]] = OrderedDict()
        await self.add_items(conversation["id"], items)
        while len(self._conversations) > self.max_responses:
            oldest = next(iter(self._conversations))
            await self.delete_conversation(oldest)

    async def get_conversation(self, conversation_id: str) -> Json | None:
        conv = self._conversations.get(conversation_id)
        return copy.deepcopy(conv) if conv is not None else None

    async def update_conversation(self, conversation_id: str, metadata: Json) -> Json | None:
        conv = self._conversations.get(conversation_id)
        if conv is None:
            return None
        conv["metadata"] = dict(metadata)
        return copy.deepcopy(conv)

    async def delete_conversation(self, conversation_id: str) -> bool:
        self._scopes.pop(conversation_id, None)
        return self._conversations.pop(conversation_id, None) is not None

    async def purge_expired(self) -> int:
        now = time.time()
        expired = [k for k, v in self._responses.items() if v["expires_at"] is not None and v["expires_at"] <= now]
        for response_id in expired:
            self._drop(response_id)
        return len(expired)
