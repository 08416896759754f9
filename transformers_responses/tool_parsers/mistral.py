"""Mistral calls after `[TOOL_CALLS]`: the JSON list form `[{"name": …, "arguments": {…}}, …]` (tokenizer v3) and
the newer `NAME[ARGS]{…}` form (v11+), repeated for several calls."""

from __future__ import annotations

from typing import Any

from .base import Event, JsonCall, MalformedCall, MarkerScanner, ToolParser

MARK = "[TOOL_CALLS]"


class MistralToolParser(ToolParser):
    name = "mistral"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._m = MarkerScanner()
        self._state = "text"  # text | open | named | call | next
        self._call: JsonCall | None = None
        self._in_list = False
        self._raw = ""

    @classmethod
    def matches(cls, chat_template: str, model_type: str) -> bool:
        return MARK in chat_template

    def _body(self, text: str, out: list[Event], final: bool) -> None:
        if not self.calls_enabled:
            self.text.push(text, out)
            return
        self._m.push(text)
        self._raw += text
        try:
            while self._step(out, final):
                pass
        except MalformedCall as bad:
            started = self._call is not None and self._call.started
            out.append(("call_abort", MARK + bad.raw) if started else ("text", MARK + bad.raw))
            self._state, self._call, self._m.buf = "text", None, ""
        if final:
            if self._state == "text":
                self.text.push(self._m.take(), out)
            elif self._state in ("call", "named"):
                out.append(("call_abort", MARK + self._raw))
            self._state = "text"

    def _step(self, out: list[Event], final: bool) -> bool:
        buf = self._m.buf
        if self._state == "text":
            before, marker = self._m.find((MARK,))
            self.text.push(before, out)
            if marker is None:
                return False
            self._state, self._raw = "open", self._m.buf
            return True
        stripped = buf.lstrip()
        if self._state in ("open", "next"):
            if not stripped or (len(stripped) < len(MARK) and MARK.startswith(stripped) and not final):
                return False
            if self._state == "next" and self._in_list:
                if stripped.startswith(","):
                    self._m.buf = stripped[1:]
                    return True
                if stripped.startswith("]"):
                    self._m.buf, self._state, self._in_list = stripped[1:], "text", False
                    return True
            if stripped.startswith(MARK):
                self._m.buf, self._state = stripped[len(MARK):], "open"
                return True
            if stripped.startswith("["):
                self._in_list, self._m.buf = True, stripped[1:]
                return True
            if stripped.startswith("{"):
                self._call, self._state, self._m.buf = JsonCall(), "call", stripped
                return True
            if self._state == "next":
                self._state = "text"
                return True
            self._state = "named"
            return True
        if self._state == "named":
            if "[ARGS]" not in buf:
                return False
            name, rest = buf.split("[ARGS]", 1)
            out.append(("call_start", name.strip()))
            self._call, self._state, self._m.buf = JsonCall(bare_args=True), "call", rest
            return True
        assert self._call is not None
        pending, self._m.buf = self._m.buf, ""
        rest = self._call.feed(pending, out)
        if rest is None:
            return False
        self._m.buf, self._state = rest, "next"
        return True
