"""Cost growth of the SOLARIS cycle with traffic: the cycle's tasks, partitioned by user.

Run: ``.venv/bin/python -m bench.scale`` (N = 10^5, 10^6 and 10^7 candidate rows per
interval; ``--sizes 1e5,1e6`` to pick, ``--quick`` for 10^4 and 10^5). Redis at
``127.0.0.1:6379``, database 13 (``--redis`` for another), under a namespace (Feast project)
of its own, ``bscale<pid>``, whose keys and request streams are deleted before each run and
at the end; no database is flushed. Everything else lives in a temporary directory that is
removed at the end.

Why: the cycle runs once per scheduling interval, so what must scale is the work of one
interval against the traffic of that interval, and with the cycle partitioned by user
(``cycle.partitions``, :mod:`solaris.store.partitions`) each task must hold one partition's
rows, whatever N is. For each N the bench sets the partition count so that the rows per
partition stay about constant, ``P = max(1, round(N / --rows-per-partition))`` (default
500,000 rows: P = 1 at 10^5, 2 at 10^6, 20 at 10^7, exactly 500,000 rows a partition from
10^6 on, so that the exponents compare partitions of one size), and runs the cycle's **real task
functions** on a real cycle state (the namespace's folder under the temporary directory, the
real Redis), **each task in a process of its own**, as an Airflow worker runs it. Every task
process is a fresh ``python -m bench.scale --child``: it reads what the earlier tasks wrote to
the cycle state and returns its result (the XCom) as JSON.

The traffic (not a cycle stage): one interval of seeded synthetic candidates
(:func:`solaris.data.synthetic.generate_candidates`, its default shape: 100,000 users, 50,000
items, Zipf popularity, 200 candidates per request, 60% recurrence; the requests spread over
the ``selection.cadence_minutes`` interval), generated chunk by chunk in one **generator**
process and split by partition into one parquet file per partition, never concatenated.
Then, per N:

- **history** (one process, set-up): the autoencoder and its manifest in the models folder,
  and the steady state's ledger cache: ``--cache-intervals`` earlier intervals (default
  TTL / cadence = 24), each with a ledger of ``share ×`` the partition's rows per partition,
  sampled from the traffic with user ids shifted out of its range (they cost the lookup and
  skip nothing, so every N selects the same share), and a completion marker without shards
  (so the embeddings run does not plan them and the enrichment reads only this interval's
  codes).
- **serving** (one process, not a cycle task): every request is logged as serving logs it,
  :func:`solaris.serving.request_log.append_request` into its user's partition's request
  stream (``Namespace.request_stream_of``), with a logged score.

The cycle's stages, each a sequence of steps; a step's tasks are independent processes:

1. **selection** (``orchestration.candidates``): ``prepare_interval`` (the miss drain, the
   partitions grouped by their streams' lengths, ``cycle.select_requests`` set to half a
   partition's requests so each partition is a task); one ``select_partitions`` task per
   group (drain the partition's stream into its request log, score with the verifier, select
   ``selection.share`` of each request against the partition's own ledger cache, write the
   partition's ledger); ``finish_interval`` (the run record). With one group the DAG does it
   all in its first task, and so does the bench.
2. **embedding** (``orchestration.embeddings``): ``plan_shards`` (reads the interval's
   ledgers, writes the shards by partition, ``cycle.shard_rows`` = ``share × rows per
   partition``, so a shard is about a partition's pairs); one task per shard group (shards of
   about that many pairs together) running ``embed_and_materialize`` per shard: the FM
   (adapter) → its shared layer → the autoencoder → ``z`` on CPU, then the ``pair`` view
   written (Redis, offline rows); ``summarize_embeddings`` (the marker: the codes published).
3. **enrichment** (``orchestration.enrichment``): ``partition_groups`` (``cycle.enrich_rows``
   set to half a partition's codes, so each partition is a task); one
   ``aggregate_partitions`` task per group (its users' ``uagg``, its ``iagg`` partial sums,
   its users' embeddings); one task of ``reduce_aggregates`` (``iagg``) and
   ``build_neighbour_index`` (the user KNN index over every partition's users); one
   ``fill_partitions`` task per group (its users' ``unn`` and ``nbr`` for its candidates); one
   ``record_neighbours`` task. With one group everything runs in the first task, as the DAG
   does. The clustering DAG's daily table is not built: with
   ``cycle.neighbours_every_interval`` (the default) the per-interval index replaces it.

The adapters are the bench's own (``bench.scale:foundation_model`` and
``bench.scale:verifier``): the example's untrained, seeded
:class:`~solaris.examples.synthetic.PairTowerFM` and its
:class:`~solaris.examples.synthetic.RecurrenceVerifier`, whose features are counters of a log
(:class:`~solaris.examples.synthetic.LogFeatures`). Each task process indexes the traffic of
its own partitions (the parent names them in ``BENCH_SCALE_PARTITIONS``), one partition at a
time as the cycle's tasks ask for them (:class:`PartitionLogs`): user and pair counters are
exact, item counters are those of the partition's traffic. A real FM serves its
item features from its own store; indexing the whole interval in every process would be the
example adapter's memory, not the cycle's. Their cost does not depend on their weights.

Figures. A stage's **seconds** are the sum of its tasks' timed calls (imports and process
starts left out: a task process imports what it needs, Feast, torch, faiss, before its
timed calls); its **wall** is the sum of its steps' walls, each from its first task's start
to its last task's end (process starts and imports in); **rows/s** is N / seconds. The
calls' **CPU seconds** (user + system of every thread, ``getrusage``) are shown too: on a
machine other work shares they move much less than seconds. Each stage also shows the
machine's mean 1-minute load average while it ran (sampled each second). Memory is
each process's resident set: a process's peak is the highest ``VmHWM`` it read, before each
reset and at its end (a timed call's peak is its own: ``VmHWM`` is reset through
``/proc/self/clear_refs`` before it; tracemalloc would miss numpy's and torch's buffers).
``wait4``'s ``ru_maxrss`` is not used: for a child started by ``vfork`` + ``exec`` Linux
records the parent's high-water mark in it, so every child would report the parent's RSS.
The exponent ``b`` of ``cost ~ N^b`` is a least-squares fit of ``log seconds`` on ``log N``
over the sizes run, and over the last two. Every task runs alone (a pool of one process)
unless stated; at the largest size the whole interval runs again with a pool of two
concurrent processes (what two workers do on a machine of this size) against the first run.
A task process gets the cores divided by the processes that run at once as its OpenMP
threads (``OMP_NUM_THREADS`` for torch and faiss; ``--threads`` to fix it).

**Embedding against the FM's own pass**, on the pairs of the first shard in the same
8,192-row batches, ``--reps`` interleaved repetitions in a shuffled order after a warm-up,
median per variant: ``cycle embed_pairs`` against the **bare FM pass** (per batch
``fm.shared(fm.features(...))`` then ``autoencoder.encode``, under ``inference_mode``, the
codes kept as tensors); target a throughput ratio ≥ 0.7. The **forward-only** variant
(features built beforehand) shows how much of the FM's pass is its feature lookup.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.machine import machine_facts
from solaris.config import SolarisConfig

if TYPE_CHECKING:
    from solaris.examples.synthetic import (
        LogFeatures,
        RecurrenceVerifier,
        SyntheticFoundationModel,
    )
    from solaris.orchestration.layout import Interval

__all__ = [
    "FULL_SIZES",
    "QUICK_SIZES",
    "STAGES",
    "Job",
    "Part",
    "PartitionLogs",
    "compact_peaks",
    "fit_exponent",
    "foundation_model",
    "group_shards",
    "main",
    "parse_sizes",
    "partition_count",
    "user_pool",
    "verifier",
]

REDIS_DEFAULT = "127.0.0.1:6379,db=13"
REPO = Path(__file__).resolve().parents[1]
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
# Memory of the current process
# --------------------------------------------------------------------------------------------


def _status_mb(name: str) -> float | None:
    """``VmRSS`` / ``VmHWM`` of this process in MB (Linux), else None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Part:
    """One timed call of a task: seconds, CPU seconds (user + system, every thread of the
    process) and memory (MB). ``within`` marks a figure that is part of the previous call's
    time (not summed)."""

    name: str
    rows: int
    seconds: float = 0.0
    cpu_s: float = 0.0
    rss_start_mb: float | None = None
    peak_mb: float | None = None
    within: bool = False


