"""Qwen3-Coder / Qwen3.5 XML-style calls:
`<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>`.

Arguments are rebuilt as a JSON object while the model writes them: a parameter the tool declares as a string is
streamed as an escaped JSON string; any other value is held until its `</parameter>` and then read as JSON (falling
back to a string), since `12` and `"12"` differ only once the value is complete.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .base import CallSyntax, Event, MarkerScanner, ToolParser

_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>")
_PARAMETER = re.compile(r"\s*<parameter=([^>\n]+)>")


class QwenXmlToolParser(ToolParser):
    name = "qwen3_xml"
    # As the Qwen3-Coder / Qwen3.5 templates render it; the arguments are `<parameter=…>` blocks, not JSON.
    call_syntax = CallSyntax(begin="<tool_call>\n<function={name}>\n", end="\n</function>\n</tool_call>",
                             separator="\n", trigger="<tool_call>\n<function=", arguments="qwen_xml")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._m = MarkerScanner()
        self._state = "text"  # text | function | params | value | close
        self._fn: dict[str, Any] = {}
        self._args: list[str] = []
        self._nparams = 0
        self._key = ""
        self._string_value = False
        self._value: list[str] = []
        self._held = ""
        self._value_started = False
        self._raw = ""

    @classmethod
    def matches(cls, chat_template: str, model_type: str) -> bool:
        return "<tool_call>" in chat_template and "<function=" in chat_template

    def _emit(self, chunk: str, out: list[Event]) -> None:
        self._args.append(chunk)
        out.append(("call_delta", chunk))

    def _is_string(self, key: str) -> bool:
        props = (self._fn.get("parameters") or {}).get("properties") or {}
        kind = (props.get(key) or {}).get("type", "string")
        return kind == "string" or (isinstance(kind, list) and "string" in kind)

    def _body(self, text: str, out: list[Event], final: bool) -> None:
        if not self.calls_enabled:
            self.text.push(text, out)
            return
        self._m.push(text)
        if self._state != "text":
            self._raw += text
        while self._step(out):
            pass
        if final:
            if self._state == "text":
                self.text.push(self._m.take(), out)
            elif self._state == "function":
                self.text.push("<tool_call>" + self._raw, out)
            else:
                out.append(("call_abort", "<tool_call>" + self._raw))
            self._state = "text"

    def _step(self, out: list[Event]) -> bool:
        buf = self._m.buf
        if self._state == "text":
            before, marker = self._m.find(("<tool_call>",))
            self.text.push(before, out)
            if marker is None:
                return False
            self._state, self._raw = "function", self._m.buf
            return True
        if self._state == "function":
            m = _FUNCTION.match(buf)
            if m is None:
                if len(buf) > 512 or "</tool_call>" in buf:
                    before, _ = buf.split("</tool_call>", 1) if "</tool_call>" in buf else (buf, "")
                    self.text.push("<tool_call>" + before + "</tool_call>", out)
                    self._m.buf = buf[len(before) + len("</tool_call>"):]
                    self._state = "text"
                    return True
                return False
            name = m.group(1).strip()
            self._fn = self.tools.get(name, {})
            self._args, self._nparams = [], 0
            out.append(("call_start", name))
            self._emit("{", out)
            self._m.buf = buf[m.end():]
            self._state = "params"
            return True
        if self._state == "params":
            stripped = buf.lstrip()
            if stripped.startswith("</function>"):
                self._emit("}", out)
                self._m.buf = stripped[len("</function>"):]
                self._state = "close"
                return True
            m = _PARAMETER.match(buf)
            if m is None:
                if stripped and not ("</function>".startswith(stripped) or "<parameter=".startswith(stripped[:11])):
                    out.append(("call_abort", "<tool_call>" + self._raw))
                    self._m.buf, self._state = "", "text"
                return False
            self._key = m.group(1).strip()
            self._emit(("" if self._nparams == 0 else ", ") + json.dumps(self._key) + ": ", out)
            self._nparams += 1
            self._string_value = self._is_string(self._key)
            if self._string_value:
                self._emit('"', out)
            self._value, self._held = [], ""
            self._m.buf = buf[m.end():]
            self._state, self._value_started = "value", False
            return True
        if self._state == "value":
            before, marker = self._m.find(("</parameter>",))
            self._value_text(before, out, closing=marker is not None)
            if marker is None:
                return False
            self._state = "params"
            return True
        # close: wait for </tool_call>
        stripped = buf.lstrip()
        if not stripped or (len(stripped) < 12 and "</tool_call>".startswith(stripped)):
            return False
        if stripped.startswith("</tool_call>"):
            out.append(("call_end", "".join(self._args)))
            self._m.buf = stripped[len("</tool_call>"):]
            self.text.reset()
        self._state = "text"
        return True

    def _value_text(self, text: str, out: list[Event], closing: bool) -> None:
        if not self._value_started:
            # The template's newline after <parameter=…> is layout, not value; it may arrive in its own chunk.
            text = text.lstrip("\n")
            if not text and not closing:
                return
            self._value_started = True
        if not self._string_value:
            self._value.append(text)
            if closing:
                raw = "".join(self._value).strip()
                try:
                    value: Any = json.loads(raw)
                except json.JSONDecodeError:
                    value = raw
                self._emit(json.dumps(value, ensure_ascii=False), out)
            return
        # Strings stream; the newline the template puts before </parameter> is held back until we know.
        text = self._held + text
        keep = text if closing else text.rstrip("\n")
        self._held = "" if closing else text[len(keep):]
        if closing:
            keep = keep.rstrip("\n")
        if keep:
            self._emit(json.dumps(keep, ensure_ascii=False)[1:-1], out)
        if closing:
            self._emit('"', out)
