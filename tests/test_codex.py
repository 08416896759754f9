"""Codex CLI end to end: the real `codex exec` (npm `@openai/codex`, pinned in tests/node/package.json) with a custom
model provider whose base URL is our server and whose wire API is Responses, two turns (a new one, then `resume`).

Codex sends its whole tool set with every turn (function tools, the freeform `apply_patch` custom tool with its Lark
grammar, `tool_search`, `web_search`), `store: false` with `include: ["reasoning.encrypted_content"]`,
`prompt_cache_key`, `text.verbosity` and `reasoning.summary`; a 400 on any of them ends the turn. The server logs every
request body (`TRANSFORMERS_RESPONSES_LOG_REQUESTS`), so the test asserts on what Codex really sent, and on what Codex
itself reports (`--json` events: each turn completed, no error).

Both transports: SSE, and WebSocket mode (`prefer_websockets` in the catalog, `supports_websockets` on the provider).

The model is the fixture with two test-only changes to a copy of its config, because Codex's prompt is ~18k tokens:
a longer context (RoPE needs no training for it), and punctuation tokens as extra end tokens so that its made-up
answer to a prompt it was never trained on ends within a few tokens. Codex learns the model's capabilities from a
catalog entry (tests/node/codex-model-catalog.json: Codex's own GPT-5.5 entry, renamed), as a user would configure it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server, start_server

NODE = Path(__file__).parent / "node"
CODEX = NODE / "node_modules" / ".bin" / "codex"


@pytest.fixture(scope="module")
def codex_model(fixture_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoTokenizer

    model = tmp_path_factory.mktemp("codex") / "codex-fixture"
    shutil.copytree(fixture_model, model)
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = 131072
    (model / "config.json").write_text(json.dumps(config))
    vocab = AutoTokenizer.from_pretrained(model).get_vocab()
    stops = sorted(i for token, i in vocab.items() if any(c in token for c in '.,!?"'))
    generation = json.loads((model / "generation_config.json").read_text())
    generation["eos_token_id"] = [*generation["eos_token_id"], *stops]
    (model / "generation_config.json").write_text(json.dumps(generation))
    return model


@pytest.fixture(scope="module")
def codex_server(codex_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    log = tmp_path_factory.mktemp("codex-requests") / "requests.jsonl"
    os.environ["TRANSFORMERS_RESPONSES_LOG_REQUESTS"] = str(log)  # read by the server process start_server spawns
    try:
        srv = start_server(codex_model, tmp_path_factory.mktemp("codex-srv"))
    finally:
        del os.environ["TRANSFORMERS_RESPONSES_LOG_REQUESTS"]
    yield srv, log
    srv.stop()


def codex_home(tmp: Path, server: Server, *, websocket: bool) -> Path:
    """The `config.toml` (and model catalog) a user writes to point Codex at the server (docs/clients.md)."""
    home = tmp / "codex-home"
    home.mkdir()
    catalog = json.loads((NODE / "codex-model-catalog.json").read_text())
    catalog["models"][0]["slug"] = server.model
    catalog["models"][0]["prefer_websockets"] = websocket
    (home / "catalog.json").write_text(json.dumps(catalog))
    (home / "config.toml").write_text(f'''model = "{server.model}"
model_provider = "local"
model_catalog_json = "{home / 'catalog.json'}"
model_reasoning_summary = "detailed"
model_verbosity = "low"

[model_providers.local]
name = "transformers serve"
base_url = "{server.base_url}"
wire_api = "responses"
supports_websockets = {"true" if websocket else "false"}
''')
    return home


def codex_exec(home: Path, workdir: Path, *args: str) -> list[dict]:
    if not CODEX.exists():
        pytest.fail(f"{CODEX} is missing: run `npm ci --prefix tests/node` (scripts/test.sh does)")
    env = {**os.environ, "CODEX_HOME": str(home), "OPENAI_API_KEY": "unused"}
    proc = subprocess.run([str(CODEX), "exec", "--json", "--skip-git-repo-check", *args], cwd=workdir, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("transport", ["sse", "websocket"])
def test_codex_exec_two_turns(codex_server: tuple[Server, Path], tmp_path: Path, transport: str) -> None:
    server, log = codex_server
    log.write_text("")
    home, workdir = codex_home(tmp_path, server, websocket=transport == "websocket"), tmp_path / "work"
    workdir.mkdir()
    first = codex_exec(home, workdir, "Say hello")
    second = codex_exec(home, workdir, "resume", "--last", "Thanks")
    for events in (first, second):
        kinds = [e["type"] for e in events]
        assert "turn.completed" in kinds and "turn.failed" not in kinds, events
        assert not [e for e in events if e["type"] == "error" or e.get("item", {}).get("type") == "error"], events
        assert [e for e in events if e.get("item", {}).get("type") == "agent_message"], events

    bodies = [json.loads(line) for line in log.read_text().splitlines()]
    if transport == "websocket":
        # Over one socket per turn Codex continues its own store:false response by previous_response_id, sending only
        # the new items: connection-local state (docs/websocket.md).
        assert "WebSocket /v1/responses\" [accepted]" in server.log.read_text(errors="replace")
        assert len(bodies) == 4 and [bool(b.get("previous_response_id")) for b in bodies] == [False, True] * 2
        bodies = [b for b in bodies if not b.get("previous_response_id")]
    assert len(bodies) == 2
    for body in bodies:
        assert body["store"] is False and body.get("stream", transport == "sse") is (transport == "sse")
        assert body["include"] == ["reasoning.encrypted_content"] and body["prompt_cache_key"]
        assert body["text"]["verbosity"] == "low" and body["reasoning"]["summary"] == "detailed"
        tools = {t.get("name") or t["type"]: t for t in body["tools"]}
        assert tools["apply_patch"]["type"] == "custom" and tools["apply_patch"]["format"]["syntax"] == "lark"
        assert {"function", "web_search", "tool_search"} <= {t["type"] for t in body["tools"]}
    if transport == "sse":  # the second turn is stateless: it sends the first turn back, our answer included
        assert [i.get("role") for i in bodies[1]["input"]].count("assistant") == 1
    assert "POST /v1/responses HTTP/1.1\" 4" not in server.log.read_text(errors="replace")
