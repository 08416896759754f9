"""Sealed reasoning: round trip, tamper and wrong-key detection; end to end, reasoning carried by the client with
`store: false` and `include: ["reasoning.encrypted_content"]`."""

from __future__ import annotations

import openai
import pytest

from transformers_responses import sealing
from transformers_responses.errors import InvalidRequestError

from .conftest import Server


def test_round_trip_and_tampering(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sealing.ENV_SECRET, "one")
    monkeypatch.setattr(sealing, "_key", None)
    token = sealing.seal_reasoning("2+2 is 4")
    assert "2+2" not in token and sealing.unseal(token, param="p") == {"type": "reasoning_text", "text": "2+2 is 4"}
    opened = sealing.open_reasoning([{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": token}])
    assert opened[0]["content"] == [{"type": "reasoning_text", "text": "2+2 is 4"}]
    tampered = token[:-6] + ("AAAAAA" if not token.endswith("AAAAAA") else "BBBBBB")
    for bad in (tampered, "not-base64!", ""):
        with pytest.raises(InvalidRequestError) as info:
            sealing.unseal(bad, param="input[0].encrypted_content")
        assert info.value.param == "input[0].encrypted_content"
    monkeypatch.setenv(sealing.ENV_SECRET, "two")
    monkeypatch.setattr(sealing, "_key", None)
    with pytest.raises(InvalidRequestError, match="another server or key"):
        sealing.unseal(token, param="p")
    monkeypatch.setattr(sealing, "_key", None)


def test_stateless_reasoning_round_trip(server: Server) -> None:
    c = server.client()
    r = c.responses.create(model=server.model, input="What is 2+2? Think first.", store=False,
                           include=["reasoning.encrypted_content"])
    reasoning = r.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content
    text = reasoning.content[0].text
    assert text not in reasoning.encrypted_content
    # The client sends the reasoning back with only its sealed form, as Codex does with store: false.
    sealed_only = {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": reasoning.encrypted_content}
    history = [{"role": "user", "content": "What is 2+2? Think first."}, sealed_only, r.output[1].model_dump()]
    with_sealed = c.responses.input_tokens.count(model=server.model, input=history).input_tokens
    with_text = c.responses.input_tokens.count(model=server.model, input=[
        history[0], {**sealed_only, "content": [{"type": "reasoning_text", "text": text}]}, history[2]]).input_tokens
    without = c.responses.input_tokens.count(model=server.model, input=[history[0], history[2]]).input_tokens
    assert with_sealed == with_text > without  # the model sees the reasoning, unsealed
    with pytest.raises(openai.BadRequestError) as info:  # a blob from elsewhere is a 400 naming the item
        c.responses.input_tokens.count(model=server.model, input=[
            history[0], {**sealed_only, "encrypted_content": "dHJzMQ" + "A" * 40}])
    assert info.value.body["param"] == "input[1].encrypted_content"
