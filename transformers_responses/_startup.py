"""Interpreter start-up hook: load the `transformers.cli` entry-point group into the host CLI.

The host (`transformers/cli/transformers.py`) builds its CLI `app` at import time but loads no plugin group, so the
wheel ships `transformers_responses_hook.pth` (and, for Python >= 3.15, the PEP 829 `transformers_responses_hook.start`)
whose only job is to call `install()` when the interpreter starts.

`install()` puts a one-shot finder at the front of `sys.meta_path`. The finder ignores every import but
`transformers.cli.transformers`; for that one it asks the other finders for the real spec and wraps the loader's
`exec_module`: when the host module executes, the finder leaves `sys.meta_path`, and right after the module has run,
`activation.load_cli_plugins(module.app)` loads the group (our `transformers responses` and the `serve` options among
them).

Rules this module keeps, because it runs in *every* Python process of the environment:

* stdlib `sys`/`os` only (both already imported by `site`), nothing from transformers, no `typing`, no
  `importlib.metadata` until the host CLI module itself is being imported;
* it never raises: any failure is ONE line on stderr (`transformers-responses: start-up hook disabled: <error>`) and the
  host is left as it is (an error of the host's own module still propagates unchanged: it is not ours to hide);
* kill switch: `TRANSFORMERS_RESPONSES_DISABLE` set to anything but empty, `0`, `false`, `no` or `off` (any case) turns
  it off, both at start-up and when the host module is imported;
* it steps aside if the host loads the group itself (see `_HOST_NATIVE` and `docs/upstream-hook.md`).
"""

import os
import sys

TARGET = "transformers.cli.transformers"
ENV_DISABLE = "TRANSFORMERS_RESPONSES_DISABLE"
_OFF_VALUES = ("", "0", "false", "no", "off")

# What the host would define once it loads plugin groups natively; finding any of them on the executed module makes
# the hook step aside.
_HOST_NATIVE = ("load_plugins", "load_cli_plugins", "PLUGIN_GROUPS", "CLI_PLUGIN_GROUP")
_APP_MARK = "_transformers_responses_registered"  # == activation._MARK (not imported: activation is for later)
_FINDER_MARK = "_transformers_responses_hook"
LOG_PREFIX = "transformers-responses: start-up hook disabled: "

# The files the wheel installs at the root of site-packages (written by hatch_build.py). The stem sorts after
# hatchling's editable path file `_transformers_responses.pth` ("t" > "_"), so in an editable install the source tree
# is already on sys.path when our line runs.
HOOK_STEM = "transformers_responses_hook"
# A `.pth` line that raises prints a traceback and skips the rest of the file; the try/except inside `exec` makes even a
# missing package (say, a deleted editable source tree) one line on stderr.
PTH_LINE = (
    'import sys; exec("try:\\n from transformers_responses._startup import install\\n install()\\n'
    "except Exception as e:\\n"
    " sys.stderr and sys.stderr.write('" + LOG_PREFIX + "%s: %s\\\\n' % (type(e).__name__, e))\")\n"
)
START_LINE = "transformers_responses._startup:install\n"  # PEP 829: same stem, so 3.15+ ignores the .pth import line


def disabled() -> bool:
    """Whether the kill switch `TRANSFORMERS_RESPONSES_DISABLE` is on."""
    return os.environ.get(ENV_DISABLE, "").strip().lower() not in _OFF_VALUES


def _log(exc: BaseException) -> None:
    try:
        stream = sys.stderr
        if stream is not None:
            message = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            stream.write(f"{LOG_PREFIX}{message}\n")
            stream.flush()
    except Exception:  # a closed or broken stderr: nothing left to tell
        pass


def _after_host_import(module: object) -> None:
    """Run right after `transformers.cli.transformers` has executed: load the `transformers.cli` group into its app."""
    try:
        if disabled():
            return
        for name in _HOST_NATIVE:
            if hasattr(module, name):  # the host loads plugin groups itself
                return
        app = getattr(module, "app", None)
        if app is None:
            raise RuntimeError(f"{TARGET} defines no `app`")
        if getattr(app, _APP_MARK, False):  # registered already (natively, or by `transformers-responses`)
            return
        from transformers_responses.activation import load_cli_plugins

        load_cli_plugins(app)
    except Exception as exc:
        _log(exc)


def _wrap_loader(spec: object, finder: "_HostCLIFinder") -> None:
    loader = getattr(spec, "loader", None)
    if loader is None or isinstance(loader, type):  # namespace package, or a class-level (builtin/frozen) loader
        finder.leave()
        return
    real_exec = getattr(loader, "exec_module", None)
    if real_exec is None:  # a legacy loader: not ours to adapt
        finder.leave()
        return

    def exec_module(module: object) -> None:
        if getattr(module, "__name__", None) != TARGET:  # a loader shared by several modules: pass the others on
            real_exec(module)
            return
        finder.leave()  # one-shot: the host module is being executed now
        try:
            del loader.exec_module  # and a reload runs the plain loader
        except AttributeError:
            pass
        real_exec(module)  # the host's own errors propagate untouched
        _after_host_import(module)

    # An instance attribute, not a proxy loader: module.__loader__ stays the host's own object (runpy, inspect,
    # importlib.resources and isinstance checks see no difference).
    loader.exec_module = exec_module


class _HostCLIFinder:
    """Meta path finder that reacts to `transformers.cli.transformers` only, and leaves once that module executes.

    It stays in `sys.meta_path` until the wrapped `exec_module` runs (not merely until the first `find_spec`), so a
    probe such as `importlib.util.find_spec("transformers.cli.transformers")` before the real import cannot use it up.
    """

    _transformers_responses_hook = True

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if fullname != TARGET:
            return None
        spec = None
        # The walk the import system does, over the other finders (their errors are the import's own, unchanged).
        for finder in list(sys.meta_path):
            if getattr(finder, _FINDER_MARK, False) is True:
                continue
            find = getattr(finder, "find_spec", None)
            if find is not None:
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        if spec is None:
            return None
        try:
            if disabled():
                self.leave()
            else:
                _wrap_loader(spec, self)
        except Exception as exc:
            self.leave()
            _log(exc)
        return spec

    def leave(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

    def __repr__(self) -> str:
        return f"<transformers-responses start-up hook for {TARGET}>"


def install() -> bool:
    """Put the one-shot finder at the front of `sys.meta_path`; idempotent, never raises.

    Returns whether a finder is in place after the call: False when the kill switch is on, when the host CLI module
    has been imported already (too late to hook it), or on an error (reported as one stderr line).
    """
    try:
        if disabled():
            return False
        for finder in sys.meta_path:
            if getattr(finder, _FINDER_MARK, False) is True:
                return True
        if TARGET in sys.modules:
            return False
        sys.meta_path.insert(0, _HostCLIFinder())
        return True
    except Exception as exc:
        _log(exc)
        return False


def uninstall() -> None:
    """Remove the finder if it has not fired yet (for tests and embedders)."""
    sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, _FINDER_MARK, False) is not True]
