"""Contract tests of `ResponseStore` (store/base.py), run on every built-in backend: memory, SQLite (a file in tmp_path)
and Redis (a real redis-server, one key prefix per test); then what only one backend promises (SQLite across reopen and
processes, Redis across instances, the memory LRU bound)."""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from transformers_responses.store import open_store
from transformers_responses.store.base import (
    DEFAULT_TTL, ORPHAN_ERROR, _pid_namespace, ResponseRecord, ResponseStore, new_owner, output_scope,
)
from transformers_responses.store.memory import MemoryStore
from transformers_responses.store.redis import RedisStore, split_url
from transformers_responses.store.sqlite import SqliteStore, path_from_url

T = TypeVar("T")
DEAD_OWNER = f"{socket.gethostname()}:999999:dead:{_pid_namespace()}"  # this host, a pid that does not exist


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return f"{request.getfixturevalue('redis_url')}?prefix=t{uuid.uuid4().hex[:10]}:"


def run(url: str, body: Callable[[ResponseStore], Awaitable[T]], *, ttl: float | None = DEFAULT_TTL) -> T:
    """Open and start the store for `url`, run `body` on it in a fresh event loop, close it."""
    async def main() -> T:
        store = open_store(url, ttl=ttl)
        await store.start()
        try:
            return await body(store)
        finally:
            await store.close()

    return asyncio.run(main())


def record(rid: str, status: str = "completed", *, prev: str | None = None, owner: str | None = None,
           output: list[dict[str, Any]] | None = None, **extra: Any) -> ResponseRecord:
    response = {"id": rid, "object": "response", "status": status, "output": output or []}
    return ResponseRecord(id=rid, response=response, request={"model": "m", "store": True}, previous_response_id=prev,
                          owner=owner, **extra)


def msg(item_id: str, text: str = "hi", role: str = "user") -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


def ids(items: list[dict[str, Any]]) -> list[str]:
    return [i["id"] for i in items]


# ---- responses ----

def test_put_get_round_trip(store_url: str) -> None:
    async def body(store: ResponseStore) -> None:
        rec = record("resp_1", output=[msg("msg_out", "hello", "assistant")], conversation_id="conv_1",
                     owner="host:1:x")
        await store.put_response(rec, [msg("msg_a"), msg("msg_b")])
        got = await store.get_response("resp_1")
        assert got is not None and got.to_json() == rec.to_json()
        assert got.expires_at is not None and got.expires_at > time.time() + DEFAULT_TTL - 60
        assert ids(await store.all_items("resp_1")) == ["msg_a", "msg_b"]
        assert await store.all_items(output_scope("resp_1")) == [msg("msg_out", "hello", "assistant")]
        assert await store.get_response("resp_missing") is None
        # Replacing without input items keeps the input scope.
        await store.put_response(record("resp_1", "incomplete"))
        assert (await store.get_response("resp_1")).status == "incomplete"  # type: ignore[union-attr]
        assert ids(await store.all_items("resp_1")) == ["msg_a", "msg_b"]

    run(store_url, body)


def test_expired_reads_as_missing_and_is_purged(store_url: str) -> None:
    async def body(store: ResponseStore) -> None:
        await store.put_response(record("resp_old", output=[msg("msg_old_out")], expires_at=time.time() - 5),
                                 [msg("msg_old_in")])
        await store.append_events("resp_old", [{"type": "response.created", "sequence_number": 0}])
        await store.put_response(record("resp_kept", expires_at=time.time() + 3600))
        # Missing before any purge (the memory store drops them as it reads them: no exact purge count here).
        assert await store.get_response("resp_old") is None
        assert await store.chain("resp_old") == []
        assert await store.find_item("msg_old_in") is None
        assert await store.find_item("msg_old_out") is None
        assert await store.purge_expired() in (0, 1)
        assert await store.all_items("resp_old") == []
        assert await store.all_items(output_scope("resp_old")) == []
        assert await store.read_events("resp_old") == []

        await store.put_response(record("resp_a"), [msg("msg_a")])
        await store.put_response(record("resp_b"))
        await store.append_events("resp_b", [{"type": "response.created", "sequence_number": 0}])
        await asyncio.sleep(0.5)  # past the store's 0.3 s ttl
        assert await store.purge_expired() == 2
        assert await store.purge_expired() == 0
        assert await store.get_response("resp_a") is None and await store.find_item("msg_a") is None
        assert await store.all_items("resp_a") == [] and await store.read_events("resp_b") == []
        assert await store.get_response("resp_kept") is not None

    run(store_url, body, ttl=0.3)


