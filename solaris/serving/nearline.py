"""The near-line path's serving half: selection as a request is logged, and the embed stream.

With ``nearline.enabled``, :meth:`~solaris.serving.client.SolarisFeatures.log_request`
selects on its writer thread (off the request path, after the request-log entry is queued):

1. one pipelined round trip reads the request's candidates from the user's ``pair`` hash
   and from the user's *pending* hash (``<ns>:nlpend:{u:<id>}``, item field → the epoch
   second it was selected, 8 bytes little-endian); a candidate is skipped when its code is
   fresh at the request's time for this client's ``fm_version`` (the serving rule,
   :meth:`~solaris.store.codec.ViewRows.fresh`) or it was selected less than
   ``nearline.pending_seconds`` ago;
   With ``nearline.refresh_after_requests`` = ``K`` (refresh on activity), the same round
   trip reads the user's last ``K`` request seconds (``<ns>:nlact:{u:<id>}``, a list, newest
   first) and pushes this one: a fresh code is stale when ``K`` of the user's earlier
   requests came after it was written, and the request's best stale codes, up to
   ``nearline.refresh_share`` of its candidates (a budget of their own), are selected again;
2. the request's top ``selection.share`` of the rest by the verifier's score
   (:func:`solaris.selection.top_share`, the cycle's rule) become one entry of the
   namespace's embed stream (``<ns>:embed``, exact ``MAXLEN`` of ``nearline.stream_maxlen``
   entries), and are marked pending, in a second round trip.

Entry fields: ``user`` and ``ts`` (decimals) and ``items`` (the selected item ids as
little-endian int64 bytes). The embedder (``solaris nearline``,
:mod:`solaris.orchestration.nearline`) reads them through a consumer group and checks
every entry with :func:`parse_entry`: anyone who can write to Redis can write one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import redis

from solaris.namespace import Namespace
from solaris.selection import top_share
from solaris.serving.streams import parse_user_items
from solaris.store.codec import decode_records
from solaris.store.contract import FM_VERSION, PAIR, ViewParams
from solaris.store.keys import member_field_list, partition_key, view_key

if TYPE_CHECKING:
    from redis.cluster import RedisCluster

__all__ = [
    "EmbedEntry",
    "NearlineSelector",
    "activity_key",
    "fresh_codes",
    "parse_entry",
    "pending_key",
    "written_codes",
]

_NO_MARK = b"\x00" * 8


def pending_key(namespace: str, user: int) -> str:
    """The hash of ``user``'s pending selections: in the user's slot, under the namespace."""
    return f"{namespace}:nlpend:{{u:{int(user)}}}"


def activity_key(namespace: str, user: int) -> str:
    """The list of ``user``'s last request seconds (refresh on activity), in the user's slot."""
    return f"{namespace}:nlact:{{u:{int(user)}}}"


def fresh_codes(
    records: list[bytes | None],
    now: int,
    pair: ViewParams,
    fm_version: bytes,
    written_from: int | np.ndarray | None = None,
) -> np.ndarray:
    """``[N]`` bool: which ``HMGET`` replies of the ``pair`` view hold a code fresh at ``now``
    for ``fm_version``, by the rule serving applies (the selection and the embedder skip
    those); with ``written_from`` (epoch seconds, one or ``[N]``), only a code written at or
    after it counts."""
    rows = decode_records(PAIR, pair, records)
    fresh = rows.fresh(now, pair.read_ttl_s) & (rows.values[FM_VERSION] == fm_version)
    if written_from is not None:
        fresh &= rows.event_us >= np.multiply(written_from, 1_000_000, dtype=np.int64)
    return fresh


def written_codes(
    client: redis.Redis | RedisCluster,
    project: str,
    pair: ViewParams,
    fm_version: str,
    users: np.ndarray,
    items: np.ndarray,
    now: int,
    written_from: np.ndarray,
) -> np.ndarray:
    """``[N]`` bool: which ``(users[k], items[k])`` pairs have a ``pair`` code fresh at
    ``now`` for ``fm_version`` and written at or after ``written_from[k]`` (epoch seconds):
    one pipelined ``HMGET`` per user (:func:`fresh_codes`). The embedder skips those; the
    cycle marks only those of the pairs serving selected near-line as fresh (the rest were
    trimmed from the embed stream, or not embedded yet, and the cycle takes them back)."""
    users = np.asarray(users, dtype=np.int64)
    items = np.asarray(items, dtype=np.int64)
    if not len(users):
        return np.zeros(0, dtype=bool)
    order = np.argsort(users, kind="stable")
    sorted_users = users[order]
    bounds = np.flatnonzero(np.diff(sorted_users)) + 1
    prefix = view_key(project, PAIR)
    pipe = client.pipeline(transaction=False)
    for rows in np.split(order, bounds):
        pipe.hmget(partition_key(prefix, PAIR, int(users[rows[0]])), member_field_list(items[rows]))
    replies = [r for reply in pipe.execute() for r in reply]
    written_from = np.broadcast_to(np.asarray(written_from, dtype=np.int64), users.shape)
    fresh = fresh_codes(replies, now, pair, fm_version.encode(), written_from[order])
    out = np.empty(len(users), dtype=bool)
    out[order] = fresh
    return out


@dataclass(frozen=True)
class EmbedEntry:
    """One checked embed-stream entry: ``user``'s ``items`` selected by a request at ``ts``."""

    user: int
    ts: int
    items: np.ndarray  # [k] int64


