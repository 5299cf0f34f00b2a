"""The serving client: one Redis round trip per ranking request, tier fallback, bounded time.

::

    features = SolarisFeatures(cfg, redis="10.0.0.5:6379,db=0", fm_version="fm-2024-06-01")
    features.warm_up()                        # at start-up: registry, client, first call
    out = features.fetch(user_id, candidate_item_ids)
    out.features  # [N, 4·d] float32;  out.mask [N, 4] bool;  out.tier [N] str

Each :meth:`SolarisFeatures.fetch` reads the views of the ``solaris_serving`` FeatureService
through the SOLARIS online store's request path
(:meth:`~solaris.store.online.SolarisOnlineStore.read_user`): one Redis round trip of one
command per view, the user's aggregate read once, uniform replies parsed by numpy; Feast's
``get_online_features`` where that path does not apply (a Redis Cluster). Then
:func:`~solaris.serving.tiers.assemble_tiers` applies the read TTLs, the ``fm_version`` guard
and the leakage-free user mean. Items whose pair tier is missing are appended to the miss
stream off the request path.

**Concurrency and faults.** ``fetch`` is thread-safe and does its I/O in the calling thread
(each concurrent caller reads on a connection of its own), so a serving
process with a thread pool gets real features on every thread. The VM never waits long nor
sees an exception because of the feature store:

* the Redis sockets of a store this client opens time out after ``store.fetch_timeout_ms``,
  and redis-py's retries are off, so a hung or dead Redis answers zeros
  (:func:`~solaris.serving.tiers.empty_tiers`) within about the bound;
* ``store.breaker_failures`` consecutive failures open a circuit breaker: for
  ``store.breaker_cooldown_ms`` every fetch answers zeros at once (``stats.shed_open``:
  Redis looks hung or down), then one probe decides whether it closes again;
* more than ``store.max_concurrent_fetches`` fetches in flight answer zeros at once
  (``stats.shed_busy``: this process is overloaded, Redis may be fine).

Only bad *arguments* raise (:class:`FetchArgumentError`, a
:class:`~solaris.errors.SolarisError` and a ``ValueError``): ids that are not integers in
``[0, 2**63)``, more than ``store.max_candidates`` items, a ``now`` that is not epoch seconds.
A message about a list argument names the index of its first bad element. The checks are
vectorised; the index is looked up only after a check has failed, so a valid request pays
nothing for it.

**Metrics.** ``features.metrics`` (:class:`~solaris.serving.metrics.ServingMetrics`) exposes
the counts of :attr:`~SolarisFeatures.stats`, tier hits and the fetch latency to Prometheus
(``features.metrics.serve(port)``), and publishes them every ten seconds as windows on the
namespace's ``<namespace>:serving_metrics`` stream, which the candidates DAG reads into its
run record (``docs/metrics.md``).
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from solaris.config import SolarisConfig
from solaris.connection import RedisTarget
from solaris.errors import SolarisError
from solaris.manifest import check_fm_version, current_fm_version
from solaris.namespace import Namespace
from solaris.serving.metrics import PUBLISH_EVERY_S, ClientState, ServingMetrics
from solaris.serving.misses import append_misses
from solaris.serving.nearline import NearlineSelector
from solaris.serving.request_log import append_request
from solaris.serving.tiers import (
    TIERS,
    TierAssembly,
    TierFeatures,
    empty_tiers,
    load_assembly,
    tier_settings,
)
from solaris.store.contract import (
    FEATURE_SERVICE,
    ITEM_ID,
    PAIR,
    REQUEST_TS,
    USER_ID,
    epoch_seconds,
)
from solaris.store.partitions import PartitionCountError, Partitioning, record_partition_count

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from redis import Redis
    from redis.cluster import RedisCluster

    from solaris.store.online import SolarisOnlineStore

__all__ = [
    "FEATURE_SERVICE",
    "CircuitBreaker",
    "FetchArgumentError",
    "FetchStats",
    "SolarisFeatures",
    "current_fm_version",
    "serving_target",
]

log = logging.getLogger(__name__)


# Queued stream writes (misses and request-log entries together): beyond this (Redis slow
# or down) a write is dropped and counted, so a backlog never grows without bound.
_MAX_PENDING_WRITES = 256
_WARN_EVERY_S = 10.0
_INT64_MAX = np.iinfo(np.int64).max
_EXACT_FLOAT = 2**53  # floats above this cannot hold every integer id exactly


class FetchArgumentError(SolarisError, ValueError):
    """A bad argument of the serving client (:meth:`SolarisFeatures.fetch`,
    :meth:`~SolarisFeatures.log_request` or the constructor): the message names the argument,
    and for a list argument the index of its first bad element. Store failures never raise
    (they answer zeros); only this does."""


@dataclass
class FetchStats:
    """Counters of one client (updated under a lock).

    Attributes:
        requests: ``fetch`` calls with at least one item.
        failures: requests answered with zeros because the store failed, timed out or the
            request was shed (all of the below).
        timeouts: failures that hit the socket timeout (``fetch_timeout_ms``).
        connection_errors: failures where Redis refused or dropped the connection.
        other_errors: the other failures of the store (Feast, a bad reply, ...).
        shed_open: requests answered at once while the circuit breaker was open (Redis
            hung or down).
        shed_busy: requests answered at once because ``max_concurrent_fetches`` were
            already in flight (this process overloaded).
        misses_logged: miss-stream entries (one per request with pair misses) written.
        misses_dropped: miss entries not written (Redis error, or too many writes pending).
        requests_logged: request-log entries (one per :meth:`SolarisFeatures.log_request`
            with at least one item) written.
        requests_dropped: request-log entries not written (Redis error, too many writes
            pending, or the client closed).
        nearline_logged: embed-stream entries (one per logged request with pairs to embed)
            written by serving-time selection (``nearline.enabled``;
            :mod:`solaris.serving.nearline`).
        nearline_failed: logged requests whose near-line selection failed (Redis error);
            the cycle selects for them instead.
    """

    requests: int = 0
    failures: int = 0
    timeouts: int = 0
    connection_errors: int = 0
    other_errors: int = 0
    shed_open: int = 0
    shed_busy: int = 0
    misses_logged: int = 0
    misses_dropped: int = 0
    requests_logged: int = 0
    requests_dropped: int = 0
    nearline_logged: int = 0
    nearline_failed: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class CircuitBreaker:
    """Closed → ``failures`` consecutive failures → open for ``cooldown_s`` → one probe.

    While open, :meth:`allow` is False. After the cool-down the next caller is let through
    as a probe (half-open; the others are still refused): its success closes the breaker,
    its failure opens it for another cool-down. Thread-safe.
    """

    def __init__(
        self, failures: int, cooldown_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if failures < 1 or not cooldown_s > 0:  # NaN is refused too
            raise FetchArgumentError("need failures >= 1 and cooldown_s > 0")
        self._threshold = failures
        self._cooldown = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._open_until: float | None = None
        self._probing = False

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half-open``."""
        with self._lock:
            if self._open_until is None:
                return "closed"
            return "half-open" if self._clock() >= self._open_until else "open"

    def allow(self) -> bool:
        with self._lock:
            if self._open_until is None:
                return True
            if self._clock() < self._open_until or self._probing:
                return False
            self._probing = True
            return True

    def record(self, ok: bool) -> None:
        with self._lock:
            self._probing = False
            if ok:
                self._failures = 0
                self._open_until = None
                return
            self._failures += 1
            if self._open_until is not None or self._failures >= self._threshold:
                self._open_until = self._clock() + self._cooldown


