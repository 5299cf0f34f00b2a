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

__all__ = ["DAG_ID", "cluster_users", "enrichment_published"]

DAG_ID = CLUSTERING_DAG_ID


def enrichment_published(params: Params, start: object, end: object) -> bool:
    """The sensor: in a replay, the enrichment as of the run's time is published, so the
    neighbours are built from every code up to it (a backfill's clustering runs would
    otherwise race the candidates backfill). Live clustering uses the codes there are."""
    run = task_run(params, start, end)
    if not run.cfg.replay:
        return True
    return run.layout.run_record(ENRICHMENT_DAG_ID, f"{run.as_of:011d}-uagg").is_file()


def cluster_users(params: Params, start: object, end: object) -> dict[str, Any]:
    """``unn`` as of the run's interval end; the table is kept for the neighbour fill."""
    run = task_run(params, start, end)
    return run.extra(rebuild_user_neighbours(run.cfg, run.as_of))
