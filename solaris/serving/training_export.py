"""Training sets on disk: ``solaris training-set`` and the ``solaris_training_set`` DAG.

:func:`write_training_set` reads a table of impressions (a parquet file or folder, local or
any fsspec URL), sorts it by time, and builds the point-in-time training rows of
:func:`~solaris.serving.training_set.build_training_set` for one chunk of at most
``chunk_rows`` impressions at a time: what grows with the impressions (entity frames, joined
answers, assembled features) is bounded by the chunk; the input table itself is held in
Arrow form (a few dozen bytes a row). Feast's ``file`` offline store still reads each view's
files whole on every call, so every chunk pays that again (``bench/training_set.py``): keep
chunks large. The rows of an impression do not depend on which other impressions share its
call, so the result equals one ``build_training_set`` call on all of them (a test compares
them byte for byte).

Output, at ``out`` (a folder or a URL prefix)::

    out/date=YYYY-MM-DD/part-NNNNN.parquet   impressions of that UTC day, chunk NNNNN
    out/_training_set.json                   written last: namespace, fm_version, rows, files

Each file is written atomically (:func:`solaris.files.atomic_write_parquet`) and holds the
impressions' own columns (``ts`` as int64 epoch seconds; other columns as given) and
:data:`FEATURE_COLUMNS`: ``features`` (``fixed_size_list<float32>[4·d]``, the tiers'
blocks in :data:`~solaris.serving.tiers.TIERS` order, zeros where a tier is missing),
``mask`` (``fixed_size_list<bool>[4]``, which tiers are present) and ``tier`` (the first
present tier, or ``"none"``), exactly :class:`~solaris.serving.tiers.TierFeatures`' arrays.
Files are in time order by name, rows in time order within a file.

Everything is checked before the first file is written: the impressions (columns, types,
nulls, negative ids, times in epoch seconds), the namespace (its views applied), the FM
version and the ``out`` location (empty, or a training set to replace with
``overwrite``); a refused run leaves ``out`` as it was. A run that fails while building
leaves the files it wrote and no ``_training_set.json``; rerun it with ``overwrite``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from solaris.data.schemas import SchemaError
from solaris.errors import SolarisError
from solaris.files import (
    StatePath,
    arrow_source,
    atomic_write_json,
    atomic_write_parquet,
    is_local,
    remove_tree,
    state_path,
)
from solaris.serving.tiers import TIERS, TierFeatures
from solaris.serving.training_set import build_training_set
from solaris.store.contract import ITEM_ID, MAX_EPOCH_S, USER_ID

if TYPE_CHECKING:
    from feast import FeatureStore

    from solaris.config import SolarisConfig

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "FEATURE_COLUMNS",
    "IMPRESSION_COLUMNS",
    "MANIFEST",
    "TrainingSetError",
    "TrainingSetWritten",
    "chunk_bounds",
    "date_parts",
    "read_impressions",
    "read_training_set",
    "write_training_set",
]

log = logging.getLogger(__name__)

IMPRESSION_COLUMNS = (USER_ID, ITEM_ID, "ts")
FEATURE_COLUMNS = ("features", "mask", "tier")
MANIFEST = "_training_set.json"
DEFAULT_CHUNK_ROWS = 50_000
_DAY = 86_400


class TrainingSetError(SolarisError, ValueError):
    """A training set that cannot be written where asked: ``out`` holds one already (and
    no ``overwrite``), holds other files, is a file, or a bad ``chunk_rows``."""


@dataclass(frozen=True)
class TrainingSetWritten:
    """What :func:`write_training_set` wrote (the ``_training_set.json`` record, plus time)."""

    out: str
    namespace: str
    fm_version: str
    impressions: str
    rows: int
    chunks: int
    chunk_rows: int
    files: tuple[str, ...]  # relative to ``out``, in time order
    seconds: float = 0.0

    def record(self) -> dict[str, Any]:
        """The JSON form (no ``seconds``: a rerun writes the same record)."""
        out = asdict(self)
        out.pop("seconds")
        out["files"] = list(self.files)
        return out


# --------------------------------------------------------------------------------------------
# Impressions
# --------------------------------------------------------------------------------------------


def _first(mask: pa.ChunkedArray | pa.Array) -> int:
    return int(pc.index(mask, True).as_py())


def _count(mask: pa.ChunkedArray | pa.Array) -> int:
    return int(pc.sum(mask).as_py() or 0)


def _ids(col: pa.ChunkedArray, name: str, source: str) -> pa.ChunkedArray:
    if not pa.types.is_integer(col.type):
        raise SchemaError(source, name, f"wrong type: got {col.type}, expected an integer type")
    if col.null_count:
        first = _first(pc.is_null(col))
        raise SchemaError(source, name, f"{col.null_count} null values (first at row {first})")
    try:
        col = pc.cast(col, pa.int64(), safe=True)
    except pa.ArrowInvalid:
        lo, hi = pc.min_max(col).values()
        raise SchemaError(
            source, name, f"values out of range for int64: min {lo}, max {hi}"
        ) from None
    negative = pc.less(col, 0)
    if _count(negative):
        first = _first(negative)
        raise SchemaError(
            source,
            name,
            f"{_count(negative)} negative ids (first at row {first}: {col[first].as_py()})",
        )
    return col


def _seconds(col: pa.ChunkedArray, source: str) -> pa.ChunkedArray:
    """``ts`` as int64 epoch seconds: integers as they are, a timestamp column (read as UTC
    when it has no zone, as :func:`build_training_set` reads it) floored to whole seconds."""
    if col.null_count:
        first = _first(pc.is_null(col))
        raise SchemaError(source, "ts", f"{col.null_count} null values (first at row {first})")
    if pa.types.is_timestamp(col.type):
        per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[col.type.unit]
        ticks = pc.cast(col, pa.int64())  # since the epoch, whatever the zone
        col = ticks if per_second == 1 else _floor_div(ticks, per_second)
    elif pa.types.is_integer(col.type):
        try:
            col = pc.cast(col, pa.int64(), safe=True)
        except pa.ArrowInvalid:
            raise SchemaError(source, "ts", "values out of range for int64") from None
    else:
        raise SchemaError(
            source,
            "ts",
            f"wrong type: got {col.type}, expected epoch seconds (an integer type) or a timestamp",
        )
    outside = pc.or_(pc.less(col, 0), pc.greater_equal(col, MAX_EPOCH_S))
    if _count(outside):
        first = _first(outside)
        raise SchemaError(
            source,
            "ts",
            f"{_count(outside)} times outside [0, {MAX_EPOCH_S:.0e}) epoch seconds, i.e. "
            f"before 1970 or in milliseconds (first at row {first}: {col[first].as_py()})",
        )
    return col


def _floor_div(ticks: pa.ChunkedArray, per_second: int) -> pa.ChunkedArray:
    values = ticks.to_numpy()
    return pa.chunked_array([pa.array(np.floor_divide(values, per_second), pa.int64())])


def read_impressions(uri: str | StatePath) -> pa.Table:
    """The impressions at ``uri`` (a parquet file or a folder of them; local or fsspec),
    checked: ``user_id`` and ``item_id`` non-negative integers, ``ts`` epoch seconds (or a
    timestamp), none null; no column named like :data:`FEATURE_COLUMNS`. Returns every
    column, with the three as int64 (``ts`` in seconds). A :class:`SchemaError` naming the
    file and the column otherwise."""
    import pyarrow.dataset as ds

    path = state_path(uri)
    source = str(uri)
    if not path.exists():
        raise SchemaError(source, None, "cannot read parquet: no such file or directory")
    where, filesystem = arrow_source(path)
    try:
        dataset = ds.dataset(where, format="parquet", filesystem=filesystem)
        present = dataset.schema.names
        missing = [c for c in IMPRESSION_COLUMNS if c not in present]
        if missing:
            also = f"; also missing: {missing[1:]}" if len(missing) > 1 else ""
            raise SchemaError(
                source, missing[0], f"missing column{also}; columns present: {present}"
            )
        taken = [c for c in FEATURE_COLUMNS if c in present]
        if taken:
            raise SchemaError(
                source,
                taken[0],
                f"the training set writes its own {list(FEATURE_COLUMNS)} columns: rename it",
            )
        table = dataset.to_table()
    except SchemaError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SchemaError(source, None, f"cannot read parquet: {exc}") from exc
    for name in (USER_ID, ITEM_ID):
        index = table.schema.get_field_index(name)
        table = table.set_column(index, name, _ids(table.column(name), name, source))
    index = table.schema.get_field_index("ts")
    return table.set_column(index, "ts", _seconds(table.column("ts"), source))


# --------------------------------------------------------------------------------------------
# Chunks and partitions
# --------------------------------------------------------------------------------------------


def chunk_bounds(n: int, chunk_rows: int) -> Iterator[tuple[int, int]]:
    """``[start, stop)`` of each chunk of ``n`` rows, at most ``chunk_rows`` each."""
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise TrainingSetError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    for start in range(0, n, chunk_rows):
        yield start, min(start + chunk_rows, n)


def date_parts(ts: np.ndarray) -> list[tuple[str, int, int]]:
    """``(date, start, stop)`` of each UTC day in ``ts`` (epoch seconds, sorted ascending):
    the rows ``[start, stop)`` are that day's, ``date`` is ``YYYY-MM-DD``."""
    if len(ts) == 0:
        return []
    days = np.asarray(ts, np.int64) // _DAY
    cuts = np.flatnonzero(np.diff(days)) + 1
    starts = np.concatenate([[0], cuts])
    stops = np.concatenate([cuts, [len(days)]])
    dates = np.datetime_as_string(days[starts].astype("datetime64[D]"), unit="D")
    return [(str(d), int(a), int(b)) for d, a, b in zip(dates, starts, stops, strict=True)]


