"""The clustering DAG's sensor: what a replay's daily clustering run waits for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from solaris.config import SolarisConfig
from solaris.namespace import Namespace
from solaris.orchestration.clustering import enrichment_published
from solaris.orchestration.enrichment import ENRICHMENT_DAG_ID
from solaris.orchestration.layout import CycleLayout, Interval, write_run_record

DAY, H = 86_400, 3_600
T0 = 19_675 * DAY  # 2023-11-14T00:00:00Z: a midnight, the daily cron's time
CANDIDATES = "solaris_candidates"


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CycleLayout:
    for name in [k for k in os.environ if k.startswith("SOLARIS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path / "artifacts"))
    monkeypatch.setenv("SOLARIS_STORE__REPO_PATH", str(tmp_path / "repo"))
    return CycleLayout(Namespace.of(SolarisConfig.load(namespace="r1")))


def _poke(as_of: int) -> bool:
    conf = {"namespace": "r1", "replay": True, "interval_start": as_of - DAY, "interval_end": as_of}
    return enrichment_published(conf, None, None)


def _candidates(layout: CycleLayout, start: int, end: int) -> None:
    key = Interval(start, end).key
    write_run_record(layout, CANDIDATES, key, {"interval_start": start, "interval_end": end,
                                               "replay": True})  # fmt: skip


def test_a_replay_window_starting_at_the_clusterings_time_does_not_wait_a_day(layout) -> None:
    """The drill's deadlock: the first clustering run of a window starting at midnight
    waited for an enrichment as of midnight, which only an interval before the window has."""
    assert not _poke(T0)  # the replay has not begun: it may still start earlier
    _candidates(layout, T0, T0 + 6 * H)
    assert _poke(T0)  # it began at T0: nothing before it will ever be enriched


def test_a_later_clustering_run_still_waits_for_the_enrichment_as_of_its_time(layout) -> None:
    _candidates(layout, T0, T0 + 6 * H)
    assert not _poke(T0 + DAY)  # the replay's day 1 is not enriched yet
    write_run_record(layout, ENRICHMENT_DAG_ID, f"{T0 + DAY:011d}-uagg", {"interval_end": T0})
    assert _poke(T0 + DAY)
