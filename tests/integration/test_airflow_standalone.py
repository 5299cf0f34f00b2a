"""`make airflow` in check mode: the DB migrates and the "gpu" pool exists, on SQLite and on
the local PostgreSQL (``postgresql+psycopg2://postgres@127.0.0.1:5432``, trust auth; override
with ``SOLARIS_TEST_POSTGRES``). A PostgreSQL that does not answer fails the test."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "airflow_standalone.sh"
AIRFLOW = REPO / ".venv" / "bin" / "airflow"
POSTGRES = os.environ.get("SOLARIS_TEST_POSTGRES", "postgresql+psycopg2://postgres@127.0.0.1:5432")


def _env(airflow_home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AIRFLOW") and k not in {"SOLARIS_AIRFLOW_DB_URL"}
    }
    return {**env, "AIRFLOW_HOME": str(airflow_home), "SOLARIS_AIRFLOW_CHECK": "0", **extra}


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def _check_mode(env: dict[str, str], db_env: dict[str, str]) -> None:
    done = _run(["bash", str(SCRIPT), "--check"], env)
    out = done.stdout + done.stderr
    assert "Database migration done" in out
    assert "check mode: not starting Airflow" in out
    # `airflow standalone` starts its components as `airflow` subprocesses: from the venv.
    assert f"airflow on PATH: {AIRFLOW}" in out
    assert "http://localhost:8080" in out
    assert "simple_auth_manager_passwords.json.generated" in out

    # The pool, read back by a separate CLI call that sees only the DB settings.
    pools = _run([str(AIRFLOW), "pools", "get", "gpu", "-o", "json"], {**env, **db_env})
    [pool] = json.loads(pools.stdout[pools.stdout.index("[") :])
    assert pool["pool"] == "gpu"
    assert int(pool["slots"]) == 1

    again = _run(["bash", str(SCRIPT), "--check"], env)  # a rerun is harmless
    assert "Database migration done" in again.stdout + again.stderr


def test_check_mode_on_sqlite(tmp_path: Path) -> None:
    home = tmp_path / "airflow-home"
    env = _env(home)
    db_env = {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db"}
    _check_mode(env, db_env)
    assert (home / "airflow.db").is_file()


@pytest.fixture
def postgres_db() -> Iterator[str]:
    """A throwaway database on the local PostgreSQL; its SQLAlchemy URL."""
    server = POSTGRES.replace("postgresql+psycopg2://", "postgresql://")
    try:
        admin = psycopg2.connect(f"{server}/postgres", connect_timeout=5)
    except psycopg2.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL at {server} does not answer (start it or set SOLARIS_TEST_POSTGRES): {exc}"
        )
    admin.autocommit = True
    name = f"solaris_airflow_{uuid.uuid4().hex[:8]}"
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{POSTGRES}/{name}"
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def test_check_mode_on_postgres(tmp_path: Path, postgres_db: str) -> None:
    home = tmp_path / "airflow-home"
    env = _env(home, SOLARIS_AIRFLOW_DB_URL=postgres_db)
    _check_mode(env, {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres_db})
    assert not (home / "airflow.db").exists()


REPLAY = REPO / "scripts" / "airflow_replay.sh"


def test_replay_script_shows_its_usage_and_refuses_sqlite_before_touching_anything(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path / "home", SOLARIS_ARTIFACTS_DIR=str(tmp_path / "artifacts"))
    usage = subprocess.run(
        ["bash", str(REPLAY), "--help"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert usage.returncode == 0 and "NAMESPACE FROM TO" in usage.stdout
    wrong = subprocess.run(
        ["bash", str(REPLAY), "only_one"], cwd=REPO, env=env, capture_output=True
    )
    assert wrong.returncode == 2
    refused = subprocess.run(
        ["bash", str(REPLAY), "replay_t", "1998-03-30T22:00:00+00:00", "1998-03-31T21:00:00+00:00"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1
    assert "SQLite" in refused.stderr and "SOLARIS_AIRFLOW_DB_URL" in refused.stderr
    assert not (tmp_path / "artifacts" / "namespaces").exists()