def _feature_columns(tiers: TierFeatures) -> dict[str, pa.Array]:
    n, width = tiers.features.shape
    features = pa.FixedSizeListArray.from_arrays(
        pa.array(np.ascontiguousarray(tiers.features, np.float32).reshape(-1)), width
    )
    mask = pa.FixedSizeListArray.from_arrays(
        pa.array(np.ascontiguousarray(tiers.mask, bool).reshape(-1)), len(TIERS)
    )
    assert len(features) == len(mask) == n
    return {"features": features, "mask": mask, "tier": pa.array(tiers.tier.tolist(), pa.string())}


# --------------------------------------------------------------------------------------------
# The out location
# --------------------------------------------------------------------------------------------


def _entries(out: StatePath) -> list[StatePath]:
    if not out.exists():
        return []
    if out.is_file():
        raise TrainingSetError(
            f"{out}: is a file; name a folder (or a URL prefix) for the training set"
        )
    return list(out.iterdir())


def _is_training_set(entries: list[StatePath]) -> bool:
    """Whether a folder's entries are a training set's (its manifest, date folders, hidden
    temp files), so that ``overwrite`` may remove them."""
    names = {e.name for e in entries}
    return all(n == MANIFEST or n.startswith(("date=", ".")) for n in names)


def _check_out(out: StatePath, overwrite: bool) -> bool:
    """Whether ``out`` holds a training set to replace; refuses what may not be written."""
    entries = _entries(out)
    if not entries:
        return False
    if not _is_training_set(entries):
        shown = sorted(e.name for e in entries)[:5]
        raise TrainingSetError(
            f"{out}: holds files that are not a training set ({shown}); name a new or empty folder"
        )
    if not overwrite:
        raise TrainingSetError(
            f"{out}: already holds a training set; pass --overwrite (overwrite) to replace it"
        )
    return True