def test_no_ttl_never_expires(store_url: str) -> None:
    async def body(store: ResponseStore) -> None:
        await store.put_response(record("resp_forever"))
        got = await store.get_response("resp_forever")
        assert got is not None and got.expires_at is None
        assert await store.purge_expired() == 0

    run(store_url, body, ttl=None)


def test_update_response_compare_and_set(store_url: str) -> None:
    async def body(store: ResponseStore) -> None:
        await store.put_response(record("resp_1", "in_progress", owner="host:1:a"))
        assert await store.all_items(output_scope("resp_1")) == []
        done = {"id": "resp_1", "object": "response", "status": "completed", "output": [msg("msg_o", "x", "assistant")]}
        assert not await store.update_response("resp_1", done, only_if_status=("queued",))
        assert (await store.get_response("resp_1")).status == "in_progress"  # type: ignore[union-attr]
        assert await store.update_response("resp_1", done, only_if_status=("queued", "in_progress"))
        got = await store.get_response("resp_1")
        assert got is not None and got.status == "completed" and got.owner is None
        assert got.request == {"model": "m", "store": True}
        assert ids(await store.all_items(output_scope("resp_1"))) == ["msg_o"]
        assert await store.update_response("resp_1", {**done, "status": "failed"})  # unconditional
        assert not await store.update_response("resp_missing", done)

        # Two racing compare-and-sets: exactly one wins, every time.
        for n in range(5):
            rid = f"resp_race{n}"
            await store.put_response(record(rid, "in_progress"))
            results = await asyncio.gather(*(
                store.update_response(rid, {"id": rid, "status": status, "output": []},
                                      only_if_status=("in_progress",)) for status in ("completed", "cancelled")))
            assert sorted(results) == [False, True]
            stored = await store.get_response(rid)
            assert stored is not None and stored.status == ("completed" if results[0] else "cancelled")

    run(store_url, body)


def test_concurrent_tasks(store_url: str) -> None:
    async def body(store: ResponseStore) -> None:
        await asyncio.gather(*(store.put_response(record(f"resp_{n}"), [msg(f"msg_{n}")]) for n in range(50)))
        got = await asyncio.gather(*(store.get_response(f"resp_{n}") for n in range(50)))
        assert [g.id for g in got if g is not None] == [f"resp_{n}" for n in range(50)]
        await asyncio.gather(*(store.add_items("conv_c", [msg(f"msg_c{n}")]) for n in range(30)))
        assert sorted(ids(await store.all_items("conv_c"))) == sorted(f"msg_c{n}" for n in range(30))

    run(store_url, body)


def test_delete_response_removes_items_and_events(store_url: str) -> None:
    async def body(store: ResponseStore) -> None:
        await store.put_response(record("resp_1", output=[msg("msg_o", "x", "assistant")]), [msg("msg_i")])
        await store.append_events("resp_1", [{"type": "response.created", "sequence_number": 0}])
        assert await store.delete_response("resp_1")
        assert await store.get_response("resp_1") is None
        assert await store.all_items("resp_1") == []
        assert await store.all_items(output_scope("resp_1")) == []
        assert await store.read_events("resp_1") == []
        assert await store.find_item("msg_i") is None and await store.find_item("msg_o") is None
        assert not await store.delete_response("resp_1")
        # A background writer still running after the DELETE leaves nothing behind.
        await store.append_events("resp_1", [{"type": "response.output_text.delta", "sequence_number": 1}])
        assert await store.read_events("resp_1") == []

    run(store_url, body)


def test_chain(store_url: str) -> None:
    async def body(store: ResponseStore) -> None:
        prev = None
        for n in range(5):
            await store.put_response(record(f"resp_{n}", prev=prev))
            prev = f"resp_{n}"
        assert [r.id for r in await store.chain("resp_4")] == [f"resp_{n}" for n in range(5)]
        assert [r.id for r in await store.chain("resp_0")] == ["resp_0"]
        chained = await store.chain("resp_2")
        assert chained[-1].to_json() == (await store.get_response("resp_2")).to_json()  # type: ignore[union-attr]
        assert await store.delete_response("resp_1")
        assert [r.id for r in await store.chain("resp_4")] == ["resp_2", "resp_3", "resp_4"]
        assert await store.chain("resp_1") == []
        assert await store.chain("resp_missing") == []
        await store.put_response(record("resp_orphan", prev="resp_never_stored"))
        assert [r.id for r in await store.chain("resp_orphan")] == ["resp_orphan"]

    run(store_url, body)


