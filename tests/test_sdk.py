"""Every SDK method the server answers, through the real openai SDK, each test run with `OpenAI` and `AsyncOpenAI`.

One body drives both clients: a sync client's results are used as they are and an async client's are awaited
(`resolve`), streams and pages are drained with `for` or `async for` (`drain`). Assertions are on the SDK's typed
objects, so a field the SDK cannot parse fails here even where the raw JSON looks right. Prompts are the fixture
model's trained ones: only those have exact answers.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Iterable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager
from typing import Any, TypeVar

import openai
import pytest
from openai import AsyncOpenAI, AsyncStream, OpenAI, Stream
from openai.lib.streaming.responses import ResponseTextDeltaEvent as HelperTextDeltaEvent
from openai.pagination import (AsyncConversationCursorPage, AsyncCursorPage, SyncConversationCursorPage,
                               SyncCursorPage)
from openai.types.conversations import (Conversation, ConversationDeletedResource, ConversationItemList, Message,
                                        OutputTextContent)
from openai.types.responses import (InputTokenCountResponse, ParsedResponse, Response, ResponseCompletedEvent,
                                    ResponseCreatedEvent, ResponseFunctionToolCall, ResponseInputMessageItem,
                                    ResponseOutputMessage, ResponseQueuedEvent, ResponseTextDeltaEvent)
from pydantic import BaseModel

from transformers_responses.fixture_model import (GREETING, GREETING_REPLY, JSON_CAT, JSON_CAT_REPLY, NAME_INTRO,
                                                  NAME_INTRO_REPLY, NAME_QUESTION, NAME_RECALL_REPLY, PARIS_RESULT,
                                                  WEATHER_ANSWER, WEATHER_PARIS, WEATHER_TOOL)

from .conftest import Server

pytestmark = pytest.mark.anyio

T = TypeVar("T")
Client = OpenAI | AsyncOpenAI

# A long generation (under a JSON-object grammar the fixture model writes one string until the cap), to cancel.
LONG: dict[str, Any] = {"input": GREETING, "text": {"format": {"type": "json_object"}}, "max_output_tokens": 2000}
TOOLS: list[Any] = [WEATHER_TOOL]


class Cat(BaseModel):
    """The shape of the fixture's JSON answer: `responses.parse` turns its reply into this."""

    animal: str
    legs: int
    sound: str


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["sync", "async"])
async def client(request: pytest.FixtureRequest, server: Server) -> AsyncIterator[Client]:
    if request.param == "sync":
        with server.client() as sync:
            yield sync
    else:
        async with server.async_client() as async_:
            yield async_


async def resolve(value: T | Awaitable[T]) -> T:
    """What an SDK method returned: a sync client's value as it is, an async client's awaited."""
    return await value if inspect.isawaitable(value) else value  # type: ignore[no-any-return]


async def drain(iterable: Iterable[T] | AsyncIterable[T]) -> list[T]:
    """Every element of a stream or an auto-paginating page, with `for` or `async for` as the client needs."""
    if isinstance(iterable, AsyncIterable):
        return [x async for x in iterable]
    return list(iterable)


@asynccontextmanager
async def opened(manager: AbstractContextManager[T] | AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
    """`with` for the sync stream helper, `async with` for the async one."""
    if isinstance(manager, AbstractAsyncContextManager):
        async with manager as value:
            yield value
    else:
        with manager as value:
            yield value


async def poll(c: Client, response_id: str, statuses: tuple[str, ...], timeout: float = 60) -> Response:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        r = await resolve(c.responses.retrieve(response_id))
        if r.status in statuses or loop.time() > deadline:
            assert r.status in statuses, f"{response_id} never reached {statuses}; last {r.status}"
            return r
        await asyncio.sleep(0.05)


def texts(items: Iterable[Any]) -> list[str]:
    return [item.content[0].text for item in items]


# ----- responses -----

async def test_create_plain_and_streamed(client: Client, server: Server) -> None:
    r = await resolve(client.responses.create(model=server.model, input=GREETING))
    assert isinstance(r, Response) and r.status == "completed" and r.output_text == GREETING_REPLY
    assert isinstance(r.output[0], ResponseOutputMessage) and r.usage is not None and r.usage.output_tokens > 0

    stream = await resolve(client.responses.create(model=server.model, input=GREETING, stream=True))
    assert isinstance(stream, Stream | AsyncStream)
    events = await drain(stream)
    created, completed = events[0], events[-1]
    assert isinstance(created, ResponseCreatedEvent) and created.response.status == "in_progress"
    assert isinstance(completed, ResponseCompletedEvent) and completed.response.id == created.response.id
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if isinstance(e, ResponseTextDeltaEvent)]
    assert len(deltas) > 1 and "".join(deltas) == completed.response.output_text == GREETING_REPLY


