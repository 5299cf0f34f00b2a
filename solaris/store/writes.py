"""The online store's write path: validated Arrow rows to Redis hashes, with their expiry.

What it owns: grouping a batch's rows by Redis key, the records' bytes on the wire (one
``MULTI`` … ``EXEC`` transaction per key on a single Redis, one Lua script per key on a
cluster), every key's expiry, the pruning of rows older than the retention, and the
conversion of Feast's row protos for ``online_write_batch``. The rules are in
``docs/online_store_format.md``; :class:`solaris.store.online.SolarisOnlineStore` calls
:func:`write_rows` and :func:`write_commands` with the client and settings it owns, so this
module never sees Feast's configuration.

Nothing of a batch is sent before the whole batch was validated
(:func:`solaris.store.codec.normalize`, by the caller) and every key checked to be of the
type the view writes: a failure mid-batch would leave some keys written and the rest not.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import redis as redis_py
from feast.protos.feast.types.EntityKey_pb2 import EntityKey as EntityKeyProto
from feast.protos.feast.types.Value_pb2 import Value as ValueProto
from feast.type_map import feast_value_type_to_python_type
from redis.cluster import RedisCluster

from solaris.store import keys, resp
from solaris.store.codec import encode_record_array, encode_records, normalize
from solaris.store.contract import EVENT_TS, InvalidWriteError, ViewParams, ViewSpec
from solaris.store.round_trips import (
    COMMANDS_PER_PIPELINE,
    Arg,
    Client,
    pack_command,
    round_trip,
    send,
)

__all__ = ["feast_rows", "write_commands", "write_rows"]

_US = 1_000_000

Span = tuple[str, tuple[int, int], int]
"""One key's write: its name, its rows ``lo:hi`` in the grouped order, its newest event µs."""

Hset = Callable[[str, int, int], bytes | tuple[Arg, ...]]
"""``hset(key, lo, hi)``: the ``HSET`` of a key's rows ``lo:hi``, packed or as arguments."""

# One key's whole write on Redis Cluster, where a transaction cannot span the pipeline of
# many keys: its fields, its expiry and its prune marker in one script, so that a killed
# writer or a dropped connection never leaves the fields without the expiry. The expiry
# follows the first HSET: a script that has written is not stopped for memory by Redis
# (only its first write can be refused, and then nothing was written), so no key is left
# without one. HSET takes 500 pairs at a time (Lua's unpack has a stack limit).
#   KEYS[1] hash; ARGV[1] retention ms; ARGV[2] newest event us; ARGV[3..] field, record
_WRITE_LUA = """
local key = KEYS[1]
for first = 3, #ARGV, 1000 do
  redis.call('HSET', key, unpack(ARGV, first, math.min(first + 999, #ARGV)))
  if first == 3 then
    redis.call('PEXPIRE', key, ARGV[1])
  end
end
redis.call('HSETNX', key, '', ARGV[2])
return redis.call('HGET', key, '')
"""