# --------------------------------------------------------------------------------------------
# The entry
# --------------------------------------------------------------------------------------------


def write_training_set(
    cfg: SolarisConfig,
    impressions_uri: str | StatePath,
    out_uri: str | StatePath,
    *,
    fm_version: str | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    overwrite: bool = False,
    progress: bool = False,
    store: FeatureStore | None = None,
) -> TrainingSetWritten:
    """Write the point-in-time training set of the impressions at ``impressions_uri`` to
    ``out_uri`` (see the module docstring for the layout), ``chunk_rows`` impressions at a
    time, in time order.

    Args:
        cfg: the settings, in the namespace whose features are read.
        impressions_uri: parquet file or folder (local or fsspec) with ``user_id``,
            ``item_id`` and ``ts``; other columns are carried through.
        out_uri: folder or URL prefix; must be empty or absent, or hold a training set and
            ``overwrite`` be set.
        fm_version: the FM version the VM is trained for; default: the namespace's current
            one (:func:`solaris.manifest.current_fm_version`).
        chunk_rows: impressions per ``build_training_set`` call (memory grows with it).
        overwrite: replace the training set ``out_uri`` holds.
        progress: show a progress bar (tqdm, on stderr).
        store: a ``feast.FeatureStore`` of ``cfg`` (default: opened here; no Redis is read).

    Raises:
        SchemaError: bad impressions (naming the file and the column).
        FeatureStoreError: the namespace's views were never applied.
        CodesError: no ``fm_version`` given and the namespace has no codes.
        TrainingSetError: ``out_uri`` cannot be written (see the class).
    """
    from tqdm.auto import tqdm

    from solaris.connection import LOCAL_REDIS
    from solaris.manifest import current_fm_version
    from solaris.store.feast_store import open_feature_store, require_applied

    began = time.perf_counter()
    # Everything is checked before anything is written.
    bounds = list(chunk_bounds(0, chunk_rows))  # the argument alone
    out = state_path(out_uri)
    existing = _check_out(out, overwrite)
    table = read_impressions(impressions_uri)
    redis = cfg.store.redis or LOCAL_REDIS  # the offline join reads no Redis
    require_applied(cfg, redis)
    version = fm_version if fm_version is not None else current_fm_version(cfg)
    if store is None:
        store = open_feature_store(cfg, redis)

    if existing:
        log.info("removing the training set at %s (overwrite)", out)
        remove_tree(out)
    if is_local(out):
        out.mkdir(parents=True, exist_ok=True)
    order = pc.sort_indices(table, [("ts", "ascending")])  # stable: ties keep input order
    bounds = list(chunk_bounds(table.num_rows, chunk_rows))
    files: list[str] = []
    with tqdm(total=table.num_rows, desc="training set", unit="row", disable=not progress) as bar:
        for number, (start, stop) in enumerate(bounds):
            chunk = table.take(order.slice(start, stop - start))
            keys = chunk.select(list(IMPRESSION_COLUMNS)).to_pandas()
            tiers = build_training_set(keys, store, cfg, fm_version=version)
            columns = _feature_columns(tiers)
            for name, values in columns.items():
                chunk = chunk.append_column(name, values)
            for date, a, b in date_parts(keys["ts"].to_numpy()):
                name = f"date={date}/part-{number:05d}.parquet"
                atomic_write_parquet(out / name, chunk.slice(a, b - a))
                files.append(name)
            log.info("chunk %d of %d: %d impressions", number + 1, len(bounds), stop - start)
            bar.update(stop - start)
    written = TrainingSetWritten(
        out=str(out_uri),
        namespace=cfg.namespace,
        fm_version=version,
        impressions=str(impressions_uri),
        rows=table.num_rows,
        chunks=len(bounds),
        chunk_rows=chunk_rows,
        files=tuple(files),
    )
    atomic_write_json(out / MANIFEST, written.record())
    return replace(written, seconds=time.perf_counter() - began)