def serving_target(connection: RedisTarget, timeout_s: float) -> RedisTarget:
    """``connection`` with socket and connect timeouts of ``timeout_s`` (unless it sets its
    own), so that a stuck socket ends within the fetch bound."""
    return connection.with_defaults(socket_timeout=timeout_s, socket_connect_timeout=timeout_s)


def _check_user(user_id: object) -> int:
    if type(user_id) is int and 0 <= user_id <= _INT64_MAX:  # the usual case, at once
        return user_id
    if isinstance(user_id, bool) or not isinstance(user_id, numbers.Real):
        raise FetchArgumentError(f"user_id must be an integer, got {user_id!r}")
    if not isinstance(user_id, numbers.Integral):
        f = float(user_id)
        if not math.isfinite(f) or not f.is_integer() or abs(f) >= _EXACT_FLOAT:
            raise FetchArgumentError(f"user_id must be a whole number below 2**53, got {user_id!r}")
    value = int(user_id)
    if not 0 <= value <= _INT64_MAX:
        raise FetchArgumentError(f"user_id must be in [0, 2**63), got {value}")
    return value


def _as_array(name: str, values: object) -> np.ndarray:
    """``np.asarray(values)``; :class:`FetchArgumentError` when numpy refuses (ragged
    nesting, ...)."""
    try:
        return np.asarray(values)
    except (ValueError, TypeError) as exc:
        raise FetchArgumentError(f"{name} must be a sequence of numbers: {exc}") from None


