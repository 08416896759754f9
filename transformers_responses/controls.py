"""Generation controls: what a request asks of the decoding itself, turned into logits processors.

`plan` reads `text.format`, `tool_choice`, strict function tools, `parallel_tool_calls`, `max_tool_calls`,
`include: ["message.output_text.logprobs"]` / `top_logprobs` and returns a `Controls`: the grammar to enforce (built by
`structured`, in the model family's own call syntax so that the tool parser reads back what the grammar forced), the
tokens to forbid, the logprobs recorder, and the call cap the handler applies. `Controls.attach` hands the processors
to the host's sequential `generate()` through the `inputs` mapping, which the host passes to `generate()` as they are;
under continuous batching `Controls.route` registers the grammar with the CB's router (`structured_cb`) instead.

The table of what maps to what:

| request | grammar |
| --- | --- |
| `text.format` `json_schema` (`strict` true / false) | JSON valid against the schema (undeclared keys forbidden / allowed) |
| `text.format` `json_object` | any JSON object |
| `tool_choice: "required"` | one or more calls of any function tool, nothing else |
| `tool_choice: {"type": "function", "name"}` | calls of that function only |
| `tool_choice: {"type": "allowed_tools", "mode", "tools"}` | calls restricted to the subset; `required` forces one |
| `tool_choice: "auto"` with a `strict` tool | free text; any call follows its tool's schema |
| a `custom` tool (`{"type": "custom", "name"}` forces it) | its call's `input` is a string; with a `lark`/`regex` grammar, a sentence of it |
| `tool_choice: "none"` | no grammar; the call opener (e.g. `<tool_call>`) is forbidden when it is one token |
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidRequestError, UnsupportedError
from .tools import toolset

logger = logging.getLogger("transformers_responses")

Json = dict[str, Any]

LOGPROBS_INCLUDE = "message.output_text.logprobs"


@dataclass
class Controls:
    """The decoding controls of one request."""

    grammar: Any = None  # structured.CompiledGrammar
    forbidden: list[int] = field(default_factory=list)
    logprobs: int | None = None  # top_logprobs when logprobs are returned, else None
    max_calls: int | None = None  # the handler ends the turn after this many complete calls
    recorder: Any = None  # logprobs.LogprobsRecorder, once attached
    release: Any = None  # forgets the grammar in the CB router, once routed

    @property
    def needs_sequential(self) -> bool:
        """Per-request processors run on the sequential path (the host's CB takes none)."""
        return self.grammar is not None or bool(self.forbidden) or self.logprobs is not None

    def attach(self, inputs: Any, tokenizer: Any, eos_token_id: Any) -> None:
        """Give the sequential `generate()` our processors (grammar first, logprobs recorder last)."""
        if not self.needs_sequential:
            return
        from transformers import LogitsProcessorList, StoppingCriteriaList

        processors: list[Any] = []
        eos = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id or [])
        if self.forbidden:
            processors.append(_Forbid(self.forbidden))
        if self.grammar is not None:
            from .structured import GrammarLogitsProcessor

            processors.append(GrammarLogitsProcessor(self.grammar, eos_token_id=eos))
        if self.logprobs is not None:
            from .logprobs import LogprobsRecorder

            self.recorder = LogprobsRecorder(tokenizer, self.logprobs, skip_ids=eos)
            processors.append(self.recorder)
            inputs["stopping_criteria"] = StoppingCriteriaList([self.recorder.chosen])
        inputs["logits_processor"] = LogitsProcessorList(processors)

    def route(self, router: Any, request_id: str, eos_token_id: Any) -> None:
        """Under continuous batching: the CB's grammar router constrains this request (by its id)."""
        eos = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id or [])
        router.register(request_id, self.grammar, eos)
        self.release = lambda: router.release(request_id)

    def done(self) -> None:
        if self.release is not None:
            self.release()
            self.release = None

    def drain_logprobs(self) -> list[Json]:
        return self.recorder.drain() if self.recorder is not None else []


class _Forbid:
    """A logits processor that never lets the model write the given tokens."""

    def __init__(self, token_ids: list[int]) -> None:
        self.token_ids = token_ids

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        scores[:, self.token_ids] = float("-inf")
        return scores


def needs_processors(body: Json) -> bool:
    """Whether a request needs per-request logits processors (decided before the prompt is rendered)."""
    tools = toolset(body.get("tools")).functions
    choice = body.get("tool_choice") or "auto"
    fmt = ((body.get("text") or {}).get("format") or {}).get("type", "text")
    return (wants_logprobs(body) is not None or fmt != "text"
            or (bool(tools) and (choice != "auto" or any(t.get("strict") for t in tools))))


