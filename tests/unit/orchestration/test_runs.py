"""A task's edge: its settings, namespace and intervals, from conf, events or its data
interval; never the wall clock, never another namespace."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from solaris.orchestration.layout import Interval
from solaris.orchestration.runs import (
    CycleInputError,
    event_extras,
    on_cadence_grid,
    task_run,
)


@dataclass
class Event:
    extra: dict


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SOLARIS_"):
            monkeypatch.delenv(name)


def test_scheduled_run_uses_its_data_interval_in_the_configured_namespace() -> None:
    start = datetime(1998, 3, 1, 12, 0, tzinfo=UTC)
    end = datetime(1998, 3, 1, 12, 15, tzinfo=UTC)
    run = task_run({}, start, end, grid=True)
    assert run.intervals == (Interval(int(start.timestamp()), int(end.timestamp())),)
    assert run.cfg.namespace == "live" and not run.cfg.replay


def test_zero_length_data_interval_means_the_cadence_interval_ending_then() -> None:
    end = datetime(1998, 3, 1, 12, 15, tzinfo=UTC)
    assert task_run(None, end, end).intervals == (
        Interval(int(end.timestamp()) - 900, int(end.timestamp())),
    )


def test_conf_names_the_namespace_and_an_hourly_interval_at_the_default_cadence() -> None:
    conf = {
        "namespace": "replay_1998",
        "replay": True,
        "interval_start": "1998-03-31T00:00:00+00:00",
        "interval_end": "1998-03-31T01:00:00+00:00",
    }
    run = task_run(conf, None, None, grid=True)
    assert run.cfg.namespace == "replay_1998" and run.cfg.replay
    assert run.intervals == (Interval(891_302_400, 891_306_000),)
    assert run.namespace.cycle_root.parts[-2:] == ("namespaces", "replay_1998")
    assert run.extra({"selected": 3}) == {"namespace": "replay_1998", "replay": True, "selected": 3}


def test_conf_errors_name_the_key() -> None:
    with pytest.raises(CycleInputError, match="unknown conf keys \\['interval_ned'\\]"):
        task_run({"interval_ned": 5})
    with pytest.raises(CycleInputError, match=r"conf\.interval_end: epoch seconds or ISO"):
        task_run({"interval_start": 0, "interval_end": "yesterday"})
    with pytest.raises(CycleInputError, match="no time zone"):
        task_run({"interval_start": "1998-03-31T00:00:00", "interval_end": 891_306_000})
    with pytest.raises(CycleInputError, match="is not after interval_start"):
        task_run({"interval_start": 891_306_000, "interval_end": 891_302_400})
    with pytest.raises(CycleInputError, match="interval_end without interval_start"):
        task_run({"interval_end": 891_306_000})
    with pytest.raises(CycleInputError, match="is not a time"):
        task_run({"interval_start": float("nan"), "interval_end": 1})
    with pytest.raises(CycleInputError, match="namespace"):
        task_run({"namespace": "Bad-Name", "interval_start": 0, "interval_end": 900})
    with pytest.raises(CycleInputError, match="no interval to work on"):
        task_run({})


def test_downstream_run_takes_namespace_and_intervals_from_its_events() -> None:
    extras = [
        {"namespace": "replay_a", "replay": True, "interval_start": 900, "interval_end": 1800},
        {"namespace": "replay_a", "replay": True, "interval_start": 0, "interval_end": 900},
        {"namespace": "replay_a", "replay": True, "interval_start": 900, "interval_end": 1800},
    ]
    run = task_run(None, events={"solaris://c": [Event(e) for e in extras]}, asset="solaris://c")
    assert run.cfg.namespace == "replay_a"
    assert run.intervals == (Interval(0, 900), Interval(900, 1800))
    assert run.as_of == 1800


def test_events_of_two_namespaces_never_share_a_run() -> None:
    events = {
        "solaris://c": [
            Event({"namespace": "live", "interval_start": 0, "interval_end": 900}),
            Event({"namespace": "demo", "interval_start": 0, "interval_end": 900}),
        ]
    }
    with pytest.raises(CycleInputError, match="several namespaces"):
        task_run(None, events=events, asset="solaris://c")


def test_an_event_for_several_intervals_is_flattened() -> None:
    extra = {
        "namespace": "live",
        "interval_start": 0,
        "interval_end": 200,
        "intervals": [
            {"interval_start": 0, "interval_end": 100},
            {"interval_start": 100, "interval_end": 200},
        ],
    }
    run = task_run(None, events={"c": [Event(extra)]}, asset="c")
    assert run.intervals == (Interval(0, 100), Interval(100, 200))


def test_event_extras_reads_only_the_given_asset_by_key_or_name() -> None:
    @dataclass(frozen=True)
    class Asset:
        name: str

    events = {Asset("a"): [Event({"interval_end": 1})], "b": [Event({"interval_end": 2})]}
    assert event_extras(events, "a") == [{"interval_end": 1}]
    assert event_extras(events, "b") == [{"interval_end": 2}]
    assert event_extras(events, "c") == []
    assert event_extras(None, "a") == []


def test_candidates_intervals_must_be_on_the_cadence_grid() -> None:
    assert on_cadence_grid(Interval(900, 1_800), 900, snap=False) == Interval(900, 1_800)
    # Several steps of the grid: an hourly replay at a 15-minute cadence.
    assert on_cadence_grid(Interval(0, 3_600), 900, snap=False) == Interval(0, 3_600)
    # A manual run's own interval [run_after - cadence, run_after) is snapped.
    assert on_cadence_grid(Interval(1_000, 1_900), 900, snap=True) == Interval(900, 1_800)
    # An interval someone named is not guessed at.
    with pytest.raises(CycleInputError, match="not on the 900 s cadence grid"):
        on_cadence_grid(Interval(1_000, 1_900), 900, snap=False)


def test_cron_times_are_the_fire_times_in_a_half_open_range() -> None:
    from solaris.orchestration.runs import cron_times

    midnight = 891_302_400  # 1998-03-31T00:00:00Z
    assert cron_times("0 0 * * *", midnight - 1, midnight) == [midnight]
    assert cron_times("0 0 * * *", midnight, midnight + 86_399) == []
    assert cron_times("0 0 * * *", midnight - 86_400, midnight + 86_400) == [
        midnight,
        midnight + 86_400,
    ]


def test_events_of_a_replay_and_the_live_cycle_merged_into_one_run_are_split() -> None:
    from solaris.orchestration.runs import combine_extras, task_runs

    events = {
        "c": [
            Event({"namespace": "live", "replay": False, "interval_start": 0, "interval_end": 900}),
            Event({"namespace": "demo", "replay": True, "interval_start": 0, "interval_end": 900}),
            Event(
                {"namespace": "demo", "replay": True, "interval_start": 900, "interval_end": 1800}
            ),
        ]
    }
    runs = task_runs(None, events, "c")
    assert [(r.cfg.namespace, r.cfg.replay, r.intervals) for r in runs] == [
        ("live", False, (Interval(0, 900),)),
        ("demo", True, (Interval(0, 900), Interval(900, 1800))),
    ]
    # Their records travel in one event, and a downstream run splits them again.
    extra = combine_extras([r.extra({"interval_start": 0, "interval_end": 900}) for r in runs])
    again = task_runs(None, {"d": [Event(extra)]}, "d")
    assert [r.cfg.namespace for r in again] == ["live", "demo"]


def test_a_conf_that_names_its_work_ignores_the_events() -> None:
    from solaris.orchestration.runs import task_runs

    events = {"c": [Event({"namespace": "demo", "interval_start": 0, "interval_end": 900})]}
    conf = {"namespace": "other", "interval_start": 900, "interval_end": 1800}
    [run] = task_runs(conf, events, "c")
    assert (run.cfg.namespace, run.intervals) == ("other", (Interval(900, 1800),))
