"""User and item aggregates of pair codes.

The enrichment DAG turns the pair-embedding table (one code ``z[u,i]`` per verifier-selected
pair) into two fallback views (DESIGN §4):

* ``uagg`` (per user): the **sum** and **count** of the user's codes in the window
  ``(window_start, window_end]`` (24 h by default), so that a reader can form the user mean
  *excluding the current item*, ``(sum − z[u,i]) / (count − 1)``
  (:func:`solaris.serving.tiers.mean_excluding`);
* ``iagg`` (per item): the mean code of the item over users (the item-to-item fallback).

**Float16 rounding.** The ``pair`` view stores ``z`` as float16, and the reader removes the
*float16-decoded* pair code from the float32 sum. Every function here therefore aggregates
:func:`~solaris.store.codec.f16_round` codes, the values a reader actually sees, not the raw
float32 codes; otherwise ``sum − z[u,i]`` would leave a residue of the item's own rounding
error in the "mean of the other items". Sums and means are accumulated in float64 and
returned as float32 vectors (one ``[d]`` array per row), which the view's codec stores.

Inputs everywhere: ``pairs`` is a DataFrame with ``user_id`` and ``item_id`` (integers),
``computed_at`` (int64 epoch seconds; a datetime64 column, as in the offline parquet, is also
accepted) and ``fm_version``; ``z`` is a ``[N, d]`` floating array aligned row by row with it.
All functions are pure and vectorised (no Python loop over rows).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from solaris.errors import SolarisError
from solaris.manifest import FmVersionError, check_fm_version
from solaris.store.codec import f16_round
from solaris.store.contract import (
    COUNT,
    EVENT_TS,
    FM_VERSION,
    ITEM_ID,
    USER_ID,
    WINDOW_START,
    Z_MEAN,
    Z_SUM,
)

__all__ = [
    "AggregateError",
    "ItemPartials",
    "check_codes",
    "check_pairs",
    "item_aggregate",
    "item_partial_sums",
    "item_rows",
    "latest_per_pair",
    "reduce_item_partials",
    "select_window",
    "user_aggregate",
    "user_rows",
    "vectors",
    "window_mask",
]

_NS_PER_S = 1_000_000_000
_PAIR_COLUMNS = ("user_id", "item_id", "computed_at", "fm_version")

# --------------------------------------------------------------------------------------------
# Validation and the shared window selection
# --------------------------------------------------------------------------------------------


class AggregateError(SolarisError, ValueError):
    """Input the aggregates cannot use: pairs, codes, times or settings of the wrong form."""


def _as_int(name: str, value: object, *, positive: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise AggregateError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, numbers.Integral) or float(value).is_integer():
        out = int(value)
    else:
        raise AggregateError(f"{name} must be a whole number of seconds, got {value!r}")
    if positive and out <= 0:
        raise AggregateError(f"{name} must be > 0, got {out}")
    return out


def _check_version(fm_version: object) -> str:
    try:
        return check_fm_version(fm_version)  # the one rule for an fm_version
    except FmVersionError as exc:
        raise AggregateError(str(exc)) from None


def check_codes(z: np.ndarray, n_rows: int, *, name: str = "z") -> np.ndarray:
    """``z`` as float32 after checking it is ``[n_rows, d]``, floating, finite in float16."""
    arr = np.asarray(z)
    if arr.ndim != 2:
        raise AggregateError(f"{name} must be a 2-D array [N, d], got ndim={arr.ndim}")
    if arr.shape[0] != n_rows:
        raise AggregateError(f"{name} has {arr.shape[0]} rows but pairs has {n_rows}")
    if arr.shape[1] == 0:
        raise AggregateError(f"{name} must have at least one column")
    if not np.issubdtype(arr.dtype, np.floating):
        raise AggregateError(f"{name} must be a floating array, got dtype {arr.dtype}")
    if np.isnan(arr).any():
        raise AggregateError(f"{name} contains NaN")
    if not np.isfinite(arr).all():
        raise AggregateError(f"{name} contains ±inf")
    if (np.abs(arr) > np.finfo(np.float16).max).any():
        raise AggregateError(f"{name} has values outside the float16 range (stored as float16)")
    return arr.astype(np.float32, copy=False)


def _epoch_ns(col: pd.Series) -> np.ndarray:
    """``computed_at`` as int64 epoch nanoseconds (from int epoch seconds or datetime64)."""
    if col.isna().any():
        raise AggregateError("pairs.computed_at has missing values")
    if pd.api.types.is_datetime64_any_dtype(col):
        ts = pd.to_datetime(col, utc=True)
        return ts.dt.as_unit("ns").astype("int64").to_numpy()
    if pd.api.types.is_integer_dtype(col):
        return col.to_numpy(np.int64) * _NS_PER_S
    raise AggregateError(
        f"pairs.computed_at must be int64 epoch seconds or datetime64, got dtype {col.dtype}"
    )


def check_pairs(pairs: pd.DataFrame, columns: Sequence[str] = _PAIR_COLUMNS) -> None:
    """Raise ``ValueError`` unless ``pairs`` is a DataFrame with ``columns`` and integer ids."""
    if not isinstance(pairs, pd.DataFrame):
        raise AggregateError(f"pairs must be a pandas DataFrame, got {type(pairs).__name__}")
    missing = [c for c in columns if c not in pairs.columns]
    if missing:
        raise AggregateError(f"pairs is missing columns {missing}")
    for c in ("user_id", "item_id"):
        if c in columns and not pd.api.types.is_integer_dtype(pairs[c]):
            raise AggregateError(f"pairs.{c} must be an integer column, got dtype {pairs[c].dtype}")


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
    keep = window_mask(
        t,
        pairs["fm_version"].to_numpy(),
        as_of=as_of,
        window_seconds=window_seconds,
        fm_version=fm_version,
    )
    idx = np.flatnonzero(keep)
    users = pairs["user_id"].to_numpy(np.int64)[idx]
    items = pairs["item_id"].to_numpy(np.int64)[idx]
    win = latest_per_pair(users, items, t[idx])
    win = win[np.lexsort((items[win], users[win]))]  # rows by (user_id, item_id)
    rows = pd.DataFrame({"user_id": users[win], "item_id": items[win], "computed_at": t[idx][win]})
    z16 = f16_round(zf[idx[win]])
    return rows, z16


def window_mask(
    computed_at_ns: np.ndarray,
    fm_versions: np.ndarray,
    *,
    as_of: int,
    window_seconds: int,
    fm_version: str,
) -> np.ndarray:
    """Which codes are usable at ``as_of``: of ``fm_version`` and computed in
    ``(as_of − window_seconds, as_of]`` (``computed_at_ns``: epoch nanoseconds)."""
    end = as_of * _NS_PER_S
    start = (as_of - window_seconds) * _NS_PER_S
    return (fm_versions == fm_version) & (computed_at_ns > start) & (computed_at_ns <= end)


def latest_per_pair(users: np.ndarray, items: np.ndarray, computed_at: np.ndarray) -> np.ndarray:
    """The positions, ascending, of the code that wins for each (user, item) pair: the
    latest ``computed_at``, ties the later position. Pairs are told apart by hashing (a
    pair seldom has two codes in a window), and only repeated pairs are sorted."""
    span = int(items.max()) + 1 if len(items) else 1
    bound = np.iinfo(np.int64).max // span
    if len(users) and items.min() >= 0 and -bound < users.min() and users.max() < bound:
        key = users * span + items  # one int64 per pair: hashed faster than two columns
        repeated = pd.Series(key).duplicated(keep=False).to_numpy()
    else:
        repeated = pd.DataFrame({"u": users, "i": items}).duplicated(keep=False).to_numpy()
    if not repeated.any():
        return np.arange(len(users))
    rest = np.flatnonzero(repeated)
    order = rest[np.lexsort((rest, computed_at[rest], items[rest], users[rest]))]
    u, i = users[order], items[order]
    last = np.r_[(u[1:] != u[:-1]) | (i[1:] != i[:-1]), True]
    return np.sort(np.r_[np.flatnonzero(~repeated), order[last]])


def vectors(z: np.ndarray) -> np.ndarray:
    """``[N, d]`` as an object column of ``N`` float32 ``[d]`` rows (a DataFrame column)."""
    out = np.empty(len(z), dtype=object)
    out[:] = list(np.asarray(z, dtype=np.float32))
    return out


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
    latest). ``z_sum`` is the float32 sum of the *float16-rounded* codes, so a reader that
    subtracts the float16-decoded ``pair`` code gets the sum of the other items.

    Columns: ``user_id`` int64, ``z_sum`` (float32 ``[d]`` per row), ``count`` int64,
    ``window_start`` int64 epoch seconds (exclusive), ``fm_version`` str, ``event_ts`` UTC
    timestamp = ``as_of`` (the window end, inclusive). Sorted by ``user_id``; users with no
    row in the window are absent.
    """
    rows, z16 = select_window(
        pairs, z, as_of=as_of, window_seconds=window_seconds, fm_version=fm_version
    )
    users, sums, counts = _group_sums(rows["user_id"].to_numpy(), z16)
    return user_rows(
        users, sums, counts, as_of=as_of, window_seconds=window_seconds, fm_version=fm_version
    )


