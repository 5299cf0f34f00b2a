"""The clustering DAG: user embeddings and cosine KNN (``unn``), daily.

Task entry point: :func:`cluster_users`, as of the run's interval end (its data interval,
or the conf's ``interval_end``), in the run's namespace.
"""

from __future__ import annotations

from typing import Any

from solaris.orchestration.enrichment import CLUSTERING_DAG_ID, rebuild_user_neighbours
from solaris.orchestration.runs import Params, task_run

__all__ = ["DAG_ID", "cluster_users"]

DAG_ID = CLUSTERING_DAG_ID


def cluster_users(params: Params, start: object, end: object) -> dict[str, Any]:
    """``unn`` as of the run's interval end; the table is kept for the neighbour fill."""
    run = task_run(params, start, end)
    return run.extra(rebuild_user_neighbours(run.cfg, run.as_of))
