"""The online store's read path: a request's rows from Redis in one round trip, decoded.

What it owns: checking a read's entity ids and request times (:func:`int64_ids`,
:func:`request_time`), the commands of a read (``HMGET`` of the requested items on a hash,
``GET`` of a view keyed by the user alone), packing them once (:func:`pack`: the member
fields shared by several views are framed once), sending them and parsing the replies, and
reading a key that answers an error (a foreign or corrupted key, ``WRONGTYPE``) as absent
for its own rows only, logged once by name. Only when every command of a read fails does
it raise: then the store itself fails, not one key.

Two ways in. :func:`read_views` answers any read (many users, a cluster) through
:func:`~solaris.store.round_trips.send`. The serving request path, one user × ``N``
candidates on a single Redis, is :func:`user_commands` then :func:`read_user_views`: it
reads the replies straight from the socket into a reused buffer and, when every candidate's
record has one length (the usual case), lets numpy parse them (:mod:`solaris.store.resp`),
without a Python object per field. :class:`solaris.store.online.SolarisOnlineStore` decides
which way a Feast request takes and holds the state both keep between requests.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import hiredis
import numpy as np
import redis as redis_py
from feast.protos.feast.types.Value_pb2 import Value as ValueProto
from redis.cluster import RedisCluster

from solaris.errors import SolarisError
from solaris.store import keys, resp
from solaris.store.codec import ViewRows, decode_records, decode_uniform
from solaris.store.contract import (
    ITEM_ID,
    REQUEST_TS,
    USER_ID,
    ViewParams,
    ViewSpec,
    epoch_seconds_array,
)
from solaris.store.round_trips import Arg, Client, PooledConnection, pack_command, send

log = logging.getLogger(__name__)

__all__ = [
    "Command",
    "FeatureRequestError",
    "RequestConnections",
    "int64_ids",
    "pack",
    "read_user_views",
    "read_views",
    "request_time",
    "user_commands",
]

_INT64_MAX = np.iinfo(np.int64).max

Command = tuple[bytes, str, "np.ndarray | None"]
"""One read: ``(command, key, member ids)``, member ids ``None`` for a ``GET``."""


class FeatureRequestError(SolarisError, ValueError):
    """A read this store cannot answer: an unknown feature reference, or entity rows that
    lack a join key, differ in length or hold ids or request times that are not valid. The
    message names the reference or the entity column (and the first bad row)."""


def read_views(
    client: Client,
    project: str,
    views: Sequence[tuple[ViewSpec, ViewParams]],
    entities: Mapping[str, np.ndarray],
    n: int,
    warned: set[str],
) -> list[ViewRows]:
    """The rows of each view for ``n`` (at least one) entity rows, in one round trip.

    On a single Redis the commands are packed here and sent on one pooled connection:
    the ``HMGET`` fields of a request's candidates are packed once and shared by every
    view keyed by items (pair, nbr, iagg). On a cluster they go through redis-py's
    cluster pipeline, which routes each key to its node. Reads are not retried: the
    caller's time bound is the policy. ``warned``: the keys logged as answering an error.
    """
    commands: list[Command] = []
    layouts: list[tuple[int, Callable[[list[Any]], list[Any]]]] = []
    for spec, _ in views:
        layouts.append(_queue_reads(commands, project, spec, entities, n))
    built: Sequence[bytes | Sequence[Arg]]
    if isinstance(client, RedisCluster):  # redis-py packs, and routes by key
        built = [
            (name, key, *(keys.member_fields(ids).tolist() if ids is not None else ()))
            for name, key, ids in commands
        ]
    else:
        built = pack(commands)
    replies = send(client, built, errors_as_replies=True)
    replies = _absent_where_refused(replies, commands, warned)
    out = []
    pos = 0
    for (spec, params), (count, assemble) in zip(views, layouts, strict=True):
        out.append(decode_records(spec, params, assemble(replies[pos : pos + count])))
        pos += count
    return out


def user_commands(
    project: str, specs: Sequence[ViewSpec], user_id: int, items: np.ndarray
) -> list[Command] | None:
    """The request path's commands for one user × ``items``: one per view, or ``None``
    when a view is not read by the user's key and the items (then :func:`read_views`)."""
    if not all(_keyed_by_user(spec) for spec in specs):
        return None
    commands: list[Command] = []
    for spec in specs:
        key = keys.view_key(project, spec)
        if spec.partition is not None:
            key = keys.partition_key(key, spec, user_id)
        if spec.member is None:
            commands.append((b"GET", key, None))
        else:
            commands.append((b"HMGET", key, items))
    return commands


