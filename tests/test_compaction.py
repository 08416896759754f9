"""Compaction: `POST /v1/responses/compact` through the real SDK on the fixture model — the `CompactedResponse`, the
sealed summary restored as context on later turns (input, stored history), and the 400s; its pure helpers."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses.compacted_response import CompactedResponse
from openai.types.responses.response_compaction_item import ResponseCompactionItem
from openai.types.responses.response_usage import ResponseUsage

from transformers_responses import compaction, sealing
from transformers_responses.errors import InvalidRequestError
from transformers_responses.fixture_model import NAME_INTRO, NAME_INTRO_REPLY, NAME_QUESTION
from transformers_responses.items import stored_item, stored_items
from transformers_responses.normalizer import COMPACTION_PREFIX, to_chat_messages
from transformers_responses.state import Context

from .conftest import Server

HISTORY = [{"role": "user", "content": NAME_INTRO}, {"role": "assistant", "content": NAME_INTRO_REPLY},
           {"role": "user", "content": "Remember it."}]
SHORT = {"max_output_tokens": 32}  # the fixture model's summary is noise: keep it short
# The SDK types `CompactedResponse.output` messages as assistant output, while OpenAI puts the user messages there (its
# own docstring says so): sending them back, the SDK's serializer warns about their `input_text` parts. Harmless.
SDK_USER_MESSAGE_WARNING = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's key, read afresh (another test may have left a different one cached in this process)."""
    monkeypatch.setattr(sealing, "_key", None)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def post_compact(server: Server, body: object) -> httpx.Response:
    return httpx.post(f"{server.base_url}/responses/compact", json=body, timeout=60)


def error_of(resp: httpx.Response) -> dict[str, Any]:
    body = resp.json()
    assert set(body) == {"error"}, body
    return body["error"]


# ---- pure helpers ----


def test_summary_request_appends_the_request_and_forwards_fields() -> None:
    request = compaction.summary_request({"model": "m", "input": "Hi", "instructions": "Be brief.",
                                          "previous_response_id": "resp_1", "service_tier": "auto",
                                          "max_output_tokens": 64})
    assert request["input"] == [{"type": "message", "role": "user", "content": "Hi"},
                                {"type": "message", "role": "user", "content": compaction.SUMMARY_REQUEST}]
    assert request["store"] is False and request["reasoning"] == {"effort": "none"}
    assert {k: request[k] for k in ("model", "instructions", "previous_response_id", "service_tier",
                                    "max_output_tokens")} == {"model": "m", "instructions": "Be brief.",
                                                              "previous_response_id": "resp_1",
                                                              "service_tier": "auto", "max_output_tokens": 64}
    assert compaction.summary_request({"model": "m"})["input"][0]["content"] == compaction.SUMMARY_REQUEST


def test_user_messages_keep_history_and_input_users_only() -> None:
    history = stored_items([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    own = stored_items([{"role": "developer", "content": "d"}, {"role": "user", "content": "c"},
                        {"type": "function_call_output", "call_id": "x", "output": "o"},
                        {"role": "user", "content": compaction.SUMMARY_REQUEST}])
    kept = compaction.user_messages(Context(history=history, input=own))
    assert [m["content"][0]["text"] for m in kept] == ["a", "c"]
    assert all(set(m) == {"id", "type", "status", "role", "content"} and m["role"] == "user" for m in kept)


def test_summary_text_is_the_message_text_only() -> None:
    response = {"output": [
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "think"}]},
        {"type": "message", "content": [{"type": "output_text", "text": "Ada "}, {"type": "refusal", "refusal": "r"}]},
        {"type": "message", "content": [{"type": "output_text", "text": "met us."}]}]}
    assert compaction.summary_text(response) == "Ada met us."
    assert compaction.summary_text({"output": []}) == ""