# ---- items ----

def test_items_pagination(store_url: str) -> None:
    async def body(store: ResponseStore) -> None:
        await store.add_items("conv_p", [msg(f"msg_{n}") for n in range(3)])
        await store.add_items("conv_p", [msg(f"msg_{n}") for n in range(3, 5)])  # appended after those there
        await store.add_items("conv_p", [])
        page = await store.list_items("conv_p", limit=2, order="asc")
        assert ids(page.data) == ["msg_0", "msg_1"] and page.has_more
        assert page.body() == {"object": "list", "data": page.data, "first_id": "msg_0", "last_id": "msg_1",
                               "has_more": True}
        page = await store.list_items("conv_p", limit=2, order="asc", after="msg_1")
        assert ids(page.data) == ["msg_2", "msg_3"] and page.has_more
        page = await store.list_items("conv_p", limit=2, order="asc", after="msg_3")
        assert ids(page.data) == ["msg_4"] and not page.has_more
        page = await store.list_items("conv_p", limit=3)  # desc by default
        assert ids(page.data) == ["msg_4", "msg_3", "msg_2"] and page.has_more
        page = await store.list_items("conv_p", limit=3, order="desc", after="msg_2")
        assert ids(page.data) == ["msg_1", "msg_0"] and not page.has_more
        page = await store.list_items("conv_p", limit=5, order="asc")
        assert len(page.data) == 5 and not page.has_more
        empty = await store.list_items("conv_p", after="msg_0")
        assert empty.data == [] and not empty.has_more
        assert empty.body() == {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}
        assert (await store.list_items("conv_p", after="msg_unknown")).data == []
        assert (await store.list_items("conv_none")).data == []

        assert await store.get_item("conv_p", "msg_2") == msg("msg_2")
        assert await store.get_item("conv_p", "msg_9") is None
        assert await store.delete_item("conv_p", "msg_2")
        assert not await store.delete_item("conv_p", "msg_2")
        assert ids(await store.all_items("conv_p")) == ["msg_0", "msg_1", "msg_3", "msg_4"]
        await store.add_items("conv_p", [msg("msg_1", "edited")])  # an id already there keeps its place
        assert ids(await store.all_items("conv_p")) == ["msg_0", "msg_1", "msg_3", "msg_4"]
        assert await store.get_item("conv_p", "msg_1") == msg("msg_1", "edited")

    run(store_url, body)


def test_find_item(store_url: str) -> None:
    async def body(store: ResponseStore) -> None:
        await store.put_response(record("resp_1", output=[msg("msg_out", "o", "assistant")]), [msg("msg_in")])
        await store.create_conversation({"id": "conv_1", "object": "conversation", "created_at": 1, "metadata": {}},
                                        [msg("msg_conv")])
        await store.add_items("conv_1", [msg("msg_out", "o", "assistant")])  # output appended to its conversation
        assert await store.find_item("msg_in") == msg("msg_in")
        assert await store.find_item("msg_out") == msg("msg_out", "o", "assistant")
        assert await store.find_item("msg_conv") == msg("msg_conv")
        assert await store.find_item("msg_nowhere") is None
        assert await store.delete_response("resp_1")
        assert await store.find_item("msg_in") is None
        assert await store.find_item("msg_out") is not None  # still in the conversation
        assert await store.delete_conversation("conv_1")
        assert await store.find_item("msg_out") is None and await store.find_item("msg_conv") is None

    run(store_url, body)


# ---- events ----

def test_events(store_url: str) -> None:
    async def body(store: ResponseStore) -> None:
        await store.put_response(record("resp_bg", "in_progress"))
        events = [{"type": f"e{n}", "sequence_number": n} for n in range(3)]
        await store.append_events("resp_bg", events[:2])
        await store.append_events("resp_bg", events[2:])
        assert await store.read_events("resp_bg") == events
        assert await store.read_events("resp_bg", 1) == events[2:]
        assert await store.read_events("resp_bg", 2) == []
        assert await store.read_events("resp_none", wait=0.1) == []

        late = {"type": "e3", "sequence_number": 3}

        async def append_later() -> None:
            await asyncio.sleep(0.3)
            await store.append_events("resp_bg", [late])

        start = time.monotonic()
        read, _ = await asyncio.gather(store.read_events("resp_bg", 2, wait=10), append_later())
        assert read == [late] and time.monotonic() - start < 3

    run(store_url, body)


# ---- cancels and liveness ----

