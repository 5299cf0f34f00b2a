"""The SOLARIS page in a real browser against a real ``airflow standalone``.

Airflow starts through ``scripts/airflow_standalone.sh``, as ``make airflow`` starts it
(api-server, scheduler, dag-processor, triggerer; the repository's DAGs, paused, and
``plugins/``) with its state in ``tmp_path`` (SQLite), the UI on a free loopback port, and the
simple auth manager with one ``viewer`` user whose password the test writes to the passwords
file (never printed). The artifacts folder holds the synthetic run records of
``scripts/screenshot_solaris_page.py``.

Headless Chromium is Debian's (``/usr/bin/chromium``, or ``$SOLARIS_CHROMIUM``) driven by
Playwright; no browser is downloaded. Without Chromium or Playwright the test is skipped on a
developer's machine and fails in CI (``CI`` set), where ``.ci/run`` installs Chromium.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from solaris.orchestration.layout import read_all_run_records

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "airflow_standalone.sh"
SEEDER = REPO / "scripts" / "screenshot_solaris_page.py"
CHROMIUM = Path(os.environ.get("SOLARIS_CHROMIUM") or "/usr/bin/chromium")
USER = "operator"
STARTUP_S = 150
CHART_TITLES = [
    "Coverage per serving tier",
    "Embedding freshness",
    "FM passes per 1,000 requests",
    "Selected vs candidates",
    "Rows written per view",
    "Fetch latency p50 / p99",
    "Serving failures",
    "Miss-stream and request-log backlog",
    "Near-line path: pairs embedded per second, lag p95, backlog",
]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _require_browser() -> None:
    """Skip (on a developer's machine) or fail (in CI) when the browser is not there."""
    missing = []
    if not CHROMIUM.is_file():
        missing.append(f"Chromium at {CHROMIUM} (apt-get install chromium)")
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright package (pip install -c constraints.txt -e '.[dev]')")
    if missing:
        reason = "the SOLARIS page browser test needs " + " and ".join(missing)
        if _in_ci():
            pytest.fail(f"{reason}; CI must have them (.ci/run installs Chromium)", pytrace=False)
        pytest.skip(reason)


def _seeder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("screenshot_solaris_page", SEEDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Airflow:
    url: str
    password: str
    artifacts: Path
    log: Path
    pgid: int  # the process group of `airflow standalone` and its components (not the script's)


def _wait_until_up(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"airflow standalone exited ({proc.returncode}):\n{log.read_text()[-4000:]}"
            )
        try:
            if httpx.get(f"{url}/api/v2/monitor/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"airflow standalone did not answer in {STARTUP_S} s:\n{log.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    _require_browser()
    tmp = tmp_path_factory.mktemp("solaris-page")
    home, artifacts = tmp / "airflow-home", tmp / "artifacts"
    for folder in (home, artifacts):
        folder.mkdir()
    _seeder().seed_run_records(artifacts)
    password = secrets.token_urlsafe(16)
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({USER: password}))
    port = _free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AIRFLOW") and k not in {"SOLARIS_AIRFLOW_DB_URL", "SOLARIS_NAMESPACE"}
    }
    # `make airflow` itself (scripts/airflow_standalone.sh): its DAGs and plugin, loopback.
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__API__WORKERS="1",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=f"{USER}:viewer",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
        # Nothing to run: the DAGs stay paused, and a task could not reach any Redis.
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="True",
        SOLARIS_STORE__REDIS="127.0.0.1:1",
        SOLARIS_AIRFLOW_CHECK="0",
        SOLARIS_ARTIFACTS_DIR=str(artifacts),
    )
    log = tmp / "airflow-standalone.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", str(SCRIPT)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped as one below
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(url, proc, log)
        # The script runs `airflow standalone` in a process group of its own, kept here.
        pgid = int((home / "standalone.pgid").read_text())
        yield Airflow(url, password, artifacts, log, pgid)
    finally:
        _stop_group(proc)


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop ``airflow standalone`` and every component it started (its process group),
    waiting until the last one is gone."""
    os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader, so that the group empties
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def _newest(artifacts: Path, dag_id: str, namespace: str) -> dict:
    return next(
        r for r in read_all_run_records(artifacts)[dag_id] if r.get("namespace") == namespace
    )


def test_without_a_login_the_page_and_its_json_are_refused(airflow: Airflow) -> None:
    with httpx.Client(base_url=airflow.url, follow_redirects=False, timeout=10) as client:
        assert client.get("/api/v2/dags").status_code == 401  # Airflow's own API, for parity
        api = client.get("/solaris/api/runs")
        assert api.status_code == 401 and "selected" not in api.text
        page = client.get("/solaris/")
        assert page.status_code == 303
        location = httpx.URL(page.headers["location"])
        assert location.path == "/auth/login"
        assert location.params["next"] == f"{airflow.url}/solaris/"
        assert "svg" not in page.text
        bad = client.get("/solaris/api/runs", headers={"Authorization": "Bearer not-a-jwt"})
        assert bad.status_code == 403
        token = client.post("/auth/token", json={"username": USER, "password": airflow.password})
        assert token.status_code == 201
        bearer = {"Authorization": f"Bearer {token.json()['access_token']}"}
        runs = client.get("/solaris/api/runs", headers=bearer)
        assert runs.status_code == 200 and runs.json()["namespace"] == "live"


def test_airflow_listens_on_the_loopback_only(airflow: Airflow) -> None:
    import psutil

    group = {p.pid for p in psutil.process_iter() if _pgid(p.pid) == airflow.pgid}
    listening = [
        c.laddr
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.pid in group
    ]
    assert listening, "no listening socket found for airflow standalone"
    assert {a.ip for a in listening} <= {"127.0.0.1", "::1"}, listening


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_after_logging_in_through_the_ui_the_page_shows_plots_and_figures(
    airflow: Airflow,
) -> None:
    from playwright.sync_api import sync_playwright

    replay = _newest(airflow.artifacts, "solaris_candidates", "replay_synth")
    live = _newest(airflow.artifacts, "solaris_candidates", "live")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM))
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{airflow.url}/solaris/?namespace=replay_synth")
            page.wait_for_url("**/auth/login**")  # sent to Airflow's login page
            page.fill("input[name=username]", USER)
            page.fill("input[name=password]", airflow.password)
            page.click("button[type=submit]")
            page.wait_for_url("**/solaris/?namespace=replay_synth", timeout=30_000)

            titles = page.eval_on_selector_all(
                "svg.chart > title", "els => els.map(e => e.textContent)"
            )
            assert titles == CHART_TITLES
            coverage = page.locator("svg.chart", has=page.locator("title", has_text="Coverage"))
            assert coverage.locator("circle").count() == 5 * 24  # five tiers, 24 runs
            text = page.inner_text("body")
            assert "replay_synth" in text and "replay" in text
            newest = page.locator("section#dag-solaris_candidates tbody tr").first.inner_text()
            assert f"{replay['selected']:,}" in newest and f"{replay['candidates']:,}" in newest
            assert f"{100 * replay['coverage']['any']:.1f}%" in newest
            assert replay["serving"] is None  # a replay's intervals saw no live serving
            assert "{'" not in text and "main tier share:" in text

            # The default view is the live namespace; the selector offers the replay.
            page.goto(f"{airflow.url}/solaris/")
            options = page.eval_on_selector_all(
                "select[name=namespace] option", "els => els.map(e => e.textContent)"
            )
            assert options == ["live (live)", "replay_synth (replay)"]
            newest = page.locator("section#dag-solaris_candidates tbody tr").first.inner_text()
            assert f"{live['selected']:,}" in newest and f"{replay['selected']:,}" not in newest
            assert f"{live['serving']['fetch_p99_ms']:.1f} ms" in newest
            latency = page.locator("svg.chart", has=page.locator("title", has_text="latency"))
            assert latency.locator("circle").count() == 2 * 24  # p50 and p99, 24 runs

            # The form filters by DAG and time range.
            page.select_option("select[name=dag_id]", "solaris_training")
            page.click("button[type=submit]")
            page.wait_for_url("**dag_id=solaris_training**")
            assert page.locator("section.dag").count() == 1
            page.select_option("select[name=dag_id]", "solaris_candidates")
            page.fill("input[name=from]", "2026-11-30T20:00")  # the last 5 of 24 hourly runs
            page.click("button[type=submit]")
            page.wait_for_url("**from=2026-11-30T20**")
            assert page.locator("section#dag-solaris_candidates tbody tr").count() == 5
            assert (
                page.locator("svg.chart", has_text="Selected vs candidates")
                .locator("circle")
                .count()
                == 2 * 5
            )

            # The same session reads the JSON, and the page is in Airflow's navigation.
            api = page.request.get(f"{airflow.url}/solaris/api/runs?namespace=replay_synth")
            assert api.status == 200 and api.json()["replay"] is True
            page.goto(f"{airflow.url}/plugin/solaris")
            framed = page.frame_locator("iframe").locator("svg.chart").first
            framed.wait_for(timeout=30_000)
        finally:
            browser.close()
