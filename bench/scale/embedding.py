"""The embedding stage's tasks (``orchestration.embeddings``): plan the shards, embed and
write them, publish; and the embedding against the FM's own pass (the ratio)."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.scale.common import BATCH_SIZE
from bench.scale.jobs import Job, Task
from bench.scale.meter import Meter

__all__ = ["task_embed_plan", "task_embed_publish", "task_embed_shards", "task_ratio"]


def task_embed_plan(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    from solaris.orchestration.embeddings import plan_shards

    cfg, interval = job.config(), job.interval()
    with meter.part("plan_shards (the interval's ledgers -> shards)", job.size):
        shards = plan_shards(cfg, [interval])
    return {"shards": [shard.to_json() for shard in shards]}  # what the DAG's XCom carries


def task_embed_shards(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    from solaris import adapters
    from solaris.orchestration.embeddings import embed_and_materialize
    from solaris.orchestration.handoff import Shard

    cfg = job.config()
    with meter.part("FM load (adapter: its partitions' log index)", job.size):
        adapters.foundation_model(cfg)
    results = []
    for shard in task.args["shards"]:
        with meter.part("embed_and_materialize", job.size):
            result = embed_and_materialize(cfg, Shard.from_json(shard))
        meter.note("embed (read shard, FM -> autoencoder -> z)", job.size, result["embed_seconds"])
        meter.note("pair view: online write (Redis)", job.size, result["online_seconds"])
        results.append(result)
    return {"results": results}


def task_embed_publish(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    from solaris.orchestration.embeddings import summarize_embeddings

    cfg, interval = job.config(), job.interval()
    with meter.part("summarize_embeddings (swap in, marker)", job.size):
        record = summarize_embeddings(cfg, [interval], task.args["results"])
    return {"pairs": record["fm_passes"], "shard_count": record["shards"]}


def _bare_pass(fm, ae, users: np.ndarray, items: np.ndarray, ts: np.ndarray) -> list:
    """What the FM and the autoencoder do themselves, batch by batch (codes kept as tensors)."""
    import torch

    out = []
    with torch.inference_mode():
        for s in range(0, len(users), BATCH_SIZE):
            batch = fm.features(
                users[s : s + BATCH_SIZE], items[s : s + BATCH_SIZE], ts[s : s + BATCH_SIZE]
            )
            out.append(ae.encode(fm.shared(batch)))
    return out


def _forward_only(fm, ae, batches: list) -> list:
    import torch

    with torch.inference_mode():
        return [ae.encode(fm.module.shared(b)) for b in batches]


def _interleaved(
    variants: dict[str, Callable[[], object]], reps: int, seed: int
) -> dict[str, list[float]]:
    """``reps`` runs of every variant in a shuffled order; seconds per run."""
    order = [name for name in variants for _ in range(reps)]
    random.Random(seed).shuffle(order)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for name in order:
        start = time.perf_counter()
        variants[name]()
        times[name].append(time.perf_counter() - start)
    return times


def task_ratio(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    """The cycle's ``embed_pairs`` against the FM's bare pass, on the first shard's pairs."""
    import torch

    from solaris import adapters
    from solaris.data.schemas import read_table
    from solaris.namespace import Namespace
    from solaris.orchestration.handoff import Shard
    from solaris.orchestration.layout import CycleLayout
    from solaris.pipeline.codes import load_autoencoder
    from solaris.pipeline.embed import embed_pairs

    cfg, interval = job.config(), job.interval()
    layout = CycleLayout(Namespace.of(cfg))
    shard = Shard.from_json(task.args["shard"])
    path = layout.shard(interval, shard.index, shard.generation)
    table = read_table(path, "candidates")
    pairs = table.select(["user_id", "item_id"]).to_pandas().drop_duplicates(ignore_index=True)
    fm = adapters.foundation_model(cfg)
    ae, version = load_autoencoder(layout.models_dir, fm)
    users = pairs["user_id"].to_numpy(np.int64)
    items = pairs["item_id"].to_numpy(np.int64)
    ts = np.full(len(pairs), job.end, np.int64)
    batches = [
        fm.features(users[s : s + BATCH_SIZE], items[s : s + BATCH_SIZE], ts[s : s + BATCH_SIZE])
        for s in range(0, len(pairs), BATCH_SIZE)
    ]
    variants: dict[str, Callable[[], object]] = {
        "cycle embed_pairs": lambda: embed_pairs(
            pairs, fm=fm, autoencoder=ae, computed_at=job.end, fm_version=version
        ),
        "bare FM pass": lambda: _bare_pass(fm, ae, users, items, ts),
        "forward only": lambda: _forward_only(fm, ae, batches),
    }
    for run in variants.values():  # warm-up of every variant
        run()
    times = _interleaved(variants, job.reps, job.seed)
    return {
        "pairs": len(pairs),
        "torch_threads": torch.get_num_threads(),
        "ratio": {name: statistics.median(t) for name, t in times.items()},
    }
