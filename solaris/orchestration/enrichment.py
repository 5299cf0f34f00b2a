"""The enrichment DAG: the views built from the pair-code history, as of an interval end.

Task entry points, run on the ``pair_embeddings`` events of one namespace, as of the newest
interval end they carry; each reads the codes the embeddings DAG wrote for intervals ending
at or before that time (within the window the view needs) and computes views with
:mod:`solaris.pipeline.enrich`:

- :func:`enrich` groups the partitions (``cycle.partitions``, :mod:`solaris.store.partitions`)
  by their codes in the window; a quiet interval's whole enrichment runs in it
  (:func:`enrich_inline`);
- otherwise :func:`partition_aggregates`, one mapped task a group, reads one partition's codes
  at a time (only the shards that hold it) and writes its users' ``uagg``, its ``iagg``
  partial sums and its users' embeddings; :func:`aggregates` adds the sums up into ``iagg``
  and builds the user KNN index once (:func:`build_neighbour_index`);
  :func:`partition_neighbours`, one mapped task a group, writes its users' ``unn`` and their
  candidates' ``nbr`` (:func:`fill_partitions`); :func:`neighbours` records the fill.

The clustering DAG's ``unn`` view is built here too (:func:`rebuild_user_neighbours`) from
the same history.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from solaris.config import SolarisConfig
from solaris.manifest import current_fm_version
from solaris.namespace import Namespace
from solaris.orchestration.handoff import Unit, results_in
from solaris.orchestration.layout import INTERVAL_END, CycleLayout, write_run_record
from solaris.orchestration.resources import (
    CycleInputError,
    cycle_redis,
    feature_store,
    mapped_task_budget,
    read_parquet,
)
from solaris.orchestration.runs import (
    ITEM_AGGREGATES,
    NEIGHBOUR_FILL,
    PAIR_EMBEDDINGS,
    USER_AGGREGATES,
    Params,
    TaskRun,
    emit,
    finish_run,
    mapped_results,
    task_runs,
    unit_run,
)
from solaris.orchestration.window_state import pair_history
from solaris.store.contract import N_NBRS

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd
    import pyarrow as pa

    from solaris.files import StatePath


__all__ = [
    "CLUSTERING_DAG_ID",
    "ENRICHMENT_DAG_ID",
    "aggregate_partitions",
    "aggregates",
    "build_neighbour_index",
    "enrich",
    "enrich_inline",
    "fill_partitions",
    "lookup_fill",
    "neighbours",
    "pair_history",
    "partition_aggregates",
    "partition_groups",
    "partition_neighbours",
    "rebuild_user_neighbours",
    "recent_requests",
    "record_neighbours",
    "reduce_aggregates",
]

log = logging.getLogger(__name__)

ENRICHMENT_DAG_ID = "solaris_enrichment"
CLUSTERING_DAG_ID = "solaris_clustering"


def enrich(params: Params, events: Any = None, outlet: Any = None) -> list[dict[str, Any]]:
    """The interval's enrichment, or its plan: for each namespace that triggered the run,
    the partitions are grouped by their codes in the window (:func:`partition_groups`).
    When they make one group (a quiet interval, whatever ``cycle.partitions`` is), the whole
    enrichment runs here, partition by partition (:func:`enrich_inline`), its ``uagg``,
    ``iagg`` and ``nbr`` events go out through ``outlet`` (the task's asset-alias outlet)
    and the run ends here (:func:`~solaris.orchestration.runs.finish_run`): one task start.
    Otherwise the groups are returned, one mapped :func:`partition_aggregates` task each."""
    units = []
    done: dict[str, list[dict[str, Any]]] = {"uagg": [], "iagg": [], "nbr": []}
    runs = list(task_runs(params, events, PAIR_EMBEDDINGS))
    for run in runs:
        budget = mapped_task_budget(run.cfg, len(runs), "the enrichment plan")
        groups = partition_groups(run.cfg, run.as_of, max_groups=budget)
        if len(groups) == 1:
            for view, record in enrich_inline(run.cfg, run.as_of).items():
                done[view].append(run.extra(record))
        else:
            units += [_unit(run, g) for g in groups]
    for view, asset in _VIEW_ASSETS.items():
        emit(outlet, asset, done[view])
    if not units:
        finish_run(outlet)  # the mapped tasks and the two after them: skipped at once
    return units


_VIEW_ASSETS = {"uagg": USER_AGGREGATES, "iagg": ITEM_AGGREGATES, "nbr": NEIGHBOUR_FILL}


def _unit(run: TaskRun, partitions: Sequence[int]) -> dict[str, Any]:
    """A mapped task's unit: the run's newest interval and a group ``[first, last]``."""
    first, last = partitions
    return Unit(run.scope, max(run.intervals), (first, last)).to_json()


def partition_aggregates(group: Mapping[str, Any]) -> dict[str, Any]:
    """``uagg`` of the group's partitions, their share of ``iagg`` and their users'
    embeddings (a mapped task)."""
    unit = Unit.from_json(group)
    cfg = unit_run(unit).cfg
    return unit.result(aggregate_partitions(cfg, unit.interval.end, unit.partition_range))


def aggregates(
    params: Params,
    results: Sequence[Mapping[str, Any] | None],
    events: Any = None,
    outlet: Any = None,
) -> list[dict[str, Any]]:
    """After the mapped :func:`partition_aggregates`: reduce the partitions' ``iagg`` sums
    into the item view, build the neighbour index from their user embeddings, record both
    aggregates and emit their events through ``outlet``. Returns the neighbour fill's
    units (the groups again)."""
    done = mapped_results(results)
    user, item, units = [], [], []
    runs = [
        (run, mine)
        for run in task_runs(params, events, PAIR_EMBEDDINGS)
        if (mine := results_in(run.scope, done))  # none: enrich did it whole, and emitted
    ]
    for run, _ in runs:  # every namespace's inputs, before any namespace's view is written
        _check_aggregates_inputs(run.cfg, run.as_of)
    for run, mine in runs:
        uagg, iagg = reduce_aggregates(run.cfg, run.as_of, mine)
        build_neighbour_index(run.cfg, run.as_of)
        units += [_unit(run, Unit.of_result(r).partitions) for r in mine]
        user.append(run.extra(uagg))
        item.append(run.extra(iagg))
    emit(outlet, USER_AGGREGATES, user)
    emit(outlet, ITEM_AGGREGATES, item)
    return units


def partition_neighbours(group: Mapping[str, Any]) -> dict[str, Any]:
    """The ``unn`` rows and the neighbour fill of the group's partitions (a mapped task)."""
    unit = Unit.from_json(group)
    cfg = unit_run(unit).cfg
    return unit.result(fill_partitions(cfg, unit.interval.end, unit.partition_range))


def neighbours(
    params: Params,
    results: Sequence[Mapping[str, Any] | None],
    events: Any = None,
    outlet: Any = None,
) -> None:
    """Record the neighbour fill of every partition the mapped tasks filled and emit the
    ``nbr`` event through ``outlet``."""
    done = mapped_results(results)
    extras = []
    for run in task_runs(params, events, PAIR_EMBEDDINGS):
        mine = results_in(run.scope, done)
        if mine:
            extras.append(run.extra(record_neighbours(run.cfg, run.as_of, mine)))
    emit(outlet, NEIGHBOUR_FILL, extras)


def enrich_inline(cfg: SolarisConfig, as_of: int) -> dict[str, dict[str, Any]]:
    """Every enrichment view as of ``as_of`` in this process, one partition at a time (the
    DAG's mapped tasks' work, done in order): returns the records by view."""
    every = range(cfg.cycle.partitions)
    uagg, iagg = reduce_aggregates(cfg, as_of, [aggregate_partitions(cfg, as_of, every)])
    build_neighbour_index(cfg, as_of)
    nbr = record_neighbours(cfg, as_of, [fill_partitions(cfg, as_of, every)])
    return {"uagg": uagg, "iagg": iagg, "nbr": nbr}


def partition_groups(
    cfg: SolarisConfig, as_of: int, *, max_groups: int | None = None
) -> list[list[int]]:
    """Groups ``[first, last]`` of consecutive partitions whose codes in the aggregates'
    window add up to at most ``cycle.enrich_rows`` (a busier partition is a group of its
    own), read from the window's completion markers, not the codes: so a quiet interval is
    one task whatever ``cycle.partitions`` is. Every partition is in one group, and there
    are at most ``max_groups`` (default ``cycle.max_mapped_tasks``) groups: when the rows
    need more, the groups grow (:func:`~solaris.store.partitions.pack`)."""
    import numpy as np

    from solaris.store.partitions import pack

    count = cfg.cycle.partitions
    sizes = np.zeros(count, np.int64)
    layout = CycleLayout(Namespace.of(cfg))
    window = cfg.store.uagg_window_seconds
    for interval in layout.embedded_intervals(ending_after=as_of - window, ending_by=as_of):
        codes = layout.published_codes(interval)
        if codes is None or codes.coverage is None or codes.partitions != count:
            continue  # codes from before partitions: counted as none (sizing only)
        for (first, last), rows in zip(codes.coverage, codes.rows or (), strict=False):
            sizes[first : last + 1] += rows // (last - first + 1)  # a shared shard: evenly
    if not sizes.any():
        sizes[:] = 1  # nothing counted: one unit over every partition
    limit = cfg.cycle.max_mapped_tasks if max_groups is None else max_groups
    units = pack(sizes, cfg.cycle.enrich_rows, split=False, max_units=limit)
    groups = [[u.first, u.last] for u in units]
    groups[0][0], groups[-1][1] = 0, count - 1  # empty partitions at either end
    for before, after in itertools.pairwise(groups):
        before[1] = after[0] - 1  # empty partitions between units: the earlier one's
    return groups


def recent_requests(
    cfg: SolarisConfig, as_of: int, window_s: int, partition: int | None = None
) -> pd.DataFrame:
    """The logged requests of the intervals ending in ``(as_of - window_s, as_of]``; only
    those of partition ``partition``'s users when given (filtered file by file)."""
    import pandas as pd
    import pyarrow as pa

    from solaris.data.schemas import read_table
    from solaris.store.partitions import Partitioning

    layout = CycleLayout(Namespace.of(cfg))
    parts = Partitioning(cfg.cycle.partitions)
    tables = []
    for path, mixed in _request_logs(layout, as_of, window_s, partition):
        table = read_table(path, "request_log")
        if mixed and partition is not None:
            table = table.filter(parts.holds(table["user_id"].to_numpy(), partition))
        tables.append(table)
    if not tables:
        return pd.DataFrame({"user_id": [], "item_id": []}, dtype="int64")
    return pa.concat_tables(tables).to_pandas()


def _request_logs(
    layout: CycleLayout, as_of: int, window_s: int, partition: int | None
) -> list[tuple[StatePath, bool]]:
    """The request-log files :func:`recent_requests` reads, each with whether it holds other
    partitions' requests too (one file of a whole interval)."""
    found = layout.intervals("request_log", ending_after=as_of - window_s, ending_by=as_of)
    files = []
    for interval in found:
        mine, mixed = layout.interval_files("request_log", interval, partition)
        files += [(path, mixed) for path in mine]
    return files


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
    windows_rebuilt: int | None = None,
) -> dict[str, Any]:
    record = {
        INTERVAL_END: as_of,
        "view": view,
        "codes_read": codes_read,
        "rows_written": {view: rows},
        "seconds": round(seconds, 3),
    }
    if tasks is not None:
        record["tasks"] = tasks
    if windows_rebuilt is not None:  # partitions whose carried windows were rebuilt
        record["windows_rebuilt"] = windows_rebuilt
    layout = CycleLayout(Namespace.of(cfg))
    write_run_record(layout, dag_id, f"{as_of:011d}-{view}", record, wrote=wrote)
    return record


