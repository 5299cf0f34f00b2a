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
# Reading: the request path's replies, scanned where they lie when they are uniform
# --------------------------------------------------------------------------------------------

INCOMPLETE = "incomplete"
""":meth:`UniformReplies.advance` read every byte so far as uniform replies; more are due."""


@functools.lru_cache(maxsize=256)
def _sizes(shapes: tuple[int | None, ...]) -> np.ndarray:
    """The scan's ``shapes`` argument (``-1`` for a bulk string), read-only and shared: a
    request's shapes repeat (one candidate count)."""
    sizes = np.array([-1 if n is None else n for n in shapes], np.int64)
    sizes.flags.writeable = False
    return sizes


@functools.lru_cache(maxsize=256)
def _void(length: int) -> np.dtype:
    """``V<length>``, one object per length: no dtype parsed per reply, and a caller that
    compares layouts (the tier assembly) finds the same object again."""
    return np.dtype(f"V{length}")


class UniformReplies:
    """The replies of one request, parsed from its received bytes as they arrive, without a
    Python object per field where they are uniform. One reply per ``shapes`` entry: ``n``
    for an array of ``n`` bulk strings (``HMGET`` of ``n`` fields), ``None`` for one bulk
    string (``GET``).

    :meth:`advance` returns the replies (an array reply as ``V<L>`` numpy records, a view of
    the buffer; a bulk string as bytes, a nil as ``None``), :data:`INCOMPLETE` when every
    byte so far is uniform and more are due, or ``None`` when a reply is not uniform (an
    array holding a nil, empty strings or strings of several lengths, an error): then parse
    the bytes with hiredis.

    An array is uniform when its first string's length ``L`` frames every one of its
    strings: each ``$L\r\n<L bytes>\r\n`` header and trailer is checked, by the compiled
    :func:`solaris.store.reply_scan.scan`. :data:`INCOMPLETE` is returned only when every
    header and trailer byte received is the uniform one; since RESP replies are
    self-delimiting, a complete reply stream shorter than the uniform one would differ from
    it in a byte already received, so a caller that waits on :data:`INCOMPLETE` never waits
    on bytes that will not come.
    """

    def __init__(self, shapes: Sequence[int | None]) -> None:
        self._shapes = shapes
        self._sizes = _sizes(tuple(shapes))
        self._found = np.empty((3, len(shapes)), np.int64)

    def advance(self, buf: np.ndarray, have: int) -> list | str | None:
        """Parse on with the first ``have`` bytes of ``buf`` (uint8, C-contiguous; the same
        bytes as before, maybe moved to a larger buffer, and more)."""
        from solaris.store import reply_scan  # numba: loaded on the first request

        status = reply_scan.scan(buf, have, self._sizes, self._found)
        if status != reply_scan.COMPLETE:
            return INCOMPLETE if status == reply_scan.INCOMPLETE else None
        out: list[np.ndarray | bytes | None] = []
        for n, start, length, step in zip(self._shapes, *self._found.tolist(), strict=True):
            if n is None:
                out.append(None if length < 0 else buf[start : start + length].tobytes())
            elif n:
                out.append(np.ndarray((n,), _void(length), buf, start, (step,)))  # a view
            else:
                out.append(np.zeros(0, "V1"))
        return out
