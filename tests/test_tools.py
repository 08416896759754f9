"""Unit tests of `transformers_responses.tools`: what the model is offered, and custom-call input streaming."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from transformers_responses.normalizer import to_chat_messages
from transformers_responses.tools import InputStream, echo, input_from_arguments, toolset

FUNCTION = {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
         "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch"'}}


def test_template_tools_drop_strict_and_nest() -> None:
    assert toolset([FUNCTION]).template_tools() == [{"type": "function", "function": {
        "name": "f", "description": "d", "parameters": {"type": "object"}}}]
    assert toolset([]).template_tools() is None


def test_custom_namespace_and_hosted_tools() -> None:
    tools = toolset([PATCH, {"type": "web_search", "search_content_types": ["text"]},
                     {"type": "namespace", "name": "mcp__files", "description": "Files.",
                      "tools": [{"type": "function", "name": "read", "parameters": {"type": "object"}}]}])
    assert list(tools.tools) == ["apply_patch", "mcp__files__read"]
    assert tools.hosted == ["web_search"]
    custom = tools.get("apply_patch")
    assert custom is not None and custom.kind == "custom"
    schema = custom.definition["parameters"]
    assert schema["required"] == ["input"] and "lark grammar" in schema["properties"]["input"]["description"]
    read = tools.get("mcp__files__read")
    assert read is not None and (read.name, read.namespace) == ("read", "mcp__files")
    echoed = echo([PATCH, {"type": "web_search"}])
    assert echoed[0]["format"] == PATCH["format"] and echoed[1] == {"type": "web_search"}


def test_history_calls_render_under_the_offered_names() -> None:
    messages = to_chat_messages([
        {"type": "function_call", "call_id": "c1", "name": "read", "namespace": "mcp__files", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done"}], None)
    calls = messages[0]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["mcp__files__read", "apply_patch"]
    assert calls[1]["function"]["arguments"] == {"input": "*** Begin Patch"}
    assert messages[1] == {"role": "tool", "tool_call_id": "c2", "content": "Done"}


def test_input_from_arguments() -> None:
    assert input_from_arguments('{"input": "a\\nb"}') == "a\nb"
    assert input_from_arguments('{"patch": "x"}') == "x"  # one string under another key
    assert input_from_arguments('{"a": 1, "b": 2}') == '{"a": 1, "b": 2}'
    assert input_from_arguments("not json") == "not json"


@given(st.text(), st.integers(min_value=1, max_value=7), st.booleans())
def test_input_stream_decodes_any_text_in_any_chunking(text: str, size: int, ascii_only: bool) -> None:
    arguments = '{"input": ' + json.dumps(text, ensure_ascii=ascii_only) + "}"
    stream = InputStream()
    pieces = [stream.feed(arguments[i:i + size]) for i in range(0, len(arguments), size)]
    assert "".join(pieces) == text == stream.streamed


def test_input_stream_of_another_shape_streams_nothing() -> None:
    stream = InputStream()
    assert stream.feed('{"patch": "abc"}') == "" and stream.streamed == ""


def test_only_a_grammar_constrains_custom_calls() -> None:
    from transformers_responses.controls import needs_processors

    assert not needs_processors({"tools": [{"type": "custom", "name": "note"}]})  # free-form: nothing to enforce
    assert needs_processors({"tools": [PATCH]})
