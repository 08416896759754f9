"""A throwaway real `redis-server` on 127.0.0.1 for the Redis store's tests and benchmark (never a fake)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


class RedisServerMissing(RuntimeError):
    """`redis-server` is not on PATH."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """`with RedisServer() as server: server.url` — a fresh server in a temp dir, stopped (and the dir removed) on exit."""

    def __init__(self, timeout: float = 20.0) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisServerMissing("redis-server is not installed; the Redis store tests need a real server: "
                                     "apt-get install -y redis-server (scripts/test.sh does it)")
        self.dir = Path(tempfile.mkdtemp(prefix="trsp-redis-"))
        self.port = _free_port()
        self.log = self.dir / "redis.log"
        self.proc = subprocess.Popen(
            [binary, "--save", "", "--appendonly", "no", "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.dir), "--logfile", str(self.log)],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not _ping(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.log.read_text() if self.log.exists() else ""
                self.stop()
                raise RuntimeError(f"redis-server did not answer PING on port {self.port}:\n{log[-2000:]}")
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
