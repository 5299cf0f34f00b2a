"""One Redis connection: the Feast-style connection string, parsed once, for every client.

::

    host:port[,host:port...][,db=N][,username=..][,password=..][,ssl=true]
             [,ssl_ca_certs=/path/ca.pem][,socket_timeout=0.05][,<any redis-py option>=..]

Each ``key=value`` is JSON-decoded when it can be (``db=1`` → 1, ``ssl=true`` → True) and
passed to ``redis.Redis`` (or ``redis.RedisCluster``, which takes every listed node as a
start-up node); ``password`` and ``username`` always stay strings. This is the parsing
Feast's own Redis store applies, so the same string works for the Feast CLI, the online
store, the miss stream and every health check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

import redis as redis_py
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

__all__ = ["RedisTarget", "RedisType", "answers", "redis_client", "unlink_matching"]

RedisType = Literal["redis", "redis_cluster"]
_STRINGS = frozenset({"password", "username", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile"})


@dataclass(frozen=True)
class RedisTarget:
    """A parsed connection string: the nodes and the client options."""

    nodes: tuple[tuple[str, int], ...]
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, connection: str) -> RedisTarget:
        if not isinstance(connection, str) or not connection.strip():
            raise ValueError("the Redis connection string is empty")
        nodes: list[tuple[str, int]] = []
        options: dict[str, Any] = {}
        for part in (p.strip() for p in connection.split(",")):
            if not part:
                continue
            if "=" in part:
                key, _, raw = part.partition("=")
                options[key] = raw if key in _STRINGS else _json_or_text(raw)
                continue
            host, _, port = part.rpartition(":") if ":" in part else (part, "", "6379")
            try:
                nodes.append((host or "localhost", int(port or 6379)))
            except ValueError:
                raise ValueError(f"Redis connection string: {part!r} is not host:port") from None
        if not nodes:
            raise ValueError("the Redis connection string names no host:port")
        return cls(tuple(nodes), options)

    def describe(self) -> str:
        """The nodes and option names, never their values (passwords stay out of logs)."""
        hosts = ",".join(f"{h}:{p}" for h, p in self.nodes)
        return f"{hosts} ({', '.join(sorted(self.options))})" if self.options else hosts


def _json_or_text(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def redis_client(
    connection: str | RedisTarget,
    *,
    redis_type: RedisType = "redis",
    timeout_s: float | None = None,
    retries: int = 3,
) -> redis_py.Redis | RedisCluster:
    """A redis-py client for ``connection``.

    Args:
        connection: the connection string (or an already parsed target).
        redis_type: ``redis`` (the first node) or ``redis_cluster`` (every node a start-up
            node).
        timeout_s: socket and connect timeout, unless the string sets its own.
        retries: retries on connection errors and timeouts (exponential back-off); 0 for
            the request path, where the caller's time bound is the retry policy.
    """
    target = connection if isinstance(connection, RedisTarget) else RedisTarget.parse(connection)
    kwargs = dict(target.options)
    if timeout_s is not None:
        kwargs.setdefault("socket_timeout", timeout_s)
        kwargs.setdefault("socket_connect_timeout", timeout_s)
    backoff = ExponentialBackoff() if retries else NoBackoff()
    if redis_type == "redis_cluster":
        kwargs.pop("db", None)  # a cluster has database 0 only
        return RedisCluster(
            startup_nodes=[ClusterNode(h, p) for h, p in target.nodes],
            retry=Retry(backoff, retries),
            **kwargs,
        )
    host, port = target.nodes[0]
    return redis_py.Redis(host=host, port=port, retry=Retry(backoff, retries), **kwargs)


def unlink_matching(client, pattern: str, batch: int = 1000) -> int:
    """Delete every key matching ``pattern`` (``SCAN`` + ``UNLINK`` in batches, never
    ``KEYS``); returns how many were deleted."""
    removed = 0
    keys: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=batch):
        keys.append(key)
        if len(keys) >= batch:
            removed += client.unlink(*keys)
            keys.clear()
    if keys:
        removed += client.unlink(*keys)
    return removed


def answers(connection: str, timeout_s: float = 0.5, redis_type: RedisType = "redis") -> bool:
    """Whether Redis at ``connection`` answers a PING within ``timeout_s``."""
    try:
        client = redis_client(connection, redis_type=redis_type, timeout_s=timeout_s, retries=0)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis_py.RedisError, OSError, ValueError):
        return False