# Prune one hash: delete the fields whose record (its first 8 bytes: the event time, int64
# LE) is older than the cutoff, and record the newest event time written as the hash's last
# prune (field ""). Event times are below 2^53 us, exact in Lua's doubles.
#   KEYS[1] hash; ARGV[1] cutoff us; ARGV[2] newest event us written
_PRUNE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local cutoff = tonumber(ARGV[1])
local all = redis.call('HGETALL', KEYS[1])
local stale = {}
local removed = 0
for i = 1, #all, 2 do
  local record = all[i + 1]
  if all[i] ~= '' and #record >= 8 and struct.unpack('<i8', record) < cutoff then
    stale[#stale + 1] = all[i]
    if #stale == 1000 then
      removed = removed + redis.call('HDEL', KEYS[1], unpack(stale))
      stale = {}
    end
  end
end
if #stale > 0 then
  removed = removed + redis.call('HDEL', KEYS[1], unpack(stale))
end
redis.call('HSET', KEYS[1], '', ARGV[2])
return removed
"""


# What the writes call by EVALSHA: the SHA1 of each script, as redis-py's register_script
# computes it (the scripts are loaded on a NOSCRIPT reply, see _send_scripted).
_WRITE_SHA = hashlib.sha1(_WRITE_LUA.encode()).hexdigest()
_PRUNE_SHA = hashlib.sha1(_PRUNE_LUA.encode()).hexdigest()


def write_rows(
    client: Client,
    project: str,
    spec: ViewSpec,
    params: ViewParams,
    rows: pa.Table,
    *,
    prune_every: float,
    fields_per_command: int,
) -> None:
    """Write ``rows`` (at least one), already :func:`~solaris.store.codec.normalize`-d for
    ``spec``, to the keys of ``project``.

    Hash views, per key, one transaction (:func:`write_commands`): its ``HSET``s of at most
    ``fields_per_command`` fields, its prune marker (field ``""``, created if absent), its
    expiry renewed to the retention and the marker read back; the hashes whose newest
    written row is ``prune_every × retention`` past their marker are pruned by a script in
    a second round trip (a small share of the writes). On a cluster each key's write is one
    script instead. String views: ``SET`` with ``PX``.
    """
    retention_ms = params.retention_s * 1000
    order, bounds, key_names = _grouped(project, spec, rows)
    _refuse_foreign_keys(client, spec, key_names)
    if spec.member is None:
        # One string per partition: the last row of the batch for it wins.
        records = encode_records(spec, params, rows, order)
        commands = [
            (b"SET", key, records[i - 1], b"PX", retention_ms)
            for key, i in zip(key_names, bounds[1:].tolist(), strict=True)
        ]
        send(client, commands)
    else:
        _write_hashes(
            client, params, rows, order, bounds, key_names, spec, prune_every, fields_per_command
        )


def write_commands(
    project: str,
    spec: ViewSpec,
    params: ViewParams,
    rows: pa.Table | pd.DataFrame,
    fields_per_command: int,
) -> list[list[bytes]]:
    """The RESP bytes :func:`write_rows` sends to write ``rows`` of the hash view ``spec``
    on one Redis, without sending them: one transaction per key, in the order sent, each as
    its packed commands (``MULTI``, the key's ``HSET``s, ``HSETNX`` of its prune marker,
    ``PEXPIRE``, ``HGET`` of the marker, ``EXEC``). Not included: the ``TYPE`` check of the
    keys before them and the prune scripts after them (those depend on what Redis answers).

    Raises:
        InvalidWriteError: bad rows, or a view that is not a hash view.
    """
    if spec.member is None:
        raise InvalidWriteError(
            f"view {spec.name!r} is one string per key, not a hash: it is written with SET"
        )
    normalized = normalize(spec, params, rows)
    if normalized.num_rows == 0:
        return []
    order, bounds, key_names = _grouped(project, spec, normalized)
    spans, hset = _hash_writes(spec, params, normalized, order, bounds, key_names, framed=True)
    groups = _transactions(spans, hset, fields_per_command, params.retention_s * 1000)
    return [[_MULTI, *group, _EXEC] for group in groups]


def feast_rows(
    spec: ViewSpec,
    data: Sequence[tuple[EntityKeyProto, dict[str, ValueProto], datetime, datetime | None]],
) -> pd.DataFrame:
    """Feast's write rows (``online_write_batch``'s ``data``) as a frame of ``spec``'s
    columns, for :func:`~solaris.store.codec.normalize`: entity ids as ints (any other value
    type is refused, never read as 0), feature protos as Python values."""
    columns: dict[str, list[Any]] = {k: [] for k in spec.join_keys}
    for f in spec.fields:
        columns[f.name] = []
    columns[EVENT_TS] = []
    for row, (entity_key, values, event_ts, _created) in enumerate(data):
        if len(entity_key.join_keys) != len(entity_key.entity_values):
            raise InvalidWriteError(
                f"view {spec.name!r}, row {row}: the entity key names "
                f"{len(entity_key.join_keys)} join keys {list(entity_key.join_keys)} but "
                f"holds {len(entity_key.entity_values)} values"
            )
        ids = dict(zip(entity_key.join_keys, entity_key.entity_values, strict=True))
        for k in spec.join_keys:
            columns[k].append(_entity_id(spec, k, ids.get(k), row))
        for f in spec.fields:
            proto = values.get(f.name)
            columns[f.name].append(
                None if proto is None else feast_value_type_to_python_type(proto)
            )
        columns[EVENT_TS].append(event_ts)
    frame = pd.DataFrame(columns)
    frame[EVENT_TS] = pd.to_datetime(frame[EVENT_TS], utc=True)
    return frame


def _write_hashes(
    client: Client,
    params: ViewParams,
    rows: pa.Table,
    order: np.ndarray,
    bounds: np.ndarray,
    key_names: list[str],
    spec: ViewSpec,
    prune_every: float,
    fields_per_command: int,
) -> None:
    """The hash part of :func:`write_rows`: the rows in ``order`` are grouped by key,
    ``bounds`` delimiting the groups of ``key_names``."""
    retention_ms = params.retention_s * 1000
    cluster = isinstance(client, RedisCluster)
    spans, hset = _hash_writes(spec, params, rows, order, bounds, key_names, framed=not cluster)
    newest = [top for _key, _span, top in spans]
    markers: list[Any]
    if isinstance(client, RedisCluster):
        # redis-py's cluster pipeline routes each command to its node but cannot make a
        # transaction of many keys: each key's write is one script, atomic on its node.
        markers = _send_scripted(
            client,
            [
                (b"EVALSHA", _WRITE_SHA, 1, key, retention_ms, top, *hset(key, lo, hi)[2:])
                for key, (lo, hi), top in spans
            ],
        )
    else:
        # One transaction per key: its HSETs, its marker and its expiry are applied
        # together or not at all, so whatever fails (a refused write, a dropped
        # connection, a killed writer) no key is left without an expiry.
        markers = _send_transactions(
            client, _transactions(spans, hset, fields_per_command, retention_ms)
        )
    interval = prune_every * params.retention_s * _US
    retention_us = params.retention_s * _US
    # Due when the newest row written is an interval past the marker, or an interval
    # before it (a marker left by rows from the future, e.g. a replay after live data,
    # would otherwise block pruning until that date): the prune resets the marker.
    prunes = [
        (b"EVALSHA", _PRUNE_SHA, 1, key, top - retention_us, top)
        for key, top, marker in zip(key_names, newest, markers, strict=True)
        if marker is not None and abs(top - int(marker)) >= interval
    ]
    if prunes:
        _send_scripted(client, prunes)


def _entity_id(spec: ViewSpec, key: str, value: ValueProto | None, row: int) -> int | None:
    """The int64 id of one entity value of a Feast write (``None`` when absent: the null
    check names it); any other value type is refused, never read as 0."""
    if value is None:
        return None
    kind = value.WhichOneof("val")
    if kind not in ("int64_val", "int32_val"):
        raise InvalidWriteError(
            f"view {spec.name!r}, column {key!r}, row {row}: entity ids must be int64, "
            f"got {kind or 'no value'}"
        )
    return int(getattr(value, kind))


def _refuse_foreign_keys(client: Client, spec: ViewSpec, key_names: Sequence[str]) -> None:
    """Raise :class:`InvalidWriteError` naming the keys of ``key_names`` that hold another
    Redis type than ``spec`` writes (a hash, or a string for a view without members),
    before anything is written: a ``WRONGTYPE`` in the middle of a batch would leave the
    keys before it written and the rest not. One ``TYPE`` per key, in the write's round
    trips (``TYPE`` is O(1))."""
    wanted = b"hash" if spec.member is not None else b"string"
    types = send(client, [(b"TYPE", key) for key in key_names])
    foreign = [
        (key, kind.decode() if isinstance(kind, bytes) else str(kind))
        for key, kind in zip(key_names, types, strict=True)
        if kind not in (wanted, b"none", "none", wanted.decode())
    ]
    if foreign:
        shown = ", ".join(f"{key} ({kind})" for key, kind in foreign[:5])
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        raise InvalidWriteError(
            f"view {spec.name!r}: {len(foreign)} key(s) hold another Redis type than the "
            f"{wanted.decode()} the view writes: {shown}{more}. Nothing of the batch was "
            "written; delete those keys (they are not SOLARIS rows) and write again"
        )


def _packed(command: bytes | tuple[Arg, ...]) -> bytes:
    return command if isinstance(command, bytes) else pack_command(command)


_MULTI = pack_command((b"MULTI",))
_EXEC = pack_command((b"EXEC",))


def _grouped(
    project: str, spec: ViewSpec, rows: pa.Table
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The write's rows grouped by key: ``order`` (stable: within a key the batch's order is
    kept), ``bounds`` delimiting each key's rows in that order, and the keys' names."""
    n = rows.num_rows
    prefix = keys.view_key(project, spec)
    if spec.partition is None:
        return np.arange(n), np.array([0, n]), [prefix]
    parts = rows[spec.partition.join_key].combine_chunks().to_numpy()
    order = np.argsort(parts, kind="stable")
    sorted_parts = parts[order]
    bounds = np.flatnonzero(np.r_[True, sorted_parts[1:] != sorted_parts[:-1], True])
    part_ids = sorted_parts[bounds[:-1]].tolist()
    return order, bounds, [keys.partition_key(prefix, spec, pid) for pid in part_ids]


