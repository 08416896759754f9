"""Sealed content: reasoning and compaction summaries handed to the client encrypted and authenticated, read back
only by this server.

`include: ["reasoning.encrypted_content"]` (what the Codex CLI and zero-data-retention clients send with
`store: false`) puts the reasoning text of each `reasoning` output item in its `encrypted_content`, sealed with
AES-256-GCM under a server secret; when the client sends that item back as input, the text is unsealed and the model
sees its reasoning again — multi-turn reasoning without the server keeping anything. `POST /v1/responses/compact`
(`compaction`) seals the model's summary of a conversation the same way, in a `compaction` item's
`encrypted_content`; `open_compactions` reads it back when the item returns as input or history.

The secret is `TRANSFORMERS_RESPONSES_SECRET` (any string; hashed to a key) or, without it, a random key created once
in `$HF_HOME/transformers-responses/secret.key` (mode 0600). Replicas behind one load balancer must share it. A blob
sealed under another key, or altered, is a 400 naming the item — never silently dropped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from pathlib import Path
from typing import Any

from .errors import InvalidRequestError

Json = dict[str, Any]

ENV_SECRET = "TRANSFORMERS_RESPONSES_SECRET"
INCLUDE = "reasoning.encrypted_content"
# The payload type of a sealed compaction summary: a blob sealed for anything else is not accepted as one.
COMPACTION_SUMMARY = "compaction_summary"
_VERSION = b"trs1"
_key: bytes | None = None


def key_path() -> Path:
    from huggingface_hub.constants import HF_HOME

    return Path(HF_HOME) / "transformers-responses" / "secret.key"


def _load_key() -> bytes:
    global _key
    if _key is None:
        secret = os.environ.get(ENV_SECRET)
        if secret:
            _key = hashlib.sha256(secret.encode()).digest()
        else:
            path = key_path()
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(secrets.token_bytes(32))
            _key = path.read_bytes()[:32]
    return _key


def seal(payload: Json) -> str:
    """`payload` as an opaque string: version, nonce, AES-GCM ciphertext with its tag, base64url."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = secrets.token_bytes(12)
    sealed = AESGCM(_load_key()).encrypt(nonce, json.dumps(payload).encode(), _VERSION)
    return base64.urlsafe_b64encode(_VERSION + nonce + sealed).decode()


def unseal(token: str, *, param: str) -> Json:
    """The payload of a `seal`ed string; 400 naming `param` when it was not sealed by this server's key."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        raw = base64.urlsafe_b64decode(token.encode())
        if raw[:4] != _VERSION:
            raise ValueError("unknown version")
        payload = json.loads(AESGCM(_load_key()).decrypt(raw[4:16], raw[16:], _VERSION))
        if not isinstance(payload, dict):
            raise ValueError("not an object")
        return payload
    except (InvalidTag, ValueError, TypeError) as exc:
        raise InvalidRequestError(
            f"The encrypted content could not be verified or decrypted by this server ({type(exc).__name__}): it was "
            f"made by another server or key, or altered. Set {ENV_SECRET} to the same value on every replica.",
            param=param, code="invalid_encrypted_content") from None


def seal_reasoning(text: str) -> str:
    return seal({"type": "reasoning_text", "text": text})


def open_reasoning(items: list[Json], path: str = "input") -> list[Json]:
    """Reasoning items carrying `encrypted_content` (and no readable content) with their text restored."""
    out = []
    for i, item in enumerate(items):
        if item.get("type") == "reasoning" and item.get("encrypted_content") and not item.get("content"):
            payload = unseal(item["encrypted_content"], param=f"{path}[{i}].encrypted_content")
            item = {**item, "content": [{"type": "reasoning_text", "text": str(payload.get("text", ""))}]}
        out.append(item)
    return out


def seal_compaction(text: str) -> str:
    return seal({"type": COMPACTION_SUMMARY, "text": text})


def open_compaction(token: str, *, param: str) -> str:
    """The summary text of a `seal_compaction`ed string; 400 naming `param` otherwise."""
    payload = unseal(token, param=param)
    if payload.get("type") != COMPACTION_SUMMARY or not isinstance(payload.get("text"), str):
        raise InvalidRequestError("The encrypted content is not a compaction summary of this server: send the "
                                  "`compaction` item as `POST /v1/responses/compact` returned it.", param=param,
                                  code="invalid_encrypted_content")
    return str(payload["text"])


def open_compactions(items: list[Json], path: str = "input", *, indexed: bool = True) -> list[Json]:
    """`compaction` items with their sealed summary opened into `summary` (what `normalizer` renders). Errors name
    `path[i].encrypted_content`, or `path` alone when the items are not the request's own (`indexed=False`: stored
    history, named by `previous_response_id` or `conversation`)."""
    out = []
    for i, item in enumerate(items):
        if item.get("type") == "compaction":
            param = f"{path}[{i}].encrypted_content" if indexed else path
            item = {**item, "summary": open_compaction(str(item.get("encrypted_content") or ""), param=param)}
        out.append(item)
    return out
