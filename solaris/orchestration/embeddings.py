"""The embeddings DAG: shard the selections, embed each shard, materialize it.

Task entry points: :func:`plan` (the shards of the selections that triggered the run),
:func:`embed` (one mapped task per shard, on the GPU pool when there is one: the FM of
``model.foundation`` → its last shared layer → the autoencoder → ``z`` with ``computed_at``
= the interval's end, then Feast's ``pair`` view, offline history first and Redis second; a
retried shard rewrites the same files) and :func:`publish` (the run's record, the
completion markers and the ``pair_embeddings`` event). Each shard carries its namespace.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from typing import Any

from solaris.config import SolarisConfig
from solaris.files import atomic_write_bytes
from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, Interval, write_run_record
from solaris.orchestration.resources import cycle_redis, feature_store, read_parquet
from solaris.orchestration.runs import CANDIDATES, Params, combine_extras, task_run, task_runs

__all__ = [
    "DAG_ID",
    "embed",
    "embed_and_materialize",
    "forget_embeddings",
    "plan",
    "plan_shards",
    "publish",
    "summarize_embeddings",
]

DAG_ID = "solaris_embeddings"
_CANDIDATE_COLUMNS = ["request_id", "user_id", "item_id", "ts", "label"]


def plan(params: Params, events: Any = None) -> list[dict[str, Any]]:
    """The shards of the selections that triggered the run: one mapped task each."""
    return [
        run.extra(shard)
        for run in task_runs(params, events, CANDIDATES)
        for shard in plan_shards(run.cfg, run.intervals)
    ]


def embed(shard: dict[str, Any]) -> dict[str, Any]:
    """FM → autoencoder → ``pair`` view for one shard (a mapped task on the gpu pool)."""
    run = task_run(
        {
            "namespace": shard["namespace"],
            "replay": shard["replay"],
            "interval_start": shard["interval_start"],
            "interval_end": shard["interval_end"],
        }
    )
    return embed_and_materialize(run.cfg, shard)


def publish(
    params: Params, shards: Sequence[dict[str, Any] | None], events: Any = None
) -> dict[str, Any]:
    """The run's record: the ``pair_embeddings`` asset event's extra."""
    # Indexing, not iterating: iterating Airflow's lazy sequence of mapped results probes one
    # past its end and logs that probe's 404 as an error.
    results = [shards[i] for i in range(len(shards))]
    return combine_extras(
        [
            run.extra(
                summarize_embeddings(
                    run.cfg,
                    run.intervals,
                    [s for s in results if s and s["namespace"] == run.cfg.namespace],
                )
            )
            for run in task_runs(params, events, CANDIDATES)
        ]
    )


def plan_shards(cfg: SolarisConfig, intervals: Sequence[Interval]) -> list[dict[str, int]]:
    """Split each interval's distinct selected pairs into shards of ``cycle.shard_rows``.

    Returns one dict per shard (the mapped tasks' argument): ``interval_start``,
    ``interval_end``, ``shard`` and ``rows``.
    """
    import pyarrow as pa

    from solaris.data.schemas import write_table

    layout = CycleLayout(Namespace.of(cfg))
    shards = []
    for interval in work_intervals(cfg, intervals):
        forget_embeddings(cfg, interval)  # a rerun may cut fewer or different shards
        ledger = read_parquet(layout.selections(interval), _CANDIDATE_COLUMNS)
        pairs = ledger.drop_duplicates(["user_id", "item_id"], ignore_index=True)
        pairs["label"] = pairs["label"].astype("Int8")
        size = cfg.cycle.shard_rows
        for index, lo in enumerate(range(0, len(pairs), size)):
            part = pa.Table.from_pandas(pairs.iloc[lo : lo + size], preserve_index=False)
            write_table(part, layout.shard(interval, index), "candidates")
            shards.append(
                {**interval.as_dict(), "shard": index, "rows": min(size, len(pairs) - lo)}
            )
    return shards


def work_intervals(cfg: SolarisConfig, intervals: Sequence[Interval]) -> list[Interval]:
    """``intervals`` and every earlier selection of the namespace still without codes: the
    work queue lives in the cycle's own state, so a lost asset event or a failed run is
    made good by the next embeddings run."""
    layout = CycleLayout(Namespace.of(cfg))
    pending = [
        i
        for i in layout.intervals("selections", ending_after=-1, ending_by=max(intervals).end)
        if not layout.embeddings_done(i).is_file()
    ]
    return sorted(set(intervals) | set(pending))


def forget_embeddings(cfg: SolarisConfig, interval: Interval) -> None:
    """Remove what an earlier run of ``interval`` wrote (shards, codes, completion marker,
    offline ``pair`` rows), so that nothing stale is read beside the rerun's files. Its
    Redis rows stay: the rerun overwrites the same keys."""
    from solaris.pipeline.materialize import offline_dir

    namespace = Namespace.of(cfg)
    layout = CycleLayout(namespace)
    # The marker lives in the codes' folder, so it goes first, with that folder.
    for folder in (layout.embeddings(interval, 0).parent, layout.shard(interval, 0).parent):
        shutil.rmtree(folder, ignore_errors=True)
    # materialize() writes a batch as date=<day>/batch-<batch_id>.parquet.
    pattern = f"date=*/batch-{_batch_id(interval, '*')}.parquet"
    for path in offline_dir(namespace.repo_path, "pair", namespace.project).glob(pattern):
        path.unlink(missing_ok=True)


def _batch_id(interval: Interval, shard: int | str) -> str:
    suffix = f"{shard:04d}" if isinstance(shard, int) else shard
    return f"{interval.key}-shard-{suffix}"


def embed_and_materialize(cfg: SolarisConfig, shard: dict[str, int]) -> dict[str, Any]:
    """Embed one shard and write its codes to the ``pair`` view (offline, then online)."""
    from solaris import adapters
    from solaris.data.schemas import read_table
    from solaris.models.training import resolve_device
    from solaris.pipeline.codes import load_autoencoder
    from solaris.pipeline.embed import embed_shard
    from solaris.pipeline.materialize import materialize, pair_rows

    began = time.perf_counter()
    layout = CycleLayout(Namespace.of(cfg))
    interval = Interval(int(shard["interval_start"]), int(shard["interval_end"]))
    index = int(shard["shard"])
    fm = adapters.foundation_model(cfg)
    autoencoder, version = load_autoencoder(layout.models_dir, fm)
    out = layout.embeddings(interval, index)
    rows = embed_shard(
        layout.shard(interval, index),
        out,
        fm=fm,
        autoencoder=autoencoder,
        computed_at=interval.end,
        fm_version=version,
        device=resolve_device(cfg.device),
    )
    embed_s = time.perf_counter() - began
    table = read_table(out, "pair_embeddings", z_dim=cfg.model.z_dim)
    store = feature_store(cfg, cycle_redis(cfg))
    written = materialize(
        store,
        "pair",
        pair_rows(table, z_dim=cfg.model.z_dim, source=str(out)),
        batch_id=_batch_id(interval, index),
    )
    return {
        **shard,
        "rows": rows,
        "embed_seconds": round(embed_s, 3),
        "online_seconds": round(written.online_seconds, 3),
        "computed_at": interval.end,
    }


def summarize_embeddings(
    cfg: SolarisConfig, intervals: Sequence[Interval], shards: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The run's figures (its run record and the ``pair_embeddings`` asset's metadata)."""
    import numpy as np

    layout = CycleLayout(Namespace.of(cfg))
    shards = [s for s in shards if s]  # a skipped mapped task returns nothing
    intervals = work_intervals(cfg, intervals)  # the same the plan embedded
    rows = int(sum(s["rows"] for s in shards))
    embed_s = float(sum(s["embed_seconds"] for s in shards))
    latest = max(i.end for i in intervals)
    record = {
        "interval_start": min(i.start for i in intervals),
        "interval_end": latest,
        "intervals": [i.as_dict() for i in intervals],
        "shards": len(shards),
        "fm_passes": rows,
        "rows_written": {"pair": rows},
        "pairs_per_second": round(rows / embed_s, 1) if embed_s else None,
        "seconds": round(embed_s + float(np.sum([s["online_seconds"] for s in shards])), 3),
        "computed_at": latest,
    }
    for interval in intervals:  # every shard is in: readers may take these codes now
        atomic_write_bytes(layout.embeddings_done(interval), b"")
    key = Interval(record["interval_start"], latest).key
    write_run_record(layout, DAG_ID, key, record)
    return record