def _hash_writes(
    spec: ViewSpec,
    params: ViewParams,
    rows: pa.Table,
    order: np.ndarray,
    bounds: np.ndarray,
    key_names: list[str],
    *,
    framed: bool,
) -> tuple[list[Span], Hset]:
    """Each key's ``(key, (lo, hi), newest event µs)`` and ``hset(key, lo, hi)``, the ``HSET``
    of its rows ``lo:hi``: packed bytes when ``framed`` and the records have one length
    (every (field, record) pair framed by numpy in one buffer), else a command tuple."""
    assert spec.member is not None, "a hash view"  # string views are written with SET
    fields = keys.member_fields(rows[spec.member.join_key].combine_chunks().to_numpy()[order])
    event_us = rows[EVENT_TS].combine_chunks().cast(pa.int64()).to_numpy()[order]
    newest = np.maximum.reduceat(event_us, bounds[:-1]).tolist()
    spans = list(zip(key_names, itertools.pairwise(bounds.tolist()), newest, strict=True))
    records = encode_record_array(spec, params, rows, order)
    if records is not None and framed:
        framed_pairs = resp.pairs(fields, records)

        def hset_bytes(key: str, lo: int, hi: int) -> bytes:
            return resp.command(b"HSET", [key], framed_pairs[lo:hi].tobytes(), 2 * (hi - lo))

        return spans, hset_bytes
    values = records.tolist() if records is not None else encode_records(spec, params, rows, order)
    field_bytes = fields.tolist()

    def hset_tuple(key: str, lo: int, hi: int) -> tuple[Arg, ...]:
        args: list[Any] = [None] * (2 * (hi - lo))
        args[0::2] = field_bytes[lo:hi]
        args[1::2] = values[lo:hi]
        return (b"HSET", key, *args)

    return spans, hset_tuple


