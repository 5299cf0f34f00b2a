"""The storage contract: each view's keys and fields, view lookup, TTL rules, tags, paths."""

from __future__ import annotations

import numpy as np
import pytest

from solaris.config import SolarisConfig
from solaris.store.contract import (
    IAGG,
    ITEM,
    LAYOUT_VERSION,
    NBR,
    PAIR,
    SERVING_VIEWS,
    UAGG,
    UNN,
    USER,
    VIEWS,
    FieldSpec,
    InvalidWriteError,
    Kind,
    ViewParams,
    ViewSpec,
    view,
)

H = 3600

EXPECTED: dict[str, tuple[tuple[str, ...], tuple[tuple[str, Kind], ...]]] = {
    "pair": (
        ("user_id", "item_id"),
        (
            ("z", Kind.VECTOR_F16),
            ("computed_at", Kind.EVENT_S),
            ("fm_version", Kind.STRING),
        ),
    ),
    "nbr": (
        ("user_id", "item_id"),
        (
            ("z_top1", Kind.VECTOR_F16),
            ("z_mean", Kind.VECTOR_F16),
            ("src_user", Kind.INT64),
            ("similarity", Kind.FLOAT32),
            ("n_nbrs", Kind.INT64),
            ("computed_at", Kind.EVENT_S),
            ("fm_version", Kind.STRING),
        ),
    ),
    "uagg": (
        ("user_id",),
        (
            ("z_sum", Kind.VECTOR_F32),
            ("count", Kind.INT64),
            ("window_start", Kind.INT64),
            ("computed_at", Kind.EVENT_S),
            ("fm_version", Kind.STRING),
        ),
    ),
    "iagg": (
        ("item_id",),
        (
            ("z_mean", Kind.VECTOR_F32),
            ("count", Kind.INT64),
            ("computed_at", Kind.EVENT_S),
            ("fm_version", Kind.STRING),
        ),
    ),
    "unn": (
        ("user_id",),
        (("nbr_ids", Kind.INT64_LIST), ("nbr_sims", Kind.FLOAT32_LIST)),
    ),
}


def _cfg(
    *, pair_ttl_h: float = 6.0, uagg_window_h: float = 24.0, ttl_h: float = 24.0
) -> SolarisConfig:
    """Settings with every TTL the views read given explicitly (the environment cannot leak in)."""
    return SolarisConfig(
        selection={"ttl_hours": pair_ttl_h},
        store={
            "uagg_window_hours": uagg_window_h,
            "uagg_ttl_hours": ttl_h,
            "iagg_ttl_hours": ttl_h,
            "unn_ttl_hours": 2 * ttl_h,
        },
        model={"z_dim": 8},
    )


def test_the_registry_holds_exactly_the_five_views_by_name() -> None:
    assert set(VIEWS) == set(EXPECTED)
    assert all(VIEWS[name].name == name for name in VIEWS)
    assert {PAIR, NBR, UAGG, IAGG, UNN} == set(VIEWS.values())


def test_serving_views_are_pair_nbr_uagg_iagg_in_tier_order() -> None:
    assert SERVING_VIEWS == (PAIR, NBR, UAGG, IAGG)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_view_declares_its_join_keys_and_fields_with_kinds(name: str) -> None:
    spec = view(name)
    join_keys, fields = EXPECTED[name]
    assert spec.join_keys == join_keys
    assert tuple((f.name, f.kind) for f in spec.fields) == fields
    assert spec.field_names == tuple(f for f, _ in fields)


def test_partition_and_member_entities_of_each_view() -> None:
    assert (PAIR.partition, PAIR.member) == (USER, ITEM)
    assert (NBR.partition, NBR.member) == (USER, ITEM)
    assert (UAGG.partition, UAGG.member) == (USER, None)
    assert (UNN.partition, UNN.member) == (USER, None)
    assert (IAGG.partition, IAGG.member) == (None, ITEM)
    assert (USER.join_key, USER.tag, ITEM.join_key, ITEM.tag) == ("user_id", "u", "item_id", "i")


