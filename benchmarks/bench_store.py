"""Response store latency, SQLite and Redis, at 1k and 100k stored responses: put, GET and `chain` resolution for
chains of 1, 5 and 20 responses — chain time should grow with the chain's length, not with the store's size.

Each stored response is realistic: a ~2 KB `Response` JSON and 2 input items. The bulk of the store is loaded through
the backend's own connection (a transaction of many rows for SQLite, a pipeline of the put script for Redis) so 100k
load in seconds; every measured figure goes through the public async methods. Redis runs on a fresh local
`redis-server` (tests/redis_server.py) unless `--redis-url` names one (its keys go under a fresh prefix).

    python benchmarks/bench_store.py [--sizes 1000 100000] [--backends sqlite redis] [--redis-url redis://…]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/redis_server.py, without installing

from transformers_responses.store import open_store  # noqa: E402
from transformers_responses.store.base import ResponseRecord, ResponseStore  # noqa: E402

CHAIN_LENGTHS = (1, 5, 20)
SAMPLES = 1000
PUTS = 500


def response_json(rid: str) -> dict[str, Any]:
    text = ("The quick brown fox jumps over the lazy dog. " * 36)[:1600]
    return {
        "id": rid, "object": "response", "created_at": 1_700_000_000, "status": "completed", "model": "Qwen/Qwen3-0.6B",
        "output": [{"id": f"msg_{rid[5:]}", "type": "message", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}],
        "usage": {"input_tokens": 31, "output_tokens": 352, "total_tokens": 383,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
        "temperature": 0.7, "top_p": 1.0, "tool_choice": "auto", "tools": [], "parallel_tool_calls": True,
        "text": {"format": {"type": "text"}}, "truncation": "disabled", "metadata": {}, "store": True,
    }


def make(rid: str, prev: str | None = None) -> tuple[ResponseRecord, list[dict[str, Any]]]:
    items = [{"id": f"msg_in{n}_{rid[5:]}", "type": "message", "role": role,
              "content": [{"type": "input_text", "text": text}]}
             for n, (role, text) in enumerate((("developer", "Be concise."), ("user", "Tell me about foxes.")))]
    record = ResponseRecord(id=rid, response=response_json(rid), request={"model": "Qwen/Qwen3-0.6B", "store": True},
                            previous_response_id=prev, expires_at=time.time() + 86400)
    return record, items


def new_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


# ---- bulk loading, through each backend's own connection ----

def bulk_sqlite(store: Any, ids: list[str]) -> None:
    from transformers_responses.store.sqlite import _dumps

    def write(conn: Any, part: list[str]) -> None:
        rows, items = [], []
        for rid in part:
            record, inputs = make(rid)
            rows.append((rid, _dumps(record.response), _dumps(record.request), "completed", None, None, None,
                         record.created_at, record.expires_at))
            items += [(rid, i["id"], n, _dumps(i)) for n, i in enumerate(inputs)]
            items += [(f"{rid}/output", i["id"], n, _dumps(i)) for n, i in enumerate(record.response["output"])]
        conn.executemany("INSERT INTO responses (id, response, request, status, previous_response_id, "
                         "conversation_id, owner, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        conn.executemany("INSERT INTO items (scope, item_id, position, data) VALUES (?, ?, ?, ?)", items)

    for start in range(0, len(ids), 10_000):
        part = ids[start:start + 10_000]
        store._write(lambda conn: write(conn, part))  # one transaction per 10k: few fsyncs


async def bulk_redis(store: Any, ids: list[str]) -> None:
    from transformers_responses.store.redis import _PUT, _dumps, _flat, _ms, _output

    sha = await store._client.script_load(_PUT)
    now = _ms(time.time())
    for start in range(0, len(ids), 2_000):
        async with store._client.pipeline(transaction=False) as pipe:
            for rid in ids[start:start + 2_000]:
                record, inputs = make(rid)
                meta = {"previous_response_id": None, "conversation_id": None, "created_at": record.created_at,
                        "expires_at": record.expires_at}
                pipe.evalsha(sha, 0, store.prefix, now, rid, _ms(record.expires_at), _dumps(record.response),
                             _dumps(record.request), _dumps(meta), "", "completed", "", *_flat(inputs),
                             *_flat(_output(record.response)))
            await pipe.execute()


# ---- measuring, through the public async methods ----

def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) in ms."""
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