def _at(arr: np.ndarray, bad: np.ndarray) -> str:
    """``"<value> at index <i>"`` of the first element flagged in the mask ``bad`` (called
    only once a vectorised check has found one)."""
    i = int(np.argmax(bad))
    return f"{arr[i].item()!r} at index {i}"


def _object_items(arr: np.ndarray) -> np.ndarray:
    """An object array (a pandas object column, Python ints numpy would not fit in one dtype)
    as int64 when every element is an integer (not a bool) in int64. The element types are
    gathered at C speed (``set(map(type, ...))``); only input that is refused is looked at
    one element at a time, for :class:`FetchArgumentError` to name the first bad one."""
    values = arr.tolist()
    kinds = set(map(type, values))
    if all(issubclass(k, numbers.Integral) and not issubclass(k, bool) for k in kinds):
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:  # named below
            pass
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise FetchArgumentError(f"item_ids must be integers, got {v!r} at index {i}")
        if not 0 <= v <= _INT64_MAX:
            which = "must be >= 0" if v < 0 else "hold integers outside int64"
            raise FetchArgumentError(f"item_ids {which}, got {v} at index {i}")
    return np.array(values, dtype=np.int64)


def _check_items(item_ids: Sequence[int] | np.ndarray, cap: int) -> np.ndarray:
    if isinstance(item_ids, str | bytes):
        raise FetchArgumentError("item_ids must be a sequence of integers, not a string")
    arr = item_ids if isinstance(item_ids, np.ndarray) else _as_array("item_ids", item_ids)
    if arr.ndim != 1:
        raise FetchArgumentError(f"item_ids must be one-dimensional, got shape {arr.shape}")
    if arr.size > cap:
        raise FetchArgumentError(f"{arr.size} item_ids exceed store.max_candidates ({cap})")
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype == np.int64:  # the hot path: one reduction
        if arr.min() < 0:
            raise FetchArgumentError(f"item_ids must be >= 0, got {_at(arr, arr < 0)}")
        return arr
    if arr.dtype == object:
        arr = _object_items(arr)
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise FetchArgumentError(f"item_ids must be integers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        finite = np.isfinite(arr)
        if not finite.all():
            raise FetchArgumentError(f"item_ids contain NaN or inf ({_at(arr, ~finite)})")
        whole = (arr == np.floor(arr)) & (np.abs(arr) < _EXACT_FLOAT)
        if not whole.all():
            raise FetchArgumentError(
                f"item_ids must be whole numbers below 2**53, got {_at(arr, ~whole)}"
            )
    elif np.issubdtype(arr.dtype, np.unsignedinteger) and arr.max() > _INT64_MAX:
        raise FetchArgumentError(
            f"item_ids hold integers outside int64, got {_at(arr, arr > _INT64_MAX)}"
        )
    if arr.min() < 0:
        raise FetchArgumentError(f"item_ids must be >= 0, got {_at(arr, arr < 0)}")
    return arr.astype(np.int64)


def _check_request_id(request_id: object) -> int:
    if isinstance(request_id, bool) or not isinstance(request_id, numbers.Integral):
        raise FetchArgumentError(f"request_id must be an integer, got {request_id!r}")
    value = int(request_id)
    if not 0 <= value <= _INT64_MAX:
        raise FetchArgumentError(f"request_id must be in [0, 2**63), got {value}")
    return value


def _check_scores(scores: Sequence[float] | np.ndarray, size: int) -> np.ndarray:
    """``scores`` as a new float32 array of ``size`` finite values; :class:`FetchArgumentError`
    else."""
    if isinstance(scores, str | bytes):
        raise FetchArgumentError("scores must be a sequence of numbers, not a string")
    arr = _as_array("scores", scores)
    if arr.ndim != 1:
        raise FetchArgumentError(f"scores must be one-dimensional, got shape {arr.shape}")
    if arr.size != size:
        raise FetchArgumentError(f"{arr.size} scores for {size} item_ids")
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise FetchArgumentError(f"scores must be numbers, got dtype {arr.dtype}")
    with np.errstate(over="ignore"):  # beyond float32 becomes inf: refused below
        out = np.array(arr, dtype=np.float32, copy=True)
    finite = np.isfinite(out)
    if not finite.all():
        raise FetchArgumentError(f"scores contain NaN or inf (as float32), got {_at(arr, ~finite)}")
    return out


def _check_now(now: object) -> int | float:
    if now is None:
        return int(time.time())
    try:
        return epoch_seconds(now, "now")
    except ValueError as exc:  # the contract's check, as this client's argument error
        raise FetchArgumentError(str(exc)) from None


def _is_timeout(exc: BaseException) -> bool:
    """A timeout, also when wrapped (a cluster client reports one as a cluster error)."""
    import socket

    import redis

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, redis.TimeoutError | socket.timeout | TimeoutError):
            return True
        if "Timeout" in type(seen).__name__ or "timed out" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _failure_kind(exc: BaseException) -> str:
    """The :class:`FetchStats` counter of a failed fetch: ``timeouts``,
    ``connection_errors`` (refused, reset, unreachable; also when wrapped) or
    ``other_errors``."""
    import redis

    if _is_timeout(exc):
        return "timeouts"
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, redis.ConnectionError | OSError):
            return "connection_errors"
        seen = seen.__cause__ or seen.__context__
    return "other_errors"


