"""Structured output: grammar-constrained decoding for `text.format`, `tool_choice` and strict function tools.

This module owns everything between a request's constraints and the logits: it turns

* `text.format` `json_schema` (strict or not) and `json_object`,
* `tool_choice` `required`, a named function, `allowed_tools` (mode `auto` or `required`), strict function tools,
  `parallel_tool_calls: false` and `max_tool_calls`,

into grammars compiled with **xgrammar** (an optional extra: `pip install 'transformers-responses[structured]'`), and
enforces them while the model decodes, with `GrammarLogitsProcessor` (sequential `model.generate()`). It owns the
per-tokenizer `TokenizerInfo` cache, the LRU of compiled grammars, and the check that rejects (400) JSON-schema
keywords xgrammar would silently ignore. Tool-call syntax comes from the tool parsers (`ToolParser.call_syntax`), so a
constrained call is always one the family's parser reads back.

Continuous batching: the host's CB builds its logits processors once, from the generation config, so per-request
grammars there go through one router keyed by request id, `structured_cb.CBGrammarRouter` (it reaches into the
host's CB internals; `supports_continuous_batching(manager)` says when it can be used).

`xgrammar` is imported lazily: this module imports without the extra, and `available()` / `require()` say whether
constrained requests can be served.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from transformers import LogitsProcessor

from .errors import InvalidRequestError, UnsupportedError
from .tool_parsers.base import CallSyntax

if TYPE_CHECKING:
    import torch

__all__ = [
    "THINK", "CompiledGrammar", "GrammarLogitsProcessor", "Reasoning", "apply_mask", "available", "check_schema",
    "compile_json_object", "compile_json_schema", "compile_tool_calls", "model_vocab_size", "require",
    "supports_continuous_batching", "tool_calls_format",
]

INSTALL_HINT = "pip install 'transformers-responses[structured]'"
# Where the constrained output may start, for models that think first (`ToolParser.think_open/think_close`):
# "none": at once; "optional": after an optional `<think>…</think>` block; "opened": the prompt opened the block
# (the parser starts `in_reasoning`), so the output is the rest of it, `</think>`, then the constrained part.
Reasoning = Literal["none", "optional", "opened"]
THINK = ("<think>", "</think>")
CACHE_SIZE = 128
# Whitespace allowed between JSON tokens inside tool arguments (a structural tag has no exact-separator mode). A cap,
# because with free whitespace a small model can pad forever.
MAX_WHITESPACE = 1

# Keywords xgrammar 0.2 compiles but does not enforce (measured: a violating instance is accepted). Strict output
# must mean what it says, so these are a 400 rather than a silent no-op. Pure annotations (`title`, `format` values
# xgrammar does not know, `contentEncoding`...) are fine: JSON Schema does not require them to be enforced.
UNENFORCED_KEYWORDS = frozenset({
    "not", "if", "then", "else", "uniqueItems", "contains", "minContains", "maxContains", "dependentRequired",
    "dependentSchemas", "dependencies", "unevaluatedItems",
})
# Keywords whose value is a schema / a list of schemas / a map of name -> schema: where the walk descends.
_SUBSCHEMA = ("items", "additionalProperties", "unevaluatedProperties", "propertyNames", "contains", "not", "if",
              "then", "else", "additionalItems")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def available() -> bool:
    """Whether xgrammar is installed (without importing it: it pulls in torch and its native library)."""
    return importlib.util.find_spec("xgrammar") is not None


def require(param: str = "text.format") -> None:
    """Raise `UnsupportedError` (400, naming `param`) that says which extra to install when xgrammar is missing."""
    if not available():
        raise UnsupportedError(
            f"Structured output (text.format json_schema/json_object, forced tool_choice, strict tools) needs "
            f"xgrammar on the server: {INSTALL_HINT}", param=param)


def supports_continuous_batching(manager: Any = None) -> bool:
    """Whether constrained requests can run under continuous batching (with `structured_cb.CBGrammarRouter`).

    Without `manager`: whether xgrammar and the host's CB logits-processor API are there at all. With a
    `ContinuousBatchingManager` (created, not started): whether the router can attach to it (no async batching, no
    CUDA graphs or compile); if not, route constrained requests to the sequential path (and log why: the reason is
    `CBGrammarRouter.can_attach(manager)`).
    """
    if not available():
        return False
    try:
        from .structured_cb import CBGrammarRouter
    except ImportError:  # the host moved its CB internals
        return False
    return manager is None or CBGrammarRouter.can_attach(manager) is None


def model_vocab_size(model: Any) -> int:
    """The logits width of `model` (its config's vocabulary size), which may exceed the tokenizer's (padding)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(config.vocab_size)


@dataclass(frozen=True, eq=False)
class CompiledGrammar:
    """A grammar compiled for one tokenizer: what `GrammarLogitsProcessor` enforces. Cached, so share it freely."""

    grammar: Any  # xgrammar.CompiledGrammar (not imported at module load)
    vocab_size: int
    kind: str  # "json_schema" | "json_object" | "tool_calls", for logs

    def matcher(self, stop_token_ids: Sequence[int] | None = None) -> Any:
        """A fresh `xgrammar.GrammarMatcher` (one per generation: it holds the parse state)."""
        import xgrammar as xgr

        return xgr.GrammarMatcher(self.grammar, override_stop_tokens=list(stop_token_ids) if stop_token_ids else None)

    def accepts(self, text: str) -> bool:
        """Whether `text` is a complete sentence of the grammar (for tests and diagnostics)."""
        m = self.matcher()
        return bool(m.accept_string(text)) and bool(m.is_completed())


class _Compiler:
    """One tokenizer's xgrammar compiler and its LRU of compiled grammars (thread-safe: handlers compile, the
    inference thread only reads what they return)."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        import xgrammar as xgr

        self.vocab_size = vocab_size
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        # xgrammar's own cache is unbounded; ours is an LRU keyed by canonical JSON, so it is off.
        self.compiler = xgr.GrammarCompiler(info, cache_enabled=False)
        self.lock = threading.Lock()
        self.cache: OrderedDict[str, CompiledGrammar] = OrderedDict()

    def get(self, key: str, kind: str, build: Any) -> CompiledGrammar:
        with self.lock:
            hit = self.cache.get(key)
            if hit is not None:
                self.cache.move_to_end(key)
                return hit
        try:
            compiled = CompiledGrammar(build(self.compiler), self.vocab_size, kind)
        except (RuntimeError, ValueError) as exc:  # xgrammar reports bad schemas as RuntimeError from C++
            detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise InvalidRequestError(f"Invalid schema for structured output: {detail}",
                                      code="invalid_json_schema") from None
        with self.lock:
            compiled = self.cache.setdefault(key, compiled)  # a racing compile of the same key: keep the first
            self.cache.move_to_end(key)
            while len(self.cache) > CACHE_SIZE:
                self.cache.popitem(last=False)
        return compiled


# tokenizer -> {vocab size -> compiler}. Weak keys: a model unloaded by the host frees its grammars with it.
_compilers: weakref.WeakKeyDictionary[Any, dict[int, _Compiler]] = weakref.WeakKeyDictionary()
_compilers_lock = threading.Lock()


def _compiler(tokenizer: Any, vocab_size: int | None, param: str = "text.format") -> _Compiler:
    require(param)
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a ProcessorMixin wraps the tokenizer
    size = int(vocab_size) if vocab_size is not None else len(tokenizer)
    with _compilers_lock:
        per = _compilers.setdefault(tokenizer, {})
        if size not in per:
            per[size] = _Compiler(tokenizer, size)  # TokenizerInfo: once per tokenizer and logits width
        return per[size]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def check_schema(schema: Any, *, param: str = "text.format.schema") -> None:
    """Raise `InvalidRequestError` (400) naming the keywords of `schema` that would not be enforced."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if not isinstance(node, dict):
            return
        found.update(UNENFORCED_KEYWORDS.intersection(node))
        all_of = node.get("allOf")
        if isinstance(all_of, list) and len(all_of) > 1:  # a single-branch allOf (pydantic's $ref wrapper) is fine
            found.add("allOf")
        for key in _SUBSCHEMA:
            walk(node.get(key))
        for key in (*_SUBSCHEMA_LISTS, "items"):  # `items` may be a list of schemas (draft 4 tuples)
            subs = node.get(key)
            for sub in subs if isinstance(subs, list) else ():
                walk(sub)
        for key in _SUBSCHEMA_MAPS:
            sub_map = node.get(key)
            if isinstance(sub_map, dict):
                for sub in sub_map.values():
                    walk(sub)

    if not isinstance(schema, dict):
        raise InvalidRequestError("The JSON schema must be an object.", param=param, code="invalid_json_schema")
    walk(schema)
    if found:
        raise InvalidRequestError(
            f"JSON schema keyword(s) not supported for structured output: {', '.join(sorted(found))}.",
            param=param, code="invalid_json_schema")


def _reasoning_prefix(reasoning: Reasoning, think: tuple[str, str]) -> dict[str, Any] | None:
    """The structural-tag format of the reasoning block allowed before the constrained part (None: none)."""
    if reasoning == "none":
        return None
    block = {"type": "tag", "begin": think[0] if reasoning == "optional" else "", "content": {"type": "any_text"},
             "end": think[1]}
    # Templates put a blank line after the block; allow a little whitespace there, not an unbounded run.
    prefix = {"type": "sequence", "elements": [block, {"type": "regex", "pattern": "[ \\n]{0,3}"}]}
    return {"type": "optional", "content": prefix} if reasoning == "optional" else prefix


def _compile_json(tokenizer: Any, schema: dict[str, Any], strict: bool, vocab_size: int | None, kind: str,
                  reasoning: Reasoning, think: tuple[str, str]) -> CompiledGrammar:
    def build(compiler: Any) -> Any:
        if kind == "json_schema":
            check_schema(schema)  # on a cache miss only: a cached schema has passed
        if reasoning == "none":
            return compiler.compile_json_schema(schema, any_whitespace=False, strict_mode=strict)
        import xgrammar as xgr

        # The same compact JSON grammar, behind the reasoning block: its EBNF inside a structural tag.
        ebnf = str(xgr.Grammar.from_json_schema(schema, any_whitespace=False, strict_mode=strict))
        fmt = {"type": "sequence",
               "elements": [_reasoning_prefix(reasoning, think), {"type": "grammar", "grammar": ebnf}]}
        return compiler.compile_structural_tag({"type": "structural_tag", "format": fmt})

    key = f"{kind}:{int(strict)}:{reasoning}:{_canonical(think)}:{_canonical(schema)}"
    return _compiler(tokenizer, vocab_size).get(key, kind, build)


def compile_json_schema(tokenizer: Any, schema: dict[str, Any], *, strict: bool = True, vocab_size: int | None = None,
                        reasoning: Reasoning = "none", think: tuple[str, str] = THINK) -> CompiledGrammar:
    """The grammar of JSON documents valid against `schema`, written compactly (`, ` and `: `, no other whitespace).

    `strict` (the OpenAI `strict` flag) forbids properties and items the schema does not declare. `vocab_size` is
    the model's logits width (`model_vocab_size(model)`); default the tokenizer's length. `reasoning`/`think`: see
    `Reasoning`.
    """
    return _compile_json(tokenizer, schema, strict, vocab_size, "json_schema", reasoning, think)


def compile_json_object(tokenizer: Any, *, vocab_size: int | None = None, reasoning: Reasoning = "none",
                        think: tuple[str, str] = THINK) -> CompiledGrammar:
    """The grammar of any JSON object (`text.format` `json_object`), written compactly."""
    return _compile_json(tokenizer, {"type": "object"}, False, vocab_size, "json_object", reasoning, think)


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    """A function tool's definition, from either shape: Responses (flat) or chat (`{"function": {...}}`)."""
    return tool["function"] if isinstance(tool.get("function"), dict) else tool


def tool_calls_format(tools: Iterable[dict[str, Any]], *, mode: Literal["auto", "required"],
                      syntax: CallSyntax, names: Sequence[str] | None = None,
                      max_calls: int | None = None) -> dict[str, Any]:
    """The xgrammar structural-tag `format` (plain dicts) for the tool calls a request allows.

    `mode="required"`: one to `max_calls` calls (unbounded if None) of the functions in `names` (default all), and
    nothing else, then the end of the turn. `mode="auto"`: free text, in which calls of those functions may appear
    after `syntax.trigger` (at most one if `max_calls == 1`; a larger cap is left to the handler, the structural tag
    cannot count). Arguments follow the tool's `parameters` schema: closed (no undeclared keys) for strict tools, as
    given for the others (any JSON object when the schema has keywords we cannot enforce).
    """
    by_name = {_function(t)["name"]: _function(t) for t in tools if t.get("type", "function") == "function"}
    wanted = list(names) if names is not None else list(by_name)
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise InvalidRequestError(f"tool_choice names unknown function(s): {', '.join(unknown)}.", param="tool_choice")
    if not wanted:
        raise InvalidRequestError("tool_choice allows no function tool.", param="tool_choice")
    if max_calls is not None and max_calls < 1:
        raise InvalidRequestError("max_tool_calls must be at least 1.", param="max_tool_calls")

    tags = []
    for name in wanted:
        function = by_name[name]
        schema: dict[str, Any] | bool = {"type": "object"}
        parameters = function.get("parameters")
        if function.get("strict") and isinstance(parameters, dict):
            check_schema(parameters, param="tools.parameters")
            # OpenAI strict semantics: no undeclared properties (xgrammar's structural tag does not add it).
            schema = _closed(parameters)
        elif isinstance(parameters, dict) and parameters.get("type", "object") == "object":
            # Not strict: the schema still shapes the arguments (clients validate them), undeclared keys allowed;
            # a schema we could not enforce faithfully leaves them any JSON object rather than failing the request.
            try:
                check_schema(parameters, param="tools.parameters")
                schema = _closed({k: v for k, v in parameters.items() if k != "$schema"}, closed=False)
            except InvalidRequestError:
                pass
        content: dict[str, Any] = {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": MAX_WHITESPACE}
        if syntax.arguments != "json":
            content["style"] = syntax.arguments
        if (function.get("format") or {}).get("type") == "grammar":  # a custom tool's input grammar
            content = {"type": "grammar", "grammar": _custom_input_grammar(function["format"], syntax)}
        tags.append({"type": "tag", "begin": syntax.call_begin(name), "content": content, "end": syntax.end})

    if mode == "auto":
        if syntax.trigger:
            return {"type": "triggered_tags", "triggers": [syntax.trigger], "tags": tags,
                    "stop_after_first": max_calls == 1}
        calls = _repeat(tags, syntax.separator, max_calls)
        return {"type": "or", "elements": [{"type": "any_text"}, calls]}
    if mode != "required":
        raise ValueError(f"unknown tool-call mode {mode!r}")
    return _repeat(tags, syntax.separator, max_calls)


def _custom_input_grammar(fmt: dict[str, Any], syntax: CallSyntax) -> str:
    """The arguments of a custom tool's call whose `input` follows the tool's grammar, in the family's syntax."""
    from .custom_grammar import escape_for_json, input_ebnf, renamed

    ebnf = input_ebnf(fmt)
    if syntax.arguments == "qwen_xml":  # the value is raw text in its `<parameter=input>` block
        return renamed(ebnf) + '\nroot ::= "<parameter=input>\\n" custom_root "\\n</parameter>"\n'
    return renamed(escape_for_json(ebnf)) + '\nroot ::= "{\\"input\\": \\"" custom_root "\\"}"\n'


def _repeat(tags: list[dict[str, Any]], separator: str, max_calls: int | None) -> dict[str, Any]:
    call: dict[str, Any] = tags[0] if len(tags) == 1 else {"type": "or", "elements": tags}
    if max_calls == 1:
        return call
    more: dict[str, Any] = {"type": "sequence", "elements": [{"type": "const_string", "value": separator}, call]} \
        if separator else call
    rest = {"type": "star", "content": more} if max_calls is None else \
        {"type": "repeat", "min": 0, "max": max_calls - 1, "content": more}
    return {"type": "sequence", "elements": [call, rest]}


def _closed(schema: dict[str, Any], *, closed: bool = True) -> dict[str, Any]:
    """`schema` with `additionalProperties: false` on every object schema that declares properties and does not say
    otherwise: what `compile_json_schema(strict=True)` does (a free-form `{"type": "object"}` stays open). With
    `closed=False`, `true` instead: xgrammar's structural tags would otherwise close them too."""
    def close(node: Any) -> Any:
        if isinstance(node, list):
            return [close(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: (close(v) if k in (*_SUBSCHEMA, *_SUBSCHEMA_LISTS) else
                   {n: close(s) for n, s in v.items()} if k in _SUBSCHEMA_MAPS and isinstance(v, dict) else v)
               for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = not closed
        return out
    return close(schema)


def compile_tool_calls(tokenizer: Any, tools: Sequence[dict[str, Any]], *, mode: Literal["auto", "required"],
                       syntax: CallSyntax, names: Sequence[str] | None = None, max_calls: int | None = None,
                       vocab_size: int | None = None, reasoning: Reasoning = "none",
                       think: tuple[str, str] = THINK) -> CompiledGrammar:
    """The grammar of a turn's tool calls (see `tool_calls_format`), in the family's `syntax`.

    From the request: `required` -> `mode="required"`; a named function -> `mode="required", names=[name]`;
    `allowed_tools` -> `names` = the subset with its `mode`; `auto` with a strict tool -> `mode="auto"`;
    `parallel_tool_calls: false` -> `max_calls=1`; `max_tool_calls: N` -> `max_calls=N`. `reasoning`/`think`: see
    `Reasoning` (from the parser: `"opened"` if it starts `in_reasoning`, `"optional"` for a thinking model).
    """
    fmt = tool_calls_format(tools, mode=mode, syntax=syntax, names=names, max_calls=max_calls)
    prefix = _reasoning_prefix(reasoning, think)
    if prefix is not None:
        fmt = {"type": "sequence", "elements": [prefix, fmt]}
    tag = {"type": "structural_tag", "format": fmt}
    return _compiler(tokenizer, vocab_size, "tool_choice").get(f"tools:{_canonical(tag)}", "tool_calls",
                                                lambda c: c.compile_structural_tag(tag))


def apply_mask(scores: torch.Tensor, bitmask: torch.Tensor, vocab_size: int, indices: list[int] | None = None) -> None:
    """Set the scores of the tokens `bitmask` forbids to -inf, in place (rows `indices`, default all).

    Tokens past `vocab_size` (logits wider than the grammar's vocabulary) are always forbidden. On an accelerator the
    bitmask is copied over and applied with triton if it is installed, else with xgrammar's plain-torch kernel: the
    light install has no triton, and xgrammar's automatic choice there would fail.
    """
    import xgrammar as xgr

    rows = slice(None) if indices is None else indices
    if scores.shape[-1] > vocab_size:
        scores[rows, vocab_size:] = float("-inf")
    width = min(vocab_size, scores.shape[-1])
    if scores.device.type == "cpu":
        xgr.apply_token_bitmask_inplace(scores, bitmask, vocab_size=width, indices=indices, backend="cpu")
        return
    device_mask = bitmask.to(scores.device, non_blocking=True)
    if importlib.util.find_spec("triton") is not None:
        xgr.apply_token_bitmask_inplace(scores, device_mask, vocab_size=width, indices=indices, backend="triton")
    else:
        xgr.apply_token_bitmask_inplace(scores, device_mask, vocab_size=width, indices=indices, backend="torch_native")


class GrammarLogitsProcessor(LogitsProcessor):
    """Masks every token the grammar forbids, for sequential `model.generate()` (batch size 1).

    Each step it accepts the token sampled last, fills the token bitmask and applies it to the scores in place
    (once: applying costs more than filling). Once the grammar is complete, only the stop tokens remain; if
    generation goes on after one was accepted, the first EOS is forced. Use one instance per `generate()` call, and
    put it before any sampling warper (custom processors passed to `generate(logits_processor=...)` are: they run
    ahead of temperature/top-k/top-p), so that a warper never sees a row of only masked tokens.
    """

    def __init__(self, compiled: CompiledGrammar, *, eos_token_id: int | Sequence[int] | None = None) -> None:
        import xgrammar as xgr

        stop = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id or ())
        self.compiled = compiled
        self.matcher = compiled.matcher(stop or None)
        self.eos_token_id = stop[0] if stop else compiled.grammar.tokenizer_info.stop_token_ids[0]
        self.bitmask = xgr.allocate_token_bitmask(1, compiled.vocab_size)
        self._started = False

    @property
    def is_completed(self) -> bool:
        """Whether the output the matcher has seen is a complete sentence of the grammar.

        After `generate()` stopped on an end token this is True (the grammar allowed that token only once complete).
        After it stopped on the token limit the matcher has not seen the last token (processors run before each
        choice), so read the limit as `incomplete` from the finish reason, not from here.
        """
        return bool(self.matcher.is_completed())

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if scores.shape[0] != 1:
            raise ValueError("GrammarLogitsProcessor supports batch size 1 only (one request per generate call).")
        if self._started and not self.matcher.is_terminated():
            token = int(input_ids[0, -1])
            if not self.matcher.accept_token(token):  # cannot happen unless something after us changed the choice
                raise RuntimeError(f"the sampled token {token} violates the grammar")
        self._started = True
        if self.matcher.is_terminated():
            eos = scores[0, self.eos_token_id].item()
            scores.fill_(float("-inf"))
            scores[0, self.eos_token_id] = eos if eos != float("-inf") else 0.0
            return scores
        self.matcher.fill_next_token_bitmask(self.bitmask, 0)
        apply_mask(scores, self.bitmask, self.compiled.vocab_size)
        return scores
