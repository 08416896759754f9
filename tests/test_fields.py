"""The field policy: refused fields are a 400 naming them; implemented values are range-checked."""

from __future__ import annotations

import pytest

from transformers_responses.errors import InvalidRequestError, UnsupportedError
from transformers_responses.fields import FIELD_POLICY, REFUSED, check_supported


@pytest.mark.parametrize("field", [k for k, v in FIELD_POLICY.items() if v == REFUSED])
def test_refused_fields_name_themselves(field: str) -> None:
    with pytest.raises(UnsupportedError) as info:
        check_supported({"model": "m", "input": "x", field: "something"})
    assert info.value.param == field and info.value.status_code == 400


def test_refused_fields_at_their_neutral_value_pass() -> None:
    check_supported({"model": "m", "input": "x", "background": False, "previous_response_id": None})


@pytest.mark.parametrize(("body", "param"), [
    ({"max_output_tokens": 15}, "max_output_tokens"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_logprobs": 21}, "top_logprobs"),
    ({"include": ["code_interpreter_call.outputs", "computer_call_output.output.image_url", "nope"]}, "include[2]"),
    ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice.type"),
    ({"max_tool_calls": 0}, "max_tool_calls"),
    ({"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
    ({"metadata": {"k": "v" * 513}}, "metadata.k"),
])
def test_values_out_of_range_or_not_yet_supported(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        check_supported({"model": "m", "input": "x", **body})
    assert info.value.param == param


def test_vacuous_includes_and_neutral_values_pass() -> None:
    check_supported({"model": "m", "input": "x", "include": ["file_search_call.results"], "tool_choice": "none",
                     "truncation": "disabled", "text": {"format": {"type": "text"}, "verbosity": "low"}})
