"""The SQLite store keeps its promise across processes: a restart keeps stored responses and conversations, and a
`kill -9` during a background generation leaves that response `failed` after restart, with nothing else lost."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from .conftest import completion, start_server

LONG = {"generation_config": json.dumps({"min_new_tokens": 1500, "max_new_tokens": 1500})}


def test_restart_keeps_stored_responses(fixture_model: Path, tmp_path: Path) -> None:
    store = ["--responses-store", f"sqlite:///{tmp_path}/state/responses.db"]
    first = start_server(fixture_model, tmp_path, *store)
    try:
        c = first.client()
        r = c.responses.create(model=first.model, input="My name is Ada.")
        conv = c.conversations.create(items=[{"role": "user", "content": "My name is Ada."}])
    finally:
        first.stop()
    second = start_server(fixture_model, tmp_path, *store)
    try:
        c = second.client()
        assert c.responses.retrieve(r.id).model_dump() == r.model_dump()
        follow = c.responses.create(model=second.model, input="What is my name?", previous_response_id=r.id)
        assert follow.output_text == completion("name_recall")
        assert c.conversations.retrieve(conv.id).id == conv.id
        assert c.conversations.items.list(conv.id).data[0].content[0].text == "My name is Ada."
    finally:
        second.stop()


def test_kill_9_during_background_generation(fixture_model: Path, tmp_path: Path) -> None:
    store = ["--responses-store", f"sqlite:///{tmp_path}/responses.db"]
    first = start_server(fixture_model, tmp_path, *store)
    c = first.client()
    kept = c.responses.create(model=first.model, input="Hi")
    running = c.responses.create(model=first.model, input="Count from 1 to 40.", background=True, extra_body=LONG)
    deadline = time.monotonic() + 30
    while c.responses.retrieve(running.id).status != "in_progress":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(timeout=10)
    second = start_server(fixture_model, tmp_path, *store)
    try:
        c = second.client()
        crashed = c.responses.retrieve(running.id)
        assert crashed.status == "failed" and crashed.error is not None
        assert "stopped" in crashed.error.message
        # Its stored stream ends with the terminal event, so a replay does not hang.
        events = list(c.responses.retrieve(running.id, stream=True))
        assert events[-1].type == "response.failed"
        assert c.responses.retrieve(kept.id).output_text == completion("greeting")
    finally:
        second.stop()


@pytest.mark.parametrize("signal_name", ["SIGTERM"])
def test_graceful_stop_fails_running_background_responses(fixture_model: Path, tmp_path: Path,
                                                         signal_name: str) -> None:
    store = ["--responses-store", f"sqlite:///{tmp_path}/responses.db"]
    first = start_server(fixture_model, tmp_path, *store)
    c = first.client()
    running = c.responses.create(model=first.model, input="Count from 1 to 40.", background=True, extra_body=LONG)
    time.sleep(1.0)
    first.proc.send_signal(getattr(signal, signal_name))
    first.proc.wait(timeout=30)
    second = start_server(fixture_model, tmp_path, *store)
    try:
        assert second.client().responses.retrieve(running.id).status == "failed"
    finally:
        second.stop()
