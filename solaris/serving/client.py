"""The serving client: one Feast call per ranking request, tier fallback, bounded time.

::

    features = SolarisFeatures(cfg, redis="10.0.0.5:6379,db=0", fm_version="fm-2024-06-01")
    features.warm_up(freeze_gc=True)         # at start-up: first-call work, off any request
    out = features.fetch(user_id, candidate_item_ids)
    out.features  # [N, 4·d] float32;  out.mask [N, 4] bool;  out.tier [N] str

Each :meth:`SolarisFeatures.fetch` makes exactly one ``get_online_features`` call through
the ``solaris_serving`` FeatureService (pair + nbr + uagg + iagg, one Redis pipeline inside
Feast), then :func:`~solaris.serving.tiers.assemble_tiers` applies the read TTLs, the
``fm_version`` guard and the leakage-free user mean (Feast's online read applies none of
them, see DESIGN §4). Items whose pair tier is missing are appended to the miss stream off the
request path.

Freshness is read from each view's ``computed_at`` *feature*, not from Feast's per-feature
event timestamps, so the call does not ask for them (``to_dict(include_event_timestamps=
True)``): ``get_historical_features`` returns the feature but not the timestamps, and
training must apply the same rule to the same value. (Asking for them cost ~1–2 ms more per
300-item fetch here.)

Failure policy: the VM must never wait long nor see an exception because of the feature
store. The Feast call runs on a worker thread and the caller waits at most
``cfg.store.fetch_timeout_ms``; on a timeout or any Redis/Feast error ``fetch`` returns
:func:`~solaris.serving.tiers.empty_tiers` (zeros, empty masks, tier ``"none"``) and counts
it in :attr:`SolarisFeatures.stats`. The Feast connection string also gets
``socket_timeout``/``socket_connect_timeout`` so a stuck socket ends and frees its worker
(:func:`serving_connection_string`), redis-py's retry back-off is switched off, and while
every worker is still stuck a request is answered with zeros at once (``stats.shed``).
Only bad *arguments* raise (``ValueError``).

Latency caveat: a full garbage collection of a process that has Feast, pandas and Airflow
loaded holds the GIL for ~130 ms, longer than any thread-based bound can cut short; serving
processes should call ``warm_up(freeze_gc=True)`` once after start-up (see
:meth:`SolarisFeatures.warm_up`).
"""

from __future__ import annotations

import gc
import logging
import math
import numbers
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass

import numpy as np

from solaris.config import SolarisConfig
from solaris.serving.misses import append_misses
from solaris.serving.tiers import TierFeatures, assemble_tiers, empty_tiers, tier_settings

__all__ = ["FEATURE_SERVICE", "FetchStats", "SolarisFeatures", "serving_connection_string"]

log = logging.getLogger(__name__)

FEATURE_SERVICE = "solaris_serving"
_MAX_PENDING_MISS_WRITES = 256  # beyond this (Redis slow or down) miss entries are dropped
_WARN_EVERY_S = 10.0


@dataclass
class FetchStats:
    """Counters of one client (thread-safe increments through :meth:`SolarisFeatures`).

    Attributes:
        requests: ``fetch`` calls with at least one item.
        failures: requests answered with :func:`empty_tiers` because the store failed or
            was too slow (timeouts included).
        timeouts: the subset of ``failures`` that hit ``fetch_timeout_ms``.
        misses_logged: miss-stream entries (one per request with pair misses) written.
        shed: the subset of ``failures`` answered at once because all ``max_workers`` workers
            were still busy with earlier calls (a hanging Redis), without calling Feast.
        misses_dropped: miss entries not written (Redis error, or too many writes pending).
    """

    requests: int = 0
    failures: int = 0
    timeouts: int = 0
    shed: int = 0
    misses_logged: int = 0
    misses_dropped: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def serving_connection_string(connection: str, timeout_s: float) -> str:
    """``connection`` with the options the request path needs, for Feast's redis-py client.

    * ``socket_timeout`` and ``socket_connect_timeout`` = ``timeout_s``: a stuck socket
      ends, so its worker thread is freed;
    * ``driver_info=null``: no ``CLIENT SETINFO`` on connect. redis-py otherwise calls
      ``importlib.metadata.version("redis")`` for *every new connection*; in the test process
      that took ~150 ms and starved the waiting caller thread, so every reconnect (after a
      timeout) overran the fetch bound.

    Options already present are kept (an operator's explicit choice wins). Feast JSON-decodes
    each ``key=value`` and passes it to ``redis.Redis``.
    """
    parts = [p for p in connection.split(",") if p]
    keys = {p.split("=", 1)[0] for p in parts if "=" in p}
    wanted = {
        "socket_timeout": f"{timeout_s:g}",
        "socket_connect_timeout": f"{timeout_s:g}",
        "driver_info": "null",
    }
    parts += [f"{k}={v}" for k, v in wanted.items() if k not in keys]
    return ",".join(parts)