def read_user_views(
    conns: RequestConnections,
    commands: Sequence[Command],
    views: Sequence[tuple[ViewSpec, ViewParams]],
    size_hint: int,
    warned: set[str],
) -> tuple[list[ViewRows], int]:
    """The request path's round trip: ``commands`` (:func:`user_commands`) sent on one of
    ``conns`` and each reply decoded for its view; and the bytes read (the next request's
    ``size_hint``).

    A view keyed by the user alone (``uagg``) is read and decoded once: its
    :class:`ViewRows` holds one row, which stands for every item
    (:func:`solaris.serving.tiers.assemble_tiers` takes it so). Rows are raw, stale ones
    included, as :meth:`SolarisOnlineResponse.rows` gives them.
    """
    shapes = [None if members is None else len(members) for _, _, members in commands]
    replies, size = _read_uniform(conns, pack(commands), shapes, size_hint)
    replies = _absent_where_refused(replies, commands, warned)
    out = []
    for (spec, params), reply in zip(views, replies, strict=True):
        if isinstance(reply, np.ndarray):
            out.append(decode_uniform(spec, params, reply))
        elif isinstance(reply, bytes) and reply and spec.member is None:
            one = np.frombuffer(reply, f"V{len(reply)}")  # the one record of a GET
            out.append(decode_uniform(spec, params, one))
        else:
            out.append(decode_records(spec, params, reply if spec.member is not None else [reply]))
    return out, size


def int64_ids(name: str, values: Any) -> np.ndarray:
    """Entity ids as int64; :class:`FeatureRequestError` for non-integers and anything
    outside ``[0, 2**63)`` (writes refuse negative ids, so reading one is always a bug)."""
    if isinstance(values, np.ndarray) and values.dtype == np.int64 and values.ndim == 1:
        arr = values
    else:
        arr = np.asarray(values)
        if arr.dtype == object:
            try:
                items = [v.int64_val if isinstance(v, ValueProto) else v for v in arr.tolist()]
                arr = np.asarray(items)
            except Exception:  # reported below as a bad type
                pass
        if arr.ndim != 1:
            raise FeatureRequestError(
                f"entity column {name!r} must be one-dimensional, got shape {arr.shape}"
            )
        if arr.size == 0:
            return arr.astype(np.int64)
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            raise FeatureRequestError(f"entity column {name!r} must hold integers, got {arr.dtype}")
        if np.issubdtype(arr.dtype, np.unsignedinteger) and arr.max() > _INT64_MAX:
            row = int(np.argmax(arr > _INT64_MAX))
            raise FeatureRequestError(
                f"entity column {name!r} holds ids outside int64 (first at row {row})"
            )
        arr = arr.astype(np.int64)
    if arr.size and arr.min() < 0:
        row = int(np.argmax(arr < 0))
        raise FeatureRequestError(
            f"entity column {name!r}: ids must be >= 0, got {int(arr[row])} at row {row}"
        )
    return arr


def request_time(values: Any, n: int) -> np.ndarray:
    """The request's ``[n]`` times in epoch seconds (the wall clock when none is given)."""
    if values is None:
        return np.full(n, float(int(time.time())))
    try:
        times = epoch_seconds_array(values, n, repr(REQUEST_TS), rows="entity row")
        return cast(np.ndarray, times)
    except ValueError as exc:
        raise FeatureRequestError(str(exc)) from None


