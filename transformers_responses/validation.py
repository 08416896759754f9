"""Request validation: a request body checked against the installed `openai` request types, the schema of record.

`validate_create_request` walks the body along the `TypedDict` annotations of `ResponseCreateParamsBase` (plus the host's
extensions) and raises `InvalidRequestError` naming the exact path of the first problem, the way OpenAI does:
unknown field (`Unknown parameter: 'input[0].foo'.`), wrong type (`Invalid type for 'input[2].content' …`), bad literal
(`Invalid value: …`), missing required field. Unions of item types are resolved by their `type` discriminator, so an
error names the field inside the item rather than "no union member matched".

What the server then does with each valid field (implement, echo or refuse) is the handler's business, not this module's.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Union

from typing_extensions import NotRequired, Required, TypedDict, is_typeddict

from .errors import InvalidRequestError

_PRIMITIVES: dict[type, str] = {str: "a string", int: "an integer", float: "a number", bool: "a boolean"}


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class _Problem(Exception):
    """A validation failure at a path; the deepest one wins when union members compete."""

    def __init__(self, path: str, message: str, code: str, depth: int) -> None:
        super().__init__(message)
        self.path, self.message, self.code, self.depth = path, message, code, depth


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


@functools.lru_cache(maxsize=None)
def _hints(td: type) -> dict[str, Any]:
    return typing.get_type_hints(td, include_extras=True)


def _strip(tp: Any) -> Any:
    """Remove Required/NotRequired/Annotated wrappers."""
    origin = typing.get_origin(tp)
    while origin in (Required, NotRequired, typing.Annotated):
        tp = typing.get_args(tp)[0]
        origin = typing.get_origin(tp)
    return tp


def _describe(tp: Any) -> str:
    tp = _strip(tp)
    origin = typing.get_origin(tp)
    if tp in _PRIMITIVES:
        return _PRIMITIVES[tp]
    if origin in (Union, types.UnionType):
        kinds = sorted({_describe(a) for a in typing.get_args(tp) if a is not type(None)})
        return "one of " + " or ".join(kinds) if len(kinds) > 1 else kinds[0]
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(tp))
    if origin in (list, Iterable, Sequence, typing.List) or _is_sequence_type(tp):
        return "an array"
    if is_typeddict(tp) or origin in (dict, Mapping) or tp is dict:
        return "an object"
    return "a value"


def _is_sequence_type(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin is None:
        return False
    return getattr(origin, "__name__", "") in ("SequenceNotStr", "Sequence", "Iterable", "List", "list")


def _literal_type(td: type) -> tuple[Any, ...] | None:
    """The allowed values of a TypedDict's `type` field, if it is a Literal."""
    hint = _hints(td).get("type")
    if hint is None:
        return None
    hint = _strip(hint)
    if typing.get_origin(hint) in (Union, types.UnionType):  # Optional[Literal[...]]
        literals = [a for a in typing.get_args(hint) if typing.get_origin(a) is Literal]
        hint = literals[0] if len(literals) == 1 else hint
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    return None


@functools.lru_cache(maxsize=None)
def _required_keys(td: type) -> frozenset[str]:
    # `__required_keys__` is wrong for the openai types: their annotations are strings (PEP 563), which TypedDict
    # cannot inspect for `Required[...]` at class creation. The evaluated hints can be.
    # `Required[Optional[X]]` (e.g. a function tool's `strict` and `parameters`) is generated from "nullable" in the
    # OpenAPI spec; the service accepts such a field left out, and real clients (LangChain, the Vercel AI SDK) do.
    total = getattr(td, "__total__", True)
    required = set()
    for key, hint in _hints(td).items():
        origin = typing.get_origin(hint)
        if origin is Required or (total and origin is not NotRequired):
            inner = typing.get_args(hint)[0] if origin is Required else hint
            if type(None) not in typing.get_args(_strip(inner)):
                required.add(key)
    return frozenset(required)


