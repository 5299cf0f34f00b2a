"""The adopter's Airflow recipe of ``docs/adopting.md``, run as the guide writes it.

The guide's settings file, its ``prepare`` line and its ``fit-autoencoder`` command, then
``SOLARIS_CONFIG=... make airflow`` on a PostgreSQL metadata DB and the guide's
``scripts/airflow_replay.sh`` command. Only what would touch the developer's own machine is
moved: the settings file and the artifacts folder into a temporary folder, the Redis database
(8, this module's), the feature repo (a copy), AIRFLOW_HOME and the api-server's port. The
replay must run through the real scheduler to its last interval with no failed run: an
outside walk through the guide found three ways it failed (the artifacts folder overridden,
217 intervals instead of 10, a replay starting at midnight deadlocked).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import psycopg2
import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "adopting.md"
REDIS = "127.0.0.1:6379,db=8"  # this module's own database number
INTERVALS = 10  # what the guide says its replay runs


def _guide_parts() -> tuple[str, list[str], list[str]]:
    """The guide's settings file, its shell lines of the worked example, and its replay line."""
    text = GUIDE.read_text()
    settings = re.search(r"cat > /tmp/synthetic\.yaml <<'EOF'\n(.*?)\nEOF\n", text, re.S)
    assert settings, "the guide's settings file moved"
    block = text[settings.end() : text.index("```", settings.end())]
    lines = [line for line in block.splitlines() if line.startswith(".venv/bin/")]
    replay = re.search(r"^scripts/airflow_replay\.sh synthetic\w* .*$", text, re.M)
    assert replay, "the guide's replay command moved"
    return settings.group(1), lines, shlex.split(replay.group(0))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _runs(dsn: str) -> dict[tuple[str, str], int]:
    """``(dag_id, state)`` → count of the DAG runs in the metadata DB."""
    with psycopg2.connect(dsn, connect_timeout=5) as conn, conn.cursor() as cur:
        cur.execute("SELECT dag_id, state, count(*) FROM dag_run GROUP BY dag_id, state")
        return {(d, str(s)): int(n) for d, s, n in cur.fetchall()}


def _unfinished_tasks(dsn: str) -> dict[tuple[str, str, str], int]:
    """``(dag_id, task_id, state)`` → count of the task instances not (yet) successful: what
    a replay that did not finish was waiting on."""
    with psycopg2.connect(dsn, connect_timeout=5) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT dag_id, task_id, state, count(*) FROM task_instance"
            " WHERE state IS DISTINCT FROM 'success' GROUP BY dag_id, task_id, state"
        )
        return {(d, t, str(s)): int(n) for d, t, s, n in cur.fetchall()}


# The replay takes about 2 minutes here and 3.5 with two busy cores beside it; a slower CI
# machine gets room, and a replay that stalls fails with what it was waiting on (below)
# rather than at pytest-timeout's stack dump.
@pytest.mark.timeout(1_500)
def test_the_guides_airflow_recipe_replays_its_window_to_the_end(
    tmp_path: Path, postgres_db: str
) -> None:
    from solaris.connection import redis_client
    from solaris.namespace import Namespace
    from solaris.orchestration.layout import CycleLayout
    from solaris.store.feast_store import delete_project_keys

    text, lines, replay = _guide_parts()
    settings = yaml.safe_load(text)
    settings["artifacts_dir"] = str(tmp_path / "artifacts")
    config = tmp_path / "synthetic.yaml"
    config.write_text(yaml.safe_dump(settings))
    repo = tmp_path / "feature_repo"
    shutil.copytree(REPO / "feature_repo", repo, ignore=shutil.ignore_patterns("data"))
    port = _free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SOLARIS_"))},
        "SOLARIS_CONFIG": str(config),
        "SOLARIS_STORE__REDIS": REDIS,
        "SOLARIS_STORE__REPO_PATH": str(repo),
        "SOLARIS_AIRFLOW_DB_URL": postgres_db,
        "AIRFLOW_HOME": str(tmp_path / "airflow-home"),
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
    }
    namespace = replay[1]  # the replay's namespace, as the guide names it
    # The guide's set-up lines, but its `solaris cycle` (the same window with dag.test(),
    # tests/integration/test_synthetic_cycle.py): prepare, fit-autoencoder.
    for line in lines:
        if " cycle " in line:
            continue
        args = shlex.split(line.replace("/tmp/synthetic.yaml", str(config)))
        done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    log = (tmp_path / "airflow.log").open("w+")
    airflow = subprocess.Popen(
        ["make", "airflow"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    dsn = postgres_db.replace("postgresql+psycopg2://", "postgresql://")
    try:
        deadline = time.monotonic() + 240
        while True:
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{port}/api/v2/monitor/health"
                with urllib.request.urlopen(url, timeout=5) as reply:
                    if reply.status == 200:
                        break
            assert airflow.poll() is None, "make airflow exited; see airflow.log"
            assert time.monotonic() < deadline, "make airflow did not answer in time"
            time.sleep(1)
        done = subprocess.run(
            replay, cwd=REPO, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

        layout = CycleLayout(Namespace(namespace, tmp_path / "artifacts", repo))
        began = time.monotonic()
        deadline = began + 1_200
        while True:
            runs = _runs(dsn)
            failed = {k: n for k, n in runs.items() if k[1] == "failed"}
            assert not failed, f"failed DAG runs: {failed}"
            candidates = layout.recorded_intervals("solaris_candidates", ending_by=2**40)
            last = candidates[-1].end if candidates else None
            enriched = (
                last is not None
                and layout.run_record("solaris_enrichment", f"{last:011d}-nbr").is_file()
            )
            if len(candidates) == INTERVALS and enriched:
                break
            if time.monotonic() >= deadline:
                log.flush()
                tail = (tmp_path / "airflow.log").read_text(errors="replace")[-4000:]
                pytest.fail(
                    f"the replay did not finish in {time.monotonic() - began:.0f} s: "
                    f"{len(candidates)}/{INTERVALS} intervals; runs {runs}; "
                    f"unfinished tasks {_unfinished_tasks(dsn)}\nairflow.log:\n{tail}"
                )
            time.sleep(5)
    finally:
        stopped = subprocess.run(
            ["make", "-s", "airflow-stop"], cwd=REPO, env=env, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        with contextlib.suppress(ProcessLookupError):
            os.killpg(airflow.pid, signal.SIGKILL)
        airflow.wait(timeout=30)
        log.close()
        for name in (namespace, settings["namespace"]):  # the replay's, the scheduled runs'
            delete_project_keys(redis_client(REDIS), name)
    assert stopped.returncode == 0
    steps = [i.end - i.start for i in candidates]
    assert set(steps) == {settings["selection"]["cadence_minutes"] * 60}
    for dag_id in ("solaris_embeddings", "solaris_clustering"):
        assert list((layout.root / "runs" / dag_id).glob("*.json")), dag_id
