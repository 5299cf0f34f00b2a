"""SolarisFeatures against the real Redis and a real FeatureStore built from feature_repo/."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from solaris.config import SolarisConfig
from solaris.serving.client import FEATURE_SERVICE, SolarisFeatures, serving_connection_string
from solaris.serving.misses import append_misses, drain_misses
from solaris.serving.tiers import TIERS

pytestmark = pytest.mark.integration

# The same values as tests/integration/conftest.py (conftest modules are not importable).
Z_DIM = 8
FM_VERSION = "fm-test-1"

NOW = 1_700_000_000
H = 3600
PAIR, NBR, UAGG, IAGG = range(4)


def _with_timeout(cfg: SolarisConfig, ms: float) -> SolarisConfig:
    return cfg.model_copy(update={"store": cfg.store.model_copy(update={"fetch_timeout_ms": ms})})


@pytest.fixture
def client(solaris_cfg, redis_connection, feast_store) -> Iterator[SolarisFeatures]:
    """A client on the test store, with a generous bound (these tests are about values)."""
    features = SolarisFeatures(
        _with_timeout(solaris_cfg, 5_000),
        redis=redis_connection,
        fm_version=FM_VERSION,
        store=feast_store,
    )
    yield features
    features.close()


def _z(seed: float) -> np.ndarray:
    """A code whose values are exact in float16 (so sums and means compare exactly)."""
    return (np.arange(Z_DIM, dtype=np.float32) + seed) * 0.5


def test_row_older_than_its_ttl_is_never_served_though_redis_holds_it(
    client,
    rows,
    feast_store,
) -> None:
    rows.pair(1, 10, _z(1), NOW - 3 * 24 * H)  # 3 days old, pair TTL 6 h
    rows.pair(1, 11, _z(2), NOW - 6 * H)  # exactly at the TTL: still fresh
    rows.nbr(1, 12, _z(3), _z(4), NOW - 6 * H - 1)  # one second too old
    rows.iagg(13, _z(5), 4, NOW - 25 * H)  # aggregate TTL 24 h
    out = client.fetch(1, [10, 11, 12, 13], now=NOW)
    assert out.tier.tolist() == ["none", "pair", "none", "none"]
    np.testing.assert_array_equal(out.tier_z[1, PAIR], _z(2))
    assert not out.features[[0, 2, 3]].any()

    # Redis still holds the stale rows: Feast's online read returns them unfiltered.
    raw = feast_store.get_online_features(
        features=feast_store.get_feature_service(FEATURE_SERVICE),
        entity_rows=[{"user_id": 1, "item_id": i} for i in (10, 12, 13)],
        full_feature_names=True,
    ).to_dict()
    assert all(v is not None for v in raw["pair__z"][:1] + raw["nbr__z_top1"][1:2])
    assert raw["iagg__z_mean"][2] is not None


def test_wrong_version_is_a_miss_and_is_logged(client, rows, solaris_cfg, redis_client) -> None:
    rows.pair(2, 20, _z(1), NOW - 60, version="fm-old")
    rows.pair(2, 21, _z(2), NOW - 60)
    out = client.fetch(2, [20, 21], now=NOW)
    assert out.mask[:, PAIR].tolist() == [False, True]
    assert out.tier.tolist() == ["none", "pair"]
    assert client.flush()
    misses = drain_misses(redis_client, solaris_cfg.store.miss_stream)
    assert misses.to_dict("list") == {"user_id": [2], "item_id": [20], "ts": [NOW]}


def test_user_aggregate_excludes_the_current_item(client, rows) -> None:
    own, a, b = _z(1), _z(2), _z(7)
    rows.pair(3, 30, own, NOW - 2 * H)
    rows.uagg(3, own + a + b, 3, window_start=NOW - 24 * H, computed_at=NOW - 60)
    out = client.fetch(3, [30, 31], now=NOW)
    # Item 30 is in the aggregate: its own code is removed; item 31 sees the plain mean.
    np.testing.assert_allclose(out.tier_z[0, UAGG], (a + b) / 2, rtol=1e-6)
    np.testing.assert_allclose(out.tier_z[1, UAGG], (own + a + b) / 3, rtol=1e-6)
    assert out.tier.tolist() == ["pair", "uagg"]


def test_composite_keys_do_not_collide(client, rows) -> None:
    rows.pair(1, 23, _z(1), NOW - 60)
    rows.pair(12, 3, _z(9), NOW - 60)
    a = client.fetch(1, [23, 3], now=NOW)
    b = client.fetch(12, [3, 23], now=NOW)
    assert a.tier.tolist() == ["pair", "none"] and b.tier.tolist() == ["pair", "none"]
    np.testing.assert_array_equal(a.tier_z[0, PAIR], _z(1))
    np.testing.assert_array_equal(b.tier_z[0, PAIR], _z(9))


def test_all_tiers_in_one_feast_call_per_fetch(client, rows, feast_store, monkeypatch) -> None:
    rows.pair(4, 40, _z(1), NOW - 60)
    rows.nbr(4, 41, _z(2), _z(3), NOW - 60)
    rows.uagg(4, _z(4), 2, window_start=NOW - 24 * H, computed_at=NOW - 60)
    rows.iagg(43, _z(5), 2, NOW - 60)
    calls = []
    real = feast_store.get_online_features

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(feast_store, "get_online_features", spy)
    items = [40, 41, 42, 43, *range(1000, 1296)]  # 300 candidates
    out = client.fetch(4, items, now=NOW)
    assert len(calls) == 1
    assert calls[0]["features"].name == FEATURE_SERVICE and calls[0]["full_feature_names"]
    assert out.tier[:4].tolist() == ["pair", "nbr", "uagg", "uagg"]
    assert out.counts() == {"pair": 1, "nbr": 1, "uagg": 299 - 1, "iagg": 0, "none": 0}
    assert out.mask[3, IAGG] and out.mask[:, UAGG].all()
    np.testing.assert_array_equal(out.tier_z[1, NBR], _z(2))  # top1 strategy by default
    np.testing.assert_array_equal(out.tier_z[3, IAGG], _z(5))
    client.fetch(4, [40], now=NOW)
    assert len(calls) == 2
    assert client.stats.requests == 2 and client.stats.failures == 0


def test_miss_stream_is_bounded_and_drained(client, solaris_cfg, redis_client) -> None:
    stream, maxlen = solaris_cfg.store.miss_stream, solaris_cfg.store.miss_stream_maxlen
    for k in range(maxlen + 10):
        client.fetch(5, [k, k + 1], now=NOW + k)
    assert client.flush()
    assert client.stats.misses_logged == maxlen + 10
    assert redis_client.xlen(stream) == maxlen
    drained = drain_misses(redis_client, stream)
    # The oldest 10 requests were trimmed; the rest come back in order, two items each.
    first = 10
    assert len(drained) == 2 * maxlen
    assert drained["ts"].tolist() == [NOW + k for k in range(first, maxlen + 10) for _ in (0, 1)]
    assert drained["item_id"].tolist()[:4] == [first, first + 1, first + 1, first + 2]
    assert (drained["user_id"] == 5).all()
    assert redis_client.xlen(stream) == 0
    assert drain_misses(redis_client, stream).empty
    append_misses(redis_client, stream, maxlen, 6, [7, 8, 9], NOW)
    again = drain_misses(redis_client, stream, count=10)
    assert again.to_dict("list") == {"user_id": [6] * 3, "item_id": [7, 8, 9], "ts": [NOW] * 3}


def test_bad_arguments_raise_and_empty_requests_return_empty(client) -> None:
    for bad_user in (-1, float("nan"), 1.5, "7", True):
        with pytest.raises(ValueError):
            client.fetch(bad_user, [1])
    for bad_items in ([1, -2], [1.0, float("nan")], [0.5], "12", [[1, 2]]):
        with pytest.raises(ValueError):
            client.fetch(1, bad_items)
    empty = client.fetch(1, [])
    assert empty.features.shape == (0, len(TIERS) * Z_DIM)
    assert client.stats.requests == 0


# --------------------------------------------------------------------------------------------
# Redis down or stuck: zeros within the bound, no exception, the failure counted
# --------------------------------------------------------------------------------------------


@pytest.fixture
def blackhole() -> Iterator[str]:
    """A TCP server on loopback that accepts connections and never answers."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(timeout=1)
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.parametrize("target", ["closed-port", "blackhole"])
def test_unreachable_or_stuck_redis_gives_zeros_within_the_bound(
    target: str,
    solaris_cfg,
    feast_store,
    request,
) -> None:
    timeout_ms = solaris_cfg.store.fetch_timeout_ms
    address = "127.0.0.1:1" if target == "closed-port" else request.getfixturevalue("blackhole")
    features = SolarisFeatures(solaris_cfg, redis=address, fm_version=FM_VERSION)
    try:
        features.warm_up()  # builds the store (registry of the test project) outside the bound
        assert "socket_timeout=" in features.feast_connection_string()
        for k in range(3):
            start = time.perf_counter()
            out = features.fetch(1, list(range(300)), now=NOW)
            elapsed_ms = (time.perf_counter() - start) * 1000
            assert elapsed_ms < timeout_ms + 100, (target, k, elapsed_ms)
            assert out.features.shape == (300, len(TIERS) * Z_DIM)
            assert not out.features.any() and not out.mask.any()
            assert set(out.tier) == {"none"}
        assert features.stats.requests == 3 and features.stats.failures == 3
        if target == "blackhole":
            assert features.stats.timeouts == 3
        assert features.stats.misses_logged == 0
    finally:
        features.close()


