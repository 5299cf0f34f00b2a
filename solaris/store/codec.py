"""Records of the SOLARIS views: validation, the offline schema, and the Redis record codec.

One record holds one row of one view (``docs/online_store_format.md``)::

    record := event_us  fixed-fields  variable-fields
    event_us        int64 LE, the row's event time in microseconds since the epoch (UTC)
    fixed-fields    in declared order: vectors as d × float16 or float32 LE, int64 LE,
                    float32 LE; a computed_at field (Kind.EVENT_S) is not stored: it is
                    event_us // 10**6
    variable-fields in declared order; each but the last is prefixed by its byte length
                    (uint32 LE); the last runs to the end of the record. Strings are UTF-8,
                    lists are packed int64 / float32 LE.

Encoding and decoding are vectorised with numpy structured dtypes: a batch of records with
the same length (one ``fm_version`` in a batch, the usual case) is one ``frombuffer``. Only a
view with several variable fields (``unn``, off the request path) is coded row by row.

Every write goes through :func:`normalize` first, which validates a whole table (types,
nulls, id ranges, vector sizes, finiteness) and names the view, column and first bad row in
an :class:`~solaris.store.contract.InvalidWriteError`; so nothing is written from a table
that has one bad row.
"""

from __future__ import annotations

import functools
import math
import operator
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from solaris.store.contract import (
    EVENT_TS,
    MAX_EPOCH_S,
    ContractError,
    FieldSpec,
    InvalidWriteError,
    Kind,
    ViewParams,
    ViewSpec,
)

__all__ = [
    "RecordRows",
    "ViewRows",
    "decode_records",
    "decode_uniform",
    "encode_record_array",
    "encode_records",
    "f16_round",
    "normalize",
    "offline_schema",
    "rows_from_table",
    "widen",
]

_US = 1_000_000
_INT64_MAX = np.iinfo(np.int64).max
_F16_MAX = float(np.finfo(np.float16).max)
_F32_MAX = float(np.finfo(np.float32).max)
_EVENT = "__event_us"
_NUMPY = {
    Kind.VECTOR_F16: "<f2",
    Kind.VECTOR_F32: "<f4",
    Kind.INT64: "<i8",
    Kind.FLOAT32: "<f4",
    Kind.INT64_LIST: "<i8",
    Kind.FLOAT32_LIST: "<f4",
}


def widen(z: np.ndarray) -> np.ndarray:
    """``z`` as float32 (float16 widened exactly; float32 as it is).

    float16 goes through torch's conversion, which uses the CPU's half-precision
    instructions: numpy converts one value at a time, ~14 µs for a request's 300 × 32
    codes against ~3 µs, the largest single cost of a fetch (docs/feature_store.md)."""
    if z.dtype != np.float16:
        return z
    import torch  # a dependency of the package; imported once, on the first call

    if not (z.flags.c_contiguous and z.flags.writeable):  # torch wants its own buffer
        z = np.array(z, order="C")
    return torch.from_numpy(z).float().numpy()


def f16_round(z: np.ndarray) -> np.ndarray:
    """``z`` rounded to the nearest float16 and widened back to float32: the values a
    ``Kind.VECTOR_F16`` field serves, and what the offline store keeps for it."""
    return np.asarray(z).astype(np.float16).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Arrow schema of the offline rows
# --------------------------------------------------------------------------------------------


def _arrow_type(kind: Kind) -> pa.DataType:
    return {
        Kind.VECTOR_F16: pa.list_(pa.float32()),
        Kind.VECTOR_F32: pa.list_(pa.float32()),
        Kind.EVENT_S: pa.int64(),
        Kind.INT64: pa.int64(),
        Kind.FLOAT32: pa.float32(),
        Kind.STRING: pa.string(),
        Kind.INT64_LIST: pa.list_(pa.int64()),
        Kind.FLOAT32_LIST: pa.list_(pa.float32()),
    }[kind]


def offline_schema(spec: ViewSpec) -> pa.Schema:
    """The canonical Arrow schema of ``spec``'s rows: join keys (int64), the features in
    declared order, then ``event_ts`` (timestamp[us, UTC]). Offline parquet files, Feast's
    FileSource and every write use it."""
    return pa.schema(
        [pa.field(k, pa.int64(), nullable=False) for k in spec.join_keys]
        + [pa.field(f.name, _arrow_type(f.kind), nullable=False) for f in spec.fields]
        + [pa.field(EVENT_TS, pa.timestamp("us", tz="UTC"), nullable=False)]
    )


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _bad(spec: ViewSpec, column: str, row: int | None, problem: str) -> InvalidWriteError:
    where = f", row {row}" if row is not None else ""
    return InvalidWriteError(f"view {spec.name!r}, column {column!r}{where}: {problem}")


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _no_nulls(spec: ViewSpec, name: str, col: pa.ChunkedArray) -> None:
    if col.null_count:
        raise _bad(spec, name, _first(col.is_null().to_numpy(zero_copy_only=False)), "is null")


