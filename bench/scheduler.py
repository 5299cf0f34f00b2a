"""The cycle under Airflow's real scheduler against ``dag.test()``, interval by interval.

    .venv/bin/python -m bench.scheduler                    # LocalExecutor (make airflow)
    .venv/bin/python -m bench.scheduler --executor celery  # CeleryExecutor (make airflow-celery)

Needs ``make demo`` first (its models, its exported settings) and the local PostgreSQL and
Redis (RabbitMQ too for Celery). The same ``--intervals`` MovieLens intervals of
``--cadence`` minutes run twice, each in a fresh namespace of its own:

1. through ``dag.test()`` in a child process (SQLite in a temporary AIRFLOW_HOME), as the demo
   runs them: candidates, embeddings, enrichment per interval;
2. through the real scheduler: the launcher of ``make airflow`` (or ``make airflow-celery``)
   on a temporary AIRFLOW_HOME and a throwaway PostgreSQL database, one candidates run
   triggered per interval, its embeddings and enrichment runs started by the scheduler from
   the asset events, each interval after the previous one ended.

An interval's time under the scheduler is its candidates run queued -> its enrichment run
ended; ``dag.test`` is the sum of the three runs. The first interval pays the first task
process of each kind and is shown apart; the ratio is of the medians of the others.
The DAGs' schedules start in 2100 (SOLARIS_CYCLE__START), so only the triggered runs run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO_CONFIG = REPO / "artifacts" / "airflow" / "solaris.yaml"
POSTGRES = os.environ.get("SOLARIS_BENCH_POSTGRES", "postgresql+psycopg2://postgres@127.0.0.1:5432")
FIRST_INTERVAL = 891_302_400 + 3_600  # 1998-03-31 01:00 UTC, the demo's window, no midnight
NEVER = "2100-01-01T00:00:00+00:00"


def _settings(cfg_path: Path, namespace: str, cadence: float, out: Path):
    """The demo's settings in a fresh ``namespace``, which reads the demo's model version."""
    from solaris.config import SolarisConfig
    from solaris.local.cycle import export_config
    from solaris.model_versions import NEWEST, pin_version, pinned
    from solaris.namespace import Namespace

    cfg = SolarisConfig.load(cfg_path)
    root = Namespace.of(cfg).models_root
    source = pinned(root, cfg.namespace)
    pin_version(root, namespace, source.version if source else NEWEST, live=None)
    cfg = cfg.model_copy(
        update={
            "namespace": namespace,
            "replay": True,
            "selection": cfg.selection.model_copy(update={"cadence_minutes": cadence}),
        }
    )
    return cfg, export_config(cfg, out)


def _intervals(n: int, cadence: float):
    from solaris.orchestration.layout import Interval

    step = round(cadence * 60)
    return [Interval(FIRST_INTERVAL + i * step, FIRST_INTERVAL + (i + 1) * step) for i in range(n)]


def dag_test_part(cfg_path: Path, n: int, cadence: float, home: Path) -> list[float]:
    """Child process: the intervals through dag.test(); seconds per interval."""
    from solaris.local.airflow import LocalAirflow, configure_airflow
    from solaris.local.cycle import run_window
    from solaris.orchestration.resources import cycle_redis, reset_namespace

    cfg, path = _settings(
        cfg_path, f"bench_dagtest_{uuid.uuid4().hex[:6]}", cadence, home / "s.yaml"
    )
    os.environ.update(
        SOLARIS_CONFIG=str(path),
        SOLARIS_ARTIFACTS_DIR=str(cfg.artifacts_dir),
        AIRFLOW__LOGGING__LOGGING_LEVEL="ERROR",
    )
    redis = cycle_redis(cfg)
    reset_namespace(cfg, redis)
    try:
        configure_airflow(home / "airflow", REPO / "dags")
        airflow = LocalAirflow(REPO / "dags", gpu_pool=cfg.cycle.gpu_pool)
        report = run_window(
            airflow, _intervals(n, cadence), cfg, train_at_end=False, progress=False
        )
    finally:
        reset_namespace(cfg, redis)
    chain = ("solaris_candidates", "solaris_embeddings", "solaris_enrichment")
    return [sum(report.seconds[d][i] for d in chain) for i in range(n)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scheduler_part(cfg_path: Path, n: int, cadence: float, executor: str, tmp: Path):
    import psycopg2

    from solaris.local.scheduler import CHAIN, AirflowServices
    from solaris.orchestration.resources import cycle_redis, reset_namespace

    namespace = f"bench_sched_{uuid.uuid4().hex[:6]}"
    cfg, path = _settings(cfg_path, namespace, cadence, tmp / "s.yaml")
    redis = cycle_redis(cfg)
    reset_namespace(cfg, redis)
    server = POSTGRES.replace("postgresql+psycopg2://", "postgresql://")
    db = f"solaris_bench_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(f"{server}/postgres", connect_timeout=5)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{db}"')
    port = _free_port()
    env = {
        # Airflow settings of the caller pass through (AIRFLOW__SCHEDULER__... to compare);
        # where Airflow and SOLARIS keep their state is the bench's own.
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(
                ("SOLARIS_", "AIRFLOW_HOME", "AIRFLOW__DATABASE__", "AIRFLOW__API__")
            )
        },
        "AIRFLOW_HOME": str(tmp / "airflow"),
        "AIRFLOW__API__PORT": str(port),
        "SOLARIS_AIRFLOW_DB_URL": f"{POSTGRES}/{db}",
        "SOLARIS_CONFIG": str(path),
        "SOLARIS_NAMESPACE": namespace,
        "SOLARIS_ARTIFACTS_DIR": str(cfg.artifacts_dir),
        "SOLARIS_CYCLE__START": NEVER,
        "SOLARIS_SELECTION__CADENCE_MINUTES": str(cadence),
    }
    script = (
        REPO
        / "scripts"
        / ("airflow_celery.sh" if executor == "celery" else "airflow_standalone.sh")
    )
    services = AirflowServices(
        script, env, f"{POSTGRES}/{db}", tmp / "services.log", f"http://127.0.0.1:{port}"
    )
    timings = []
    try:
        with services:
            began = time.perf_counter()
            ready = services.wait_ready(CHAIN)
            print(f"  Airflow up and the DAGs parsed in {ready:.0f} s", flush=True)
            conf = {"namespace": namespace, "replay": True}
            for interval in _intervals(n, cadence):
                timing = services.run_interval(interval, conf)
                timings.append(timing)
                print(
                    f"  interval {interval.key}: {timing.seconds:5.1f} s "
                    f"(task time {timing.work_seconds:4.1f} s)",
                    flush=True,
                )
            total = time.perf_counter() - began
    finally:
        print(f"  components' output: {services.log_path}")
        reset_namespace(cfg, redis)
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.close()
    return timings, total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executor", choices=("local", "celery"), default="local")
    parser.add_argument("--intervals", type=int, default=8)
    parser.add_argument("--cadence", type=float, default=15.0, help="minutes per interval")
    parser.add_argument("--config", type=Path, default=DEMO_CONFIG, help="make demo's settings")
    parser.add_argument("--json", type=Path, help="also save the figures here")
    parser.add_argument("--dag-test-part", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dag_test_part:  # the child process
        seconds = dag_test_part(args.config, args.intervals, args.cadence, args.dag_test_part)
        print("DAGTEST " + json.dumps(seconds))
        return
    if not args.config.is_file():
        sys.exit(f"bench.scheduler: no {args.config}; run `make demo` first")

    with tempfile.TemporaryDirectory(prefix="solaris-bench-") as tmp_name:
        tmp = Path(tmp_name)
        print(f"{args.intervals} intervals of {args.cadence:g} min, dag.test() ...", flush=True)
        child = subprocess.run(
            [sys.executable, "-m", "bench.scheduler", "--config", str(args.config),
             "--intervals", str(args.intervals), "--cadence", str(args.cadence),
             "--dag-test-part", str(tmp / "dagtest")],
            cwd=REPO, capture_output=True, text=True, check=False,
        )  # fmt: skip
        line = [x for x in child.stdout.splitlines() if x.startswith("DAGTEST ")]
        if child.returncode != 0 or not line:
            sys.exit(f"the dag.test() part failed:\n{child.stdout[-3000:]}\n{child.stderr[-5000:]}")
        dag_test = json.loads(line[0][len("DAGTEST ") :])
        print(f"the same intervals under the real scheduler ({args.executor}) ...", flush=True)
        (tmp / "sched").mkdir()
        timings, total = scheduler_part(
            args.config, args.intervals, args.cadence, args.executor, tmp / "sched"
        )

    sched = [t.seconds for t in timings]
    work = [t.work_seconds for t in timings]
    print()
    print(f"{'interval':>24} {'dag.test s':>10} {'scheduler s':>11} {'ratio':>6} {'task s':>7}")
    for t, d in zip(timings, dag_test, strict=True):
        print(f"{t.interval.key:>24} {d:10.2f} {t.seconds:11.2f} {t.seconds / d:6.1f} "
              f"{t.work_seconds:7.2f}")  # fmt: skip
    med_d, med_s = statistics.median(dag_test[1:]), statistics.median(sched[1:])
    print(
        f"\nmedian of intervals 2..{len(sched)}: dag.test {med_d:.2f} s, scheduler {med_s:.2f} s "
        f"= {med_s / med_d:.1f}x (target <= 3x); the first interval {sched[0]:.1f} s "
        f"({sched[0] / dag_test[0]:.1f}x)"
    )
    print(
        f"under the scheduler: task time {statistics.median(work[1:]):.2f} s of the median "
        f"interval, the rest is scheduling (DAG runs created from asset events, tasks queued "
        f"and started); per DAG run (median s, start -> end): "
        + ", ".join(
            f"{d} {statistics.median(t.dag_seconds[d] for t in timings[1:]):.2f}"
            for d in timings[0].dag_seconds
        )
    )
    task_medians = {
        name.split(".", 1)[1]: statistics.median(t.tasks.get(name, 0.0) for t in timings[1:])
        for name in timings[0].tasks
    }
    print(
        "per task (median s over intervals 2..): "
        + ", ".join(f"{task} {seconds:.2f}" for task, seconds in task_medians.items())
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "executor": args.executor,
                    "cadence_minutes": args.cadence,
                    "dag_test_s": dag_test,
                    "scheduler_s": sched,
                    "task_s": work,
                    "per_dag_s": [t.dag_seconds for t in timings],
                    "ratio_median": med_s / med_d,
                    "total_s": total,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
