"""The SOLARIS online store: Feast's ``OnlineStore`` on Redis, one hash per (user, view).

Registered in ``feature_store.yaml`` by class path::

    online_store:
      type: solaris.store.online.SolarisOnlineStore
      connection_string: "localhost:6379"   # or connection_env: SOLARIS_STORE__REDIS

and used through Feast's own surface (``get_online_features``, ``write_to_online_store``,
``feast materialize``, ``feast serve``, ``feast teardown``). The layout, record format and
expiry rules are specified in ``docs/online_store_format.md``; in short:

* **Reads** (:mod:`solaris.store.reads`). A request for one user and ``N`` candidates sends
  one command per view in one round trip (``HMGET`` of the ``N`` items on the user's pair
  and nbr hashes, ``GET`` of the user's uagg record, ``HMGET`` on the item-aggregate hash),
  decodes each view's replies with one ``frombuffer`` and returns a
  :class:`~solaris.store.response.SolarisOnlineResponse`, which builds Feast's proto only
  if someone asks for it. Freshness is applied inside the store: rows older than their
  view's read TTL, or computed after the request time, are not ``PRESENT``, whoever the
  caller is. A key that answers an error (``WRONGTYPE``: a foreign or corrupted key under
  the project's prefix) is read as absent for its own rows only, and logged once by name:
  one bad key never fails the request, nor, through the serving client's circuit breaker,
  every other user's. Only when every command of the request fails does the read raise.
* **Writes** (:mod:`solaris.store.writes`). :meth:`SolarisOnlineStore.write_table` is the
  bulk Arrow path the pipeline uses; ``online_write_batch`` (any Feast producer) converts
  Feast's rows and calls it. Both validate the whole batch before the first command is
  sent. The most recent write of a row wins, whatever its event time.
* **Memory.** Every key expires ``retention`` after its last write, and a write prunes its
  hash of rows older than ``retention`` before its newest row, at most every
  ``prune_every × retention`` of event time.

This module is the adapter: Feast's configuration, its views checked against
:mod:`solaris.store.contract`, its requests resolved to a plan, the client and the state
kept between requests; the read and write paths take plain values and never see Feast's
configuration. Feature requests this store cannot serve on its fast path (on-demand views,
projections that rename join keys, version metadata) go through Feast's generic path
(:meth:`online_read` per view). Views that are not in :mod:`solaris.store.contract` are
refused at ``feast apply``.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import redis as redis_py
from feast import Entity, FeatureService, FeatureView, utils
from feast.errors import FeastObjectNotFoundException
from feast.infra.online_stores.online_store import OnlineStore
from feast.infra.registry.base_registry import BaseRegistry
from feast.online_response import OnlineResponse
from feast.protos.feast.types.EntityKey_pb2 import EntityKey as EntityKeyProto
from feast.protos.feast.types.Value_pb2 import Value as ValueProto
from feast.repo_config import FeastConfigBaseModel, RepoConfig
from pydantic import Field, StrictStr
from redis.cluster import RedisCluster

from solaris.connection import redacted, redis_client, unlink_matching
from solaris.errors import ConfigError, SolarisError
from solaris.store import keys, reads, writes
from solaris.store.codec import ViewRows, normalize
from solaris.store.contract import (
    REQUEST_TS,
    InvalidWriteError,
    ViewParams,
    ViewSpec,
    view,
)
from solaris.store.reads import FeatureRequestError
from solaris.store.response import PRESENT, SolarisOnlineResponse, ViewAnswer, row_status
from solaris.store.round_trips import Client

__all__ = [
    "FeatureRequestError",
    "SolarisOnlineStore",
    "SolarisOnlineStoreConfig",
    "ViewDefinitionError",
]

_US = 1_000_000

# The request time of a get_online_features call that Feast answers view by view through
# online_read, which has no request context of its own.
_GENERIC_NOW: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "solaris_generic_request_time", default=None
)


class ViewDefinitionError(SolarisError, ValueError):
    """A feature view that this store cannot hold (not a SOLARIS view, or not as declared)."""


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

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:  # never the password
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


class SolarisOnlineStore(OnlineStore):
    """Feast online store for the SOLARIS views on Redis (see the module docstring)."""

    def __init__(self) -> None:
        self._client: Client | None = None
        self._client_key: tuple[str, str, int] | None = None
        self._lock = threading.Lock()
        # (features, project, full names) -> (registry, its load time, plan): see _plan.
        self._plans: dict[
            tuple[tuple[str, ...], str, bool], tuple[BaseRegistry, object, _Plan | None]
        ] = {}
        self._refused_keys: set[str] = set()  # keys logged as answering an error (bounded)
        self._reply_bytes = 1 << 16  # the last request's reply size: the next one's buffer
        self._request_conns: reads.RequestConnections | None = None

    # -- connection -------------------------------------------------------------------------

    def client(self, config: RepoConfig) -> Client:
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
                self._client, self._client_key = built, key
                return built
            client = self._client
        built.close()
        return client

    # -- writes (solaris.store.writes) ------------------------------------------------------

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
        ``table`` on one Redis, without sending them (:func:`solaris.store.writes.write_commands`).
        What the write path puts on the wire, for benchmarks (``bench.feature_store`` checks
        its raw floor against these bytes) and debugging.

        Raises:
            InvalidWriteError: bad rows, or a view that is not a hash view.
        """
        spec, params = view_params(table)
        return writes.write_commands(
            config.project, spec, params, rows, config.online_store.write_fields_per_command
        )

    def write_normalized(
        self,
        config: RepoConfig,
        spec: ViewSpec,
        params: ViewParams,
        rows: pa.Table,
        progress: Callable[[int], Any] | None = None,
    ) -> int:
        """Write rows already :func:`~solaris.store.codec.normalize`-d for ``spec``
        (:func:`solaris.store.writes.write_rows`: per key, one transaction of its fields,
        prune marker and expiry; the hashes due pruned in a second round trip)."""
        n = int(rows.num_rows)
        if n == 0:
            return 0
        cfg = config.online_store
        writes.write_rows(
            self.client(config),
            config.project,
            spec,
            params,
            rows,
            prune_every=cfg.prune_every,
            fields_per_command=cfg.write_fields_per_command,
        )
        if progress is not None:
            progress(n)
        return n

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
        self.write_table(config, table, writes.feast_rows(spec, data), progress)

    # -- reads (solaris.store.reads) --------------------------------------------------------

    def read(
        self,
        config: RepoConfig,
        plans: Sequence[tuple[ViewSpec, ViewParams]],
        entities: Mapping[str, np.ndarray],
        n: int,
    ) -> list[ViewRows]:
        """The rows of each view for ``n`` entity rows, in one round trip
        (:func:`solaris.store.reads.read_views`)."""
        if n == 0:
            return [ViewRows.empty(spec, params, 0) for spec, params in plans]
        client = self.client(config)
        return reads.read_views(client, config.project, plans, entities, n, self._refused_keys)

    def request_commands(
        self,
        config: RepoConfig,
        registry: BaseRegistry,
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
        return None if request is None else reads.pack(request[2])

    def _user_request(
        self,
        config: RepoConfig,
        registry: BaseRegistry,
        project: str,
        features: FeatureService | list[str],
        user_id: int,
        items: np.ndarray,
    ) -> tuple[_Plan, redis_py.Redis, list[reads.Command]] | None:
        """The request path's plan, client and ``(command, key, member ids)`` per view, or
        ``None`` (a cluster, a projection, an on-demand view, no items)."""
        plan = self._plan(registry, project, features, True)
        client = self.client(config)
        if plan is None or isinstance(client, RedisCluster) or not len(items):
            return None
        commands = reads.user_commands(config.project, [v.spec for v in plan.views], user_id, items)
        return None if commands is None else (plan, client, commands)

    def read_user(
        self,
        config: RepoConfig,
        registry: BaseRegistry,
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
        conns = self._request_conns
        if conns is None or conns.client is not client or conns.pid != os.getpid():
            conns = self._request_conns = reads.RequestConnections(client)
        rows, self._reply_bytes = reads.read_user_views(
            conns,
            commands,
            [(v.spec, v.params) for v in plan.views],
            self._reply_bytes,
            self._refused_keys,
        )
        return {v.prefix: r for v, r in zip(plan.views, rows, strict=True)}

    def _plan(
        self,
        registry: BaseRegistry,
        project: str,
        features: FeatureService | list[str],
        full_feature_names: bool,
    ) -> _Plan | None:
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
            views: list[_ViewPlan] = []
            for table, requested in grouped_refs:
                if table.projection.join_key_map:
                    break  # renamed join keys: Feast's generic path
                spec, params = view_params(table)
                views.append(
                    _ViewPlan(table, spec, params, table.projection.name_to_use(), tuple(requested))
                )
            else:
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
        registry: BaseRegistry,
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
                entities[key] = reads.int64_ids(name, values)
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
        now_s = reads.request_time(entity_rows.get(REQUEST_TS), n)
        rows = self.read(config, [(v.spec, v.params) for v in plan.views], entities, n)
        answers = [
            ViewAnswer(v.spec, v.params, v.prefix, v.features, r)
            for v, r in zip(plan.views, rows, strict=True)
        ]
        return SolarisOnlineResponse(
            entities, answers, now_s, full_feature_names=full_feature_names
        )

    def _generic(
        self,
        config: RepoConfig,
        features: list[str] | FeatureService,
        entity_rows: Mapping[str, Any],
        registry: BaseRegistry,
        project: str,
        full: bool,
        metadata: bool,
    ) -> OnlineResponse:
        """Feast's generic path (per view, through :meth:`online_read`), for the requests
        the fast path does not take. Feast deduplicates entity rows there, so only one
        request time for the whole call can be honoured."""
        rows = dict(entity_rows)
        given = rows.pop(REQUEST_TS, None)
        now = None
        if given is not None:
            times = np.unique(reads.request_time(given, len(next(iter(rows.values()), []))))
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
