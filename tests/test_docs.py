"""The reference stays true: every option, env var, emitted event type and request field is documented."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from transformers_responses.cli import responses_group
from transformers_responses.events import EMITTED_EVENT_TYPES
from transformers_responses.fields import FIELD_POLICY
from transformers_responses.seam import _plugin_parameters
from transformers_responses.tool_parsers import BUILTIN
from transformers_responses.validation import request_schema

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def test_serve_options_are_documented() -> None:
    text = (DOCS / "cli.md").read_text()
    for param in _plugin_parameters():
        assert f"`{flag(param.name)}" in text, param.name


def test_subcommand_options_are_documented() -> None:
    text = (DOCS / "cli.md").read_text()
    group = responses_group()
    for name, command in group.commands.items():
        assert f"`transformers responses {name}" in text, name
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    assert f"`{opt}`" in text, (name, opt)


def test_every_emitted_event_type_is_documented() -> None:
    text = (DOCS / "events.md").read_text()
    for kind in EMITTED_EVENT_TYPES:
        assert f"| `{kind}` |" in text, kind


def test_every_request_field_has_a_policy_and_a_doc_row() -> None:
    text = (DOCS / "fields.md").read_text()
    assert set(inspect.get_annotations(request_schema())) == set(FIELD_POLICY)
    for field, policy in FIELD_POLICY.items():
        assert f"| `{field}` | {policy} |" in text, field


def test_every_env_var_is_documented() -> None:
    text = (DOCS / "env.md").read_text()
    used = set()
    for path in (ROOT / "transformers_responses").rglob("*.py"):
        used |= set(re.findall(r"TRANSFORMERS_RESPONSES_[A-Z_]+", path.read_text()))
    for name in used:
        assert f"`{name}`" in text, name


def test_every_builtin_parser_is_documented() -> None:
    text = (DOCS / "tool-parsers.md").read_text()
    for name in BUILTIN:
        assert f"| `{name}` |" in text, name


def test_every_compact_field_has_a_policy_and_a_doc_row() -> None:
    from transformers_responses.compaction import FIELD_POLICY as COMPACT_POLICY
    from transformers_responses.compaction import compact_schema

    text = (DOCS / "compaction.md").read_text()
    assert set(inspect.get_annotations(compact_schema())) == set(COMPACT_POLICY)
    for field, policy in COMPACT_POLICY.items():
        assert f"| `{field}` | {policy} |" in text, field