class SolarisFeatures:
    """Fetch the VM's SOLARIS features for one request in one round trip, within a bound.

    Args:
        cfg: settings; uses ``cfg.store`` (bounds, breaker, miss stream, TTLs, strategy) and
            the serving views' read TTLs and ``cfg.model.z_dim``.
        redis: Redis connection string (``host:port[,db=N][,password=..][,ssl=true]``), for
            the online store and the miss stream.
        fm_version: the FM/autoencoder version the VM was trained on; rows of any other
            version are misses.
        store: an already-built ``feast.FeatureStore`` (tests, or a process that shares
            one); it keeps its own connection settings, so the time bound is only as good as
            its socket timeouts. Without it the store is built from ``cfg`` and ``redis`` with
            sockets that time out at ``fetch_timeout_ms`` and no retries.
        metrics_registry: the ``prometheus_client.CollectorRegistry`` that :attr:`metrics`
            registers on (``prometheus_client.REGISTRY``: the process's global one); default:
            one of this client's own (``features.metrics.registry``).
        metrics_publish_s: how often a window of the metrics goes to the namespace's
            ``<namespace>:serving_metrics`` stream (for the candidates DAG's run record), from
            a daemon thread; ``None``: only on :meth:`close` and when
            ``features.metrics.publish()`` is called.

    Building the store (whose import alone takes seconds) happens in :meth:`warm_up`, or
    lazily on the first fetch. Thread-safe.
    """

    def __init__(
        self,
        cfg: SolarisConfig,
        *,
        redis: str | RedisTarget,
        fm_version: str,
        store=None,  # feast.FeatureStore, imported lazily
        metrics_registry: CollectorRegistry | None = None,
        metrics_publish_s: float | None = PUBLISH_EVERY_S,
    ) -> None:
        fm_version = check_fm_version(fm_version, "fm_version")  # FmVersionError names it
        if not redis:
            raise FetchArgumentError("redis connection string is empty")
        self.cfg = cfg
        self.namespace = Namespace.of(cfg)  # whose keys and streams this client reads and writes
        self.redis = RedisTarget.of(redis)
        self.fm_version = fm_version
        self.stats = FetchStats()
        s = cfg.store
        self.timeout_s = s.fetch_timeout_ms / 1000.0
        self.z_dim = cfg.model.z_dim
        self._tier_settings = tier_settings(cfg)
        self._read_ttls = {t: self._tier_settings[f"{t}_ttl_s"] for t in TIERS}
        # assemble_tiers with this client's settings checked once, not per request.
        self._assemble = TierAssembly(fm_version=fm_version, **self._tier_settings)
        self._online: SolarisOnlineStore | None = None  # the store's, on first read
        self._store = store
        self._service = None
        self._store_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(s.max_concurrent_fetches)
        self.breaker = CircuitBreaker(s.breaker_failures, s.breaker_cooldown_ms / 1000.0)
        self._miss_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="solaris-miss")
        self._miss_client = None
        self._miss_client_lock = threading.Lock()
        # Queued writes per stream, each bounded on its own: a burst of misses never crowds
        # out the request log (keyed by the counter their drops go to).
        self._pending_writes: dict[str, set[Future]] = {
            "misses_dropped": set(),
            "requests_dropped": set(),
        }
        self._last_warning = -math.inf
        self._live_marked = cfg.replay  # only the writer thread reads and sets it
        self._partitions_checked = False  # set once the namespace's count agreed
        self._nearline = (
            NearlineSelector(
                self.namespace,
                PAIR.params(cfg),
                fm_version,
                share=cfg.selection.share,
                maxlen=cfg.nearline.stream_maxlen,
                pending_s=cfg.nearline.pending_seconds,
                refresh_after=cfg.nearline.refresh_after_requests,
                refresh_share=cfg.nearline.refresh_share,
            )
            if cfg.nearline.enabled
            else None
        )
        self.metrics = ServingMetrics(
            self.namespace.name, self._metrics_state, registry=metrics_registry
        )
        self.metrics.publish_to(
            self._misses_client, self.namespace.serving_metrics_stream, metrics_publish_s
        )

    # -- set-up ------------------------------------------------------------------------------

    def _ensure_store(self):
        """``(store, feature_service)``, building them once (thread-safe)."""
        if self._service is not None:
            return self._store, self._service
        with self._store_lock:
            if self._service is None:
                if self._store is None:
                    from solaris.store.feast_store import open_feature_store

                    self._store = open_feature_store(
                        self.cfg,
                        serving_target(self.redis, self.timeout_s),
                        online={"retries": 0},
                    )
                self._service = self._store.get_feature_service(FEATURE_SERVICE)
        return self._store, self._service

    def warm_up(self) -> None:
        """Do the one-off work of a first fetch now, off any request: build the Feast store
        and the miss client, load the compiled tier assembly for this client's record layout
        (:func:`~solaris.serving.tiers.load_assembly`: seconds on a machine's first run,
        then cached on disk), and make one one-row read on the request path, which opens its
        connection; the result is discarded (the read may fail while Redis is down,
        harmlessly; it is not counted in :attr:`stats`). Configuration or registry errors
        raise, and so does a ``cycle.partitions`` other than the namespace's recorded count
        (:class:`~solaris.store.partitions.PartitionCountError`): requests logged by that
        count would go to streams the cycle does not drain."""
        store, service = self._ensure_store()
        client = self._misses_client()
        load_assembly(self.z_dim, self.fm_version, self.cfg.store.nbr_strategy)
        try:
            self._check_partitions(client)
        except PartitionCountError:
            raise  # a process that would log requests no cycle drains does not start
        except Exception as exc:  # Redis down: the writer checks before its first entry
            log.info("warm-up partition check failed (%s: %s)", type(exc).__name__, exc)
        try:
            self._read(store, service, 0, np.zeros(1, np.int64), int(time.time()))
        except Exception as exc:  # Redis down at start-up is not an error here
            log.info("warm-up read failed (%s: %s)", type(exc).__name__, exc)

    def _check_partitions(self, client: Redis | RedisCluster) -> None:
        """This client's ``cycle.partitions`` against the namespace's recorded count (once
        it agreed, never again): :func:`~solaris.store.partitions.record_partition_count`."""
        if self._partitions_checked:
            return
        record_partition_count(
            client,
            self.namespace,
            self.cfg.cycle.partitions,
            who=f"serving in namespace {self.namespace.name!r}",
        )
        self._partitions_checked = True

    @property
    def store(self):
        """The ``feast.FeatureStore`` (built on first access)."""
        return self._ensure_store()[0]

    def _misses_client(self) -> Redis | RedisCluster:
        """The Redis client of the stream writes and metrics windows (built once; the writer
        and the metrics publisher threads may both ask first)."""
        if self._miss_client is None:
            from solaris.connection import redis_client

            with self._miss_client_lock:
                if self._miss_client is None:
                    self._miss_client = redis_client(
                        self.redis,
                        redis_type=self.cfg.store.redis_type,
                        timeout_s=max(self.timeout_s, 0.001),
                        retries=0,
                    )
        return self._miss_client

    # -- the request path --------------------------------------------------------------------

    def _warn(self, msg: str, *args: object) -> None:
        """``log.warning`` at most once per ``_WARN_EVERY_S`` (an outage is one message, not
        one per request); the counts in :attr:`stats` stay exact."""
        now = time.monotonic()
        with self._stats_lock:
            if now - self._last_warning < _WARN_EVERY_S:
                return
            self._last_warning = now
        log.warning(msg + " (stats: %s)", *args, self.stats.as_dict())

    def _bump(self, **deltas: int) -> None:
        with self._stats_lock:
            for name, delta in deltas.items():
                setattr(self.stats, name, getattr(self.stats, name) + delta)

    @staticmethod
    def _get_online(store, service, user_id: int, items: np.ndarray, now: float):
        return store.get_online_features(
            features=service,
            entity_rows={
                USER_ID: np.full(len(items), user_id, np.int64),
                ITEM_ID: items,
                REQUEST_TS: now,
            },
            full_feature_names=True,
        )

    def _read(self, store, service, user_id: int, items: np.ndarray, now: float):
        """The tier views' rows of one request, in one round trip: the online store's
        request path, or Feast's ``get_online_features`` where that path does not apply."""
        online = self._online
        if online is None:
            from solaris.store.feast_store import online_store_of

            online = self._online = online_store_of(store)
        rows = online.read_user(
            store.config, store.registry, store.project, service, user_id, items
        )
        if rows is None:
            response = self._get_online(store, service, user_id, items, now)
            rows = {tier: response.rows(tier) for tier in TIERS}
        return rows

    def fetch(
        self,
        user_id: int,
        item_ids: Sequence[int] | np.ndarray,
        now: int | float | None = None,
    ) -> TierFeatures:
        """SOLARIS features of ``user_id`` × ``item_ids``, one row per item, input order.

        Args:
            user_id: the requesting user (integer in ``[0, 2**63)``).
            item_ids: the final-stage candidates (integers in ``[0, 2**63)``, at most
                ``store.max_candidates``; duplicates allowed).
            now: the request time in epoch seconds (default: wall clock). TTLs are measured
                from it and rows computed after it are not used (replays pass the log time).

        Returns:
            :class:`~solaris.serving.tiers.TierFeatures`; all-missing (zeros) when the store
            failed, timed out, or the request was shed (see the module docstring).

        Raises:
            FetchArgumentError: for invalid arguments (a ``ValueError``). Store errors never
                raise.
        """
        return self._fetch(user_id, item_ids, now, False)[0]

    def fetch_with_statuses(
        self,
        user_id: int,
        item_ids: Sequence[int] | np.ndarray,
        now: int | float | None = None,
    ) -> tuple[TierFeatures, dict[str, np.ndarray], bytes]:
        """:meth:`fetch`, with each serving view's ``[N]`` Feast ``FieldStatus`` (int32:
        PRESENT, NOT_FOUND, OUTSIDE_MAX_AGE, by the rule ``feast serve`` reports) and the
        outcome: ``b"ok"``, or ``b"failed"`` / ``b"shed"`` when the store did not answer
        (then every status is NOT_FOUND). The binary endpoint answers with these."""
        return self._fetch(user_id, item_ids, now, True)

    def _fetch(self, user_id, item_ids, now, with_statuses: bool):
        user = _check_user(user_id)
        items = _check_items(item_ids, self.cfg.store.max_candidates)
        now = _check_now(now)
        if items.size == 0:
            return self._answer(empty_tiers(0, self.z_dim), None, now, with_statuses, b"ok")
        self._bump(requests=1)
        if not self.breaker.allow():
            self._bump(failures=1, shed_open=1)
            self.metrics.observe_shed(items.size)
            return self._answer(
                empty_tiers(items.size, self.z_dim), None, now, with_statuses, b"shed"
            )
        if not self._slots.acquire(blocking=False):
            self._bump(failures=1, shed_busy=1)
            self.metrics.observe_shed(items.size)
            self._warn("%d fetches in flight: shedding", self.cfg.store.max_concurrent_fetches)
            return self._answer(
                empty_tiers(items.size, self.z_dim), None, now, with_statuses, b"shed"
            )
        start = time.monotonic()
        try:
            store, service = self._ensure_store()
            rows = self._read(store, service, user, items, now)
        except Exception as exc:  # Redis or Feast failure: never into the VM
            self.breaker.record(False)
            elapsed = time.monotonic() - start
            self._bump(failures=1, **{_failure_kind(exc): 1})
            self.metrics.observe_failure(elapsed, items.size)
            self._warn(
                "feature fetch failed after %.0f ms (%s: %s): serving zeros",
                elapsed * 1000,
                type(exc).__name__,
                exc,
            )
            return self._answer(
                empty_tiers(items.size, self.z_dim), None, now, with_statuses, b"failed"
            )
        finally:
            self._slots.release()
        self.breaker.record(True)
        out = self._assemble(rows, now)
        # The fetch's latency: read and assembly, not the queueing of its misses.
        self.metrics.observe_fetch(time.monotonic() - start, out.mask)
        if not out.mask[:, 0].all():
            self._log_misses(user, items[~out.mask[:, 0]], int(now))
        return self._answer(out, rows, now, with_statuses, b"ok")

    def _answer(self, out: TierFeatures, rows, now, with_statuses: bool, outcome: bytes):
        if not with_statuses:
            return out, None, outcome
        from solaris.store.response import NOT_FOUND, row_status  # Feast's statuses

        n = len(out)
        if rows is None:
            statuses = {t: np.full(n, NOT_FOUND, np.int32) for t in TIERS}
        else:
            statuses = {
                t: np.broadcast_to(row_status(rows[t], self._read_ttls[t], now), (n,))
                for t in TIERS
            }
        return out, statuses, outcome

    def _metrics_state(self) -> ClientState:
        """The counts and backlogs :attr:`metrics` reads at scrape and publish time."""
        with self._stats_lock:
            stats = self.stats.as_dict()
            backlog = {
                dropped: sum(not f.done() for f in queued)
                for dropped, queued in self._pending_writes.items()
            }
        return ClientState(
            stats,
            miss_backlog=backlog["misses_dropped"],
            request_log_backlog=backlog["requests_dropped"],
            breaker_open=self.breaker.state != "closed",
        )

    # -- the miss stream ---------------------------------------------------------------------

    def _submit(self, fn: Callable[..., None], *args: object, dropped: str) -> None:
        """Queue ``fn(*args)`` on the one writer thread, off the request path. Beyond
        ``_MAX_PENDING_WRITES`` queued writes of its stream (Redis slow or down), or once the
        client is closed, the write is dropped and counted in ``stats.<dropped>``, never
        raised."""
        with self._stats_lock:
            pending = {f for f in self._pending_writes[dropped] if not f.done()}
            self._pending_writes[dropped] = pending
            if len(pending) >= _MAX_PENDING_WRITES:
                setattr(self.stats, dropped, getattr(self.stats, dropped) + 1)
                return
            try:
                future = self._miss_pool.submit(fn, *args)
            except RuntimeError:  # the client was closed: the entry is dropped, not raised
                setattr(self.stats, dropped, getattr(self.stats, dropped) + 1)
                return
            pending.add(future)

    def _log_misses(self, user: int, items: np.ndarray, ts: int) -> None:
        """Queue the XADD off the request path (bounded backlog; drops are counted)."""
        self._submit(self._write_misses, user, items, ts, dropped="misses_dropped")

    def _write_misses(self, user: int, items: np.ndarray, ts: int) -> None:
        stream, maxlen = self.namespace.miss_stream, self.cfg.store.miss_stream_maxlen
        try:
            append_misses(self._misses_client(), stream, maxlen, user, items, ts)
        except Exception as exc:  # the stream is best effort; serving goes on
            self._bump(misses_dropped=1)
            self._warn("miss stream append failed (%s: %s)", type(exc).__name__, exc)
        else:
            self._bump(misses_logged=1)

    # -- the request log ---------------------------------------------------------------------

    def log_request(
        self,
        request_id: int,
        user_id: int,
        item_ids: Sequence[int] | np.ndarray,
        scores: Sequence[float] | np.ndarray,
        now: int | float | None = None,
    ) -> None:
        """Record one served request (its candidates and the verifier's scores) in the
        request-log stream, off the request path.

        The candidates DAG drains the stream each interval into the training rows of the next
        verifier (:mod:`solaris.serving.request_log`); the entry goes to the request stream
        of the user's partition (``<namespace>:requests`` with one partition,
        :meth:`~solaris.namespace.Namespace.request_stream_of`), each bounded by
        ``store.request_log_maxlen`` entries. The
        arguments are checked here, on the calling thread; the ``XADD`` runs on the writer
        thread of the miss stream (:meth:`flush` waits for it), so a slow or dead Redis never
        delays the caller: the entry is dropped and counted (``stats.requests_dropped``), and
        so is every entry of a client whose ``cycle.partitions`` is not the namespace's
        recorded count (warned, never appended to a stream no cycle drains). On
        live traffic (``replay: false``) the first entry also marks the namespace as holding
        live state (:attr:`~solaris.namespace.Namespace.live_key`), which a reset or a replay
        into it must then be forced past.

        Args:
            request_id: the request's id (integer in ``[0, 2**63)``), unique per request: the
                drain de-duplicates on ``(request_id, item_id)``.
            user_id: the requesting user (integer in ``[0, 2**63)``).
            item_ids: the candidates served (as for :meth:`fetch`; none: nothing is logged).
            scores: the verifier's score of each candidate: one-dimensional, one per item,
                finite as float32.
            now: the request time in epoch seconds (default: wall clock); stored as
                ``int(now)``.

        Raises:
            FetchArgumentError: for invalid arguments (a ``ValueError``). Redis errors never
                raise.
        """
        rid = _check_request_id(request_id)
        user = _check_user(user_id)
        items = _check_items(item_ids, self.cfg.store.max_candidates)
        values = _check_scores(scores, items.size)
        ts = int(_check_now(now))
        if items.size == 0:
            return
        # Copies: the caller may reuse its arrays before the writer thread reads them.
        items = np.array(items, dtype=np.int64, copy=True)
        self._submit(self._write_request, rid, user, items, values, ts, dropped="requests_dropped")

    @cached_property
    def _partitions(self) -> Partitioning:
        return Partitioning(self.cfg.cycle.partitions)

    def _request_log(self, user: int) -> str:
        """The request-log stream of ``user``'s partition in this client's namespace."""
        parts = self._partitions
        return self.namespace.request_stream_of(parts.of_user(user), parts)

    def _write_request(
        self, rid: int, user: int, items: np.ndarray, scores: np.ndarray, ts: int
    ) -> None:
        client = self._misses_client()
        nearline = None
        if self._nearline is not None:
            try:
                nearline = self._nearline.select(client, user, items, scores, ts)
            except Exception as exc:  # the cycle selects for this request instead
                self._bump(nearline_failed=1)
                self._warn("near-line selection failed (%s: %s)", type(exc).__name__, exc)
            else:
                self._bump(nearline_logged=int(len(nearline) > 0))
        try:
            # Never append to a stream the cycle does not drain: a request refused here is
            # dropped, counted and warned about, not lost without a word.
            self._check_partitions(client)
            if not self._live_marked:  # live traffic: the namespace holds live state
                marker = json.dumps({"first_request_ts": ts, "request_id": rid})
                client.set(self.namespace.live_key, marker, nx=True)
                self._live_marked = True
            stream, maxlen = self._request_log(user), self.cfg.store.request_log_maxlen
            append_request(client, stream, maxlen, rid, user, items, scores, ts, nearline=nearline)
        except Exception as exc:  # the log is best effort; serving goes on
            self._bump(requests_dropped=1)
            self._warn("request log append failed (%s: %s)", type(exc).__name__, exc)
        else:
            self._bump(requests_logged=1)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait for queued miss-stream and request-log writes; True when none is left
        pending."""
        deadline = time.monotonic() + timeout_s
        with self._stats_lock:
            pending = [f for queued in self._pending_writes.values() for f in queued]
        for future in pending:
            try:
                future.result(timeout=max(deadline - time.monotonic(), 0))
            except FutureTimeout:
                return False
        return True

    def close(self) -> None:
        """Stop the stream writer (pending writes finish first), publish the last metrics
        window, and close the client."""
        self.metrics.stop()
        self._miss_pool.shutdown(wait=True)
        self.metrics.publish()
        if self._miss_client is not None:
            self._miss_client.close()

    def __enter__(self) -> SolarisFeatures:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