def aggregate_partitions(cfg: SolarisConfig, as_of: int, partitions: Iterable[int]) -> dict:
    """For each partition in turn (:func:`~solaris.orchestration.window_state.partition_windows`:
    its windows advanced to ``as_of``, or recomputed): ``uagg`` of its users, written to the
    store under the partition's keys only, its ``iagg`` partial sums, kept as
    ``iagg_partials/<as_of>/<partition>.parquet`` for :func:`reduce_aggregates`, and its
    codes fresh for the neighbour fill, sorted by user
    (``fill_codes/<as_of>/<partition>.arrow``, looked up by every partition's
    :func:`fill_partitions`). Returns the figures the reduction records."""
    from solaris.data.fill_codes import write_fill_codes
    from solaris.files import atomic_write_parquet
    from solaris.orchestration.window_state import partition_windows, published_markers

    began = time.perf_counter()
    layout = CycleLayout(Namespace.of(cfg))
    version = current_fm_version(cfg)
    # The window's completion markers: read once for every partition of the task.
    markers = published_markers(cfg, layout, as_of) if cfg.cycle.incremental_windows else None
    done: list[int] = []
    uagg_rows = uagg_users = codes_read = rebuilt = 0
    for partition in partitions:
        views = partition_windows(cfg, layout, as_of, partition, version, markers)
        written = views.uagg_to_write  # the changed users' rows, once the windows advance
        _materialize(cfg, "uagg", written, _batch_id(cfg, as_of, partition))
        table = views.item_partials.to_table()
        atomic_write_parquet(layout.item_partials(as_of, partition), table)
        fill = views.fill
        write_fill_codes(layout.fill_codes(as_of, partition), fill.users, fill.items, fill.z16)
        if views.embeddings is not None:
            atomic_write_parquet(layout.user_embeddings(as_of, partition), views.embeddings)
        done.append(partition)
        uagg_rows += len(written)
        uagg_users += len(views.uagg)
        codes_read += views.codes_read
        rebuilt += views.rebuilt
    return {
        "partitions_run": [done[0], done[-1]] if done else [],
        "uagg_rows": uagg_rows,
        "uagg_users": uagg_users,
        "codes_read": codes_read,
        "windows_rebuilt": rebuilt,
        "seconds": round(time.perf_counter() - began, 3),
    }


