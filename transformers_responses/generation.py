"""Generation: runs one request through the host's generation managers and yields the decoded text as it comes.

Both of the host's paths are used unchanged — sequential `model.generate()` on its inference thread, and continuous
batching — through their public `generate_streaming(…, response_parser=…)`. We pass a `_Tap` as the "parser": the
host then decodes each token with special tokens kept and hands us the text, which our own family parser reads on the
event loop. End-of-turn tokens are recognised here and never reach the parser.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from . import seam
from .errors import ServerError


class _Tap:
    """Quacks like the host's ResponseParser: every decoded chunk comes back to us as plain content text."""

    initial_events: list[dict[str, Any]] = []

    def feed(self, text: str) -> list[dict[str, Any]]:
        return [{"type": "region_chunk", "field": "content", "text": text}]

    def finalize(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        return {}, []


@dataclass
class Generation:
    """One running generation: iterate `chunks()` for the text; `cancel()` frees the compute."""

    queue: asyncio.Queue[Any]
    streamer: Any
    max_new_tokens: int
    stop_texts: tuple[str, ...]
    saw_stop: bool = False
    cancelled: bool = False
    error: str | None = None
    _stream_error: type = field(default_factory=seam.stream_error_type)

    async def chunks(self) -> AsyncIterator[str]:
        while True:
            item = await self.queue.get()
            if item is None:
                return
            if isinstance(item, self._stream_error):
                self.error = item.msg
                return
            if not isinstance(item, str) or self.saw_stop:
                continue
            for stop in self.stop_texts:
                if item.endswith(stop):
                    item = item[: -len(stop)]
                    self.saw_stop = True
                    break
            if item:
                yield item

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.streamer.cancel()

    def interrupt(self) -> None:
        """Cancel, and end `chunks()` now rather than at the host's next decode step."""
        self.cancel()
        self.queue.put_nowait(None)

    @property
    def output_tokens(self) -> int:
        return int(self.streamer.total_tokens)

    @property
    def hit_length_limit(self) -> bool:
        return not self.saw_stop and self.output_tokens >= self.max_new_tokens


def stop_texts(tokenizer: Any, gen_config: Any) -> tuple[str, ...]:
    """The text of every end-of-turn token of this generation."""
    eos = gen_config.eos_token_id
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    if getattr(tokenizer, "eos_token_id", None) is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    texts = tokenizer.convert_ids_to_tokens(ids) if ids else []
    return tuple(t for t in texts if t)


def start(gen_manager: Any, model: Any, processor: Any, inputs: Any, gen_config: Any, request_id: str,
          tokenizer: Any) -> Generation:
    """Start generating; the host manager runs it on its own thread (sequential) or scheduler (CB)."""
    try:
        queue, streamer = gen_manager.generate_streaming(
            model, processor, inputs, gen_config, request_id=request_id, response_parser=_Tap())
    except Exception as exc:  # e.g. a dead CB worker
        if type(exc).__name__ == "CBWorkerDeadError":
            raise
        raise ServerError(f"Could not start generation: {exc}") from exc
    return Generation(queue=queue, streamer=streamer, max_new_tokens=int(gen_config.max_new_tokens),
                      stop_texts=stop_texts(tokenizer, gen_config))
