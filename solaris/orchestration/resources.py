"""What the cycle's tasks share: parquet I/O of cycle files, the Redis they need, the
feature store. Each task loads what it needs itself (an Airflow task runs in a fresh
process on any worker).

The per-DAG modules of this package are imported by the DAG files at parse time, so they
import numpy, pandas and pyarrow inside the functions that use them: parsing a DAG file
costs the settings, not a dataframe library.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from solaris.config import SolarisConfig
from solaris.errors import SolarisError

if TYPE_CHECKING:
    import pandas as pd
    from feast import FeatureStore

    from solaris.connection import RedisTarget
    from solaris.files import StatePath

__all__ = [
    "CycleInputError",
    "LiveNamespaceError",
    "PlanError",
    "airflow_max_map_length",
    "check_partition_count",
    "cycle_redis",
    "feature_store",
    "live_state",
    "mapped_task_budget",
    "parquet_rows",
    "read_parquet",
    "refuse_live",
    "reset_namespace",
    "write_parquet",
]


class CycleInputError(SolarisError, RuntimeError):
    """An input of the cycle (conf, request log, models, Redis) is missing or unusable."""


class LiveNamespaceError(CycleInputError):
    """A reset or a replay was aimed at a namespace that holds live state (see
    :func:`live_state`); nothing was deleted or written."""


class PlanError(CycleInputError):
    """A run's plan of mapped tasks that Airflow would refuse (the message names the
    setting); nothing was planned or written."""


def airflow_max_map_length() -> int | None:
    """Airflow's ``[core] max_map_length`` when this process runs under Airflow (a task,
    ``dag.test()``), else None (the local runner maps nothing)."""
    if "airflow" not in sys.modules:
        return None
    from airflow.configuration import conf

    return conf.getint("core", "max_map_length")


def mapped_task_budget(cfg: SolarisConfig, runs: int, stage: str) -> int:
    """How many mapped tasks each of ``runs`` runs (the namespaces one DAG run serves) may
    plan for ``stage``: ``cycle.max_mapped_tasks`` shared evenly, so the DAG run's mapped
    task stays within it. Under Airflow a cap above ``[core] max_map_length`` is refused
    here, before anything is planned, whatever this interval's rows: Airflow would refuse
    the first interval busy enough to reach it, at run time, with nothing said of why.

    Raises:
        PlanError: the cap is above Airflow's limit, or the runs outnumber it."""
    cap = cfg.cycle.max_mapped_tasks
    limit = airflow_max_map_length()
    if limit is not None and cap > limit:
        raise PlanError(
            f"{stage}: cycle.max_mapped_tasks = {cap:,} is above Airflow's [core] "
            f"max_map_length = {limit:,}, so a busy interval's mapped tasks would be refused "
            "at run time: set cycle.max_mapped_tasks (SOLARIS_CYCLE__MAX_MAPPED_TASKS) to at "
            f"most {limit:,}, or raise AIRFLOW__CORE__MAX_MAP_LENGTH (past a few thousand "
            "mapped tasks the scheduler stalls); nothing was planned"
        )
    if runs > cap:
        raise PlanError(
            f"{stage}: {runs} namespaces in one run need a mapped task each, more than "
            f"cycle.max_mapped_tasks = {cap:,}; nothing was planned"
        )
    return cap // max(runs, 1)


def check_partition_count(cfg: SolarisConfig, who: str) -> int:
    """``cycle.partitions`` against the count the namespace recorded in the cycle's Redis
    (recorded now if none is: :func:`~solaris.store.partitions.record_partition_count`).

    Raises:
        PartitionCountError: another count is recorded; ``who`` names the task."""
    from solaris.connection import redis_client
    from solaris.namespace import Namespace
    from solaris.store.partitions import record_partition_count

    client = redis_client(cycle_redis(cfg), redis_type=cfg.store.redis_type, timeout_s=10.0)
    try:
        namespace = Namespace.of(cfg)
        return record_partition_count(client, namespace, cfg.cycle.partitions, who=who)
    finally:
        client.close()