async def receive_cancel(listener: ResponseStore, publisher: ResponseStore, response_id: str) -> str:
    """Iterate `listener.cancel_requests()` while `publisher` publishes (repeatedly: a subscription has no "ready"
    signal, so the first publish may precede it); the first id received."""
    iterator = listener.cancel_requests()
    task = asyncio.ensure_future(iterator.__anext__())
    try:
        for _ in range(100):
            await publisher.publish_cancel(response_id)
            done, _ = await asyncio.wait({task}, timeout=0.1)
            if done:
                return task.result()
        raise AssertionError("no cancel received")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await iterator.aclose()


def test_cancel_requests(store_url: str) -> None:
    async def body(store: ResponseStore) -> None:
        assert await receive_cancel(store, store, "resp_c") == "resp_c"

    run(store_url, body)


def test_fail_orphans(store_url: str) -> None:
    async def body(store: ResponseStore) -> None:
        live = new_owner()
        await store.heartbeat(live)
        await store.put_response(record("resp_dead", "in_progress", owner=DEAD_OWNER))
        await store.append_events("resp_dead", [{"type": "response.created", "sequence_number": 0},
                                                {"type": "response.in_progress", "sequence_number": 1}])
        await store.put_response(record("resp_dead_quiet", "queued", owner=DEAD_OWNER))
        await store.put_response(record("resp_live", "in_progress", owner=live))
        await store.put_response(record("resp_done", "completed", owner=DEAD_OWNER))

        assert sorted(await store.fail_orphans()) == ["resp_dead", "resp_dead_quiet"]
        failed = await store.get_response("resp_dead")
        assert failed is not None and failed.status == "failed" and failed.response["error"] == ORPHAN_ERROR
        assert failed.owner is None
        log = await store.read_events("resp_dead")
        assert [e["sequence_number"] for e in log] == [0, 1, 2]
        assert log[-1]["type"] == "response.failed" and log[-1]["response"]["status"] == "failed"
        assert await store.read_events("resp_dead_quiet") == []  # no log, none started
        assert (await store.get_response("resp_live")).status == "in_progress"  # type: ignore[union-attr]
        assert (await store.get_response("resp_done")).status == "completed"  # type: ignore[union-attr]
        assert await store.fail_orphans() == []

    run(store_url, body)


# ---- conversations ----

def test_conversations(store_url: str) -> None:
    async def body(store: ResponseStore) -> None:
        conv = {"id": "conv_1", "object": "conversation", "created_at": 123, "metadata": {"topic": "a"}}
        await store.create_conversation(conv, [msg("msg_1"), msg("msg_2")])
        assert await store.get_conversation("conv_1") == conv
        assert ids(await store.all_items("conv_1")) == ["msg_1", "msg_2"]
        await store.add_items("conv_1", [msg("msg_3")])
        assert ids((await store.list_items("conv_1", limit=2)).data) == ["msg_3", "msg_2"]
        updated = await store.update_conversation("conv_1", {"topic": "b"})
        assert updated == {**conv, "metadata": {"topic": "b"}}
        assert await store.get_conversation("conv_1") == updated
        assert await store.update_conversation("conv_missing", {}) is None
        assert await store.get_conversation("conv_missing") is None
        assert await store.delete_conversation("conv_1")
        assert await store.get_conversation("conv_1") is None
        assert await store.all_items("conv_1") == []
        assert not await store.delete_conversation("conv_1")

    run(store_url, body)


# ---- SQLite only ----

def test_sqlite_url_forms(tmp_path: Path) -> None:
    assert path_from_url("sqlite:///abs/x.db") == Path("/abs/x.db")
    assert path_from_url("sqlite:////abs/x.db") == Path("/abs/x.db")
    assert path_from_url("sqlite:///abs/x.db?mode=rw") == Path("/abs/x.db")
    assert path_from_url("sqlite://rel/x.db") == Path("rel/x.db")
    from transformers_responses.errors import ConfigurationError

    with pytest.raises(ConfigurationError):
        path_from_url("sqlite:///:memory:")
    url = f"sqlite:///{tmp_path / 'deep' / 'er' / 'x.db'}"
    assert isinstance(open_store(url), SqliteStore)
    run(url, lambda store: store.put_response(record("resp_1")))
    assert (tmp_path / "deep" / "er" / "x.db").exists()


