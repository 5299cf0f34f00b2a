"""No-leakage rules of the offline tiers: nothing at or after the impression, own pair out."""

import numpy as np
import pandas as pd

from solaris.evaluation.replay import replay
from solaris.examples.movielens.report.tiers import (
    CodeLog,
    aggregate_tiers,
    build_tiers,
    latest_pair_code,
    neighbour_tiers,
)

D = 2


def _codes(rows):
    """rows: (user, item, computed_at, z0)"""
    u, i, c, z0 = (np.array(col) for col in zip(*rows, strict=True))
    z = np.stack([z0, np.zeros(len(z0))], axis=1).astype(np.float32)
    return CodeLog(u.astype(np.int64), i.astype(np.int64), c.astype(np.int64), z)


def _q(*rows):
    u, i, t = (np.array(col, dtype=np.int64) for col in zip(*rows, strict=True))
    return u, i, t


def test_pair_tier_uses_only_codes_computed_at_or_before_the_impression_and_fresh():
    codes = _codes([(1, 10, 100, 1.0), (1, 10, 500, 2.0), (2, 10, 100, 3.0)])
    u, i, t = _q((1, 10, 99), (1, 10, 100), (1, 10, 499), (1, 10, 500), (2, 10, 160), (2, 10, 161))
    idx = latest_pair_code(codes, u, i, t, ttl_seconds=60)
    # t=99: nothing computed yet; t=100: the code computed at 100; t=499: the first code is
    # stale (ttl 60) and the second is in the future; t=500: the second; user 2: fresh
    # through 160 inclusive, stale at 161.
    np.testing.assert_array_equal(idx, [-1, 0, -1, 1, 2, -1])


def test_user_aggregate_excludes_the_own_pair_and_codes_after_the_impression():
    codes = _codes(
        [
            (1, 10, 100, 1.0),  # the row's own pair: excluded
            (1, 11, 150, 3.0),
            (1, 12, 180, 5.0),
            (1, 13, 250, 100.0),  # after the impression: excluded
            (1, 14, 10, 100.0),  # outside the window (200 - 150, 200]: excluded
            (2, 10, 120, 7.0),  # another user: only in the item aggregate
        ]
    )
    u, i, t = _q((1, 10, 200))
    agg = aggregate_tiers(codes, u, i, t, window_seconds=150)
    assert agg["uagg"].present[0]
    assert agg["uagg"].z[0, 0] == 4.0  # mean of 3 and 5
    assert agg["iagg"].present[0]
    assert agg["iagg"].z[0, 0] == 7.0  # item 10 without user 1's own code


def test_aggregates_are_absent_when_only_the_own_pair_is_in_the_window():
    codes = _codes([(1, 10, 100, 1.0)])
    agg = aggregate_tiers(codes, *_q((1, 10, 150)), window_seconds=3600)
    assert not agg["uagg"].present[0]
    assert not agg["iagg"].present[0]
    assert (agg["uagg"].z == 0).all()


def test_neighbour_tier_reads_only_fresh_past_codes_of_neighbours_and_only_on_own_misses():
    codes = _codes(
        [
            (2, 10, 100, 2.0),  # neighbour 2 (sim 0.9): fresh at 150
            (3, 10, 100, 4.0),  # neighbour 3 (sim 0.3): fresh at 150
            (4, 10, 160, 9.0),  # neighbour 4 (sim 0.99): computed after the impression
        ]
    )
    table = {0: (np.array([1]), np.array([[4, 2, 3]]), np.array([[0.99, 0.9, 0.3]]))}
    u, i, t = _q((1, 10, 150), (1, 10, 150))
    nbr = neighbour_tiers(
        codes, u, i, t, ttl_seconds=3600, neighbours=table, own_present=np.array([False, True])
    )
    assert nbr["nbr_top1"].present.tolist() == [True, False]
    assert nbr["nbr_top1"].z[0, 0] == 2.0
    np.testing.assert_allclose(nbr["nbr_weighted"].z[0, 0], (0.9 * 2 + 0.3 * 4) / 1.2, rtol=1e-6)


def test_pair_tier_presence_equals_the_replay_hits():
    rng = np.random.default_rng(0)
    n = 400
    ts = np.sort(rng.integers(0, 20_000, n))
    log = pd.DataFrame(
        {
            "request_id": ts // 60 * 10 + (u := rng.integers(0, 3, n)),
            "user_id": u,
            "item_id": rng.integers(0, 6, n),
            "ts": ts,
            "label": pd.array(np.where(rng.random(n) < 0.3, 1, pd.NA), dtype="Int8"),
        }
    )
    log = log.drop_duplicates(["request_id", "item_id"]).reset_index(drop=True)
    res = replay(log, rng.random(len(log)), share=0.5, ttl_seconds=3000, cadence_seconds=600)
    sel = res.selections
    codes = CodeLog(
        sel["user_id"].to_numpy(np.int64),
        sel["item_id"].to_numpy(np.int64),
        sel["computed_at"].to_numpy(np.int64),
        np.ones((len(sel), D), np.float32),
    )
    tiers = build_tiers(
        codes,
        log["user_id"].to_numpy(),
        log["item_id"].to_numpy(),
        log["ts"].to_numpy(),
        ttl_seconds=3000,
        n_neighbors=2,
    )
    np.testing.assert_array_equal(tiers["pair"].present, res.hit)
    assert not (tiers["nbr_top1"].present & tiers["pair"].present).any()
