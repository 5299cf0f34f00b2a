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
from solaris.store.contract import MAX_EPOCH_S


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


# -- DAG conf: every bad value is an error naming its field ----------------------------------

_START = 891_302_400  # 1998-03-31T00:00:00Z
_END = _START + 3_600


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"interval_start": _END, "interval_end": _START}, r"conf: interval_end .* not after"),
        ({"interval_start": _START, "interval_end": _START}, r"conf: interval_end .* not after"),
        (
            {"intervals": [{"interval_start": _END, "interval_end": _START}]},
            r"conf intervals\[0\]: interval_end .* not after",
        ),
    ],
)
def test_an_end_at_or_before_its_start_is_rejected_naming_the_field(
    conf: dict, message: str
) -> None:
    with pytest.raises(CycleInputError, match=message):
        task_run(conf)


@pytest.mark.parametrize("naive", ["1998-03-31T00:00:00", "1998-03-31", "1998-03-31 00:00"])
def test_a_naive_iso_time_is_rejected_not_read_in_the_local_zone(naive: str) -> None:
    with pytest.raises(CycleInputError, match=r"conf\.interval_start: .* has no time zone"):
        task_run({"interval_start": naive, "interval_end": _END})
    # Also a naive datetime object (a conf built in Python, or pendulum's naive DateTime).
    with pytest.raises(CycleInputError, match=r"conf\.interval_end: .* has no time zone"):
        task_run({"interval_start": _START, "interval_end": datetime(1998, 3, 31, 1)})


def test_an_iso_time_with_a_zone_is_read_in_that_zone() -> None:
    run = task_run(
        {"interval_start": "1998-03-31T02:00:00+02:00", "interval_end": "1998-03-31T01:00:00Z"}
    )
    assert run.intervals == (Interval(_START, _END),)


@pytest.mark.parametrize(
    "bad",
    [
        float("nan"),
        float("inf"),
        float("-inf"),
        "nan",
        "NaN",
        "inf",
        "-inf",
        "Infinity",
        True,
        False,
        {"seconds": 5},
        [_START],
        {"interval_start": _START},
        b"891302400",
        "",
        " ",
        "٨٩١٣٠٢٤٠٠",  # digits, but not ASCII ones
        "²",  # isdigit() is true for it; int() is not
        "1e9",
        "0x10",
        891_302_400.5,  # not whole seconds
        10**20,  # beyond year 9999
        str(10**20),
        "9" * 5_000,  # longer than int() converts
        -1,  # before 1970
        MAX_EPOCH_S,  # 2286: past what the online store records
        "9999-12-31T23:59:59+00:00",
    ],
    ids=lambda v: repr(v)[:24],
)
@pytest.mark.parametrize("field", ["interval_start", "interval_end"])
def test_a_time_that_is_not_epoch_seconds_or_iso_8601_names_its_field(
    bad: object, field: str
) -> None:
    conf = {"interval_start": _START, "interval_end": _END, field: bad}
    with pytest.raises(CycleInputError, match=rf"conf\.{field}: "):
        task_run(conf)


@pytest.mark.parametrize(
    "good", [_START, float(_START), str(_START), "1998-03-31T00:00:00+00:00", 0]
)
def test_epoch_seconds_as_int_whole_float_or_digits_and_iso_are_accepted(good: object) -> None:
    end = 900 if good == 0 else _END  # a run spans at most 31 days
    run = task_run({"interval_start": good, "interval_end": end})
    assert run.intervals[0].start == (0 if good == 0 else _START)


def test_the_largest_time_accepted_is_the_online_stores_last_second() -> None:
    last = MAX_EPOCH_S - 1
    assert task_run({"interval_start": last - 1, "interval_end": last}).intervals == (
        Interval(last - 1, last),
    )


@pytest.mark.parametrize(
    ("intervals", "message"),
    [
        ([], r"conf intervals: expected a non-empty list"),
        ("0-900", r"conf intervals: expected a non-empty list"),
        (b"ab", r"conf intervals: expected a non-empty list"),
        ({"interval_start": 0, "interval_end": 900}, r"conf intervals: expected a non-empty"),
        (5, r"conf intervals: expected a non-empty list"),
        ([5], r"conf intervals\[0\]: expected an object"),
        ([[0, 900]], r"conf intervals\[0\]: expected an object"),
        (
            [{"interval_start": 0, "interval_end": 900}, "x"],
            r"conf intervals\[1\]: expected an object",
        ),
        ([{"interval_start": 0}], r"conf intervals\[0\]: interval_end missing"),
        ([{}], r"conf intervals\[0\]: interval_start and interval_end missing"),
        (
            [{"interval_start": float("nan"), "interval_end": 900}],
            r"conf intervals\[0\]\.interval_start: ",
        ),
        (
            [{"interval_start": 0, "interval_end": {"nested": [1, 2]}}],
            r"conf intervals\[0\]\.interval_end: ",
        ),
        (
            [{"interval_start": 0, "interval_end": 900, "interval_ned": 1}],
            r"conf intervals\[0\]: unknown keys \['interval_ned'\]",
        ),
    ],
    ids=lambda v: repr(v)[:40],
)
def test_a_malformed_intervals_list_is_rejected_naming_the_entry(
    intervals: object, message: str
) -> None:
    with pytest.raises(CycleInputError, match=message):
        task_run({"intervals": intervals})


