"""The selection stage's tasks (``orchestration.candidates``): prepare the interval,
select per partition group, publish."""

from __future__ import annotations

from typing import Any

from bench.scale.jobs import Job, Task
from bench.scale.meter import Meter
from solaris.config import SolarisConfig

__all__ = ["task_select_group", "task_select_prepare", "task_select_publish"]


def _prime_verifier(cfg: SolarisConfig, meter: Meter, rows: int) -> None:
    from solaris import adapters

    with meter.part("verifier load (adapter: its partitions' log index)", rows):
        adapters.verifier(cfg)


def _selection_figures(result: dict[str, Any]) -> dict[str, Any]:
    keys = ("requests", "rows", "candidates", "selected", "fm_passes", "seconds")
    return {k: result[k] for k in keys if k in result}


def task_select_prepare(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    from solaris.orchestration import candidates

    cfg, interval = job.config(), job.interval()
    with meter.part("prepare_interval (miss drain, stream lengths, groups)", job.size):
        served, groups = candidates.prepare_interval(cfg, interval)
    out: dict[str, Any] = {"served": served, "groups": groups, "inline": len(groups) <= 1}
    if out["inline"]:  # the DAG selects a quiet interval in its first task
        _prime_verifier(cfg, meter, job.size)
        every = range(cfg.cycle.partitions)
        with meter.part("select_partitions", job.size):
            result = candidates.select_partitions(cfg, interval, every)
        with meter.part("finish_interval (run record)", job.size):
            candidates.finish_interval(cfg, interval, served, [result])
        out |= _selection_figures(result)
    return out


def task_select_group(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    from solaris.orchestration import candidates

    cfg, interval = job.config(), job.interval()
    first, last = task.args["partitions"]
    _prime_verifier(cfg, meter, job.size)
    with meter.part("select_partitions", job.size):
        result = candidates.select_partitions(cfg, interval, range(first, last + 1))
    return {"result": result}


def task_select_publish(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    from solaris.orchestration import candidates

    cfg, interval = job.config(), job.interval()
    results = task.args["results"]
    with meter.part("finish_interval (run record)", job.size):
        candidates.finish_interval(cfg, interval, task.args["served"], results)
    summed = {k: sum(int(r[k]) for r in results) for k in ("requests", "candidates", "selected")}
    return summed | {"fm_passes": sum(int(r["fm_passes"]) for r in results)}
