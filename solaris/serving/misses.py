"""The miss stream: (user, item) pairs that serving wanted but found no fresh pair code for.

Serving appends one Redis stream entry per request (``XADD`` with an exact ``MAXLEN``, so the
stream never holds more than ``maxlen`` entries; the oldest are dropped first). The next
candidate-selection run drains it (:func:`drain_misses`): the entries it returns are deleted
in the same atomic step (a server-side script), so a second drain returns only entries
appended since, and two concurrent drainers never return the same entry.

Entry fields: ``user`` (decimal), ``ts`` (epoch seconds, decimal) and ``items`` (the item
ids as little-endian int64 bytes: one field per request instead of one entry per item).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import redis

__all__ = ["append_misses", "drain_misses"]

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

_COLUMNS = ("user_id", "item_id", "ts")


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
    Redis errors propagate; the serving client runs this off the request path.
    """
    if maxlen <= 0:
        raise ValueError(f"maxlen must be > 0, got {maxlen}")
    items = np.ascontiguousarray(item_ids, dtype="<i8")
    if items.size == 0:
        return None
    fields = {"user": int(user_id), "ts": int(ts), "items": items.tobytes()}
    return client.xadd(stream, fields, maxlen=int(maxlen), approximate=False)


def drain_misses(
    client: redis.Redis,
    stream: str,
    count: int | None = None,
) -> pd.DataFrame:
    """Read and delete the oldest ``count`` entries (all when ``None``) of the miss stream.

    Returns one row per missed (user, item) with int64 columns ``user_id``, ``item_id`` and
    ``ts``, in stream order (oldest request first). An absent stream gives an empty frame.
    """
    if count is not None and count <= 0:
        raise ValueError(f"count must be > 0 or None, got {count}")
    entries = client.eval(_DRAIN_LUA, 1, stream, 0 if count is None else int(count))
    if not entries:
        return pd.DataFrame({c: np.zeros(0, dtype=np.int64) for c in _COLUMNS})
    # One dict per *request* (not per item); the items themselves decode in one frombuffer.
    fields = [_field_dict(raw) for _, raw in entries]
    blobs = [f.get(b"items", b"") for f in fields]
    lengths = np.fromiter((len(b) // 8 for b in blobs), dtype=np.int64, count=len(blobs))
    items = np.frombuffer(b"".join(blobs), dtype="<i8").astype(np.int64)
    users = np.array([int(f[b"user"]) for f in fields], dtype=np.int64)
    times = np.array([int(f[b"ts"]) for f in fields], dtype=np.int64)
    return pd.DataFrame(
        {
            "user_id": np.repeat(users, lengths),
            "item_id": items,
            "ts": np.repeat(times, lengths),
        }
    )


def _field_dict(raw) -> dict[bytes, bytes]:
    """Stream entry fields from EVAL's reply (a flat [k1, v1, k2, v2, ...] list)."""
    if isinstance(raw, dict):
        return {_b(k): _b(v) for k, v in raw.items()}
    it = iter(raw)
    return {_b(k): _b(v) for k, v in zip(it, it, strict=True)}


def _b(value) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
