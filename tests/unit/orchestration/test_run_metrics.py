"""Run records also go to Airflow's metrics: which figures become which gauges, and that
writing a record sends them only in a process that runs Airflow, never failing the run."""

from __future__ import annotations

import json
import logging
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, run_metrics, write_run_record

CANDIDATES_RECORD = {
    "interval_start": 0,
    "interval_end": 3600,
    "namespace": "live",
    "requests": 12,
    "freshness_s": None,
    "candidates": 300,
    "selected": 30,
    "fm_passes": 29,
    "verifier": "logged-scores",
    "seconds": 1.5,
    "coverage": {"pair": 0.5, "nbr": 0.25, "uagg": 0.75, "iagg": 1.0, "any": 1.0},
    "serving": {
        "requests": 40,
        "failures": 1,
        "fetch_p50_ms": 1.2,
        "fetch_p99_ms": None,
        "miss_backlog": 0,
        "request_log_backlog": 2,
    },
    "request_log": {"requests": 12, "rows": 300},
}


def test_figures_groups_and_the_rows_written_total_become_gauges() -> None:
    gauges = run_metrics(CANDIDATES_RECORD)
    assert gauges == {
        "seconds": 1.5,
        "requests": 12.0,
        "candidates": 300.0,
        "selected": 30.0,
        "fm_passes": 29.0,
        "coverage.pair": 0.5,
        "coverage.nbr": 0.25,
        "coverage.uagg": 0.75,
        "coverage.iagg": 1.0,
        "coverage.any": 1.0,
        "serving.requests": 40.0,
        "serving.failures": 1.0,
        "serving.fetch_p50_ms": 1.2,
        "serving.miss_backlog": 0.0,
        "serving.request_log_backlog": 2.0,
    }
    enrichment = {"interval_end": 3600, "view": "nbr", "rows_written": {"nbr": 7}, "seconds": 2}
    assert run_metrics(enrichment) == {"seconds": 2.0, "rows_written.nbr": 7.0, "rows_written": 7.0}


def test_none_booleans_non_finite_and_non_numbers_are_left_out() -> None:
    record = {
        "selected": True,
        "candidates": float("nan"),
        "requests": "12",
        "seconds": float("inf"),
        "serving": None,
        "coverage": {"pair": None, "any": False},
        "rows_written": {},
    }
    assert run_metrics(record) == {}


@pytest.fixture
def layout(tmp_path: Path) -> CycleLayout:
    return CycleLayout(Namespace("live", tmp_path / "artifacts", tmp_path / "repo"))


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The calls to Airflow's stats module (pure logic: which names and values go out)."""
    from airflow.sdk.observability import stats

    calls: list[tuple] = []
    monkeypatch.setattr(
        stats, "gauge", lambda name, value, **kw: calls.append(("g", name, value, kw))
    )
    monkeypatch.setattr(stats, "timing", lambda name, dt, **kw: calls.append(("t", name, dt, kw)))
    return calls


def test_writing_a_run_record_sends_its_gauges_and_duration_tagged_with_the_namespace(
    layout: CycleLayout, sent: list[tuple]
) -> None:
    path = write_run_record(
        layout, "solaris_candidates", "00000000000-00000003600", CANDIDATES_RECORD
    )
    assert json.loads(path.read_text())["serving"]["requests"] == 40
    tags = {"tags": {"namespace": "live"}}
    gauges = {name: value for kind, name, value, kw in sent if kind == "g" and kw == tags}
    assert gauges == {
        f"solaris.solaris_candidates.{k}": v for k, v in run_metrics(CANDIDATES_RECORD).items()
    }
    assert ("t", "solaris.solaris_candidates.duration", timedelta(seconds=1.5), tags) in sent
    assert len(sent) == len(gauges) + 1


def test_nothing_is_sent_or_imported_in_a_process_that_does_not_run_airflow(
    layout: CycleLayout, sent: list[tuple], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "airflow.sdk")
    path = write_run_record(layout, "solaris_training", "00000003600", {"seconds": 3.0})
    assert path.is_file()
    assert sent == []


def test_a_failing_metrics_backend_is_logged_and_the_record_still_written(
    layout: CycleLayout, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    from airflow.sdk.observability import stats

    def broken(*args, **kwargs):
        raise OSError("statsd host unreachable")

    monkeypatch.setattr(stats, "gauge", broken)
    with caplog.at_level(logging.WARNING, logger="solaris.orchestration.layout"):
        path = write_run_record(layout, "solaris_training", "00000003600", {"seconds": 3.0})
    assert json.loads(path.read_text())["seconds"] == 3.0
    assert (
        "run metrics of solaris_training not sent (OSError: statsd host unreachable)" in caplog.text
    )
