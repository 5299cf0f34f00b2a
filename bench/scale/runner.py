"""The parent: task processes in a pool, the stages in order, the interval reset between
runs."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.scale.common import (
    ENV_PARTITIONS,
    ENV_TRAFFIC,
    HEARTBEAT_S,
    REPO,
    STAGES,
    group_shards,
    say,
    threads_per_task,
)
from bench.scale.enrichment import enrich_figures
from bench.scale.jobs import Job, StageRun, Task, TaskRun, json_default
from bench.scale.meter import Part

__all__ = ["Runner", "reset_interval", "run_stages"]


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
        path.write_text(json.dumps(dataclasses.asdict(task), default=json_default))
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
        plan.extra |= enrich_figures(aggs, r["uagg"], r["iagg"], r["users"], fills)
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
