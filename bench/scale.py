"""Cost growth of the SOLARIS cycle with traffic: seconds, rows/s and memory per stage.

Run: ``.venv/bin/python -m bench.scale`` (N = 10^5, 10^6 and 10^7 candidate rows per
interval; ``--sizes 1e5,1e6`` to pick, ``--quick`` for 10^4 and 10^5). Redis at
``127.0.0.1:6379``, database 13 (``--redis`` for another), under a Feast project of its own
(``bscale<pid>``) whose keys are deleted before each size and at the end; no database is
flushed. Everything else lives in a temporary directory that is removed at the end.

Why: the cycle runs once per scheduling interval, so what must scale is the work of one
interval against the traffic of that interval. For each N the bench generates one interval of
seeded synthetic traffic (:func:`solaris.data.synthetic.generate_candidates`, its default
shape: 100,000 users, 50,000 items, Zipf popularity, 200 candidates per request, 60%
recurrence; the requests are spread over the ``selection.cadence_minutes`` interval) and
runs the library calls of the cycle's tasks on it, as the orchestration modules call them:

1. **selection** (``orchestration.candidates.select_interval``): the example's verifier
   (:class:`~solaris.examples.synthetic.RecurrenceVerifier`: its log index, then its
   scores) and :func:`~solaris.pipeline.select.select_candidates` with the budget
   ``selection.share`` and a ledger cache of ``--cache-intervals`` earlier ledgers (default
   TTL / cadence = 24, the steady state ``ledger_cache`` reads) of ``share × N`` rows each.
   Their user ids are shifted out of the traffic's range: they cost the lookup and skip
   nothing, so every N selects the same share.
2. **embedding** (``embeddings.embed_and_materialize``): the FM adapter's load (the example
   FM's log index) and :func:`~solaris.pipeline.embed.embed_pairs` (FM ``features`` →
   ``shared`` → autoencoder → ``z``, on CPU) of the distinct selected pairs, so this stage
   sees about ``share × N`` rows, not N. The FM is the example's
   :class:`~solaris.examples.synthetic.PairTowerFM` and the autoencoder a seeded
   :class:`~solaris.models.autoencoder.Autoencoder`, untrained: their cost does not depend
   on their weights. The whole interval is one call (one shard).
3. **store write** (the same task): :func:`~solaris.pipeline.materialize.pair_rows` and
   :func:`~solaris.pipeline.materialize.materialize` of the codes to the ``pair`` view
   (validation, offline parquet staging, the SOLARIS online store's bulk write to Redis,
   publication), with the online seconds reported apart.
4. **clustering** (``enrichment.rebuild_user_neighbours``, daily, not per interval; run
   here because the neighbour fill needs its table): user embeddings, cosine KNN, ``unn``.
5. **enrichment** (``enrichment.refresh_*``): the pair history, the ``uagg`` and ``iagg``
   aggregates and the ``nbr`` neighbour fill for the interval's candidates, each computed by
   :mod:`solaris.pipeline.enrich` and materialized.

The FM's and the verifier's log is the interval itself (the features of a pair read the
log strictly before the interval's end).

Each (stage, N) runs in a fresh process (``python -m bench.scale --child``) that reads its
inputs from the previous stage's parquet files, as a cycle task does. Memory is the
process's resident set: before each timed part the peak (``VmHWM``, which is also what
``getrusage`` reports as ``ru_maxrss``) is reset through ``/proc/self/clear_refs``, so a
part's peak is its own, not the set-up's; the table shows the stage's peak RSS and its growth
over the RSS at the stage's start. (tracemalloc would miss numpy's and torch's buffers.) The
exponent ``b`` of ``cost ~ N^b`` is a least-squares fit of ``log seconds`` on ``log N``
over the sizes run.

**Embedding against the FM's own pass**, on the same pairs in the same 8,192-row batches,
``--reps`` interleaved repetitions in a shuffled order after the stage's own run, median
per variant: ``cycle embed_pairs`` (the stage's call: also moves the models, copies ``z``
into one array and builds the Arrow table) against the **bare FM pass** (per batch
``fm.shared(fm.features(...))`` then ``autoencoder.encode``, under ``inference_mode``, the
codes kept as tensors: what the FM and the autoencoder must do whoever calls them); the
target is a throughput ratio ≥ 0.7. The **forward-only** variant (``shared`` + ``encode``
on batches whose features were built beforehand) shows how much of the FM's pass is its
feature lookup.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import random
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
    import pandas as pd
    import pyarrow as pa
    from feast import FeatureStore

__all__ = [
    "FULL_SIZES",
    "QUICK_SIZES",
    "STAGES",
    "Job",
    "Part",
    "fit_exponent",
    "main",
    "parse_sizes",
]

REDIS_DEFAULT = "127.0.0.1:6379,db=13"
REPO = Path(__file__).resolve().parents[1]
FEATURE_REPO = REPO / "feature_repo"
FULL_SIZES = (100_000, 1_000_000, 10_000_000)
QUICK_SIZES = (10_000, 100_000)
STAGES = ("select", "embed", "write", "cluster", "enrich")
TITLES = {
    "select": "selection (verifier scoring + budgeted selection)",
    "embed": "embedding on CPU (FM -> autoencoder -> z)",
    "write": "store write of the codes (pair view: offline + Redis)",
    "cluster": "clustering (daily: user embeddings, KNN, unn)",
    "enrich": "enrichment (uagg, iagg, nbr)",
}
FM_VERSION = "fm-scalebench01"  # 15 characters, like a real version
BATCH_SIZE = 8192  # embed_pairs' default batch
USER_SHIFT = 1 << 30  # the synthetic ledger cache's user ids: outside the traffic's range
HEARTBEAT_S = 30.0
INTERVAL_START = 1_699_999_200  # a multiple of 900 s (2023-11-14T22:00Z)


def say(text: str = "") -> None:
    print(text, flush=True)


# --------------------------------------------------------------------------------------------
# Sizes and the exponent fit
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


def fit_exponent(sizes: Sequence[float], costs: Sequence[float]) -> float:
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


def _reset_peak() -> bool:
    """Reset this process's peak RSS (``VmHWM``, Linux ≥ 4.0); False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _maxrss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class Part:
    """One timed library call of a stage: its input rows, seconds and memory (MB).

    ``within`` marks a figure that is part of the previous part's time (not summed)."""

    name: str
    rows: int
    seconds: float = 0.0
    rss_start_mb: float | None = None
    peak_mb: float | None = None
    within: bool = False