def user_rows(
    users: np.ndarray,
    sums: np.ndarray,
    counts: np.ndarray,
    *,
    as_of: int,
    window_seconds: int,
    fm_version: str,
) -> pd.DataFrame:
    """``uagg`` rows (see :func:`user_aggregate`) from per-user ``sums [U, d]`` (float64)
    and ``counts [U]`` of the window ``(as_of − window_seconds, as_of]``."""
    n = len(users)
    return pd.DataFrame(
        {
            USER_ID: np.asarray(users).astype(np.int64),
            Z_SUM: vectors(sums),
            COUNT: np.asarray(counts, np.int64),
            WINDOW_START: np.full(n, int(as_of) - int(window_seconds), dtype=np.int64),
            FM_VERSION: np.full(n, fm_version, dtype=object),
            EVENT_TS: _event_ts(int(as_of), n),
        }
    )


def item_partial_sums(
    pairs: pd.DataFrame,
    z: np.ndarray,
    *,
    as_of: int,
    window_seconds: int,
    fm_version: str,
) -> ItemPartials:
    """One partition's share of ``iagg``: per item, the float64 sum and the count of the
    float16-rounded pair codes of the partition's users in the window.

    Same selection as :func:`user_aggregate`. A pair belongs to its user's partition, so the
    partitions' partials add up to the whole population's (:func:`reduce_item_partials`),
    and exactly: every summand is a float16 value (a multiple of 2^-24 below 2^16 in
    magnitude), so float64 sums of them are exact in any order for codes below 16 in
    magnitude, far past any realistic count, and P partitions give the bits one pass gives.
    """
    rows, z16 = select_window(
        pairs, z, as_of=as_of, window_seconds=window_seconds, fm_version=fm_version
    )
    items, sums, counts = _group_sums(rows["item_id"].to_numpy(), z16)
    return ItemPartials(items.astype(np.int64), sums, counts)


