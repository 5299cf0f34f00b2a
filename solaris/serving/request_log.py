"""The request log: every served request's candidates and the verifier's scores.

Serving appends one Redis stream entry per request (:func:`append_request`: ``XADD`` with an
exact ``MAXLEN``, so the stream never holds more than ``maxlen`` entries; the oldest are
dropped first). The candidates DAG drains it once per interval.

Entry fields: ``rid`` (the request id, decimal), ``user`` (decimal), ``ts`` (epoch seconds,
decimal), ``items`` (the candidate ids as little-endian int64 bytes) and ``scores`` (the
verifier's scores as little-endian float32 bytes, one per item): one entry per request
instead of one per candidate. With the near-line path on, ``nl`` holds the items serving
already put into the embed stream (int64 bytes, :mod:`solaris.serving.nearline`): the
drain marks those rows (``nearline``) and the cycle spends no budget on them.

**Exactly once.** Unlike the miss stream (whose drain deletes what it returns in one atomic
step, because a lost miss only costs a later pair code), a lost request-log row is a lost
training row, so reading and deleting are separate steps and the guarantee lives in the
caller: *read, store, then delete; a retried run re-reads entries it had not deleted yet and
de-duplicates on (request_id, item_id)*. That is:

1. :func:`read_request_log` returns the rows of the entries stamped before the interval's
   end, and their ids; nothing is deleted, so a run that dies here loses nothing;
2. the caller writes the interval's table atomically (write-then-rename), merged with what an
   earlier attempt of the same interval wrote and de-duplicated on ``(request_id, item_id)``,
   so a retry that re-reads entries an earlier attempt stored adds nothing twice;
3. only then :func:`delete_entries` removes exactly those ids; entries appended meanwhile,
   and entries stamped at or after the interval's end (``later``), stay for the next run.

Both ends check the entries: :func:`append_request` refuses ids outside ``[0, 2**63)``, times
that are not epoch seconds, scores that are not finite and scores that do not match the
items; :func:`read_request_log` skips (and reports) any entry it cannot read, and returns its
id with the good ones, so that a bad entry, whoever wrote it, is deleted with them instead of
being read (and reported) by every run forever.

Only single-key commands are used (``XADD``, ``XRANGE``, ``XDEL``), so the same code runs
on ``redis.Redis`` and ``redis.cluster.RedisCluster``.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import redis

from solaris.serving.streams import (
    StreamEntryError,
    as_bytes,
    check_items,
    check_stamp,
    decimal,
    entry_fields,
    stream_error,
    warn_skipped,
)
from solaris.store.contract import (
    ITEM_ID,
    MAX_EPOCH_S,
    REQUEST_ID,
    SCORE,
    USER_ID,
    epoch_seconds,
)

__all__ = [
    "NEARLINE",
    "REQUEST_ID",
    "SCORE",
    "RequestLogBatch",
    "append_request",
    "delete_entries",
    "read_request_log",
    "stream_entries",
]

log = logging.getLogger(__name__)

NEARLINE = "nearline"  # the row's pair went to the embed stream as it was logged

_INT_COLUMNS = (REQUEST_ID, USER_ID, ITEM_ID, "ts")
_FIELDS = (b"rid", b"user", b"ts", b"items", b"scores")
# XRANGE pages: bounds each reply (and the client's memory per call) on a long stream.
_PAGE = 1_000
# XDEL ids per call: keeps each command's argument list small.
_DELETE_CHUNK = 1_000


def append_request(
    client: redis.Redis,
    stream: str,
    maxlen: int,
    request_id: int,
    user_id: int,
    item_ids: Sequence[int] | np.ndarray,
    scores: Sequence[float] | np.ndarray,
    ts: int,
    *,
    nearline: np.ndarray | None = None,
) -> bytes | None:
    """Append one served request; returns the entry id (``None`` if it had no items).

    ``nearline``: the item ids serving already selected into the embed stream (stored as
    the ``nl`` field when there are any).

    ``maxlen`` is applied exactly (``MAXLEN = maxlen``, not ``~``), so the stream is bounded
    by ``maxlen`` entries (requests), each holding ``12 · len(item_ids)`` bytes of ids and
    scores. Raises ``ValueError`` for ids outside ``[0, 2**63)``, a ``ts`` that is not
    integer epoch seconds, ``scores`` of another length than ``item_ids`` or not finite (as
    float32); Redis errors propagate (the serving client runs this off the request path).
    """
    if maxlen <= 0:
        raise StreamEntryError(f"maxlen must be > 0, got {maxlen}")
    for name, value, high in (
        ("request_id", request_id, 2**63),
        ("user_id", user_id, 2**63),
        ("ts", ts, MAX_EPOCH_S),
    ):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise StreamEntryError(f"request entry {name} must be an integer, got {value!r}")
        if not 0 <= int(value) < high:
            raise StreamEntryError(f"request entry {name} {value!r} is out of range")
    raw_items = np.asarray(item_ids)
    raw_scores = np.asarray(scores)
    if raw_items.ndim != 1 or raw_scores.ndim != 1:
        raise StreamEntryError("request entry item_ids and scores must be one-dimensional")
    if raw_items.size != raw_scores.size:
        raise StreamEntryError(
            f"request entry has {raw_items.size} item ids but {raw_scores.size} scores"
        )
    if raw_items.size == 0:
        return None
    if (
        not np.issubdtype(raw_items.dtype, np.integer)
        or (raw_items < 0).any()
        or raw_items.max() >= 2**63
    ):
        raise StreamEntryError("request entry item ids must be integers in [0, 2**63)")
    if raw_scores.dtype == np.bool_ or not (
        np.issubdtype(raw_scores.dtype, np.floating) or np.issubdtype(raw_scores.dtype, np.integer)
    ):
        raise StreamEntryError(
            f"request entry scores must be numbers, got dtype {raw_scores.dtype}"
        )
    with np.errstate(over="ignore"):  # a float64 beyond float32 becomes inf: refused below
        values = np.ascontiguousarray(raw_scores, dtype="<f4")
    if not np.isfinite(values).all():
        raise StreamEntryError("request entry scores must be finite (as float32)")
    fields = {
        "rid": int(request_id),
        "user": int(user_id),
        "ts": int(ts),
        "items": np.ascontiguousarray(raw_items, dtype="<i8").tobytes(),
        "scores": values.tobytes(),
    }
    if nearline is not None and len(nearline):
        fields["nl"] = np.ascontiguousarray(nearline, dtype="<i8").tobytes()
    return client.xadd(stream, fields, maxlen=int(maxlen), approximate=False)


@dataclass
class RequestLogBatch:
    """What one read returned; nothing of it has been deleted from the stream yet.

    Attributes:
        rows: one row per candidate of the entries stamped before ``before``, in stream
            order: int64 ``request_id``, ``user_id``, ``item_id``, ``ts``, float32
            ``score`` and bool ``nearline`` (serving selected the pair near-line).
        ids: the entries the caller may delete once it has stored ``rows``: those rows'
            entries *and* the skipped ones (a bad entry is removed, not read forever).
        later: entries stamped at or after ``before``, left for a later run (not in ``ids``).
        skipped: unreadable entries as ``(id, why)`` (also logged, and in ``ids``).
    """

    rows: pd.DataFrame
    ids: list[bytes] = field(default_factory=list)
    later: int = 0
    skipped: list[tuple[bytes, str]] = field(default_factory=list)


def read_request_log(
    client: redis.Redis,
    stream: str,
    *,
    before: int,
    count: int | None = None,
    max_items: int | None = None,
) -> RequestLogBatch:
    """Read the oldest ``count`` entries (all when ``None``) of the request log; delete none.

    Entries stamped ``ts < before`` become :attr:`RequestLogBatch.rows` (and their ids
    :attr:`~RequestLogBatch.ids`); later ones are only counted. ``count`` limits the entries
    looked at, whatever their stamp. An absent stream gives an empty batch. Delete the ids
    with :func:`delete_entries` only after the rows are stored (see the module docstring).
    Unreadable entries (:mod:`solaris.serving.streams`; ``max_items``: the most candidates
    an entry may hold) are skipped; a key of another type is a
    :class:`~solaris.serving.streams.StreamError`.
    """
    before = epoch_seconds(before, "before")
    if count is not None and (
        isinstance(count, bool) or not isinstance(count, numbers.Integral) or count <= 0
    ):
        raise StreamEntryError(f"count must be an integer > 0 or None, got {count!r}")
    ids: list[bytes] = []
    skipped: list[tuple[bytes, str]] = []
    later = 0
    parsed: list[tuple[int, int, int, bytes, bytes, bytes]] = []
    for entry_id, raw in stream_entries(client, stream, None if count is None else int(count)):
        try:
            entry = _parse_entry(raw, max_items)
        except ValueError as exc:
            skipped.append((entry_id, str(exc)))
            ids.append(entry_id)
            continue
        if entry[2] >= before:
            later += 1
            continue
        parsed.append(entry)
        ids.append(entry_id)
    warn_skipped(log, "request log (entries to be deleted)", stream, skipped)
    return RequestLogBatch(_rows(parsed), ids, later, skipped)


def delete_entries(client: redis.Redis, stream: str, ids: Sequence[bytes | str]) -> int:
    """``XDEL`` ``ids`` from ``stream`` in chunks of 1000; returns how many were deleted
    (ids already gone, e.g. trimmed by ``MAXLEN``, are not counted)."""
    deleted = 0
    ids = list(ids)
    for lo in range(0, len(ids), _DELETE_CHUNK):
        deleted += int(client.xdel(stream, *ids[lo : lo + _DELETE_CHUNK]))
    return deleted


def stream_entries(
    client: redis.Redis, stream: str, count: int | None = None
) -> Iterator[tuple[bytes, Any]]:
    """``(id, fields)`` of the stream's oldest ``count`` entries (all when ``None``), oldest
    first, fetched a page at a time (the next page starts after the last id seen, so
    deleting a page's entries while iterating does not disturb the next)."""
    start = "-"
    left = count
    while left is None or left > 0:
        page = _PAGE if left is None else min(_PAGE, left)
        try:
            entries = client.xrange(stream, min=start, max="+", count=page)
        except redis.ResponseError as exc:
            raise stream_error(stream, exc) from None
        for entry_id, raw in entries:
            yield as_bytes(entry_id), raw
        if len(entries) < page:
            return
        if left is not None:
            left -= len(entries)
        start = b"(" + as_bytes(entries[-1][0])


def _rows(parsed: list[tuple[int, int, int, bytes, bytes, bytes]]) -> pd.DataFrame:
    """One row per candidate of the parsed entries (one ``frombuffer`` per column)."""
    if not parsed:
        frame = pd.DataFrame({c: np.zeros(0, dtype=np.int64) for c in _INT_COLUMNS})
        frame[SCORE] = np.zeros(0, dtype=np.float32)
        frame[NEARLINE] = np.zeros(0, dtype=bool)
        return frame
    rids, users, times, item_blobs, score_blobs, nl_blobs = zip(*parsed, strict=True)
    lengths = np.fromiter((len(b) // 8 for b in item_blobs), dtype=np.int64, count=len(parsed))
    frame = pd.DataFrame(
        {
            REQUEST_ID: np.repeat(np.asarray(rids, np.int64), lengths),
            USER_ID: np.repeat(np.asarray(users, np.int64), lengths),
            ITEM_ID: np.frombuffer(b"".join(item_blobs), dtype="<i8").astype(np.int64),
            "ts": np.repeat(np.asarray(times, np.int64), lengths),
        }
    )
    frame[SCORE] = np.frombuffer(b"".join(score_blobs), dtype="<f4").astype(np.float32)
    frame[NEARLINE] = _nearline_rows(frame, rids, nl_blobs)
    return frame


def _nearline_rows(
    frame: pd.DataFrame, rids: tuple[int, ...], blobs: tuple[bytes, ...]
) -> np.ndarray:
    """``[rows]`` bool: the row's (request, item) is among its entry's ``nl`` items."""
    out = np.zeros(len(frame), dtype=bool)
    if not any(blobs):
        return out
    lengths = np.fromiter((len(b) // 8 for b in blobs), dtype=np.int64, count=len(blobs))
    marked = pd.MultiIndex.from_arrays(
        [
            np.repeat(np.asarray(rids, np.int64), lengths),
            np.frombuffer(b"".join(blobs), dtype="<i8").astype(np.int64),
        ]
    )
    rows = pd.MultiIndex.from_arrays([frame[REQUEST_ID].to_numpy(), frame[ITEM_ID].to_numpy()])
    return rows.isin(marked)


def _parse_entry(raw, max_items: int | None = None) -> tuple[int, int, int, bytes, bytes, bytes]:
    """``(request id, user, ts, item bytes, score bytes, near-line item bytes)`` of one
    entry; ``ValueError`` saying what is wrong."""
    try:
        fields = entry_fields(raw)
    except (TypeError, ValueError) as exc:
        raise StreamEntryError(f"malformed fields ({exc})") from None
    missing = [k.decode() for k in _FIELDS if k not in fields]
    if missing:
        raise StreamEntryError(f"missing fields {missing}")
    rid = decimal(fields[b"rid"], "rid", 2**63)
    user = decimal(fields[b"user"], "user", 2**63)
    ts = decimal(fields[b"ts"], "ts", MAX_EPOCH_S)
    check_stamp(ts)
    items, scores = fields[b"items"], fields[b"scores"]
    if not items or len(items) % 8:
        raise StreamEntryError(f"items must be int64 bytes, got {len(items)} bytes")
    check_items(len(items) // 8, max_items)
    if len(scores) != len(items) // 2:
        raise StreamEntryError(
            f"scores must be one float32 per item: {len(items) // 8} items, "
            f"{len(scores)} score bytes"
        )
    if (np.frombuffer(items, dtype="<i8") < 0).any():
        raise StreamEntryError("negative item id")
    if not np.isfinite(np.frombuffer(scores, dtype="<f4")).all():
        raise StreamEntryError("score not finite")
    nearline = fields.get(b"nl", b"")
    if len(nearline) % 8 or len(nearline) > len(items):
        raise StreamEntryError(
            f"nl must be at most the entry's items as int64, got {len(nearline)} bytes"
        )
    return rid, user, ts, items, scores, nearline
