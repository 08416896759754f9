"""Tool-call parsers: one module per model family, chosen from the chat template (or by name), loaded lazily.

Built-in families are listed in `BUILTIN`; third parties add more through the entry-point group
`transformers_responses.tool_parsers` (name → a `ToolParser` subclass). `select` picks the parser for a model:
an explicit name (`--tool-call-parser`) wins; then the tokenizer's own `response_template`; then the first family
whose syntax the chat template teaches; then the host's per-`model_type` fallback templates; else no tool parsing.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from ..errors import InvalidRequestError
from .base import Event, ToolParser

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "Event", "ToolParser", "available", "load", "select"]

ENTRY_POINT_GROUP = "transformers_responses.tool_parsers"

# Detection order matters: Qwen3.5's XML calls also use <tool_call>, so they are tried before Hermes.
BUILTIN: dict[str, str] = {
    "qwen3_xml": "transformers_responses.tool_parsers.qwen_xml:QwenXmlToolParser",
    "hermes": "transformers_responses.tool_parsers.hermes:HermesToolParser",
    "mistral": "transformers_responses.tool_parsers.mistral:MistralToolParser",
    "llama3_json": "transformers_responses.tool_parsers.llama3:Llama3JsonToolParser",
    "response_template": "transformers_responses.tool_parsers.template:ResponseTemplateToolParser",
    "none": "transformers_responses.tool_parsers.base:ToolParser",
}


def _import(target: str) -> type[ToolParser]:
    module, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, ToolParser)):
        raise TypeError(f"{target} is not a ToolParser subclass")
    return cls


@functools.lru_cache(maxsize=1)
def _plugins() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in BUILTIN}


def available() -> list[str]:
    """Names accepted by `--tool-call-parser` (besides `auto`)."""
    return sorted({*BUILTIN, *_plugins()})


def load(name: str) -> type[ToolParser]:
    if name in BUILTIN:
        return _import(BUILTIN[name])
    plugin = _plugins().get(name)
    if plugin is None:
        raise ValueError(f"Unknown tool-call parser {name!r}; choose one of: auto, {', '.join(available())}.")
    cls = plugin.load()
    if not (isinstance(cls, type) and issubclass(cls, ToolParser)):
        raise TypeError(f"tool-call parser plugin {name!r} is not a ToolParser subclass")
    return cls


def select(name: str | None, tokenizer: Any, model_type: str) -> tuple[type[ToolParser], dict[str, Any]]:
    """The parser class for a model and the extra keyword arguments its constructor needs."""
    if name and name != "auto":
        cls = load(name)
        if cls.name == "response_template":
            template = getattr(tokenizer, "response_template", None)
            if template is None:
                raise InvalidRequestError("The response_template tool-call parser needs a tokenizer that ships one.")
            return cls, {"template": template}
        return cls, {}
    template = getattr(tokenizer, "response_template", None)
    if template is not None:
        return load("response_template"), {"template": template}
    chat_template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(chat_template, dict):  # several named templates: the default one teaches the call syntax
        chat_template = chat_template.get("default") or next(iter(chat_template.values()), "")
    for family in ("qwen3_xml", "hermes", "mistral", "llama3_json"):
        cls = load(family)
        if cls.matches(chat_template, model_type):
            return cls, {}
    fallback = _host_fallback(model_type)
    if fallback is not None:
        return load("response_template"), {"template": fallback}
    return ToolParser, {}


def _host_fallback(model_type: str) -> dict[str, Any] | None:
    from transformers.cli.serving import utils as host_utils

    fallbacks = getattr(host_utils, "_RESPONSE_TEMPLATE_FALLBACKS", {})
    return next((v for types, v in fallbacks.items() if model_type in types), None)
