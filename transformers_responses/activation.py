"""Activation: how the plugin joins the host CLI.

Three ways in, one registration:

* the `transformers.cli` entry point (`register`), loaded by the start-up hook (`_startup`) when the host CLI module is
  imported — or natively, should the host one day load that group itself;
* the `transformers-responses` console script / `python -m transformers_responses` (`main`), which registers explicitly,
  for anyone who turns the hook off with `TRANSFORMERS_RESPONSES_DISABLE=1`.

`register` is idempotent, so a host that loads the group itself and our hook can never register twice.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("transformers_responses")

CLI_GROUP = "transformers.cli"
_MARK = "_transformers_responses_registered"


def register(app: Any) -> None:
    """Entry point of group `transformers.cli`: add `transformers responses` and the serve options to the host app."""
    if getattr(app, _MARK, False):
        return
    from .cli import responses_group
    from .seam import patch_serve_command

    patch_serve_command(app)
    app.add_group(responses_group(), name="responses")
    setattr(app, _MARK, True)


def load_cli_plugins(app: Any) -> None:
    """Load every plugin of group `transformers.cli` into the host app (what the host itself would do natively)."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=CLI_GROUP):
        try:
            ep.load()(app)
        except Exception as exc:  # one broken plugin must not take the host CLI down
            logger.warning("transformers CLI plugin %r failed to load: %s", ep.name, exc)


def main() -> None:
    """The `transformers-responses` console script: the host CLI with this plugin registered explicitly."""
    from transformers.cli import transformers as host_cli

    register(host_cli.app)
    host_cli.main()