def _ints(spec: ViewSpec, name: str, col: pa.ChunkedArray, *, ids: bool) -> pa.Array:
    _no_nulls(spec, name, col)
    if not pa.types.is_integer(col.type):
        raise _bad(spec, name, None, f"must be integers, got {col.type}")
    values = col.to_numpy()
    if pa.types.is_unsigned_integer(col.type) and len(values) and values.max() > _INT64_MAX:
        raise _bad(spec, name, _first(values > _INT64_MAX), "is outside int64")
    values = values.astype(np.int64)
    if ids and (values < 0).any():
        raise _bad(spec, name, _first(values < 0), f"ids must be >= 0, got {values.min()}")
    return pa.array(values, pa.int64())


_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _event_us(spec: ViewSpec, col: pa.ChunkedArray) -> np.ndarray:
    """Event times in µs; they must be whole seconds (SOLARIS times are epoch seconds, and
    serving and the offline point-in-time join agree to the second only on whole seconds)."""
    _no_nulls(spec, EVENT_TS, col)
    if not pa.types.is_timestamp(col.type):
        raise _bad(spec, EVENT_TS, None, f"must be a timestamp, got {col.type}")
    # A zone-less timestamp is UTC (as in Feast); the cast to int64 keeps the column's unit.
    ticks = col.cast(pa.int64()).to_numpy()
    per_second = _PER_SECOND[col.type.unit]
    bad = (ticks < 0) | (ticks // per_second >= MAX_EPOCH_S)
    if bad.any():
        raise _bad(spec, EVENT_TS, _first(bad), "is outside 1970 .. 2286")
    fraction = ticks % per_second != 0
    if fraction.any():
        raise _bad(spec, EVENT_TS, _first(fraction), "must be a whole second")
    return ticks // per_second * _US


def _vectors(spec: ViewSpec, name: str, kind: Kind, col: pa.ChunkedArray, d: int) -> np.ndarray:
    _no_nulls(spec, name, col)
    t = col.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        raise _bad(spec, name, None, f"must be a list of {d} floats, got {t}")
    if not (pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type)):
        raise _bad(spec, name, None, f"must hold numbers, got {t.value_type}")
    arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
    if (lengths != d).any():
        row = _first(lengths != d)
        raise _bad(spec, name, row, f"expected {d} values, got {lengths[row]}")
    flat = pc.list_flatten(arr)
    if flat.null_count:
        nulls = flat.is_null().to_numpy(zero_copy_only=False).reshape(-1, d).any(axis=1)
        raise _bad(spec, name, _first(nulls), "holds a null value")
    z = flat.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(-1, d)
    limit = _F16_MAX if kind is Kind.VECTOR_F16 else _F32_MAX  # inf fails either limit
    # One reduction over everything (NaN propagates and fails the comparison; inf and float16
    # overflow exceed the limit); rows are looked at only to name the first bad one.
    if z.size and not np.abs(z).max() <= limit:
        row = _first(~(np.abs(z).max(axis=1) <= limit))
        problem = (
            "holds NaN or inf (or a value beyond float32)"
            if not np.isfinite(z[row]).all()
            else "holds values outside the float16 range"
        )
        raise _bad(spec, name, row, problem)
    return f16_round(z) if kind is Kind.VECTOR_F16 else z


def _within(spec: ViewSpec, field: FieldSpec, values: np.ndarray) -> None:
    """``values`` (one per row) within the field's ``minimum`` and ``maximum``."""
    if not len(values):
        return
    for bound, bad, word in (
        (field.minimum, lambda v, b: v < b, ">="),
        (field.maximum, lambda v, b: v > b, "<="),
    ):
        if bound is None:
            continue
        out = bad(values, bound)
        if out.any():
            row = _first(out)
            shown = f"{bound:g}" if isinstance(bound, float) else bound
            raise _bad(spec, field.name, row, f"must be {word} {shown}, got {values[row]}")


def _strings(spec: ViewSpec, name: str, col: pa.ChunkedArray) -> pa.Array:
    _no_nulls(spec, name, col)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise _bad(spec, name, None, f"must be strings, got {col.type}")
    arr = pc.cast(col, pa.string()).combine_chunks()
    empty = pc.equal(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False)
    if empty.any():
        raise _bad(spec, name, _first(empty), "is empty")
    return arr


