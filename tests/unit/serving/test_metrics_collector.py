"""Serving metrics without Redis: the latency quantiles, the merge of published windows, the
per-tier split, and the Prometheus exposition (names, labels, values)."""

from __future__ import annotations

import dataclasses
import logging
import math
import socket
from pathlib import Path

import numpy as np
import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from solaris.serving.client import FetchStats, _failure_kind
from solaris.serving.metrics import (
    FAILURE_REASONS,
    FETCH_BUCKETS_S,
    METRICS,
    STREAM_WRITE_STATS,
    WINDOW_FIGURES,
    ClientState,
    ServingMetrics,
    Snapshot,
    histogram_quantile,
    merge_windows,
)
from solaris.serving.tiers import TIERS

DOCS = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"
INF = math.inf


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of an exposition."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _metrics(stats: dict[str, int] | None = None, **state) -> ServingMetrics:
    return ServingMetrics("live", lambda: ClientState(stats or {}, **state), instance="test-1")


# -- quantiles --------------------------------------------------------------------------------


def test_quantile_interpolates_inside_the_bucket_holding_the_rank() -> None:
    # 10 fetches in (1, 2] ms and 10 in (2, 5] ms: the median is the top of the first bucket,
    # p75 halfway through the second.
    buckets = [(0.001, 0), (0.002, 10), (0.005, 10), (INF, 0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.002)
    assert histogram_quantile(0.75, buckets) == pytest.approx(0.0035)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.0015)


def test_quantile_below_the_first_bound_interpolates_from_zero() -> None:
    assert histogram_quantile(0.5, [(0.001, 4), (INF, 0)]) == pytest.approx(0.0005)


def test_quantile_in_the_inf_bucket_is_the_largest_finite_bound() -> None:
    assert histogram_quantile(0.99, [(0.001, 1), (0.1, 0), (INF, 9)]) == 0.1


def test_quantile_merges_repeated_bounds_in_any_order() -> None:
    split = [(0.005, 6), (0.002, 5), (0.002, 5), (0.005, 4), (INF, 0)]
    assert histogram_quantile(0.75, split) == histogram_quantile(
        0.75, [(0.002, 10), (0.005, 10), (INF, 0)]
    )


def test_quantile_of_an_empty_histogram_is_none_and_bad_input_is_refused() -> None:
    assert histogram_quantile(0.5, [(0.001, 0), (INF, 0)]) is None
    assert histogram_quantile(0.5, []) is None
    with pytest.raises(ValueError, match="quantile"):
        histogram_quantile(1.5, [(0.001, 1)])
    with pytest.raises(ValueError, match="negative"):
        histogram_quantile(0.5, [(0.001, -1)])


# -- windows ----------------------------------------------------------------------------------


def _entry(instance: str, requests: int, failures: int, latency: list[int], **gauges) -> dict:
    window = Snapshot(
        requests=requests,
        failures=failures,
        latency=tuple(latency),
        miss_backlog=gauges.get("miss", 0),
        request_log_backlog=gauges.get("req", 0),
    )
    return {k.encode(): v.encode() for k, v in window.to_entry(instance, 10_000).items()}


def _latency(**at_bound: int) -> list[int]:
    """Per-bucket counts with ``b<index>=count``."""
    out = [0] * (len(FETCH_BUCKETS_S) + 1)
    for key, count in at_bound.items():
        out[int(key[1:])] = count
    return out


def test_windows_of_every_instance_merge_into_the_run_record_figures() -> None:
    one_ms = FETCH_BUCKETS_S.index(0.001)
    two_ms = FETCH_BUCKETS_S.index(0.002)
    entries = [
        (b"1-0", _entry("a", 60, 1, _latency(**{f"b{one_ms}": 60}), miss=3, req=1)),
        (b"2-0", _entry("b", 40, 2, _latency(**{f"b{two_ms}": 40}), miss=5)),
        (b"3-0", _entry("a", 0, 0, _latency(), miss=1, req=7)),  # a's backlog peaks at 3, 7
    ]
    figures = merge_windows(entries)
    assert figures is not None and tuple(figures) == WINDOW_FIGURES
    assert (figures["requests"], figures["failures"]) == (100, 3)
    # 60 fetches in (0.75, 1] ms, 40 in (1.5, 2] ms: p50 at 50/60 of the first bucket.
    assert figures["fetch_p50_ms"] == pytest.approx(0.75 + 0.25 * 50 / 60, abs=1e-3)
    assert figures["fetch_p99_ms"] == pytest.approx(1.5 + 0.5 * 39 / 40, abs=1e-3)
    assert (figures["miss_backlog"], figures["request_log_backlog"]) == (3 + 5, 7)


def test_no_window_gives_none_and_windows_without_fetches_give_no_quantiles() -> None:
    assert merge_windows([]) is None
    figures = merge_windows([(b"1-0", _entry("a", 0, 0, _latency(), miss=2))])
    assert figures == {
        "requests": 0,
        "failures": 0,
        "fetch_p50_ms": None,
        "fetch_p99_ms": None,
        "miss_backlog": 2,
        "request_log_backlog": 0,
        "main_tier_share": None,  # no served row: no share, not 0% or 100%
    }


