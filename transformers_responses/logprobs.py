"""Token log probabilities (`include: ["message.output_text.logprobs"]`, `top_logprobs`) for sequential generation.

This module owns `LogprobsRecorder`, a logits processor that records, for every generated token, the chosen token's
log probability and its `top_k` (0-20) most likely alternatives, in the OpenAI shape

    {"token": str, "logprob": float, "bytes": [int], "top_logprobs": [{"token", "logprob", "bytes"}]}

Which distribution: `log_softmax` of the scores as every logits processor ahead of the recorder left them (repetition
penalties, grammar masks: put the recorder last in `logits_processor=`), and before the sampling warpers
(temperature, top-k, top-p), which `generate()` always runs after custom processors. So the numbers are the model's
(constrained) distribution, the same whatever the sampling settings, not the sampler's truncated one (where top-p
would turn most alternatives into -inf); and a token a grammar forbids never appears as an alternative. Per step it
costs one `log_softmax` and one `torch.topk` on the row.

A processor sees the scores before the token is chosen, so the choice is read by a companion stopping criterion,
`recorder.chosen` (pass it in `stopping_criteria=`): `generate()` runs stopping criteria right after choosing a token
and before handing it to the streamer, so an entry is always recorded before its text streams. (Without it, the
choice is read at the next processor call, one token late, and `finish(sequences)` records the last one.) Entries
land in a thread-safe deque the event loop drains (`drain()`) with each decoded chunk, so memory stays flat however
long the answer.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import torch
from transformers import LogitsProcessor, StoppingCriteria

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["MAX_TOP_LOGPROBS", "LogprobsRecorder"]

MAX_TOP_LOGPROBS = 20


def _byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's byte-to-printable-character map that byte-level BPE vocabularies are written in."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {b: b for b in printable}, 0
    for b in range(256):
        if b not in chars:
            chars[b], extra = 256 + extra, extra + 1
    return {chr(c): b for b, c in chars.items()}


class LogprobsRecorder(LogitsProcessor):
    """Records per-token logprobs during `model.generate()` (batch size 1); the scores pass through unchanged.

        generate(..., logits_processor=[grammar, recorder], stopping_criteria=[recorder.chosen])

    `tokenizer` turns ids into token strings (`convert_ids_to_tokens` + `convert_tokens_to_string`, so byte-level
    tokens read as text) and UTF-8 bytes. `skip_ids` (e.g. the EOS ids) are not recorded when chosen: the end token
    is no part of the output text. Use one instance per `generate()` call.
    """

    def __init__(self, tokenizer: Any, top_logprobs: int = 0, *, skip_ids: Sequence[int] = ()) -> None:
        if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}")
        self.tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        self.k = top_logprobs
        self.skip = frozenset(int(i) for i in skip_ids)
        self.entries: deque[dict[str, Any]] = deque()  # appends and pops are atomic: the loop thread drains it
        # The row of the previous step, kept on the device it came from until the choice is known.
        self._pending: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._text: dict[int, tuple[str, list[int]]] = {}  # id -> (string, bytes): vocabularies repeat tokens
        self.chosen = _ChosenToken(self)
        # Byte-level BPE pieces map back to their exact bytes (a piece may hold half a UTF-8 character, which a
        # decoded string would turn into U+FFFD); other vocabularies go through the tokenizer's own decoding.
        decoder = getattr(getattr(self.tokenizer, "backend_tokenizer", None), "decoder", None)
        self._bytes = _byte_decoder() if type(decoder).__name__ == "ByteLevel" else None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if scores.shape[0] != 1:
            raise ValueError("LogprobsRecorder supports batch size 1 only (one request per generate call).")
        if self._pending is not None:
            self._record(int(input_ids[0, -1]))
        row = torch.log_softmax(scores[0].float(), dim=-1)
        top = torch.topk(row, self.k) if self.k else None
        self._pending = (row, top.values if top else row[:0], top.indices if top else row[:0].long())
        return scores

    def finish(self, sequences: torch.Tensor | Sequence[int]) -> None:
        """Record the last chosen token (generation ended after it: no further processor call saw it)."""
        if self._pending is not None:
            last = sequences[0, -1] if isinstance(sequences, torch.Tensor) and sequences.dim() == 2 else sequences[-1]
            self._record(int(last))

    def drain(self) -> list[dict[str, Any]]:
        """Pop every entry recorded so far, oldest first (call from the event loop with each decoded chunk)."""
        out = []
        while True:
            try:
                out.append(self.entries.popleft())
            except IndexError:
                return out

    def _token(self, token_id: int) -> tuple[str, list[int]]:
        cached = self._text.get(token_id)
        if cached is None:
            piece = self.tokenizer.convert_ids_to_tokens(token_id) or ""
            if self._bytes is not None and all(ch in self._bytes for ch in piece):
                raw = bytes(self._bytes[ch] for ch in piece)
                cached = (raw.decode("utf-8", errors="replace"), list(raw))
            else:
                text = self.tokenizer.convert_tokens_to_string([piece]) if piece else ""
                cached = (text, list(text.encode("utf-8")))
            self._text[token_id] = cached
        return cached

    def _record(self, chosen: int) -> None:
        pending, self._pending = self._pending, None  # processor and criterion run on the generating thread
        if pending is None or chosen in self.skip:
            return
        row, values, indices = pending
        text, raw = self._token(chosen)
        top = []
        # k <= 20 items: Python is fine here
        for logprob, token_id in zip(values.tolist(), indices.tolist(), strict=True):
            if logprob == float("-inf"):
                break  # masked (e.g. by a grammar): not an alternative
            alt_text, alt_raw = self._token(token_id)
            top.append({"token": alt_text, "logprob": logprob, "bytes": alt_raw})
        self.entries.append({"token": text, "logprob": float(row[chosen]), "bytes": raw, "top_logprobs": top})


class _ChosenToken(StoppingCriteria):
    """The stopping criterion that tells a `LogprobsRecorder` which token was chosen; it never stops anything."""

    def __init__(self, recorder: LogprobsRecorder) -> None:
        self.recorder = recorder

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        self.recorder._record(int(input_ids[0, -1]))
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)  # type: ignore[return-value]
