"""The request log on a real Redis: append, read (nothing deleted), delete, the MAXLEN bound,
bad entries, and ``SolarisFeatures.log_request`` writing through its background writer.

Every test works in Redis database 13 under keys of its own prefix (``t_<uuid8>``, also the
config's namespace), deleted afterwards.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest
import redis as redis_py

from solaris.config import SolarisConfig, StoreConfig
from solaris.connection import redis_client as make_redis_client
from solaris.namespace import Namespace
from solaris.serving.client import SolarisFeatures
from solaris.serving.request_log import append_request, delete_entries, read_request_log

pytestmark = pytest.mark.integration

REDIS = os.environ.get("SOLARIS_TEST_REDIS_REQUESTS", "127.0.0.1:6379,db=13")
DEAD_REDIS = "127.0.0.1:1"  # nothing listens there: connections are refused at once


@pytest.fixture
def prefix() -> str:
    """A key prefix (and namespace) unique to this test."""
    return f"t_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(prefix: str) -> Iterator[redis_py.Redis]:
    """A client of database 13; fails loudly if Redis is down; deletes the test's keys."""
    conn = make_redis_client(REDIS, timeout_s=2.0)
    try:
        conn.ping()
    except (redis_py.RedisError, OSError) as exc:
        pytest.fail(f"these tests need a real Redis at {REDIS!r}: {exc}", pytrace=False)
    yield conn
    keys = list(conn.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        conn.delete(*keys)
    conn.close()


@pytest.fixture
def stream(prefix: str) -> str:
    return f"{prefix}:requests"


def _expected(rows: list[tuple[int, int, int, int, float]]) -> pd.DataFrame:
    rid, user, item, ts, score = zip(*rows, strict=True)
    return pd.DataFrame(
        {
            "request_id": np.asarray(rid, np.int64),
            "user_id": np.asarray(user, np.int64),
            "item_id": np.asarray(item, np.int64),
            "ts": np.asarray(ts, np.int64),
            "score": np.asarray(score, np.float32),
            "nearline": np.zeros(len(rid), bool),
        }
    )


def test_read_returns_entries_before_the_bound_and_delete_removes_exactly_them(
    client, stream
) -> None:
    append_request(client, stream, 100, 11, 1, [10, 11], [0.5, -0.25], 100)
    append_request(client, stream, 100, 12, 2, [20], np.float64([0.1]), 200)
    append_request(client, stream, 100, 13, 3, [30, 31, 32], [1.0, 2.0, 3.0], 300)

    batch = read_request_log(client, stream, before=250)
    expected = _expected(
        [(11, 1, 10, 100, 0.5), (11, 1, 11, 100, -0.25), (12, 2, 20, 200, np.float32(0.1))]
    )
    pd.testing.assert_frame_equal(batch.rows, expected)
    assert batch.rows["score"].dtype == np.float32
    assert batch.rows["score"].iloc[2] == np.float32(0.1)
    assert batch.later == 1
    assert batch.skipped == []
    assert len(batch.ids) == 2
    assert client.xlen(stream) == 3  # a read deletes nothing

    again = read_request_log(client, stream, before=250)  # a retried run sees the same
    pd.testing.assert_frame_equal(again.rows, batch.rows)
    assert again.ids == batch.ids

    assert delete_entries(client, stream, batch.ids) == 2
    assert delete_entries(client, stream, batch.ids) == 0  # already gone
    rest = read_request_log(client, stream, before=10**9)
    pd.testing.assert_frame_equal(
        rest.rows, _expected([(13, 3, 30, 300, 1.0), (13, 3, 31, 300, 2.0), (13, 3, 32, 300, 3.0)])
    )
    assert (rest.later, rest.skipped, len(rest.ids)) == (0, [], 1)
    assert read_request_log(client, stream, before=250).rows.empty


def test_count_limits_the_entries_read_oldest_first(client, stream) -> None:
    for rid in range(5):
        append_request(client, stream, 100, rid, 7, [rid], [float(rid)], 1_000 + rid)
    batch = read_request_log(client, stream, before=1_002, count=3)
    assert batch.rows["request_id"].tolist() == [0, 1]
    assert batch.later == 1
    assert len(batch.ids) == 2


def test_an_absent_stream_reads_empty(client, stream) -> None:
    batch = read_request_log(client, stream, before=100)
    assert batch.rows.empty
    assert list(batch.rows.columns) == [
        "request_id",
        "user_id",
        "item_id",
        "ts",
        "score",
        "nearline",
    ]
    assert (batch.ids, batch.later, batch.skipped) == ([], 0, [])
    assert delete_entries(client, stream, []) == 0


def test_the_stream_is_bounded_by_maxlen_exactly(client, stream) -> None:
    maxlen = 5
    for rid in range(maxlen + 3):
        append_request(client, stream, maxlen, rid, 1, [rid, rid + 100], [0.0, 1.0], 100)
    assert client.xlen(stream) == maxlen
    batch = read_request_log(client, stream, before=101)
    assert batch.rows["request_id"].tolist() == [r for r in range(3, 8) for _ in (0, 1)]


def test_a_malformed_entry_is_skipped_reported_and_returned_for_deletion(
    client, stream, caplog
) -> None:
    append_request(client, stream, 100, 1, 1, [10], [0.5], 100)
    bad = client.xadd(
        stream,
        {"rid": "2", "user": "1", "ts": "100", "items": np.int64([20]).tobytes(), "scores": b"x"},
    )
    no_scores = client.xadd(
        stream, {"rid": "3", "user": "1", "ts": "100", "items": np.int64([30]).tobytes()}
    )
    append_request(client, stream, 100, 4, 1, [40], [0.25], 100)

    with caplog.at_level("WARNING", logger="solaris.serving.request_log"):
        batch = read_request_log(client, stream, before=200)
    assert batch.rows["request_id"].tolist() == [1, 4]
    assert [entry_id for entry_id, _ in batch.skipped] == [bad, no_scores]
    assert "one float32 per item" in batch.skipped[0][1]
    assert batch.skipped[1][1] == "missing fields ['scores']"
    assert bad in batch.ids and no_scores in batch.ids
    assert len(batch.ids) == 4
    assert "skipped 2 unreadable entries" in caplog.text

    assert delete_entries(client, stream, batch.ids) == 4
    assert client.xlen(stream) == 0


def test_log_request_writes_an_entry_readable_by_the_drain(client, prefix) -> None:
    cfg = SolarisConfig(namespace=prefix, store=StoreConfig(request_log_maxlen=3))
    stream = Namespace.of(cfg).request_stream
    features = SolarisFeatures(cfg, redis=REDIS, fm_version="v")
    try:
        items = np.array([5, 6, 7], np.int64)
        scores = np.array([0.9, 0.1, 0.5], np.float32)
        features.log_request(2**62, 42, items, scores, now=1_700_000_000.7)
        items[:] = 0  # the caller reuses its buffers: the entry keeps what was given
        scores[:] = 0
        for rid in range(4):  # and the namespace's MAXLEN holds
            features.log_request(rid, 43, [rid], [1.0], now=1_700_000_100)
        assert features.flush()
        assert features.stats.requests_logged == 5
        assert features.stats.requests_dropped == 0
        assert features._service is None  # the Feast store was never built
    finally:
        features.close()
    assert client.xlen(stream) == 3
    client.delete(stream)

    features = SolarisFeatures(cfg, redis=REDIS, fm_version="v")
    try:
        features.log_request(2**62, 42, [5, 6, 7], [0.9, 0.1, 0.5], now=1_700_000_000.7)
        assert features.flush()
    finally:
        features.close()
    batch = read_request_log(client, stream, before=1_700_000_001)
    pd.testing.assert_frame_equal(
        batch.rows,
        _expected([(2**62, 42, i, 1_700_000_000, s) for i, s in ((5, 0.9), (6, 0.1), (7, 0.5))]),
    )


def test_a_request_logged_on_live_traffic_marks_the_namespace_and_a_replays_does_not(
    client, prefix
) -> None:
    """Serving on live traffic (``replay: false``) leaves ``<ns>:live`` (no expiry), which
    ``live_state`` reads: a reset or a replay into the namespace is then refused without
    ``--force``. A replay's serving leaves none."""
    from solaris.orchestration.resources import LiveNamespaceError, live_state, refuse_live

    settings = SolarisConfig(namespace="live", store=StoreConfig(redis=REDIS))
    replay = SolarisConfig(namespace=prefix, replay=True)
    with SolarisFeatures(replay, redis=REDIS, fm_version="v") as features:
        features.log_request(1, 42, [5], [0.5], now=1_700_000_000)
        assert features.flush()
    assert client.exists(f"{prefix}:live") == 0
    assert live_state(settings, prefix) is None

    live = SolarisConfig(namespace=prefix)
    with SolarisFeatures(live, redis=REDIS, fm_version="v") as features:
        features.log_request(7, 42, [5], [0.5], now=1_700_000_000)
        features.log_request(8, 42, [6], [0.5], now=1_700_000_100)
        assert features.flush()
    assert json.loads(client.get(f"{prefix}:live")) == {
        "first_request_ts": 1_700_000_000,
        "request_id": 7,
    }
    assert client.ttl(f"{prefix}:live") == -1  # never expires
    assert f"Redis key {prefix}:live" in str(live_state(settings, prefix))
    with pytest.raises(LiveNamespaceError, match=f"will not reset namespace '{prefix}'"):
        refuse_live(settings, prefix, "reset")
    refuse_live(settings, prefix, "reset", force=True)  # forced: allowed


def test_live_state_refuses_to_judge_when_redis_cannot_be_asked(prefix) -> None:
    from solaris.orchestration.resources import CycleInputError, live_state

    settings = SolarisConfig(namespace="live", store=StoreConfig(redis=DEAD_REDIS))
    with pytest.raises(CycleInputError, match=rf"did not answer GET {prefix}:live .*Nothing"):
        live_state(settings, prefix)


def test_log_request_against_a_dead_redis_never_raises_and_counts_the_drop(prefix) -> None:
    cfg = SolarisConfig(namespace=prefix)
    features = SolarisFeatures(cfg, redis=DEAD_REDIS, fm_version="v")
    try:
        features.log_request(1, 2, [3, 4], [0.5, 0.5], now=100)
        features.log_request(2, 2, [3], [0.5])
        assert features.flush()
        assert features.stats.requests_dropped == 2
        assert features.stats.requests_logged == 0
        assert features.stats.as_dict()["requests_dropped"] == 2
    finally:
        features.close()
    features.log_request(3, 2, [3], [0.5], now=100)  # after close: dropped, not raised
    assert features.stats.requests_dropped == 3


def test_a_stream_key_of_another_type_is_an_error_naming_it(client, prefix: str) -> None:
    from solaris.serving.misses import drain_misses
    from solaris.serving.streams import StreamError

    key = f"{prefix}:requests"
    client.hset(key, "not", "a stream")
    with pytest.raises(StreamError, match=rf"^{key}: cannot be read as a stream .*WRONGTYPE"):
        read_request_log(client, key, before=10**9)
    with pytest.raises(StreamError, match=rf"^{key}: cannot be read as a stream"):
        drain_misses(client, key)
    assert client.hgetall(key) == {b"not": b"a stream"}  # nothing deleted


def test_an_entry_stamped_centuries_ahead_is_skipped_and_deleted_not_kept_forever(
    client, prefix: str
) -> None:
    key = f"{prefix}:requests"
    append_request(client, key, 1000, 1, 7, [10, 11], [0.5, 0.25], 100)
    client.xadd(key, {"rid": "2", "user": "7", "ts": "9100000000", "items": b"\0" * 8,
                      "scores": b"\0" * 4})  # fmt: skip
    batch = read_request_log(client, key, before=200)
    assert batch.rows["request_id"].tolist() == [1, 1] and batch.later == 0
    assert [why for _, why in batch.skipped] == [
        "ts 9100000000 is more than a day past the wall clock: never drained"
    ]
    delete_entries(client, key, batch.ids)
    assert client.xlen(key) == 0


def test_the_items_serving_selected_near_line_come_back_marked_on_their_rows(
    client, stream
) -> None:
    append_request(client, stream, 100, 21, 1, [10, 11, 12], [0.1, 0.9, 0.5], 100, nearline=[11])
    append_request(client, stream, 100, 22, 1, [11, 13], [0.3, 0.2], 101)

    rows = read_request_log(client, stream, before=200).rows

    assert rows[["request_id", "item_id", "nearline"]].values.tolist() == [
        [21, 10, False],
        [21, 11, True],
        [21, 12, False],
        [22, 11, False],
        [22, 13, False],
    ]


def test_an_entry_whose_near_line_items_outnumber_its_items_is_skipped(client, stream) -> None:
    client.xadd(
        stream,
        {
            "rid": 5,
            "user": 1,
            "ts": 100,
            "items": np.int64([7]).tobytes(),
            "scores": np.float32([0.5]).tobytes(),
            "nl": np.int64([7, 8]).tobytes(),
        },
    )

    batch = read_request_log(client, stream, before=200)

    assert len(batch.rows) == 0 and len(batch.skipped) == 1
    assert "nl must be at most" in batch.skipped[0][1]