class Meter:
    """Times the parts of one stage and the peak RSS of each."""

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self.resettable = _reset_peak()

    @contextlib.contextmanager
    def part(self, name: str, rows: int) -> Iterator[Part]:
        p = Part(name, int(rows))
        self.resettable = _reset_peak() and self.resettable
        p.rss_start_mb = _status_mb("VmRSS")
        start = time.perf_counter()
        yield p
        p.seconds = time.perf_counter() - start
        p.peak_mb = _status_mb("VmHWM") or _maxrss_mb()
        self.parts.append(p)

    def note(self, name: str, rows: int, seconds: float) -> None:
        """A figure measured inside the previous part (e.g. its online seconds)."""
        self.parts.append(Part(name, int(rows), seconds, within=True))


# --------------------------------------------------------------------------------------------
# The job one child process runs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """Everything a stage process needs, written as JSON by the parent."""

    size: int
    seed: int
    share: float
    cache_intervals: int
    reps: int
    redis: str
    project: str
    repo: str  # the bench's copy of feature_repo/
    artifacts: str
    work: str  # this size's folder: the stages' parquet files and results
    z_dim: int
    start: int  # the interval [start, end)
    end: int

    @property
    def folder(self) -> Path:
        return Path(self.work)

    def config(self) -> SolarisConfig:
        """The bench's settings (the one configuration object the library calls get)."""
        return SolarisConfig(
            namespace=self.project,
            artifacts_dir=Path(self.artifacts),
            model={"z_dim": self.z_dim},
            selection={"share": self.share},
            store={"repo_path": Path(self.repo), "redis": self.redis},
        )

    def path(self, name: str) -> Path:
        return self.folder / name


