"""Hatchling build hook: put the interpreter start-up hook files at the root of the wheel.

`transformers_responses_hook.pth` (Python < 3.15, and 3.15-3.17 without PEP 829) and
`transformers_responses_hook.start` (PEP 829, Python >= 3.15) go to the wheel root, i.e. site-packages, for both the
standard and the editable wheel. Their contents are the constants of `transformers_responses/_startup.py` (read from the
source file, so the sdist needs nothing else), written into a temporary directory that `finalize` removes.

In an editable wheel hatchling writes `_transformers_responses.pth` (the source tree on sys.path); our stem sorts after
it, so the package is importable when our line runs.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


def load_startup_module(root: str) -> Any:
    """The hook module, loaded from its file without importing the package."""
    path = os.path.join(root, "transformers_responses", "_startup.py")
    spec = importlib.util.spec_from_file_location("_transformers_responses_startup_build", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hook_files(root: str) -> dict[str, str]:
    """File name at the wheel root -> content."""
    startup = load_startup_module(root)
    return {
        f"{startup.HOOK_STEM}.pth": startup.PTH_LINE,
        f"{startup.HOOK_STEM}.start": startup.START_LINE,
    }


class CustomBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":  # the sdist ships hatch_build.py and _startup.py, not generated files
            return
        self._tmp = tempfile.mkdtemp(prefix="transformers-responses-hook-")
        included = {}
        for name, content in hook_files(self.root).items():
            source = os.path.join(self._tmp, name)
            with open(source, "w", encoding="utf-8", newline="\n") as f:
                f.write(content)
            included[source] = name
        build_data["force_include"].update(included)
        if version == "editable":
            # An editable build takes `force_include_editable` when it is non-empty, and the configured force-include
            # otherwise: keep the configured entries, plus ours.
            editable = build_data.setdefault("force_include_editable", {})
            if not editable:
                editable.update(self.build_config.force_include)
            editable.update(included)

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
            self._tmp = None