@dataclass(frozen=True)
class ItemPartials:
    """Per item: ``items [M]`` int64 ascending, ``sums [M, d]`` float64, ``counts [M]`` int64."""

    items: np.ndarray
    sums: np.ndarray
    counts: np.ndarray

    def to_table(self) -> pa.Table:
        """As an Arrow table (``item_id``, ``z_sum`` fixed-size list of float64, ``count``)."""
        d = self.sums.shape[1] if self.sums.ndim == 2 else 0
        flat = pa.array(np.ascontiguousarray(self.sums, dtype=np.float64).reshape(-1))
        return pa.table(
            {
                ITEM_ID: pa.array(self.items, pa.int64()),
                Z_SUM: pa.FixedSizeListArray.from_arrays(flat, d),
                COUNT: pa.array(self.counts, pa.int64()),
            }
        )

    @classmethod
    def from_table(cls, table: pa.Table) -> ItemPartials:
        """The inverse of :meth:`to_table`."""
        column = table[Z_SUM].combine_chunks()
        d = column.type.list_size
        sums = column.flatten().to_numpy(zero_copy_only=False).reshape(len(table), d)
        return cls(
            table[ITEM_ID].to_numpy().astype(np.int64),
            sums.astype(np.float64, copy=False),
            table[COUNT].to_numpy().astype(np.int64),
        )


def reduce_item_partials(partials: Iterable[ItemPartials], *, z_dim: int) -> ItemPartials:
    """The sum of partitions' :class:`ItemPartials`, merged one at a time (memory: the
    running total and one partial). The counts ride along as one more column of the sums
    (float64: exact below 2^53), so one :func:`_group_sums` adds both up."""
    total = np.zeros((0, z_dim + 1))
    items = np.zeros(0, np.int64)
    for part in partials:
        if part.sums.ndim == 2 and len(part.items) and part.sums.shape[1] != z_dim:
            raise AggregateError(
                f"item partial sums have {part.sums.shape[1]} columns, not {z_dim}"
            )
        values = np.c_[part.sums.reshape(len(part.items), z_dim), part.counts]
        items, total, _ = _group_sums(np.r_[items, part.items], np.r_[total, values])
    return ItemPartials(items.astype(np.int64), total[:, :z_dim], total[:, z_dim].astype(np.int64))


def item_rows(partials: ItemPartials, *, as_of: int, fm_version: str) -> pd.DataFrame:
    """``iagg`` rows from the population's :class:`ItemPartials` (see :func:`item_aggregate`)."""
    n = len(partials.items)
    means = partials.sums / np.maximum(partials.counts, 1)[:, None]  # sums are [n, d]
    return pd.DataFrame(
        {
            ITEM_ID: partials.items.astype(np.int64),
            Z_MEAN: vectors(means),
            COUNT: partials.counts.astype(np.int64),
            FM_VERSION: np.full(n, _check_version(fm_version), dtype=object),
            EVENT_TS: _event_ts(int(as_of), n),
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

    Same selection as :func:`user_aggregate`. Columns: ``item_id`` int64, ``z_mean`` (float32
    ``[d]`` per row), ``count`` int64 (users averaged), ``fm_version``, ``event_ts`` (UTC,
    ``as_of``). Sorted by ``item_id``. One partition's :func:`item_partial_sums` turned
    into rows: the partitioned cycle's partial sums and their reduction give the same rows.
    """
    partials = item_partial_sums(
        pairs, z, as_of=as_of, window_seconds=window_seconds, fm_version=fm_version
    )
    return item_rows(partials, as_of=as_of, fm_version=fm_version)