def _spec(job: Job, cadence_s: int):
    from solaris.data.synthetic import SyntheticSpec

    n_requests = -(-job.size // SyntheticSpec(n_pairs=1).candidates_per_request)
    return SyntheticSpec(
        n_pairs=job.size,
        start_ts=job.start,
        mean_gap_seconds=cadence_s / (n_requests + 1),
        seed=job.seed,
    )


def _log_table(job: Job) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(job.path("log.parquet"))


def _store(job: Job) -> FeatureStore:
    from solaris.store.feast_store import open_feature_store

    return open_feature_store(job.config(), job.redis)


# --------------------------------------------------------------------------------------------
# Stages (each runs in its own process)
# --------------------------------------------------------------------------------------------


def stage_data(job: Job, meter: Meter) -> dict[str, Any]:
    """The interval's synthetic traffic, ``log.parquet`` (not a cycle stage: its input)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from solaris.data.synthetic import generate_candidates

    cadence_s = job.end - job.start
    spec = _spec(job, cadence_s)
    with meter.part("generate_candidates", job.size):
        table = pa.concat_tables(generate_candidates(spec)).combine_chunks()
    # The Poisson clock may overshoot the interval by a few gaps: those requests belong to
    # its last second (the interval's rows are all before its end).
    ts = pc.min_element_wise(table["ts"], pa.scalar(job.end - 1, pa.int64()))
    table = table.set_column(table.schema.get_field_index("ts"), table.schema.field("ts"), ts)
    pq.write_table(table, job.path("log.parquet"))
    return {
        "rows": table.num_rows,
        "requests": int(pc.count_distinct(table["request_id"]).as_py()),
        "users": int(pc.count_distinct(table["user_id"]).as_py()),
        "items": int(pc.count_distinct(table["item_id"]).as_py()),
    }


def _ledger_cache(job: Job, candidates: pd.DataFrame) -> pd.DataFrame:
    """``--cache-intervals`` earlier ledgers of ``share × N`` rows each, as ``ledger_cache``
    returns them; user ids shifted by ``USER_SHIFT`` (never a candidate's pair)."""
    import pandas as pd

    cfg = job.config()
    per = math.ceil(job.share * job.size)
    n = per * job.cache_intervals
    rng = np.random.default_rng(job.seed + 1)
    rows = rng.integers(0, len(candidates), size=n)
    cadence_s = job.end - job.start
    ttl_s = round(cfg.selection.ttl_hours * 3600)
    ledger_end = job.start - cadence_s * np.repeat(np.arange(job.cache_intervals), per)
    return pd.DataFrame(
        {
            "user_id": candidates["user_id"].to_numpy()[rows] + USER_SHIFT,
            "item_id": candidates["item_id"].to_numpy()[rows],
            "expires_at": (ledger_end + ttl_s).astype(np.int64),
        }
    )


def stage_select(job: Job, meter: Meter) -> dict[str, Any]:
    from solaris.examples.synthetic import LogFeatures, RecurrenceVerifier
    from solaris.orchestration.resources import write_parquet
    from solaris.pipeline.select import select_candidates

    cfg = job.config()
    log = _log_table(job)
    candidates = log.select(["request_id", "user_id", "item_id", "ts"]).to_pandas()
    cache = _ledger_cache(job, candidates)
    with meter.part("verifier load (LogFeatures index)", job.size):
        verifier = RecurrenceVerifier(LogFeatures.from_table(log))
    with meter.part("verifier score", job.size):
        scores = verifier.score(candidates)
    with meter.part("select_candidates (budget, ledger cache)", job.size):
        selected = select_candidates(
            candidates, scores, share=cfg.selection.share, cache=cache if len(cache) else None
        )
    ttl_s = round(cfg.selection.ttl_hours * 3600)
    ledger = selected.assign(
        label=np.zeros(len(selected), np.int8),
        computed_at=np.int64(job.end),
        expires_at=np.int64(job.end + ttl_s),
    )
    write_parquet(ledger, job.path("selection.parquet"))
    return {"selected": len(selected), "cache_rows": len(cache)}


def _models(job: Job, log: pa.Table):
    """The example FM over the interval's log, and a seeded autoencoder (untrained)."""
    import torch

    from solaris.examples.synthetic import LogFeatures, PairTowerFM, SyntheticFoundationModel
    from solaris.models.autoencoder import Autoencoder

    spec = _spec(job, job.end - job.start)
    torch.manual_seed(job.seed)
    module = PairTowerFM(user_buckets=64, n_items=spec.n_items)
    fm = SyntheticFoundationModel(module, LogFeatures.from_table(log), FM_VERSION)
    ae = Autoencoder(in_dim=fm.shared_dim, z_dim=job.z_dim, hidden=2 * fm.shared_dim)
    return fm, ae


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


def stage_embed(job: Job, meter: Meter) -> dict[str, Any]:
    import pyarrow.parquet as pq
    import torch

    from solaris.data.schemas import write_table
    from solaris.pipeline.embed import embed_pairs

    log = _log_table(job)
    ledger = pq.read_table(job.path("selection.parquet"), columns=["user_id", "item_id"])
    pairs = ledger.to_pandas().drop_duplicates(ignore_index=True)  # as plan_shards does
    with meter.part("FM load (the example FM's log index)", job.size):
        fm, ae = _models(job, log)
    with meter.part("embed_pairs (features -> FM -> autoencoder)", len(pairs)):
        codes = embed_pairs(
            pairs,
            fm=fm,
            autoencoder=ae,
            computed_at=job.end,
            fm_version=FM_VERSION,
            batch_size=BATCH_SIZE,
            device="cpu",
        )
    write_table(codes, job.path("codes.parquet"), "pair_embeddings", z_dim=job.z_dim)

    users = pairs["user_id"].to_numpy(np.int64)
    items = pairs["item_id"].to_numpy(np.int64)
    ts = np.full(len(pairs), job.end, np.int64)
    batches = [
        fm.features(users[s : s + BATCH_SIZE], items[s : s + BATCH_SIZE], ts[s : s + BATCH_SIZE])
        for s in range(0, len(pairs), BATCH_SIZE)
    ]
    variants: dict[str, Callable[[], object]] = {
        "cycle embed_pairs": lambda: embed_pairs(
            pairs, fm=fm, autoencoder=ae, computed_at=job.end, fm_version=FM_VERSION
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
        "ratio_runs": times,
    }


def stage_write(job: Job, meter: Meter) -> dict[str, Any]:
    from solaris.data.schemas import read_table
    from solaris.pipeline.materialize import materialize, pair_rows
    from solaris.store.connection import redis_client
    from solaris.store.contract import PAIR
    from solaris.store.footprint import view_footprint

    store = _store(job)
    table = read_table(job.path("codes.parquet"), "pair_embeddings", z_dim=job.z_dim)
    n = table.num_rows
    with meter.part("pair_rows (validate)", n):
        rows = pair_rows(table, z_dim=job.z_dim)
    with meter.part("materialize pair (validate, offline, Redis, publish)", n):
        result = materialize(store, "pair", rows, batch_id=f"scale-{job.size}")
    meter.note("online write to Redis", n, result.online_seconds)
    meter.note("offline parquet staging", n, result.offline_seconds)
    client = redis_client(job.redis, timeout_s=60.0)
    try:
        fp = view_footprint(client, job.project, PAIR)
    finally:
        client.close()
    return {
        "pairs": n,
        "online_rows_per_s": result.online_rows_per_second,
        "redis_keys": fp.keys,
        "redis_rows": fp.rows,
        "redis_bytes": fp.bytes,
    }


def _history(job: Job, meter: Meter):
    from solaris.data.schemas import read_table
    from solaris.pipeline.enrich import PairHistory

    table = read_table(job.path("codes.parquet"), "pair_embeddings", z_dim=job.z_dim)
    with meter.part("pair history (PairHistory.from_table)", table.num_rows):
        return PairHistory.from_table(table)


def stage_cluster(job: Job, meter: Meter) -> dict[str, Any]:
    from solaris.orchestration.resources import write_parquet
    from solaris.pipeline.enrich import user_neighbours
    from solaris.pipeline.materialize import materialize

    cfg = job.config()
    store = _store(job)
    history = _history(job, meter)
    codes = len(history.pairs)
    with meter.part("user_neighbours (user embeddings + cosine KNN)", codes):
        rows = user_neighbours(history, job.end, cfg, FM_VERSION)
    with meter.part("materialize unn", len(rows)):
        materialize(store, "unn", rows, batch_id=f"scale-{job.size}")
    write_parquet(rows.drop(columns=["event_ts"]), job.path("neighbours.parquet"))
    return {"users": len(rows)}


def stage_enrich(job: Job, meter: Meter) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from solaris.pipeline.enrich import item_aggregates, neighbour_rows, user_aggregates
    from solaris.pipeline.materialize import materialize

    cfg = job.config()
    store = _store(job)
    targets = pq.read_table(job.path("log.parquet"), columns=["user_id", "item_id"]).to_pandas()
    neighbours = pq.read_table(job.path("neighbours.parquet")).to_pandas()
    history = _history(job, meter)
    codes = len(history.pairs)
    batch = f"scale-{job.size}"
    out: dict[str, Any] = {}
    for view, build in (("uagg", user_aggregates), ("iagg", item_aggregates)):
        with meter.part(f"{view}: {build.__name__}", codes):
            rows = build(history, job.end, cfg, FM_VERSION)
        with meter.part(f"{view}: materialize", len(rows)):
            materialize(store, view, rows, batch_id=batch)
        out[f"{view}_rows"] = len(rows)
    with meter.part("nbr: neighbour_rows (the interval's candidates)", len(targets)):
        rows = neighbour_rows(targets, neighbours, history, job.end, cfg, FM_VERSION)
    with meter.part("nbr: materialize", len(rows)):
        materialize(store, "nbr", rows, batch_id=batch)
    out["nbr_rows"] = len(rows)
    return out


RUNNERS: dict[str, Callable[[Job, Meter], dict[str, Any]]] = {
    "data": stage_data,
    "select": stage_select,
    "embed": stage_embed,
    "write": stage_write,
    "cluster": stage_cluster,
    "enrich": stage_enrich,
}


def run_child(stage: str, job_path: Path) -> int:
    """The child's side: run one stage, write ``<stage>.json`` beside the job."""
    job = Job(**json.loads(job_path.read_text()))
    meter = Meter()
    extra = RUNNERS[stage](job, meter)
    result = {
        "stage": stage,
        "parts": [dataclasses.asdict(p) for p in meter.parts],
        "extra": extra,
        "peak_reset": meter.resettable,
        "process_maxrss_mb": _maxrss_mb(),
    }
    job.path(f"{stage}.json").write_text(json.dumps(result, default=float))
    return 0


# --------------------------------------------------------------------------------------------
# The parent: one process per (stage, N), heartbeat, tables
# --------------------------------------------------------------------------------------------


@dataclass
class StageRun:
    stage: str
    size: int
    parts: list[Part]
    extra: dict[str, Any]
    wall_s: float  # the child process, start to exit (imports and I/O included)
    child_maxrss_mb: float  # wait4's ru_maxrss of the child: its whole life

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.parts if not p.within)

    @property
    def rows(self) -> int:
        """The stage's rows/s are the interval's traffic per second (N / seconds)."""
        return self.size

    @property
    def peak_mb(self) -> float:
        return max((p.peak_mb or 0.0) for p in self.parts if not p.within)

    @property
    def growth_mb(self) -> float:
        start = next(p.rss_start_mb for p in self.parts if not p.within) or 0.0
        return self.peak_mb - start


def spawn(stage: str, job: Job, job_path: Path) -> StageRun:
    """Run one stage in a fresh process; print a heartbeat while it runs."""
    cmd = [sys.executable, "-m", "bench.scale", "--child", stage, "--job", str(job_path)]
    began = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO)
    next_beat = began + HEARTBEAT_S
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        now = time.perf_counter()
        if now >= next_beat:
            say(f"      ... {stage} at N={job.size:,}: {now - began:.0f} s")
            next_beat += HEARTBEAT_S
        time.sleep(0.2)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - began
    if proc.returncode != 0:
        raise RuntimeError(f"stage {stage} at N={job.size:,} failed (exit {proc.returncode})")
    data = json.loads(job.path(f"{stage}.json").read_text())
    if not data["peak_reset"]:
        say("      note: the peak RSS could not be reset here: peaks include the set-up")
    parts = [Part(**p) for p in data["parts"]]
    return StageRun(stage, job.size, parts, data["extra"], wall, usage.ru_maxrss / 1024)


def _fmt_s(seconds: float) -> str:
    return f"{seconds:9.2f}" if seconds < 1000 else f"{seconds:9.0f}"


def _fmt_b(b: float) -> str:
    return "    -" if not math.isfinite(b) else f"{b:5.2f}"


def _fmt_rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds:12,.0f}" if seconds > 0 else f"{'-':>12}"


