"""Routes: the FastAPI router of the Responses API and `mount`, the `transformers.serve` entry point.

`mount` is called by the seam once the host has built its app: it opens the response store, removes the host's
`POST /v1/responses` and adds ours — create, retrieve (and replay a background stream), delete, cancel, input items,
input token counts, compact (`compaction`) — plus the Conversations API (`conversations`). Every route reads its own
body and answers errors itself in the OpenAI envelope (through `errors`), so the host's other routes and their error
formats are left exactly as they were.
"""


import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from .errors import InvalidRequestError, NotFoundError, ServerError, from_exception
from .state import TERMINAL_EVENTS
from .store.base import UNFINISHED

logger = logging.getLogger("transformers_responses")

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
KEEPALIVE = ": keep-alive\n\n"
REPLAY_WAIT = 15.0


def mount(app: Any, *, model_manager: Any, generation_state: Any, chat_template_kwargs: dict[str, Any] | None = None,
          options: dict[str, Any] | None = None, **_: Any) -> None:
    """Entry point of group `transformers.serve`: serve our Responses API on the host's app."""
    options = options or {}
    if not options.get("enable_responses", True):
        return
    from .background import Runner
    from .conversations import build_conversations_router
    from .handler import ResponsesHandler
    from .seam import add_lifespan, remove_route
    from .state import State
    from .store import DEFAULT_TTL, open_store
    from .validation import request_schema
    from .websocket import build_websocket_router

    _log_to_stderr()
    request_schema()  # resolve the openai type hints now, not on the first request
    ttl = options["responses_ttl"] if "responses_ttl" in options else DEFAULT_TTL  # None: kept forever
    store = open_store(options.get("responses_store") or None, ttl=ttl)
    state = State(store)
    runner = Runner(state)
    handler = ResponsesHandler(model_manager, generation_state, chat_template_kwargs,
                               tool_call_parser=options.get("tool_call_parser") or "auto", state=state)
    add_lifespan(app, runner.start, runner.stop)
    remove_route(app, "/v1/responses", "POST")
    app.include_router(build_router(handler, runner))
    app.include_router(build_conversations_router(state))
    app.include_router(build_websocket_router(handler, runner))
    logger.info("transformers-responses: serving the Responses API on /v1/responses (store: %s)",
                store.url.split("@")[-1])


def _log_to_stderr() -> None:
    """Our INFO lines (store, fallbacks to the sequential path, recovery) in the server's output, like uvicorn's."""
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def error_response(exc: BaseException) -> Any:
    from fastapi.responses import JSONResponse

    err = from_exception(exc)
    if err.status_code >= 500:
        logger.error("request failed: %s", err.message, exc_info=exc if not isinstance(exc, ServerError) else None)
    return JSONResponse(err.body(), status_code=err.status_code)


async def read_json(request: Any) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidRequestError(
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP "
            "library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)",
            code="invalid_json") from None


def list_params(request: Any) -> dict[str, Any]:
    """`limit` (1–100, default 20), `order` (`asc`|`desc`, default `desc`), `after`, as list endpoints take them."""
    query = request.query_params
    try:
        limit = int(query.get("limit", 20))
    except ValueError:
        raise InvalidRequestError("Invalid 'limit': expected an integer.", param="limit", code="invalid_type") from None
    if not 1 <= limit <= 100:
        raise InvalidRequestError(f"Invalid 'limit': expected a value between 1 and 100, but got {limit}.",
                                  param="limit", code="invalid_value")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequestError(f"Invalid 'order': expected 'asc' or 'desc', but got {order!r}.", param="order",
                                  code="invalid_value")
    return {"limit": limit, "order": order, "after": query.get("after")}


def include_params(request: Any) -> None:
    from .fields import check_include

    values = request.query_params.getlist("include[]") + request.query_params.getlist("include")
    check_include(values)


def sse(frames: AsyncIterator[str]) -> Any:
    from fastapi.responses import StreamingResponse

    return StreamingResponse(frames, media_type="text/event-stream", headers=SSE_HEADERS)


