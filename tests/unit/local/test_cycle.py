"""The local runner's window and report (the demo's ``dag.test`` cycle)."""

from __future__ import annotations

import itertools
import stat
import uuid
from pathlib import Path

import pytest

from solaris.config import SolarisConfig, StoreConfig
from solaris.local.cycle import CycleReport, downstream_conf, export_config, window_intervals
from solaris.orchestration.layout import Interval


def test_window_intervals_are_cadence_aligned_and_cover_the_window() -> None:
    got = window_intervals(1_000, 4_000, 900)
    assert got[0] == Interval(900, 1_800)
    assert got[-1].end >= 4_000 > got[-1].start
    assert all(a.end == b.start for a, b in itertools.pairwise(got))
    with pytest.raises(ValueError, match="positive"):
        window_intervals(0, 10, 0)


def test_cycle_coverage_is_weighted_by_impressions_and_skips_the_warm_up() -> None:
    def record(start: int, labelled: int, pair: float) -> dict:
        tiers = {"pair": pair, "nbr": 0.0, "uagg": 0.5, "iagg": 1.0, "any": 1.0}
        interval = {"interval_start": start, "interval_end": start + 10}
        return {**interval, "labelled": labelled, "coverage": tiers}

    report = CycleReport(candidates=[record(0, 100, 0.0), record(10, 30, 1.0), record(20, 10, 0.0)])
    n, coverage = report.coverage(since=10)
    assert n == 40
    assert coverage["pair"] == pytest.approx(30 / 40)
    assert coverage["uagg"] == pytest.approx(0.5)


def test_downstream_conf_carries_the_namespace_and_every_interval() -> None:
    extra = {"namespace": "demo", "replay": True, "interval_start": 0, "interval_end": 900}
    assert downstream_conf(extra) == {
        "namespace": "demo",
        "replay": True,
        "intervals": [{"interval_start": 0, "interval_end": 900}],
    }


def test_exported_config_is_owner_only_atomic_and_reads_back_a_password_yaml_would_break(
    tmp_path: Path,
) -> None:
    password = f"p\"a:s#'{uuid.uuid4().hex}: {{x}}"  # quotes, ':', '#', braces: YAML syntax
    cfg = SolarisConfig(
        namespace="demo",
        store=StoreConfig(redis=f"127.0.0.1:6379,username=u,password={password}"),
    )
    path = tmp_path / "airflow" / "solaris.yaml"
    path.parent.mkdir()
    path.write_text("old: world-readable\n")
    path.chmod(0o644)
    assert export_config(cfg, path) == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["solaris.yaml"]  # no temp file
    assert SolarisConfig.load(path) == cfg


def test_a_failed_export_leaves_the_previous_file(tmp_path: Path, monkeypatch) -> None:
    import yaml

    path = tmp_path / "solaris.yaml"
    path.write_text("previous: 1\n")

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(yaml, "safe_dump", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        export_config(SolarisConfig(), path)
    assert path.read_text() == "previous: 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["solaris.yaml"]
