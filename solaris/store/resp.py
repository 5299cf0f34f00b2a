"""Redis commands packed with numpy: the wire format (RESP) of the store's hot commands.

A request's ``HMGET`` carries a few hundred item fields and a bulk write's ``HSET`` tens of
thousands of (field, record) pairs. Packed one argument at a time (redis-py, hiredis) that
is ~0.2 µs per argument; here every field is fixed-width (an 8-byte id,
:func:`solaris.store.keys.member_fields`) and a batch of records usually has one length, so
each argument's ``$<len>\\r\\n<bytes>\\r\\n`` frame is one row of a numpy structured array
and a whole command body is one buffer. The bytes are exactly what hiredis would pack
(``tests/unit/store/test_resp.py`` compares them).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import hiredis
import numpy as np

__all__ = ["INCOMPLETE", "UniformReplies", "bulk", "command", "frames", "pairs"]

_CRLF = b"\r\n"


def _frame_parts(width: int) -> list[tuple[str, str]]:
    head = b"$%d\r\n" % width
    return (
        [("h", f"S{len(head)}"), ("v", f"V{width}"), ("t", "S2")]
        if width
        else [
            ("h", f"S{len(head)}"),
            ("t", "S2"),
        ]
    )


@functools.cache
def _frame_dtype(width: int) -> np.dtype:
    return np.dtype(_frame_parts(width))


def frames(values: np.ndarray) -> np.ndarray:
    """``N`` RESP bulk strings of fixed-width ``values`` (a numpy void array ``V<w>``): a
    structured array whose rows are the framed arguments, in order."""
    width = values.dtype.itemsize
    out = np.empty(len(values), _frame_dtype(width))
    out["h"] = b"$%d\r\n" % width
    if width:
        out["v"] = values
    out["t"] = _CRLF
    return out


def pairs(fields: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``N`` framed (field, value) argument pairs, both fixed-width void arrays, interleaved
    as ``HSET`` wants them."""
    fw, vw = fields.dtype.itemsize, values.dtype.itemsize
    dtype = [(f"f{k}", t) for k, t in _frame_parts(fw)] + [
        (f"v{k}", t) for k, t in _frame_parts(vw)
    ]
    out = np.empty(len(fields), dtype)
    out["fh"], out["fv"], out["ft"] = b"$%d\r\n" % fw, fields, _CRLF
    out["vh"], out["vv"], out["vt"] = b"$%d\r\n" % vw, values, _CRLF
    return out


def command(name: bytes, head: Sequence[bytes | str | int], body: bytes, n_body: int) -> bytes:
    """One command: ``name``, the ``head`` arguments (packed by hiredis), then ``n_body``
    arguments already framed in ``body``."""
    return _command_head(name, tuple(head), n_body) + body


@functools.lru_cache(maxsize=4096)
def _command_head(name: bytes, head: tuple[bytes | str | int, ...], n_body: int) -> bytes:
    """The bytes of a command before its ``n_body`` framed arguments. Cached: a request's
    commands repeat their keys and sizes (one user's keys, one candidate count)."""
    packed: bytes = hiredis.pack_command((name, *head))  # type: ignore[arg-type]
    first = packed.index(b"\r\n")
    count = int(packed[1:first]) + n_body
    return b"*%d\r\n" % count + packed[first + 2 :]


def bulk(name: bytes, head: Sequence[bytes | str | int], values: np.ndarray) -> bytes:
    """``name head... v_1 ... v_N`` for fixed-width ``values`` (e.g. ``HMGET key f_1..f_N``)."""
    return command(name, head, frames(values).tobytes(), len(values))


# --------------------------------------------------------------------------------------------
# Reading: the request path's replies, parsed by numpy when they are uniform
# --------------------------------------------------------------------------------------------

INCOMPLETE = "incomplete"
""":meth:`UniformReplies.advance` read every byte so far as uniform replies; more are due."""

_DIGITS = frozenset(b"0123456789")


def _prefix_of(buf: np.ndarray, pos: int, have: int, expected: bytes) -> bool:
    """The received bytes ``buf[pos:have]`` start ``expected`` (or equal it)."""
    k = min(have - pos, len(expected))
    return k <= 0 or buf[pos : pos + k].tobytes() == expected[:k]


def _bulk_header(buf: np.ndarray, pos: int, have: int) -> tuple[int, int] | str | None:
    """The bulk string header at ``pos``: ``(length, header size)``; ``-1`` for a nil;
    :data:`INCOMPLETE`; ``None`` when it is not a bulk string header."""
    window = buf[pos : min(have, pos + 24)].tobytes()
    end = window.find(b"\r\n")
    if end < 0:
        digits = window[1:-1] if window.endswith(b"\r") else window[1:]
        ok = window[:1] in (b"", b"$") and all(
            c in _DIGITS or (k == 0 and c == ord("-")) for k, c in enumerate(digits)
        )
        return INCOMPLETE if ok and len(window) < 24 else None
    digits = window[1:end]
    if window[:1] != b"$" or not digits or not (digits == b"-1" or set(digits) <= _DIGITS):
        return None
    return int(digits), end + 2


