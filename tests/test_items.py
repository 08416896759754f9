"""Stored item forms: every input form becomes the full, typed item with an id the API lists back."""

from __future__ import annotations

from transformers_responses.items import stored_item, stored_items


def test_easy_messages_become_full_messages() -> None:
    user, assistant = stored_items([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}])
    assert user["type"] == "message" and user["id"].startswith("msg_") and user["status"] == "completed"
    assert user["content"] == [{"type": "input_text", "text": "Hi"}]
    assert assistant["content"] == [{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}]
    assert user["id"] != assistant["id"]


def test_given_ids_and_fields_are_kept() -> None:
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{}"}
    assert stored_item(call) == {**call, "status": "completed"}
    out = stored_item({"type": "function_call_output", "call_id": "call_1", "output": "x"})
    assert out["id"].startswith("fco_") and out["output"] == "x"


def test_reasoning_items_get_no_invented_status() -> None:
    item = stored_item({"type": "reasoning", "id": "rs_1", "summary": []})
    assert "status" not in item and item["id"] == "rs_1"


def test_drop_oldest_keeps_system_and_the_last_user_turn() -> None:
    from transformers_responses.items import drop_oldest

    system = {"role": "system", "content": "s"}
    old = {"role": "user", "content": "old"}
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    out = {"type": "function_call_output", "call_id": "c1", "output": "x"}
    answer = {"role": "assistant", "content": "a"}
    last = {"role": "user", "content": "last"}
    history, rest = drop_oldest([system, old, call, out, answer, last], history=2)  # type: ignore[misc]
    assert history == [system] and rest == [call, out, answer, last]
    history, rest = drop_oldest([*history, *rest], history=1)  # type: ignore[misc]
    assert rest == [answer, last]  # the call went with its output
    history, rest = drop_oldest([*history, *rest], history=1)  # type: ignore[misc]
    assert [*history, *rest] == [system, last]
    assert drop_oldest([system, last], history=0) is None
