"""The scale bench's settings and pure helpers: sizes, the exponent fit, partitions,
shard groups, peaks (no I/O)."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BATCH_SIZE",
    "B_BOUND",
    "EMPTY_GENERATION",
    "ENV_PARTITIONS",
    "ENV_PROFILE",
    "ENV_TRAFFIC",
    "FEATURE_REPO",
    "FM_NAME",
    "FM_VERSION",
    "FULL_SIZES",
    "GEN_CHUNK_ROWS",
    "HEARTBEAT_S",
    "INTERVAL_START",
    "LOG_COLUMNS",
    "QUICK_SIZES",
    "REDIS_DEFAULT",
    "REPO",
    "ROWS_PER_PARTITION",
    "RSS_BOUND_MB",
    "SERVE_PIPELINE",
    "STAGES",
    "TITLES",
    "USER_SHIFT",
    "compact_peaks",
    "fit_exponent",
    "group_shards",
    "parse_sizes",
    "partition_count",
    "say",
    "threads_per_task",
]


REDIS_DEFAULT = "127.0.0.1:6379,db=13"
REPO = Path(__file__).resolve().parents[2]
FEATURE_REPO = REPO / "feature_repo"
FULL_SIZES = (100_000, 1_000_000, 10_000_000)
QUICK_SIZES = (10_000, 100_000)
ROWS_PER_PARTITION = 500_000  # exactly 2, 20 and 200 partitions at 10^6, 10^7, 10^8
STAGES = ("select", "embed", "enrich")
TITLES = {
    "select": "selection (drain, verifier, budget vs ledger cache)",
    "embed": "embedding + pair view write (FM -> AE -> z)",
    "enrich": "enrichment (uagg, iagg, KNN index, unn, nbr)",
}
RSS_BOUND_MB = 1500.0  # the bound on every process at 10^7
B_BOUND = 1.05
FM_NAME = "scalefm-untrained"  # the bench FM's version (the manifest's ``fm``)
FM_VERSION = "fm-scalebench01"  # the codes' version: 15 characters, like a real one
BATCH_SIZE = 8192  # embed_pairs' default batch
GEN_CHUNK_ROWS = 1 << 20  # the generator's chunk
SERVE_PIPELINE = 500  # requests per Redis pipeline of the serving process
USER_SHIFT = 1 << 30  # the ledger cache's user ids: outside the traffic's range
EMPTY_GENERATION = "0000000000ca"  # the history's markers: no shards
HEARTBEAT_S = 30.0
INTERVAL_START = 1_699_999_200  # a multiple of 900 s (2023-11-14T22:00Z)
ENV_TRAFFIC = "BENCH_SCALE_TRAFFIC"  # the folder of the per-partition traffic files
ENV_PARTITIONS = "BENCH_SCALE_PARTITIONS"  # "first,last": the task's partitions
ENV_PROFILE = "BENCH_SCALE_PROFILE"  # a folder: each task process writes its cProfile stats
LOG_COLUMNS = ["user_id", "item_id", "ts", "label"]


def say(text: str = "") -> None:
    print(text, flush=True)


# --------------------------------------------------------------------------------------------
# Pure helpers: sizes, the exponent fit, partitions, shard groups, peaks
# --------------------------------------------------------------------------------------------


def parse_sizes(text: str) -> tuple[int, ...]:
    """``"1e5,1e6"`` or ``"100000,1_000_000"``: distinct positive sizes, ascending."""
    sizes = []
    for raw in text.split(","):
        value = float(raw.strip().replace("_", ""))
        if not value.is_integer() or value < 1:
            raise argparse.ArgumentTypeError(f"size {raw.strip()!r} is not a positive integer")
        sizes.append(int(value))
    return tuple(sorted(set(sizes)))


def fit_exponent(sizes: Sequence[float], costs: Sequence[float | None]) -> float:
    """``b`` of ``cost ~ size^b``: the least-squares slope of ``log cost`` on ``log size``.

    NaN when fewer than two distinct sizes have a positive cost (no slope to fit).
    """
    pairs = [
        (math.log(s), math.log(c))
        for s, c in zip(sizes, costs, strict=True)
        if s > 0 and c is not None and c > 0 and math.isfinite(c)
    ]
    if len({x for x, _ in pairs}) < 2:
        return float("nan")
    x = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    return float(np.polyfit(x, y, 1)[0])


def partition_count(rows: int, rows_per_partition: int) -> int:
    """``cycle.partitions`` for ``rows`` candidate rows per interval: about
    ``rows_per_partition`` rows each, at least one."""
    if rows_per_partition <= 0:
        raise ValueError(f"rows per partition must be > 0, got {rows_per_partition}")
    return max(1, round(rows / rows_per_partition))


def group_shards(shards: Sequence[dict[str, Any]], max_rows: int) -> list[list[dict[str, Any]]]:
    """Consecutive shards together while their ``rows`` add up to at most ``max_rows`` (a
    bigger shard is a group of its own): one task process embeds one group."""
    groups: list[list[dict[str, Any]]] = []
    rows = 0
    for shard in shards:
        if groups and rows + int(shard["rows"]) <= max_rows:
            groups[-1].append(shard)
            rows += int(shard["rows"])
        else:
            groups.append([shard])
            rows = int(shard["rows"])
    return groups


def threads_per_task(threads: int | None, workers: int) -> int:
    """OpenMP threads of a task process (torch, faiss): ``threads`` when given, else the
    cores shared by the processes that run at once, as a worker slot is given them."""
    return threads or max(1, (os.cpu_count() or 1) // workers)


def compact_peaks(steps: Sequence[tuple[str, Sequence[float]]]) -> str:
    """``"plan 210 | shards×16 350–420 | publish 180"``: each step's process peaks (MB)."""
    out = []
    for name, peaks in steps:
        if not peaks:
            continue
        lo, hi = min(peaks), max(peaks)
        span = f"{lo:,.0f}" if round(lo) == round(hi) else f"{lo:,.0f}–{hi:,.0f}"
        out.append(f"{name}{'×' + str(len(peaks)) if len(peaks) > 1 else ''} {span}")
    return " | ".join(out)


# --------------------------------------------------------------------------------------------
