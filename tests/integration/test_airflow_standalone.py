"""`make airflow` in check mode: the DB migrates and the "gpu" pool exists, on SQLite and on
the local PostgreSQL (``postgresql+psycopg2://postgres@127.0.0.1:5432``, trust auth; override
with ``SOLARIS_TEST_POSTGRES``). A PostgreSQL that does not answer fails the test.

And `make airflow` for real: ``airflow standalone`` is started, and every socket its process
tree listens on is bound to the loopback (the api-server on AIRFLOW__API__HOST, no task-log
server on every interface), at the address the script printed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import psutil
import psycopg2
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "airflow_standalone.sh"
AIRFLOW = REPO / ".venv" / "bin" / "airflow"


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
    assert "Airflow UI    http://127.0.0.1:8080 " in out
    assert "Listening on  127.0.0.1:8080, this machine only" in out
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


# -- a real start: what listens, and where -----------------------------------------------------


def _as_in_a_terminal() -> None:
    """In the child before ``exec``: SIGINT and SIGQUIT back to their defaults, as a
    terminal's foreground job has them. A runner that started the suite in the background
    passes them ignored, and a shell cannot trap a signal ignored at its start, so the
    script's Ctrl-C handling would go untested."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(root: psutil.Process) -> set[tuple[str, int, int]]:
    """``(address, port, pid)`` of every listening TCP socket of ``root``'s process tree."""
    tree = {root.pid} | {p.pid for p in root.children(recursive=True)}
    return {
        (c.laddr.ip, c.laddr.port, c.pid)
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.pid in tree
    }


def _stop(proc: subprocess.Popen, home: Path | None = None) -> list[psutil.Process]:
    """Ctrl-C to the whole session (as a terminal would), then SIGKILL what is left; returns
    the processes of the tree (psutil matches them by pid and start time, so a reused pid is
    never killed). With ``home``, the components' own group in its ``standalone.pgid`` is
    killed too: a failed stop must not leave them to the rest of the suite."""
    pgid_file = home / "standalone.pgid" if home is not None else None
    if pgid_file is not None and pgid_file.is_file():
        with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
            os.killpg(int(pgid_file.read_text()), signal.SIGKILL)
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:  # stopped already (make airflow-stop)
        proc.wait(timeout=10)
        return []
    with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=15)
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    proc.wait(timeout=10)
    psutil.wait_procs(tree, timeout=10)
    return tree


