"""The demo's Airflow stage never shows the Redis password: not in what it prints, not in
what it returns; the settings it exports for the task runs are the owner's only (0600).

The DAG runs themselves are replaced (they need Airflow, models and a request log: the
end-to-end demo test runs them); the stage's own printing, summary and export are real.
"""

from __future__ import annotations

import contextlib
import json
import stat
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from solaris.config import CycleConfig, SolarisConfig, StoreConfig
from solaris.connection import RedisTarget
from solaris.local import demo
from solaris.local.cycle import CycleReport


@pytest.fixture
def no_dag_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stand-ins for Airflow, Redis and the DAG runs; collects the connections they got."""
    from solaris.local import airflow
    from solaris.store import local_redis

    seen: list[RedisTarget] = []

    @contextlib.contextmanager
    def redis_for(configured):
        yield configured, "configured"

    def reset_namespace(cfg, redis, *, force=False):
        seen.append(redis)

    monkeypatch.setattr(local_redis, "redis_for", redis_for)
    monkeypatch.setattr(airflow, "configure_airflow", lambda home, dags: None)
    monkeypatch.setattr(airflow, "LocalAirflow", lambda dags, gpu_pool: object())
    monkeypatch.setattr(demo, "reset_namespace", reset_namespace)
    monkeypatch.setattr(demo, "run_window", lambda airflow, intervals, cfg: CycleReport())
    monkeypatch.setattr(demo, "served_example", lambda *args: {})
    monkeypatch.setattr(
        demo,
        "library_replay",
        lambda *args: SimpleNamespace(coverage=0.0, n_eval_impressions=0),
    )
    return seen


def test_airflow_stage_prints_and_returns_no_password_and_exports_settings_0600(
    tmp_path: Path, no_dag_runs: list[str]
) -> None:
    secret = f"s3cr3t-{uuid.uuid4()}"
    connection = f"127.0.0.1:6379,db=11,username=solaris,password={secret}"
    cfg = SolarisConfig(
        namespace="demo_t",
        artifacts_dir=tmp_path / "artifacts",
        store=StoreConfig(redis=connection),
        cycle=CycleConfig(
            dags_folder=Path(__file__).resolve().parents[3] / "dags",
            airflow_home=tmp_path / "airflow_home",
            demo_days=0.1,
        ),
    )
    printed: list[str] = []
    summary = demo.run_airflow_stage(
        cfg, eval_from=891_302_400, fm_version="fm-1", echo=printed.append
    )

    # the runs got the whole connection
    assert [target.connection_string for target in no_dag_runs] == [connection]
    output = "\n".join(printed)
    assert "password=***" in output and "username=solaris" in output
    assert secret not in output
    assert secret not in json.dumps(summary, default=str)
    exported = tmp_path / "artifacts" / "airflow" / "solaris.yaml"
    assert stat.S_IMODE(exported.stat().st_mode) == 0o600
    assert SolarisConfig.load(exported).store.redis == RedisTarget.parse(connection)
