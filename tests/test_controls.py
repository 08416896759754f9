"""Generation controls end to end through the openai SDK, on prompts where the fixture model would NOT comply
unaided: structured output, forced and forbidden tool calls, call caps, logprobs, truncation, seeds — on the
sequential path and under continuous batching (where constrained requests take the sequential path)."""

from __future__ import annotations

import json
import time
from typing import Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from transformers_responses.controls import needs_processors, wants_logprobs
from transformers_responses.fixture_model import WEATHER_TOOL

from .conftest import Server, completion

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["mood", "score", "tags"], "properties": {
    "mood": {"type": "string", "enum": ["happy", "sad"]}, "score": {"type": "integer", "minimum": 0, "maximum": 9},
    "tags": {"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 8}}}}
TIME_TOOL = {"type": "function", "name": "get_time", "description": "Get the local time in a city.", "strict": True,
             "parameters": {"type": "object", "additionalProperties": False, "required": ["city"],
                            "properties": {"city": {"type": "string", "maxLength": 10}}}}


def calls(response: object) -> list[tuple[str, dict]]:
    return [(i.name, json.loads(i.arguments)) for i in response.output if i.type == "function_call"]  # type: ignore[attr-defined]


def test_greeting_under_a_json_schema_is_schema_valid_json(srv: Server) -> None:
    c = srv.client()
    assert not completion("greeting").startswith("{")  # unaided, the model greets in prose
    r = c.responses.create(model=srv.model, input="Hi", text={"format": {
        "type": "json_schema", "name": "mood", "schema": SCHEMA, "strict": True}})
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), SCHEMA)
    assert r.text.format.type == "json_schema" and r.text.format.name == "mood"
    with c.responses.stream(model=srv.model, input="Hi", text={"format": {
            "type": "json_schema", "name": "mood", "schema": SCHEMA, "strict": True}}) as stream:
        final = stream.get_final_response()
    jsonschema.validate(json.loads(final.output_text), SCHEMA)


def test_responses_parse_with_a_pydantic_model(server: Server) -> None:
    class Mood(BaseModel):  # bounded fields: a tiny model left free would write one string forever
        mood: Literal["happy", "sad"]
        score: int = Field(ge=0, le=9)

    r = server.client().responses.parse(model=server.model, input="Hi", text_format=Mood)
    assert isinstance(r.output_parsed, Mood)


def test_json_object(server: Server) -> None:
    r = server.client().responses.create(model=server.model, input="Describe a cat as JSON.",
                                         text={"format": {"type": "json_object"}})
    assert isinstance(json.loads(r.output_text), dict)


def test_required_on_a_greeting_still_calls_a_tool(srv: Server) -> None:
    r = srv.client().responses.create(model=srv.model, input="Hi", tools=[TIME_TOOL], tool_choice="required")
    assert [i.type for i in r.output] == ["function_call"] * len(r.output) and r.output
    for name, args in calls(r):
        assert name == "get_time"
        jsonschema.validate(args, TIME_TOOL["parameters"])
    assert r.tool_choice == "required"


def test_named_function_the_model_does_not_prefer(srv: Server) -> None:
    r = srv.client().responses.create(
        model=srv.model, input="What is the weather in Paris?", tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice={"type": "function", "name": "get_time"}, parallel_tool_calls=False)
    assert [name for name, _ in calls(r)] == ["get_time"]  # unaided it calls get_weather
    jsonschema.validate(calls(r)[0][1], TIME_TOOL["parameters"])


def test_allowed_tools_restricts_the_calls(server: Server) -> None:
    r = server.client().responses.create(
        model=server.model, input="What is the weather in Paris?", tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice={"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_time"}]},
        parallel_tool_calls=False)
    assert [name for name, _ in calls(r)] == ["get_time"]


def test_tool_choice_none_on_a_weather_question(srv: Server) -> None:
    r = srv.client().responses.create(model=srv.model, input="What is the weather in Paris?", tools=[WEATHER_TOOL],
                                      tool_choice="none")
    assert calls(r) == [] and "<tool_call>" not in json.dumps(r.model_dump())


def test_parallel_false_and_max_tool_calls_on_the_two_city_prompt(srv: Server) -> None:
    c = srv.client()
    both = c.responses.create(model=srv.model, input="What is the weather in Paris and Tokyo?", tools=[WEATHER_TOOL])
    assert len(calls(both)) == 2
    one = c.responses.create(model=srv.model, input="What is the weather in Paris and Tokyo?", tools=[WEATHER_TOOL],
                             parallel_tool_calls=False)
    assert calls(one) == [("get_weather", {"city": "Paris"})]
    capped = c.responses.create(model=srv.model, input="What is the weather in Paris and Tokyo?",
                                tools=[WEATHER_TOOL], max_tool_calls=1)
    assert calls(capped) == [("get_weather", {"city": "Paris"})] and capped.max_tool_calls == 1


