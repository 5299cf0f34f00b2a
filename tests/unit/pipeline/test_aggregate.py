"""user_aggregate / item_aggregate, on hand-computed tables."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from solaris.config import ModelConfig, SolarisConfig
from solaris.pipeline.aggregate import item_aggregate, latest_per_pair, user_aggregate, vectors
from solaris.store import codec
from solaris.store.contract import IAGG, UAGG, ViewSpec

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


def _stack(frame: pd.DataFrame, column: str, d: int = 2) -> np.ndarray:
    """A vector column (one float32 ``[d]`` array per row) as ``[N, d]``."""
    assert all(
        isinstance(v, np.ndarray) and v.dtype == np.float32 and v.shape == (d,)
        for v in frame[column]
    )
    return np.stack(frame[column]) if len(frame) else np.zeros((0, d), np.float32)


def _sum(frame: pd.DataFrame, d: int = 2) -> np.ndarray:
    return _stack(frame, "z_sum", d)


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
    assert out["z_sum"].iloc[0].dtype == np.float32 and out["z_sum"].iloc[0].shape == (2,)


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
    z16 = codec.f16_round(z).astype(np.float64)
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
    np.testing.assert_array_equal(_stack(out, "z_mean"), [[2, 2], [0.5, -1]])
    assert out["count"].tolist() == [3, 1]
    assert (out["event_ts"] == pd.Timestamp(AS_OF, unit="s", tz="UTC")).all()


# ---------------------------------------------------------------------------- the view contract


def test_vectors_makes_one_float32_row_array_per_row() -> None:
    cells = vectors(np.array([[1, 2], [3, 4]], dtype=np.float64))
    assert cells.dtype == object and len(cells) == 2
    assert all(c.dtype == np.float32 and c.shape == (2,) for c in cells)
    np.testing.assert_array_equal(np.stack(cells), [[1, 2], [3, 4]])
    assert len(vectors(np.zeros((0, 2), np.float32))) == 0


@pytest.mark.parametrize(
    ("fn", "spec", "column"),
    [(user_aggregate, UAGG, "z_sum"), (item_aggregate, IAGG, "z_mean")],
    ids=["uagg", "iagg"],
)
def test_aggregate_frames_are_valid_writes_of_their_view(
    fn: Callable[..., pd.DataFrame], spec: ViewSpec, column: str
) -> None:
    pairs = _pairs([(1, 10, AS_OF, V), (2, 10, AS_OF - 1, V), (1, 11, AS_OF - 2, V)])
    z = _f32([[0.1, 1 / 3], [0.2, 1e-5], [-7, 2.5]])
    out = fn(pairs, z, as_of=AS_OF, window_seconds=WINDOW, fm_version=V)
    params = spec.params(SolarisConfig(model=ModelConfig(z_dim=2)))
    table = codec.normalize(spec, params, out)
    rows = codec.decode_records(spec, params, codec.encode_records(spec, params, table))
    assert rows.found.all()
    np.testing.assert_array_equal(rows.values[column], _stack(out, column))
    np.testing.assert_array_equal(rows.values["count"], out["count"].to_numpy())
    assert (rows.values["computed_at"] == AS_OF).all()
    assert rows.values["fm_version"].tolist() == [V.encode()] * len(out)


# ---------------------------------------------------------------------------- validation


@pytest.mark.parametrize("fn", [user_aggregate, item_aggregate])
def test_aggregates_reject_bad_inputs(fn: Callable[..., pd.DataFrame]) -> None:
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


def _random_codes(n: int, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    pairs = pd.DataFrame(
        {
            "user_id": rng.integers(0, 300, n),
            "item_id": rng.integers(0, 50, n),
            "computed_at": rng.integers(0, 1_000, n),
            "fm_version": np.where(rng.random(n) < 0.9, "fm-a", "fm-b"),
        }
    )
    return pairs, rng.normal(0, 2, (n, 8)).astype(np.float32)


def test_partitions_item_partial_sums_add_up_to_the_item_aggregate_bit_for_bit() -> None:
    from solaris.pipeline.aggregate import (
        ItemPartials,
        item_partial_sums,
        item_rows,
        reduce_item_partials,
    )
    from solaris.store.partitions import Partitioning

    pairs, z = _random_codes(5_000, 0)
    window = {"as_of": 900, "window_seconds": 600, "fm_version": "fm-a"}
    whole = item_aggregate(pairs, z, **window)
    for count in (1, 3, 8):
        parts = Partitioning(count).split(pairs["user_id"].to_numpy())
        partials = [
            item_partial_sums(pairs.iloc[rows].reset_index(drop=True), z[rows], **window)
            for rows in parts
        ]
        # Through the file format the reduction reads.
        partials = [ItemPartials.from_table(p.to_table()) for p in partials]
        total = reduce_item_partials(reversed(partials), z_dim=8)  # any order
        rows = item_rows(total, as_of=900, fm_version="fm-a")
        assert rows["item_id"].tolist() == whole["item_id"].tolist()
        assert rows["count"].tolist() == whole["count"].tolist()
        assert np.array_equal(_stack(rows, "z_mean", 8), _stack(whole, "z_mean", 8))


def test_reducing_no_partials_gives_no_items_and_a_wrong_width_is_refused() -> None:
    from solaris.pipeline.aggregate import ItemPartials, reduce_item_partials

    empty = reduce_item_partials([], z_dim=4)
    assert len(empty.items) == 0 and empty.sums.shape == (0, 4)
    bad = ItemPartials(np.array([1]), np.zeros((1, 3)), np.array([1]))
    with pytest.raises(ValueError, match="3 columns, not 4"):
        reduce_item_partials([bad], z_dim=4)


def test_latest_per_pair_keeps_the_latest_code_and_on_a_tie_the_later_row() -> None:
    users = np.array([1, 2, 1, 3, 2, 1])
    items = np.array([7, 7, 7, 7, 7, 8])
    computed_at = np.array([50, 60, 40, 10, 60, 5])
    # (1, 7): rows 0 (50) and 2 (40) -> row 0; (2, 7): rows 1 and 4 tie at 60 -> row 4.
    assert latest_per_pair(users, items, computed_at).tolist() == [0, 3, 4, 5]
    assert latest_per_pair(users[[3, 5]], items[[3, 5]], computed_at[[3, 5]]).tolist() == [0, 1]


def test_latest_per_pair_tells_pairs_of_ids_near_the_int64_range_apart() -> None:
    big = np.iinfo(np.int64).max - 1
    users = np.array([big, big, 1, big - 1])
    items = np.array([big, 3, big, big])
    computed_at = np.array([5, 6, 7, 8])
    assert latest_per_pair(users, items, computed_at).tolist() == [0, 1, 2, 3]
    again = np.r_[users, users[:1]], np.r_[items, items[:1]], np.r_[computed_at, [1]]
    assert latest_per_pair(*again).tolist() == [0, 1, 2, 3]  # the first (5) beats (1)
