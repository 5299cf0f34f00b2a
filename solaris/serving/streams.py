"""Reading Redis stream entries: what the miss stream and the request log share.

Entries are written by serving processes, but any client of the Redis can write one, so a
reader takes nothing on trust: numbers are plain ASCII decimals (``int()`` would also take
``+5``, ``1_000`` and `` 7 ``), an entry holds at most the candidates a request may have,
and one stamped more than a day past the wall clock is unreadable (it would otherwise sit
in the stream until 2255), as is one stamped before the earliest time its reader works on
(``not_before``: the near-line embedder's is ``cycle.start``; a 1970 stamp would embed a pair
as of 1970). An unreadable entry is skipped, logged and deleted by the drain.
A stream key of another type is a :class:`StreamError` naming the key.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from solaris.errors import SolarisError
from solaris.store.contract import MAX_EPOCH_S

__all__ = [
    "FUTURE_SLACK_S",
    "StreamEntryError",
    "StreamError",
    "as_bytes",
    "check_items",
    "check_stamp",
    "decimal",
    "entry_fields",
    "parse_user_items",
    "stream_error",
    "warn_skipped",
]

# How far past the wall clock an entry's stamp may be (clocks of serving hosts drift; a day
# is far beyond any drift and far below a mistyped year).
FUTURE_SLACK_S = 86_400
_DECIMAL = re.compile(rb"0|[1-9][0-9]{0,18}")


class StreamError(SolarisError, RuntimeError):
    """A stream cannot be read at all (its key holds another Redis type); names the key."""


class StreamEntryError(SolarisError, ValueError):
    """A stream entry that is malformed or refused, or a bad argument to write or read one."""


def decimal(value: bytes, name: str, high: int) -> int:
    """``value`` as an integer in ``[0, high)``: ASCII digits only, no sign, underscore,
    space or leading zero; ``ValueError`` naming ``name`` otherwise."""
    if not _DECIMAL.fullmatch(value) or int(value) >= high:
        shown = value[:24] + (b"..." if len(value) > 24 else b"")
        raise StreamEntryError(f"{name} must be a decimal integer in [0, {high}), got {shown!r}")
    return int(value)


def check_items(count: int, max_items: int | None) -> None:
    """``ValueError`` when an entry holds more candidates than a request may."""
    if max_items is not None and count > max_items:
        raise StreamEntryError(
            f"{count:,} items in one entry, more than store.max_candidates ({max_items:,})"
        )


def check_stamp(ts: int, now: float | None = None, not_before: int | None = None) -> None:
    """``ValueError`` when ``ts`` lies more than :data:`FUTURE_SLACK_S` past the wall clock,
    or before ``not_before`` (epoch seconds: ``cycle.start``, before which no interval of the
    cycle lies)."""
    limit = (time.time() if now is None else now) + FUTURE_SLACK_S
    if ts > limit:
        raise StreamEntryError(f"ts {ts} is more than a day past the wall clock: never drained")
    if not_before is not None and ts < not_before:
        raise StreamEntryError(
            f"ts {ts} ({_utc(ts)}) is before cycle.start ({_utc(not_before)}): no interval "
            "of the cycle covers it"
        )


def _utc(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def parse_user_items(
    raw, max_items: int | None = None, not_before: int | None = None
) -> tuple[int, int, bytes]:
    """``(user, ts, item bytes)`` of an entry with the fields ``user``, ``ts`` (decimals)
    and ``items`` (int64 bytes), the miss stream's and the embed stream's format;
    ``ValueError`` saying what is wrong (``not_before``: :func:`check_stamp`)."""
    try:
        fields = entry_fields(raw)
    except (TypeError, ValueError) as exc:
        raise StreamEntryError(f"malformed fields ({exc})") from None
    missing = [k for k in (b"user", b"ts", b"items") if k not in fields]
    if missing:
        raise StreamEntryError(f"missing fields {[m.decode() for m in missing]}")
    user = decimal(fields[b"user"], "user", 2**63)
    ts = decimal(fields[b"ts"], "ts", MAX_EPOCH_S)
    check_stamp(ts, not_before=not_before)
    blob = fields[b"items"]
    if not blob or len(blob) % 8:
        raise StreamEntryError(f"items must be int64 bytes, got {len(blob)} bytes")
    check_items(len(blob) // 8, max_items)
    if (np.frombuffer(blob, dtype="<i8") < 0).any():
        raise StreamEntryError("negative item id")
    return user, ts, blob


def stream_error(stream: str, exc: Exception) -> StreamError:
    """The error of a stream read that Redis refused (``WRONGTYPE``), naming the key."""
    return StreamError(
        f"{stream}: cannot be read as a stream ({exc}); the key holds something else: "
        "delete it (it is not a SOLARIS stream) and rerun"
    )


def entry_fields(raw) -> dict[bytes, bytes]:
    """A stream entry's fields as bytes: XRANGE's dict, or a flat ``[k1, v1, k2, v2, ...]``
    list (an EVAL reply). ``ValueError`` when there are none or they do not pair up."""
    if raw is None:
        raise StreamEntryError("no fields")
    if isinstance(raw, dict):
        return {as_bytes(k): as_bytes(v) for k, v in raw.items()}
    it = iter(raw)
    return {as_bytes(k): as_bytes(v) for k, v in zip(it, it, strict=True)}


def as_bytes(value) -> bytes:
    """A stream id or field as bytes (redis-py returns str when decoding responses)."""
    return value if isinstance(value, bytes) else str(value).encode()


def warn_skipped(
    log: logging.Logger, what: str, stream: str, skipped: Sequence[tuple[bytes, str]]
) -> None:
    """One warning for the unreadable entries a read skipped (none: no warning)."""
    if skipped:
        first_id, why = skipped[0]
        log.warning(
            "%s %s: skipped %d unreadable entries (first: %s: %s)",
            what,
            stream,
            len(skipped),
            first_id,
            why,
        )