@functools.cache
def _joints_of(size: int, length: int) -> np.dtype:
    """Frames of ``$<length>\r\n<bytes>\r\n`` bulk strings (headers of ``size`` bytes)
    read from the first one's payload on: the payload, then the joint of one frame's
    trailer and the next one's header, checked in one comparison."""
    return (
        np.dtype([("v", f"V{length}"), ("j", f"S{size + 2}")])
        if length
        else np.dtype([("j", f"S{size + 2}")])
    )


class UniformReplies:
    """The replies of one request, parsed from its received bytes as they arrive, without a
    Python object per field where they are uniform. One reply per ``shapes`` entry: ``n``
    for an array of ``n`` bulk strings (``HMGET`` of ``n`` fields), ``None`` for one bulk
    string (``GET``).

    :meth:`advance` returns the replies (an array reply as ``V<L>`` numpy records, a view of
    the buffer; a bulk string as bytes, a nil as ``None``), :data:`INCOMPLETE` when every
    byte so far is uniform and more are due, or ``None`` when a reply is not uniform (an
    array holding a nil or strings of several lengths, an error): then parse the bytes
    with hiredis.

    An array is uniform when its first string's length ``L`` frames every one of its
    strings: each ``$L\r\n<L bytes>\r\n`` header and trailer is checked by numpy
    comparisons, each frame once however the bytes arrive. :data:`INCOMPLETE` is returned
    only when every header and trailer byte received is the uniform one; since RESP
    replies are self-delimiting, a complete reply stream shorter than the uniform one would
    differ from it in a byte already received, so a caller that waits on
    :data:`INCOMPLETE` never waits on bytes that will not come.
    """

    def __init__(self, shapes: Sequence[int | None]) -> None:
        self._shapes = shapes
        self._out: list[np.ndarray | bytes | None] = []
        self._pos = 0  # where the current reply's unparsed part starts
        # The current array reply once its first header is read: (first frame's offset,
        # header bytes, frame dtype, frames checked).
        self._array: tuple[int, bytes, np.dtype, int] | None = None

    def advance(self, buf: np.ndarray, have: int) -> list | str | None:
        """Parse on with the first ``have`` bytes of ``buf`` (uint8; the same bytes as
        before, maybe moved to a larger buffer, and more)."""
        while len(self._out) < len(self._shapes):
            n = self._shapes[len(self._out)]
            if self._array is None:
                pos = self._pos
                if n is not None:
                    head = b"*%d\r\n" % n
                    if not _prefix_of(buf, pos, have, head):
                        return None
                    if have < pos + len(head):
                        return INCOMPLETE
                    pos += len(head)
                    if n == 0:
                        self._out.append(np.zeros(0, "V1"))
                        self._pos = pos
                        continue
                parsed = _bulk_header(buf, pos, have)
                if parsed is None or parsed == INCOMPLETE:
                    return parsed
                length, size = parsed
                if n is None:  # one bulk string
                    if length < 0:
                        self._out.append(None)
                        self._pos = pos + size
                        continue
                    end = pos + size + length + 2
                    if not _prefix_of(buf, pos + size + length, have, _CRLF):
                        return None
                    if have < end:
                        return INCOMPLETE
                    self._out.append(buf[pos + size : pos + size + length].tobytes())
                    self._pos = end
                    continue
                if length < 0:
                    return None
                header = buf[pos : pos + size].tobytes()
                self._array = (pos + size, _CRLF + header, _joints_of(size, length), 0)
            assert n is not None
            # Frame k is read as (payload k, trailer k + header k+1) from the first payload
            # on; the last frame's "header" is the next reply's first bytes, not checked.
            start, joint, frame, checked = self._array
            step = frame.itemsize
            whole = min(n, (have - start) // step)  # frames whose joint has arrived
            last = min(n - 1, whole)  # joints to check: the last frame's is only a trailer
            if last > checked:
                view = np.frombuffer(
                    buf, frame, count=last - checked, offset=start + checked * step
                )
                if not (view["j"] == joint).all():
                    return None
                self._array = (start, joint, frame, last)
            end = start + n * step - len(joint) + 2  # after the last trailer
            if have < end:
                part = start + last * step + step - len(joint)  # the first joint unchecked
                if not _prefix_of(buf, part, have, joint if last < n - 1 else _CRLF):
                    return None
                return INCOMPLETE
            if not _prefix_of(buf, end - 2, have, _CRLF):
                return None
            length = step - len(joint)
            self._out.append(
                np.ndarray((n,), f"V{length}", buf, start, (step,))  # the payloads, a view
                if length
                else np.zeros(n, "V1")
            )
            self._pos = end
            self._array = None
        return self._out if self._pos == have else None