def test_serving_options_are_added_but_explicit_ones_kept() -> None:
    assert serving_connection_string("h:1,db=3", 0.05) == (
        "h:1,db=3,socket_timeout=0.05,socket_connect_timeout=0.05,driver_info=null"
    )
    assert serving_connection_string("h:1,socket_timeout=2", 0.05) == (
        "h:1,socket_timeout=2,socket_connect_timeout=0.05,driver_info=null"
    )


def test_requests_are_shed_while_every_worker_is_stuck(solaris_cfg, feast_store, blackhole) -> None:
    # An explicit 5 s socket timeout keeps the one worker stuck on the blackhole.
    features = SolarisFeatures(
        solaris_cfg, redis=f"{blackhole},socket_timeout=5", fm_version=FM_VERSION, max_workers=1
    )
    try:
        assert features.store is not None  # built, without warm_up's read (it would block 5 s)
        assert features.fetch(1, [1, 2], now=NOW).tier.tolist() == ["none", "none"]
        start = time.perf_counter()
        out = features.fetch(1, [1, 2], now=NOW)  # the worker is still stuck: no wait at all
        assert (time.perf_counter() - start) * 1000 < 20
        assert not out.mask.any()
        s = features.stats
        assert (s.requests, s.failures, s.timeouts, s.shed) == (2, 2, 1, 1)
    finally:
        features.close()
