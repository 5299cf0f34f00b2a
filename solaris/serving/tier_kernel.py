"""The compiled loop of :func:`solaris.serving.tiers.assemble_tiers`.

``assemble_tiers`` checks its arguments and gathers each view's arrays; this module applies the
presence, version, freshness and exclusion rules (that module's docstring) to every row in one
pass, compiled by numba. Written with numpy, the same rules took about 60 array operations of
1–3 µs each per request: most of a fetch's cost beyond the wire (docs/feature_store.md). One
pass over the rows also needs no ``[N, d]`` temporaries.

Exactness is the contract, not an approximation of it: float16 codes are widened exactly (by
the CPU's conversion instruction where it has one, else by a table built by numpy's own
conversion; the instruction quiets a signalling NaN, a NaN either way), the user's mean is
computed in float64 and rounded to float32 once (as numpy's ``np.divide(..., dtype=float64)``
into a float32 array does), freshness compares event microseconds with ``now · 10^6`` and
``now · 10^6 − ttl · 10^6`` in float64 (exact for every epoch time below year 2255, as numpy's
comparisons), and fastmath is off.
``tests/unit/serving/test_tier_kernel.py`` checks the rows against the numpy formulation.

numba (a dependency, with llvmlite) compiles the loop on its first call in a process and caches
the machine code beside this file (``cache=True``), so later processes load it in milliseconds;
``SolarisFeatures.warm_up`` makes that first call before the first request. The loop releases
the GIL (``nogil=True``), so threads of one serving process assemble in parallel.
"""

from __future__ import annotations

import functools
import platform
from typing import Any

import numpy as np
from llvmlite import ir
from numba import config, from_dtype, njit, types
from numba.extending import intrinsic, overload

__all__ = ["assemble_records", "assemble_rows", "records_kernel"]


_F16_TO_F32 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
"""``[65536]`` float32: every float16 bit pattern as numpy widens it (exact; NaN payloads
shifted, not quieted): the widening where the CPU has no conversion instruction. A lookup
measured faster than arithmetic on the bits (0.8 against 1.2 ns a code) with the table in
cache, but on the request path it is not: a 256 KB table read at a thousand lines after each
round trip cost about 40 µs a request (docs/feature_store.md)."""


def _has_f16_instruction() -> bool:
    """Whether numba compiles for a CPU that widens float16 in one instruction (x86's F16C,
    every 64-bit ARM): then LLVM's ``fpext half`` is that instruction, not a call into a
    runtime library the JIT does not link."""
    # A portable build (NUMBA_CPU_NAME set): the table.
    if config.CPU_NAME not in (None, "host"):  # type: ignore[attr-defined]
        return False
    if platform.machine().lower() in ("aarch64", "arm64"):
        return True
    import llvmlite.binding as llvm

    return bool(llvm.get_host_cpu_features().get("f16c", False))


_F16_INSTRUCTION = _has_f16_instruction()