@pytest.mark.parametrize("stop", ["make airflow-stop", "ctrl-c", "sigterm-to-its-pid"])
def test_standalone_listens_on_the_loopback_only_and_stops_whole(tmp_path: Path, stop: str) -> None:
    """The api-server binds the printed loopback address and nothing else listens beyond
    it; ``make airflow-stop`` from another shell, Ctrl-C in the terminal (SIGINT to the
    script's process group only: the components run in a group of their own), or a SIGTERM
    to the script's PID alone (the drill's stop, which left the scheduler, the api-server
    and the workers running) stops every process of the tree."""
    home = tmp_path / "airflow-home"
    port = _free_port()
    env = _env(
        home,
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__WORKERS="1",  # one uvicorn worker starts faster; binding is the same
        # Nothing to run: the DAGs stay paused, and a task could not reach any Redis.
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="True",
        SOLARIS_STORE__REDIS="127.0.0.1:1",
        SOLARIS_ARTIFACTS_DIR=str(tmp_path / "artifacts"),
    )
    log = (tmp_path / "standalone.log").open("w+")
    proc = subprocess.Popen(
        ["bash", str(SCRIPT)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stopped as a whole
        preexec_fn=_as_in_a_terminal,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        root = psutil.Process(proc.pid)
        while not any(p == port for _, p, _ in _listening(root)):
            assert proc.poll() is None, (
                f"standalone exited:\n{(tmp_path / 'standalone.log').read_text()[-4000:]}"
            )
            assert time.monotonic() < deadline, "the api-server did not listen in time"
            time.sleep(0.5)
        with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=10) as reply:
            assert reply.status == 200
        # The scheduler and the triggerer are up (their task-log servers would be by now).
        while not all(
            any(name in " ".join(p.cmdline()) for p in root.children(recursive=True))
            for name in ("airflow scheduler", "airflow triggerer")
        ):
            assert time.monotonic() < deadline, "the scheduler or triggerer did not start"
            time.sleep(0.5)
        time.sleep(3)
        listening = _listening(root)
        # Either way stops every process of the tree (a LocalExecutor worker ignores
        # SIGTERM; stopped by its PID alone, `airflow standalone` left its components).
        tree_before = [root, *root.children(recursive=True)]
        assert (home / "standalone.pgid").is_file()
        if stop == "make airflow-stop":
            stopped = subprocess.run(
                ["make", "-s", "airflow-stop"], cwd=REPO, env=env, capture_output=True,
                text=True, timeout=60,
            )  # fmt: skip
            assert stopped.returncode == 0, stopped.stdout + stopped.stderr
            assert "Airflow stopped" in stopped.stdout
        elif stop == "ctrl-c":  # the terminal's Ctrl-C reaches the script's group only
            assert _pgid(root.children()[0]) != proc.pid
            os.killpg(proc.pid, signal.SIGINT)
            assert proc.wait(timeout=60) == 130
        else:  # `kill <pid>` of the launcher, nothing else
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=60) == 130
        psutil.wait_procs(tree_before, timeout=10)
        survivors = [
            p for p in tree_before if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        ]
        assert not survivors, f"left running by {stop}: {survivors}"
        assert not (home / "standalone.pgid").exists()
    finally:
        tree = _stop(proc, home)
        log.seek(0)
        output = log.read()
        log.close()
    assert {(ip, p) for ip, p, _ in listening if p == port} == {("127.0.0.1", port)}
    beyond = {(ip, p) for ip, p, _ in listening if not ip.startswith("127.") and ip != "::1"}
    assert not beyond, f"listening beyond the loopback: {beyond}"
    assert f"Airflow UI    {url}   (the SOLARIS page: {url}/solaris/)" in output
    assert "--skip-serve-logs" not in output  # the shim is silent
    assert "Starting log server" not in output
    assert not [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_a_rerun_replay_cancels_its_earlier_backfills_but_never_another_namespaces(
    tmp_path: Path, postgres_db: str
) -> None:
    """The drill's case: an interrupted airflow_replay.sh left its backfills active, and the
    rerun (after wiping the namespace) failed with AlreadyRunningBackfill. On Airflow's own
    schema (migrated), the script's first step cancels that namespace's backfills, and
    refuses, before anything is deleted, when another namespace's backfill holds a DAG."""
    env = _env(tmp_path / "home", AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=postgres_db)
    _run([str(AIRFLOW), "db", "migrate"], env)
    dsn = postgres_db.replace("postgresql+psycopg2://", "postgresql://")

    def backfill(dag_id: str, namespace: str) -> int:
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute(
                "INSERT INTO backfill (dag_id, from_date, to_date, dag_run_conf, is_paused, "
                "reprocess_behavior, max_active_runs, created_at, updated_at) VALUES "
                "(%s, now(), now(), %s, false, 'completed', 1, now(), now()) RETURNING id",
                (dag_id, json.dumps({"namespace": namespace, "replay": True})),
            )
            return int(cur.fetchone()[0])

    def active() -> dict[int, bool]:
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute("SELECT id, completed_at IS NULL FROM backfill")
            return dict(cur.fetchall())

    def stop(namespace: str) -> subprocess.CompletedProcess[str]:
        python = REPO / ".venv" / "bin" / "python"
        return subprocess.run(
            [str(python), "-m", "solaris.local.backfills", namespace], cwd=REPO, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    ours = [backfill("solaris_clustering", "r_old"), backfill("solaris_candidates", "r_old")]
    done = stop("r_old")
    assert done.returncode == 0, done.stderr
    assert "cancelled backfill" in done.stdout
    assert not any(active()[b] for b in ours)

    other = backfill("solaris_candidates", "other")
    refused = stop("r_new")
    assert refused.returncode == 1
    assert f"#{other} of solaris_candidates (namespace other)" in refused.stderr
    assert "Nothing was deleted" in refused.stderr
    assert active()[other]  # never touched


def test_make_airflow_stop_stops_every_process_of_the_celery_layout(
    tmp_path: Path, postgres_db: str
) -> None:
    """`make airflow-celery`'s six components run in a process group of their own, kept in
    AIRFLOW_HOME/standalone.pgid: `make airflow-stop` from another shell leaves none."""
    home = tmp_path / "airflow-home"
    port = _free_port()
    queue = f"t{uuid.uuid4().hex[:8]}"  # queues of its own: no other run's tasks reach it
    env = _env(
        home,
        SOLARIS_AIRFLOW_DB_URL=postgres_db,
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__WORKERS="1",
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="True",
        AIRFLOW__OPERATORS__DEFAULT_QUEUE=queue,
        SOLARIS_CYCLE__GPU_QUEUE=f"{queue}_gpu",
        SOLARIS_CELERY_CONCURRENCY="1",
        SOLARIS_STORE__REDIS="127.0.0.1:1",
        SOLARIS_ARTIFACTS_DIR=str(tmp_path / "artifacts"),
    )
    log = (tmp_path / "celery.log").open("w+")
    proc = subprocess.Popen(
        ["bash", str(REPO / "scripts" / "airflow_celery.sh")],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        root = psutil.Process(proc.pid)
        wanted = [f"airflow {c}" for c in ("api-server", "scheduler", "dag-processor")]
        wanted += ["airflow triggerer", "airflow celery worker"]
        while not (home / "standalone.pgid").is_file() or not all(
            any(name in _command(p) for p in root.children(recursive=True)) for name in wanted
        ):
            assert proc.poll() is None, (tmp_path / "celery.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "the components did not start in time"
            time.sleep(0.5)
        group = int((home / "standalone.pgid").read_text())
        assert group != os.getpgid(proc.pid)  # not the script's own group: one of its own
        members = [p for p in psutil.process_iter() if _pgid(p) == group]
        assert len(members) >= 6, members
        stopped = subprocess.run(
            ["make", "-s", "airflow-stop"], cwd=REPO, env=env, capture_output=True, text=True,
            timeout=90,
        )  # fmt: skip
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert "Airflow stopped" in stopped.stdout
        psutil.wait_procs(members, timeout=10)
        survivors = [p for p in members if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not survivors, f"left running by make airflow-stop: {survivors}"
        assert proc.wait(timeout=60) != 0  # the script ends with its components
        assert not (home / "standalone.pgid").exists()
    finally:
        _stop(proc)
        log.close()


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # exited meanwhile
        return ""


def _pgid(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except (ProcessLookupError, PermissionError):
        return None
