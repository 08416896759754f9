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
    "custom_tool_call": "ctc", "custom_tool_call_output": "ctco", "compaction": "cmp",
}
# Item types without a `status` (reasoning: an optional one, kept when sent): listed back, they must match their type.
_NO_STATUS = {"reasoning", "compaction"}


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
    if kind not in _NO_STATUS or "status" in item:
        out.setdefault("status", "completed")
    return out


def _full_part(part: Json) -> Json:
    if part.get("type") == "output_text":
        return {"annotations": [], "logprobs": [], **part}
    return dict(part)


def stored_items(items: list[Json]) -> list[Json]:
    return [stored_item(i) for i in items]


def drop_oldest(items: list[Json], history: int) -> tuple[list[Json], list[Json]] | None:
    """`truncation: auto`, one step: `items` (the first `history` of them stored context) without the oldest item that
    may go, split back into (history, input); None when none may. Never dropped: system/developer messages and the
    last user message with everything after it. A call goes with its outputs, an output with its call."""
    last_user = max((i for i, it in enumerate(items) if _is_role(it, "user")), default=len(items))
    victim = next((i for i in range(last_user) if not _is_role(items[i], "system", "developer")), None)
    if victim is None:
        return None
    call_id = items[victim].get("call_id")
    gone = {victim} | ({i for i in range(last_user) if items[i].get("call_id") == call_id} if call_id else set())
    kept_history = [it for i, it in enumerate(items[:history]) if i not in gone]
    kept_input = [it for i, it in enumerate(items) if i >= history and i not in gone]
    return kept_history, kept_input


def _is_role(item: Json, *roles: str) -> bool:
    return item.get("type", "message") == "message" and item.get("role") in roles
