"""Routes: the FastAPI router of the Responses API and `mount`, the `transformers.serve` entry point.

`mount` is called by the seam once the host has built its app: it removes the host's `POST /v1/responses` and adds
ours. Every route reads its own body and answers errors itself in the OpenAI envelope (through `errors`), so the
host's other routes and their error formats are left exactly as they were.
"""


import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from .errors import InvalidRequestError, ServerError, from_exception

logger = logging.getLogger("transformers_responses")

TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def mount(app: Any, *, model_manager: Any, generation_state: Any, chat_template_kwargs: dict[str, Any] | None = None,
          options: dict[str, Any] | None = None, **_: Any) -> None:
    """Entry point of group `transformers.serve`: serve our Responses API on the host's app."""
    options = options or {}
    if not options.get("enable_responses", True):
        return
    from .handler import ResponsesHandler
    from .seam import remove_route
    from .validation import request_schema

    request_schema()  # resolve the openai type hints now, not on the first request
    handler = ResponsesHandler(model_manager, generation_state, chat_template_kwargs,
                               tool_call_parser=options.get("tool_call_parser") or "auto")
    remove_route(app, "/v1/responses", "POST")
    app.include_router(build_router(handler))
    logger.info("transformers-responses: serving the Responses API on /v1/responses")


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


def build_router(handler: Any) -> Any:
    from fastapi import APIRouter, Request
    from fastapi.responses import JSONResponse, StreamingResponse

    from .events import DONE_FRAME, Sequencer

    router = APIRouter()

    @router.post("/v1/responses")
    async def create_response(request: Request) -> Any:
        try:
            body = await read_json(request)
            prep = await handler.prepare(body)
        except Exception as exc:
            return error_response(exc)
        if body.get("stream"):
            return StreamingResponse(_sse(handler.run(prep), Sequencer(), DONE_FRAME), media_type="text/event-stream",
                                     headers=SSE_HEADERS)
        try:
            final = await _collect(handler.run(prep), request)
        except Exception as exc:
            return error_response(exc)
        if final is None:  # the client went away; nobody is listening
            return JSONResponse({}, status_code=499)
        if final["status"] == "failed":
            return JSONResponse(ServerError(final["error"]["message"]).body(), status_code=500)
        return JSONResponse(final)

    return router


async def _sse(events: AsyncIterator[dict[str, Any]], seq: Any, done: str) -> AsyncIterator[str]:
    """One SSE block per event, in one write each, then `[DONE]`. Closing us (a disconnect) closes generation."""
    try:
        async for event in events:
            yield seq.frame(event)
        yield done
    finally:
        await events.aclose()  # type: ignore[attr-defined]


async def _collect(events: AsyncIterator[dict[str, Any]], request: Any) -> dict[str, Any] | None:
    """Run a response to its end for a non-streaming request; stop generating if the client disconnects."""
    final: dict[str, Any] | None = None

    async def consume() -> None:
        nonlocal final
        async for event in events:
            if event["type"] in TERMINAL:
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
