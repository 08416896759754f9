"""Single-stream throughput and time to first token, side by side in one run, on the same random ~18M Qwen2 model:

* raw `model.generate` (a streamer timing each token),
* our `/v1/responses` stream (`transformers serve --enable-responses`),
* the host's built-in `/v1/responses` stream,

plus a microbenchmark of building one `output_text.delta` event: ours (plain dict + one JSON encode) against the
host's builder (pydantic model + `model_dump_json`). Prints the figures and the ratios the README quotes.

    python benchmarks/bench_stream.py [--tokens 256] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx


def bench_raw(model_dir: Path, tokens: int, runs: int) -> tuple[float, float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)

    class Clock:
        def __init__(self) -> None:
            self.first: float | None = None
            self.calls = 0

        def put(self, value: object) -> None:
            self.calls += 1
            if self.calls == 2 and self.first is None:  # the first put is the prompt
                self.first = time.perf_counter()

        def end(self) -> None:
            pass

    rates, ttfts = [], []
    for _ in range(runs + 1):
        clock = Clock()
        start = time.perf_counter()
        with torch.inference_mode():
            # The same generation config the server uses (the random model has no end token, so it runs to the limit).
            out = model.generate(**ids, max_new_tokens=tokens, do_sample=False, streamer=clock)
        elapsed = time.perf_counter() - start
        n = out.shape[-1] - ids["input_ids"].shape[-1]
        rates.append(n / elapsed)
        ttfts.append((clock.first or start) - start)
    return statistics.median(rates[1:]), statistics.median(ttfts[1:])


def bench_server(base: str, model: str, tokens: int, runs: int, ours: bool) -> tuple[float, float]:
    body = {"model": model, "input": "Hi", "stream": True, "max_output_tokens": tokens}
    rates, ttfts = [], []
    for _ in range(runs + 1):
        start = time.perf_counter()
        first = None
        deltas = 0
        with httpx.stream("POST", f"{base}/v1/responses", json=body, timeout=300) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: ") and "output_text.delta" in line:
                    deltas += 1
                    if first is None:
                        first = time.perf_counter()
                final = line
        elapsed = time.perf_counter() - start
        usage = None
        if final.startswith("data: {"):
            usage = json.loads(final[6:]).get("response", {}).get("usage")
        n = (usage or {}).get("output_tokens") or tokens
        rates.append(n / elapsed)
        ttfts.append((first or start) - start)
    return statistics.median(rates[1:]), statistics.median(ttfts[1:])


def start(model_dir: Path, port: int, ours: bool) -> object:
    from transformers.cli.serve import Serve

    from transformers_responses.seam import plugins_on_build

    kwargs = dict(force_model=str(model_dir), host="127.0.0.1", port=port, device="cpu", non_blocking=True)
    if ours:
        # Stored, as by default, in a SQLite file of the run (not the user's cache).
        store = f"sqlite:///{model_dir.parent / 'bench-responses.db'}"
        with plugins_on_build({"enable_responses": True, "tool_call_parser": "auto", "responses_store": store}):
            server = Serve(**kwargs)
    else:
        server = Serve(**kwargs)
    for _ in range(600):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    return server


def bench_builders(n: int = 20000) -> tuple[float, float]:
    from transformers.cli.serving.response import _ResponseStreamBuilder

    from transformers_responses import events as ev
    from transformers_responses.emitter import Assembler, initial_response

    asm = Assembler(initial_response({"model": "m", "input": "x"}, response_id="resp_1", model="m", created_at=0,
                                     tools=[]))
    seq = ev.Sequencer()
    for event in asm.start() + asm.apply([("text", "x")]):
        seq.frame(event)
    start = time.perf_counter()
    for _ in range(n):
        for event in asm.apply([("text", " tok")]):
            seq.frame(event)
    ours = (time.perf_counter() - start) / n
    builder = _ResponseStreamBuilder(request_id="1", response_defaults={
        "id": "resp_1", "created_at": 0, "model": "m", "object": "response", "tools": [], "parallel_tool_calls": False,
        "tool_choice": "auto"})
    builder.start_message()
    start = time.perf_counter()
    for _ in range(n):
        builder.text_delta(" tok")
    host = (time.perf_counter() - start) / n
    return ours, host


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    from transformers_responses.fixture_model import build_random_model

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_random_model(Path(tmp) / "perf")
        print(f"model: {model_dir} — {args.tokens} tokens, median of {args.runs} runs (after one warm-up)", flush=True)
        raw = bench_raw(model_dir, args.tokens, args.runs)
        print(f"raw generate:          {raw[0]:7.1f} tok/s   TTFT {raw[1] * 1000:6.1f} ms", flush=True)
        # Interleaved (raw, ours, host, raw) so drift in the machine's speed shows up rather than skewing one side.
        ours_srv = start(model_dir, 8931, ours=True)
        ours = bench_server("http://127.0.0.1:8931", str(model_dir), args.tokens, args.runs, ours=True)
        ours_srv.kill_server()  # type: ignore[attr-defined]
        print(f"ours /v1/responses:    {ours[0]:7.1f} tok/s   TTFT {ours[1] * 1000:6.1f} ms", flush=True)
        host_srv = start(model_dir, 8932, ours=False)
        host = bench_server("http://127.0.0.1:8932", str(model_dir), args.tokens, args.runs, ours=False)
        host_srv.kill_server()  # type: ignore[attr-defined]
        print(f"host /v1/responses:    {host[0]:7.1f} tok/s   TTFT {host[1] * 1000:6.1f} ms", flush=True)
        raw2 = bench_raw(model_dir, args.tokens, args.runs)
        print(f"raw generate (again):  {raw2[0]:7.1f} tok/s   TTFT {raw2[1] * 1000:6.1f} ms", flush=True)
        raw = ((raw[0] + raw2[0]) / 2, (raw[1] + raw2[1]) / 2)
    ours_us, host_us = bench_builders()
    print(f"delta event build+frame: ours {ours_us * 1e6:.1f} µs, host builder {host_us * 1e6:.1f} µs")
    print(f"ratios: ours/raw tok/s = {ours[0] / raw[0]:.3f}, ours/host tok/s = {ours[0] / host[0]:.3f}, "
          f"host-builder/ours per event = {host_us / ours_us:.1f}x")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
