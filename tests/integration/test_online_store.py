"""The SOLARIS online store through Feast's own surface, on the real Redis.

Reads cost one command per view; freshness is applied inside the store for every caller;
Redis memory is bounded by key expiry and pruning on write; the most recent write wins;
Feast's generic write, read, materialize and teardown paths work; concurrent callers all
get real features.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest
from feast import FeatureView
from feast.protos.feast.serving.ServingService_pb2 import FieldStatus

from solaris.config import SolarisConfig
from solaris.pipeline.materialize import materialize
from solaris.serving.client import SolarisFeatures
from solaris.store import keys
from solaris.store.contract import FEATURE_SERVICE, PAIR
from solaris.store.feast_store import apply_definitions, online_store_of, open_feature_store
from solaris.store.online import ViewDefinitionError

pytestmark = pytest.mark.integration

Z_DIM = 8  # as in conftest
FM_VERSION = "fm-test-1"
NOW = 1_700_000_000
H = 3600


def _z(seed: float) -> np.ndarray:
    return (np.arange(Z_DIM, dtype=np.float32) + seed) * 0.5


def _statuses(response) -> dict[str, list[int]]:
    names = list(response.proto.metadata.feature_names.val)
    return {n: list(r.statuses) for n, r in zip(names, response.proto.results, strict=True)}


def _command_calls(redis_client) -> dict[str, int]:
    stats = redis_client.info("commandstats")
    return {
        name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("hmget", "get")
    }


def test_one_user_and_300_candidates_cost_one_command_per_view(
    feast_store, rows, redis_client
) -> None:
    rows.pair(1, 10, _z(1), NOW - 60)
    rows.uagg(1, _z(2), 2, window_start=NOW - 24 * H, computed_at=NOW - 60)
    service = feast_store.get_feature_service(FEATURE_SERVICE)
    entity_rows = {"user_id": [1] * 300, "item_id": list(range(10, 310)), "request_ts": NOW}
    feast_store.get_online_features(
        features=service, entity_rows=entity_rows, full_feature_names=True
    )  # warm
    before = _command_calls(redis_client)
    response = feast_store.get_online_features(
        features=service, entity_rows=entity_rows, full_feature_names=True
    )
    after = _command_calls(redis_client)
    # pair, nbr and iagg: one HMGET each; uagg: one GET.
    assert after["hmget"] - before["hmget"] == 3
    assert after["get"] - before["get"] == 1
    assert response.to_dict()["pair__z"][0] == _z(1).tolist()


def test_without_a_request_time_freshness_is_judged_at_the_wall_clock(feast_store, rows) -> None:
    now = int(time.time())
    rows.pair(2, 20, _z(1), now - 60)
    rows.pair(2, 21, _z(2), NOW)  # 2023: years older than the 6 h read TTL
    response = feast_store.get_online_features(
        features=["pair:z", "pair:computed_at"],
        entity_rows=[{"user_id": 2, "item_id": 20}, {"user_id": 2, "item_id": 21}],
    )
    assert _statuses(response)["z"] == [FieldStatus.PRESENT, FieldStatus.OUTSIDE_MAX_AGE]
    assert response.to_dict()["computed_at"] == [now - 60, None]


def test_a_row_computed_after_the_request_time_is_not_found(feast_store, rows) -> None:
    rows.pair(3, 30, _z(1), NOW + 1)
    at_now = feast_store.get_online_features(
        features=["pair:z"], entity_rows={"user_id": [3], "item_id": [30], "request_ts": NOW}
    )
    assert _statuses(at_now)["z"] == [FieldStatus.NOT_FOUND]
    assert at_now.to_dict()["z"] == [None]
    later = feast_store.get_online_features(
        features=["pair:z"], entity_rows={"user_id": [3], "item_id": [30], "request_ts": NOW + 1}
    )
    assert _statuses(later)["z"] == [FieldStatus.PRESENT]


def test_several_users_in_one_request_each_get_their_own_rows(feast_store, rows) -> None:
    rows.pair(4, 40, _z(1), NOW - 60)
    rows.pair(5, 40, _z(2), NOW - 60)
    rows.uagg(5, _z(3), 2, window_start=NOW - 24 * H, computed_at=NOW - 60)
    out = feast_store.get_online_features(
        features=["pair:z", "uagg:count"],
        entity_rows={"user_id": [5, 4, 5, 6], "item_id": [40, 40, 41, 40], "request_ts": NOW},
    ).to_dict()
    assert out["z"] == [_z(2).tolist(), _z(1).tolist(), None, None]
    assert out["count"] == [2, None, 2, None]


def test_the_most_recent_write_wins_whatever_its_event_time(feast_store, rows) -> None:
    rows.pair(6, 60, _z(1), NOW - 60)
    rows.pair(6, 60, _z(2), NOW - 2 * H)  # an older row, written later (a history replay)
    out = feast_store.get_online_features(
        features=["pair:z", "pair:computed_at"],
        entity_rows={"user_id": [6], "item_id": [60], "request_ts": NOW},
    ).to_dict()
    assert out["z"] == [_z(2).tolist()] and out["computed_at"] == [NOW - 2 * H]


def test_feast_write_to_online_store_and_the_bulk_path_store_the_same_record(
    feast_store, redis_client, solaris_cfg
) -> None:
    frame = pd.DataFrame(
        {
            "user_id": [7, 8],
            "item_id": [70, 70],
            "z": [_z(1), _z(2)],
            "fm_version": [FM_VERSION] * 2,
            "computed_at": [NOW - 60] * 2,
            "event_ts": pd.to_datetime([NOW - 60] * 2, unit="s", utc=True),
        }
    )
    feast_store.write_to_online_store("pair", frame.iloc[:1])  # Feast's generic producer path
    online_store_of(feast_store).write_table(
        feast_store.config, feast_store.get_feature_view("pair"), frame.iloc[1:]
    )
    prefix = keys.view_key(solaris_cfg.namespace, PAIR)
    a = redis_client.hget(keys.partition_key(prefix, PAIR, 7), keys.member_field(70))
    b = redis_client.hget(keys.partition_key(prefix, PAIR, 8), keys.member_field(70))
    assert len(a) == len(b) and a[8 : 8 + 2 * Z_DIM] != b[8 : 8 + 2 * Z_DIM]
    assert a[:8] == b[:8]  # the same event time, then the codes


def test_write_commands_are_what_write_table_sends(feast_store, redis_client, solaris_cfg):
    """``write_commands`` gives the write path's bytes without sending them: sent raw, they
    leave the keys exactly as ``write_table`` does (records, prune marker, expiry); a view
    written with SET and bad rows are refused, and nothing is written by asking."""
    from solaris.store.contract import InvalidWriteError

    users, items = np.repeat([21, 22, 23], 4), np.tile([5, 6, 7, 8], 3)
    frame = pd.DataFrame(
        {
            "user_id": users,
            "item_id": items,
            "z": [_z(k) for k in range(12)],
            "fm_version": [FM_VERSION] * 12,
            "event_ts": pd.to_datetime(NOW - 60 - np.arange(12), unit="s", utc=True),
        }
    )
    online = online_store_of(feast_store)
    view = feast_store.get_feature_view("pair")
    prefix = keys.view_key(solaris_cfg.namespace, PAIR)
    names = [keys.partition_key(prefix, PAIR, u) for u in (21, 22, 23)]

    def state() -> list:
        return [
            (redis_client.hgetall(k), redis_client.pttl(k) > 0, redis_client.exists(k))
            for k in names
        ]

    redis_client.delete(*names)
    transactions = online.write_commands(feast_store.config, view, frame)
    assert state() == [({}, False, 0)] * 3  # asking wrote nothing
    assert len(transactions) == 3 and all(
        t[0].startswith(b"*1\r\n$5\r\nMULTI") for t in transactions
    )
    conn = redis_client.connection_pool.get_connection()
    try:
        conn.send_packed_command([c for t in transactions for c in t], check_health=False)
        for _ in range(sum(map(len, transactions))):
            conn.read_response()
    finally:
        redis_client.connection_pool.release(conn)
    sent_raw = state()
    redis_client.delete(*names)
    online.write_table(feast_store.config, view, frame)
    assert state() == sent_raw and all(exists and ttl for _h, ttl, exists in sent_raw)
    with pytest.raises(InvalidWriteError, match=r"uagg.*SET"):
        online.write_commands(feast_store.config, feast_store.get_feature_view("uagg"), frame)
    with pytest.raises(InvalidWriteError, match="z"):
        online.write_commands(feast_store.config, view, frame.assign(z=[_z(0)[:3]] * 12))
    redis_client.delete(*names)


def test_feast_generic_read_path_applies_the_same_freshness(feast_store, rows) -> None:
    now = int(time.time())
    rows.pair(9, 90, _z(1), now - 60)
    rows.pair(9, 91, _z(2), now - 7 * H)
    # Version metadata sends Feast through its generic per-view path (online_read).
    response = feast_store.get_online_features(
        features=["pair:z"],
        entity_rows=[{"user_id": 9, "item_id": 90}, {"user_id": 9, "item_id": 91}],
        include_feature_view_version_metadata=True,
    )
    assert _statuses(response)["z"] == [FieldStatus.PRESENT, FieldStatus.NOT_FOUND]
    assert response.to_dict()["z"][0] == pytest.approx(_z(1).tolist())


def test_feast_materialize_loads_the_offline_rows_into_the_store(
    feast_store, solaris_cfg, redis_client
) -> None:
    now = int(time.time())
    rows = pd.DataFrame(
        {
            "user_id": [11, 12],
            "item_id": [110, 120],
            "z": [_z(1), _z(2)],
            "fm_version": [FM_VERSION] * 2,
            "event_ts": pd.to_datetime([now - 120, now - 60], unit="s", utc=True),
        }
    )
    materialize(feast_store, "pair", rows, batch_id="m1")  # offline and online
    prefix = keys.view_key(solaris_cfg.namespace, PAIR)
    redis_client.delete(*(keys.partition_key(prefix, PAIR, u) for u in (11, 12)))
    feast_store.materialize(
        start_date=datetime.fromtimestamp(now - H, UTC),
        end_date=datetime.fromtimestamp(now, UTC),
        feature_views=["pair"],
    )
    out = feast_store.get_online_features(
        features=["pair:z"], entity_rows={"user_id": [11, 12], "item_id": [110, 120]}
    ).to_dict()
    assert out["z"] == [_z(1).tolist(), _z(2).tolist()]


def test_teardown_deletes_every_key_of_the_project(
    solaris_cfg, redis_connection, redis_client, rows, feast_store
) -> None:
    rows.pair(13, 130, _z(1), NOW)
    rows.uagg(13, _z(1), 1, window_start=NOW - H, computed_at=NOW)
    rows.iagg(130, _z(1), 1, NOW)
    pattern = keys.project_pattern(solaris_cfg.namespace)
    assert len(list(redis_client.scan_iter(match=pattern))) == 3
    feast_store.teardown()
    assert list(redis_client.scan_iter(match=pattern)) == []


def test_apply_refuses_a_view_that_is_not_a_solaris_view(feast_store) -> None:
    from feast import Field, FileSource
    from feast.types import Int64

    stray = FeatureView(
        name="stray",
        entities=[feast_store.get_entity("user")],
        schema=[Field(name="x", dtype=Int64)],
        source=FileSource(path="data/offline/stray", timestamp_field="event_ts"),
    )
    with pytest.raises(ViewDefinitionError, match="unknown view 'stray'"):
        feast_store.apply([stray])


# --------------------------------------------------------------------------------------------
# Memory: key expiry and pruning on write
# --------------------------------------------------------------------------------------------


@pytest.fixture
def short_lived(solaris_cfg: SolarisConfig, redis_connection, redis_client):
    """A store whose pair read TTL and retention are 4 s (the uagg window and TTL 1 s), so
    a hash is pruned at most every second of event time."""
    short = {"uagg_window_hours": 1 / 3600, "uagg_ttl_hours": 1 / 3600}
    cfg = solaris_cfg.model_copy(
        update={
            "selection": solaris_cfg.selection.model_copy(update={"ttl_hours": 4 / 3600}),
            "store": solaris_cfg.store.model_copy(update=short),
        }
    )
    store = open_feature_store(cfg, redis_connection)
    apply_definitions(store, cfg)
    yield store, cfg
    store.teardown()


def _write_pair(store, user: int, item: int, event_s: int) -> None:
    frame = pd.DataFrame(
        {
            "user_id": [user],
            "item_id": [item],
            "z": [_z(1)],
            "fm_version": [FM_VERSION],
            "event_ts": pd.to_datetime([event_s], unit="s", utc=True),
        }
    )
    online_store_of(store).write_table(store.config, store.get_feature_view("pair"), frame)


def test_a_key_expires_within_its_retention_after_its_last_write(short_lived, redis_client):
    store, cfg = short_lived
    key = keys.partition_key(keys.view_key(cfg.namespace, PAIR), PAIR, 20)
    _write_pair(store, 20, 200, NOW)
    assert 0 < redis_client.pttl(key) <= 4_000  # the retention, in wall-clock time
    time.sleep(1.0)
    _write_pair(store, 20, 201, NOW + 1)  # a write renews it
    assert 3_000 < redis_client.pttl(key) <= 4_000
    deadline = time.monotonic() + 4.5
    while redis_client.exists(key) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not redis_client.exists(key)


def test_a_write_prunes_rows_older_than_the_retention_before_its_newest(
    short_lived, redis_client
) -> None:
    store, cfg = short_lived
    key = keys.partition_key(keys.view_key(cfg.namespace, PAIR), PAIR, 21)
    _write_pair(store, 21, 210, NOW)
    _write_pair(store, 21, 211, NOW + 1)  # inside the retention: both kept
    assert redis_client.hexists(key, keys.member_field(210))
    assert redis_client.hexists(key, keys.member_field(211))
    # Event time moves 5 s (retention 4 s + a prune interval of 1 s) past item 210.
    _write_pair(store, 21, 212, NOW + 5)
    assert not redis_client.hexists(key, keys.member_field(210))
    assert redis_client.hexists(key, keys.member_field(211))
    assert redis_client.hexists(key, keys.member_field(212))


def test_hash_size_stays_bounded_under_a_long_stream_of_writes(short_lived, redis_client):
    store, cfg = short_lived
    key = keys.partition_key(keys.view_key(cfg.namespace, PAIR), PAIR, 22)
    for k in range(40):  # one new item a second of event time: 40 s of history
        _write_pair(store, 22, 1000 + k, NOW + k)
    # Rows within the retention (4 s) + a prune interval (1 s) of the newest, + the marker.
    assert redis_client.hlen(key) <= 6 + 1


def test_a_row_from_the_future_does_not_stop_pruning_its_hash(short_lived, redis_client):
    store, cfg = short_lived
    key = keys.partition_key(keys.view_key(cfg.namespace, PAIR), PAIR, 23)
    _write_pair(store, 23, 2300, NOW + 30 * 86_400)  # a marker 30 days ahead
    for k in range(40):  # then 40 s of history, 1 s apart
        _write_pair(store, 23, 3000 + k, NOW + k)
    # The future row stays (it is the newest), the history is pruned to the retention.
    assert redis_client.hexists(key, keys.member_field(2300))
    assert redis_client.hlen(key) <= 1 + 6 + 1


# --------------------------------------------------------------------------------------------
# Concurrency
# --------------------------------------------------------------------------------------------


def test_sixteen_threads_on_a_healthy_redis_all_get_real_features(
    solaris_cfg, redis_connection, rows
) -> None:
    items = list(range(300, 600))
    for item in items[:3]:
        rows.pair(30, item, _z(item), NOW - 60)
    rows.uagg(30, _z(1), 5, window_start=NOW - 24 * H, computed_at=NOW - 60)
    features = SolarisFeatures(solaris_cfg, redis=redis_connection, fm_version=FM_VERSION)
    features.warm_up()
    errors: list[BaseException] = []
    full = []
    stop = time.monotonic() + 3.0

    def caller() -> None:
        try:
            while time.monotonic() < stop:
                out = features.fetch(30, items, now=NOW)
                full.append(bool(out.mask[:, 2].all() and out.mask[:3, 0].all()))
        except BaseException as exc:  # any exception fails the test
            errors.append(exc)

    threads = [threading.Thread(target=caller) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    features.close()
    assert errors == []
    assert len(full) > 16 and all(full)
    s = features.stats
    assert s.failures == 0 and s.shed_busy == 0 and s.shed_open == 0


def test_a_write_after_the_server_lost_its_scripts_loads_them_again(
    feast_store, rows, redis_client
) -> None:
    rows.pair(40, 400, _z(1), NOW - 60)
    redis_client.script_flush()  # as after a restart or a failover
    rows.pair(40, 401, _z(2), NOW - 30)
    out = feast_store.get_online_features(
        features=["pair:z"],
        entity_rows={"user_id": [40, 40], "item_id": [400, 401], "request_ts": NOW},
    ).to_dict()
    assert out["z"] == [_z(1).tolist(), _z(2).tolist()]


def test_a_fractional_request_time_is_judged_alike_by_the_store_and_the_client(
    feast_store, rows, solaris_cfg, redis_connection
) -> None:
    rows.pair(41, 410, _z(1), NOW - 6 * H)  # exactly at the read TTL for a request at NOW
    now = NOW + 0.7
    status = _statuses(
        feast_store.get_online_features(
            features=["pair:z"], entity_rows={"user_id": [41], "item_id": [410], "request_ts": now}
        )
    )["z"]
    features = SolarisFeatures(
        solaris_cfg, redis=redis_connection, fm_version=FM_VERSION, store=feast_store
    )
    try:
        served = features.fetch(41, [410], now=now)
    finally:
        features.close()
    assert status == [FieldStatus.OUTSIDE_MAX_AGE] and served.tier.tolist() == ["none"]


def test_the_generic_read_path_honours_one_request_time_per_call(feast_store, rows) -> None:
    rows.pair(42, 420, _z(1), NOW - 60)
    # Version metadata sends Feast through its generic per-view path (online_read).
    kwargs = dict(features=["pair:z"], include_feature_view_version_metadata=True)
    at_now = feast_store.get_online_features(
        entity_rows={"user_id": [42], "item_id": [420], "request_ts": NOW}, **kwargs
    )
    assert _statuses(at_now)["z"] == [FieldStatus.PRESENT]
    before = feast_store.get_online_features(
        entity_rows={"user_id": [42], "item_id": [420], "request_ts": [NOW - 120]}, **kwargs
    )
    assert _statuses(before)["z"] == [FieldStatus.NOT_FOUND]
    with pytest.raises(ValueError, match="one request time per call"):
        feast_store.get_online_features(
            entity_rows={"user_id": [42, 42], "item_id": [420, 1], "request_ts": [NOW, NOW + 1]},
            **kwargs,
        )


def test_a_write_of_a_fraction_of_a_second_is_refused(feast_store, redis_client, solaris_cfg):
    from solaris.store.contract import InvalidWriteError

    frame = pd.DataFrame(
        {
            "user_id": [43],
            "item_id": [430],
            "z": [_z(1)],
            "fm_version": [FM_VERSION],
            "event_ts": [pd.Timestamp(NOW, unit="s", tz="UTC") + pd.Timedelta("500ms")],
        }
    )
    with pytest.raises(InvalidWriteError, match="whole second"):
        online_store_of(feast_store).write_table(
            feast_store.config, feast_store.get_feature_view("pair"), frame
        )
    assert list(redis_client.scan_iter(match=keys.project_pattern(solaris_cfg.namespace))) == []


def test_feasts_generic_read_answers_a_wrong_type_key_as_not_found_for_its_own_rows_only(
    feast_store, rows, redis_client, solaris_cfg
) -> None:
    """``get_online_features`` (what ``feast serve`` calls) over two users, one of whose
    ``uagg`` key is a hash and ``pair`` key a list: that user's two views are NOT_FOUND, the
    other user's rows are served, and nothing raises."""
    from solaris.store.contract import UAGG

    rows.pair(60, 600, _z(1), NOW - 60)
    rows.pair(61, 610, _z(2), NOW - 60)
    rows.uagg(61, _z(3), 1, window_start=NOW - 24 * H, computed_at=NOW - 60)
    ns = solaris_cfg.namespace
    bad_pair = keys.partition_key(keys.view_key(ns, PAIR), PAIR, 60)
    bad_uagg = keys.partition_key(keys.view_key(ns, UAGG), UAGG, 60)
    redis_client.delete(bad_pair)
    redis_client.rpush(bad_pair, "not a hash")
    redis_client.hset(bad_uagg, "not", "a record")
    try:
        response = feast_store.get_online_features(
            features=["pair:z", "uagg:count"],
            entity_rows={"user_id": [60, 61], "item_id": [600, 610], "request_ts": NOW},
            full_feature_names=True,
        )
        statuses = _statuses(response)
        assert statuses["pair__z"] == [FieldStatus.NOT_FOUND, FieldStatus.PRESENT]
        assert statuses["uagg__count"] == [FieldStatus.NOT_FOUND, FieldStatus.PRESENT]
        served = response.to_dict()
        assert served["pair__z"] == [None, _z(2).tolist()]
        assert served["uagg__count"] == [None, 1]
    finally:
        redis_client.delete(bad_pair, bad_uagg)
