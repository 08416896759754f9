"""Input normalization: Responses API input items → the chat messages `apply_chat_template` renders.

Pure functions over plain dicts (the body has been validated against the openai types already). The mapping:

* a string `input` is one user message; `instructions` and the input's leading system/developer messages become one
  system message at the start (templates that accept a single leading system message keep working);
* `developer` is `system`; `output_text` and `refusal` history parts are text; several text parts join with a newline;
* `reasoning` items attach to the next assistant turn as `reasoning_content` (from `content`, else from `summary`);
* `function_call` and `custom_tool_call` join the assistant turn before them as `tool_calls` (a custom call's
  `input` as the `{"input": …}` it was offered with, a namespaced call under `NAMESPACE__NAME`), arguments parsed to a
  mapping because chat templates iterate them; `function_call_output` / `custom_tool_call_output` become
  `tool` messages;
* images become `{"type": "image", "url": …}` parts for a vision model and a 400 for a text-only one;
* a `compaction` item (its sealed summary opened into `summary` by `sealing.open_compactions` beforehand) joins the
  leading system message as `COMPACTION_PREFIX` + summary, after `instructions` and the leading system messages —
  a system message is what every chat template accepts, wherever the item stood (docs/compaction.md).

Anything the model could not see faithfully is refused with a 400 naming the item, never dropped.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import InvalidRequestError, UnsupportedError
from .tools import model_name

Message = dict[str, Any]

COMPACTION_PREFIX = "Summary of the earlier conversation:\n"

# Hosted-tool items this server never produces and cannot replay to a local model faithfully.
_UNSUPPORTED_ITEMS = {
    "file_search_call", "computer_call", "computer_call_output", "web_search_call", "tool_search_call",
    "tool_search_output", "additional_tools", "configuration_update", "compaction_trigger",
    "image_generation_call", "code_interpreter_call", "local_shell_call", "local_shell_call_output", "shell_call",
    "shell_call_output", "apply_patch_call", "apply_patch_call_output", "mcp_list_tools", "mcp_approval_request",
    "mcp_approval_response", "mcp_call", "program", "program_output",
}


def input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's `input` as a list of items (a string is one user message)."""
    inp = body["input"]
    if isinstance(inp, str):
        return [{"type": "message", "role": "user", "content": inp}]
    return list(inp)


def _item_type(item: dict[str, Any]) -> str:
    if "type" in item:
        return item["type"]
    if "role" in item:
        return "message"
    return "item_reference"


def _parts_text(content: Any, path: str, *, vision: bool) -> str | list[dict[str, Any]]:
    """Message content → a string (text-only model) or a list of processor parts (vision model)."""
    if isinstance(content, str):
        return content if not vision else [{"type": "text", "text": content}]
    texts: list[str] = []
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type")
        where = f"{path}[{j}]"
        if kind in ("input_text", "output_text"):
            texts.append(part["text"])
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal":
            texts.append(part["refusal"])
            parts.append({"type": "text", "text": part["refusal"]})
        elif kind == "input_image":
            if not vision:
                raise InvalidRequestError(
                    "This model accepts text only, so image input cannot be used; send text, or serve a "
                    "vision-language model.", param=where, code="unsupported_content")
            url = part.get("image_url")
            if not url:
                raise UnsupportedError("Images by `file_id` need the Files API, which this server does not have; "
                                       "send `image_url` (a URL or a data: URL).", param=f"{where}.file_id")
            parts.append({"type": "image", "url": url})
        else:
            raise UnsupportedError(f"Content of type {kind!r} is not supported by this server.", param=f"{where}.type")
    if vision:
        return parts
    return "\n".join(texts)


def _arguments(raw: str, path: str) -> Any:
    try:
        return json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"Invalid JSON in '{path}': {exc.msg}.", param=path, code="invalid_json") from None


