"""Request log: with `TRANSFORMERS_RESPONSES_LOG_REQUESTS=PATH`, every `POST /v1/responses` body (HTTP and WebSocket)
is appended to PATH as one JSON line, exactly as the client sent it.

For finding out what a client really sends (docs/clients.md lists each tested client's request features from this
log, see `features`). Off unless the variable is set; bodies may hold private text, so it is never on by default.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from typing import Any

ENV = "TRANSFORMERS_RESPONSES_LOG_REQUESTS"
_lock = threading.Lock()


def record(body: Any) -> None:
    """Append `body` to the log file, if one is configured (one write per line, so lines never interleave)."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n"
    with _lock, open(path, "a", encoding="utf-8") as f:
        f.write(line)


def features(bodies: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """What a set of logged requests used: top-level fields, tool types, `include` values, input item types, and
    the keys of `text` and `reasoning` — sorted, for a compatibility table."""
    found: dict[str, set[str]] = {"fields": set(), "tools": set(), "include": set(), "input_items": set(),
                                  "text": set(), "reasoning": set()}
    for body in bodies:
        found["fields"].update(body)
        found["tools"].update(str(t.get("type")) for t in body.get("tools") or [])
        found["include"].update(body.get("include") or [])
        inp = body.get("input")
        items = [{"type": "message"}] if isinstance(inp, str) else inp or []
        found["input_items"].update(str(i.get("type") or ("message" if "role" in i else "item_reference"))
                                    for i in items)
        for key in ("text", "reasoning"):
            if isinstance(body.get(key), dict):
                found[key].update(f"{k}={v}" if isinstance(v, (str, bool, int)) or v is None else k
                                  for k, v in body[key].items())
    return {k: sorted(v) for k, v in found.items()}
