"""The request's tools as the model sees them, and the model's calls mapped back to the right output items.

* `function` tools are offered as they are.
* `custom` (freeform) tools are offered as a function of one string parameter, `input`. A grammar (`lark` or
  `regex`) is shown to the model in that parameter's description and enforced while it decodes (`structured`,
  `custom_grammar`). Their calls become `custom_tool_call` items whose `input` is the string, streamed as it is
  written by `InputStream`.
* `namespace` tools offer their functions and custom tools to the model as `NAMESPACE__NAME`; the call items carry
  `namespace` and the tool's own `name`, and history items with a `namespace` are rendered back under the same name.
* Hosted tools (`HOSTED_TYPES`: web search, file search, code interpreter, computer use, image generation, MCP, tool
  search, and the shell / local_shell / apply_patch tools that OpenAI's own models were trained for) are accepted and
  echoed, never offered to the model: this server runs none of them, and clients such as Codex send some with every
  turn, where a 400 would end the turn. docs/fields.md says so; a `tool_choice` that forces one is still a 400.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]

HOSTED_TYPES = frozenset({
    "file_search", "computer", "computer_use_preview", "web_search", "web_search_2025_08_26", "web_search_preview",
    "web_search_preview_2025_03_11", "mcp", "code_interpreter", "programmatic_tool_calling", "image_generation",
    "local_shell", "shell", "tool_search", "apply_patch",
})
NAMESPACE_SEPARATOR = "__"
INPUT = "input"


@dataclass(frozen=True)
class ModelTool:
    """One tool the model can call: the name it writes, and what a call of it becomes."""

    model_name: str
    name: str
    kind: str  # "function" | "custom"
    namespace: str | None
    definition: Json  # the flat function definition offered to the model (custom tools: with their `format`)


@dataclass
class Toolset:
    """The tools of one request, by the name the model writes."""

    tools: dict[str, ModelTool] = field(default_factory=dict)
    hosted: list[str] = field(default_factory=list)  # hosted tool types sent, not offered

    @property
    def functions(self) -> list[Json]:
        """Flat Responses-style function definitions of everything offered (what grammars are built from)."""
        return [t.definition for t in self.tools.values()]

    def template_tools(self) -> list[Json] | None:
        """The offered tools in the nested form chat templates expect; `strict` is ours to enforce, not theirs."""
        if not self.tools:
            return None
        out = []
        for tool in self.tools.values():
            function: Json = {"name": tool.model_name}
            if tool.definition.get("description") is not None:
                function["description"] = tool.definition["description"]
            function["parameters"] = tool.definition.get("parameters") or {"type": "object", "properties": {}}
            out.append({"type": "function", "function": function})
        return out

    def get(self, model_name: str) -> ModelTool | None:
        return self.tools.get(model_name)


def model_name(name: str, namespace: str | None) -> str:
    """The name the model sees for a (possibly namespaced) tool; history items are rendered with the same."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


def custom_parameters(fmt: Json) -> Json:
    """The JSON schema a custom tool is offered with: one string, described by the tool's input format `fmt`."""
    if fmt.get("type") == "grammar":
        description = (f"The raw input, which must follow this {fmt['syntax']} grammar:\n{fmt['definition']}")
    else:
        description = "The raw input, as free-form text."
    return {"type": "object", "properties": {INPUT: {"type": "string", "description": description}},
            "required": [INPUT]}


def _offer(tool: Json, namespace: str | None, out: Toolset) -> None:
    name = model_name(tool["name"], namespace)
    if tool["type"] == "custom":
        fmt = tool.get("format") or {"type": "text"}
        # A grammar is enforced on every call (as `strict` is); free-form input needs no decoding constraint.
        definition = {"type": "function", "name": name, "description": tool.get("description"),
                      "parameters": custom_parameters(fmt), "strict": fmt.get("type") == "grammar", "format": fmt}
        out.tools[name] = ModelTool(name, tool["name"], "custom", namespace, definition)
    else:
        definition = {**tool, "name": name}
        out.tools[name] = ModelTool(name, tool["name"], "function", namespace, definition)


