"""The SOLARIS Airflow plugin: its page and JSON over run records, and its light imports."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from fastapi.testclient import TestClient

from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, Interval, write_run_record

REPO = Path(__file__).resolve().parents[3]
PLUGIN_FILE = REPO / "plugins" / "solaris_plugin.py"
T0 = 10_185 * 86_400  # 1997-11-20T00:00:00Z


@pytest.fixture(scope="module")
def plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("solaris_plugin_under_test", PLUGIN_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_runs(artifacts: Path) -> None:
    layout = CycleLayout(Namespace("live", artifacts, artifacts))
    first, second = Interval(T0, T0 + 3600), Interval(T0 + 3600, T0 + 7200)
    write_run_record(
        layout,
        "solaris_candidates",
        first.key,
        {
            **first.as_dict(),
            "seconds": 12.34,
            "candidates": 5000,
            "selected": 1234,
            "coverage": {"pair": 0.5, "nbr": 0.25, "uagg": 0.125, "iagg": 0.0625, "any": 0.9375},
            "freshness_s": 5400,
        },
    )
    write_run_record(
        layout,
        "solaris_candidates",
        second.key,
        {**second.as_dict(), "seconds": 3.0, "candidates": 10, "selected": 7},
    )
    write_run_record(
        layout,
        "solaris_embeddings",
        first.key,
        {
            **first.as_dict(),
            "seconds": 61.5,
            "fm_passes": 321,
            "rows_written": {"pair_embedding": 300, "user_embedding": 21},
        },
    )
    write_run_record(
        layout,
        "solaris_training",
        "00000000042",
        {"seconds": 8.0, "labelled": 900, "published": True, "val_logloss": 0.512345},
    )


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    _write_runs(tmp_path)
    return tmp_path


@pytest.fixture
def client(plugin: ModuleType, artifacts: Path, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(artifacts))
    return TestClient(plugin.app)


def test_page_shows_the_figures_of_every_run(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    for dag_id in ("solaris_candidates", "solaris_embeddings", "solaris_training"):
        assert dag_id in page
    assert "1997-11-20T00:00:00Z → 1997-11-20T01:00:00Z" in page
    assert "1,234 / 5,000" in page  # selected / candidates
    assert "7 / 10" in page
    for share in ("50.0%", "25.0%", "12.5%", "6.2%", "93.8%"):
        assert f"<td>{share}</td>" in page
    assert "<td>90.0 min</td>" in page  # freshness 5400 s
    assert "<td>12.3</td>" in page and "<td>61.5</td>" in page  # seconds
    assert "<td>321</td>" in page  # FM passes
    assert "pair_embedding: 300, user_embedding: 21, total 321" in page
    assert "labelled=900" in page and "published=yes" in page and "val_logloss=0.5123" in page
    assert "00000000042" in page  # a run without an interval is shown by its key
    assert "4 run record(s) from 3 DAG(s)" in page


def test_missing_figures_show_as_a_dash(client: TestClient) -> None:
    page = client.get("/").text
    second_run = next(row for row in page.split("<tr") if "7 / 10" in row)
    assert second_run.count("<td>–</td>") >= len(("fm_passes", "pair", "nbr", "uagg", "iagg"))


def test_newest_run_comes_first(client: TestClient) -> None:
    page = client.get("/").text
    assert page.index("7 / 10") < page.index("1,234 / 5,000")


def test_json_endpoint_returns_the_records(client: TestClient, artifacts: Path) -> None:
    response = client.get("/api/runs")
    assert response.status_code == 200
    body = response.json()
    assert body["artifacts_dir"] == str(artifacts)
    dags = body["dags"]
    assert sorted(dags) == ["solaris_candidates", "solaris_embeddings", "solaris_training"]
    newest, oldest = dags["solaris_candidates"]
    assert newest["selected"] == 7 and oldest["selected"] == 1234
    assert oldest["interval_start"] == T0 and oldest["coverage"]["any"] == 0.9375
    assert dags["solaris_embeddings"][0]["rows_written"] == {
        "pair_embedding": 300,
        "user_embedding": 21,
    }
    assert dags["solaris_training"][0]["published"] is True


def test_unparsable_record_is_shown_as_an_error(client: TestClient, artifacts: Path) -> None:
    runs = artifacts / "namespaces" / "live" / "runs"
    (runs / "solaris_candidates" / "00000000001-00000000002.json").write_text("{not json")
    (runs / "solaris_odd").mkdir()
    (runs / "solaris_odd" / "x.json").write_text("[1, 2]")
    page = client.get("/").text
    assert 'class="dag-start error"' in page or 'class="error"' in page
    assert "unreadable run record 00000000001-00000000002" in page
    assert "not a JSON object" in page
    assert "1,234 / 5,000" in page  # the good records are still shown
    records = client.get("/api/runs").json()["dags"]
    broken = [r for r in records["solaris_candidates"] if "error" in r]
    assert [r["key"] for r in broken] == ["00000000001-00000000002"]
    assert "error" in records["solaris_odd"][0]


def test_odd_values_do_not_break_the_page(
    plugin: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = CycleLayout(Namespace("live", tmp_path, tmp_path))
    write_run_record(
        layout,
        "solaris_odd",
        "k",
        {
            "interval_start": "yesterday",
            "interval_end": 1e300,
            "coverage": "all of it",
            "rows_written": {"v": "many"},
            "seconds": None,
            "note": "<script>alert(1)</script>",
        },
    )
    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path))
    response = TestClient(plugin.app).get("/")
    assert response.status_code == 200
    assert "yesterday" in response.text and "v: many" in response.text
    assert "<script>" not in response.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text


def test_empty_artifacts_dir_says_no_runs_yet(
    plugin: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path / "nothing-here"))
    client = TestClient(plugin.app)
    page = client.get("/")
    assert page.status_code == 200
    assert "No runs yet" in page.text
    assert str(tmp_path / "nothing-here" / "namespaces") in page.text
    assert client.get("/api/runs").json()["dags"] == {}


def test_create_app_with_an_explicit_folder(plugin: ModuleType, artifacts: Path) -> None:
    body = TestClient(plugin.create_app(artifacts)).get("/api/runs").json()
    assert "solaris_embeddings" in body["dags"]


def test_plugin_mounts_the_app_and_links_it_from_the_nav_bar(plugin: ModuleType) -> None:
    from airflow.plugins_manager import AirflowPlugin

    assert issubclass(plugin.SolarisPlugin, AirflowPlugin)
    assert plugin.SolarisPlugin.name == "solaris"
    [mounted] = plugin.SolarisPlugin.fastapi_apps
    assert mounted == {"app": plugin.app, "url_prefix": "/solaris", "name": "SOLARIS"}
    [view] = plugin.SolarisPlugin.external_views
    assert view["destination"] == "nav"
    assert view["href"] == "/solaris/" and view["url_route"] == "solaris"
    assert view["name"] == "SOLARIS"


def test_importing_the_plugin_stays_light() -> None:
    code = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('solaris_plugin', {str(PLUGIN_FILE)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "heavy = ('feast', 'torch', 'pandas', 'solaris.config')\n"
        "print(json.dumps([name for name in heavy if name in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
