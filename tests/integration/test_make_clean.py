"""`make clean` resets what the README says it resets, and nothing else: the demo
namespace's Redis keys and streams, Airflow's home, the feature repo's data, the artifacts,
the venv and the caches; another namespace's keys stay.

It runs in a scratch copy of the Makefile and scripts whose ``.venv`` is a link to this
checkout's (removing the link, as `make clean` does, leaves the real venv alone)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from solaris.connection import redis_client

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_make_clean_resets_the_demo_namespace_and_the_repository_state(
    tmp_path: Path, redis_connection: str
) -> None:
    scratch = tmp_path / "repo"
    (scratch / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "Makefile", scratch / "Makefile")
    shutil.copy(REPO / "scripts" / "airflow_stop.sh", scratch / "scripts" / "airflow_stop.sh")
    (scratch / ".venv").symlink_to(REPO / ".venv")
    made = [
        "artifacts/namespaces/demo/cycle/state.json",
        "artifacts/models/fm.pt",
        ".airflow/airflow.cfg",
        "feature_repo/data/offline/demo/pair/part-0.parquet",
        "feature_repo/data/registry.db",
        ".pytest_cache/v/cache/nodeids",
        ".ruff_cache/CACHEDIR.TAG",
    ]
    for name in made:
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        (scratch / name).write_text("x")

    other = f"keep{uuid.uuid4().hex[:6]}"
    client = redis_client(redis_connection, timeout_s=5.0)
    demo_keys = ["demo:pair:{u:1}", "demo:uagg:{u:1}", "demo:iagg"]
    try:
        for key in demo_keys:
            client.set(key, b"record")
        client.xadd("demo:misses", {"user_id": "1", "item_id": "2", "ts": "3"})
        client.set(f"{other}:pair:{{u:1}}", b"record")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SOLARIS_", "AIRFLOW"))}
        env["SOLARIS_STORE__REDIS"] = redis_connection
        done = subprocess.run(
            ["make", "-s", "clean"], cwd=scratch, env=env, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "reset namespace demo: Feast project demo" in done.stdout, done.stdout

        left = [name for name in made if (scratch / name).exists()]
        assert not left, left
        for folder in ("artifacts", ".airflow", "feature_repo/data", ".venv"):
            assert not (scratch / folder).exists() and not (scratch / folder).is_symlink()
        assert (REPO / ".venv" / "bin" / "python").exists()  # the link went, not the venv
        assert client.exists(*demo_keys, "demo:misses") == 0
        assert client.get(f"{other}:pair:{{u:1}}") == b"record"
    finally:
        client.delete(*demo_keys, "demo:misses", f"{other}:pair:{{u:1}}")
        client.close()
