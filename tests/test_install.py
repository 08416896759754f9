"""The start-up hook as installed: a built wheel and an editable install, each in a fresh venv.

Slow-ish (about a minute: every `transformers ...` invocation imports the host's serve stack); run it alone with
`pytest tests/test_install.py`, or leave it out with `--deselect tests/test_install.py` / `-k 'not install'`.

* The wheel is built from a copy of the source tree with `pip wheel --no-deps --no-build-isolation` (hatchling and
  our `hatch_build.py`, no network).
* The venvs have `--system-site-packages` so that torch/transformers come from this interpreter's site-packages, and
  the project is installed with `--no-deps --ignore-installed`, so a copy of the project already installed in the
  system site-packages (say, `pip install -e .` of this checkout) is neither used nor touched: the venv's own
  site-packages come first on sys.path and in `importlib.metadata`, and `install()` is idempotent when both `.pth`
  files run.
* A `--system-site-packages` venv has no `transformers` console script of its own (the host's lives next to the system
  interpreter), so the tests write the same wrapper pip writes for the host's `console_scripts` entry into the venv.
* The start-up cost is measured in a venv *without* system site-packages (nothing but our wheel in it), so the
  figure is the hook's alone: `python -c pass`, interleaved with and without the hook files, min and median of 30.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import distribution
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parent.parent
HOOK_FILES = ("transformers_responses_hook.pth", "transformers_responses_hook.start")
HOOK_DISABLED_LINE = "transformers-responses: start-up hook disabled"
BIN = "Scripts" if os.name == "nt" else "bin"
COST_BOUND_MS = 15.0  # generous, against a noisy shared machine; the real figure is printed


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRANSFORMERS_RESPONSES_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_UPDATE_CHECK="1", TRANSFORMERS_NO_ADVISORY_WARNINGS="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", NO_COLOR="1", COLUMNS="200")
    env.update(extra)
    return env


def sh(*cmd: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None,
       timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env or clean_env(), cwd=cwd,
                          timeout=timeout)


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"{proc.args}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    return proc


class Venv:
    def __init__(self, path: Path, system_site_packages: bool) -> None:
        self.path = path
        args = ["--without-pip"] + (["--system-site-packages"] if system_site_packages else [])
        ok(sh(sys.executable, "-m", "venv", *args, path))
        self.python = path / BIN / ("python.exe" if os.name == "nt" else "python")
        self.site = Path(ok(sh(self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
                         .stdout.strip())

    def pip(self, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        # this interpreter's pip, installing into the venv
        return ok(sh(sys.executable, "-m", "pip", "--python", self.python, *args, cwd=cwd))

    def script(self, name: str) -> Path:
        return self.path / BIN / name

    def add_host_script(self) -> None:
        """The host's `transformers` console script, as pip would write it into this venv."""
        (ep,) = [e for e in distribution("transformers").entry_points
                 if e.group == "console_scripts" and e.name == "transformers"]
        module, _, attr = ep.value.partition(":")
        script = self.script("transformers")
        script.write_text(f"#!{self.python}\nimport re\nimport sys\nfrom {module} import {attr}\n"
                          "if __name__ == '__main__':\n"
                          "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
                          f"    sys.exit({attr}())\n")
        script.chmod(0o755)


Results = dict[str, subprocess.CompletedProcess[str]]


