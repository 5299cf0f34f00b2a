"""Sending commands to the online store's Redis: batches of commands, one round trip each.

Shared by the read path (:mod:`solaris.store.reads`) and the write path
(:mod:`solaris.store.writes`): both pipeline many commands per round trip, and both need an
error reply either raised (writes: nothing may be half-applied silently) or returned in its
place (reads: one bad key must not fail a request). The request path's own single-user read
does not come here: it parses replies straight from the socket (``reads._read_uniform``).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any, Protocol, cast

import hiredis
import redis as redis_py
from redis.cluster import RedisCluster

__all__ = [
    "COMMANDS_PER_PIPELINE",
    "Arg",
    "Client",
    "PooledConnection",
    "pack_command",
    "round_trip",
    "send",
]

COMMANDS_PER_PIPELINE = 1_000
"""Commands per round trip: bounds a pipeline's buffers on both ends."""

Client = redis_py.Redis | RedisCluster
"""What :func:`solaris.connection.redis_client` builds: one Redis, or a cluster."""

Arg = bytes | str | int | float
"""One argument of a command, as hiredis and redis-py take it."""


class PooledConnection(Protocol):
    """The part of redis-py's ``Connection`` the store uses (redis-py leaves these methods
    unannotated, so they are declared here and a pool's connection is cast to it)."""

    _sock: socket.socket | None

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def send_packed_command(self, command: list[bytes], check_health: bool = True) -> None: ...

    def read_response(self, disable_decoding: bool = False) -> Any: ...


class _ClusterPipeline(Protocol):
    """The part of redis-py's ``ClusterPipeline`` :func:`send` uses (unannotated there)."""

    def execute_command(self, *args: Arg) -> Any: ...

    def execute(self, raise_on_error: bool = True) -> list[Any]: ...


def pack_command(command: Sequence[Arg]) -> bytes:
    """The RESP bytes of one command, packed by hiredis."""
    # hiredis's stub declares a one-element tuple and no return type; it takes any tuple.
    return cast(bytes, hiredis.pack_command(tuple(command)))  # type: ignore[arg-type]


def round_trip(
    client: redis_py.Redis, packed: list[bytes], count: int, *, errors_as_replies: bool = False
) -> list[Any]:
    """Send the ``packed`` commands on one pooled connection and read ``count`` replies.
    An error reply raises, unless ``errors_as_replies``: then it is returned in its place
    (it was read whole, so the connection stays in step). On any other error the connection
    is dropped, since it may hold unread replies, and the error propagates."""
    pool = client.connection_pool
    pooled = pool.get_connection()
    conn = cast(PooledConnection, pooled)
    try:
        conn.send_packed_command([b"".join(packed)], check_health=False)  # one sendall
        replies: list[Any] = []
        for _ in range(count):
            try:
                replies.append(conn.read_response(disable_decoding=True))
            except redis_py.exceptions.ResponseError as exc:
                if not errors_as_replies:
                    raise
                replies.append(exc)
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(pooled)
    return replies


def send(
    client: Client,
    commands: Sequence[bytes | Sequence[Arg]],
    batch: int = COMMANDS_PER_PIPELINE,
    *,
    errors_as_replies: bool = False,
) -> list[Any]:
    """Send ``commands`` (argument tuples, or commands packed already: bytes) in batches of
    one round trip each; the replies. An error reply raises, unless ``errors_as_replies``
    (reads: see ``reads._absent_where_refused``), which returns it in its place.

    A single Redis gets them packed by hiredis on one pooled connection; a cluster through
    redis-py's cluster pipeline, which routes each key to its node.
    """
    replies: list[Any] = []
    for start in range(0, len(commands), batch):
        part = commands[start : start + batch]
        if isinstance(client, RedisCluster):
            # redis-py's RedisCluster.pipeline is unannotated: its pipeline is cast to the
            # methods used.
            pipe = cast(_ClusterPipeline, client.pipeline(transaction=False))  # type: ignore[no-untyped-call]
            for command in part:  # redis-py's cluster routing wants str names
                name, *args = command
                assert isinstance(name, bytes), "a cluster is sent argument tuples"
                pipe.execute_command(name.decode(), *args)
            replies.extend(pipe.execute(raise_on_error=not errors_as_replies))
        else:
            packed = [c if isinstance(c, bytes) else pack_command(c) for c in part]
            replies.extend(
                round_trip(client, packed, len(part), errors_as_replies=errors_as_replies)
            )
    return replies