@pytest.mark.parametrize(("body", "param", "code"), [
    ({}, "model", "missing_required_parameter"),
    ({"model": None, "input": "x"}, "model", "missing_required_parameter"),
    ({"model": "m", "foo": 1}, "foo", "unknown_parameter"),
    ({"model": "m", "input": [{"role": "user", "content": 1}]}, "input[0].content", "invalid_type"),
    ({"model": "m", "input": [{"type": "compaction"}]}, "input[0].encrypted_content", "missing_required_parameter"),
    ({"model": "m", "max_output_tokens": "5"}, "max_output_tokens", "invalid_type"),
    ({"model": "m", "stream": True}, "stream", "unknown_parameter"),
])
def test_validation_names_the_param(body: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        compaction.validate_compact_request(body)
    assert (info.value.param, info.value.code) == (param, code)


def test_valid_requests_pass_validation() -> None:
    compaction.validate_compact_request({"model": "m"})
    compaction.validate_compact_request({"model": "m", "input": [
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "x"}, {"role": "user", "content": "Hi"}],
        "instructions": None, "previous_response_id": None, "prompt_cache_key": "k", "max_output_tokens": 16})


def test_compaction_summaries_seal_and_open(key: None) -> None:
    token = sealing.seal_compaction("Ada introduced herself.")
    assert "Ada" not in token and sealing.open_compaction(token, param="p") == "Ada introduced herself."
    items = [{"role": "user", "content": "x"}, {"type": "compaction", "id": "cmp_1", "encrypted_content": token}]
    assert sealing.open_compactions(items)[1]["summary"] == "Ada introduced herself."
    with pytest.raises(InvalidRequestError) as info:  # a sealed blob of another kind is not a summary
        sealing.open_compactions([items[0], {**items[1], "encrypted_content": sealing.seal_reasoning("r")}])
    assert info.value.param == "input[1].encrypted_content"
    with pytest.raises(InvalidRequestError) as info:
        sealing.open_compactions([{**items[1], "encrypted_content": token[:-4] + "AAAA"}], "previous_response_id",
                                 indexed=False)
    assert info.value.param == "previous_response_id"