def _transactions(
    spans: Sequence[Span],
    hset: Hset,
    chunk: int,
    retention_ms: int,
) -> list[list[bytes]]:
    """Each key's transaction body, packed: its ``HSET``s of at most ``chunk`` fields, its
    prune marker (``HSETNX`` of the newest row's time), its expiry and the marker read."""
    return [
        [
            *(_packed(hset(key, start, min(start + chunk, hi))) for start in range(lo, hi, chunk)),
            pack_command((b"HSETNX", key, b"", top)),
            pack_command((b"PEXPIRE", key, int(retention_ms))),
            pack_command((b"HGET", key, b"")),
        ]
        for key, (lo, hi), top in spans
    ]


def _send_transactions(client: redis_py.Redis, groups: Sequence[Sequence[bytes]]) -> list[Any]:
    """Each group of packed commands as one ``MULTI`` … ``EXEC`` transaction, as many per
    round trip as fit :data:`COMMANDS_PER_PIPELINE` (a group is never split); the last
    reply of each transaction. An error, queued or executed, raises (a refused command
    aborts its transaction: ``EXECABORT``, nothing of it applied)."""
    out: list[Any] = []
    batch: list[bytes] = []
    sizes: list[int] = []

    def flush() -> None:
        try:
            replies = round_trip(client, batch, sum(sizes) + 2 * len(sizes))
        except redis_py.exceptions.ExecAbortError as exc:
            # Out of memory at EXEC rather than at a queued command: the same refusal.
            if "OOM" in str(exc):
                raise redis_py.exceptions.OutOfMemoryError(str(exc)) from exc
            raise
        pos = 0
        for size in sizes:
            executed = replies[pos + size + 1]  # MULTI's OK, size QUEUED, then EXEC's array
            failed = next((r for r in executed if isinstance(r, Exception)), None)
            if failed is not None:
                raise failed
            out.append(executed[-1])
            pos += size + 2
        batch.clear()
        sizes.clear()

    for group in groups:
        if batch and sum(sizes) + len(group) > COMMANDS_PER_PIPELINE:
            flush()
        batch.extend((_MULTI, *group, _EXEC))
        sizes.append(len(group))
    if batch:
        flush()
    return out


def _send_scripted(client: Client, commands: Sequence[Sequence[Arg]]) -> list[Any]:
    """:func:`~solaris.store.round_trips.send` of commands that may call the store's
    scripts by ``EVALSHA``: a server that lost them (a restart, a failover, ``SCRIPT
    FLUSH``) gets them loaded (on every primary of a cluster) and the commands again (they
    are idempotent)."""
    try:
        return send(client, commands)
    except redis_py.exceptions.NoScriptError:
        for script in (_WRITE_LUA, _PRUNE_LUA):
            client.script_load(script)
        return send(client, commands)