class Meter:
    """Times the calls of one task process and the peak RSS of each, and keeps the process's
    own peak across the resets (a reset of ``VmHWM`` also lowers what ``ru_maxrss`` would
    report at exit)."""

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self.process_peak_mb = 0.0
        self.resettable = self._reset()

    def _reset(self) -> bool:
        self.process_peak_mb = max(self.process_peak_mb, _status_mb("VmHWM") or _maxrss_mb())
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            return False
        return True

    def peak(self) -> float:
        return max(self.process_peak_mb, _status_mb("VmHWM") or _maxrss_mb())

    @contextlib.contextmanager
    def part(self, name: str, rows: int) -> Iterator[Part]:
        p = Part(name, int(rows))
        self.resettable = self._reset() and self.resettable
        p.rss_start_mb = _status_mb("VmRSS")
        cpu = _cpu_s()
        start = time.perf_counter()
        yield p
        p.seconds = time.perf_counter() - start
        p.cpu_s = _cpu_s() - cpu
        p.peak_mb = _status_mb("VmHWM") or _maxrss_mb()
        self.parts.append(p)

    def note(self, name: str, rows: int, seconds: float) -> None:
        """A figure measured inside the previous part (e.g. its online seconds)."""
        self.parts.append(Part(name, int(rows), float(seconds), within=True))


# --------------------------------------------------------------------------------------------
# The bench's adapters: the example's FM and verifier over the task's partitions' traffic
# --------------------------------------------------------------------------------------------


def _task_partitions() -> tuple[Path, range]:
    """The folder of the traffic files and the partitions the parent named for this task."""
    folder, named = os.environ.get(ENV_TRAFFIC), os.environ.get(ENV_PARTITIONS)
    if not folder or not named:
        raise RuntimeError(f"{ENV_TRAFFIC} and {ENV_PARTITIONS} name the task's traffic")
    first, last = (int(x) for x in named.split(","))
    return Path(folder), range(first, last + 1)


class PartitionLogs:
    """The counters of the task's partitions' traffic, one partition's in memory at a time.

    The cycle's tasks work one partition after the other (a shard holds whole partitions, in
    order), so an adapter of a task that runs K partitions need not hold K partitions'
    counters (1.6 GB with K = 10 at 10^8 rows): a query is split by its users' partition,
    and a partition's counters are built when first asked for and dropped for the next one.
    Item counters are those of a partition's traffic, as with one partition a task."""

    def __init__(self, folder: Path, partitions: range, count: int) -> None:
        from solaris.store.partitions import Partitioning

        self._folder, self._partitions = folder, partitions
        self._parts = Partitioning(count)
        self._held: tuple[int, LogFeatures] | None = None

    def _log(self, partition: int) -> LogFeatures:
        import pyarrow.parquet as pq

        from solaris.examples.synthetic import LogFeatures

        if self._held is None or self._held[0] != partition:
            self._held = None  # the old partition's counters go before the new ones are built
            path = self._folder / f"{partition:05d}.parquet"
            if partition not in self._partitions or not path.is_file():
                raise RuntimeError(f"no traffic of partition {partition} for this task in {path}")
            self._held = (
                partition,
                LogFeatures.from_table(pq.read_table(path, columns=LOG_COLUMNS)),
            )
        return self._held[1]

    def _each(self, method: str, users: Any, items: Any, ts: Any) -> np.ndarray:
        users, items, ts = (np.asarray(a, np.int64) for a in (users, items, ts))
        parts = self._parts.of(users)
        if not len(parts) or (parts == parts[0]).all():
            return getattr(self._log(int(parts[0]) if len(parts) else self._partitions[0]), method)(
                users, items, ts
            )
        out: np.ndarray | None = None
        for partition in dict.fromkeys(parts.tolist()):  # in the order the rows ask for them
            rows = np.flatnonzero(parts == partition)
            part = getattr(self._log(partition), method)(users[rows], items[rows], ts[rows])
            if out is None:
                out = np.empty((len(users), *part.shape[1:]), part.dtype)
            out[rows] = part
        assert out is not None
        return out

    def dense(self, users: Any, items: Any, ts: Any) -> np.ndarray:
        return self._each("dense", users, items, ts)

    def score(self, users: Any, items: Any, ts: Any) -> np.ndarray:
        return self._each("score", users, items, ts)


