"""Two server processes sharing one real `redis-server`: a response created on one is continued, retrieved,
cancelled and its background stream resumed on the other."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server, completion, start_server

LONG = {"generation_config": json.dumps({"min_new_tokens": 1500, "max_new_tokens": 1500})}


@pytest.fixture(scope="module")
def replicas(fixture_model: Path, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[Server, Server]]:
    url = f"{redis_url}?prefix=replicas-{uuid.uuid4().hex[:6]}:"
    a = start_server(fixture_model, tmp_path_factory.mktemp("a"), "--responses-store", url)
    try:
        b = start_server(fixture_model, tmp_path_factory.mktemp("b"), "--responses-store", url)
    except BaseException:
        a.stop()
        raise
    yield a, b
    a.stop()
    b.stop()


def test_create_on_one_continue_and_get_on_the_other(replicas: tuple[Server, Server]) -> None:
    a, b = replicas
    first = a.client().responses.create(model=a.model, input="My name is Ada.")
    assert b.client().responses.retrieve(first.id).output_text == completion("name_intro")
    second = b.client().responses.create(model=b.model, input="What is my name?", previous_response_id=first.id)
    assert second.output_text == completion("name_recall")
    conv = a.client().conversations.create()
    b.client().responses.create(model=b.model, input="My name is Ada.", conversation=conv.id)
    assert a.client().responses.create(model=a.model, input="What is my name?",
                                       conversation=conv.id).output_text == completion("name_recall")


def test_cancel_on_the_other_replica_stops_the_generation(replicas: tuple[Server, Server]) -> None:
    a, b = replicas
    running = a.client().responses.create(model=a.model, input="Count from 1 to 40.", background=True,
                                          extra_body=LONG)
    deadline = time.monotonic() + 30
    while b.client().responses.retrieve(running.id).status != "in_progress":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(0.5)  # let it write some tokens
    assert b.client().responses.cancel(running.id).status == "cancelled"
    started = time.monotonic()
    assert a.client().responses.create(model=a.model, input="Hi").output_text == completion("greeting")
    assert time.monotonic() - started < 5  # replica a's compute was freed by a cancel sent to b
    time.sleep(0.5)
    final = a.client().responses.retrieve(running.id)
    assert final.status == "cancelled" and 0 < final.usage.output_tokens < 1500


def test_stream_resumed_on_the_other_replica(replicas: tuple[Server, Server]) -> None:
    a, b = replicas
    gen = {"generation_config": json.dumps({"min_new_tokens": 120, "max_new_tokens": 120})}
    stream = a.client().responses.create(model=a.model, input="Count from 1 to 40.", background=True, stream=True,
                                         extra_body=gen)
    first = []
    for event in stream:
        first.append(event)
        if len(first) == 6:
            break
    stream.close()
    rest = list(b.client().responses.retrieve(first[0].response.id, stream=True,
                                              starting_after=first[-1].sequence_number))
    numbers = [e.sequence_number for e in first + rest]
    assert numbers == list(range(len(numbers))) and rest[-1].type == "response.incomplete"
