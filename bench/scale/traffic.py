"""The set-up stages (not cycle stages): the interval's traffic (the generator), the
history (the autoencoder, the ledger cache) and serving (the request streams)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from bench.scale.adapters import fm_module
from bench.scale.common import (
    EMPTY_GENERATION,
    FM_NAME,
    FM_VERSION,
    GEN_CHUNK_ROWS,
    SERVE_PIPELINE,
    USER_SHIFT,
)
from bench.scale.jobs import Job, Task
from bench.scale.meter import Meter

__all__ = ["task_generate", "task_history", "task_serve", "user_pool"]


def _spec(job: Job):
    from solaris.data.synthetic import SyntheticSpec

    n_requests = -(-job.size // SyntheticSpec(n_pairs=1).candidates_per_request)
    pool = {} if job.users_per_row is None else {"n_users": user_pool(job.size, job.users_per_row)}
    return SyntheticSpec(
        n_pairs=job.size,
        start_ts=job.start,
        mean_gap_seconds=(job.end - job.start) / (n_requests + 1),
        seed=job.seed,
        **pool,
    )


def user_pool(rows: int, users_per_row: float) -> int:
    """The synthetic traffic's user pool for ``rows`` candidate rows: ``rows ×
    users_per_row``, at least 1 (``--users-per-row``: users that grow with the traffic)."""
    if not users_per_row > 0:
        raise ValueError(f"users per row must be > 0, got {users_per_row}")
    return max(1, round(rows * users_per_row))


def task_generate(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    """The interval's traffic, chunk by chunk, into one parquet file per partition."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from solaris.data.schemas import CANDIDATES_SCHEMA
    from solaris.data.synthetic import generate_candidates
    from solaris.store.partitions import Partitioning

    parts = Partitioning(job.partitions)
    job.traffic.mkdir(parents=True, exist_ok=True)
    writers: dict[int, pq.ParquetWriter] = {}
    users = np.zeros(0, np.int64)
    items = np.zeros(0, np.int64)
    first_request = last_request = -1
    rows = np.zeros(job.partitions, np.int64)
    end = pa.scalar(job.end - 1, pa.int64())
    with meter.part("generate_candidates, split by partition, write", job.size):
        for chunk in generate_candidates(_spec(job), chunk_rows=GEN_CHUNK_ROWS):
            # The Poisson clock may overshoot the interval by a few gaps: those requests
            # belong to its last second (the interval's rows are all before its end).
            ts = pc.min_element_wise(chunk["ts"], end)
            chunk = chunk.set_column(chunk.schema.get_field_index("ts"), "ts", ts)
            chunk = chunk.cast(CANDIDATES_SCHEMA)
            ids = chunk["user_id"].to_numpy()
            for p, positions in enumerate(parts.split(ids)):
                if not len(positions):
                    continue
                if p not in writers:
                    writers[p] = pq.ParquetWriter(job.traffic / f"{p:05d}.parquet", chunk.schema)
                writers[p].write_table(chunk.take(pa.array(positions)))
                rows[p] += len(positions)
            users = np.union1d(users, np.unique(ids))
            items = np.union1d(items, np.unique(chunk["item_id"].to_numpy()))
            request = chunk["request_id"].to_numpy()
            first_request = request[0] if first_request < 0 else first_request
            last_request = request[-1]
        for writer in writers.values():
            writer.close()
    return {
        "rows": int(rows.sum()),
        "requests": int(last_request - first_request + 1),
        "users": len(users),
        "items": len(items),
        "partition_rows": [int(x) for x in rows],
    }


