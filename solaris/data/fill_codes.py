"""The fill codes file: one partition's pair codes, sorted by user, for the neighbour fill.

Every fill task looks up its targets' neighbours' codes in every partition's file, but only
the rows of those neighbours. The file is one uncompressed Arrow IPC record batch
(``user_id``, ``item_id``, ``z`` float16 ``[d]``), so that a reader never has to read it
whole:

- on a local filesystem it is memory-mapped (:func:`read_fill_codes`): opening reads
  nothing, a binary search in ``user_id`` touches a few pages, and the codes of the matches
  are gathered from the mapping;
- on object storage (:func:`open_fill_codes`) it is read by byte ranges, without a ``HEAD``:
  the header (one ``GET`` of a few hundred bytes, giving the row count), the key columns
  (one ``GET``: ``user_id`` and ``item_id`` are adjacent) and then only the codes of the
  rows a fill matches, in a few coalesced ranges (:class:`RangedCodes`).

The byte layout that makes the second possible: the header (the magic, the schema with the
row count as fixed-width metadata, the batch's metadata, whose fields are all fixed-width)
has the same length for every row count, so the data starts at an offset that depends on the
code size only (:func:`body_start`, measured once on a one-row file), and the columns follow
each other: ``user_id`` at ``body``, ``item_id`` at ``body + 8 n``, ``z`` at ``body + 16 n``
(8-byte buffers need no padding; the empty validity buffers take no bytes). A test checks
the layout against pyarrow's own reading for several sizes.

Parquet would be decoded whole by each reader.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import pyarrow as pa

from solaris.data.schemas import SchemaError
from solaris.files import (
    StatePath,
    arrow_source,
    atomic_write,
    is_local,
    read_state_bytes,
    state_path,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "RangedCodes",
    "body_start",
    "fill_codes_schema",
    "open_fill_codes",
    "read_fill_codes",
    "read_fill_codes_rows",
    "write_fill_codes",
]

_ROWS_KEY = b"solaris.rows"  # the row count, fixed-width: the header's length never varies
_ROWS_WIDTH = 20
_MAGIC = b"ARROW1\x00\x00"
_MERGE_GAP_BYTES = 64 << 10  # rows closer than this are read in one range (a request costs
# about as much time as transferring this many bytes from a nearby object store)
_MAX_RANGES = 16  # ranges one read of codes may take: the smallest gaps are merged first


def fill_codes_schema(z_dim: int, rows: int | None = None) -> pa.Schema:
    """One partition's codes for the neighbour fill (:func:`write_fill_codes`): pairs sorted
    by ``(user_id, item_id)``, each once, with their float16 code; ``rows``: the row count
    kept as the schema's metadata (what a ranged reader needs before the data)."""
    schema = pa.schema(
        [
            pa.field("user_id", pa.int64(), nullable=False),
            pa.field("item_id", pa.int64(), nullable=False),
            pa.field("z", pa.list_(pa.float16(), z_dim), nullable=False),
        ]
    )
    if rows is None:
        return schema
    return schema.with_metadata({_ROWS_KEY: f"{rows:0{_ROWS_WIDTH}d}".encode()})


def _table(users: np.ndarray, items: np.ndarray, z16: np.ndarray) -> pa.Table:
    d = z16.shape[1]
    z = pa.FixedSizeListArray.from_arrays(pa.array(z16.reshape(-1)), d)
    return pa.Table.from_arrays(
        [pa.array(users, pa.int64()), pa.array(items, pa.int64()), z],
        schema=fill_codes_schema(d, len(users)),
    )


@functools.cache
def body_start(z_dim: int) -> int:
    """The byte offset of a fill codes file's data (its ``user_id`` column), the same for
    every row count > 0: measured on a one-row file written to memory (see the module
    docstring for why it does not vary)."""
    one = np.zeros(1, np.int64)
    table = _table(one, one, np.zeros((1, z_dim), np.float16))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    data = sink.getvalue()
    column = pa.ipc.open_file(data).get_batch(0).column(0)
    return int(column.buffers()[1].address - data.address)


def write_fill_codes(
    path: str | StatePath, users: np.ndarray, items: np.ndarray, z16: np.ndarray
) -> StatePath:
    """``users [n]`` (ascending), ``items [n]`` and ``z16 [n, d]`` float16 as one Arrow IPC
    file (uncompressed, one record batch, the row count in the schema's metadata),
    atomically."""
    z16 = np.ascontiguousarray(z16, dtype=np.float16)
    if z16.ndim != 2 or not (len(users) == len(items) == len(z16)):
        raise SchemaError(
            str(path), None, "fill codes: users, items and z16 [n, d] differ in length"
        )
    table = _table(users, items, z16)

    def write(fh: BinaryIO) -> None:
        with pa.ipc.new_file(fh, table.schema) as writer:
            writer.write_table(table, max_chunksize=max(len(table), 1))

    return atomic_write(state_path(path), write)


