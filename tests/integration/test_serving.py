"""SolarisFeatures against the real Redis and a real FeatureStore built from feature_repo/."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import hiredis
import numpy as np
import pytest
from feast.protos.feast.serving.ServingService_pb2 import FieldStatus

from solaris.config import SolarisConfig
from solaris.serving.client import FEATURE_SERVICE, SolarisFeatures
from solaris.serving.misses import append_misses, drain_misses
from solaris.serving.tiers import TIERS
from solaris.store import reads as reads_module
from solaris.store.contract import SERVING_VIEWS
from solaris.store.feast_store import online_store_of

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


def test_a_stale_row_is_never_served_by_the_client_nor_by_a_plain_feast_read(
    client,
    rows,
    feast_store,
) -> None:
    rows.pair(1, 10, _z(1), NOW - 3 * 24 * H)  # beyond the pair's 48 h retention: pruned
    rows.pair(1, 14, _z(6), NOW - 10 * H)  # older than the 6 h read TTL, kept (retention)
    rows.pair(1, 11, _z(2), NOW - 6 * H)  # exactly at the TTL: still fresh
    rows.nbr(1, 12, _z(3), _z(4), NOW - 6 * H - 1)  # one second too old
    rows.iagg(13, _z(5), 4, NOW - 25 * H)  # aggregate TTL 24 h
    out = client.fetch(1, [10, 11, 12, 13, 14], now=NOW)
    assert out.tier.tolist() == ["none", "pair", "none", "none", "none"]
    np.testing.assert_array_equal(out.tier_z[1, PAIR], _z(2))
    assert not out.features[[0, 2, 3, 4]].any()

    # A plain Feast read at the same time applies the same freshness inside the store.
    response = feast_store.get_online_features(
        features=feast_store.get_feature_service(FEATURE_SERVICE),
        entity_rows={"user_id": [1] * 5, "item_id": [10, 11, 12, 13, 14], "request_ts": NOW},
        full_feature_names=True,
    )
    raw = response.to_dict()
    assert raw["pair__z"][1] is not None
    assert raw["pair__z"][0] is None and raw["pair__z"][4] is None
    assert raw["nbr__z_top1"][2] is None and raw["iagg__z_mean"][3] is None
    names = list(response.proto.metadata.feature_names.val)
    status = {n: list(r.statuses) for n, r in zip(names, response.proto.results, strict=True)}
    stale, present, missing = (
        FieldStatus.OUTSIDE_MAX_AGE,
        FieldStatus.PRESENT,
        FieldStatus.NOT_FOUND,
    )
    assert status["pair__z"] == [missing, present, missing, missing, stale]
    assert status["nbr__z_top1"] == [missing, missing, stale, missing, missing]
    assert status["iagg__z_mean"] == [missing, missing, missing, stale, missing]


def test_wrong_version_is_a_miss_and_is_logged(client, rows, solaris_cfg, redis_client) -> None:
    rows.pair(2, 20, _z(1), NOW - 60, version="fm-old")
    rows.pair(2, 21, _z(2), NOW - 60)
    out = client.fetch(2, [20, 21], now=NOW)
    assert out.mask[:, PAIR].tolist() == [False, True]
    assert out.tier.tolist() == ["none", "pair"]
    assert client.flush()
    misses = drain_misses(redis_client, f"{solaris_cfg.namespace}:misses")
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


def test_all_tiers_in_one_round_trip_per_fetch(client, rows, monkeypatch) -> None:
    rows.pair(4, 40, _z(1), NOW - 60)
    rows.nbr(4, 41, _z(2), _z(3), NOW - 60)
    rows.uagg(4, _z(4), 2, window_start=NOW - 24 * H, computed_at=NOW - 60)
    rows.iagg(43, _z(5), 2, NOW - 60)
    calls = []
    real = reads_module._read_uniform

    def spy(conns, packed, shapes, size_hint):
        calls.append(len(shapes))
        return real(conns, packed, shapes, size_hint)

    monkeypatch.setattr(reads_module, "_read_uniform", spy)
    items = [40, 41, 42, 43, *range(1000, 1296)]  # 300 candidates
    out = client.fetch(4, items, now=NOW)
    assert calls == [len(SERVING_VIEWS)]  # one command per view, one round trip
    assert out.tier[:4].tolist() == ["pair", "nbr", "uagg", "uagg"]
    assert out.counts() == {"pair": 1, "nbr": 1, "uagg": 299 - 1, "iagg": 0, "none": 0}
    assert out.mask[3, IAGG] and out.mask[:, UAGG].all()
    np.testing.assert_array_equal(out.tier_z[1, NBR], _z(2))  # top1 strategy by default
    np.testing.assert_array_equal(out.tier_z[3, IAGG], _z(5))
    client.fetch(4, [40], now=NOW)
    assert len(calls) == 2
    assert client.stats.requests == 2 and client.stats.failures == 0


def test_rows_a_caller_holds_survive_its_next_request(client, rows) -> None:
    """The request path reads into one receive buffer per thread and reuses it, but never
    while rows of an earlier request (views of it) are still held: those keep their values."""
    import gc

    for user, seed in ((1, 1), (12, 9)):  # every view present: the replies are views
        rows.pair(user, 23, _z(seed), NOW - 60)
        rows.nbr(user, 23, _z(seed + 1), _z(seed + 2), NOW - 60)
        rows.uagg(user, _z(seed + 3), 2, window_start=NOW - 24 * H, computed_at=NOW - 60)
    rows.iagg(23, _z(5), 2, NOW - 60)
    client.fetch(1, [23], now=NOW)  # the store, its plan and connections, built
    store = client.store
    service = store.get_feature_service(FEATURE_SERVICE)
    online = online_store_of(store)
    items = np.array([23], np.int64)

    def read(user: int):
        out = online.read_user(store.config, store.registry, store.project, service, user, items)
        assert out is not None
        return out

    held = read(1)
    first = id(online._request_conns._buffers.last)
    other = read(12)
    np.testing.assert_array_equal(held["pair"].values["z"][0].astype(np.float32), _z(1))
    np.testing.assert_array_equal(other["pair"].values["z"][0].astype(np.float32), _z(9))
    assert id(online._request_conns._buffers.last) != first  # rows held: a new buffer
    del held, other
    gc.collect()
    reused = id(online._request_conns._buffers.last)  # an id: a reference would hold it
    again = read(12)  # nothing points into the buffer any more: reused
    assert id(online._request_conns._buffers.last) == reused
    np.testing.assert_array_equal(again["pair"].values["z"][0].astype(np.float32), _z(9))


def test_the_request_paths_commands_are_what_it_sends(client, rows, monkeypatch) -> None:
    """``request_commands`` gives the bytes the request path puts on the wire: one GET or
    HMGET per serving view, the user's keys, each candidate as its 8-byte field."""
    from solaris.store import keys

    rows.pair(4, 40, _z(1), NOW - 60)
    sent = []
    real = reads_module._read_uniform

    def spy(conns, packed, shapes, size_hint):
        sent.append(b"".join(packed))
        return real(conns, packed, shapes, size_hint)

    monkeypatch.setattr(reads_module, "_read_uniform", spy)
    items = np.array([40, 41, 7], np.int64)
    client.fetch(4, items, now=NOW)
    store = client.store
    service = store.get_feature_service(FEATURE_SERVICE)
    online = online_store_of(store)
    packed = online.request_commands(store.config, store.registry, store.project, service, 4, items)
    assert packed is not None and len(packed) == len(SERVING_VIEWS)
    assert sent == [b"".join(packed)]
    fields = keys.member_fields(items).tolist()
    expected = []
    for spec in SERVING_VIEWS:
        key = keys.view_key(store.project, spec)
        key = keys.partition_key(key, spec, 4) if spec.partition is not None else key
        args = (b"GET", key) if spec.member is None else (b"HMGET", key, *fields)
        expected.append(hiredis.pack_command(args))
    assert packed == expected
    none = items[:0]
    assert (
        online.request_commands(store.config, store.registry, store.project, service, 4, none)
        is None
    )