def _lists(spec: ViewSpec, name: str, kind: Kind, col: pa.ChunkedArray) -> pa.Array:
    _no_nulls(spec, name, col)
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
        raise _bad(spec, name, None, f"must be a list, got {col.type}")
    target = _arrow_type(kind)
    values = col.type.value_type
    numeric = (
        pa.types.is_integer(values)
        or pa.types.is_null(values)  # every list empty
        or (kind is Kind.FLOAT32_LIST and pa.types.is_floating(values))
    )
    if not numeric:  # a cast would read "7" as 7: ids and similarities are numbers
        raise _bad(spec, name, None, f"must hold {target.value_type} values, got {col.type}")
    try:
        arr = pc.cast(col, target).combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise _bad(spec, name, None, f"cannot be read as {target}: {exc}") from exc
    if pc.list_flatten(arr).null_count:
        raise _bad(spec, name, None, "holds a null value")
    return arr


def normalize(spec: ViewSpec, params: ViewParams, data: pa.Table | pd.DataFrame) -> pa.Table:
    """``data`` validated and cast to :func:`offline_schema` (extra columns dropped).

    Vectors of a float16 field are rounded to float16 here, so the offline rows hold exactly
    what the online store serves. A ``computed_at`` column (Kind.EVENT_S) may be omitted; if
    present it must equal the event time in whole seconds.

    Raises:
        InvalidWriteError: the first problem found, naming view, column and row.
    """
    if isinstance(data, pd.DataFrame):
        try:
            data = pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InvalidWriteError(f"view {spec.name!r}: rows cannot be read: {exc}") from exc
    if not isinstance(data, pa.Table):
        raise InvalidWriteError(
            f"view {spec.name!r}: rows must be a pyarrow Table or a pandas DataFrame, "
            f"got {type(data).__name__}"
        )
    derived = {f.name for f in spec.fields if f.kind is Kind.EVENT_S}
    required = [*spec.join_keys, *(f.name for f in spec.fields if f.name not in derived)]
    missing = [c for c in (*required, EVENT_TS) if c not in data.column_names]
    if missing:
        raise InvalidWriteError(f"view {spec.name!r}: missing columns {missing}")
    if data.num_rows == 0:  # nothing to check (and empty columns may have no type)
        return offline_schema(spec).empty_table()

    event_us = _event_us(spec, data[EVENT_TS])
    columns: dict[str, pa.Array] = {k: _ints(spec, k, data[k], ids=True) for k in spec.join_keys}
    for f in spec.fields:
        if f.kind is Kind.EVENT_S:
            seconds = event_us // _US
            if f.name in data.column_names:
                given = _ints(spec, f.name, data[f.name], ids=False).to_numpy()
                if (given != seconds).any():
                    row = _first(given != seconds)
                    raise _bad(
                        spec, f.name, row, f"{given[row]} is not the event time {seconds[row]}"
                    )
            columns[f.name] = pa.array(seconds, pa.int64())
        elif f.kind.is_vector:
            z = _vectors(spec, f.name, f.kind, data[f.name], params.z_dim)
            offsets = np.arange(0, z.size + 1, params.z_dim, dtype=np.int32)
            columns[f.name] = pa.ListArray.from_arrays(
                pa.array(offsets), pa.array(z.ravel(), pa.float32())
            )
        elif f.kind is Kind.INT64:
            columns[f.name] = _ints(spec, f.name, data[f.name], ids=False)
            _within(spec, f, columns[f.name].to_numpy())
        elif f.kind is Kind.FLOAT32:
            col = data[f.name]
            _no_nulls(spec, f.name, col)
            if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
                raise _bad(spec, f.name, None, f"must be numbers, got {col.type}")
            values = col.to_numpy().astype(np.float32)
            if not np.isfinite(values).all():
                raise _bad(spec, f.name, _first(~np.isfinite(values)), "is NaN or inf")
            _within(spec, f, values)
            columns[f.name] = pa.array(values, pa.float32())
        elif f.kind is Kind.STRING:
            columns[f.name] = _strings(spec, f.name, data[f.name])
        else:
            columns[f.name] = _lists(spec, f.name, f.kind, data[f.name])
            flat = pc.list_flatten(columns[f.name]).to_numpy(zero_copy_only=False)
            if f.kind is Kind.FLOAT32_LIST and not np.isfinite(flat).all():
                raise _bad(spec, f.name, None, "holds NaN or inf")
            if f.minimum is not None and len(flat) and flat.min() < f.minimum:
                raise _bad(spec, f.name, None, f"holds values below {f.minimum:g}")
            if f.maximum is not None and len(flat) and flat.max() > f.maximum:
                raise _bad(spec, f.name, None, f"holds values above {f.maximum:g}")
    for f in spec.fields:
        if f.at_most_event_s:
            after = columns[f.name].to_numpy() > event_us // _US
            if after.any():
                row = _first(after)
                raise _bad(
                    spec,
                    f.name,
                    row,
                    f"{columns[f.name][row]} is after the row's event time "
                    f"{event_us[row] // _US} (the window's end)",
                )
        if f.never_key is not None:
            lengths = pc.list_value_length(columns[f.name]).to_numpy(zero_copy_only=False)
            flat = pc.list_flatten(columns[f.name]).to_numpy(zero_copy_only=False)
            keys = columns[f.never_key].to_numpy(zero_copy_only=False)
            own = flat == np.repeat(keys, lengths)
            if own.any():
                row = int(np.searchsorted(np.cumsum(lengths), _first(own), side="right"))
                raise _bad(
                    spec,
                    f.name,
                    row,
                    f"names the row's own {f.never_key} {keys[row]}: a list of others' ids",
                )
        if f.same_length_as is not None:
            mine = pc.list_value_length(columns[f.name]).to_numpy(zero_copy_only=False)
            theirs = pc.list_value_length(columns[f.same_length_as]).to_numpy(zero_copy_only=False)
            if (mine != theirs).any():
                row = _first(mine != theirs)
                raise _bad(spec, f.name, row, f"must have as many values as {f.same_length_as}")
    columns[EVENT_TS] = pa.array(event_us, pa.timestamp("us", tz="UTC"))
    return pa.table(columns, schema=offline_schema(spec))


