"""WebSocket mode end to end through the openai SDK's `client.responses.connect()`: turns on one connection,
`previous_response_id` through the store and through the connection's own `store: false` responses, errors that keep
the connection open, and a close that stops generation — on the real fixture model."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from .conftest import Server, completion

TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def turn(conn: Any) -> list[Any]:
    """The events of one turn: up to its terminal event, or the lone `error` of a refused turn."""
    events = []
    for event in conn:
        events.append(event)
        if event.type in TERMINAL or (event.type == "error" and event.sequence_number is None):
            return events
    raise AssertionError(f"connection closed mid-turn after {[e.type for e in events]}")


def final(events: list[Any]) -> Any:
    assert events[-1].type == "response.completed", [e.type for e in events]
    return events[-1].response


def test_a_turn_streams_the_same_events_as_sse(srv: Server) -> None:
    with srv.client().responses.connect() as conn:
        conn.response.create(model=srv.model, input="Hi")
        events = turn(conn)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == completion("greeting")
    response = final(events)
    assert response.output_text == completion("greeting") and response.status == "completed"


def test_sequential_turns_continue_through_the_store(server: Server) -> None:
    c = server.client()
    with c.responses.connect() as conn:
        conn.response.create(model=server.model, input="My name is Ada.")
        first = final(turn(conn))
        conn.response.create(model=server.model, input="What is my name?", previous_response_id=first.id)
        second = final(turn(conn))
    assert first.output_text == completion("name_intro")
    assert second.output_text == completion("name_recall") and second.previous_response_id == first.id
    # Stored WS turns are ordinary stored responses: readable over HTTP, and continuable from another connection.
    assert c.responses.retrieve(second.id).model_dump() == second.model_dump()
    with c.responses.connect() as conn:
        conn.response.create(model=server.model, input="What is my name?", previous_response_id=first.id)
        assert final(turn(conn)).output_text == completion("name_recall")


def test_store_false_continues_on_the_same_connection_only(server: Server) -> None:
    c = server.client()
    with c.responses.connect() as conn:
        conn.response.create(model=server.model, input="My name is Ada.", store=False)
        first = final(turn(conn))
        conn.response.create(model=server.model, input="What is my name?", store=False,
                             previous_response_id=first.id)
        second = final(turn(conn))
    assert first.store is False and second.output_text == completion("name_recall")
    assert httpx.get(f"{server.base_url}/responses/{first.id}").status_code == 404
    with c.responses.connect() as conn:  # a new connection does not see the old one's unstored responses
        conn.response.create(model=server.model, input="What is my name?", previous_response_id=first.id)
        (error,) = turn(conn)
    assert error.type == "error" and error.status == 400
    assert error.error.code == "previous_response_not_found" and error.error.param == "previous_response_id"


def test_chains_cross_between_stored_and_unstored_turns(server: Server) -> None:
    c = server.client()
    with c.responses.connect() as conn:
        conn.response.create(model=server.model, input="My name is Ada.")
        stored = final(turn(conn))
        conn.response.create(model=server.model, input="What is my name?", store=False,
                             previous_response_id=stored.id)
        unstored = final(turn(conn))
        assert unstored.output_text == completion("name_recall")
        # A stored turn after the unstored one still sees the whole chain on this connection.
        conn.response.create(model=server.model, input="Hi", previous_response_id=unstored.id, generate=False)
        warm = final(turn(conn))
        # And one after that stored turn, found in the store, still reaches back through the unstored one.
        conn.response.create(model=server.model, input="Hi", previous_response_id=warm.id, generate=False)
        last = final(turn(conn))
    chain = [{"role": "user", "content": "My name is Ada."}, *[i.model_dump(exclude_none=True) for i in stored.output],
             {"role": "user", "content": "What is my name?"},
             *[i.model_dump(exclude_none=True) for i in unstored.output], {"role": "user", "content": "Hi"}]
    count = c.responses.input_tokens.count
    assert warm.usage.input_tokens == count(model=server.model, input=chain).input_tokens
    assert last.usage.input_tokens == count(model=server.model, input=[*chain, chain[-1]]).input_tokens


def test_a_bad_turn_answers_an_error_and_the_connection_goes_on(server: Server) -> None:
    with server.client().responses.connect() as conn:
        conn.send_raw(json.dumps({"type": "response.create", "model": server.model, "input": "Hi",
                                  "temperature": "hot"}))
        (bad,) = turn(conn)
        conn.send_raw("{not json")
        (garbled,) = turn(conn)
        conn.send_raw(json.dumps({"type": "response.create", "model": server.model, "input": "Hi",
                                  "background": True}))
        (background,) = turn(conn)
        conn.response.create(model=server.model, input="Hi", stream=True)  # `stream` is implicit: ignored
        good = final(turn(conn))
    assert bad.type == "error" and bad.status == 400
    assert bad.error.type == "invalid_request_error" and bad.error.param == "temperature"
    assert garbled.error.code == "invalid_json"
    assert background.error.param == "background"
    assert good.output_text == completion("greeting")


def test_stream_id_is_echoed_and_generate_false_prepares_a_turn(server: Server) -> None:
    with server.client().responses.connect() as conn:
        conn.response.create(model=server.model, input="My name is Ada.", generate=False, stream_id="lane-1")
        events = turn(conn)
        warm = final(events)
        assert warm.output == [] and {e.stream_id for e in events} == {"lane-1"}
        conn.response.create(model=server.model, input=[
            {"role": "assistant", "content": completion("name_intro")},
            {"role": "user", "content": "What is my name?"}], previous_response_id=warm.id)
        assert final(turn(conn)).output_text == completion("name_recall")


def _forced_long(server: Server, tokens: int) -> str:
    # Host extension: a generation_config without end tokens makes the model run to the limit.
    return json.dumps({"type": "response.create", "model": server.model, "input": "Count from 1 to 40.",
                       "generation_config": json.dumps({"max_new_tokens": tokens, "do_sample": False})})


def test_closing_mid_generation_stops_it(server: Server) -> None:
    c = server.client()
    with c.responses.connect() as conn:
        start = time.monotonic()
        conn.send_raw(_forced_long(server, 200))
        assert turn(conn)[-1].type in TERMINAL
        per_token = (time.monotonic() - start) / 200
        long_tokens = 1500
        conn.send_raw(_forced_long(server, long_tokens))
        events = [event for _, event in zip(range(20), conn)]
    stopped = time.monotonic()
    r = c.responses.create(model=server.model, input="Hi")
    waited = time.monotonic() - stopped
    assert r.status == "completed"
    # Had the abandoned generation run on, the next request would have queued behind ~1500 tokens.
    assert waited < max(0.5 * long_tokens * per_token, 1.0), (waited, per_token)
    # The store says what happened to it.
    assert events[0].type == "response.created"
    assert c.responses.retrieve(events[0].response.id).status == "cancelled"


def test_async_client(server: Server) -> None:
    async def main() -> tuple[Any, Any]:
        client = server.async_client()
        async with client.responses.connect() as conn:
            await conn.response.create(model=server.model, input="My name is Ada.", store=False)
            first = None
            async for event in conn:
                if event.type in TERMINAL:
                    first = event.response
                    break
            assert first is not None
            await conn.response.create(model=server.model, input="What is my name?", store=False,
                                       previous_response_id=first.id)
            async for event in conn:
                if event.type in TERMINAL:
                    return first, event.response
        raise AssertionError("connection closed mid-turn")

    first, second = asyncio.run(main())
    assert first.output_text == completion("name_intro") and second.output_text == completion("name_recall")
