"""Custom, namespaced and hosted tools end to end: the real server on the fixture model, driven by the openai SDK.

A forced custom tool with a grammar gives a `custom_tool_call` whose `input` is a sentence of the grammar, streamed
as `response.custom_tool_call_input.delta/.done`; its output goes back as `custom_tool_call_output`; namespaced
functions come back with their `namespace`; hosted tools are accepted and echoed, never offered to the model.
"""

from __future__ import annotations

import json
import re

import openai
import pytest

from transformers_responses.fixture_model import WEATHER_TOOL

from .conftest import Server

# A finite grammar, so that even a tiny model forced into it ends the call (quotes and a newline: JSON-escaped).
ANSWER = {"type": "custom", "name": "answer", "description": "Answer yes or no.",
          "format": {"type": "grammar", "syntax": "regex", "definition": '(yes|no) "(sure|maybe)"\n'}}
ANSWER_RE = re.compile(r'(yes|no) "(sure|maybe)"\n')
NAMESPACE = {"type": "namespace", "name": "mcp__clock", "description": "Clock tools.",
             "tools": [{"type": "function", "name": "now", "description": "The time.", "strict": True,
                        "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}]}
HOSTED = [{"type": "web_search", "search_content_types": ["text"]}, {"type": "local_shell"},
          {"type": "tool_search"}]


def test_forced_custom_tool_streams_its_grammar_constrained_input(srv: Server) -> None:
    client = srv.client()
    events = list(client.responses.create(model=srv.model, input="Is the sky blue?", tools=[ANSWER, *HOSTED],
                                          tool_choice={"type": "custom", "name": "answer"}, stream=True))
    final = events[-1].response  # type: ignore[union-attr]
    assert events[-1].type == "response.completed"
    [call] = final.output
    assert call.type == "custom_tool_call" and call.name == "answer" and ANSWER_RE.fullmatch(call.input)
    deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
    [done] = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    assert len(deltas) > 1 and "".join(deltas) == done.input == call.input
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "custom_tool_call" and added.item.input == "" and added.item.id == call.id
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [t.type for t in final.tools] == ["custom", "web_search", "local_shell", "tool_search"]


def test_custom_call_output_continues_the_conversation(server: Server) -> None:
    client = server.client()
    first = client.responses.create(model=server.model, input="Is the sky blue?", tools=[ANSWER],
                                    tool_choice={"type": "custom", "name": "answer"})
    call = first.output[0]
    assert call.type == "custom_tool_call"
    # Both ways back: by previous_response_id, and statelessly with the call item in the input.
    chained = client.responses.create(model=server.model, previous_response_id=first.id, max_output_tokens=16,
                                      input=[{"type": "custom_tool_call_output", "call_id": call.call_id,
                                              "output": "noted"}])
    resent = client.responses.create(model=server.model, store=False, max_output_tokens=16, input=[
        {"role": "user", "content": "Is the sky blue?"},
        {"type": "custom_tool_call", "call_id": call.call_id, "name": "answer", "input": call.input},
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "noted"}])
    assert chained.status in ("completed", "incomplete") and resent.status in ("completed", "incomplete")
    assert chained.usage.input_tokens == resent.usage.input_tokens  # type: ignore[union-attr]
    items = client.responses.input_items.list(chained.id, order="asc").data
    assert [i.type for i in items] == ["custom_tool_call_output"]


def test_namespaced_function_call_carries_its_namespace(server: Server) -> None:
    r = server.client().responses.create(model=server.model, input="What time is it?", tools=[NAMESPACE],
                                         tool_choice={"type": "function", "name": "mcp__clock__now"})
    [call] = r.output
    assert (call.type, call.name, call.namespace) == ("function_call", "now", "mcp__clock")
    assert json.loads(call.arguments) == {}


def test_hosted_tools_are_not_offered_to_the_model(server: Server) -> None:
    # The weather prompt with hosted tools beside the weather tool: the model sees the same prompt and calls it.
    client = server.client()
    plain = client.responses.create(model=server.model, input="What is the weather in Paris?", tools=[WEATHER_TOOL])
    mixed = client.responses.create(model=server.model, input="What is the weather in Paris?",
                                    tools=[*HOSTED, WEATHER_TOOL])
    assert mixed.usage.input_tokens == plain.usage.input_tokens  # type: ignore[union-attr]
    assert [(i.type, i.name) for i in mixed.output] == [("function_call", "get_weather")]


def test_forcing_a_hosted_tool_is_a_400(server: Server) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        server.client().responses.create(model=server.model, input="Hi", tools=HOSTED,
                                         tool_choice={"type": "web_search_preview"})
    assert info.value.body["param"] == "tool_choice.type"  # type: ignore[index]