def test_miss_stream_is_bounded_and_drained(client, solaris_cfg, redis_client) -> None:
    stream, maxlen = f"{solaris_cfg.namespace}:misses", solaris_cfg.store.miss_stream_maxlen
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


def _with_store(cfg: SolarisConfig, **changes) -> SolarisConfig:
    return cfg.model_copy(update={"store": cfg.store.model_copy(update=changes)})


def test_a_key_of_the_wrong_type_degrades_only_its_own_tier_and_never_opens_the_breaker(
    solaris_cfg, redis_connection, feast_store, rows, redis_client, caplog
) -> None:
    """The drill's case: ``<ns>:uagg:{u:1}`` made a hash (a list too, for ``HMGET``),
    user 1 fetched more times than the breaker allows failures."""
    from solaris.store.contract import NBR, UAGG
    from solaris.store.keys import partition_key, view_key

    cfg = _with_timeout(_with_store(solaris_cfg, breaker_failures=2), 5_000)
    rows.pair(1, 10, _z(1), NOW - 60)
    rows.pair(2, 20, _z(2), NOW - 60)
    rows.uagg(2, _z(3), 1, window_start=NOW - 24 * H, computed_at=NOW - 60)
    ns = solaris_cfg.namespace
    bad_uagg = partition_key(view_key(ns, UAGG), UAGG, 1)
    bad_nbr = partition_key(view_key(ns, NBR), NBR, 1)
    redis_client.hset(bad_uagg, "not", "a record")
    redis_client.rpush(bad_nbr, "not a hash")
    client = SolarisFeatures(cfg, redis=redis_connection, fm_version=FM_VERSION, store=feast_store)
    try:
        with caplog.at_level("WARNING", logger="solaris.store.reads"):
            for _ in range(4):
                own = client.fetch(1, [10, 11], now=NOW)
                # The user's pair code is still served; only the bad keys' tiers are absent.
                assert own.tier.tolist() == ["pair", "none"]
                np.testing.assert_array_equal(own.tier_z[0, PAIR], _z(1))
        other = client.fetch(2, [20, 21], now=NOW)
        assert other.tier.tolist() == ["pair", "uagg"]
        assert client.breaker.state == "closed"
        assert client.stats.failures == 0
        warned = [r.getMessage() for r in caplog.records]
        assert sum(bad_uagg in m and "WRONGTYPE" in m for m in warned) == 1  # once, by name
        assert sum(bad_nbr in m for m in warned) == 1
    finally:
        client.close()
        redis_client.delete(bad_uagg, bad_nbr)