def _missing(source: str) -> SchemaError:
    return SchemaError(
        source,
        None,
        "no fill codes: no such file (the enrichment's "
        "aggregates write them for the interval before the fill reads them)",
    )


def read_fill_codes(
    path: str | StatePath, *, z_dim: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(users [n] int64, items [n] int64, z16 [n, z_dim] float16)`` of a file
    :func:`write_fill_codes` wrote: memory-mapped on a local filesystem (nothing is read
    until used), read whole from object storage. A missing file, another schema or
    unsorted users raise :class:`SchemaError` naming the file."""
    single = state_path(path)
    source = str(single)
    where, filesystem = arrow_source(single)
    data = None
    if filesystem is None:
        if not single.exists():
            raise _missing(source)
    else:
        try:
            data = read_state_bytes(single)  # one GET, no HEAD
        except FileNotFoundError as exc:
            raise _missing(source) from exc
        except OSError as exc:
            raise SchemaError(source, None, f"cannot read fill codes: {exc}") from exc
    try:
        if data is None:
            reader = pa.ipc.open_file(pa.memory_map(where))
        else:
            reader = pa.ipc.open_file(pa.py_buffer(data))
        # The writer makes one record batch: its columns are views of the mapping. A table
        # of several would be combined, which copies (1 ms a file of 100,000 codes, and
        # every partition's fill opens every file).
        if reader.num_record_batches == 1:
            table = pa.Table.from_batches([reader.get_batch(0)])
        else:
            table = reader.read_all().combine_chunks()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SchemaError(source, None, f"cannot read fill codes: {exc}") from exc
    _check_schema(source, table.schema, z_dim)
    if table.num_rows == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, z_dim), np.float16)
    users = table.column("user_id").chunk(0).to_numpy()
    items = table.column("item_id").chunk(0).to_numpy()
    z = table.column("z").chunk(0).flatten().to_numpy().reshape(-1, z_dim)
    _check_sorted(source, users)
    return users, items, z


def _check_schema(source: str, schema: pa.Schema, z_dim: int) -> None:
    expected = fill_codes_schema(z_dim)
    if not schema.equals(expected):  # the metadata is not compared

        def columns(schema: pa.Schema) -> str:
            return ", ".join(f"{f.name}: {f.type}" for f in schema)

        raise SchemaError(
            source, None, f"fill codes have ({columns(schema)}), expected ({columns(expected)})"
        )


def _check_sorted(source: str, users: np.ndarray) -> None:
    if len(users) > 1 and (users[1:] < users[:-1]).any():
        row = int(np.argmax(users[1:] < users[:-1])) + 1
        raise SchemaError(source, "user_id", f"not sorted: row {row} is below the row before")


# --------------------------------------------------------------------------------------------
# Ranged reads (object storage)
# --------------------------------------------------------------------------------------------


def read_fill_codes_rows(path: str | StatePath, *, z_dim: int) -> int:
    """The row count of a fill codes file on object storage, from its header only (one
    ranged ``GET``, no ``HEAD``): the check a fill task makes of every partition's file
    before it writes anything, and what :func:`open_fill_codes` needs to find the columns.

    Raises:
        SchemaError: the file is missing, or its header is not a fill codes file of this
            code size (another schema, or no row count: written by an older version),
            naming the file."""
    single = state_path(path)
    source = str(single)
    head = body_start(z_dim)
    where, fs = arrow_source(single)
    try:
        data = fs.cat_file(where, start=0, end=head)
    except FileNotFoundError as exc:
        raise _missing(source) from exc
    except OSError as exc:
        raise SchemaError(source, None, f"cannot read fill codes: {exc}") from exc
    if len(data) < head or not data.startswith(_MAGIC):
        raise SchemaError(source, None, f"not a fill codes file: {len(data)} bytes of header")
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(data[len(_MAGIC) :]))
    except (pa.ArrowException, ValueError) as exc:
        raise SchemaError(source, None, f"cannot read the fill codes' header: {exc}") from exc
    _check_schema(source, schema, z_dim)
    raw = (schema.metadata or {}).get(_ROWS_KEY)
    if raw is None or len(raw) != _ROWS_WIDTH or not raw.isdigit():
        raise SchemaError(
            source,
            None,
            "fill codes without a row count in their header (written before ranged reads): "
            "rerun the interval's aggregates, which write them",
        )
    return int(raw)


def open_fill_codes(
    path: str | StatePath, *, z_dim: int, rows: int | None = None
) -> tuple[np.ndarray, np.ndarray, Any]:
    """``(users, items, z16)`` of a fill codes file for lookups that read few of its codes:
    memory-mapped on a local filesystem (:func:`read_fill_codes`); on object storage the
    key columns are read (one ranged ``GET``; the header's another unless ``rows``, from
    :func:`read_fill_codes_rows`, is given) and ``z16`` is a :class:`RangedCodes`, which
    reads only the rows it is indexed with."""
    single = state_path(path)
    if is_local(single):
        return read_fill_codes(single, z_dim=z_dim)
    source = str(single)
    n = read_fill_codes_rows(single, z_dim=z_dim) if rows is None else int(rows)
    body = body_start(z_dim)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, z_dim), np.float16)
    where, fs = arrow_source(single)
    try:
        keys = fs.cat_file(where, start=body, end=body + 16 * n)
    except (OSError, ValueError) as exc:
        raise SchemaError(source, None, f"cannot read fill codes: {exc}") from exc
    if len(keys) != 16 * n:
        raise SchemaError(source, None, f"fill codes end at {len(keys)} of {16 * n} key bytes")
    both = np.frombuffer(keys, np.int64)
    users, items = both[:n], both[n:]
    _check_sorted(source, users)
    return users, items, RangedCodes(single, body + 16 * n, n, z_dim)


class RangedCodes:
    """The ``z16 [n, d]`` column of a fill codes file on object storage, read on indexing:
    ``codes[rows]`` (ascending or not, repeats allowed) reads the byte ranges of those rows
    only, in one concurrent batch of ranged ``GET`` s: rows closer than
    ``_MERGE_GAP_BYTES`` share a range, and at most ``_MAX_RANGES`` ranges are taken (the
    smallest gaps merged first), so the requests of a read are bounded whatever its rows.
    ``requests`` and ``bytes_read`` count what it read."""

    def __init__(self, path: StatePath, offset: int, rows: int, z_dim: int) -> None:
        self._path = path
        self._offset = offset
        self._row_bytes = 2 * z_dim
        self.shape = (rows, z_dim)
        self.requests = 0
        self.bytes_read = 0

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: Any) -> np.ndarray:
        rows = np.asarray(rows, np.int64)
        d = self.shape[1]
        if not len(rows):
            return np.zeros((0, d), np.float16)
        if rows.min() < 0 or rows.max() >= self.shape[0]:
            raise SchemaError(str(self._path), "z", f"rows asked outside [0, {self.shape[0]})")
        wanted, back = np.unique(rows, return_inverse=True)
        first, last = coalesce(wanted, self._row_bytes, _MERGE_GAP_BYTES, _MAX_RANGES)
        size = self._row_bytes
        starts = [self._offset + int(a) * size for a in first]
        ends = [self._offset + (int(b) + 1) * size for b in last]
        where, fs = arrow_source(self._path)
        try:
            parts = fs.cat_ranges([where] * len(starts), starts, ends, on_error="raise")
        except (OSError, ValueError) as exc:
            raise SchemaError(str(self._path), "z", f"cannot read fill codes: {exc}") from exc
        self.requests += len(parts)
        self.bytes_read += sum(len(p) for p in parts)
        if any(len(p) != e - s for p, s, e in zip(parts, starts, ends, strict=True)):
            raise SchemaError(str(self._path), "z", "fill codes end inside their codes")
        block = np.frombuffer(b"".join(parts), np.float16).reshape(-1, d)
        # Row r of range k sits at (r - first[k]) + the rows of the ranges before k.
        before = np.concatenate([[0], np.cumsum(np.asarray(last) - np.asarray(first) + 1)])
        k = np.searchsorted(np.asarray(first), wanted, side="right") - 1
        at = wanted - np.asarray(first)[k] + before[k]
        picked: np.ndarray = block[at][back]
        return picked


def coalesce(
    rows: np.ndarray, row_bytes: int, gap_bytes: int, max_ranges: int
) -> tuple[Sequence[int], Sequence[int]]:
    """Inclusive ``(first, last)`` row ranges covering the ascending, distinct ``rows``:
    rows less than ``gap_bytes`` apart share a range, and while there are more than
    ``max_ranges`` ranges the two closest are merged (so the bytes read beyond the rows
    are the smallest gaps')."""
    if not len(rows):
        return [], []
    gaps = np.diff(rows) - 1  # rows skipped between neighbours
    breaks = np.flatnonzero(gaps * row_bytes >= gap_bytes)
    if len(breaks) >= max_ranges:  # keep the widest gaps only
        widest = np.argsort(gaps[breaks], kind="stable")[len(breaks) - (max_ranges - 1) :]
        breaks = np.sort(breaks[widest])
    first = np.concatenate([[rows[0]], rows[breaks + 1]])
    last = np.concatenate([rows[breaks], [rows[-1]]])
    return first.tolist(), last.tolist()
