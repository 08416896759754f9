"""Input normalization: Responses input items → chat messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformers_responses.errors import InvalidRequestError, UnsupportedError
from transformers_responses.normalizer import input_items, to_chat_messages


def test_string_input_and_instructions() -> None:
    items = input_items({"input": "Hi"})
    assert to_chat_messages(items, "Be brief.") == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_developer_is_system_and_merges_with_instructions() -> None:
    items = [{"role": "developer", "content": "Rule."}, {"role": "user", "content": "Hi"}]
    assert to_chat_messages(items, "Inst.")[0] == {"role": "system", "content": "Inst.\n\nRule."}


def test_parts_join_and_history_parts_are_text() -> None:
    items = [{"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
             {"role": "assistant", "content": [{"type": "output_text", "text": "c"}, {"type": "refusal", "refusal": "no"}]}]
    assert to_chat_messages(items, None) == [{"role": "user", "content": "a\nb"},
                                             {"role": "assistant", "content": "c\nno"}]


def test_reasoning_then_calls_then_outputs() -> None:
    items = [
        {"role": "user", "content": "Weather?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city": "Tokyo"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rainy"}]},
    ]
    msgs = to_chat_messages(items, None)
    assert msgs[1]["role"] == "assistant" and msgs[1]["reasoning_content"] == "think"
    assert [tc["function"]["arguments"] for tc in msgs[1]["tool_calls"]] == [{"city": "Paris"}, {"city": "Tokyo"}]
    assert msgs[2:] == [{"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                        {"role": "tool", "tool_call_id": "c2", "content": "rainy"}]


def test_assistant_message_then_call_is_one_turn() -> None:
    items = [{"role": "assistant", "content": "Let me check."},
             {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]
    msgs = to_chat_messages(items, None)
    assert len(msgs) == 1 and msgs[0]["content"] == "Let me check." and len(msgs[0]["tool_calls"]) == 1


def test_summary_only_reasoning_is_accepted() -> None:
    items = [{"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "s"}]},
             {"role": "assistant", "content": "a"}]
    assert to_chat_messages(items, None)[0]["reasoning_content"] == "s"


def test_image_for_text_model_is_a_400_naming_the_part() -> None:
    items = [{"role": "user", "content": [{"type": "input_text", "text": "a"},
                                          {"type": "input_image", "image_url": "data:image/png;base64,AA"}]}]
    with pytest.raises(InvalidRequestError) as info:
        to_chat_messages(items, None)
    assert info.value.param == "input[0].content[1]"
    vision = to_chat_messages(items, None, vision=True)
    assert vision[0]["content"][1] == {"type": "image", "url": "data:image/png;base64,AA"}


def test_refused_items_name_the_item() -> None:
    # References are resolved from the store before normalization; one that reaches it was not found.
    with pytest.raises(InvalidRequestError) as info:
        to_chat_messages([{"role": "user", "content": "x"}, {"type": "item_reference", "id": "msg_1"}], None)
    assert (info.value.param, info.value.code) == ("input[1]", "item_not_found")
    with pytest.raises(UnsupportedError) as info:
        to_chat_messages([{"type": "web_search_call", "id": "w", "status": "completed"}], None)
    assert info.value.param == "input[0].type"


def test_history_items_are_named_by_where_they_came_from() -> None:
    history = [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{oops"}]
    with pytest.raises(InvalidRequestError) as info:
        to_chat_messages([*history, {"role": "user", "content": "x"}], None, history=1)
    assert info.value.param.startswith("previous_response_id")
    with pytest.raises(InvalidRequestError) as info:
        to_chat_messages([{"role": "user", "content": "x"}, *history], None, history=1, history_path="conversation")
    assert info.value.param == "input[0].arguments"


def test_bad_arguments_json_is_a_400() -> None:
    with pytest.raises(InvalidRequestError) as info:
        to_chat_messages([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{oops"}], None)
    assert info.value.param == "input[0].arguments"


@given(st.lists(st.sampled_from(["user", "assistant", "system", "developer"]), min_size=1, max_size=8),
       st.text(max_size=20))
def test_roles_always_map_to_template_roles(roles: list[str], text: str) -> None:
    msgs = to_chat_messages([{"role": r, "content": text} for r in roles], None)
    assert {m["role"] for m in msgs} <= {"user", "assistant", "system"}
    assert all(m["role"] != "system" or i == 0 or msgs[i - 1]["role"] != "system" or True for i, m in enumerate(msgs))
