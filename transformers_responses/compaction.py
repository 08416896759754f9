"""Compaction: `POST /v1/responses/compact` — the model writes a summary of a conversation, sealed for later turns.

The request (`openai.types.responses.ResponseCompactParams`: `model`, `input`, `instructions`,
`previous_response_id`, …) names a conversation the way `POST /v1/responses` does. It is compacted by running the
real model on it through the handler's own path (`ResponsesHandler.prepare` / `run`, so `previous_response_id`,
`item_reference`, sealed reasoning and earlier compaction items resolve exactly as for a response): the history, then
one more user message, `SUMMARY_REQUEST`, asking for a summary to continue from; nothing is stored. The answer's text
is sealed (`sealing.seal_compaction`, AES-GCM under the server secret) into a `compaction` item, and the result is a
`CompactedResponse` whose `output` is, as the openai type describes it, every user message of the conversation
followed by that one item. Sent back as input (or found in stored history), the item is opened again
(`sealing.open_compactions`) and the model sees the summary in its system message (`normalizer`).

The summary's length: at most `SUMMARY_MAX_TOKENS` tokens (fewer when the context leaves less), or the request's
`max_output_tokens` — a server extension of the compact body, sent with the SDK's `extra_body` — which, as on
`POST /v1/responses`, must be ≥ 16 and fit the context with the input (400 `context_length_exceeded` otherwise).
Thinking is turned off for the pass (`reasoning.effort: none`) so that a reasoning model spends its budget on the
summary; only the answer's message text is kept. docs/compaction.md says all of it for clients.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Union

from typing_extensions import TypedDict

from . import events as ev
from . import sealing
from .errors import InvalidRequestError, ServerError
from .fields import ACCEPTED, IMPLEMENTED, REFUSED
from .normalizer import input_items
from .state import Context
from .validation import input_item_type, validate_body

Json = dict[str, Any]
Collect = Callable[[AsyncIterator[Json]], Awaitable[Union[Json, None]]]

SUMMARY_MAX_TOKENS = 1024
SUMMARY_REQUEST = (
    "Summarize the conversation so far so that it can be continued from your summary alone: the user's goals and "
    "requests, what has been done and decided (tool calls and their results included), the facts, names and numbers "
    "that matter, and what is still open. Be concise. Write only the summary."
)

# What this server does with each field of the compact body (docs/compaction.md mirrors it; a test keeps the two and
# `compact_schema` in step), in the vocabulary of `fields.FIELD_POLICY`.
FIELD_POLICY: dict[str, str] = {
    "model": IMPLEMENTED,
    "input": IMPLEMENTED,
    "instructions": IMPLEMENTED,
    "previous_response_id": IMPLEMENTED,
    "max_output_tokens": IMPLEMENTED,
    "prompt_cache_key": ACCEPTED,
    "prompt_cache_retention": ACCEPTED,
    "prompt_cache_options": ACCEPTED,
    "service_tier": ACCEPTED,
    "image": REFUSED,
}
# Every field but `input` goes to the summary pass as it came: `fields.check_supported` refuses `image` there as on
# `POST /v1/responses`, and the rest mean the same on both endpoints.
_FORWARDED = tuple(k for k in FIELD_POLICY if k != "input")


@functools.lru_cache(maxsize=1)
def compact_schema() -> type:
    """`ResponseCompactParams` with the widened input items of `POST /v1/responses` and `max_output_tokens`."""
    from openai.types.responses import response_compact_params as rcp

    hints = dict(typing.get_type_hints(rcp.ResponseCompactParams, include_extras=True))
    hints["input"] = Union[str, list[input_item_type()], None]  # type: ignore[misc]
    hints["max_output_tokens"] = Union[int, None]  # our extension: the summary's budget
    return TypedDict("CompactRequest", hints, total=False)  # type: ignore[operator,no-any-return]


def validate_compact_request(body: Any) -> None:
    """Raise `InvalidRequestError` (param = the path) unless `body` is a valid compact request with a `model`."""
    validate_body(body, compact_schema(), required=("model",))
    if body["model"] is None:
        raise InvalidRequestError("Missing required parameter: 'model'.", param="model",
                                  code="missing_required_parameter")


def summary_request(body: Json) -> Json:
    """The `POST /v1/responses` body of the summary pass: the conversation, then `SUMMARY_REQUEST` as the last user
    message (appended, so errors in the client's items keep their `input[i]` paths)."""
    items = input_items({"input": body.get("input") or []})
    request: Json = {k: body[k] for k in _FORWARDED if k in body}
    request.update({
        "input": [*items, {"type": "message", "role": "user", "content": SUMMARY_REQUEST}],
        "store": False,
        "reasoning": {"effort": "none"},
    })
    return request


def user_messages(context: Context) -> list[Json]:
    """The user messages of the summarized conversation (stored history, then input without `SUMMARY_REQUEST`), as
    message items: the part of `output` that OpenAI keeps verbatim."""
    kept = []
    for item in [*context.history, *context.input[:-1]]:
        if item.get("type") == "message" and item.get("role") == "user":
            kept.append({"id": item["id"], "type": "message", "status": item.get("status") or "completed",
                         "role": "user", "content": item["content"]})
    return kept


def summary_text(response: Json) -> str:
    """The answer's text: every `output_text` part of its message items (reasoning and calls are not summary)."""
    return "".join(part.get("text", "") for item in response.get("output") or [] if item.get("type") == "message"
                   for part in item.get("content") or [] if part.get("type") == "output_text")


def compaction_item(summary: str) -> Json:
    # No `created_by`: a client sends the item back as it got it, and the input type has no such field.
    return {"id": ev.new_id("cmp"), "type": "compaction", "encrypted_content": sealing.seal_compaction(summary)}


def compacted_response(response: Json, kept: list[Json], summary: str) -> Json:
    """The `CompactedResponse` body: every field of the openai type, `usage` that of the summary pass."""
    return {"id": ev.new_id("resp"), "object": "response.compaction", "created_at": ev.now(),
            "output": [*kept, compaction_item(summary)], "usage": response["usage"], "image": None}


async def compact(handler: Any, body: Any, collect: Collect) -> Json | None:
    """`POST /v1/responses/compact`: validate, run the summary pass, answer the `CompactedResponse`. `collect` runs
    the pass's events to its final response (the route's, which stops generating if the client goes away: then
    None)."""
    validate_compact_request(body)
    prep = await handler.prepare(summary_request(body))
    if "max_output_tokens" not in body or body["max_output_tokens"] is None:
        # prepare gave the pass what the context leaves; a summary needs no more than its own budget.
        prep.gen_config.max_new_tokens = min(int(prep.gen_config.max_new_tokens), SUMMARY_MAX_TOKENS)
    try:
        final = await collect(handler.run(prep))
    finally:
        prep.controls.done()  # run frees it too; here for a pass that never started
    if final is None:
        return None
    if final["status"] not in ("completed", "incomplete"):  # incomplete: cut at the budget, still a summary
        error = final.get("error") or {}
        raise ServerError(f"The model failed while writing the summary: {error.get('message', final['status'])}")
    return compacted_response(final, user_messages(prep.context), summary_text(final))
