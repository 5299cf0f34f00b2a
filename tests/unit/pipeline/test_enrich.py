"""Enrichment steps over partitions: what a partition's neighbour fill keeps of the codes."""

from __future__ import annotations

import numpy as np
import pandas as pd

from solaris.pipeline.neighbors import FillTargets, nearest_users, neighbour_fill
from solaris.store.partitions import Partitioning

WINDOW = {"as_of": 1_000, "ttl_seconds": 600, "fm_version": "fm-a"}


def useful_codes(targets: pd.DataFrame, neighbours: pd.DataFrame, pairs: pd.DataFrame):
    """The codes of ``pairs`` that a fill of ``targets`` can use, judged in one go."""
    return FillTargets(targets, neighbours).useful(pairs)


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


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    a = a.sort_values(["user_id", "item_id"], ignore_index=True)
    b = b.sort_values(["user_id", "item_id"], ignore_index=True)
    assert a[["user_id", "item_id", "src_user", "n_nbrs"]].equals(
        b[["user_id", "item_id", "src_user", "n_nbrs"]]
    )
    for column in ("z_top1", "z_mean"):
        assert np.array_equal(np.stack(a[column]), np.stack(b[column]))


def test_the_fill_over_the_useful_codes_equals_the_fill_over_all_codes() -> None:
    targets, neighbours, pairs, z = _world(0)
    keep = useful_codes(targets, neighbours, pairs)
    assert 0 < keep.sum() < len(pairs)  # it drops codes, and keeps some
    full = _fill(targets, neighbours, pairs, z)
    assert len(full)
    _same(_fill(targets, neighbours, pairs[keep], z[keep]), full)


def test_partitions_filling_their_own_targets_from_scanned_chunks_make_the_whole_fill() -> None:
    """Each partition keeps, chunk by chunk, the codes its own targets can use; the union of
    the partitions' fills is the fill of all targets (a target belongs to its user's
    partition)."""
    targets, neighbours, pairs, z = _world(1)
    parts = Partitioning(4)
    filled = []
    for rows in parts.split(targets["user_id"].to_numpy()):
        mine = targets.iloc[rows]
        users = mine["user_id"].unique()
        table = neighbours[neighbours["user_id"].isin(users)]
        kept = np.concatenate(
            [
                lo + np.flatnonzero(useful_codes(mine, table, pairs.iloc[lo : lo + 500]))
                for lo in range(0, len(pairs), 500)
            ]
        )
        filled.append(_fill(mine, table, pairs.iloc[kept], z[kept]))
    _same(pd.concat(filled, ignore_index=True), _fill(targets, neighbours, pairs, z))


def test_nothing_to_fill_keeps_nothing() -> None:
    _, neighbours, pairs, _ = _world(2)
    empty = pd.DataFrame({"user_id": np.zeros(0, np.int64), "item_id": np.zeros(0, np.int64)})
    assert not useful_codes(empty, neighbours, pairs).any()


def test_the_fills_means_summed_a_block_of_groups_at_a_time_are_the_same(monkeypatch) -> None:
    from solaris.pipeline import neighbors

    targets, table, pairs, z = _world(3)
    whole = _fill(targets, table, pairs, z)
    monkeypatch.setattr(neighbors, "_REDUCTION_ROWS", 7)  # many small blocks
    _same(_fill(targets, table, pairs, z), whole)


def test_prepared_targets_judge_chunks_as_the_whole_scan() -> None:
    targets, table, pairs, _ = _world(4)
    wanted = FillTargets(targets, table)
    chunks = np.concatenate(
        [wanted.useful(pairs.iloc[lo : lo + 333]) for lo in range(0, 4_000, 333)]
    )
    assert np.array_equal(chunks, useful_codes(targets, table, pairs))
