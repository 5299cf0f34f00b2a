"""Serving metrics on the real Redis and FeatureStore: what a scrape shows after real fetches
(and failures), the windows published to ``<namespace>:serving_metrics``, and the candidates
run record that reads them."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from solaris.config import SolarisConfig
from solaris.connection import RedisTarget
from solaris.namespace import Namespace
from solaris.orchestration.layout import Interval
from solaris.serving.client import SolarisFeatures
from solaris.serving.metrics import WINDOW_FIGURES, read_window

pytestmark = pytest.mark.integration

# The same values as tests/integration/conftest.py (conftest modules are not importable).
Z_DIM = 8
FM_VERSION = "fm-test-1"
NOW = 1_700_000_000
H = 3600


def _z(seed: float) -> np.ndarray:
    return (np.arange(Z_DIM, dtype=np.float32) + seed) * 0.5


def _with_store(cfg: SolarisConfig, **changes) -> SolarisConfig:
    return cfg.model_copy(update={"store": cfg.store.model_copy(update=changes)})


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(text: str, name: str, namespace: str, **labels: str) -> float:
    key = tuple(sorted({"namespace": namespace, **labels}.items()))
    return _samples(text)[(name, key)]


@pytest.fixture
def client(solaris_cfg, redis_connection, feast_store) -> Iterator[SolarisFeatures]:
    """A client on the test store that publishes only when told (deterministic windows);
    its breaker opens after one failure."""
    cfg = _with_store(solaris_cfg, fetch_timeout_ms=5_000, breaker_failures=1)
    features = SolarisFeatures(
        cfg,
        redis=redis_connection,
        fm_version=FM_VERSION,
        store=feast_store,
        metrics_publish_s=None,
    )
    yield features
    features.close()


def test_a_scrape_shows_the_fetches_tiers_failures_and_latency(client, rows, solaris_cfg):
    rows.pair(1, 10, _z(1), NOW - 60)
    rows.nbr(1, 11, _z(2), _z(3), NOW - 60)
    rows.iagg(13, _z(5), 2, NOW - 60)
    out = client.fetch(1, [10, 11, 13, 14], now=NOW)
    assert out.tier.tolist() == ["pair", "nbr", "iagg", "none"]
    client.breaker.record(False)  # as after a failed fetch: the next one is shed at once
    assert not client.fetch(1, [10, 11], now=NOW).mask.any()
    assert client.flush()  # the miss of item 11, 13, 14 is written

    text = client.metrics.exposition()
    ns = solaris_cfg.namespace
    assert _value(text, "solaris_serving_requests_total", ns) == 2
    assert _value(text, "solaris_serving_entities_total", ns) == 6
    assert _value(text, "solaris_serving_failures_total", ns, reason="shed_open") == 1
    assert _value(text, "solaris_serving_failures_total", ns, reason="connection") == 0
    for tier, hits in (("pair", 1), ("nbr", 1), ("uagg", 0), ("iagg", 1)):
        assert _value(text, "solaris_serving_tier_hits_total", ns, tier=tier) == hits
    assert _value(text, "solaris_serving_zero_filled_total", ns) == 1 + 2
    assert _value(text, "solaris_serving_fetch_seconds_count", ns) == 1  # the shed one: none
    assert 0 < _value(text, "solaris_serving_fetch_seconds_sum", ns) < 5
    assert _value(text, "solaris_serving_breaker_open", ns) == 1
    written = {"stream": "misses", "outcome": "written"}
    assert _value(text, "solaris_serving_stream_writes_total", ns, **written) == 1
    assert _value(text, "solaris_serving_miss_backlog", ns) == 0


def test_the_scrape_endpoint_serves_the_same_text_on_loopback(client, rows, solaris_cfg):
    rows.pair(1, 10, _z(1), NOW - 60)
    client.fetch(1, [10], now=NOW)
    server = client.metrics.serve(0)  # any free port
    try:
        assert server.server_address[0] == "127.0.0.1"
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    ns = solaris_cfg.namespace
    assert _value(text, "solaris_serving_requests_total", ns) == 1
    assert _value(text, "solaris_serving_tier_hits_total", ns, tier="pair") == 1


def test_a_closed_port_is_counted_as_connection_failures_and_zero_filled(
    solaris_cfg, feast_store
) -> None:
    cfg = _with_store(solaris_cfg, breaker_failures=100)  # every fetch really tries
    features = SolarisFeatures(cfg, redis="127.0.0.1:1", fm_version=FM_VERSION)
    try:
        features.warm_up()  # the registry of the test project; its read fails, uncounted
        for _ in range(2):
            assert not features.fetch(1, list(range(5)), now=NOW).mask.any()
        text = features.metrics.exposition()
        ns = solaris_cfg.namespace
        assert _value(text, "solaris_serving_failures_total", ns, reason="connection") == 2
        assert _value(text, "solaris_serving_failures_total", ns, reason="timeout") == 0
        assert _value(text, "solaris_serving_zero_filled_total", ns) == 10
        assert _value(text, "solaris_serving_fetch_seconds_count", ns) == 2
        s = features.stats
        assert (s.requests, s.failures, s.connection_errors) == (2, 2, 2)
        assert not features.metrics.publish()  # Redis is not there: kept for the next window
    finally:
        features.close()


def _interval_around(began: float) -> Interval:
    """The whole seconds from ``began`` to just after now: stream ids are wall-clock ms."""
    return Interval(int(began), int(time.time()) + 1)


def test_published_windows_are_read_back_merged_for_an_interval(
    client, rows, solaris_cfg, redis_connection, feast_store, redis_client
) -> None:
    namespace = Namespace.of(solaris_cfg)
    began = time.time()
    rows.pair(1, 10, _z(1), NOW - 60)
    client.fetch(1, [10], now=NOW)
    client.fetch(1, [10, 11], now=NOW)
    assert client.flush()  # item 11's miss is written before the window: no backlog in it
    assert client.metrics.publish()
    # A second serving process of the namespace publishes its own window.
    other = SolarisFeatures(
        solaris_cfg,
        redis=redis_connection,
        fm_version=FM_VERSION,
        store=feast_store,
        metrics_publish_s=None,
    )
    other.fetch(1, [10], now=NOW)
    other.close()  # publishes its last window
    client.breaker.record(False)
    client.fetch(1, [10], now=NOW)  # shed: a failure, in the client's next window
    assert client.metrics.publish()
    assert client.metrics.publish()  # nothing new: no entry
    assert redis_client.xlen(namespace.serving_metrics_stream) == 3

    interval = _interval_around(began)
    figures = read_window(redis_connection, namespace, interval.start, interval.end)
    assert figures is not None and tuple(figures) == WINDOW_FIGURES
    assert (figures["requests"], figures["failures"]) == (4, 1)
    assert 0 < figures["fetch_p50_ms"] <= figures["fetch_p99_ms"] < 5_000
    assert (figures["miss_backlog"], figures["request_log_backlog"]) == (0, 0)
    # The same through an open client; an interval before any window has none.
    assert read_window(redis_client, namespace, interval.start, interval.end) == figures
    assert read_window(redis_client, namespace, interval.start - 60, interval.start) is None


def test_the_publisher_thread_appends_windows_on_its_own(
    solaris_cfg, redis_connection, feast_store, redis_client, rows
) -> None:
    stream = Namespace.of(solaris_cfg).serving_metrics_stream
    rows.pair(1, 10, _z(1), NOW - 60)
    features = SolarisFeatures(
        solaris_cfg,
        redis=redis_connection,
        fm_version=FM_VERSION,
        store=feast_store,
        metrics_publish_s=0.05,
    )
    try:
        features.fetch(1, [10], now=NOW)
        deadline = time.monotonic() + 5
        while redis_client.xlen(stream) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        [(_, fields)] = redis_client.xrange(stream)
        assert fields[b"requests"] == b"1" and fields[b"tier_pair"] == b"1"
        time.sleep(0.2)  # idle windows are not published
        assert redis_client.xlen(stream) == 1
    finally:
        features.close()


def test_invalid_interval_bounds_are_refused_before_reading(solaris_cfg, redis_client) -> None:
    namespace = Namespace.of(solaris_cfg)
    for start, end, match in ((10, 10, "after its start"), (1.5, 10, "start"), (0, -1, "end")):
        with pytest.raises(ValueError, match=match):
            read_window(redis_client, namespace, start, end)


def test_the_candidates_run_record_carries_serving_figures_of_its_interval(
    solaris_cfg, redis_connection, feast_store, rows, tmp_path, redis_client
) -> None:
    from solaris.orchestration.candidates import DAG_ID, select_interval
    from solaris.orchestration.layout import CycleLayout
    from solaris.pipeline.codes import CODES_MANIFEST

    cfg = solaris_cfg.model_copy(
        update={
            "artifacts_dir": tmp_path / "artifacts",
            "store": solaris_cfg.store.model_copy(
                update={"redis": RedisTarget.parse(redis_connection)}
            ),
        }
    )
    models = tmp_path / "artifacts" / "models"
    models.mkdir(parents=True)
    manifest = {"fm_version": FM_VERSION, "fm": "test", "z_dim": Z_DIM, "shared_dim": 16}
    (models / CODES_MANIFEST).write_text(json.dumps(manifest))
    began = time.time()
    rows.pair(1, 10, _z(1), NOW - 60)
    with SolarisFeatures(
        cfg, redis=redis_connection, fm_version=FM_VERSION, store=feast_store
    ) as serving:
        for request_id in range(3):
            serving.fetch(1, [10, 11], now=int(began))
            serving.log_request(request_id, 1, [10, 11], [0.9, 0.1], now=int(began))
        assert serving.flush()
    # close() published the last window; the run of the interval around it reads it.
    interval = _interval_around(began)
    record = select_interval(cfg, interval)
    assert record["requests"] == 3  # drained from the request log
    serving_figures = record["serving"]
    assert (serving_figures["requests"], serving_figures["failures"]) == (3, 0)
    assert serving_figures["fetch_p50_ms"] > 0
    stored = json.loads(CycleLayout(Namespace.of(cfg)).run_record(DAG_ID, interval.key).read_text())
    assert stored["serving"] == serving_figures