async def test_stream_helper_and_its_final_response(client: Client, server: Server) -> None:
    async with opened(client.responses.stream(model=server.model, input=NAME_INTRO)) as stream:
        events = await drain(stream)
        final = await resolve(stream.get_final_response())
    deltas = [e for e in events if isinstance(e, HelperTextDeltaEvent)]
    # The helper's own delta events carry the text so far.
    assert "".join(e.delta for e in deltas) == deltas[-1].snapshot == NAME_INTRO_REPLY
    assert isinstance(final, ParsedResponse) and final.status == "completed" and final.output_text == NAME_INTRO_REPLY
    assert events[-1].type == "response.completed"

    # The streamed turn was stored: the helper continues it by id.
    async with opened(client.responses.stream(model=server.model, input=NAME_QUESTION,
                                              previous_response_id=final.id)) as stream:
        follow = await resolve(stream.get_final_response())
    assert follow.output_text == NAME_RECALL_REPLY and follow.previous_response_id == final.id


async def test_parse_into_a_pydantic_model(client: Client, server: Server) -> None:
    expected = Cat.model_validate_json(JSON_CAT_REPLY)
    r = await resolve(client.responses.parse(model=server.model, input=JSON_CAT, text_format=Cat))
    assert isinstance(r, ParsedResponse) and r.status == "completed"
    assert r.output_parsed == expected and json.loads(r.output_text) == json.loads(JSON_CAT_REPLY)
    assert r.text is not None and r.text.format is not None and r.text.format.type == "json_schema"
    # The stream helper parses the same way.
    async with opened(client.responses.stream(model=server.model, input=JSON_CAT, text_format=Cat)) as stream:
        final = await resolve(stream.get_final_response())
    assert final.output_parsed == expected


async def test_retrieve_and_delete(client: Client, server: Server) -> None:
    r = await resolve(client.responses.create(model=server.model, input=GREETING, metadata={"suite": "sdk"}))
    got = await resolve(client.responses.retrieve(r.id))
    assert isinstance(got, Response) and got.model_dump() == r.model_dump() and got.metadata == {"suite": "sdk"}
    # `include` travels as a query array (`include[]=`); the server reads and checks it.
    got = await resolve(client.responses.retrieve(r.id, include=["message.output_text.logprobs"]))
    assert got.model_dump() == r.model_dump()
    with pytest.raises(openai.BadRequestError) as info:
        await resolve(client.responses.retrieve(r.id, include=["no.such.include"]))  # type: ignore[list-item]
    assert info.value.body["param"] == "include[0]"  # type: ignore[index]
    assert await resolve(client.responses.delete(r.id)) is None
    with pytest.raises(openai.NotFoundError):
        await resolve(client.responses.retrieve(r.id))
    with pytest.raises(openai.NotFoundError):
        await resolve(client.responses.delete(r.id))


async def test_cancel_a_background_response(client: Client, server: Server) -> None:
    b = await resolve(client.responses.create(model=server.model, background=True, **LONG))
    assert isinstance(b, Response) and b.background is True and b.status in ("queued", "in_progress")
    cancelled = await resolve(client.responses.cancel(b.id))
    assert isinstance(cancelled, Response) and cancelled.id == b.id and cancelled.status == "cancelled"
    assert (await poll(client, b.id, ("cancelled",))).status == "cancelled"
    assert (await resolve(client.responses.cancel(b.id))).status == "cancelled"  # idempotent
    # A foreground response cannot be cancelled.
    fg = await resolve(client.responses.create(model=server.model, input=GREETING))
    with pytest.raises(openai.BadRequestError):
        await resolve(client.responses.cancel(fg.id))


