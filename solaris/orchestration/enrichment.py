"""The enrichment DAG: the views built from the pair-code history, as of an interval end.

Task entry points: :func:`user_aggregates`, :func:`item_aggregates` and
:func:`neighbour_fill`, each run on the ``pair_embeddings`` events of one namespace, as of
the newest interval end they carry. Each reads the codes the embeddings DAG wrote for
intervals ending at or before that time (within the window the view needs), computes one
view with :mod:`solaris.pipeline.enrich` and materializes it. The clustering DAG's
``unn`` view is built here too (:func:`rebuild_user_neighbours`) from the same history.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from solaris.config import SolarisConfig
from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, write_run_record
from solaris.orchestration.resources import (
    cycle_redis,
    feature_store,
    read_parquet,
    write_parquet,
)
from solaris.orchestration.runs import PAIR_EMBEDDINGS, Params, combine_extras, task_runs

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd


__all__ = [
    "CLUSTERING_DAG_ID",
    "ENRICHMENT_DAG_ID",
    "item_aggregates",
    "neighbour_fill",
    "pair_history",
    "rebuild_user_neighbours",
    "recent_requests",
    "refresh_item_aggregates",
    "refresh_neighbour_fill",
    "refresh_user_aggregates",
    "user_aggregates",
]

ENRICHMENT_DAG_ID = "solaris_enrichment"
CLUSTERING_DAG_ID = "solaris_clustering"


def user_aggregates(params: Params, events: Any = None) -> dict[str, Any]:
    runs = task_runs(params, events, PAIR_EMBEDDINGS)
    return combine_extras([run.extra(refresh_user_aggregates(run.cfg, run.as_of)) for run in runs])


def item_aggregates(params: Params, events: Any = None) -> dict[str, Any]:
    runs = task_runs(params, events, PAIR_EMBEDDINGS)
    return combine_extras([run.extra(refresh_item_aggregates(run.cfg, run.as_of)) for run in runs])


def neighbour_fill(params: Params, events: Any = None) -> dict[str, Any]:
    runs = task_runs(params, events, PAIR_EMBEDDINGS)
    return combine_extras([run.extra(refresh_neighbour_fill(run.cfg, run.as_of)) for run in runs])


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


def pair_history(cfg: SolarisConfig, as_of: int, window_s: int):
    """:class:`~solaris.pipeline.enrich.PairHistory` of the codes computed in
    ``(as_of - window_s, as_of]``."""

    from solaris.data.schemas import read_table
    from solaris.pipeline.enrich import PairHistory

    layout = CycleLayout(Namespace.of(cfg))
    intervals = layout.embedded_intervals(ending_after=as_of - window_s, ending_by=as_of)
    # Exactly the files each marker counts: a generation being replaced fails the read on
    # a missing file (the task's retry reads the new one), it is never read in part.
    files = [
        path
        for interval in intervals
        if (codes := layout.published_codes(interval)) is not None
        for path in codes.files
    ]
    return PairHistory.from_table(read_table(files, "pair_embeddings", z_dim=cfg.model.z_dim))


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
    began: float,
    *,
    codes_read: int,
    wrote: tuple[Path, ...] = (),
) -> dict[str, Any]:
    record = {
        "interval_end": as_of,
        "view": view,
        "codes_read": codes_read,
        "rows_written": {view: rows},
        "seconds": round(time.perf_counter() - began, 3),
    }
    layout = CycleLayout(Namespace.of(cfg))
    write_run_record(layout, dag_id, f"{as_of:011d}-{view}", record, wrote=wrote)
    return record


def _refresh_aggregate(cfg: SolarisConfig, as_of: int, view: str, build) -> dict[str, Any]:
    """One aggregate view from the codes of the 24 h window as of ``as_of``."""
    began = time.perf_counter()
    window = round(cfg.store.uagg_window_hours * 3600)
    history = pair_history(cfg, as_of, window)
    rows = build(history, as_of, cfg, _fm_version(cfg))
    _materialize(cfg, view, rows, f"cycle-{as_of}")
    return _record(
        ENRICHMENT_DAG_ID, cfg, as_of, view, len(rows), began, codes_read=len(history.pairs)
    )


def refresh_user_aggregates(cfg: SolarisConfig, as_of: int) -> dict[str, Any]:
    """``uagg``: each user's 24 h code sum and count as of ``as_of``."""
    from solaris.pipeline.enrich import user_aggregates

    return _refresh_aggregate(cfg, as_of, "uagg", user_aggregates)


def refresh_item_aggregates(cfg: SolarisConfig, as_of: int) -> dict[str, Any]:
    """``iagg``: each item's mean code over users in the 24 h window as of ``as_of``."""
    from solaris.pipeline.enrich import item_aggregates

    return _refresh_aggregate(cfg, as_of, "iagg", item_aggregates)


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
    return _record(ENRICHMENT_DAG_ID, cfg, as_of, "nbr", len(rows), began, codes_read=codes_read)


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
    record = _record(
        dag_id, cfg, as_of, "unn", len(rows), began, codes_read=len(history.pairs), wrote=(kept,)
    )
    return table, record
