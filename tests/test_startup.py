"""The interpreter start-up hook (`transformers_responses/_startup.py`), in subprocesses with a temporary site dir.

Each test runs `python -S` (no real site-packages at all) and processes a temporary site dir with `site.addsitedir`,
the same code path the interpreter takes for site-packages: the `.pth` written there is the one `hatch_build.py` puts
in the wheel, after a `_transformers_responses.pth` path file like hatchling's editable one. The host is a fake
`transformers.cli.transformers` (a tiny module with an `app`), and the plugins are a fake distribution whose
`transformers.cli` entry points record their calls, so no test depends on the real transformers or on the real
registration in `activation.register`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # hatch_build.py lives at the project root
try:
    import hatch_build
finally:
    sys.path.remove(str(ROOT))

from transformers_responses import _startup  # noqa: E402

HOST = "transformers.cli.transformers"

FAKE_HOST = """\
class App:
    def __init__(self):
        self.plugins = []

app = App()
"""

FAKE_PLUGIN = """\
CALLS = []

def register(app):
    CALLS.append(app)
    app.plugins.append("fake")

def broken(app):
    raise RuntimeError("boom")
"""

# Run in the subprocess after the site dir: prints a JSON report of what the hook did.
REPORT = """
import json, sys
def finders():
    return [f for f in sys.meta_path if getattr(f, "_transformers_responses_hook", False) is True]
"""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def site_dir(tmp_path: Path) -> Path:
    """A site dir: hatchling-like editable path file (project root, fake host, fake plugin) + our hook files."""
    host = tmp_path / "host"
    _write(host / "transformers" / "__init__.py", "")
    _write(host / "transformers" / "cli" / "__init__.py", "")
    _write(host / "transformers" / "cli" / "transformers.py", FAKE_HOST)
    _write(host / "fakeplugin.py", FAKE_PLUGIN)
    dist = host / "fakeplugin-0.dist-info"
    _write(dist / "METADATA", "Metadata-Version: 2.1\nName: fakeplugin\nVersion: 0\n")
    _write(dist / "entry_points.txt", "[transformers.cli]\nfake = fakeplugin:register\n")
    site = tmp_path / "site"
    site.mkdir()
    (site / "_transformers_responses.pth").write_text(f"{ROOT}\n{host}\n")
    for name, content in hook_files().items():
        (site / name).write_text(content)
    return site


def hook_files() -> dict[str, str]:
    return hatch_build.hook_files(str(ROOT))


def set_plugins(site: Path, spec: str) -> None:
    dist = site.parent / "host" / "fakeplugin-0.dist-info"
    (dist / "entry_points.txt").write_text(f"[transformers.cli]\n{spec}\n")


def set_host(site: Path, source: str) -> None:
    (site.parent / "host" / "transformers" / "cli" / "transformers.py").write_text(source)


def run(site: Path | None, code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -S`, then the site dir processed like site-packages, then `code`."""
    head = "import site, sys\n" + (f"site.addsitedir({str(site)!r})\n" if site else "")
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSFORMERS_RESPONSES_")}
    full_env.pop("PYTHONPATH", None)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-S", "-c", head + REPORT + textwrap.dedent(code)], capture_output=True,
                          text=True, env=full_env, cwd=site.parent if site else None, timeout=120)


