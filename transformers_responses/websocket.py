"""WebSocket mode: `ws://HOST/v1/responses`, one persistent connection carrying many turns.

This module owns the WebSocket transport of the Responses API, as the openai SDK's `client.responses.connect()`
speaks it:

* the client sends one JSON text message per turn, `{"type": "response.create", ...create params}`; `stream` is
  implicit (ignored if sent), `background` is refused, `stream_id` (a lane) is echoed on the turn's events, and
  `generate: false` prepares a turn (validation, context, prompt) without generating: an empty `completed` response
  whose id can be continued;
* each turn answers the same events as the SSE stream, one JSON text message each, numbered from 0 by a `Sequencer`
  per turn, ending with `response.completed` / `incomplete` / `failed`; turns run one at a time, in arrival order;
* a bad turn (invalid request, unknown `previous_response_id`, ...) answers one `error` event in the WebSocket shape
  `{"type": "error", "status": 400, "error": {"type", "code", "message", "param"}}` and the connection stays open;
* connection-local state: responses created with `store: false` are kept in memory (bounded, `MAX_LOCAL_RESPONSES`)
  for the life of the connection, so `previous_response_id` can continue them on the same connection only;
* closing the socket (either side) stops the turn being generated: no generation outlives its connection.

Turns reuse `ResponsesHandler.prepare` / `run` and `State.recorded`, exactly as `POST /v1/responses` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect

from . import events as ev
from .emitter import Assembler
from .errors import InvalidRequestError, ResponsesError, UnsupportedError, from_exception
from .state import TERMINAL_EVENTS, Context, State
from .store.base import ResponseRecord
from .store.memory import MemoryStore

if TYPE_CHECKING:
    from .background import Runner
    from .handler import Prepared, ResponsesHandler

logger = logging.getLogger("transformers_responses")

Json = dict[str, Any]

MAX_LOCAL_RESPONSES = 256  # `store: false` responses a connection keeps for continuation (least recently used go)
MAX_PENDING = 32  # turns a connection may queue behind the one running
CREATE = "response.create"
_ENVELOPE = ("type", "stream_id", "stream", "generate")  # WebSocket-only fields, not part of the create body


def build_websocket_router(handler: ResponsesHandler, runner: Runner) -> APIRouter:
    """The `/v1/responses` WebSocket route, serving turns with `handler` over the store of `runner.state`."""
    router = APIRouter()

    @router.websocket("/v1/responses")
    async def responses_socket(websocket: WebSocket) -> None:
        await websocket.accept()
        await Connection(websocket, handler, runner.state).serve()

    return router


class ConnectionState(State):
    """The server's `State`, plus this connection's unstored responses for `previous_response_id`.

    Only `resolve` differs: an id the shared store does not know is looked up in the connection's memory store, and
    once the connection holds unstored responses a chain is followed across both stores (a `store: false` turn may
    continue a stored one, and the other way round).
    """

    def __init__(self, shared: State, local: MemoryStore) -> None:
        super().__init__(shared.store, owner=shared.owner)
        self.local = local
        self.remembered = 0

    async def resolve(self, body: Json) -> Context:
        previous = body.get("previous_response_id")
        try:
            ctx = await super().resolve(body)
        except InvalidRequestError as exc:
            if exc.code != "previous_response_not_found" or not previous or \
                    await self.local.get_response(previous) is None:
                raise
            # This input (ids assigned, item references resolved); the history follows.
            ctx = await super().resolve({k: v for k, v in body.items() if k != "previous_response_id"})
            ctx.previous_response_id = previous
        else:
            if not previous or not self.remembered:
                return ctx
        ctx.history = await self._history(previous)
        return ctx

    async def _history(self, previous: str) -> list[Json]:
        """The items of the chain ending at `previous`, oldest first, its links in either store."""
        records: list[ResponseRecord] = []
        current: str | None = previous
        seen: set[str] = set()
        while current is not None and current not in seen:
            seen.add(current)
            chain = await self.local.chain(current) or await self.store.chain(current)
            if not chain:
                break
            records[:0] = chain
            current = chain[0].previous_response_id
        items: list[Json] = []
        for record in records:
            items.extend(record.request.get("input") or [])
            items.extend(record.response.get("output") or [])
        return items

    async def remember(self, body: Json, ctx: Context, final: Json) -> None:
        """Keep a finished `store: false` response for continuation on this connection."""
        record = self.record_for(body, final, ctx)
        await self.local.put_response(record, record.request["input"])
        self.remembered += 1


class Connection:
    """One WebSocket connection: a reader (messages in, disconnect detection) and a worker running turns in order."""

    def __init__(self, websocket: WebSocket, handler: ResponsesHandler, state: State) -> None:
        self.websocket = websocket
        self.shared = state
        self.state = ConnectionState(state, MemoryStore(f"memory://?max_responses={MAX_LOCAL_RESPONSES}", ttl=None))
        # The server's handler, seeing this connection's unstored responses (it shares everything else).
        self.handler = handler
        self.pending: asyncio.Queue[str | bytes] = asyncio.Queue()
        self._send_lock = asyncio.Lock()

    async def serve(self) -> None:
        reader = asyncio.create_task(self._read())
        worker = asyncio.create_task(self._work())
        try:
            done, _ = await asyncio.wait({reader, worker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, worker):
                task.cancel()
            await asyncio.gather(reader, worker, return_exceptions=True)
        failure = next((t.exception() for t in done if not t.cancelled() and t.exception() is not None), None)
        if failure is not None and not _is_disconnect(failure):
            logger.error("websocket connection failed", exc_info=failure)
            with contextlib.suppress(Exception):
                await self.websocket.close(code=1011)

    # ---- reading ----

    async def _read(self) -> None:
        """Queue each message for the worker until the client goes away (which ends the connection)."""
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("text")
            if data is None:
                data = message.get("bytes") or b""
            if self.pending.qsize() >= MAX_PENDING:
                await self._send(_error_message(InvalidRequestError(
                    f"Too many queued turns on this connection (at most {MAX_PENDING} wait behind the running one); "
                    "wait for a terminal event before sending more.", code="too_many_pending_requests"), None))
                continue
            self.pending.put_nowait(data)

    # ---- turns ----

    async def _work(self) -> None:
        while True:
            data = await self.pending.get()
            await self._turn(data)

    async def _turn(self, data: str | bytes) -> None:
        stream_id: str | None = None
        try:
            message = _parse(data)
            stream_id = message.get("stream_id") if isinstance(message.get("stream_id"), str) else None
            body, generate = _create_body(message)
            prep = await self.handler.prepare(body, state=self.state)
        except Exception as exc:
            await self._send(_error_message(exc, stream_id))
            return
        source = self.handler.run(prep) if generate else _prepared_only(prep)
        events = self.shared.recorded(prep.body, prep.snapshot, prep.context, source)
        seq = ev.Sequencer()
        try:
            async for event in events:
                if event["type"] == "error":
                    event = _stream_error(event)
                elif event["type"] in TERMINAL_EVENTS and prep.body.get("store", True) is False:
                    await self.state.remember(prep.body, prep.context, event["response"])
                if stream_id is not None:
                    event["stream_id"] = stream_id
                await self._send(seq.number(event))
        finally:
            await events.aclose()  # type: ignore[attr-defined]  # a closed socket stops generation here

    async def _send(self, event: Json) -> None:
        async with self._send_lock:
            await self.websocket.send_text(_dumps(event))


# ---- messages ----

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _parse(data: str | bytes) -> Json:
    try:
        message = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidRequestError("We could not parse the JSON of your message: each message must be one JSON "
                                  "object such as {\"type\": \"response.create\", ...}.", code="invalid_json") from None
    if not isinstance(message, dict):
        raise InvalidRequestError("Each message must be a JSON object with a 'type'.", param="type",
                                  code="invalid_type")
    kind = message.get("type")
    if kind == "response.steer":
        raise UnsupportedError("'response.steer' is not supported by this server; send the input in the next "
                               "'response.create' with 'previous_response_id'.", param="type")
    if kind != CREATE:
        raise InvalidRequestError(f"Invalid 'type': expected {CREATE!r}, but got {kind!r}.", param="type",
                                  code="invalid_value")
    return message


def _create_body(message: Json) -> tuple[Json, bool]:
    """The `POST /v1/responses` body of a `response.create` message, and whether to generate."""
    if message.get("background"):
        raise UnsupportedError("'background' is not supported in WebSocket mode; create background responses with "
                               "POST /v1/responses.", param="background")
    generate = message.get("generate", True)
    if not isinstance(generate, bool) and generate is not None:
        raise InvalidRequestError("Invalid type for 'generate': expected a boolean.", param="generate",
                                  code="invalid_type")
    stream_id = message.get("stream_id")
    if stream_id is not None and not isinstance(stream_id, str):
        raise InvalidRequestError("Invalid type for 'stream_id': expected a string.", param="stream_id",
                                  code="invalid_type")
    body = {k: v for k, v in message.items() if k not in _ENVELOPE}
    body.pop("background", None)
    return body, generate is not False


def _error_message(exc: BaseException, stream_id: str | None) -> Json:
    """The WebSocket `error` event for a turn refused before it started (the HTTP error, as an event)."""
    err: ResponsesError = from_exception(exc)
    if err.status_code >= 500:
        logger.error("websocket turn failed: %s", err.message, exc_info=exc)
    event: Json = {"type": "error", "status": err.status_code,
                   "error": {"type": err.error_type, "code": err.code, "message": err.message, "param": err.param}}
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event


def _stream_error(event: Json) -> Json:
    """The SSE `error` event (flat) in the WebSocket shape (nested under `error`); `response.failed` follows it."""
    return {"type": "error", "error": {"type": "server_error", "code": event.get("code"),
                                       "message": event.get("message"), "param": event.get("param")}}


async def _prepared_only(prep: Prepared) -> AsyncIterator[Json]:
    """`generate: false`: the response is created and completed with no output; its id can be continued."""
    assembler = Assembler(prep.snapshot)
    try:
        for event in assembler.start():
            yield event
        for event in assembler.finish("completed", ev.usage(prep.input_tokens, 0, 0)):
            yield event
    finally:
        prep.controls.done()


def _is_disconnect(exc: BaseException) -> bool:
    return isinstance(exc, (WebSocketDisconnect, OSError)) or (
        isinstance(exc, RuntimeError) and "websocket" in str(exc).lower())