async def test_background_stream_replayed_by_retrieve(client: Client, server: Server) -> None:
    live = await drain(await resolve(client.responses.create(model=server.model, input=GREETING, background=True,
                                                             stream=True)))
    assert isinstance(live[0], ResponseCreatedEvent) and live[0].response.status == "queued"
    assert isinstance(live[1], ResponseQueuedEvent) and isinstance(live[-1], ResponseCompletedEvent)
    response_id = live[0].response.id
    assert live[-1].response.output_text == GREETING_REPLY

    replay = await drain(await resolve(client.responses.retrieve(response_id, stream=True)))
    assert [e.model_dump() for e in replay] == [e.model_dump() for e in live]
    cut = len(live) // 2
    tail = await drain(await resolve(client.responses.retrieve(response_id, stream=True,
                                                               starting_after=live[cut].sequence_number)))
    assert [e.model_dump() for e in tail] == [e.model_dump() for e in live[cut + 1:]]

    # The stream helper resumes by id too: it replays the whole log (it builds its snapshot from `response.created`)
    # and yields only the events after `starting_after`.
    async with opened(client.responses.stream(response_id=response_id,
                                              starting_after=live[cut].sequence_number)) as stream:
        resumed = await drain(stream)
        final = await resolve(stream.get_final_response())
    assert [e.sequence_number for e in resumed] == [e.sequence_number for e in live[cut + 1:]]
    assert final.id == response_id and final.output_text == GREETING_REPLY


async def test_input_items_pages(client: Client, server: Server) -> None:
    history: list[Any] = [{"role": "user", "content": NAME_INTRO},
                          {"role": "assistant", "content": NAME_INTRO_REPLY}, {"role": "user", "content": NAME_QUESTION}]
    r = await resolve(client.responses.create(model=server.model, input=history))
    assert r.output_text == NAME_RECALL_REPLY
    sent = [NAME_INTRO, NAME_INTRO_REPLY, NAME_QUESTION]

    page = await resolve(client.responses.input_items.list(r.id, include=["message.output_text.logprobs"]))
    assert isinstance(page, SyncCursorPage | AsyncCursorPage) and page.has_more is False
    assert texts(page.data) == sent[::-1]  # desc by default
    assert isinstance(page.data[0], ResponseInputMessageItem) and page.data[0].role == "user"
    assert page.data[1].role == "assistant"  # type: ignore[union-attr]

    first = await resolve(client.responses.input_items.list(r.id, limit=1, order="asc"))
    assert texts(first.data) == sent[:1] and first.has_more is True and first.has_next_page()
    second = await resolve(client.responses.input_items.list(r.id, limit=1, order="asc", after=first.data[0].id))
    assert texts(second.data) == sent[1:2]
    assert texts((await resolve(first.get_next_page())).data) == sent[1:2]
    last = await resolve(client.responses.input_items.list(r.id, limit=2, order="asc", after=second.data[0].id))
    assert texts(last.data) == sent[2:] and last.has_more is False and not last.has_next_page()

    # Auto-pagination: one page of one item per request, every item once, in order.
    assert texts(await drain(client.responses.input_items.list(r.id, limit=1, order="asc"))) == sent
    assert texts(await drain(client.responses.input_items.list(r.id, limit=2))) == sent[::-1]


async def test_input_tokens_count(client: Client, server: Server) -> None:
    count = await resolve(client.responses.input_tokens.count(model=server.model, input=WEATHER_PARIS, tools=TOOLS))
    assert isinstance(count, InputTokenCountResponse) and count.object == "response.input_tokens"
    r = await resolve(client.responses.create(model=server.model, input=WEATHER_PARIS, tools=TOOLS))
    call = r.output[0]
    assert isinstance(call, ResponseFunctionToolCall) and call.name == "get_weather"
    assert r.usage is not None and r.usage.input_tokens == count.input_tokens

    # Counting a continuation by id: what the next turn's prompt will be.
    turn: list[Any] = [{"type": "function_call_output", "call_id": call.call_id, "output": PARIS_RESULT}]
    follow_count = await resolve(client.responses.input_tokens.count(model=server.model, previous_response_id=r.id,
                                                                     input=turn, tools=TOOLS))
    follow = await resolve(client.responses.create(model=server.model, previous_response_id=r.id, input=turn,
                                                   tools=TOOLS))
    assert follow.output_text == WEATHER_ANSWER
    assert follow.usage is not None and follow.usage.input_tokens == follow_count.input_tokens > count.input_tokens


