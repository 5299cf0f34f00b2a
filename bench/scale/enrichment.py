"""The enrichment stage's tasks (``orchestration.enrichment``): groups, aggregates, the
reduce and the neighbour index, the fill, the record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.scale.jobs import Job, Task
from bench.scale.meter import Meter

__all__ = [
    "enrich_figures",
    "task_enrich_aggregate",
    "task_enrich_fill",
    "task_enrich_plan",
    "task_enrich_record",
    "task_enrich_reduce",
]


def task_enrich_plan(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    from solaris.orchestration import enrichment as en

    cfg, as_of = job.config(), job.end
    with meter.part("partition_groups", job.size):
        groups = en.partition_groups(cfg, as_of)
    out: dict[str, Any] = {"groups": groups, "inline": len(groups) == 1}
    if out["inline"]:  # the DAG enriches a quiet interval in its first task
        every = range(cfg.cycle.partitions)
        with meter.part("aggregate_partitions", job.size):
            agg = en.aggregate_partitions(cfg, as_of, every)
        with meter.part("reduce_aggregates (iagg)", job.size):
            uagg, iagg = en.reduce_aggregates(cfg, as_of, [agg])
        with meter.part("build_neighbour_index (user KNN)", job.size):
            users = en.build_neighbour_index(cfg, as_of)
        with meter.part("fill_partitions (unn, nbr)", job.size):
            fill = en.fill_partitions(cfg, as_of, every)
        with meter.part("record_neighbours", job.size):
            en.record_neighbours(cfg, as_of, [fill])
        out |= enrich_figures([agg], uagg, iagg, users, [fill])
    return out


def enrich_figures(
    aggs: Sequence[dict], uagg: dict, iagg: dict, users: int | None, fills: Sequence[dict]
) -> dict[str, Any]:
    return {
        "codes_read": sum(int(a["codes_read"]) for a in aggs),
        "uagg_rows": uagg["rows_written"]["uagg"],
        "iagg_rows": iagg["rows_written"]["iagg"],
        "index_users": users,
        "unn_rows": sum(int(f["unn_rows"]) for f in fills),
        "nbr_rows": sum(int(f["nbr_rows"]) for f in fills),
        "nbr_targets": sum(int(f["targets"]) for f in fills),
        "nbr_matches": sum(int(f.get("matches", 0)) for f in fills),
    }


def task_enrich_aggregate(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    from solaris.orchestration.enrichment import aggregate_partitions

    first, last = task.args["partitions"]
    with meter.part("aggregate_partitions", job.size):
        result = aggregate_partitions(job.config(), job.end, range(first, last + 1))
    return {"result": result}


def task_enrich_reduce(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    from solaris.orchestration.enrichment import build_neighbour_index, reduce_aggregates

    cfg, as_of = job.config(), job.end
    with meter.part("reduce_aggregates (iagg)", job.size):
        uagg, iagg = reduce_aggregates(cfg, as_of, task.args["results"])
    with meter.part("build_neighbour_index (user KNN)", job.size):
        users = build_neighbour_index(cfg, as_of)
    return {"uagg": uagg, "iagg": iagg, "users": users}


def task_enrich_fill(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    from solaris.orchestration.enrichment import fill_partitions

    first, last = task.args["partitions"]
    with meter.part("fill_partitions (unn, nbr)", job.size):
        result = fill_partitions(job.config(), job.end, range(first, last + 1))
    return {"result": result}


def task_enrich_record(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    from solaris.orchestration.enrichment import record_neighbours

    with meter.part("record_neighbours", job.size):
        record_neighbours(job.config(), job.end, task.args["results"])
    return {}
