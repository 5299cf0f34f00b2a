"""Sending commands to the online store's Redis: batches of commands, one round trip each.

Shared by the read path (:mod:`solaris.store.reads`) and the write path
(:mod:`solaris.store.writes`): both pipeline many commands per round trip, and both need an
error reply either raised (writes: nothing may be half-applied silently) or returned in its
place (reads: one bad key must not fail a request). The request path's own single-user read
does not come here: it parses replies straight from the socket (``reads._read_uniform``).
"""

from __future__ import annotations

from collections.abc import Sequence

import hiredis
import redis as redis_py
from redis.cluster import RedisCluster

__all__ = ["COMMANDS_PER_PIPELINE", "round_trip", "send"]

COMMANDS_PER_PIPELINE = 1_000
"""Commands per round trip: bounds a pipeline's buffers on both ends."""


def round_trip(
    client: redis_py.Redis, packed: list[bytes], count: int, *, errors_as_replies: bool = False
) -> list:
    """Send the ``packed`` commands on one pooled connection and read ``count`` replies.
    An error reply raises, unless ``errors_as_replies``: then it is returned in its place
    (it was read whole, so the connection stays in step). On any other error the connection
    is dropped, since it may hold unread replies, and the error propagates."""
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        conn.send_packed_command([b"".join(packed)], check_health=False)  # one sendall
        replies = []
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
        pool.release(conn)
    return replies


def send(
    client,
    commands: Sequence,
    batch: int = COMMANDS_PER_PIPELINE,
    *,
    errors_as_replies: bool = False,
) -> list:
    """Send ``commands`` (argument tuples, or commands packed already: bytes) in batches of
    one round trip each; the replies. An error reply raises, unless ``errors_as_replies``
    (reads: see ``reads._absent_where_refused``), which returns it in its place.

    A single Redis gets them packed by hiredis on one pooled connection; a cluster through
    redis-py's cluster pipeline, which routes each key to its node.
    """
    replies: list = []
    for start in range(0, len(commands), batch):
        part = commands[start : start + batch]
        if isinstance(client, RedisCluster):
            pipe = client.pipeline(transaction=False)
            for name, *args in part:  # redis-py's cluster routing wants str names
                pipe.execute_command(name.decode(), *args)
            replies.extend(pipe.execute(raise_on_error=not errors_as_replies))
        else:
            packed = [c if isinstance(c, bytes) else hiredis.pack_command(c) for c in part]
            replies.extend(
                round_trip(client, packed, len(part), errors_as_replies=errors_as_replies)
            )
    return replies
