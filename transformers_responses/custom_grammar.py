"""Custom-tool grammars: a tool's `lark` or `regex` input grammar as the xgrammar EBNF its calls are decoded under.

A custom call's input travels inside the family's call syntax: raw text in a Qwen XML `<parameter=input>` block, but
a JSON string in the JSON families (`{"input": "…"}`), where `"`, `\\` and control characters are escaped. So the
grammar is compiled once by xgrammar (`Grammar.from_lark` / `from_regex`, which reject a bad grammar with a message)
and, for the JSON families, rewritten so that every terminal matches its JSON-escaped form (`escape_for_json`):
literals are escaped, and character classes split into their plain characters and the escape sequences of the
special ones. The model then writes a JSON string whose decoded text is a sentence of the grammar.

Pure string work on xgrammar's printed EBNF; xgrammar is imported lazily (the `structured` extra).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from .errors import InvalidRequestError

# xgrammar's printed EBNF: string literals, character classes, and everything else (names, operators, space).
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[A-Za-z_][A-Za-z0-9_]*|::=|\s+|.', re.S)
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "0": "\0", "b": "\b", "f": "\f", "v": "\v", "a": "\a",
                   "e": "\x1b"}
_JSON_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# The characters a JSON string cannot hold as themselves.
_SPECIAL = [0x22, 0x5C, *range(0x20)]
PREFIX = "custom_"


def input_ebnf(fmt: dict[str, Any], *, param: str = "tools") -> str:
    """The EBNF (root `root`) of a custom tool's `format` of type `grammar`; 400 naming `param` if it is invalid."""
    try:
        return _converted(fmt["syntax"], fmt["definition"])
    except (RuntimeError, ValueError) as exc:
        detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise InvalidRequestError(f"Invalid {fmt['syntax']} grammar for a custom tool: {detail}",
                                  param=f"{param}.format.definition", code="invalid_grammar") from None


@functools.lru_cache(maxsize=64)  # clients send the same tools with every turn
def _converted(syntax: str, definition: str) -> str:
    import xgrammar as xgr

    grammar = xgr.Grammar.from_lark(definition) if syntax == "lark" else xgr.Grammar.from_regex(definition)
    return str(grammar)


def renamed(ebnf: str, prefix: str = PREFIX) -> str:
    """`ebnf` with every rule name prefixed, so that it can sit beside other rules (its root is `prefix + "root"`)."""
    return "".join(prefix + t if _is_name(t) else t for t in _TOKEN.findall(ebnf))


def escape_for_json(ebnf: str) -> str:
    """`ebnf` rewritten so that it matches exactly the JSON-string-escaped forms of the sentences it matched."""
    out = []
    for token in _TOKEN.findall(ebnf):
        if token.startswith('"') and len(token) >= 2:
            out.append(_literal(json.dumps(_decode(token[1:-1]), ensure_ascii=False)[1:-1]))
        elif token.startswith("[") and len(token) >= 2:
            out.append(_escaped_class(token))
        else:
            out.append(token)
    return "".join(out)


def _is_name(token: str) -> bool:
    return bool(token) and (token[0].isalpha() or token[0] == "_")


def _read_char(s: str, i: int) -> tuple[int, int]:
    """The code point of the (possibly escaped) character at `s[i]` and the index after it."""
    if s[i] != "\\" or i + 1 >= len(s):
        return ord(s[i]), i + 1
    e = s[i + 1]
    if e == "x":
        return int(s[i + 2:i + 4], 16), i + 4
    if e == "u":
        return int(s[i + 2:i + 6], 16), i + 6
    if e == "U":
        return int(s[i + 2:i + 10], 16), i + 10
    if e in _SIMPLE_ESCAPES:
        return ord(_SIMPLE_ESCAPES[e]), i + 2
    return ord(e), i + 2


def _decode(body: str) -> str:
    chars, i = [], 0
    while i < len(body):
        code, i = _read_char(body, i)
        chars.append(chr(code))
    return "".join(chars)


def _char(code: int, *, in_class: bool = False) -> str:
    """One code point written for xgrammar's EBNF (inside a literal, or inside a character class)."""
    ch = chr(code)
    if ch.isalnum() and code < 0x80 or ch in " !#$%&'()*+,./:;<=>?@_`{|}~" or (not in_class and ch in "[]^-"):
        return ch
    # `\\u` takes exactly four digits; xgrammar reads `\\x` greedily (`\\x5cb` would be one character).
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _literal(text: str) -> str:
    return '"' + "".join(_char(ord(c)) for c in text) + '"'


def _escaped_class(token: str) -> str:
    """A character class → a group matching its plain characters as they are and its special ones escaped."""
    body = token[1:-1]
    negated = body.startswith("^")
    if negated:
        body = body[1:]
    ranges: list[tuple[int, int]] = []
    i = 0
    while i < len(body):
        low, i = _read_char(body, i)
        high = low
        if i + 1 < len(body) and body[i] == "-":
            high, i = _read_char(body, i + 1)
        ranges.append((low, high))

    def listed(code: int) -> bool:
        return any(low <= code <= high for low, high in ranges)

    specials = [c for c in _SPECIAL if listed(c) != negated]  # the specials the class matches
    if negated:
        plain = "[^" + "".join(_range(lo, hi) for lo, hi in ranges) + "".join(_char(c, in_class=True)
                                                                          for c in sorted(specials)) + "]"
    else:
        kept = _subtract(ranges, set(_SPECIAL))
        plain = "[" + "".join(_range(lo, hi) for lo, hi in kept) + "]" if kept else ""
    escapes = [_literal(_json_escape(chr(c))) for c in specials]
    if all(c in specials for c in range(0x20)):
        # Every control character: the short escapes and any `\u00XX` (also a valid spelling of the short ones).
        escapes = [_literal(_json_escape(chr(c))) for c in specials if c >= 0x20 or chr(c) in _JSON_SHORT]
        escapes.append('"\\u005cu00" [01] [0-9a-fA-F]')
    alternatives = ([plain] if plain else []) + escapes
    if not alternatives:
        return token  # an empty class stays what it was (matches nothing)
    return alternatives[0] if len(alternatives) == 1 else "(" + " | ".join(alternatives) + ")"


def _json_escape(ch: str) -> str:
    return _JSON_SHORT.get(ch) or f"\\u{ord(ch):04x}"


def _range(low: int, high: int) -> str:
    return _char(low, in_class=True) if low == high else f"{_char(low, in_class=True)}-{_char(high, in_class=True)}"


def _subtract(ranges: list[tuple[int, int]], remove: set[int]) -> list[tuple[int, int]]:
    out = []
    for low, high in ranges:
        start = low
        for code in sorted(c for c in remove if low <= c <= high):
            if start <= code - 1:
                out.append((start, code - 1))
            start = code + 1
        if start <= high:
            out.append((start, high))
    return out
