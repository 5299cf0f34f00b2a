"""The carried windows' pure steps: sums that add and subtract exactly, pair look-ups in
an earlier interval's codes, and the retractions of a history rebuilt at once."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from solaris.pipeline.aggregate import user_aggregate
from solaris.pipeline.neighbors import CodeIndex
from solaris.pipeline.window import (
    PairIndex,
    Retractions,
    Sums,
    find_pairs,
    interval_codes,
    latest_codes,
    supersessions,
    without_pairs,
)


def _codes(pairs: list[tuple[int, int]], seed: int) -> CodeIndex:
    users, items = np.array(pairs, np.int64).T
    z = np.random.default_rng(seed).standard_normal((len(pairs), 3)).astype(np.float32)
    return interval_codes(users, items, z)


def test_sums_added_then_subtracted_return_the_bits_of_the_sums_never_added() -> None:
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 50, 400)
    z16 = rng.standard_normal((400, 8)).astype(np.float16)
    kept, gone = slice(0, 300), slice(300, 400)
    carried = Sums.of(keys, z16).plus(keys[gone], z16[gone], sign=-1)
    direct = Sums.of(keys[kept], z16[kept])
    assert carried.keys.tobytes() == direct.keys.tobytes()
    assert carried.sums.tobytes() == direct.sums.tobytes()
    assert carried.counts.tobytes() == direct.counts.tobytes()


def test_a_key_whose_count_falls_to_zero_is_dropped_and_below_zero_is_refused() -> None:
    z16 = np.ones((2, 2), np.float16)
    sums = Sums.of(np.array([1, 2]), z16).plus(np.array([2]), z16[:1], sign=-1)
    assert sums.keys.tolist() == [1]
    with pytest.raises(ValueError, match="subtracted twice"):
        sums.plus(np.array([2]), z16[:1], sign=-1)


def test_an_intervals_codes_keep_the_later_row_of_a_pair_as_the_window_does() -> None:
    users = np.array([3, 1, 3, 1])
    items = np.array([5, 2, 5, 9])
    z = np.arange(12, dtype=np.float32).reshape(4, 3)
    codes = interval_codes(users, items, z, keep=np.array([True, True, True, False]))
    assert list(zip(codes.users, codes.items, strict=True)) == [(1, 2), (3, 5)]
    assert codes.z16[1].tolist() == [6, 7, 8]  # the later of the two rows of (3, 5)
    pairs = pd.DataFrame(
        {"user_id": users[:3], "item_id": items[:3], "computed_at": 10, "fm_version": "v"}
    )
    rows = user_aggregate(pairs, z[:3], as_of=10, window_seconds=5, fm_version="v")
    assert rows["count"].tolist() == [1, 1]


@pytest.mark.parametrize("far", [0, 1 << 62])  # item ids packed into one key, or too far apart
def test_find_pairs_finds_exactly_the_pairs_an_earlier_interval_holds(far) -> None:
    earlier = _codes([(1, 4), (1, 7), (2, 4), (5, 1), (9, far)], 1)
    new_users = np.array([1, 2, 2, 9, 5])
    new_items = np.array([7, 4, 5, 4, 1])
    k, rows = find_pairs(new_users, new_items, earlier)
    assert k.tolist() == [0, 1, 4]
    assert earlier.users[rows].tolist() == [1, 2, 5]
    assert earlier.items[rows].tolist() == [7, 4, 1]
    left = without_pairs(earlier, new_users[k], new_items[k])
    assert list(zip(left.users, left.items, strict=True)) == [(1, 4), (9, far)]


def test_a_rebuilt_history_records_each_superseded_code_once_against_its_successor() -> None:
    a = _codes([(1, 1), (1, 2), (2, 1)], 1)
    b = _codes([(1, 1), (3, 3)], 2)
    c = _codes([(1, 1), (1, 2)], 3)
    got = supersessions([(300, c), (100, a), (200, b)])
    assert [(o, by, rows.tolist()) for o, by, rows in got] == [
        (100, 200, [0]),  # (1, 1) of 100, superseded by 200's
        (100, 300, [1]),  # (1, 2) of 100, superseded by 300's
        (200, 300, [0]),  # (1, 1) of 200, superseded by 300's
    ]
    latest = latest_codes([(100, a), (200, b), (300, c)])
    assert list(zip(latest.users, latest.items, strict=True)) == [(1, 1), (1, 2), (2, 1), (3, 3)]
    assert latest.z16[0].tobytes() == np.asarray(c.z16[0]).tobytes()


@pytest.mark.parametrize("far", [0, 1 << 62])  # inserted by one int64 key, or sorted again
def test_the_pair_index_names_the_interval_of_each_pairs_latest_code(far) -> None:
    a = _codes([(1, 1), (1, 2), (2, far)], 1)
    b = _codes([(1, 2), (3, 3)], 2)
    index = PairIndex.of([(100, a)])
    found = find_pairs(np.asarray(b.users), np.asarray(b.items), index)
    assert index.origin[found[1]].tolist() == [100]  # (1, 2): its code of 100 superseded
    index = index.with_codes(b, 200, found)
    assert list(zip(index.users, index.items, index.origin, strict=True)) == [
        (1, 1, 100),
        (1, 2, 200),
        (2, far, 100),
        (3, 3, 200),
    ]
    rebuilt = PairIndex.of([(200, b), (100, a)])
    assert rebuilt.origin.tolist() == index.origin.tolist()
    assert index.after(100).origin.tolist() == [200, 200]


def test_retractions_are_told_by_interval_and_by_the_time_they_were_made() -> None:
    gone = Retractions.empty().plus(np.array([1, 2]), np.array([5, 6]), 100, 300)
    gone = gone.plus(np.array([3]), np.array([7]), 200, 400)
    users, items = gone.of(100, before=400)
    assert users.tolist() == [1, 2] and items.tolist() == [5, 6]
    assert gone.of(100, before=300)[0].tolist() == []  # made at 300: not before it
    assert gone.after(100).origin.tolist() == [200]
