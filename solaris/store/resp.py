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

from collections.abc import Sequence

import hiredis
import numpy as np

__all__ = ["bulk", "command", "frames", "pairs"]

_CRLF = b"\r\n"


def _frame_dtype(width: int) -> list[tuple[str, str]]:
    head = b"$%d\r\n" % width
    return (
        [("h", f"S{len(head)}"), ("v", f"V{width}"), ("t", "S2")]
        if width
        else [
            ("h", f"S{len(head)}"),
            ("t", "S2"),
        ]
    )


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
    dtype = [(f"f{k}", t) for k, t in _frame_dtype(fw)] + [
        (f"v{k}", t) for k, t in _frame_dtype(vw)
    ]
    out = np.empty(len(fields), dtype)
    out["fh"], out["fv"], out["ft"] = b"$%d\r\n" % fw, fields, _CRLF
    out["vh"], out["vv"], out["vt"] = b"$%d\r\n" % vw, values, _CRLF
    return out


def command(name: bytes, head: Sequence[bytes | str | int], body: bytes, n_body: int) -> bytes:
    """One command: ``name``, the ``head`` arguments (packed by hiredis), then ``n_body``
    arguments already framed in ``body``."""
    packed = hiredis.pack_command((name, *head))  # *<k>\r\n<frames of name and head>
    first = packed.index(b"\r\n")
    count = int(packed[1:first]) + n_body
    return b"*%d\r\n" % count + packed[first + 2 :] + body


def bulk(name: bytes, head: Sequence[bytes | str | int], values: np.ndarray) -> bytes:
    """``name head... v_1 ... v_N`` for fixed-width ``values`` (e.g. ``HMGET key f_1..f_N``)."""
    return command(name, head, frames(values).tobytes(), len(values))