def test_the_windows_tier_hits_merge_into_each_tiers_share_of_served_rows() -> None:
    a = {**_entry("a", 2, 0, _latency()), b"tier_pair": b"3", b"tier_none": b"1"}
    b = {**_entry("b", 1, 0, _latency()), b"tier_iagg": b"4"}
    figures = merge_windows([(b"1-0", a), (b"2-0", b)])
    assert figures is not None
    assert figures["main_tier_share"] == {
        "pair": 0.375,
        "nbr": 0.0,
        "uagg": 0.0,
        "iagg": 0.5,
        "none": 0.125,
    }


def test_an_unreadable_window_is_skipped_and_logged_never_costing_the_others(caplog) -> None:
    good = _entry("a", 5, 0, _latency(b4=5))
    bad_counts = {**good, b"buckets": b"1,2"}
    entries = [
        (b"1-0", good),
        (b"2-0", {b"instance": b"x"}),
        (b"3-0", {**good, b"requests": b"many"}),
        (b"4-0", bad_counts),
        (b"5-0", {**good, b"failures": b"-1"}),
    ]
    with caplog.at_level(logging.WARNING, logger="solaris.serving.metrics"):
        figures = merge_windows(entries, stream="t:serving_metrics")
    assert figures is not None and figures["requests"] == 5
    [message] = [r.getMessage() for r in caplog.records]
    assert "skipped 4 unreadable entries" in message and "t:serving_metrics" in message
    assert "missing fields" in message


def test_a_window_is_what_changed_since_the_last_and_an_idle_one_is_not_published() -> None:
    earlier = Snapshot(requests=3, failures=1, latency=tuple(_latency(b2=3)))
    later = Snapshot(requests=5, failures=1, latency=tuple(_latency(b2=3, b5=2)), miss_backlog=4)
    window = later.minus(earlier)
    assert (window.requests, window.failures, window.miss_backlog) == (2, 0, 4)
    assert window.latency == tuple(_latency(b5=2))
    assert Snapshot().minus(Snapshot()).is_idle()
    assert not window.is_idle()


# -- the per-client recorder ------------------------------------------------------------------


def test_rows_count_once_under_the_first_present_tier_and_failures_are_zero_filled() -> None:
    metrics = _metrics()
    mask = np.array(
        [
            [True, True, True, True],  # pair
            [False, True, False, True],  # nbr
            [False, False, True, True],  # uagg
            [False, False, False, True],  # iagg
            [False, False, False, False],  # none
            [False, False, True, False],  # uagg
        ]
    )
    metrics.observe_fetch(0.0012, mask)
    metrics.observe_failure(0.2, 10)
    metrics.observe_shed(3)
    snap = metrics.snapshot()
    assert snap.tier_hits == {"pair": 1, "nbr": 1, "uagg": 2, "iagg": 1, "none": 1 + 10 + 3}
    assert snap.entities == 6 + 10 + 3 == sum(snap.tier_hits.values())
    assert snap.zero_filled == 14
    # Shed fetches never reached the store: only two latencies, in their buckets.
    assert sum(snap.latency) == 2
    assert snap.latency[FETCH_BUCKETS_S.index(0.0015)] == 1
    assert snap.latency[FETCH_BUCKETS_S.index(0.25)] == 1
    assert snap.latency_sum == pytest.approx(0.2012)


def test_latency_on_a_bucket_bound_counts_in_that_bucket_and_beyond_the_last_in_inf() -> None:
    metrics = _metrics()
    metrics.observe_failure(0.001, 1)
    metrics.observe_failure(5.0, 1)
    latency = metrics.snapshot().latency
    assert latency[FETCH_BUCKETS_S.index(0.001)] == 1 and latency[-1] == 1


