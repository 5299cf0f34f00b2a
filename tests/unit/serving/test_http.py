"""The binary endpoint's pure parts: reading a request, writing the Arrow answer, the metric
counts that workers share."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from solaris.config import NON_SETTING_ENV
from solaris.serving import http
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
