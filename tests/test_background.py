"""Background responses end to end: poll, cancel mid-generation (the compute is freed), stream and resume after a
deliberate disconnect, delete while running — through the openai SDK on the real fixture model."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from .conftest import Server, completion

# A long generation on both paths: under a JSON-object grammar the fixture model writes one string until the cap
# (continuous batching does not take a per-request `min_new_tokens`).
LONG = {"input": "Hi", "text": {"format": {"type": "json_object"}}, "max_output_tokens": 2000}


def wait_for(client: openai.OpenAI, response_id: str, statuses: tuple[str, ...], timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = client.responses.retrieve(response_id)
        if r.status in statuses:
            return r
        time.sleep(0.1)
    raise AssertionError(f"{response_id} never reached {statuses}; last {r.status}")


def test_background_returns_at_once_and_polls_to_completion(srv: Server) -> None:
    c = srv.client()
    b = c.responses.create(model=srv.model, input="Hi", background=True)
    assert b.status in ("queued", "in_progress") and b.background is True and b.output == []
    done = wait_for(c, b.id, ("completed",))
    assert done.output_text == completion("greeting") and done.usage.output_tokens > 0


def test_cancel_mid_generation_frees_the_compute(srv: Server) -> None:
    c = srv.client()
    b = c.responses.create(model=srv.model, background=True, **LONG)
    wait_for(c, b.id, ("in_progress",))
    time.sleep(0.5)
    cancelled = c.responses.cancel(b.id)
    assert cancelled.status == "cancelled"
    started = time.monotonic()
    nxt = c.responses.create(model=srv.model, input="Hi")
    # 2000 tokens take seconds; a prompt answer means the cancelled generation no longer holds the model.
    assert nxt.output_text == completion("greeting") and time.monotonic() - started < 5
    final = wait_for(c, b.id, ("cancelled",))
    time.sleep(0.5)
    final = c.responses.retrieve(b.id)
    assert final.status == "cancelled" and 0 < final.usage.output_tokens < 2000
    assert c.responses.cancel(b.id).status == "cancelled"  # idempotent


def test_cancel_rules(server: Server) -> None:
    c = server.client()
    fg = c.responses.create(model=server.model, input="Hi")
    with pytest.raises(openai.BadRequestError):
        c.responses.cancel(fg.id)
    bg = c.responses.create(model=server.model, input="Hi", background=True)
    wait_for(c, bg.id, ("completed",))
    assert c.responses.cancel(bg.id).status == "completed"  # a finished response is answered as it is
    with pytest.raises(openai.NotFoundError):
        c.responses.cancel("resp_missing")


def test_stream_resume_after_a_deliberate_disconnect(srv: Server) -> None:
    c = srv.client()
    gen = {"generation_config": json.dumps({"min_new_tokens": 120, "max_new_tokens": 120})}
    stream = c.responses.create(model=srv.model, input="Count from 1 to 40.", background=True, stream=True,
                                extra_body=gen)
    first = []
    for event in stream:
        first.append(event)
        if len(first) == 8:
            break
    stream.close()  # the client goes away; generation goes on
    response_id = first[0].response.id
    assert first[0].type == "response.created" and first[0].response.status == "queued"
    last = first[-1].sequence_number
    rest = list(c.responses.retrieve(response_id, stream=True, starting_after=last))
    assert rest[0].sequence_number == last + 1
    numbers = [e.sequence_number for e in first + rest]
    assert numbers == list(range(len(numbers)))
    assert rest[-1].type == "response.incomplete" and rest[-1].response.usage.output_tokens == 120
    text = "".join(e.delta for e in first + rest if e.type == "response.output_text.delta")
    assert text == c.responses.retrieve(response_id).output_text
    again = list(c.responses.retrieve(response_id, stream=True, starting_after=numbers[-3]))
    assert [e.sequence_number for e in again] == numbers[-2:]


def test_streaming_a_foreground_response_again_is_refused(server: Server) -> None:
    r = server.client().responses.create(model=server.model, input="Hi")
    resp = httpx.get(f"{server.base_url}/responses/{r.id}", params={"stream": "true"})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "stream"


def test_delete_while_running_stops_it(server: Server) -> None:
    c = server.client()
    b = c.responses.create(model=server.model, background=True, **LONG)
    wait_for(c, b.id, ("in_progress",))
    assert httpx.delete(f"{server.base_url}/responses/{b.id}").json()["deleted"] is True
    started = time.monotonic()
    assert c.responses.create(model=server.model, input="Hi").output_text == completion("greeting")
    assert time.monotonic() - started < 5
    time.sleep(0.5)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(b.id)


def test_resume_after_the_terminal_event_ends_at_once(server: Server) -> None:
    c = server.client()
    b = c.responses.create(model=server.model, input="Hi", background=True)
    wait_for(c, b.id, ("completed",))
    events = list(c.responses.retrieve(b.id, stream=True))
    assert events[-1].type == "response.completed"
    started = time.monotonic()
    assert list(c.responses.retrieve(b.id, stream=True, starting_after=events[-1].sequence_number)) == []
    assert time.monotonic() - started < 5  # not a keep-alive loop until the client gives up
