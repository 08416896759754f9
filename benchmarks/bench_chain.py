"""Latency of a `previous_response_id` chain as it grows: turn 1 against turn 5, 10, 20, on the real server.

Starts `transformers serve <fixture model> --device cpu --enable-responses` (the tiny scripted fixture model of
`transformers_responses.fixture_model`) with the SQLite store (the default) and, when `--redis-url` names a Redis
server, a second time with the Redis store. Through the real `openai` SDK it builds `--chains` chains of `--turns`
streamed turns each (`input="Hi"`, `previous_response_id=<the previous turn>`, `max_output_tokens=16`) and times,
for every turn, from sending the request to:

* the `response.created` event: the server-side preparation before the model runs — chain resolution (loading
  every earlier response and its items from the store), rendering the chat template and tokenizing the prompt —
  plus the HTTP round trip;
* the first `response.output_text.delta` event: the time to first token (TTFT), which adds the prefill of a prompt
  that grows with every turn (the whole conversation so far is re-sent to the model).

It also reports each turn's prompt size (`usage.input_tokens` of the `response.completed` event), so TTFT growth can
be read as prefill of a longer prompt, and `response.created` growth as the cost of resolving a longer chain. The
table holds the median over the chains per turn, and the ratios last turn / turn 1. One unmeasured warm-up chain of
the same length runs first on each server (first model call, every prompt length, the store's connection). The
fixture model has 2048 positions; a chain whose next prompt would not fit stops early, and the output says so.

    python benchmarks/bench_chain.py [--turns 20] [--chains 3] [--redis-url redis://127.0.0.1:6379/0] [--raw]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI

MAX_POSITIONS = 2048  # the fixture model's `max_position_embeddings` (read from its config.json when present)


@dataclass
class Turn:
    """One streamed turn: latencies in seconds from sending the request, and the prompt's size."""

    created: float
    first_token: float | None
    input_tokens: int
    output_tokens: int