@intrinsic
def _f16_bits_to_f32(typingctx, bits):  # type: ignore[no-untyped-def]
    """float16 bits (uint16) widened to float32 by LLVM's ``fpext`` (exact)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.uint16), codegen


def _row(z: np.ndarray, i: int) -> np.ndarray:
    """Row ``i``'s ``d`` values: of a ``[N, d]`` array, or the ``code`` field of record
    ``i`` (the request path). A record's field has its length and contiguity in its type,
    so the compiled loops over it need no stride at run time (about a quarter faster)."""
    raise NotImplementedError  # only its compiled overload below runs


@overload(_row, jit_options={"nogil": True})
def _row_overload(z, i):  # type: ignore[no-untyped-def]
    if isinstance(z.dtype, types.Record):
        return lambda z, i: z[i].code
    return lambda z, i: z[i]


def _width(z: np.ndarray) -> int:
    """``d``: the values per row of :func:`_row`."""
    raise NotImplementedError  # only its compiled overload below runs


@overload(_width, jit_options={"nogil": True})
def _width_overload(z):  # type: ignore[no-untyped-def]
    if isinstance(z.dtype, types.Record):
        width = z.dtype.typeof("code").shape[0]  # type: ignore[attr-defined]  # a NestedArray
        return lambda z: width
    return lambda z: z.shape[1]


def _widened(row: np.ndarray, j: int) -> np.float64:
    """``row[j]`` as float64 (exact): a float16 code passed as its uint16 bits, or a float."""
    raise NotImplementedError  # only its compiled overload below runs


@overload(_widened, jit_options={"nogil": True})
def _widened_overload(row, j):  # type: ignore[no-untyped-def]
    if row.dtype == types.uint16:
        if _F16_INSTRUCTION:
            return lambda row, j: np.float64(_f16_bits_to_f32(row[j]))  # type: ignore[call-arg]
        return lambda row, j: np.float64(_F16_TO_F32[row[j]])
    return lambda row, j: np.float64(row[j])


@njit(cache=True, nogil=True)
def _matches(stored, version):  # type: ignore[no-untyped-def]
    """``[R]`` bool: row ``r`` of ``stored`` (``[R, w]`` uint8) equals ``version`` as numpy
    compares byte strings (the shorter one padded with NULs)."""
    rows, width = stored.shape
    size = len(version)
    out = np.empty(rows, np.bool_)
    for r in range(rows):
        same = True
        if width == size:  # the usual case: a tight loop
            for k in range(size):
                if stored[r, k] != version[k]:
                    same = False
                    break
        else:
            for k in range(max(width, size)):
                if (stored[r, k] if k < width else 0) != (version[k] if k < size else 0):
                    same = False
                    break
        out[r] = same
    return out


@njit(cache=True, nogil=True)
def _fresh(found: bool, event_us: int, now_us: float, ttl_us: float) -> bool:
    # ViewRows.fresh: now − ttl <= event time <= now, both ends inclusive.
    return found and event_us <= now_us and event_us >= now_us - ttl_us


def _signature(codes: types.Number) -> Any:
    """One compiled version per code type, every array taken as it comes (any layout,
    read-only, unaligned: the request path's arrays are views of the records received), so
    no new combination of inputs compiles at request time."""

    def array(dtype: types.Type, ndim: int = 1) -> types.Array:
        return types.Array(dtype, ndim, "A", readonly=True, aligned=False)

    ints, flags, versions = array(types.int64), array(types.boolean), array(types.uint8, 2)
    floats, f32_rows = array(types.float64), array(types.float32, 2)
    code_rows = array(codes, 2)
    returns = types.Tuple(  # type: ignore[no-untyped-call]
        (
            types.Array(types.float32, 2, "C"),
            types.Array(types.boolean, 2, "C"),
            types.Array(types.int64, 1, "C"),
        )
    )
    return returns(
        floats, floats, ints,
        flags, ints, versions, ints, code_rows,  # pair
        flags, ints, versions, code_rows,  # nbr
        flags, ints, versions, ints, ints, ints, f32_rows,  # uagg
        flags, ints, versions, ints, f32_rows,  # iagg
        array(types.uint8),
    )  # fmt: skip


# error_model="numpy": no zero check per division (the only divisor is a count > 0).
@njit(cache=True, nogil=True, error_model="numpy")
def _assemble(  # type: ignore[no-untyped-def]
    now,
    ttl_us,
    slots,
    pair_found,
    pair_event_us,
    pair_version_ok,
    pair_computed_at,
    pair_z,
    nbr_found,
    nbr_event_us,
    nbr_version_ok,
    nbr_z,
    uagg_found,
    uagg_event_us,
    uagg_version_ok,
    uagg_count,
    uagg_window_start,
    uagg_computed_at,
    uagg_z_sum,
    iagg_found,
    iagg_event_us,
    iagg_version_ok,
    iagg_count,
    iagg_z_mean,
):
    """The tiers of ``N`` rows: the rules, for both entry points.

    Args:
        now: ``[1]`` (every row) or ``[N]`` float64 epoch seconds.
        ttl_us: ``[4]`` float64 read TTLs in microseconds: pair, nbr, uagg, iagg.
        slots: ``[4]`` int64, the block (tier index) of pair, nbr, uagg, iagg.
        *_found, *_version_ok: ``[N]`` bool, a row exists, its ``fm_version`` is the
            expected one (``uagg_*``: ``[N]`` or ``[1]`` rows, one for every row);
            ``*_event_us``: ``[N]`` int64; ``*_computed_at``, ``uagg_count``,
            ``uagg_window_start``, ``iagg_count``: ``[N]`` int64.
        pair_z, nbr_z: ``[N, d]`` float16 codes as uint16 bits, or float32.
        uagg_z_sum: ``[N, d]`` or ``[1, d]`` float32; iagg_z_mean: ``[N, d]`` float32.
        Each of these four may instead be the view's records, whose ``code`` field holds
        the row's ``(d,)`` values (:func:`_row`).

    Returns:
        ``features [N, 4·d]`` float32 (zeros where a tier is missing), ``mask [N, 4]`` bool,
        ``first [N]`` int64 (the first present tier, 4 where none is).
    """
    n, d = len(pair_z), _width(pair_z)
    tiers = len(slots)
    features = np.empty((n, tiers * d), np.float32)  # every block written below
    mask = np.zeros((n, tiers), np.bool_)
    first = np.full(n, tiers, np.int64)
    k_pair, k_nbr, k_uagg, k_iagg = slots[0], slots[1], slots[2], slots[3]
    one_time = len(now) == 1
    # The user aggregate's rows that can be used at all: ``[N]``, or ``[1]`` for every row.
    # A window that starts after its end cannot say which codes it holds: not used.
    uagg_usable = np.empty(len(uagg_version_ok), np.bool_)
    for u in range(len(uagg_usable)):
        uagg_usable[u] = (
            uagg_version_ok[u]
            and uagg_count[u] >= 0
            and uagg_window_start[u] <= uagg_computed_at[u]
        )
    one_user = len(uagg_usable) == 1
    code = np.empty(d, np.float64)  # the row's pair code, widened
    user_sum = np.empty(d, np.float64)  # the row's user sum
    summed = -1  # the user row in user_sum
    # The whole window's mean, rounded to float32, of the user row and count it was last
    # computed for: one division per code per user, not per row (rows share one user).
    window_mean = np.empty(d, np.float32)
    mean_of, mean_count = -1, 0
    for i in range(n):
        now_us = (now[0] if one_time else now[i]) * 1e6
        u = 0 if one_user else i

        pair_known = pair_found[i] and pair_version_ok[i]
        pair_ok = pair_known and _fresh(pair_found[i], pair_event_us[i], now_us, ttl_us[0])
        nbr_ok = nbr_version_ok[i] and _fresh(nbr_found[i], nbr_event_us[i], now_us, ttl_us[1])
        uagg_row = uagg_usable[u] and _fresh(uagg_found[u], uagg_event_us[u], now_us, ttl_us[2])
        in_window = (
            uagg_row
            and pair_known
            and pair_computed_at[i] > uagg_window_start[u]
            and pair_computed_at[i] <= uagg_computed_at[u]
        )
        effective = (uagg_count[u] if uagg_row else 0) - (1 if in_window else 0)
        uagg_ok = effective > 0
        iagg_ok = (
            iagg_count[i] > 0
            and iagg_version_ok[i]
            and _fresh(iagg_found[i], iagg_event_us[i], now_us, ttl_us[3])
        )

        if u != summed:  # the user's sum as float64, once per user row
            user_row = _row(uagg_z_sum, u)
            for j in range(d):
                user_sum[j] = user_row[j]
            summed = u
        exclude = uagg_ok and in_window
        if pair_ok or exclude:
            pair_row = _row(pair_z, i)
            for j in range(d):
                code[j] = _widened(pair_row, j)
            if pair_ok:
                for j in range(d):
                    features[i, k_pair * d + j] = code[j]
            if exclude:  # the mean without the current pair, in float64, rounded once
                for j in range(d):
                    features[i, k_uagg * d + j] = (user_sum[j] - code[j]) / effective
        if uagg_ok and not in_window:  # the whole window's mean
            if u != mean_of or effective != mean_count:
                for j in range(d):
                    window_mean[j] = user_sum[j] / effective
                mean_of, mean_count = u, effective
            for j in range(d):
                features[i, k_uagg * d + j] = window_mean[j]
        if nbr_ok:
            nbr_row = _row(nbr_z, i)
            for j in range(d):
                features[i, k_nbr * d + j] = _widened(nbr_row, j)
        if iagg_ok:
            item_row = _row(iagg_z_mean, i)
            for j in range(d):
                features[i, k_iagg * d + j] = item_row[j]

        mask[i, k_pair] = pair_ok
        mask[i, k_nbr] = nbr_ok
        mask[i, k_uagg] = uagg_ok
        mask[i, k_iagg] = iagg_ok
        for k in range(tiers):  # a missing tier's block is zeros
            if not mask[i, k]:
                for j in range(d):
                    features[i, k * d + j] = 0.0
        for k in range(tiers):
            if mask[i, k]:
                first[i] = k
                break
    return features, mask, first


@njit(
    [_signature(types.uint16), _signature(types.float32)],
    cache=True,
    nogil=True,
    error_model="numpy",
)
def assemble_rows(  # type: ignore[no-untyped-def]
    now,
    ttl_us,
    slots,
    pair_found,
    pair_event_us,
    pair_versions,
    pair_computed_at,
    pair_z,
    nbr_found,
    nbr_event_us,
    nbr_versions,
    nbr_z,
    uagg_found,
    uagg_event_us,
    uagg_versions,
    uagg_count,
    uagg_window_start,
    uagg_computed_at,
    uagg_z_sum,
    iagg_found,
    iagg_event_us,
    iagg_versions,
    iagg_count,
    iagg_z_mean,
    version,
):
    """The tiers of ``N`` rows given as arrays (decoded :class:`ViewRows`; training's
    rows): :func:`_assemble`'s arguments, each view's ``fm_version`` bytes ``[N, w]`` uint8
    in place of its ``*_version_ok`` and ``version`` the expected one's bytes."""
    return _assemble(
        now,
        ttl_us,
        slots,
        pair_found,
        pair_event_us,
        _matches(pair_versions, version),
        pair_computed_at,
        pair_z,
        nbr_found,
        nbr_event_us,
        _matches(nbr_versions, version),
        nbr_z,
        uagg_found,
        uagg_event_us,
        _matches(uagg_versions, version),
        uagg_count,
        uagg_window_start,
        uagg_computed_at,
        uagg_z_sum,
        iagg_found,
        iagg_event_us,
        _matches(iagg_versions, version),
        iagg_count,
        iagg_z_mean,
    )


def _records(now, ttl_us, slots, pair, nbr, uagg, iagg, version):  # type: ignore[no-untyped-def]
    # Every record is present; computed_at is the event time in whole seconds. Every
    # record's fm_version has the expected length (the caller's rule): compared in words.
    words = _words(version)
    present = np.ones(len(pair), np.bool_)
    return _assemble(
        now,
        ttl_us,
        slots,
        present,
        pair["event_us"],
        _matches_words(pair, version, words),
        pair["event_us"] // 1_000_000,
        pair,
        present,
        nbr["event_us"],
        _matches_words(nbr, version, words),
        nbr,
        np.ones(len(uagg), np.bool_),
        uagg["event_us"],
        _matches_words(uagg, version, words),
        uagg["count"],
        uagg["window_start"],
        uagg["event_us"] // 1_000_000,
        uagg,
        present,
        iagg["event_us"],
        _matches_words(iagg, version, words),
        iagg["count"],
        iagg,
    )


@njit(cache=True, nogil=True)
def _words(version):  # type: ignore[no-untyped-def]
    """The first ``8·⌊len/8⌋`` bytes of ``version`` as little-endian uint64 words."""
    out = np.zeros(len(version) // 8, np.uint64)
    for k in range(len(out) * 8):
        out[k // 8] |= np.uint64(version[k]) << np.uint64(8 * (k % 8))
    return out


@njit(cache=True, nogil=True)
def _matches_words(records, version, words):  # type: ignore[no-untyped-def]
    """``[R]`` bool: each record's ``version`` bytes equal ``version`` (of the same length),
    compared eight bytes at a time through its ``version_words`` view."""
    stored_words, stored = records["version_words"], records["version"]
    rows, size, whole = len(records), len(version), len(words) * 8
    out = np.empty(rows, np.bool_)
    for r in range(rows):
        same = True
        for k in range(len(words)):
            if stored_words[r, k] != words[k]:
                same = False
                break
        if same:
            for k in range(whole, size):
                if stored[r, k] != version[k]:
                    same = False
                    break
        out[r] = same
    return out


@functools.lru_cache(maxsize=32)
def records_kernel(pair: np.dtype, nbr: np.dtype, uagg: np.dtype, iagg: np.dtype):  # type: ignore[no-untyped-def]
    """:func:`assemble_records`' loop compiled for these record layouts (one per view layout,
    ``d`` and version length: one per deployment), every array taken as it comes; called as
    ``assemble_records`` is. A caller that keeps it skips the layout lookup per request
    (:class:`solaris.serving.tiers.TierAssembly`)."""

    def records(dtype: np.dtype) -> types.Array:
        return types.Array(from_dtype(dtype), 1, "A", readonly=True, aligned=False)

    def array(dtype: types.Type) -> types.Array:
        return types.Array(dtype, 1, "A", readonly=True, aligned=False)

    returns = types.Tuple(  # type: ignore[no-untyped-call]
        (
            types.Array(types.float32, 2, "C"),
            types.Array(types.boolean, 2, "C"),
            types.Array(types.int64, 1, "C"),
        )
    )
    signature = returns(
        array(types.float64),
        array(types.float64),
        array(types.int64),
        records(pair),
        records(nbr),
        records(uagg),
        records(iagg),
        array(types.uint8),
    )
    return njit([signature], cache=True, nogil=True, error_model="numpy")(_records)


def assemble_records(
    now: np.ndarray,
    ttl_us: np.ndarray,
    slots: np.ndarray,
    pair: np.ndarray,
    nbr: np.ndarray,
    uagg: np.ndarray,
    iagg: np.ndarray,
    version: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tiers of ``N`` rows given as their present records (the request path's uniform
    replies, :meth:`solaris.store.codec.RecordRows.fields`): structured arrays of
    ``event_us``, ``version`` (uint8 bytes) and ``code``, the view's ``(d,)`` values (pair,
    nbr: float16 bits or float32; uagg: the sum, float32, ``[N]`` or ``[1]`` rows; iagg:
    the mean, float32), and ``count``, ``window_start`` (uagg), ``count`` (iagg). The
    first call for a record layout compiles (a few seconds, then cached on disk);
    ``SolarisFeatures.warm_up`` makes it."""
    kernel = records_kernel(pair.dtype, nbr.dtype, uagg.dtype, iagg.dtype)
    features, mask, first = kernel(now, ttl_us, slots, pair, nbr, uagg, iagg, version)
    return features, mask, first
