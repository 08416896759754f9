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

Continuous batching is not supported (`supports_continuous_batching()` is False): the host's CB builds its logits
processors once from the generation config, and a per-request grammar there needs its private internals; see
`supports_continuous_batching` for what it would take. Constrained requests go to the sequential path.

`xgrammar` is imported lazily, so importing this module is free and works without the extra.
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
    "CompiledGrammar", "GrammarLogitsProcessor", "available", "compile_json_object", "compile_json_schema",
    "compile_tool_calls", "model_vocab_size", "require", "supports_continuous_batching",
]

INSTALL_HINT = "pip install 'transformers-responses[structured]'"
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


def require() -> None:
    """Raise `UnsupportedError` (400) naming the extra to install when xgrammar is missing."""
    if not available():
        raise UnsupportedError(
            f"Structured output (text.format json_schema/json_object, forced tool_choice, strict tools) needs "
            f"xgrammar on the server: {INSTALL_HINT}", param="text.format")


def supports_continuous_batching() -> bool:
    """False: constrained requests must take the sequential `model.generate()` path.

    The host's CB (transformers 5.24, `generation/continuous_batching`) builds one `ContinuousBatchingLogitsProcessorList`
    from the generation config in `ContinuousBatchingManager.__init__` and sizes its per-request argument buffers
    (`tensors_required`) from it before `start()`; `CBGenerateManager.init_cb` calls both back to back, and
    `add_request` takes no processor. A grammar router keyed by request id is possible (a
    `ContinuousBatchingLogitsProcessor` whose `prepare_tensor_args` maps each row to a matcher slot and whose
    `__call__` reads the sampled token from the carried-over input ids), but only by replacing `init_cb`, mutating
    the private list before the IO buffers exist, and running Python per step, which CUDA graphs / `torch.compile`
    of the CB step would freeze. That is not shippable against a host that may change any of it in a patch release.
    """
    return False


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


def _compiler(tokenizer: Any, vocab_size: int | None) -> _Compiler:
    require()
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


def compile_json_schema(tokenizer: Any, schema: dict[str, Any], *, strict: bool = True,
                        vocab_size: int | None = None) -> CompiledGrammar:
    """The grammar of JSON documents valid against `schema`, written compactly (`, ` and `: `, no other whitespace).

    `strict` (the OpenAI `strict` flag) forbids properties and items the schema does not declare. `vocab_size` is
    the model's logits width (`model_vocab_size(model)`); default the tokenizer's length.
    """
    check_schema(schema)
    return _compiler(tokenizer, vocab_size).get(
        f"schema:{int(strict)}:{_canonical(schema)}", "json_schema",
        lambda c: c.compile_json_schema(schema, any_whitespace=False, strict_mode=strict))


def compile_json_object(tokenizer: Any, *, vocab_size: int | None = None) -> CompiledGrammar:
    """The grammar of any JSON object (`text.format` `json_object`), written compactly."""
    return _compiler(tokenizer, vocab_size).get(
        "json_object", "json_object",
        lambda c: c.compile_json_schema({"type": "object"}, any_whitespace=False, strict_mode=False))


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
    cannot count). Arguments follow the tool's `parameters` schema for strict tools, else any JSON object.
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
        if function.get("strict") and isinstance(function.get("parameters"), dict):
            check_schema(function["parameters"], param="tools.parameters")
            # OpenAI strict semantics: no undeclared properties (xgrammar's structural tag does not add it).
            schema = _closed(function["parameters"])
        content: dict[str, Any] = {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": MAX_WHITESPACE}
        if syntax.arguments != "json":
            content["style"] = syntax.arguments
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


def _repeat(tags: list[dict[str, Any]], separator: str, max_calls: int | None) -> dict[str, Any]:
    call: dict[str, Any] = tags[0] if len(tags) == 1 else {"type": "or", "elements": tags}
    if max_calls == 1:
        return call
    more: dict[str, Any] = {"type": "sequence", "elements": [{"type": "const_string", "value": separator}, call]} \
        if separator else call
    rest = {"type": "star", "content": more} if max_calls is None else \
        {"type": "repeat", "min": 0, "max": max_calls - 1, "content": more}
    return {"type": "sequence", "elements": [call, rest]}


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with `additionalProperties: false` on every object schema that does not say otherwise."""
    def close(node: Any) -> Any:
        if isinstance(node, list):
            return [close(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: (close(v) if k in (*_SUBSCHEMA, *_SUBSCHEMA_LISTS) else
                   {n: close(s) for n, s in v.items()} if k in _SUBSCHEMA_MAPS and isinstance(v, dict) else v)
               for k, v in node.items()}
        if (out.get("type") == "object" or "properties" in out) and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    return close(schema)


def compile_tool_calls(tokenizer: Any, tools: Sequence[dict[str, Any]], *, mode: Literal["auto", "required"],
                       syntax: CallSyntax, names: Sequence[str] | None = None, max_calls: int | None = None,
                       vocab_size: int | None = None) -> CompiledGrammar:
    """The grammar of a turn's tool calls (see `tool_calls_format`), in the family's `syntax`.

    From the request: `required` -> `mode="required"`; a named function -> `mode="required", names=[name]`;
    `allowed_tools` -> `names` = the subset with its `mode`; `auto` with a strict tool -> `mode="auto"`;
    `parallel_tool_calls: false` -> `max_calls=1`; `max_tool_calls: N` -> `max_calls=N`.
    """
    fmt = tool_calls_format(tools, mode=mode, syntax=syntax, names=names, max_calls=max_calls)
    tag = {"type": "structural_tag", "format": fmt}
    return _compiler(tokenizer, vocab_size).get(f"tools:{_canonical(tag)}", "tool_calls",
                                                lambda c: c.compile_structural_tag(tag))


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
        self._apply = xgr.apply_token_bitmask_inplace
        self._started = False

    @property
    def is_terminated(self) -> bool:
        """Whether the grammar accepted a stop token (the output is complete, not cut off by max tokens)."""
        return bool(self.matcher.is_terminated())

    @property
    def is_completed(self) -> bool:
        """Whether the text so far is a complete sentence of the grammar (a stop token may end it now)."""
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
        width = self.compiled.vocab_size
        if scores.shape[-1] > width:  # logits wider than the grammar's vocabulary: the tail is never allowed
            scores[:, width:] = float("-inf")
        self._apply(scores, self.bitmask, vocab_size=min(width, scores.shape[-1]))
        return scores
