"""The binary endpoint's pure parts: reading a request, writing the Arrow answer, the metric
counts that workers share."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest

from solaris.config import NON_SETTING_ENV, SolarisConfig
from solaris.serving import http
from solaris.serving.client import SolarisFeatures
from solaris.serving.metrics import Snapshot
from solaris.serving.tiers import NONE, TIERS, TierFeatures

D = 4


def _features(mask: list[list[bool]]) -> TierFeatures:
    m = np.asarray(mask, bool)
    n = len(m)
    values = (np.arange(n * len(TIERS) * D, dtype=np.float32) / 8).reshape(n, len(TIERS), D)
    values *= m[:, :, None]
    first = np.where(m.any(1), m.argmax(1), len(TIERS))
    labels = np.array([*TIERS, NONE], object)[first]
    return TierFeatures(values.reshape(n, -1), m, labels)


def test_the_answer_is_one_arrow_batch_with_nulls_where_tiers_are_missing() -> None:
    out = _features([[True, True, True, True], [False, True, False, True], [False] * 4])
    statuses = {t: np.array([1, 2, 3], np.int32) for t in TIERS}
    body = http.encode_response(np.array([7, 8, 9]), out, statuses)
    table = pa.ipc.open_stream(body).read_all()
    assert table.schema == http.response_schema(D)
    assert table["item_id"].to_pylist() == [7, 8, 9]
    assert table["tier"].to_pylist() == ["pair", "nbr", "none"]
    for k, tier in enumerate(TIERS):
        column = table[tier].combine_chunks()
        assert column.is_valid().to_pylist() == out.mask[:, k].tolist()
        present = out.tier_z[out.mask[:, k], k]
        np.testing.assert_array_equal(column.flatten().to_numpy().reshape(-1, D), present)
        assert table[f"{tier}_status"].to_pylist() == [1, 2, 3]
    assert table.schema.field("pair").type.value_type == pa.float16()
    assert table.schema.field("uagg").type.value_type == pa.float32()


def test_a_json_request_and_a_binary_one_read_the_same() -> None:
    ids = [3, 1, 2**62]
    as_json = json.dumps({"user_id": 5, "item_ids": ids, "now": 1.5}).encode()
    assert http.decode_request(b"", "application/json", as_json) == (5, ids, 1.5)
    user, items, now = http.decode_request(
        b"user_id=5&now=1700000000", "application/octet-stream", np.array(ids, "<i8").tobytes()
    )
    assert (user, items.tolist(), now) == (5, ids, 1_700_000_000)
    assert http.decode_request(b"user_id=5", "application/octet-stream", b"")[2] is None


@pytest.mark.parametrize(
    ("query", "content_type", "body", "says"),
    [
        (b"", "application/json", b"[1, 2]", "must be"),
        (b"", "application/json", b'{"user_id": 1, "item_ids": 3}', "list of integers"),
        (b"", "application/json", b"\xff", "not JSON"),
        (b"user_id=x", "application/octet-stream", b"", "user_id must be a number"),
        (b"user_id=1&now=soon", "application/octet-stream", b"", "now must be a number"),
        (b"", "application/xml", b"<a/>", "Content-Type 'application/xml'"),
    ],
)
def test_requests_that_cannot_be_read_name_what_is_wrong(query, content_type, body, says) -> None:
    with pytest.raises(http.RequestError, match=says):
        http.decode_request(query, content_type, body)


def test_media_types_match_exactly_whatever_their_case_and_parameters() -> None:
    body = json.dumps({"user_id": 5, "item_ids": [1]}).encode()
    for accepted in ("APPLICATION/JSON", "application/json; charset=utf-8", ""):
        assert http.decode_request(b"", accepted, body) == (5, [1], None)
    ids = np.array([1, 2, 3, 4], "<i8").tobytes()
    with pytest.raises(http.UnsupportedMediaType, match="octet-streamz"):
        http.decode_request(b"user_id=5", "application/octet-streamz", ids)
    with pytest.raises(http.UnsupportedMediaType):
        http.decode_request(b"", "application/jsonx", body)
    assert http.decode_request(b"user_id=5", "Application/Octet-Stream", ids)[1].tolist() == [
        1,
        2,
        3,
        4,
    ]


def test_a_deeply_nested_or_a_repeated_key_body_is_a_clear_400() -> None:
    nested = b'{"user_id": 1, "item_ids": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(http.RequestError, match="nests too deep") as caught:
        http.decode_request(b"", "application/json", nested)
    assert caught.value.status == 400
    twice = b'{"user_id": 1, "user_id": 2, "item_ids": [1]}'
    with pytest.raises(http.RequestError, match=r"repeats the keys \['user_id'\]"):
        http.decode_request(b"", "application/json", twice)


def _call(app: http.FeatureApp, path: str, headers: list) -> tuple[int, dict]:
    """One request through the ASGI application (no server): its status and headers."""
    import asyncio

    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "path": path, "method": "GET", "headers": headers}
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], dict(sent[0]["headers"])


class _Metrics:
    class metrics:  # the attribute FeatureApp reads
        @staticmethod
        def exposition() -> str:
            return "solaris_serving_requests_total 0\n"


def test_a_token_guards_features_and_metrics_but_not_the_health_check() -> None:
    app = http.FeatureApp(_Metrics(), token_sha256=http.token_digest("s3cret"))  # type: ignore[arg-type]
    assert _call(app, "/metrics", [])[0] == 401
    assert _call(app, "/metrics", [(b"authorization", b"Bearer wrong")])[0] == 401
    status, headers = _call(app, "/metrics", [(b"authorization", b"Basic s3cret")])
    assert status == 401 and headers[b"www-authenticate"] == b"Bearer"
    assert _call(app, "/metrics", [(b"authorization", b"Bearer s3cret")])[0] == 200
    assert _call(app, "/healthz", [])[0] == 200
    assert _call(http.FeatureApp(_Metrics()), "/metrics", [])[0] == 200  # type: ignore[arg-type]


def test_loopback_hosts_are_told_from_the_others() -> None:
    assert all(map(http.is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "localhost"]))
    assert not any(map(http.is_loopback, ["0.0.0.0", "::", "10.0.0.5", "example.org"]))


def test_worker_counts_survive_their_file() -> None:
    snap = Snapshot(
        requests=3,
        failures=1,
        entities=600,
        failures_by_reason={"timeout": 1},
        tier_hits={"pair": 500, NONE: 100},
        latency=(1, 2, *([0] * (len(Snapshot().latency) - 2))),
        latency_sum=0.004,
        stream_writes={("misses", "written"): 2},
        miss_backlog=1,
    )
    assert http._snapshot_of(http._snapshot_json(snap)) == snap


def test_the_workers_settings_variable_is_not_read_as_a_setting(monkeypatch) -> None:
    assert http._SETTINGS_ENV in NON_SETTING_ENV
    settings = http.ServeSettings('{"namespace": "x"}', "127.0.0.1:6379", "fm-1", None)
    monkeypatch.setenv(http._SETTINGS_ENV, settings.to_env())
    assert http.ServeSettings.from_env() == settings
    monkeypatch.delenv(http._SETTINGS_ENV)
    with pytest.raises(Exception, match="solaris serve"):
        http.ServeSettings.from_env()


# -- logging a served request (POST /v1/requests) ---------------------------------------------


def _logged_binary(items: list[int], scores: list[float]) -> bytes:
    return np.asarray(items, "<i8").tobytes() + np.asarray(scores, "<f4").tobytes()


def test_a_request_to_log_reads_the_same_in_json_and_in_binary() -> None:
    ids, scores = [3, 1, 2**62], [0.5, -1.25, 3.0]
    doc = {"request_id": 9, "user_id": 5, "item_ids": ids, "scores": scores, "now": 1.5}
    as_json = json.dumps(doc).encode()
    assert http.decode_logged_request(b"", "application/json", as_json) == (
        9,
        5,
        ids,
        scores,
        1.5,
    )
    rid, user, items, values, now = http.decode_logged_request(
        b"request_id=9&user_id=5&now=1700000000",
        "application/octet-stream",
        _logged_binary(ids, scores),
    )
    assert (rid, user, items.tolist(), values.tolist(), now) == (9, 5, ids, scores, 1_700_000_000)
    assert items.dtype == np.int64 and values.dtype == np.float32
    del doc["now"]
    assert http.decode_logged_request(b"", "", json.dumps(doc).encode())[4] is None
    empty = http.decode_logged_request(b"request_id=1&user_id=2", "application/octet-stream", b"")
    assert empty[2].size == 0 and empty[3].size == 0 and empty[4] is None


@pytest.mark.parametrize(
    ("query", "content_type", "body", "says"),
    [
        (b"", "application/json", b"[1, 2]", "the body must be"),
        (b"", "application/json", b'{"request_id": 1, "user_id": 1, "item_ids": [1]}', "scores"),
        (b"", "application/json", b'{"user_id": 1, "item_ids": [], "scores": []}', "request_id"),
        (
            b"",
            "application/json",
            b'{"request_id": 1, "user_id": 1, "item_ids": [1], "scores": [1], "ts": 3}',
            r"unknown fields \['ts'\]",
        ),
        (
            b"",
            "application/json",
            b'{"request_id": 1, "user_id": 1, "item_ids": 1, "scores": [1]}',
            "item_ids must be a list",
        ),
        (
            b"",
            "application/json",
            b'{"request_id": 1, "user_id": 1, "item_ids": [1], "scores": 0.5}',
            "scores must be a list",
        ),
        (b"", "application/json", b"\xff", "not JSON"),
        (
            b"",
            "application/json",
            b'{"request_id": 1, "request_id": 2, "user_id": 1, "item_ids": [], "scores": []}',
            r"repeats the keys \['request_id'\]",
        ),
        (b"user_id=1", "application/octet-stream", b"", "request_id missing"),
        (b"request_id=1", "application/octet-stream", b"", "user_id missing"),
        (b"request_id=1&user_id=1", "application/octet-stream", b"\x00" * 8, "multiple of 12"),
        (b"request_id=x&user_id=1", "application/octet-stream", b"", "request_id must be a number"),
        (b"request_id=1&user_id=1&now=z", "application/octet-stream", b"", "now must be"),
        (b"", "text/csv", b"1,2", "Content-Type 'text/csv'"),
    ],
)
def test_requests_to_log_that_cannot_be_read_name_what_is_wrong(
    query: bytes, content_type: str, body: bytes, says: str
) -> None:
    with pytest.raises(http.RequestError, match=says):
        http.decode_logged_request(query, content_type, body)


def test_a_deeply_nested_request_to_log_is_a_clear_400() -> None:
    nested = b'{"request_id": 1, "scores": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(http.RequestError, match="one object of five fields") as caught:
        http.decode_logged_request(b"", "application/json", nested)
    assert caught.value.status == 400
    with pytest.raises(http.UnsupportedMediaType):
        http.decode_logged_request(b"", "application/jsonx", b"{}")


def _post(
    app: http.FeatureApp, path: str, body: bytes, content_type: str, query: bytes = b""
) -> tuple[int, bytes]:
    """One POST through the ASGI application (no server): its status and body."""
    import asyncio

    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    headers = [(b"content-type", content_type.encode())]
    scope = {"type": "http", "path": path, "method": "POST", "headers": headers}
    asyncio.run(app(scope | {"query_string": query}, receive, send))
    return sent[0]["status"], sent[1]["body"]


@pytest.fixture
def unreachable() -> Iterator[SolarisFeatures]:
    """A client whose Redis refuses every connection (port 1): nothing can be written."""
    features = SolarisFeatures(
        SolarisConfig(namespace="t_unit"),
        redis="127.0.0.1:1",
        fm_version="v",
        metrics_publish_s=None,
    )
    yield features
    features.close()


def test_a_logged_request_is_answered_202_at_once_and_a_failed_write_is_counted(
    unreachable: SolarisFeatures,
) -> None:
    app = http.FeatureApp(unreachable)
    doc = {"request_id": 1, "user_id": 5, "item_ids": [7, 8], "scores": [0.5, 0.25]}
    status, body = _post(app, "/v1/requests", json.dumps(doc).encode(), "application/json")
    assert (status, body) == (202, b"")
    binary = _logged_binary([7], [0.5])
    query = b"request_id=2&user_id=5"
    assert _post(app, "/v1/requests", binary, "application/octet-stream", query)[0] == 202
    nan = _logged_binary([7], [float("nan")])
    status, body = _post(app, "/v1/requests", nan, "application/octet-stream", query)
    assert status == 400 and body.startswith(b"scores contain NaN"), body  # not queued
    assert unreachable.flush(timeout_s=10)
    stats = unreachable.stats
    assert (stats.requests_dropped, stats.requests_logged, stats.requests) == (2, 0, 0)
    text = unreachable.metrics.exposition()
    assert 'outcome="dropped",stream="requests"} 2.0' in text, text


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"request_id": -1, "user_id": 5, "item_ids": [7], "scores": [0.5]}, "request_id"),
        ({"request_id": 1, "user_id": -5, "item_ids": [7], "scores": [0.5]}, "user_id"),
        ({"request_id": 1, "user_id": 5, "item_ids": [-7], "scores": [0.5]}, "item_ids"),
        ({"request_id": 1, "user_id": 5, "item_ids": [7, 8], "scores": [0.5]}, "1 scores for 2"),
        ({"request_id": 1, "user_id": 5, "item_ids": [7], "scores": [None]}, "scores"),
        ({"request_id": 1, "user_id": 5, "item_ids": [7], "scores": [1e39]}, "scores"),
        ({"request_id": 1, "user_id": 5, "item_ids": [7], "scores": [0.5], "now": -1}, "now"),
    ],
)
def test_a_bad_value_to_log_is_a_400_naming_it_and_queues_nothing(
    unreachable: SolarisFeatures, doc: dict, says: str
) -> None:
    app = http.FeatureApp(unreachable)
    status, body = _post(app, "/v1/requests", json.dumps(doc).encode(), "application/json")
    assert status == 400 and says in body.decode() and body.count(b"\n") == 1, body
    assert unreachable.flush(timeout_s=10)
    assert (unreachable.stats.requests_dropped, unreachable.stats.requests_logged) == (0, 0)


def test_the_token_guards_the_request_log_and_the_404_names_it() -> None:
    app = http.FeatureApp(_Metrics(), token_sha256=http.token_digest("s3cret"))  # type: ignore[arg-type]
    assert _post(app, "/v1/requests", b"{}", "application/json")[0] == 401
    status, body = _post(http.FeatureApp(_Metrics()), "/v1/other", b"", "")  # type: ignore[arg-type]
    assert status == 404 and b"POST /v1/requests" in body
