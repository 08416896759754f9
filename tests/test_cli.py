"""`transformers responses …`: the terminal client against a real server, and its errors."""

from __future__ import annotations

import json
import subprocess

from transformers_responses.fixture_model import SCRIPT

from .conftest import Server, free_port, transformers_cli


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([transformers_cli(), "responses", *args], capture_output=True, text=True, timeout=120)


def test_create_streams_the_answer(server: Server) -> None:
    greeting = next(s.completion for s in SCRIPT if s.name == "greeting")
    out = run("create", "Hi", "--url", server.base_url, "--model", server.model)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == greeting


def test_create_shows_tool_free_reasoning_and_json(server: Server) -> None:
    out = run("create", "What is 2+2? Think first.", "--url", server.base_url, "--model", server.model, "--json")
    final = json.loads(out.stdout)
    assert final["status"] == "completed" and [i["type"] for i in final["output"]] == ["reasoning", "message"]


def test_create_without_a_server_says_what_to_do() -> None:
    out = run("create", "Hi", "--url", f"http://127.0.0.1:{free_port()}/v1", "--model", "m")
    assert out.returncode == 2 and "transformers serve --enable-responses" in out.stderr


def test_create_reports_server_errors(server: Server) -> None:
    out = run("create", "Hi", "--url", server.base_url, "--model", server.model, "--max-output-tokens", "3")
    assert out.returncode == 1 and "400" in out.stderr and "max_output_tokens" in out.stderr


def test_demo_once_answers_one_real_request(fixture_model) -> None:  # type: ignore[no-untyped-def]
    greeting = next(s.completion for s in SCRIPT if s.name == "greeting")
    out = run("demo", "--once", "--port", str(free_port()))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "transformers responses create Hi" in out.stdout and out.stdout.rstrip().endswith(greeting)


def test_stored_response_commands(server: Server) -> None:
    first = run("create", "My name is Ada.", "--url", server.base_url, "--model", server.model)
    response_id = first.stderr.strip().splitlines()[-1].strip("[]")
    assert response_id.startswith("resp_"), first.stderr
    follow = run("create", "What is my name?", "--url", server.base_url, "--model", server.model,
                 "--previous-response-id", response_id)
    assert follow.stdout.strip() == next(s.completion for s in SCRIPT if s.name == "name_recall")
    got = run("get", response_id, "--url", server.base_url)
    assert got.returncode == 0 and "completed" in got.stdout and "Nice to meet you" in got.stdout
    assert json.loads(run("get", response_id, "--url", server.base_url, "--json").stdout)["id"] == response_id
    items = run("items", response_id, "--url", server.base_url)
    assert "user: My name is Ada." in items.stdout
    cancel = run("cancel", response_id, "--url", server.base_url)
    assert cancel.returncode == 1 and "background" in cancel.stderr
    assert run("delete", response_id, "--url", server.base_url).stdout.strip() == f"deleted {response_id}"
    missing = run("get", response_id, "--url", server.base_url)
    assert missing.returncode == 1 and "404" in missing.stderr


def test_conversation_commands(server: Server) -> None:
    conv_id = run("conversation", "create", "--message", "My name is Ada.", "--url", server.base_url).stdout.strip()
    assert conv_id.startswith("conv_")
    answer = run("create", "What is my name?", "--url", server.base_url, "--model", server.model,
                 "--conversation", conv_id)
    assert answer.stdout.strip() == next(s.completion for s in SCRIPT if s.name == "name_recall")
    lines = run("conversation", "items", conv_id, "--url", server.base_url).stdout.strip().splitlines()
    assert [line.split("  ", 1)[1] for line in lines] == [
        "user: My name is Ada.", "user: What is my name?",
        f"assistant: {next(s.completion for s in SCRIPT if s.name == 'name_recall')}"]
    assert conv_id in run("conversation", "get", conv_id, "--url", server.base_url).stdout
    assert run("conversation", "delete", conv_id, "--url", server.base_url).returncode == 0
    assert run("conversation", "get", conv_id, "--url", server.base_url).returncode == 1
