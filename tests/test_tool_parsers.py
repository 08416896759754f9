"""Tool-call parsers: the same events whatever the chunking, arguments streamed, malformed calls become text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformers_responses import tool_parsers
from transformers_responses.tool_parsers.base import ToolParser
from transformers_responses.tool_parsers.hermes import HermesToolParser
from transformers_responses.tool_parsers.llama3 import Llama3JsonToolParser
from transformers_responses.tool_parsers.mistral import MistralToolParser
from transformers_responses.tool_parsers.qwen_xml import QwenXmlToolParser

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]


def run(cls: type[ToolParser], text: str, cuts: list[int], tools: list | None = TOOLS, prompt: str = "") -> list:
    parser = cls(tools, prompt_tail=prompt)
    events: list = []
    start = 0
    for cut in sorted(set(c for c in cuts if 0 < c < len(text))) + [len(text)]:
        events += parser.feed(text[start:cut])
        start = cut
    events += parser.finish()
    merged: list = []
    for kind, value in events:
        if merged and merged[-1][0] == kind and kind in ("text", "reasoning", "call_delta"):
            merged[-1] = (kind, merged[-1][1] + value)
        else:
            merged.append((kind, value))
    return merged


def calls(events: list) -> list[tuple[str, dict]]:
    names = [v for k, v in events if k == "call_start"]
    args = [json.loads(v) for k, v in events if k == "call_end"]
    return list(zip(names, args))


HERMES_TWO = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
              '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n</tool_call>')
CASES = [
    (HermesToolParser, HERMES_TWO, [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Tokyo"})]),
    (QwenXmlToolParser, "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew \"York\"\n</parameter>\n"
                        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
     [("get_weather", {"city": 'New "York"', "days": 3})]),
    (Llama3JsonToolParser, '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
                           '{"name": "get_weather", "parameters": {"city": "Rome"}}',
     [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]),
    (MistralToolParser, '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, '
                        '{"name": "get_weather", "arguments": {"city": "Rome"}}]',
     [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]),
    (MistralToolParser, '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}',
     [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]),
]


@pytest.mark.parametrize(("cls", "text", "expected"), CASES)
@given(cuts=st.lists(st.integers(min_value=1, max_value=200), max_size=40))
@settings(max_examples=60, deadline=None)
def test_calls_parse_the_same_whatever_the_chunking(cls: type[ToolParser], text: str, expected: list,
                                                    cuts: list[int]) -> None:
    assert run(cls, text, cuts) == run(cls, text, [])
    assert calls(run(cls, text, cuts)) == expected


def test_arguments_stream_before_the_call_closes() -> None:
    parser = HermesToolParser(TOOLS)
    seen = parser.feed('<tool_call>\n{"name": "get_weather", "arguments": {"ci')
    assert ("call_start", "get_weather") in seen
    assert [v for k, v in seen if k == "call_delta"] == ['{"ci']


@given(text=st.text(alphabet=st.characters(blacklist_characters="<[{"), max_size=80),
       cuts=st.lists(st.integers(min_value=1, max_value=80), max_size=10))
@settings(max_examples=60, deadline=None)
def test_plain_text_passes_through(text: str, cuts: list[int]) -> None:
    for cls in (HermesToolParser, QwenXmlToolParser, MistralToolParser, Llama3JsonToolParser):
        events = run(cls, text, cuts)
        assert "".join(v for k, v in events if k == "text") == text.strip()


@pytest.mark.parametrize("text", [
    "Hello <tool_call>garbage</tool_call> after",
    '<tool_call>{"name": 5}</tool_call>',
])
def test_malformed_call_before_start_is_text(text: str) -> None:
    events = run(HermesToolParser, text, [])
    assert [k for k, _ in events] == ["text"]


def test_malformed_call_after_start_is_aborted_with_its_text() -> None:
    events = run(HermesToolParser, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"} x</tool_call>', [])
    kinds = [k for k, _ in events]
    assert kinds[0] == "call_start" and "call_abort" in kinds and "call_end" not in kinds


def test_reasoning_split_and_prefilled_think() -> None:
    events = run(HermesToolParser, "<think>\n2 plus 2 makes 4.\n</think>\n\nThe answer is 4.", [3, 9, 20])
    assert events == [("reasoning", "2 plus 2 makes 4."), ("reasoning_end", ""), ("text", "The answer is 4.")]
    opened = run(HermesToolParser, "thinking here</think>answer", [5], prompt="<|im_start|>assistant\n<think>\n")
    assert opened == [("reasoning", "thinking here"), ("reasoning_end", ""), ("text", "answer")]


def test_no_tools_means_no_call_parsing() -> None:
    assert run(HermesToolParser, HERMES_TWO, [], tools=None) == [("text", HERMES_TWO)]


@pytest.mark.parametrize(("template", "expected"), [
    ("... <tool_call> ... </tool_call>", "hermes"),
    ("<tool_call>\n<function=x>", "qwen3_xml"),
    ("[TOOL_CALLS] ...", "mistral"),
    ("<|python_tag|> <|eot_id|>", "llama3_json"),
    ("plain {{ messages }}", "none"),
])
def test_selection_from_the_chat_template(template: str, expected: str) -> None:
    class Tok:
        chat_template = template
        response_template = None

    cls, _ = tool_parsers.select("auto", Tok(), "llama")
    assert cls.name == expected


def test_selection_by_name_and_unknown_name() -> None:
    assert tool_parsers.select("mistral", object(), "x")[0] is MistralToolParser
    with pytest.raises(ValueError, match="Unknown tool-call parser"):
        tool_parsers.select("nope", object(), "x")