def _keyed_by_user(spec: ViewSpec) -> bool:
    """A view one user × items reads by key: partitioned by the user (or not), members
    the items (or none)."""
    return (spec.partition is None or spec.partition.join_key == USER_ID) and (
        spec.member is None or spec.member.join_key == ITEM_ID
    )


def _queue_reads(
    commands: list[Command],
    project: str,
    spec: ViewSpec,
    entities: Mapping[str, np.ndarray],
    n: int,
) -> tuple[int, Callable[[list[Any]], list[Any]]]:
    """Add the reads of one view to ``commands`` as ``(command, key, member ids)``; returns
    (commands added, replies → list aligned with the ``n`` rows)."""
    prefix = keys.view_key(project, spec)
    members = entities[spec.member.join_key] if spec.member is not None else None
    if spec.partition is None:
        commands.append((b"HMGET", prefix, members))
        return 1, lambda replies: replies[0]
    parts = entities[spec.partition.join_key]
    if parts[0] == parts[-1] and (parts == parts[0]).all():  # one user: the request path
        key = keys.partition_key(prefix, spec, int(parts[0]))
        if members is None:
            commands.append((b"GET", key, None))
            return 1, lambda replies: replies * n
        commands.append((b"HMGET", key, members))
        return 1, lambda replies: replies[0]
    unique, inverse = np.unique(parts, return_inverse=True)
    if members is None:
        for pid in unique.tolist():
            commands.append((b"GET", keys.partition_key(prefix, spec, pid), None))
        return len(unique), lambda replies: [replies[i] for i in inverse.tolist()]
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(unique) + 1))
    sorted_members = members[order]
    for k, pid in enumerate(unique.tolist()):
        key = keys.partition_key(prefix, spec, pid)
        commands.append((b"HMGET", key, sorted_members[bounds[k] : bounds[k + 1]]))

    def assemble(replies: list[Any]) -> list[Any]:
        aligned = np.empty(n, object)
        aligned[order] = [v for reply in replies for v in reply]
        return aligned.tolist()

    return len(unique), assemble


def pack(commands: Sequence[Command]) -> list[bytes]:
    """The RESP bytes of each of ``commands``; the fields of a member-id array shared by
    several commands (pair, nbr and iagg of one request) are framed once."""
    bodies: dict[int, bytes] = {}
    parts: list[bytes] = []
    for command, key, members in commands:
        if members is None:
            parts.append(pack_command((command, key)))
            continue
        body = bodies.get(id(members))
        if body is None:
            body = bodies[id(members)] = resp.frames(keys.member_fields(members)).tobytes()
        parts.append(resp.command(command, [key], body, len(members)))
    return parts


def _absent_where_refused(
    replies: list[Any],
    commands: Sequence[Command],
    warned: set[str],
) -> list[Any]:
    """``replies`` with each error reply (a key of another type, ``WRONGTYPE``) replaced by
    what an absent key answers (``None``, or ``None`` per ``HMGET`` field), each such key
    logged once by name (``warned``: the keys logged already, at most 10,000 kept). When
    every reply is an error the first is raised: then the store itself fails, not one key."""
    refused = [k for k, reply in enumerate(replies) if isinstance(reply, Exception)]
    if not refused:
        return replies
    if len(refused) == len(replies):
        raise replies[refused[0]]
    out = list(replies)
    for k in refused:
        _name, key, members = commands[k]
        out[k] = None if members is None else [None] * len(members)
        if key not in warned and len(warned) < 10_000:
            warned.add(key)
            log.warning(
                "online store key %s answered %s: its rows are read as absent (delete or "
                "fix the key; the other keys of the request are served)",
                key,
                replies[k],
            )
    return out