def report_stage_line(run: StageRun) -> None:
    say(
        f"   {run.stage:<8} N={run.size:>12,}: {run.seconds:8.2f} s timed "
        f"({run.wall_s:.1f} s process), peak {run.peak_mb:,.0f} MB "
        f"(+{run.growth_mb:,.0f} over its start)"
    )


def time_table(sizes: Sequence[int], runs: dict[tuple[str, int], StageRun]) -> list[dict]:
    """Seconds and rows/s per stage and part, per N, with b; printed and returned."""
    label_w = 56
    head = "".join(f"{'N=' + format(n, ','):>22}" for n in sizes)
    say(f"   {'stage / part':<{label_w}}{head}      b")
    say(f"   {'':<{label_w}}" + f"{'s':>9} {'rows/s':>12}" * len(sizes) + "  (s~N^b)")
    out = []
    for stage in STAGES:
        present = [n for n in sizes if (stage, n) in runs]
        if not present:
            continue
        first = runs[(stage, present[0])]
        rows = [(TITLES[stage], None)] + [(p.name, k) for k, p in enumerate(first.parts)]
        for label, k in rows:
            cells, secs = [], []
            for n in sizes:
                run = runs.get((stage, n))
                if run is None:
                    cells.append(f"{'':>22}")
                    secs.append(None)
                    continue
                if k is None:
                    s, r = run.seconds, run.rows
                else:
                    s, r = run.parts[k].seconds, run.parts[k].rows
                cells.append(f"{_fmt_s(s)} {_fmt_rate(r, s)}")
                secs.append(s)
            b = fit_exponent(
                [n for n, s in zip(sizes, secs, strict=True) if s is not None],
                [s for s in secs if s is not None],
            )
            within = k is not None and first.parts[k].within
            name = label if k is None else ("      " if within else "   ") + label
            say(f"   {name[:label_w]:<{label_w}}{''.join(cells)}  {_fmt_b(b)}")
            out.append({"stage": stage, "part": label, "seconds": secs, "b": b})
    return out


