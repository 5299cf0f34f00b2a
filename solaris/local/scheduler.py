"""The cycle under Airflow's real scheduler on this machine: ``make airflow`` (LocalExecutor)
or ``make airflow-celery`` (CeleryExecutor, two workers) started as a child process group,
intervals triggered one at a time, and their DAG runs timed from the metadata DB.

What the scheduler benchmark (``bench.scheduler``) and the Celery integration test share.
Runs are triggered with the ``airflow dags trigger`` CLI and read back with plain SQL on the
PostgreSQL metadata DB (``dag_run`` and ``task_instance``), so this process never imports
Airflow and may itself run ``dag.test()`` against another AIRFLOW_HOME.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solaris.errors import SolarisError
from solaris.orchestration.candidates import DAG_ID as CANDIDATES_DAG
from solaris.orchestration.embeddings import DAG_ID as EMBEDDINGS_DAG
from solaris.orchestration.enrichment import ENRICHMENT_DAG_ID
from solaris.orchestration.layout import Interval

__all__ = ["CHAIN", "AirflowServices", "IntervalTiming", "ServicesError"]

# The DAGs one interval runs through, in order (each triggered by the previous one's asset).
CHAIN = (CANDIDATES_DAG, EMBEDDINGS_DAG, ENRICHMENT_DAG_ID)
REPO = Path(__file__).resolve().parents[2]


class ServicesError(SolarisError, RuntimeError):
    """Airflow's components did not start, or a DAG run did not succeed in time."""


@dataclass
class IntervalTiming:
    """One interval through :data:`CHAIN` under the scheduler."""

    interval: Interval
    seconds: float  # the candidates run queued -> the enrichment run ended
    dag_seconds: dict[str, float] = field(default_factory=dict)  # run start -> end, per DAG
    task_seconds: dict[str, float] = field(default_factory=dict)  # summed task durations
    tasks: dict[str, float] = field(default_factory=dict)  # "<dag>.<task>" -> summed seconds
    runs: dict[str, str] = field(default_factory=dict)  # run ids

    @property
    def work_seconds(self) -> float:
        return sum(self.task_seconds.values())


