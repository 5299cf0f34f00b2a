"""The cycle's DAGs run in this process with ``dag.test()``: the demo and the DAG tests.

``dag.test()`` is Airflow's own way to run a DAG without a scheduler: it creates a real DAG
run in the metadata DB, runs every task (mapped ones too) through the task runner, records
asset events and queues the DAGs they schedule. What it does not do is start the downstream
DAG runs, so :class:`LocalAirflow` reads each asset event back from the metadata DB and hands
its extra to the next DAG as the run's conf, which is the same information the scheduler
would pass through ``triggering_asset_events``.

Airflow reads its configuration when it is first imported, so :func:`configure_airflow` must
run before anything imports ``airflow``.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solaris.errors import SolarisError

__all__ = ["AirflowRunError", "LocalAirflow", "RunResult", "configure_airflow"]


class AirflowRunError(SolarisError, RuntimeError):
    """A DAG did not import, or a DAG run did not succeed."""


def configure_airflow(home: Path, dags_folder: Path, db_url: str | None = None) -> None:
    """Point Airflow at ``home`` (SQLite there unless ``db_url``) and ``dags_folder``."""
    home = Path(home).resolve()
    if "airflow" in sys.modules and os.environ.get("AIRFLOW_HOME") != str(home):
        raise AirflowRunError(
            f"airflow was imported before configure_airflow({home}); its settings are fixed"
        )
    home.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(Path(dags_folder).resolve()),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        # Asset events queue runs of unpaused DAGs only, as with `make airflow`.
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=db_url or f"sqlite:///{home}/airflow.db",
    )


@dataclass
class RunResult:
    """One finished DAG run."""

    dag_id: str
    run_id: str
    state: str
    seconds: float
    asset_extras: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


class LocalAirflow:
    """The DAGs of ``dags_folder``, a migrated metadata DB and the ``gpu`` pool.

    Args:
        dags_folder: the project's ``dags/``.
        gpu_pool: pool of the embedding tasks (one slot, created if missing).
    """

    def __init__(self, dags_folder: Path, gpu_pool: str = "gpu") -> None:
        from airflow.dag_processing.dagbag import DagBag
        from airflow.models.pool import Pool
        from airflow.utils import db

        db.initdb()  # creates the tables once; a no-op on a migrated DB
        Pool.create_or_update_pool(gpu_pool, 1, "SOLARIS FM embedding", include_deferred=False)
        self.bag = DagBag(str(dags_folder))
        if self.bag.import_errors:
            errors = "\n".join(f"{k}: {v}" for k, v in self.bag.import_errors.items())
            raise AirflowRunError(f"DAGs in {dags_folder} failed to import:\n{errors}")

    def run(self, dag_id: str, conf: dict[str, Any], *, logical_date=None) -> RunResult:
        """Run ``dag_id`` once with ``conf``; raise unless the run succeeded.

        Returns the run with the extras of the asset events it emitted, by asset URI.
        """
        dag = self.bag.dags.get(dag_id)
        if dag is None:
            raise AirflowRunError(f"no DAG {dag_id!r} in {sorted(self.bag.dags)}")
        began = time.perf_counter()
        kwargs = {"run_conf": conf}
        if logical_date is not None:
            kwargs["logical_date"] = logical_date
        dag_run = dag.test(**kwargs)
        seconds = time.perf_counter() - began
        state = str(getattr(dag_run.state, "value", dag_run.state))
        if state != "success":
            raise AirflowRunError(
                f"DAG run {dag_run.run_id} of {dag_id} ended {state}; see its task logs above"
            )
        return RunResult(dag_id, dag_run.run_id, state, seconds, self.asset_events(dag_run))

    @staticmethod
    def asset_events(dag_run) -> dict[str, list[dict[str, Any]]]:
        """The extras of the asset events ``dag_run`` emitted, by asset name (the URI as the
        DAG file wrote it; Airflow normalises the stored URI)."""
        from airflow.models.asset import AssetEvent, AssetModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            rows = session.execute(
                select(AssetModel.name, AssetEvent.extra)
                .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
                .where(
                    AssetEvent.source_dag_id == dag_run.dag_id,
                    AssetEvent.source_run_id == dag_run.run_id,
                )
                .order_by(AssetEvent.id)
            ).all()
        out: dict[str, list[dict[str, Any]]] = {}
        for name, extra in rows:
            out.setdefault(name, []).append(dict(extra or {}))
        return out

    @staticmethod
    def queued_dags(name: str) -> set[str]:
        """DAGs the scheduler would start for pending events of the asset ``name``."""
        from airflow.models.asset import AssetDagRunQueue, AssetModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            return set(
                session.scalars(
                    select(AssetDagRunQueue.target_dag_id)
                    .join(AssetModel, AssetModel.id == AssetDagRunQueue.asset_id)
                    .where(AssetModel.name == name)
                )
            )
