"""The enrichment DAG: the views built from the pair-code history, as of an interval end.

Task entry points, run on the ``pair_embeddings`` events of one namespace, as of the newest
interval end they carry; each reads the codes the embeddings DAG wrote for intervals ending
at or before that time (within the window the view needs) and computes views with
:mod:`solaris.pipeline.enrich`:

- the aggregates, partitioned by user (``cycle.partitions``, :mod:`solaris.store.partitions`):
  :func:`plan_partitions` groups the partitions by their codes in the window;
  :func:`partition_aggregates`, one mapped task a group, reads one partition's codes at a
  time (only the shards that hold it), writes its users' ``uagg`` rows and keeps its
  ``iagg`` partial sums; :func:`aggregates` adds the partial sums up into ``iagg`` and
  records both views;
- :func:`neighbour_fill` (one task): the neighbour table rebuilt, then the ``nbr`` view.

The clustering DAG's ``unn`` view is built here too (:func:`rebuild_user_neighbours`) from
the same history.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from solaris.config import SolarisConfig
from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, write_run_record
from solaris.orchestration.resources import (
    CycleInputError,
    cycle_redis,
    feature_store,
    read_parquet,
    write_parquet,
)
from solaris.orchestration.runs import (
    PAIR_EMBEDDINGS,
    Params,
    combine_extras,
    task_run,
    task_runs,
)

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd


__all__ = [
    "CLUSTERING_DAG_ID",
    "ENRICHMENT_DAG_ID",
    "aggregate_partitions",
    "aggregates",
    "neighbour_fill",
    "pair_history",
    "partition_aggregates",
    "partition_groups",
    "plan_partitions",
    "rebuild_user_neighbours",
    "recent_requests",
    "reduce_aggregates",
    "refresh_item_aggregates",
    "refresh_neighbour_fill",
    "refresh_user_aggregates",
]

ENRICHMENT_DAG_ID = "solaris_enrichment"
CLUSTERING_DAG_ID = "solaris_clustering"


def plan_partitions(params: Params, events: Any = None) -> list[dict[str, Any]]:
    """The aggregates' units of work: for each namespace that triggered the run, groups of
    consecutive partitions sized by their codes in the window (:func:`partition_groups`);
    one mapped :func:`partition_aggregates` task each."""
    return [
        run.extra({"interval_end": run.as_of, "partitions": group})
        for run in task_runs(params, events, PAIR_EMBEDDINGS)
        for group in partition_groups(run.cfg, run.as_of)
    ]


def partition_aggregates(group: Mapping[str, Any]) -> dict[str, Any]:
    """``uagg`` of the group's partitions, and their share of ``iagg`` (a mapped task)."""
    cfg, as_of = _group_run(group)
    first, last = group["partitions"]
    return aggregate_partitions(cfg, as_of, range(first, last + 1))


