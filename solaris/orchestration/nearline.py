"""The near-line embedder: codes seconds after the request, beside the interval cycle.

``solaris nearline --namespace NAME`` runs :class:`NearlineEmbedder`: a long-running process
that reads the namespace's embed stream (filled by serving, :mod:`solaris.serving.nearline`)
through the Redis Streams consumer group ``nearline.group`` and, per micro-batch of up to
``nearline.batch_pairs`` pairs or ``nearline.batch_ms`` from its first entry:

1. checks every entry (:func:`~solaris.serving.nearline.parse_entry`); a malformed one,
   or one stamped before ``cycle.start`` or over a day past the wall clock, is counted,
   acknowledged and deleted, never retried and never blocking the stream;
2. drops pairs whose code is already fresh for the current ``fm_version`` and was written
   at or after the request that selected them (a pair listed twice, or delivered twice,
   costs one forward pass; a pair selected for refresh on activity is embedded again);
3. runs FM → autoencoder → ``z`` on the configured device with the user's history as of the
   request (:func:`~solaris.pipeline.embed.embed_pairs`), stamped with the wall-clock
   second it is written, so it serves requests from then on and the offline join sees it
   no earlier than serving did;
4. writes the ``pair`` view as the batch path does (:func:`~solaris.pipeline.materialize.
   materialize`: offline rows staged, Redis, offline rows published), clears the pairs'
   pending marks, then acknowledges and deletes the entries.

**At-least-once.** An entry is acknowledged only after its codes are in Redis, so a
consumer killed mid-batch leaves its entries pending in the group; after
``nearline.claim_idle_ms`` another consumer takes them over (``XAUTOCLAIM``) and writes
them again; the write is idempotent (the same fields of the same hashes). Several consumers
of one group split the stream. SIGTERM (:meth:`NearlineEmbedder.stop`) finishes the batch in
hand and returns.

Each consumer logs its throughput, lag (request → code written) and the group's backlog
every ``log_every_s`` seconds and keeps its last figures as JSON in the namespace's
``<ns>:nearline_status`` hash (the page and ``make bench`` read them).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from solaris.config import SolarisConfig
from solaris.namespace import Namespace
from solaris.serving.nearline import EmbedEntry, parse_entry, pending_key, written_codes
from solaris.serving.streams import as_bytes, stream_error

if TYPE_CHECKING:
    import pandas as pd
    import redis as redis_py

    from solaris.connection import RedisTarget

__all__ = [
    "NearlineEmbedder",
    "NearlineStats",
    "consumer_name",
    "read_status",
    "summarize_status",
]

log = logging.getLogger(__name__)

# Entries asked for per XREADGROUP / XAUTOCLAIM call (a request holds a handful of pairs).
_READ_ENTRIES = 512
# How long an idle consumer blocks in XREADGROUP before it looks for abandoned entries.
_IDLE_BLOCK_MS = 1_000
# Lags kept for the percentiles of the status (the most recent ones).
_LAGS_KEPT = 20_000


def consumer_name() -> str:
    """The default consumer name: host and process, unique among live consumers."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class NearlineStats:
    """What one consumer did since it started.

    Attributes:
        entries: entries taken (read or reclaimed), malformed ones included.
        pairs_read: the pairs those entries hold (readable ones).
        reclaimed: entries taken over from another consumer (``XAUTOCLAIM``).
        malformed: entries skipped as unreadable (acknowledged and deleted).
        pairs: distinct pairs of the batches.
        embedded: pairs run through the FM and written.
        skipped_fresh: pairs whose code was already fresh (no forward pass).
        batches: micro-batches written.
        busy_seconds: seconds spent embedding and writing.
        faults: Redis faults ridden out (connection lost, timeout, group gone).
    """

    entries: int = 0
    pairs_read: int = 0
    reclaimed: int = 0
    malformed: int = 0
    pairs: int = 0
    embedded: int = 0
    skipped_fresh: int = 0
    batches: int = 0
    busy_seconds: float = 0.0
    faults: int = 0
    lags: deque = field(default_factory=lambda: deque(maxlen=_LAGS_KEPT), repr=False)

    def figures(self) -> dict[str, Any]:
        """The counters and the lag percentiles (seconds, request → code written)."""
        out = {k: v for k, v in asdict(self).items() if k != "lags"}
        lags = np.asarray(self.lags, np.float64)
        for q in (50, 95, 99):
            out[f"lag_p{q}_s"] = round(float(np.percentile(lags, q)), 3) if len(lags) else None
        return out