def build_router(handler: Any, runner: Any) -> Any:
    from fastapi import APIRouter, Request
    from fastapi.responses import JSONResponse

    from .events import DONE_FRAME, Sequencer

    router = APIRouter()
    state = runner.state
    store = state.store

    async def stored(response_id: str) -> Any:
        record = await store.get_response(response_id)
        if record is None:
            raise NotFoundError(f"Response with id '{response_id}' not found.", param="response_id")
        return record

    @router.post("/v1/responses")
    async def create_response(request: Request) -> Any:
        try:
            body = await read_json(request)
            prep = await handler.prepare(body)
            if body.get("background"):
                snapshot = {**prep.snapshot, "status": "queued"}
                record = state.record_for(prep.body, snapshot, prep.context)
                try:
                    await state.begin(record)
                except BaseException:
                    prep.controls.done()  # it will never run: free its grammar slot
                    raise
                runner.launch(record, handler.run(prep), prep.request_stop)
                if body.get("stream"):
                    return sse(replay(store, record.id, -1))
                return JSONResponse(snapshot)
        except Exception as exc:
            return error_response(exc)
        try:
            record = await state.open(prep.body, prep.snapshot, prep.context)
        except Exception as exc:
            prep.controls.done()
            return error_response(exc)
        events = state.recorded(prep.body, prep.snapshot, prep.context, handler.run(prep), record=record)
        if body.get("stream"):
            return sse(_sse(events, Sequencer(), DONE_FRAME, on_close=prep.controls.done))
        try:
            final = await _collect(events, request)
        except Exception as exc:
            return error_response(exc)
        finally:
            prep.controls.done()  # a response that never started generating holds its grammar slot till here
        if final is None:  # the client went away; nobody is listening
            return JSONResponse({}, status_code=499)
        if final["status"] == "failed":
            return JSONResponse(ServerError(final["error"]["message"]).body(), status_code=500)
        return JSONResponse(final)

    @router.post("/v1/responses/input_tokens")
    async def input_tokens(request: Request) -> Any:
        from .validation import input_tokens_schema, validate_body

        try:
            body = await read_json(request)
            validate_body(body, input_tokens_schema())
            if not body.get("model"):
                forced = handler.model_manager.force_model
                if forced is None:
                    raise InvalidRequestError("Missing required parameter: 'model'.", param="model",
                                              code="missing_required_parameter")
                body = {**body, "model": forced}
            count = await handler.count_input_tokens(body)
        except Exception as exc:
            return error_response(exc)
        return JSONResponse({"object": "response.input_tokens", "input_tokens": count})

    # Before the `/v1/responses/{response_id}` routes, so that no path parameter is ever matched against "compact".
    @router.post("/v1/responses/compact")
    async def compact(request: Request) -> Any:
        from .compaction import compact as compact_conversation

        try:
            body = await read_json(request)
            compacted = await compact_conversation(handler, body, lambda events: _collect(events, request))
        except Exception as exc:
            return error_response(exc)
        if compacted is None:  # the client went away; nobody is listening
            return JSONResponse({}, status_code=499)
        return JSONResponse(compacted)

    @router.get("/v1/responses/{response_id}")
    async def retrieve(response_id: str, request: Request) -> Any:
        try:
            include_params(request)
            record = await stored(response_id)
            if request.query_params.get("stream", "false").lower() != "true":
                return JSONResponse(record.response)
            if not record.response.get("background"):
                raise InvalidRequestError("Only background responses can be streamed again; retrieve this one "
                                          "without `stream`.", param="stream")
            after = request.query_params.get("starting_after")
            try:
                start = int(after) if after is not None else -1
            except ValueError:
                raise InvalidRequestError("Invalid 'starting_after': expected an integer.", param="starting_after",
                                          code="invalid_type") from None
        except Exception as exc:
            return error_response(exc)
        return sse(replay(store, response_id, start))

    @router.delete("/v1/responses/{response_id}")
    async def delete(response_id: str) -> Any:
        try:
            record = await stored(response_id)
            if record.response.get("background") and record.status in ("queued", "in_progress"):
                await _cancel(record)
            await store.delete_response(response_id)
        except Exception as exc:
            return error_response(exc)
        return JSONResponse({"id": response_id, "object": "response", "deleted": True})

    async def _cancel(record: Any) -> dict[str, Any]:
        cancelled = {**record.response, "status": "cancelled"}
        if await store.update_response(record.id, cancelled, only_if_status=("queued", "in_progress")):
            # Stops the generation on whichever replica runs it (this one included, through its listener).
            await store.publish_cancel(record.id)
            runner.cancel_local(record.id)
            return cancelled
        current = await store.get_response(record.id)
        return current.response if current is not None else cancelled

    @router.post("/v1/responses/{response_id}/cancel")
    async def cancel(response_id: str) -> Any:
        try:
            record = await stored(response_id)
            if not record.response.get("background"):
                raise InvalidRequestError("Only responses created with background=true can be cancelled.",
                                          param="response_id")
            # Cancelling a finished background response is a no-op that answers the response as it is.
            response = await _cancel(record) if record.status in ("queued", "in_progress") else record.response
        except Exception as exc:
            return error_response(exc)
        return JSONResponse(response)

    @router.get("/v1/responses/{response_id}/input_items")
    async def input_items(response_id: str, request: Request) -> Any:
        try:
            params = list_params(request)
            include_params(request)
            await stored(response_id)
            page = await store.list_items(response_id, **params)
        except Exception as exc:
            return error_response(exc)
        return JSONResponse(page.body())

    return router