def test_logprobs_streaming_and_not(srv: Server) -> None:
    c = srv.client()
    kwargs = {"model": srv.model, "input": "Hi", "include": ["message.output_text.logprobs"], "top_logprobs": 3}
    r = c.responses.create(**kwargs)
    part = r.output[0].content[0]
    assert part.text == completion("greeting") and "".join(lp.token for lp in part.logprobs) == part.text
    assert all(lp.logprob <= 0 and len(lp.top_logprobs) == 3 for lp in part.logprobs)
    assert bytes(b for lp in part.logprobs for b in lp.bytes).decode() == part.text
    assert r.top_logprobs == 3
    with c.responses.stream(**kwargs) as stream:
        deltas = [e for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(lp.token for d in deltas for lp in d.logprobs) == final.output_text
    assert [lp.token for lp in final.output[0].content[0].logprobs] == [lp.token for lp in part.logprobs]
    plain = c.responses.create(model=srv.model, input="Hi")
    assert plain.output[0].content[0].logprobs == []


def test_truncation_overflow_and_auto(srv: Server) -> None:
    c = srv.client()
    history = [{"role": "user", "content": "word " * 600}, {"role": "assistant", "content": "ok"}] * 3
    with pytest.raises(openai.BadRequestError) as info:
        c.responses.create(model=srv.model, input=[*history, {"role": "user", "content": "Hi"}])
    assert info.value.body["code"] == "context_length_exceeded"
    r = c.responses.create(model=srv.model, input=[*history, {"role": "user", "content": "Hi"}], truncation="auto",
                           max_output_tokens=64)
    assert r.truncation == "auto" and r.usage.input_tokens + 64 <= 2048
    alone = c.responses.input_tokens.count(model=srv.model, input="Hi").input_tokens
    assert r.usage.input_tokens > alone  # only what was needed was dropped
    with pytest.raises(openai.BadRequestError) as info:  # the last user turn itself never fits: still a 400
        c.responses.create(model=srv.model, input="word " * 3000, truncation="auto")
    assert info.value.body["code"] == "context_length_exceeded"


def test_same_seed_same_output(server: Server) -> None:
    c = server.client()

    def sample(seed: int) -> str:
        return c.responses.create(model=server.model, input="Tell me something.", temperature=2.0, top_p=1.0,
                                  max_output_tokens=24, extra_body={"seed": seed}).output_text

    first = sample(7)
    assert sample(7) == first
    assert any(sample(seed) != first for seed in (8, 9, 10, 11))


@pytest.mark.parametrize(("extra", "param"), [
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "array", "uniqueItems": True}}}},
     "text.format.schema"),
    ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER_TOOL], "text": {"format": {"type": "json_object"}}}, "text.format"),
])
def test_controls_that_cannot_be_honoured_are_400s(server: Server, extra: dict, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        server.client().responses.create(model=server.model, input="Hi", **extra)
    assert info.value.body["param"].startswith(param), info.value.body


def test_which_requests_need_processors() -> None:
    loose = {**WEATHER_TOOL, "strict": False}
    assert not needs_processors({"input": "x"}) and not needs_processors({"tools": [loose]})
    assert needs_processors({"tools": [WEATHER_TOOL], "tool_choice": "required"})
    assert needs_processors({"tools": [{**WEATHER_TOOL, "strict": True}]})  # strict arguments are enforced
    assert needs_processors({"text": {"format": {"type": "json_object"}}})
    assert wants_logprobs({"include": ["message.output_text.logprobs"]}) == 0
    assert wants_logprobs({"top_logprobs": 2}) == 2 and wants_logprobs({}) is None


def test_constrained_requests_stay_on_continuous_batching(cb_server: Server) -> None:
    c = cb_server.client()
    fallbacks = cb_server.log.read_text().count("on the sequential path")
    r = c.responses.create(model=cb_server.model, input="Hi", text={"format": {
        "type": "json_schema", "name": "mood", "schema": SCHEMA, "strict": True}})
    jsonschema.validate(json.loads(r.output_text), SCHEMA)
    assert cb_server.log.read_text().count("on the sequential path") == fallbacks  # the grammar router took it
    c.responses.create(model=cb_server.model, input="Hi", include=["message.output_text.logprobs"])
    time.sleep(0.2)
    assert cb_server.log.read_text().count("on the sequential path") == fallbacks + 1  # logprobs: sequential, said


def test_tools_as_langchain_and_the_vercel_ai_sdk_send_them(server: Server) -> None:
    """No `strict` (nor `parameters` sometimes), a `$schema` key: accepted; a forced call still follows the schema."""
    c = server.client()
    loose = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city.",
             "parameters": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                            "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"],
                            "additionalProperties": False}}
    unstrict = {k: v for k, v in WEATHER_TOOL.items() if k != "strict"}  # the prompt the fixture model was taught
    r = c.responses.create(model=server.model, input="What is the weather in Paris?", tools=[unstrict])  # type: ignore[list-item]
    assert calls(r) == [("get_weather", {"city": "Paris"})] and r.tools[0].strict is None
    forced = c.responses.create(model=server.model, input="Hi", tools=[loose],  # type: ignore[list-item]
                                tool_choice={"type": "function", "name": "get_weather"}, parallel_tool_calls=False)
    assert [name for name, _ in calls(forced)] == ["get_weather"]
    jsonschema.validate(calls(forced)[0][1], loose["parameters"])
    bare = c.responses.create(model=server.model, input="Hi", tools=[{"type": "function", "name": "ping"}])  # type: ignore[list-item]
    assert bare.status == "completed"


def test_without_max_output_tokens_the_context_is_the_limit(server: Server) -> None:
    r = server.client().responses.create(model=server.model, input="Hi", text={"format": {"type": "json_object"}},
                                         extra_body={"client_metadata": {"session_id": "s1"}})
    # The model writes one string forever under this grammar: it stops where the context ends, not at 1024.
    assert r.status == "incomplete" and r.usage.input_tokens + r.usage.output_tokens == 2048