@dataclass
class BackendResult:
    """Every chain's turns for one store backend, and why chains stopped early (if they did)."""

    name: str
    store: str
    chains: list[list[Turn]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Server:
    """A running `transformers serve --enable-responses` process."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(model: Path, tmp: Path, store: str, timeout: float = 180.0) -> Server:
    """`transformers serve MODEL --device cpu --enable-responses --responses-store STORE`, polled on `/health`."""
    script = Path(sys.executable).parent / "transformers"
    if not script.exists():
        raise SystemExit("the `transformers` console script is missing; install the project: pip install -e '.[test]'")
    port = free_port()
    log = tmp / f"server-{port}.log"
    cmd = [str(script), "serve", str(model), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
           "--enable-responses", "--responses-store", store]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    server = Server(proc, port, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    server.stop()
    raise SystemExit(f"server did not start in {timeout} s:\n{log.read_text()[-4000:]}")


def one_turn(client: OpenAI, model: str, text: str, prev: str | None, max_output_tokens: int) -> tuple[str, Turn]:
    """Send one streamed turn; return its response id and timings."""
    created: float | None = None
    first_token: float | None = None
    completed: Any = None
    start = time.perf_counter()
    stream = client.responses.create(model=model, input=text, previous_response_id=prev,
                                     max_output_tokens=max_output_tokens, stream=True)
    with stream:
        for event in stream:
            now = time.perf_counter()
            if event.type == "response.created" and created is None:
                created = now - start
            elif event.type == "response.output_text.delta" and first_token is None:
                first_token = now - start
            elif event.type in ("response.completed", "response.incomplete"):
                completed = event.response
            elif event.type in ("response.failed", "error"):
                raise RuntimeError(f"turn failed: {event.model_dump_json()[:500]}")
    if completed is None or created is None:
        raise RuntimeError("the stream ended without response.created and response.completed/incomplete")
    usage = completed.usage
    return completed.id, Turn(created=created, first_token=first_token,
                              input_tokens=usage.input_tokens if usage else -1,
                              output_tokens=usage.output_tokens if usage else -1)


def run_chains(server: Server, model: str, result: BackendResult, turns: int, chains: int, text: str,
               max_output_tokens: int, max_positions: int = MAX_POSITIONS) -> None:
    client = OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=120)
    # Warm-up: one whole chain, not measured (first model call, every prompt length, store connection, code paths).
    warm = BackendResult(name=result.name, store=result.store)
    for c in range(1 + chains):
        target = warm if c == 0 else result
        label = "warm-up chain" if c == 0 else f"chain {c}"
        prev: str | None = None
        chain: list[Turn] = []
        for n in range(1, turns + 1):
            if chain:
                last = chain[-1]
                growth = (last.input_tokens - chain[-2].input_tokens) if len(chain) > 1 else last.input_tokens
                if last.input_tokens + growth + max_output_tokens > max_positions:
                    target.notes.append(f"{label} stopped before turn {n}: the prompt (~{last.input_tokens + growth}"
                                        f" tokens) + {max_output_tokens} output tokens would exceed {max_positions}")
                    break
            try:
                prev, turn = one_turn(client, model, text, prev, max_output_tokens)
            except Exception as exc:  # noqa: BLE001 - report and stop this chain, keep the rest
                target.notes.append(f"{label} stopped at turn {n}: {type(exc).__name__}: {str(exc)[:300]}")
                break
            chain.append(turn)
        target.chains.append(chain)
    result.notes[:0] = warm.notes


def median_at(result: BackendResult, turn: int) -> tuple[int | None, float | None, float | None, int]:
    """(input tokens, median ms to response.created, median TTFT ms, samples) for a 1-based turn."""
    turns = [chain[turn - 1] for chain in result.chains if len(chain) >= turn]
    if not turns:
        return None, None, None, 0
    created = statistics.median(t.created for t in turns) * 1000
    firsts = [t.first_token for t in turns if t.first_token is not None]
    ttft = statistics.median(firsts) * 1000 if firsts else None
    tokens = int(statistics.median(t.input_tokens for t in turns))
    return tokens, created, ttft, len(turns)


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def report(result: BackendResult, report_turns: Sequence[int], chains: int, raw: bool) -> None:
    print(f"\n== {result.name} store ({result.store}); median of {chains} chains ==")
    if raw:
        for c, chain in enumerate(result.chains, 1):
            cells = " ".join(f"{t.input_tokens}:{t.created * 1000:.1f}/{fmt(t.first_token and t.first_token * 1000)}"
                             for t in chain)
            print(f"chain {c} (input tok:created ms/TTFT ms per turn): {cells}")
    reached = min((len(chain) for chain in result.chains), default=0)
    if reached == 0:
        print("no chain completed a turn")
        for note in result.notes:
            print(f"note: {note}")
        return
    if reached < report_turns[-1]:  # stopped early: show turns up to the last one every chain reached
        print(f"(a chain stopped early; the table ends at turn {reached}, the last turn every chain reached)")
        report_turns = sorted({t for t in report_turns if t <= reached} | {reached})
    print(f"{'turn':>5} {'input tok':>10} {'created ms':>11} {'TTFT ms':>9} {'TTFT-created ms':>16} {'n':>3}")
    rows: dict[int, tuple[int | None, float | None, float | None, int]] = {}
    for t in report_turns:
        tokens, created, ttft, n = median_at(result, t)
        rows[t] = (tokens, created, ttft, n)
        gap = ttft - created if ttft is not None and created is not None else None
        print(f"{t:>5} {fmt(tokens, 'd') if tokens is not None else '-':>10} {fmt(created):>11} {fmt(ttft):>9} "
              f"{fmt(gap):>16} {n:>3}")
    first, last = report_turns[0], report_turns[-1]
    _, c1, f1, _ = rows[first]
    _, cn, fn, _ = rows[last]
    ratio_created = cn / c1 if cn is not None and c1 else None
    ratio_ttft = fn / f1 if fn is not None and f1 else None
    print(f"ratio turn {last}/turn {first}: response.created x{fmt(ratio_created, '.2f')}, "
          f"TTFT x{fmt(ratio_ttft, '.2f')}")
    missing = sum(1 for chain in result.chains for t in chain if t.first_token is None)
    if missing:
        print(f"note: {missing} turn(s) produced no output_text.delta (TTFT medians exclude them)")
    for note in result.notes:
        print(f"note: {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20, help="turns per chain (default 20)")
    parser.add_argument("--chains", type=int, default=3, help="chains per backend; medians over them (default 3)")
    parser.add_argument("--report", type=int, nargs="+", default=[1, 5, 10, 20],
                        help="turns shown in the table (default 1 5 10 20; the last turn is always added)")
    parser.add_argument("--redis-url", default=None, help="also measure the Redis store at this URL (redis://host:port/db)")
    parser.add_argument("--input", default="Hi", help='each turn\'s user input (default "Hi")')
    parser.add_argument("--max-output-tokens", type=int, default=16)
    parser.add_argument("--raw", action="store_true", help="also print every turn of every chain")
    args = parser.parse_args()
    if args.turns < 1 or args.chains < 1:
        parser.error("--turns and --chains must be at least 1")
    report_turns = sorted({t for t in args.report if 1 <= t <= args.turns} | {1, args.turns})

    from transformers_responses.fixture_model import build_fixture_model

    model = build_fixture_model()
    config = Path(model) / "config.json"
    max_positions = MAX_POSITIONS
    if config.exists():
        max_positions = int(json.loads(config.read_text()).get("max_position_embeddings") or MAX_POSITIONS)
    print(f"model: fixture {model}")
    print(f"chain: {args.chains} x {args.turns} turns, input={args.input!r}, max_output_tokens={args.max_output_tokens},"
          f" stream=True, times from sending the request (openai SDK, ms)")

    with tempfile.TemporaryDirectory(prefix="bench-chain-") as tmp_dir:
        tmp = Path(tmp_dir)
        backends = [("sqlite", f"sqlite:///{tmp}/responses.db")]
        if args.redis_url:
            backends.append(("redis", args.redis_url))
        results: list[BackendResult] = []
        for name, store in backends:
            server = start_server(model, tmp, store)
            try:
                result = BackendResult(name=name, store=store)
                run_chains(server, str(model), result, args.turns, args.chains, args.input, args.max_output_tokens,
                           max_positions)
                results.append(result)
            finally:
                server.stop()
        for result in results:
            report(result, report_turns, args.chains, args.raw)


if __name__ == "__main__":
    main()
