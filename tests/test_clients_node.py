"""Real Node clients end to end: the Vercel AI SDK (`ai` + `@ai-sdk/openai`, pinned in tests/node/package.json),
unmodified, against the real server on the fixture model. It checks what the SDK itself reports (tool calls, tool
results, final text, finishReason, stream parts), and the requests it sent.

tests/node/vercel.mjs drives the SDK and prints one JSON line; scripts/test.sh installs its packages. A missing `node`
or a failed install fails these tests; they are never skipped. docs/clients.md lists what is covered here and the
configuration a user needs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from transformers_responses.fixture_model import (NAME_INTRO, NAME_QUESTION, PARIS_RESULT, TOKYO_RESULT,
                                                  WEATHER_PARIS, WEATHER_PARIS_TOKYO, WEATHER_TOOL)

from .conftest import Server, completion

NODE_DIR = Path(__file__).resolve().parent / "node"
VERCEL = NODE_DIR / "vercel.mjs"
TOOL_RESULTS = {"Paris": PARIS_RESULT, "Tokyo": TOKYO_RESULT}
# The fixture's tool as the SDK sends it: `jsonSchema(parameters)` unchanged, and no `strict` (not set on the tool).
SENT_TOOL = {key: value for key, value in WEATHER_TOOL.items() if key != "strict"}


def run_vercel(mode: str, config: dict[str, Any]) -> dict[str, Any]:
    """Run tests/node/vercel.mjs in `mode` and return its JSON result, which must say `ok`."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("`node` (>= 20) is not on PATH; the Vercel AI SDK tests need it")
    if not (NODE_DIR / "node_modules" / "ai").is_dir():
        pytest.fail("tests/node/node_modules is missing; run: npm ci --prefix tests/node (scripts/test.sh does)")
    proc = subprocess.run([node, str(VERCEL), mode, json.dumps(config)], capture_output=True, text=True, timeout=180,
                          cwd=NODE_DIR)
    lines = proc.stdout.strip().splitlines()
    if not lines:
        pytest.fail(f"vercel.mjs printed nothing (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    assert result["ok"] and proc.returncode == 0, (result.get("error"), result["requests"], proc.stderr[-4000:])
    return result


def tool_config(server: Server, prompt: str) -> dict[str, Any]:
    return {"baseURL": server.base_url, "model": server.model, "prompt": prompt, "tool": WEATHER_TOOL,
            "toolResults": TOOL_RESULTS}


def input_types(body: dict[str, Any]) -> list[str]:
    return [item.get("type", "message") for item in body["input"]]


def check_tool_loop(result: dict[str, Any], cities: list[str], answer: str, *, stream: bool) -> None:
    """Two steps: the model's tool call(s), run by the SDK; then the model's final answer."""
    calls = [{"toolName": "get_weather", "input": {"city": city}} for city in cities]
    results = [{"toolName": "get_weather", "output": TOOL_RESULTS[city]} for city in cities]
    assert result["executed"] == [{"city": city} for city in cities]
    first, second = result["steps"]
    assert first["finishReason"] == "tool-calls" and first["text"] == ""
    assert first["toolCalls"] == calls and first["toolResults"] == results
    assert second["finishReason"] == "stop" and second["toolCalls"] == []
    assert second["text"] == result["text"] == answer
    assert result["finishReason"] == "stop"
    assert result["warnings"] == []
    assert first["responseId"].startswith("resp_") and second["responseId"].startswith("resp_")

    # What the SDK sent: the fixture's tool unchanged both times, and the tool results back as input items.
    first_request, second_request = result["requests"]
    assert [first_request["status"], second_request["status"]] == [200, 200]
    for request in (first_request, second_request):
        assert request["body"]["tools"] == [SENT_TOOL]
        assert request["body"].get("stream", False) is stream
    assert input_types(first_request["body"]) == ["message"]
    assert input_types(second_request["body"]) == (["message"] + ["function_call"] * len(cities)
                                                   + ["function_call_output"] * len(cities))


def test_vercel_generate_text_tool_loop(server: Server) -> None:
    result = run_vercel("generate", tool_config(server, WEATHER_PARIS))
    check_tool_loop(result, ["Paris"], completion("weather_answer"), stream=False)


def test_vercel_stream_text_tool_loop(server: Server) -> None:
    result = run_vercel("stream", tool_config(server, WEATHER_PARIS))
    check_tool_loop(result, ["Paris"], completion("weather_answer"), stream=True)
    assert result["errors"] == [] and "error" not in result["parts"]
    parts = result["parts"]
    assert parts["start-step"] == parts["finish-step"] == 2 and parts["finish"] == 1
    assert parts["tool-input-start"] == parts["tool-input-end"] == parts["tool-call"] == parts["tool-result"] == 1
    assert parts["tool-input-delta"] >= 1  # arguments streamed, not sent in one piece at the end
    assert parts["text-start"] == parts["text-end"] == 1 and parts["text-delta"] > 1
    events = result["events"]
    assert events.count("response.created") == events.count("response.completed") == 2
    assert events.count("response.function_call_arguments.done") == 1
    assert events.count("response.output_text.done") == 1


def test_vercel_stream_text_parallel_tool_calls(server: Server) -> None:
    # Two calls in one response, each at its own output_index: the SDK must see two separate tool inputs.
    result = run_vercel("stream", tool_config(server, WEATHER_PARIS_TOKYO))
    check_tool_loop(result, ["Paris", "Tokyo"], completion("weather_parallel_answer"), stream=True)
    assert result["errors"] == []
    assert result["parts"]["tool-input-start"] == result["parts"]["tool-call"] == 2


def test_vercel_conversation_history_and_previous_response_id(server: Server) -> None:
    result = run_vercel("conversation", {"baseURL": server.base_url, "model": server.model, "first": NAME_INTRO,
                                         "second": NAME_QUESTION})
    assert result["texts"] == [completion("name_intro"), completion("name_recall"), completion("name_recall")]
    assert result["finishReasons"] == ["stop"] * 3
    first, history, chained = (request["body"] for request in result["requests"])
    # With store on (the SDK's default), the history's assistant message goes back as a reference to the stored item.
    assert input_types(history) == ["message", "item_reference", "message"]
    assert history["input"][1]["id"].startswith("msg_")
    assert chained["previous_response_id"] == result["firstId"] and input_types(chained) == ["message"]
