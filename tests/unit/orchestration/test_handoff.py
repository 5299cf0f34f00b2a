"""What tasks hand each other: typed units, their one JSON form, and mapped results."""

from __future__ import annotations

import json

import pytest

from solaris.config import SolarisConfig
from solaris.orchestration.handoff import (
    HandoffError,
    Scope,
    SelectionGroup,
    Shard,
    Unit,
    results_in,
    span,
)
from solaris.orchestration.layout import INTERVAL_KEYS, Interval

SCOPE = Scope("replay_t", True)
INTERVAL = Interval(3_600, 7_200)


def _through_json(data: dict) -> dict:
    """What Airflow's XCom gives the next task: the value through JSON."""
    return json.loads(json.dumps(data))


@pytest.mark.parametrize(
    "unit",
    [
        Unit(SCOPE, INTERVAL, (0, 3)),
        Shard(SCOPE, INTERVAL, (2, 2), index=4, rows=250, generation="abc123"),
        SelectionGroup(SCOPE, INTERVAL, (1, 5), served={"requests": 7, "coverage": 0.5}),
    ],
)
def test_a_unit_survives_json_as_the_same_typed_unit(unit: Unit) -> None:
    again = type(unit).from_json(_through_json(unit.to_json()))
    assert again == unit and type(again) is type(unit)


def test_a_unit_spells_the_interval_with_the_intervals_own_keys() -> None:
    data = Shard(SCOPE, INTERVAL, (0, 1), index=0, rows=1, generation="g").to_json()
    assert {k: data[k] for k in INTERVAL_KEYS} == INTERVAL.as_dict()
    assert data["namespace"] == "replay_t" and data["replay"] is True
    assert data["partitions"] == [0, 1] and data["index"] == 0


def test_a_result_keeps_its_figures_and_gives_back_its_unit() -> None:
    shard = Shard(SCOPE, INTERVAL, (0, 1), index=3, rows=10, generation="g")
    result = _through_json(shard.result({"rows": 9, "seconds": 1.5}))
    assert result["rows"] == 9 and result["seconds"] == 1.5  # the figures, not the plan's
    assert Shard.of_result(result) == shard
    assert Unit.of_result(result).scope == SCOPE


def test_results_in_keeps_the_scopes_namespace_only() -> None:
    mine = Unit(SCOPE, INTERVAL, (0, 0)).result({"n": 1})
    other = Unit(Scope("live", False), INTERVAL, (0, 0)).result({"n": 2})
    assert results_in(SCOPE, [mine, other]) == [mine]


def test_partition_range_covers_first_to_last() -> None:
    assert list(Unit(SCOPE, INTERVAL, (2, 4)).partition_range) == [2, 3, 4]


def test_scope_of_settings_is_their_namespace_and_replay_flag() -> None:
    cfg = SolarisConfig(namespace="replay_t", replay=True)
    assert Scope.of(cfg) == SCOPE


_WHOLE = {"namespace": "n", "replay": True, "interval_start": 0, "interval_end": 1}


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({**_WHOLE, "namespace": None, "partitions": [0, 0]}, "namespace"),
        ({**_WHOLE, "replay": "yes", "partitions": [0, 0]}, "replay"),
        ({**_WHOLE, "interval_start": None, "partitions": [0, 0]}, "interval"),
        (_WHOLE, "partitions"),
    ],
)
def test_a_unit_missing_a_key_is_an_error_naming_it(data: dict, named: str) -> None:
    with pytest.raises(HandoffError, match=named):
        Unit.from_json(data)


def test_a_shard_without_its_generation_is_an_error_naming_it() -> None:
    data = Unit(SCOPE, INTERVAL, (0, 0)).to_json() | {"index": 0, "rows": 1}
    with pytest.raises(HandoffError, match="'generation' missing"):
        Shard.from_json(data)


def test_a_result_without_its_unit_is_an_error() -> None:
    with pytest.raises(HandoffError, match="'unit'"):
        Unit.of_result({"rows": 1})


def test_span_gives_the_bounds_and_every_interval() -> None:
    a, b = Interval(0, 60), Interval(120, 180)
    assert span([a, b]) == {
        **Interval(0, 180).as_dict(),
        "intervals": [a.as_dict(), b.as_dict()],
    }
    with pytest.raises(HandoffError):
        span([])


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"index": "x"}, "'index' missing or not int"),
        ({"index": True}, "'index' missing or not int"),
        ({"generation": 5}, "'generation' missing or not str"),
        ({"partitions": [0, 1, 2]}, r"'partitions' must be \[first, last\]"),
        ({"partitions": [0, "1"]}, r"'partitions' must be \[first, last\]"),
    ],
)
def test_a_shard_field_of_the_wrong_type_is_an_error_naming_it(changes: dict, named: str) -> None:
    data = Shard(SCOPE, INTERVAL, (0, 1), index=0, rows=1, generation="g").to_json() | changes
    with pytest.raises(HandoffError, match=named):
        Shard.from_json(data)


def test_a_selection_groups_served_figures_must_be_an_object() -> None:
    data = SelectionGroup(SCOPE, INTERVAL, (0, 0), served={}).to_json() | {"served": [1]}
    with pytest.raises(HandoffError, match="'served' missing or not Mapping"):
        SelectionGroup.from_json(data)
