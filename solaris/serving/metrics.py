"""Serving metrics: what a :class:`~solaris.serving.client.SolarisFeatures` client did, in
Prometheus's format, and in windows on Redis for the candidates DAG's run record.

This module is the one home of the serving metrics' names, help texts, labels and latency
buckets (:data:`METRICS`, :data:`FETCH_BUCKETS_S`); ``docs/metrics.md`` is their reference.

**Scraping.** Each client owns a :class:`ServingMetrics` (``features.metrics``), registered
on its own ``prometheus_client.CollectorRegistry`` unless the client is given one (pass
``prometheus_client.REGISTRY`` to be scraped with the rest of a process's metrics)::

    features = SolarisFeatures(cfg, redis=..., fm_version=...)
    features.metrics.serve(9464)          # GET http://127.0.0.1:9464/metrics
    features.metrics.exposition()         # or the same text, to serve it yourself

Several clients on one registry are summed per namespace (one collector per registry), so
two clients never collide and two tests never see each other's counts.

**Cheap on the request path.** A fetch adds one uncontended lock, a few additions, a
``bisect`` for its latency bucket and a histogram of its rows' tier-presence patterns (one
small matmul and a ``bincount`` of the ``[N, 4]`` mask); nothing is looked up by label and
nothing is formatted until a scrape, which derives the per-tier split from the patterns.
Request and failure counts are the client's :class:`~solaris.serving.client.FetchStats`
(read at scrape time, never counted twice); this module adds entities, tier hits and the
latency histogram.

**Windows on Redis.** Every :data:`PUBLISH_EVERY_S` seconds (and on ``close``) a client
appends what changed since its last window to the namespace's bounded stream
``<namespace>:serving_metrics`` (``XADD MAXLEN ~`` :data:`WINDOW_STREAM_MAXLEN`). Stream ids
are millisecond timestamps, so :func:`read_window` takes the entries of an interval
``[start, end)`` by id, merges every instance's windows and answers the run-record figures
(requests, failures, fetch p50/p99 from the merged buckets, peak backlogs). A window that
fails to publish is not lost: its counts go out with the next one.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from solaris.connection import RedisTarget, redis_client
from solaris.errors import SolarisError
from solaris.serving.streams import StreamEntryError, as_bytes, entry_fields, warn_skipped
from solaris.serving.tiers import NONE, TIERS

if TYPE_CHECKING:
    import redis as redis_py
    from prometheus_client import CollectorRegistry

    from solaris.namespace import Namespace

__all__ = [
    "BREAKER_OPEN",
    "ENTITIES",
    "FAILURES",
    "FAILURE_REASONS",
    "FETCH_BUCKETS_S",
    "FETCH_SECONDS",
    "METRICS",
    "MISS_BACKLOG",
    "NAMESPACE_LABEL",
    "PUBLISH_EVERY_S",
    "REQUESTS",
    "REQUEST_LOG_BACKLOG",
    "STREAM_WRITES",
    "STREAM_WRITE_STATS",
    "TIER_HITS",
    "WINDOW_FIGURES",
    "WINDOW_STREAM_MAXLEN",
    "ZERO_FILLED",
    "ClientState",
    "MetricSpec",
    "MetricsPublishError",
    "ServingMetrics",
    "ServingMetricsError",
    "Snapshot",
    "families",
    "histogram_quantile",
    "merge_windows",
    "read_window",
]

log = logging.getLogger(__name__)

# -- the contract: names, help texts, labels, buckets -----------------------------------------

NAMESPACE_LABEL = "namespace"

# Upper bounds (seconds) of the fetch-latency buckets: 0.1 ms to 100 ms finely (a fetch of
# 300 candidates takes ~1-3 ms on loopback), then up to the 200 ms default fetch bound and a
# little beyond; slower fetches fall into +Inf.
FETCH_BUCKETS_S: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.00075,
    0.001,
    0.0015,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
)

# failures{reason}: each reason and the FetchStats counter that holds it.
FAILURE_REASONS: dict[str, str] = {
    "timeout": "timeouts",
    "connection": "connection_errors",
    "other": "other_errors",
    "shed_open": "shed_open",
    "shed_busy": "shed_busy",
}
# stream_writes{stream, outcome}: each pair and the FetchStats counter that holds it.
STREAM_WRITE_STATS: dict[tuple[str, str], str] = {
    ("misses", "written"): "misses_logged",
    ("misses", "dropped"): "misses_dropped",
    ("requests", "written"): "requests_logged",
    ("requests", "dropped"): "requests_dropped",
    ("embed", "written"): "nearline_logged",
    ("embed", "dropped"): "nearline_failed",
}


@dataclass(frozen=True)
class MetricSpec:
    """One exposed metric: its name (counters without the ``_total`` the exposition adds),
    kind, help text, labels besides ``namespace``, and unit."""

    name: str
    kind: Literal["counter", "gauge", "histogram"]
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""

    @property
    def exposed(self) -> str:
        """The name as it appears in the exposition (``..._total`` for a counter)."""
        return f"{self.name}_total" if self.kind == "counter" else self.name


REQUESTS = MetricSpec(
    "solaris_serving_requests",
    "counter",
    "Feature fetches with at least one item (SolarisFeatures.fetch calls).",
)
ENTITIES = MetricSpec(
    "solaris_serving_entities",
    "counter",
    "Entity rows (user x item) asked for by those fetches.",
)
FAILURES = MetricSpec(
    "solaris_serving_failures",
    "counter",
    "Fetches answered with zeros: the store timed out, refused the connection or failed "
    "otherwise, or the fetch was shed (breaker open, too many in flight).",
    labels=("reason",),
)
ZERO_FILLED = MetricSpec(
    "solaris_serving_zero_filled",
    "counter",
    "Entity rows answered with all-zero features: no tier present, or the fetch failed.",
)
TIER_HITS = MetricSpec(
    "solaris_serving_tier_hits",
    "counter",
    "Entity rows by the tier that filled their main slot (the first present of "
    "pair, nbr, uagg, iagg).",
    labels=("tier",),
)
FETCH_SECONDS = MetricSpec(
    "solaris_serving_fetch_seconds",
    "histogram",
    "Latency of fetches that went to the store (answered or failed; shed ones are not).",
    unit="seconds",
)
MISS_BACKLOG = MetricSpec(
    "solaris_serving_miss_backlog",
    "gauge",
    "Miss-stream writes queued off the request path, not yet written.",
)
REQUEST_LOG_BACKLOG = MetricSpec(
    "solaris_serving_request_log_backlog",
    "gauge",
    "Request-log writes queued off the request path, not yet written.",
)
STREAM_WRITES = MetricSpec(
    "solaris_serving_stream_writes",
    "counter",
    "Miss-stream and request-log entries written or dropped (Redis error, backlog full, "
    "client closed).",
    labels=("stream", "outcome"),
)
BREAKER_OPEN = MetricSpec(
    "solaris_serving_breaker_open",
    "gauge",
    "Clients whose circuit breaker is open or half-open (Redis looks hung or down).",
)

METRICS: tuple[MetricSpec, ...] = (
    REQUESTS,
    ENTITIES,
    FAILURES,
    ZERO_FILLED,
    TIER_HITS,
    FETCH_SECONDS,
    MISS_BACKLOG,
    REQUEST_LOG_BACKLOG,
    STREAM_WRITES,
    BREAKER_OPEN,
)

# -- windows on Redis -------------------------------------------------------------------------

PUBLISH_EVERY_S = 10.0
# ~ entries the window stream keeps: 10 serving processes publishing every 10 s fill it in
# about 5.5 hours, several candidates cadences.
WINDOW_STREAM_MAXLEN = 20_000
# The figures read_window answers (the candidates run record's "serving"; the page reads them).
WINDOW_FIGURES: tuple[str, ...] = (
    "requests",
    "failures",
    "fetch_p50_ms",
    "fetch_p99_ms",
    "miss_backlog",
    "request_log_backlog",
    "main_tier_share",
)
_FORMAT = b"1"
# A row's tier mask as a pattern number (bit k: tier k present), and each pattern's main
# tier: the first present one, "none" for pattern 0.
_PATTERN_BITS = (1 << np.arange(len(TIERS))).astype(np.uint8)
_ALL_TIERS = 2 ** len(TIERS) - 1
_MAIN_TIER: tuple[str, ...] = tuple(
    TIERS[(p & -p).bit_length() - 1] if p else NONE for p in range(2 ** len(TIERS))
)
_PAGE = 1_000  # XRANGE entries per call
_WARN_EVERY_S = 60.0


@dataclass(frozen=True)
class ClientState:
    """What a client reports at scrape or publish time (read under its lock).

    Attributes:
        stats: the client's ``FetchStats.as_dict()``.
        miss_backlog: miss-stream writes queued, not yet done.
        request_log_backlog: request-log writes queued, not yet done.
        breaker_open: the circuit breaker is not closed.
    """

    stats: Mapping[str, int]
    miss_backlog: int = 0
    request_log_backlog: int = 0
    breaker_open: bool = False


@dataclass(frozen=True)
class Snapshot:
    """Cumulative counts of one client at one time (gauges: their value then)."""

    requests: int = 0
    failures: int = 0
    entities: int = 0
    failures_by_reason: dict[str, int] = field(default_factory=dict)
    tier_hits: dict[str, int] = field(default_factory=dict)  # TIERS and "none"
    latency: tuple[int, ...] = (0,) * (len(FETCH_BUCKETS_S) + 1)  # per bucket, last: +Inf
    latency_sum: float = 0.0
    stream_writes: dict[tuple[str, str], int] = field(default_factory=dict)
    miss_backlog: int = 0
    request_log_backlog: int = 0
    breaker_open: bool = False

    @property
    def zero_filled(self) -> int:
        return self.tier_hits.get(NONE, 0)

    def minus(self, earlier: Snapshot) -> Snapshot:
        """The counts since ``earlier`` (gauges keep this snapshot's values)."""

        def sub(a: dict, b: dict) -> dict:
            return {k: v - b.get(k, 0) for k, v in a.items()}

        return Snapshot(
            requests=self.requests - earlier.requests,
            failures=self.failures - earlier.failures,
            entities=self.entities - earlier.entities,
            failures_by_reason=sub(self.failures_by_reason, earlier.failures_by_reason),
            tier_hits=sub(self.tier_hits, earlier.tier_hits),
            latency=tuple(a - b for a, b in zip(self.latency, earlier.latency, strict=True)),
            latency_sum=self.latency_sum - earlier.latency_sum,
            stream_writes=sub(self.stream_writes, earlier.stream_writes),
            miss_backlog=self.miss_backlog,
            request_log_backlog=self.request_log_backlog,
            breaker_open=self.breaker_open,
        )

    def is_idle(self) -> bool:
        """Nothing counted and nothing queued: a window not worth publishing."""
        return not (
            self.requests
            or self.failures
            or any(self.stream_writes.values())
            or self.miss_backlog
            or self.request_log_backlog
        )

    def to_entry(self, instance: str, window_ms: int) -> dict[str, str]:
        """The fields of this window's stream entry (see ``docs/metrics.md``)."""
        entry = {
            "v": _FORMAT.decode(),
            "instance": instance,
            "window_ms": str(int(window_ms)),
            "requests": str(self.requests),
            "entities": str(self.entities),
            "failures": str(self.failures),
            "zero_filled": str(self.zero_filled),
            "le": ",".join(_le(b) for b in (*FETCH_BUCKETS_S, math.inf)),
            "buckets": ",".join(str(c) for c in self.latency),
            "latency_sum_s": repr(float(self.latency_sum)),
            "miss_backlog": str(self.miss_backlog),
            "request_log_backlog": str(self.request_log_backlog),
        }
        entry.update({f"failures_{r}": str(n) for r, n in self.failures_by_reason.items()})
        entry.update({f"tier_{t}": str(n) for t, n in self.tier_hits.items()})
        return entry


class ServingMetricsError(SolarisError, ValueError):
    """A bad argument to the serving metrics: a publish interval, quantile, histogram or window."""


class MetricsPublishError(SolarisError, RuntimeError):
    """A client's metrics were given a second stream to publish to."""


def _le(bound: float) -> str:
    return "+Inf" if bound == math.inf else repr(float(bound))


# -- the per-client recorder ------------------------------------------------------------------


class ServingMetrics:
    """Counts of one serving client, exposed to Prometheus and published as windows.

    Args:
        namespace: the client's namespace (the ``namespace`` label of every metric).
        state: returns the client's :class:`ClientState` (its ``FetchStats`` and backlogs);
            called at scrape and publish time only.
        registry: the ``prometheus_client.CollectorRegistry`` to register on; default: a new
            one of this client's (``prometheus_client.REGISTRY``: the process's global one).
        instance: this client's id in the window stream (default: ``host-pid-random``).

    The ``observe_*`` methods are the request path's: thread-safe and cheap.
    """

    def __init__(
        self,
        namespace: str,
        state: Callable[[], ClientState],
        *,
        registry: CollectorRegistry | None = None,
        instance: str | None = None,
    ) -> None:
        from prometheus_client import CollectorRegistry

        self.namespace = namespace
        self.instance = instance or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.registry = registry if registry is not None else CollectorRegistry()
        self._state = state
        self._lock = threading.Lock()
        # Entity rows by tier-presence pattern (bit k: tier k present; 0: zero-filled).
        self._patterns = np.zeros(2 ** len(TIERS), dtype=np.int64)
        self._latency = [0] * (len(FETCH_BUCKETS_S) + 1)
        self._latency_sum = 0.0
        # Windows: the snapshot last published, and the publisher thread.
        self._published = Snapshot()
        self._published_at = time.time()
        self._publish_lock = threading.Lock()
        self._publisher: threading.Thread | None = None
        self._stop = threading.Event()
        self._target: tuple[Callable[[], Any], str] | None = None
        self._last_warning = -math.inf
        _collector_of(self.registry).add(self)

    # -- the request path --------------------------------------------------------------------

    def observe_fetch(self, seconds: float, mask: np.ndarray) -> None:
        """A fetch the store answered: its latency and ``[N, len(TIERS)]`` tier mask."""
        bucket = bisect.bisect_left(FETCH_BUCKETS_S, seconds)
        if mask.all():  # every tier of every row: one pattern (the cached request path)
            with self._lock:
                self._patterns[_ALL_TIERS] += len(mask)
                self._latency[bucket] += 1
                self._latency_sum += seconds
            return
        patterns = np.bincount(mask @ _PATTERN_BITS, minlength=len(_MAIN_TIER))
        with self._lock:
            self._patterns += patterns
            self._latency[bucket] += 1
            self._latency_sum += seconds

    def observe_failure(self, seconds: float, n: int) -> None:
        """A fetch of ``n`` items that went to the store and failed (answered zeros)."""
        bucket = bisect.bisect_left(FETCH_BUCKETS_S, seconds)
        with self._lock:
            self._patterns[0] += n
            self._latency[bucket] += 1
            self._latency_sum += seconds

    def observe_shed(self, n: int) -> None:
        """A fetch of ``n`` items shed without going to the store (answered zeros)."""
        with self._lock:
            self._patterns[0] += n

    # -- reading -----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The cumulative counts now."""
        state = self._state()
        with self._lock:
            patterns = self._patterns.tolist()
            latency = tuple(self._latency)
            latency_sum = self._latency_sum
        stats = state.stats
        hits = dict.fromkeys((*TIERS, NONE), 0)
        for pattern, rows in enumerate(patterns):
            hits[_MAIN_TIER[pattern]] += rows
        return Snapshot(
            requests=int(stats.get("requests", 0)),
            failures=int(stats.get("failures", 0)),
            entities=sum(patterns),
            failures_by_reason={r: int(stats.get(k, 0)) for r, k in FAILURE_REASONS.items()},
            tier_hits=hits,
            latency=latency,
            latency_sum=latency_sum,
            stream_writes={p: int(stats.get(k, 0)) for p, k in STREAM_WRITE_STATS.items()},
            miss_backlog=int(state.miss_backlog),
            request_log_backlog=int(state.request_log_backlog),
            breaker_open=bool(state.breaker_open),
        )

    def exposition(self) -> str:
        """The registry's metrics in the Prometheus text format (what a scrape returns)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()

    def serve(self, port: int, addr: str = "127.0.0.1"):
        """Serve the registry on ``http://addr:port/metrics`` from a daemon thread (loopback
        by default: pass the address Prometheus scrapes on). Returns the HTTP server
        (``server.server_port`` is the port when ``port`` is 0; ``server.shutdown()`` stops
        it)."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server

    # -- windows -----------------------------------------------------------------------------

    def publish_to(
        self, client: Callable[[], Any], stream: str, every_s: float | None = PUBLISH_EVERY_S
    ) -> None:
        """Send windows to ``stream`` through the Redis client that ``client()`` returns
        (built lazily by the caller): every ``every_s`` seconds from a daemon thread, and
        whenever :meth:`publish` is called (``every_s=None``: only then)."""
        if every_s is not None and not every_s > 0:
            raise ServingMetricsError(
                f"metrics publish interval must be > 0 seconds, got {every_s!r}"
            )
        if self._target is not None:
            raise MetricsPublishError("this client's metrics already have a stream to publish to")
        self._target = (client, stream)
        if every_s is not None:
            self._publisher = threading.Thread(
                target=self._publish_loop, args=(every_s,), name="solaris-metrics", daemon=True
            )
            self._publisher.start()

    def _publish_loop(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            self.publish()

    def publish(self) -> bool:
        """Append the window since the last published one (nothing when it is idle); True
        when nothing is left unpublished, False when there is no stream to publish to
        (:meth:`publish_to` was not called) or Redis failed: the error is logged (at
        most once a minute) and the window's counts go out with the next one."""
        if self._target is None:
            return False
        client, stream = self._target
        with self._publish_lock:
            now_s = time.time()
            current = self.snapshot()
            window = current.minus(self._published)
            if window.is_idle():
                return True
            entry = window.to_entry(self.instance, (now_s - self._published_at) * 1000)
            try:
                client().xadd(stream, entry, maxlen=WINDOW_STREAM_MAXLEN, approximate=True)
            except Exception as exc:  # metrics are best effort: serving goes on
                if time.monotonic() - self._last_warning >= _WARN_EVERY_S:
                    self._last_warning = time.monotonic()
                    log.warning(
                        "serving metrics window not published (%s: %s)", type(exc).__name__, exc
                    )
                return False
            self._published, self._published_at = current, now_s
            return True

    def stop(self) -> None:
        """Stop the publisher thread (the caller publishes the last window with
        :meth:`publish` once its queued writes are done)."""
        self._stop.set()
        if self._publisher is not None and self._publisher is not threading.current_thread():
            self._publisher.join(timeout=5.0)


# -- exposition: one collector per registry, summing its clients per namespace ----------------


class _RegistryCollector:
    """The serving metrics of every :class:`ServingMetrics` on one registry, summed by
    namespace (a registry refuses two collectors of the same names)."""

    def __init__(self) -> None:
        self._members: weakref.WeakSet[ServingMetrics] = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, member: ServingMetrics) -> None:
        with self._lock:
            self._members.add(member)

    def describe(self):
        return families({})

    def collect(self):
        with self._lock:
            members = list(self._members)
        by_namespace: dict[str, list[Snapshot]] = {}
        for member in members:
            by_namespace.setdefault(member.namespace, []).append(member.snapshot())
        return families(by_namespace)


