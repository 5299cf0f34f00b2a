"""A task process (the child's side, ``python -m bench.scale --child``): the task's
imports warmed, its function run and measured, its result written as JSON."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.scale.common import ENV_PROFILE
from bench.scale.embedding import task_embed_plan, task_embed_publish, task_embed_shards, task_ratio
from bench.scale.enrichment import (
    task_enrich_aggregate,
    task_enrich_fill,
    task_enrich_plan,
    task_enrich_record,
    task_enrich_reduce,
)
from bench.scale.jobs import Job, Task, json_default
from bench.scale.meter import Meter
from bench.scale.selection import task_select_group, task_select_prepare, task_select_publish
from bench.scale.traffic import task_generate, task_history, task_serve

__all__ = ["RUNNERS", "WARM_IMPORTS", "run_child"]


RUNNERS: dict[str, Callable[[Job, Task, Meter], dict[str, Any]]] = {
    "generate": task_generate,
    "history": task_history,
    "serve": task_serve,
    "select-prepare": task_select_prepare,
    "select-group": task_select_group,
    "select-publish": task_select_publish,
    "embed-plan": task_embed_plan,
    "embed-shards": task_embed_shards,
    "embed-publish": task_embed_publish,
    "enrich-plan": task_enrich_plan,
    "enrich-aggregate": task_enrich_aggregate,
    "enrich-reduce": task_enrich_reduce,
    "enrich-fill": task_enrich_fill,
    "enrich-record": task_enrich_record,
    "ratio": task_ratio,
}


_FEAST = [  # Feast and the store classes its repo config imports (dask for the file store)
    "solaris.store.feast_store",
    "solaris.store.online",
    "feast",
    "feast.repo_config",
    "feast.infra.offline_stores.dask",
]
_CYCLE = ["pandas", "pyarrow.parquet", "solaris.data.schemas", "solaris.orchestration.layout"]
_SELECT = [
    "solaris.orchestration.candidates",
    "solaris.examples.synthetic",
    "solaris.pipeline.select",
    "solaris.serving.request_log",
    "solaris.serving.metrics",
]
_ENRICH = [
    "solaris.orchestration.enrichment",
    "solaris.pipeline.enrich",
    "solaris.pipeline.neighbors",
    "solaris.pipeline.aggregate",
    "solaris.pipeline.materialize",
    *_FEAST,
]
WARM_IMPORTS: dict[str, list[str]] = {
    "generate": ["solaris.data.synthetic", "solaris.store.partitions"],
    "history": ["solaris.examples.synthetic", "solaris.pipeline.codes", *_CYCLE],
    "serve": ["solaris.serving.request_log", "solaris.connection", *_CYCLE],
    "select-prepare": _SELECT + _CYCLE,
    "select-group": _SELECT + _CYCLE,
    "select-publish": _SELECT + _CYCLE,
    "embed-plan": ["solaris.orchestration.embeddings", *_CYCLE],
    "embed-shards": [
        "solaris.orchestration.embeddings",
        "solaris.examples.synthetic",
        "solaris.pipeline.embed",
        "solaris.pipeline.codes",
        "solaris.pipeline.materialize",
        "solaris.models.checkpoints",
        *_FEAST,
        *_CYCLE,
    ],
    "embed-publish": [
        "solaris.orchestration.embeddings",
        *_FEAST,
        *_CYCLE,
    ],
    "enrich-plan": _ENRICH + _CYCLE,
    "enrich-aggregate": _ENRICH + _CYCLE,
    "enrich-reduce": _ENRICH + _CYCLE,
    "enrich-fill": _ENRICH + _CYCLE,
    "enrich-record": _ENRICH + _CYCLE,
    "ratio": ["solaris.examples.synthetic", "solaris.pipeline.embed", "solaris.pipeline.codes"],
}
"""What a task process imports before its timed calls (what the task would import
anyway: Feast, torch, faiss...): an import is paid once per process, whatever N is, and
shows in the wall time, not in the calls' seconds."""


def run_child(job_path: Path, task_path: Path) -> int:
    """The child's side: run one task, write its result beside the task file."""
    import importlib

    job = Job(**json.loads(job_path.read_text()))
    raw = json.loads(task_path.read_text())
    parts = raw.pop("partitions")
    task = Task(**raw, partitions=None if parts is None else (parts[0], parts[1]))
    began = time.perf_counter()
    for module in WARM_IMPORTS.get(task.kind, []):
        importlib.import_module(module)
    imports_s = time.perf_counter() - began
    meter = Meter()
    profile_dir = os.environ.get(ENV_PROFILE)
    if profile_dir:  # where a task's time goes: cProfile stats, one file per task process
        import cProfile

        profiler = cProfile.Profile()
        extra = profiler.runcall(RUNNERS[task.kind], job, task, meter)
        profiler.dump_stats(Path(profile_dir) / f"n{job.size}-{task_path.stem}.prof")
    else:
        extra = RUNNERS[task.kind](job, task, meter)
    result = {
        "parts": [dataclasses.asdict(p) for p in meter.parts],
        "extra": extra,
        "peak_reset": meter.resettable,
        "process_peak_mb": meter.peak(),
        "imports_s": imports_s,
    }
    task_path.with_suffix(".out.json").write_text(json.dumps(result, default=json_default))
    return 0


# --------------------------------------------------------------------------------------------
