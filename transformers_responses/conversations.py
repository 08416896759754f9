"""The Conversations API: `/v1/conversations` and its items, over the response store.

A conversation is `{id, object: "conversation", created_at, metadata}` plus an ordered list of items. Items are
stored in their full form (`items.stored_item`: typed, with ids); `responses.create(conversation=…)` reads them all
as context and appends that turn's input and output (`state.State.commit`). Conversations do not expire.
"""


from typing import Any

from . import events as ev
from .errors import InvalidRequestError, NotFoundError
from .fields import check_metadata
from .items import stored_items
from .state import State

Json = dict[str, Any]

MAX_ITEMS_PER_CALL = 20


def _check_items(items: list[Json] | None) -> None:
    if items is not None and len(items) > MAX_ITEMS_PER_CALL:
        raise InvalidRequestError(f"Invalid 'items': at most {MAX_ITEMS_PER_CALL} items can be added at a time, but "
                                  f"got {len(items)}.", param="items", code="array_above_max_length")


def build_conversations_router(state: State) -> Any:
    from fastapi import APIRouter, Request
    from fastapi.responses import JSONResponse

    from .routes import error_response, include_params, list_params, read_json
    from .validation import conversation_schemas, validate_body

    router = APIRouter()
    store = state.store
    schemas = conversation_schemas()

    async def conversation(conversation_id: str) -> Json:
        conv = await store.get_conversation(conversation_id)
        if conv is None:
            raise NotFoundError(f"Conversation with id '{conversation_id}' not found.", param="conversation_id")
        return conv

    async def new_items(items: list[Json]) -> list[Json]:
        return stored_items(await state.resolve_references(items, path="items"))

    @router.post("/v1/conversations")
    async def create(request: Request) -> Any:
        try:
            body = await read_json(request)
            validate_body(body, schemas["create"])
            check_metadata(body.get("metadata"))
            _check_items(body.get("items"))
            conv = {"id": ev.new_id("conv"), "object": "conversation", "created_at": ev.now(),
                    "metadata": body.get("metadata") or {}}
            await store.create_conversation(conv, await new_items(body.get("items") or []))
        except Exception as exc:
            return error_response(exc)
        return JSONResponse(conv)

    @router.get("/v1/conversations/{conversation_id}")
    async def retrieve(conversation_id: str) -> Any:
        try:
            return JSONResponse(await conversation(conversation_id))
        except Exception as exc:
            return error_response(exc)

    @router.post("/v1/conversations/{conversation_id}")
    async def update(conversation_id: str, request: Request) -> Any:
        try:
            body = await read_json(request)
            validate_body(body, schemas["update"], required=("metadata",))
            check_metadata(body["metadata"])
            await conversation(conversation_id)
            updated = await store.update_conversation(conversation_id, body["metadata"] or {})
            if updated is None:
                await conversation(conversation_id)  # deleted meanwhile: answer 404
        except Exception as exc:
            return error_response(exc)
        return JSONResponse(updated)

    @router.delete("/v1/conversations/{conversation_id}")
    async def delete(conversation_id: str) -> Any:
        try:
            await conversation(conversation_id)
            await store.delete_conversation(conversation_id)
        except Exception as exc:
            return error_response(exc)
        return JSONResponse({"id": conversation_id, "object": "conversation.deleted", "deleted": True})

    @router.get("/v1/conversations/{conversation_id}/items")
    async def list_items(conversation_id: str, request: Request) -> Any:
        try:
            params = list_params(request)
            include_params(request)
            await conversation(conversation_id)
            page = await store.list_items(conversation_id, **params)
        except Exception as exc:
            return error_response(exc)
        return JSONResponse(page.body())

    @router.post("/v1/conversations/{conversation_id}/items")
    async def add_items(conversation_id: str, request: Request) -> Any:
        try:
            include_params(request)
            body = await read_json(request)
            validate_body(body, schemas["items"], required=("items",))
            _check_items(body["items"])
            await conversation(conversation_id)
            items = await new_items(body["items"])
            await store.add_items(conversation_id, items)
        except Exception as exc:
            return error_response(exc)
        return JSONResponse({"object": "list", "data": items, "first_id": items[0]["id"] if items else None,
                             "last_id": items[-1]["id"] if items else None, "has_more": False})

    @router.get("/v1/conversations/{conversation_id}/items/{item_id}")
    async def get_item(conversation_id: str, item_id: str, request: Request) -> Any:
        try:
            include_params(request)
            await conversation(conversation_id)
            item = await store.get_item(conversation_id, item_id)
            if item is None:
                raise NotFoundError(f"Item with id '{item_id}' not found in conversation '{conversation_id}'.",
                                    param="item_id")
        except Exception as exc:
            return error_response(exc)
        return JSONResponse(item)

    @router.delete("/v1/conversations/{conversation_id}/items/{item_id}")
    async def delete_item(conversation_id: str, item_id: str) -> Any:
        try:
            conv = await conversation(conversation_id)
            if not await store.delete_item(conversation_id, item_id):
                raise NotFoundError(f"Item with id '{item_id}' not found in conversation '{conversation_id}'.",
                                    param="item_id")
        except Exception as exc:
            return error_response(exc)
        return JSONResponse(conv)

    return router