_COLLECTORS: weakref.WeakKeyDictionary[Any, _RegistryCollector] = weakref.WeakKeyDictionary()
_COLLECTORS_LOCK = threading.Lock()


def _collector_of(registry: CollectorRegistry) -> _RegistryCollector:
    with _COLLECTORS_LOCK:
        collector = _COLLECTORS.get(registry)
        if collector is None:
            collector = _RegistryCollector()
            registry.register(collector)
            _COLLECTORS[registry] = collector
        return collector


def families(by_namespace: Mapping[str, Sequence[Snapshot]]) -> list:
    """The metric families of :data:`METRICS` with one sample set per namespace."""
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    kinds = {
        "counter": CounterMetricFamily,
        "gauge": GaugeMetricFamily,
        "histogram": HistogramMetricFamily,
    }
    fam = {
        s.name: kinds[s.kind](s.name, s.help, labels=(NAMESPACE_LABEL, *s.labels), unit=s.unit)
        for s in METRICS
    }
    bounds = [_le(b) for b in (*FETCH_BUCKETS_S, math.inf)]
    for ns, snaps in sorted(by_namespace.items()):

        def total(get: Callable[[Snapshot], float], snaps: Sequence[Snapshot] = snaps) -> float:
            return sum(get(s) for s in snaps)

        fam[REQUESTS.name].add_metric([ns], total(lambda s: s.requests))
        fam[ENTITIES.name].add_metric([ns], total(lambda s: s.entities))
        for reason in FAILURE_REASONS:
            fam[FAILURES.name].add_metric(
                [ns, reason], total(lambda s, r=reason: s.failures_by_reason.get(r, 0))
            )
        fam[ZERO_FILLED.name].add_metric([ns], total(lambda s: s.zero_filled))
        for tier in TIERS:
            fam[TIER_HITS.name].add_metric(
                [ns, tier], total(lambda s, t=tier: s.tier_hits.get(t, 0))
            )
        counts = np.sum([s.latency for s in snaps], axis=0).cumsum().tolist()
        fam[FETCH_SECONDS.name].add_metric(
            [ns],
            buckets=list(zip(bounds, counts, strict=True)),
            sum_value=total(lambda s: s.latency_sum),
        )
        fam[MISS_BACKLOG.name].add_metric([ns], total(lambda s: s.miss_backlog))
        fam[REQUEST_LOG_BACKLOG.name].add_metric([ns], total(lambda s: s.request_log_backlog))
        for pair in STREAM_WRITE_STATS:
            fam[STREAM_WRITES.name].add_metric(
                [ns, *pair], total(lambda s, p=pair: s.stream_writes.get(p, 0))
            )
        fam[BREAKER_OPEN.name].add_metric([ns], total(lambda s: int(s.breaker_open)))
    return list(fam.values())


