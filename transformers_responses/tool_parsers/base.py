"""The streaming parser contract shared by every model family, and the machinery the families reuse.

A parser is fed the model's decoded text chunk by chunk (special tokens kept, end-of-turn tokens already removed) and
returns a list of events, plain tuples so the per-token path allocates almost nothing:

    ("text", s)            visible answer text
    ("reasoning", s)       text of the reasoning (thinking) block
    ("reasoning_end", "")  the reasoning block is closed
    ("call_start", name)   a tool call has begun; its name is known
    ("call_delta", s)      more of the current call's JSON arguments, as the model writes them
    ("call_end", args)     the current call is complete; `args` is its whole JSON arguments string
    ("call_abort", raw)    the current call turned out malformed; `raw` is the model's text, to show as text

Families subclass `ToolParser` and implement `_body(text, final)`, which consumes the text after the reasoning block.
`MarkerScanner` finds delimiters across chunk boundaries without re-scanning the whole text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar

Event = tuple[str, str]


class MarkerScanner:
    """Buffer that yields text up to the first of some markers, holding back a tail that might begin a marker."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = ""

    def push(self, text: str) -> None:
        self.buf += text

    def find(self, markers: tuple[str, ...]) -> tuple[str, str | None]:
        """Return (text before the earliest marker, marker) and consume both; or (safe text, None) if none is whole."""
        best, best_at = None, -1
        for marker in markers:
            at = self.buf.find(marker)
            if at != -1 and (best_at == -1 or at < best_at):
                best, best_at = marker, at
        if best is not None:
            before, self.buf = self.buf[:best_at], self.buf[best_at + len(best):]
            return before, best
        hold = 0
        for marker in markers:
            for k in range(min(len(marker) - 1, len(self.buf)), 0, -1):
                if self.buf.endswith(marker[:k]):
                    hold = max(hold, k)
                    break
        if hold:
            before, self.buf = self.buf[:-hold], self.buf[-hold:]
        else:
            before, self.buf = self.buf, ""
        return before, None

    def take(self) -> str:
        out, self.buf = self.buf, ""
        return out


class TrimmedStream:
    """Text that drops leading whitespace and holds trailing whitespace until more text follows (or it ends)."""

    __slots__ = ("started", "held", "kind")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.started = False
        self.held = ""

    def push(self, text: str, out: list[Event]) -> None:
        if not text:
            return
        if not self.started:
            text = text.lstrip()
            if not text:
                return
            self.started = True
        stripped = text.rstrip()
        if not stripped:
            self.held += text
            return
        out.append((self.kind, self.held + stripped))
        self.held = text[len(stripped):]

    def reset(self) -> None:
        self.started = False
        self.held = ""


@dataclass(frozen=True)
class CallSyntax:
    """How a family writes one tool call, for grammar-constrained decoding (`transformers_responses.structured`).

    A call is `begin` (with `{name}` replaced by the function name), the arguments, then `end`; several calls are
    joined by `separator`. `trigger` is the fixed text every call starts with, which lets free text switch to a call
    (empty: calls cannot follow free text). `arguments` is how the arguments are written: `"json"` (a JSON object) or
    `"qwen_xml"` (`<parameter=KEY>\\nVALUE\\n</parameter>` blocks). Plain data, so parsers need no grammar library.
    """

    begin: str
    end: str
    separator: str = ""
    trigger: str = ""
    arguments: str = "json"

    def call_begin(self, name: str) -> str:
        """The text that opens a call of `name` (`str.replace`, not `format`: the syntax is full of braces)."""
        return self.begin.replace("{name}", name)


class ToolParser:
    """Base of the family parsers: splits off the reasoning block, then hands the rest to `_body`."""

    name: ClassVar[str] = "none"
    think_open: ClassVar[str] = "<think>"
    think_close: ClassVar[str] = "</think>"
    # The call syntax this family parses, for constrained decoding; None where it cannot be stated as one syntax.
    call_syntax: ClassVar[CallSyntax | None] = None

    def __init__(self, tools: list[dict[str, Any]] | None = None, *, prompt_tail: str = "") -> None:
        self.tools = {t["function"]["name"]: t["function"] for t in tools or []}
        self.calls_enabled = bool(tools)
        self._scan = MarkerScanner()
        self.text = TrimmedStream("text")
        self._reasoning = TrimmedStream("reasoning")
        # A template that opens the thinking block itself leaves `<think>\n` at the end of the prompt.
        tail = prompt_tail.rstrip()
        self._phase = "reasoning" if tail.endswith(self.think_open) else "start"

    @property
    def in_reasoning(self) -> bool:
        """Whether the text fed last belongs to the reasoning block (for counting reasoning tokens)."""
        return self._phase == "reasoning"

    @classmethod
    def matches(cls, chat_template: str, model_type: str) -> bool:
        """Whether this family's call syntax is the one the model's chat template teaches."""
        return False

    def feed(self, text: str) -> list[Event]:
        out: list[Event] = []
        if self._phase != "body":
            self._scan.push(text)
            self._split_reasoning(out, final=False)
            if self._phase != "body":
                return out
            text = self._scan.take()
        self._body(text, out, final=False)
        return out

    def finish(self) -> list[Event]:
        out: list[Event] = []
        if self._phase != "body":
            self._split_reasoning(out, final=True)
            if self._phase == "reasoning":
                self._reasoning.push(self._scan.take(), out)
                return out
        self._body(self._scan.take(), out, final=True)
        return out

    def _split_reasoning(self, out: list[Event], final: bool) -> None:
        if self._phase == "start":
            stripped = self._scan.buf.lstrip()
            if stripped.startswith(self.think_open):
                self._scan.buf = stripped[len(self.think_open):]
                self._phase = "reasoning"
            elif final or not self.think_open.startswith(stripped):
                self._phase = "body"
                return
            else:
                return
        if self._phase == "reasoning":
            before, marker = self._scan.find((self.think_close,))
            self._reasoning.push(before, out)
            if marker is not None:
                out.append(("reasoning_end", ""))
                self._phase = "body"

    def _body(self, text: str, out: list[Event], final: bool) -> None:
        """Consume answer text: the default has no tool-call syntax, so everything is text."""
        self.text.push(text, out)