def _fm_module():
    import torch

    from solaris.data.synthetic import SyntheticSpec
    from solaris.examples.synthetic import PairTowerFM

    torch.manual_seed(0)
    return PairTowerFM(user_buckets=64, n_items=SyntheticSpec(n_pairs=1).n_items)


def foundation_model(cfg: SolarisConfig) -> SyntheticFoundationModel:
    """``model.foundation`` of the bench: the example's seeded, untrained FM, its features
    the counters of the task's partitions' traffic."""
    from solaris.examples.synthetic import SyntheticFoundationModel

    logs = PartitionLogs(*_task_partitions(), cfg.cycle.partitions)
    return SyntheticFoundationModel(_fm_module(), logs, FM_NAME)  # type: ignore[arg-type]


def verifier(cfg: SolarisConfig) -> RecurrenceVerifier:
    """``model.verifier`` of the bench: the example's recurrence score over the task's
    partitions' traffic."""
    from solaris.examples.synthetic import RecurrenceVerifier

    logs = PartitionLogs(*_task_partitions(), cfg.cycle.partitions)
    return RecurrenceVerifier(logs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Jobs and tasks
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One size: everything a task process needs, written as JSON by the parent."""

    size: int
    seed: int
    partitions: int
    rows_per_partition: int
    cache_intervals: int
    reps: int
    redis: str
    settings: dict[str, Any]  # the SolarisConfig, as JSON
    work: str  # this size's folder: traffic, task files
    start: int  # the interval [start, end)
    end: int
    users_per_row: float | None = None  # the user pool: N x this (None: the default 100,000)
    partitions_per_task: int = 1  # the partitions one mapped task runs, one after the other

    @property
    def folder(self) -> Path:
        return Path(self.work)

    @property
    def traffic(self) -> Path:
        return self.folder / "traffic"

    def config(self) -> SolarisConfig:
        return SolarisConfig.model_validate(self.settings)

    def interval(self) -> Interval:
        from solaris.orchestration.layout import Interval

        return Interval(self.start, self.end)


@dataclass(frozen=True)
class Task:
    """One task process: what it runs (``kind``), its step's name, its arguments (the XCom
    it gets) and the partitions its adapters index."""

    kind: str
    step: str
    args: dict[str, Any] = field(default_factory=dict)
    partitions: tuple[int, int] | None = None


@dataclass
class TaskRun:
    task: Task
    parts: list[Part]
    extra: dict[str, Any]
    wall_s: float
    peak_mb: float  # the process's peak RSS over its whole life
    imports_s: float = 0.0  # what it imported before its timed calls

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.parts if not p.within)

    @property
    def cpu_s(self) -> float:
        return sum(p.cpu_s for p in self.parts if not p.within)


@dataclass
class StageRun:
    """One stage at one size: its steps in order, each a list of task runs."""

    stage: str
    size: int
    workers: int
    steps: list[tuple[str, list[TaskRun]]] = field(default_factory=list)
    wall_s: float = 0.0
    load_s: float = 0.0  # the 1-minute load average integrated over the wall time

    @property
    def load(self) -> float:
        """The machine's mean 1-minute load average while the stage ran (its own tasks
        included: 1 or 2 of it are the bench's)."""
        return self.load_s / self.wall_s if self.wall_s else float("nan")

    @property
    def cpu_s(self) -> float:
        return sum(run.cpu_s for run in self.tasks)

    @property
    def tasks(self) -> list[TaskRun]:
        return [run for _, runs in self.steps for run in runs]

    @property
    def seconds(self) -> float:
        return sum(run.seconds for run in self.tasks)

    @property
    def peak_mb(self) -> float:
        return max(run.peak_mb for run in self.tasks)

    def parts(self, cpu: bool = False) -> dict[str, tuple[float, bool]]:
        """Seconds (or CPU seconds) per call name, summed over the stage's tasks (and
        whether within)."""
        out: dict[str, tuple[float, bool]] = {}
        for run in self.tasks:
            for p in run.parts:
                s, _ = out.get(p.name, (0.0, p.within))
                out[p.name] = (s + (p.cpu_s if cpu else p.seconds), p.within)
        return out

    def peaks(self) -> str:
        return compact_peaks([(name, [r.peak_mb for r in runs]) for name, runs in self.steps])

    def extra(self, key: str) -> Any:
        """The first task result holding ``key``."""
        return next((r.extra[key] for r in self.tasks if key in r.extra), None)


# --------------------------------------------------------------------------------------------
# Task processes (the child's side)
# --------------------------------------------------------------------------------------------


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
        module = _fm_module()
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
        out |= _enrich_figures([agg], uagg, iagg, users, [fill])
    return out


