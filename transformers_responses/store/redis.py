"""`redis://host:port/db` — the store several replicas share (also `rediss://` and `unix:///path.sock`).

`?prefix=NAME:` puts every key under NAME: instead of `trsp:`; the other query parameters go to `redis.asyncio.from_url`.
Needs the `redis` extra (`pip install 'transformers-responses[redis]'`) and a single Redis ≥ 6.2 (not Cluster: scripts
touch keys they derive from their arguments).

Keys (P = the prefix):

    P r:{id}         hash: response, request, meta (the immutable fields, JSON), owner, status, prev
    P i:{scope}      sorted set: item ids by position        P d:{scope}  hash: item id -> item JSON
    P x:{item_id}    set: the scopes holding that item (find_item's index; stale members are dropped when seen)
    P e:{id}         stream of events, entry id `0-{sequence_number + 1}`
    P c:{id}         conversation JSON                        P hb:{owner}  heartbeat, expires after HEARTBEAT_TTL
    P unfinished     set of queued/in-progress response ids   P expiry      sorted set: id by expires_at
    P cancel         pub/sub channel of response ids to stop

A response, its two item scopes and its event stream expire together (`PEXPIREAT`), so expired responses read as missing
without a purge; `purge_expired` only drops the bookkeeping of those gone. Every multi-key write is a Lua script, hence
atomic: the compare-and-set of a status, `chain` (one round trip), paging, `find_item`.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .base import (
    DEFAULT_TTL, HEARTBEAT_TTL, ORPHAN_ERROR, UNFINISHED, Json, Page, ResponseRecord, ResponseStore, orphan_event,
    output_scope, owner_alive,
)

DEFAULT_PREFIX = "trsp:"
MAX_CHAIN = 10_000

# Helpers shared by the scripts (Redis scripts cannot call one another, so each one carries this prelude).
# ARGV[1] is always the key prefix; `exp` is an absolute expiry in ms, 0 for none.
_PRELUDE = """
local P = ARGV[1]
local function expire(key, exp)
  if exp > 0 then redis.call('PEXPIREAT', key, exp) end
end
local function index_add(scope, id, exp, now)
  local k = P .. 'x:' .. id
  local ttl = redis.call('PTTL', k)
  redis.call('SADD', k, scope)
  if exp <= 0 then redis.call('PERSIST', k)
  elseif ttl == -2 or (ttl >= 0 and ttl < exp - now) then redis.call('PEXPIREAT', k, exp) end
end
local function clear_scope(scope)
  local d = P .. 'd:' .. scope
  for _, id in ipairs(redis.call('HKEYS', d)) do redis.call('SREM', P .. 'x:' .. id, scope) end
  redis.call('DEL', d, P .. 'i:' .. scope)
end
local function append_scope(scope, ids, datas, exp, now)
  local i, d = P .. 'i:' .. scope, P .. 'd:' .. scope
  local top = redis.call('ZREVRANGE', i, 0, 0, 'WITHSCORES')
  local pos = 0
  if #top > 0 then pos = tonumber(top[2]) + 1 end
  for n = 1, #ids do
    if redis.call('ZADD', i, 'NX', pos, ids[n]) == 1 then pos = pos + 1 end
    redis.call('HSET', d, ids[n], datas[n])
    index_add(scope, ids[n], exp, now)
  end
  expire(i, exp)
  expire(d, exp)
end
local function scope_expiry(scope, now)
  local base = string.match(scope, '^([^/]*)')
  local ttl = redis.call('PTTL', P .. 'r:' .. base)
  if ttl > 0 then return now + ttl end
  return 0
