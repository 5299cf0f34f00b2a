"""Train/serve parity: build_training_set rows equal SolarisFeatures.fetch rows at that time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from solaris.serving.client import SolarisFeatures
from solaris.serving.tiers import TierFeatures, empty_tiers
from solaris.serving.training_set import build_training_set

pytestmark = pytest.mark.integration

# The same values as tests/integration/conftest.py (conftest modules are not importable).
Z_DIM = 8
FM_VERSION = "fm-test-1"

T0 = 1_700_000_000
H = 3600
PAIR, NBR, UAGG, IAGG = range(4)


def _z(seed: float) -> np.ndarray:
    return (np.arange(Z_DIM, dtype=np.float32) + seed) * 0.25


def _client(cfg, redis_connection, store) -> SolarisFeatures:
    """A serving client on the test store with a generous bound (values, not latency)."""
    slow_ok = cfg.model_copy(
        update={"store": cfg.store.model_copy(update={"fetch_timeout_ms": 5_000})}
    )
    return SolarisFeatures(slow_ok, redis=redis_connection, fm_version=FM_VERSION, store=store)


def _rows(out: TierFeatures, idx: list[int]) -> tuple:
    return out.features[idx], out.mask[idx], out.tier[idx].tolist()


def _assert_same(a: tuple, b: tuple) -> None:
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert a[2] == b[2]


@pytest.fixture
def history(rows):
    """A small replayed log: every tier, stale and wrong-version rows, and a later rewrite.

    Online, each key ends with its latest write; offline holds every write. Times:
    T0 − 2 h … T0 rows are written; at T0 + 1 h a new code for (1, 10) replaces the old one.
    """
    own, a, b = _z(1), _z(2), _z(5)
    rows.offline = True
    rows.pair(1, 10, own, T0 - 2 * H, online=False)  # superseded online by the rewrite below
    rows.pair(1, 10, _z(9), T0 + 1 * H)
    rows.pair(1, 11, _z(3), T0 - 30 * H)  # stale for the pair tier, outside the uagg window
    rows.pair(2, 10, _z(4), T0 - 60, version="fm-old")  # wrong version
    rows.pair(2, 11, _z(6), T0 - 60)
    rows.nbr(1, 12, _z(7), _z(8), T0 - 3 * H)
    rows.nbr(2, 12, _z(7), _z(8), T0 - 7 * H)  # older than the nbr (= pair) TTL at T0
    rows.uagg(1, own + a + b, 3, window_start=T0 - 25 * H, computed_at=T0 - H)
    rows.uagg(2, a + b, 2, window_start=T0 - 25 * H, computed_at=T0 - H)
    rows.iagg(13, _z(10), 5, T0 - 2 * H)
    rows.iagg(14, _z(11), 5, T0 - 2 * H, version="fm-old")
    rows.flush_offline()
    return {"own": own, "a": a, "b": b}


def test_training_rows_equal_served_rows(
    history,
    solaris_cfg,
    feast_store,
    redis_connection,
) -> None:
    # Times after the latest write (T0 + 1 h): the online store holds the rows valid then.
    times = [T0 + 1 * H, T0 + 1 * H + 1, T0 + 3 * H, T0 + 7 * H + 1, T0 + 30 * H]
    users, items = [1, 2, 3], [10, 11, 12, 13, 14, 15]  # user 3: no uagg row
    grid = pd.DataFrame(
        [(u, i, t) for t in times for u in users for i in items],
        columns=["user_id", "item_id", "ts"],
    )
    shuffled = grid.sample(frac=1.0, random_state=0).reset_index(drop=True)
    train = build_training_set(shuffled, feast_store, solaris_cfg, fm_version=FM_VERSION)

    with _client(solaris_cfg, redis_connection, feast_store) as client:
        for (u, t), idx in shuffled.groupby(["user_id", "ts"]).groups.items():
            idx = list(idx)
            served = client.fetch(u, shuffled.loc[idx, "item_id"].tolist(), now=t)
            _assert_same(_rows(train, idx), _rows(served, list(range(len(idx)))))
        assert client.stats.failures == 0

    # The grid exercises several tiers, not only "none".
    assert {"pair", "nbr", "uagg", "iagg", "none"} <= set(train.tier.tolist())


def test_before_a_later_write_only_the_offline_path_answers(
    history,
    solaris_cfg,
    feast_store,
    redis_connection,
) -> None:
    own, a, b = history["own"], history["a"], history["b"]
    t = T0  # the online (1, 10) row is the T0 + 1 h rewrite: computed after t, so unusable
    imp = pd.DataFrame(
        {"user_id": [1, 1, 2, 2, 1, 1], "item_id": [10, 13, 10, 14, 11, 10], "ts": [t] * 6}
    )
    train = build_training_set(imp, feast_store, solaris_cfg, fm_version=FM_VERSION)
    assert len(train) == 6

    # (1, 10) at t: the offline T0 − 2 h code, and the user mean without it.
    assert train.tier[0] == "pair"
    np.testing.assert_array_equal(train.tier_z[0, PAIR], own)
    np.testing.assert_allclose(train.tier_z[0, UAGG], (a + b) / 2, rtol=1e-6)
    assert train.mask[0].tolist() == [True, False, True, False]
    # (1, 13): no pair; plain user mean and the item aggregate.
    np.testing.assert_allclose(train.tier_z[1, UAGG], (own + a + b) / 3, rtol=1e-6)
    np.testing.assert_array_equal(train.tier_z[1, IAGG], _z(10))
    assert train.tier[1] == "uagg"
    # (2, 10): the wrong-version pair is a miss; (2, 14): wrong-version item aggregate too.
    assert train.mask[2].tolist() == [False, False, True, False]
    assert train.mask[3].tolist() == [False, False, True, False]
    # (1, 11): its pair row exists but is stale. Feast's file store would drop the whole
    # impression in a one-call join; here it keeps its user aggregate (the item's code is
    # outside the window, so the plain mean).
    assert train.tier[4] == "uagg" and train.mask[4].tolist() == [False, False, True, False]
    np.testing.assert_allclose(train.tier_z[4, UAGG], (own + a + b) / 3, rtol=1e-6)
    # A repeated impression gets the same row again.
    np.testing.assert_array_equal(train.features[5], train.features[0])

    # Serving at t cannot see the T0 − 2 h code any more (Redis keeps only the latest row).
    with _client(solaris_cfg, redis_connection, feast_store) as client:
        served = client.fetch(1, [10], now=t)
    assert served.tier[0] == "uagg" and not served.mask[0, PAIR]


def test_pair_older_than_its_ttl_but_inside_the_window_is_excluded_in_both(
    rows,
    solaris_cfg,
    feast_store,
    redis_connection,
) -> None:
    own, a = _z(1), _z(2)
    rows.offline = True
    rows.pair(4, 40, own, T0 - 10 * H)
    rows.uagg(4, own + a, 2, window_start=T0 - 25 * H, computed_at=T0 - H)
    rows.flush_offline()
    imp = pd.DataFrame({"user_id": [4], "item_id": [40], "ts": [T0]})
    train = build_training_set(imp, feast_store, solaris_cfg, fm_version=FM_VERSION)
    with _client(solaris_cfg, redis_connection, feast_store) as client:
        served = client.fetch(4, [40], now=T0)
    # Not a pair hit (10 h > 6 h), but inside the 24 h window: both paths remove the item.
    # Offline this needs the pair view's ttl to cover the window (solaris_features.py).
    assert not served.mask[0, PAIR] and not train.mask[0, PAIR]
    np.testing.assert_array_equal(served.tier_z[0, UAGG], a)
    np.testing.assert_array_equal(train.tier_z[0, UAGG], served.tier_z[0, UAGG])


def test_a_pair_older_than_a_day_in_the_window_of_a_served_aggregate_is_excluded_in_both(
    rows,
    solaris_cfg,
    feast_store,
    redis_connection,
) -> None:
    # A 12 h old aggregate (servable: TTL 24 h) whose window reaches 36 h back holds a 30 h
    # old pair: the pair's retention (48 h) keeps it online and offline, so both paths
    # remove it, even after another write to the user's pair hash (which prunes it).
    own, a = _z(1), _z(2)
    rows.offline = True
    rows.pair(6, 60, own, T0 - 30 * H)
    rows.uagg(6, own + a, 2, window_start=T0 - 36 * H, computed_at=T0 - 12 * H)
    rows.pair(6, 61, _z(3), T0 - H)
    rows.flush_offline()
    imp = pd.DataFrame({"user_id": [6], "item_id": [60], "ts": [T0]})
    train = build_training_set(imp, feast_store, solaris_cfg, fm_version=FM_VERSION)
    with _client(solaris_cfg, redis_connection, feast_store) as client:
        served = client.fetch(6, [60], now=T0)
    np.testing.assert_array_equal(served.tier_z[0, UAGG], a)
    np.testing.assert_array_equal(train.tier_z[0, UAGG], a)


def test_views_without_offline_data_are_null(rows, solaris_cfg, feast_store) -> None:
    rows.offline = True
    rows.pair(5, 50, _z(1), T0 - 60)  # only data/offline/pair exists
    rows.flush_offline()
    imp = pd.DataFrame({"user_id": [5, 5], "item_id": [50, 51], "ts": [T0, T0]})
    out = build_training_set(imp, feast_store, solaris_cfg, fm_version=FM_VERSION)
    assert out.tier.tolist() == ["pair", "none"]
    np.testing.assert_array_equal(out.tier_z[0, PAIR], _z(1))


def test_empty_and_bad_impressions(solaris_cfg, feast_store) -> None:
    empty = pd.DataFrame({"user_id": [], "item_id": [], "ts": []}, dtype="int64")
    out = build_training_set(empty, feast_store, solaris_cfg, fm_version=FM_VERSION)
    assert out.features.shape == empty_tiers(0, Z_DIM).features.shape
    with pytest.raises(ValueError, match="missing columns"):
        build_training_set(empty.drop(columns="ts"), feast_store, solaris_cfg, fm_version="x")
    bad = pd.DataFrame({"user_id": [1.5], "item_id": [1], "ts": [T0]})
    with pytest.raises(ValueError, match="user_id"):
        build_training_set(bad, feast_store, solaris_cfg, fm_version="x")
