"""Unit tests of `transformers_responses.custom_grammar`: a custom tool's grammar, and its JSON-escaped form, accept
exactly the inputs they should (checked with xgrammar's own matcher)."""

from __future__ import annotations

import json

import pytest
import xgrammar as xgr
from hypothesis import given, settings
from hypothesis import strategies as st

from transformers_responses.custom_grammar import escape_for_json, input_ebnf, renamed
from transformers_responses.errors import InvalidRequestError

APPLY_PATCH = r'''
start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?
hunk: add_hunk | delete_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
filename: /(.+)/
add_line: "+" /(.*)/ LF -> line
%import common.LF
'''
PATCH = '*** Begin Patch\n*** Add File: a "b".txt\n+hello\\ world\t"x"\n*** End Patch\n'


@pytest.fixture(scope="module")
def compiler(fixture_model) -> xgr.GrammarCompiler:  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(AutoTokenizer.from_pretrained(fixture_model)))


def accepts(compiler: xgr.GrammarCompiler, ebnf: str, text: str) -> bool:
    matcher = xgr.GrammarMatcher(compiler.compile_grammar(xgr.Grammar.from_ebnf(ebnf)))
    return bool(matcher.accept_string(text)) and bool(matcher.is_completed())


def json_body(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


def test_lark_grammar_and_its_json_form(compiler: xgr.GrammarCompiler) -> None:
    ebnf = input_ebnf({"syntax": "lark", "definition": APPLY_PATCH})
    assert accepts(compiler, ebnf, PATCH)
    assert not accepts(compiler, ebnf, PATCH.replace("+hello", "hello"))
    escaped = escape_for_json(ebnf)
    assert accepts(compiler, escaped, json_body(PATCH))
    assert not accepts(compiler, escaped, PATCH)  # raw newlines and quotes are not a JSON string
    control = PATCH.replace("hello", "he\x01llo")  # a control character inside a line is written \u0001
    assert accepts(compiler, escaped, json_body(control)) and "\\u0001" in json_body(control)


@pytest.mark.parametrize(("regex", "good", "bad"), [
    (r'[a-z"]+\n\d{2}', 'ab"c\n12', "ab\n1"),
    (r"[^a]+", 'b"\\\n\u00e9\x01x', "ba"),
    (r"[ -~]*", ' "\\~', "\t"),
])
def test_regex_character_classes_escape_their_special_characters(compiler: xgr.GrammarCompiler, regex: str,
                                                                 good: str, bad: str) -> None:
    ebnf = input_ebnf({"syntax": "regex", "definition": regex})
    escaped = escape_for_json(ebnf)
    assert accepts(compiler, ebnf, good) and accepts(compiler, escaped, json_body(good))
    assert not accepts(compiler, escaped, json_body(bad))


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=12))
def test_any_ascii_text_matches_the_escaped_any_class(compiler: xgr.GrammarCompiler, text: str) -> None:
    escaped = escape_for_json(input_ebnf({"syntax": "regex", "definition": r"[\x00-\x7f]*"}))
    assert accepts(compiler, escaped, json_body(text))


def test_renamed_keeps_the_grammar(compiler: xgr.GrammarCompiler) -> None:
    ebnf = renamed(input_ebnf({"syntax": "lark", "definition": APPLY_PATCH}))
    assert accepts(compiler, ebnf + "\nroot ::= custom_root\n", PATCH)


def test_a_bad_grammar_is_a_400_naming_its_definition() -> None:
    with pytest.raises(InvalidRequestError) as info:
        input_ebnf({"syntax": "lark", "definition": "start: undefined_rule"}, param="tools[2]")
    assert info.value.param == "tools[2].format.definition" and info.value.code == "invalid_grammar"


@pytest.mark.parametrize("family", ["hermes", "qwen3_xml"])
def test_custom_call_grammar_in_each_call_syntax(fixture_model, family: str) -> None:  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    from transformers_responses import structured
    from transformers_responses.tool_parsers.hermes import HermesToolParser
    from transformers_responses.tool_parsers.qwen_xml import QwenXmlToolParser
    from transformers_responses.tools import toolset

    tokenizer = AutoTokenizer.from_pretrained(fixture_model)
    tools = toolset([{"type": "custom", "name": "apply_patch",
                      "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH}}]).functions
    if family == "hermes":
        syntax = HermesToolParser.call_syntax
        def call(patch: str) -> str:  # noqa: E306
            arguments = json.dumps({"input": patch})
            return f'<tool_call>\n{{"name": "apply_patch", "arguments": {arguments}}}\n</tool_call>'
    else:
        syntax = QwenXmlToolParser.call_syntax
        def call(patch: str) -> str:  # noqa: E306
            block = f"<parameter=input>\n{patch}\n</parameter>"
            return f"<tool_call>\n<function=apply_patch>\n{block}\n</function>\n</tool_call>"
    grammar = structured.compile_tool_calls(tokenizer, tools, mode="required", syntax=syntax)
    assert grammar.accepts(call(PATCH))
    assert not grammar.accepts(call(PATCH.replace("*** Begin Patch", "*** Begin")))