def report(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the files -------------------------------------------------------------------------------------------------------


def test_hook_files_sort_after_the_editable_path_file() -> None:
    files = hook_files()
    assert set(files) == {"transformers_responses_hook.pth", "transformers_responses_hook.start"}
    # hatchling's editable path file, with or without the `editables` package
    for editable in ("_transformers_responses.pth", "_editable_impl_transformers_responses.pth"):
        assert sorted([editable, *files])[0] == editable


def test_pth_is_one_guarded_import_line_and_start_is_an_entry_point() -> None:
    files = hook_files()
    lines = files["transformers_responses_hook.pth"].splitlines()
    assert len(lines) == 1 and lines[0].startswith("import ")
    assert "transformers_responses._startup" in lines[0] and "except Exception" in lines[0]
    assert files["transformers_responses_hook.start"].strip() == "transformers_responses._startup:install"
    import pkgutil

    assert pkgutil.resolve_name("transformers_responses._startup:install") is _startup.install


def test_app_mark_is_activations() -> None:
    from transformers_responses import activation

    assert _startup._APP_MARK == activation._MARK


def test_startup_module_imports_nothing_but_os_and_sys() -> None:
    source = Path(_startup.__file__).read_text()
    imports = [line.strip() for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert imports == ["import os", "import sys"]


# --- start-up --------------------------------------------------------------------------------------------------------


def test_start_up_installs_one_finder_and_imports_nothing_heavy(site_dir: Path) -> None:
    baseline = run(None, "print(json.dumps(sorted(sys.modules)))")
    proc = run(site_dir, """
        print(json.dumps({"finders": len(finders()), "first": sys.meta_path.index(finders()[0]),
                          "modules": sorted(sys.modules)}))
    """)
    data = report(proc)
    assert proc.stderr == ""
    assert data["finders"] == 1 and data["first"] == 0
    new = set(data["modules"]) - set(json.loads(baseline.stdout.strip().splitlines()[-1])) - {"json"}
    new = {m for m in new if not m.startswith("json.")}
    assert new <= {"transformers_responses", "transformers_responses._startup", "__future__"}, new
    assert "transformers" not in data["modules"]


def test_finder_reacts_only_to_the_host_module(site_dir: Path) -> None:
    data = report(run(site_dir, """
        finder = finders()[0]
        names = ("json", "transformers", "transformers.cli", "transformers.cli.serve", "transformers.cli.transformersx")
        others = [finder.find_spec(name, None) for name in names]
        import transformers.cli, fakeplugin, email.utils
        still = len(finders())
        print(json.dumps({"others": [o is None for o in others], "still": still}))
    """))
    assert data == {"others": [True] * 5, "still": 1}


def test_host_import_loads_the_plugins_once_and_the_finder_leaves(site_dir: Path) -> None:
    data = report(run(site_dir, """
        import importlib
        import transformers.cli.transformers as host
        import fakeplugin
        loader = host.__spec__.loader
        result = {"plugins": host.app.plugins, "calls": len(fakeplugin.CALLS), "finders": len(finders()),
                  "origin": host.__spec__.origin, "loader": type(loader).__name__,
                  "patched": "exec_module" in vars(loader)}
        importlib.reload(host)  # the plain loader now: no second load
        result["after_reload"] = len(fakeplugin.CALLS)
        print(json.dumps(result))
    """))
    assert data["plugins"] == ["fake"] and data["calls"] == 1 and data["after_reload"] == 1
    assert data["finders"] == 0
    assert data["origin"].endswith(os.path.join("host", "transformers", "cli", "transformers.py"))
    assert data["loader"] == "SourceFileLoader" and data["patched"] is False


@pytest.mark.parametrize("value", ["1", "true", "yes", "on", "TRUE", " 1 "])
def test_kill_switch_on(site_dir: Path, value: str) -> None:
    proc = run(site_dir, """
        import transformers.cli.transformers as host
        print(json.dumps({"finders": len(finders()), "plugins": host.app.plugins}))
    """, env={"TRANSFORMERS_RESPONSES_DISABLE": value})
    data = report(proc)
    assert proc.stderr == ""
    assert data["finders"] == 0 and data["plugins"] == []


@pytest.mark.parametrize("value", ["", "0", "false", "False", "no", "off"])
def test_kill_switch_off_values(site_dir: Path, value: str) -> None:
    data = report(run(site_dir, """
        import transformers.cli.transformers as host
        print(json.dumps({"plugins": host.app.plugins}))
    """, env={"TRANSFORMERS_RESPONSES_DISABLE": value}))
    assert data["plugins"] == ["fake"]


def test_kill_switch_set_after_start_up_still_counts(site_dir: Path) -> None:
    data = report(run(site_dir, """
        import os
        os.environ["TRANSFORMERS_RESPONSES_DISABLE"] = "1"
        import transformers.cli.transformers as host
        print(json.dumps({"plugins": host.app.plugins, "finders": len(finders())}))
    """))
    assert data == {"plugins": [], "finders": 0}


def test_failing_plugin_is_one_stderr_line_and_the_host_imports(site_dir: Path) -> None:
    set_plugins(site_dir, "broken = fakeplugin:broken\nfake = fakeplugin:register")
    proc = run(site_dir, """
        import transformers.cli.transformers as host
        print(json.dumps({"plugins": host.app.plugins}))
    """)
    assert report(proc) == {"plugins": ["fake"]}  # the others still load
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "broken" in lines[0] and "boom" in lines[0], proc.stderr


def test_failing_plugin_loader_is_one_stderr_line_and_the_host_imports(site_dir: Path) -> None:
    proc = run(site_dir, """
        sys.modules["transformers_responses.activation"] = None  # importing it now raises ImportError
        import transformers.cli.transformers as host
        print(json.dumps({"plugins": host.app.plugins, "app": type(host.app).__name__}))
    """)
    assert report(proc) == {"plugins": [], "app": "App"}
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(_startup.LOG_PREFIX + "ModuleNotFoundError: "), proc.stderr


def test_missing_package_is_one_stderr_line_and_start_up_goes_on(site_dir: Path) -> None:
    (site_dir / "_transformers_responses.pth").write_text("")  # say, a deleted editable source tree
    (site_dir / "transformers_responses_hook.start").unlink()  # the .pth guard under test (3.15+ would use .start)
    (site_dir / "zzz_after.pth").write_text("import sys; sys.after = True\n")
    proc = run(site_dir, """
        print(json.dumps({"finders": len(finders()), "after": getattr(sys, "after", False)}))
    """)
    assert report(proc) == {"finders": 0, "after": True}
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(_startup.LOG_PREFIX + "ModuleNotFoundError: "), proc.stderr


def test_host_errors_propagate_unchanged(site_dir: Path) -> None:
    set_host(site_dir, "raise ValueError('host is broken')\n")
    proc = run(site_dir, """
        try:
            import transformers.cli.transformers
        except ValueError as exc:
            print(json.dumps({"error": str(exc)}))
    """)
    assert report(proc) == {"error": "host is broken"}
    assert proc.stderr == ""


def test_host_without_app_is_one_stderr_line(site_dir: Path) -> None:
    set_host(site_dir, "APP = None\n")
    proc = run(site_dir, """
        import transformers.cli.transformers as host
        print(json.dumps({"imported": True}))
    """)
    assert report(proc) == {"imported": True}
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(_startup.LOG_PREFIX) and "app" in lines[0]


@pytest.mark.parametrize("native", [
    FAKE_HOST + "PLUGIN_GROUPS = ('transformers.cli',)\n",
    FAKE_HOST + "def load_plugins(app):\n    pass\n",
    FAKE_HOST + "app._transformers_responses_registered = True\n",
])
def test_hook_steps_aside_when_the_host_loads_plugins_itself(site_dir: Path, native: str) -> None:
    set_host(site_dir, native)
    proc = run(site_dir, """
        import transformers.cli.transformers as host
        import fakeplugin
        print(json.dumps({"calls": len(fakeplugin.CALLS)}))
    """)
    assert report(proc) == {"calls": 0}
    assert proc.stderr == ""


def test_install_is_idempotent(site_dir: Path) -> None:
    # a second copy of the .pth (say, system site-packages under a --system-site-packages venv) and explicit calls
    second = site_dir.parent / "site2"
    second.mkdir()
    (second / "transformers_responses_hook.pth").write_text(hook_files()["transformers_responses_hook.pth"])
    data = report(run(site_dir, f"""
        site.addsitedir({str(second)!r})
        from transformers_responses._startup import install
        results = [install(), install()]
        import transformers.cli.transformers as host
        print(json.dumps({{"results": results, "plugins": host.app.plugins, "left": len(finders())}}))
    """))
    assert data == {"results": [True, True], "plugins": ["fake"], "left": 0}


def test_install_twice_gives_one_finder(site_dir: Path) -> None:
    data = report(run(site_dir, """
        from transformers_responses._startup import install
        install(); install()
        print(json.dumps({"finders": len(finders())}))
    """))
    assert data == {"finders": 1}


def test_install_after_the_host_was_imported_does_nothing(site_dir: Path) -> None:
    data = report(run(site_dir, """
        from transformers_responses._startup import install, uninstall
        uninstall()
        import transformers.cli.transformers as host
        print(json.dumps({"installed": install(), "finders": len(finders()), "plugins": host.app.plugins}))
    """))
    assert data == {"installed": False, "finders": 0, "plugins": []}


def test_finder_goes_behind_a_finder_inserted_later_and_still_fires(site_dir: Path) -> None:
    data = report(run(site_dir, """
        class Other:
            def find_spec(self, name, path=None, target=None):
                return None
        sys.meta_path.insert(0, Other())
        import transformers.cli.transformers as host
        print(json.dumps({"plugins": host.app.plugins, "finders": len(finders()),
                          "other_first": type(sys.meta_path[0]).__name__}))
    """))
    assert data == {"plugins": ["fake"], "finders": 0, "other_first": "Other"}


def test_a_spec_probe_does_not_use_the_hook_up(site_dir: Path) -> None:
    data = report(run(site_dir, """
        import importlib.util
        probe = importlib.util.find_spec("transformers.cli.transformers")
        after_probe = len(finders())
        import transformers.cli.transformers as host
        print(json.dumps({"probe": probe is not None, "after_probe": after_probe, "plugins": host.app.plugins,
                          "finders": len(finders())}))
    """))
    assert data == {"probe": True, "after_probe": 1, "plugins": ["fake"], "finders": 0}


def test_runpy_runs_the_host_untouched(site_dir: Path) -> None:
    # `python -m transformers.cli.transformers` runs the code as __main__ (runpy calls no exec_module): nothing
    # breaks, no plugins there, and nothing is left half-done.
    proc = run(site_dir, """
        import runpy
        ns = runpy.run_module("transformers.cli.transformers")
        print(json.dumps({"plugins": ns["app"].plugins}))
    """)
    assert report(proc) == {"plugins": []}
    assert proc.stderr == ""


# --- the build hook --------------------------------------------------------------------------------------------------


class _Config:
    force_include = {"/abs/configured.txt": "configured.txt"}


def _hook(target: str):  # type: ignore[no-untyped-def]
    # (root, config, build_config, metadata, directory, target_name)
    return hatch_build.CustomBuildHook(str(ROOT), {}, _Config(), None, str(ROOT / "dist"), target)


@pytest.mark.parametrize("version", ["standard", "editable"])
def test_build_hook_force_includes_the_files_at_the_wheel_root(version: str) -> None:
    hook = _hook("wheel")
    build_data: dict = {"force_include": {}, "force_include_editable": {}}
    hook.initialize(version, build_data)
    try:
        targets = {target: Path(source).read_text() for source, target in build_data["force_include"].items()}
        assert targets == hook_files()
        if version == "editable":
            editable = build_data["force_include_editable"]
            assert editable["/abs/configured.txt"] == "configured.txt"  # configured entries kept
            assert set(editable.values()) == {"configured.txt", *hook_files()}
        else:
            assert build_data["force_include_editable"] == {}
    finally:
        tmp = hook._tmp
        hook.finalize(version, build_data, "")
    assert not Path(tmp).exists()


def test_build_hook_leaves_the_sdist_alone() -> None:
    hook = _hook("sdist")
    build_data: dict = {"force_include": {}}
    hook.initialize("standard", build_data)
    hook.finalize("standard", build_data, "")
    assert build_data == {"force_include": {}}
