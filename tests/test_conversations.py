"""The Conversations API end to end through the openai SDK, and `conversation` on `responses.create`."""

from __future__ import annotations

import httpx
import openai
import pytest

from .conftest import Server, completion


def test_remembered_name_through_a_conversation(server: Server) -> None:
    c = server.client()
    conv = c.conversations.create(metadata={"topic": "names"})
    assert conv.id.startswith("conv_") and conv.metadata == {"topic": "names"} and isinstance(conv.created_at, int)
    first = c.responses.create(model=server.model, input="My name is Ada.", conversation=conv.id)
    assert first.output_text == completion("name_intro") and first.conversation.id == conv.id
    second = c.responses.create(model=server.model, input="What is my name?", conversation={"id": conv.id})
    assert second.output_text == completion("name_recall")
    items = c.conversations.items.list(conv.id, order="asc")
    assert [(i.type, i.role) for i in items.data] == [("message", "user"), ("message", "assistant")] * 2
    assert items.data[1].id == first.output[0].id and items.data[1].content[0].text == completion("name_intro")


def test_conversation_created_with_items(server: Server) -> None:
    c = server.client()
    conv = c.conversations.create(items=[{"role": "user", "content": "My name is Ada."},
                                         {"role": "assistant", "content": completion("name_intro")}])
    r = c.responses.create(model=server.model, input="What is my name?", conversation=conv.id)
    assert r.output_text == completion("name_recall")


def test_conversation_crud(server: Server) -> None:
    c = server.client()
    conv = c.conversations.create()
    assert c.conversations.retrieve(conv.id).model_dump() == conv.model_dump()
    assert c.conversations.update(conv.id, metadata={"a": "b"}).metadata == {"a": "b"}
    added = c.conversations.items.create(conv.id, items=[{"role": "user", "content": "one"},
                                                         {"type": "message", "role": "user", "content": "two"}])
    assert [i.content[0].text for i in added.data] == ["one", "two"]
    page = c.conversations.items.list(conv.id, limit=1)  # desc by default
    assert page.data[0].content[0].text == "two" and page.has_more is True
    item = c.conversations.items.retrieve(added.data[0].id, conversation_id=conv.id)
    assert item.content[0].text == "one"
    after = c.conversations.items.delete(added.data[0].id, conversation_id=conv.id)
    assert after.id == conv.id
    assert [i.content[0].text for i in c.conversations.items.list(conv.id).data] == ["two"]
    with pytest.raises(openai.NotFoundError):
        c.conversations.items.retrieve(added.data[0].id, conversation_id=conv.id)
    deleted = c.conversations.delete(conv.id)
    assert deleted.deleted is True and deleted.object == "conversation.deleted"
    with pytest.raises(openai.NotFoundError):
        c.conversations.retrieve(conv.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model=server.model, input="Hi", conversation=conv.id)


def test_conversation_bad_requests(server: Server) -> None:
    url = f"{server.base_url}/conversations"
    too_many = {"items": [{"role": "user", "content": str(i)} for i in range(21)]}
    for body, param in ((too_many, "items"), ({"items": [{"role": "user", "content": 3}]}, "items[0].content"),
                        ({"metadata": {str(i): "v" for i in range(17)}}, "metadata"), ({"foo": 1}, "foo")):
        resp = httpx.post(url, json=body)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == param, resp.text
    assert httpx.get(f"{url}/conv_missing").status_code == 404


def test_conversation_with_previous_response_id_is_refused(server: Server) -> None:
    c = server.client()
    conv = c.conversations.create()
    r = c.responses.create(model=server.model, input="Hi")
    with pytest.raises(openai.BadRequestError) as info:
        c.responses.create(model=server.model, input="Hi", conversation=conv.id, previous_response_id=r.id)
    assert info.value.body["param"] == "conversation"
