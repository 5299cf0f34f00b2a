"""User and item aggregates of pair codes, the leakage-free user mean, and the byte codecs.

The enrichment DAG turns the pair-embedding table (one code ``z[u,i]`` per verifier-selected
pair) into two fallback views (DESIGN §4):

* ``uagg`` (per user): the **sum** and **count** of the user's codes in the window
  ``(window_start, window_end]`` (24 h by default), so that a reader can form the user mean
  *excluding the current item*, ``(sum − z[u,i]) / (count − 1)``, with :func:`mean_excluding`;
* ``iagg`` (per item): the mean code of the item over users (the item-to-item fallback).

**Float16 rounding.** The ``pair`` view stores ``z`` as float16 bytes, and the reader removes
the *float16-decoded* pair code from the float32 sum. Every function here therefore aggregates
``z.astype(float16).astype(float32)``, the values a reader actually sees, not the raw float32
codes; otherwise ``sum − z[u,i]`` would leave a residue of the item's own rounding error in the
"mean of the other items". Sums and means are accumulated in float64 and stored as float32.

Inputs everywhere: ``pairs`` is a DataFrame with ``user_id`` and ``item_id`` (integers),
``computed_at`` (int64 epoch seconds; a datetime64 column, as in the offline parquet, is also
accepted) and ``fm_version``; ``z`` is a ``[N, d]`` floating array aligned row by row with it.
All functions are pure and vectorised (no Python loop over rows).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = [
    "check_codes",
    "check_pairs",
    "item_aggregate",
    "mean_excluding",
    "pack_f16",
    "pack_f32",
    "select_window",
    "unpack_f16",
    "unpack_f32",
    "user_aggregate",
]

_NS_PER_S = 1_000_000_000
_PAIR_COLUMNS = ("user_id", "item_id", "computed_at", "fm_version")

# --------------------------------------------------------------------------------------------
# Byte codecs (little-endian, one fixed-width row per value)
# --------------------------------------------------------------------------------------------


def _pack(z: np.ndarray, dtype: str) -> list[bytes]:
    arr = np.asarray(z)
    if arr.ndim != 2:
        raise ValueError(f"expected a 2-D array [N, d], got shape {arr.shape}")
    if arr.shape[1] == 0:
        raise ValueError("cannot pack vectors of dimension 0")
    arr = np.ascontiguousarray(arr, dtype=dtype)
    width = arr.shape[1] * arr.dtype.itemsize
    # A void view of one row per element: ``tolist`` gives one bytes object per row, made in C.
    return arr.view(np.dtype((np.void, width))).ravel().tolist()


def _unpack(values: Sequence[bytes | None], d: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d <= 0:
        raise ValueError(f"d must be a positive integer, got {d!r}")
    d = int(d)
    width = d * np.dtype(dtype).itemsize
    cells = np.empty(len(values), dtype=object)
    cells[:] = list(values)
    # The one per-element step is the type/length test; decoding is a single join + frombuffer.
    present = np.fromiter(
        (isinstance(v, bytes | bytearray) and len(v) == width for v in cells),
        dtype=bool,
        count=len(cells),
    )
    out = np.zeros((len(cells), d), dtype=np.float32)
    if present.any():
        buf = b"".join(cells[present].tolist())
        out[present] = np.frombuffer(buf, dtype=dtype).reshape(-1, d)
    return out, present


def pack_f32(z: np.ndarray) -> list[bytes]:
    """Rows of ``z [N, d]`` as ``N`` little-endian float32 byte strings of ``4·d`` bytes."""
    return _pack(z, "<f4")


def unpack_f32(values: Sequence[bytes | None], d: int) -> tuple[np.ndarray, np.ndarray]:
    """Decode :func:`pack_f32` values: ``(z [N, d] float32, present [N] bool)``.

    A value that is ``None``, not bytes, or not exactly ``4·d`` bytes long is *not present*
    and decodes to a zero row, so a missing or foreign-dimension feature never raises here.
    """
    return _unpack(values, d, "<f4")


def pack_f16(z: np.ndarray) -> list[bytes]:
    """Rows of ``z [N, d]``, rounded to nearest float16, as little-endian ``2·d``-byte strings."""
    return _pack(z, "<f2")


def unpack_f16(values: Sequence[bytes | None], d: int) -> tuple[np.ndarray, np.ndarray]:
    """Decode :func:`pack_f16` values to ``(z [N, d] float32, present [N] bool)``.

    The float16 → float32 widening is exact. Rows that are ``None``, not bytes, or not exactly
    ``2·d`` bytes long are not present and decode to zeros.
    """
    return _unpack(values, d, "<f2")


# --------------------------------------------------------------------------------------------
# Validation and the shared window selection
# --------------------------------------------------------------------------------------------


def _as_int(name: str, value: object, *, positive: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, numbers.Integral) or float(value).is_integer():
        out = int(value)
    else:
        raise ValueError(f"{name} must be a whole number of seconds, got {value!r}")
    if positive and out <= 0:
        raise ValueError(f"{name} must be > 0, got {out}")
    return out


def _check_version(fm_version: object) -> str:
    if not isinstance(fm_version, str) or not fm_version:
        raise ValueError(f"fm_version must be a non-empty string, got {fm_version!r}")
    return fm_version


def check_codes(z: np.ndarray, n_rows: int, *, name: str = "z") -> np.ndarray:
    """``z`` as float32 after checking it is ``[n_rows, d]``, floating, finite in float16."""
    arr = np.asarray(z)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array [N, d], got ndim={arr.ndim}")
    if arr.shape[0] != n_rows:
        raise ValueError(f"{name} has {arr.shape[0]} rows but pairs has {n_rows}")
    if arr.shape[1] == 0:
        raise ValueError(f"{name} must have at least one column")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{name} must be a floating array, got dtype {arr.dtype}")
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains ±inf")
    if (np.abs(arr) > np.finfo(np.float16).max).any():
        raise ValueError(f"{name} has values outside the float16 range (stored as float16)")
    return arr.astype(np.float32, copy=False)


def _epoch_ns(col: pd.Series) -> np.ndarray:
    """``computed_at`` as int64 epoch nanoseconds (from int epoch seconds or datetime64)."""
    if col.isna().any():
        raise ValueError("pairs.computed_at has missing values")
    if pd.api.types.is_datetime64_any_dtype(col):
        ts = pd.to_datetime(col, utc=True)
        return ts.dt.as_unit("ns").astype("int64").to_numpy()
    if pd.api.types.is_integer_dtype(col):
        return col.to_numpy(np.int64) * _NS_PER_S
    raise ValueError(
        f"pairs.computed_at must be int64 epoch seconds or datetime64, got dtype {col.dtype}"
    )


def check_pairs(pairs: pd.DataFrame, columns: Sequence[str] = _PAIR_COLUMNS) -> None:
    """Raise ``ValueError`` unless ``pairs`` is a DataFrame with ``columns`` and integer ids."""
    if not isinstance(pairs, pd.DataFrame):
        raise ValueError(f"pairs must be a pandas DataFrame, got {type(pairs).__name__}")
    missing = [c for c in columns if c not in pairs.columns]
    if missing:
        raise ValueError(f"pairs is missing columns {missing}")
    for c in ("user_id", "item_id"):
        if c in columns and not pd.api.types.is_integer_dtype(pairs[c]):
            raise ValueError(f"pairs.{c} must be an integer column, got dtype {pairs[c].dtype}")


def select_window(
    pairs: pd.DataFrame,
    z: np.ndarray,
    *,
    as_of: int,
    window_seconds: int,
    fm_version: str,
) -> tuple[pd.DataFrame, np.ndarray]:
    """The pair rows usable at ``as_of`` and their float16-rounded codes.

    Keeps rows with ``pairs.fm_version == fm_version`` and
    ``as_of − window_seconds < computed_at <= as_of`` (open at the start, closed at the end,
    so consecutive windows partition time). When a (user, item) pair occurs several times the
    row with the latest ``computed_at`` wins (ties: the later row in ``pairs``).

    Returns ``(rows, z16)``: ``rows`` has ``user_id``, ``item_id`` (int64) and ``computed_at``
    (epoch ns) with a fresh ``RangeIndex``; ``z16 [len(rows), d]`` float32 holds
    ``z.astype(float16).astype(float32)`` of those rows, the values the ``pair`` view serves.
    """
    check_pairs(pairs)
    zf = check_codes(z, len(pairs))
    as_of = _as_int("as_of", as_of)
    window_seconds = _as_int("window_seconds", window_seconds, positive=True)
    fm_version = _check_version(fm_version)

    t = _epoch_ns(pairs["computed_at"])
    end = as_of * _NS_PER_S
    start = (as_of - window_seconds) * _NS_PER_S
    keep = (pairs["fm_version"].to_numpy() == fm_version) & (t > start) & (t <= end)
    idx = np.flatnonzero(keep)
    rows = pd.DataFrame(
        {
            "user_id": pairs["user_id"].to_numpy(np.int64)[idx],
            "item_id": pairs["item_id"].to_numpy(np.int64)[idx],
            "computed_at": t[idx],
            "_row": idx,
        }
    )
    rows = rows.sort_values("computed_at", kind="stable").drop_duplicates(
        ["user_id", "item_id"], keep="last"
    )
    rows = rows.sort_values(["user_id", "item_id"], kind="stable").reset_index(drop=True)
    z16 = zf[rows.pop("_row").to_numpy()].astype(np.float16).astype(np.float32)
    return rows, z16


def _group_sums(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unique ``keys`` (ascending), float64 sums of ``values`` rows per key, and counts."""
    if len(keys) == 0:
        return keys[:0], np.zeros((0, values.shape[1])), np.zeros(0, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    sums = np.add.reduceat(values[order].astype(np.float64), starts, axis=0)
    counts = np.diff(np.r_[starts, len(k)]).astype(np.int64)
    return k[starts], sums, counts


def _event_ts(as_of: int, n: int) -> pd.Series:
    return pd.Series(pd.Timestamp(as_of, unit="s", tz="UTC"), index=range(n)).astype(
        "datetime64[ns, UTC]"
    )


# --------------------------------------------------------------------------------------------
# Aggregates
# --------------------------------------------------------------------------------------------


def user_aggregate(
    pairs: pd.DataFrame,
    z: np.ndarray,
    *,
    as_of: int,
    window_seconds: int,
    fm_version: str,
) -> pd.DataFrame:
    """``uagg`` rows: per user, the sum and count of pair codes in ``(as_of − window, as_of]``.

    Rows are selected by :func:`select_window` (same ``fm_version``, one row per pair, the
    latest). ``z_sum`` is the float32 bytes (:func:`pack_f32`) of the sum of the
    *float16-rounded* codes, so a reader that subtracts the float16-decoded ``pair`` code gets
    the sum of the other items (see :func:`mean_excluding`).

    Columns: ``user_id`` int64, ``z_sum`` bytes, ``count`` int64, ``window_start`` int64 epoch
    seconds (exclusive), ``fm_version`` str, ``event_ts`` UTC timestamp = ``as_of`` (the
    window end, inclusive). Sorted by ``user_id``; users with no row in the window are absent.
    """
    rows, z16 = select_window(
        pairs, z, as_of=as_of, window_seconds=window_seconds, fm_version=fm_version
    )
    users, sums, counts = _group_sums(rows["user_id"].to_numpy(), z16)
    n = len(users)
    return pd.DataFrame(
        {
            "user_id": users.astype(np.int64),
            "z_sum": pack_f32(sums) if n else [],
            "count": counts,
            "window_start": np.full(n, int(as_of) - int(window_seconds), dtype=np.int64),
            "fm_version": np.full(n, fm_version, dtype=object),
            "event_ts": _event_ts(int(as_of), n),
        }
    )


def item_aggregate(
    pairs: pd.DataFrame,
    z: np.ndarray,
    *,
    as_of: int,
    window_seconds: int,
    fm_version: str,
) -> pd.DataFrame:
    """``iagg`` rows: per item, the mean float16-rounded pair code over users in the window.

    Same selection as :func:`user_aggregate`. Columns: ``item_id`` int64, ``z_mean`` float32
    bytes, ``count`` int64 (users averaged), ``fm_version``, ``event_ts`` (UTC, ``as_of``).
    Sorted by ``item_id``.
    """
    rows, z16 = select_window(
        pairs, z, as_of=as_of, window_seconds=window_seconds, fm_version=fm_version
    )
    items, sums, counts = _group_sums(rows["item_id"].to_numpy(), z16)
    n = len(items)
    means = sums / np.maximum(counts, 1)[:, None]
    return pd.DataFrame(
        {
            "item_id": items.astype(np.int64),
            "z_mean": pack_f32(means) if n else [],
            "count": counts,
            "fm_version": np.full(n, fm_version, dtype=object),
            "event_ts": _event_ts(int(as_of), n),
        }
    )


def mean_excluding(
    z_sum: np.ndarray,
    count: np.ndarray,
    z_pair: np.ndarray,
    pair_in_window: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The user-aggregate mean without the current pair: the one formula training and serving share.

    For each row ``n``::

        in window:      mean = (z_sum − z_pair) / (count − 1)
        otherwise:      mean = z_sum / count
        valid = effective count (count − 1, or count) > 0;   invalid rows are zeros

    Args:
        z_sum: ``[N, d]`` the decoded ``uagg.z_sum`` (float32 sum of float16-rounded codes).
        count: ``[N]`` integer ``uagg.count`` (0 for a missing ``uagg`` row).
        z_pair: ``[N, d]`` the *float16-decoded* ``pair`` code of the current (user, item)
            (:func:`unpack_f16`); ignored, and may be anything (zeros, NaN), where
            ``pair_in_window`` is False.
        pair_in_window: ``[N]`` bool, True exactly when this pair's code was counted in the
            sum: same ``fm_version`` as the ``uagg`` row and
            ``window_start < pair.computed_at <= uagg.event_ts``. (A pair recomputed after the
            aggregate was built is not in the window: its new code was not summed, and the old
            one cannot be removed; that is the price of storing only sum and count.)

    Returns ``(mean [N, d] float32, valid [N] bool)``. Arithmetic is float64, so the result
    equals the mean of the other items' float16-rounded codes up to the float32 rounding of
    the stored sum. ``count == 0`` with ``pair_in_window`` (an inconsistent input) is invalid,
    not an error, so one bad row cannot fail a serving request.
    """
    s = np.asarray(z_sum)
    c = np.asarray(count)
    p = np.asarray(z_pair)
    w = np.asarray(pair_in_window)
    if s.ndim != 2:
        raise ValueError(f"z_sum must be 2-D [N, d], got shape {s.shape}")
    n = s.shape[0]
    if p.shape != s.shape:
        raise ValueError(f"z_pair has shape {p.shape}, expected {s.shape} like z_sum")
    if c.shape != (n,) or w.shape != (n,):
        raise ValueError(
            f"count and pair_in_window must have shape ({n},), got {c.shape} and {w.shape}"
        )
    if not np.issubdtype(c.dtype, np.integer):
        raise ValueError(f"count must be integers, got dtype {c.dtype}")
    if w.dtype != np.bool_:
        raise ValueError(f"pair_in_window must be bool, got dtype {w.dtype}")
    if (c < 0).any():
        raise ValueError("count must be >= 0")

    eff = c.astype(np.int64) - w.astype(np.int64)
    valid = eff > 0
    num = s.astype(np.float64) - np.where(w[:, None], p.astype(np.float64), 0.0)
    mean = np.where(valid[:, None], num / np.maximum(eff, 1)[:, None], 0.0)
    return mean.astype(np.float32), valid