@pytest.mark.parametrize("spec", list(VIEWS.values()), ids=list(VIEWS))
def test_the_last_field_of_a_view_with_variable_width_fields_is_variable(spec: ViewSpec) -> None:
    variable = [f for f in spec.fields if not f.kind.is_fixed]
    if variable:
        assert not spec.fields[-1].kind.is_fixed
        assert variable[-1] is spec.fields[-1]


def test_kind_fixed_and_vector_flags() -> None:
    assert {k for k in Kind if k.is_vector} == {Kind.VECTOR_F16, Kind.VECTOR_F32}
    assert {k for k in Kind if not k.is_fixed} == {
        Kind.STRING,
        Kind.INT64_LIST,
        Kind.FLOAT32_LIST,
    }


def test_a_view_spec_with_a_variable_field_before_a_fixed_one_is_refused() -> None:
    with pytest.raises(ValueError, match="last field must be variable-width"):
        ViewSpec(
            name="bad",
            partition=USER,
            member=None,
            fields=(FieldSpec("s", Kind.STRING, ""), FieldSpec("n", Kind.INT64, "")),
            read_ttl=lambda cfg: 1,
            retention=lambda cfg: 1,
            description="",
        )


def test_a_view_spec_with_duplicate_fields_or_no_entity_is_refused() -> None:
    with pytest.raises(ValueError, match="duplicate field names"):
        ViewSpec(
            "dup",
            USER,
            None,
            (FieldSpec("n", Kind.INT64, ""), FieldSpec("n", Kind.INT64, "")),
            lambda cfg: 1,
            lambda cfg: 1,
            "",
        )
    with pytest.raises(ValueError, match="needs a partition or a member"):
        ViewSpec("none", None, None, (), lambda cfg: 1, lambda cfg: 1, "")


def test_field_lookup_by_name_and_key_error_for_an_unknown_field() -> None:
    assert PAIR.field("z").kind is Kind.VECTOR_F16
    with pytest.raises(KeyError, match="no field 'nope'"):
        PAIR.field("nope")


def test_unknown_view_raises_invalid_write_error_naming_the_known_views() -> None:
    with pytest.raises(InvalidWriteError) as info:
        view("nope")
    message = str(info.value)
    assert "'nope'" in message
    for name in VIEWS:
        assert name in message


@pytest.mark.parametrize("name", [None, 3, b"pair", "PAIR", ""])
def test_view_lookup_rejects_anything_but_a_known_name(name: object) -> None:
    with pytest.raises(InvalidWriteError):
        view(name)


def test_invalid_write_error_is_a_value_error() -> None:
    assert issubclass(InvalidWriteError, ValueError)


def test_pair_retention_spans_the_window_of_the_oldest_servable_user_aggregate() -> None:
    # A uagg row is served up to its read TTL (24 h) after its window end, and its window
    # reaches 48 h further back: a pair up to 72 h old can be in a served sum.
    params = PAIR.params(_cfg(pair_ttl_h=6, uagg_window_h=48))
    assert params.read_ttl_s == 6 * H
    assert params.retention_s == (48 + 24) * H


def test_pair_retention_is_the_read_ttl_when_that_is_longer_than_the_uagg_reach() -> None:
    params = PAIR.params(_cfg(pair_ttl_h=72, uagg_window_h=24, ttl_h=24))
    assert params.read_ttl_s == 72 * H
    assert params.retention_s == 72 * H


def test_fractional_hours_become_whole_seconds() -> None:
    params = PAIR.params(_cfg(pair_ttl_h=0.5, uagg_window_h=0.25, ttl_h=0.125))
    assert (params.read_ttl_s, params.retention_s) == (1800, 1800)