# -- reading windows back: the candidates run record ------------------------------------------


def histogram_quantile(q: float, buckets: Iterable[tuple[float, int]]) -> float | None:
    """The ``q`` quantile of a histogram given as ``(upper bound, count)`` per bucket (not
    cumulative; any order), as Prometheus's ``histogram_quantile``: linear within the bucket
    holding the rank, from 0 below the first bound; a rank in the +Inf bucket gives the
    largest finite bound. ``None`` for an empty histogram."""
    if not 0 <= q <= 1:
        raise ServingMetricsError(f"quantile must be in [0, 1], got {q!r}")
    merged: dict[float, int] = {}
    for bound, count in buckets:
        if count < 0:
            raise ServingMetricsError(f"bucket {bound!r} has a negative count {count}")
        merged[bound] = merged.get(bound, 0) + count
    total = sum(merged.values())
    if total == 0:
        return None
    rank = q * total
    cumulative, lower = 0, 0.0
    finite = [b for b in merged if b != math.inf]
    for bound in sorted(merged):
        count = merged[bound]
        if count and cumulative + count >= rank:
            if bound == math.inf:
                return max(finite) if finite else None
            return lower + (bound - lower) * (rank - cumulative) / count
        cumulative += count
        lower = bound
    return max(finite) if finite else None  # q == 0 with empty leading buckets