def test_sqlite_survives_reopening(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"

    async def write(store: ResponseStore) -> None:
        await store.put_response(record("resp_1"), [msg("msg_1")])
        await store.create_conversation({"id": "conv_1", "object": "conversation", "created_at": 1, "metadata": {}})

    async def read(store: ResponseStore) -> tuple[Any, ...]:
        return (await store.get_response("resp_1"), await store.all_items("resp_1"),
                await store.get_conversation("conv_1"))

    run(url, write)
    got, items, conv = run(url, read)
    assert got is not None and got.id == "resp_1" and ids(items) == ["msg_1"] and conv is not None


def _write_many(url: str, worker: int, count: int) -> None:
    async def body(store: ResponseStore) -> None:
        for n in range(count):
            await store.put_response(record(f"resp_{worker}_{n}"), [msg(f"msg_{worker}_{n}")])
            await store.add_items("conv_shared", [msg(f"msg_shared_{worker}_{n}")])

    run(url, body)


def test_sqlite_concurrent_processes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_write_many, args=(url, w, 200)) for w in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0

    async def check(store: ResponseStore) -> None:
        for w in range(4):
            got = await asyncio.gather(*(store.get_response(f"resp_{w}_{n}") for n in range(200)))
            assert all(g is not None for g in got)
        shared = await store.all_items("conv_shared")
        assert len(shared) == len(set(ids(shared))) == 800

    run(url, check)


def test_sqlite_cross_instance_signals(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"

    async def main() -> None:
        one, two = open_store(url), open_store(url)
        await one.start()
        await two.start()
        try:
            assert await receive_cancel(two, one, "resp_x") == "resp_x"  # through the cancels table
            await one.put_response(record("resp_bg", "in_progress"))
            event = {"type": "e", "sequence_number": 0}

            async def later() -> None:
                await asyncio.sleep(0.2)
                await one.append_events("resp_bg", [event])

            read, _ = await asyncio.gather(two.read_events("resp_bg", wait=5), later())
            assert read == [event]
        finally:
            await one.close()
            await two.close()

    asyncio.run(main())


# ---- Redis only ----

def test_redis_urls(redis_url: str) -> None:
    assert split_url("redis://h:1/0?prefix=app:") == ("redis://h:1/0", "app:")
    assert split_url("redis://h:1/2?prefix=p:&socket_timeout=5") == ("redis://h:1/2?socket_timeout=5", "p:")
    assert split_url("redis://h:1/0")[1] == "trsp:"
    for url in ("rediss://h:1/0", "unix:///tmp/redis.sock", "redis://h"):
        assert type(open_store(url)) is RedisStore
    assert RedisStore.shared


def test_redis_cross_instance(redis_url: str) -> None:
    url = f"{redis_url}?prefix=t{uuid.uuid4().hex[:10]}:"

    async def main() -> None:
        one, two = open_store(url), open_store(url)
        await one.start()
        await two.start()
        try:
            assert await receive_cancel(two, one, "resp_x") == "resp_x"
            await one.put_response(record("resp_bg", "in_progress"))
            event = {"type": "e", "sequence_number": 0}

            async def later() -> None:
                await asyncio.sleep(0.2)
                await one.append_events("resp_bg", [event])

            read, _ = await asyncio.gather(two.read_events("resp_bg", wait=5), later())
            assert read == [event]
            assert (await two.get_response("resp_bg")).status == "in_progress"  # type: ignore[union-attr]
        finally:
            await one.close()
            await two.close()

    asyncio.run(main())


# ---- memory only ----

def test_memory_lru_bound() -> None:
    async def body(store: ResponseStore) -> None:
        assert isinstance(store, MemoryStore) and store.max_responses == 3
        for n in range(3):
            await store.put_response(record(f"resp_{n}"), [msg(f"msg_{n}")])
        await store.get_response("resp_0")  # now the most recently used
        await store.put_response(record("resp_3"))
        assert await store.get_response("resp_1") is None
        assert await store.all_items("resp_1") == []
        assert [r is not None for r in await asyncio.gather(
            *(store.get_response(f"resp_{n}") for n in (0, 2, 3)))] == [True, True, True]

    run("memory://?max_responses=3", body)


def test_ttl_parsing_and_store_urls() -> None:
    from transformers_responses.errors import ConfigurationError
    from transformers_responses.store import backend_class, parse_ttl
    from transformers_responses.store.memory import MemoryStore

    assert parse_ttl("30d") == 30 * 86400 and parse_ttl("90") == 90 and parse_ttl("15m") == 900
    assert parse_ttl("0") is None and parse_ttl("12h") == 43200
    for bad in ("soon", "-1d"):
        with pytest.raises(ConfigurationError):
            parse_ttl(bad)
    assert backend_class("memory://") is MemoryStore
    with pytest.raises(ConfigurationError, match="sqlite"):
        backend_class("postgres://x")
