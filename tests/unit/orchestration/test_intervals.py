"""Which interval a run works on: data interval, conf, asset events; never the wall clock."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd
import pytest

from solaris.config import SolarisConfig
from solaris.orchestration import tasks
from solaris.orchestration.airflow_cycle import CycleReport, window_intervals
from solaris.orchestration.candidates import PSEUDO_REQUEST_BASE, with_misses
from solaris.orchestration.layout import Interval
from solaris.orchestration.resources import CycleInputError, intervals_from, run_interval

CFG = SolarisConfig(selection={"cadence_minutes": 15})


@dataclass
class Event:
    extra: dict


def test_interval_rejects_an_end_not_after_its_start() -> None:
    with pytest.raises(ValueError, match="must be after"):
        Interval(100, 100)


def test_scheduled_run_uses_its_data_interval() -> None:
    start = datetime(1998, 3, 1, 12, 0, tzinfo=UTC)
    end = datetime(1998, 3, 1, 12, 15, tzinfo=UTC)
    assert run_interval(CFG, {}, start, end) == Interval(
        int(start.timestamp()), int(end.timestamp())
    )


def test_zero_length_data_interval_means_the_cadence_interval_ending_then() -> None:
    end = datetime(1998, 3, 1, 12, 15, tzinfo=UTC)
    got = run_interval(CFG, None, end, end)
    assert got == Interval(int(end.timestamp()) - 900, int(end.timestamp()))


def test_conf_interval_overrides_the_data_interval_and_accepts_iso_8601() -> None:
    conf = {"interval_start": "1998-02-28T00:00:00+00:00", "interval_end": 888_710_400}
    assert run_interval(CFG, conf, None, None) == Interval(888_624_000, 888_710_400)


def test_bad_interval_value_is_named_in_the_error() -> None:
    with pytest.raises(ValueError, match="interval_end must be epoch seconds"):
        run_interval(CFG, {"interval_end": "yesterday"}, None, None)
    with pytest.raises(CycleInputError, match="neither interval_end nor a data interval"):
        run_interval(CFG, {}, None, None)


def test_downstream_intervals_come_from_event_extras_deduplicated_and_sorted() -> None:
    extras = [
        {"interval_start": 200, "interval_end": 300, "selected": 4},
        {"interval_start": 100, "interval_end": 200},
        {"interval_start": 200, "interval_end": 300},
        {"note": "a manual event without an interval"},
    ]
    assert intervals_from(extras, None) == [Interval(100, 200), Interval(200, 300)]


def test_downstream_run_without_events_or_conf_says_what_is_missing() -> None:
    with pytest.raises(CycleInputError, match="no interval to work on"):
        intervals_from([], {})


def test_event_extras_reads_only_the_given_asset_and_tolerates_no_events() -> None:
    events = {"a": [Event({"interval_end": 1})], "b": [Event({"interval_end": 2})]}
    assert tasks.event_extras(events, "a") == [{"interval_end": 1}]
    assert tasks.event_extras(events, "c") == []
    assert tasks.event_extras(None, "a") == []


def test_candidates_event_for_several_intervals_is_flattened_for_the_embeddings_run() -> None:
    extra = {
        "interval_start": 0,
        "interval_end": 200,
        "intervals": [
            {"interval_start": 0, "interval_end": 100},
            {"interval_start": 100, "interval_end": 200},
        ],
    }
    got = tasks._triggered_intervals(None, {"c": [Event(extra)]}, "c")
    assert got == [Interval(0, 100), Interval(100, 200)]


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
        return {"interval_start": start, "labelled": labelled, "coverage": tiers}

    report = CycleReport(candidates=[record(0, 100, 0.0), record(10, 30, 1.0), record(20, 10, 0.0)])
    n, coverage = report.coverage(since=10)
    assert n == 40
    assert coverage["pair"] == pytest.approx(30 / 40)
    assert coverage["uagg"] == pytest.approx(0.5)


def test_misses_become_unlabelled_pseudo_requests_unless_the_log_has_them() -> None:
    requests = pd.DataFrame(
        {
            "request_id": [1, 1],
            "user_id": [7, 7],
            "item_id": [10, 11],
            "ts": [500, 500],
            "label": pd.array([1, pd.NA], "Int8"),
        }
    )
    misses = pd.DataFrame({"user_id": [7, 7, 8], "item_id": [10, 12, 12], "ts": [500, 500, 520]})
    got = with_misses(requests, misses)
    added = got[got["request_id"] >= PSEUDO_REQUEST_BASE]
    assert sorted(zip(added["user_id"], added["item_id"], strict=True)) == [(7, 12), (8, 12)]
    assert added["label"].isna().all()
    assert added["request_id"].nunique() == 2  # one pseudo-request per (user, ts)
    assert got["ts"].is_monotonic_increasing


def test_ledger_cache_keeps_a_pair_that_expires_exactly_when_the_interval_starts(
    tmp_path,
) -> None:
    from solaris.orchestration.candidates import ledger_cache
    from solaris.orchestration.layout import CycleLayout
    from solaris.orchestration.resources import write_parquet

    layout = CycleLayout(tmp_path)
    hour, ttl = 3_600, 6 * 3_600
    for start, item in ((-3_600, 1), (0, 2), (3_600, 3)):  # ends at 0 h, 1 h, 2 h
        end = start + hour
        write_parquet(
            pd.DataFrame({"user_id": [7], "item_id": [item], "expires_at": [end + ttl]}),
            layout.selections(Interval(start, end)),
        )
    # Interval [7 h, 8 h): the code of [0 h, 1 h) expires at 7 h, inclusive: still cached.
    cache = ledger_cache(layout, Interval(7 * hour, 8 * hour), ttl)
    assert sorted(cache["item_id"]) == [2, 3]


def test_candidates_intervals_must_be_on_the_cadence_grid() -> None:
    from solaris.orchestration.resources import on_cadence_grid

    assert on_cadence_grid(Interval(900, 1_800), 900, snap=False) == Interval(900, 1_800)
    # A manual run's own interval [run_after - cadence, run_after) is snapped.
    assert on_cadence_grid(Interval(1_000, 1_900), 900, snap=True) == Interval(900, 1_800)
    # An interval someone named is not guessed at.
    with pytest.raises(CycleInputError, match="not on the 900 s cadence grid"):
        on_cadence_grid(Interval(1_000, 1_900), 900, snap=False)
    with pytest.raises(CycleInputError, match="length is 900"):
        on_cadence_grid(Interval(0, 1_800), 900, snap=False)
