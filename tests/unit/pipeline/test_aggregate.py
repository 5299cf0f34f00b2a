"""user_aggregate / item_aggregate / mean_excluding / byte codecs, on hand-computed tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from solaris.pipeline.aggregate import (
    item_aggregate,
    mean_excluding,
    pack_f16,
    pack_f32,
    unpack_f16,
    unpack_f32,
    user_aggregate,
)

AS_OF = 1_000_000
WINDOW = 86_400
V = "fm-1"


def _pairs(rows: list[tuple[int, int, int, str]]) -> pd.DataFrame:
    """(user_id, item_id, computed_at, fm_version) rows."""
    return pd.DataFrame(rows, columns=["user_id", "item_id", "computed_at", "fm_version"]).astype(
        {"user_id": "int64", "item_id": "int64", "computed_at": "int64"}
    )


def _f32(values: list[list[float]]) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def _sum(frame: pd.DataFrame, d: int = 2) -> np.ndarray:
    z, present = unpack_f32(frame["z_sum"].tolist(), d)
    assert present.all()
    return z


# ---------------------------------------------------------------------------- user_aggregate


def test_user_aggregate_excludes_window_start_and_includes_as_of() -> None:
    start = AS_OF - WINDOW
    pairs = _pairs(
        [
            (1, 10, start, V),  # exactly at as_of - window: outside
            (1, 11, start + 1, V),
            (1, 12, AS_OF, V),  # exactly at as_of: inside
            (1, 13, AS_OF + 1, V),  # in the future: outside
        ]
    )
    z = _f32([[1, 0], [2, 0], [4, 1], [8, 0]])
    out = user_aggregate(pairs, z, as_of=AS_OF, window_seconds=WINDOW, fm_version=V)

    assert list(out.columns) == [
        "user_id",
        "z_sum",
        "count",
        "window_start",
        "fm_version",
        "event_ts",
    ]
    assert out["user_id"].tolist() == [1]
    np.testing.assert_array_equal(_sum(out), [[6, 1]])
    assert out["count"].tolist() == [2]
    assert out["window_start"].tolist() == [start]
    assert out["fm_version"].tolist() == [V]
    assert out["event_ts"].iloc[0] == pd.Timestamp(AS_OF, unit="s", tz="UTC")
    assert len(out["z_sum"].iloc[0]) == 2 * 4


def test_user_aggregate_ignores_rows_of_other_fm_versions() -> None:
    pairs = _pairs([(1, 10, AS_OF, V), (1, 11, AS_OF, "fm-0"), (2, 10, AS_OF, "fm-0")])
    z = _f32([[1, 1], [100, 100], [5, 5]])
    out = user_aggregate(pairs, z, as_of=AS_OF, window_seconds=WINDOW, fm_version=V)
    assert out["user_id"].tolist() == [1]
    np.testing.assert_array_equal(_sum(out), [[1, 1]])
    assert out["count"].tolist() == [1]


def test_user_aggregate_keeps_only_the_latest_row_of_a_duplicated_pair() -> None:
    pairs = _pairs([(1, 10, AS_OF - 10, V), (1, 10, AS_OF - 5, V), (1, 10, AS_OF - 20, V)])
    z = _f32([[1, 0], [2, 0], [4, 0]])
    out = user_aggregate(pairs, z, as_of=AS_OF, window_seconds=WINDOW, fm_version=V)
    np.testing.assert_array_equal(_sum(out), [[2, 0]])
    assert out["count"].tolist() == [1]


def test_user_aggregate_sums_per_user_sorted_by_user_id() -> None:
    pairs = _pairs([(3, 1, AS_OF, V), (1, 1, AS_OF, V), (3, 2, AS_OF, V), (1, 5, AS_OF, V)])
    z = _f32([[1, 2], [0.5, 0.5], [3, 4], [0.25, 0]])
    out = user_aggregate(pairs, z, as_of=AS_OF, window_seconds=WINDOW, fm_version=V)
    assert out["user_id"].tolist() == [1, 3]
    np.testing.assert_array_equal(_sum(out), [[0.75, 0.5], [4, 6]])
    assert out["count"].tolist() == [2, 2]


def test_user_aggregate_sums_the_float16_rounded_codes() -> None:
    pairs = _pairs([(1, 10, AS_OF, V), (1, 11, AS_OF, V)])
    z = _f32([[0.1, 1 / 3], [0.2, 1e-5]])
    out = user_aggregate(pairs, z, as_of=AS_OF, window_seconds=WINDOW, fm_version=V)
    z16 = z.astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(_sum(out), [z16.sum(axis=0).astype(np.float32)])
    assert not np.array_equal(_sum(out), [z.sum(axis=0)])


def test_user_aggregate_accepts_datetime_computed_at() -> None:
    pairs = _pairs([(1, 10, AS_OF - WINDOW, V), (1, 11, AS_OF, V)])
    pairs["computed_at"] = pd.to_datetime(pairs["computed_at"], unit="s", utc=True)
    z = _f32([[1, 0], [2, 0]])
    out = user_aggregate(pairs, z, as_of=AS_OF, window_seconds=WINDOW, fm_version=V)
    np.testing.assert_array_equal(_sum(out), [[2, 0]])


def test_user_aggregate_with_nothing_in_window_is_empty_with_all_columns() -> None:
    pairs = _pairs([(1, 10, AS_OF + 1, V)])
    out = user_aggregate(pairs, _f32([[1, 0]]), as_of=AS_OF, window_seconds=WINDOW, fm_version=V)
    assert out.empty
    assert {"user_id", "z_sum", "count", "window_start", "fm_version", "event_ts"} <= set(
        out.columns
    )


# ---------------------------------------------------------------------------- item_aggregate


def test_item_aggregate_is_the_mean_over_users_in_window() -> None:
    pairs = _pairs(
        [
            (1, 7, AS_OF, V),
            (2, 7, AS_OF - 1, V),
            (3, 7, AS_OF - 2, V),
            (4, 7, AS_OF - WINDOW, V),  # outside the window
            (5, 7, AS_OF, "fm-0"),  # other version
            (1, 8, AS_OF, V),
        ]
    )
    z = _f32([[1, 0], [2, 2], [3, 4], [100, 100], [100, 100], [0.5, -1]])
    out = item_aggregate(pairs, z, as_of=AS_OF, window_seconds=WINDOW, fm_version=V)
    assert list(out.columns) == ["item_id", "z_mean", "count", "fm_version", "event_ts"]
    assert out["item_id"].tolist() == [7, 8]
    mean, present = unpack_f32(out["z_mean"].tolist(), 2)
    assert present.all()
    np.testing.assert_array_equal(mean, [[2, 2], [0.5, -1]])
    assert out["count"].tolist() == [3, 1]
    assert (out["event_ts"] == pd.Timestamp(AS_OF, unit="s", tz="UTC")).all()


# ---------------------------------------------------------------------------- mean_excluding


def test_mean_excluding_matches_hand_computation() -> None:
    z_sum = _f32([[6, 9], [6, 9], [3, 3], [0, 0], [0, 0], [5, -5]])
    count = np.array([3, 3, 1, 0, 0, 1])
    z_pair = _f32([[1, 0], [1, 0], [3, 3], [0, 0], [0, 0], [9, 9]])
    in_window = np.array([True, False, True, False, True, False])
    mean, valid = mean_excluding(z_sum, count, z_pair, in_window)
    assert mean.dtype == np.float32
    np.testing.assert_allclose(
        mean, [[2.5, 4.5], [2, 3], [0, 0], [0, 0], [0, 0], [5, -5]], rtol=0, atol=1e-7
    )
    # count 1 with the pair in window (nothing else) and count 0 are invalid.
    assert valid.tolist() == [True, True, False, False, False, True]


def test_mean_excluding_ignores_the_pair_code_when_not_in_window() -> None:
    mean, valid = mean_excluding(
        _f32([[4, 2]]), np.array([2]), _f32([[np.nan, np.nan]]), np.array([False])
    )
    np.testing.assert_array_equal(mean, [[2, 1]])
    assert valid.tolist() == [True]


def test_mean_excluding_after_float16_round_trip_equals_mean_of_other_items() -> None:
    rng = np.random.default_rng(0)
    n_items, d = 9, 16
    z = rng.standard_normal((n_items, d)).astype(np.float32) * 0.37
    pairs = _pairs([(1, i, AS_OF - i, V) for i in range(n_items)])
    uagg = user_aggregate(pairs, z, as_of=AS_OF, window_seconds=WINDOW, fm_version=V)
    z_sum, _ = unpack_f32(uagg["z_sum"].tolist() * n_items, d)  # one row per current item
    count = np.repeat(uagg["count"].to_numpy(), n_items)
    z_pair, present = unpack_f16(pack_f16(z), d)  # what the pair view serves
    assert present.all()

    mean, valid = mean_excluding(z_sum, count, z_pair, np.ones(n_items, dtype=bool))

    z16 = z.astype(np.float16).astype(np.float64)
    others = (z16.sum(axis=0)[None, :] - z16) / (n_items - 1)
    assert valid.all()
    np.testing.assert_allclose(mean, others, rtol=0, atol=1e-6)


def test_mean_excluding_rejects_inconsistent_shapes_and_dtypes() -> None:
    s, c, p, w = _f32([[1, 1]]), np.array([2]), _f32([[1, 1]]), np.array([True])
    with pytest.raises(ValueError, match="z_pair"):
        mean_excluding(s, c, _f32([[1, 1, 1]]), w)
    with pytest.raises(ValueError, match="shape"):
        mean_excluding(s, np.array([2, 2]), p, w)
    with pytest.raises(ValueError, match="bool"):
        mean_excluding(s, c, p, np.array([1]))
    with pytest.raises(ValueError, match="integers"):
        mean_excluding(s, np.array([2.0]), p, w)
    with pytest.raises(ValueError, match=">= 0"):
        mean_excluding(s, np.array([-1]), p, w)
    with pytest.raises(ValueError, match="2-D"):
        mean_excluding(np.ones(2, np.float32), c, p, w)


# ---------------------------------------------------------------------------- byte codecs


def test_pack_unpack_f32_round_trip_is_exact() -> None:
    z = np.array([[0.1, -2.5, 0.0], [1e-30, 3.4e38, 0.0]], dtype=np.float32)
    packed = pack_f32(z)
    assert [len(b) for b in packed] == [12, 12]
    assert all(isinstance(b, bytes) for b in packed)
    out, present = unpack_f32(packed, 3)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, z)
    assert present.tolist() == [True, True]


def test_pack_unpack_f16_round_trip_gives_float16_rounded_values() -> None:
    z = np.array([[0.1, -2.5], [1 / 3, 0.0]], dtype=np.float32)
    packed = pack_f16(z)
    assert [len(b) for b in packed] == [4, 4]
    out, present = unpack_f16(packed, 2)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, z.astype(np.float16).astype(np.float32))
    assert present.all()


def test_unpack_marks_none_and_wrong_length_rows_not_present_with_zeros() -> None:
    good = pack_f32(_f32([[1, 2]]))[0]
    values = [good, None, good[:4], good + b"\x00", "not bytes", good]
    out, present = unpack_f32(values, 2)
    assert present.tolist() == [True, False, False, False, False, True]
    np.testing.assert_array_equal(out, [[1, 2], [0, 0], [0, 0], [0, 0], [0, 0], [1, 2]])

    out16, present16 = unpack_f16([None, pack_f16(_f32([[1, 2]]))[0], good], 2)
    assert present16.tolist() == [False, True, False]  # 8 bytes is not 2 float16
    np.testing.assert_array_equal(out16, [[0, 0], [1, 2], [0, 0]])


def test_unpack_of_nothing_and_of_a_series() -> None:
    out, present = unpack_f32([], 4)
    assert out.shape == (0, 4) and present.shape == (0,)
    out, present = unpack_f16(pd.Series([None, None]), 3)
    assert out.shape == (2, 3) and not present.any()


# ---------------------------------------------------------------------------- validation


@pytest.mark.parametrize("fn", [user_aggregate, item_aggregate])
def test_aggregates_reject_bad_inputs(fn) -> None:
    pairs = _pairs([(1, 10, AS_OF, V), (2, 10, AS_OF, V)])
    kw = {"as_of": AS_OF, "window_seconds": WINDOW, "fm_version": V}
    with pytest.raises(ValueError, match="rows"):
        fn(pairs, _f32([[1, 1]]), **kw)
    with pytest.raises(ValueError, match="2-D"):
        fn(pairs, np.ones(2, np.float32), **kw)
    with pytest.raises(ValueError, match="NaN"):
        fn(pairs, _f32([[1, np.nan], [1, 1]]), **kw)
    with pytest.raises(ValueError, match="float16 range"):
        fn(pairs, _f32([[1e6, 1], [1, 1]]), **kw)
    with pytest.raises(ValueError, match="missing columns"):
        fn(pairs.drop(columns="computed_at"), _f32([[1, 1], [1, 1]]), **kw)
    with pytest.raises(ValueError, match="window_seconds"):
        fn(pairs, _f32([[1, 1], [1, 1]]), **{**kw, "window_seconds": 0})
    with pytest.raises(ValueError, match="computed_at"):
        fn(pairs.astype({"computed_at": "float64"}), _f32([[1, 1], [1, 1]]), **kw)