# --------------------------------------------------------------------------------------------
# Decoded rows, as serving and training use them
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ViewRows:
    """One view's rows aligned with ``N`` requested entity rows.

    Attributes:
        found: ``[N]`` bool, a row exists (online: Redis held a record; offline: the
            point-in-time join found one).
        event_us: ``[N]`` int64 event time in microseconds (0 where not found).
        values: feature name → array: vectors ``[N, d]`` in their stored precision
            (float16 for ``Kind.VECTOR_F16``, float32 otherwise; readers widen them where
            they use them), ints ``[N]`` int64, floats ``[N]`` float32, strings ``[N]``
            bytes (numpy ``S``), lists ``[N]`` object arrays; zeros / empty where not found.
            Arrays may be read-only views of the records.
    """

    found: np.ndarray
    event_us: np.ndarray
    values: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.found)

    def current(self, now_s: float | np.ndarray) -> np.ndarray:
        """``[N]`` rows that exist and were computed at or before ``now_s`` (epoch seconds,
        a scalar or one per row)."""
        return self.found & (self.event_us <= np.multiply(now_s, _US))

    def fresh(self, now_s: float | np.ndarray, ttl_s: float) -> np.ndarray:
        """``[N]`` rows fresh at ``now_s``: ``now − ttl <= event time <= now``, both ends
        inclusive as in Feast's point-in-time join. Serving, training and the store's
        statuses all apply this one rule."""
        if isinstance(now_s, int | float) and math.isfinite(now_s) and ttl_s >= 0:
            # The request path (one time): ``lo <= event_us <= hi`` as one unsigned
            # comparison over integer bounds, the same rows as the general form below
            # (event times are integers, exact in float64).
            hi = math.floor(now_s * _US)
            lo = math.ceil(now_s * _US - ttl_s * _US)
            if hi >= lo:
                return self.found & ((self.event_us - lo).view(np.uint64) <= hi - lo)
        now_us = np.multiply(now_s, _US)
        return self.current(now_s) & (self.event_us >= now_us - ttl_s * _US)

    @classmethod
    def empty(cls, spec: ViewSpec, params: ViewParams, n: int) -> ViewRows:
        values: dict[str, np.ndarray] = {}
        for f in spec.fields:
            if f.kind.is_vector:
                values[f.name] = np.zeros((n, params.z_dim), _NUMPY[f.kind])
            elif f.kind in (Kind.EVENT_S, Kind.INT64):
                values[f.name] = np.zeros(n, np.int64)
            elif f.kind is Kind.FLOAT32:
                values[f.name] = np.zeros(n, np.float32)
            elif f.kind is Kind.STRING:
                values[f.name] = np.zeros(n, "S1")
            else:
                values[f.name] = np.full(n, None, object)
        return cls(np.zeros(n, bool), np.zeros(n, np.int64), values)