def test_an_opened_compaction_joins_the_system_message() -> None:
    items = [{"role": "user", "content": "a"}, {"type": "compaction", "id": "cmp_1", "encrypted_content": "e",
                                                "summary": "S."}, {"role": "user", "content": "b"}]
    assert to_chat_messages(items, "Inst.") == [
        {"role": "system", "content": f"Inst.\n\n{COMPACTION_PREFIX}S."},
        {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(InvalidRequestError) as info:  # never hand the model a blob nobody opened
        to_chat_messages([{"type": "compaction", "encrypted_content": "e"}], None)
    assert info.value.param == "input[0].encrypted_content"


def test_a_stored_compaction_item_matches_its_type() -> None:
    item = stored_item({"type": "compaction", "encrypted_content": "e"})
    assert item["id"].startswith("cmp_") and "status" not in item
    ResponseCompactionItem.model_validate(item)


# ---- end to end ----


def test_compact_answers_a_compacted_response(server: Server, key: None) -> None:
    c = server.client()
    compacted = c.responses.compact(model=server.model, input=HISTORY, extra_body=SHORT)
    assert isinstance(compacted, CompactedResponse)
    raw = compacted.model_dump(exclude_unset=True, warnings=False)
    assert set(raw) == set(CompactedResponse.model_fields)  # every field of the type, `image` as null
    assert compacted.object == "response.compaction" and compacted.id.startswith("resp_")
    assert isinstance(compacted.created_at, int) and compacted.image is None
    *users, item = compacted.output
    # As the type says: every user message, then one compaction item.
    assert [(u.type, u.role, u.content[0].text) for u in users] == [("message", "user", NAME_INTRO),
                                                                    ("message", "user", "Remember it.")]
    assert all(u.id.startswith("msg_") and u.content[0].type == "input_text" for u in users)
    assert isinstance(item, ResponseCompactionItem) and item.type == "compaction" and item.id.startswith("cmp_")
    ResponseCompactionItem.model_validate(item.model_dump(exclude_unset=True))
    assert NAME_INTRO not in item.encrypted_content
    assert isinstance(sealing.open_compaction(item.encrypted_content, param="p"), str)  # sealed with the server key
    usage = ResponseUsage.model_validate(raw["usage"])
    assert usage.input_tokens > 0 and 0 < usage.output_tokens <= SHORT["max_output_tokens"]
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


@SDK_USER_MESSAGE_WARNING
def test_the_summary_is_the_context_of_the_next_turn(server: Server, key: None) -> None:
    c = server.client()
    compacted = c.responses.compact(model=server.model, input=HISTORY, instructions="Be brief.", extra_body=SHORT)
    *users, item = compacted.output
    summary = sealing.open_compaction(item.encrypted_content, param="p")
    new = {"role": "user", "content": NAME_QUESTION}
    # The output goes back as it came (the SDK sends the items as it parsed them), then the new turn.
    follow = c.responses.create(model=server.model, input=[*compacted.output, new], max_output_tokens=16)
    assert follow.status in ("completed", "incomplete") and follow.output
    kept = [u.model_dump(exclude_unset=True, warnings=False) for u in users]
    # The model saw the summary in its system message: the same prompt as that summary given as instructions.
    expected = c.responses.input_tokens.count(model=server.model, input=[*kept, new],
                                              instructions=COMPACTION_PREFIX + summary).input_tokens
    without = c.responses.input_tokens.count(model=server.model, input=[*kept, new]).input_tokens
    assert follow.usage.input_tokens == expected > without
    counted = c.responses.input_tokens.count(model=server.model, input=[*compacted.output, new]).input_tokens
    assert counted == expected
    # In stored history (the previous response's input), the summary is restored too.
    later = c.responses.create(model=server.model, input="Hi", previous_response_id=follow.id, max_output_tokens=16)
    assert later.status in ("completed", "incomplete")
    inline = c.responses.input_tokens.count(model=server.model, input=[
        *compacted.output, new, *follow.output, {"role": "user", "content": "Hi"}]).input_tokens
    assert later.usage.input_tokens == inline
    listed = c.responses.input_items.list(follow.id, order="asc").data
    assert [i.type for i in listed] == ["message", "message", "compaction", "message"]
    ResponseCompactionItem.model_validate(listed[2].model_dump(exclude_unset=True))  # listed back as its type


@SDK_USER_MESSAGE_WARNING
def test_compact_resolves_previous_response_id_and_compactions(server: Server, key: None) -> None:
    c = server.client()
    first = c.responses.create(model=server.model, input=NAME_INTRO, max_output_tokens=16)
    compacted = c.responses.compact(model=server.model, previous_response_id=first.id, input="Remember it.",
                                    extra_body=SHORT)
    assert [u.content[0].text for u in compacted.output[:-1]] == [NAME_INTRO, "Remember it."]
    assert compacted.output[-1].type == "compaction"
    # Compacting again over a compaction item: its summary is context of the pass; the new output replaces it.
    again = c.responses.compact(model=server.model, input=[*compacted.output, {"role": "user", "content": "More."}],
                                extra_body=SHORT)
    assert [o.type for o in again.output] == ["message", "message", "message", "compaction"]
    assert again.output[-1].encrypted_content != compacted.output[-1].encrypted_content


def test_default_summary_budget(server: Server) -> None:
    compacted = server.client().responses.compact(model=server.model, input="Hi")
    assert 0 < compacted.usage.output_tokens <= compaction.SUMMARY_MAX_TOKENS
    assert [o.type for o in compacted.output] == ["message", "compaction"]


@pytest.mark.anyio
async def test_async_client(server: Server) -> None:
    compacted = await server.async_client().responses.compact(model=server.model, input="Hi", extra_body=SHORT)
    assert compacted.output[-1].type == "compaction"


def test_tampered_or_foreign_content_is_a_400_naming_the_item(server: Server, key: None) -> None:
    c = server.client()
    token = c.responses.compact(model=server.model, input="Hi", extra_body=SHORT).output[-1].encrypted_content
    tampered = token[:-6] + ("AAAAAA" if not token.endswith("AAAAAA") else "BBBBBB")
    for bad in (tampered, "dHJzMQ" + "A" * 40, sealing.seal_reasoning("not a summary"), ""):
        items = [{"role": "user", "content": "Hi"}, {"type": "compaction", "encrypted_content": bad},
                 {"role": "user", "content": "Go on."}]
        for call in (lambda: c.responses.create(model=server.model, input=items),
                     lambda: c.responses.input_tokens.count(model=server.model, input=items),
                     lambda: c.responses.compact(model=server.model, input=items)):
            with pytest.raises(openai.BadRequestError) as info:
                call()
            assert info.value.body["param"] == "input[1].encrypted_content"
            assert info.value.body["code"] == "invalid_encrypted_content"


@pytest.mark.parametrize(("body", "status", "param", "code"), [
    ({"model": ..., "input": "Hi"}, 400, "model", "missing_required_parameter"),  # ...: left out
    ({"model": None, "input": "Hi"}, 400, "model", "missing_required_parameter"),
    ({"input": "Hi", "temperature": 0}, 400, "temperature", "unknown_parameter"),
    ({"input": [{"role": "user", "content": "Hi"}, {"type": "web_search_call", "id": "w", "status": "completed",
                                                    "action": {"type": "search", "query": "q"}}]},
     400, "input[1].type", "unsupported_parameter"),
    ({"input": "Hi", "max_output_tokens": 4}, 400, "max_output_tokens", "integer_below_min_value"),
    ({"input": "Hi", "previous_response_id": "resp_nope"}, 400, "previous_response_id", "previous_response_not_found"),
    ({"input": [{"type": "item_reference", "id": "msg_nope"}]}, 400, "input[0]", "item_not_found"),
    ({"input": "Hi", "image": {"context_compression": "auto"}}, 400, "image", "unsupported_parameter"),
    ({"input": "word " * 3000}, 400, "input", "context_length_exceeded"),
    ({"model": "no/such-model", "input": "Hi"}, 404, "model", "model_not_found"),
])
def test_bad_compact_requests(server: Server, body: dict[str, Any], status: int, param: str, code: str) -> None:
    resp = post_compact(server, {k: v for k, v in {"model": server.model, **body}.items() if v is not ...})
    assert resp.status_code == status, resp.text
    err = error_of(resp)
    assert (err["param"], err["code"]) == (param, code), err


def test_bad_bodies(server: Server) -> None:
    resp = httpx.post(f"{server.base_url}/responses/compact", content=b'{"model": ', timeout=60,
                      headers={"content-type": "application/json"})
    assert resp.status_code == 400 and error_of(resp)["code"] == "invalid_json"
    resp = post_compact(server, ["not", "an", "object"])
    assert resp.status_code == 400 and error_of(resp)["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as info:  # the SDK's own call, without a model
        server.client().responses.compact(model=None, input="Hi")  # type: ignore[arg-type]
    assert info.value.body["param"] == "model"


def test_the_route_is_not_a_response_id(server: Server) -> None:
    # `compact` is never read as `{response_id}`: GET has no such response, POST compacts.
    assert httpx.get(f"{server.base_url}/responses/compact", timeout=60).status_code == 404
    resp = post_compact(server, {"model": server.model, "input": "Hi", **SHORT})
    assert resp.status_code == 200 and json.loads(resp.text)["object"] == "response.compaction"


@SDK_USER_MESSAGE_WARNING
def test_a_compaction_in_a_conversation_is_context(server: Server, key: None) -> None:
    c = server.client()
    compacted = c.responses.compact(model=server.model, input=HISTORY, extra_body=SHORT)
    conversation = c.conversations.create(items=list(compacted.output))
    r = c.responses.create(model=server.model, conversation=conversation.id, input=NAME_QUESTION,
                           max_output_tokens=16)
    inline = c.responses.input_tokens.count(model=server.model, input=[
        *compacted.output, {"role": "user", "content": NAME_QUESTION}]).input_tokens
    assert r.usage.input_tokens == inline


def test_compact_on_continuous_batching(cb_server: Server) -> None:
    c = cb_server.client()
    compacted = c.responses.compact(model=cb_server.model, input=HISTORY, extra_body=SHORT)
    assert [o.type for o in compacted.output] == ["message", "message", "compaction"]
    assert 0 < compacted.usage.output_tokens <= SHORT["max_output_tokens"]
    default = c.responses.compact(model=cb_server.model, input="Hi")
    assert 0 < default.usage.output_tokens <= compaction.SUMMARY_MAX_TOKENS


class _Stub:
    """Just enough of `ResponsesHandler` for `compaction.compact`: records what it was given, ends as told."""

    def __init__(self, final: dict[str, Any] | None, context_window: int = 2000) -> None:
        from types import SimpleNamespace

        self.final = final
        self.released = 0
        self.body: dict[str, Any] = {}
        self.prep = SimpleNamespace(gen_config=SimpleNamespace(max_new_tokens=context_window),
                                    controls=SimpleNamespace(done=self._done),
                                    context=Context(input=stored_items([{"role": "user", "content": "Hi"},
                                                                        {"role": "user", "content": "summarize"}])))

    def _done(self) -> None:
        self.released += 1

    async def prepare(self, body: dict[str, Any]) -> Any:
        self.body = body
        return self.prep

    async def run(self, prep: Any) -> Any:
        yield {"type": "response.completed", "response": self.final}


async def _last(events: Any) -> Any:
    final = None
    async for event in events:
        final = event["response"]
    return final


FINAL = {"status": "completed", "output": [{"type": "message", "content": [{"type": "output_text", "text": "S"}]}],
         "usage": {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                   "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 4}}


@pytest.mark.anyio
async def test_compact_bounds_the_summary_and_releases_the_pass(key: None) -> None:
    stub = _Stub(FINAL)
    out = await compaction.compact(stub, {"model": "m", "input": "Hi"}, _last)
    assert stub.prep.gen_config.max_new_tokens == compaction.SUMMARY_MAX_TOKENS and stub.released == 1
    assert [o["type"] for o in out["output"]] == ["message", "compaction"]
    assert sealing.open_compaction(out["output"][-1]["encrypted_content"], param="p") == "S"
    assert out["usage"] == FINAL["usage"]
    stub = _Stub(FINAL, context_window=100)  # less room than the budget: what the context leaves
    await compaction.compact(stub, {"model": "m", "input": "Hi"}, _last)
    assert stub.prep.gen_config.max_new_tokens == 100
    stub = _Stub(FINAL)  # the client's own budget went to prepare as max_output_tokens; not overridden here
    await compaction.compact(stub, {"model": "m", "input": "Hi", "max_output_tokens": 64}, _last)
    assert stub.body["max_output_tokens"] == 64 and stub.prep.gen_config.max_new_tokens == 2000


@pytest.mark.anyio
async def test_a_failed_or_abandoned_pass() -> None:
    from transformers_responses.errors import ServerError

    failed = {**FINAL, "status": "failed", "error": {"code": "server_error", "message": "boom"}}
    with pytest.raises(ServerError, match="boom"):
        await compaction.compact(_Stub(failed), {"model": "m"}, _last)

    async def gone(events: Any) -> None:
        await events.aclose()
        return None

    stub = _Stub(FINAL)
    assert await compaction.compact(stub, {"model": "m"}, gone) is None and stub.released == 1