class JsonCall:
    """One JSON tool call `{"name": …, "arguments": …}` read incrementally, arguments streamed as they are written.

    Fed text that starts at (or before, after whitespace) the call's opening `{`; `feed` returns the text left over
    after the call's closing `}` once it is complete, else None. The arguments value is delimited by a bracket/string
    scanner, and parsed once at its end, never per token.
    """

    HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')
    MAX_HEAD = 2048

    __slots__ = ("buf", "phase", "args", "depth", "in_str", "esc", "started", "raw", "bare")

    def __init__(self, *, bare_args: bool = False) -> None:
        # bare_args: the text is the arguments value alone (the name came before it, e.g. Mistral's `NAME[ARGS]{…}`).
        self.bare = bare_args
        self.buf = ""
        self.phase = "args" if bare_args else "head"
        self.args: list[str] = []
        self.depth = 0
        self.in_str = False
        self.esc = False
        self.started = bare_args
        self.raw = ""

    def feed(self, text: str, out: list[Event]) -> str | None:
        self.raw += text
        if self.phase == "head":
            self.buf += text
            m = self.HEAD.match(self.buf)
            if m is None:
                if self.buf.lstrip().startswith('{"arguments"') or len(self.buf) > self.MAX_HEAD:
                    self.phase = "whole"
                    text, self.buf = self.buf, ""
                    self.depth = 0
                    return self._scan_whole(text, out)
                return None
            try:
                name = json.loads(f'"{m.group(1)}"')
            except json.JSONDecodeError:
                name = m.group(1)
            out.append(("call_start", name))
            self.started = True
            self.phase = "args"
            text, self.buf = self.buf[m.end():], ""
        if self.phase == "args":
            return self._scan_args(text, out)
        if self.phase == "tail":
            return self._scan_tail(text, out)
        return self._scan_whole(text, out)

    def _step(self, ch: str) -> None:
        if self.in_str:
            if self.esc:
                self.esc = False
            elif ch == "\\":
                self.esc = True
            elif ch == '"':
                self.in_str = False
        elif ch == '"':
            self.in_str = True
        elif ch in "{[":
            self.depth += 1
        elif ch in "}]":
            self.depth -= 1

    def _scan_args(self, text: str, out: list[Event]) -> str | None:
        if not self.args:
            text = text.lstrip()  # the head pattern may match before all whitespace after the colon has arrived
        for i, ch in enumerate(text):
            self._step(ch)
            if self.depth == 0 and not self.in_str and ch in "}]":
                chunk = text[: i + 1]
                self.args.append(chunk)
                out.append(("call_delta", chunk))
                if self.bare:
                    return self._complete(text[i + 1:], out)
                self.phase = "tail"
                return self._scan_tail(text[i + 1:], out)
        if text:
            self.args.append(text)
            out.append(("call_delta", text))
        return None

    def _scan_tail(self, text: str, out: list[Event]) -> str | None:
        self.buf += text
        stripped = self.buf.lstrip()
        if not stripped:
            return None
        if stripped[0] != "}":
            raise MalformedCall(self.raw)
        return self._complete(stripped[1:], out)

    def _complete(self, rest: str, out: list[Event]) -> str:
        arguments = "".join(self.args)
        try:
            json.loads(arguments)
        except json.JSONDecodeError:
            raise MalformedCall(self.raw) from None
        out.append(("call_end", arguments))
        self.phase = "done"
        return rest

    def _scan_whole(self, text: str, out: list[Event]) -> str | None:
        self.buf += text
        for i, ch in enumerate(text):
            self._step(ch)
            if self.depth == 0 and not self.in_str and ch == "}":
                whole = self.buf[: len(self.buf) - len(text) + i + 1]
                rest = text[i + 1:]
                try:
                    obj = json.loads(whole)
                    name = obj["name"]
                    args = obj.get("arguments", obj.get("parameters", {}))
                    if not isinstance(name, str):
                        raise TypeError(name)
                except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
                    raise MalformedCall(self.raw) from None
                arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
                out.extend((("call_start", name), ("call_delta", arguments), ("call_end", arguments)))
                self.started = True
                self.phase = "done"
                return rest
        return None


class MalformedCall(Exception):
    """The model's call text is not a call after all; carries the raw text to show as text."""

    def __init__(self, raw: str) -> None:
        super().__init__("malformed tool call")
        self.raw = raw
