"""The neighbour fill over partitions and code indexes: a partition's fill folds every
partition's index of fresh codes in turn and visits only its targets' users' and their
neighbours' rows."""

from __future__ import annotations

import numpy as np
import pandas as pd

from solaris.pipeline.aggregate import select_window
from solaris.pipeline.neighbors import CodeIndex, NeighbourFill, nearest_users, neighbour_fill
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


def _fresh(pairs, z):
    return select_window(
        pairs,
        z,
        as_of=WINDOW["as_of"],
        window_seconds=WINDOW["ttl_seconds"],
        fm_version=WINDOW["fm_version"],
    )


def test_the_fill_over_per_partition_indexes_equals_the_fill_over_all_codes() -> None:
    """Each partition's fresh codes in one CodeIndex (as the aggregates tasks store them),
    folded index by index: the fill of all codes at once."""
    targets, neighbours, pairs, z = _world(0)
    fresh, z16 = _fresh(pairs, z)
    fill = NeighbourFill(targets, neighbours, z_dim=4)
    for rows in Partitioning(5).split(fresh["user_id"].to_numpy()):
        fill.add_index(CodeIndex.of(fresh.iloc[rows], z16[rows]))
    rows = fill.rows(as_of=WINDOW["as_of"], fm_version=WINDOW["fm_version"])
    full = _fill(targets, neighbours, pairs, z)
    assert len(full)
    _same(rows.drop(columns="event_ts"), full)


def test_each_index_searched_only_for_its_own_partitions_users_gives_the_whole_fill() -> None:
    """The enrichment looks each near user up in its own partition's index only (``among``):
    the fill is the same, and each index's visited rows are its near users' rows."""
    targets, neighbours, pairs, z = _world(5)
    fresh, z16 = _fresh(pairs, z)
    parts = Partitioning(3)
    fill = NeighbourFill(targets, neighbours, z_dim=4)
    near = fill.near_users
    for p, rows in enumerate(parts.split(fresh["user_id"].to_numpy())):
        codes = CodeIndex.of(fresh.iloc[rows], z16[rows])
        among = near[parts.of(near) == p]
        assert fill.add_index(codes, among) == np.isin(codes.users, among).sum()
    rows = fill.rows(as_of=WINDOW["as_of"], fm_version=WINDOW["fm_version"])
    _same(rows.drop(columns="event_ts"), _fill(targets, neighbours, pairs, z))


def test_the_fill_visits_only_its_users_and_their_neighbours_rows() -> None:
    """An index of codes of users that are neither a target's user nor one of their
    neighbours is not visited (binary searches, no scan) and changes nothing."""
    targets, neighbours, pairs, z = _world(0)
    targets = targets.iloc[:5]  # five target users and their seven neighbours each
    fill = NeighbourFill(targets, neighbours, z_dim=4)
    fresh, z16 = _fresh(pairs, z)
    table = neighbours.set_index("user_id")
    near = set(targets["user_id"]) | {
        int(v) for u in targets["user_id"].unique() for v in table.at[u, "nbr_ids"]
    }
    far = ~fresh["user_id"].isin(near).to_numpy()
    assert 0 < far.sum() < len(fresh)
    assert fill.add_index(CodeIndex.of(fresh[far], z16[far])) == 0
    assert fill.rows(as_of=WINDOW["as_of"], fm_version=WINDOW["fm_version"]).empty
    visited = fill.add_index(CodeIndex.of(fresh[~far], z16[~far]))
    assert visited == (~far).sum()  # every near row once: own rows and neighbours' rows
    rows = fill.rows(as_of=WINDOW["as_of"], fm_version=WINDOW["fm_version"])
    _same(rows.drop(columns="event_ts"), _fill(targets, neighbours, pairs, z))


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


def test_nothing_to_fill_visits_nothing_and_fills_nothing() -> None:
    _, neighbours, pairs, z = _world(3)
    empty = pd.DataFrame({"user_id": np.zeros(0, np.int64), "item_id": np.zeros(0, np.int64)})
    fill = NeighbourFill(empty, neighbours, z_dim=4)
    fresh, z16 = _fresh(pairs, z)
    assert fill.add_index(CodeIndex.of(fresh, z16)) == 0
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


def test_items_with_sparse_ids_give_the_fill_of_the_same_items_with_dense_ids() -> None:
    """The fill finds a code's item among the targets' by a table when the ids span a small
    range and by a binary search when they do not (ids 10^12 apart): the same rows."""
    targets, neighbours, pairs, z = _world(3)
    spread = 1_000_000_000_000

    def sparse(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(item_id=frame["item_id"] * spread + 7)

    dense = _fill(targets, neighbours, pairs, z)
    wide = _fill(sparse(targets), neighbours, sparse(pairs), z)
    assert len(dense) and (wide["item_id"] > spread).any()
    _same(sparse(dense), wide)
