"""Event emission: turns the tool parser's events into the exact Responses event sequence and the final response.

`Assembler` is the small state object of one response: which output item is open, the text so far, the calls.
It owns the ordering rules — reasoning before the message, one `output_index` per item, calls one after another, no
empty message item, the cut item `incomplete` and last — and nothing else: events are built by `events`, numbered and
framed by `events.Sequencer`, written by the handler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import events as ev
from .tools import InputStream, Toolset, input_from_arguments

Json = dict[str, Any]

# Response fields echoed from the request as they came, or None when absent.
_ECHOED = ("instructions", "max_output_tokens", "max_tool_calls", "previous_response_id", "user",
           "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "access_programs", "prompt_cache_options")


def initial_response(body: Json, *, response_id: str, model: str, created_at: int, tools: list[Json]) -> Json:
    """The response snapshot before any output: every field of `openai.types.responses.Response` present."""
    text = dict(body.get("text") or {})
    text.setdefault("format", {"type": "text"})
    text.setdefault("verbosity", "medium")
    reasoning = body.get("reasoning")
    snapshot: Json = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "background": bool(body.get("background") or False),
        "completed_at": None,
        "conversation": None,
        "error": None,
        "incomplete_details": None,
        "metadata": body.get("metadata") or {},
        "model": model,
        "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True) is not False,
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "top_logprobs": body.get("top_logprobs") or 0,
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": tools,
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")} if reasoning else None,
        "text": text,
        "truncation": body.get("truncation") or "disabled",
        "service_tier": "default" if body.get("service_tier") in (None, "auto") else body["service_tier"],
        "store": body.get("store", True) is not False,
        "usage": None,
        "prompt": None,
        "image": None,
        "moderation": None,
        "input_transformations": None,
        "prompt_cache_diagnostics": None,
        "tool_usage": None,
    }
    for key in _ECHOED:
        snapshot[key] = body.get(key)
    return snapshot


class Assembler:
    """State of one response's output while it is generated; see the module docstring for the rules it keeps."""

    def __init__(self, snapshot: Json, *, seal: Callable[[str], str] | None = None,
                 tools: Toolset | None = None) -> None:
        self.snapshot = snapshot
        # `reasoning.summary` asked: this server has no summarizer, so the reasoning text is also the summary.
        self.summarize = (snapshot.get("reasoning") or {}).get("summary") not in (None, "none")
        self.tools = tools or Toolset()  # what the model's call names stand for (custom, namespaced)
        self._input: InputStream | None = None  # of the open custom tool call
        self.seal = seal  # with `include: ["reasoning.encrypted_content"]`: reasoning text → its sealed form
        self.output: list[Json] = []  # finished items, in output_index order
        self._open: Json | None = None  # the item being written
        self._kind = ""
        self._parts: list[str] = []
        self._logprobs: list[Json] = []  # of the open message
        self._pending: list[Json] = []  # logprobs of tokens whose text has not been emitted yet
        self.calls = 0

    # -- lifecycle --

    def start(self, *, queued: bool = False) -> list[Json]:
        """`created` and `in_progress`; a background response is first `queued` (its created snapshot too)."""
        if queued:
            return [ev.response_event("created", self.view("queued")), ev.response_event("queued", self.view("queued")),
                    ev.response_event("in_progress", self.view("in_progress"))]
        return [ev.response_event("created", self.view("in_progress")),
                ev.response_event("in_progress", self.view("in_progress"))]

    def view(self, status: str, **extra: Any) -> Json:
        return {**self.snapshot, "status": status, "output": list(self.output), **extra}

    @property
    def index(self) -> int:
        return len(self.output)

    # -- parser events --

    def apply(self, events: list[tuple[str, str]], logprobs: list[Json] | None = None) -> list[Json]:
        """Events for the parser's events; `logprobs` (of the tokens just decoded) ride on the next text delta."""
        out: list[Json] = []
        if logprobs:
            self._pending.extend(logprobs)
        for kind, value in events:
            if kind == "text":
                if self._kind != "message":
                    self._close(out)
                    self._open_message(out)
                self._parts.append(value)
                attached, self._pending = self._pending, []
                self._logprobs.extend(attached)
                out.append(ev.output_text_delta(self._open["id"], self.index, value, attached))  # type: ignore[index]
                continue
            self._pending = []  # tokens that became reasoning or a call have no output_text logprobs
            if kind == "reasoning":
                if self._kind != "reasoning":
                    self._close(out)
                    self._open_reasoning(out)
                self._parts.append(value)
                item_id = self._open["id"]  # type: ignore[index]
                out.append(ev.reasoning_text_delta(item_id, self.index, value))
                if self.summarize:
                    out.append(ev.reasoning_summary_text_delta(item_id, self.index, value))
            elif kind == "reasoning_end":
                if self._kind == "reasoning":
                    self._close(out)
            elif kind == "call_start":
                self._close(out)
                self._open_call(value, out)
            elif kind == "call_delta":
                if self._kind == "call":
                    self._parts.append(value)
                    out.append(ev.function_call_arguments_delta(self._open["id"], self.index, value))  # type: ignore[index]
                elif self._kind == "custom":
                    self._parts.append(value)
                    text = self._input.feed(value)  # type: ignore[union-attr]
                    if text:
                        item_id = self._open["id"]  # type: ignore[index]
                        out.append(ev.custom_tool_call_input_delta(item_id, self.index, text))
            elif kind == "call_end":
                if self._kind in ("call", "custom"):
                    self._close(out, arguments=value)
            elif kind == "call_abort":
                # A call that was not a call after all: closed as incomplete, its text shown as text.
                if self._kind in ("call", "custom"):
                    self._close(out, status="incomplete")
                if value:
                    out.extend(self.apply([("text", value)]))
        return out

    def finish(self, status: str, usage: Json | None, *, incomplete_reason: str | None = None,
               error: Json | None = None) -> list[Json]:
        """Close what is open (as `incomplete` when cut), then the terminal event with the final snapshot."""
        out: list[Json] = []
        self._close(out, status="completed" if status == "completed" else "incomplete")
        final = self.final(status, usage, incomplete_reason=incomplete_reason, error=error)
        out.append(ev.response_event(status, final))  # status is completed | incomplete | failed | cancelled
        return out

    def final(self, status: str, usage: Json | None, *, incomplete_reason: str | None = None,
              error: Json | None = None) -> Json:
        extra: Json = {"usage": usage}
        if status in ("completed", "incomplete"):
            extra["completed_at"] = ev.now()
        if incomplete_reason:
            extra["incomplete_details"] = {"reason": incomplete_reason}
        if error:
            extra["error"] = error
        return self.view(status, **extra)

    # -- items --

    def _open_message(self, out: list[Json]) -> None:
        self._open, self._kind, self._parts = {"id": ev.new_id("msg")}, "message", []
        out.append(ev.output_item_added(self.index, ev.message_item(self._open["id"], None, "in_progress")))
        out.append(ev.content_part_added(self._open["id"], self.index, 0, ev.output_text_part("")))

    def _open_reasoning(self, out: list[Json]) -> None:
        self._open, self._kind, self._parts = {"id": ev.new_id("rs")}, "reasoning", []
        out.append(ev.output_item_added(self.index, ev.reasoning_item(self._open["id"], None, "in_progress")))
        if self.summarize:
            out.append(ev.reasoning_summary_part_added(self._open["id"], self.index))

    def _open_call(self, model_name: str, out: list[Json]) -> None:
        tool = self.tools.get(model_name)
        name, namespace = (tool.name, tool.namespace) if tool is not None else (model_name, None)
        custom = tool is not None and tool.kind == "custom"
        self._open = {"id": ev.new_id("ctc" if custom else "fc"), "call_id": ev.new_id("call"), "name": name,
                      "namespace": namespace}
        self._parts = []
        if custom:
            self._kind, self._input = "custom", InputStream()
            item = ev.custom_tool_call_item(self._open["id"], self._open["call_id"], name, "", namespace)
        else:
            self._kind = "call"
            item = ev.function_call_item(self._open["id"], self._open["call_id"], name, "", "in_progress", namespace)
        out.append(ev.output_item_added(self.index, item))

    def _close(self, out: list[Json], *, status: str = "completed", arguments: str | None = None) -> None:
        if self._open is None:
            return
        item_id, index, text = self._open["id"], self.index, "".join(self._parts)
        if self._kind == "message":
            logprobs, self._logprobs = self._logprobs, []
            part = ev.output_text_part(text, logprobs)
            out.append(ev.output_text_done(item_id, index, text, logprobs))
            out.append(ev.content_part_done(item_id, index, 0, part))
            item = ev.message_item(item_id, text, status, logprobs)
        elif self._kind == "reasoning":
            out.append(ev.reasoning_text_done(item_id, index, text))
            if self.summarize:
                out.append(ev.reasoning_summary_text_done(item_id, index, text))
                out.append(ev.reasoning_summary_part_done(item_id, index, text))
            item = ev.reasoning_item(item_id, text, status, self.seal(text) if self.seal else None,
                                     summary=self.summarize)
        elif self._kind == "custom":
            streamed = self._input.streamed if self._input is not None else ""
            value = input_from_arguments(arguments) if arguments is not None else streamed
            if value.startswith(streamed) and len(value) > len(streamed):  # what the stream could not decode yet
                out.append(ev.custom_tool_call_input_delta(item_id, index, value[len(streamed):]))
            out.append(ev.custom_tool_call_input_done(item_id, index, value))
            item = ev.custom_tool_call_item(item_id, self._open["call_id"], self._open["name"], value,
                                            self._open["namespace"])
            self._input = None
            self.calls += 1
        else:
            args = arguments if arguments is not None else text
            out.append(ev.function_call_arguments_done(item_id, index, self._open["name"], args))
            item = ev.function_call_item(item_id, self._open["call_id"], self._open["name"], args, status,
                                         self._open["namespace"])
            self.calls += 1
        out.append(ev.output_item_done(index, item))
        self.output.append(item)
        self._open, self._kind, self._parts = None, "", []

    @property
    def in_call(self) -> bool:
        return self._kind in ("call", "custom")
