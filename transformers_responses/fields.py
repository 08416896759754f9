"""Request fields: what this server does with each field of `POST /v1/responses` — implement, echo, or refuse.

`FIELD_POLICY` is the single table (docs/fields.md mirrors it; a test keeps the two and the openai request type in
step). `check_supported` raises a 400 naming the param for every field or value that is valid OpenAI input but that
this server does not honour, so nothing is ever dropped silently.
"""

from __future__ import annotations

from typing import Any

from .errors import InvalidRequestError, UnsupportedError

IMPLEMENTED = "implemented"
ECHOED = "echoed"
REFUSED = "refused"
ACCEPTED = "accepted"

FIELD_POLICY: dict[str, str] = {
    "model": IMPLEMENTED,
    "input": IMPLEMENTED,
    "instructions": IMPLEMENTED,
    "stream": IMPLEMENTED,
    "stream_options": IMPLEMENTED,
    "max_output_tokens": IMPLEMENTED,
    "temperature": IMPLEMENTED,
    "top_p": IMPLEMENTED,
    "tools": IMPLEMENTED,
    "tool_choice": IMPLEMENTED,
    "parallel_tool_calls": IMPLEMENTED,
    "reasoning": IMPLEMENTED,
    "text": IMPLEMENTED,
    "truncation": IMPLEMENTED,
    "include": IMPLEMENTED,
    "top_logprobs": IMPLEMENTED,
    "generation_config": IMPLEMENTED,
    "seed": IMPLEMENTED,
    "chat_template_kwargs": IMPLEMENTED,
    "max_tool_calls": IMPLEMENTED,
    "store": IMPLEMENTED,
    "previous_response_id": IMPLEMENTED,
    "conversation": IMPLEMENTED,
    "background": IMPLEMENTED,
    "metadata": ECHOED,
    "user": ECHOED,
    "safety_identifier": ECHOED,
    "prompt_cache_key": ECHOED,
    "prompt_cache_retention": ECHOED,
    "prompt_cache_options": ECHOED,
    "service_tier": ECHOED,
    "access_programs": ECHOED,
    "client_metadata": ACCEPTED,
    "background_options": REFUSED,
    "prompt": REFUSED,
    "context_management": REFUSED,
    "image": REFUSED,
    "moderation": REFUSED,
}

# `include` values that name output this server never produces (hosted tools): vacuously honoured.
_INCLUDE_HONOURED = {"message.output_text.logprobs", "reasoning.encrypted_content"}
_INCLUDE_VACUOUS = {
    "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
    "message.input_image.image_url", "computer_call_output.output.image_url", "code_interpreter_call.outputs",
}
_NOT_YET = "is not supported by this server yet"


def _refuse(param: str, why: str) -> UnsupportedError:
    return UnsupportedError(f"`{param}` {why}.", param=param)


def check_supported(body: dict[str, Any]) -> None:
    """Raise for fields/values we would otherwise ignore; validate value ranges the types cannot express."""
    for key, value in body.items():
        if FIELD_POLICY.get(key) == REFUSED and value not in (None, False):
            raise _refuse(key, _NOT_YET)
    if body.get("background") and body.get("store", True) is False:
        raise InvalidRequestError("Background responses are kept in the store to be polled: `background: true` "
                                  "cannot be used with `store: false`.", param="background")
    if body.get("max_output_tokens") is not None and body["max_output_tokens"] < 16:
        raise InvalidRequestError(
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got "
            f"{body['max_output_tokens']} instead.", param="max_output_tokens", code="integer_below_min_value")
    _range(body, "temperature", 0.0, 2.0)
    _range(body, "top_p", 0.0, 1.0)
    _range(body, "top_logprobs", 0, 20)
    if body.get("max_tool_calls") is not None and body["max_tool_calls"] < 1:
        raise InvalidRequestError("Invalid 'max_tool_calls': expected a value >= 1.", param="max_tool_calls",
                                  code="integer_below_min_value")
    check_include(body.get("include"))
    # Hosted tools are accepted and not offered to the model (transformers_responses.tools); forcing one is refused.
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") not in ("function", "custom", "allowed_tools"):
        raise UnsupportedError(f"`tool_choice` of type {choice.get('type')!r} names a hosted tool this server does not "
                               "run; use 'auto', 'none', 'required', a function, a custom tool or allowed_tools.",
                               param="tool_choice.type")
    _check_custom_formats(body.get("tools") or [])
    check_metadata(body.get("metadata"))


def _check_custom_formats(tools: list[dict[str, Any]]) -> None:
    """A custom tool's grammar is enforced, so it needs the structured extra and must compile (400 otherwise)."""
    for i, tool in enumerate(tools):
        inner = tool.get("tools") if tool.get("type") == "namespace" else [tool]
        for j, custom in enumerate(inner or []):
            fmt = custom.get("format") or {}
            if custom.get("type") != "custom" or fmt.get("type") != "grammar":
                continue
            param = f"tools[{i}]" if tool is custom else f"tools[{i}].tools[{j}]"
            from . import structured
            from .custom_grammar import input_ebnf

            structured.require(f"{param}.format")
            input_ebnf(fmt, param=param)


def check_include(values: list[str] | None, param: str = "include") -> None:
    """`include` values we can honour: those naming output this server never produces (nothing to add)."""
    for i, item in enumerate(values or []):
        if item not in _INCLUDE_VACUOUS and item not in _INCLUDE_HONOURED:
            raise _refuse(f"{param}[{i}]", f"value {item!r} {_NOT_YET}")


def check_metadata(metadata: dict[str, str] | None) -> None:
    """At most 16 keys; keys ≤ 64 and values ≤ 512 characters (responses and conversations alike)."""
    metadata = metadata or {}
    if len(metadata) > 16:
        raise InvalidRequestError("Invalid 'metadata': too many keys (at most 16).", param="metadata")
    for key, value in metadata.items():
        if len(key) > 64 or len(value) > 512:
            raise InvalidRequestError("Invalid 'metadata': keys are at most 64 characters and values at most 512.",
                                      param=f"metadata.{key}")


def _range(body: dict[str, Any], key: str, low: float, high: float) -> None:
    value = body.get(key)
    if value is not None and not low <= value <= high:
        raise InvalidRequestError(f"Invalid '{key}': expected a value between {low} and {high}, but got {value}.",
                                  param=key, code="invalid_value")