def _enrich_figures(
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
    task_path.with_suffix(".out.json").write_text(json.dumps(result, default=_json_default))
    return 0


def _json_default(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return str(value)


# --------------------------------------------------------------------------------------------
# The parent: task processes in a pool, the stages in order
# --------------------------------------------------------------------------------------------


class Runner:
    """Starts the task processes of one size, ``workers`` at a time."""

    def __init__(self, job: Job, job_path: Path, threads: int | None = None) -> None:
        self.job = job
        self.job_path = job_path
        self.threads = threads
        self.count = 0
        self.warned = False
        (job.folder / "tasks").mkdir(exist_ok=True)

    def _start(self, task: Task, threads: int) -> tuple[subprocess.Popen, Path, float]:
        self.count += 1
        path = self.job.folder / "tasks" / f"{self.count:05d}-{task.kind}.json"
        path.write_text(json.dumps(dataclasses.asdict(task), default=_json_default))
        env = dict(os.environ)
        env[ENV_TRAFFIC] = str(self.job.traffic)
        first, last = task.partitions or (0, self.job.partitions - 1)
        env[ENV_PARTITIONS] = f"{first},{last}"
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[name] = str(threads)
        cmd = [
            sys.executable,
            "-m",
            "bench.scale",
            "--child",
            "--job",
            str(self.job_path),
            "--task",
            str(path),
        ]
        return subprocess.Popen(cmd, cwd=REPO, env=env), path, time.perf_counter()

    def run(
        self, tasks: Sequence[Task], workers: int, label: str
    ) -> tuple[list[TaskRun], float, float]:
        """Run ``tasks`` with at most ``workers`` at once; their runs (in order), the step's
        wall seconds and its load-seconds (the 1-minute load average, sampled each second,
        integrated over the step)."""
        began = time.perf_counter()
        load_s, sampled = 0.0, began
        pending = list(enumerate(tasks))
        running: dict[int, tuple[int, subprocess.Popen, Path, float]] = {}
        done: dict[int, TaskRun] = {}
        next_beat = began + HEARTBEAT_S
        while pending or running:
            while pending and len(running) < workers:
                k, task = pending.pop(0)
                proc, path, start = self._start(task, threads_per_task(self.threads, workers))
                running[proc.pid] = (k, proc, path, start)
            for pid in list(running):
                got, status, usage = os.wait4(pid, os.WNOHANG)
                if not got:
                    continue
                k, proc, path, start = running.pop(pid)
                wall = time.perf_counter() - start
                code = os.waitstatus_to_exitcode(status)
                proc.returncode = code
                if code != 0:
                    raise RuntimeError(f"{tasks[k].kind} at N={self.job.size:,} failed ({code})")
                done[k] = self._result(tasks[k], path, wall, usage.ru_maxrss / 1024)
            now = time.perf_counter()
            if now - sampled >= 1.0:
                load_s += os.getloadavg()[0] * (now - sampled)
                sampled = now
            if now >= next_beat:
                say(f"      ... {label} at N={self.job.size:,}: {now - began:.0f} s")
                next_beat += HEARTBEAT_S
            time.sleep(0.05)
        now = time.perf_counter()
        load_s += os.getloadavg()[0] * (now - sampled)
        return [done[k] for k in range(len(tasks))], now - began, load_s

    def _result(self, task: Task, path: Path, wall: float, maxrss_mb: float) -> TaskRun:
        data = json.loads(path.with_suffix(".out.json").read_text())
        if not data["peak_reset"] and not self.warned:
            say("      note: the peak RSS could not be reset here: call peaks include set-up")
            self.warned = True
        parts = [Part(**p) for p in data["parts"]]
        # The child's own VmHWM record, not wait4's ru_maxrss: a child started by vfork + exec
        # inherits the parent's high-water mark in ru_maxrss (Linux records the old mm's at
        # exec), so every child would report at least the parent's RSS.
        peak = float(data["process_peak_mb"]) if data["peak_reset"] else maxrss_mb
        run = TaskRun(task, parts, data["extra"], wall, peak)
        run.imports_s = float(data["imports_s"])
        return run

    def one(self, task: Task, label: str) -> TaskRun:
        return self.run([task], 1, label)[0][0]


def run_stages(runner: Runner, workers: int) -> dict[str, StageRun]:
    """One interval's cycle: the three stages in order, each step's tasks in the pool."""
    job = runner.job
    stages = {name: StageRun(name, job.size, workers) for name in STAGES}

    def step(stage: str, name: str, tasks: Sequence[Task]) -> list[TaskRun]:
        runs, wall, load_s = runner.run(tasks, workers, f"{stage}/{name}")
        stages[stage].steps.append((name, runs))
        stages[stage].wall_s += wall
        stages[stage].load_s += load_s
        return runs

    prep = step("select", "prepare", [Task("select-prepare", "prepare")])[0]
    if not prep.extra["inline"]:
        groups = prep.extra["groups"]
        tasks = [Task("select-group", "select", {"partitions": g}, (g[0], g[1])) for g in groups]
        results = [r.extra["result"] for r in step("select", "select", tasks)]
        args = {"served": prep.extra["served"], "results": results}
        step("select", "publish", [Task("select-publish", "publish", args)])

    plan = step("embed", "plan", [Task("embed-plan", "plan")])[0]
    cfg = job.config()
    groups = group_shards(plan.extra["shards"], cfg.cycle.shard_rows * job.partitions_per_task)
    tasks = [
        Task(
            "embed-shards", "embed", {"shards": g}, (g[0]["partitions"][0], g[-1]["partitions"][1])
        )
        for g in groups
    ]
    runs = step("embed", "embed", tasks)
    results = [res for r in runs for res in r.extra["results"]]
    step("embed", "publish", [Task("embed-publish", "publish", {"results": results})])

    plan = step("enrich", "plan", [Task("enrich-plan", "plan")])[0]
    if not plan.extra["inline"]:
        groups = plan.extra["groups"]
        units = [{"partitions": g} for g in groups]
        runs = step(
            "enrich", "aggregate", [Task("enrich-aggregate", "aggregate", u) for u in units]
        )
        aggs = [r.extra["result"] for r in runs]
        reduce = step(
            "enrich", "reduce+index", [Task("enrich-reduce", "reduce", {"results": aggs})]
        )
        runs = step("enrich", "fill", [Task("enrich-fill", "fill", u) for u in units])
        fills = [r.extra["result"] for r in runs]
        step("enrich", "record", [Task("enrich-record", "record", {"results": fills})])
        r = reduce[0].extra
        plan.extra |= _enrich_figures(aggs, r["uagg"], r["iagg"], r["users"], fills)
    return stages


def reset_interval(job: Job, *, history: bool) -> None:
    """Remove the interval's cycle state, the namespace's offline rows, Redis keys and
    request streams; the history (earlier ledgers and markers, models) too unless kept."""
    from solaris.connection import redis_client
    from solaris.namespace import Namespace
    from solaris.store.feast_store import delete_project_keys
    from solaris.store.partitions import Partitioning

    cfg = job.config()
    namespace = Namespace.of(cfg)
    root = Path(str(namespace.cycle_root))
    key = job.interval().key
    if history:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(namespace.models_dir, ignore_errors=True)
    elif root.is_dir():
        for entry in root.iterdir():
            if entry.name not in ("selections", "pair_embeddings"):
                shutil.rmtree(entry, ignore_errors=True)
        for kind in ("selections", "pair_embeddings"):
            shutil.rmtree(root / kind / key, ignore_errors=True)
            (root / kind / f"{key}.parquet").unlink(missing_ok=True)
    shutil.rmtree(Path(str(namespace.offline_root)), ignore_errors=True)
    streams = namespace.request_streams(Partitioning(cfg.cycle.partitions))
    client = redis_client(job.redis, timeout_s=60.0)
    try:
        delete_project_keys(client, namespace.project, extra_keys=[namespace.miss_stream, *streams])
    finally:
        client.close()


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


def _fmt_s(seconds: float) -> str:
    return f"{seconds:9.2f}" if seconds < 1000 else f"{seconds:9.0f}"


def _fmt_b(b: float) -> str:
    return "    -" if not math.isfinite(b) else f"{b:5.2f}"


def _fmt_rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds:12,.0f}" if seconds > 0 else f"{'-':>12}"


def _exponents(sizes: Sequence[int], values: Sequence[float | None]) -> tuple[float, float]:
    """b over every size with a value, and over the last two."""
    pairs = [(n, v) for n, v in zip(sizes, values, strict=True) if v is not None]
    every = fit_exponent([n for n, _ in pairs], [v for _, v in pairs])
    last = fit_exponent([n for n, _ in pairs[-2:]], [v for _, v in pairs[-2:]])
    return every, last


def time_table(
    sizes: Sequence[int], runs: dict[tuple[str, int], StageRun], cpu: bool = False
) -> list[dict]:
    """Seconds (or CPU seconds) and rows per second of it, per stage and call, per N, with
    b; printed and returned."""
    label_w = 54
    unit = "cpu s" if cpu else "s"
    head = "".join(f"{'N=' + format(n, ','):>22}" for n in sizes)
    say(f"   {'stage / call (summed over its tasks)':<{label_w}}{head}      b  b(last 2)")
    say(
        f"   {'':<{label_w}}" + f"{unit:>9} {'rows/' + unit:>12}" * len(sizes) + f"  ({unit} ~ N^b)"
    )
    out = []
    for stage in STAGES:
        present = [n for n in sizes if (stage, n) in runs]
        if not present:
            continue
        names: list[str] = []
        for n in present:
            found = runs[(stage, n)].parts(cpu)
            names += [k for k, (_, within) in found.items() if k not in names]
            if cpu:  # a figure within a call has no CPU time of its own
                names = [k for k in names if not found.get(k, (0.0, False))[1]]
        for label in [None, *names]:
            cells, secs = [], []
            within = False
            for n in sizes:
                run = runs.get((stage, n))
                if run is None or (label is not None and label not in run.parts(cpu)):
                    cells.append(f"{'':>22}")
                    secs.append(None)
                    continue
                if label is None:
                    s = run.cpu_s if cpu else run.seconds
                else:
                    s, within = run.parts(cpu)[label]
                cells.append(f"{_fmt_s(s)} {_fmt_rate(n, s)}")
                secs.append(s)
            b, b2 = _exponents(sizes, secs)
            name = TITLES[stage] if label is None else ("      " if within else "   ") + label
            say(f"   {name[:label_w]:<{label_w}}{''.join(cells)}  {_fmt_b(b)}  {_fmt_b(b2)}")
            out.append({"stage": stage, "call": label, unit: secs, "b": b, "b_last2": b2})
    return out


def wall_table(sizes: Sequence[int], runs: dict[tuple[str, int], StageRun]) -> list[dict]:
    head = "".join(f"{'N=' + format(n, ','):>24}" for n in sizes)
    say(f"   {'stage':<10}{head}      b  b(last 2)")
    say(
        f"   {'':<10}"
        + f"{'wall s':>10}{'procs':>6}{'load':>8}" * len(sizes)
        + "  (wall ~ N^b; load: mean 1-min load average, the bench's own task included)"
    )
    out = []
    totals: list[float | None] = [0.0 for _ in sizes]
    for stage in STAGES:
        cells, walls = [], []
        for k, n in enumerate(sizes):
            run = runs.get((stage, n))
            if run is None:
                cells.append(f"{'':>24}")
                walls.append(None)
                totals[k] = None
                continue
            cells.append(f"{_fmt_s(run.wall_s):>10}{len(run.tasks):>6}{run.load:>8.1f}")
            walls.append(run.wall_s)
            if totals[k] is not None:
                totals[k] += run.wall_s
        b, b2 = _exponents(sizes, walls)
        say(f"   {stage:<10}{''.join(cells)}  {_fmt_b(b)}  {_fmt_b(b2)}")
        out.append(
            {
                "stage": stage,
                "wall_s": walls,
                "load": [runs[(stage, n)].load if (stage, n) in runs else None for n in sizes],
                "b": b,
                "b_last2": b2,
            }
        )
    b, b2 = _exponents(sizes, totals)
    cells = [f"{_fmt_s(t):>10}{'':>14}" if t is not None else f"{'':>24}" for t in totals]
    say(f"   {'interval':<10}{''.join(cells)}  {_fmt_b(b)}  {_fmt_b(b2)}")
    return out


def memory_table(
    sizes: Sequence[int], runs: dict[tuple[str, int], StageRun], others: dict[int, dict]
) -> list[dict]:
    head = "".join(f"{'N=' + format(n, ','):>14}" for n in sizes)
    say(f"   {'process (peak RSS, MB)':<28}{head}   b(peak)")
    out = []
    rows: list[tuple[str, list[float | None]]] = []
    for name in ("generator", "history", "serving"):
        rows.append((name, [others.get(n, {}).get(name) for n in sizes]))
    for stage in STAGES:
        rows.append(
            (
                f"{stage} (max of its tasks)",
                [runs[(stage, n)].peak_mb if (stage, n) in runs else None for n in sizes],
            )
        )
    rows.append(("embedding ratio", [others.get(n, {}).get("ratio") for n in sizes]))
    for name, peaks in rows:
        cells = "".join(f"{p:14,.0f}" if p is not None else f"{'':>14}" for p in peaks)
        b, _ = _exponents(sizes, peaks)
        say(f"   {name:<28}{cells}   {_fmt_b(b)}")
        out.append({"process": name, "peak_mb": peaks, "b": b})
    say("   per task (MB), step by step:")
    for n in sizes:
        for stage in STAGES:
            run = runs.get((stage, n))
            if run is not None:
                say(f"      N={n:<12,} {stage:<7} {run.peaks()}")
    return out


def workload_table(sizes: Sequence[int], data: dict[int, dict], runs: dict) -> None:
    def extra(stage: str, n: int, key: str) -> str:
        run = runs.get((stage, n))
        value = run.extra(key) if run else None
        return f"{value:>22,}" if isinstance(value, int) else f"{'-':>22}"

    head = "".join(f"{'N=' + format(n, ','):>22}" for n in sizes)
    say(f"   {'':<46}{head}")
    rows = [
        ("partitions (cycle.partitions)", lambda n: f"{data[n]['partitions']:>22,}"),
        (
            "candidate rows per partition (min-max)",
            lambda n: _cell(min(data[n]["partition_rows"]), max(data[n]["partition_rows"]), "-"),
        ),
        ("requests", lambda n: f"{data[n]['requests']:>22,}"),
        ("distinct users / items", lambda n: _cell(data[n]["users"], data[n]["items"])),
        ("ledger-cache rows (earlier intervals)", lambda n: f"{data[n]['cache_rows']:>22,}"),
        ("selected rows (the budget)", lambda n: extra("select", n, "selected")),
        ("distinct pairs embedded and written", lambda n: extra("embed", n, "pairs")),
        ("shards (embedding tasks)", lambda n: _shards(runs, n)),
        ("uagg rows", lambda n: extra("enrich", n, "uagg_rows")),
        ("iagg rows", lambda n: extra("enrich", n, "iagg_rows")),
        ("users in the KNN index (unn rows)", lambda n: extra("enrich", n, "unn_rows")),
        ("nbr targets / rows", lambda n: _nbr(runs, n)),
        (
            "neighbour codes behind the nbr rows (n_nbrs)",
            lambda n: extra("enrich", n, "nbr_matches"),
        ),
    ]
    for label, cell in rows:
        say(f"   {label:<46}{''.join(cell(n) for n in sizes)}")


def _cell(a: int, b: int, sep: str = "/") -> str:
    return f"{f'{a:,}{sep}{b:,}':>22}"


def _shards(runs: dict, n: int) -> str:
    run = runs.get(("embed", n))
    if run is None:
        return f"{'-':>22}"
    return _cell(run.extra("shard_count"), len(run.steps[1][1]))


def _nbr(runs: dict, n: int) -> str:
    run = runs.get(("enrich", n))
    if run is None or run.extra("nbr_rows") is None:
        return f"{'-':>22}"
    return _cell(run.extra("nbr_targets"), run.extra("nbr_rows"))


def ratio_table(ratios: dict[int, dict], reps: int) -> list[dict]:
    say(
        f"   {'N':>12} {'pairs':>10} {'cycle rows/s':>14} {'bare FM rows/s':>15} "
        f"{'cycle/bare':>11} {'forward-only rows/s':>20} {'cycle/fwd':>10}"
    )
    out = []
    for n, extra in ratios.items():
        pairs = extra["pairs"]
        rate = {k: pairs / v for k, v in extra["ratio"].items()}
        cyc, bare, fwd = rate["cycle embed_pairs"], rate["bare FM pass"], rate["forward only"]
        verdict = "ok" if cyc / bare >= 0.7 else "BELOW 0.7"
        say(
            f"   {n:>12,} {pairs:>10,} {cyc:>14,.0f} {bare:>15,.0f} "
            f"{cyc / bare:>7.2f} {verdict:<3} {fwd:>20,.0f} {cyc / fwd:>10.3f}"
        )
        out.append({"size": n, "pairs": pairs, "rows_per_s": rate, "cycle_over_bare": cyc / bare})
    say(
        f"   the first shard's pairs; medians of {reps} interleaved runs per variant (shuffled, "
        "after a warm-up); target cycle/bare >= 0.7"
    )
    return out


def pool_table(
    size: int, one: dict[str, StageRun], two: dict[str, StageRun], threads: tuple[int, int]
) -> dict[str, Any]:
    say(
        f"   N={size:,}; every stage's task processes run with a pool of 1, then of 2 at once "
        f"({threads[0]} and {threads[1]} OpenMP threads per task)"
    )
    say(f"   {'stage':<12}{'1 worker s':>12}{'2 workers s':>13}{'1/2':>8}{'load 1 / 2':>14}")
    for stage in STAGES:
        a, b = one[stage].wall_s, two[stage].wall_s
        loads = f"{one[stage].load:.1f} / {two[stage].load:.1f}"
        say(f"   {stage:<12}{a:>12.1f}{b:>13.1f}{a / b:>8.2f}{loads:>14}")
    wall1 = sum(r.wall_s for r in one.values())
    wall2 = sum(r.wall_s for r in two.values())
    ratio = wall1 / wall2
    verdict = "met" if ratio >= 1.7 else "NOT met"
    say(f"   {'interval':<12}{wall1:>12.1f}{wall2:>13.1f}{ratio:>8.2f}  (target >= 1.7: {verdict})")
    peak2 = max(r.peak_mb for r in two.values())
    say(f"   peak RSS of a task process with 2 at once: {peak2:,.0f} MB")
    say(
        "   load: the machine's mean 1-minute load average during the run (1 or 2 of it are "
        f"the bench's own tasks; {os.cpu_count()} cores): other work on the machine slows "
        "either run"
    )
    return {
        "size": size,
        "one_worker_s": wall1,
        "two_workers_s": wall2,
        "ratio": ratio,
        "load": {s: [one[s].load, two[s].load] for s in STAGES},
    }


def targets(
    sizes: Sequence[int],
    runs: dict[tuple[str, int], StageRun],
    others: dict[int, dict],
    parent_mb: float,
) -> dict[str, Any]:
    largest = sizes[-1]
    peaks = [others[largest].get(k) for k in ("generator", "history", "serving", "ratio")]
    peaks += [runs[(s, largest)].peak_mb for s in STAGES if (s, largest) in runs]
    worst = max([p for p in peaks if p is not None] + [parent_mb])
    verdict = "met" if worst <= RSS_BOUND_MB else "NOT met"
    say(
        f"   every process at N={largest:,} <= {RSS_BOUND_MB:,.0f} MB: largest {worst:,.0f} MB "
        f"(parent {parent_mb:,.0f} MB) — {verdict}"
    )
    out: dict[str, Any] = {"largest_process_mb": worst, "rss_met": worst <= RSS_BOUND_MB}
    top = [n for n in sizes if n >= 1_000_000]
    if len(top) >= 2:
        for stage in STAGES:
            secs = [runs[(stage, n)].seconds for n in top if (stage, n) in runs]
            cpus = [runs[(stage, n)].cpu_s for n in top if (stage, n) in runs]
            b = fit_exponent(top[: len(secs)], secs)
            b_cpu = fit_exponent(top[: len(cpus)], cpus)
            verdict = "met" if b <= B_BOUND else "NOT met"
            say(
                f"   b of {stage} over N >= 10^6 ({len(secs)} sizes) = {b:.2f} "
                f"<= {B_BOUND} — {verdict} (of its CPU seconds: {b_cpu:.2f})"
            )
            out[f"b_{stage}"] = b
            out[f"b_cpu_{stage}"] = b_cpu
    return out


def environment(args: argparse.Namespace, cfg: SolarisConfig) -> dict[str, str]:
    import pandas as pd
    import pyarrow as pa

    from solaris.connection import redis_client

    client = redis_client(args.redis, timeout_s=10.0)
    try:
        redis_version = client.info("server")["redis_version"]
    finally:
        client.close()
    return {
        **machine_facts(),
        "numpy / pandas / pyarrow": f"{np.__version__} / {pd.__version__} / {pa.__version__}",
        "redis-server": f"{redis_version} at {args.redis}, namespace {args.project}",
        "cycle": (
            f"share {cfg.selection.share}, cadence {cfg.selection.cadence_minutes:g} min, "
            f"TTL {cfg.selection.ttl_hours:g} h, ledger cache {args.cache_intervals} "
            f"intervals, z_dim {cfg.model.z_dim}, {args.rows_per_partition:,} candidate rows "
            "per partition"
        ),
        "users": (
            "a fixed pool of 100,000"
            if args.users_per_row is None
            else f"a pool of N x {args.users_per_row:g} (grows with the traffic)"
        ),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=None,
        help="candidate rows per interval, comma-separated (default 1e5,1e6,1e7)",
    )
    parser.add_argument("--quick", action="store_true", help="sizes 1e4,1e5: a smoke run")
    parser.add_argument(
        "--rows-per-partition",
        type=lambda s: parse_sizes(s)[0],
        default=ROWS_PER_PARTITION,
        help="candidate rows per partition: cycle.partitions = round(N / this) (default 500,000)",
    )
    parser.add_argument(
        "--no-pool", action="store_true", help="skip the two-workers run at the largest size"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="OpenMP threads per task process (torch, faiss); default: the cores divided by "
        "the processes that run at once (2 with one worker on 2 cores, 1 with two)",
    )
    parser.add_argument("--redis", default=REDIS_DEFAULT, help="Feast connection string")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--share", type=float, default=None, help="default selection.share")
    parser.add_argument(
        "--cache-intervals",
        type=int,
        default=None,
        help="earlier ledgers in the selection's cache (default TTL / cadence)",
    )
    parser.add_argument("--reps", type=int, default=3, help="runs per embedding variant")
    parser.add_argument(
        "--users-per-row",
        type=float,
        default=None,
        help="a user pool of N x this users (0.01: 100,000 at 10^7), so that users grow with "
        "the traffic; default: a fixed pool of 100,000",
    )
    parser.add_argument(
        "--partitions-per-task",
        type=int,
        default=1,
        help="partitions one mapped task runs in turn (default 1; 10 keeps the task starts of "
        "a 10^8 run at those of 10^7, as the DAGs' groups do)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--job", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--task", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sizes is None:
        args.sizes = QUICK_SIZES if args.quick else FULL_SIZES
    return args


@dataclass
class Workspace:
    tmp: Path
    repo: Path
    cfg: SolarisConfig


@contextlib.contextmanager
def workspace(args: argparse.Namespace) -> Iterator[Workspace]:
    """A temporary repo copy with the definitions applied; Redis keys removed around it."""
    from solaris.connection import redis_client
    from solaris.store.feast_store import (
        apply_definitions,
        delete_project_keys,
        open_feature_store,
    )

    tmp = Path(tempfile.mkdtemp(prefix="solaris-scale-"))
    repo = tmp / "feature_repo"
    shutil.copytree(FEATURE_REPO, repo, ignore=shutil.ignore_patterns("data", "__pycache__"))
    base = SolarisConfig()
    share = args.share if args.share is not None else base.selection.share
    cfg = SolarisConfig(
        namespace=args.project,
        artifacts_dir=tmp / "artifacts",
        model={
            "foundation": "bench.scale:foundation_model",
            "verifier": "bench.scale:verifier",
            "trainer": None,
        },
        selection={"share": share},
        store={"repo_path": repo, "redis": args.redis},
    )
    if args.cache_intervals is None:
        args.cache_intervals = round(cfg.selection.ttl_hours * 60 / cfg.selection.cadence_minutes)
    client = redis_client(args.redis, timeout_s=60.0)
    try:
        delete_project_keys(client, args.project)
        apply_definitions(open_feature_store(cfg, args.redis), cfg)
        yield Workspace(tmp, repo, cfg)
    finally:
        delete_project_keys(client, args.project)
        client.close()
        shutil.rmtree(tmp, ignore_errors=True)


def size_config(
    cfg: SolarisConfig, size: int, rows_per_partition: int, per_task: int = 1
) -> tuple[SolarisConfig, int]:
    """The settings of size N: the partition count and the task sizes that make
    ``per_task`` partitions one task (shards of about a partition's pairs, grouped by the
    bench ``per_task`` at a time; selection and enrichment units that hold ``per_task``
    partitions, never a part of one)."""
    from solaris.data.synthetic import SyntheticSpec

    partitions = partition_count(size, rows_per_partition)
    per_partition = size / partitions
    # Units of half a partition make each partition a task whatever its size; units of
    # ``per_task`` and a half partitions hold ``per_task`` (their sizes vary by a few %).
    unit = 0.5 if per_task == 1 else per_task + 0.5
    pairs = max(1, math.ceil(cfg.selection.share * per_partition))  # selected rows
    cycle: dict[str, Any] = {
        "partitions": partitions,
        # A partition's pairs in one shard (a quarter over its expected count: the busiest
        # partitions too), never two partitions' (their pairs add up to twice that).
        "shard_rows": math.ceil(1.25 * pairs),
        "enrich_rows": max(1, int(pairs * unit)),
    }
    requests = per_partition / SyntheticSpec(n_pairs=1).candidates_per_request
    cycle["select_requests"] = max(1, int(requests * unit))
    return cfg.model_copy(update={"cycle": cfg.cycle.model_copy(update=cycle)}), partitions


def run_size(
    args: argparse.Namespace, ws: Workspace, n: int, pool: bool
) -> tuple[dict[str, StageRun], dict[str, Any], dict[str, float], dict | None, dict | None]:
    """Generate, set up and run one interval of N rows (and the two-worker run when
    ``pool``): the stage runs, the workload figures, the other processes' peaks, the
    embedding ratio and the two-worker stage runs."""
    cfg, partitions = size_config(ws.cfg, n, args.rows_per_partition, args.partitions_per_task)
    cadence_s = round(cfg.selection.cadence_minutes * 60)
    work = ws.tmp / f"n{n}"
    work.mkdir()
    job = Job(
        size=n,
        seed=args.seed,
        partitions=partitions,
        rows_per_partition=args.rows_per_partition,
        cache_intervals=args.cache_intervals,
        reps=args.reps,
        redis=args.redis,
        settings=json.loads(cfg.model_dump_json()),
        work=str(work),
        start=INTERVAL_START,
        end=INTERVAL_START + cadence_s,
        users_per_row=args.users_per_row,
        partitions_per_task=args.partitions_per_task,
    )
    job_path = work / "job.json"
    job_path.write_text(json.dumps(dataclasses.asdict(job)))
    runner = Runner(job, job_path, args.threads)
    say(
        f"\nN = {n:,} candidate rows in one {cadence_s // 60}-minute interval, "
        f"{partitions} partitions"
    )
    reset_interval(job, history=True)
    gen = runner.one(Task("generate", "generate"), "generator")
    data = {**gen.extra, "partitions": partitions}
    say(
        f"   generator     {gen.seconds:8.2f} s, peak {gen.peak_mb:,.0f} MB ({data['requests']:,} "
        f"requests, {data['users']:,} users)"
    )
    hist = runner.one(Task("history", "history"), "history")
    data["cache_rows"] = hist.extra["cache_rows"]
    say(f"   history       {hist.seconds:8.2f} s, peak {hist.peak_mb:,.0f} MB")
    others = {"generator": gen.peak_mb, "history": hist.peak_mb}

    def serve() -> TaskRun:
        run = runner.one(Task("serve", "serve"), "serving")
        say(f"   serving       {run.seconds:8.2f} s, peak {run.peak_mb:,.0f} MB (request logging)")
        return run

    others["serving"] = serve().peak_mb
    stages = run_stages(runner, workers=1)
    for stage in STAGES:
        run = stages[stage]
        say(
            f"   {stage:<8} {run.seconds:8.2f} s timed, {run.wall_s:7.1f} s wall, "
            f"{len(run.tasks)} processes, peak {run.peak_mb:,.0f} MB"
        )
    shard = stages["embed"].steps[0][1][0].extra["shards"][0]  # the plan's first shard
    ratio_run = runner.one(
        Task("ratio", "ratio", {"shard": shard}, tuple(shard["partitions"])), "ratio"
    )
    others["ratio"] = ratio_run.peak_mb
    two = None
    if pool:
        reset_interval(job, history=False)
        serve()
        two = run_stages(runner, workers=2)
        say("   2 workers: " + ", ".join(f"{s} {two[s].wall_s:.1f} s wall" for s in STAGES))
    reset_interval(job, history=True)
    shutil.rmtree(work, ignore_errors=True)
    return stages, data, others, ratio_run.extra, two


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args.job, args.task)
    started = time.perf_counter()
    args.project = f"bscale{os.getpid() % 100_000:05d}"
    runs: dict[tuple[str, int], StageRun] = {}
    data: dict[int, dict] = {}
    others: dict[int, dict] = {}
    ratios: dict[int, dict] = {}
    pool: dict[str, Any] | None = None
    sizes = list(args.sizes)
    with workspace(args) as ws:
        env = environment(args, ws.cfg)
        say("SOLARIS cycle cost against traffic (N = candidate rows per interval)")
        for k, v in env.items():
            say(f"   {k}: {v}")
        two_runs = None
        for n in sizes:
            pooled = n == sizes[-1] and not args.no_pool
            stages, data[n], others[n], ratios[n], two = run_size(args, ws, n, pooled)
            for stage, run in stages.items():
                runs[(stage, n)] = run
            if two is not None:
                two_runs = (n, stages, two)
        threads = (threads_per_task(args.threads, 1), threads_per_task(args.threads, 2))

        say("\n1. Workload per interval")
        workload_table(sizes, data, runs)
        say(
            "\n2. Time per stage: the task functions' calls, summed over the stage's task "
            "processes (one at a time); rows/s = N / seconds"
        )
        times = time_table(sizes, runs)
        say("   indented twice: a figure within the call above it (not added to the stage)")
        say(
            "\n2b. CPU seconds of the same calls (user + system, all threads): what the work "
            "costs whatever else runs on the machine"
        )
        cpu = time_table(sizes, runs, cpu=True)
        say("\n3. Wall time per stage (its task processes one at a time, imports included)")
        walls = wall_table(sizes, runs)
        say("\n4. Peak RSS of every process (MB; a stage: the largest of its task processes)")
        memory = memory_table(sizes, runs, others)
        parent_mb = _maxrss_mb()
        say(f"   bench parent process: {parent_mb:,.0f} MB")
        say("\n5. Embedding throughput against the FM's own pass (same pairs, same batches)")
        ratio = ratio_table(ratios, args.reps)
        if two_runs is not None:
            say(
                "\n6. Two workers against one: the interval's task processes 2 at a time (what "
                f"two workers do on this {os.cpu_count()}-core machine) against 1 at a time, "
                "wall seconds"
            )
            pool = pool_table(*two_runs, threads)
        say("\n7. Targets")
        verdicts = targets(sizes, runs, others, parent_mb)
    elapsed = time.perf_counter() - started
    say(f"\ntotal wall time {elapsed:.0f} s ({elapsed / 60:.1f} min)")
    if args.json:
        report = {
            "environment": env,
            "sizes": sizes,
            "data": data,
            "time": times,
            "cpu": cpu,
            "wall": walls,
            "memory": memory,
            "other_processes_mb": others,
            "parent_mb": parent_mb,
            "embedding_ratio": ratio,
            "two_workers": pool,
            "targets": verdicts,
            "runs": [
                {
                    "stage": r.stage,
                    "size": r.size,
                    "wall_s": r.wall_s,
                    "cpu_s": r.cpu_s,
                    "load": r.load,
                    "tasks": [
                        {
                            "kind": t.task.kind,
                            "partitions": t.task.partitions,
                            "wall_s": t.wall_s,
                            "peak_mb": t.peak_mb,
                            "parts": [dataclasses.asdict(p) for p in t.parts],
                        }
                        for t in r.tasks
                    ],
                }
                for r in runs.values()
            ],
            "elapsed_s": elapsed,
        }
        args.json.write_text(json.dumps(report, indent=2, default=_json_default))
        say(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