def rows_from_table(spec: ViewSpec, params: ViewParams, table: pa.Table) -> ViewRows:
    """:class:`ViewRows` from offline rows (``get_historical_features`` output): a row is
    found where its ``event_ts`` is not null. Columns are the view's field names."""
    n = table.num_rows
    out = ViewRows.empty(spec, params, n)
    ts = table[EVENT_TS]
    found = ~ts.is_null().to_numpy(zero_copy_only=False)
    out.found[:] = found
    us = pc.cast(ts, pa.timestamp("us", tz="UTC")).fill_null(0).cast(pa.int64()).to_numpy()
    out.event_us[:] = np.where(found, us, 0)
    idx = np.flatnonzero(found)
    if not len(idx):
        return out
    sub = table.take(pa.array(idx, pa.int64()))
    for f in spec.fields:
        col = sub[f.name].combine_chunks()
        if f.kind.is_vector:
            flat = pc.list_flatten(col).to_numpy(zero_copy_only=False)
            # Offline float16 fields hold float16-rounded values: the cast back is exact.
            out.values[f.name][idx] = flat.astype(_NUMPY[f.kind]).reshape(-1, params.z_dim)
        elif f.kind is Kind.EVENT_S:
            out.values[f.name][idx] = out.event_us[idx] // _US
        elif f.kind is Kind.STRING:
            strings = np.array(col.to_pylist(), dtype=object)
            encoded = np.char.encode(strings.astype(str), "utf-8") if len(idx) else strings
            width = max(1, encoded.dtype.itemsize) if len(idx) else 1
            column = np.zeros(n, f"S{width}")
            column[idx] = encoded
            out.values[f.name] = column
        elif f.kind in (Kind.INT64, Kind.FLOAT32):
            out.values[f.name][idx] = col.to_numpy(zero_copy_only=False)
        else:
            lists = np.empty(len(idx), object)
            lists[:] = [np.asarray(v, _NUMPY[f.kind]) for v in col.to_pylist()]
            out.values[f.name][idx] = lists
    return out


# --------------------------------------------------------------------------------------------
# The Redis record codec
# --------------------------------------------------------------------------------------------


@functools.cache
@functools.cache
def _stored(spec: ViewSpec) -> tuple[tuple[FieldSpec, ...], tuple[FieldSpec, ...]]:
    fixed = tuple(f for f in spec.fields if f.kind.is_fixed and f.kind is not Kind.EVENT_S)
    variable = tuple(f for f in spec.fields if not f.kind.is_fixed)
    return fixed, variable


@functools.cache
def _fixed_dtype(spec: ViewSpec, d: int, tail: int | None = None) -> np.dtype:
    """Structured dtype of the fixed part, plus a ``S{tail}`` string tail when the view's
    only variable field is a string of ``tail`` bytes."""
    fixed, variable = _stored(spec)
    parts: list[tuple] = [(_EVENT, "<i8")]
    for f in fixed:
        shape = (d,) if f.kind.is_vector else ()
        parts.append((f.name, _NUMPY[f.kind], shape) if shape else (f.name, _NUMPY[f.kind]))
    if tail:
        parts.append((variable[0].name, f"S{tail}"))
    return np.dtype(parts)


@functools.cache
def _decode_plan(spec: ViewSpec) -> tuple[tuple[str, bool, bool], ...]:
    """Per field of a simple-tail view: (name, derived from the event time, fixed in the
    record); a variable field here is the string tail."""
    return tuple(
        (f.name, f.kind is Kind.EVENT_S, f.kind.is_fixed and f.kind is not Kind.EVENT_S)
        for f in spec.fields
        if f.kind.is_fixed or f.kind is Kind.STRING
    )


@functools.cache
def _simple_tail(spec: ViewSpec) -> bool:
    """One variable field, a string: records decode with one structured dtype per length."""
    _, variable = _stored(spec)
    return len(variable) == 1 and variable[0].kind is Kind.STRING


def _fixed_width_strings(arr: pa.Array, width: int) -> np.ndarray:
    """A string/binary array whose values are all ``width`` bytes long, as numpy ``S``
    (zero-copy over Arrow's data buffer)."""
    arr = pc.cast(arr, pa.binary())
    offsets = np.frombuffer(arr.buffers()[1], np.int32, count=len(arr) + 1, offset=arr.offset * 4)
    return np.frombuffer(arr.buffers()[2], f"S{width}", count=len(arr), offset=int(offsets[0]))


