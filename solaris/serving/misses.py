"""The miss stream: (user, item) pairs that serving wanted but found no fresh pair code for.

Serving appends one Redis stream entry per request (``XADD`` with an exact ``MAXLEN``, so the
stream never holds more than ``maxlen`` entries; the oldest are dropped first). The next
candidate-selection run drains it (:func:`drain_misses`): the entries it returns are deleted
in the same atomic step (a server-side script), so a second drain returns only entries
appended since, and two concurrent drainers never return the same entry.

Entry fields: ``user`` (decimal), ``ts`` (epoch seconds, decimal) and ``items`` (the item
ids as little-endian int64 bytes: one field per request instead of one entry per item).

Both ends check the entries: :func:`append_misses` refuses ids outside ``[0, 2**63)`` and
times that are not epoch seconds, and :func:`drain_misses` skips (and reports) any entry it
cannot read, so one bad entry, whoever wrote it, never costs the good ones.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import redis

from solaris.serving.streams import (
    StreamEntryError,
    as_bytes,
    parse_user_items,
    stream_error,
    warn_skipped,
)
from solaris.store.contract import ITEM_ID, MAX_EPOCH_S, USER_ID

__all__ = ["DrainedMisses", "append_misses", "drain_miss_entries", "drain_misses"]

log = logging.getLogger(__name__)

# Reads up to ARGV[1] entries from the head of the stream (ARGV[1] <= 0: all) and deletes
# them, atomically. XDEL in chunks keeps each call's argument list small.
_DRAIN_LUA = """
local entries
local n = tonumber(ARGV[1])
if n > 0 then
  entries = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', n)
else
  entries = redis.call('XRANGE', KEYS[1], '-', '+')
end
local ids = {}
for i, e in ipairs(entries) do
  ids[#ids + 1] = e[1]
  if #ids == 1000 then
    redis.call('XDEL', KEYS[1], unpack(ids))
    ids = {}
  end
end
if #ids > 0 then
  redis.call('XDEL', KEYS[1], unpack(ids))
end
return entries
"""

_COLUMNS = (USER_ID, ITEM_ID, "ts")


def append_misses(
    client: redis.Redis,
    stream: str,
    maxlen: int,
    user_id: int,
    item_ids: Sequence[int] | np.ndarray,
    ts: int,
) -> bytes | None:
    """Append one request's missed items; returns the entry id (``None`` if no items).

    ``maxlen`` is applied exactly (``MAXLEN = maxlen``, not ``~``), so the stream is bounded
    by ``maxlen`` entries (requests), each holding ``8 · len(item_ids)`` bytes of ids.
    Raises ``ValueError`` for ids outside ``[0, 2**63)`` or a ``ts`` that is not epoch
    seconds; Redis errors propagate (the serving client runs this off the request path).
    """
    if maxlen <= 0:
        raise StreamEntryError(f"maxlen must be > 0, got {maxlen}")
    for name, value, high in (("user_id", user_id, 2**63), ("ts", ts, MAX_EPOCH_S)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise StreamEntryError(f"miss entry {name} must be an integer, got {value!r}")
        if not 0 <= int(value) < high:
            raise StreamEntryError(f"miss entry {name} {value!r} is out of range")
    raw = np.asarray(item_ids)
    if raw.size == 0:
        return None
    if not np.issubdtype(raw.dtype, np.integer) or (raw < 0).any() or raw.max() >= 2**63:
        raise StreamEntryError("miss entry item ids must be integers in [0, 2**63)")
    items = np.ascontiguousarray(raw, dtype="<i8")
    fields = {"user": int(user_id), "ts": int(ts), "items": items.tobytes()}
    return client.xadd(stream, fields, maxlen=int(maxlen), approximate=False)


@dataclass
class DrainedMisses:
    """What one drain returned: the good rows, and the entries it skipped (with why)."""

    rows: pd.DataFrame
    skipped: list[tuple[bytes, str]] = field(default_factory=list)


def drain_misses(
    client: redis.Redis,
    stream: str,
    count: int | None = None,
    *,
    max_items: int | None = None,
) -> pd.DataFrame:
    """Read and delete the oldest ``count`` entries (all when ``None``) of the miss stream.

    Returns one row per missed (user, item) with int64 columns ``user_id``, ``item_id`` and
    ``ts``, in stream order (oldest request first). An absent stream gives an empty frame.
    Entries that cannot be read (:mod:`solaris.serving.streams`; ``max_items``: the most
    candidates an entry may hold) are skipped and logged (:func:`drain_miss_entries`
    returns them). A key of another type is a :class:`~solaris.serving.streams.StreamError`.
    """
    return drain_miss_entries(client, stream, count, max_items=max_items).rows


def drain_miss_entries(
    client: redis.Redis,
    stream: str,
    count: int | None = None,
    *,
    max_items: int | None = None,
) -> DrainedMisses:
    """:func:`drain_misses`, also returning the skipped entries as ``(id, reason)``."""
    if count is not None and count <= 0:
        raise StreamEntryError(f"count must be > 0 or None, got {count}")
    try:
        entries = client.eval(_DRAIN_LUA, 1, stream, 0 if count is None else int(count))
    except redis.ResponseError as exc:
        raise stream_error(stream, exc) from None
    users: list[int] = []
    times: list[int] = []
    blobs: list[bytes] = []
    skipped: list[tuple[bytes, str]] = []
    for entry_id, raw in entries or []:
        try:
            user, ts, blob = _parse_entry(raw, max_items)
        except ValueError as exc:
            skipped.append((as_bytes(entry_id), str(exc)))
            continue
        users.append(user)
        times.append(ts)
        blobs.append(blob)
    warn_skipped(log, "miss stream", stream, skipped)
    if not blobs:
        empty = pd.DataFrame({c: np.zeros(0, dtype=np.int64) for c in _COLUMNS})
        return DrainedMisses(empty, skipped)
    # One entry per *request*; the items themselves decode in one frombuffer.
    lengths = np.fromiter((len(b) // 8 for b in blobs), dtype=np.int64, count=len(blobs))
    items = np.frombuffer(b"".join(blobs), dtype="<i8").astype(np.int64)
    rows = pd.DataFrame(
        {
            USER_ID: np.repeat(np.asarray(users, np.int64), lengths),
            ITEM_ID: items,
            "ts": np.repeat(np.asarray(times, np.int64), lengths),
        }
    )
    return DrainedMisses(rows, skipped)


def _parse_entry(raw, max_items: int | None = None) -> tuple[int, int, bytes]:
    """``(user, ts, item bytes)`` of one entry; ``ValueError`` saying what is wrong."""
    return parse_user_items(raw, max_items)
