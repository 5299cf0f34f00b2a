"""The neighbour fill over partitions and chunks: a partition's fill folds the window's codes
chunk by chunk and keeps only the codes that may serve its own targets."""

from __future__ import annotations

import numpy as np
import pandas as pd

from solaris.pipeline.aggregate import select_window
from solaris.pipeline.neighbors import NeighbourFill, nearest_users, neighbour_fill
from solaris.store.partitions import Partitioning

WINDOW = {"as_of": 1_000, "ttl_seconds": 600, "fm_version": "fm-a"}


def _world(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, np.ndarray]:
    """(targets, neighbour table, codes, z): 200 users, 40 items, 4,000 codes."""
    rng = np.random.default_rng(seed)
    users = np.arange(200)
    neighbours = nearest_users(users, rng.normal(size=(200, 6)), 7)
    n = 4_000
    pairs = pd.DataFrame(
        {
            "user_id": rng.integers(0, 200, n),
            "item_id": rng.integers(0, 40, n),
            "computed_at": rng.integers(0, 1_100, n),  # some after as_of, some stale
            "fm_version": np.where(rng.random(n) < 0.9, "fm-a", "fm-b"),
        }
    )
    targets = pd.DataFrame(
        {"user_id": rng.integers(0, 200, 900), "item_id": rng.integers(0, 40, 900)}
    )
    return targets, neighbours, pairs, rng.normal(size=(n, 4)).astype(np.float32)


def _fill(targets, neighbours, pairs, z) -> pd.DataFrame:
    rows = neighbour_fill(targets, neighbours, pairs.reset_index(drop=True), z, **WINDOW)
    return rows.drop(columns="event_ts").reset_index(drop=True)


def _folded(targets, neighbours, pairs, z, chunk: int) -> pd.DataFrame:
    """The fill of ``targets`` with the window's codes folded in ``chunk`` codes at a time."""
    fresh, z16 = select_window(
        pairs,
        z,
        as_of=WINDOW["as_of"],
        window_seconds=WINDOW["ttl_seconds"],
        fm_version=WINDOW["fm_version"],
    )
    fill = NeighbourFill(targets, neighbours, z_dim=z.shape[1])
    for lo in range(0, len(fresh), chunk):
        fill.add(fresh.iloc[lo : lo + chunk], z16[lo : lo + chunk])
    rows = fill.rows(as_of=WINDOW["as_of"], fm_version=WINDOW["fm_version"])
    return rows.drop(columns="event_ts").reset_index(drop=True)


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    a = a.sort_values(["user_id", "item_id"], ignore_index=True)
    b = b.sort_values(["user_id", "item_id"], ignore_index=True)
    columns = ["user_id", "item_id", "src_user", "similarity", "n_nbrs"]
    assert a[columns].equals(b[columns])
    for column in ("z_top1", "z_mean"):
        assert np.array_equal(np.stack(a[column]), np.stack(b[column]))


def test_the_fill_over_the_wanted_codes_equals_the_fill_over_all_codes() -> None:
    targets, neighbours, pairs, z = _world(0)
    targets = targets.iloc[:30]  # few targets: most codes cannot serve them
    fill = NeighbourFill(targets, neighbours, z_dim=4)
    keep = fill.wanted(pairs["user_id"].to_numpy(), pairs["item_id"].to_numpy())
    assert 0 < keep.sum() < len(pairs)  # it drops codes, and keeps some
    full = _fill(targets, neighbours, pairs, z)
    assert len(full)
    _same(_fill(targets, neighbours, pairs[keep], z[keep]), full)


def test_codes_folded_a_chunk_at_a_time_give_the_fill_of_them_all() -> None:
    targets, neighbours, pairs, z = _world(1)
    full = _fill(targets, neighbours, pairs, z)
    for chunk in (1, 7, 333, 4_000):
        _same(_folded(targets, neighbours, pairs, z, chunk), full)


def test_partitions_folding_their_own_targets_make_the_whole_fill() -> None:
    """Each partition folds the window's codes for its own targets; the union of the
    partitions' fills is the fill of all targets (a target belongs to its user's partition)."""
    targets, neighbours, pairs, z = _world(2)
    parts = Partitioning(4)
    filled = []
    for rows in parts.split(targets["user_id"].to_numpy()):
        mine = targets.iloc[rows]
        table = neighbours[neighbours["user_id"].isin(mine["user_id"].unique())]
        filled.append(_folded(mine, table, pairs, z, 500))
    _same(pd.concat(filled, ignore_index=True), _fill(targets, neighbours, pairs, z))


def test_nothing_to_fill_wants_nothing_and_fills_nothing() -> None:
    _, neighbours, pairs, z = _world(3)
    empty = pd.DataFrame({"user_id": np.zeros(0, np.int64), "item_id": np.zeros(0, np.int64)})
    fill = NeighbourFill(empty, neighbours, z_dim=4)
    assert not fill.wanted(pairs["user_id"].to_numpy(), pairs["item_id"].to_numpy()).any()
    assert _folded(empty, neighbours, pairs, z, 100).empty


def test_the_fill_expanded_in_small_blocks_is_the_same(monkeypatch) -> None:
    from solaris.pipeline import neighbors

    targets, table, pairs, z = _world(4)
    whole = _fill(targets, table, pairs, z)
    monkeypatch.setattr(neighbors, "_EXPANSION_ROWS", 7)  # many small blocks
    _same(_fill(targets, table, pairs, z), whole)


def test_a_target_with_its_own_code_in_a_later_chunk_gets_no_row() -> None:
    """The own code decides at the end, whichever chunk it comes in."""
    neighbours = nearest_users(np.arange(3), np.eye(3, 2) + 0.1, 2)
    targets = pd.DataFrame({"user_id": [0], "item_id": [5]})
    pairs = pd.DataFrame(
        {"user_id": [1, 0], "item_id": [5, 5], "computed_at": [900, 950], "fm_version": "fm-a"}
    )
    z = np.ones((2, 4), np.float32)
    assert len(_folded(targets, neighbours, pairs.iloc[:1], z[:1], 1)) == 1
    assert _folded(targets, neighbours, pairs, z, 1).empty
