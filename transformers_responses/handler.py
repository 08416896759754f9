"""The `POST /v1/responses` handler: request → prompt → generation → events or a response body.

`ResponsesHandler` subclasses the host's `BaseHandler`, so models resolve through the host's `ModelManager` and
generation runs on the host's managers (sequential or continuous batching). Its own steps, each owned by a module:
validation (`validation`, `fields`), the conversation state before this input (`state`: `previous_response_id`,
`conversation`, `item_reference`), input normalization (`normalizer`; `items.drop_oldest` for `truncation: auto`),
the family tool parser (`tool_parsers`), decoding controls (`controls`: grammars, logprobs, call caps), event
assembly (`emitter`, `events`). Errors before the first event are HTTP errors; after it, an `error` event and
`response.failed`; either way from `errors`. Persisting the response around its events is `state.State.recorded`'s
(foreground) or `background.Runner`'s (background) business, not the handler's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from transformers.cli.serving.utils import BaseHandler, Modality

from . import events as ev
from . import generation, request_log, sealing, seam, tool_parsers
from .controls import Controls, cb_can_constrain, needs_processors, plan
from .emitter import Assembler, initial_response
from .errors import InvalidRequestError, NotFoundError, ResponsesError, ServerError, from_exception
from .fields import check_supported
from .items import drop_oldest, stored_items
from .normalizer import input_items, to_chat_messages
from .state import Context, State
from .tools import Toolset, echo, toolset
from .validation import validate_create_request

logger = logging.getLogger("transformers_responses")

_EFFORT_THINKING = {"none": False, "minimal": False, "low": True, "medium": True, "high": True, "xhigh": True}


@dataclass
class Prepared:
    """Everything needed to run one response, computed before any byte is sent."""

    body: dict[str, Any]
    response_id: str
    model_id: str
    model: Any
    processor: Any
    tokenizer: Any
    inputs: Any
    input_tokens: int
    gen_config: Any
    gen_manager: Any
    parser: tool_parsers.ToolParser
    snapshot: dict[str, Any]
    context: Context
    controls: Controls
    tools: Toolset = field(default_factory=Toolset)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    generation: generation.Generation | None = None

    def request_stop(self) -> None:
        """Stop generating (a cancel): the response ends `cancelled` with the output it has."""
        self.stop.set()
        if self.generation is not None:
            self.generation.interrupt()


def _json_object(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _length(inputs: Any) -> int:
    ids = inputs["input_ids"]
    if isinstance(ids, list):  # some processors wrap one prompt in a batch of one
        return len(ids[0]) if ids and isinstance(ids[0], list) else len(ids)
    return int(ids.shape[-1])


def _template_tools(body: dict[str, Any], tools: Toolset) -> list[dict[str, Any]] | None:
    """The tools rendered into the prompt: none under `tool_choice: none`."""
    return None if (body.get("tool_choice") or "auto") == "none" else tools.template_tools()


def _opened(context: Context) -> Context:
    """What the model sees: sealed reasoning and compaction summaries opened (the stored request keeps what the
    client sent). A compaction item may sit in stored history too (a `compaction` item sent as input earlier)."""
    history_path = "conversation" if context.conversation_id else "previous_response_id"
    return dataclasses.replace(context, history=sealing.open_compactions(context.history, history_path, indexed=False),
                               input=sealing.open_compactions(sealing.open_reasoning(context.input)))


class ResponsesHandler(BaseHandler):
    """Handler for the Responses API routes; constructed once per server by `routes.mount`."""

    def __init__(self, model_manager: Any, generation_state: Any, chat_template_kwargs: dict[str, Any] | None = None,
                 *, tool_call_parser: str = "auto", state: State | None = None) -> None:
        super().__init__(model_manager, generation_state, chat_template_kwargs=chat_template_kwargs)
        self.tool_call_parser = tool_call_parser
        self.state = state
        self._routers: dict[int, Any] = {}  # grammar router of each CB manager, by the manager's id

    # ---- preparation ----

    async def prepare(self, body: Any, *, state: State | None = None) -> Prepared:
        """Everything before the first event; `state` overrides the server's (a WebSocket connection's own)."""
        request_log.record(body)
        validate_create_request(body)
        check_supported(body)
        body = dict(body)
        state = state or self.state
        if state is not None:
            context = await state.resolve(body)
        else:
            context = Context(input=stored_items(input_items(body)))
        seen = _opened(context)
        model_id, model, processor = await self._load(body)
        tokenizer = getattr(processor, "tokenizer", processor)
        modality = self.model_manager.get_model_modality(model, processor=processor)
        use_cb = self.generation_state.use_continuous_batching(model, modality)
        router = None
        if use_cb and needs_processors(body):
            router = self._cb_router(model_id, model, body)
            if router is None or not cb_can_constrain(body):
                # Logprobs and forbidden tokens are sequential-only; grammars need the router on the CB.
                logger.info("response with decoding controls that continuous batching cannot apply here: generated "
                            "on the sequential path")
                use_cb, router = False, None
        tools = toolset(body.get("tools"))
        template_tools = _template_tools(body, tools)
        inputs = self._render_context(body, seen, processor, model, modality, use_cb, template_tools)
        if body.get("truncation") == "auto":
            inputs = self._truncate(body, seen, processor, model, modality, use_cb, template_tools, inputs)
        # CB takes a flat list of ids, the sequential path a [1, N] tensor.
        input_ids = inputs["input_ids"]
        prompt_ids = input_ids if isinstance(input_ids, list) else input_ids[0].tolist()
        input_tokens = len(prompt_ids)

        try:
            gen_config = self._build_generation_config(body, model.generation_config, use_cb=use_cb)
        except (json.JSONDecodeError, TypeError, ValueError) as exc:
            raise InvalidRequestError(f"Invalid 'generation_config': {exc}", param="generation_config") from None
        if (body.get("temperature") or 0) > 0 or (body.get("top_p") is not None and body["top_p"] < 1):
            # OpenAI semantics: a temperature above 0 samples, even for a model whose default is greedy.
            gen_config.do_sample = True
        self._fit_context(body, model, gen_config, input_tokens)

        parser_cls, parser_kwargs = tool_parsers.select(self.tool_call_parser, tokenizer, model.config.model_type)
        parser = parser_cls(template_tools, prompt_tail=tokenizer.decode(prompt_ids), **parser_kwargs)
        controls = plan(body, parser=parser, tokenizer=tokenizer, model=model)
        response_id = ev.new_id("resp")
        gen_manager = self.generation_state.get_manager(model_id, use_cb=use_cb)
        if use_cb:
            self._start_cb(gen_manager, model, gen_config)
            if controls.grammar is not None and router is not None:
                controls.route(router, response_id, gen_config.eos_token_id)
        else:
            controls.attach(inputs, tokenizer, gen_config.eos_token_id)
        snapshot = initial_response(body, response_id=response_id, model=body["model"], created_at=ev.now(),
                                    tools=echo(body.get("tools")))
        if context.conversation_id:
            snapshot["conversation"] = {"id": context.conversation_id}
        return Prepared(body, response_id, model_id, model, processor, tokenizer, inputs, input_tokens, gen_config,
                        gen_manager, parser, snapshot, context, controls, tools)

    def _start_cb(self, gen_manager: Any, model: Any, gen_config: Any) -> None:
        """The host's CB start, with our grammar router joining its logits processors when it can."""
        def attach(cb: Any) -> None:
            from . import structured

            if not structured.available():
                return
            from .structured_cb import CBGrammarRouter

            why = CBGrammarRouter.can_attach(cb)
            if why is not None:
                logger.info("constrained decoding on continuous batching is off (%s): constrained requests take the "
                            "sequential path", why)
                return
            router = CBGrammarRouter(structured.model_vocab_size(model))
            router.attach(cb)
            self._routers[id(gen_manager)] = router

        seam.start_cb(gen_manager, model, gen_config, attach)

    def _cb_router(self, model_id: str, model: Any, body: dict[str, Any]) -> Any:
        """The grammar router of the model's CB manager (starting the CB if this is its first request), or None."""
        gen_manager = self.generation_state.get_manager(model_id, use_cb=True)
        try:
            gen_config = self._build_generation_config(body, model.generation_config, use_cb=True)
        except (json.JSONDecodeError, TypeError, ValueError) as exc:
            raise InvalidRequestError(f"Invalid 'generation_config': {exc}", param="generation_config") from None
        self._start_cb(gen_manager, model, gen_config)
        return self._routers.get(id(gen_manager))

    async def count_input_tokens(self, body: dict[str, Any]) -> int:
        """`POST /v1/responses/input_tokens`: the prompt this request would render, tools included, in tokens."""
        body = {**body, "input": body.get("input") or []}
        check_supported({k: v for k, v in body.items() if k != "model"})
        context = await self.state.resolve(body) if self.state is not None else Context(
            input=stored_items(input_items(body)))
        context = _opened(context)
        model_id, model, processor = await self._load(body)
        modality = self.model_manager.get_model_modality(model, processor=processor)
        template_tools = _template_tools(body, toolset(body.get("tools")))
        return _length(self._render_context(body, context, processor, model, modality, True, template_tools))

    def _render_context(self, body: dict[str, Any], context: Context, processor: Any, model: Any, modality: Any,
                        use_cb: bool, template_tools: list[dict[str, Any]] | None) -> Any:
        vision = modality in (Modality.VLM, Modality.MULTIMODAL)
        messages = to_chat_messages([*context.history, *context.input], body.get("instructions"), vision=vision,
                                    history=len(context.history),
                                    history_path="conversation" if context.conversation_id else "previous_response_id")
        return self._render(processor, model, messages, template_tools, body, use_cb)

    async def _load(self, body: dict[str, Any]) -> tuple[str, Any, Any]:
        forced = self.model_manager.force_model
        if forced is not None and body["model"] != forced:
            raise NotFoundError(f"The model {body['model']!r} does not exist on this server; it serves {forced!r}.",
                                param="model", code="model_not_found")
        try:
            return await asyncio.to_thread(self._resolve_model, body)
        except ResponsesError:
            raise
        except Exception as exc:
            err = from_exception(exc)
            if err.status_code >= 500 and isinstance(exc, (OSError, ValueError)):
                raise NotFoundError(f"The model {body.get('model')!r} does not exist or could not be loaded: {exc}",
                                    param="model", code="model_not_found") from None
            if err.param is None and err.status_code < 500:
                err.param = "model"
            raise err from None

    def _render(self, processor: Any, model: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                body: dict[str, Any], use_cb: bool) -> Any:
        kwargs: dict[str, Any] = dict(self.chat_template_kwargs)
        effort = (body.get("reasoning") or {}).get("effort")
        tokenizer = getattr(processor, "tokenizer", processor)
        if effort is not None and "enable_thinking" in str(getattr(tokenizer, "chat_template", "") or ""):
            kwargs["enable_thinking"] = _EFFORT_THINKING.get(effort, True)
        kwargs.update(body.get("chat_template_kwargs") or {})
        try:
            inputs = processor.apply_chat_template(
                messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=True,
                return_tensors=None if use_cb else "pt", **kwargs)
        except Exception as exc:  # jinja raises for conversations a template refuses (e.g. role order)
            raise InvalidRequestError(f"The model's chat template cannot render this input: {exc}",
                                      param="input") from None
        if not use_cb:
            inputs = inputs.to(model.device)
        return inputs

    def _truncate(self, body: dict[str, Any], context: Context, processor: Any, model: Any, modality: Any,
                  use_cb: bool, template_tools: list[dict[str, Any]] | None, inputs: Any) -> Any:
        """`truncation: auto`: drop the oldest items (see `items.drop_oldest`) until input and output fit. The
        stored request keeps every item; only what the model sees is cut."""
        limit = getattr(model.config, "max_position_embeddings", None)
        room = body.get("max_output_tokens") or 1
        view = dataclasses.replace(context)
        while limit and _length(inputs) + room > limit:
            kept = drop_oldest([*view.history, *view.input], len(view.history))
            if kept is None:  # nothing more may go: the context-length error that follows says so
                break
            view.history, view.input = kept
            inputs = self._render_context(body, view, processor, model, modality, use_cb, template_tools)
        return inputs

    @staticmethod
    def _fit_context(body: dict[str, Any], model: Any, gen_config: Any, input_tokens: int) -> None:
        limit = getattr(model.config, "max_position_embeddings", None)
        requested = body.get("max_output_tokens")
        if requested is not None:
            gen_config.max_new_tokens = int(requested)
        if not limit:
            return
        if requested is None and "max_new_tokens" not in _json_object(body.get("generation_config")):
            # Without `max_output_tokens` the answer may use what the context leaves (not the host's default cap).
            gen_config.max_new_tokens = limit - input_tokens
        if input_tokens + (requested or 1) > limit:
            raise InvalidRequestError(
                f"This model's maximum context length is {limit} tokens. However, your request has {input_tokens} "
                f"input tokens{f' and asks for {requested} output tokens' if requested else ''}. Shorten the input "
                "or lower max_output_tokens.", param="input", code="context_length_exceeded")
        gen_config.max_new_tokens = min(int(gen_config.max_new_tokens), limit - input_tokens)

    # ---- running ----

    async def run(self, prep: Prepared, disconnected: asyncio.Event | None = None) -> AsyncIterator[dict[str, Any]]:
        """Generate and yield every event of the response, terminal event last. Cancels generation if abandoned."""
        seal = sealing.seal_reasoning if sealing.INCLUDE in (prep.body.get("include") or []) else None
        assembler = Assembler(prep.snapshot, seal=seal, tools=prep.tools)
        for event in assembler.start(queued=bool(prep.body.get("background"))):
            yield event
        max_calls = prep.controls.max_calls
        try:
            gen = generation.start(prep.gen_manager, prep.model, prep.processor, prep.inputs, prep.gen_config,
                                   prep.response_id, prep.tokenizer)
        except BaseException:
            prep.controls.done()
            raise
        prep.generation = gen
        if prep.stop.is_set():
            gen.interrupt()
        reasoning_tokens = 0
        parser = prep.parser
        try:
            async for chunk in gen.chunks():
                parsed = parser.feed(chunk)
                if parser.in_reasoning or any(k == "reasoning_end" for k, _ in parsed):
                    reasoning_tokens += 1
                for event in assembler.apply(parsed, prep.controls.drain_logprobs()):
                    yield event
                if max_calls is not None and assembler.calls >= max_calls and not assembler.in_call:
                    gen.cancel()  # parallel_tool_calls=false / max_tool_calls: the turn is over
                    gen.saw_stop = True
                    break
            if prep.stop.is_set():  # cancelled: keep what was written, closed as incomplete
                gen.cancel()
                usage = ev.usage(prep.input_tokens, gen.output_tokens, reasoning_tokens)
                for event in assembler.finish("cancelled", usage):
                    yield event
                return
            if gen.error is not None:
                failure = ServerError(f"The model failed while generating: {gen.error}")
                for event in self._failed(assembler, gen, prep, failure, reasoning_tokens):
                    yield event
                return
            cut = gen.hit_length_limit
            tail = parser.finish()
            if cut:
                tail = [e for e in tail if e[0] != "call_abort"]
            for event in assembler.apply(tail):
                yield event
            usage = ev.usage(prep.input_tokens, gen.output_tokens, reasoning_tokens)
            if cut:
                events = assembler.finish("incomplete", usage, incomplete_reason="max_output_tokens")
            else:
                events = assembler.finish("completed", usage)
            for event in events:
                yield event
        except (asyncio.CancelledError, GeneratorExit):
            gen.cancel()
            raise
        except Exception as exc:  # a fault of ours mid-stream still ends the stream properly
            logger.exception("response %s failed", prep.response_id)
            gen.cancel()
            for event in self._failed(assembler, gen, prep, exc, reasoning_tokens):
                yield event
        finally:
            prep.controls.done()

    @staticmethod
    def _failed(assembler: Assembler, gen: generation.Generation, prep: Prepared, exc: BaseException,
                reasoning_tokens: int) -> list[dict[str, Any]]:
        err = from_exception(exc)
        code = err.code or "server_error"
        usage = ev.usage(prep.input_tokens, gen.output_tokens, reasoning_tokens)
        return [ev.error_event(code, err.message, err.param),
                *assembler.finish("failed", usage, error={"code": code, "message": err.message})]

