"""Bad DAG run confs and asset events: an end before its start, naive ISO times, NaN, inf,
``"nan"``, booleans as times, malformed ``intervals`` lists, intervals off the cadence grid,
a namespace of the wrong type, a replay flag that is not a boolean, events of several
namespaces.

Through :func:`~solaris.orchestration.runs.task_run` and
:func:`~solaris.orchestration.runs.task_runs`, the edge of every task. The error is a
:class:`~solaris.orchestration.resources.CycleInputError` (a ``SolarisError``) whose message
names the field as the run's conf spells it (``conf intervals[1].interval_end``) or the asset
event it came from; nothing is written (the run's artifacts folder and feature repo are
compared before and after).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from solaris.errors import SolarisError
from solaris.orchestration.runs import CANDIDATES, CycleInputError, task_run, task_runs

H = 3600
T = 1_000_000_800  # on the hour (2001-09-09 02:00 UTC), hence on the 15-minute grid


def _interval(start: Any = T, end: Any = T + H) -> dict[str, Any]:
    return {"interval_start": start, "interval_end": end}


def _events(*extras: dict[str, Any]) -> dict[str, list[SimpleNamespace]]:
    """Triggering asset events of the candidates asset, as Airflow hands them to a task."""
    return {CANDIDATES: [SimpleNamespace(extra=extra) for extra in extras]}


@pytest.fixture
def run_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snapshot_files) -> Any:
    """The settings a task builds point into ``tmp_path`` (its working directory too); the
    result snapshots that folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path / "artifacts"))
    monkeypatch.setenv("SOLARIS_STORE__REPO_PATH", str(tmp_path / "feature_repo"))
    (tmp_path / "artifacts" / "namespaces" / "live").mkdir(parents=True)
    (tmp_path / "artifacts" / "namespaces" / "live" / "ledger.parquet").write_bytes(b"old")
    ran_live = tmp_path / "artifacts" / "namespaces" / "prod" / "runs" / "solaris_candidates"
    ran_live.mkdir(parents=True)
    (ran_live / "01000000000-01000000900.json").write_text('{"replay": false}')
    return snapshot_files(tmp_path)