@dataclass(frozen=True)
class _Window:
    instance: str
    requests: int
    failures: int
    buckets: tuple[tuple[float, int], ...]
    miss_backlog: int
    request_log_backlog: int
    tier_hits: dict[str, int]  # entity rows by main tier (TIERS and "none")


def _parse_window(raw) -> _Window:
    """One stream entry; ``ValueError`` saying what is wrong."""
    try:
        fields = entry_fields(raw)
    except (TypeError, ValueError) as exc:
        raise StreamEntryError(f"malformed fields ({exc})") from None
    need = (b"instance", b"requests", b"failures", b"le", b"buckets", b"miss_backlog")
    missing = [k.decode() for k in (*need, b"request_log_backlog") if k not in fields]
    if missing:
        raise StreamEntryError(f"missing fields {missing}")
    try:
        counts = {k: int(fields[k]) for k in (b"requests", b"failures", b"miss_backlog")}
        counts[b"request_log_backlog"] = int(fields[b"request_log_backlog"])
        bounds = [float(b) for b in fields[b"le"].split(b",")]
        buckets = [int(c) for c in fields[b"buckets"].split(b",")]
    except ValueError:
        raise StreamEntryError("counts, le and buckets must be decimal numbers") from None
    if len(bounds) != len(buckets):
        raise StreamEntryError(f"{len(bounds)} bucket bounds for {len(buckets)} counts")
    if any(v < 0 for v in (*counts.values(), *buckets)) or any(math.isnan(b) for b in bounds):
        raise StreamEntryError("negative count or NaN bound")
    try:
        hits = {t: int(fields.get(f"tier_{t}".encode(), 0)) for t in (*TIERS, NONE)}
    except ValueError:
        raise StreamEntryError("tier hits must be decimal numbers") from None
    if any(v < 0 for v in hits.values()):
        raise StreamEntryError("negative tier hits")
    return _Window(
        instance=fields[b"instance"].decode(errors="replace"),
        requests=counts[b"requests"],
        failures=counts[b"failures"],
        buckets=tuple(zip(bounds, buckets, strict=True)),
        miss_backlog=counts[b"miss_backlog"],
        request_log_backlog=counts[b"request_log_backlog"],
        tier_hits=hits,
    )


