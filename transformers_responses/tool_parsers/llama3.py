"""Llama 3.x JSON calls: the whole answer is `{"name": …, "parameters": {…}}` (optionally after `<|python_tag|>`),
several calls separated by `;`."""

from __future__ import annotations

from typing import Any

from .base import CallSyntax, Event, JsonCall, MalformedCall, ToolParser


class Llama3JsonToolParser(ToolParser):
    name = "llama3_json"
    # The whole answer is the calls (no trigger: a call cannot follow free text), `; ` between them.
    call_syntax = CallSyntax(begin='{"name": "{name}", "parameters": ', end="}", separator="; ")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._buf = ""
        self._mode = "start"  # start | call | between | text
        self._call: JsonCall | None = None

    @classmethod
    def matches(cls, chat_template: str, model_type: str) -> bool:
        return "<|python_tag|>" in chat_template or ('"parameters"' in chat_template and "<|eot_id|>" in chat_template)

    def _body(self, text: str, out: list[Event], final: bool) -> None:
        if not self.calls_enabled or self._mode == "text":
            self.text.push(text, out)
            return
        self._buf += text
        while self._buf:
            if self._mode in ("start", "between"):
                stripped = self._buf.lstrip()
                if stripped.startswith("<|python_tag|>"):
                    stripped = stripped[len("<|python_tag|>"):]
                if self._mode == "between" and stripped.startswith(";"):
                    stripped = stripped[1:]
                    self._buf = stripped
                    continue
                if not stripped or ("<|python_tag|>".startswith(stripped) and not final):
                    break
                if stripped.startswith("{"):
                    self._call, self._mode, self._buf = JsonCall(), "call", stripped
                    continue
                self._mode = "text"
                self.text.push(self._buf, out)
                self._buf = ""
                break
            assert self._call is not None
            pending, self._buf = self._buf, ""
            try:
                rest = self._call.feed(pending, out)
            except MalformedCall as bad:
                self._abort(bad.raw, out)
                break
            if rest is None:
                break
            self._buf, self._mode = rest, "between"
        if final:
            if self._mode == "call" and self._call is not None:
                self._abort(self._call.raw, out)
            elif self._buf.strip():
                self.text.push(self._buf, out)
            self._buf = ""

    def _abort(self, raw: str, out: list[Event]) -> None:
        if self._call is not None and self._call.started:
            out.append(("call_abort", raw))
        else:
            self.text.push(raw, out)
        self._call, self._mode = None, "text"