def memory_table(sizes: Sequence[int], runs: dict[tuple[str, int], StageRun]) -> list[dict]:
    head = "".join(f"{'N=' + format(n, ','):>24}" for n in sizes)
    say(f"   {'stage':<28}{head}   b(+MB)")
    say(f"   {'':<28}" + f"{'peak MB':>12}{'+MB':>12}" * len(sizes) + "  (~N^b)")
    out = []
    for stage in STAGES:
        cells, growth, sz = [], [], []
        for n in sizes:
            run = runs.get((stage, n))
            if run is None:
                cells.append(f"{'':>24}")
                continue
            cells.append(f"{run.peak_mb:12,.0f}{run.growth_mb:12,.0f}")
            growth.append(run.growth_mb)
            sz.append(n)
        if not sz:
            continue
        b = fit_exponent(sz, growth)
        say(f"   {stage:<28}{''.join(cells)}  {_fmt_b(b)}")
        out.append({"stage": stage, "sizes": sz, "growth_mb": growth, "b": b})
    return out


def workload_table(sizes: Sequence[int], data: dict[int, dict], runs: dict) -> None:
    def get(stage: str, n: int, key: str) -> str:
        run = runs.get((stage, n))
        value = run.extra.get(key) if run else None
        return f"{value:>16,}" if isinstance(value, int) else f"{'-':>16}"

    head = "".join(f"{'N=' + format(n, ','):>16}" for n in sizes)
    say(f"   {'':<44}{head}")
    rows = [
        ("requests", lambda n: f"{data[n]['requests']:>16,}"),
        ("distinct users / items", lambda n: f"{data[n]['users']:>8,}/{data[n]['items']:<7,}"),
        ("ledger-cache rows (earlier intervals)", lambda n: get("select", n, "cache_rows")),
        ("selected rows (the budget)", lambda n: get("select", n, "selected")),
        ("distinct pairs embedded and written", lambda n: get("embed", n, "pairs")),
        ("users with codes (unn rows)", lambda n: get("cluster", n, "users")),
        ("uagg / iagg rows", lambda n: f"{_pair(runs, n, 'uagg_rows', 'iagg_rows'):>16}"),
        ("nbr rows (imputed candidates)", lambda n: get("enrich", n, "nbr_rows")),
        ("Redis bytes per cached pair", lambda n: _bytes_per_pair(runs, n)),
    ]
    for label, cell in rows:
        say(f"   {label:<44}{''.join(cell(n) for n in sizes)}")