def _check(value: Any, tp: Any, path: str, depth: int) -> None:
    tp = _strip(tp)
    if tp is Any or tp is object:
        return
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        _check_union(value, typing.get_args(tp), path, depth)
        return
    if tp is type(None):
        if value is not None:
            raise _Problem(path, f"Invalid type for '{path}': expected null, but got {_json_kind(value)} instead.",
                           "invalid_type", depth)
        return
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed or isinstance(value, bool) != any(isinstance(a, bool) for a in allowed):
            supported = ", ".join(repr(a) for a in allowed)
            raise _Problem(path, f"Invalid value: {value!r}. Supported values are: {supported}.", "invalid_value", depth)
        return
    if tp in _PRIMITIVES:
        ok = isinstance(value, tp) and not (tp is not bool and isinstance(value, bool))
        if tp is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok:
            raise _Problem(path, f"Invalid type for '{path}': expected {_PRIMITIVES[tp]}, but got "
                           f"{_json_kind(value)} instead.", "invalid_type", depth)
        return
    if is_typeddict(tp):
        _check_typeddict(value, tp, path, depth)
        return
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, dict):
            raise _Problem(path, f"Invalid type for '{path}': expected an object, but got {_json_kind(value)} instead.",
                           "invalid_type", depth)
        args = typing.get_args(tp)
        if len(args) == 2:
            for key, item in value.items():
                _check(item, args[1], _join(path, str(key)), depth + 1)
        return
    if origin in (list, Iterable, Sequence) or _is_sequence_type(tp) or tp is list:
        if not isinstance(value, list):
            raise _Problem(path, f"Invalid type for '{path}': expected an array, but got {_json_kind(value)} instead.",
                           "invalid_type", depth)
        args = typing.get_args(tp)
        if args:
            for i, item in enumerate(value):
                _check(item, args[0], _join(path, i), depth + 1)
        return
    # File uploads and other non-JSON types: accept, the handler decides.


def _check_typeddict(value: Any, td: type, path: str, depth: int) -> None:
    if not isinstance(value, dict):
        raise _Problem(path, f"Invalid type for '{path}': expected an object, but got {_json_kind(value)} instead.",
                       "invalid_type", depth)
    hints = _hints(td)
    if td.__name__ == _OPEN_TOOL:  # only `type` is checked (see tool_type)
        _check(value.get("type"), hints["type"], _join(path, "type"), depth + 1)
        return
    for key in value:
        if key not in hints:
            where = _join(path, key)
            raise _Problem(where, f"Unknown parameter: '{where}'.", "unknown_parameter", depth + 1)
    for key in sorted(_required_keys(td)):
        if key not in value:
            where = _join(path, key)
            raise _Problem(where, f"Missing required parameter: '{where}'.", "missing_required_parameter", depth + 1)
    for key, item in value.items():
        _check(item, hints[key], _join(path, key), depth + 1)


def _check_union(value: Any, members: tuple[Any, ...], path: str, depth: int) -> None:
    if value is None:
        if type(None) in members:
            return
        raise _Problem(path, f"Invalid type for '{path}': expected {_describe(Union[members])}, but got null instead.",
                       "invalid_type", depth)
    candidates = [m for m in members if m is not type(None)]
    if isinstance(value, dict) and "type" in value:
        typed = [m for m in candidates if is_typeddict(_strip(m)) and _literal_type(_strip(m)) is not None]
        matching = [m for m in typed if value["type"] in _literal_type(_strip(m))]  # type: ignore[operator]
        untyped_dicts = [m for m in candidates if is_typeddict(_strip(m)) and _literal_type(_strip(m)) is None]
        if matching:
            candidates = matching
        elif typed and not untyped_dicts:
            allowed = sorted({v for m in typed for v in _literal_type(_strip(m)) or ()})
            where = _join(path, "type")
            raise _Problem(where, f"Invalid value: {value['type']!r}. Supported values are: "
                           f"{', '.join(repr(a) for a in allowed)}.", "invalid_value", depth + 1)
    best: _Problem | None = None
    for member in candidates:
        try:
            _check(value, member, path, depth)
            return
        except _Problem as problem:
            if best is None or problem.depth > best.depth:
                best = problem
    if best is not None and best.depth > depth:
        raise best
    raise _Problem(path, f"Invalid type for '{path}': expected {_describe(Union[tuple(candidates)])}, but got "
                   f"{_json_kind(value)} instead.", "invalid_type", depth)


# ---- the request schema: the openai types, with the host's extensions and lenient message parts ----


@functools.lru_cache(maxsize=1)
def input_item_type() -> Any:
    """The union of input items, with message items widened to accept the history parts real clients send
    (`output_text`, `refusal` in role messages, as the OpenAI service does)."""
    from openai.types.responses import response_input_param as rip
    from openai.types.responses.response_input_message_content_list_param import ResponseInputContentParam
    from openai.types.responses.response_output_refusal_param import ResponseOutputRefusalParam
    from openai.types.responses.response_output_text_param import ResponseOutputTextParam

    # History text as clients really send it: `annotations` (required in the output type) is often left out.
    OutputText = TypedDict(  # noqa: N806
        "OutputText",
        {"type": Required[Literal["output_text"]], "text": Required[str],
         "annotations": _strip(_hints(ResponseOutputTextParam)["annotations"]),
         "logprobs": _hints(ResponseOutputTextParam)["logprobs"]},
        total=False,
    )
    Part = Union[ResponseInputContentParam, OutputText, ResponseOutputRefusalParam]  # noqa: N806

    RoleMessage = TypedDict(  # noqa: N806 - functional form: the annotations must be objects, not strings
        "RoleMessage",
        {
            "role": Required[Literal["user", "assistant", "system", "developer"]],
            "content": Required[Union[str, list[Part]]],  # type: ignore[valid-type]
            "type": Literal["message"],
            "phase": Union[Literal["commentary", "final_answer"], None],
            "id": str,
            "status": Literal["in_progress", "completed", "incomplete"],
        },
        total=False,
    )

    message_types = {"EasyInputMessageParam", "Message", "ResponseOutputMessageParam"}
    items = tuple(m for m in typing.get_args(rip.ResponseInputItemParam) if m.__name__ not in message_types)
    return Union[(RoleMessage, *items)]


