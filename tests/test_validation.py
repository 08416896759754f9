"""Request validation against the openai request types."""

from __future__ import annotations

import pytest

from transformers_responses.errors import InvalidRequestError
from transformers_responses.validation import validate_create_request


def problem(body: object) -> tuple[str | None, str | None]:
    with pytest.raises(InvalidRequestError) as info:
        validate_create_request(body)
    return info.value.param, info.value.code


@pytest.mark.parametrize("body", [
    {"model": "m", "input": "hi"},
    {"model": "m", "input": [{"role": "user", "content": "hi"}]},
    {"model": "m", "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "a"}]}]},
    {"model": "m", "input": [{"role": "assistant", "content": [{"type": "output_text", "text": "a"}], "phase": "final_answer"}]},
    {"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                             {"type": "function_call_output", "call_id": "c", "output": "ok"}]},
    {"model": "m", "input": [{"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}]}]},
    {"model": "m", "input": "x", "tools": [{"type": "function", "name": "f", "parameters": {}, "strict": True}]},
    {"model": "m", "input": "x", "tool_choice": {"type": "function", "name": "f"}},
    {"model": "m", "input": "x", "stream": True, "seed": 1, "generation_config": "{}", "chat_template_kwargs": {"a": 1}},
    {"model": "m", "input": "x", "metadata": {"k": "v"}, "temperature": 1, "top_p": 0.5},
])
def test_valid_requests_pass(body: dict) -> None:
    validate_create_request(body)


@pytest.mark.parametrize(("body", "param", "code"), [
    ({"model": "m", "input": "x", "foo": 1}, "foo", "unknown_parameter"),
    ({"model": "m", "input": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                              {"role": "user", "content": 3}]}, "input[2].content", "invalid_type"),
    ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "a", "x": 1}]}]},
     "input[0].content[0].x", "unknown_parameter"),
    ({"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f"}]},
     "input[0].arguments", "missing_required_parameter"),
    ({"model": "m", "input": [{"type": "bogus"}]}, "input[0].type", "invalid_value"),
    ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role", "invalid_value"),
    ({"model": "m", "input": "x", "temperature": "hot"}, "temperature", "invalid_type"),
    ({"model": "m", "input": "x", "max_output_tokens": True}, "max_output_tokens", "invalid_type"),
    ({"model": "m", "input": "x", "metadata": {"a": 1}}, "metadata.a", "invalid_type"),
    ({"model": "m", "input": "x", "tool_choice": {"type": "function"}}, "tool_choice.name", "missing_required_parameter"),
    ({"input": "x"}, "model", "missing_required_parameter"),
    ({"model": "m"}, "input", "missing_required_parameter"),
    ({"model": "m", "input": 5}, "input", "invalid_type"),
])
def test_invalid_requests_name_the_path(body: dict, param: str, code: str) -> None:
    assert problem(body) == (param, code)


def test_body_must_be_an_object() -> None:
    assert problem([1, 2]) == (None, None)