def test_exposition_has_every_metric_with_its_namespace_and_the_client_counts() -> None:
    stats = FetchStats(requests=4, failures=2, connection_errors=1, shed_open=1, misses_logged=3)
    metrics = _metrics(stats.as_dict(), miss_backlog=2, request_log_backlog=5, breaker_open=True)
    metrics.observe_fetch(0.0009, np.array([[True, False, False, False]] * 7))
    metrics.observe_failure(0.05, 2)
    text = metrics.exposition()
    for spec in METRICS:
        assert f"# TYPE {spec.exposed} {spec.kind}" in text, spec.name
        assert f"# HELP {spec.exposed} {spec.help}" in text, spec.name
    s = _samples(text)
    ns = (("namespace", "live"),)
    assert s[("solaris_serving_requests_total", ns)] == 4
    assert s[("solaris_serving_entities_total", ns)] == 9
    assert s[("solaris_serving_zero_filled_total", ns)] == 2
    assert s[("solaris_serving_failures_total", (*ns, ("reason", "connection")))] == 1
    assert s[("solaris_serving_failures_total", (*ns, ("reason", "shed_open")))] == 1
    assert s[("solaris_serving_failures_total", (*ns, ("reason", "timeout")))] == 0
    assert s[("solaris_serving_tier_hits_total", (*ns, ("tier", "pair")))] == 7
    assert s[("solaris_serving_fetch_seconds_count", ns)] == 2
    assert s[("solaris_serving_fetch_seconds_bucket", (("le", "0.001"), *ns))] == 1
    assert s[("solaris_serving_fetch_seconds_bucket", (("le", "+Inf"), *ns))] == 2
    assert s[("solaris_serving_miss_backlog", ns)] == 2
    assert s[("solaris_serving_request_log_backlog", ns)] == 5
    assert s[("solaris_serving_breaker_open", ns)] == 1
    written = (*ns, ("outcome", "written"), ("stream", "misses"))
    assert s[("solaris_serving_stream_writes_total", written)] == 3


def test_clients_sharing_a_registry_are_summed_per_namespace_own_registries_never_collide():
    shared = CollectorRegistry()
    a = ServingMetrics("live", lambda: ClientState({"requests": 2}), registry=shared)
    b = ServingMetrics("live", lambda: ClientState({"requests": 3}), registry=shared)
    c = ServingMetrics("replay", lambda: ClientState({"requests": 7}), registry=shared)
    s = _samples(generate_latest(shared).decode())
    assert s[("solaris_serving_requests_total", (("namespace", "live"),))] == 5
    assert s[("solaris_serving_requests_total", (("namespace", "replay"),))] == 7
    own = [_metrics({"requests": 1}), _metrics({"requests": 1})]  # each on its own registry
    for m in own:
        assert (
            _samples(m.exposition())[("solaris_serving_requests_total", (("namespace", "live"),))]
            == 1
        )
    assert a.registry is b.registry is c.registry is shared


def test_a_window_that_fails_to_publish_goes_out_with_the_next_one() -> None:
    class Stream:  # stands in for the Redis client's XADD (pure logic: what is sent when)
        def __init__(self) -> None:
            self.entries: list[dict] = []
            self.fail = True

        def xadd(self, name, fields, maxlen, approximate):
            assert name == "live:serving_metrics" and approximate and maxlen > 0
            if self.fail:
                raise redis.ConnectionError("down")
            self.entries.append(fields)

    stream, requests = Stream(), {"requests": 0}
    metrics = ServingMetrics("live", lambda: ClientState(dict(requests)))
    metrics.publish_to(lambda: stream, "live:serving_metrics", every_s=None)
    assert metrics.publish()  # idle: nothing to send, nothing pending
    requests["requests"] = 2
    assert not metrics.publish()
    requests["requests"] = 5
    stream.fail = False
    assert metrics.publish()
    assert metrics.publish()  # idle again: nothing more is sent
    assert [e["requests"] for e in stream.entries] == ["5"]


def test_publishing_refuses_a_bad_interval() -> None:
    metrics = _metrics()
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="publish interval"):
            metrics.publish_to(lambda: None, "live:serving_metrics", bad)


# -- the contract with the client and the docs ------------------------------------------------


def test_failure_reasons_and_stream_writes_name_fetch_stats_counters() -> None:
    fields = {f.name for f in dataclasses.fields(FetchStats)}
    assert set(FAILURE_REASONS.values()) <= fields
    assert set(STREAM_WRITE_STATS.values()) <= fields
    # Every failure is one of the reasons: the reasons add up to FetchStats.failures.
    assert fields - set(FAILURE_REASONS.values()) - set(STREAM_WRITE_STATS.values()) == {
        "requests",
        "failures",
    }


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (redis.TimeoutError("Timeout reading from socket"), "timeouts"),
        (TimeoutError(), "timeouts"),
        (redis.ConnectionError("Error 111 connecting to 127.0.0.1:1"), "connection_errors"),
        (ConnectionRefusedError(111, "refused"), "connection_errors"),
        (socket.gaierror("no such host"), "connection_errors"),
        (ValueError("bad reply"), "other_errors"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v,
)
def test_a_failed_fetch_is_counted_as_timeout_connection_or_other(exc, kind) -> None:
    assert _failure_kind(exc) == kind


def test_a_wrapped_connection_error_still_counts_as_connection() -> None:
    try:
        try:
            raise ConnectionResetError(104, "reset")
        except OSError as inner:
            raise RuntimeError("feast read failed") from inner
    except RuntimeError as outer:
        assert _failure_kind(outer) == "connection_errors"


def test_the_docs_reference_every_metric_and_window_figure() -> None:
    text = DOCS.read_text()
    for spec in METRICS:
        assert f"`{spec.exposed}`" in text, spec.exposed
    for figure in WINDOW_FIGURES:
        assert f"`{figure}`" in text, figure
    assert all(t in text for t in TIERS)
