"""Conversation state end to end through the openai SDK: previous_response_id chains, stored responses (GET, DELETE,
input items), store false, item references and input token counts, on the real fixture model."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from transformers_responses.fixture_model import WEATHER_TOOL

from .conftest import Server, completion

WEATHER_RESULT = '{"temperature": 22, "condition": "sunny"}'


def test_remembered_name_through_previous_response_id(srv: Server) -> None:
    c = srv.client()
    first = c.responses.create(model=srv.model, input="My name is Ada.")
    assert first.output_text == completion("name_intro")
    second = c.responses.create(model=srv.model, input="What is my name?", previous_response_id=first.id)
    assert second.output_text == completion("name_recall") and second.previous_response_id == first.id
    # Without the chain the model does not know the name: the context really came from the store.
    alone = c.responses.create(model=srv.model, input="What is my name?")
    assert alone.output_text != completion("name_recall")


def test_instructions_are_not_inherited(server: Server) -> None:
    c = server.client()
    first = c.responses.create(model=server.model, input="My name is Ada.", instructions="You are a pirate.")
    count = c.responses.input_tokens.count(model=server.model, input="What is my name?",
                                           previous_response_id=first.id).input_tokens
    with_instructions = c.responses.input_tokens.count(model=server.model, input="What is my name?",
                                                       previous_response_id=first.id,
                                                       instructions="You are a pirate.").input_tokens
    assert with_instructions > count


def test_tool_call_continued_by_id_with_function_call_output(srv: Server) -> None:
    c = srv.client()
    r = c.responses.create(model=srv.model, input="What is the weather in Paris?", tools=[WEATHER_TOOL])
    call = r.output[0]
    assert call.type == "function_call"
    follow = c.responses.create(model=srv.model, previous_response_id=r.id, tools=[WEATHER_TOOL], input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": WEATHER_RESULT}])
    assert follow.output_text == completion("weather_answer")


def test_chain_of_three_sees_everything_in_order(server: Server) -> None:
    c = server.client()
    first = c.responses.create(model=server.model, input="What is the weather in Paris?", tools=[WEATHER_TOOL])
    second = c.responses.create(model=server.model, previous_response_id=first.id, tools=[WEATHER_TOOL], input=[
        {"type": "function_call_output", "call_id": first.output[0].call_id, "output": WEATHER_RESULT}])
    third = c.responses.input_tokens.count(model=server.model, previous_response_id=second.id, input="Thanks",
                                           tools=[WEATHER_TOOL]).input_tokens
    flat = c.responses.input_tokens.count(model=server.model, tools=[WEATHER_TOOL], input=[
        {"role": "user", "content": "What is the weather in Paris?"},
        *[i.model_dump(exclude_none=True) for i in first.output],
        {"type": "function_call_output", "call_id": first.output[0].call_id, "output": WEATHER_RESULT},
        *[i.model_dump(exclude_none=True) for i in second.output],
        {"role": "user", "content": "Thanks"}]).input_tokens
    assert third == flat


def test_get_delete_and_input_items(server: Server) -> None:
    c = server.client()
    r = c.responses.create(model=server.model, input=[
        {"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}], metadata={"k": "v"})
    got = c.responses.retrieve(r.id)
    assert got.model_dump() == r.model_dump()
    items = c.responses.input_items.list(r.id)
    assert [i.role for i in items.data] == ["user", "developer"]  # desc by default
    assert items.data[0].content[0].text == "Hi" and items.first_id == items.data[0].id
    asc = c.responses.input_items.list(r.id, order="asc", limit=1)
    assert [i.role for i in asc.data] == ["developer"] and asc.has_more is True
    rest = c.responses.input_items.list(r.id, order="asc", after=asc.data[0].id)
    assert [i.role for i in rest.data] == ["user"] and rest.has_more is False
    deleted = httpx.delete(f"{server.base_url}/responses/{r.id}").json()
    assert deleted == {"id": r.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.input_items.list(r.id)
    with pytest.raises(openai.BadRequestError) as info:
        c.responses.create(model=server.model, input="Hi", previous_response_id=r.id)
    assert info.value.body["code"] == "previous_response_not_found"
    assert info.value.body["param"] == "previous_response_id"


def test_input_items_query_is_validated(server: Server) -> None:
    r = server.client().responses.create(model=server.model, input="Hi")
    for query, param in (("limit=0", "limit"), ("limit=101", "limit"), ("order=up", "order")):
        resp = httpx.get(f"{server.base_url}/responses/{r.id}/input_items?{query}")
        assert resp.status_code == 400 and resp.json()["error"]["param"] == param


def test_store_false_keeps_nothing_yet_works(srv: Server) -> None:
    c = srv.client()
    r = c.responses.create(model=srv.model, input="My name is Ada.", store=False)
    assert r.output_text == completion("name_intro") and r.store is False
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)
    with pytest.raises(openai.BadRequestError):
        c.responses.create(model=srv.model, input="What is my name?", previous_response_id=r.id)
    with c.responses.stream(model=srv.model, input="Hi", store=False) as stream:
        final = stream.get_final_response()
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(final.id)


def test_streamed_response_is_stored_before_its_terminal_event(server: Server) -> None:
    c = server.client()
    with c.responses.stream(model=server.model, input="Hi") as stream:
        for event in stream:
            if event.type == "response.completed":
                # The terminal event is only sent once the response is committed.
                assert c.responses.retrieve(event.response.id).status == "completed"
        final = stream.get_final_response()
    assert c.responses.retrieve(final.id).output_text == completion("greeting")


def test_item_reference_resolves_stored_items(server: Server) -> None:
    c = server.client()
    first = c.responses.create(model=server.model, input="My name is Ada.")
    user_item = c.responses.input_items.list(first.id).data[0]
    r = c.responses.create(model=server.model, input=[
        {"type": "item_reference", "id": user_item.id}, {"type": "item_reference", "id": first.output[0].id},
        {"role": "user", "content": "What is my name?"}])
    assert r.output_text == completion("name_recall")


def test_input_tokens_counts_with_template_and_tools(server: Server) -> None:
    c = server.client()
    plain = c.responses.input_tokens.count(model=server.model, input="What is the weather in Paris?")
    with_tools = c.responses.input_tokens.count(model=server.model, input="What is the weather in Paris?",
                                                tools=[WEATHER_TOOL])
    assert plain.object == "response.input_tokens" and 0 < plain.input_tokens < with_tools.input_tokens
    usage = c.responses.create(model=server.model, input="What is the weather in Paris?", tools=[WEATHER_TOOL]).usage
    assert usage.input_tokens == with_tools.input_tokens
    bad = httpx.post(f"{server.base_url}/responses/input_tokens", json={"model": server.model, "input": 3})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "input"


def test_continuing_an_unfinished_background_response_is_refused(server: Server) -> None:
    c = server.client()
    b = c.responses.create(model=server.model, input="Count from 1 to 40.", background=True,
                           extra_body={"generation_config": json.dumps({"min_new_tokens": 1500,
                                                                        "max_new_tokens": 1500})})
    with pytest.raises(openai.BadRequestError) as info:
        c.responses.create(model=server.model, input="Hi", previous_response_id=b.id)
    assert info.value.body["param"] == "previous_response_id"
    c.responses.cancel(b.id)
