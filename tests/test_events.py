"""Event builders: every event and snapshot validates as the openai type of its name; one sequencer numbers them."""

from __future__ import annotations

import json

from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from transformers_responses import events as ev
from transformers_responses.emitter import Assembler, initial_response
from transformers_responses.tools import echo as echo_tools

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


def test_background_start_and_cancelled_finish() -> None:
    snap = initial_response({**BODY, "background": True}, response_id="resp_1", model="m", created_at=1,
                            tools=echo_tools(BODY["tools"]))
    asm = Assembler(snap)
    start = asm.start(queued=True)
    assert [e["type"] for e in start] == ["response.created", "response.queued", "response.in_progress"]
    assert [e["response"]["status"] for e in start] == ["queued", "queued", "in_progress"]
    for event in start:
        STREAM_EVENT.validate_python({**event, "sequence_number": 0})
    asm.apply([("text", "Hel")])
    end = asm.finish("cancelled", ev.usage(3, 1, 0))
    assert end[-1]["type"] == "response.cancelled"
    final = Response.model_validate(end[-1]["response"])  # no stream type exists for it; the snapshot validates
    assert final.status == "cancelled" and final.output[0].status == "incomplete" and final.background is True


def test_logprobs_ride_on_the_next_text_delta_and_the_part() -> None:
    snap = initial_response(BODY, response_id="resp_1", model="m", created_at=1, tools=[])
    asm = Assembler(snap)
    lp = [{"token": "Hel", "logprob": -0.1, "bytes": [72, 101, 108], "top_logprobs": []}]
    held = asm.apply([], lp)  # the parser held the text back: nothing to carry it yet
    deltas = asm.apply([("text", "Hel")]) + asm.apply([("text", "lo")], [{**lp[0], "token": "lo"}])
    assert held == [] and [d["logprobs"] for d in deltas if d["type"].endswith("delta")] == [lp, [{**lp[0], "token": "lo"}]]
    closing = asm.apply([("reasoning", "x")], [{**lp[0], "token": "x"}])  # reasoning tokens carry none
    text_done = next(e for e in closing if e["type"] == "response.output_text.done")
    assert [x["token"] for x in text_done["logprobs"]] == ["Hel", "lo"]
    assert [x["token"] for x in asm.output[0]["content"][0]["logprobs"]] == ["Hel", "lo"]
    reasoning_done = asm.finish("completed", ev.usage(1, 3, 1))
    assert all("logprobs" not in e for e in reasoning_done if e["type"].startswith("response.reasoning"))


def test_reasoning_summary_asked_streams_the_reasoning_as_its_summary() -> None:
    body = {**BODY, "reasoning": {"summary": "auto"}}
    snap = initial_response(body, response_id="resp_1", model="m", created_at=1, tools=[])
    asm = Assembler(snap)
    out = asm.start() + asm.apply([("reasoning", "hm"), ("reasoning", "m"), ("reasoning_end", ""), ("text", "Hi")])
    out += asm.finish("completed", ev.usage(1, 2, 1))
    for event in out:
        STREAM_EVENT.validate_python({**event, "sequence_number": 0})
    types = [e["type"] for e in out]
    assert types.index("response.reasoning_summary_part.added") < types.index("response.reasoning_summary_text.delta")
    assert [e["delta"] for e in out if e["type"] == "response.reasoning_summary_text.delta"] == ["hm", "m"]
    assert types.index("response.reasoning_summary_text.done") < types.index("response.reasoning_summary_part.done")
    reasoning = Response.model_validate(out[-1]["response"]).output[0]
    assert [s.text for s in reasoning.summary] == ["hmm"] and reasoning.content[0].text == "hmm"
    plain = assemble([("reasoning", "hmm"), ("reasoning_end", "")])  # not asked: no summary, no summary events
    assert plain[-1]["response"]["output"][0]["summary"] == []
    assert not [e for e in plain if "summary" in e["type"]]


def test_custom_and_namespaced_calls() -> None:
    from transformers_responses.tools import toolset

    tools = [{"type": "custom", "name": "patch"},
             {"type": "namespace", "name": "ns", "description": "d", "tools": [{"type": "function", "name": "f"}]}]
    snap = initial_response({**BODY, "tools": tools}, response_id="resp_1", model="m", created_at=1,
                            tools=echo_tools(tools))
    asm = Assembler(snap, tools=toolset(tools))
    out = asm.start() + asm.apply([("call_start", "patch"), ("call_delta", '{"input": "a\\n'), ("call_delta", 'b"}'),
                                   ("call_end", '{"input": "a\\nb"}'), ("call_start", "ns__f"), ("call_delta", "{}"),
                                   ("call_end", "{}")])
    out += asm.finish("completed", ev.usage(1, 2, 0))
    for event in out:
        STREAM_EVENT.validate_python({**event, "sequence_number": 0})
    assert [e["delta"] for e in out if e["type"] == "response.custom_tool_call_input.delta"] == ["a\n", "b"]
    custom, function = Response.model_validate(out[-1]["response"]).output
    assert (custom.type, custom.name, custom.input) == ("custom_tool_call", "patch", "a\nb")
    assert (function.type, function.name, function.namespace) == ("function_call", "f", "ns")