def _pair(runs: dict, n: int, a: str, b: str) -> str:
    run = runs.get(("enrich", n))
    return f"{run.extra[a]:,}/{run.extra[b]:,}" if run else "-"


def _bytes_per_pair(runs: dict, n: int) -> str:
    run = runs.get(("write", n))
    if not run or not run.extra.get("redis_rows"):
        return f"{'-':>16}"
    return f"{run.extra['redis_bytes'] / run.extra['redis_rows']:>16.1f}"


def ratio_table(sizes: Sequence[int], runs: dict, reps: int) -> list[dict]:
    say(
        f"   {'N':>12} {'pairs':>10} {'cycle rows/s':>14} {'bare FM rows/s':>15} "
        f"{'cycle/bare':>11} {'forward-only rows/s':>20} {'cycle/fwd':>10}"
    )
    out = []
    for n in sizes:
        run = runs.get(("embed", n))
        if run is None:
            continue
        pairs = run.extra["pairs"]
        med = run.extra["ratio"]
        rate = {k: pairs / v for k, v in med.items()}
        cyc, bare, fwd = rate["cycle embed_pairs"], rate["bare FM pass"], rate["forward only"]
        verdict = "ok" if cyc / bare >= 0.7 else "BELOW 0.7"
        say(
            f"   {n:>12,} {pairs:>10,} {cyc:>14,.0f} {bare:>15,.0f} "
            f"{cyc / bare:>7.2f} {verdict:<3} {fwd:>20,.0f} {cyc / fwd:>10.3f}"
        )
        out.append({"size": n, "pairs": pairs, "rows_per_s": rate, "cycle_over_bare": cyc / bare})
    say(
        f"   medians of {reps} interleaved runs per variant (shuffled, after a warm-up); target "
        "cycle/bare >= 0.7"
    )
    return out


