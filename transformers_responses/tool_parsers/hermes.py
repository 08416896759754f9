"""Hermes-style calls — Qwen2.5, Qwen3, Hermes, and every template that teaches
`<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`, one block per call."""

from __future__ import annotations

from .base import CallSyntax, Event, JsonCall, MalformedCall, MarkerScanner, ToolParser


class HermesToolParser(ToolParser):
    name = "hermes"
    open_tag = "<tool_call>"
    close_tag = "</tool_call>"
    # Exactly what the Qwen/Hermes templates render (and the fixture model writes): one block per call, `\n` between.
    call_syntax = CallSyntax(begin='<tool_call>\n{"name": "{name}", "arguments": ', end="}\n</tool_call>",
                             separator="\n", trigger="<tool_call>")

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._markers = MarkerScanner()
        self._call: JsonCall | None = None
        self._state = "text"  # text | call | close

    @classmethod
    def matches(cls, chat_template: str, model_type: str) -> bool:
        return cls.open_tag in chat_template and "<function=" not in chat_template

    def _body(self, text: str, out: list[Event], final: bool) -> None:
        if not self.calls_enabled:
            self.text.push(text, out)
            return
        self._markers.push(text)
        while True:
            if self._state == "text":
                before, marker = self._markers.find((self.open_tag,))
                self.text.push(before, out)
                if marker is None:
                    break
                self._call, self._state = JsonCall(), "call"
            if self._state == "call":
                assert self._call is not None
                pending = self._markers.take()
                try:
                    rest = self._call.feed(pending, out)
                except MalformedCall as bad:
                    self._abort(bad.raw, out)
                    continue
                if rest is None:
                    if self.close_tag in self._call.raw:
                        self._abort(self._call.raw, out)
                        continue
                    break
                self._markers.push(rest)
                self._state = "close"
            if self._state == "close":
                stripped = self._markers.buf.lstrip()
                if not stripped or (len(stripped) < len(self.close_tag) and self.close_tag.startswith(stripped)):
                    break
                if stripped.startswith(self.close_tag):
                    self._markers.buf = stripped[len(self.close_tag):]
                    self._state = "text"
                    self.text.reset()
                    continue
                # A complete call followed by junk: the call stands, the junk is text.
                self._state = "text"
        if final:
            self._flush(out)

    def _abort(self, raw: str, out: list[Event]) -> None:
        started = self._call is not None and self._call.started
        self._call, self._state = None, "text"
        head, sep, tail = raw.partition(self.close_tag)
        if started:
            out.append(("call_abort", self.open_tag + head + sep))
        else:
            self.text.push(self.open_tag + head + sep, out)
        self._markers.buf = tail + self._markers.buf

    def _flush(self, out: list[Event]) -> None:
        if self._state == "call" and self._call is not None:
            raw = self._call.raw + self._markers.take()
            if self._call.started:
                out.append(("call_abort", self.open_tag + raw))
            else:
                self.text.push(self.open_tag + raw, out)
        elif self._state == "text":
            self.text.push(self._markers.take(), out)
        self._state = "text"