@pytest.mark.parametrize("target", ["closed-port", "blackhole"])
def test_unreachable_or_stuck_redis_gives_zeros_within_the_bound(
    target: str,
    solaris_cfg,
    feast_store,
    request,
) -> None:
    # A breaker that never opens here, so every fetch really waits on the socket.
    cfg = _with_store(solaris_cfg, breaker_failures=100)
    timeout_ms = cfg.store.fetch_timeout_ms
    address = "127.0.0.1:1" if target == "closed-port" else request.getfixturevalue("blackhole")
    features = SolarisFeatures(cfg, redis=address, fm_version=FM_VERSION)
    try:
        features.warm_up()  # builds the store (registry of the test project) outside the bound
        assert "socket_timeout=" in features.store.config.online_store.connection_string
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


def test_a_hung_redis_opens_the_breaker_and_later_fetches_answer_at_once(
    solaris_cfg, feast_store, blackhole
) -> None:
    cfg = _with_store(solaris_cfg, fetch_timeout_ms=100.0, breaker_failures=2)
    features = SolarisFeatures(cfg, redis=blackhole, fm_version=FM_VERSION)
    try:
        assert features.store is not None  # built, without warm_up's read
        for _ in range(2):  # each waits for its socket timeout
            assert not features.fetch(1, [1, 2], now=NOW).mask.any()
        assert features.breaker.state == "open"
        start = time.perf_counter()
        out = features.fetch(1, [1, 2], now=NOW)  # Redis looks hung: no wait at all
        assert (time.perf_counter() - start) * 1000 < 20
        assert not out.mask.any()
        s = features.stats
        assert (s.requests, s.failures, s.timeouts, s.shed_open, s.shed_busy) == (3, 3, 2, 1, 0)
    finally:
        features.close()


def test_the_breaker_closes_again_once_redis_answers(
    solaris_cfg, feast_store, rows, redis_connection
) -> None:
    cfg = _with_store(solaris_cfg, breaker_failures=1, breaker_cooldown_ms=50.0)
    rows.pair(8, 80, _z(1), NOW - 60)
    features = SolarisFeatures(
        cfg, redis=redis_connection, fm_version=FM_VERSION, store=feast_store
    )
    try:
        features.breaker.record(False)  # as after one failed fetch
        assert features.breaker.state == "open"
        assert not features.fetch(8, [80], now=NOW).mask.any()  # shed while open
        time.sleep(0.06)
        assert features.fetch(8, [80], now=NOW).tier.tolist() == ["pair"]  # the probe
        assert features.breaker.state == "closed"
        assert features.stats.shed_open == 1
    finally:
        features.close()