def reduce_aggregates(
    cfg: SolarisConfig, as_of: int, results: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``iagg`` as of ``as_of``: the partitions' partial sums added up (one partial in
    memory at a time), written to the item view; then the run records of both aggregates
    (the next interval's candidates wait for them).

    Raises:
        CycleInputError: a partition's partials, or (the neighbour index is built from them
            next) its user embeddings, are missing or unreadable: checked before anything is
            written (:func:`_check_aggregates_inputs`), naming the file."""
    from solaris.orchestration.window_state import remove_expired
    from solaris.pipeline.aggregate import ItemPartials, item_rows, reduce_item_partials

    began = time.perf_counter()
    layout = CycleLayout(Namespace.of(cfg))
    _check_aggregates_inputs(cfg, as_of)
    paths = [layout.item_partials(as_of, k) for k in range(cfg.cycle.partitions)]
    partials = (ItemPartials.from_table(_read_table(path)) for path in paths)
    total = reduce_item_partials(partials, z_dim=cfg.model.z_dim)
    rows = item_rows(total, as_of=as_of, fm_version=current_fm_version(cfg))
    _materialize(cfg, "iagg", rows, f"cycle-{as_of}")
    _remove_older(layout, "iagg_partials", as_of)
    remove_expired(cfg, layout, as_of)
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
        windows_rebuilt=sum(int(r.get("windows_rebuilt", 0)) for r in results),
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


def _read_table(path: StatePath) -> pa.Table:
    """A parquet file another task of the cycle wrote (a read failure: a
    :class:`CycleInputError` naming it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from solaris.files import parquet_input

    try:
        return pq.read_table(parquet_input(path))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CycleInputError(f"cannot read the cycle file {path}: {_one_line(exc)}") from exc


def _one_line(exc: BaseException) -> str:
    line = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {line}"


def _require_files(
    as_of: int,
    task: str,
    files: Iterable[tuple[StatePath, str]],
    problem: Callable[[StatePath], str | None] | None = None,
) -> None:
    """Every ``(path, remedy)`` of ``files`` is there and opens, from its footer or header
    only (:func:`~solaris.files.state_file_problem`): checked before ``task`` writes
    anything, so a lost or torn file never stops it half done.

    Raises:
        CycleInputError: naming the first bad file, what is wrong with it, ``task``, the
            file's ``remedy``, and how many more are bad."""
    from solaris.files import state_file_problem

    check = state_file_problem if problem is None else problem
    bad = [(p, trouble, fix) for p, fix in files if (trouble := check(p))]
    if not bad:
        return
    path, trouble, remedy = bad[0]
    more = f" ({len(bad) - 1} more of its files are missing or unreadable)" if len(bad) > 1 else ""
    raise CycleInputError(
        f"interval end {as_of}: {task} needs {path}, which is {trouble}{more}. {remedy}; "
        "nothing was written"
    )


def _rerun_aggregates_of(partition: int) -> str:
    """The remedy for a file a mapped aggregates task writes."""
    return (
        f"Rerun the interval's partition_aggregates task holding partition {partition} (the "
        "enrichment's first task when it ran the interval whole), which writes it, then this "
        "task"
    )


_RERUN_INDEX = "Rerun the interval's aggregates task, which builds the index, then this task"


def _check_aggregates_inputs(cfg: SolarisConfig, as_of: int) -> None:
    """What the aggregates task reads, every partition's: the item partial sums and, when
    the neighbour index is built every interval, the user embeddings (footers only).

    Raises:
        CycleInputError: a file is missing or unreadable; nothing was written."""
    layout = CycleLayout(Namespace.of(cfg))
    every = range(cfg.cycle.partitions)
    files = [(layout.item_partials(as_of, k), _rerun_aggregates_of(k)) for k in every]
    if cfg.cycle.neighbours_every_interval:
        files += [(layout.user_embeddings(as_of, k), _rerun_aggregates_of(k)) for k in every]
    _require_files(as_of, "the aggregates task (iagg and the neighbour index)", files)


def build_neighbour_index(cfg: SolarisConfig, as_of: int) -> int | None:
    """The user KNN index as of ``as_of`` over every partition's user embeddings (users in
    ascending id order, so the index does not depend on the partition count), kept as one
    blob (``neighbour_index/<as_of>.npz``) for the partitions' fills; returns the number of
    users (None: the fill uses the clustering DAG's table, ``neighbours_every_interval``
    off). Memory: one ``[U, d]`` float32 matrix.

    The index is built over every user once per ``cycle.neighbour_index_hours`` (daily by
    default); in between, the previous interval's index gains the users it does not hold
    yet (:meth:`~solaris.pipeline.neighbors.UserIndex.with_users`), and the fill queries
    only those. When it was built is kept beside it (``neighbour_index/<as_of>.json``)."""
    import numpy as np
    import pyarrow as pa

    from solaris.files import atomic_write_bytes, atomic_write_json
    from solaris.pipeline.neighbors import NeighborsError, UserIndex

    if not cfg.cycle.neighbours_every_interval:
        return None
    layout = CycleLayout(Namespace.of(cfg))
    paths = [layout.user_embeddings(as_of, k) for k in range(cfg.cycle.partitions)]
    task = "the neighbour index build (the aggregates task)"
    _require_files(as_of, task, [(p, _rerun_aggregates_of(k)) for k, p in enumerate(paths)])
    tables = [_read_table(path) for path in paths]
    table = pa.concat_tables(tables)
    users = table["user_id"].to_numpy()
    emb = table["emb"].combine_chunks().flatten().to_numpy().reshape(len(users), cfg.model.z_dim)
    order = np.argsort(users, kind="stable")
    users, emb = users[order], emb[order]
    previous = _previous_index(layout, as_of, cfg.cycle.neighbour_index_seconds)
    index = None
    if previous is not None:
        path, built_at = previous
        try:
            index = UserIndex.from_bytes(path.read_bytes())
        except (OSError, NeighborsError) as exc:  # lost or torn: derived, so built again
            log.warning("%s: %s; the index is built over every user", path, _one_line(exc))
    if index is None:
        index, built_at, added = UserIndex.build(users, emb), as_of, len(users)
    else:
        new = ~np.isin(users, index.user_ids)
        index = index.with_users(users[new], emb[new])
        added = int(new.sum())
    atomic_write_bytes(layout.neighbour_index(as_of), index.to_bytes())
    built = {"built_at": built_at, "users": len(index), "added": added}
    atomic_write_json(layout.neighbour_index_built(as_of), built)
    _remove_older(layout, "user_embeddings", as_of)
    _remove_older(layout, "neighbour_index", as_of)
    return len(users)


def _previous_index(layout: CycleLayout, as_of: int, period: int) -> tuple[Any, int] | None:
    """The newest index kept before ``as_of`` and when it was built, if that build is less
    than ``period`` seconds old (None: time to build over every user)."""
    import json

    folder = layout.root / "neighbour_index"
    kept = sorted(
        int(entry.name.removesuffix(".json"))
        for entry in (folder.iterdir() if folder.is_dir() else ())
        if entry.name.endswith(".json") and entry.name.removesuffix(".json").isdigit()
    )
    earlier = [end for end in kept if end < as_of]
    if not earlier or period <= 0:
        return None
    try:
        built_at = int(
            json.loads(layout.neighbour_index_built(earlier[-1]).read_text())["built_at"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # unreadable: built again
    path = layout.neighbour_index(earlier[-1])
    if as_of - built_at >= period or not path.is_file():
        return None
    return path, built_at


def _built_at(layout: CycleLayout, as_of: int) -> int:
    """When the index kept as of ``as_of`` was built over every user (``as_of`` itself for
    an index kept before the record existed).

    Raises:
        CycleInputError: the record is there but unreadable, naming it."""
    import json

    path = layout.neighbour_index_built(as_of)
    try:
        return int(json.loads(path.read_text())["built_at"])
    except FileNotFoundError:
        return as_of
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CycleInputError(
            f"interval end {as_of}: the neighbour index's build record {path} is unreadable "
            f"({_one_line(exc)}). {_RERUN_INDEX}"
        ) from exc


def fill_partitions(cfg: SolarisConfig, as_of: int, partitions: Iterable[int]) -> dict[str, Any]:
    """The partitions' ``unn`` rows from the neighbour index built as of ``as_of`` (or, with
    ``neighbours_every_interval`` off, the clustering DAG's newest table), then ``nbr`` for
    their candidates of the last TTL that the verifier did not select, from their
    neighbours' fresh codes (any partition's, looked up in every partition's fill codes by
    :func:`lookup_fill`).

    Every read comes first: the inputs' headers (:func:`_check_fill_inputs`), each
    partition's neighbour lists and targets, then one lookup for the targets of all the
    task's partitions, which opens each partition's fill codes once (on object storage a
    task's requests are a few per partition, not a few per partition per partition of the
    task). Then each partition's rows are written under its keys only. Returns the figures
    :func:`record_neighbours` sums."""
    import numpy as np
    import pandas as pd

    from solaris.store.partitions import Partitioning

    began = time.perf_counter()
    layout = CycleLayout(Namespace.of(cfg))
    parts = Partitioning(cfg.cycle.partitions)
    ttl = _fill_window(cfg)
    version = current_fm_version(cfg)
    partitions = list(partitions)
    index = table = None
    built_at = as_of
    fill_rows: dict[int, int] = {}
    if cfg.cycle.neighbours_every_interval:
        built_at = _built_at(layout, as_of)
        fill_rows = _check_fill_inputs(cfg, layout, as_of, partitions, built_at)
        index = _read_index(layout.neighbour_index(as_of), as_of)
    elif (newest := layout.latest_neighbours(as_of)) is not None:
        table = read_parquet(newest)
        fill_rows = _check_fill_inputs(cfg, layout, as_of, partitions, None)
    if index is not None:
        user_parts = parts.of(index.user_ids)  # once: every partition below picks its own
    elif table is not None:
        user_parts = parts.of(table["user_id"].to_numpy(np.int64))
    figures = {"nbr_rows": 0, "unn_rows": 0, "codes_read": 0, "targets": 0, "matches": 0}
    queried_of: dict[int, pd.DataFrame] = {}
    targets_of: list[pd.DataFrame] = []
    lists_of: list[pd.DataFrame] = []
    for partition in partitions:
        if index is not None:
            unn, queried = _neighbour_lists(cfg, layout, index, user_parts, partition, built_at)
            queried_of[partition] = queried
        elif table is not None:
            unn = table[user_parts == partition]
        else:
            continue
        recent = recent_requests(cfg, as_of, ttl, partition)
        if not (len(recent) and len(unn)):
            continue
        targets_of.append(recent[["user_id", "item_id"]].drop_duplicates(ignore_index=True))
        lists_of.append(unn)
    rows = None
    if targets_of:
        targets = pd.concat(targets_of, ignore_index=True)
        neighbours = pd.concat(lists_of, ignore_index=True)
        rows, folded = lookup_fill(cfg, as_of, targets, neighbours, version, fill_rows)
        figures["codes_read"] += folded
        figures["targets"] += len(targets)
        figures["matches"] += int(rows[N_NBRS].sum()) if len(rows) else 0  # the fill's work
    of_rows = None if rows is None else parts.of(rows["user_id"].to_numpy(np.int64))
    stamp = pd.Timestamp(int(as_of), unit="s", tz="UTC")
    for partition in partitions:  # the writes: each partition's keys, its own batch
        queried = queried_of.get(partition)
        if queried is not None and len(queried):
            stamped = queried.assign(event_ts=stamp)
            _materialize(cfg, "unn", stamped, _batch_id(cfg, as_of, partition))
            figures["unn_rows"] += len(queried)
        if of_rows is not None:
            mine = rows[of_rows == partition]
            if len(mine):
                _materialize(
                    cfg, "nbr", mine.reset_index(drop=True), _batch_id(cfg, as_of, partition)
                )
            figures["nbr_rows"] += len(mine)
    return {
        "partitions_run": [partitions[0], partitions[-1]] if partitions else [],
        **figures,
        "seconds": round(time.perf_counter() - began, 3),
    }


def _check_fill_inputs(
    cfg: SolarisConfig,
    layout: CycleLayout,
    as_of: int,
    partitions: Sequence[int],
    built_at: int | None,
) -> dict[int, int]:
    """What the fill of ``partitions`` reads, checked before its first write (footers and
    headers only): the neighbour index and the partitions' kept neighbour lists (None
    ``built_at``: the clustering DAG's table instead), every partition's fill codes (any
    user's neighbours may be in any partition) and the partitions' request logs of the
    codes' TTL. A partition without kept lists is no error: its users are queried again.
    Returns the row counts of the fill codes on object storage, read from their headers
    (one ranged ``GET`` each, which :func:`lookup_fill` then does not repeat); none locally.

    Raises:
        CycleInputError: a file is missing or unreadable, naming it; nothing was written."""
    from solaris.files import is_local

    if not partitions:
        return {}
    task = f"the neighbour fill of partitions {partitions[0]} to {partitions[-1]}"
    files: list[tuple[StatePath, str]] = []
    if built_at is not None:
        files.append((layout.neighbour_index(as_of), _RERUN_INDEX))
        folder = layout.neighbour_lists(built_at, 0).parent
        kept = {e.name for e in folder.iterdir()} if folder.is_dir() else set()  # one listing
        remedy = "Remove it: the fill then queries the partition's users again and keeps them"
        for partition in partitions:
            path = layout.neighbour_lists(built_at, partition)
            if path.name in kept:
                files.append((path, remedy))
    every = range(cfg.cycle.partitions)
    codes = [(layout.fill_codes(as_of, k), _rerun_aggregates_of(k)) for k in every]
    remote = {str(path): k for k, (path, _) in enumerate(codes) if not is_local(path)}
    files += [(path, fix) for path, fix in codes if is_local(path)]
    logs = "Restore it (drained from the request stream: a rerun cannot drain it again)"
    for partition in partitions:
        for path, _ in _request_logs(layout, as_of, _fill_window(cfg), partition):
            files.append((path, f"{logs}, or remove it to fill without its requests"))
    rows: dict[int, int] = {}
    z_dim = cfg.model.z_dim

    def problem(path: StatePath) -> str | None:
        """A file's problem: a fill codes file on object storage from its header (kept)."""
        from solaris.data.fill_codes import read_fill_codes_rows
        from solaris.data.schemas import SchemaError
        from solaris.files import state_file_problem

        k = remote.get(str(path))
        if k is None:
            return state_file_problem(path)
        try:
            rows[k] = read_fill_codes_rows(path, z_dim=z_dim)
        except SchemaError as exc:
            if isinstance(exc.__cause__, FileNotFoundError):
                return "missing"
            return f"unreadable ({_one_line(exc)})"
        return None

    files += [codes[k] for k in remote.values()]
    _require_files(as_of, task, files, problem=problem)
    return rows


def _read_index(path: StatePath, as_of: int) -> Any:
    """The neighbour index kept at ``path`` (a :class:`~solaris.pipeline.neighbors.UserIndex`).

    Raises:
        CycleInputError: missing or unreadable, naming it."""
    from solaris.pipeline.neighbors import NeighborsError, UserIndex

    try:
        return UserIndex.from_bytes(path.read_bytes())
    except FileNotFoundError:
        problem = "missing"
    except (OSError, NeighborsError) as exc:
        problem = f"unreadable ({_one_line(exc)})"
    raise CycleInputError(
        f"interval end {as_of}: the neighbour fill needs the neighbour index {path}, which is "
        f"{problem}. {_RERUN_INDEX}; nothing was written"
    )


def _neighbour_lists(
    cfg: SolarisConfig,
    layout: CycleLayout,
    index: Any,
    user_parts: Any,
    partition: int,
    built_at: int,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The partition's neighbour lists, and those queried now (to be written): every user's
    in the interval that built the index (kept as ``neighbour_lists/<built_at>/<p>``), the
    lists kept then and the users added since, queried, in the intervals after it."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from solaris.files import atomic_write_parquet

    users = index.user_ids[user_parts == partition]
    path = layout.neighbour_lists(built_at, partition)
    kept = read_parquet(path) if path.is_file() else None
    if kept is None:
        unn = index.query(users, cfg.store.n_neighbors)
        table = pa.Table.from_pandas(unn, preserve_index=False, schema=_neighbours_schema())
        atomic_write_parquet(path, table)
        return unn, unn
    added = np.setdiff1d(users, kept["user_id"].to_numpy(np.int64))
    queried = index.query(added, cfg.store.n_neighbors)
    return pd.concat([kept, queried], ignore_index=True), queried


def lookup_fill(
    cfg: SolarisConfig,
    as_of: int,
    targets: pd.DataFrame,
    neighbours: pd.DataFrame,
    fm_version: str,
    fill_rows: Mapping[int, int] | None = None,
) -> tuple[pd.DataFrame, int]:
    """``nbr`` rows of ``targets`` from the codes fresh at ``as_of``, and the number of code
    rows visited: every partition's fill codes (written by :func:`aggregate_partitions` for
    ``as_of``) opened once and folded in turn into a
    :class:`~solaris.pipeline.neighbors.NeighbourFill`, which visits only the rows of the
    targets' users and of their neighbours and reads only the codes of the matches. Local
    files are memory-mapped; on object storage a file's key columns are read, then the
    codes of its matches by ranges (:func:`~solaris.data.fill_codes.open_fill_codes`;
    ``fill_rows``: the files' row counts when their headers were read already). Memory is
    the targets' sums, one file's keys and one block of matches."""

    from solaris.data.fill_codes import open_fill_codes
    from solaris.pipeline.neighbors import CodeIndex, NeighbourFill
    from solaris.store.partitions import Partitioning

    layout = CycleLayout(Namespace.of(cfg))
    count = cfg.cycle.partitions
    known = fill_rows or {}
    fill = NeighbourFill(targets, neighbours, z_dim=cfg.model.z_dim)
    # The users whose codes matter, by partition: each is looked up in its own partition's
    # file only (a search per user, not per user and file), and a file none of them is in
    # is not opened.
    near = fill.near_users
    visited = 0
    for partition, rows in enumerate(Partitioning(count).split(near)):
        if not len(rows):
            continue
        path = layout.fill_codes(as_of, partition)
        opened = open_fill_codes(path, z_dim=cfg.model.z_dim, rows=known.get(partition))
        visited += fill.add_index(CodeIndex(*opened), near[rows])  # split keeps row order
    return fill.rows(as_of=as_of, fm_version=fm_version), visited


def record_neighbours(
    cfg: SolarisConfig, as_of: int, results: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The run records of ``unn`` (the rows queried this interval: every user's when the
    index was built over every user, the users added since otherwise) and ``nbr`` as of
    ``as_of``, from the partitions' figures; returns the ``nbr`` record."""
    seconds = sum(float(r["seconds"]) for r in results)
    codes = sum(int(r["codes_read"]) for r in results)
    layout = CycleLayout(Namespace.of(cfg))
    if cfg.cycle.neighbours_every_interval:
        built_at = _built_at(layout, as_of)  # read before any record is written
        unn_rows = sum(int(r["unn_rows"]) for r in results)
        _record(
            ENRICHMENT_DAG_ID,
            cfg,
            as_of,
            "unn",
            unn_rows,
            seconds,
            codes_read=codes,
            wrote=(layout.neighbour_index(as_of),),
        )
    nbr_rows = sum(int(r["nbr_rows"]) for r in results)
    _remove_older(layout, "fill_codes", as_of)
    if cfg.cycle.neighbours_every_interval:  # the lists of the builds before this index's
        _remove_older(layout, "neighbour_lists", built_at)
    return _record(
        ENRICHMENT_DAG_ID,
        cfg,
        as_of,
        "nbr",
        nbr_rows,
        seconds,
        codes_read=codes,
        tasks=len(results),
    )


def _remove_older(layout: CycleLayout, kind: str, as_of: int) -> None:
    """Files or folders of ``kind`` named by an earlier interval end: never read again."""
    from solaris.files import remove_tree

    folder = layout.root / kind
    for entry in folder.iterdir() if folder.is_dir() else ():
        stem = entry.name.split(".", 1)[0]
        if stem.isdigit() and int(stem) < as_of:
            if entry.is_dir():
                remove_tree(entry)
            else:
                entry.unlink(missing_ok=True)


def _fill_window(cfg: SolarisConfig) -> int:
    """The neighbour fill's window in seconds: the codes' TTL (a code is served that long)."""
    return cfg.selection.ttl_seconds


def _neighbour_window(cfg: SolarisConfig) -> int:
    return cfg.store.unn_ttl_seconds


def rebuild_user_neighbours(cfg: SolarisConfig, as_of: int) -> dict[str, Any]:
    """``unn`` as of ``as_of`` (the clustering DAG): each partition's user embeddings over
    the neighbour window, one KNN index over all of them, each partition's users queried
    and written to the view; the table is kept as ``neighbours/<as_of>.parquet`` (written
    partition by partition) for the neighbour fill when ``cycle.neighbours_every_interval``
    is off. Memory: one partition's codes, the ``[U, d]`` embeddings and the index."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from solaris.files import atomic_write
    from solaris.pipeline.enrich import user_embedding_table
    from solaris.pipeline.neighbors import UserIndex
    from solaris.store.partitions import Partitioning

    began = time.perf_counter()
    layout = CycleLayout(Namespace.of(cfg))
    parts = Partitioning(cfg.cycle.partitions)
    version = current_fm_version(cfg)
    tables, codes = [], 0
    for partition in range(parts.count):
        history = pair_history(cfg, as_of, _neighbour_window(cfg), partition)
        tables.append(user_embedding_table(history, as_of, cfg, version))
        codes += len(history.pairs)
    table = pa.concat_tables(tables)
    users = table["user_id"].to_numpy()
    emb = table["emb"].combine_chunks().flatten().to_numpy().reshape(len(users), cfg.model.z_dim)
    order = np.argsort(users, kind="stable")
    index = UserIndex.build(users[order], emb[order]) if len(users) >= 2 else None
    written, schema = 0, _neighbours_schema()
    user_parts = parts.of(users)  # once: every partition below picks its own

    def write(sink) -> None:
        nonlocal written
        writer = None
        for partition in range(parts.count):
            writer = writer or pq.ParquetWriter(sink, schema)
            mine = users[user_parts == partition] if index is not None else users[:0]
            if not len(mine):
                continue
            unn = index.query(mine, cfg.store.n_neighbors)
            stamped = unn.assign(event_ts=pd.Timestamp(int(as_of), unit="s", tz="UTC"))
            _materialize(cfg, "unn", stamped, _batch_id(cfg, as_of, partition))
            writer.write_table(pa.Table.from_pandas(unn, preserve_index=False, schema=schema))
            written += len(unn)
        if writer is not None:
            writer.close()

    kept = atomic_write(layout.neighbours(as_of), write)
    seconds = time.perf_counter() - began
    return _record(
        CLUSTERING_DAG_ID, cfg, as_of, "unn", written, seconds, codes_read=codes, wrote=(kept,)
    )


def _neighbours_schema() -> pa.Schema:
    """The kept neighbour table's columns (what ``nearest_users`` returns)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("user_id", pa.int64()),
            ("nbr_ids", pa.list_(pa.int64())),
            ("nbr_sims", pa.list_(pa.float32())),
        ]
    )
