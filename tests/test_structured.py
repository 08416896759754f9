"""transformers_responses.structured: grammars compiled with xgrammar, enforced by real `generate()` on the fixture."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformers_responses import structured
from transformers_responses.errors import InvalidRequestError, UnsupportedError
from transformers_responses.fixture_model import (
    GREETING,
    JSON_CAT,
    THINK_PROMPT,
    THINK_REASONING,
    WEATHER_PARIS_TOKYO,
    WEATHER_TOOL_HF,
)
from transformers_responses.tool_parsers.hermes import HermesToolParser

# scripts/test.sh installs the [structured] extra: without it these tests fail rather than skip.

TIME_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a zone.", "strict": True, "parameters": {
        "type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"]}}}
# The fixture's weather tool, strict, with a bounded city: an untrained path (a greeting forced into a call) must
# still end within the token budget, and strings are where a tiny model wanders.
WEATHER_STRICT: dict[str, Any] = {"type": "function", "function": {
    **WEATHER_TOOL_HF["function"], "strict": True, "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def loaded() -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from transformers_responses.fixture_model import build_fixture_model

    path = build_fixture_model()
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def generate(loaded: tuple[Any, Any], prompt: str, grammar: structured.CompiledGrammar | None,
             tools: list[dict[str, Any]] | None = None, max_new_tokens: int = 60) -> tuple[str, bool, bool]:
    """Greedy `generate()` on a chat prompt under `grammar`: (the text before the end token, whether it ended,
    whether the processor calls the output a complete sentence of the grammar)."""
    from transformers import LogitsProcessorList

    model, tokenizer = loaded
    inputs = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tools=tools,
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    processors = LogitsProcessorList()
    if grammar is not None:
        processors.append(structured.GrammarLogitsProcessor(grammar, eos_token_id=model.generation_config.eos_token_id))
    out = model.generate(**inputs, max_new_tokens=max_new_tokens, logits_processor=processors, do_sample=False)
    new = out[0, inputs["input_ids"].shape[1]:].tolist()
    eos = set(model.generation_config.eos_token_id)
    ended = bool(new) and new[-1] in eos
    complete = bool(processors) and processors[0].is_completed
    return tokenizer.decode([t for t in new if t not in eos]), ended, complete


def validate(value: Any, schema: dict[str, Any]) -> None:
    """jsonschema's verdict when it is installed (it is no dependency of ours), else a check of the few keywords the
    generation tests use: type object/integer/string, enum, required, additionalProperties, bounds, maxLength."""
    try:
        import jsonschema
    except ImportError:
        pass
    else:
        jsonschema.validate(value, schema)
        return
    if "enum" in schema:
        assert value in schema["enum"]
    kind = schema.get("type")
    if kind == "object":
        assert isinstance(value, dict) and set(schema.get("required", ())) <= set(value)
        if schema.get("additionalProperties") is False:
            assert set(value) <= set(schema["properties"])
        for key, sub in value.items():
            validate(sub, schema["properties"][key])
    elif kind == "integer":
        assert isinstance(value, int) and schema.get("minimum", value) <= value <= schema.get("maximum", value)
    elif kind == "string":
        assert isinstance(value, str) and len(value) <= schema.get("maxLength", len(value))


def parse_calls(text: str, tools: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The calls the project's own Hermes parser reads in `text` (and nothing else: no text, no aborts)."""
    parser = HermesToolParser(tools)
    events = parser.feed(text) + parser.finish()
    assert [e for e in events if e[0] in ("text", "call_abort")] == []
    names = [value for kind, value in events if kind == "call_start"]
    arguments = [json.loads(value) for kind, value in events if kind == "call_end"]
    return list(zip(names, arguments, strict=True))


def test_require_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(structured, "available", lambda: False)
    with pytest.raises(UnsupportedError) as info:
        structured.require()
    assert info.value.status_code == 400
    assert "pip install 'transformers-responses[structured]'" in info.value.message


def test_continuous_batching_needs_xgrammar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(structured, "available", lambda: False)
    assert structured.supports_continuous_batching() is False