def cb_can_constrain(body: Json) -> bool:
    """Whether continuous batching (with the grammar router) can apply all of a request's controls: grammars yes;
    logprobs and forbidden tokens (`tool_choice: none`) are recorded/applied on the sequential path only."""
    tools = toolset(body.get("tools")).functions
    return wants_logprobs(body) is None and not (tools and body.get("tool_choice") == "none")


def wants_logprobs(body: Json) -> int | None:
    if LOGPROBS_INCLUDE in (body.get("include") or []) or (body.get("top_logprobs") or 0) > 0:
        return int(body.get("top_logprobs") or 0)
    return None


def _function_names(choice: Any, tools: list[Json]) -> tuple[str, list[str] | None]:
    """(mode, names) of a forcing `tool_choice`; mode "" when it forces nothing."""
    declared = [t["name"] for t in tools]
    if choice == "required":
        return "required", None
    if isinstance(choice, dict) and choice.get("type") in ("function", "custom"):
        if choice["name"] not in declared:
            raise InvalidRequestError(f"Tool choice '{choice['name']}' not found in 'tools' parameter.",
                                      param="tool_choice.name")
        return "required", [choice["name"]]
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        names = []
        for i, tool in enumerate(choice.get("tools") or []):
            if tool.get("type") not in ("function", "custom") or tool.get("name") not in declared:
                raise InvalidRequestError(f"Allowed tool {tool.get('name') or tool.get('type')!r} is not a function "
                                          "tool of this request.", param=f"tool_choice.tools[{i}]")
            names.append(tool["name"])
        return choice.get("mode", "auto"), names
    return "", None


def plan(body: Json, *, parser: Any, tokenizer: Any, model: Any) -> Controls:
    """The controls a request asks for; 400 naming the field when it cannot be honoured."""
    controls = Controls(logprobs=wants_logprobs(body))
    tools = toolset(body.get("tools")).functions
    choice = body.get("tool_choice") or "auto"
    parallel = body.get("parallel_tool_calls", True) is not False
    cap = body.get("max_tool_calls")
    controls.max_calls = 1 if not parallel else cap
    fmt = (body.get("text") or {}).get("format") or {"type": "text"}
    mode, names = _function_names(choice, tools)
    if fmt["type"] != "text" and tools and choice != "none" and mode in ("", "auto"):
        # One grammar cannot both shape the answer and leave the choice of calling to the model.
        raise UnsupportedError("A structured `text.format` together with tools the model may or may not call "
                               "(`tool_choice: auto`) is not supported: force the calls (`tool_choice: required` or a "
                               "function) or set `tool_choice: none`.", param="text.format")
    if choice != "none" and tools and mode == "" and any(t.get("strict") for t in tools):
        mode, names = "auto", None

    needs_grammar = bool(mode) or fmt["type"] in ("json_schema", "json_object")
    if needs_grammar:
        from . import structured

        structured.require("tool_choice" if mode else "text.format")
        vocab = structured.model_vocab_size(model)
        reasoning = _reasoning(parser, tokenizer)
        think = (parser.think_open, parser.think_close)
        if mode:
            syntax = parser.call_syntax
            if syntax is None:
                raise UnsupportedError(f"Forcing or constraining tool calls needs the call syntax of the model's "
                                       f"family; the {parser.name!r} tool parser does not state one.",
                                       param="tool_choice")
            max_calls = 1 if not parallel else cap
            controls.grammar = structured.compile_tool_calls(
                tokenizer, tools, mode=mode, syntax=syntax, names=names, max_calls=max_calls,
                vocab_size=vocab, reasoning=reasoning, think=think)
        elif fmt["type"] == "json_schema":
            controls.grammar = structured.compile_json_schema(
                tokenizer, fmt["schema"], strict=bool(fmt.get("strict")), vocab_size=vocab, reasoning=reasoning,
                think=think)
        else:
            controls.grammar = structured.compile_json_object(tokenizer, vocab_size=vocab, reasoning=reasoning,
                                                              think=think)
    elif choice == "none" and parser.call_syntax is not None and parser.call_syntax.trigger:
        ids = tokenizer.encode(parser.call_syntax.trigger, add_special_tokens=False)
        if len(ids) == 1:  # the call opener is one token: the model cannot open a call at all
            controls.forbidden = ids
    return controls


def _reasoning(parser: Any, tokenizer: Any) -> str:
    """Where constrained output may start: after the block the prompt opened, after an optional one, or at once."""
    if parser.in_reasoning:
        return "opened"
    template = str(getattr(tokenizer, "chat_template", "") or "")
    return "optional" if parser.think_open in template else "none"
