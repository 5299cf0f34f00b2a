"""The compiled scan of :class:`solaris.store.resp.UniformReplies`: where each reply of a
request's received bytes lies, checked frame by frame, in one pass.

Written with numpy, the same checks took a few dozen array operations per ``recv`` (about
60 µs a call, two calls a request: the largest cost of a fetch beyond the wire and the tier
rules, docs/feature_store.md). Here each call rescans the bytes from the first one (a few
µs for a thousand frames), so the parser keeps no state between calls and a buffer moved to a
larger one needs no care.

Imported on the first :class:`~solaris.store.resp.UniformReplies`, not with the store: numba
(a dependency, with llvmlite) then loads the machine code cached beside this file, or compiles
it on a machine's first use (about a second). ``SolarisFeatures.warm_up`` makes that first
read before any request.
"""

from __future__ import annotations

from typing import Any

from numba import njit, types

__all__ = ["COMPLETE", "INCOMPLETE", "NOT_UNIFORM", "scan"]

COMPLETE, INCOMPLETE, NOT_UNIFORM = 0, 1, 2
""":func:`scan`'s answers: every reply read and nothing after them; every byte so far is
uniform and more are due; a reply is not uniform (or bytes follow the last one)."""

_CR, _LF, _DOLLAR, _STAR, _MINUS, _ZERO = 13, 10, 36, 42, 45, 48
_MAX_DIGITS = 18  # longer lengths are not uniform (hiredis reads them): no int64 overflow


@njit(inline="always")
def _expect(buf, k, have, byte):  # type: ignore[no-untyped-def]
    """Byte ``k`` is ``byte``: COMPLETE, INCOMPLETE (not received yet) or NOT_UNIFORM."""
    if k >= have:
        return INCOMPLETE
    return COMPLETE if buf[k] == byte else NOT_UNIFORM


@njit(inline="always")
def _array_header(buf, pos, have, n):  # type: ignore[no-untyped-def]
    """``*<n>\\r\\n`` at ``pos``: (status, its size)."""
    power = 1
    while power * 10 <= n:
        power *= 10
    status = _expect(buf, pos, have, _STAR)
    k = pos + 1
    while status == COMPLETE and power > 0:
        status = _expect(buf, k, have, _ZERO + (n // power) % 10)
        power //= 10
        k += 1
    if status == COMPLETE:
        status = _expect(buf, k, have, _CR)
    if status == COMPLETE:
        status = _expect(buf, k + 1, have, _LF)
    return status, k + 2 - pos


@njit(inline="always")
def _bulk_header(buf, pos, have):  # type: ignore[no-untyped-def]
    """``$<length>\\r\\n`` at ``pos``: (status, length (``-1``: a nil), its size)."""
    status = _expect(buf, pos, have, _DOLLAR)
    if status != COMPLETE:
        return status, 0, 0
    negative, digits, length, k = False, 0, 0, pos + 1
    while True:
        if k >= have:
            return INCOMPLETE, 0, 0
        c = buf[k]
        if c == _CR:
            break
        if c == _MINUS and k == pos + 1:
            negative = True
        elif _ZERO <= c <= _ZERO + 9 and digits < _MAX_DIGITS:
            length = length * 10 + (c - _ZERO)
            digits += 1
        else:
            return NOT_UNIFORM, 0, 0
        k += 1
    if digits == 0 or (negative and length != 1):  # "-1" is the only negative length
        return NOT_UNIFORM, 0, 0
    status = _expect(buf, k + 1, have, _LF)
    return status, (-1 if negative else length), k + 2 - pos


@njit(inline="always")
def _same(buf, at, have, first, size):  # type: ignore[no-untyped-def]
    """The ``size`` bytes at ``at`` repeat those at ``first`` (as far as received)."""
    for k in range(size):
        if at + k >= have:
            return INCOMPLETE
        if buf[at + k] != buf[first + k]:
            return NOT_UNIFORM
    return COMPLETE


def _signature(buffer: types.Array) -> Any:
    return types.int64(  # type: ignore[no-any-return]
        buffer,
        types.int64,
        types.Array(types.int64, 1, "C", readonly=True),
        types.Array(types.int64, 2, "C"),
    )


@njit(
    [
        _signature(types.Array(types.uint8, 1, "C")),
        _signature(types.Array(types.uint8, 1, "C", readonly=True)),
    ],
    cache=True,
    nogil=True,
)
def scan(buf, have, shapes, found):  # type: ignore[no-untyped-def]
    """Scan the first ``have`` bytes of ``buf`` as one reply per ``shapes`` entry: ``n >= 0``
    for an array of ``n`` bulk strings, ``-1`` for one bulk string.

    An array is uniform when every string has its first string's length ``L``: each frame's
    ``$L\\r\\n`` header is the first one's bytes and each trailer is ``\\r\\n`` (payloads are
    not read) and ``L > 0``. A bulk string may be a nil or empty; an array may hold neither.

    Args:
        buf: ``[>= have]`` uint8, the bytes received.
        have: how many of them.
        shapes: ``[R]`` int64.
        found: ``[3, R]`` int64, written where the answer is COMPLETE: each reply's first
            payload offset, its length ``L`` (``-1`` for a nil) and its frame size (an array's
            stride from one payload to the next).

    Returns:
        COMPLETE, INCOMPLETE (only when every header and trailer byte received is the
        uniform one; RESP is self-delimiting, so a reply stream that is complete but not
        uniform differs from the uniform one in a byte already received), or NOT_UNIFORM.
    """
    pos = 0
    for r in range(len(shapes)):
        n = shapes[r]
        if n >= 0:
            status, size = _array_header(buf, pos, have, n)
            if status != COMPLETE:
                return status
            pos += size
            if n == 0:
                found[0, r], found[1, r], found[2, r] = pos, 0, 0
                continue
        status, length, size = _bulk_header(buf, pos, have)
        if status != COMPLETE:
            return status
        if n < 0 and length < 0:  # a nil bulk string
            found[0, r], found[1, r], found[2, r] = pos + size, -1, size
            pos += size
            continue
        if n > 0 and length <= 0:  # a nil or an empty string in an array: not records
            return NOT_UNIFORM
        step = size + length + 2
        frames = max(n, 1)  # a bulk string is an array of one without "*1"
        whole = min(frames, (have - pos) // step)  # frames received in full
        differ = 0  # the frames received in full, without a branch per byte
        for k in range(whole):
            frame = pos + k * step
            for b in range(size):
                differ |= buf[frame + b] ^ buf[pos + b]
            differ |= (buf[frame + step - 2] ^ _CR) | (buf[frame + step - 1] ^ _LF)
        if differ:
            return NOT_UNIFORM
        if whole < frames:  # the first frame not received in full
            frame = pos + whole * step
            status = _same(buf, frame, have, pos, size) if whole > 0 else COMPLETE
            if status == COMPLETE:
                status = _expect(buf, frame + step - 2, have, _CR)
            if status == COMPLETE:
                status = _expect(buf, frame + step - 1, have, _LF)
            return status
        found[0, r], found[1, r], found[2, r] = pos + size, length, step
        pos += frames * step
    return COMPLETE if pos == have else NOT_UNIFORM