def toolset(tools: list[Json] | None) -> Toolset:
    """The tools of a request (validated against the openai types already)."""
    out = Toolset()
    for tool in tools or []:
        kind = tool.get("type")
        if kind in ("function", "custom"):
            _offer(tool, None, out)
        elif kind == "namespace":
            for inner in tool.get("tools") or []:
                _offer(inner, tool["name"], out)
        else:
            out.hosted.append(str(kind))
    return out


def echo(tools: list[Json] | None) -> list[Json]:
    """Tools as the response echoes them: function fields filled in, the others as sent."""
    out = []
    for tool in tools or []:
        if tool.get("type") == "function":
            out.append({"type": "function", "name": tool["name"], "description": tool.get("description"),
                        "parameters": tool.get("parameters"), "strict": tool.get("strict")})
        elif tool.get("type") == "custom":
            out.append({"type": "custom", "name": tool["name"], "description": tool.get("description"),
                        "format": tool.get("format") or {"type": "text"}})
        else:
            out.append(dict(tool))
    return out


def input_from_arguments(arguments: str) -> str:
    """A custom call's input from the JSON arguments the model wrote: `{"input": "…"}`, else as written."""
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return arguments
    if isinstance(value, dict):
        if isinstance(value.get(INPUT), str):
            return value[INPUT]
        strings = [v for v in value.values() if isinstance(v, str)]
        if len(value) == 1 and strings:
            return strings[0]
    return arguments


_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_PLAIN = re.compile(r'[^"\\]+')
_HEAD = re.compile(r'\s*\{\s*"input"\s*:\s*"')
_HEAD_COMPACT = '{"input":"'


class InputStream:
    """A custom call's `input`, decoded from its JSON arguments while they stream (`{"input": "…"}` → the text).

    Work is proportional to each chunk: an escape split across chunks is held until it is whole. Arguments of any
    other shape stream nothing here; the whole input then comes with the call's end (`input_from_arguments`).
    """

    __slots__ = ("buf", "phase", "held", "text")

    def __init__(self) -> None:
        self.buf = ""
        self.phase = "head"  # head | string | after | other
        self.held = ""
        self.text: list[str] = []  # what has been streamed

    def feed(self, chunk: str) -> str:
        if self.phase == "head":
            self.buf += chunk
            m = _HEAD.match(self.buf)
            if m is None:
                if not _HEAD_COMPACT.startswith(re.sub(r"\s+", "", self.buf)):
                    self.phase = "other"
                return ""
            chunk, self.buf, self.phase = self.buf[m.end():], "", "string"
        if self.phase != "string":
            return ""
        s, self.held = self.held + chunk, ""
        out: list[str] = []
        i, n = 0, len(s)
        while i < n:
            m = _PLAIN.match(s, i)
            if m is not None:
                out.append(m.group())
                i = m.end()
                continue
            if s[i] == '"':
                self.phase = "after"
                break
            decoded, used = _escape(s, i)
            if used == 0:  # incomplete escape: wait for the rest
                self.held = s[i:]
                break
            out.append(decoded)
            i += used
        text = "".join(out)
        if text:
            self.text.append(text)
        return text

    @property
    def streamed(self) -> str:
        return "".join(self.text)


def _escape(s: str, i: int) -> tuple[str, int]:
    """The escape at `s[i]` (a backslash): (its text, characters used), or ("", 0) if it is not complete yet."""
    if i + 1 >= len(s):
        return "", 0
    e = s[i + 1]
    if e != "u":
        return _ESCAPES.get(e, e), 2
    if i + 6 > len(s):
        return "", 0
    try:
        code = int(s[i + 2:i + 6], 16)
    except ValueError:
        return s[i:i + 6], 6
    if 0xD800 <= code < 0xDC00:  # a high surrogate: its pair follows as another \uXXXX
        if i + 12 > len(s):
            return "", 0
        if s[i + 6:i + 8] == "\\u":
            try:
                low = int(s[i + 8:i + 12], 16)
            except ValueError:
                low = 0
            if 0xDC00 <= low < 0xE000:
                return chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)), 12
    return ("\ufffd" if 0xD800 <= code < 0xE000 else chr(code)), 6  # a lone surrogate cannot be encoded