# ----- conversations -----

async def test_conversation_lifecycle(client: Client, server: Server) -> None:
    conv = await resolve(client.conversations.create(metadata={"suite": "sdk"},
                                                     items=[{"role": "user", "content": NAME_INTRO}]))
    assert isinstance(conv, Conversation) and conv.id.startswith("conv_") and conv.metadata == {"suite": "sdk"}
    got = await resolve(client.conversations.retrieve(conv.id))
    assert isinstance(got, Conversation) and got.model_dump() == conv.model_dump()
    updated = await resolve(client.conversations.update(conv.id, metadata={"suite": "sdk", "step": "2"}))
    assert isinstance(updated, Conversation) and updated.metadata == {"suite": "sdk", "step": "2"}

    added = await resolve(client.conversations.items.create(conv.id, items=[
        {"type": "message", "role": "assistant", "content": NAME_INTRO_REPLY}]))
    assert isinstance(added, ConversationItemList) and len(added.data) == 1
    assert isinstance(added.data[0], Message) and added.data[0].role == "assistant"

    # The conversation is the context of a response, which then joins it.
    count = await resolve(client.responses.input_tokens.count(model=server.model, input=NAME_QUESTION,
                                                              conversation=conv.id))
    r = await resolve(client.responses.create(model=server.model, input=NAME_QUESTION, conversation=conv.id))
    assert r.output_text == NAME_RECALL_REPLY and r.conversation is not None and r.conversation.id == conv.id
    assert r.usage is not None and r.usage.input_tokens == count.input_tokens
    sent = [NAME_INTRO, NAME_INTRO_REPLY, NAME_QUESTION, NAME_RECALL_REPLY]

    page = await resolve(client.conversations.items.list(conv.id, order="asc",
                                                         include=["message.input_image.image_url"]))
    assert isinstance(page, SyncConversationCursorPage | AsyncConversationCursorPage)
    assert all(isinstance(i, Message) for i in page.data) and texts(page.data) == sent and page.has_more is False
    assert [i.role for i in page.data] == ["user", "assistant"] * 2  # type: ignore[union-attr]
    last_item = page.data[-1]
    assert isinstance(last_item, Message) and last_item.id == r.output[0].id
    assert isinstance(last_item.content[0], OutputTextContent)
    first = await resolve(client.conversations.items.list(conv.id, limit=1))  # desc by default
    assert texts(first.data) == sent[-1:] and first.has_more is True and first.last_id == first.data[0].id
    second = await resolve(client.conversations.items.list(conv.id, limit=2, after=first.last_id))
    assert texts(second.data) == sent[1:3][::-1]
    assert texts(await drain(client.conversations.items.list(conv.id, limit=1, order="asc"))) == sent
    assert texts(await drain(client.conversations.items.list(conv.id, limit=3))) == sent[::-1]

    item_id = page.data[0].id  # type: ignore[union-attr]
    item = await resolve(client.conversations.items.retrieve(item_id, conversation_id=conv.id,
                                                             include=["message.input_image.image_url"]))
    assert isinstance(item, Message) and item.model_dump() == page.data[0].model_dump()
    after = await resolve(client.conversations.items.delete(item_id, conversation_id=conv.id))
    assert isinstance(after, Conversation) and after.id == conv.id
    assert texts(await drain(client.conversations.items.list(conv.id, order="asc"))) == sent[1:]
    with pytest.raises(openai.NotFoundError):
        await resolve(client.conversations.items.retrieve(item_id, conversation_id=conv.id))

    deleted = await resolve(client.conversations.delete(conv.id))
    assert isinstance(deleted, ConversationDeletedResource) and deleted.deleted is True and deleted.id == conv.id
    with pytest.raises(openai.NotFoundError):
        await resolve(client.conversations.retrieve(conv.id))
    with pytest.raises(openai.NotFoundError):
        await resolve(client.conversations.items.list(conv.id))
