"""Which run records the SOLARIS page shows: dated, grouped by namespace, filtered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from solaris.dashboard.filters import Filters
from solaris.dashboard.records import (
    is_replay,
    load_runs,
    namespaces_of,
    nested,
    record_time,
    select_runs,
)
from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, Interval, write_run_record

T0 = 10_185 * 86_400  # 1997-11-20T00:00:00Z


def _run(namespace: str | None, end: int, **figures: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"interval_start": end - 3600, "interval_end": end, **figures}
    if namespace is not None:
        record["namespace"] = namespace
    return record


RUNS = {
    "solaris_candidates": [
        _run("live", T0 + 7200, selected=7),
        _run("live", T0 + 3600, selected=1234),
        _run("replay_1998", T0, selected=55),
    ],
    "solaris_training": [_run("live", T0 + 7200, labelled=900)],
    "solaris_odd": [{"dag_id": "solaris_odd", "error": "not a JSON object: [1]"}],
}


def _allow(dag_id: str) -> bool:
    return True


def test_record_time_is_the_interval_end_else_the_key() -> None:
    assert record_time({"interval_end": T0}) == T0
    assert record_time({"key": f"{T0 - 3600:011d}-{T0:011d}"}) == T0
    assert record_time({"key": f"{T0:011d}"}) == T0


def test_a_record_time_the_cycle_cannot_record_is_no_time() -> None:
    assert record_time({"interval_end": 1e300}) is None  # plotted, it overflowed the ticks
    assert record_time({"interval_end": -1}) is None
    assert record_time({"key": f"{10**10:011d}"}) is None
    assert record_time({"interval_end": "yesterday", "key": "k"}) is None
    assert nested({"serving": {"failures": 3}}, "serving", "failures") == 3
    assert nested({"serving": [1]}, "serving", "failures") is None


def test_a_replay_is_what_its_records_say_else_any_namespace_but_the_live_one() -> None:
    assert is_replay("live", [{"replay": True}], "live") is True
    assert is_replay("shadow", [{"replay": False}], "live") is False
    assert is_replay("replay_1998", [{}], "live") is True
    assert is_replay("prod", [], "prod") is False


def test_namespaces_list_the_live_one_first_then_the_newest() -> None:
    infos = namespaces_of(RUNS, live="live")
    assert [(i.name, i.replay, i.runs, i.latest) for i in infos] == [
        ("live", False, 3, T0 + 7200),
        ("replay_1998", True, 1, T0),
    ]
    assert [i.label for i in infos] == ["live (live)", "replay_1998 (replay)"]
    assert [i.replay for i in namespaces_of(RUNS, live="replay_1998")] == [False, True]


def test_select_runs_keeps_one_namespace_the_readable_dags_and_the_range() -> None:
    everything = select_runs(RUNS, Filters(), _allow, live="live")
    assert everything.namespace is not None and everything.namespace.name == "live"
    assert everything.dag_ids == ["solaris_candidates", "solaris_odd", "solaris_training"]
    assert [r.get("selected") for r in everything.runs["solaris_candidates"]] == [7, 1234]
    assert everything.hidden_dags == 0

    ranged = select_runs(RUNS, Filters(end=T0 + 3600), lambda d: d != "solaris_odd", live="live")
    assert list(ranged.runs) == ["solaris_candidates"] and ranged.hidden_dags == 1
    assert [r["selected"] for r in ranged.runs["solaris_candidates"]] == [1234]

    replay = select_runs(RUNS, Filters(namespace="replay_1998"), _allow, live="live")
    assert replay.namespace is not None and replay.namespace.replay
    assert [r["selected"] for r in replay.runs["solaris_candidates"]] == [55]

    unknown = select_runs(RUNS, Filters(namespace="nowhere"), _allow, live="live")
    assert unknown.namespace is not None and unknown.namespace.runs == 0
    assert set(unknown.runs) == {"solaris_odd"}  # a record of no known namespace shows in all

    nothing = select_runs({}, Filters(), _allow, live="live")
    assert nothing.namespace is None and nothing.runs == {} and nothing.namespaces == []


def test_load_runs_reports_a_non_object_as_an_error_and_cuts_deep_records(
    tmp_path: Path,
) -> None:
    layout = CycleLayout(Namespace("live", tmp_path, tmp_path))
    deep: Any = "bottom"
    for _ in range(100):
        deep = {"k": deep}
    interval = Interval(T0, T0 + 3600)
    write_run_record(layout, "solaris_odd", interval.key, {**interval.as_dict(), "deep": deep})
    runs_dir = tmp_path / "namespaces" / "live" / "runs" / "solaris_list"
    runs_dir.mkdir(parents=True)
    (runs_dir / "x.json").write_text("[1, 2]")
    runs = load_runs(tmp_path)
    assert "not a JSON object" in runs["solaris_list"][0]["error"]
    assert "bottom" not in str(runs["solaris_odd"][0]) and "nested deeper" in str(runs)