def _prepare_online_client(store, *, own: bool) -> None:
    """Create the Feast online store's redis-py client now (it connects only on first use).

    redis-py's client constructor may read the package metadata (``importlib.metadata``,
    ~150 ms in the test process, starving the caller thread that waits on the worker), so a
    first fetch would overrun its bound. For a store this client built itself (``own``),
    redis-py's default retries (3, with exponential back-off: ~3–9 s against a refused port)
    are also turned off: the fetch bound is the retry policy, and a worker stuck in back-off
    sleeps is a worker lost for the next requests. Uses Feast internals
    (``RedisOnlineStore._get_client``); if they change, this quietly does nothing.
    """
    try:
        online_store = store._get_provider().online_store
        client = online_store._get_client(store.config.online_store)
    except Exception as exc:  # a different store type, or Feast internals moved
        log.debug("could not pre-build the online store client: %s", exc)
        return
    if own and hasattr(client, "set_retry"):
        client.set_retry(_no_retry())


def _no_retry():
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return Retry(NoBackoff(), 0)


def _check_user(user_id: object) -> int:
    if isinstance(user_id, bool) or not isinstance(user_id, numbers.Real):
        raise ValueError(f"user_id must be an integer, got {user_id!r}")
    if isinstance(user_id, numbers.Integral):
        value = int(user_id)
    else:
        f = float(user_id)
        if not math.isfinite(f) or not f.is_integer():
            raise ValueError(f"user_id must be a whole number, got {user_id!r}")
        value = int(f)
    if value < 0:
        raise ValueError(f"user_id must be >= 0, got {value}")
    return value