def test_json_schema_on_a_greeting(loaded: tuple[Any, Any]) -> None:
    schema = {"type": "object", "additionalProperties": False, "required": ["reply", "mood", "score"], "properties": {
        "reply": {"type": "string", "maxLength": 24}, "mood": {"enum": ["happy", "sad"]},
        "score": {"type": "integer", "minimum": 0, "maximum": 9}}}
    model, tokenizer = loaded
    grammar = structured.compile_json_schema(tokenizer, schema, vocab_size=structured.model_vocab_size(model))
    text, ended, complete = generate(loaded, GREETING, grammar)
    assert ended and complete, text
    validate(json.loads(text), schema)
    cut, ended, complete = generate(loaded, GREETING, grammar, max_new_tokens=3)
    assert not ended and not complete and cut.startswith("{")  # cut off by the limit: `incomplete`
    unconstrained, _, _ = generate(loaded, GREETING, None)
    assert not unconstrained.startswith("{")  # the model would not comply unaided


def test_json_object(loaded: tuple[Any, Any]) -> None:
    model, tokenizer = loaded
    grammar = structured.compile_json_object(tokenizer, vocab_size=structured.model_vocab_size(model))
    text, ended, _ = generate(loaded, JSON_CAT, grammar)
    assert ended and isinstance(json.loads(text), dict)
    assert grammar.accepts('{"a": [1, {"b": null}]}') and not grammar.accepts("[1]")
    assert not grammar.accepts('{"a":  1}')  # compact: no padding


@pytest.mark.parametrize(("prompt", "mode", "names", "max_calls", "expected"), [
    # tool_choice "required" on a greeting the model would answer with text.
    (GREETING, "required", None, None, None),
    # A named function the model does not prefer (it is trained to call get_weather).
    (WEATHER_PARIS_TOKYO, "required", ["get_time"], None, ["get_time"]),
    # parallel_tool_calls: false on a prompt the model answers with two calls.
    (WEATHER_PARIS_TOKYO, "required", None, 1, ["get_weather"]),
    # Unconstrained count: the model's own two calls pass through.
    (WEATHER_PARIS_TOKYO, "required", None, None, ["get_weather", "get_weather"]),
    # allowed_tools {mode: auto, tools: [get_time]}: get_weather is no longer callable.
    (WEATHER_PARIS_TOKYO, "auto", ["get_time"], 1, ["get_time"]),
])
def test_tool_calls(loaded: tuple[Any, Any], prompt: str, mode: Any, names: list[str] | None,
                    max_calls: int | None, expected: list[str] | None) -> None:
    model, tokenizer = loaded
    tools = [WEATHER_STRICT, TIME_TOOL]
    grammar = structured.compile_tool_calls(tokenizer, tools, mode=mode, names=names, max_calls=max_calls,
                                            syntax=HermesToolParser.call_syntax,
                                            vocab_size=structured.model_vocab_size(model))
    text, ended, complete = generate(loaded, prompt, grammar, tools=tools, max_new_tokens=80)
    assert ended and complete, text
    calls = parse_calls(text, tools)
    assert calls, text
    if expected is not None:
        assert [name for name, _ in calls] == expected
    for name, args in calls:
        if name == "get_time":
            assert args in ({"zone": "UTC"}, {"zone": "CET"})
        else:
            assert set(args) == {"city"} and isinstance(args["city"], str) and len(args["city"]) <= 12


