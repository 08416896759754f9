"""End to end through the official openai SDK: a real server, the real fixture model, real generate() and CB."""

from __future__ import annotations

import asyncio
import json


from transformers_responses.fixture_model import WEATHER_TOOL

from .conftest import Server, completion

WEATHER_RESULTS = ['{"temperature": 22, "condition": "sunny"}', '{"temperature": 18, "condition": "rainy"}']


def test_greeting(srv: Server) -> None:
    r = srv.client().responses.create(model=srv.model, input="Hi")
    assert r.status == "completed" and r.output_text == completion("greeting")
    assert [i.type for i in r.output] == ["message"]
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert isinstance(r.created_at, int) or float(r.created_at).is_integer()
    assert r.id.startswith("resp_") and r.output[0].id.startswith("msg_") and r.store is True


def test_async_client(srv: Server) -> None:
    async def main() -> str:
        async with srv.async_client() as client:
            return (await client.responses.create(model=srv.model, input="Hi")).output_text

    assert asyncio.run(main()) == completion("greeting")


def test_instructions_and_developer_role(srv: Server) -> None:
    c = srv.client()
    assert c.responses.create(model=srv.model, input="Hi", instructions="You are a pirate.").output_text == \
        completion("pirate")
    r = c.responses.create(model=srv.model, input=[{"role": "developer", "content": "Be brief."},
                                                   {"role": "user", "content": "Hi"}])
    assert r.output_text == completion("greeting_dev")


def test_history_from_previous_output_items(srv: Server) -> None:
    c = srv.client()
    first = c.responses.create(model=srv.model, input="My name is Ada.")
    assert first.output_text == completion("name_intro")
    history = [{"role": "user", "content": "My name is Ada."}, *[i.model_dump(exclude_none=True) for i in first.output],
               {"role": "user", "content": "What is my name?"}]
    assert c.responses.create(model=srv.model, input=history).output_text == completion("name_recall")


def test_stream_helper_order_and_indices(srv: Server) -> None:
    with srv.client().responses.stream(model=srv.model, input="Hi") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == completion("greeting")
    assert final.output_text == completion("greeting")