@pytest.mark.parametrize(
    "cfg",
    [_cfg(), _cfg(pair_ttl_h=1, uagg_window_h=100, ttl_h=2), _cfg(pair_ttl_h=50, ttl_h=0.1)],
    ids=["defaults", "long-window", "long-pair-ttl"],
)
@pytest.mark.parametrize("spec", list(VIEWS.values()), ids=list(VIEWS))
def test_every_view_keeps_rows_at_least_as_long_as_it_serves_them(
    spec: ViewSpec, cfg: SolarisConfig
) -> None:
    params = spec.params(cfg)
    assert params.z_dim == 8
    assert params.read_ttl_s > 0
    assert params.retention_s >= params.read_ttl_s


def test_view_ttls_follow_their_settings() -> None:
    cfg = _cfg(pair_ttl_h=3, uagg_window_h=12, ttl_h=10)
    assert NBR.params(cfg) == ViewParams(8, 3 * H, 3 * H)
    assert UAGG.params(cfg) == ViewParams(8, 10 * H, 10 * H)
    assert IAGG.params(cfg) == ViewParams(8, 10 * H, 10 * H)
    assert UNN.params(cfg) == ViewParams(8, 20 * H, 20 * H)


def test_view_params_tags_round_trip_through_from_tags() -> None:
    params = ViewParams(z_dim=32, read_ttl_s=6 * H, retention_s=24 * H)
    tags = params.tags()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items())
    assert tags["solaris.layout"] == str(LAYOUT_VERSION)
    assert ViewParams.from_tags(tags, params.retention_s, "pair") == params


def test_from_tags_ignores_unrelated_tags() -> None:
    params = ViewParams(z_dim=4, read_ttl_s=60, retention_s=120)
    tags = {**params.tags(), "team": "recsys"}
    assert ViewParams.from_tags(tags, 120, "nbr") == params


@pytest.mark.parametrize("layout", [str(LAYOUT_VERSION + 1), "0", "", None])
def test_from_tags_with_a_wrong_or_missing_layout_tag_raises_naming_the_view(
    layout: str | None,
) -> None:
    tags = ViewParams(4, 60, 120).tags()
    if layout is None:
        del tags["solaris.layout"]
    else:
        tags["solaris.layout"] = layout
    with pytest.raises(InvalidWriteError, match=r"view 'uagg'.*layout"):
        ViewParams.from_tags(tags, 120, "uagg")


# -- request times: one rule for every layer --------------------------------------------------


def test_one_request_time_stands_for_every_row() -> None:
    from solaris.store.contract import epoch_seconds_array

    out = epoch_seconds_array(1_700_000_000, 3, "now")
    assert out.dtype == np.float64
    assert out.tolist() == [1_700_000_000.0] * 3
    assert epoch_seconds_array(np.int64(5), 2, "now").tolist() == [5.0, 5.0]
    assert epoch_seconds_array(np.array(7.5), 2, "now").tolist() == [7.5, 7.5]
    assert epoch_seconds_array([1, 2], 2, "now").tolist() == [1.0, 2.0]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (True, r"now must be epoch seconds \(numbers\), got True"),
        (np.array([True, False]), r"now must be epoch seconds \(numbers\), got array"),
        (["a", "b"], r"now must be epoch seconds \(numbers\), got \['a', 'b'\]"),
        ([1, 2, 3], r"now must be one time or one per row \(2\), got shape \(3,\)"),
        ([1, 1_700_000_000_000], r"not milliseconds\), got 1700000000000\.0 at row 1"),
        ([np.nan, 1], r"got nan at row 0"),
        ([1, -1], r"got -1\.0 at row 1"),
        (float("inf"), r"now must be epoch seconds in \[0, 1e\+10\)"),
    ],
)
def test_a_request_time_that_is_not_epoch_seconds_is_refused_naming_it(
    values: object, message: str
) -> None:
    from solaris.store.contract import ContractError, epoch_seconds_array

    with pytest.raises(ContractError, match=message):
        epoch_seconds_array(values, 2, "now")
