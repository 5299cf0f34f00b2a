"""Reading Redis stream entries: what the miss stream and the request log share."""

from __future__ import annotations

import logging
from collections.abc import Sequence

__all__ = ["as_bytes", "entry_fields", "warn_skipped"]


def entry_fields(raw) -> dict[bytes, bytes]:
    """A stream entry's fields as bytes: XRANGE's dict, or a flat ``[k1, v1, k2, v2, ...]``
    list (an EVAL reply). ``ValueError`` when there are none or they do not pair up."""
    if raw is None:
        raise ValueError("no fields")
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