def live_state(deployment: SolarisConfig, name: str) -> str | None:
    """Why namespace ``name`` holds live state, or None when it does not.

    One rule for every way state is deleted or history written (``solaris namespace reset``,
    ``solaris demo``, ``solaris cycle``, a DAG run whose conf says ``"replay": true``): the
    ``live`` namespace, the namespace ``deployment`` (the settings as loaded, before a
    command or a conf names another) runs on live traffic, any namespace whose cycle
    recorded a run on live traffic, and any namespace whose Redis (``deployment``'s
    ``store.redis``) holds the marker serving sets on logging a live request
    (:attr:`~solaris.namespace.Namespace.live_key`) hold live state. A replay never writes
    into one, and a reset needs ``--force``.

    Raises:
        CycleInputError: that Redis cannot be asked (nothing can be judged, so nothing may
            be changed)."""
    from solaris.namespace import LIVE, Namespace
    from solaris.orchestration.layout import CycleLayout

    if name == LIVE:
        return f"{LIVE!r} is the live namespace"
    if name == deployment.namespace and not deployment.replay:
        return (
            f"{name!r} is the namespace these settings run on live traffic "
            f"(namespace: {name}, replay: false)"
        )
    own = dataclasses.replace(Namespace.of(deployment), name=name)
    record = CycleLayout(own).live_run_record()
    if record is not None:
        return f"{name!r} holds a cycle run on live traffic (run record {record}, replay: false)"
    marker = _live_marker_on_redis(deployment, own.live_key)
    if marker is not None:
        return f"{name!r} served live traffic (Redis key {own.live_key}: {marker})"
    return None


def _live_marker_on_redis(deployment: SolarisConfig, key: str) -> str | None:
    """The value of serving's live-traffic marker ``key`` on ``deployment``'s Redis, or None
    (no marker, or no Redis configured: an embedded one serves no traffic)."""
    if deployment.store.redis is None:
        return None
    from solaris.connection import redacted, redis_client

    try:
        client = redis_client(
            deployment.store.redis, redis_type=deployment.store.redis_type, timeout_s=10.0
        )
        try:
            value = client.get(key)
        finally:
            client.close()
    except Exception as exc:  # unreachable, refused the login: judge nothing
        raise CycleInputError(
            f"cannot tell whether the namespace holds live state: Redis at "
            f"{redacted(deployment.store.redis)} did not answer GET {key} "
            f"({type(exc).__name__}: {exc}). Nothing was changed"
        ) from None
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def refuse_live(
    deployment: SolarisConfig,
    name: str,
    what: str,
    *,
    force: bool = False,
    forcible: bool = True,
) -> None:
    """Raise :class:`LiveNamespaceError` when ``name`` holds live state (:func:`live_state`)
    and ``force`` is not set; ``what`` names the action refused (``"reset"``, ``"replay
    into"``); ``forcible``: whether the message offers ``--force`` (a DAG run's replay is
    never forced into live state)."""
    reason = None if force else live_state(deployment, name)
    if reason is not None:
        remedy = "name a replay namespace"
        if forcible:
            remedy += ", or pass --force to do it anyway"
        raise LiveNamespaceError(
            f"will not {what} namespace {name!r}: {reason}; its keys, streams and cycle "
            f"state would be lost or mixed with history. Nothing was changed: {remedy}"
        )


def cycle_redis(cfg: SolarisConfig) -> RedisTarget:
    """The Redis the tasks share: ``store.redis``, else ``localhost:6379``. An embedded
    Redis would die with the task that started it, so the cycle needs a running one.

    The health check is a PING through :func:`~solaris.connection.redis_client`, so it
    logs in as the string's ``username`` with its TLS options, as the tasks will. Errors show
    the connection :func:`~solaris.connection.redacted`, never its password.
    """
    from solaris.connection import LOCAL_REDIS, ping_failure, redacted

    connection = cfg.store.redis or LOCAL_REDIS
    try:
        connection.check(cfg.store.redis_type)
    except ValueError as exc:  # a string that cannot be used is not "Redis is down"
        raise CycleInputError(f"store.redis: {exc}") from None
    failure = ping_failure(connection, redis_type=cfg.store.redis_type)
    if failure is not None:
        hint = "" if cfg.store.redis else " (SOLARIS_STORE__REDIS is unset)"
        raise CycleInputError(
            f"Redis at {redacted(connection)} does not answer a PING (down, or refused the "
            f"login, the database or the command: {failure}){hint}"
        )
    return connection


