"""The selection rule serving and the cycle share (solaris.selection)."""

from __future__ import annotations

import numpy as np
import pytest

from solaris.pipeline.select import select_mask
from solaris.selection import SelectionError, top_share


def test_top_share_takes_the_budget_of_highest_scores_ties_to_the_lower_item() -> None:
    items = np.array([5, 3, 9, 1, 7, 2, 8, 4, 6, 0])
    scores = np.array([0.9, 0.5, 0.5, 0.1, 0.8, 0.2, 0.3, 0.4, 0.6, 0.7])
    chosen = top_share(items, scores, np.zeros(10, bool), 0.3)  # budget ceil(3.0) = 3
    assert items[chosen].tolist() == [5, 7, 0]
    tied = top_share(items, np.full(10, 0.5), np.zeros(10, bool), 0.2)
    assert items[tied].tolist() == [0, 1]


def test_top_share_skips_fresh_candidates_but_counts_them_in_the_budget() -> None:
    items = np.arange(10)
    scores = np.linspace(1, 0, 10)
    skip = np.zeros(10, bool)
    skip[:3] = True
    assert top_share(items, scores, skip, 0.2).tolist() == [3, 4]  # ceil(0.2 * 10) of the rest
    assert top_share(items, scores, np.ones(10, bool), 0.2).tolist() == []


def test_top_share_takes_an_item_listed_twice_once() -> None:
    items = np.array([4, 4, 2, 3])
    chosen = top_share(items, np.array([0.9, 0.8, 0.1, 0.2]), np.zeros(4, bool), 0.5)
    assert items[chosen].tolist() == [4, 3]


def test_top_share_and_the_cycles_batch_selection_agree_on_one_request() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        items = rng.choice(100, n, replace=False)
        scores = np.round(rng.random(n), 1)
        skip = rng.random(n) < 0.3
        share = float(rng.choice([0.1, 0.2, 0.5, 1.0]))
        mask = select_mask(
            np.zeros(n, np.int64), np.zeros(n, np.int64), items, np.zeros(n), scores, skip, share
        )
        assert (
            sorted(top_share(items, scores, skip, share).tolist()) == np.flatnonzero(mask).tolist()
        )


@pytest.mark.parametrize("share", [0, -0.1, 1.5, float("nan"), True])
def test_top_share_refuses_a_share_outside_zero_one(share) -> None:
    with pytest.raises(SelectionError, match="selection share must be in"):
        top_share(np.arange(3), np.ones(3), np.zeros(3, bool), share)