_OPEN_TOOL = "HostedTool"


@functools.lru_cache(maxsize=1)
def tool_type() -> Any:
    """The union of tools: function, custom and namespace tools as the openai types say; hosted tools checked by their
    `type` only. This server offers them to no model (transformers_responses.tools), and clients send fields newer
    than the installed types (Codex's `web_search.search_content_types`): an unknown key there must not end a turn."""
    from openai.types.responses.tool_param import ToolParam

    offered = ("FunctionToolParam", "CustomToolParam", "NamespaceToolParam")
    members = typing.get_args(ToolParam)
    hosted = sorted({v for m in members if m.__name__ not in offered for v in _literal_type(_strip(m)) or ()})
    HostedTool = TypedDict(_OPEN_TOOL, {"type": Required[Literal[tuple(hosted)]]}, total=False)  # type: ignore[misc]  # noqa: N806
    return Union[(*(m for m in members if m.__name__ in offered), HostedTool)]


_HOST_EXTENSIONS = {"generation_config": str, "seed": Union[int, None], "chat_template_kwargs": Union[dict[str, Any], None]}


@functools.lru_cache(maxsize=1)
def request_schema() -> type:
    """`ResponseCreateParamsBase` + `stream` + the host extensions, with widened message items."""
    from openai.types.responses import response_create_params as rcp

    base_hints = dict(_hints(rcp.ResponseCreateParamsBase))
    base_hints["input"] = Union[str, list[input_item_type()]]  # type: ignore[misc]
    base_hints["stream"] = Union[bool, None]
    base_hints["tools"] = list[tool_type()]  # type: ignore[misc]
    base_hints.update(_HOST_EXTENSIONS)
    # Codex CLI's per-request telemetry (session, turn, thread ids); not in the openai types.
    base_hints["client_metadata"] = Union[dict[str, str], None]
    return TypedDict("ResponsesRequest", base_hints, total=False)  # type: ignore[operator,no-any-return]


@functools.lru_cache(maxsize=1)
def input_tokens_schema() -> type:
    """`POST /v1/responses/input_tokens`: `InputTokenCountParams` with widened message items."""
    from openai.types.responses import input_token_count_params as itp

    hints = dict(_hints(itp.InputTokenCountParams))
    hints["input"] = Union[str, list[input_item_type()], None]  # type: ignore[misc]
    hints["tools"] = Union[list[tool_type()], None]  # type: ignore[misc]
    hints["chat_template_kwargs"] = _HOST_EXTENSIONS["chat_template_kwargs"]
    return TypedDict("InputTokensRequest", hints, total=False)  # type: ignore[operator,no-any-return]


@functools.lru_cache(maxsize=1)
def conversation_schemas() -> dict[str, type]:
    """Bodies of the Conversations API: create, update (metadata) and items create."""
    items = list[input_item_type()]  # type: ignore[misc]
    metadata = Union[dict[str, str], None]
    return {
        "create": TypedDict("ConversationCreate", {"items": Union[items, None], "metadata": metadata},  # type: ignore[operator]
                            total=False),
        "update": TypedDict("ConversationUpdate", {"metadata": Required[metadata]}),  # type: ignore[operator]
        "items": TypedDict("ConversationItemsCreate", {"items": Required[items]}),  # type: ignore[operator]
    }


def validate_body(body: Any, schema: type, required: tuple[str, ...] = ()) -> None:
    """Raise `InvalidRequestError` (param = the path) unless `body` is valid for `schema`."""
    if not isinstance(body, dict):
        raise InvalidRequestError(f"The request body must be a JSON object, but got {_json_kind(body)}.", param=None)
    try:
        _check_typeddict(body, schema, "", 0)
    except _Problem as problem:
        raise InvalidRequestError(problem.message, param=problem.path, code=problem.code) from None
    for key in required:
        if key not in body:
            raise InvalidRequestError(f"Missing required parameter: '{key}'.", param=key,
                                      code="missing_required_parameter")


def validate_create_request(body: Any) -> None:
    """Raise `InvalidRequestError` (param = the path) unless `body` is a valid `POST /v1/responses` request."""
    validate_body(body, request_schema(), required=("model", "input"))
