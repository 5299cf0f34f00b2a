"""The enrichment and clustering DAGs' work: the views built from the pair-code history.

Each function reads the codes the embeddings DAG wrote for intervals ending at or before
``as_of`` (within the window the view needs), computes one view with
:mod:`solaris.pipeline.enrich` and materializes it.
"""

from __future__ import annotations

import time
from typing import Any

import pandas as pd
import pyarrow as pa

from solaris.config import SolarisConfig
from solaris.orchestration.layout import CycleLayout, Interval, write_run_record
from solaris.orchestration.resources import (
    CycleInputError,
    cycle_redis,
    feature_store,
    fm_version,
    read_parquet,
    read_requests,
    write_parquet,
)

ENRICHMENT_DAG_ID = "solaris_enrichment"
CLUSTERING_DAG_ID = "solaris_clustering"


def pair_history(cfg: SolarisConfig, as_of: int, window_s: int):
    """:class:`~solaris.pipeline.enrich.PairHistory` of the codes computed in
    ``(as_of - window_s, as_of]``."""
    from solaris.data.schemas import read_table
    from solaris.pipeline.enrich import PairHistory

    layout = CycleLayout(cfg.artifacts_dir)
    intervals = layout.embedded_intervals(ending_after=as_of - window_s, ending_by=as_of)
    folders = [layout.embeddings(i, 0).parent for i in intervals]
    tables = [
        read_table(folder, "pair_embeddings", z_dim=cfg.model.z_dim)
        for folder in folders
        if any(folder.glob("shard-*.parquet"))
    ]
    if not tables:
        from solaris.data.schemas import pair_embeddings_schema

        return PairHistory.from_table(pair_embeddings_schema(cfg.model.z_dim).empty_table())
    return PairHistory.from_table(pa.concat_tables(tables))


def _materialize(cfg: SolarisConfig, view: str, rows: pd.DataFrame, batch_id: str) -> float:
    from solaris.pipeline.materialize import materialize

    store = feature_store(cfg, cycle_redis(cfg))
    return materialize(store, view, rows, batch_id=batch_id).online_seconds


def _record(
    dag_id: str, cfg: SolarisConfig, as_of: int, view: str, rows: int, began: float
) -> dict[str, Any]:
    record = {
        "interval_end": as_of,
        "view": view,
        "rows_written": {view: rows},
        "seconds": round(time.perf_counter() - began, 3),
    }
    write_run_record(CycleLayout(cfg.artifacts_dir), dag_id, f"{as_of:011d}-{view}", record)
    return record


def _refresh_aggregate(cfg: SolarisConfig, as_of: int, view: str, build) -> dict[str, Any]:
    """One aggregate view from the codes of the 24 h window as of ``as_of``."""
    began = time.perf_counter()
    window = round(cfg.store.uagg_window_hours * 3600)
    history = pair_history(cfg, as_of, window)
    rows = build(history, as_of, cfg, fm_version(CycleLayout(cfg.artifacts_dir)))
    _materialize(cfg, view, rows, f"cycle-{as_of}")
    return _record(ENRICHMENT_DAG_ID, cfg, as_of, view, len(rows), began)


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
    newest neighbour table built at or before ``as_of``."""
    from solaris.pipeline.enrich import neighbour_rows

    began = time.perf_counter()
    layout = CycleLayout(cfg.artifacts_dir)
    ttl = round(cfg.selection.ttl_hours * 3600)
    table = layout.latest_neighbours(as_of)
    rows = pd.DataFrame()
    if table is not None:
        neighbours = read_parquet(table)
        recent = read_requests(layout, as_of - ttl, as_of)
        if len(recent) and len(neighbours):
            history = pair_history(cfg, as_of, ttl)
            rows = neighbour_rows(
                recent[["user_id", "item_id"]], neighbours, history, as_of, cfg, fm_version(layout)
            )
            _materialize(cfg, "nbr", rows, f"cycle-{as_of}")
    return _record(ENRICHMENT_DAG_ID, cfg, as_of, "nbr", len(rows), began)


def rebuild_user_neighbours(cfg: SolarisConfig, as_of: int) -> dict[str, Any]:
    """``unn``: user embeddings over the neighbour window, cosine KNN; the table is kept
    as ``neighbours/<as_of>.parquet`` for the enrichment DAG's neighbour fill."""
    from solaris.pipeline.enrich import user_neighbours

    began = time.perf_counter()
    layout = CycleLayout(cfg.artifacts_dir)
    window = round(cfg.store.unn_ttl_hours * 3600)
    history = pair_history(cfg, as_of, window)
    rows = user_neighbours(history, as_of, cfg, fm_version(layout))
    if len(rows):
        _materialize(cfg, "unn", rows, f"cycle-{as_of}")
    write_parquet(rows.drop(columns=["event_ts"], errors="ignore"), layout.neighbours(as_of))
    return _record(CLUSTERING_DAG_ID, cfg, as_of, "unn", len(rows), began)


def enrichment_as_of(intervals: list[Interval]) -> int:
    """Enrichment runs as of the newest interval end it was triggered for."""
    if not intervals:
        raise CycleInputError("enrichment needs at least one interval")
    return max(i.end for i in intervals)
