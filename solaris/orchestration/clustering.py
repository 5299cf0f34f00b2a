"""The clustering DAG: user embeddings and cosine KNN (``unn``), daily.

Task entry points: :func:`enrichment_published` (the sensor: in a replay, wait for the
enrichment as of the run's time) and :func:`cluster_users`, as of the run's interval end
(its data interval, or the conf's ``interval_end``), in the run's namespace.
"""

from __future__ import annotations

from typing import Any

from solaris.orchestration.enrichment import (
    CLUSTERING_DAG_ID,
    ENRICHMENT_DAG_ID,
    rebuild_user_neighbours,
)
from solaris.orchestration.runs import Params, task_run
from solaris.times import MAX_EPOCH_S

__all__ = ["DAG_ID", "cluster_users", "enrichment_published"]

DAG_ID = CLUSTERING_DAG_ID


def enrichment_published(params: Params, start: object, end: object) -> bool:
    """The sensor: in a replay, the enrichment as of the run's time is published, so the
    neighbours are built from every code up to it (a backfill's clustering runs would
    otherwise race the candidates backfill). Live clustering uses the codes there are.

    A replay whose first interval starts at or after the run's time has no enrichment as of
    it and never will (a window starting at midnight, the daily cron's time): once the
    replay's first candidates run is recorded and starts there or later, the run goes on
    with the codes there are (none), instead of waiting a day for an interval before the
    window."""
    from solaris.orchestration.candidates import DAG_ID as CANDIDATES_DAG_ID

    run = task_run(params, start, end)
    if not run.cfg.replay:
        return True
    if run.layout.run_record(ENRICHMENT_DAG_ID, f"{run.as_of:011d}-uagg").is_file():
        return True
    recorded = run.layout.recorded_intervals(CANDIDATES_DAG_ID, ending_by=MAX_EPOCH_S)
    return bool(recorded) and recorded[0].start >= run.as_of


def cluster_users(params: Params, start: object, end: object) -> dict[str, Any]:
    """``unn`` as of the run's interval end; the table is kept for the neighbour fill."""
    run = task_run(params, start, end)
    return run.extra(rebuild_user_neighbours(run.cfg, run.as_of))