def merge_windows(entries: Iterable[tuple[bytes, Any]], *, stream: str = "") -> dict | None:
    """The run-record figures (:data:`WINDOW_FIGURES`) of the window entries
    ``(id, fields)`` of every instance: requests and failures summed, p50/p99 in ms from the
    merged latency buckets (``None`` without a fetch that reached the store), each backlog
    as the sum over instances of its peak, and the share of served entity rows whose main
    slot each tier filled (``TIERS`` and ``"none"``; ``None`` without a served row: what
    serving knows of coverage where no impression is labelled, e.g. the live namespace).
    ``None`` when there is no entry; unreadable entries are skipped and logged."""
    windows: list[_Window] = []
    skipped: list[tuple[bytes, str]] = []
    for entry_id, raw in entries:
        try:
            windows.append(_parse_window(raw))
        except ValueError as exc:
            skipped.append((as_bytes(entry_id), str(exc)))
    warn_skipped(log, "serving metrics", stream, skipped)
    if not windows:
        return None
    buckets = [b for w in windows for b in w.buckets]
    peaks: dict[str, tuple[int, int]] = {}
    for w in windows:
        miss, req = peaks.get(w.instance, (0, 0))
        peaks[w.instance] = (max(miss, w.miss_backlog), max(req, w.request_log_backlog))

    rows = {t: sum(w.tier_hits[t] for w in windows) for t in (*TIERS, NONE)}
    total = sum(rows.values())
    share = {t: round(n / total, 6) for t, n in rows.items()} if total else None

    def ms(q: float) -> float | None:
        value = histogram_quantile(q, buckets)
        return None if value is None else round(value * 1000, 3)

    return {
        "requests": sum(w.requests for w in windows),
        "failures": sum(w.failures for w in windows),
        "fetch_p50_ms": ms(0.5),
        "fetch_p99_ms": ms(0.99),
        "miss_backlog": sum(m for m, _ in peaks.values()),
        "request_log_backlog": sum(r for _, r in peaks.values()),
        "main_tier_share": share,
    }


