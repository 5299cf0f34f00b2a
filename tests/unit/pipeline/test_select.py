"""Verifier selection: per-request top-``share`` by VM score, skipping fresh and pending pairs."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from solaris.pipeline.select import (
    PAIR_KEY_SHIFT,
    pair_keys,
    request_budget,
    select_candidates,
    select_mask,
)

COLUMNS = ["request_id", "user_id", "item_id", "ts"]


def _frame(rows: list[tuple[int, int, int, int]]) -> pd.DataFrame:
    """``(request_id, user_id, item_id, ts)`` rows."""
    return pd.DataFrame(rows, columns=COLUMNS).astype("int64")


def _request(request_id: int, user_id: int, ts: int, items: list[int]) -> list[tuple]:
    return [(request_id, user_id, item, ts) for item in items]


def _cache(rows: list[tuple[int, int, int]]) -> pd.DataFrame:
    """``(user_id, item_id, expires_at)`` rows."""
    return pd.DataFrame(rows, columns=["user_id", "item_id", "expires_at"]).astype("int64")


def _picked(selected: pd.DataFrame) -> set[tuple[int, int]]:
    """``(request_id, item_id)`` of the selected rows."""
    return set(zip(selected["request_id"], selected["item_id"], strict=True))


def _items_of(selected: pd.DataFrame, request_id: int) -> set[int]:
    return set(selected.loc[selected["request_id"] == request_id, "item_id"])


# --------------------------------------------------------------------------- pair_keys


def test_pair_keys_are_unique_per_user_item_and_invertible():
    users = np.array([0, 1, 2, 1, 2**31 - 1])
    items = np.array([1, 2, 1, 0, 2**31 - 1])
    keys = pair_keys(users, items)
    assert keys.dtype == np.int64
    assert len(set(keys.tolist())) == len(keys)
    np.testing.assert_array_equal(keys >> PAIR_KEY_SHIFT, users)
    np.testing.assert_array_equal(keys & ((1 << PAIR_KEY_SHIFT) - 1), items)


def test_pair_keys_distinguish_swapped_user_and_item():
    assert pair_keys(np.array([1]), np.array([2]))[0] != pair_keys(np.array([2]), np.array([1]))[0]


# --------------------------------------------------------------------------- request_budget


@pytest.mark.parametrize(
    ("n", "share", "expected"),
    [
        (10, 0.3, 3),  # 0.3 * 10 == 3.0000000000000004 in floats: must not round up to 4
        (10, 0.7, 7),
        (100, 0.07, 7),
        (7, 0.5, 4),
        (3, 0.01, 1),  # every request with candidates gets at least one
        (1, 0.5, 1),
        (5, 1.0, 5),
        (0, 0.5, 0),
    ],
)
def test_request_budget_is_exact_ceil_of_share_times_n(n, share, expected):
    assert request_budget(np.array([n]), share).tolist() == [expected]


@pytest.mark.parametrize("share", [0.0, -0.1, 1.0000001, 1.5, 2.0])
def test_request_budget_rejects_share_outside_zero_one(share):
    with pytest.raises(ValueError, match="share"):
        request_budget(np.array([10]), share)


# --------------------------------------------------------------------------- select_candidates


def test_select_picks_exactly_ceil_share_per_request_and_exactly_the_top_scores():
    candidates = _frame(
        _request(1, 7, 100, [10, 11, 12, 13, 14]) + _request(2, 8, 100, [20, 21, 22])
    )
    scores = np.array([0.1, 0.9, 0.5, 0.7, 0.3, 0.2, 0.8, 0.6])
    selected = select_candidates(candidates, scores, share=0.5)
    # ceil(0.5 * 5) = 3, ceil(0.5 * 3) = 2
    assert _items_of(selected, 1) == {11, 13, 12}
    assert _items_of(selected, 2) == {21, 22}
    assert len(selected) == 5


def test_select_share_one_takes_every_candidate():
    candidates = _frame(_request(1, 7, 0, [1, 2, 3]) + _request(2, 8, 0, [1, 2]))
    selected = select_candidates(candidates, np.arange(5.0), share=1.0)
    assert len(selected) == 5


def test_select_tiny_share_still_takes_one_per_request():
    candidates = _frame(_request(1, 7, 0, [1, 2, 3, 4]) + _request(2, 8, 0, [5, 6]))
    selected = select_candidates(candidates, np.array([0.1, 0.4, 0.3, 0.2, 0.6, 0.5]), share=0.01)
    assert _picked(selected) == {(1, 2), (2, 5)}


def test_select_breaks_score_ties_by_lower_item_id():
    # Items deliberately not in id order in the input.
    candidates = _frame(_request(1, 7, 0, [30, 12, 25, 11, 40]))
    scores = np.array([0.5, 0.5, 0.9, 0.5, 0.5])
    selected = select_candidates(candidates, scores, share=0.6)  # budget 3
    assert _items_of(selected, 1) == {25, 11, 12}


def test_select_all_tied_scores_takes_lowest_item_ids():
    candidates = _frame(_request(1, 7, 0, [9, 3, 7, 1, 5, 2]))
    selected = select_candidates(candidates, np.zeros(6), share=0.5)
    assert _items_of(selected, 1) == {1, 2, 3}


def test_select_skips_fresh_pairs_and_fills_the_budget_from_the_next_best():
    candidates = _frame(_request(1, 7, 100, [1, 2, 3, 4, 5, 6]))
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    cache = _cache([(7, 1, 500), (7, 2, 101)])  # both fresh at ts=100
    selected = select_candidates(candidates, scores, share=0.5, cache=cache)  # budget 3
    # Budget is ceil(0.5 * 6) over *all* candidates; skipped rows do not use it up.
    assert _items_of(selected, 1) == {3, 4, 5}


def test_select_cache_entry_expiring_before_ts_is_not_fresh_but_at_ts_still_is():
    candidates = _frame(_request(1, 7, 100, [1, 2, 3, 4]))
    scores = np.array([0.9, 0.8, 0.7, 0.6])
    cache = _cache([(7, 1, 100), (7, 2, 50), (7, 3, 101)])  # == ts, < ts, > ts
    selected = select_candidates(candidates, scores, share=0.75, cache=cache)  # budget 3
    assert _items_of(selected, 1) == {2, 4}


def test_select_cache_of_another_user_does_not_skip():
    candidates = _frame(_request(1, 7, 100, [1, 2, 3]))
    cache = _cache([(8, 1, 10_000), (8, 2, 10_000)])
    selected = select_candidates(candidates, np.array([0.9, 0.8, 0.7]), share=0.34)  # budget 2
    assert _items_of(selected, 1) == {1, 2}
    selected = select_candidates(candidates, np.array([0.9, 0.8, 0.7]), share=0.34, cache=cache)
    assert _items_of(selected, 1) == {1, 2}


def test_select_duplicate_cache_entries_use_the_latest_expiry():
    candidates = _frame(_request(1, 7, 100, [1, 2, 3]))
    cache = _cache([(7, 1, 50), (7, 1, 200), (7, 1, 80)])
    selected = select_candidates(candidates, np.array([0.9, 0.8, 0.7]), share=0.34, cache=cache)
    assert _items_of(selected, 1) == {2, 3}


def test_select_pending_pair_not_reselected_by_a_later_request_of_the_same_user():
    candidates = _frame(_request(1, 7, 100, [1, 2, 3, 4]) + _request(2, 7, 200, [1, 2, 3, 4]))
    scores = np.array([0.9, 0.8, 0.7, 0.6] * 2)
    selected = select_candidates(candidates, scores, share=0.5)  # budget 2 each
    assert _items_of(selected, 1) == {1, 2}
    assert _items_of(selected, 2) == {3, 4}


def test_select_pending_exhausts_then_later_request_selects_nothing():
    candidates = _frame(_request(1, 7, 100, [1, 2]) + _request(2, 7, 200, [1, 2]))
    selected = select_candidates(candidates, np.array([0.9, 0.8, 0.9, 0.8]), share=1.0)
    assert _picked(selected) == {(1, 1), (1, 2)}


def test_select_different_users_same_item_are_independent():
    candidates = _frame(
        _request(1, 7, 100, [1, 2, 3, 4])
        + _request(2, 8, 200, [1, 2, 3, 4])
        + _request(3, 7, 300, [1, 2, 3, 4])
    )
    scores = np.array([0.9, 0.8, 0.7, 0.6] * 3)
    selected = select_candidates(candidates, scores, share=0.5)
    assert _items_of(selected, 1) == {1, 2}
    assert _items_of(selected, 2) == {1, 2}  # user 8 is not blocked by user 7's pending pairs
    assert _items_of(selected, 3) == {3, 4}  # user 7's third request: 1, 2 pending


def test_select_pending_order_follows_ts_not_input_order():
    # Request 2 is listed first but is later in time, so request 1 gets the best pairs.
    candidates = _frame(_request(2, 7, 500, [1, 2, 3, 4]) + _request(1, 7, 100, [1, 2, 3, 4]))
    scores = np.array([0.9, 0.8, 0.7, 0.6] * 2)
    selected = select_candidates(candidates, scores, share=0.5)
    assert _items_of(selected, 1) == {1, 2}
    assert _items_of(selected, 2) == {3, 4}


def test_select_pending_order_breaks_equal_ts_by_request_id():
    candidates = _frame(_request(9, 7, 100, [1, 2, 3, 4]) + _request(4, 7, 100, [1, 2, 3, 4]))
    scores = np.array([0.9, 0.8, 0.7, 0.6] * 2)
    selected = select_candidates(candidates, scores, share=0.5)
    assert _items_of(selected, 4) == {1, 2}
    assert _items_of(selected, 9) == {3, 4}


def test_select_fresh_and_pending_both_skipped_in_one_request():
    candidates = _frame(_request(1, 7, 100, [1, 2, 3, 4, 5]) + _request(2, 7, 200, [1, 2, 3, 4, 5]))
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5] * 2)
    cache = _cache([(7, 1, 10_000)])
    selected = select_candidates(candidates, scores, share=0.4, cache=cache)  # budget 2 each
    assert _items_of(selected, 1) == {2, 3}
    assert _items_of(selected, 2) == {4, 5}


def test_select_cache_entry_expiring_between_two_requests_is_selectable_by_the_later_one():
    # Pair (7, 1) is fresh for request 1 (ts 100 < 150) but expired for request 2 (ts 200).
    candidates = _frame(_request(1, 7, 100, [1, 2, 3]) + _request(2, 7, 200, [1, 4, 5]))
    scores = np.array([0.9, 0.5, 0.4, 0.9, 0.5, 0.4])
    cache = _cache([(7, 1, 150)])
    selected = select_candidates(candidates, scores, share=0.3, cache=cache)  # budget 1 each
    assert _items_of(selected, 1) == {2}
    assert _items_of(selected, 2) == {1}


def test_select_preserves_input_order_index_and_columns_plus_score():
    candidates = _frame(_request(2, 8, 300, [5, 6, 7]) + _request(1, 7, 100, [3, 1, 2])).assign(
        extra=list("abcdef")
    )
    candidates.index = [60, 50, 40, 30, 20, 10]
    scores = np.array([0.1, 0.9, 0.8, 0.7, 0.2, 0.6])
    selected = select_candidates(candidates, scores, share=0.6)  # budget 2 each
    assert list(selected.columns) == [*COLUMNS, "extra", "score"]
    assert list(selected.index) == [50, 40, 30, 10]
    assert list(selected["extra"]) == ["b", "c", "d", "f"]
    np.testing.assert_array_equal(selected["score"].to_numpy(), [0.9, 0.8, 0.7, 0.6])
    pd.testing.assert_frame_equal(selected.drop(columns="score"), candidates.loc[[50, 40, 30, 10]])
    assert "score" not in candidates.columns  # the input is not modified


def test_select_budget_never_exceeds_remaining_eligible_rows():
    candidates = _frame(_request(1, 7, 100, [1, 2, 3, 4]) + _request(2, 8, 100, [1, 2]))
    cache = _cache([(7, 1, 999), (7, 2, 999), (7, 3, 999), (8, 1, 999), (8, 2, 999)])
    selected = select_candidates(candidates, np.arange(6.0), share=1.0, cache=cache)
    assert _picked(selected) == {(1, 4)}


def test_select_everything_fresh_returns_empty_frame_with_columns():
    candidates = _frame(_request(1, 7, 100, [1, 2]))
    cache = _cache([(7, 1, 999), (7, 2, 999)])
    selected = select_candidates(candidates, np.array([0.5, 0.4]), share=1.0, cache=cache)
    assert selected.empty
    assert list(selected.columns) == [*COLUMNS, "score"]


@pytest.mark.parametrize("share", [0.0, -0.5, 1.01])
def test_select_rejects_share_outside_zero_one(share):
    candidates = _frame(_request(1, 7, 0, [1, 2]))
    with pytest.raises(ValueError, match="share"):
        select_candidates(candidates, np.array([0.5, 0.4]), share=share)


@pytest.mark.parametrize("n_scores", [0, 1, 3])
def test_select_rejects_scores_of_the_wrong_length(n_scores):
    candidates = _frame(_request(1, 7, 0, [1, 2]))
    with pytest.raises(ValueError, match="scores"):
        select_candidates(candidates, np.zeros(n_scores), share=0.5)


def test_select_empty_input_returns_empty_frame():
    candidates = _frame([])
    selected = select_candidates(candidates, np.array([]), share=0.5)
    assert selected.empty
    assert list(selected.columns) == [*COLUMNS, "score"]
    selected = select_candidates(candidates, np.array([]), share=0.5, cache=_cache([(1, 1, 9)]))
    assert selected.empty


def test_select_mask_empty_input_is_empty_bool():
    empty = np.array([], dtype=np.int64)
    mask = select_mask(empty, empty, empty, empty, np.array([]), np.array([], bool), 0.5)
    assert mask.dtype == bool
    assert mask.shape == (0,)


def test_select_empty_cache_is_the_same_as_no_cache():
    candidates, scores, _ = _random_batch(np.random.default_rng(3))
    empty_cache = _cache([])
    pd.testing.assert_frame_equal(
        select_candidates(candidates, scores, share=0.3),
        select_candidates(candidates, scores, share=0.3, cache=empty_cache),
    )


# --------------------------------------------------------------------------- random vs reference


def _random_batch(
    rng: np.random.Generator, n_requests: int = 60, n_users: int = 4, n_items: int = 12
) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame]:
    """A batch of requests with distinct items per request, tied scores and a cache whose
    entries are either expired or fresh for every request (so freshness is per pair)."""
    rows = []
    ts_values = rng.integers(1_000, 2_000, size=n_requests)
    request_ids = rng.permutation(n_requests) + 100
    for request_id, ts in zip(request_ids, ts_values, strict=True):
        user = int(rng.integers(n_users))
        k = int(rng.integers(1, 9))
        items = rng.choice(n_items, size=k, replace=False)
        rows += _request(int(request_id), user, int(ts), [int(i) for i in items])
    candidates = _frame(rows)
    scores = np.round(rng.random(len(candidates)), 1)  # coarse scores: plenty of ties
    cache_rows = []
    for user in range(n_users):
        for item in rng.choice(n_items, size=4, replace=False):
            expires_at = int(rng.choice([500, 999, 1_000, 2_000, 5_000]))
            cache_rows.append((user, int(item), expires_at))
    return candidates, scores, _cache(cache_rows)


def _reference_select(
    candidates: pd.DataFrame, scores: np.ndarray, share: float, cache: pd.DataFrame | None
) -> set[int]:
    """Positions of the selected rows, by the design, with plain Python loops."""
    expiry: dict[tuple[int, int], int] = {}
    if cache is not None:
        for user, item, expires_at in cache[["user_id", "item_id", "expires_at"]].itertuples(
            index=False
        ):
            expiry[(user, item)] = max(expiry.get((user, item), expires_at), expires_at)
    requests: dict[int, list[int]] = {}
    for pos, request_id in enumerate(candidates["request_id"]):
        requests.setdefault(int(request_id), []).append(pos)
    ts = candidates["ts"].tolist()
    users = candidates["user_id"].tolist()
    items = candidates["item_id"].tolist()
    exact_share = Fraction(str(share))
    order = sorted(requests, key=lambda r: (ts[requests[r][0]], r))
    taken: set[tuple[int, int]] = set()
    chosen: set[int] = set()
    for request_id in order:
        positions = requests[request_id]
        product = exact_share * len(positions)
        budget = -(-product.numerator // product.denominator)  # exact ceil
        eligible = [
            p
            for p in positions
            if (users[p], items[p]) not in taken
            and not expiry.get((users[p], items[p]), -(10**18)) >= ts[p]
        ]
        eligible.sort(key=lambda p: (-scores[p], items[p]))
        for p in eligible[:budget]:
            chosen.add(p)
            taken.add((users[p], items[p]))
    return chosen


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("share", [0.1, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("with_cache", [False, True])
def test_select_matches_plain_python_reference_on_random_batches(seed, share, with_cache):
    candidates, scores, cache = _random_batch(np.random.default_rng(seed))
    cache = cache if with_cache else None
    candidates.index = np.arange(len(candidates))
    selected = select_candidates(candidates, scores, share=share, cache=cache)
    expected = _reference_select(candidates, scores, share, cache)
    assert set(selected.index) == expected
    assert list(selected.index) == sorted(expected)


@pytest.mark.parametrize("seed", range(3))
def test_select_is_deterministic_and_independent_of_row_order(seed):
    candidates, scores, cache = _random_batch(np.random.default_rng(seed))
    first = select_candidates(candidates, scores, share=0.3, cache=cache)
    second = select_candidates(candidates.copy(), scores.copy(), share=0.3, cache=cache.copy())
    pd.testing.assert_frame_equal(first, second)
    permutation = np.random.default_rng(seed + 100).permutation(len(candidates))
    shuffled = select_candidates(
        candidates.iloc[permutation], scores[permutation], share=0.3, cache=cache
    )
    assert _picked(shuffled) == _picked(first)


def test_select_reads_datetime_expiry_as_epoch_seconds() -> None:
    candidates = pd.DataFrame(
        {"request_id": [1, 1], "user_id": [7, 7], "item_id": [1, 2], "ts": [1000, 1000]}
    )
    expired = pd.DataFrame(
        {"user_id": [7], "item_id": [1], "expires_at": pd.to_datetime([500], unit="s", utc=True)}
    )
    chosen = select_candidates(candidates, np.array([0.9, 0.1]), share=0.5, cache=expired)
    assert chosen["item_id"].tolist() == [1]


def test_select_rejects_an_expiry_column_of_floats() -> None:
    candidates = pd.DataFrame({"request_id": [1], "user_id": [7], "item_id": [1], "ts": [10]})
    cache = pd.DataFrame({"user_id": [7], "item_id": [1], "expires_at": [5.0]})
    with pytest.raises(TypeError, match="expires_at"):
        select_candidates(candidates, np.array([0.5]), share=1.0, cache=cache)


def test_a_pair_listed_twice_in_one_request_costs_one_pass() -> None:
    candidates = pd.DataFrame(
        {"request_id": [1] * 6, "user_id": [7] * 6, "item_id": [1, 1, 2, 3, 4, 5], "ts": [10] * 6}
    )
    chosen = select_candidates(candidates, np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4]), share=0.34)
    assert chosen["item_id"].tolist() == [1, 2, 3]


def test_pair_keys_name_an_id_too_large_to_key_without_collisions() -> None:
    import numpy as np
    import pytest

    from solaris.pipeline.select import pair_keys

    with pytest.raises(ValueError, match=r"item_id 2147483648 is outside \[0, 2\*\*31\)"):
        pair_keys(np.array([1, 2]), np.array([5, 1 << 31]))