async def replay(store: Any, response_id: str, after: int) -> AsyncIterator[str]:
    """A background response's stored events after `after`, as they are written (on any replica), then `[DONE]`."""
    from .events import DONE_FRAME, frame

    last = after
    while True:
        events = await store.read_events(response_id, last)
        if not events:
            record = await store.get_response(response_id)
            if record is None:  # deleted (or expired): nothing more will come
                yield DONE_FRAME
                return
            if record.status in UNFINISHED:
                events = await store.read_events(response_id, last, wait=REPLAY_WAIT)
                if not events:
                    yield KEEPALIVE
                    continue
            else:
                # Finished, yet no terminal event after `last`: it is on its way (committed just before it is
                # appended), or the client resumed after it, or the response was ended without one (crash recovery
                # before any event, a cancel whose replica was gone). Never wait forever.
                events = await store.read_events(response_id, last, wait=1.0)
                if not events:
                    if not any(e["type"] in TERMINAL_EVENTS for e in await store.read_events(response_id, -1)):
                        yield frame({"type": f"response.{record.status}", "response": record.response,
                                     "sequence_number": last + 1})
                    yield DONE_FRAME
                    return
        for event in events:
            yield frame(event)
            last = event["sequence_number"]
            if event["type"] in TERMINAL_EVENTS:
                yield DONE_FRAME
                return


async def _sse(events: AsyncIterator[dict[str, Any]], seq: Any, done: str,
               on_close: Any = None) -> AsyncIterator[str]:
    """One SSE block per event, in one write each, then `[DONE]`. Closing us (a disconnect) closes generation."""
    try:
        async for event in events:
            yield seq.frame(event)
        yield done
    finally:
        await events.aclose()  # type: ignore[attr-defined]
        if on_close is not None:
            on_close()


async def _collect(events: AsyncIterator[dict[str, Any]], request: Any) -> dict[str, Any] | None:
    """Run a response to its end for a non-streaming request; stop generating if the client disconnects."""
    final: dict[str, Any] | None = None

    async def consume() -> None:
        nonlocal final
        async for event in events:
            if event["type"] in TERMINAL_EVENTS:
                final = event["response"]

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    work, watch = asyncio.create_task(consume()), asyncio.create_task(disconnected())
    try:
        done, _ = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if work not in done:
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        await events.aclose()  # type: ignore[attr-defined]
        return None
    work.result()
    return final