class AirflowServices:
    """``script`` (``scripts/airflow_standalone.sh`` or ``scripts/airflow_celery.sh``) running
    in its own process group, with ``env`` (AIRFLOW_HOME, SOLARIS_AIRFLOW_DB_URL, ...).

    Args:
        script: the launcher.
        env: its whole environment.
        db_url: the PostgreSQL metadata DB (SQLAlchemy form), read with psycopg2.
        log_path: where the components' output goes.
        api_url: the api-server, polled until it answers.
    """

    def __init__(
        self,
        script: Path,
        env: Mapping[str, str],
        db_url: str,
        log_path: Path,
        api_url: str,
    ) -> None:
        self.script, self.env, self.log_path, self.api_url = script, dict(env), log_path, api_url
        self.db_url = db_url
        self.dsn = db_url.replace("postgresql+psycopg2://", "postgresql://", 1)
        self.process: subprocess.Popen[bytes] | None = None
        self._started = 0.0

    def __enter__(self) -> AirflowServices:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            ["bash", str(self.script)],
            cwd=REPO,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped as a whole
        )
        log.close()
        self._started = time.time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM to the launcher, which stops its components' process group itself (20 s,
        then SIGKILL: ``scripts/airflow_stop.sh``); then SIGKILL to both groups for anything
        left. The components run in a group of their own (``airflow_group``: the group id in
        ``$AIRFLOW_HOME/standalone.pgid``), so killing the launcher's group alone could leave
        a busy Celery worker, which waits on its task at SIGTERM, running."""
        if self.process is None:
            return
        components = self._components_group()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        # Components started by the script may outlive it (their own sessions).
        for group in (self.process.pid, components):
            if group is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)

    def _components_group(self) -> int | None:
        """The group id this launcher wrote (a file older than its start is another's)."""
        home = self.env.get("AIRFLOW_HOME")
        if not home:
            return None
        path = Path(home) / "standalone.pgid"
        try:
            if path.stat().st_mtime < self._started - 1:
                return None
            text = path.read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _alive(self) -> None:
        if self.process is None or self.process.poll() is not None:
            raise ServicesError(f"{self.script.name} exited; its output:\n{self.log_tail()}")

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        import psycopg2

        with psycopg2.connect(self.dsn, connect_timeout=10) as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            rows = cur.fetchall()
        conn.close()
        return rows

    def wait_ready(self, dag_ids: Sequence[str], timeout_s: float = 300.0) -> float:
        """Wait until the api-server answers and the DAG processor has serialised
        ``dag_ids``; returns the seconds waited."""
        began = time.monotonic()
        while True:
            self._alive()
            if self._api_up():
                try:
                    found = {
                        r[0]
                        for r in self._query(
                            "SELECT dag_id FROM serialized_dag WHERE dag_id = ANY(%s)",
                            (list(dag_ids),),
                        )
                    }
                except Exception:  # tables not migrated yet
                    found = set()
                if found >= set(dag_ids):
                    return time.monotonic() - began
                self._no_import_errors()
            if time.monotonic() - began > timeout_s:
                raise ServicesError(
                    f"Airflow not ready after {timeout_s:.0f} s (api-server at {self.api_url}, "
                    f"DAGs {sorted(dag_ids)}):\n{self.log_tail()}"
                )
            time.sleep(1.0)

    def _no_import_errors(self) -> None:
        """Raise at once when the DAG processor recorded a DAG file it could not import."""
        try:
            rows = self._query("SELECT filename, stacktrace FROM import_error")
        except Exception:  # tables not migrated yet
            return
        if rows:
            detail = "\n".join(f"{name}:\n{trace[-1500:]}" for name, trace in rows)
            raise ServicesError(f"the DAG processor could not import DAG files:\n{detail}")

    def _api_up(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.api_url}/api/v2/monitor/health", timeout=5):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def airflow(self, *args: str) -> str:
        """An ``airflow`` CLI command with the services' environment; its stdout."""
        done = subprocess.run(
            [str(REPO / ".venv" / "bin" / "airflow"), *args],
            cwd=REPO,
            env={**self.env, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.db_url},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise ServicesError(f"airflow {' '.join(args)} failed:\n{done.stderr[-4000:]}")
        return done.stdout

    def trigger(self, dag_id: str, conf: Mapping[str, Any]) -> str:
        """Trigger ``dag_id`` with ``conf``; returns the run id."""
        run_id = f"solaris__{int(time.time() * 1000)}"
        self.airflow("dags", "trigger", dag_id, "--run-id", run_id, "--conf", json.dumps(conf))
        return run_id

    def _runs(self, dag_id: str, after_id: int = 0) -> list[tuple]:
        return self._query(
            "SELECT id, run_id, state, queued_at, start_date, end_date FROM dag_run "
            "WHERE dag_id = %s AND id > %s ORDER BY id",
            (dag_id, after_id),
        )

    def last_run_id(self, dag_id: str) -> int:
        rows = self._query("SELECT COALESCE(MAX(id), 0) FROM dag_run WHERE dag_id = %s", (dag_id,))
        return int(rows[0][0])

    def wait_run(
        self, dag_id: str, *, run_id: str | None = None, after_id: int = 0, timeout_s: float
    ) -> tuple:
        """The first run of ``dag_id`` (``run_id``, or the first created after the row
        ``after_id``) once it has ended; raises unless it succeeded."""
        began = time.monotonic()
        while True:
            self._alive()
            runs = [r for r in self._runs(dag_id, after_id) if run_id in (None, r[1])]
            if runs and runs[0][2] in ("success", "failed"):
                if runs[0][2] != "success":
                    raise ServicesError(
                        f"{dag_id} run {runs[0][1]} ended {runs[0][2]}; task states: "
                        f"{self.task_states(dag_id, runs[0][1])}\n{self.log_tail()}"
                    )
                return runs[0]
            if time.monotonic() - began > timeout_s:
                raise ServicesError(
                    f"no finished {dag_id} run after {timeout_s:.0f} s (runs: {runs})\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.2)

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        rows = self._query(
            "SELECT task_id, map_index, state FROM task_instance WHERE dag_id = %s AND run_id = %s",
            (dag_id, run_id),
        )
        return {f"{t}[{m}]" if m >= 0 else t: str(s) for t, m, s in rows}

    def task_seconds(self, dag_id: str, run_id: str) -> dict[str, float]:
        """Seconds each task of the run took (start -> end; mapped tasks summed)."""
        rows = self._query(
            "SELECT task_id, SUM(EXTRACT(EPOCH FROM end_date - start_date)) FROM "
            "task_instance WHERE dag_id = %s AND run_id = %s GROUP BY task_id",
            (dag_id, run_id),
        )
        return {task: float(seconds or 0.0) for task, seconds in rows}

    def run_interval(
        self, interval: Interval, conf: Mapping[str, Any], timeout_s: float = 600.0
    ) -> IntervalTiming:
        """Trigger the candidates run of ``interval`` and wait for its embeddings and
        enrichment runs (the scheduler starts them from the asset events)."""
        after = {dag_id: self.last_run_id(dag_id) for dag_id in CHAIN[1:]}
        run_id = self.trigger(CANDIDATES_DAG, {**conf, **interval.as_dict()})
        timing = IntervalTiming(interval, 0.0)
        rows = {CANDIDATES_DAG: self.wait_run(CANDIDATES_DAG, run_id=run_id, timeout_s=timeout_s)}
        for dag_id in CHAIN[1:]:
            rows[dag_id] = self.wait_run(dag_id, after_id=after[dag_id], timeout_s=timeout_s)
        for dag_id, (_, rid, _, _, start, end) in rows.items():
            timing.runs[dag_id] = rid
            timing.dag_seconds[dag_id] = (end - start).total_seconds()
            tasks = self.task_seconds(dag_id, rid)
            timing.task_seconds[dag_id] = sum(tasks.values())
            timing.tasks.update({f"{dag_id}.{task}": sec for task, sec in tasks.items()})
        queued = rows[CANDIDATES_DAG][3]
        timing.seconds = (rows[ENRICHMENT_DAG_ID][5] - queued).total_seconds()
        return timing