def test_tool_grammar_shapes(loaded: tuple[Any, Any]) -> None:
    _, tokenizer = loaded
    syntax = HermesToolParser.call_syntax
    tools = [WEATHER_STRICT, TIME_TOOL]

    def call(name: str, args: str) -> str:
        return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'

    paris, utc = call("get_weather", '{"city": "Paris"}'), call("get_time", '{"zone": "UTC"}')
    required = structured.compile_tool_calls(tokenizer, tools, mode="required", syntax=syntax)
    assert required.accepts(paris) and required.accepts(paris + "\n" + utc)
    assert not required.accepts("Hello!") and not required.accepts("")
    assert not required.accepts(call("get_weather", '{"city": "Paris", "x": 1}'))  # strict: closed object
    assert not required.accepts(call("get_time", '{"zone": "PST"}'))
    two = structured.compile_tool_calls(tokenizer, tools, mode="required", syntax=syntax, max_calls=2)
    assert two.accepts(paris + "\n" + utc) and not two.accepts("\n".join([paris, utc, paris]))
    auto = structured.compile_tool_calls(tokenizer, tools, mode="auto", names=["get_time"], syntax=syntax)
    assert auto.accepts("Hello!") and auto.accepts("Let me see." + utc) and not auto.accepts(paris)
    loose = [{"type": "function", "function": {**TIME_TOOL["function"], "strict": False}}]
    forced = structured.compile_tool_calls(tokenizer, loose, mode="required", names=["get_time"], syntax=syntax)
    # Not strict: the schema still shapes the arguments, undeclared keys allowed.
    assert forced.accepts(call("get_time", '{"zone": "UTC", "extra": [1, 2]}'))
    assert not forced.accepts(call("get_time", '{"anything": [1, 2]}')) and not forced.accepts(call("get_time", "[1]"))
    free = [{"type": "function", "function": {**TIME_TOOL["function"], "strict": False,
                                              "parameters": {"type": "object", "not": {"required": ["x"]}}}}]
    anything = structured.compile_tool_calls(tokenizer, free, mode="required", names=["get_time"], syntax=syntax)
    assert anything.accepts(call("get_time", '{"anything": [1, 2]}'))  # unenforceable schema: any JSON object
    with pytest.raises(InvalidRequestError, match="nope"):
        structured.compile_tool_calls(tokenizer, tools, mode="required", names=["nope"], syntax=syntax)


def test_tool_call_token_is_one_added_token(loaded: tuple[Any, Any]) -> None:
    """`<tool_call>` is an added (non-special) token of the fixture: the grammar must allow that very token."""
    model, tokenizer = loaded
    tool_call = tokenizer.convert_tokens_to_ids("<tool_call>")
    grammar = structured.compile_tool_calls(tokenizer, [TIME_TOOL], mode="required",
                                            syntax=HermesToolParser.call_syntax,
                                            vocab_size=structured.model_vocab_size(model))
    matcher = grammar.matcher()
    assert matcher.accept_token(tool_call)


def test_cache_returns_the_same_object(loaded: tuple[Any, Any]) -> None:
    _, tokenizer = loaded
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}
    first = structured.compile_json_schema(tokenizer, schema)
    assert structured.compile_json_schema(tokenizer, dict(reversed(list(schema.items())))) is first  # canonical key
    assert structured.compile_json_schema(tokenizer, schema, strict=False) is not first
    assert structured.compile_json_object(tokenizer) is structured.compile_json_object(tokenizer)


@pytest.mark.parametrize("keyword", ["not", "if", "uniqueItems", "contains", "dependentRequired", "allOf"])
def test_unenforced_keyword_is_a_400(loaded: tuple[Any, Any], keyword: str) -> None:
    _, tokenizer = loaded
    sub: dict[str, Any] = {"not": {"type": "string"}, "if": {"type": "integer"}, "uniqueItems": True,
                           "contains": {"const": 1}, "dependentRequired": {"a": ["b"]},
                           "allOf": [{"type": "integer"}, {"minimum": 2}]}
    schema = {"type": "object", "properties": {"x": {keyword: sub[keyword]}, "not": {"type": "string"}}}
    with pytest.raises(InvalidRequestError) as info:
        structured.compile_json_schema(tokenizer, schema)
    assert info.value.status_code == 400 and info.value.message.endswith(f": {keyword}.")  # not the property `not`


def test_keyword_named_property_is_fine(loaded: tuple[Any, Any]) -> None:
    _, tokenizer = loaded
    schema = {"type": "object", "properties": {"not": {"type": "string"}, "if": {"type": "integer"}}}
    assert structured.compile_json_schema(tokenizer, schema).accepts('{"not": "x", "if": 1}')


def test_impossible_schema_is_a_400(loaded: tuple[Any, Any]) -> None:
    _, tokenizer = loaded
    with pytest.raises(InvalidRequestError):
        structured.compile_json_schema(tokenizer, {"type": "object", "minProperties": 2})


# ----- the schema table: hypothesis JSON checked against the compiled grammar both ways -----

_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)
_json = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | _text,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
                     max_leaves=8)


def _obj(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    keys = list(fields)  # in the declared order, as the grammar writes them (fixed_dictionaries may reorder)
    return st.tuples(*fields.values()).map(lambda values: dict(zip(keys, values, strict=True)))


_POINT = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
          "required": ["x", "y"], "additionalProperties": False}
