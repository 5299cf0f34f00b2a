"""The SOLARIS page as HTML, rendered without Airflow: tables, plots, notices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from solaris.dashboard.filters import Filters
from solaris.dashboard.page import render_page
from solaris.dashboard.tables import MAX_TABLE_ROWS, dag_table

T0 = 10_185 * 86_400  # 1997-11-20T00:00:00Z
SERVING = {"requests": 120, "failures": 3, "fetch_p50_ms": 1.25, "fetch_p99_ms": 4.5}


def _run(end: int, **figures: Any) -> dict[str, Any]:
    return {"interval_start": end - 3600, "interval_end": end, "namespace": "live", **figures}


RUNS = {
    "solaris_candidates": [
        _run(T0 + 7200, selected=7, serving=SERVING | {"extra": 1}),
        _run(T0 + 3600, selected=1234, coverage={"pair": 0.5, "any": 0.9375}),
    ],
    "solaris_embeddings": [_run(T0 + 3600, rows_written={"pair_embedding": 300})],
}


def test_a_dag_table_has_a_column_per_figure_and_the_rest_as_a_list() -> None:
    table = dag_table("solaris_candidates", RUNS["solaris_candidates"])
    assert "<th>selected</th>" in table and "<td>1,234</td>" in table
    assert "<th>coverage pair</th>" in table and "<td>50.0%</td>" in table
    assert "<th>fetch p99</th>" in table and "<td>4.5 ms</td>" in table
    assert "extra:</span> 1" in table  # a serving figure without a column
    assert "2 run(s), latest 1997-11-20 02:00 UTC" in table


def test_a_long_table_shows_its_newest_rows() -> None:
    records = [_run(T0 + k * 60, selected=k) for k in range(MAX_TABLE_ROWS + 1, 0, -1)]
    table = dag_table("d", records)
    assert table.count("<tr>") == 1 + MAX_TABLE_ROWS
    assert f"the newest {MAX_TABLE_ROWS} shown" in table


def test_render_page_shows_plots_tables_and_notices(tmp_path: Path) -> None:
    page = render_page(RUNS, tmp_path, Filters(), live="live", may_read=lambda d: True)
    assert page.startswith("<!doctype html>") and "<h2>Over time</h2>" in page
    assert page.count("<svg") == 9 and '<section class="dag" id="dag-solaris_embeddings">' in page
    assert '<span class="badge live">live</span>' in page
    hidden = render_page(RUNS, tmp_path, live="live", may_read=lambda d: d != "solaris_embeddings")
    assert "The runs of 1 DAG(s) are hidden" in hidden
    problem = render_page(RUNS, tmp_path, live="live", problem="query parameter 'from': bad")
    assert '<div class="problem">' in problem and "<h2>Over time</h2>" not in problem
    empty = render_page({}, tmp_path, live="live")
    assert "No runs yet" in empty and str(tmp_path / "namespaces") in empty
    none_match = render_page(RUNS, tmp_path, Filters(start=T0 + 86_400), live="live")
    assert "No runs match" in none_match
