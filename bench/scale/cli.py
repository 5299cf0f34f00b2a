"""The command line (``python -m bench.scale``): the arguments, the workspace (a repo copy
and a Redis namespace of its own), one size's run, and ``main``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.machine import machine_facts
from bench.scale.child import run_child
from bench.scale.common import (
    FEATURE_REPO,
    FULL_SIZES,
    INTERVAL_START,
    QUICK_SIZES,
    REDIS_DEFAULT,
    ROWS_PER_PARTITION,
    STAGES,
    parse_sizes,
    partition_count,
    say,
    threads_per_task,
)
from bench.scale.jobs import Job, StageRun, Task, TaskRun, json_default
from bench.scale.meter import maxrss_mb
from bench.scale.runner import Runner, reset_interval, run_stages
from bench.scale.tables import (
    memory_table,
    pool_table,
    ratio_table,
    targets,
    time_table,
    wall_table,
    workload_table,
)
from solaris.config import SolarisConfig

__all__ = ["Workspace", "environment", "main", "parse_args", "run_size", "size_config", "workspace"]

# The --help line: the first line of bench.scale's docstring.
DESCRIPTION = (
    "Cost growth of the SOLARIS cycle with traffic: the cycle's tasks, partitioned by user."
)


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
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=DESCRIPTION)
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
        parent_mb = maxrss_mb()
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
        args.json.write_text(json.dumps(report, indent=2, default=json_default))
        say(f"figures written to {args.json}")
    return 0