SCHEMAS: list[tuple[str, dict[str, Any], st.SearchStrategy[Any]]] = [
    ("object", {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                "required": ["name", "age"], "additionalProperties": False},
     _obj(name=_text, age=st.integers(-1000, 1000))),
    ("array", {"type": "array", "items": {"type": "number"}, "maxItems": 4},
     st.lists(st.integers(-99, 99) | st.floats(-1e3, 1e3, allow_nan=False).map(lambda f: round(f, 3)), max_size=4)),
    ("enum", {"enum": ["red", "green", 3, None]}, st.sampled_from(["red", "green", 3, None])),
    ("nested", {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}},
                                                  "point": _POINT},
                "required": ["tags", "point"], "additionalProperties": False},
     _obj(tags=st.lists(_text, max_size=3), point=_obj(x=st.integers(), y=st.integers()))),
    ("bounds", {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 99},
                                                  "s": {"type": "string", "minLength": 2, "maxLength": 5}},
                "required": ["n", "s"], "additionalProperties": False},
     _obj(n=st.integers(1, 99), s=st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=2,
                                          max_size=5))),
    ("anyOf", {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}, _POINT]},
     st.integers() | st.text(st.characters(codec="ascii", categories=["L"]), max_size=3)
     | _obj(x=st.integers(), y=st.integers())),
    ("ref", {"$defs": {"point": _POINT}, "type": "object",
             "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"type": "array", "items": {"$ref": "#/$defs/point"}}},
             "required": ["a", "b"], "additionalProperties": False},
     _obj(a=_obj(x=st.integers(), y=st.integers()), b=st.lists(_obj(x=st.integers(-5, 5), y=st.integers()),
                                                                 max_size=2))),
    ("optional", {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}},
                  "additionalProperties": False},
     st.sampled_from([{}, {"a": True}, {"b": None}, {"a": False, "b": None}])),
]


@pytest.mark.parametrize(("name", "schema", "valid"), SCHEMAS, ids=[row[0] for row in SCHEMAS])
def test_schema_table(loaded: tuple[Any, Any], name: str, schema: dict[str, Any],
                      valid: st.SearchStrategy[Any]) -> None:
    import jsonschema
    _, tokenizer = loaded
    grammar = structured.compile_json_schema(tokenizer, schema)
    validator = jsonschema.Draft202012Validator(schema)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(valid)
    def valid_is_accepted(value: Any) -> None:
        assert validator.is_valid(value)
        assert grammar.accepts(json.dumps(value, ensure_ascii=False)), json.dumps(value)

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(_json | valid)
    def accepted_is_valid(value: Any) -> None:
        text = json.dumps(value, ensure_ascii=False)
        if grammar.accepts(text):
            assert validator.is_valid(value), text

    valid_is_accepted()
    accepted_is_valid()


# ----- continuous batching: one router, grammars keyed by request id -----