def environment(args: argparse.Namespace, cfg: SolarisConfig) -> dict[str, str]:
    import pandas as pd
    import pyarrow as pa
    import torch

    from solaris.store.connection import redis_client

    client = redis_client(args.redis, timeout_s=10.0)
    try:
        redis_version = client.info("server")["redis_version"]
    finally:
        client.close()
    return {
        **machine_facts(),
        "numpy / pandas / pyarrow / torch": (
            f"{np.__version__} / {pd.__version__} / {pa.__version__} / {torch.__version__} "
            f"({torch.get_num_threads()} threads)"
        ),
        "redis-server": f"{redis_version} at {args.redis}, project {args.project}",
        "cycle": (
            f"share {cfg.selection.share}, cadence {cfg.selection.cadence_minutes:g} min, "
            f"TTL {cfg.selection.ttl_hours:g} h, ledger cache {args.cache_intervals} "
            f"intervals, z_dim {cfg.model.z_dim}"
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
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--child", choices=sorted(RUNNERS), help=argparse.SUPPRESS)
    parser.add_argument("--job", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sizes is None:
        args.sizes = QUICK_SIZES if args.quick else FULL_SIZES
    return args


@dataclass
class Workspace:
    tmp: Path
    repo: Path
    cfg: SolarisConfig
    notes: list[str] = field(default_factory=list)


@contextlib.contextmanager
def workspace(args: argparse.Namespace) -> Iterator[Workspace]:
    """A temporary repo copy with the definitions applied; Redis keys removed around it."""
    from solaris.store.connection import redis_client
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


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args.child, args.job)
    started = time.perf_counter()
    args.project = f"bscale{os.getpid() % 100_000:05d}"
    runs: dict[tuple[str, int], StageRun] = {}
    data: dict[int, dict] = {}
    with workspace(args) as ws:
        cfg = ws.cfg
        env = environment(args, cfg)
        say("SOLARIS cycle cost against traffic (N = candidate rows per interval)")
        for k, v in env.items():
            say(f"   {k}: {v}")
        cadence_s = round(cfg.selection.cadence_minutes * 60)
        from solaris.store.connection import redis_client
        from solaris.store.feast_store import delete_project_keys

        for n in args.sizes:
            work = ws.tmp / f"n{n}"
            work.mkdir()
            job = Job(
                size=n,
                seed=args.seed,
                share=cfg.selection.share,
                cache_intervals=args.cache_intervals,
                reps=args.reps,
                redis=args.redis,
                project=args.project,
                repo=str(ws.repo),
                artifacts=str(cfg.artifacts_dir),
                work=str(work),
                z_dim=cfg.model.z_dim,
                start=INTERVAL_START,
                end=INTERVAL_START + cadence_s,
            )
            job_path = work / "job.json"
            job_path.write_text(json.dumps(dataclasses.asdict(job)))
            say(f"\nN = {n:,} candidate rows in one {cadence_s // 60}-minute interval")
            gen = spawn("data", job, job_path)
            data[n] = gen.extra
            say(
                f"   data     N={n:>12,}: {gen.parts[0].seconds:8.2f} s to generate "
                f"({data[n]['requests']:,} requests, {data[n]['users']:,} users)"
            )
            for stage in STAGES:
                run = spawn(stage, job, job_path)
                runs[(stage, n)] = run
                report_stage_line(run)
            # Each size starts from an empty project: the next one's writes land on fresh keys.
            client = redis_client(args.redis, timeout_s=60.0)
            try:
                delete_project_keys(client, args.project)
            finally:
                client.close()
            shutil.rmtree(ws.repo / "data" / "offline", ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)

        sizes = list(args.sizes)
        say("\n1. Workload per interval")
        workload_table(sizes, data, runs)
        say(
            "\n2. Time per stage (the library calls, in a fresh process per stage and N; "
            "inputs read before timing)"
        )
        times = time_table(sizes, runs)
        say("   indented twice: a figure within the part above it (not added to the stage)")
        say(
            "\n3. Peak memory per stage (RSS of its process during the timed calls; +MB: "
            "growth over the RSS at the stage's start)"
        )
        memory = memory_table(sizes, runs)
        say("\n4. Embedding throughput against the FM's own pass (same pairs, same batches)")
        ratios = ratio_table(sizes, runs, args.reps)
    elapsed = time.perf_counter() - started
    say(f"\ntotal wall time {elapsed:.0f} s ({elapsed / 60:.1f} min)")
    if args.json:
        report = {
            "environment": env,
            "sizes": sizes,
            "data": data,
            "time": times,
            "memory": memory,
            "embedding_ratio": ratios,
            "runs": [
                {
                    "stage": r.stage,
                    "size": r.size,
                    "parts": [dataclasses.asdict(p) for p in r.parts],
                    "extra": r.extra,
                    "process_s": r.wall_s,
                    "process_maxrss_mb": r.child_maxrss_mb,
                }
                for r in runs.values()
            ],
            "elapsed_s": elapsed,
        }
        args.json.write_text(json.dumps(report, indent=2, default=float))
        say(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
