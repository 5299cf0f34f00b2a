"""The served rule of the offline tiers: snapshots and fills at interval ends, as serving."""

import numpy as np
import pandas as pd

from solaris.examples.movielens.report.tiers import (
    DAY,
    CodeLog,
    aggregate_tiers,
    build_tiers,
    interval_neighbour_tiers,
    latest_pair_code,
    neighbour_diagnostics,
    served_aggregate_tiers,
    snapshot_end,
)
from solaris.pipeline.aggregate import item_aggregate, user_aggregate
from solaris.pipeline.neighbors import nearest_users, neighbour_fill, user_embeddings
from solaris.serving.tiers import mean_excluding

CAD = 900
V = "fm"


def _codes(rows, d=2):
    """rows: (user, item, computed_at, z0[, z1])"""
    u = np.array([r[0] for r in rows], np.int64)
    i = np.array([r[1] for r in rows], np.int64)
    c = np.array([r[2] for r in rows], np.int64)
    z = np.zeros((len(rows), d), np.float32)
    for k, r in enumerate(rows):
        z[k, : len(r) - 3] = r[3:]
    return CodeLog(u, i, c, z)


def _q(*rows):
    u, i, t = (np.array(col, dtype=np.int64) for col in zip(*rows, strict=True))
    return u, i, t


