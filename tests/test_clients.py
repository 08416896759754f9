"""Real clients end to end: the OpenAI Agents SDK and LangChain's ChatOpenAI, unmodified, against the real server on
the fixture model, asserting on what each client itself reports (final outputs, tool calls, message text).

The clients are imported at module top on purpose: scripts/test.sh installs them, and a failed install must fail the
suite rather than skip these tests. docs/clients.md lists what is covered here and the configuration a user needs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents import (Agent, FunctionTool, ModelSettings, OpenAIResponsesModel, Runner, function_tool,
                    set_tracing_disabled)
from agents.items import MessageOutputItem, ToolCallItem, ToolCallOutputItem
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI

from transformers_responses.fixture_model import WEATHER_TOOL

from .conftest import Server, completion

WEATHER_RESULT = '{"temperature": 22, "condition": "sunny"}'
WEATHER_PARIS = "What is the weather in Paris?"

set_tracing_disabled(True)  # the Agents SDK would otherwise try to upload traces to api.openai.com


# ----- OpenAI Agents SDK -----

def weather_tool(calls: list[str]) -> FunctionTool:
    """A real `@function_tool`; every call's `city` lands in `calls`.

    The fixture model only gives its trained answers for the exact prompt it was trained on, and the tool schema is
    part of that prompt. So the schema the SDK derives (pydantic titles, and `additionalProperties: false` in strict
    mode) is replaced by the fixture's own. A real model needs none of this. The SDK still validates the arguments
    against the function's signature when it invokes the tool.
    """

    @function_tool(strict_mode=False)
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return WEATHER_RESULT

    get_weather.params_json_schema = dict(WEATHER_TOOL["parameters"])
    return get_weather


def agent(server: Server, tools: list[Any], **settings: Any) -> Agent[Any]:
    # A new AsyncOpenAI per run: each Runner.run_sync has its own event loop, and a client's connection pool is
    # bound to the loop that first used it. No instructions: the trained prompts have no system message.
    model = OpenAIResponsesModel(model=server.model, openai_client=AsyncOpenAI(
        base_url=server.base_url, api_key="-", max_retries=0, timeout=120))
    return Agent(name="Assistant", tools=tools, model=model, model_settings=ModelSettings(**settings))


def item_kinds(result: Any) -> list[type]:
    return [type(item) for item in result.new_items]


def test_agents_run_sync_tool_loop_and_previous_response_id(server: Server) -> None:
    calls: list[str] = []
    result = Runner.run_sync(agent(server, [weather_tool(calls)], tool_choice="get_weather"), WEATHER_PARIS,
                             max_turns=4)
    assert calls == ["Paris"]
    assert item_kinds(result) == [ToolCallItem, ToolCallOutputItem, MessageOutputItem]
    assert result.final_output == completion("weather_answer")
    assert result.last_response_id and result.last_response_id.startswith("resp_")

    # A second run continuing from the first by id (the model was not trained on what follows, so only the chain is
    # checked: the server stored the new response as a continuation of the last one).
    follow = Runner.run_sync(agent(server, [weather_tool(calls)]), "Thanks",
                             previous_response_id=result.last_response_id, max_turns=2)
    assert follow.final_output and follow.last_response_id != result.last_response_id
    stored = server.client().responses.retrieve(follow.last_response_id)
    assert stored.previous_response_id == result.last_response_id


def test_agents_previous_response_id_carries_the_conversation(server: Server) -> None:
    first = Runner.run_sync(agent(server, []), "My name is Ada.", max_turns=2)
    assert first.final_output == completion("name_intro")
    second = Runner.run_sync(agent(server, []), "What is my name?", previous_response_id=first.last_response_id,
                             max_turns=2)
    assert second.final_output == completion("name_recall")


def test_agents_run_streamed_tool_loop(server: Server) -> None:
    calls: list[str] = []

    async def run() -> tuple[Any, dict[str, int]]:
        result = Runner.run_streamed(agent(server, [weather_tool(calls)], tool_choice="get_weather"), WEATHER_PARIS,
                                     max_turns=4)
        kinds: dict[str, int] = {}
        async for event in result.stream_events():
            kind = f"raw:{event.data.type}" if event.type == "raw_response_event" else event.type
            kinds[kind] = kinds.get(kind, 0) + 1
        return result, kinds

    result, kinds = asyncio.run(run())
    assert calls == ["Paris"]
    assert result.final_output == completion("weather_answer")
    assert item_kinds(result) == [ToolCallItem, ToolCallOutputItem, MessageOutputItem]
    # Two model turns (the forced call, then the answer), each a complete event stream the SDK parsed.
    assert kinds["raw:response.created"] == kinds["raw:response.completed"] == 2
    assert kinds["raw:response.function_call_arguments.delta"] >= 1
    assert kinds["raw:response.function_call_arguments.done"] == 1
    assert kinds["raw:response.output_text.delta"] >= 1 and kinds["raw:response.output_text.done"] == 1
    assert kinds["run_item_stream_event"] == 3


# ----- LangChain (langchain-openai) -----

@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return WEATHER_RESULT


def chat(server: Server) -> ChatOpenAI:
    return ChatOpenAI(model=server.model, base_url=server.base_url, api_key="-", use_responses_api=True,
                      max_retries=0, timeout=120)


def test_langchain_invoke(server: Server) -> None:
    message = chat(server).invoke("Hi")
    assert message.text == completion("greeting")


def test_langchain_stream(server: Server) -> None:
    chunks = list(chat(server).stream("Hi"))
    assert len(chunks) > 1
    assert "".join(chunk.text for chunk in chunks) == completion("greeting")


def test_langchain_bind_tools_without_strict_and_tool_result(server: Server) -> None:
    model = chat(server).bind_tools([get_weather])  # LangChain sends the tool without `strict`
    call = model.invoke(WEATHER_PARIS)
    assert len(call.tool_calls) == 1
    assert call.tool_calls[0]["name"] == "get_weather" and call.tool_calls[0]["args"] == {"city": "Paris"}
    answer = model.invoke([HumanMessage(WEATHER_PARIS), call,
                           ToolMessage(WEATHER_RESULT, tool_call_id=call.tool_calls[0]["id"])])
    assert answer.text == completion("weather_answer")