def test_intervals_and_a_single_interval_together_are_rejected() -> None:
    conf = {
        "interval_start": 0,
        "interval_end": 900,
        "intervals": [{"interval_start": 900, "interval_end": 1800}],
    }
    with pytest.raises(CycleInputError, match="either intervals or interval_start/interval_end"):
        task_run(conf)


def test_an_interval_start_without_its_end_is_rejected_not_replaced_by_the_data_interval() -> None:
    end = datetime(1998, 3, 31, 1, tzinfo=UTC)
    with pytest.raises(CycleInputError, match="interval_start without interval_end"):
        task_run({"interval_start": _START}, None, end)


@pytest.mark.parametrize("flag", ["true", "yes", 1, 0, "false", [], {"a": 1}, 1.0])
def test_a_replay_flag_that_is_not_a_bool_is_rejected(flag: object) -> None:
    with pytest.raises(CycleInputError, match=r"conf replay: expected true or false"):
        task_run(
            {"namespace": "replay_t", "replay": flag, "interval_start": 0, "interval_end": 900}
        )
    with pytest.raises(CycleInputError, match=r"conf replay: expected true or false"):
        task_run({"replay": flag, "interval_start": 0, "interval_end": 900})


@pytest.mark.parametrize("namespace", [5, True, ["live"], {"name": "live"}, "", "Bad-Name", 1.5])
def test_a_namespace_of_the_wrong_type_or_form_is_rejected_naming_it(namespace: object) -> None:
    with pytest.raises(CycleInputError, match=r"conf namespace"):
        task_run({"namespace": namespace, "interval_start": 0, "interval_end": 900})


def test_a_data_interval_error_names_the_data_interval() -> None:
    with pytest.raises(CycleInputError, match=r"data_interval_start: .* no time zone"):
        task_run({}, datetime(1998, 3, 31), datetime(1998, 3, 31, 1, tzinfo=UTC))


def test_a_data_interval_that_ends_before_it_starts_is_rejected_not_rewritten() -> None:
    start = datetime(1998, 3, 31, 1, tzinfo=UTC)
    end = datetime(1998, 3, 31, 0, 45, tzinfo=UTC)
    with pytest.raises(
        CycleInputError, match=r"data_interval_end .* is before data_interval_start"
    ):
        task_run({}, start, end)


def test_an_asset_event_interval_that_is_not_an_object_names_the_event() -> None:
    events = {"c": [Event({"namespace": "live", "intervals": [5]})]}
    with pytest.raises(CycleInputError, match="asset event: expected an object"):
        task_run(None, events=events, asset="c")


@pytest.mark.parametrize(
    ("conf", "where"),
    [
        ({"interval_start": _START + 7, "interval_end": _END}, "conf"),
        (
            {
                "intervals": [
                    {"interval_start": _START, "interval_end": _END},
                    {"interval_start": _END, "interval_end": _END + 7},
                ]
            },
            r"conf intervals\[1\]",
        ),
    ],
)
def test_an_interval_off_the_cadence_grid_names_where_the_conf_gave_it(
    conf: dict, where: str
) -> None:
    with pytest.raises(CycleInputError, match=rf"^{where}: .*not on the 900 s cadence grid"):
        task_run(conf, grid=True)


@pytest.mark.parametrize("conf", [[1, 2], "interval_start=1", 42, []], ids=repr)
def test_a_conf_that_is_not_an_object_is_rejected_naming_the_conf(conf: object) -> None:
    with pytest.raises(CycleInputError, match=r"^conf: expected an object"):
        task_run(conf)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"namespace": "a", "replay": "no"}, r"^asset event replay: expected true or false"),
        ({"namespace": "Bad-Name"}, r"^asset event namespace: .*Bad-Name"),
        ({"namespace": ["a"]}, r"^asset event namespace: "),
    ],
)
def test_an_asset_events_namespace_and_replay_flag_are_checked_as_the_confs(
    extra: dict, message: str
) -> None:
    from solaris.orchestration.runs import task_runs

    events = {"c": [Event({**extra, "interval_start": 0, "interval_end": 900})]}
    for call in (task_run, task_runs):
        with pytest.raises(CycleInputError, match=message):
            call(None, events=events, asset="c")


def test_finish_run_outside_airflow_does_nothing() -> None:
    """Called from a script or a test (no outlet events), the work's caller gets control
    back; inside a task it raises Airflow's skip of the tasks below (the DAG tests)."""
    from solaris.orchestration.runs import finish_run

    assert finish_run(None) is None
