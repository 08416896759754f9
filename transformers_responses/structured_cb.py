"""Grammar-constrained decoding under the host's continuous batching (CB): one router, grammars keyed by request id.

The host's CB (transformers 5.24, `generation/continuous_batching`) builds its logits processors once, from the
generation config, when the manager is created, and `add_request` takes no processor. `CBGrammarRouter` is one
`ContinuousBatchingLogitsProcessor` put at the front of that list, which holds an xgrammar matcher per registered
request id:

* `prepare_tensor_args` (scheduler side, before the forward pass) catches each constrained request's matcher up on
  the tokens the request generated since (`state.generated_tokens`), fills its bitmask row, and hands the forward
  pass one int32 per logits row: the request's slot, or -1 for an unconstrained one;
* `__call__` (inside the forward step) applies those rows' masks to the scores in place, before temperature/top-k/
  top-p (which come after it in the list). Once a grammar is complete only the request's end tokens remain.

What it relies on, pinned to the host range by `test_continuous_batching_router` (tests/test_structured.py):

* the manager's `logit_processor` (`ContinuousBatchingLogitsProcessorList`: its list, `tensors_required`,
  `do_processing`) can be changed after `init_continuous_batching()` and before `start()`, whose generation thread
  sizes the argument buffers from it;
* the token of the last step is in `state.generated_tokens` when the next batch is prepared (synchronous batching),
  and a preempted request keeps its earlier output in `initial_tokens[_true_initial_tokens:]`;
* logits rows are not padded (no CUDA graphs, no compile).

`attach` refuses a manager where one of these does not hold (async batching, CUDA graphs, compile, already
started), and the caller falls back to the sequential path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.generation.continuous_batching.cb_logits_processors import ContinuousBatchingLogitsProcessor

from .structured import CompiledGrammar, apply_mask

__all__ = ["CBGrammarRouter"]

logger = logging.getLogger(__name__)


@dataclass
class _Request:
    """A constrained request: its bitmask row, its matcher, how many of its tokens the matcher has seen."""

    slot: int
    matcher: Any
    consumed: int = 0
    broken: bool = False


class CBGrammarRouter(ContinuousBatchingLogitsProcessor):
    """Per-request grammars for one CB manager: `attach` it once, `register` before `add_request`, `release` after."""

    # No per-request kwargs: grammars come by `register`. (Plain annotations, as the base class declares them.)
    supported_kwargs: dict[str, type] = {}  # noqa: RUF012
    ignored_kwargs: tuple[str, ...] = ()

    def __init__(self, vocab_size: int, max_requests: int = 256) -> None:
        import xgrammar as xgr

        self.vocab_size = vocab_size
        self._bitmask = xgr.allocate_token_bitmask(max_requests, vocab_size)
        self._lock = threading.Lock()  # register/release come from the event loop, the rest from the CB thread
        self._free = list(range(max_requests - 1, -1, -1))
        self._requests: dict[str, _Request] = {}

    @staticmethod
    def can_attach(manager: Any) -> str | None:
        """None if the router can work with `manager`, else why not (for a log line before the sequential path)."""
        cfg = manager.continuous_batching_config
        if cfg.use_async_batching:
            return "async batching prepares a batch before the previous one's tokens are known"
        if any(cfg.cuda_graph_booleans) or cfg.varlen_compile_config or cfg.decode_compile_config:
            return "CUDA graphs / torch.compile freeze the per-step Python of the grammar masks"
        if getattr(manager, "batch_processor", None) is not None:
            return "the manager has started: its buffers are sized without the router"
        return None

    def attach(self, manager: Any) -> None:
        """Put the router first in `manager`'s processors: after `init_continuous_batching()`, before `start()`."""
        why = self.can_attach(manager)
        if why is not None:
            raise RuntimeError(f"cannot constrain this continuous-batching manager: {why}")
        processors = manager.logit_processor
        processors.logits_processor.insert(0, self)  # masks before any warper; argument rows follow list order
        processors.tensors_required += 1
        processors.do_processing = True

    def register(self, request_id: str, compiled: CompiledGrammar, eos_token_id: int | Sequence[int]) -> None:
        """Constrain `request_id` by `compiled` (call before `add_request`); `eos_token_id` ends it once complete."""
        stop = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
        with self._lock:
            if not self._free:
                raise RuntimeError("too many constrained requests at once")
            self._requests[request_id] = _Request(self._free.pop(), compiled.matcher(stop))

    def release(self, request_id: str) -> None:
        """Forget `request_id` (call when it finished, failed or was cancelled); unknown ids are ignored."""
        with self._lock:
            request = self._requests.pop(request_id, None)
            if request is not None:
                self._free.append(request.slot)

    def fill_defaults(self, int32_tensor: torch.Tensor) -> None:
        int32_tensor.fill_(-1)

    def prepare_tensor_args(self, requests_with_new_token: list[Any]) -> torch.Tensor:
        slots = []
        with self._lock:
            for future in requests_with_new_token:
                state = future.state
                request = self._requests.get(state.request_id)
                if request is None:
                    slots.append(-1)
                    continue
                self._catch_up(request, state)
                if request.broken or request.matcher.is_terminated():  # but the request goes on: only stop tokens
                    self._bitmask[request.slot].zero_()
                    for stop in request.matcher.stop_token_ids:
                        bit = 1 << (stop % 32)  # as a signed int32
                        self._bitmask[request.slot, stop // 32] |= bit - (1 << 32) if bit >= 1 << 31 else bit
                else:
                    request.matcher.fill_next_token_bitmask(self._bitmask, request.slot)
                slots.append(request.slot)
        return torch.tensor(slots, dtype=torch.int32)

    @staticmethod
    def _catch_up(request: _Request, state: Any) -> None:
        """Feed the matcher the tokens the request generated since it last saw it (usually one)."""
        generated = state.generated_tokens
        if state._true_initial_tokens:  # a preempted (soft-reset) request: its earlier output is now in its prompt
            generated = state.initial_tokens[state._true_initial_tokens:] + generated
        if request.broken:
            return
        for token in generated[request.consumed:]:
            if not request.matcher.is_terminated() and not request.matcher.accept_token(token):
                # Only if something changed the choice after the mask. Raising here would kill the CB worker and
                # every request with it: end this one instead.
                logger.error("request %s: token %d violates its grammar; ending it", state.request_id, token)
                request.broken = True
                return
        request.consumed = len(generated)

    def __call__(self, scores: torch.Tensor, tensor_arg: torch.Tensor) -> torch.Tensor:
        slots = tensor_arg[: scores.size(0)].to("cpu", torch.long)
        rows = (slots >= 0).nonzero().flatten()
        if rows.numel() == 0:
            return scores
        masks = self._bitmask[slots.clamp(min=0)]  # row i of the batch gets its request's mask
        apply_mask(scores, masks, self.vocab_size, rows.tolist())
        return scores