def _check_items(item_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    if isinstance(item_ids, str | bytes):
        raise ValueError("item_ids must be a sequence of integers, not a string")
    arr = np.asarray(item_ids)
    if arr.ndim != 1:
        raise ValueError(f"item_ids must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise ValueError(f"item_ids must be integers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.isfinite(arr).all():
            raise ValueError("item_ids contain NaN or inf")
        if (arr != np.floor(arr)).any():
            raise ValueError("item_ids must be whole numbers")
    if (arr < 0).any():
        raise ValueError("item_ids must be >= 0")
    return arr.astype(np.int64)


class SolarisFeatures:
    """Fetch the VM's SOLARIS features for one request in one Feast call, within a bound.

    Args:
        cfg: settings; uses ``cfg.store`` (timeout, miss stream, TTLs, strategy),
            ``cfg.selection.ttl_hours`` (pair/nbr read TTL) and ``cfg.model.z_dim``.
        redis: Feast Redis connection string (``host:port[,db=N][,password=..][,ssl=true]``),
            used for the online store and for the miss stream.
        fm_version: the FM/autoencoder version the VM was trained on; rows of any other
            version are misses.
        store: an already-built ``feast.FeatureStore`` (tests, or a process that shares
            one). Without it the store is built on first use from ``cfg`` and ``redis`` with
            the options of :func:`serving_connection_string`; a supplied store keeps its own
            connection settings (and redis-py's default retries).

    The store (whose import alone takes seconds) is built lazily by the first fetch, inside
    the time bound, so that first fetch may return zeros; call :meth:`warm_up` at start-up
    to build it outside any request. Thread-safe: ``fetch`` may be called concurrently;
    ``max_workers`` Feast calls run at once (more are shed, see :class:`FetchStats`).
    """

    def __init__(
        self,
        cfg: SolarisConfig,
        *,
        redis: str,
        fm_version: str,
        store=None,  # feast.FeatureStore, imported lazily
        max_workers: int = 4,
    ) -> None:
        if not isinstance(fm_version, str) or not fm_version:
            raise ValueError(f"fm_version must be a non-empty string, got {fm_version!r}")
        if not redis:
            raise ValueError("redis connection string is empty")
        self.cfg = cfg
        self.redis = redis
        self.fm_version = fm_version
        self.stats = FetchStats()
        s = cfg.store
        self.timeout_s = s.fetch_timeout_ms / 1000.0
        self.z_dim = cfg.model.z_dim
        self._tier_settings = tier_settings(cfg)
        self._store = store
        self._service = None
        self._store_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self._max_workers = max_workers
        self._in_flight = 0  # Feast calls submitted and not finished (guarded by _stats_lock)
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="solaris-fetch")
        self._miss_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="solaris-miss")
        self._miss_client = None
        self._pending_misses: set[Future] = set()
        self._last_warning = -math.inf

    # -- set-up ------------------------------------------------------------------------------

    def feast_connection_string(self) -> str:
        """The connection string given to Feast (:func:`serving_connection_string`)."""
        return serving_connection_string(self.redis, max(self.timeout_s, 0.001))

    def _ensure_store(self):
        """``(store, feature_service)``, building them once (thread-safe)."""
        if self._service is not None:
            return self._store, self._service
        with self._store_lock:
            if self._service is None:
                if self._store is None:
                    from solaris.store.feast_store import open_feature_store

                    self._store = open_feature_store(self.cfg, self.feast_connection_string())
                    _prepare_online_client(self._store, own=True)
                else:
                    _prepare_online_client(self._store, own=False)
                self._service = self._store.get_feature_service(FEATURE_SERVICE)
        return self._store, self._service

    def warm_up(self, *, freeze_gc: bool = False) -> None:
        """Do the one-off work of a first fetch now, off any request.

        Builds the Feast store, its Redis client and the miss client, then makes one
        one-row ``get_online_features`` call whose result is discarded (it initialises
        Feast's request path; it may fail while Redis is down, harmlessly, and is not counted
        in :attr:`stats`). Configuration or registry errors raise.

        Args:
            freeze_gc: also run ``gc.collect(); gc.freeze()`` — a *process-wide* action, for
                the serving process to opt into once its imports are done. Reason: with
                Feast, pandas and Airflow loaded the heap holds ~370k objects, and a full
                (generation-2) garbage collection of it took ~134 ms here while holding the
                GIL, so no thread-based bound can interrupt it: a fetch that triggers one
                overruns ``fetch_timeout_ms``. Frozen start-up objects are never rescanned
                (measured: first fetch after warm-up 147 ms → 10 ms).
        """
        store, service = self._ensure_store()
        self._misses_client()
        try:
            self._get_online(store, service, 0, np.zeros(1, dtype=np.int64))
        except Exception as exc:  # Redis down at start-up is not an error here
            log.info("warm-up read failed (%s: %s)", type(exc).__name__, exc)
        if freeze_gc:
            gc.collect()
            gc.freeze()

    @property
    def store(self):
        """The ``feast.FeatureStore`` (built on first access)."""
        return self._ensure_store()[0]

    def _misses_client(self):
        if self._miss_client is None:
            from solaris.store.local_redis import client_from_connection_string

            client = client_from_connection_string(self.redis, timeout_s=max(self.timeout_s, 0.001))
            client.set_retry(_no_retry())  # best effort: never sit in back-off sleeps
            # No CLIENT SETINFO (and its per-connection package-metadata lookup), as for Feast.
            client.connection_pool.connection_kwargs["driver_info"] = None
            self._miss_client = client
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

    def _online(self, user_id: int, items: np.ndarray) -> dict:
        """The one Feast call; runs on a worker thread."""
        try:
            store, service = self._ensure_store()
            response = self._get_online(store, service, user_id, items)
        finally:
            with self._stats_lock:
                self._in_flight -= 1
        return response

    @staticmethod
    def _get_online(store, service, user_id: int, items: np.ndarray) -> dict:
        response = store.get_online_features(
            features=service,
            entity_rows={"user_id": [user_id] * len(items), "item_id": items.tolist()},
            full_feature_names=True,
        )
        return response.to_dict()

    def fetch(
        self,
        user_id: int,
        item_ids: Sequence[int] | np.ndarray,
        now: int | None = None,
    ) -> TierFeatures:
        """SOLARIS features of ``user_id`` × ``item_ids``, one row per item, input order.

        Args:
            user_id: the requesting user (integer >= 0).
            item_ids: the final-stage candidates (integers >= 0; duplicates allowed).
            now: the request time in epoch seconds (default: wall clock). TTLs are measured
                from it and rows computed after it are not used (replays pass the log time).

        Returns:
            :class:`~solaris.serving.tiers.TierFeatures`; all-missing (zeros) when the store
            failed or did not answer within ``cfg.store.fetch_timeout_ms``.

        Raises:
            ValueError: for invalid ids or ``now``. Store errors never raise.
        """
        user = _check_user(user_id)
        items = _check_items(item_ids)
        if now is None:
            now = int(time.time())
        elif isinstance(now, bool) or not isinstance(now, numbers.Real) or not math.isfinite(now):
            raise ValueError(f"now must be epoch seconds, got {now!r}")
        if items.size == 0:
            return empty_tiers(0, self.z_dim)

        start = time.monotonic()
        with self._stats_lock:
            self.stats.requests += 1
            if self._in_flight >= self._max_workers:
                # Every worker is still stuck on an earlier call (Redis hanging): answer now
                # instead of queueing work that could only time out.
                self.stats.failures += 1
                self.stats.shed += 1
                return empty_tiers(items.size, self.z_dim)
            self._in_flight += 1
        future = self._pool.submit(self._online, user, items)
        try:
            columns = future.result(timeout=self.timeout_s)
        except FutureTimeout:
            if future.cancel():  # had not started: its slot is free again
                with self._stats_lock:
                    self._in_flight -= 1
            self._bump(failures=1, timeouts=1)
            self._warn(
                "feature fetch timed out after %.0f ms (user %d, %d items): serving zeros",
                (time.monotonic() - start) * 1000,
                user,
                items.size,
            )
            return empty_tiers(items.size, self.z_dim)
        except Exception as exc:  # Redis or Feast failure: never into the VM
            self._bump(failures=1)
            self._warn("feature fetch failed (%s: %s): serving zeros", type(exc).__name__, exc)
            return empty_tiers(items.size, self.z_dim)

        out = assemble_tiers(columns, now, fm_version=self.fm_version, **self._tier_settings)
        missed = items[~out.mask[:, 0]]
        if missed.size:
            self._log_misses(user, missed, int(now))
        return out

    # -- the miss stream ---------------------------------------------------------------------

    def _log_misses(self, user: int, items: np.ndarray, ts: int) -> None:
        """Queue the XADD off the request path (bounded backlog; drops are counted)."""
        with self._stats_lock:
            self._pending_misses = {f for f in self._pending_misses if not f.done()}
            if len(self._pending_misses) >= _MAX_PENDING_MISS_WRITES:
                self.stats.misses_dropped += 1
                return
            future = self._miss_pool.submit(self._write_misses, user, items, ts)
            self._pending_misses.add(future)

    def _write_misses(self, user: int, items: np.ndarray, ts: int) -> None:
        s = self.cfg.store
        try:
            append_misses(
                self._misses_client(), s.miss_stream, s.miss_stream_maxlen, user, items, ts
            )
        except Exception as exc:  # the stream is best effort; serving goes on
            self._bump(misses_dropped=1)
            self._warn("miss stream append failed (%s: %s)", type(exc).__name__, exc)
        else:
            self._bump(misses_logged=1)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait for queued miss-stream writes; True when none is left pending."""
        deadline = time.monotonic() + timeout_s
        with self._stats_lock:
            pending = list(self._pending_misses)
        for future in pending:
            try:
                future.result(timeout=max(deadline - time.monotonic(), 0))
            except FutureTimeout:
                return False
        return True

    def close(self) -> None:
        """Stop the worker threads (pending miss writes finish first)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._miss_pool.shutdown(wait=True)
        if self._miss_client is not None:
            self._miss_client.close()

    def __enter__(self) -> SolarisFeatures:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