# dag.test() (the demo, the tests) runs many tasks in one process: the store is kept per
# (settings, Redis). Settings objects are frozen.
@functools.lru_cache(maxsize=4)
def feature_store(cfg: SolarisConfig, redis: str | RedisTarget) -> FeatureStore:
    """The namespace's FeatureStore, its definitions applied if the registry does not hold
    them yet (:func:`~solaris.store.feast_store.ensure_definitions`: one registry read when
    it does)."""
    from solaris.store.feast_store import ensure_definitions, open_feature_store

    store = open_feature_store(cfg, redis)
    ensure_definitions(store, cfg)
    return store


def reset_namespace(
    cfg: SolarisConfig,
    redis: str | RedisTarget,
    *,
    deployment: SolarisConfig | None = None,
    force: bool = False,
) -> None:
    """Forget an earlier cycle of ``cfg``'s namespace: its state folder, its offline
    parquet and its Redis keys (views and streams, ``<namespace>:*``). Other namespaces and
    other Redis data are never touched.

    A namespace holding live state (:func:`live_state`, judged against ``deployment``, by
    default ``cfg``) is refused with :class:`LiveNamespaceError` before anything is deleted,
    unless ``force``."""
    refuse_live(deployment or cfg, cfg.namespace, "reset", force=force)
    from solaris.connection import redis_client
    from solaris.files import remove_tree
    from solaris.namespace import Namespace
    from solaris.store.feast_store import delete_project_keys
    from solaris.store.partitions import Partitioning

    namespace = Namespace.of(cfg)
    remove_tree(namespace.cycle_root)
    remove_tree(namespace.offline_root)
    client = redis_client(redis, redis_type=cfg.store.redis_type, timeout_s=10.0)
    try:
        streams = namespace.request_streams(Partitioning(cfg.cycle.partitions))
        delete_project_keys(client, namespace.project, extra_keys=[namespace.miss_stream, *streams])
    finally:
        client.close()


def write_parquet(frame: pd.DataFrame, path: StatePath) -> StatePath:
    """A pandas frame as parquet, atomically (:mod:`solaris.files`)."""
    import pyarrow as pa

    from solaris.files import atomic_write_parquet

    return atomic_write_parquet(path, pa.Table.from_pandas(frame, preserve_index=False))


def parquet_rows(path: StatePath) -> int:
    """The rows of a cycle file, from its footer alone (a check before a stage writes: one
    small read, not the file).

    Raises:
        CycleInputError: naming the file when it is missing or its footer unreadable."""
    import pyarrow.parquet as pq

    from solaris.files import arrow_source

    where, filesystem = arrow_source(path)
    try:
        if filesystem is None:
            return int(pq.read_metadata(where).num_rows)
        with filesystem.open(where, "rb") as fh:  # fsspec: the footer by ranged reads
            return int(pq.read_metadata(fh).num_rows)
    except Exception as exc:
        raise CycleInputError(f"cannot read the cycle file {path}: {exc}") from exc


def read_parquet(path: StatePath, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """A cycle file as a pandas frame (a local path or an fsspec one)."""
    import pyarrow.parquet as pq

    from solaris.files import parquet_input

    picked = list(columns) if columns else None
    try:
        return pq.read_table(parquet_input(path), columns=picked).to_pandas()
    except Exception as exc:
        raise CycleInputError(f"cannot read the cycle file {path}: {exc}") from exc
