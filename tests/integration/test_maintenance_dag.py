"""The maintenance DAG runs with ``dag.test()`` on a small state of its own: what is past
retention as of the run's interval end goes (cycle state, Feast's offline days, a DAG run in
the session's metadata DB through ``airflow db clean``), the rest stays, and each task
records what it did. Also: the state pruned on an S3 bucket (moto's server), and the
cleanup's connection in a task process where Airflow 3 has hidden its own."""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from solaris.config import SolarisConfig
from solaris.files import StatePath, atomic_write_bytes
from solaris.namespace import Namespace
from solaris.orchestration import maintenance
from solaris.orchestration.layout import CycleLayout, Interval, write_run_record
from solaris.orchestration.resources import CycleInputError

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DAY, H = 86_400, 3_600
GEN = "abc123"


@pytest.fixture
def namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A namespace of this test, its state and offline rows in ``tmp_path``: the settings
    the DAG file and its tasks read from the environment."""
    for name in [k for k in os.environ if k.startswith("SOLARIS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path / "artifacts"))
    monkeypatch.setenv("SOLARIS_STORE__REPO_PATH", str(tmp_path / "repo"))
    return f"mnt_{uuid.uuid4().hex[:8]}"


def _interval_files(layout: CycleLayout, interval: Interval) -> list[StatePath]:
    """What the cycle writes for one interval, written here."""
    files = [
        layout.request_log(interval),
        layout.selections(interval),
        layout.embeddings(interval, 0, GEN),
        layout.embeddings_done(interval),
        layout.run_record("solaris_candidates", interval.key),
        layout.run_record("solaris_enrichment", f"{interval.end:011d}-uagg"),
    ]
    for path in files:
        atomic_write_bytes(path, f"{interval.key} {path.name}".encode())
    return files


def _all_files(root: StatePath) -> set[str]:
    base = str(root).rstrip("/") + "/"
    return {str(p).removeprefix(base) for p in root.rglob("*") if p.is_file()}


def test_the_dag_prunes_state_offline_days_and_airflow_metadata_past_retention(
    namespace: str, tmp_path: Path
) -> None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType
    from sqlalchemy import select

    from solaris.local.airflow import LocalAirflow

    cfg = SolarisConfig.load(namespace=namespace)
    as_of = int(time.time()) // H * H  # the run's interval end: now, on the hour
    cutoff = as_of - cfg.cycle.retention_seconds
    layout = CycleLayout(Namespace.of(cfg))
    old = _interval_files(layout, Interval(cutoff - H, cutoff))
    new = _interval_files(layout, Interval(as_of - 2 * H, as_of - H))
    in_force = layout.verifier_publication(cutoff - 2 * DAY)
    atomic_write_bytes(in_force, b'{"path": "models/vm.pt"}')
    offline = Namespace.of(cfg).offline_root / "pair"
    old_day = datetime.fromtimestamp(cutoff - 2 * DAY, UTC).date()
    new_day = datetime.fromtimestamp(as_of - H, UTC).date()
    for day in (old_day, new_day):
        atomic_write_bytes(offline / f"date={day}" / "batch-cycle-1.parquet", b"rows")

    airflow = LocalAirflow(REPO / "dags")
    stale = f"manual__solaris_maintenance_test_{uuid.uuid4().hex[:8]}"
    started = datetime.fromtimestamp(cutoff - 10 * DAY, UTC)  # a run long past retention
    with create_session() as session:
        session.add(
            DagRun(
                dag_id=maintenance.DAG_ID,
                run_id=stale,
                run_type=DagRunType.MANUAL,
                state=DagRunState.SUCCESS,
                start_date=started,
                run_after=started,
            )
        )

    began = time.perf_counter()
    conf = {"namespace": namespace, "interval_start": as_of - H, "interval_end": as_of}
    result = airflow.run(maintenance.DAG_ID, conf)
    seconds = time.perf_counter() - began

    assert result.state == "success"
    assert not any(p.exists() for p in old) and all(p.is_file() for p in new)
    assert in_force.is_file()  # the verifier in force at the cutoff
    assert not (offline / f"date={old_day}").exists()
    assert (offline / f"date={new_day}" / "batch-cycle-1.parquet").is_file()
    with create_session() as session:
        run_ids = set(
            session.scalars(select(DagRun.run_id).where(DagRun.dag_id == maintenance.DAG_ID))
        )
    assert stale not in run_ids and result.run_id in run_ids
    records = {
        task: json.loads(layout.run_record(maintenance.DAG_ID, f"{as_of:011d}-{task}").read_text())
        for task in ("prune_state", "prune_offline", "clean_airflow_db")
    }
    assert all(r["interval_end"] == as_of and r["cutoff"] == cutoff for r in records.values())
    assert records["prune_state"]["removed"] == {
        "runs": 2,
        "request_log": 1,
        "selections": 1,
        "pair_embeddings": 1,
    }
    assert records["prune_offline"]["removed"] == {"pair": 1}
    cleaned = records["clean_airflow_db"]
    assert cleaned["tables"].get("dag_run", 0) >= 1 and cleaned["rows_deleted"] >= 1
    assert cleaned["clean_before"] == datetime.fromtimestamp(cutoff, UTC).isoformat()
    assert seconds < 30


def test_the_state_on_an_s3_bucket_is_pruned_like_a_folder(
    namespace: str, s3_bucket: str, tmp_path: Path
) -> None:
    cfg = SolarisConfig.load(namespace=namespace, cycle={"state_uri": f"{s3_bucket}/state"})
    layout = CycleLayout(Namespace.of(cfg))
    assert str(layout.root).startswith("s3://")
    as_of = 1_700_000_000 // H * H
    cutoff = as_of - cfg.cycle.retention_seconds
    old = Interval(cutoff - H, cutoff)
    going = _interval_files(layout, old)
    staying = _interval_files(layout, Interval(cutoff, cutoff + H))
    atomic_write_bytes(layout.plan(old, GEN), b'{"shards": 1}')
    going.append(layout.plan(old, GEN))
    write_run_record(layout, "solaris_training", f"{cutoff + DAY:011d}", {"published": False})
    atomic_write_bytes(layout.root / "notes.txt", b"unknown")
    before = _all_files(layout.root)

    figures = maintenance.prune_state(cfg, as_of)

    after = _all_files(layout.root)
    base = str(layout.root) + "/"
    assert before - after == {str(p).removeprefix(base) for p in going}
    assert all(p.is_file() for p in staying)
    assert figures["removed"] == {
        "runs": 2,
        "request_log": 1,
        "selections": 1,
        "pair_embeddings": 1,
    }
    assert figures["unknown"] == ["notes.txt"] and figures["bytes_removed"] > 0
    assert maintenance.prune_state(cfg, as_of)["removed_total"] == 0


def test_in_a_task_process_the_cleanup_finds_the_metadata_db_or_fails_naming_what_to_set(
    namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow 3 replaces a task process's connection variables by a blocked URL: the
    cleanup then uses SOLARIS_AIRFLOW_DB_URL, and without it refuses to report a cleanup of
    a database that is not the metadata DB (Airflow's default SQLite, empty) as done."""
    cfg = SolarisConfig.load(namespace=namespace)
    as_of = int(time.time()) // H * H
    session_db = os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]  # tests/conftest.py's
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "airflow-db-not-allowed:///")
    monkeypatch.setenv("SOLARIS_AIRFLOW_DB_URL", session_db)
    figures = maintenance.clean_airflow_db(cfg, as_of)
    assert figures["tables_checked"] >= 10  # it reached the session's metadata DB

    monkeypatch.delenv("SOLARIS_AIRFLOW_DB_URL")
    monkeypatch.delenv("AIRFLOW_CONN_AIRFLOW_DB", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "empty_home"))
    with pytest.raises(CycleInputError, match="SOLARIS_AIRFLOW_DB_URL"):
        maintenance.clean_airflow_db(cfg, as_of)
