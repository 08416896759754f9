"""Shared fixtures: the trained fixture model, and real `transformers serve --enable-responses` servers on free ports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from transformers_responses.fixture_model import SCRIPT


def transformers_cli() -> str:
    """The host's console script next to this interpreter (the start-up hook registers the plugin in it)."""
    script = Path(sys.executable).parent / "transformers"
    if not script.exists():
        pytest.fail("the `transformers` console script is missing; install the project: pip install -e '.[test]'")
    return str(script)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    model: str
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def client(self):  # type: ignore[no-untyped-def]
        from openai import OpenAI

        return OpenAI(base_url=self.base_url, api_key="-", max_retries=0, timeout=120)

    def async_client(self):  # type: ignore[no-untyped-def]
        from openai import AsyncOpenAI

        return AsyncOpenAI(base_url=self.base_url, api_key="-", max_retries=0, timeout=120)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_server(model: Path | str, tmp: Path, *extra: str, enable: bool = True, timeout: float = 180) -> Server:
    port = free_port()
    log = tmp / f"server-{port}.log"
    store = [] if not enable or "--responses-store" in extra else ["--responses-store", f"sqlite:///{tmp}/responses.db"]
    cmd = [transformers_cli(), "serve", str(model), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
           *(["--enable-responses"] if enable else []), *store, *extra]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    server = Server(proc, port, str(model), log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    server.stop()
    pytest.fail(f"server did not start in {timeout} s:\n{log.read_text()[-4000:]}")


def completion(name: str) -> str:
    """What the fixture model answers to its scripted prompt `name`."""
    return next(s.completion for s in SCRIPT if s.name == name)


@pytest.fixture(scope="session")
def fixture_model() -> Path:
    from transformers_responses.fixture_model import build_fixture_model

    return build_fixture_model()


@pytest.fixture(scope="session")
def server(fixture_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(fixture_model, tmp_path_factory.mktemp("srv"))
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def cb_server(fixture_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # A bounded paged cache: by default the host's CB takes most of the free memory for it, and a second CB in the
    # test process (tests/test_structured.py) then gets this server OOM-killed on a 24 GiB machine.
    srv = start_server(fixture_model, tmp_path_factory.mktemp("cb"), "--continuous-batching", "--cb-num-blocks", "128")
    yield srv
    srv.stop()


@pytest.fixture(params=["generate", "continuous_batching"])
def srv(request: pytest.FixtureRequest) -> Server:
    """The same test on the sequential `generate()` server and on the continuous-batching one."""
    return request.getfixturevalue("server" if request.param == "generate" else "cb_server")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """`redis://127.0.0.1:PORT/0` of a real redis-server started for this session (fails, never skips, without it)."""
    from tests.redis_server import RedisServer, RedisServerMissing

    try:
        server = RedisServer()
    except RedisServerMissing as exc:
        pytest.fail(str(exc))
    yield server.url
    server.stop()