class NearlineEmbedder:
    """One consumer of a namespace's embed stream (see the module docstring).

    Args:
        cfg: settings: ``nearline`` (group, batch, claim), the ``pair`` view, the models.
        redis: the Redis (the store and the stream).
        consumer: this consumer's name in the group (default :func:`consumer_name`).
        log_every_s: how often the throughput, lag and backlog are logged and published.
    """

    def __init__(
        self,
        cfg: SolarisConfig,
        redis: str | RedisTarget,
        *,
        consumer: str | None = None,
        log_every_s: float = 10.0,
    ) -> None:
        from solaris import adapters
        from solaris.connection import redis_client
        from solaris.models.device import resolve_device
        from solaris.orchestration.layout import CycleLayout
        from solaris.orchestration.resources import feature_store
        from solaris.pipeline.codes import load_autoencoder
        from solaris.store.contract import PAIR
        from solaris.store.partitions import record_partition_count

        self.cfg = cfg
        self.namespace = Namespace.of(cfg)
        self.stream = self.namespace.embed_stream
        self.group = cfg.nearline.group
        self.consumer = consumer or consumer_name()
        self.stats = NearlineStats()
        self._log_every_s = log_every_s
        self._stop = threading.Event()
        self._claim_cursor = "0-0"
        self._pair = PAIR.params(cfg)
        self._device = resolve_device(cfg.device)
        self._fm = adapters.foundation_model(cfg)
        self._autoencoder, self.fm_version = load_autoencoder(
            CycleLayout(self.namespace).models_dir, self._fm
        )
        self._store = feature_store(cfg, redis)
        self._redis = redis_client(redis, redis_type=cfg.store.redis_type, timeout_s=30.0)
        # One partition count per namespace, whoever uses it (refused by name otherwise).
        record_partition_count(
            self._redis,
            self.namespace,
            cfg.cycle.partitions,
            who=f"the near-line embedder in namespace {self.namespace.name!r}",
        )
        self._ensure_group()

    # -- the loop ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask :meth:`run` to return once the batch in hand is written (signal-safe)."""
        self._stop.set()

    def run(self, *, max_seconds: float | None = None) -> NearlineStats:
        """Embed micro-batches until :meth:`stop` (or ``max_seconds``); returns the stats."""
        began = time.monotonic()
        window = (began, 0)  # the last report's time and embedded count
        while not self._stop.is_set():
            if max_seconds is not None and time.monotonic() - began >= max_seconds:
                break
            try:
                entries = self._next_batch()
                if entries:
                    self.process(entries)
                if time.monotonic() - window[0] >= self._log_every_s:
                    window = self._report(began, window)
            except Exception as exc:  # Redis faults are ridden out; the rest is raised
                self._after_fault(exc)
        try:
            self._report(began, window)
        except Exception as exc:  # the last status line is best effort
            log.warning("nearline %s: last status not published (%s)", self.consumer, exc)
        return self.stats

    def _after_fault(self, exc: Exception) -> None:
        """Ride out a Redis fault: a lost connection or a timeout waits a second and tries
        again (entries of an unfinished batch stay pending and are reclaimed); a group that
        vanished (a Redis restarted without persistence) is created again. Anything else is
        raised."""
        import redis as redis_py

        self.stats.faults += 1
        if isinstance(exc, redis_py.ConnectionError | redis_py.TimeoutError | OSError):
            log.warning("nearline %s: Redis unreachable (%s); retrying", self.consumer, exc)
            self._stop.wait(1.0)
            return
        if isinstance(exc, redis_py.ResponseError) and "NOGROUP" in str(exc):
            log.warning("nearline %s: the group is gone (%s); creating it", self.consumer, exc)
            self._claim_cursor = "0-0"
            self._ensure_group()
            return
        if isinstance(exc, redis_py.ResponseError) and "WRONGTYPE" in str(exc):
            raise stream_error(self.stream, exc) from exc
        raise exc

    def close(self) -> None:
        self._redis.close()

    def _ensure_group(self) -> None:
        """Create the consumer group (from the stream's first entry, so entries serving
        wrote before any embedder ran are embedded too); an existing group is kept."""
        import redis as redis_py

        try:
            self._redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis_py.ResponseError as exc:
            if "WRONGTYPE" in str(exc):
                raise stream_error(self.stream, exc) from exc
            if "BUSYGROUP" not in str(exc):
                raise

    def _wanted(self, pairs: int) -> int:
        """Entries to ask for to reach ``batch_pairs`` from ``pairs``, at the pairs per
        entry seen so far (a request selects a handful)."""
        seen = max(self.stats.pairs_read, 1) / max(self.stats.entries, 1)
        left = self.cfg.nearline.batch_pairs - pairs
        return int(min(_READ_ENTRIES, max(1, left // max(seen, 1.0))))

    def _next_batch(self) -> list[tuple[bytes, Any]]:
        """The next micro-batch's raw entries: abandoned ones first, then new ones until
        ``batch_pairs`` pairs (counted from the entries' sizes) or ``batch_ms``."""
        entries = self._reclaim()
        limit = self.cfg.nearline.batch_pairs
        pairs = sum(_size(raw) for _, raw in entries)
        deadline = None
        while pairs < limit and not self._stop.is_set():
            if deadline is None:
                block = _IDLE_BLOCK_MS if not entries else 1
            else:
                # At most a second per call: a stop (SIGTERM) is seen within it, since a
                # blocked read resumes after the signal handler has run.
                block = min(int((deadline - time.monotonic()) * 1000), _IDLE_BLOCK_MS)
                if block <= 0:
                    break
            reply = self._redis.xreadgroup(
                self.group,
                self.consumer,
                {self.stream: ">"},
                count=self._wanted(pairs),
                block=block,
            )
            got = reply[0][1] if reply else []
            if not got:
                if deadline is None:
                    break  # idle: let the caller log and look for abandoned entries
                continue
            if deadline is None:
                deadline = time.monotonic() + self.cfg.nearline.batch_ms / 1000.0
            for entry_id, raw in got:
                entries.append((as_bytes(entry_id), raw))
                pairs += _size(raw)
        self.stats.entries += len(entries)
        self.stats.pairs_read += pairs
        return entries

    def _reclaim(self) -> list[tuple[bytes, Any]]:
        """Entries other consumers took and left unacknowledged for ``claim_idle_ms``."""
        reply = self._redis.xautoclaim(
            self.stream,
            self.group,
            self.consumer,
            min_idle_time=int(self.cfg.nearline.claim_idle_ms),
            start_id=self._claim_cursor,
            count=self._wanted(0),
        )
        cursor, claimed = reply[0], reply[1]
        self._claim_cursor = as_bytes(cursor).decode()
        # Entries deleted while pending are not claimed: Redis 7 drops them from the pending
        # list and names them in reply[2], so nothing is left to acknowledge for them.
        taken = [(as_bytes(i), raw) for i, raw in claimed]
        self.stats.reclaimed += len(taken)
        return taken

    # -- one micro-batch ---------------------------------------------------------------------

    def process(self, entries: list[tuple[bytes, Any]]) -> int:
        """Embed and write one micro-batch of raw entries, then acknowledge them; returns
        the pairs embedded."""
        began = time.monotonic()
        good: list[EmbedEntry] = []
        not_before = int(self.cfg.cycle.start.timestamp())  # a 1970 entry: embedded as of 1970
        for entry_id, raw in entries:
            try:
                good.append(parse_entry(raw, self.cfg.store.max_candidates, not_before))
            except ValueError as exc:
                self.stats.malformed += 1
                log.warning("embed stream %s: entry %s skipped: %s", self.stream, entry_id, exc)
        embedded = 0
        if good:
            pairs = _pairs(good)
            self.stats.pairs += len(pairs)
            fresh = self._fresh(pairs, int(time.time()), pairs["ts"].to_numpy(np.int64))
            self.stats.skipped_fresh += int(fresh.sum())
            pairs = pairs[~fresh]
            if len(pairs):
                embedded = self._write(pairs, entries[0][0])
        ids = [entry_id for entry_id, _ in entries]
        pipe = self._redis.pipeline(transaction=False)
        pipe.xack(self.stream, self.group, *ids)
        pipe.xdel(self.stream, *ids)
        pipe.execute()
        done = time.time()
        self.stats.lags.extend(done - e.ts for e in good)
        self.stats.batches += 1
        self.stats.embedded += embedded
        self.stats.busy_seconds += time.monotonic() - began
        return embedded

    def _fresh(self, pairs: pd.DataFrame, now: int, written_from: np.ndarray) -> np.ndarray:
        """``[N]`` pairs whose code is fresh at ``now`` for the current ``fm_version`` and
        written at or after ``written_from`` (epoch seconds):
        :func:`~solaris.serving.nearline.written_codes`."""
        return written_codes(
            self._redis,
            self.namespace.project,
            self._pair,
            self.fm_version,
            pairs["user_id"].to_numpy(np.int64),
            pairs["item_id"].to_numpy(np.int64),
            now,
            written_from,
        )

    def _write(self, pairs: pd.DataFrame, first_id: bytes) -> int:
        """FM → autoencoder → ``pair`` view for ``pairs`` (sorted by user), pending marks
        cleared; returns how many."""
        from solaris.pipeline.embed import embed_pairs
        from solaris.pipeline.materialize import materialize, pair_rows
        from solaris.store.keys import member_field_list

        as_of = pairs["ts"].to_numpy(np.int64)
        computed_at = np.maximum(as_of, int(time.time()))
        table = embed_pairs(
            pairs,
            fm=self._fm,
            autoencoder=self._autoencoder,
            computed_at=computed_at,
            as_of=as_of,
            fm_version=self.fm_version,
            device=self._device,
        )
        batch_id = f"nearline-{first_id.decode().replace('-', '_')}-{self.consumer}"
        materialize(
            self._store,
            "pair",
            pair_rows(table, z_dim=self.cfg.model.z_dim, source=self.stream),
            batch_id=_safe(batch_id),
        )
        items = pairs["item_id"].to_numpy(np.int64)
        pipe = self._redis.pipeline(transaction=False)
        for user, rows in _user_runs(pairs["user_id"].to_numpy(np.int64)):
            pipe.hdel(pending_key(self.namespace.name, user), *member_field_list(items[rows]))
        pipe.execute()
        return len(pairs)

    # -- reporting ---------------------------------------------------------------------------

    def backlog(self) -> dict[str, int | None]:
        """``backlog``: entries not yet delivered to any consumer; ``pending``: delivered,
        not acknowledged. Acknowledged entries are deleted, so the stream holds exactly
        these two: the backlog is its length less the group's pending count (``XINFO
        GROUPS``'s own ``lag`` is unknown once ``MAXLEN`` has trimmed unread entries)."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.xlen(self.stream)
        pipe.xinfo_groups(self.stream)
        length, groups = pipe.execute()
        for group in groups:
            if as_bytes(group.get("name")).decode() == self.group:
                pending = int(group["pending"])
                return {"backlog": max(int(length) - pending, 0), "pending": pending}
        return {"backlog": int(length), "pending": None}

    def _report(self, began: float, window: tuple[float, int]) -> tuple[float, int]:
        """Log and publish the figures; the rate is over the window since the last report.
        Returns the next window's start."""
        now = time.monotonic()
        figures = self.stats.figures() | self.backlog()
        figures |= {
            "consumer": self.consumer,
            "at": round(time.time(), 3),
            "uptime_s": round(now - began, 1),
            "pairs_per_s": round((self.stats.embedded - window[1]) / max(now - window[0], 1e-9), 1),
        }
        self._redis.hset(self.namespace.nearline_status, self.consumer, json.dumps(figures))
        log.info(
            "nearline %s: %d pairs embedded (%.1f/s), %d fresh skipped, %d malformed, "
            "%d reclaimed; lag p50 %s s, p95 %s s; backlog %s entries, %s pending",
            self.consumer,
            figures["embedded"],
            figures["pairs_per_s"],
            figures["skipped_fresh"],
            figures["malformed"],
            figures["reclaimed"],
            figures["lag_p50_s"],
            figures["lag_p95_s"],
            figures["backlog"],
            figures["pending"],
        )
        return now, self.stats.embedded


def read_status(client: redis_py.Redis, namespace: Namespace) -> dict[str, dict[str, Any]]:
    """Every consumer's last published figures (consumer → figures)."""
    raw = client.hgetall(namespace.nearline_status)
    return {as_bytes(k).decode(): json.loads(v) for k, v in raw.items()}


def summarize_status(
    status: dict[str, dict[str, Any]], now: float, recent_s: float = 300.0
) -> dict[str, Any] | None:
    """The near-line path at ``now``, for a run record: the consumers that published in the
    last ``recent_s`` seconds, their summed pairs/s (of their last window) and embedded
    pairs, the worst lag p95, and the group's backlog and pending entries; None when no
    consumer did."""
    live = [f for f in status.values() if now - float(f.get("at", 0)) <= recent_s]
    if not live:
        return None

    def worst(key: str) -> float | None:
        values = [f[key] for f in live if f.get(key) is not None]
        return max(values) if values else None

    return {
        "consumers": len(live),
        "pairs_per_s": round(sum(float(f.get("pairs_per_s") or 0) for f in live), 1),
        "embedded": sum(int(f.get("embedded") or 0) for f in live),
        "malformed": sum(int(f.get("malformed") or 0) for f in live),
        "lag_p95_s": worst("lag_p95_s"),
        "backlog": worst("backlog"),
        "pending": worst("pending"),
    }


def _user_runs(users: np.ndarray) -> list[tuple[int, slice]]:
    """``(user, rows)`` of each run of one user in ``users`` (sorted by user)."""
    bounds = np.flatnonzero(np.diff(users)) + 1
    starts, stops = np.r_[0, bounds], np.r_[bounds, len(users)]
    return [(int(users[a]), slice(a, b)) for a, b in zip(starts, stops, strict=True)]


def _size(raw: Any) -> int:
    """Pairs an entry holds, from the length of its ``items`` field (0 if unreadable)."""
    if not isinstance(raw, dict):
        return 0
    blob = raw.get(b"items", raw.get("items"))
    return len(blob) // 8 if isinstance(blob, bytes | str) else 0


def _pairs(entries: list[EmbedEntry]) -> pd.DataFrame:
    """The distinct ``(user_id, item_id)`` of the entries with the latest request ``ts`` of
    each (the freshest history), sorted by user."""
    import pandas as pd

    lengths = np.fromiter((len(e.items) for e in entries), np.int64, len(entries))
    frame = pd.DataFrame(
        {
            "user_id": np.repeat([e.user for e in entries], lengths).astype(np.int64),
            "item_id": np.concatenate([e.items for e in entries]),
            "ts": np.repeat([e.ts for e in entries], lengths).astype(np.int64),
        }
    )
    frame = frame.sort_values(["user_id", "item_id", "ts"], kind="stable")
    return frame.drop_duplicates(["user_id", "item_id"], keep="last", ignore_index=True)


def _safe(batch_id: str) -> str:
    """A batch id the offline store accepts (``[A-Za-z0-9_.-]``)."""
    return "".join(c if c.isalnum() or c in "_.-" else "_" for c in batch_id)
