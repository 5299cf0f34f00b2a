"""pyarrow schemas of the SOLARIS tables.

Times in ``requests`` and ``candidates`` are epoch seconds (int64, UTC); ``computed_at`` in
``pair_embeddings`` is a UTC timestamp because it becomes the Feast event timestamp.

Besides the schemas, this module enforces them: ``validate_*`` / :func:`validate` check a
``pyarrow.Table`` (columns, types, nulls, id signs, embedding shape and finiteness, times in
``[0, MAX_EPOCH_S)`` epoch seconds, ``ts`` order, no rows after ``as_of``) and return it
with exactly the schema's columns and types; :func:`read_table` and :func:`write_table` do
the same around parquet files. Every broken rule raises :class:`SchemaError` naming the
source, the column and the problem. All checks are vectorised ``pyarrow.compute`` calls
because these tables reach 10^7 rows.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from solaris.errors import SolarisError
from solaris.files import (
    ArgumentTypeError,
    StatePath,
    arrow_source,
    atomic_write,
    is_local,
    parquet_input,
    state_path,
)
from solaris.times import MAX_EPOCH_S

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CANDIDATES_SCHEMA",
    "REQUESTS_SCHEMA",
    "REQUEST_LOG_SCHEMA",
    "SchemaError",
    "pair_codes",
    "pair_embeddings_schema",
    "read_table",
    "request_log_frame",
    "validate",
    "validate_candidates",
    "validate_pair_embeddings",
    "validate_request_log",
    "validate_requests",
    "write_table",
]

REQUESTS_SCHEMA = pa.schema(
    [
        pa.field("request_id", pa.int64(), nullable=False),
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("ts", pa.int64(), nullable=False),
    ]
)

CANDIDATES_SCHEMA = pa.schema(
    [
        pa.field("request_id", pa.int64(), nullable=False),
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("item_id", pa.int64(), nullable=False),
        pa.field("ts", pa.int64(), nullable=False),
        pa.field("label", pa.int8(), nullable=True),  # null: an unlabelled candidate
    ]
)

# The request log: candidates with the verifier score serving logged (null: none logged).
REQUEST_LOG_SCHEMA = CANDIDATES_SCHEMA.append(pa.field("score", pa.float32(), nullable=True))


def pair_embeddings_schema(z_dim: int) -> pa.Schema:
    """Schema of pair-embedding rows whose code ``z`` has ``z_dim`` floats."""
    return pa.schema(
        [
            pa.field("user_id", pa.int64(), nullable=False),
            pa.field("item_id", pa.int64(), nullable=False),
            pa.field("z", pa.list_(pa.float32(), z_dim), nullable=False),
            pa.field("fm_version", pa.string(), nullable=False),
            pa.field("computed_at", pa.timestamp("us", tz="UTC"), nullable=False),
        ]
    )


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------

TableKind = Literal["requests", "candidates", "request_log", "pair_embeddings"]

# Integer columns that hold identifiers; a negative value there is always a bug upstream
# (hash overflow, sentinel -1 leaking through), never a legitimate id.
_ID_COLUMNS = frozenset({"request_id", "user_id", "item_id"})

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_COMPUTED_AT_TYPE = pa.timestamp("us", tz="UTC")

# A ChunkedArray is what table columns are; plain Arrays appear after per-chunk work.
_Column = pa.ChunkedArray | pa.Array


class SchemaError(SolarisError, ValueError):
    """A table that breaks its contract.

    Attributes:
        source: file path or other name of the table, so the message points at the culprit.
        column: the offending column, or ``None`` when the problem is not about one column.
        problem: what is wrong, in words, with counts and the first offending row.
    """

    def __init__(self, source: str, column: str | None, problem: str) -> None:
        self.source = source
        self.column = column
        self.problem = problem
        if column is None:
            message = f"{source}: {problem}"
        else:
            message = f"{source}: column '{column}': {problem}"
        super().__init__(message)

    def __reduce__(self) -> tuple[type[SchemaError], tuple[str, str | None, str]]:
        # Keep the error picklable (Airflow / multiprocessing ship exceptions between processes);
        # the default would call __init__ with the formatted message only.
        return (type(self), (self.source, self.column, self.problem))


# --------------------------------------------------------------------------------------------
# Small vectorised helpers
# --------------------------------------------------------------------------------------------


def _count_true(mask: _Column) -> int:
    # pc.sum of an empty array is null, hence the ``or 0``.
    return int(pc.sum(mask).as_py() or 0)


def _first_true(mask: _Column) -> int:
    return int(pc.index(mask, True).as_py())


def _check_columns(names: list[str], present: list[str], source: str) -> None:
    missing = [name for name in names if name not in present]
    if missing:
        also = f"; also missing: {missing[1:]}" if len(missing) > 1 else ""
        raise SchemaError(source, missing[0], f"missing column{also}; columns present: {present}")


def _check_no_nulls(col: _Column, name: str, source: str) -> None:
    n_null = col.null_count
    if n_null:
        first = _first_true(pc.is_null(col))
        raise SchemaError(source, name, f"{n_null} null values (first at row {first})")


def _type_error(source: str, name: str, actual: pa.DataType, expected: str) -> SchemaError:
    return SchemaError(source, name, f"wrong type: got {actual}, expected {expected}")


def _coerce_integer(col: pa.ChunkedArray, field: pa.Field, source: str) -> pa.ChunkedArray:
    """Accept any integer type (and an all-null column) that casts safely to ``field.type``."""
    name, target = field.name, field.type
    actual = col.type
    # null type: a column that pandas/parquet wrote with no values; the null check reports it.
    if not (pa.types.is_integer(actual) or pa.types.is_null(actual)):
        raise _type_error(source, name, actual, f"{target} (or an integer type that casts to it)")
    if actual == target:
        return col
    try:
        return pc.cast(col, target, safe=True)
    except pa.ArrowInvalid:
        # Only values outside the target range fail a safe integer cast (e.g. uint64 > 2**63-1).
        lo, hi = pc.min_max(col).values()
        raise SchemaError(
            source,
            name,
            f"values out of range for {target}: type {actual} with min {lo}, max {hi}",
        ) from None


def _check_non_negative(col: pa.ChunkedArray, name: str, source: str) -> None:
    negative = pc.less(col, 0)
    n_neg = _count_true(negative)
    if n_neg:
        first = _first_true(negative)
        raise SchemaError(
            source, name, f"{n_neg} negative ids (first at row {first}: {col[first].as_py()})"
        )


def _check_epoch_range(col: pa.ChunkedArray, name: str, source: str, per_second: int = 1) -> None:
    """Times (``per_second`` ticks a second) must be epoch seconds in ``[0, MAX_EPOCH_S)``:
    a negative value is a sentinel or an overflow, a larger one milliseconds, not seconds."""
    ticks = col if pa.types.is_integer(col.type) else col.cast(pa.int64())
    outside = pc.or_(pc.less(ticks, 0), pc.greater_equal(ticks, MAX_EPOCH_S * per_second))
    n_out = _count_true(outside)
    if n_out:
        first = _first_true(outside)
        raise SchemaError(
            source,
            name,
            f"{n_out} times outside [0, {MAX_EPOCH_S:.0e}) epoch seconds, i.e. before 1970 or "
            f"in milliseconds (first at row {first}: {col[first].as_py()})",
        )


def _check_sorted(col: pa.ChunkedArray, name: str, source: str) -> None:
    # Compare each row with its predecessor; nulls were rejected before so the mask has none.
    n = len(col)
    if n < 2:
        return
    decreasing = pc.less(col.slice(1), col.slice(0, n - 1))
    if _count_true(decreasing):
        row = _first_true(decreasing) + 1
        raise SchemaError(
            source,
            name,
            f"not sorted by {name} (ascending): row {row} has {name}={col[row].as_py()} "
            f"after {name}={col[row - 1].as_py()} at row {row - 1}",
        )


def _check_not_after(
    col: pa.ChunkedArray, bound: pa.Scalar, shown_as_of: object, name: str, source: str
) -> None:
    after = pc.greater(col, bound)
    n_after = _count_true(after)
    if n_after:
        first = _first_true(after)
        raise SchemaError(
            source,
            name,
            f"{n_after} timestamps after as_of={shown_as_of} "
            f"(first at row {first}: {col[first].as_py()})",
        )


def _epoch_seconds(as_of: object) -> int:
    # bool is an Integral, but as_of=True is certainly a caller bug.
    if isinstance(as_of, bool) or not isinstance(as_of, numbers.Integral):
        raise ArgumentTypeError(f"as_of must be epoch seconds (int), got {type(as_of).__name__}")
    return int(as_of)


def _optional_seconds(as_of: object) -> int | None:
    return None if as_of is None else _epoch_seconds(as_of)


def _as_of_micros(as_of: object) -> tuple[int, str]:
    """Microseconds since the epoch (UTC) of ``as_of``, plus how to show it in messages."""
    if isinstance(as_of, datetime):  # pd.Timestamp is a datetime subclass
        if as_of.tzinfo is None or as_of.utcoffset() is None:
            # A naive bound is ambiguous against UTC data; refuse rather than guess.
            raise SchemaError("as_of", None, f"must be timezone-aware, got naive {as_of!r}")
        # Floor division: computed_at (whole us) > as_of  <=>  computed_at > floor(as_of in us),
        # which stays exact for pd.Timestamp values with nanoseconds.
        return (as_of - _EPOCH) // timedelta(microseconds=1), as_of.isoformat()
    seconds = _epoch_seconds(as_of)
    return seconds * 1_000_000, str(seconds)


def _finish(columns: dict[str, pa.ChunkedArray], schema: pa.Schema) -> pa.Table:
    # Building from the schema drops extra columns and fixes the order and field nullability.
    return pa.Table.from_arrays([columns[name] for name in schema.names], schema=schema)


def _require_table(table: object, source: str) -> pa.Table:
    if not isinstance(table, pa.Table):
        raise ArgumentTypeError(f"{source}: expected a pyarrow.Table, got {type(table).__name__}")
    return table


def _validate_int_columns(
    table: pa.Table, schema: pa.Schema, source: str
) -> dict[str, pa.ChunkedArray]:
    """Type, null and id checks shared by ``requests`` and ``candidates`` (all-integer tables)."""
    out: dict[str, pa.ChunkedArray] = {}
    for field in schema:
        col = table.column(field.name)
        if field.name == "label":
            out[field.name] = _validate_label(col, field, source)
            continue
        col = _coerce_integer(col, field, source)
        if not field.nullable:
            _check_no_nulls(col, field.name, source)
        if field.name in _ID_COLUMNS:
            _check_non_negative(col, field.name, source)
        out[field.name] = col
    return out


def _validate_label(col: pa.ChunkedArray, field: pa.Field, source: str) -> pa.ChunkedArray:
    actual = col.type
    if not (pa.types.is_integer(actual) or pa.types.is_null(actual)):
        raise _type_error(source, field.name, actual, "an integer type (cast to int8), values 0/1")
    if pa.types.is_integer(actual):
        # Check the value set before casting so that e.g. 300 reads as a bad label, not as an
        # int8 overflow.
        allowed = pa.array([0, 1], type=actual)
        bad = pc.and_(pc.is_valid(col), pc.invert(pc.is_in(col, value_set=allowed)))
        n_bad = _count_true(bad)
        if n_bad:
            first = _first_true(bad)
            raise SchemaError(
                source,
                field.name,
                f"{n_bad} values outside {{0, 1}} (first at row {first}: {col[first].as_py()})",
            )
    return pc.cast(col, field.type, safe=True)


def _check_time_column(col: pa.ChunkedArray, name: str, source: str, as_of: int | None) -> None:
    _check_epoch_range(col, name, source)
    _check_sorted(col, name, source)
    if as_of is not None:
        _check_not_after(col, pa.scalar(as_of, pa.int64()), as_of, name, source)


# --------------------------------------------------------------------------------------------
# Public validators
# --------------------------------------------------------------------------------------------


def validate_requests(table: pa.Table, source: str, *, as_of: int | None = None) -> pa.Table:
    """Check ``table`` against :data:`REQUESTS_SCHEMA` and return it in schema form.

    ``as_of`` (epoch seconds) rejects rows from the future, i.e. leakage in a backtest.
    Raises :class:`SchemaError` on the first broken rule.
    """
    table = _require_table(table, source)
    bound = _optional_seconds(as_of)
    _check_columns(REQUESTS_SCHEMA.names, table.column_names, source)
    columns = _validate_int_columns(table, REQUESTS_SCHEMA, source)
    _check_time_column(columns["ts"], "ts", source, bound)
    return _finish(columns, REQUESTS_SCHEMA)


def validate_candidates(table: pa.Table, source: str, *, as_of: int | None = None) -> pa.Table:
    """Check ``table`` against :data:`CANDIDATES_SCHEMA` and return it in schema form.

    ``label`` may be null (unlabelled candidate) but otherwise must be 0 or 1.
    Raises :class:`SchemaError` on the first broken rule.
    """
    table = _require_table(table, source)
    bound = _optional_seconds(as_of)
    _check_columns(CANDIDATES_SCHEMA.names, table.column_names, source)
    columns = _validate_int_columns(table, CANDIDATES_SCHEMA, source)
    _check_time_column(columns["ts"], "ts", source, bound)
    return _finish(columns, CANDIDATES_SCHEMA)


def validate_request_log(table: pa.Table, source: str, *, as_of: int | None = None) -> pa.Table:
    """:func:`validate_candidates` plus ``score``: float32, finite where present."""
    table = _require_table(table, source)
    _check_columns(REQUEST_LOG_SCHEMA.names, table.column_names, source)
    candidates = validate_candidates(table, source, as_of=as_of)
    score = table.column("score")
    if not (pa.types.is_floating(score.type) or pa.types.is_null(score.type)):
        raise _type_error(source, "score", score.type, "float32")
    score = pc.cast(score, pa.float32())
    bad = pc.and_(pc.is_valid(score), pc.invert(pc.is_finite(score)))
    if _count_true(bad):
        first = _first_true(bad)
        raise SchemaError(source, "score", f"non-finite score at row {first}")
    return candidates.append_column(REQUEST_LOG_SCHEMA.field("score"), score)


def _validate_z(col: pa.ChunkedArray, z_dim: int, source: str) -> pa.ChunkedArray:
    name = "z"
    actual = col.type
    is_list = (
        pa.types.is_list(actual)
        or pa.types.is_large_list(actual)
        or pa.types.is_fixed_size_list(actual)
    )
    expected = f"list<float32|float64> of length {z_dim} (list, large_list or fixed_size_list)"
    if not is_list or not (
        pa.types.is_float32(actual.value_type) or pa.types.is_float64(actual.value_type)
    ):
        raise _type_error(source, name, actual, expected)
    _check_no_nulls(col, name, source)

    if pa.types.is_fixed_size_list(actual):
        # The length is in the type: one wrong size means every row is wrong.
        if actual.list_size != z_dim and len(col):
            raise SchemaError(
                source,
                name,
                f"wrong length: expected d={z_dim}, all {len(col)} rows have length "
                f"{actual.list_size} (first at row 0)",
            )
    else:
        wrong = pc.not_equal(pc.list_value_length(col), z_dim)
        n_wrong = _count_true(wrong)
        if n_wrong:
            first = _first_true(wrong)
            raise SchemaError(
                source,
                name,
                f"wrong length: expected d={z_dim}, {n_wrong} rows differ "
                f"(first at row {first}: length {len(col[first].values)})",
            )

    # Rebuild each chunk as fixed_size_list<float32> from its flattened values. flatten() honours
    # slice offsets, and with no null lists and every length == z_dim the flat values are exactly
    # rows * z_dim long, so flat index // z_dim is the row. The loop is over chunks, not rows.
    chunks = [
        pa.FixedSizeListArray.from_arrays(pc.cast(chunk.flatten(), pa.float32()), z_dim)
        for chunk in col.chunks
    ]
    fixed = pa.chunked_array(chunks, type=pa.list_(pa.float32(), z_dim))
    flat = pa.chunked_array([chunk.values for chunk in chunks], type=pa.float32())

    if flat.null_count:
        first = _first_true(pc.is_null(flat)) // z_dim
        raise SchemaError(
            source,
            name,
            f"{flat.null_count} null values inside the vectors (first at row {first})",
        )
    # Checked after the float32 cast on purpose: a finite float64 beyond float32 range becomes
    # inf there, and that is what would be served.
    finite = pc.is_finite(flat)
    n_bad = len(flat) - _count_true(finite)
    if n_bad:
        first = _first_true(pc.invert(finite)) // z_dim
        raise SchemaError(
            source, name, f"{n_bad} NaN or inf values (as float32; first at row {first})"
        )
    return fixed


def _validate_fm_version(col: pa.ChunkedArray, source: str) -> pa.ChunkedArray:
    name = "fm_version"
    actual = col.type
    value_type = actual.value_type if pa.types.is_dictionary(actual) else actual
    # Dictionary-encoded strings come back from parquet files written from pandas categoricals.
    if not (
        pa.types.is_string(value_type)
        or pa.types.is_large_string(value_type)
        or pa.types.is_string_view(value_type)
    ):
        raise _type_error(source, name, actual, "string")
    col = col if actual == pa.string() else pc.cast(col, pa.string())
    _check_no_nulls(col, name, source)
    empty = pc.equal(pc.utf8_length(col), 0)
    n_empty = _count_true(empty)
    if n_empty:
        raise SchemaError(
            source, name, f"{n_empty} empty strings (first at row {_first_true(empty)})"
        )
    return col


def _validate_computed_at(col: pa.ChunkedArray, source: str) -> pa.ChunkedArray:
    name = "computed_at"
    actual = col.type
    if not pa.types.is_timestamp(actual):
        raise _type_error(source, name, actual, f"a timestamp (cast to {_COMPUTED_AT_TYPE})")
    if actual != _COMPUTED_AT_TYPE:
        # Arrow stores tz-aware timestamps as UTC instants and casting naive -> UTC keeps the
        # values, so a naive column is read as UTC. Sub-microsecond truncation is harmless for an
        # event time; overflow (e.g. seconds beyond year 294247) still fails.
        options = pc.CastOptions(_COMPUTED_AT_TYPE, allow_time_truncate=True)
        try:
            col = pc.cast(col, options=options)
        except pa.ArrowInvalid as exc:
            raise SchemaError(
                source, name, f"values out of range for {_COMPUTED_AT_TYPE}: {exc}"
            ) from None
    _check_no_nulls(col, name, source)
    _check_epoch_range(col, name, source, per_second=1_000_000)
    return col


def _pair_ids(table: pa.Table, schema: pa.Schema, source: str) -> dict[str, pa.ChunkedArray]:
    """``user_id`` and ``item_id`` of a pair-embeddings table, checked (int64, no nulls, not
    negative)."""
    columns: dict[str, pa.ChunkedArray] = {}
    for name in ("user_id", "item_id"):
        col = _coerce_integer(table.column(name), schema.field(name), source)
        _check_no_nulls(col, name, source)
        _check_non_negative(col, name, source)
        columns[name] = col
    return columns


def validate_pair_embeddings(
    table: pa.Table,
    source: str,
    *,
    z_dim: int,
    as_of: pd.Timestamp | int | None = None,
) -> pa.Table:
    """Check ``table`` against :func:`pair_embeddings_schema` and return it in schema form.

    ``z`` comes back as ``fixed_size_list<float32, z_dim>``, ``computed_at`` as
    ``timestamp[us, UTC]``. ``as_of`` is epoch seconds or a tz-aware timestamp; rows computed
    after it are rejected. Raises :class:`SchemaError` on the first broken rule.
    """
    if isinstance(z_dim, bool) or not isinstance(z_dim, numbers.Integral) or z_dim < 1:
        raise SchemaError(source, None, f"z_dim must be a positive int, got {z_dim!r}")
    z_dim = int(z_dim)
    table = _require_table(table, source)
    bound = None if as_of is None else _as_of_micros(as_of)
    schema = pair_embeddings_schema(z_dim)
    _check_columns(schema.names, table.column_names, source)

    columns = _pair_ids(table, schema, source)
    columns["z"] = _validate_z(table.column("z"), z_dim, source)
    columns["fm_version"] = _validate_fm_version(table.column("fm_version"), source)
    computed_at = _validate_computed_at(table.column("computed_at"), source)
    if bound is not None:
        micros, shown = bound
        _check_not_after(
            computed_at, pa.scalar(micros, _COMPUTED_AT_TYPE), shown, "computed_at", source
        )
    columns["computed_at"] = computed_at
    return _finish(columns, schema)


def request_log_frame(table: pa.Table, source: str) -> pd.DataFrame:
    """A request-log table, validated, as the frame adapters exchange: int64 ids and ``ts``,
    ``label`` as pandas ``Int8`` (null: unlabelled), ``score`` float32 (NaN: none logged)."""
    import pandas as pd

    valid = validate_request_log(table, source)
    return valid.to_pandas(types_mapper={pa.int8(): pd.Int8Dtype()}.get)


def _schema_for(kind: TableKind, z_dim: int | None) -> pa.Schema:
    if kind == "requests":
        return REQUESTS_SCHEMA
    if kind == "candidates":
        return CANDIDATES_SCHEMA
    if kind == "request_log":
        return REQUEST_LOG_SCHEMA
    if kind == "pair_embeddings":
        if z_dim is None:
            raise SchemaError("pair_embeddings", None, "z_dim is required for kind='pair_embeddings'")
        return pair_embeddings_schema(z_dim)
    raise SchemaError(
        str(kind), None, f"unknown table kind {kind!r}; expected one of {get_args(TableKind)}"
    )


def validate(
    table: pa.Table,
    kind: TableKind,
    source: str,
    *,
    z_dim: int | None = None,
    as_of: pd.Timestamp | int | None = None,
) -> pa.Table:
    """Validate ``table`` as a table of ``kind``; ``z_dim`` is needed for pair embeddings."""
    _schema_for(kind, z_dim)  # rejects an unknown kind or a missing z_dim up front
    if kind == "requests":
        return validate_requests(table, source, as_of=_optional_seconds(as_of))
    if kind == "candidates":
        return validate_candidates(table, source, as_of=_optional_seconds(as_of))
    if kind == "request_log":
        return validate_request_log(table, source, as_of=_optional_seconds(as_of))
    assert z_dim is not None
    return validate_pair_embeddings(table, source, z_dim=z_dim, as_of=as_of)


# --------------------------------------------------------------------------------------------
# Parquet I/O
# --------------------------------------------------------------------------------------------


def read_table(
    path: str | StatePath | Sequence[StatePath],
    kind: TableKind,
    *,
    z_dim: int | None = None,
    as_of: pd.Timestamp | int | None = None,
) -> pa.Table:
    """Read a parquet file, a directory of parquet files, or a list of parquet files (on
    one filesystem), and validate it as ``kind``.

    Only the schema's columns are read (extra ones would be dropped anyway and these tables
    are large). Any read failure, a missing file included, becomes a :class:`SchemaError`
    naming the path.
    """
    schema = _schema_for(kind, z_dim)
    if isinstance(path, list | tuple):
        paths = [state_path(p) for p in path]
        if not paths:
            return validate(schema.empty_table(), kind, "no files", z_dim=z_dim, as_of=as_of)
        source = f"{paths[0]} and {len(paths) - 1} more" if len(paths) > 1 else str(paths[0])
        if not is_local(paths[0]):
            table = _read_remote_files(paths, schema, source)
            return validate(table, kind, source, z_dim=z_dim, as_of=as_of)
        located = [arrow_source(p) for p in paths]
        where, filesystem = [w for w, _ in located], located[0][1]
    else:
        single = state_path(path)
        source = str(single)
        if not is_local(single) and single.suffix == ".parquet":
            table = _read_remote_files([single], schema, source)
            return validate(table, kind, source, z_dim=z_dim, as_of=as_of)
        if not single.exists():
            raise SchemaError(source, None, "cannot read parquet: no such file or directory")
        where, filesystem = arrow_source(single)
    try:
        # pyarrow.dataset handles a single file and a directory alike, and skips files starting
        # with "_" or "." (e.g. _SUCCESS markers, our own in-flight temp files).
        dataset = ds.dataset(where, format="parquet", filesystem=filesystem)
        present = dataset.schema.names
        _check_columns(schema.names, present, source)
        table = dataset.to_table(columns=schema.names)
    except SchemaError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SchemaError(source, None, f"cannot read parquet: {exc}") from exc
    return validate(table, kind, source, z_dim=z_dim, as_of=as_of)


def _read_remote_files(paths: Sequence[StatePath], schema: pa.Schema, source: str) -> pa.Table:
    """Parquet files on object storage, each read whole with one ranged GET
    (:func:`~solaris.files.parquet_input`: no ``HEAD``, no listing), the schema's columns
    of each; the first file's columns are checked, as a dataset of the files would."""
    tables: list[pa.Table] = []
    for path in paths:
        try:
            data = parquet_input(path)
        except FileNotFoundError:
            raise SchemaError(str(path), None, "cannot read parquet: no such file") from None
        except OSError as exc:
            raise SchemaError(source, None, f"cannot read parquet: {exc}") from exc
        try:
            table = pq.read_table(data)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise SchemaError(str(path), None, f"cannot read parquet: {exc}") from exc
        if not tables:
            _check_columns(schema.names, table.schema.names, source)
        tables.append(table)
    try:
        return pa.concat_tables([t.select(schema.names) for t in tables])
    except (pa.ArrowException, KeyError, ValueError) as exc:
        raise SchemaError(source, None, f"cannot read parquet: {exc}") from exc