def test_continuous_batching_router(loaded: tuple[Any, Any]) -> None:
    """8 concurrent requests, half constrained, through the host's real CB manager: each gets what it asked for."""
    from transformers import AutoModelForCausalLM

    from transformers_responses.structured_cb import CBGrammarRouter

    # A model of its own: CB switches the attention implementation of the model it runs.
    model, tokenizer = AutoModelForCausalLM.from_pretrained(loaded[0].name_or_path), loaded[1]
    schema = {"type": "object", "additionalProperties": False, "required": ["mood", "score"], "properties": {
        "mood": {"enum": ["happy", "sad"]}, "score": {"type": "integer", "minimum": 0, "maximum": 9}}}
    vocab = structured.model_vocab_size(model)
    grammars = [structured.compile_json_schema(tokenizer, schema, vocab_size=vocab),
                structured.compile_tool_calls(tokenizer, [TIME_TOOL], mode="required",
                                              syntax=HermesToolParser.call_syntax, vocab_size=vocab)]
    eos = model.generation_config.eos_token_id
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": GREETING}], add_generation_prompt=True,
                                           tokenize=True, return_dict=True)["input_ids"]
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    # A bounded paged cache: by default CB takes most of the free memory, starving the test servers.
    manager = model.init_continuous_batching(generation_config=model.generation_config,
                                             continuous_batching_config=ContinuousBatchingConfig(num_blocks=128))
    assert structured.supports_continuous_batching() and structured.supports_continuous_batching(manager)
    router = CBGrammarRouter(vocab)
    router.attach(manager)
    manager.start()
    try:
        kinds = ["schema", "free", "tools", "free"] * 2
        for i, kind in enumerate(kinds):
            if kind != "free":
                router.register(f"r{i}", grammars[kind == "tools"], eos)
            manager.add_request(prompt, request_id=f"r{i}", max_new_tokens=48, eos_token_id=eos)
        results: dict[str, list[int]] = {}
        while len(results) < len(kinds):
            result = manager.get_result(timeout=60)
            assert result is not None and result.error is None
            results[result.request_id] = result.generated_tokens
            router.release(result.request_id)
        assert not structured.supports_continuous_batching(manager)  # running: too late to attach a router
    finally:
        manager.stop(block=True, timeout=10)
        model.destroy_cached_continuous_batching_manager()
    for i, kind in enumerate(kinds):
        tokens = results[f"r{i}"]
        assert tokens[-1] in eos, kind
        text = tokenizer.decode([t for t in tokens if t not in eos])
        if kind == "schema":
            validate(json.loads(text), schema)
        elif kind == "tools":
            assert parse_calls(text, [TIME_TOOL])[0][0] == "get_time"
        else:
            assert text == "Hello! How can I help you today?"


def test_reasoning_block_before_the_constrained_part(loaded: tuple[Any, Any]) -> None:
    """A thinking model keeps its reasoning: the block is free text, the answer after it is constrained."""
    model, tokenizer = loaded
    schema = {"type": "object", "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["answer"], "additionalProperties": False}
    vocab = structured.model_vocab_size(model)
    grammar = structured.compile_json_schema(tokenizer, schema, vocab_size=vocab, reasoning="optional")
    text, ended, complete = generate(loaded, THINK_PROMPT, grammar)
    assert ended and complete, text
    reasoning, _, answer = text.partition("</think>")
    assert reasoning == f"<think>\n{THINK_REASONING}\n"  # the model's own reasoning, untouched
    validate(json.loads(answer), schema)
    assert grammar.accepts('{"answer": 4}') and not grammar.accepts("<think>x</think>{}")
    opened = structured.compile_json_schema(tokenizer, schema, vocab_size=vocab, reasoning="opened")
    assert opened.accepts('x</think>\n\n{"answer": 4}') and not opened.accepts('{"answer": 4}')
    plain = structured.compile_json_schema(tokenizer, schema, vocab_size=vocab)
    assert not plain.accepts('<think>x</think>{"answer": 4}')
    calls = structured.compile_tool_calls(tokenizer, [TIME_TOOL], mode="required", syntax=HermesToolParser.call_syntax,
                                          vocab_size=vocab, reasoning="optional")
    assert calls.accepts('<think>\nhm\n</think>\n\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}'
                         '\n</tool_call>')


def test_router_ends_a_request_that_broke_its_grammar(loaded: tuple[Any, Any]) -> None:
    """A token the grammar forbids must not kill the CB worker (and every request with it): that request ends."""
    from types import SimpleNamespace

    import torch

    from transformers_responses.structured_cb import CBGrammarRouter

    model, tokenizer = loaded
    vocab = structured.model_vocab_size(model)
    router = CBGrammarRouter(vocab, max_requests=4)
    router.register("r", structured.compile_json_object(tokenizer, vocab_size=vocab), [2])
    state = SimpleNamespace(request_id="r", generated_tokens=tokenizer.encode("no", add_special_tokens=False),
                            initial_tokens=[], _true_initial_tokens=0)
    free = SimpleNamespace(state=SimpleNamespace(request_id="other"))
    slots = router.prepare_tensor_args([free, SimpleNamespace(state=state)]).tolist()
    assert slots[0] == -1 and slots[1] >= 0
    scores = torch.zeros(2, vocab)
    router(scores, torch.tensor(slots, dtype=torch.int32))
    assert torch.isfinite(scores[0]).all()  # the unconstrained row is untouched
    assert torch.isfinite(scores[1]).nonzero().flatten().tolist() == [2]  # only the end token is left
    router.release("r")
    router.release("r")  # twice is harmless