def encode_records(
    spec: ViewSpec, params: ViewParams, table: pa.Table, order: np.ndarray | None = None
) -> list[bytes]:
    """One record per row of a :func:`normalize`-d table, in row order (or in the row
    order ``order``, a permutation, without reordering the table itself)."""
    uniform = encode_record_array(spec, params, table, order)
    if uniform is not None:
        return uniform.tolist()
    return _encode_records(spec, params, table, order)


def encode_record_array(
    spec: ViewSpec, params: ViewParams, table: pa.Table, order: np.ndarray | None = None
) -> np.ndarray | None:
    """The records as one numpy ``V<length>`` array when they all have the same length
    (one ``fm_version`` in the batch: the usual case), else ``None``."""
    n = table.num_rows
    _, variable = _stored(spec)
    if n == 0 or (variable and not _simple_tail(spec)):
        return None
    table = table.combine_chunks()
    width = 0
    if variable:
        lengths = pc.binary_length(table[variable[0].name].chunk(0)).to_numpy()
        width = int(lengths[0])
        if (lengths != width).any():
            return None
    records = _as_void(_record_array(spec, params, table, width))
    return records if order is None else records[order]


def _record_array(spec: ViewSpec, params: ViewParams, table: pa.Table, tail: int) -> np.ndarray:
    """The structured records of a combined table: the fixed part and, when ``tail``, the
    string tail of that many bytes (every row's)."""
    fixed, variable = _stored(spec)
    rec = np.empty(table.num_rows, _fixed_dtype(spec, params.z_dim, tail))
    rec[_EVENT] = table[EVENT_TS].chunk(0).cast(pa.int64()).to_numpy()
    for f in fixed:
        col = table[f.name].chunk(0)
        if f.kind.is_vector:
            flat = pc.list_flatten(col).to_numpy(zero_copy_only=False)
            rec[f.name] = flat.reshape(-1, params.z_dim)
        else:
            rec[f.name] = col.to_numpy(zero_copy_only=False)
    if tail:
        rec[variable[0].name] = _fixed_width_strings(table[variable[0].name].chunk(0), tail)
    return rec


def _as_void(rec: np.ndarray) -> np.ndarray:
    """Structured records as a flat array of opaque ``V<itemsize>`` values (bytes on
    ``tolist``)."""
    return rec.view(np.dtype((np.void, rec.dtype.itemsize))).ravel()


def _encode_records(
    spec: ViewSpec, params: ViewParams, table: pa.Table, order: np.ndarray | None
) -> list[bytes]:
    """:func:`encode_records` of records of several lengths."""
    n = table.num_rows
    if n == 0:
        return []
    _, variable = _stored(spec)
    table = table.combine_chunks()
    if _simple_tail(spec):
        # One structured array per tail length (a batch holds a few fm_versions at most).
        lengths = pc.binary_length(table[variable[0].name].chunk(0)).to_numpy()
        out = np.empty(n, object)
        for width in np.unique(lengths).tolist():
            rows = np.flatnonzero(lengths == width)
            part = table.take(pa.array(rows)).combine_chunks()
            out[rows] = _as_void(_record_array(spec, params, part, width)).tolist()
        return out.tolist() if order is None else out[order].tolist()

    # Several variable fields (``unn``): row by row, off the request path.
    heads = _as_void(_record_array(spec, params, table, 0)).tolist()
    values = [table[f.name].to_pylist() for f in variable]
    records = []
    for row, head in enumerate(heads):
        parts = [head]
        for k, f in enumerate(variable):
            value = values[k][row]
            blob = (
                value.encode()
                if f.kind is Kind.STRING
                else np.asarray(value, _NUMPY[f.kind]).tobytes()
            )
            if k < len(variable) - 1:
                parts.append(struct.pack("<I", len(blob)))
            parts.append(blob)
        records.append(b"".join(parts))
    return records if order is None else [records[i] for i in order.tolist()]


def _rows_from_records(
    spec: ViewSpec, params: ViewParams, rec: np.ndarray, found: np.ndarray, tail: int
) -> ViewRows:
    """:class:`ViewRows` of ``len(found)`` rows from the structured records of the found ones."""
    n = len(found)
    every = len(rec) == n
    # Fields are read-only views of the records where no conversion is needed.
    event_us = rec[_EVENT]
    if not every:
        event_us = np.zeros(n, np.int64)
        event_us[found] = rec[_EVENT]
    values: dict[str, np.ndarray] = {}
    for name, derived, stored in _decode_plan(spec):
        if derived:
            values[name] = event_us // _US
            continue
        if not stored and not tail:
            continue
        column = rec[name]
        if not every:
            full = np.zeros((n, *column.shape[1:]), column.dtype)
            full[found] = column
            column = full
        values[name] = column
    if len(values) < len(spec.fields):
        values = {**ViewRows.empty(spec, params, n).values, **values}
    return ViewRows(found, event_us, values)