def read_training_set(uri: str | StatePath) -> tuple[pa.Table, TierFeatures]:
    """A training set written by :func:`write_training_set`, in time order: its impression
    columns (a table) and its :class:`TierFeatures`. Refuses a folder without
    ``_training_set.json`` (absent, or a run that did not finish)."""
    import pyarrow.parquet as pq

    out = state_path(uri)
    manifest = out / MANIFEST
    if not manifest.exists():
        raise TrainingSetError(f"{uri}: no {MANIFEST}: not a finished training set")
    record = json.loads(manifest.read_bytes())
    tables = []
    for name in record["files"]:
        where, filesystem = arrow_source(out / name)
        tables.append(pq.read_table(where, filesystem=filesystem))
    if not tables:
        return pa.table({c: pa.array([], pa.int64()) for c in IMPRESSION_COLUMNS}), _no_rows()
    table = pa.concat_tables(tables)
    features = table.column("features").combine_chunks()
    mask = table.column("mask").combine_chunks()
    n = table.num_rows
    tiers = TierFeatures(
        features=features.flatten().to_numpy().reshape(n, features.type.list_size),
        mask=mask.flatten().to_numpy(zero_copy_only=False).reshape(n, len(TIERS)),
        tier=np.asarray(table.column("tier").to_pylist(), dtype=object),
    )
    return table.drop_columns(list(FEATURE_COLUMNS)), tiers


def _no_rows() -> TierFeatures:
    return TierFeatures(
        features=np.zeros((0, 0), np.float32),
        mask=np.zeros((0, len(TIERS)), bool),
        tier=np.zeros(0, dtype=object),
    )