def _entries(client, stream: str, start_ms: int, end_ms: int) -> Iterator[tuple[bytes, Any]]:
    """Entries with ids in ``[start_ms, end_ms)``, in pages."""
    low: bytes | str = str(start_ms)
    while True:
        page = client.xrange(stream, min=low, max=str(end_ms - 1), count=_PAGE)
        yield from ((as_bytes(i), raw) for i, raw in page)
        if len(page) < _PAGE:
            return
        low = b"(" + as_bytes(page[-1][0])


def read_window(
    redis: str | RedisTarget | redis_py.Redis,
    namespace: Namespace,
    start: int,
    end: int,
    *,
    redis_type: Literal["redis", "redis_cluster"] = "redis",
) -> dict | None:
    """Serving's figures for the interval ``[start, end)`` (epoch seconds): the windows its
    clients published to ``<namespace>:serving_metrics`` with ids in
    ``[start·1000, end·1000)``, merged by :func:`merge_windows`.

    ``redis`` is a client, or a Redis to connect to (a client is opened for the call). Returns
    ``None`` when no window was published in the interval, or when Redis fails (logged: the
    figures are best effort, a run record without them beats none).
    """
    import redis as redis_py

    for name, value in (("start", start), ("end", end)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ServingMetricsError(
                f"read_window {name} must be epoch seconds (int >= 0), got {value!r}"
            )
    if end <= start:
        raise ServingMetricsError(f"read_window end {end} must be after its start {start}")
    stream = namespace.serving_metrics_stream
    # A client is opened here (and closed below) for a Redis to connect to.
    owned = isinstance(redis, str | RedisTarget)
    client = (
        redis_client(redis, redis_type=redis_type, timeout_s=10.0)
        if isinstance(redis, str | RedisTarget)  # repeated so that mypy narrows `redis`
        else redis
    )
    try:
        return merge_windows(_entries(client, stream, start * 1000, end * 1000), stream=stream)
    except redis_py.RedisError as exc:
        log.warning("serving metrics of %s not read (%s: %s)", stream, type(exc).__name__, exc)
        return None
    finally:
        if owned:
            client.close()
