"""Event building: pure functions from values to the plain dicts of the Responses wire format, and the one sequencer.

Builders return JSON-ready dicts shaped exactly like the `openai.types.responses` models (checked by the unit tests
against those models), without constructing pydantic objects: this is the per-token path. `Sequencer` is the only
place that assigns `sequence_number`s and the only place that frames SSE.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

Json = dict[str, Any]

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def new_id(prefix: str) -> str:
    """`resp_…`, `msg_…`, `rs_…`, `fc_…`, `ctc_…`, `call_…`: unique per object."""
    return f"{prefix}_{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


# ---- items ----


def message_item(item_id: str, text: str | None, status: str, logprobs: list[Json] | None = None) -> Json:
    content = [] if text is None else [output_text_part(text, logprobs)]
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def output_text_part(text: str, logprobs: list[Json] | None = None) -> Json:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def reasoning_item(item_id: str, text: str | None, status: str, encrypted_content: str | None = None, *,
                   summary: bool = False) -> Json:
    """`summary`: the reasoning text is also the item's one `summary_text` part (`reasoning.summary` was asked)."""
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    parts = [summary_text_part(text)] if summary and text is not None else []
    return {"id": item_id, "type": "reasoning", "summary": parts, "content": content,
            "encrypted_content": encrypted_content, "status": status}


def summary_text_part(text: str) -> Json:
    return {"type": "summary_text", "text": text}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str, status: str,
                       namespace: str | None = None) -> Json:
    item = {"id": item_id, "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}
    if namespace is not None:
        item["namespace"] = namespace
    return item


def custom_tool_call_item(item_id: str, call_id: str, name: str, input: str, namespace: str | None = None) -> Json:
    item = {"id": item_id, "type": "custom_tool_call", "call_id": call_id, "name": name, "input": input}
    if namespace is not None:
        item["namespace"] = namespace
    return item


def usage(input_tokens: int, output_tokens: int, reasoning_tokens: int, cached_tokens: int = 0) -> Json:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


# ---- stream events (sequence_number is added by the Sequencer) ----


def response_event(kind: str, response: Json) -> Json:
    """`response.created|queued|in_progress|completed|incomplete|failed|cancelled` with a full snapshot."""
    return {"type": f"response.{kind}", "response": response}


def output_item_added(output_index: int, item: Json) -> Json:
    return {"type": "response.output_item.added", "output_index": output_index, "item": item}


def output_item_done(output_index: int, item: Json) -> Json:
    return {"type": "response.output_item.done", "output_index": output_index, "item": item}


def content_part_added(item_id: str, output_index: int, content_index: int, part: Json) -> Json:
    return {"type": "response.content_part.added", "item_id": item_id, "output_index": output_index,
            "content_index": content_index, "part": part}


def content_part_done(item_id: str, output_index: int, content_index: int, part: Json) -> Json:
    return {"type": "response.content_part.done", "item_id": item_id, "output_index": output_index,
            "content_index": content_index, "part": part}


def output_text_delta(item_id: str, output_index: int, delta: str, logprobs: list[Json] | None = None) -> Json:
    return {"type": "response.output_text.delta", "item_id": item_id, "output_index": output_index,
            "content_index": 0, "delta": delta, "logprobs": logprobs or []}


def output_text_done(item_id: str, output_index: int, text: str, logprobs: list[Json] | None = None) -> Json:
    return {"type": "response.output_text.done", "item_id": item_id, "output_index": output_index,
            "content_index": 0, "text": text, "logprobs": logprobs or []}


def reasoning_text_delta(item_id: str, output_index: int, delta: str) -> Json:
    return {"type": "response.reasoning_text.delta", "item_id": item_id, "output_index": output_index,
            "content_index": 0, "delta": delta}


def reasoning_text_done(item_id: str, output_index: int, text: str) -> Json:
    return {"type": "response.reasoning_text.done", "item_id": item_id, "output_index": output_index,
            "content_index": 0, "text": text}


def reasoning_summary_part_added(item_id: str, output_index: int) -> Json:
    return {"type": "response.reasoning_summary_part.added", "item_id": item_id, "output_index": output_index,
            "summary_index": 0, "part": summary_text_part("")}


def reasoning_summary_text_delta(item_id: str, output_index: int, delta: str) -> Json:
    return {"type": "response.reasoning_summary_text.delta", "item_id": item_id, "output_index": output_index,
            "summary_index": 0, "delta": delta}


def reasoning_summary_text_done(item_id: str, output_index: int, text: str) -> Json:
    return {"type": "response.reasoning_summary_text.done", "item_id": item_id, "output_index": output_index,
            "summary_index": 0, "text": text}


def reasoning_summary_part_done(item_id: str, output_index: int, text: str) -> Json:
    return {"type": "response.reasoning_summary_part.done", "item_id": item_id, "output_index": output_index,
            "summary_index": 0, "part": summary_text_part(text)}


def function_call_arguments_delta(item_id: str, output_index: int, delta: str) -> Json:
    return {"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": output_index,
            "delta": delta}


def function_call_arguments_done(item_id: str, output_index: int, name: str, arguments: str) -> Json:
    return {"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": output_index,
            "name": name, "arguments": arguments}


def custom_tool_call_input_delta(item_id: str, output_index: int, delta: str) -> Json:
    return {"type": "response.custom_tool_call_input.delta", "item_id": item_id, "output_index": output_index,
            "delta": delta}


def custom_tool_call_input_done(item_id: str, output_index: int, input: str) -> Json:
    return {"type": "response.custom_tool_call_input.done", "item_id": item_id, "output_index": output_index,
            "input": input}


def error_event(code: str | None, message: str, param: str | None) -> Json:
    return {"type": "error", "code": code, "message": message, "param": param}


# Every event type this server emits; docs/events.md documents each (checked by a test).
EMITTED_EVENT_TYPES = (
    "response.created", "response.in_progress", "response.output_item.added", "response.output_item.done",
    "response.content_part.added", "response.content_part.done", "response.output_text.delta",
    "response.output_text.done", "response.reasoning_text.delta", "response.reasoning_text.done",
    "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done", "response.reasoning_summary_part.done",
    "response.function_call_arguments.delta", "response.function_call_arguments.done",
    "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done", "response.completed",
    "response.incomplete", "response.failed", "response.queued", "response.cancelled", "error",
)


class Sequencer:
    """Numbers events from 0 in the order they are framed, and frames each as one SSE block."""

    __slots__ = ("next",)

    def __init__(self) -> None:
        self.next = 0

    def number(self, event: Json) -> Json:
        event["sequence_number"] = self.next
        self.next += 1
        return event

    def frame(self, event: Json) -> str:
        return frame(self.number(event))


def frame(event: Json) -> str:
    """One SSE block for an already numbered event (a replayed background event keeps its number)."""
    return f"event: {event['type']}\ndata: {_dumps(event)}\n\n"


DONE_FRAME = "data: [DONE]\n\n"