def parse_entry(
    raw: object, max_items: int | None = None, not_before: int | None = None
) -> EmbedEntry:
    """An embed-stream entry's fields, checked (the miss stream's format,
    :func:`~solaris.serving.streams.parse_user_items`; an entry stamped before
    ``not_before``, the embedder's ``cycle.start``, is refused); ``ValueError`` saying what
    is wrong."""
    user, ts, blob = parse_user_items(raw, max_items, not_before)
    return EmbedEntry(user, ts, np.frombuffer(blob, dtype="<i8").astype(np.int64))


class NearlineSelector:
    """Serving-time selection into the embed stream for one namespace and FM version.

    Args:
        namespace: whose keys (``<name>:pair:...``) and embed stream
            (:attr:`~solaris.namespace.Namespace.embed_stream`) it uses.
        pair: the ``pair`` view's settings (``PAIR.params(cfg)``): its read TTL decides
            what is fresh.
        fm_version: the version the VM reads; a code of another version is not fresh.
        share, maxlen, pending_s: ``selection.share``, ``nearline.stream_maxlen``,
            ``nearline.pending_seconds``.
        refresh_after, refresh_share: ``nearline.refresh_after_requests`` (0: no refresh on
            activity) and ``nearline.refresh_share``.
    """

    def __init__(
        self,
        namespace: Namespace,
        pair: ViewParams,
        fm_version: str,
        *,
        share: float,
        maxlen: int,
        pending_s: float,
        refresh_after: int = 0,
        refresh_share: float = 0.02,
    ) -> None:
        self.namespace = namespace.name
        self.stream = namespace.embed_stream
        self._pair_prefix = view_key(namespace.project, PAIR)
        self._params = pair
        self._version = fm_version.encode()
        self._share = share
        self._maxlen = int(maxlen)
        self._pending_s = float(pending_s)
        self._refresh_after = int(refresh_after)
        self._refresh_share = refresh_share
        # The activity list outlives every code it can make stale.
        self._activity_ttl_s = max(1, int(np.ceil(pair.read_ttl_s)))

    def select(
        self, client: redis.Redis, user: int, items: np.ndarray, scores: np.ndarray, ts: int
    ) -> np.ndarray:
        """Select among one logged request's candidates and queue them; returns the item ids
        put into the embed stream (``[k]`` int64: the refreshed ones, then the new ones, each
        best first; none when every candidate is fresh or pending). Redis errors propagate
        (the caller runs this off the request path and counts them)."""
        fields = member_field_list(items)
        key = partition_key(self._pair_prefix, PAIR, user)
        pending = pending_key(self.namespace, user)
        read = client.pipeline(transaction=False)
        read.hmget(key, fields)
        read.hmget(pending, fields)
        k = self._refresh_after
        if k:
            activity = activity_key(self.namespace, user)
            read.lindex(activity, k - 1)  # the k-th latest earlier request, before this one
            read.lpush(activity, ts)
            read.ltrim(activity, 0, k - 1)
            read.expire(activity, self._activity_ttl_s)
        records, marks, *rest = read.execute()
        fresh = fresh_codes(records, ts, self._params, self._version)
        waiting = np.frombuffer(b"".join(m or _NO_MARK for m in marks), "<i8") > (
            ts - self._pending_s
        )
        chosen = items[top_share(items, scores, fresh | waiting, self._share)]
        if k and rest[0] is not None:
            # Refresh on activity: a fresh code written before the user's k-th latest earlier
            # request is stale; the best of those are selected again on their own budget.
            stale = fresh & ~fresh_codes(records, ts, self._params, self._version, int(rest[0]))
            again = items[top_share(items, scores, ~stale | waiting, self._refresh_share)]
            chosen = np.concatenate([again, chosen])
        if len(chosen) == 0:
            return chosen
        write = client.pipeline(transaction=False)
        write.xadd(
            self.stream,
            {"user": user, "ts": ts, "items": np.ascontiguousarray(chosen, "<i8").tobytes()},
            maxlen=self._maxlen,
            approximate=False,
        )
        stamp = np.int64(ts).astype("<i8").tobytes()
        write.hset(pending, mapping=dict.fromkeys(member_field_list(chosen), stamp))
        write.expire(pending, max(1, int(np.ceil(self._pending_s))))
        write.execute()
        return chosen