def decode_uniform(spec: ViewSpec, params: ViewParams, records: np.ndarray) -> ViewRows:
    """:class:`ViewRows` of ``N`` records of one length, every one present: a ``V<L>``
    numpy array (the request path's uniform ``HMGET`` replies,
    :class:`solaris.store.resp.UniformReplies`, or one ``GET`` reply). Records of a
    simple-tail view come back as :class:`RecordRows`, decoded on first use."""
    d = params.z_dim
    size = records.dtype.itemsize
    head = _fixed_dtype(spec, d).itemsize
    if size < head or (_stored(spec)[1] and not _simple_tail(spec)):
        return decode_records(spec, params, [r.tobytes() for r in records])
    return RecordRows(spec, params, records)


def _decode_records_array(spec: ViewSpec, params: ViewParams, records: np.ndarray) -> ViewRows:
    """The eager decoding of :class:`RecordRows`: one dtype view."""
    head = _fixed_dtype(spec, params.z_dim).itemsize
    tail = records.dtype.itemsize - head
    rec = records.view(_fixed_dtype(spec, params.z_dim, tail))
    return _rows_from_records(spec, params, rec, np.ones(len(rec), bool), tail)


class RecordRows(ViewRows):
    """:class:`ViewRows` of ``N`` present records of one length, kept as the records (a
    ``V<L>`` array, e.g. a view of the receive buffer) and decoded on the first read of
    ``found``, ``event_us`` or ``values``. The request path's tier assembly reads
    :meth:`fields` instead, which decodes nothing: most of a request's cost beyond the wire
    was building these arrays one numpy call at a time (docs/feature_store.md)."""

    spec: ViewSpec
    params: ViewParams
    records: np.ndarray

    def __init__(self, spec: ViewSpec, params: ViewParams, records: np.ndarray) -> None:
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "records", records)

    def __len__(self) -> int:
        return len(self.records)

    @classmethod
    def blank(cls, spec: ViewSpec, params: ViewParams, n: int, tail: int) -> RecordRows:
        """``n`` all-zero records with a string tail of ``tail`` bytes (a warm-up's input)."""
        size = _fixed_dtype(spec, params.z_dim).itemsize + tail
        return cls(spec, params, np.zeros(n, f"V{size}"))

    @functools.cached_property
    def _decoded(self) -> ViewRows:
        return _decode_records_array(self.spec, self.params, self.records)

    found = property(lambda self: self._decoded.found)  # type: ignore[assignment]
    event_us = property(lambda self: self._decoded.event_us)  # type: ignore[assignment]
    values = property(lambda self: self._decoded.values)  # type: ignore[assignment]

    @property
    def tail(self) -> int:
        """Bytes of the string tail (``fm_version``) in every record."""
        return int(
            self.records.dtype.itemsize - _fixed_dtype(self.spec, self.params.z_dim).itemsize
        )

    def fields(self, **names: str) -> np.ndarray:
        """The records as a structured array of ``event_us`` (int64, the event time in
        microseconds) and the given fields under new names (``code="z"``), a view: int64
        fields as ``<i8``, float16 vectors as their ``<u2`` bits ``(d,)``, float32 vectors as
        ``<f4 (d,)``, the string tail as its ``u1`` bytes and, as ``<alias>_words``, the
        same bytes' whole 8-byte words (``<u8``, comparisons a word at a time)."""
        dtype = _fields_dtype(self.spec, self.params.z_dim, self.tail, tuple(names.items()))
        view: np.ndarray = self.records.view(dtype)
        return view