class RequestConnections:
    """Connections of the request path, kept beside redis-py's pool rather than in it:
    taking one from a list and putting it back costs well under a microsecond, against
    ~20 µs for the pool's get and release with their bookkeeping (a fifth of the gap to the
    wire, docs/feature_store.md). One per concurrent read at most; a connection that failed
    is dropped, not put back; a forked process starts its own."""

    def __init__(self, client: redis_py.Redis) -> None:
        self.client = client
        self.pid = os.getpid()
        self._idle: list[PooledConnection] = []
        self._buffers = threading.local()

    def buffer(self, size: int) -> np.ndarray:
        """A receive buffer of at least ``size`` bytes: this thread's last one when nothing
        points into it any more (the replies of a request are views of its buffer, so one
        still held, by this thread or another, keeps the buffer from being overwritten),
        else a new one. Reusing it keeps the request's 100-200 KB where the last request
        left it in the cache, and spares the allocation."""
        buf = getattr(self._buffers, "last", None)
        # Three references when it is free: the thread-local slot, ``buf`` and the call's
        # argument; any view of it adds one.
        if buf is None or len(buf) < size or sys.getrefcount(buf) > 3:
            buf = self._buffers.last = np.empty(size, np.uint8)
        return buf

    def take(self) -> PooledConnection:
        """An idle connection, or a new one of the client's pool (not counted by it)."""
        try:
            return self._idle.pop()  # atomic: no lock
        except IndexError:
            return cast(PooledConnection, self.client.connection_pool.make_connection())

    def give(self, conn: PooledConnection) -> None:
        """Put back a connection that is in step (every reply of its request read)."""
        self._idle.append(conn)


def _read_uniform(
    conns: RequestConnections, packed: list[bytes], shapes: Sequence[int | None], size_hint: int
) -> tuple[list[Any], int]:
    """:func:`~solaris.store.round_trips.round_trip` for the request path: send ``packed``
    on one connection and read one reply per ``shapes`` entry (see
    :class:`resp.UniformReplies`) straight from the socket. Uniform replies (every candidate
    has a record of one length, the usual case) are parsed by numpy into records, without a
    Python object per field; any other reply stream is handed to hiredis from its first
    byte, and errors come back as replies. Returns the replies and the bytes read (the next
    call's ``size_hint``)."""
    conn = conns.take()
    try:
        sock = conn._sock  # redis-py's socket (TLS included); its reader stays unused
        if sock is None:
            conn.connect()
            sock = cast(socket.socket, conn._sock)
        sock.sendall(b"".join(packed))
        buf = conns.buffer(max(size_hint, 1 << 16))
        have = 0
        parser = resp.UniformReplies(shapes)
        replies: list[Any]
        while True:
            got = sock.recv_into(buf.data[have:])
            if not got:
                raise redis_py.ConnectionError("Redis closed the connection mid-reply")
            have += got
            parsed = parser.advance(buf, have)
            if parsed is None:
                replies = _hiredis_replies(sock, buf[:have].tobytes(), len(shapes))
                break
            if not isinstance(parsed, str):  # a str is resp.INCOMPLETE
                replies = parsed
                break
            if have == len(buf):
                buf = np.concatenate([buf, np.empty(len(buf), np.uint8)])
    except BaseException:
        conn.disconnect()
        raise
    conns.give(conn)
    return replies, have


def _hiredis_replies(sock: socket.socket, received: bytes, count: int) -> list[Any]:
    """``count`` replies parsed by hiredis from ``received`` and then the socket; an error
    reply is returned in its place as redis-py's ``ResponseError``."""
    reader = hiredis.Reader()
    reader.feed(received)
    replies: list[Any] = []
    chunk = bytearray(1 << 16)
    while len(replies) < count:
        reply = reader.gets()
        if reply is False:
            got = sock.recv_into(chunk)
            if not got:
                raise redis_py.ConnectionError("Redis closed the connection mid-reply")
            # hiredis's stub omits bytearray, which Reader.feed takes (any buffer).
            reader.feed(chunk, 0, got)  # type: ignore[arg-type]
            continue
        if isinstance(reply, hiredis.ReplyError):
            reply = redis_py.exceptions.ResponseError(str(reply))
        replies.append(reply)
    if reader.has_data():  # bytes beyond the replies: the connection is out of step
        raise redis_py.ConnectionError("Redis sent more than the replies of the request")
    return replies