def test_an_overloaded_process_sheds_as_busy_not_as_hung(
    solaris_cfg, feast_store, blackhole
) -> None:
    # One slot, taken by a fetch stuck on the blackhole for its whole 2 s socket timeout.
    cfg = _with_store(solaris_cfg, max_concurrent_fetches=1, fetch_timeout_ms=2_000.0)
    features = SolarisFeatures(cfg, redis=blackhole, fm_version=FM_VERSION)
    try:
        assert features.store is not None
        stuck = threading.Thread(target=features.fetch, args=(1, [1]), kwargs={"now": NOW})
        stuck.start()
        deadline = time.monotonic() + 2
        while features.stats.requests == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)  # the first fetch is inside its read now
        start = time.perf_counter()
        out = features.fetch(1, [1, 2], now=NOW)
        assert (time.perf_counter() - start) * 1000 < 20
        assert not out.mask.any()
        assert features.stats.shed_busy == 1 and features.stats.shed_open == 0
        stuck.join(timeout=5)
    finally:
        features.close()


def test_one_bad_miss_entry_never_costs_the_good_ones(solaris_cfg, redis_client) -> None:
    from solaris.serving.misses import drain_miss_entries

    stream, maxlen = f"{solaris_cfg.namespace}:misses", solaris_cfg.store.miss_stream_maxlen
    append_misses(redis_client, stream, maxlen, 1, [10, 11], NOW)
    redis_client.xadd(stream, {"user": "x", "ts": NOW, "items": b"\x01\x02"})  # not ours
    redis_client.xadd(stream, {"user": 2, "ts": NOW})  # no items
    append_misses(redis_client, stream, maxlen, 3, [30], NOW + 1)
    drained = drain_miss_entries(redis_client, stream)
    assert drained.rows.to_dict("list") == {
        "user_id": [1, 1, 3],
        "item_id": [10, 11, 30],
        "ts": [NOW, NOW, NOW + 1],
    }
    assert [reason for _, reason in drained.skipped] == [
        "user must be a decimal integer in [0, 9223372036854775808), got b'x'",
        "missing fields ['items']",
    ]
    assert redis_client.xlen(stream) == 0


def test_invalid_misses_are_refused_before_reaching_the_stream(solaris_cfg, redis_client):
    stream, maxlen = f"{solaris_cfg.namespace}:misses", solaris_cfg.store.miss_stream_maxlen
    for user, items, ts in ((1, [-1], NOW), (1, [1], NOW * 1000), (-3, [1], NOW)):
        with pytest.raises(ValueError):
            append_misses(redis_client, stream, maxlen, user, items, ts)
    assert redis_client.xlen(stream) == 0


def test_every_concurrent_caller_gets_zeros_within_the_bound_from_a_hung_redis(
    solaris_cfg, feast_store, blackhole
) -> None:
    cfg = _with_store(solaris_cfg, breaker_failures=100)  # every caller really waits
    bound_ms = cfg.store.fetch_timeout_ms
    features = SolarisFeatures(cfg, redis=blackhole, fm_version=FM_VERSION)
    elapsed: list[float] = []
    errors: list[BaseException] = []

    def caller() -> None:
        try:
            start = time.perf_counter()
            out = features.fetch(1, list(range(300)), now=NOW)
            elapsed.append((time.perf_counter() - start) * 1000)
            assert not out.mask.any()
        except BaseException as exc:
            errors.append(exc)

    try:
        assert features.store is not None
        threads = [threading.Thread(target=caller) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and len(elapsed) == 8
        assert max(elapsed) < bound_ms + 150, elapsed
        assert features.stats.timeouts == 8
    finally:
        features.close()


def test_a_fetch_after_close_still_answers_and_drops_its_misses(client) -> None:
    client.close()
    out = client.fetch(1, [1, 2], now=NOW)  # a miss it can no longer log
    assert out.tier.tolist() == ["none", "none"]
    assert client.stats.misses_dropped == 1


def test_warm_up_does_the_first_fetchs_one_off_work(client) -> None:
    """After warm_up the request path's connection is open and torch (the float16 widening)
    imported: the first request pays neither."""
    import sys

    client.warm_up()
    connections = client._online._request_conns
    assert connections is not None and len(connections._idle) == 1
    assert "torch" in sys.modules