def write_table(
    table: pa.Table,
    path: str | StatePath,
    kind: TableKind,
    *,
    z_dim: int | None = None,
) -> StatePath:
    """Validate ``table`` as ``kind`` and write it to ``path`` as parquet, atomically.

    The data goes to a hidden temp file in the target directory (same filesystem, so
    ``os.replace`` is atomic) and is renamed onto ``path`` only once complete. On any error the
    temp file is removed and ``path`` is untouched: absent if it was absent, the old file if
    there was one (on object storage: one PUT, see :mod:`solaris.files`). Returns ``path``
    as a local :class:`Path` or an fsspec ``UPath``.
    """
    path = state_path(path)
    valid = validate(table, kind, str(path), z_dim=z_dim)
    return atomic_write(path, lambda fh: pq.write_table(valid, fh))


def pair_codes(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """``z`` as a ``[N, d]`` float32 array and ``computed_at`` as int64 epoch seconds, from a
    validated pair-embeddings table (zero-copy where Arrow allows)."""
    d = table.schema.field("z").type.list_size
    z = table["z"].combine_chunks().flatten().to_numpy().reshape(-1, d)
    computed_at = table["computed_at"].cast(pa.int64()).to_numpy() // 1_000_000
    return np.asarray(z, dtype=np.float32), computed_at
