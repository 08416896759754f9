"""transformers_responses.logprobs: per-token logprobs recorded during a real `generate()` on the fixture model."""

from __future__ import annotations

import math
from typing import Any

import pytest

from transformers_responses import structured
from transformers_responses.fixture_model import GREETING, GREETING_REPLY, JSON_CAT
from transformers_responses.logprobs import LogprobsRecorder


@pytest.fixture(scope="module")
def loaded() -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from transformers_responses.fixture_model import build_fixture_model

    path = build_fixture_model()
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def run(loaded: tuple[Any, Any], prompt: str, top: int, *extra: Any, criterion: bool = True,
        streamer: Any = None) -> tuple[list[int], LogprobsRecorder]:
    from transformers import LogitsProcessorList, StoppingCriteriaList

    model, tokenizer = loaded
    inputs = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    eos = model.generation_config.eos_token_id
    recorder = LogprobsRecorder(tokenizer, top, skip_ids=eos)
    criteria = StoppingCriteriaList([recorder.chosen] if criterion else [])
    out = model.generate(**inputs, max_new_tokens=40, do_sample=False,
                         streamer=streamer(recorder) if streamer else None,
                         logits_processor=LogitsProcessorList([*extra, recorder]), stopping_criteria=criteria)
    if not criterion:
        recorder.finish(out)
    return [t for t in out[0, inputs["input_ids"].shape[1]:].tolist() if t not in eos], recorder


@pytest.mark.parametrize("top", [0, 1, 5, 20])
def test_entries_per_token(loaded: tuple[Any, Any], top: int) -> None:
    ids, recorder = run(loaded, GREETING, top)
    entries = recorder.drain()
    assert len(entries) == len(ids) and recorder.drain() == []
    assert "".join(e["token"] for e in entries) == GREETING_REPLY
    for entry in entries:
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert entry["logprob"] <= 0 and bytes(entry["bytes"]).decode() == entry["token"]
        assert len(entry["top_logprobs"]) == top
        logprobs = [alt["logprob"] for alt in entry["top_logprobs"]]
        assert logprobs == sorted(logprobs, reverse=True)
        if top:  # greedy: the choice is the most likely token
            assert entry["top_logprobs"][0]["token"] == entry["token"]
            assert math.isclose(entry["top_logprobs"][0]["logprob"], entry["logprob"])


def test_without_the_criterion_finish_records_the_last(loaded: tuple[Any, Any]) -> None:
    _, recorder = run(loaded, GREETING, 2, criterion=False)
    assert "".join(e["token"] for e in recorder.drain()) == GREETING_REPLY


def test_entry_is_recorded_before_its_token_streams(loaded: tuple[Any, Any]) -> None:
    """What the event loop relies on: when the streamer gets token t, the entry for t is already there."""
    seen: list[tuple[int, int]] = []  # (tokens streamed so far, entries available then)

    class Streamer:
        def __init__(self, recorder: LogprobsRecorder) -> None:
            self.recorder, self.first, self.tokens, self.entries = recorder, True, 0, 0

        def put(self, value: Any) -> None:
            if self.first:  # the prompt
                self.first = False
                return
            self.tokens += value.numel()
            self.entries += len(self.recorder.drain())
            seen.append((self.tokens, self.entries))

        def end(self) -> None:
            pass

    ids, _ = run(loaded, GREETING, 3, streamer=Streamer)
    assert seen and all(entries == tokens for tokens, entries in seen[:-1])  # the last put is the end token
    assert seen[-1][1] == len(ids)


def test_bytes_of_a_partial_character(loaded: tuple[Any, Any]) -> None:
    _, tokenizer = loaded
    recorder = LogprobsRecorder(tokenizer, 0)
    token_ids = tokenizer.encode("é", add_special_tokens=False)
    raw = b"".join(bytes(recorder._token(t)[1]) for t in token_ids)
    assert raw == "é".encode()


def test_top_logprobs_bounds(loaded: tuple[Any, Any]) -> None:
    with pytest.raises(ValueError):
        LogprobsRecorder(loaded[1], 21)


def test_after_a_grammar_only_allowed_alternatives(loaded: tuple[Any, Any]) -> None:
    model, tokenizer = loaded
    grammar = structured.compile_json_object(tokenizer, vocab_size=structured.model_vocab_size(model))
    mask = structured.GrammarLogitsProcessor(grammar, eos_token_id=model.generation_config.eos_token_id)
    ids, recorder = run(loaded, JSON_CAT, 20, mask)
    entries = recorder.drain()
    assert len(entries) == len(ids)
    # An object must open with `{`: every alternative the grammar left does (here `{` or `{"`), no other token.
    assert entries[0]["top_logprobs"] and all(alt["token"].startswith("{") for alt in entries[0]["top_logprobs"])
    assert all(alt["logprob"] > -math.inf for e in entries for alt in e["top_logprobs"])