@functools.cache
def _fields_dtype(
    spec: ViewSpec, d: int, tail: int, names: tuple[tuple[str, str], ...]
) -> np.dtype:
    record = _fixed_dtype(spec, d, tail)
    offsets = {name: field[1] for name, field in (record.fields or {}).items()}
    kinds = {f.name: f.kind for f in spec.fields}
    out: dict[str, list[Any]] = {"names": ["event_us"], "formats": ["<i8"]}
    out["offsets"] = [offsets[_EVENT]]
    for alias, name in names:
        kind = kinds[name]
        fmt: object
        if kind is Kind.VECTOR_F16:
            fmt = ("<u2", (d,))
        elif kind is Kind.VECTOR_F32:
            fmt = ("<f4", (d,))
        elif kind is Kind.STRING:  # its bytes, and the same bytes as uint64 words
            out["names"].append(f"{alias}_words")
            out["formats"].append(("<u8", (tail // 8,)))
            out["offsets"].append(offsets[name])
            fmt = ("u1", (tail,))
        elif kind is Kind.INT64:
            fmt = "<i8"
        else:
            raise ContractError(f"view {spec.name}: field {name!r} ({kind}) has no record view")
        out["names"].append(alias)
        out["formats"].append(fmt)
        out["offsets"].append(offsets[name])
    layout: Any = {**out, "itemsize": record.itemsize}
    dtype: np.dtype = np.dtype(layout)
    return dtype


def decode_records(spec: ViewSpec, params: ViewParams, replies: Sequence[bytes | None]) -> ViewRows:
    """:class:`ViewRows` from Redis replies aligned with the requested rows (``None``: no
    record). A record too short to hold the fixed part is treated as absent."""
    n = len(replies)
    d = params.z_dim
    if n and (not _stored(spec)[1] or _simple_tail(spec)):
        # The usual case, one join and one frombuffer: every record present (a ``None``
        # makes the join fail) and of one length (one fm_version).
        try:
            blob = b"".join(replies)  # type: ignore[arg-type]
        except TypeError:
            blob = None
        size = len(replies[0]) if blob is not None else 0
        head = _fixed_dtype(spec, d).itemsize
        if size >= head and len(blob) == n * size and list(map(len, replies)).count(size) == n:
            rec = np.frombuffer(blob, _fixed_dtype(spec, d, size - head))
            return _rows_from_records(spec, params, rec, np.ones(n, bool), size - head)
    if None not in replies:
        found = np.ones(n, bool)
        present = replies
    else:
        found = np.fromiter(map(operator.is_not, replies, repeat(None)), bool, n)
        present = list(compress(replies, found))
    if len(present) == 0:
        return ViewRows.empty(spec, params, n)
    sizes = list(map(len, present))
    head = _fixed_dtype(spec, d).itemsize
    fixed, variable = _stored(spec)
    lo = sizes[0]
    if lo >= head and sizes.count(lo) == len(sizes) and (not variable or _simple_tail(spec)):
        # The usual case: one record length (one fm_version), decoded in one frombuffer.
        rec = np.frombuffer(b"".join(present), _fixed_dtype(spec, d, lo - head))
        return _rows_from_records(spec, params, rec, found, lo - head)

    lengths = np.asarray(sizes, np.int64)
    out = ViewRows.empty(spec, params, n)
    idx = np.flatnonzero(found)
    ok = lengths >= head
    if not ok.all():
        present = list(compress(present, ok))
        lengths, idx = lengths[ok], idx[ok]
    out.found[idx] = True
    if not present:
        return out
    if not variable or _simple_tail(spec):
        if variable:
            out.values[variable[0].name] = np.zeros(n, f"S{max(int(lengths.max()) - head, 1)}")
        for length in np.unique(lengths):
            sel = lengths == length
            rec = np.frombuffer(
                b"".join(compress(present, sel)), _fixed_dtype(spec, d, int(length) - head)
            )
            part = _rows_from_records(
                spec, params, rec, np.ones(len(rec), bool), int(length) - head
            )
            rows = idx[sel]
            out.event_us[rows] = part.event_us
            for name, values in part.values.items():
                out.values[name][rows] = values
        return out

    heads = np.frombuffer(b"".join(r[:head] for r in present), _fixed_dtype(spec, d))
    part = _rows_from_records(spec, params, heads, np.ones(len(heads), bool), 0)
    out.event_us[idx] = part.event_us
    for f in fixed:
        out.values[f.name][idx] = part.values[f.name]
    strings = {f.name: [b""] * n for f in variable if f.kind is Kind.STRING}
    for row, blob in zip(idx, present, strict=True):
        pos = head
        for k, f in enumerate(variable):
            if k < len(variable) - 1:
                (size,) = struct.unpack_from("<I", blob, pos)
                pos += 4
                chunk = blob[pos : pos + size]
                pos += size
            else:
                chunk = blob[pos:]
            if f.kind is Kind.STRING:
                strings[f.name][row] = chunk
            else:
                out.values[f.name][row] = np.frombuffer(chunk, _NUMPY[f.kind]).copy()
    for name, column in strings.items():
        out.values[name] = np.array(column, dtype="S")
    return out