def _random_codes(rng, n, *, n_users, n_items, t_max, d=4):
    """Codes at interval ends, with values exact in float16 (so the pipeline's rounding is
    a no-op and its outputs can be compared exactly)."""
    c = rng.integers(1, t_max // CAD, n) * CAD
    z = (rng.integers(-8, 9, (n, d)) / 4).astype(np.float32)
    z[np.abs(z).sum(axis=1) == 0, 0] = 1.0  # no zero-norm user means from a lone code
    return CodeLog(rng.integers(0, n_users, n), rng.integers(0, n_items, n), c, z)


def _pairs(codes):
    return pd.DataFrame(
        {
            "user_id": codes.user_id,
            "item_id": codes.item_id,
            "computed_at": codes.computed_at,
            "fm_version": V,
        }
    )


# --- served aggregates ---------------------------------------------------------------------


def test_snapshot_end_is_the_latest_interval_end_at_or_before_t():
    np.testing.assert_array_equal(
        snapshot_end(np.array([0, 899, 900, 1799]), 900), [0, 0, 900, 900]
    )


def test_served_aggregate_uses_only_codes_computed_by_the_snapshot():
    codes = _codes(
        [
            (1, 11, 900, 3.0),  # in the snapshot at e = 900
            (1, 12, 1000, 5.0),  # computed between e and t: not in the snapshot
            (2, 10, 1000, 7.0),  # the same for the item aggregate
            (2, 10, 900, 9.0),
        ]
    )
    u, i, t = _q((1, 10, 1100))
    served = served_aggregate_tiers(codes, u, i, t, cadence_seconds=CAD, window_seconds=DAY)
    exact = aggregate_tiers(codes, u, i, t, window_seconds=DAY)
    assert served["uagg"].z[0, 0] == 3.0
    assert exact["uagg"].z[0, 0] == 4.0
    assert served["iagg"].z[0, 0] == 9.0
    assert exact["iagg"].z[0, 0] == 8.0


def test_served_uagg_excludes_the_own_pair_and_iagg_keeps_it_as_serving_reads_it():
    codes = _codes(
        [
            (1, 10, 0, 100.0),  # the own pair's older code: replaced by its latest
            (1, 10, 900, 1.0),  # the own pair's latest: summed, then removed from uagg
            (1, 11, 900, 3.0),
            (1, 12, 1800, 5.0),
            (2, 10, 1800, 7.0),
        ]
    )
    u, i, t = _q((1, 10, 1800), (1, 10, 2000))
    kw = {"cadence_seconds": CAD, "window_seconds": DAY}
    served = served_aggregate_tiers(codes, u, i, t, **kw)
    np.testing.assert_array_equal(served["uagg"].z[:, 0], [4.0, 4.0])
    np.testing.assert_array_equal(served["iagg"].z[:, 0], [4.0, 4.0])  # (1 + 7) / 2
    excl = served_aggregate_tiers(codes, u, i, t, **kw, iagg_excludes_own=True)
    np.testing.assert_array_equal(excl["iagg"].z[:, 0], [7.0, 7.0])


def test_served_aggregates_are_absent_when_only_the_own_pair_is_in_the_snapshot():
    codes = _codes([(1, 10, 900, 1.0), (1, 11, 1800, 2.0)])
    served = served_aggregate_tiers(
        codes, *_q((1, 10, 1799)), cadence_seconds=CAD, window_seconds=DAY
    )
    assert not served["uagg"].present[0]
    assert (served["uagg"].z == 0).all()
    assert served["iagg"].present[0]  # the item's mean holds the own pair's code
    excl = served_aggregate_tiers(
        codes, *_q((1, 10, 1799)), cadence_seconds=CAD, window_seconds=DAY, iagg_excludes_own=True
    )
    assert not excl["iagg"].present[0]


def test_served_aggregates_equal_the_exact_ones_at_an_interval_end():
    rng = np.random.default_rng(1)
    codes = _random_codes(rng, 300, n_users=6, n_items=8, t_max=3 * DAY)
    # One code per pair (the exact rule counts every code, the snapshot a pair's latest).
    _, first = np.unique(codes.user_id * 100 + codes.item_id, return_index=True)
    codes = CodeLog(
        *(a[first] for a in (codes.user_id, codes.item_id, codes.computed_at)), codes.z[first]
    )
    n = 200
    u, i = rng.integers(0, 6, n), rng.integers(0, 8, n)
    t = rng.integers(0, 3 * DAY // CAD, n) * CAD  # at interval ends
    exact = aggregate_tiers(codes, u, i, t, window_seconds=DAY)
    served = served_aggregate_tiers(
        codes, u, i, t, cadence_seconds=CAD, window_seconds=DAY, iagg_excludes_own=True
    )
    for name in ("uagg", "iagg"):
        np.testing.assert_array_equal(served[name].present, exact[name].present)
        np.testing.assert_allclose(served[name].z, exact[name].z, atol=1e-6)


def test_served_aggregates_match_the_enrichment_views_read_by_the_serving_formula():
    rng = np.random.default_rng(2)
    window = 4 * 3600
    codes = _random_codes(rng, 400, n_users=5, n_items=6, t_max=DAY)
    n = 120
    u, i, t = rng.integers(0, 5, n), rng.integers(0, 6, n), rng.integers(0, DAY + 3600, n)
    served = served_aggregate_tiers(codes, u, i, t, cadence_seconds=CAD, window_seconds=window)
    pairs = _pairs(codes)
    own = latest_pair_code(codes, u, i, t, ttl_seconds=10 * DAY)  # the pair view's latest row
    for r in range(n):
        e = int(t[r]) // CAD * CAD
        ua = user_aggregate(pairs, codes.z, as_of=e, window_seconds=window, fm_version=V)
        ia = item_aggregate(pairs, codes.z, as_of=e, window_seconds=window, fm_version=V)
        row = ua[ua["user_id"] == u[r]]
        s = np.stack(row["z_sum"].to_list()) if len(row) else np.zeros((1, codes.z.shape[1]))
        count = row["count"].to_numpy() if len(row) else np.zeros(1, np.int64)
        c = codes.computed_at[own[r]] if own[r] >= 0 else -1
        z_pair = codes.z[own[r]][None] if own[r] >= 0 else np.zeros_like(s)
        in_window = np.array([own[r] >= 0 and e - window < c <= e])
        mean, valid = mean_excluding(s, count, z_pair, in_window)
        assert served["uagg"].present[r] == valid[0]
        np.testing.assert_allclose(served["uagg"].z[r], mean[0], atol=1e-6)
        irow = ia[ia["item_id"] == i[r]]
        assert served["iagg"].present[r] == (len(irow) == 1)
        if len(irow):
            np.testing.assert_allclose(served["iagg"].z[r], irow["z_mean"].iloc[0], atol=1e-6)


# --- per-interval neighbour tables and fills ----------------------------------------------


NBR = {"cadence_seconds": CAD, "ttl_seconds": 1800, "nbr_window_seconds": 2 * DAY}


def test_interval_table_holds_a_user_whose_first_code_is_in_the_same_day():
    day = 10 * DAY
    codes = _codes(
        [
            (2, 20, day - 3600, 1.0, 0.0),  # user 2: in the daily table (the 48 h before)
            (2, 10, day + 3600, 2.0, 1.0),  # fresh for the row below
            (1, 20, day + 1800, 1.0, 0.1),  # user 1's first code: this morning
        ]
    )
    u, i, t = _q((1, 10, day + 3700))
    own = np.array([False])
    nbr = interval_neighbour_tiers(codes, u, i, t, **NBR, n_neighbors=5, own_present=own)
    assert nbr["nbr_top1"].present[0]
    np.testing.assert_array_equal(nbr["nbr_top1"].z[0], [2.0, 1.0])
    daily = build_tiers(codes, u, i, t, ttl_seconds=1800, n_neighbors=5)
    assert not daily["nbr_top1"].present[0]  # user 1 is not in the day's table


def test_fill_uses_a_neighbour_code_from_the_first_fill_after_it_is_computed():
    codes = _codes([(2, 20, 900, 1.0), (1, 20, 900, 1.0), (2, 10, 900, 5.0), (3, 10, 2700, 9.0)])
    u, i, t = _q((1, 10, 899), (1, 10, 900), (1, 10, 2699), (1, 10, 2700), (1, 10, 3601))
    nbr = interval_neighbour_tiers(
        codes, u, i, t, **NBR, n_neighbors=5, own_present=np.zeros(5, bool)
    )
    # 899: nothing computed yet; 900: the fill at 900 (user 2's code); 2699: the fill at
    # 1800 (user 3's code, computed at 2700, is not used); 2700 and later: the fill at 2700,
    # where user 2's code is stale (2700 − 1800 is not < 900) and user 3's is fresh.
    assert nbr["nbr_top1"].present.tolist() == [False, True, True, True, True]
    np.testing.assert_array_equal(nbr["nbr_top1"].z[:, 0], [0.0, 5.0, 5.0, 9.0, 9.0])


def test_fill_ignores_a_neighbour_code_after_its_ttl_at_every_fill():
    codes = _codes([(2, 20, 900, 1.0), (1, 20, 900, 1.0), (2, 10, 900, 5.0)])
    u, i, t = _q((1, 10, 3600), (1, 10, 3601), (1, 10, 2700))
    nbr = interval_neighbour_tiers(
        codes, u, i, t, **NBR, n_neighbors=5, own_present=np.zeros(3, bool)
    )
    # Fills at 900 and 1800 hold (1, 10); the one at 2700 does not (the code is stale).
    assert nbr["nbr_top1"].present.tolist() == [True, False, True]


def test_fill_only_where_the_own_pair_is_absent_and_not_fresh_at_the_fill():
    codes = _codes([(2, 20, 900, 1.0), (1, 20, 900, 1.0), (2, 10, 900, 5.0), (1, 10, 900, 7.0)])
    u, i, t = _q((1, 10, 1000), (1, 10, 1000))
    nbr = interval_neighbour_tiers(
        codes, u, i, t, **NBR, n_neighbors=5, own_present=np.array([True, False])
    )
    # Row 0 has its pair tier; row 1 is told it has not, but (1, 10) is fresh at 900, so
    # the fill skipped it (serving's fill makes no row for a pair served by its own code).
    assert nbr["nbr_top1"].present.tolist() == [False, False]


def test_fill_respects_its_targets():
    codes = _codes([(2, 20, 900, 1.0), (1, 20, 900, 1.0), (2, 10, 900, 5.0)])
    u, i, t = _q((1, 10, 1000), (1, 10, 1900), (1, 10, 3500))
    own = np.zeros(3, bool)

    def run(targets):
        frame = pd.DataFrame(targets, columns=["user_id", "item_id", "ts"])
        return interval_neighbour_tiers(
            codes, u, i, t, **NBR, n_neighbors=5, own_present=own, fill_targets=frame
        )["nbr_top1"].present.tolist()

    # A candidate at 100 (interval ending 900): a target of the fills at 900 and 1800.
    assert run([(1, 10, 100)]) == [True, True, True]
    # A candidate at 1000 (interval ending 1800): of the fill at 1800 only (the code is
    # stale at 2700), read from 1800 until 3600.
    assert run([(1, 10, 1000)]) == [False, True, True]
    # Another pair's candidate, or one after the row (a later request): no target.
    assert run([(1, 11, 100), (2, 10, 100)]) == [False, False, False]
    assert run([(1, 10, 4000)]) == [False, False, False]
    # A candidate at -100 (interval ending 0): a target of the fills at 0 and 900 only;
    # the row at 1900 still reads the fill at 900, the row at 3500 none (t − 900 > ttl).
    assert run([(1, 10, -100)]) == [True, True, False]


def test_top1_is_the_most_similar_neighbour_with_the_item_and_weighted_uses_similarity():
    codes = _codes(
        [
            (1, 20, 900, 1.0, 0.0),
            (2, 20, 900, 1.0, 0.0),  # user 2: cos 1 with user 1, no code of item 10
            (3, 20, 900, 0.0, 1.0),
            (3, 10, 900, 1.0, 1.0),  # user 3: mean (0.5, 1), cos 0.45
            (4, 20, 900, -1.0, 0.0),
            (4, 10, 900, -3.0, 0.0),  # user 4: mean (-2, 0), cos -1
        ]
    )
    u, i, t = _q((1, 10, 1000))
    nbr = interval_neighbour_tiers(codes, u, i, t, **NBR, n_neighbors=5, own_present=[False])
    np.testing.assert_array_equal(nbr["nbr_top1"].z[0], [1.0, 1.0])  # user 3's, not 2's
    # Weights max(sim, 0): user 4 (sim -1) weighs nothing.
    np.testing.assert_allclose(nbr["nbr_weighted"].z[0], [1.0, 1.0], rtol=1e-6)


def _reference_fill(codes, u, i, t, own, *, ttl, window, k, targets):
    """Brute force with the pipeline's own functions: a table and a fill at every interval
    end, and each row reading the latest fill holding its pair within the read TTL."""
    pairs = _pairs(codes)
    ends = np.arange(0, int(t.max()) + CAD, CAD)
    fills = {}
    for e in ends:
        users, emb = user_embeddings(pairs, codes.z, as_of=e, window_seconds=window, fm_version=V)
        if len(users) < 2:
            continue
        table = nearest_users(users, emb, k)
        if targets is None:
            tg = pd.DataFrame({"user_id": u, "item_id": i})
        else:
            end = (targets["ts"].to_numpy() // CAD + 1) * CAD
            tg = targets[(end > e - ttl) & (end <= e)][["user_id", "item_id"]]
        if len(tg) == 0:
            continue
        rows = neighbour_fill(tg, table, pairs, codes.z, as_of=e, ttl_seconds=ttl, fm_version=V)
        fills[e] = {
            (a, b): (z1, zm)
            for a, b, z1, zm in rows[["user_id", "item_id", "z_top1", "z_mean"]].itertuples(
                index=False
            )
        }
    top1 = np.zeros((len(u), codes.z.shape[1]), np.float32)
    wmean = np.zeros_like(top1)
    present = np.zeros(len(u), bool)
    for r in np.flatnonzero(~own):
        for e in sorted((e for e in fills if t[r] - ttl <= e <= t[r]), reverse=True):
            if (u[r], i[r]) in fills[e]:
                present[r] = True
                top1[r], wmean[r] = fills[e][(u[r], i[r])]
                break
    return present, top1, wmean


def _random_case(seed):
    rng = np.random.default_rng(seed)
    t_max = DAY // 2
    codes = _random_codes(rng, 500, n_users=12, n_items=5, t_max=t_max)
    n = 150
    u, i, t = rng.integers(0, 12, n), rng.integers(0, 5, n), rng.integers(0, t_max + 3600, n)
    own = latest_pair_code(codes, u, i, t, 3600) >= 0
    m = 400
    targets = pd.DataFrame(
        {
            "user_id": rng.integers(0, 12, m),
            "item_id": rng.integers(0, 5, m),
            "ts": rng.integers(0, t_max, m),
        }
    )
    return codes, u, i, t, own, targets


def test_interval_fill_matches_the_pipeline_fill_at_every_interval():
    for seed, with_targets in ((3, False), (4, True)):
        codes, u, i, t, own, targets = _random_case(seed)
        kw = {"ttl_seconds": 3600, "nbr_window_seconds": 4 * 3600, "n_neighbors": 3}
        tg = targets if with_targets else None
        nbr = interval_neighbour_tiers(
            codes, u, i, t, cadence_seconds=CAD, **kw, own_present=own, fill_targets=tg
        )
        present, top1, wmean = _reference_fill(
            codes, u, i, t, own, ttl=3600, window=4 * 3600, k=3, targets=tg
        )
        assert present.sum() > 10
        np.testing.assert_array_equal(nbr["nbr_top1"].present, present)
        np.testing.assert_array_equal(nbr["nbr_top1"].z, top1)
        # The pipeline stores the weighted mean float16-rounded.
        np.testing.assert_allclose(nbr["nbr_weighted"].z, wmean, atol=2e-3)


def test_nothing_computed_or_requested_after_t_is_used():
    codes, u, i, t, own, targets = _random_case(5)
    rng = np.random.default_rng(6)
    kw = {"cadence_seconds": CAD, "ttl_seconds": 3600, "nbr_window_seconds": 4 * 3600}
    calls = (
        (served_aggregate_tiers, {"cadence_seconds": CAD, "window_seconds": DAY}),
        (interval_neighbour_tiers, {**kw, "n_neighbors": 3, "own_present": own}),
        (interval_neighbour_tiers, {**kw, "n_neighbors": 3, "own_present": own, "targets": 1}),
    )
    before = [
        fn(
            codes,
            u,
            i,
            t,
            **{k: v for k, v in args.items() if k != "targets"},
            **({"fill_targets": targets} if "targets" in args else {}),
        )
        for fn, args in calls
    ]
    for r in rng.choice(len(t), 12, replace=False):
        cut = int(t[r])
        # Codes computed after t: new values, and more codes for the row's user and item.
        later = codes.computed_at > cut
        z2 = codes.z.copy()
        z2[later] = rng.normal(size=(int(later.sum()), z2.shape[1]))
        extra = 20
        codes2 = CodeLog(
            np.r_[codes.user_id, np.full(extra, u[r]), rng.choice(u, extra)],
            np.r_[codes.item_id, rng.choice(i, extra), np.full(extra, i[r])],
            np.r_[codes.computed_at, cut + 1 + CAD * rng.integers(0, 5, 2 * extra)],
            np.r_[z2, rng.normal(size=(2 * extra, z2.shape[1]))].astype(np.float32),
        )
        # Requests after t: the row's pair a candidate of every later interval.
        targets2 = pd.concat(
            [
                targets[targets["ts"] <= cut],
                pd.DataFrame(
                    {"user_id": u[r], "item_id": i[r], "ts": cut + np.arange(1, 9000, 300)}
                ),
            ]
        )
        for (fn, args), old in zip(calls, before, strict=True):
            new = fn(
                codes2,
                u[r : r + 1],
                i[r : r + 1],
                t[r : r + 1],
                **{
                    k: (v[r : r + 1] if k == "own_present" else v)
                    for k, v in args.items()
                    if k != "targets"
                },
                **({"fill_targets": targets2} if "targets" in args else {}),
            )
            for name in old:
                assert new[name].present[0] == old[name].present[r]
                np.testing.assert_array_equal(new[name].z[0], old[name].z[r])
        assert (
            latest_pair_code(codes2, u[r : r + 1], i[r : r + 1], t[r : r + 1], 3600)[0]
            == (latest_pair_code(codes, u, i, t, 3600)[r])
        )


def test_diagnostics_tell_the_table_any_fresh_code_and_a_neighbours():
    codes = _codes(
        [
            (1, 20, 900, 1.0, 0.0),
            (2, 20, 900, 1.0, 0.0),
            (2, 11, 900, 3.0, 0.0),  # user 2: user 1's only neighbour (k = 1), cos 1
            (3, 20, 900, -1.0, 0.5),
            (3, 10, 900, 3.0, 0.0),  # user 3: cos 0.97, a fresh code of item 10
        ]
    )
    u, i, t = _q((1, 10, 1000), (1, 11, 1000), (4, 10, 1000))
    diag = neighbour_diagnostics(
        codes, u, i, t, **NBR, n_neighbors=1, own_present=np.zeros(3, bool)
    )
    assert diag["row"].tolist() == [0, 1, 2]
    assert diag["user_in_table"].tolist() == [True, True, False]
    assert diag["item_fresh_any"].tolist() == [True, True, True]
    assert diag["item_fresh_nbr"].tolist() == [False, True, False]
    assert diag["target_at_e"].all()
    assert not diag["user_in_daily_table"].any()  # the day's table has no codes before day 0
    assert diag["item_fresh_any_at_t"].tolist() == [True, True, True]


def test_no_codes_means_no_tier():
    codes = CodeLog(
        np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 2))
    )
    u, i, t = _q((1, 10, 1000), (2, 11, 5000))
    served = served_aggregate_tiers(codes, u, i, t, cadence_seconds=CAD, window_seconds=DAY)
    targets = pd.DataFrame({"user_id": [1], "item_id": [10], "ts": [0]})
    nbr = interval_neighbour_tiers(
        codes, u, i, t, **NBR, n_neighbors=3, own_present=np.zeros(2, bool), fill_targets=targets
    )
    assert not any(tier.present.any() for tier in (*served.values(), *nbr.values()))