def run_all(commands: dict[str, tuple[list[str | Path], dict[str, str]]]) -> Results:
    """Run independent (slow) CLI invocations concurrently."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {key: pool.submit(sh, *cmd, env=env) for key, (cmd, env) in commands.items()}
        return {key: f.result() for key, f in futures.items()}


# --- fixtures --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("install")


@pytest.fixture(scope="module")
def source(workdir: Path) -> Path:
    """A copy of the source tree (what an sdist would hold, give or take), so nothing is built in the checkout."""
    dst = workdir / "src"
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(
        ".git", ".venv", "venv", ".hypothesis", ".benchmarks", "__pycache__", "build", "dist", "*.egg-info",
        ".pytest_cache", ".mypy_cache", ".ruff_cache", ".whl", "node_modules"))
    return dst


@pytest.fixture(scope="module")
def wheel(source: Path, workdir: Path) -> Path:
    out = workdir / "wheels"
    ok(sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", out, ".", cwd=source))
    (whl,) = out.glob("transformers_responses-*.whl")
    return whl


@pytest.fixture(scope="module")
def wheel_venv(wheel: Path, workdir: Path) -> Venv:
    venv = Venv(workdir / "venv-wheel", system_site_packages=True)
    venv.pip("install", "--no-deps", "--ignore-installed", "--no-index", wheel)
    venv.add_host_script()
    return venv


@pytest.fixture(scope="module")
def editable_venv(source: Path, workdir: Path) -> Venv:
    venv = Venv(workdir / "venv-editable", system_site_packages=True)
    # Without `dev-mode-dirs`, hatchling's editable build needs the `editables` package in the build environment,
    # which `--no-build-isolation` makes the venv itself.
    needs_editables = "dev-mode-dirs" not in (source / "pyproject.toml").read_text()
    if needs_editables and sh(venv.python, "-c", "import editables").returncode != 0:
        got = sh(sys.executable, "-m", "pip", "--python", venv.python, "install", "-q", "editables~=0.3")
        if got.returncode != 0:
            pytest.skip(f"hatchling's editable build needs `editables`, which could not be installed:\n{got.stderr}")
    venv.pip("install", "--no-deps", "--no-build-isolation", "--ignore-installed", "-e", ".", cwd=source)
    venv.add_host_script()
    return venv


@pytest.fixture(scope="module")
def wheel_cli(wheel_venv: Venv) -> Results:
    host = wheel_venv.script("transformers")
    off = clean_env(TRANSFORMERS_RESPONSES_DISABLE="1")
    return run_all({
        "serve": ([host, "serve", "--help"], clean_env()),
        "responses": ([host, "responses", "--help"], clean_env()),
        "serve_off": ([host, "serve", "--help"], off),
        "help_off": ([host, "--help"], off),
        "explicit_off": ([wheel_venv.script("transformers-responses"), "responses", "--help"], off),
    })


@pytest.fixture(scope="module")
def editable_cli(editable_venv: Venv) -> Results:
    host = editable_venv.script("transformers")
    return run_all({
        "responses": ([host, "responses", "--help"], clean_env()),
        "serve": ([host, "serve", "--help"], clean_env()),
    })


def assert_no_hook_trouble(proc: subprocess.CompletedProcess[str]) -> None:
    assert HOOK_DISABLED_LINE not in proc.stderr, proc.stderr
    assert "plugin 'responses' failed to load" not in proc.stderr, proc.stderr


# --- the wheel -------------------------------------------------------------------------------------------------------


def test_wheel_ships_the_hook_files_at_its_root(wheel: Path) -> None:
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert set(HOOK_FILES) <= set(names)
        start = zf.read("transformers_responses_hook.start").decode()
        assert start.strip() == "transformers_responses._startup:install"
        record = zf.read(next(n for n in names if n.endswith(".dist-info/RECORD"))).decode()
    for name in HOOK_FILES:  # so that `pip uninstall` removes them
        assert f"\n{name}," in f"\n{record}"


def test_wheel_venv_has_the_hook_and_does_not_import_transformers_at_start(wheel_venv: Venv) -> None:
    for name in HOOK_FILES:
        assert (wheel_venv.site / name).is_file()
    ok(sh(wheel_venv.python, "-c",
          "import sys; assert 'transformers' not in sys.modules, 'transformers imported at start-up'\n"
          "hooks = [f for f in sys.meta_path if getattr(f, '_transformers_responses_hook', False) is True]\n"
          "assert len(hooks) == 1, sys.meta_path\n"
          "import transformers_responses\n"
          f"assert transformers_responses.__file__.startswith({str(wheel_venv.site)!r})"))


def test_wheel_serve_help_lists_enable_responses(wheel_cli: Results) -> None:
    proc = ok(wheel_cli["serve"])
    assert_no_hook_trouble(proc)
    assert "--enable-responses" in proc.stdout


def test_wheel_responses_subcommand(wheel_cli: Results) -> None:
    proc = ok(wheel_cli["responses"])
    assert_no_hook_trouble(proc)
    assert "create" in proc.stdout and "demo" in proc.stdout


def test_wheel_kill_switch(wheel_cli: Results) -> None:
    serve = ok(wheel_cli["serve_off"])
    assert "--port" in serve.stdout and "--enable-responses" not in serve.stdout
    listing = ok(wheel_cli["help_off"])
    commands = [line.split()[0] for line in listing.stdout.splitlines() if line.startswith("  ") and line.split()]
    assert "serve" in commands and "responses" not in commands, listing.stdout
    assert HOOK_DISABLED_LINE not in serve.stderr + listing.stderr  # off is quiet


def test_wheel_explicit_console_script_works_with_the_hook_off(wheel_cli: Results) -> None:
    proc = ok(wheel_cli["explicit_off"])
    assert "create" in proc.stdout


def test_start_up_cost(wheel: Path, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    venv = Venv(workdir / "venv-bare", system_site_packages=False)
    venv.pip("install", "--no-deps", "--no-index", wheel)  # compiles the .pyc files, as any wheel install does
    env = clean_env()
    cmd = [str(venv.python), "-c", "pass"]

    def modules() -> set[str]:
        out = ok(sh(venv.python, "-c", "import sys; print(' '.join(sorted(sys.modules)))", env=env)).stdout
        return set(out.split())

    def once() -> float:
        start = time.perf_counter()
        subprocess.run(cmd, env=env, check=True)
        return time.perf_counter() - start

    def hook(on: bool) -> None:
        for name in HOOK_FILES:
            a, b = venv.site / name, venv.site / (name + ".off")
            if on and b.exists():
                b.rename(a)
            elif not on and a.exists():
                a.rename(b)

    with_hook = modules()
    hook(False)
    without = modules()
    for _ in range(3):  # warm the OS caches
        once()
    on, off = [], []
    try:
        for _ in range(30):
            hook(True)
            on.append(once())
            hook(False)
            off.append(once())
    finally:
        hook(True)
    assert with_hook - without <= {"transformers_responses", "transformers_responses._startup", "__future__"}, \
        with_hook - without
    d_min = (min(on) - min(off)) * 1e3
    d_med = (statistics.median(on) - statistics.median(off)) * 1e3
    with capsys.disabled():
        print(f"\n[start-up hook] `python -c pass` x30 interleaved: with {min(on) * 1e3:.1f}/"
              f"{statistics.median(on) * 1e3:.1f} ms, without {min(off) * 1e3:.1f}/{statistics.median(off) * 1e3:.1f}"
              f" ms (min/median); added {d_min:+.2f} ms min, {d_med:+.2f} ms median")
    assert d_med < COST_BOUND_MS


# --- the editable install --------------------------------------------------------------------------------------------


def test_editable_venv_has_the_hook_after_the_path_file(editable_venv: Venv, source: Path) -> None:
    names = sorted(p.name for p in editable_venv.site.glob("*.pth"))
    ours = names.index("transformers_responses_hook.pth")
    path_files = [n for n in names if n.startswith("_") and "transformers_responses" in n]
    assert path_files and all(names.index(n) < ours for n in path_files), names
    assert (editable_venv.site / "transformers_responses_hook.start").is_file()
    ok(sh(editable_venv.python, "-c",
          "import sys; assert 'transformers' not in sys.modules\n"
          "assert [f for f in sys.meta_path if getattr(f, '_transformers_responses_hook', False) is True]\n"
          f"import transformers_responses; assert transformers_responses.__file__.startswith({str(source)!r}), "
          "transformers_responses.__file__"))


def test_editable_responses_subcommand(editable_cli: Results) -> None:
    proc = ok(editable_cli["responses"])
    assert_no_hook_trouble(proc)
    assert "create" in proc.stdout


def test_editable_serve_help_lists_enable_responses(editable_cli: Results) -> None:
    proc = ok(editable_cli["serve"])
    assert_no_hook_trouble(proc)
    assert "--enable-responses" in proc.stdout


@pytest.fixture(scope="module", autouse=True)
def _cleanup(workdir: Path) -> Iterator[None]:
    yield
    shutil.rmtree(workdir, ignore_errors=True)