async def timed(n: int, call: Callable[[int], Awaitable[Any]]) -> list[float]:
    out = []
    for k in range(n):
        start = time.perf_counter()
        await call(k)
        out.append(time.perf_counter() - start)
    return out


async def measure(store: ResponseStore, ids: list[str], chains: dict[int, list[str]]) -> dict[str, tuple[float, float]]:
    rng = random.Random(0)
    results: dict[str, tuple[float, float]] = {}
    fresh = [make(new_id()) for _ in range(PUTS)]
    results["put"] = percentiles(await timed(PUTS, lambda k: store.put_response(*fresh[k])))
    picks = [rng.choice(ids) for _ in range(SAMPLES)]

    async def get(k: int) -> None:
        assert await store.get_response(picks[k]) is not None

    results["get"] = percentiles(await timed(SAMPLES, get))
    for length, tips in chains.items():
        async def chain(k: int, tips: list[str] = tips, length: int = length) -> None:
            assert len(await store.chain(tips[k % len(tips)])) == length

        results[f"chain {length}"] = percentiles(await timed(SAMPLES, chain))
    return results


async def build_chains(store: ResponseStore) -> dict[int, list[str]]:
    """20 chains of each length, through `put_response` (as the server stores them)."""
    chains: dict[int, list[str]] = {}
    for length in CHAIN_LENGTHS:
        tips = []
        for _ in range(20):
            prev = None
            for _ in range(length):
                rid = new_id()
                await store.put_response(*make(rid, prev))
                prev = rid
            tips.append(prev)
        chains[length] = tips  # type: ignore[assignment]
    return chains


async def bench_backend(name: str, url: str, sizes: list[int]) -> list[tuple[str, int, dict[str, tuple[float, float]]]]:
    store = open_store(url, ttl=86400)
    await store.start()
    rows = []
    try:
        ids: list[str] = []
        chains = await build_chains(store)
        for size in sizes:
            more = [new_id() for _ in range(size - len(ids))]
            started = time.perf_counter()
            if name == "sqlite":
                await asyncio.to_thread(bulk_sqlite, store, more)
            else:
                await bulk_redis(store, more)
            ids += more
            print(f"  {name}: loaded {len(ids):,} responses (+{len(more):,} in {time.perf_counter() - started:.1f} s)",
                  file=sys.stderr)
            rows.append((name, size, await measure(store, ids, chains)))
    finally:
        await store.close()
    return rows


@contextmanager
def redis_url(given: str | None) -> Iterator[str]:
    if given:
        yield f"{given}{'&' if '?' in given else '?'}prefix=bench{uuid.uuid4().hex[:8]}:"
        return
    from tests.redis_server import RedisServer

    with RedisServer() as server:
        yield server.url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--backends", nargs="+", default=["sqlite", "redis"], choices=["sqlite", "redis"])
    parser.add_argument("--redis-url")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp, redis_url(args.redis_url) as redis:
        urls = {"sqlite": f"sqlite:///{Path(tmp) / 'bench.db'}", "redis": redis}
        for name in args.backends:
            rows += asyncio.run(bench_backend(name, urls[name], sorted(args.sizes)))
    columns = ["put", "get", *(f"chain {n}" for n in CHAIN_LENGTHS)]
    print(f"{'backend':<8} {'stored':>8} " + " ".join(f"{c + ' p50/p99 ms':>20}" for c in columns))
    for name, size, results in rows:
        cells = " ".join(f"{results[c][0]:>9.3f} /{results[c][1]:>8.3f}" for c in columns)
        print(f"{name:<8} {size:>8,} {cells}")


if __name__ == "__main__":
    main()
