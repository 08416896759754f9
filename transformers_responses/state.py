"""Conversation state: what the model sees before this input, and what of this response is kept.

`State` sits between the handler and the store:

* `resolve` turns a request into its context — the items of the `previous_response_id` chain (each response's input
  then its output, oldest first; `instructions` are not inherited) or of the `conversation` — plus this request's
  input with every `item_reference` resolved and every item given an id;
* `recorded` wraps a response's event stream so that a stored response is written when it starts (`in_progress`,
  owned by this replica, for crash recovery) and committed — with its conversation's new items — *before* its
  terminal event is let through; `store: false` writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any

from . import events as ev
from .errors import InvalidRequestError, NotFoundError
from .items import stored_items
from .normalizer import input_items
from .store.base import UNFINISHED, ResponseRecord, ResponseStore, new_owner

logger = logging.getLogger("transformers_responses")

Json = dict[str, Any]

TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed", "response.cancelled"})
TERMINAL_STATUSES = ("completed", "incomplete", "failed", "cancelled")


@dataclass
class Context:
    """What a request adds to the model's view: earlier items, then its own input (ids assigned, references
    resolved)."""

    history: list[Json] = field(default_factory=list)
    input: list[Json] = field(default_factory=list)
    conversation_id: str | None = None
    previous_response_id: str | None = None


def conversation_id_of(body: Json) -> str | None:
    conv = body.get("conversation")
    if conv is None:
        return None
    return conv if isinstance(conv, str) else conv.get("id")


class State:
    """The store as the handler uses it; one per server."""

    def __init__(self, store: ResponseStore, owner: str | None = None) -> None:
        self.store = store
        self.owner = owner or new_owner()
        self._pending: set[asyncio.Task[Any]] = set()

    # ---- reading ----

    async def resolve(self, body: Json) -> Context:
        """The context of a request; 400s name the field at fault."""
        previous = body.get("previous_response_id")
        conversation_id = conversation_id_of(body)
        if previous and conversation_id:
            raise InvalidRequestError("Mutually exclusive parameters: 'previous_response_id' and 'conversation'. "
                                      "Use one of them to carry state.", param="conversation",
                                      code="mutually_exclusive_parameters")
        ctx = Context(conversation_id=conversation_id, previous_response_id=previous)
        if previous:
            ctx.history = await self._chain_items(previous)
        elif conversation_id:
            if await self.store.get_conversation(conversation_id) is None:
                raise NotFoundError(f"Conversation with id '{conversation_id}' not found.", param="conversation",
                                    code="conversation_not_found")
            ctx.history = await self.store.all_items(conversation_id)
        ctx.input = stored_items(await self.resolve_references(input_items(body)))
        return ctx

    async def _chain_items(self, previous: str) -> list[Json]:
        chain = await self.store.chain(previous)
        if not chain:
            raise InvalidRequestError(f"Previous response with id '{previous}' not found.",
                                      param="previous_response_id", code="previous_response_not_found")
        if chain[-1].status in UNFINISHED:
            raise InvalidRequestError(
                f"Previous response with id '{previous}' is still {chain[-1].status}; wait until it has finished "
                "(poll GET /v1/responses/{id}) before continuing it.", param="previous_response_id",
                code="previous_response_not_finished")
        items: list[Json] = []
        for record in chain:
            items.extend(record.request.get("input") or [])
            items.extend(record.response.get("output") or [])
        return items

    async def resolve_references(self, items: list[Json], path: str = "input") -> list[Json]:
        """`item_reference` items replaced by the stored items they name (404-style 400 when missing)."""
        out = []
        for i, item in enumerate(items):
            if item.get("type") == "item_reference" or (set(item) == {"id"}):
                found = await self.store.find_item(item["id"])
                if found is None:
                    raise InvalidRequestError(f"Item with id '{item['id']}' not found.", param=f"{path}[{i}]",
                                              code="item_not_found")
                out.append(found)
            else:
                out.append(item)
        return out

    # ---- writing ----

    def record_for(self, body: Json, snapshot: Json, ctx: Context) -> ResponseRecord:
        request = {k: v for k, v in body.items() if k != "input"}
        request["input"] = ctx.input
        return ResponseRecord(id=snapshot["id"], response=snapshot, request=request,
                              previous_response_id=ctx.previous_response_id, conversation_id=ctx.conversation_id,
                              owner=self.owner, created_at=snapshot["created_at"], expires_at=self.store.expiry())

    async def begin(self, record: ResponseRecord) -> None:
        await self.store.put_response(record, record.request["input"])

    async def commit(self, record: ResponseRecord, final: Json) -> Json | None:
        """Write the final snapshot unless the response was cancelled meanwhile; return what is stored (None when
        it was deleted meanwhile)."""
        only_if = UNFINISHED if final["status"] != "cancelled" else (*UNFINISHED, "cancelled")
        if await self.store.update_response(record.id, final, only_if_status=only_if, owner=None):
            if record.conversation_id and await self.store.get_conversation(record.conversation_id) is not None:
                await self.store.add_items(record.conversation_id,
                                           [*record.request["input"], *final.get("output", [])])
            return final
        stored = await self.store.get_response(record.id)
        return stored.response if stored is not None else None

    async def open(self, body: Json, snapshot: Json, ctx: Context) -> ResponseRecord | None:
        """Write a stored response as started (None for `store: false`): before any byte of the answer is sent, so
        a store failure is still an HTTP error."""
        if body.get("store", True) is False:
            return None
        record = self.record_for(body, snapshot, ctx)
        await self.begin(record)
        return record

    async def recorded(self, body: Json, snapshot: Json, ctx: Context, events: AsyncIterator[Json], *,
                       record: ResponseRecord | None = None) -> AsyncIterator[Json]:
        """Pass `events` through, persisting the response around them (see the module docstring); `record` is the
        one `open` wrote already, else it is written here."""
        if body.get("store", True) is False:
            try:
                async for event in events:
                    yield event
            finally:
                await events.aclose()  # type: ignore[attr-defined]
            return
        if record is None:
            record = self.record_for(body, snapshot, ctx)
            await self.begin(record)
        finished = False
        try:
            async for event in events:
                if event["type"] in TERMINAL_EVENTS:
                    stored = await self.commit(record, event["response"])
                    finished = True
                    if stored is not None and stored["status"] != event["response"]["status"]:
                        event = ev.response_event(stored["status"], stored)
                yield event
        finally:
            if not finished:  # the client went away mid-response: generation stopped, say so in the store
                final = {**record.response, "status": "cancelled"}
                self.spawn(self.store.update_response(record.id, final, only_if_status=UNFINISHED, owner=None))
            await events.aclose()  # type: ignore[attr-defined]  # stop generating now, not when collected

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a store write to completion even if the request that caused it is being cancelled."""
        task = asyncio.get_running_loop().create_task(coro)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def drain(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
