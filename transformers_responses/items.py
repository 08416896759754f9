"""Stored items: input items as the API lists them back — each with an `id` and a `status`, content as parts.

Pure functions. A request's input may be a bare string, easy messages (`{role, content: "…"}`) or full items; what
is stored (for `GET /v1/responses/{id}/input_items`, conversation items and the context of a later turn) is always the
full item form the openai types describe, so every reader sees one shape.
"""

from __future__ import annotations

from typing import Any

from . import events as ev

Json = dict[str, Any]

_ID_PREFIX = {
    "message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs",
    "custom_tool_call": "ctc", "custom_tool_call_output": "ctco",
}


def stored_item(item: Json) -> Json:
    """One input item in its stored form: typed, with an id and status; string message content as one part."""
    kind = item.get("type") or ("message" if "role" in item else "item_reference")
    out: Json = {**item, "type": kind}
    if kind == "message":
        content = item["content"]
        if isinstance(content, str):
            part_type = "output_text" if item["role"] == "assistant" else "input_text"
            content = [{"type": part_type, "text": content}]
        out["content"] = [_full_part(p) for p in content]
    out.setdefault("id", ev.new_id(_ID_PREFIX.get(kind, "item")))
    if kind != "reasoning" or "status" in item:
        out.setdefault("status", "completed")
    return out


def _full_part(part: Json) -> Json:
    if part.get("type") == "output_text":
        return {"annotations": [], "logprobs": [], **part}
    return dict(part)


def stored_items(items: list[Json]) -> list[Json]:
    return [stored_item(i) for i in items]
