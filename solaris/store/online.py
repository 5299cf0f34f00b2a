"""The SOLARIS online store: Feast's ``OnlineStore`` on Redis, one hash per (user, view).

Registered in ``feature_store.yaml`` by class path::

    online_store:
      type: solaris.store.online.SolarisOnlineStore
      connection_string: "localhost:6379"   # or connection_env: SOLARIS_STORE__REDIS

and used through Feast's own surface (``get_online_features``, ``write_to_online_store``,
``feast materialize``, ``feast serve``, ``feast teardown``). The layout, record format and
expiry rules are specified in ``docs/online_store_format.md``; in short:

* **Reads.** A request for one user and ``N`` candidates sends one command per view in one
  round trip (``HMGET`` of the ``N`` items on the user's pair and nbr hashes, ``GET`` of the
  user's uagg record, ``HMGET`` on the item-aggregate hash), decodes each view's replies
  with one ``frombuffer`` and returns a :class:`~solaris.store.response.SolarisOnlineResponse`,
  which builds Feast's proto only if someone asks for it. Freshness is applied inside the
  store: rows older than their view's read TTL, or computed after the request time, are not
  ``PRESENT``, whoever the caller is. A key that answers an error (``WRONGTYPE``: a
  foreign or corrupted key under the project's prefix) is read as absent for its own rows
  only, and logged once by name: one bad key never fails the request, nor, through the
  serving client's circuit breaker, every other user's. Only when every command of the
  request fails does the read raise.
* **Writes.** :meth:`SolarisOnlineStore.write_table` is the bulk Arrow path the pipeline
  uses; ``online_write_batch`` (any Feast producer) converts Feast's rows and calls it. Both
  validate the whole batch before the first command is sent. The most recent write of a row
  wins, whatever its event time.
* **Memory.** Every key expires ``retention`` after its last write, and a write prunes its
  hash of rows older than ``retention`` before its newest row, at most every
  ``prune_every × retention`` of event time.

Feature requests this store cannot serve on its fast path (on-demand views, projections that
rename join keys, version metadata) go through Feast's generic path (:meth:`online_read` per
view). Views that are not
in :mod:`solaris.store.contract` are refused at ``feast apply``.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import hiredis
import numpy as np
import pandas as pd
import pyarrow as pa
import redis as redis_py
from feast import Entity, FeatureService, FeatureView, utils
from feast.errors import FeastObjectNotFoundException
from feast.infra.online_stores.online_store import OnlineStore
from feast.online_response import OnlineResponse
from feast.protos.feast.types.EntityKey_pb2 import EntityKey as EntityKeyProto
from feast.protos.feast.types.Value_pb2 import Value as ValueProto
from feast.repo_config import FeastConfigBaseModel, RepoConfig
from feast.type_map import feast_value_type_to_python_type
from pydantic import Field, StrictStr
from redis.cluster import RedisCluster

from solaris.connection import redacted, redis_client, unlink_matching
from solaris.errors import ConfigError, SolarisError
from solaris.store import keys, resp
from solaris.store.codec import (
    ViewRows,
    decode_records,
    decode_uniform,
    encode_record_array,
    encode_records,
    normalize,
)
from solaris.store.contract import (
    EVENT_TS,
    ITEM_ID,
    REQUEST_TS,
    USER_ID,
    InvalidWriteError,
    ViewParams,
    ViewSpec,
    epoch_seconds_array,
    view,
)
from solaris.store.response import PRESENT, SolarisOnlineResponse, ViewAnswer, row_status

log = logging.getLogger(__name__)

__all__ = [
    "FeatureRequestError",
    "SolarisOnlineStore",
    "SolarisOnlineStoreConfig",
    "ViewDefinitionError",
]


_US = 1_000_000
_INT64_MAX = np.iinfo(np.int64).max
_COMMANDS_PER_PIPELINE = 1_000

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


# The request time of a get_online_features call that Feast answers view by view through
# online_read, which has no request context of its own.
_GENERIC_NOW: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "solaris_generic_request_time", default=None
)


class ViewDefinitionError(SolarisError, ValueError):
    """A feature view that this store cannot hold (not a SOLARIS view, or not as declared)."""


class FeatureRequestError(SolarisError, ValueError):
    """A read this store cannot answer: an unknown feature reference, or entity rows that
    lack a join key, differ in length or hold ids or request times that are not valid. The
    message names the reference or the entity column (and the first bad row)."""


class SolarisOnlineStoreConfig(FeastConfigBaseModel):
    """Configuration of :class:`SolarisOnlineStore` (``online_store:`` in feature_store.yaml)."""

    type: Literal["solaris.store.online.SolarisOnlineStore"] = (
        "solaris.store.online.SolarisOnlineStore"
    )
    """Online store type selector (the class path)."""

    connection_string: StrictStr = "localhost:6379"
    """``host:port[,host:port...][,db=N][,username=..][,password=..][,ssl=true]...``
    (:mod:`solaris.connection`)."""

    connection_env: StrictStr | None = None
    """The name of an environment variable holding the connection string, read when the
    store connects instead of ``connection_string``. The repo's ``feature_store.yaml`` names
    ``SOLARIS_STORE__REDIS`` here for the Feast CLI: Feast keeps the YAML's
    ``online_store`` section as a dict on its ``RepoConfig``, whose repr would show a
    password pasted into it."""

    redis_type: Literal["redis", "redis_cluster"] = "redis"
    """``redis``, or ``redis_cluster`` (every listed node is a start-up node)."""

    retries: int = Field(3, ge=0)
    """Retries of a command on connection errors and timeouts; serving clients use 0 (their
    time bound is the retry policy)."""

    prune_every: float = Field(0.25, gt=0, le=1)
    """A hash is pruned when its newest written row is this share of the retention newer
    than the last prune (so a stale row lives at most (1 + prune_every) × retention in
    event time, given later writes to its key)."""

    write_fields_per_command: int = Field(2_000, gt=0)
    """Hash fields per ``HSET`` (bounds one command's size on the wire and in Redis)."""

    def __repr_args__(self):  # the repr never shows the Redis password
        for name, value in super().__repr_args__():
            yield name, (redacted(value) if name == "connection_string" else value)

    @property
    def connection(self) -> str:
        """The connection string to use: ``connection_env``'s variable, else
        ``connection_string``."""
        if self.connection_env is None:
            return self.connection_string
        value = os.environ.get(self.connection_env)
        if not value:
            raise ConfigError(
                f"online_store.connection_env names {self.connection_env}, which is not set: "
                "set it to the Redis connection string (host:port[,password=...])"
            )
        return value


@dataclass(frozen=True)
class _ViewPlan:
    table: FeatureView
    spec: ViewSpec
    params: ViewParams
    prefix: str
    features: tuple[str, ...]


@dataclass(frozen=True)
class _Plan:
    """How to answer one feature request: its views and the entity keys they need."""

    views: tuple[_ViewPlan, ...]
    join_keys: frozenset[str]
    entity_names: Mapping[str, str]  # entity name -> join key (Feast accepts either)


def view_params(table: FeatureView) -> tuple[ViewSpec, ViewParams]:
    """The contract spec and settings of a Feast view; :class:`ViewDefinitionError` when the
    view is not a SOLARIS view as ``feature_repo/solaris_features.py`` defines it."""
    try:
        spec = view(table.name)
    except InvalidWriteError as exc:
        raise ViewDefinitionError(f"SolarisOnlineStore: {exc}") from None
    features = tuple(f.name for f in table.features)
    if features != spec.field_names or tuple(table.join_keys) != spec.join_keys:
        raise ViewDefinitionError(
            f"SolarisOnlineStore: view {table.name!r} has join keys {list(table.join_keys)} "
            f"and features {list(features)}; the contract declares {list(spec.join_keys)} and "
            f"{list(spec.field_names)}"
        )
    retention = int(table.ttl.total_seconds()) if table.ttl else 0
    try:
        params = ViewParams.from_tags(table.tags, retention, table.name)
    except InvalidWriteError as exc:  # names the view and the tag or ttl
        raise ViewDefinitionError(f"SolarisOnlineStore: {exc}") from None
    return spec, params


def _int64_ids(name: str, values: Any) -> np.ndarray:
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


def _request_time(values: Any, n: int) -> np.ndarray:
    """The request's ``[n]`` times in epoch seconds (the wall clock when none is given)."""
    if values is None:
        return np.full(n, float(int(time.time())))
    try:
        return epoch_seconds_array(values, n, repr(REQUEST_TS), rows="entity row")  # type: ignore[no-any-return]
    except ValueError as exc:
        raise FeatureRequestError(str(exc)) from None


class SolarisOnlineStore(OnlineStore):
    """Feast online store for the SOLARIS views on Redis (see the module docstring)."""

    def __init__(self) -> None:
        self._client = None
        self._client_key: tuple | None = None
        self._lock = threading.Lock()
        self._prune = None
        self._write = None
        self._plans: dict[tuple, tuple[object, object, _Plan | None]] = {}
        self._refused_keys: set[str] = set()  # keys logged as answering an error (bounded)
        self._reply_bytes = 1 << 16  # the last request's reply size: the next one's buffer
        self._request_conns: _RequestConnections | None = None

    # -- connection -------------------------------------------------------------------------

    def client(self, config: RepoConfig):
        """The redis-py client of this store, built once (thread-safe; no network I/O under
        the lock, so a hung Redis never serialises the callers)."""
        cfg = config.online_store
        connection = cfg.connection
        key = (connection, cfg.redis_type, cfg.retries)
        client = self._client
        if client is not None and self._client_key == key:
            return client
        # Built outside the lock: a cluster client talks to the cluster while it is built,
        # and a hung node must not make the other callers wait in line. Concurrent first
        # callers may each build one; all but the one kept are closed.
        built = redis_client(connection, redis_type=cfg.redis_type, retries=cfg.retries)
        with self._lock:
            if self._client is None or self._client_key != key:
                self._prune = built.register_script(_PRUNE_LUA)
                self._write = built.register_script(_WRITE_LUA)
                self._client, self._client_key = built, key
                return built
            client = self._client
        built.close()
        return client

    # -- writes -----------------------------------------------------------------------------

    def write_table(
        self,
        config: RepoConfig,
        table: FeatureView,
        rows: pa.Table | pd.DataFrame,
        progress: Callable[[int], Any] | None = None,
    ) -> int:
        """Write ``rows`` of view ``table`` (the bulk Arrow path); returns rows written.

        The rows are validated as a whole (:func:`solaris.store.codec.normalize`) before any
        command is sent. Raises :class:`~solaris.store.contract.InvalidWriteError`.
        """
        spec, params = view_params(table)
        normalized = normalize(spec, params, rows)
        return self.write_normalized(config, spec, params, normalized, progress)

    def write_commands(
        self, config: RepoConfig, table: FeatureView, rows: pa.Table | pd.DataFrame
    ) -> list[list[bytes]]:
        """The RESP bytes :meth:`write_table` sends to write ``rows`` of the hash view
        ``table`` on one Redis, without sending them: one transaction per key, in the order
        sent, each as its packed commands (``MULTI``, the key's ``HSET``s, ``HSETNX`` of its
        prune marker, ``PEXPIRE``, ``HGET`` of the marker, ``EXEC``). Not included: the
        ``TYPE`` check of the keys before them and the prune scripts after them (those depend
        on what Redis answers). What the write path puts on the wire, for benchmarks
        (``bench.feature_store`` checks its raw floor against these bytes) and debugging.

        Raises:
            InvalidWriteError: bad rows, or a view that is not a hash view.
        """
        spec, params = view_params(table)
        if spec.member is None:
            raise InvalidWriteError(
                f"view {spec.name!r} is one string per key, not a hash: it is written with SET"
            )
        normalized = normalize(spec, params, rows)
        if normalized.num_rows == 0:
            return []
        order, bounds, key_names = _grouped(config.project, spec, normalized)
        spans, hset = _hash_writes(spec, params, normalized, order, bounds, key_names, framed=True)
        groups = _transactions(
            spans, hset, config.online_store.write_fields_per_command, params.retention_s * 1000
        )
        return [[_MULTI, *group, _EXEC] for group in groups]

    def write_normalized(
        self,
        config: RepoConfig,
        spec: ViewSpec,
        params: ViewParams,
        rows: pa.Table,
        progress: Callable[[int], Any] | None = None,
    ) -> int:
        """Write rows already :func:`~solaris.store.codec.normalize`-d for ``spec``.

        Hash views, per key, one transaction (:meth:`write_commands`): its ``HSET``s, its
        prune marker (field ``""``, created if absent), its expiry renewed to the retention
        and the marker read back; the hashes whose newest written row is ``prune_every ×
        retention`` past their marker are pruned by a script in a second round trip (a small
        share of the writes). On a cluster each key's write is one script instead. String
        views: ``SET`` with ``PX``.
        """
        n = rows.num_rows
        if n == 0:
            return 0
        client = self.client(config)
        retention_ms = params.retention_s * 1000
        order, bounds, key_names = _grouped(config.project, spec, rows)
        _refuse_foreign_keys(client, spec, key_names)
        if spec.member is None:
            # One string per partition: the last row of the batch for it wins.
            records = encode_records(spec, params, rows, order)
            commands = [
                (b"SET", key, records[i - 1], b"PX", retention_ms)
                for key, i in zip(key_names, bounds[1:].tolist(), strict=True)
            ]
            _send(client, commands)
        else:
            self._write_hashes(client, config, params, rows, order, bounds, key_names, spec)
        if progress is not None:
            progress(n)
        return n

    def _write_hashes(self, client, config, params, rows, order, bounds, key_names, spec) -> None:
        """The hash part of :meth:`write_normalized`: the rows in ``order`` are grouped by
        key, ``bounds`` delimiting the groups of ``key_names``."""
        cfg = config.online_store
        retention_ms = params.retention_s * 1000
        cluster = isinstance(client, RedisCluster)
        spans, hset = _hash_writes(spec, params, rows, order, bounds, key_names, framed=not cluster)
        newest = [top for _key, _span, top in spans]
        if cluster:
            # redis-py's cluster pipeline routes each command to its node but cannot make a
            # transaction of many keys: each key's write is one script, atomic on its node.
            markers = _send_scripted(
                client,
                [
                    (b"EVALSHA", self._write.sha, 1, key, retention_ms, top, *hset(key, lo, hi)[2:])
                    for key, (lo, hi), top in spans
                ],
            )
        else:
            # One transaction per key: its HSETs, its marker and its expiry are applied
            # together or not at all, so whatever fails (a refused write, a dropped
            # connection, a killed writer) no key is left without an expiry.
            markers = _send_transactions(
                client, _transactions(spans, hset, cfg.write_fields_per_command, retention_ms)
            )
        interval = cfg.prune_every * params.retention_s * _US
        retention_us = params.retention_s * _US
        # Due when the newest row written is an interval past the marker, or an interval
        # before it (a marker left by rows from the future, e.g. a replay after live data,
        # would otherwise block pruning until that date): the prune resets the marker.
        prunes = [
            (b"EVALSHA", self._prune.sha, 1, key, top - retention_us, top)
            for key, top, marker in zip(key_names, newest, markers, strict=True)
            if marker is not None and abs(top - int(marker)) >= interval
        ]
        if prunes:
            _send_scripted(client, prunes)

    def online_write_batch(
        self,
        config: RepoConfig,
        table: FeatureView,
        data: list[tuple[EntityKeyProto, dict[str, ValueProto], datetime, datetime | None]],
        progress: Callable[[int], Any] | None,
    ) -> None:
        """Feast's write path (``write_to_online_store``, ``feast materialize``, push): the
        rows are turned into a table and written by :meth:`write_table`."""
        spec, _ = view_params(table)
        if not data:
            return
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
        self.write_table(config, table, frame, progress)

    # -- reads ------------------------------------------------------------------------------

    def read(
        self,
        config: RepoConfig,
        plans: Sequence[tuple[ViewSpec, ViewParams]],
        entities: Mapping[str, np.ndarray],
        n: int,
    ) -> list[ViewRows]:
        """The rows of each view for ``n`` entity rows, in one round trip.

        On a single Redis the commands are packed here and sent on one pooled connection:
        the ``HMGET`` fields of a request's candidates are packed once and shared by every
        view keyed by items (pair, nbr, iagg). On a cluster they go through redis-py's
        cluster pipeline, which routes each key to its node. Reads are not retried: the
        caller's time bound is the policy.
        """
        if n == 0:
            return [ViewRows.empty(spec, params, 0) for spec, params in plans]
        client = self.client(config)
        commands: list[tuple[bytes, str, np.ndarray | None]] = []
        layouts = []
        for spec, _ in plans:
            layouts.append(_queue_reads(commands, config.project, spec, entities, n))
        if isinstance(client, RedisCluster):  # redis-py packs, and routes by key
            built = [
                (name, key, *(keys.member_fields(ids).tolist() if ids is not None else ()))
                for name, key, ids in commands
            ]
        else:
            built = _pack(commands)
        replies = _send(client, built, errors_as_replies=True)
        replies = _absent_where_refused(replies, commands, self._refused_keys)
        out = []
        pos = 0
        for (spec, params), (count, assemble) in zip(plans, layouts, strict=True):
            out.append(decode_records(spec, params, assemble(replies[pos : pos + count])))
            pos += count
        return out

    def request_commands(
        self,
        config: RepoConfig,
        registry: Any,
        project: str,
        features: FeatureService | list[str],
        user_id: int,
        items: np.ndarray,
    ) -> list[bytes] | None:
        """The RESP bytes :meth:`read_user` sends for one user × ``items`` (int64): one
        command per view, in the request's order, or ``None`` where it takes the general
        path. What the request path puts on the wire, for benchmarks (``bench.feature_store``
        times these bytes on a raw socket) and for debugging."""
        request = self._user_request(config, registry, project, features, user_id, items)
        return None if request is None else _pack(request[2])

    def _user_request(
        self,
        config: RepoConfig,
        registry: Any,
        project: str,
        features: FeatureService | list[str],
        user_id: int,
        items: np.ndarray,
    ) -> tuple[Any, Any, list[tuple[bytes, str, np.ndarray | None]]] | None:
        """The request path's plan, client and ``(command, key, member ids)`` per view, or
        ``None`` (a cluster, a projection, an on-demand view, no items)."""
        plan = self._plan(registry, project, features, True)
        client = self.client(config)
        if plan is None or isinstance(client, RedisCluster) or not len(items):
            return None
        if not all(_user_request(v.spec) for v in plan.views):
            return None
        commands: list[tuple[bytes, str, np.ndarray | None]] = []
        for v in plan.views:
            key = keys.view_key(config.project, v.spec)
            if v.spec.partition is not None:
                key = keys.partition_key(key, v.spec, user_id)
            if v.spec.member is None:
                commands.append((b"GET", key, None))
            else:
                commands.append((b"HMGET", key, items))
        return plan, client, commands

    def read_user(
        self,
        config: RepoConfig,
        registry,
        project: str,
        features: FeatureService | list[str],
        user_id: int,
        items: np.ndarray,
    ) -> dict[str, ViewRows] | None:
        """The request path: the rows of ``features``' views for one user × ``items``
        (int64, checked by the caller), by view name (its name in the request), in one
        round trip; ``None`` where the request needs the general path (a cluster, a
        projection, an on-demand view): then use :meth:`get_online_features`.

        A view keyed by the user alone (``uagg``) is read and decoded once: its
        :class:`ViewRows` holds one row, which stands for every item
        (:func:`solaris.serving.tiers.assemble_tiers` takes it so). Rows are raw, stale
        ones included, as :meth:`SolarisOnlineResponse.rows` gives them.
        """
        request = self._user_request(config, registry, project, features, user_id, items)
        if request is None:
            return None
        plan, client, commands = request
        shapes = [None if members is None else len(members) for _, _, members in commands]
        conns = self._request_conns
        if conns is None or conns.client is not client or conns.pid != os.getpid():
            conns = self._request_conns = _RequestConnections(client)
        replies, self._reply_bytes = _read_uniform(
            conns, _pack(commands), shapes, self._reply_bytes
        )
        replies = _absent_where_refused(replies, commands, self._refused_keys)
        out = {}
        for v, reply in zip(plan.views, replies, strict=True):
            if isinstance(reply, np.ndarray):
                out[v.prefix] = decode_uniform(v.spec, v.params, reply)
            elif isinstance(reply, bytes) and reply and v.spec.member is None:
                one = np.frombuffer(reply, f"V{len(reply)}")  # the one record of a GET
                out[v.prefix] = decode_uniform(v.spec, v.params, one)
            else:
                out[v.prefix] = decode_records(
                    v.spec, v.params, reply if v.spec.member is not None else [reply]
                )
        return out

    def _plan(self, registry, project: str, features, full_feature_names: bool) -> _Plan | None:
        """How to serve ``features`` on the fast path; ``None``: use Feast's generic path.

        Uses Feast's private ``utils._get_cached_request_context`` (feast 0.67, pinned;
        ``tests/unit/store/test_feast_contract.py`` fails if it moves) to resolve the
        requested features; the plan is cached until the registry is reloaded or its cache
        expires (then Feast's call refreshes it).
        """
        key = (
            ("__fs__", features.name) if isinstance(features, FeatureService) else tuple(features),
            project,
            full_feature_names,
        )
        # Our own cache, per registry object and its load time: Feast's resolution cache is
        # process-wide and keyed on one registry, so a second FeatureStore in the process
        # (another Registry object) would clear it on every call.
        created = getattr(registry, "cached_registry_proto_created", None)
        cached = self._plans.get(key)
        if (
            cached is not None
            and cached[0] is registry
            and created is not None
            and cached[1] == created
            and registry.is_cache_valid()
        ):
            return cached[2]
        try:
            context = utils._get_cached_request_context(
                registry, project, features, full_feature_names
            )
        except (KeyError, FeastObjectNotFoundException) as exc:  # an unknown feature or view
            shown = features.name if isinstance(features, FeatureService) else list(features)
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            raise FeatureRequestError(
                f"unknown feature reference in {shown!r} (project {project!r}): {message}"
            ) from exc
        (
            _refs,
            on_demand,
            entity_name_to_join_key,
            _types,
            _join_keys,
            grouped_refs,
            _names,
            _request_data,
            entityless,
        ) = context
        plan: _Plan | None = None
        if not on_demand and not entityless:
            views = []
            for table, requested in grouped_refs:
                if table.projection.join_key_map:
                    views = None
                    break
                spec, params = view_params(table)
                views.append(
                    _ViewPlan(table, spec, params, table.projection.name_to_use(), tuple(requested))
                )
            if views is not None:
                plan = _Plan(
                    tuple(views),
                    frozenset(k for v in views for k in v.spec.join_keys),
                    dict(entity_name_to_join_key),
                )
        # Feast may have refreshed the registry while resolving: key on its load time now.
        self._plans[key] = (
            registry,
            getattr(registry, "cached_registry_proto_created", None),
            plan,
        )
        return plan

    def get_online_features(
        self,
        config: RepoConfig,
        features: list[str] | FeatureService,
        entity_rows: list[dict[str, Any]] | Mapping[str, Any],
        registry,
        project: str,
        full_feature_names: bool = False,
        include_feature_view_version_metadata: bool = False,
    ) -> OnlineResponse:
        """Feast's read, on the fast path (module docstring) whenever the request allows.

        ``entity_rows`` may hold :data:`~solaris.store.contract.REQUEST_TS` (epoch seconds,
        a scalar or one per row): freshness is judged at that time instead of the wall clock.
        """
        plan = self._plan(registry, project, features, full_feature_names)
        if isinstance(entity_rows, list):
            if not entity_rows:
                raise FeatureRequestError("entity_rows is empty: pass at least one entity row")
            entity_rows = {k: [row.get(k) for row in entity_rows] for k in entity_rows[0]}
        if plan is None or include_feature_view_version_metadata:
            return self._generic(
                config,
                features,
                entity_rows,
                registry,
                project,
                full_feature_names,
                include_feature_view_version_metadata,
            )
        entities: dict[str, np.ndarray] = {}
        for name, values in entity_rows.items():
            key = plan.entity_names.get(name, name)
            if key in plan.join_keys:
                entities[key] = _int64_ids(name, values)
        missing = sorted(plan.join_keys - entities.keys())
        if missing:
            raise FeatureRequestError(
                f"entity_rows lacks the join keys {missing} (given: {sorted(entity_rows)})"
            )
        lengths = {k: len(v) for k, v in entities.items()}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{k} has {m}" for k, m in sorted(lengths.items()))
            raise FeatureRequestError(f"entity_rows columns differ in length: {shown}")
        n = next(iter(lengths.values()))
        now_s = _request_time(entity_rows.get(REQUEST_TS), n)
        rows = self.read(config, [(v.spec, v.params) for v in plan.views], entities, n)
        answers = [
            ViewAnswer(v.spec, v.params, v.prefix, v.features, r)
            for v, r in zip(plan.views, rows, strict=True)
        ]
        return SolarisOnlineResponse(
            entities, answers, now_s, full_feature_names=full_feature_names
        )

    def _generic(self, config, features, entity_rows, registry, project, full, metadata):
        """Feast's generic path (per view, through :meth:`online_read`), for the requests
        the fast path does not take. Feast deduplicates entity rows there, so only one
        request time for the whole call can be honoured."""
        rows = dict(entity_rows)
        given = rows.pop(REQUEST_TS, None)
        now = None
        if given is not None:
            times = np.unique(_request_time(given, len(next(iter(rows.values()), []))))
            if len(times) > 1:
                raise FeatureRequestError(
                    f"{REQUEST_TS!r} varies by row; requests that go through Feast's generic "
                    "path (on-demand views, version metadata, renamed join keys) take one "
                    "request time per call"
                )
            now = float(times[0]) if len(times) else None
        token = _GENERIC_NOW.set(now)
        try:
            return super().get_online_features(
                config, features, rows, registry, project, full, metadata
            )
        finally:
            _GENERIC_NOW.reset(token)

    def online_read(
        self,
        config: RepoConfig,
        table: FeatureView,
        entity_keys: list[EntityKeyProto],
        requested_features: list[str] | None = None,
    ) -> list[tuple[datetime | None, dict[str, ValueProto] | None]]:
        """Feast's generic per-view read: rows that are not fresh at the request time (the
        call's ``request_ts``, else the wall clock) are absent."""
        spec, params = view_params(table)
        n = len(entity_keys)
        entities: dict[str, list[int]] = {k: [] for k in spec.join_keys}
        for entity_key in entity_keys:
            ids = dict(zip(entity_key.join_keys, entity_key.entity_values, strict=True))
            for k in spec.join_keys:
                entities[k].append(ids[k].int64_val)
        arrays = {k: np.asarray(v, np.int64) for k, v in entities.items()}
        rows = self.read(config, [(spec, params)], arrays, n)[0]
        at = _GENERIC_NOW.get()
        now = np.full(n, float(int(time.time())) if at is None else at)
        status = row_status(rows, params.read_ttl_s, now)
        answer = ViewAnswer(spec, params, table.name, tuple(requested_features or ()), rows)
        response = SolarisOnlineResponse({}, [answer], now, full_feature_names=False)
        proto = response.proto
        out: list[tuple[datetime | None, dict[str, ValueProto] | None]] = []
        for i in range(n):
            if status[i] != PRESENT:
                out.append((None, None))
                continue
            values = {f: proto.results[k].values[i] for k, f in enumerate(answer.features)}
            event = datetime.fromtimestamp(rows.event_us[i] / _US, tz=UTC)
            out.append((event, values))
        return out

    # -- definitions and clean-up ------------------------------------------------------------

    def update(
        self,
        config: RepoConfig,
        tables_to_delete: Sequence[FeatureView],
        tables_to_keep: Sequence[FeatureView],
        entities_to_delete: Sequence[Entity],
        entities_to_keep: Sequence[Entity],
        partial: bool,
    ) -> None:
        """``feast apply``: refuse views this store cannot hold; drop deleted views' keys."""
        for table in tables_to_keep:
            view_params(table)
        for table in tables_to_delete:
            self.delete_view(config, table.name)

    def teardown(
        self,
        config: RepoConfig,
        tables: Sequence[FeatureView],
        entities: Sequence[Entity],
    ) -> None:
        """``feast teardown``: delete every key of ``tables``."""
        for table in tables:
            self.delete_view(config, table.name)

    def delete_view(self, config: RepoConfig, name: str) -> int:
        """Delete every Redis key of one view of this project; returns how many."""
        try:
            spec = view(name)
        except InvalidWriteError:
            return 0  # not a SOLARIS view: this store never wrote it
        client = self.client(config)
        return sum(
            unlink_matching(client, pattern) for pattern in keys.view_patterns(config.project, spec)
        )


def _user_request(spec: ViewSpec) -> bool:
    """A view one user × items reads by key: partitioned by the user (or not), members
    the items (or none)."""
    return (spec.partition is None or spec.partition.join_key == USER_ID) and (
        spec.member is None or spec.member.join_key == ITEM_ID
    )


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
    return getattr(value, kind)


def _queue_reads(commands: list, project: str, spec: ViewSpec, entities, n: int):
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

    def assemble(replies):
        aligned = np.empty(n, object)
        aligned[order] = [v for reply in replies for v in reply]
        return aligned.tolist()

    return len(unique), assemble


def _pack(commands: Sequence[tuple[bytes, str, np.ndarray | None]]) -> list[bytes]:
    """The RESP bytes of each of ``commands``; the fields of a member-id array shared by
    several commands (pair, nbr and iagg of one request) are framed once."""
    bodies: dict[int, bytes] = {}
    parts = []
    for command, key, members in commands:
        if members is None:
            parts.append(hiredis.pack_command((command, key)))
            continue
        body = bodies.get(id(members))
        if body is None:
            body = bodies[id(members)] = resp.frames(keys.member_fields(members)).tobytes()
        parts.append(resp.command(command, [key], body, len(members)))
    return parts


def _refuse_foreign_keys(client, spec: ViewSpec, key_names: Sequence[str]) -> None:
    """Raise :class:`InvalidWriteError` naming the keys of ``key_names`` that hold another
    Redis type than ``spec`` writes (a hash, or a string for a view without members),
    before anything is written: a ``WRONGTYPE`` in the middle of a batch would leave the
    keys before it written and the rest not. One ``TYPE`` per key, in the write's round
    trips (``TYPE`` is O(1))."""
    wanted = b"hash" if spec.member is not None else b"string"
    types = _send(client, [(b"TYPE", key) for key in key_names])
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


def _absent_where_refused(
    replies: list,
    commands: Sequence[tuple[bytes, str, np.ndarray | None]],
    warned: set[str],
) -> list:
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


def _round_trip(
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


class _RequestConnections:
    """Connections of the request path, kept beside redis-py's pool rather than in it:
    taking one from a list and putting it back costs well under a microsecond, against
    ~20 µs for the pool's get and release with their bookkeeping (a fifth of the gap to the
    wire, docs/feature_store.md). One per concurrent read at most; a connection that failed
    is dropped, not put back; a forked process starts its own."""

    def __init__(self, client: redis_py.Redis) -> None:
        self.client = client
        self.pid = os.getpid()
        self._idle: list = []
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

    def take(self):
        try:
            return self._idle.pop()  # atomic: no lock
        except IndexError:
            return self.client.connection_pool.make_connection()

    def give(self, conn) -> None:
        self._idle.append(conn)


def _read_uniform(
    conns: _RequestConnections, packed: list[bytes], shapes: Sequence[int | None], size_hint: int
) -> tuple[list, int]:
    """:func:`_round_trip` for the request path: send ``packed`` on one connection and read
    one reply per ``shapes`` entry (see :class:`resp.UniformReplies`) straight from the
    socket. Uniform replies (every candidate has a record of one length, the usual case)
    are parsed by numpy into records, without a Python object per field; any other reply
    stream is handed to hiredis from its first byte, and errors come back as replies.
    Returns the replies and the bytes read (the next call's ``size_hint``)."""
    conn = conns.take()
    try:
        if conn._sock is None:  # redis-py's socket (TLS included); its reader stays unused
            conn.connect()
        sock = conn._sock
        sock.sendall(b"".join(packed))
        buf = conns.buffer(max(size_hint, 1 << 16))
        have = 0
        parser = resp.UniformReplies(shapes)
        while True:
            got = sock.recv_into(memoryview(buf)[have:])
            if not got:
                raise redis_py.ConnectionError("Redis closed the connection mid-reply")
            have += got
            replies = parser.advance(buf, have)
            if replies is None:
                replies = _hiredis_replies(sock, buf[:have].tobytes(), len(shapes))
                break
            if replies != resp.INCOMPLETE:
                break
            if have == len(buf):
                buf = np.concatenate([buf, np.empty(len(buf), np.uint8)])
    except BaseException:
        conn.disconnect()
        raise
    conns.give(conn)
    return replies, have


def _hiredis_replies(sock, received: bytes, count: int) -> list:
    """``count`` replies parsed by hiredis from ``received`` and then the socket; an error
    reply is returned in its place as redis-py's ``ResponseError``."""
    reader = hiredis.Reader()
    reader.feed(received)
    replies: list = []
    chunk = bytearray(1 << 16)
    while len(replies) < count:
        reply = reader.gets()
        if reply is False:
            got = sock.recv_into(chunk)
            if not got:
                raise redis_py.ConnectionError("Redis closed the connection mid-reply")
            reader.feed(chunk, 0, got)
            continue
        if isinstance(reply, hiredis.ReplyError):
            reply = redis_py.exceptions.ResponseError(str(reply))
        replies.append(reply)
    if reader.has_data():  # bytes beyond the replies: the connection is out of step
        raise redis_py.ConnectionError("Redis sent more than the replies of the request")
    return replies


def _packed(command: bytes | tuple) -> bytes:
    return command if isinstance(command, bytes) else hiredis.pack_command(command)


_MULTI = hiredis.pack_command((b"MULTI",))
_EXEC = hiredis.pack_command((b"EXEC",))


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
) -> tuple[list[tuple[str, tuple[int, int], int]], Callable[[str, int, int], Any]]:
    """Each key's ``(key, (lo, hi), newest event µs)`` and ``hset(key, lo, hi)``, the ``HSET``
    of its rows ``lo:hi``: packed bytes when ``framed`` and the records have one length
    (every (field, record) pair framed by numpy in one buffer), else a command tuple."""
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

    def hset_tuple(key: str, lo: int, hi: int) -> tuple:
        args: list[Any] = [None] * (2 * (hi - lo))
        args[0::2] = field_bytes[lo:hi]
        args[1::2] = values[lo:hi]
        return (b"HSET", key, *args)

    return spans, hset_tuple


def _transactions(
    spans: Sequence[tuple[str, tuple[int, int], int]],
    hset: Callable[[str, int, int], Any],
    chunk: int,
    retention_ms: int,
) -> list[list[bytes]]:
    """Each key's transaction body, packed: its ``HSET``s of at most ``chunk`` fields, its
    prune marker (``HSETNX`` of the newest row's time), its expiry and the marker read."""
    return [
        [
            *(_packed(hset(key, start, min(start + chunk, hi))) for start in range(lo, hi, chunk)),
            hiredis.pack_command((b"HSETNX", key, b"", top)),
            hiredis.pack_command((b"PEXPIRE", key, int(retention_ms))),
            hiredis.pack_command((b"HGET", key, b"")),
        ]
        for key, (lo, hi), top in spans
    ]


def _send_transactions(client: redis_py.Redis, groups: Sequence[Sequence[bytes]]) -> list:
    """Each group of packed commands as one ``MULTI`` … ``EXEC`` transaction, as many per
    round trip as fit :data:`_COMMANDS_PER_PIPELINE` (a group is never split); the last
    reply of each transaction. An error, queued or executed, raises (a refused command
    aborts its transaction: ``EXECABORT``, nothing of it applied)."""
    out: list = []
    batch: list[bytes] = []
    sizes: list[int] = []

    def flush() -> None:
        try:
            replies = _round_trip(client, batch, sum(sizes) + 2 * len(sizes))
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
        if batch and sum(sizes) + len(group) > _COMMANDS_PER_PIPELINE:
            flush()
        batch.extend((_MULTI, *group, _EXEC))
        sizes.append(len(group))
    if batch:
        flush()
    return out


def _send_scripted(client, commands: Sequence) -> list:
    """:func:`_send` of commands that may call the store's scripts by ``EVALSHA``: a server
    that lost them (a restart, a failover, ``SCRIPT FLUSH``) gets them loaded (on every
    primary of a cluster) and the commands again (they are idempotent)."""
    try:
        return _send(client, commands)
    except redis_py.exceptions.NoScriptError:
        for script in (_WRITE_LUA, _PRUNE_LUA):
            client.script_load(script)
        return _send(client, commands)


def _send(
    client,
    commands: Sequence,
    batch: int = _COMMANDS_PER_PIPELINE,
    *,
    errors_as_replies: bool = False,
) -> list:
    """Send ``commands`` (argument tuples, or commands packed already: bytes) in batches of
    one round trip each; the replies. An error reply raises, unless ``errors_as_replies``
    (reads: see :func:`_absent_where_refused`), which returns it in its place.

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
                _round_trip(client, packed, len(part), errors_as_replies=errors_as_replies)
            )
    return replies
