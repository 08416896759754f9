"""Any tokenizer that ships a declarative `response_template` (and the host's fallbacks for families such as Gemma 4):
parsed by transformers' own `ResponseParser`. That parser yields a call only when it closes, so arguments arrive as
one delta; families with a dedicated parser stream them as they are written."""

from __future__ import annotations

import json
from typing import Any

from .base import Event, ToolParser

_REASONING_FIELDS = ("reasoning_content", "thinking")


class ResponseTemplateToolParser(ToolParser):
    name = "response_template"

    def __init__(self, tools: list[dict[str, Any]] | None = None, *, prompt_tail: str = "",
                 template: dict[str, Any] | None = None) -> None:
        super().__init__(tools, prompt_tail=prompt_tail)
        from transformers.utils.chat_parsing import ResponseParser

        if template is None:
            raise ValueError("the response_template parser needs the tokenizer's response_template")
        self._parser = ResponseParser(template, prefix=prompt_tail, tools=tools)
        self._thinking = False
        self._pending: list[Event] = self._convert(self._parser.initial_events)

    @property
    def in_reasoning(self) -> bool:
        return self._thinking

    def feed(self, text: str) -> list[Event]:
        out, self._pending = self._pending, []
        out.extend(self._convert(self._parser.feed(text)))
        return out

    def finish(self) -> list[Event]:
        out, self._pending = self._pending, []
        try:
            _message, events = self._parser.finalize()
        except (ValueError, RuntimeError) as exc:  # stopped inside a region (e.g. max_output_tokens in a call)
            out.append(("call_abort", str(exc)))
            return out
        out.extend(self._convert(events))
        return out

    def _convert(self, events: list[dict[str, Any]]) -> list[Event]:
        out: list[Event] = []
        for ev in events:
            kind, field = ev["type"], ev.get("field")
            if kind == "region_chunk" and not ev.get("dirty"):
                if field in _REASONING_FIELDS:
                    self._thinking = True
                    self._reasoning.push(ev.get("text") or "", out)
                elif field == "content":
                    self.text.push(ev.get("text") or "", out)
            elif kind == "region_close" and field in _REASONING_FIELDS:
                self._thinking = False
                out.append(("reasoning_end", ""))
            elif kind == "region_close" and field == "tool_calls" and self.calls_enabled:
                fn = (ev.get("value") or {}).get("function") or {}
                args = fn.get("arguments", {})
                args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
                out.extend((("call_start", fn.get("name", "")), ("call_delta", args), ("call_end", args)))
        return out
