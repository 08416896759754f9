"""HTTP surface: the OpenAI error envelope for every bad request, invalid JSON, disconnects, the host left alone."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from .conftest import Server, start_server


def post(server: Server, body: object, raw: bytes | None = None) -> httpx.Response:
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(f"{server.base_url}/responses", content=content, timeout=60,
                      headers={"content-type": "application/json"})


def envelope(resp: httpx.Response) -> dict:
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


BAD = [
    ({"input": "x", "foo": 1}, 400, "foo", "unknown_parameter"),
    ({"input": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "user", "content": 1}]},
     400, "input[2].content", "invalid_type"),
    ({"input": "x", "previous_response_id": "resp_1"}, 400, "previous_response_id", "previous_response_not_found"),
    ({"input": "x", "background": True, "store": False}, 400, "background", None),
    ({"input": "x", "conversation": "conv_1"}, 404, "conversation", "conversation_not_found"),
    ({"input": "x", "conversation": "conv_1", "previous_response_id": "resp_1"}, 400, "conversation",
     "mutually_exclusive_parameters"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, 400, "input[0]", "item_not_found"),
    ({"input": "x", "background_options": {"completion_window": "2h"}}, 400, "background_options",
     "unsupported_parameter"),
    ({"input": "x", "tool_choice": {"type": "mcp", "server_label": "s"}}, 400, "tool_choice.type",
     "unsupported_parameter"),
    ({"input": "x", "max_output_tokens": 4}, 400, "max_output_tokens", "integer_below_min_value"),
    ({"input": "x", "temperature": 3}, 400, "temperature", "invalid_value"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA",
                                                       "detail": "auto"}]}]},
     400, "input[0].content[0]", "unsupported_content"),
    ({"input": "word " * 3000}, 400, "input", "context_length_exceeded"),
    ({"input": "x", "tools": [{"type": "websearch"}]}, 400, "tools[0].type", "invalid_value"),
    ({"input": "x", "tools": [{"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "lark",
                                                                          "definition": "start: nowhere"}}]},
     400, "tools[0].format.definition", "invalid_grammar"),
]


@pytest.mark.parametrize(("body", "status", "param", "code"), BAD)
def test_bad_requests_get_the_openai_envelope(server: Server, body: dict, status: int, param: str, code: str) -> None:
    resp = post(server, {"model": server.model, **body})
    assert resp.status_code == status, resp.text
    err = envelope(resp)
    assert (err["param"], err["code"], err["type"]) == (param, code, "invalid_request_error")


def test_invalid_json(server: Server) -> None:
    resp = post(server, None, raw=b'{"model": "m", "input": ')
    assert resp.status_code == 400 and envelope(resp)["code"] == "invalid_json"


def test_unknown_model_is_404(server: Server) -> None:
    resp = post(server, {"model": "no/such-model", "input": "Hi"})
    assert resp.status_code == 404 and envelope(resp)["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        server.client().responses.create(model="no/such-model", input="Hi")


def test_stream_defaults_to_false(server: Server) -> None:
    resp = post(server, {"model": server.model, "input": "Hi"})
    assert resp.headers["content-type"].startswith("application/json") and resp.json()["object"] == "response"


def test_sse_framing(server: Server) -> None:
    with httpx.stream("POST", f"{server.base_url}/responses", timeout=60,
                      json={"model": server.model, "input": "Hi", "stream": True}) as resp:
        text = "".join(resp.iter_text())
    blocks = [b for b in text.split("\n\n") if b]
    assert blocks[-1] == "data: [DONE]"
    for block in blocks[:-1]:
        name, data = block.split("\n")
        assert name.removeprefix("event: ") == json.loads(data.removeprefix("data: "))["type"]


def _forced_long(server: Server, tokens: int, stream: bool) -> dict:
    # Host extension: a generation_config without end tokens makes the model run to the limit.
    return {"model": server.model, "input": "Count from 1 to 40.", "stream": stream,
            "generation_config": json.dumps({"max_new_tokens": tokens, "do_sample": False})}


def test_disconnect_stops_generation(server: Server) -> None:
    start = time.monotonic()
    assert post(server, _forced_long(server, 200, False)).status_code == 200
    per_token = (time.monotonic() - start) / 200
    long_tokens = 1500
    with httpx.stream("POST", f"{server.base_url}/responses", json=_forced_long(server, long_tokens, True),
                      timeout=60) as resp:
        for i, _line in enumerate(resp.iter_lines()):
            if i > 20:
                break
    stopped = time.monotonic()
    r = server.client().responses.create(model=server.model, input="Hi")
    waited = time.monotonic() - stopped
    assert r.status == "completed"
    # Had the abandoned generation run on, the next request would have queued behind ~1500 tokens.
    assert waited < max(0.5 * long_tokens * per_token, 1.0), (waited, per_token)


def test_without_the_flag_the_host_is_untouched(fixture_model, tmp_path) -> None:  # type: ignore[no-untyped-def]
    host = start_server(fixture_model, tmp_path, enable=False)
    try:
        resp = httpx.post(f"{host.base_url}/responses", json={"model": host.model, "input": "Hi"}, timeout=60)
        # The host's own handler streams by default; ours answers JSON.
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    finally:
        host.stop()


def test_fault_during_generation_ends_the_stream_properly(server: Server) -> None:
    # Beam search refuses a streamer: generate() raises on the host's inference thread, after the stream began.
    body = {"model": server.model, "input": "Hi", "stream": True,
            "generation_config": json.dumps({"max_new_tokens": 20, "num_beams": 2})}
    with httpx.stream("POST", f"{server.base_url}/responses", json=body, timeout=60) as resp:
        lines = [line for line in resp.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-1]["response"]["error"]["code"] == "server_error" and events[-1]["response"]["status"] == "failed"
    resp = post(server, {**body, "stream": False})
    assert resp.status_code == 500 and envelope(resp)["type"] == "server_error"
    assert server.client().responses.create(model=server.model, input="Hi").status == "completed"