end
-- read `count` (id, data) pairs from ARGV starting at `at`; returns ids, datas, next index
local function pairs_from(at, count)
  local ids, datas = {}, {}
  for n = 0, count - 1 do
    ids[#ids + 1] = ARGV[at + 2 * n]
    datas[#datas + 1] = ARGV[at + 2 * n + 1]
  end
  return ids, datas, at + 2 * count
end
local function set_unfinished(id, status)
  if status == 'queued' or status == 'in_progress' then redis.call('SADD', P .. 'unfinished', id)
  else redis.call('SREM', P .. 'unfinished', id) end
end
"""

# ARGV: P, now, id, exp, response, request, meta, owner, status, prev, n_input (-1: keep), inputs.., n_out (-1), outs..
_PUT = _PRELUDE + """
local now, id, exp = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local r = P .. 'r:' .. id
redis.call('DEL', r)
redis.call('HSET', r, 'response', ARGV[5], 'request', ARGV[6], 'meta', ARGV[7], 'owner', ARGV[8], 'status', ARGV[9],
           'prev', ARGV[10])
expire(r, exp)
set_unfinished(id, ARGV[9])
if exp > 0 then redis.call('ZADD', P .. 'expiry', exp, id) else redis.call('ZREM', P .. 'expiry', id) end
local at = 11
for _, scope in ipairs({id, id .. '/output'}) do
  local count = tonumber(ARGV[at])
  if count >= 0 then
    local ids, datas
    ids, datas, at = pairs_from(at + 1, count)
    clear_scope(scope)
    append_scope(scope, ids, datas, exp, now)
  else
    at = at + 1
    -- items added before the response was stored follow its expiry too
    for _, item in ipairs(redis.call('HKEYS', P .. 'd:' .. scope)) do index_add(scope, item, exp, now) end
    expire(P .. 'i:' .. scope, exp)
    expire(P .. 'd:' .. scope, exp)
  end
end
expire(P .. 'e:' .. id, exp)
return 1
"""

# ARGV: P, now, id, response, status, owner, n_only (-1: unconditional), statuses.., n_out (-1), outs..
_UPDATE = _PRELUDE + """
local now, id = tonumber(ARGV[2]), ARGV[3]
local r = P .. 'r:' .. id
local current = redis.call('HGET', r, 'status')
if not current then return 0 end
local n_only = tonumber(ARGV[7])
if n_only >= 0 then
  local ok = false
  for n = 1, n_only do if ARGV[7 + n] == current then ok = true end end
  if not ok then return 0 end
end
redis.call('HSET', r, 'response', ARGV[4], 'status', ARGV[5], 'owner', ARGV[6])
set_unfinished(id, ARGV[5])
local at = 8 + math.max(n_only, 0)
local count = tonumber(ARGV[at])
if count >= 0 then
  local ids, datas = pairs_from(at + 1, count)
  local scope = id .. '/output'
  clear_scope(scope)
  append_scope(scope, ids, datas, scope_expiry(scope, now), now)
end
return 1
"""

# ARGV: P, id, max depth. Returns a flat list of (id, response, request, meta, owner) from `id` back to the oldest.
_CHAIN = """
local P, id, left = ARGV[1], ARGV[2], tonumber(ARGV[3])
local out = {}
while id and id ~= '' and left > 0 do
  local row = redis.call('HMGET', P .. 'r:' .. id, 'response', 'request', 'meta', 'owner', 'prev')
  if not row[1] then break end
  out[#out + 1] = id
  for n = 1, 4 do out[#out + 1] = row[n] end
  id = row[5]
  left = left - 1
end
return out
"""

# ARGV: P, now, scope, n, pairs..
_ADD = _PRELUDE + """
local now, scope = tonumber(ARGV[2]), ARGV[3]
local ids, datas = pairs_from(5, tonumber(ARGV[4]))
append_scope(scope, ids, datas, scope_expiry(scope, now), now)
return 1
"""

# ARGV: P, scope, limit, desc (1/0), after ('' for none). Returns {has_more, data..}.
_LIST = """
local P, scope, limit, desc, after = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1', ARGV[5]
local i = P .. 'i:' .. scope
local start = 0
if after ~= '' then
  local rank
  if desc then rank = redis.call('ZREVRANK', i, after) else rank = redis.call('ZRANK', i, after) end
  if not rank then return {0} end
  start = rank + 1
end
local ids
if desc then ids = redis.call('ZREVRANGE', i, start, start + limit) else ids = redis.call('ZRANGE', i, start, start + limit) end
local more = 0
if #ids > limit then more = 1; table.remove(ids) end
if #ids == 0 then return {more} end
local out = redis.call('HMGET', P .. 'd:' .. scope, unpack(ids))
table.insert(out, 1, more)
return out
"""

# ARGV: P, item id
_FIND = """
local P, id = ARGV[1], ARGV[2]
local k = P .. 'x:' .. id
for _, scope in ipairs(redis.call('SMEMBERS', k)) do
  local data = redis.call('HGET', P .. 'd:' .. scope, id)
  if data then return data end
  redis.call('SREM', k, scope)  -- the scope expired: drop the stale entry
end
return false
"""

# ARGV: P, scope, item id
_DELETE_ITEM = """
local P, scope, id = ARGV[1], ARGV[2], ARGV[3]
redis.call('ZREM', P .. 'i:' .. scope, id)
redis.call('SREM', P .. 'x:' .. id, scope)
return redis.call('HDEL', P .. 'd:' .. scope, id)
"""

# ARGV: P, id
_DELETE = _PRELUDE + """
local id = ARGV[2]
local existed = redis.call('DEL', P .. 'r:' .. id)
clear_scope(id)
clear_scope(id .. '/output')
redis.call('DEL', P .. 'e:' .. id)
redis.call('SREM', P .. 'unfinished', id)
redis.call('ZREM', P .. 'expiry', id)
return existed
"""

# ARGV: P, now, id, fallback expiry, n, (seq, data)..  Events at or below the last stored sequence number are skipped
# (stream ids must grow), so a retried append is harmless.
_APPEND = _PRELUDE + """
local now, id, fallback = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local s = P .. 'e:' .. id
if redis.call('EXISTS', P .. 'r:' .. id) == 0 then return 0 end  -- deleted: a late writer adds nothing
local last = -1
local top = redis.call('XREVRANGE', s, '+', '-', 'COUNT', 1)
if #top > 0 then last = tonumber(string.match(top[1][1], '-(%d+)$')) - 1 end
local seqs, datas = pairs_from(6, tonumber(ARGV[5]))
for n = 1, #seqs do
  local seq = tonumber(seqs[n])
  if seq > last then
    redis.call('XADD', s, '0-' .. (seq + 1), 'd', datas[n])
    last = seq
  end
end
local ttl = redis.call('PTTL', P .. 'r:' .. id)
if ttl > 0 then redis.call('PEXPIRE', s, ttl) elseif ttl == -2 then expire(s, fallback) end
return 1
"""

# ARGV: P, id, conversation JSON, n, pairs..
_CREATE_CONVERSATION = _PRELUDE + """
local id = ARGV[2]
redis.call('SET', P .. 'c:' .. id, ARGV[3])
clear_scope(id)
local ids, datas = pairs_from(5, tonumber(ARGV[4]))
append_scope(id, ids, datas, 0, 0)
return 1
"""

# ARGV: P, id
_DELETE_CONVERSATION = _PRELUDE + """
local id = ARGV[2]
clear_scope(id)
return redis.call('DEL', P .. 'c:' .. id)
"""


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _flat(items: Sequence[Json] | None) -> list[Any]:
    """`[count, id1, json1, id2, json2, …]` for the scripts; `[-1]` for None (leave the scope as it is)."""
    if items is None:
        return [-1]
    out: list[Any] = [len(items)]
    for item in items:
        out += [item["id"], _dumps(item)]
    return out


def _output(response: Json) -> list[Json] | None:
    if response.get("status") in UNFINISHED:
        return None
    return [i for i in response.get("output") or [] if "id" in i]


def _ms(seconds: float | None) -> int:
    return 0 if seconds is None else max(1, int(seconds * 1000))


def split_url(url: str) -> tuple[str, str]:
    """(the URL for `redis.asyncio.from_url`, the key prefix) — `prefix` is ours, not a connection option."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefix = next((v for k, v in query if k == "prefix"), DEFAULT_PREFIX)
    rest = urlencode([(k, v) for k, v in query if k != "prefix"])
    return urlunsplit(parts._replace(query=rest)), prefix


class RedisStore(ResponseStore):
    schemes = ("redis",)
    shared = True

    def __init__(self, url: str, *, ttl: float | None = DEFAULT_TTL) -> None:
        super().__init__(url, ttl=ttl)
        try:
            import redis.asyncio as aioredis
        except ImportError as exc:
            from ..errors import ConfigurationError

            raise ConfigurationError("The redis response store needs the `redis` package: "
                                     "pip install 'transformers-responses[redis]'") from exc
        self._connect_url, self.prefix = split_url(url)
        self._client = aioredis.from_url(self._connect_url, decode_responses=True)
        self._scripts = {name: self._client.register_script(source) for name, source in {
            "put": _PUT, "update": _UPDATE, "chain": _CHAIN, "add": _ADD, "list": _LIST, "find": _FIND,
            "delete_item": _DELETE_ITEM, "delete": _DELETE, "append": _APPEND,
            "create_conversation": _CREATE_CONVERSATION, "delete_conversation": _DELETE_CONVERSATION}.items()}

    def _key(self, kind: str, name: str = "") -> str:
        return f"{self.prefix}{kind}{name}"

    async def _script(self, name: str, *args: Any) -> Any:
        return await self._scripts[name](keys=[], args=[self.prefix, *args])

    async def start(self) -> None:
        await self._client.ping()  # fail at start-up, not on the first request

    async def close(self) -> None:
        await self._client.aclose()

    # ---- responses ----

    async def put_response(self, record: ResponseRecord, input_items: Sequence[Json] | None = None) -> None:
        if record.expires_at is None and self.ttl is not None:
            record.expires_at = self.expiry()
        meta = {"previous_response_id": record.previous_response_id, "conversation_id": record.conversation_id,
                "created_at": record.created_at, "expires_at": record.expires_at}
        await self._script("put", _ms(time.time()), record.id, _ms(record.expires_at), _dumps(record.response),
                           _dumps(record.request), _dumps(meta), record.owner or "", record.status,
                           record.previous_response_id or "", *_flat(input_items), *_flat(_output(record.response)))

    @staticmethod
    def _record(response_id: str, response: str, request: str, meta: str, owner: str | None) -> ResponseRecord:
        return ResponseRecord(id=response_id, response=json.loads(response), request=json.loads(request),
                              owner=owner or None, **json.loads(meta))

    async def get_response(self, response_id: str) -> ResponseRecord | None:
        row = await self._client.hmget(self._key("r:", response_id), ["response", "request", "meta", "owner"])
        return self._record(response_id, *row) if row[0] is not None else None

    async def update_response(self, response_id: str, response: Json, *,
                              only_if_status: Sequence[str] | None = None, owner: str | None = None) -> bool:
        only = [-1] if only_if_status is None else [len(only_if_status), *only_if_status]
        return bool(await self._script("update", _ms(time.time()), response_id, _dumps(response),
                                       str(response.get("status")), owner or "", *only, *_flat(_output(response))))

    async def delete_response(self, response_id: str) -> bool:
        return bool(await self._script("delete", response_id))

    async def chain(self, response_id: str) -> list[ResponseRecord]:
        flat = await self._script("chain", response_id, MAX_CHAIN)
        records = [self._record(*flat[n:n + 5]) for n in range(0, len(flat), 5)]
        return records[::-1]

    # ---- items ----

    async def add_items(self, scope: str, items: Sequence[Json]) -> None:
        if items:
            await self._script("add", _ms(time.time()), scope, *_flat(items))

    async def list_items(self, scope: str, *, limit: int = 20, order: str = "desc", after: str | None = None) -> Page:
        if limit <= 0:
            return Page([], False)
        reply = await self._script("list", scope, limit, "1" if order == "desc" else "0", after or "")
        return Page([json.loads(d) for d in reply[1:] if d is not None], bool(reply[0]))

    async def get_item(self, scope: str, item_id: str) -> Json | None:
        data = await self._client.hget(self._key("d:", scope), item_id)
        return json.loads(data) if data is not None else None

    async def find_item(self, item_id: str) -> Json | None:
        data = await self._script("find", item_id)
        return json.loads(data) if data is not None else None

    async def delete_item(self, scope: str, item_id: str) -> bool:
        return bool(await self._script("delete_item", scope, item_id))

    # ---- events ----

    async def append_events(self, response_id: str, events: Sequence[Json]) -> None:
        flat: list[Any] = [len(events)]
        for event in events:
            flat += [event["sequence_number"], _dumps(event)]
        await self._script("append", _ms(time.time()), response_id, _ms(self.expiry()), *flat)

    async def read_events(self, response_id: str, after: int = -1, *, wait: float = 0.0) -> list[Json]:
        # XREAD answers at once when entries past the id exist; with BLOCK it otherwise waits for the next XADD.
        streams = {self._key("e:", response_id): f"0-{max(after + 1, 0)}"}
        block = max(1, int(wait * 1000)) if wait > 0 else None  # BLOCK 0 would wait forever
        reply = await self._client.xread(streams, block=block)
        if not reply:
            return []
        entries = reply[0][1] if isinstance(reply, list) else next(iter(reply.values()))[0]
        return [json.loads(fields["d"]) for _, fields in entries]

    # ---- cancels and liveness ----

    async def publish_cancel(self, response_id: str) -> None:
        await self._client.publish(self._key("cancel"), response_id)

    async def cancel_requests(self) -> AsyncIterator[str]:  # type: ignore[override]
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(self._key("cancel"))
            while True:
                message = await pubsub.get_message(timeout=1.0)
                if message is not None and message.get("type") == "message":
                    yield str(message["data"])
        finally:
            await pubsub.aclose()

    async def heartbeat(self, owner: str) -> None:
        await self._client.set(self._key("hb:", owner), "1", px=_ms(HEARTBEAT_TTL))

    async def fail_orphans(self, error: Json = ORPHAN_ERROR) -> list[str]:
        failed: list[str] = []
        now = time.time()
        beats: dict[str, float | None] = {}
        for response_id in sorted(await self._client.smembers(self._key("unfinished"))):
            response_text, status, owner = await self._client.hmget(
                self._key("r:", response_id), ["response", "status", "owner"])
            if status not in UNFINISHED:  # expired (None) or finished: drop the stale entry
                await self._client.srem(self._key("unfinished"), response_id)
                continue
            if owner:
                if owner not in beats:
                    ttl = await self._client.pttl(self._key("hb:", owner))
                    beats[owner] = now + ttl / 1000 if ttl > 0 else None
                if owner_alive(owner, beats[owner], now):
                    continue
            response = {**json.loads(response_text), "status": "failed", "error": error}
            # The compare-and-set loses if the owner finished it (or a peer failed it) since we read it.
            if not await self.update_response(response_id, response, only_if_status=UNFINISHED, owner=None):
                continue
            last = await self._client.xrevrange(self._key("e:", response_id), count=1)
            if last:
                await self.append_events(response_id, [orphan_event(response, [json.loads(last[0][1]["d"])])])
            failed.append(response_id)
        return failed

    # ---- conversations ----

    async def create_conversation(self, conversation: Json, items: Sequence[Json] = ()) -> None:
        await self._script("create_conversation", conversation["id"], _dumps(conversation), *_flat(items))

    async def get_conversation(self, conversation_id: str) -> Json | None:
        data = await self._client.get(self._key("c:", conversation_id))
        return json.loads(data) if data is not None else None

    async def update_conversation(self, conversation_id: str, metadata: Json) -> Json | None:
        conversation = await self.get_conversation(conversation_id)
        if conversation is None:
            return None
        conversation["metadata"] = dict(metadata)
        # XX: a conversation deleted meanwhile stays deleted.
        if not await self._client.set(self._key("c:", conversation_id), _dumps(conversation), xx=True):
            return None
        return conversation

    async def delete_conversation(self, conversation_id: str) -> bool:
        return bool(await self._script("delete_conversation", conversation_id))

    # ---- retention ----

    async def purge_expired(self) -> int:
        """Redis has already dropped expired responses with their items and events; forget them here too."""
        now = _ms(time.time())
        ids = await self._client.zrangebyscore(self._key("expiry"), "-inf", now)
        if not ids:
            return 0
        for response_id in ids:
            # Mostly gone already; this also settles an expiry racing our clock and drops the bookkeeping.
            await self._script("delete", response_id)
        return len(ids)