CONF_CASES = [
    pytest.param(_interval(T + H, T), r"^conf\b.*interval_end \d+ is not after interval_start",
                 id="end-before-start"),
    pytest.param(_interval(T, T), r"^conf\b.*interval_end \d+ is not after interval_start",
                 id="end-equal-to-start"),
    pytest.param(_interval("2001-09-09T02:00:00", "2001-09-09T03:00:00+00:00"),
                 r"^conf[ .]interval_start: .*has no time zone", id="naive-iso-start"),
    pytest.param(_interval(float("nan")), r"^conf[ .]interval_start: nan is not a time",
                 id="nan-start"),
    pytest.param(_interval(T, float("inf")), r"^conf[ .]interval_end: inf is not a time",
                 id="inf-end"),
    pytest.param(_interval("nan"), r"^conf[ .]interval_start: .*got 'nan'", id="nan-string-start"),
    pytest.param(_interval(True), r"^conf[ .]interval_start: .*got True", id="bool-start"),
    pytest.param(_interval(T, False), r"^conf[ .]interval_end: .*got False", id="bool-end"),
    pytest.param(_interval(T * 1000, (T + H) * 1000),
                 r"^conf[ .]interval_start: .*outside \[0, 1e\+10\)", id="milliseconds"),
    pytest.param(_interval(-H, 0), r"^conf[ .]interval_start: .*outside \[0, 1e\+10\)",
                 id="before-1970"),
    pytest.param(_interval(T + 0.5), r"^conf[ .]interval_start: .*not whole", id="fractional"),
    pytest.param({"interval_end": T}, r"^conf\b.*interval_end without interval_start",
                 id="end-without-start"),
    pytest.param({"intervals": _interval()}, r"^conf intervals: expected a non-empty list",
                 id="intervals-not-a-list"),
    pytest.param({"intervals": "[]"}, r"^conf intervals: expected a non-empty list",
                 id="intervals-a-string"),
    pytest.param({"intervals": []}, r"^conf intervals: expected a non-empty list",
                 id="intervals-empty"),
    pytest.param({"intervals": ["a", "b"]}, r"^conf intervals\[0\]: expected an object",
                 id="intervals-of-strings"),
    pytest.param({"intervals": [_interval(), {"interval_start": T + H}]},
                 r"^conf intervals\[1\]: interval_end missing", id="interval-end-missing"),
    pytest.param({"intervals": [_interval(), _interval(T + 2 * H, T + H)]},
                 r"^conf intervals\[1\]: interval_end \d+ is not after", id="entry-ends-first"),
    pytest.param({"intervals": [_interval(), _interval(T + H, float("nan"))]},
                 r"^conf intervals\[1\]\.interval_end: nan is not a time", id="entry-nan-end"),
    pytest.param({"intervals": [_interval(), _interval(True, T + 2 * H)]},
                 r"^conf intervals\[1\]\.interval_start: .*True", id="entry-bool-start"),
    pytest.param(_interval(T + 7, T + H), r"^conf\b.*not on the 900 s cadence grid", id="off-grid"),
    pytest.param({"intervals": [_interval(), _interval(T + H, T + H + 7)]},
                 r"^conf intervals\[1\].*not on the 900 s cadence grid",
                 id="entry-off-grid"),
    pytest.param({"namespace": 5, **_interval()}, r"^conf namespace: .*\b5\b",
                 id="namespace-an-int"),
    pytest.param({"namespace": ["replay"], **_interval()}, r"^conf namespace: .*\['replay'\]",
                 id="namespace-a-list"),
    pytest.param({"namespace": "Replay-1998", **_interval()}, r"^conf namespace: .*Replay-1998",
                 id="namespace-with-capitals"),
    pytest.param({"namespace": "r1998", "replay": "yes", **_interval()},
                 r"^conf replay: expected true or false, got 'yes'", id="replay-a-string"),
    pytest.param({"namespace": "r1998", "replay": 1, **_interval()},
                 r"^conf replay: expected true or false, got 1", id="replay-an-int"),
    pytest.param({"interval_ned": T}, r"^unknown conf keys \['interval_ned'\]", id="unknown-key"),
    pytest.param({"intervals": [_interval(), _interval(T + H // 2, T + 2 * H)]},
                 r"^conf intervals\[1\]: \[\d+, \d+\) overlaps conf intervals\[0\] .*counted "
                 r"twice", id="overlapping-intervals"),
    pytest.param({"intervals": [_interval(), _interval(T + H, T + 2 * H), _interval()]},
                 r"^conf intervals\[2\]: repeats conf intervals\[0\]", id="repeated-interval"),
    pytest.param({"intervals": [_interval(T + k * 900, T + (k + 1) * 900) for k in range(10_001)]},
                 r"^conf intervals\[0\]: 10,001 intervals in one run, at most 10,000",
                 id="too-many-intervals"),
    pytest.param(_interval(0, 9_999_999_000),
                 r"^conf: one run spans 115,740.7 days .*at most 31", id="1970-to-2286"),
    pytest.param({"intervals": [_interval(), _interval(T + 40 * 86_400, T + 40 * 86_400 + H)]},
                 r"^conf intervals\[0\]: one run spans 40\.0 days", id="span-over-a-month"),
    pytest.param({"replay": True, **_interval()},
                 r"^will not replay into namespace 'live': 'live' is the live namespace.*"
                 r"name a replay namespace$", id="replay-into-the-default-namespace"),
    pytest.param({"namespace": "live", "replay": True, **_interval()},
                 r"^will not replay into namespace 'live'", id="replay-into-live"),
    pytest.param({"namespace": "prod", "replay": True, **_interval()},
                 r"^will not replay into namespace 'prod': 'prod' holds a cycle run on live "
                 r"traffic", id="replay-into-a-namespace-that-ran-live"),
]  # fmt: skip


@pytest.mark.parametrize(("conf", "message"), CONF_CASES)
def test_a_bad_conf_is_refused_naming_the_field_and_nothing_is_written(
    conf: dict[str, Any], message: str, run_folders
) -> None:
    before = run_folders()

    with pytest.raises(CycleInputError, match=message) as caught:
        task_run(conf, grid=True)

    assert isinstance(caught.value, SolarisError)
    assert run_folders() == before


@pytest.mark.parametrize("conf", [[1, 2], "interval_start=1", 42], ids=["list", "str", "int"])
def test_a_conf_that_is_not_a_mapping_is_refused_naming_the_conf(conf: Any, run_folders) -> None:
    before = run_folders()
    with pytest.raises(CycleInputError, match=r"^conf\b"):
        task_run(conf)  # type: ignore[arg-type]
    assert run_folders() == before


def test_the_valid_conf_of_these_cases_is_accepted(run_folders) -> None:
    run = task_run({"namespace": "r1998", "replay": True, **_interval()}, grid=True)
    assert (run.cfg.namespace, run.cfg.replay) == ("r1998", True)
    assert [(i.start, i.end) for i in run.intervals] == [(T, T + H)]
    # Adjacent intervals, given in any order, and one event carried twice are fine.
    later = _interval(T + H, T + 2 * H)
    run = task_run({"namespace": "r1998", "intervals": [later, _interval()]}, grid=True)
    assert [(i.start, i.end) for i in run.intervals] == [(T, T + H), (T + H, T + 2 * H)]
    twice = _events({"namespace": "a", **_interval()}, {"namespace": "a", **_interval()})
    assert len(task_run(None, events=twice, asset=CANDIDATES).intervals) == 1
    # Events merged by the scheduler may lie far apart (a replay's and today's interval of
    # one namespace): the bounds are the conf's.
    far = _interval(T + 3_000 * 86_400, T + 3_000 * 86_400 + H)
    apart = _events({"namespace": "a", **_interval()}, {"namespace": "a", **far})
    assert len(task_run(None, events=apart, asset=CANDIDATES).intervals) == 2


def _trigger_time_check(conf: dict[str, Any]) -> None:
    """What Airflow runs as it creates a run (``create_dagrun``: the DAG's serialized
    params, ``deep_merge(conf).validate()``), on the DAGs' Params."""
    from airflow.serialization.definitions.param import SerializedParam, SerializedParamsDict

    from solaris.orchestration.runs import conf_params

    params = SerializedParamsDict(
        {k: SerializedParam(p.value, p.description, **p.schema) for k, p in conf_params().items()}
    )
    params.deep_merge(conf).validate()


VALID_CONFS = [
    pytest.param({}, id="empty"),
    pytest.param({"namespace": "r1998", "replay": True, **_interval()}, id="replay-interval"),
    pytest.param(_interval("2001-09-09T02:00:00+00:00", str(T + H)), id="iso-and-digits"),
    pytest.param({"intervals": [_interval(), _interval(T + H, T + 2 * H)]}, id="intervals"),
    pytest.param({"replay": False, "namespace": None, **_interval()}, id="explicit-nulls"),
]


@pytest.mark.parametrize("conf", VALID_CONFS)
def test_the_dags_params_accept_every_conf_a_task_accepts(
    conf: dict[str, Any], run_folders
) -> None:
    _trigger_time_check(conf)
    if conf:
        assert task_run(conf, grid=True).intervals


SHAPE_CASES = [
    pytest.param({"replay": "yes"}, "replay", id="replay-a-string"),
    pytest.param({"replay": 1}, "replay", id="replay-an-int"),
    pytest.param({"namespace": 5}, "namespace", id="namespace-an-int"),
    pytest.param({"namespace": "Replay-1998"}, "namespace", id="namespace-with-capitals"),
    pytest.param(_interval(True, T + H), "interval_start", id="bool-start"),
    pytest.param(_interval(T * 1000, (T + H) * 1000), "interval_start", id="milliseconds"),
    pytest.param(_interval(-H, 0), "interval_start", id="before-1970"),
    pytest.param(_interval(T, ""), "interval_end", id="empty-end"),
    pytest.param({"intervals": []}, "intervals", id="intervals-empty"),
    pytest.param({"intervals": "[]"}, "intervals", id="intervals-a-string"),
    pytest.param({"intervals": ["a", "b"]}, "intervals", id="intervals-of-strings"),
    pytest.param({"intervals": [{"interval_start": T}]}, "intervals", id="interval-end-missing"),
    pytest.param({"intervals": [{**_interval(), "x": 1}]}, "intervals", id="interval-extra-key"),
    pytest.param({"intervals": [_interval()] * 10_001}, "intervals", id="too-many-intervals"),
    pytest.param({"intervals": [_interval(), _interval()]}, "intervals", id="interval-repeated"),
]


@pytest.mark.parametrize(("conf", "key"), SHAPE_CASES)
def test_the_dags_params_refuse_a_conf_of_the_wrong_shape_at_trigger_time(
    conf: dict[str, Any], key: str
) -> None:
    """Each of these fails the run's first task too (``CONF_CASES``); the Params refuse it
    before the run exists, naming the key."""
    from airflow.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match=rf"Invalid input for param {key}:"):
        _trigger_time_check(conf)


# --------------------------------------------------------------------------------------------
# Triggering asset events
# --------------------------------------------------------------------------------------------


EVENT_CASES = [
    pytest.param([{"namespace": "a", **_interval()}, {"namespace": "b", **_interval()}],
                 r"events of several namespaces \['a', 'b'\]", id="several-namespaces"),
    pytest.param([{"namespace": "a", "replay": True, **_interval()},
                  {"namespace": "a", "replay": False, **_interval(T + H, T + 2 * H)}],
                 r"events of namespace a disagree on its replay flag", id="replay-flags-disagree"),
    pytest.param([{"namespace": "a", **_interval(T, float("nan"))}],
                 r"^asset event\b.*interval_end: nan is not a time", id="nan-end"),
    pytest.param([{"namespace": "a", **_interval(T + H, T)}],
                 r"^asset event\b.*interval_end \d+ is not after", id="end-before-start"),
    pytest.param([{"namespace": "a", "intervals": ["x"]}],
                 r"^asset event\b.*expected an object", id="intervals-of-strings"),
    pytest.param([{"namespace": "a", "replay": "no", **_interval()}],
                 r"^asset event\b.*replay.*'no'", id="replay-a-string"),
    pytest.param([{"namespace": "Bad-Name", **_interval()}],
                 r"^asset event\b.*namespace.*Bad-Name",
                 id="namespace-with-capitals"),
    pytest.param([{"namespace": "a", **_interval()}, {"namespace": "a", **_interval(T, T + 2 * H)}],
                 r"^asset event: \[\d+, \d+\) overlaps asset event", id="overlapping-events"),
    pytest.param([{"runs": 5}], r"^asset event runs: expected a non-empty list of run "
                 r"records, got 5", id="runs-a-number"),
    pytest.param([{"runs": [5]}], r"^asset event: expected an object, got 5",
                 id="runs-of-numbers"),
    pytest.param([{"namespace": "live", "replay": True, **_interval()}],
                 r"^will not replay into namespace 'live'", id="replay-event-into-live"),
    # An extra of the wrong shape: once a raw TypeError or ValueError from dict() or a loop.
    pytest.param([5], r"^asset event \S*candidates\[0\] extra: expected an object .*got int 5",
                 id="extra-a-number"),
    pytest.param([{"namespace": "a", **_interval()}, [("namespace", "a"), 7]],
                 r"^asset event \S*candidates\[1\] extra: expected an object .*got list",
                 id="extra-a-list"),
    pytest.param(["namespace=a"], r"^asset event \S*candidates\[0\] extra: .*got str",
                 id="extra-a-string"),
    pytest.param([{"namespace": "a", "intervals": 5}],
                 r"^asset event intervals: expected a list .*got int 5", id="intervals-a-number"),
    pytest.param([{"namespace": "a", "intervals": _interval()}],
                 r"^asset event intervals: expected a list .*got dict", id="intervals-an-object"),
    pytest.param([{"runs": [{"namespace": "a", "intervals": 7}]}],
                 r"^asset event intervals: expected a list .*got int 7",
                 id="run-record-intervals-a-number"),
]  # fmt: skip


@pytest.mark.parametrize(("extras", "message"), EVENT_CASES)
def test_bad_triggering_events_are_refused_naming_the_event_field(
    extras: list[dict[str, Any]], message: str, run_folders
) -> None:
    before = run_folders()

    with pytest.raises(CycleInputError, match=message) as caught:
        task_run(None, events=_events(*extras), asset=CANDIDATES)

    assert isinstance(caught.value, SolarisError)
    assert run_folders() == before


def test_task_runs_splits_several_namespaces_but_still_refuses_a_bad_event(run_folders) -> None:
    before = run_folders()
    extras = [{"namespace": "a", **_interval()}, {"namespace": "b", **_interval(T, True)}]
    with pytest.raises(CycleInputError, match=r"^asset event\b.*interval_end: .*True"):
        task_runs(None, events=_events(*extras), asset=CANDIDATES)
    assert run_folders() == before