def aggregates(
    params: Params, results: Sequence[Mapping[str, Any] | None], events: Any = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Reduce the partitions' ``iagg`` sums into the item view; record both aggregates.
    Returns the extras of the ``uagg`` and ``iagg`` events."""
    done = [results[i] for i in range(len(results))]  # indexing: Airflow's lazy sequence
    user, item = [], []
    for run in task_runs(params, events, PAIR_EMBEDDINGS):
        mine = [r for r in done if r and r["namespace"] == run.cfg.namespace]
        uagg, iagg = reduce_aggregates(run.cfg, run.as_of, mine)
        user.append(run.extra(uagg))
        item.append(run.extra(iagg))
    return combine_extras(user), combine_extras(item)


def neighbour_fill(params: Params, events: Any = None) -> dict[str, Any]:
    runs = task_runs(params, events, PAIR_EMBEDDINGS)
    return combine_extras([run.extra(refresh_neighbour_fill(run.cfg, run.as_of)) for run in runs])


def _group_run(group: Mapping[str, Any]) -> tuple[SolarisConfig, int]:
    """The settings and ``as_of`` of one mapped unit (its namespace, as :func:`plan_partitions`
    put it there)."""
    end = int(group["interval_end"])
    run = task_run(
        {
            "namespace": group["namespace"],
            "replay": group["replay"],
            "interval_end": end,
            "interval_start": end - 1,
        }
    )
    return run.cfg, end


def partition_groups(cfg: SolarisConfig, as_of: int) -> list[list[int]]:
    """Groups ``[first, last]`` of consecutive partitions whose codes in the aggregates'
    window add up to at most ``cycle.enrich_rows`` (a busier partition is a group of its
    own), read from the window's completion markers, not the codes: so a quiet interval is
    one task whatever ``cycle.partitions`` is. Every partition is in one group."""
    import numpy as np

    from solaris.store.partitions import pack

    count = cfg.cycle.partitions
    sizes = np.zeros(count, np.int64)
    layout = CycleLayout(Namespace.of(cfg))
    window = round(cfg.store.uagg_window_hours * 3600)
    for interval in layout.embedded_intervals(ending_after=as_of - window, ending_by=as_of):
        codes = layout.published_codes(interval)
        if codes is None or codes.coverage is None or codes.partitions != count:
            continue  # codes from before partitions: counted as none (sizing only)
        for (first, last), rows in zip(codes.coverage, codes.rows or (), strict=False):
            sizes[first : last + 1] += rows // (last - first + 1)  # a shared shard: evenly
    if not sizes.any():
        sizes[:] = 1  # nothing counted: one unit over every partition
    units = pack(sizes, cfg.cycle.enrich_rows, split=False)
    groups = [[u.first, u.last] for u in units]
    groups[0][0], groups[-1][1] = 0, count - 1  # empty partitions at either end
    for before, after in itertools.pairwise(groups):
        before[1] = after[0] - 1  # empty partitions between units: the earlier one's
    return groups


def _fm_version(cfg: SolarisConfig) -> str:
    from solaris.pipeline.codes import read_manifest

    return read_manifest(Namespace.of(cfg).models_dir).fm_version


def recent_requests(cfg: SolarisConfig, as_of: int, window_s: int) -> pd.DataFrame:
    """The logged requests of the intervals ending in ``(as_of - window_s, as_of]``."""
    import pandas as pd
    import pyarrow as pa

    from solaris.data.schemas import read_table

    layout = CycleLayout(Namespace.of(cfg))
    found = layout.intervals("request_log", ending_after=as_of - window_s, ending_by=as_of)
    tables = [read_table(layout.request_log(i), "request_log") for i in found]
    if not tables:
        return pd.DataFrame({"user_id": [], "item_id": []}, dtype="int64")
    return pa.concat_tables(tables).to_pandas()


def pair_history(cfg: SolarisConfig, as_of: int, window_s: int, partition: int | None = None):
    """:class:`~solaris.pipeline.enrich.PairHistory` of the codes computed in
    ``(as_of - window_s, as_of]``; only partition ``partition``'s users' codes when given
    (only the shards that hold it are read)."""
    import numpy as np

    from solaris.data.schemas import read_table
    from solaris.pipeline.enrich import PairHistory
    from solaris.store.partitions import Partitioning

    layout = CycleLayout(Namespace.of(cfg))
    count = cfg.cycle.partitions
    intervals = layout.embedded_intervals(ending_after=as_of - window_s, ending_by=as_of)
    # Exactly the files each marker counts: a generation being replaced fails the read on
    # a missing file (the task's retry reads the new one), it is never read in part.
    files, mixed = [], False
    for interval in intervals:
        codes = layout.published_codes(interval)
        if codes is None:
            continue
        if partition is None:
            files += codes.files
        else:
            mine, shared = codes.files_of(partition, count)
            files += mine
            mixed |= shared
    table = read_table(files, "pair_embeddings", z_dim=cfg.model.z_dim)
    if mixed:  # shards that hold other partitions too: keep this one's rows
        users = table["user_id"].to_numpy()
        table = table.filter(Partitioning(count).of(users) == np.int32(partition))
    return PairHistory.from_table(table)


def _materialize(cfg: SolarisConfig, view: str, rows: pd.DataFrame, batch_id: str) -> float:
    from solaris.pipeline.materialize import materialize

    store = feature_store(cfg, cycle_redis(cfg))
    return materialize(store, view, rows, batch_id=batch_id).online_seconds


def _record(
    dag_id: str,
    cfg: SolarisConfig,
    as_of: int,
    view: str,
    rows: int,
    seconds: float,
    *,
    codes_read: int,
    wrote: tuple[Path, ...] = (),
    tasks: int | None = None,
) -> dict[str, Any]:
    record = {
        "interval_end": as_of,
        "view": view,
        "codes_read": codes_read,
        "rows_written": {view: rows},
        "seconds": round(seconds, 3),
    }
    if tasks is not None:
        record["tasks"] = tasks
    layout = CycleLayout(Namespace.of(cfg))
    write_run_record(layout, dag_id, f"{as_of:011d}-{view}", record, wrote=wrote)
    return record


def aggregate_partitions(cfg: SolarisConfig, as_of: int, partitions: Iterable[int]) -> dict:
    """For each partition in turn (memory: one partition's window of codes): ``uagg`` of
    its users, written to the store under the partition's keys only, and its ``iagg``
    partial sums, kept as ``iagg_partials/<as_of>/<partition>.parquet`` for
    :func:`reduce_aggregates`. Returns the figures the reduction records."""
    from solaris.files import atomic_write_parquet
    from solaris.pipeline.enrich import item_partials, user_aggregates

    began = time.perf_counter()
    layout = CycleLayout(Namespace.of(cfg))
    window = round(cfg.store.uagg_window_hours * 3600)
    version = _fm_version(cfg)
    figures = {"partitions": [], "uagg_rows": 0, "codes_read": 0}
    for partition in partitions:
        history = pair_history(cfg, as_of, window, partition)
        rows = user_aggregates(history, as_of, cfg, version)
        _materialize(cfg, "uagg", rows, _batch_id(cfg, as_of, partition))
        partials = item_partials(history, as_of, cfg, version)
        atomic_write_parquet(layout.item_partials(as_of, partition), partials.to_table())
        figures["partitions"].append(partition)
        figures["uagg_rows"] += len(rows)
        figures["codes_read"] += len(history.pairs)
    return {
        "namespace": cfg.namespace,
        **figures,
        "seconds": round(time.perf_counter() - began, 3),
    }


def reduce_aggregates(
    cfg: SolarisConfig, as_of: int, results: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``iagg`` as of ``as_of``: the partitions' partial sums added up (one partial in
    memory at a time), written to the item view; then the run records of both aggregates
    (the next interval's candidates wait for them). Every partition must have its partials
    (a missing one fails the task, naming it: its mapped task did not finish)."""
    from solaris.pipeline.aggregate import ItemPartials, item_rows, reduce_item_partials

    began = time.perf_counter()
    layout = CycleLayout(Namespace.of(cfg))
    paths = [layout.item_partials(as_of, k) for k in range(cfg.cycle.partitions)]
    missing = [k for k, path in enumerate(paths) if not path.is_file()]
    if missing:
        raise CycleInputError(
            f"interval end {as_of}: partitions {missing[:10]} have no item partial sums under "
            f"{paths[0].parent} (their aggregates task did not finish): rerun the run's "
            "partition_aggregates tasks"
        )
    partials = (ItemPartials.from_table(_read_table(path)) for path in paths)
    total = reduce_item_partials(partials, z_dim=cfg.model.z_dim)
    rows = item_rows(total, as_of=as_of, fm_version=_fm_version(cfg))
    _materialize(cfg, "iagg", rows, f"cycle-{as_of}")
    _remove_older_partials(layout, as_of)
    codes = sum(int(r["codes_read"]) for r in results)
    seconds = sum(float(r["seconds"]) for r in results)
    uagg = _record(
        ENRICHMENT_DAG_ID,
        cfg,
        as_of,
        "uagg",
        sum(int(r["uagg_rows"]) for r in results),
        seconds,  # the partitions' tasks, summed
        codes_read=codes,
        tasks=len(results),
    )
    iagg = _record(
        ENRICHMENT_DAG_ID,
        cfg,
        as_of,
        "iagg",
        len(rows),
        time.perf_counter() - began,
        codes_read=codes,
    )
    return uagg, iagg


def _batch_id(cfg: SolarisConfig, as_of: int, partition: int) -> str:
    """The offline batch of one partition's rows of a per-user view (``cycle-<as_of>``
    with one partition, as before partitions)."""
    return f"cycle-{as_of}" if cfg.cycle.partitions == 1 else f"cycle-{as_of}-p{partition:05d}"


def _read_table(path):
    import pyarrow.parquet as pq

    from solaris.files import arrow_source

    where, filesystem = arrow_source(path)
    return pq.read_table(where, filesystem=filesystem)


def _remove_older_partials(layout: CycleLayout, as_of: int) -> None:
    """Partial sums of earlier interval ends: reduced already, never read again."""
    from solaris.files import remove_tree

    folder = layout.item_partials(as_of, 0).parent.parent
    for entry in folder.iterdir() if folder.is_dir() else ():
        if entry.name.isdigit() and int(entry.name) < as_of:
            remove_tree(entry)


def refresh_user_aggregates(cfg: SolarisConfig, as_of: int) -> dict[str, Any]:
    """``uagg`` and ``iagg`` as of ``as_of``, every partition in this process; returns the
    ``uagg`` record."""
    results = [aggregate_partitions(cfg, as_of, range(cfg.cycle.partitions))]
    return reduce_aggregates(cfg, as_of, results)[0]


def refresh_item_aggregates(cfg: SolarisConfig, as_of: int) -> dict[str, Any]:
    """``uagg`` and ``iagg`` as of ``as_of`` (see :func:`refresh_user_aggregates`); returns
    the ``iagg`` record."""
    results = [aggregate_partitions(cfg, as_of, range(cfg.cycle.partitions))]
    return reduce_aggregates(cfg, as_of, results)[1]


def refresh_neighbour_fill(cfg: SolarisConfig, as_of: int) -> dict[str, Any]:
    """``nbr``: the last TTL's candidates imputed from similar users' fresh codes, with the
    neighbour table rebuilt as of ``as_of`` (``cycle.neighbours_every_interval``) or else the
    newest one the clustering DAG built at or before it."""
    import pandas as pd

    from solaris.pipeline.enrich import neighbour_rows

    began = time.perf_counter()
    layout = CycleLayout(Namespace.of(cfg))
    ttl = round(cfg.selection.ttl_hours * 3600)
    history = None
    if cfg.cycle.neighbours_every_interval:
        # 63% of pair misses came from users rating for the first time that day: a daily
        # table does not hold them, one rebuilt from this interval's codes does. One read
        # serves the table and the fill (each keeps only its own window of the codes).
        history = pair_history(cfg, as_of, max(_neighbour_window(cfg), ttl))
        neighbours, _ = _keep_user_neighbours(cfg, as_of, history, ENRICHMENT_DAG_ID, began)
    else:
        table = layout.latest_neighbours(as_of)
        neighbours = None if table is None else read_parquet(table)
    rows = pd.DataFrame()
    codes_read = 0
    if neighbours is not None:
        recent = recent_requests(cfg, as_of, ttl)
        if len(recent) and len(neighbours):
            if history is None:
                history = pair_history(cfg, as_of, ttl)
            codes_read = int((history.pairs["computed_at"].to_numpy() > as_of - ttl).sum())
            rows = neighbour_rows(
                recent[["user_id", "item_id"]], neighbours, history, as_of, cfg, _fm_version(cfg)
            )
            _materialize(cfg, "nbr", rows, f"cycle-{as_of}")
    seconds = time.perf_counter() - began
    return _record(ENRICHMENT_DAG_ID, cfg, as_of, "nbr", len(rows), seconds, codes_read=codes_read)


def _neighbour_window(cfg: SolarisConfig) -> int:
    return round(cfg.store.unn_ttl_hours * 3600)


def rebuild_user_neighbours(cfg: SolarisConfig, as_of: int) -> dict[str, Any]:
    """``unn``: user embeddings over the neighbour window, cosine KNN; the table is kept
    as ``neighbours/<as_of>.parquet`` for the enrichment DAG's neighbour fill."""
    began = time.perf_counter()
    history = pair_history(cfg, as_of, _neighbour_window(cfg))
    return _keep_user_neighbours(cfg, as_of, history, CLUSTERING_DAG_ID, began)[1]


def _keep_user_neighbours(
    cfg: SolarisConfig, as_of: int, history, dag_id: str, began: float
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The neighbour table as of ``as_of`` from ``history``: written to the ``unn`` view,
    kept as ``neighbours/<as_of>.parquet`` and recorded under ``dag_id`` (the clustering
    DAG's, or the enrichment's when it rebuilds the table before a fill). Returns the kept
    table and the record."""
    from solaris.pipeline.enrich import user_neighbours

    layout = CycleLayout(Namespace.of(cfg))
    rows = user_neighbours(history, as_of, cfg, _fm_version(cfg))
    if len(rows):
        _materialize(cfg, "unn", rows, f"cycle-{as_of}")
    table = rows.drop(columns=["event_ts"], errors="ignore")
    kept = write_parquet(table, layout.neighbours(as_of))
    seconds = time.perf_counter() - began
    record = _record(
        dag_id, cfg, as_of, "unn", len(rows), seconds, codes_read=len(history.pairs), wrote=(kept,)
    )
    return table, record