def _output_text(output: Any, path: str) -> str:
    if isinstance(output, str):
        return output
    texts = []
    for j, part in enumerate(output):
        if part.get("type") in ("input_text", "output_text"):
            texts.append(part["text"])
        else:
            raise UnsupportedError(f"Tool output parts of type {part.get('type')!r} are not supported by this server.",
                                   param=f"{path}[{j}].type")
    return "\n".join(texts)


def to_chat_messages(items: list[dict[str, Any]], instructions: str | None, *, vision: bool = False,
                     path: str = "input", history: int = 0, history_path: str = "previous_response_id") -> list[Message]:
    """Normalize input items (plus `instructions`) into chat messages for `apply_chat_template`.

    The first `history` items are the stored context (a `previous_response_id` chain or a conversation); errors in
    them name `history_path`, errors in the rest name `path[i]` counted from the request's own input."""
    messages: list[Message] = []
    pending_reasoning: str | None = None
    summaries: list[str] = []

    def assistant_turn() -> Message:
        # Consecutive assistant output (message, reasoning, calls) is one turn of the model.
        nonlocal pending_reasoning
        if messages and messages[-1]["role"] == "assistant" and pending_reasoning is None:
            return messages[-1]
        msg: Message = {"role": "assistant", "content": "" if not vision else []}
        if pending_reasoning is not None:
            msg["reasoning_content"] = pending_reasoning
            pending_reasoning = None
        messages.append(msg)
        return msg

    for i, item in enumerate(items):
        kind = _item_type(item)
        where = f"{path}[{i - history}]" if i >= history else history_path
        if kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            content = _parts_text(item["content"], f"{where}.content", vision=vision)
            if role == "assistant":
                turn: Message = {"role": "assistant", "content": content}
                if pending_reasoning is not None:
                    turn["reasoning_content"] = pending_reasoning
                    pending_reasoning = None
                messages.append(turn)
            else:
                messages.append({"role": role, "content": content})
        elif kind == "reasoning":
            texts = [c["text"] for c in item.get("content") or [] if c.get("type") == "reasoning_text"]
            if not texts:
                texts = [s["text"] for s in item.get("summary") or []]
            pending_reasoning = "\n".join(texts)
        elif kind in ("function_call", "custom_tool_call"):
            if kind == "function_call":
                args = _arguments(item["arguments"], f"{where}.arguments")
            else:
                args = {"input": item["input"]}
            turn = assistant_turn()
            name = model_name(item["name"], item.get("namespace"))  # as the tool was offered (tools.py)
            turn.setdefault("tool_calls", []).append(
                {"id": item["call_id"], "type": "function", "function": {"name": name, "arguments": args}})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": _output_text(item["output"], f"{where}.output")})
        elif kind == "compaction":
            if not isinstance(item.get("summary"), str):  # never opened: no caller may hand the model a sealed blob
                raise InvalidRequestError("This compaction item's encrypted content was not opened.",
                                          param=f"{where}.encrypted_content", code="invalid_encrypted_content")
            summaries.append(COMPACTION_PREFIX + item["summary"])
        elif kind == "item_reference":  # resolved from the store before normalization; one left is unknown
            raise InvalidRequestError(f"Item with id {item.get('id')!r} not found.", param=where,
                                      code="item_not_found")
        elif kind in _UNSUPPORTED_ITEMS:
            raise UnsupportedError(f"Input items of type {kind!r} belong to hosted tools this server does not run.",
                                   param=f"{where}.type")
        else:
            raise InvalidRequestError(f"Invalid value: {kind!r}.", param=f"{where}.type", code="invalid_value")
    if pending_reasoning is not None:
        # A trailing reasoning item with nothing after it still belongs to an assistant turn.
        assistant_turn()

    system_texts = [instructions] if instructions else []
    while messages and messages[0]["role"] == "system" and isinstance(messages[0]["content"], str):
        system_texts.append(messages.pop(0)["content"])
    system_texts.extend(summaries)
    if system_texts:
        content: Any = "\n\n".join(system_texts)
        messages.insert(0, {"role": "system", "content": content if not vision else [{"type": "text", "text": content}]})
    return messages