def test_tool_call_round_trip(srv: Server) -> None:
    c = srv.client()
    r = c.responses.create(model=srv.model, input="What is the weather in Paris?", tools=[WEATHER_TOOL])
    assert [i.type for i in r.output] == ["function_call"]
    call = r.output[0]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert call.call_id.startswith("call_") and call.id.startswith("fc_") and call.status == "completed"
    assert r.tools[0].name == "get_weather" and r.tools[0].parameters == WEATHER_TOOL["parameters"]
    follow = c.responses.create(model=srv.model, tools=[WEATHER_TOOL], input=[
        {"role": "user", "content": "What is the weather in Paris?"}, call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": WEATHER_RESULTS[0]}])
    assert follow.output_text == completion("weather_answer")


def test_parallel_calls_stream_arguments(srv: Server) -> None:
    c = srv.client()
    with c.responses.stream(model=srv.model, input="What is the weather in Paris and Tokyo?",
                            tools=[WEATHER_TOOL]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    calls = [i for i in final.output if i.type == "function_call"]
    assert [json.loads(x.arguments)["city"] for x in calls] == ["Paris", "Tokyo"]
    assert [i.type for i in final.output] == ["function_call", "function_call"]
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert added == [0, 1]
    for index in (0, 1):
        deltas = [e for e in events if e.type == "response.function_call_arguments.delta" and e.output_index == index]
        done = next(e for e in events if e.type == "response.function_call_arguments.done" and e.output_index == index)
        assert len(deltas) > 1 and "".join(d.delta for d in deltas) == done.arguments and done.name == "get_weather"
    assert len({x.call_id for x in calls}) == 2
    follow = c.responses.create(model=srv.model, tools=[WEATHER_TOOL], input=[
        {"role": "user", "content": "What is the weather in Paris and Tokyo?"},
        *[{"type": "function_call", "call_id": x.call_id, "name": x.name, "arguments": x.arguments} for x in calls],
        *[{"type": "function_call_output", "call_id": x.call_id, "output": out}
          for x, out in zip(calls, WEATHER_RESULTS)]])
    assert follow.output_text == completion("weather_parallel_answer")


def test_parallel_tool_calls_false_stops_after_one(server: Server) -> None:
    r = server.client().responses.create(model=server.model, input="What is the weather in Paris and Tokyo?",
                                         tools=[WEATHER_TOOL], parallel_tool_calls=False)
    assert [json.loads(i.arguments)["city"] for i in r.output] == ["Paris"] and r.parallel_tool_calls is False


def test_tool_choice_none_answers_without_tools(server: Server) -> None:
    r = server.client().responses.create(model=server.model, input="Hi", tools=[WEATHER_TOOL], tool_choice="none")
    assert r.tool_choice == "none" and all(i.type == "message" for i in r.output)


def test_reasoning_before_message(srv: Server) -> None:
    with srv.client().responses.stream(model=srv.model, input="What is 2+2? Think first.") as stream:
        types = [e.type for e in stream]
        final = stream.get_final_response()
    assert [i.type for i in final.output] == ["reasoning", "message"]
    reasoning = final.output[0]
    assert reasoning.content[0].text == completion("think").split("<think>\n")[1].split("\n</think>")[0]
    assert reasoning.id.startswith("rs_") and reasoning.summary == []
    assert final.output_text == "The answer is 4."
    assert types.index("response.reasoning_text.done") < types.index("response.output_text.delta")
    assert 0 < final.usage.output_tokens_details.reasoning_tokens < final.usage.output_tokens


def test_reasoning_effort_none_turns_thinking_off(server: Server) -> None:
    r = server.client().responses.create(model=server.model, input="What is 2+2? Think first.",
                                         reasoning={"effort": "none"})
    assert [i.type for i in r.output] == ["message"] and r.output_text == completion("think_off")
    assert r.reasoning.effort == "none"


def test_json_answer(srv: Server) -> None:
    r = srv.client().responses.create(model=srv.model, input="Describe a cat as JSON.")
    assert json.loads(r.output_text) == json.loads(completion("json_cat"))


def test_incomplete_on_max_output_tokens(srv: Server) -> None:
    c = srv.client()
    r = c.responses.create(model=srv.model, input="Count from 1 to 40.", max_output_tokens=16)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 16 and r.output[-1].status == "incomplete" and r.max_output_tokens == 16
    assert completion("count").startswith(r.output_text)
    stream = c.responses.create(model=srv.model, input="Count from 1 to 40.", max_output_tokens=16, stream=True)
    types = [e.type for e in stream]
    assert types[-1] == "response.incomplete" and types.count("response.incomplete") == 1


def test_full_count(srv: Server) -> None:
    r = srv.client().responses.create(model=srv.model, input="Count from 1 to 40.")
    assert r.status == "completed" and r.output_text == completion("count")


def test_echoed_fields(server: Server) -> None:
    r = server.client().responses.create(
        model=server.model, input="Hi", metadata={"run": "7"}, user="u1", store=False, temperature=0,
        prompt_cache_key="k", safety_identifier="s", text={"verbosity": "low"})
    assert r.metadata == {"run": "7"} and r.user == "u1" and r.store is False and r.temperature == 0
    assert r.prompt_cache_key == "k" and r.safety_identifier == "s" and r.text.verbosity == "low"
    assert r.output_text == completion("greeting")


def test_host_extensions_still_work(server: Server) -> None:
    r = server.client().responses.create(
        model=server.model, input="What is 2+2? Think first.", extra_body={
            "seed": 3, "chat_template_kwargs": {"enable_thinking": False}})
    assert r.output_text == completion("think_off")
