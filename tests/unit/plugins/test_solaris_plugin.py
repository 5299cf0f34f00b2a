"""The SOLARIS Airflow plugin: its page, plots, filters, JSON, auth wiring and light imports.

The routes are reached through FastAPI's test client. Airflow's JWT check needs a migrated
metadata DB (revoked tokens), so here the auth dependency is overridden with a plain filter;
the real login, cookie and 401 are checked against ``airflow standalone`` in
``tests/integration/test_solaris_page_browser.py``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from solaris.dashboard import charts, tables
from solaris.dashboard.records import load_runs, namespaces_of
from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, Interval, write_run_record

REPO = Path(__file__).resolve().parents[3]
PLUGIN_FILE = REPO / "plugins" / "solaris_plugin.py"
T0 = 10_185 * 86_400  # 1997-11-20T00:00:00Z
LIVE_T0 = 1_795_996_800  # 2026-11-30T00:00:00Z
CHART_TITLES = (
    "Coverage per serving tier",
    "Embedding freshness",
    "FM passes per 1,000 requests",
    "Selected vs candidates",
    "Rows written per view",
    "Fetch latency p50 / p99",
    "Serving failures",
    "Miss-stream and request-log backlog",
)
SERVING = {
    "requests": 120,
    "failures": 3,
    "fetch_p50_ms": 1.25,
    "fetch_p99_ms": 4.5,
    "miss_backlog": 17,
    "request_log_backlog": 2,
}


@pytest.fixture(scope="module")
def plugin() -> Iterator[ModuleType]:
    """The plugin file loaded as Airflow's plugin manager loads it (registered by name)."""
    name = "solaris_plugin_under_test"
    spec = importlib.util.spec_from_file_location(name, PLUGIN_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(name, None)


def _layout(artifacts: Path, namespace: str = "live") -> CycleLayout:
    return CycleLayout(Namespace(namespace, artifacts, artifacts))


def _write_runs(artifacts: Path) -> None:
    """Two live candidates runs (one with serving figures), an embeddings and a training
    run, and one run of a replay namespace with figures the live runs never have."""
    layout = _layout(artifacts)
    first, second = Interval(T0, T0 + 3600), Interval(T0 + 3600, T0 + 7200)
    write_run_record(
        layout,
        "solaris_candidates",
        first.key,
        {
            **first.as_dict(),
            "namespace": "live",
            "seconds": 12.34,
            "requests": 250,
            "candidates": 5000,
            "selected": 1234,
            "fm_passes": 1000,
            "coverage": {"pair": 0.5, "nbr": 0.25, "uagg": 0.125, "iagg": 0.0625, "any": 0.9375},
            "main_tier_share": {"pair": 0.2455, "none": 0.0625},
            "request_log": {**first.as_dict(), "requests": 250, "rows": 5000, "late": 1},
            "freshness_s": 5400,
            "serving": SERVING,
        },
    )
    write_run_record(
        layout,
        "solaris_candidates",
        second.key,
        {**second.as_dict(), "namespace": "live", "seconds": 3.0, "candidates": 10, "selected": 7},
    )
    write_run_record(
        layout,
        "solaris_embeddings",
        first.key,
        {
            **first.as_dict(),
            "intervals": [first.as_dict()],
            "seconds": 61.5,
            "fm_passes": 321,
            "rows_written": {"pair_embedding": 300, "user_embedding": 21},
        },
    )
    write_run_record(
        layout,
        "solaris_training",
        f"{T0 + 7200:011d}",
        {
            "interval_end": T0 + 7200,
            "seconds": 8.0,
            "labelled": 900,
            "published": True,
            "val_logloss": 0.512345,
        },
    )
    replay = Interval(T0 - 3600, T0)
    write_run_record(
        _layout(artifacts, "replay_1998"),
        "solaris_candidates",
        replay.key,
        {**replay.as_dict(), "namespace": "replay_1998", "candidates": 777, "selected": 55},
    )


def _allow(dag_id: str) -> bool:
    return True


def _client(plugin: ModuleType, root: Path, may_read: Callable[[str], bool] = _allow) -> TestClient:
    """A client of an app on ``root`` whose auth dependency lets ``may_read`` decide."""
    app: FastAPI = plugin.create_app(root)
    app.dependency_overrides[plugin.dag_run_reader] = lambda: may_read
    return TestClient(app)


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    _write_runs(tmp_path)
    return tmp_path


@pytest.fixture
def client(plugin: ModuleType, artifacts: Path, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    monkeypatch.delenv("SOLARIS_NAMESPACE", raising=False)
    return _client(plugin, artifacts)


def _chart(page: str, title: str) -> str:
    """The ``<svg>`` element whose title is ``title``."""
    match = re.search(
        rf"<svg[^>]*>(?:(?!</svg>).)*?<title[^>]*>{re.escape(title)}</title>"
        r"(?:(?!</svg>).)*</svg>",
        page,
        re.S,
    )
    assert match, f"no chart titled {title!r}"
    return match[0]


# -- the page ---------------------------------------------------------------------------------


def test_page_shows_the_figures_of_every_live_run(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    for dag_id in ("solaris_candidates", "solaris_embeddings", "solaris_training"):
        assert f"<h3>{dag_id} " in page
    assert "1997-11-20 00:00 → 01:00" in page
    assert "<td>1,234</td>" in page and "<td>5,000</td>" in page and "<td>250</td>" in page
    for share in ("50.0%", "25.0%", "12.5%", "6.2%", "93.8%"):
        assert f"<td>{share}</td>" in page
    assert "<td>90.0 min</td>" in page  # freshness 5400 s
    assert "<td>12.3 s</td>" in page and "<td>61.5 s</td>" in page  # run time
    assert "<td>321</td>" in page  # FM passes of the embeddings run
    assert "pair embedding:</span> 300" in page and "user embedding:</span> 21" in page
    assert "labelled:</span> 900" in page and "published:</span> yes" in page
    assert "val logloss:</span> 0.512" in page
    assert "5 run record(s)" not in page  # the replay's run is not in the live view
    assert "4 run record(s) of 3 DAG(s)" in page


def test_nested_figures_are_readable_lists_never_raw_dicts(client: TestClient) -> None:
    page = client.get("/").text
    assert "{&#x27;" not in page and "{'" not in page and '{"' not in page
    assert "main tier share:</span> <ul" in page
    assert "pair:</span> 24.6%" in page and "none:</span> 6.2%" in page
    # The request log's own figures, without repeating the run's interval.
    assert "request log:</span> <ul" in page and "late:</span> 1" in page
    request_log = page[page.index("request log:") :]
    assert "interval start" not in request_log[: request_log.index("</ul>")]


def test_every_plot_is_an_svg_with_its_title(client: TestClient) -> None:
    page = client.get("/").text
    assert "<script" not in page
    for title in CHART_TITLES:
        chart = _chart(page, title)
        assert chart.startswith('<svg xmlns="http://www.w3.org/2000/svg"')
    coverage = _chart(page, "Coverage per serving tier")
    assert coverage.count("<circle") == 5  # one live run with coverage, five tiers
    assert "pair: 50% at 1997-11-20 01:00 UTC" in coverage
    fm = _chart(page, "FM passes per 1,000 requests")
    assert "FM passes / 1k requests: 4,000 at 1997-11-20 01:00 UTC" in fm  # 1000 / 250


def test_serving_figures_are_plotted_and_tabled(client: TestClient) -> None:
    page = client.get("/").text
    latency = _chart(page, "Fetch latency p50 / p99")
    assert "p50: 1.25 ms at" in latency and "p99: 4.5 ms at" in latency
    failures = _chart(page, "Serving failures")
    assert failures.count("<rect") == 1 + 1  # the legend's swatch and one bar
    assert "failed fetches: 3 at" in failures
    backlog = _chart(page, "Miss-stream and request-log backlog")
    assert "miss stream: 17 at" in backlog and "request log: 2 at" in backlog
    for cell in ("<td>120</td>", "<td>3</td>", "<td>1.2 ms</td>", "<td>4.5 ms</td>", "<td>17</td>"):
        assert cell in page
    # The run without serving figures: dashes in those columns, no point in the plots.
    second = next(row for row in page.split("<tr") if "01:00 → 02:00" in row)
    assert second.count("<td>–</td>") >= len(SERVING)


def test_a_namespace_without_serving_figures_shows_empty_plots(
    plugin: ModuleType, tmp_path: Path
) -> None:
    interval = Interval(T0, T0 + 3600)
    write_run_record(
        _layout(tmp_path), "solaris_candidates", interval.key, {**interval.as_dict(), "selected": 1}
    )
    page = _client(plugin, tmp_path).get("/").text
    assert "no data for this selection" in _chart(page, "Fetch latency p50 / p99")
    assert "no data for this selection" in _chart(page, "Coverage per serving tier")
    assert "<circle" in _chart(page, "Selected vs candidates")


def test_newest_run_comes_first(client: TestClient) -> None:
    page = client.get("/").text
    assert page.index("01:00 → 02:00") < page.index("00:00 → 01:00")


# -- namespaces and filters -------------------------------------------------------------------


def test_default_view_is_the_live_namespace_and_the_selector_labels_replays(
    client: TestClient,
) -> None:
    page = client.get("/").text
    assert 'namespace <strong>live</strong> <span class="badge live">live</span>' in page
    assert '<option value="live" selected>live (live)</option>' in page
    assert '<option value="replay_1998">replay_1998 (replay)</option>' in page
    assert "<td>777</td>" not in page
    replay = client.get("/", params={"namespace": "replay_1998"}).text
    assert '<span class="badge replay">replay</span>' in replay
    assert "<td>777</td>" in replay and "<td>1,234</td>" not in replay


def test_the_live_namespace_is_the_configured_one(
    plugin: ModuleType, artifacts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOLARIS_NAMESPACE", "replay_1998")
    page = _client(plugin, artifacts).get("/").text
    assert "<td>777</td>" in page
    assert '<option value="live">live (replay)</option>' in page


def test_a_replay_flag_in_the_records_decides_over_the_name(
    plugin: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SOLARIS_NAMESPACE", raising=False)
    interval = Interval(T0, T0 + 3600)
    for namespace, replay in (("live", True), ("shadow", False)):
        write_run_record(
            _layout(tmp_path, namespace),
            "solaris_candidates",
            interval.key,
            {**interval.as_dict(), "namespace": namespace, "replay": replay},
        )
    infos = {i.name: i.replay for i in namespaces_of(load_runs(tmp_path), live="live")}
    assert infos == {"live": True, "shadow": False}
    assert "namespace <strong>shadow</strong>" in _client(plugin, tmp_path).get("/").text


def test_without_live_runs_the_newest_namespace_is_shown(
    plugin: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SOLARIS_NAMESPACE", raising=False)
    for namespace, start in (("replay_old", T0), ("replay_new", T0 + 86_400)):
        interval = Interval(start, start + 3600)
        write_run_record(
            _layout(tmp_path, namespace),
            "solaris_candidates",
            interval.key,
            {**interval.as_dict(), "namespace": namespace},
        )
    assert "namespace <strong>replay_new</strong>" in _client(plugin, tmp_path).get("/").text


def test_dag_filter_keeps_one_dag(client: TestClient) -> None:
    page = client.get("/", params={"dag_id": "solaris_embeddings"}).text
    assert "<h3>solaris_embeddings " in page
    assert "<h3>solaris_candidates " not in page and "<h3>solaris_training " not in page
    assert '<option value="solaris_embeddings" selected>' in page
    assert "no data for this selection" in _chart(page, "Selected vs candidates")


def test_time_range_filters_on_the_interval_end(client: TestClient) -> None:
    only_first = client.get("/", params={"from": "1997-11-20T00:30", "to": "1997-11-20T01:00"})
    assert only_first.status_code == 200
    assert "00:00 → 01:00" in only_first.text and "01:00 → 02:00" not in only_first.text
    # A bare date as "to" is that whole day; epoch seconds work too.
    whole_day = client.get("/", params={"from": str(T0 + 7200), "to": "1997-11-20"}).text
    assert "01:00 → 02:00" in whole_day and "00:00 → 01:00" not in whole_day
    assert "<h3>solaris_training " in whole_day
    assert 'name="from" value="1997-11-20T02:00"' in whole_day
    later = client.get("/", params={"from": "1997-11-21"}).text
    assert "No runs match" in later


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"from": "yesterday"}, "'from'"),
        ({"to": "1997-13-01"}, "'to'"),
        ({"from": "1997-11-21", "to": "1997-11-20"}, "'to'"),
        ({"from": "\u00b2"}, "'from'"),  # '²'.isdigit() is True; int() refuses it
        ({"from": "--5"}, "'from'"),
        ({"to": "9" * 5_000}, "'to'"),  # past int()'s 4,300 digits
    ],
)
def test_a_bad_time_is_a_400_that_names_the_parameter(
    client: TestClient, params: dict[str, str], named: str
) -> None:
    page = client.get("/", params=params)
    assert page.status_code == 400
    assert "query parameter" in page.text and named.replace("'", "&#x27;") in page.text
    assert '<form class="filters"' in page.text and "<td>1,234</td>" not in page.text
    api = client.get("/api/runs", params=params)
    assert api.status_code == 400
    assert named in api.json()["detail"]


def test_an_unknown_namespace_shows_no_runs_and_lists_the_others(client: TestClient) -> None:
    page = client.get("/", params={"namespace": "nowhere"}).text
    assert "No runs match" in page and "namespace <strong>nowhere</strong>" in page
    assert '<option value="live">live (live)</option>' in page


# -- JSON -------------------------------------------------------------------------------------


def test_json_endpoint_returns_the_records_of_one_namespace(
    client: TestClient, artifacts: Path
) -> None:
    response = client.get("/api/runs")
    assert response.status_code == 200
    body = response.json()
    assert body["artifacts_dir"] == str(artifacts)
    assert body["namespace"] == "live" and body["replay"] is False
    assert [(n["name"], n["replay"], n["runs"]) for n in body["namespaces"]] == [
        ("live", False, 4),
        ("replay_1998", True, 1),
    ]
    dags = body["dags"]
    assert sorted(dags) == ["solaris_candidates", "solaris_embeddings", "solaris_training"]
    newest, oldest = dags["solaris_candidates"]
    assert newest["selected"] == 7 and oldest["selected"] == 1234
    assert oldest["serving"] == SERVING and oldest["coverage"]["any"] == 0.9375
    assert dags["solaris_training"][0]["published"] is True


def test_json_endpoint_takes_the_same_filters(client: TestClient) -> None:
    body = client.get(
        "/api/runs",
        params={"namespace": "live", "dag_id": "solaris_candidates", "to": "1997-11-20T01:00"},
    ).json()
    assert body["filters"] == {
        "namespace": "live",
        "dag_id": "solaris_candidates",
        "to": "1997-11-20T01:00",
    }
    assert list(body["dags"]) == ["solaris_candidates"]
    assert [r["selected"] for r in body["dags"]["solaris_candidates"]] == [1234]
    replay = client.get("/api/runs", params={"namespace": "replay_1998"}).json()
    assert replay["replay"] is True
    assert replay["dags"]["solaris_candidates"][0]["candidates"] == 777


# -- permissions ------------------------------------------------------------------------------


def test_requests_without_a_token_get_401(
    plugin: ModuleType, artifacts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_auth_manager():
        raise RuntimeError("no auth manager outside an api-server")

    # Outside an api-server there is no login page to send a browser to (an earlier test of
    # this process may have initialised one: the browser test covers the redirect).
    monkeypatch.setattr(plugin, "get_auth_manager", no_auth_manager)
    client = TestClient(plugin.create_app(artifacts))  # Airflow's own auth dependency
    api = client.get("/api/runs")
    assert api.status_code == 401 and api.json() == {"detail": "Not authenticated"}
    page = client.get("/", follow_redirects=False)
    assert page.status_code == 401
    assert "1,234" not in page.text


def test_runs_of_dags_the_user_may_not_read_are_hidden(plugin: ModuleType, artifacts: Path) -> None:
    client = _client(plugin, artifacts, lambda dag_id: dag_id != "solaris_training")
    page = client.get("/").text
    assert "<h3>solaris_training " not in page and "labelled:" not in page
    assert "The runs of 1 DAG(s) are hidden" in page
    body = client.get("/api/runs").json()
    assert "solaris_training" not in body["dags"] and body["hidden_dags"] == 1
    nothing = _client(plugin, artifacts, lambda dag_id: False).get("/api/runs").json()
    assert nothing["dags"] == {} and nothing["namespaces"] == [] and nothing["hidden_dags"] == 3


def test_dag_run_reader_asks_airflows_auth_manager(
    plugin: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.api_fastapi import app as airflow_app
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    monkeypatch.setattr(airflow_app._AuthManagerState, "instance", None)  # restored after
    airflow_app.create_auth_manager()  # the configured one: SimpleAuthManager
    viewer = plugin.dag_run_reader(SimpleAuthManagerUser(username="v", role="viewer"))
    assert viewer("solaris_candidates") is True
    nobody = plugin.dag_run_reader(SimpleAuthManagerUser(username="n", role=None))
    assert nobody("solaris_candidates") is False


# -- odd records ------------------------------------------------------------------------------


def test_unparsable_record_is_shown_as_an_error(client: TestClient, artifacts: Path) -> None:
    runs = artifacts / "namespaces" / "live" / "runs"
    (runs / "solaris_candidates" / "00000000001-00000000002.json").write_text("{not json")
    (runs / "solaris_odd").mkdir()
    (runs / "solaris_odd" / "x.json").write_text("[1, 2]")
    page = client.get("/").text
    assert 'class="error"' in page
    assert "unreadable run record 00000000001-00000000002" in page
    assert "not a JSON object" in page
    assert "<td>1,234</td>" in page  # the good records are still shown
    records = client.get("/api/runs").json()["dags"]
    broken = [r for r in records["solaris_candidates"] if "error" in r]
    assert [r["key"] for r in broken] == ["00000000001-00000000002"]
    assert "error" in records["solaris_odd"][0]


def test_odd_values_do_not_break_the_page(plugin: ModuleType, tmp_path: Path) -> None:
    write_run_record(
        _layout(tmp_path),
        "solaris_odd",
        "k",
        {
            "interval_start": "yesterday",
            "interval_end": 1e300,
            "coverage": "all of it",
            "serving": ["not", "a", "dict"],
            "freshness_s": "stale",
            "rows_written": {"v": "many"},
            "seconds": None,
            "note": "<script>alert(1)</script>",
            "intervals": [{"interval_start": 1, "interval_end": 2}] * 9,
        },
    )
    response = _client(plugin, tmp_path).get("/")
    assert response.status_code == 200
    text = response.text
    assert "yesterday" in text and "v:</span> many" in text and "all of it" in text
    assert "<script>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "(9 in all)" in text


def test_a_record_nested_hundreds_deep_is_shown_cut_and_never_takes_the_page_down(
    plugin: ModuleType, tmp_path: Path
) -> None:
    deep: Any = "bottom"
    for _ in range(500):
        deep = {"k": deep}
    write_run_record(_layout(tmp_path), "solaris_odd", "k", {"interval_end": T0, "deep": deep})
    client = _client(plugin, tmp_path)
    page = client.get("/")
    assert page.status_code == 200
    assert "… (nested deeper)" in page.text and "bottom" not in page.text
    assert client.get("/api/runs").status_code == 200


def test_empty_artifacts_dir_says_no_runs_yet(plugin: ModuleType, tmp_path: Path) -> None:
    client = _client(plugin, tmp_path / "nothing-here")
    page = client.get("/")
    assert page.status_code == 200
    assert "No runs yet" in page.text
    assert str(tmp_path / "nothing-here" / "namespaces") in page.text
    assert client.get("/api/runs").json()["dags"] == {}


def test_the_module_app_reads_the_artifacts_dir_of_each_request(
    plugin: ModuleType, artifacts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(artifacts))
    monkeypatch.setitem(plugin.app.dependency_overrides, plugin.dag_run_reader, lambda: _allow)
    body = TestClient(plugin.app).get("/api/runs").json()
    assert body["artifacts_dir"] == str(artifacts) and "solaris_embeddings" in body["dags"]


def test_the_module_app_reads_the_state_uri_when_the_state_is_in_a_bucket(
    plugin: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uuid

    from solaris.files import remove_tree, state_path

    bucket = state_path(f"memory://solaris-page-{uuid.uuid4().hex[:8]}")
    _write_runs(bucket)
    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("SOLARIS_CYCLE__STATE_URI", str(bucket))
    monkeypatch.setitem(plugin.app.dependency_overrides, plugin.dag_run_reader, lambda: _allow)
    try:
        body = TestClient(plugin.app).get("/api/runs").json()
    finally:
        remove_tree(bucket)
    assert body["artifacts_dir"] == str(bucket)
    assert {"solaris_candidates", "solaris_embeddings"} <= set(body["dags"])


# -- the page's bounds --------------------------------------------------------------------


def test_a_long_range_keeps_the_page_bounded(plugin: ModuleType, tmp_path: Path) -> None:
    n = tables.MAX_TABLE_ROWS + 5
    layout = _layout(tmp_path)
    for k in range(n):
        interval = Interval(T0 + k * 900, T0 + (k + 1) * 900)
        write_run_record(
            layout, "solaris_candidates", interval.key, {**interval.as_dict(), "selected": k}
        )
    page = _client(plugin, tmp_path).get("/").text
    table = page[page.index('<section class="dag"') :]
    assert table.count("<tr>") == 1 + tables.MAX_TABLE_ROWS  # the header and the newest runs
    assert f"{n} run(s)" in table and f"the newest {tables.MAX_TABLE_ROWS} shown" in table
    assert _chart(page, "Selected vs candidates").count("<circle") == n  # the plot has all
    many = tuple((T0 + k * 60, float(k)) for k in range(charts.MAX_MARKERS + 1))
    line = charts.svg_chart(charts.Chart("D", (charts.Series("n", many),), str), (T0, T0 + 1))
    assert "<circle" not in line and '<path d="M' in line


# -- the plugin -------------------------------------------------------------------------------


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
        "sys.modules['solaris_plugin'] = module\n"
        "spec.loader.exec_module(module)\n"
        "heavy = ('feast', 'torch', 'pandas', 'solaris.config')\n"
        "print(json.dumps([name for name in heavy if name in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_the_page_takes_its_settings_from_solaris_config_as_the_tasks_do(
    plugin: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``$SOLARIS_CONFIG`` names the live namespace and the state root for the page too (it
    read a few variables by hand and ignored the file); a variable still overrides it."""
    for name in ("SOLARIS_NAMESPACE", "SOLARIS_ARTIFACTS_DIR", "SOLARIS_CYCLE__STATE_URI"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "solaris.yaml"
    config.write_text(f"namespace: prod\nartifacts_dir: {tmp_path / 'state'}\n")
    monkeypatch.setenv("SOLARIS_CONFIG", str(config))
    assert plugin.live_namespace() == "prod"
    assert str(plugin.artifacts_dir()) == str(tmp_path / "state")
    monkeypatch.setenv("SOLARIS_NAMESPACE", "other")
    assert plugin.live_namespace() == "other"
