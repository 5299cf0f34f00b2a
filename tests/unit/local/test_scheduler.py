"""``AirflowServices.stop`` leaves no process of the launcher's components, even one that
ignores SIGTERM (a Celery worker finishing its task) when the launcher is killed before its
own stopper escalates: real processes, a launcher with the contract of ``airflow_group``
(the components in a process group of their own, its id in ``$AIRFLOW_HOME/standalone.pgid``,
``scripts/airflow_stop.sh`` on SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from solaris.local.scheduler import REPO, AirflowServices

LAUNCHER = """
set -u
setsid bash -c 'trap "" TERM; while true; do sleep 0.1; done' &
group=$!
echo "$group" > "$AIRFLOW_HOME/standalone.pgid"
trap 'bash {stop} "$group"; exit 130' INT TERM
wait "$group"
"""


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_for(condition, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def _services(launcher: Path, home: Path, tmp_path: Path) -> AirflowServices:
    """``launcher`` under AIRFLOW_HOME ``home``; no database or api-server is ever asked."""
    return AirflowServices(
        launcher,
        {**os.environ, "AIRFLOW_HOME": str(home)},
        "postgresql://127.0.0.1/unused",
        tmp_path / "services.log",
        "http://127.0.0.1:9",
    )


def test_stop_kills_the_components_group_a_killed_launcher_leaves(tmp_path: Path) -> None:
    home = tmp_path / "airflow"
    home.mkdir()
    launcher = tmp_path / "launcher.sh"
    launcher.write_text(LAUNCHER.format(stop=REPO / "scripts" / "airflow_stop.sh"))
    services = _services(launcher, home, tmp_path)
    pgid = home / "standalone.pgid"
    group = None
    try:
        with services:
            assert _wait_for(lambda: pgid.exists() and pgid.read_text().strip(), 10)
            group = int(pgid.read_text())
            assert _alive(group)
            # Shorter than the stopper's 20 s before SIGKILL: the launcher and its stopper
            # are killed while the component still ignores SIGTERM.
            services.stop(grace_s=1.0)
        assert _wait_for(lambda: not _alive(group), 5), f"process group {group} outlived stop()"
    finally:  # never leave the component behind, whatever failed
        if group is not None and _alive(group):
            os.killpg(group, signal.SIGKILL)


def test_stop_leaves_alone_a_group_file_older_than_the_launcher(tmp_path: Path) -> None:
    """A stale ``standalone.pgid`` (another run's; its id may belong to anything now) is not
    killed: here it names a bystander's process group, which must survive."""
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        home = tmp_path / "airflow"
        home.mkdir()
        stale = home / "standalone.pgid"
        stale.write_text(str(bystander.pid))
        os.utime(stale, (time.time() - 3600, time.time() - 3600))
        launcher = tmp_path / "launcher.sh"
        launcher.write_text("sleep 30\n")
        services = _services(launcher, home, tmp_path)
        with services:
            time.sleep(0.2)
        assert services.process is not None and services.process.poll() is not None
        assert bystander.poll() is None and _alive(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()