def task_history(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    """The autoencoder and its manifest; the earlier intervals' ledgers (the selection's
    ledger cache, per partition) with markers that have no shards."""
    import pandas as pd
    import pyarrow.parquet as pq
    import torch

    from solaris.files import atomic_write_json
    from solaris.models.autoencoder import Autoencoder
    from solaris.namespace import Namespace
    from solaris.orchestration.layout import CycleLayout, Interval
    from solaris.orchestration.resources import write_parquet
    from solaris.pipeline.codes import save_autoencoder

    cfg = job.config()
    layout = CycleLayout(Namespace.of(cfg))
    with meter.part("autoencoder + manifest", 0):
        module = fm_module()
        torch.manual_seed(job.seed)
        ae = Autoencoder(
            in_dim=module.shared_dim, z_dim=cfg.model.z_dim, hidden=2 * module.shared_dim
        )
        save_autoencoder(layout.models_dir, ae.eval(), fm_version=FM_VERSION, fm=FM_NAME)
    cadence = job.end - job.start
    ttl = round(cfg.selection.ttl_hours * 3600)
    earlier = [
        Interval(job.start - k * cadence, job.end - k * cadence)
        for k in range(1, job.cache_intervals + 1)
    ]
    rng = np.random.default_rng(job.seed + 1)
    cache_rows = 0
    with meter.part("ledger cache: earlier ledgers per partition", job.size):
        for p in range(job.partitions):
            path = job.traffic / f"{p:05d}.parquet"
            if not path.is_file():
                continue
            log = pq.read_table(path, columns=["request_id", "user_id", "item_id", "ts"])
            log = log.to_pandas()
            per = math.ceil(cfg.selection.share * len(log))
            for interval in earlier:
                rows = rng.integers(0, len(log), size=per)
                shift = job.start - interval.start
                ledger = pd.DataFrame(
                    {
                        "request_id": log["request_id"].to_numpy()[rows],
                        "user_id": log["user_id"].to_numpy()[rows] + USER_SHIFT,
                        "item_id": log["item_id"].to_numpy()[rows],
                        "ts": log["ts"].to_numpy()[rows] - shift,
                        "label": pd.array([pd.NA] * per, "Int8"),
                        "score": np.zeros(per, np.float32),
                        "computed_at": np.full(per, interval.end, np.int64),
                        "expires_at": np.full(per, interval.end + ttl, np.int64),
                    }
                )
                where = None if job.partitions == 1 else p  # as select_partitions writes them
                write_parquet(ledger, layout.selections(interval, where))
                cache_rows += per
    for interval in earlier:
        atomic_write_json(
            layout.embeddings_done(interval), {"generation": EMPTY_GENERATION, "shards": 0}
        )
    return {"cache_rows": cache_rows}


def task_serve(job: Job, task: Task, meter: Meter) -> dict[str, Any]:
    """Serving's request logging: every request into its partition's request stream."""
    import pyarrow.parquet as pq

    from solaris.connection import redis_client
    from solaris.namespace import Namespace
    from solaris.serving.request_log import append_request
    from solaris.store.partitions import Partitioning

    cfg = job.config()
    namespace = Namespace.of(cfg)
    parts = Partitioning(job.partitions)
    rng = np.random.default_rng(job.seed + 2)
    client = redis_client(job.redis, timeout_s=60.0)
    logged = 0
    try:
        with meter.part("append_request per request (pipelined)", job.size):
            for p in range(job.partitions):
                path = job.traffic / f"{p:05d}.parquet"
                if not path.is_file():
                    continue
                stream = namespace.request_stream_of(p, parts)
                log = pq.read_table(path, columns=["request_id", "user_id", "item_id", "ts"])
                rid, user, item, ts = (log[c].to_numpy() for c in log.column_names)
                scores = rng.random(len(rid), dtype=np.float32)
                bounds = np.r_[0, np.flatnonzero(np.diff(rid)) + 1, len(rid)]
                pipe = client.pipeline(transaction=False)
                for k, (lo, hi) in enumerate(itertools.pairwise(bounds)):
                    append_request(
                        pipe,
                        stream,
                        cfg.store.request_log_maxlen,
                        int(rid[lo]),
                        int(user[lo]),
                        item[lo:hi],
                        scores[lo:hi],
                        int(ts[lo]),
                    )
                    if (k + 1) % SERVE_PIPELINE == 0:
                        pipe.execute()
                pipe.execute()
                logged += len(bounds) - 1
    finally:
        client.close()
    return {"logged": logged}
