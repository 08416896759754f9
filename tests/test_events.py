"""Event builders: every event and snapshot validates as the openai type of its name; one sequencer numbers them."""

from __future__ import annotations

import json

from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from transformers_responses import events as ev
from transformers_responses.emitter import Assembler, echo_tools, initial_response

STREAM_EVENT = TypeAdapter(ResponseStreamEvent)
BODY = {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {}}],
        "metadata": {"k": "v"}, "instructions": "be brief"}


def assemble(parser_events: list[tuple[str, str]], status: str = "completed") -> list[dict]:
    snap = initial_response(BODY, response_id="resp_1", model="m", created_at=1, tools=echo_tools(BODY["tools"]))
    asm = Assembler(snap)
    out = asm.start() + asm.apply(parser_events)
    out += asm.finish(status, ev.usage(3, 4, 1), incomplete_reason="max_output_tokens" if status == "incomplete" else None)
    seq = ev.Sequencer()
    for e in out:
        seq.number(e)
    return out


FULL = [("reasoning", "hmm"), ("reasoning_end", ""), ("text", "Hel"), ("text", "lo"),
        ("call_start", "f"), ("call_delta", '{"a":'), ("call_delta", " 1}"), ("call_end", '{"a": 1}'),
        ("call_start", "f"), ("call_delta", "{}"), ("call_end", "{}")]


def test_every_event_validates_as_its_openai_type() -> None:
    for event in assemble(FULL):
        model = STREAM_EVENT.validate_python(event)
        assert model.type == event["type"]
        assert json.loads(model.model_dump_json())["type"] == event["type"]
    final = assemble(FULL)[-1]["response"]
    response = Response.model_validate(final)
    assert response.output_text == "Hello"
    assert isinstance(final["created_at"], int)


def test_order_indices_and_sequence() -> None:
    out = assemble(FULL)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    added = [(e["output_index"], e["item"]["type"]) for e in out if e["type"] == "response.output_item.added"]
    assert added == [(0, "reasoning"), (1, "message"), (2, "function_call"), (3, "function_call")]
    types = [e["type"] for e in out]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    final = out[-1]["response"]["output"]
    assert final[2]["call_id"] != final[3]["call_id"] and final[2]["id"].startswith("fc_")
    assert final[2]["call_id"].startswith("call_")


def test_calls_only_have_no_message_item() -> None:
    out = assemble([("call_start", "f"), ("call_delta", "{}"), ("call_end", "{}")])
    assert [i["type"] for i in out[-1]["response"]["output"]] == ["function_call"]


def test_cut_item_is_incomplete_and_last() -> None:
    out = assemble([("text", "1, 2, 3")], status="incomplete")
    final = out[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["response"]["output"][-1]["status"] == "incomplete"
    Response.model_validate(final["response"])


def test_aborted_call_is_incomplete_and_its_text_is_shown() -> None:
    out = assemble([("call_start", "f"), ("call_delta", "{bad"), ("call_abort", "<tool_call>{bad")])
    items = out[-1]["response"]["output"]
    assert items[0]["status"] == "incomplete" and items[1]["content"][0]["text"] == "<tool_call>{bad"


def test_sse_frame_is_one_block_named_for_its_type() -> None:
    seq = ev.Sequencer()
    frame = seq.frame(ev.output_text_delta("msg_1", 0, "a\nb"))
    name, data, blank, end = frame.split("\n")
    assert name == "event: response.output_text.delta" and data.startswith("data: ") and (blank, end) == ("", "")
    assert json.loads(data[6:])["sequence_number"] == 0 and seq.frame(ev.error_event("c", "m", None)).count("\n\n") == 1


def test_snapshot_has_every_response_field() -> None:
    snap = initial_response(BODY, response_id="resp_1", model="m", created_at=1, tools=[])
    assert set(Response.model_fields) <= set(snap)
    Response.model_validate(snap)
