"""Write feature rows offline (parquet history, for training) and online (Redis).

Every batch is validated as a whole first (:func:`solaris.store.codec.normalize`: the view is
a SOLARIS view, every column is there with the right type, ids are in ``[0, 2**63)``,
vectors have ``d`` finite values, versions are non-empty strings), so a bad batch writes
nothing anywhere. Then:

1. **offline, staged**: partitioned by the date of the event timestamp, each file of the
   batch is written (atomically, :mod:`solaris.files`) under a *staged* name,
   ``<offline root>/<ns>/<view>/date=YYYY-MM-DD/.batch-<batch_id>.parquet.pending``,
   that no reader of the offline source takes for data: pyarrow datasets skip hidden names,
   and dask's parquet reader (Feast's file offline store, ``get_historical_features``) reads
   only names ending in ``.parquet``;
2. **online**, through the SOLARIS online store's bulk Arrow path
   (:meth:`~solaris.store.online.SolarisOnlineStore.write_normalized`), where a rerun
   rewrites the same records;
3. **offline, published**: only once the online write succeeded is each staged file renamed
   to ``batch-<batch_id>.parquet`` (``os.replace``; on S3, ``store.offline_uri``, a
   server-side copy, which makes the object appear whole, then a delete). A failed online
   write removes the staged files, so training (:mod:`solaris.serving.training_set`) never
   sees a row that serving never had. A batch always writes the same file names, so a rerun
   of the same batch leaves exactly the same state.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from solaris.data.schemas import validate_pair_embeddings
from solaris.files import StatePath, atomic_write_parquet, publish_file
from solaris.store.codec import normalize
from solaris.store.contract import EVENT_TS, FM_VERSION, ITEM_ID, USER_ID, InvalidWriteError, Z
from solaris.store.offline import offline_dir

if TYPE_CHECKING:  # feast is heavy: imported where a store is really opened
    from feast import FeatureStore

__all__ = [
    "MaterializeResult",
    "StagedBatch",
    "materialize",
    "pair_rows",
    "stage_offline",
]

_BATCH_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class MaterializeResult:
    view: str
    rows: int
    offline_files: list[StatePath]
    offline_seconds: float
    online_seconds: float

    @property
    def online_rows_per_second(self) -> float:
        return self.rows / max(self.online_seconds, 1e-9)


def pair_rows(table: pa.Table, *, z_dim: int, source: str = "pair_embeddings") -> pa.Table:
    """``pair`` view rows from a pair-embedding table (validated first): its ``computed_at``
    becomes the event timestamp (the view's ``computed_at`` is that time in seconds)."""
    table = validate_pair_embeddings(table, source, z_dim=z_dim)
    return pa.table(
        {
            USER_ID: table[USER_ID],
            ITEM_ID: table[ITEM_ID],
            Z: table[Z],
            FM_VERSION: table[FM_VERSION],
            EVENT_TS: table["computed_at"].cast(pa.timestamp("us", tz="UTC")),
        }
    )


def _staged_name(target: StatePath) -> StatePath:
    """Where ``target`` waits for its online write: hidden, and not ending in ``.parquet``."""
    return target.with_name(f".{target.name}.pending")


@dataclass(frozen=True)
class StagedBatch:
    """The offline files of one batch, written under staged names, not yet visible."""

    files: tuple[tuple[StatePath, StatePath], ...]  # (staged, published) pairs

    def publish(self) -> list[StatePath]:
        """Rename every staged file to its published name (after the online write)."""
        return [publish_file(staged, target) for staged, target in self.files]

    def discard(self) -> None:
        """Remove the staged files (the online write failed): nothing becomes visible."""
        for staged, _ in self.files:
            staged.unlink(missing_ok=True)


def stage_offline(rows: pa.Table, folder: StatePath, batch_id: str) -> StagedBatch:
    """One staged parquet file per event date of this batch (see the module docstring)."""
    dates = pc.strftime(rows[EVENT_TS], format="%Y-%m-%d").to_numpy(zero_copy_only=False)
    files = []
    try:
        for date in np.unique(dates).tolist():
            target = folder / f"date={date}" / f"batch-{batch_id}.parquet"
            staged = _staged_name(target)
            atomic_write_parquet(staged, rows.filter(pa.array(dates == date)))
            files.append((staged, target))
    except BaseException:
        StagedBatch(tuple(files)).discard()
        raise
    return StagedBatch(tuple(files))


def materialize(
    store: FeatureStore,
    view: str,
    rows: pa.Table | object,
    *,
    batch_id: str,
    progress: bool = False,
) -> MaterializeResult:
    """Validate ``rows`` of ``view``, stage them offline, write them online, then publish
    the offline files (the module docstring says why in that order).

    Args:
        store: a ``feast.FeatureStore`` whose online store is the SOLARIS store.
        view: a SOLARIS view name.
        rows: a pyarrow Table or pandas DataFrame with the view's join keys, features and
            ``event_ts``.
        batch_id: names the offline files (``[A-Za-z0-9_.-]+``); rerunning a batch id
            replaces its files.
        progress: show a progress bar for the online part.

    Raises:
        InvalidWriteError: the view, the batch id or a row is invalid; nothing was written.
        Whatever the online store raises: the staged offline files are removed, so no
        offline row of this batch became visible (Redis may hold part of the batch).
    """
    from solaris.store.feast_store import online_store_of
    from solaris.store.online import view_params

    if not isinstance(batch_id, str) or not _BATCH_ID.fullmatch(batch_id):
        raise InvalidWriteError(f"batch_id must match {_BATCH_ID.pattern}, got {batch_id!r}")
    folder = offline_dir(store, view)
    online = online_store_of(store)
    spec, params = view_params(store.get_feature_view(view))
    normalized = normalize(spec, params, rows)
    start = time.perf_counter()
    staged = stage_offline(normalized, folder, batch_id) if normalized.num_rows else None
    offline_s = time.perf_counter() - start
    start = time.perf_counter()
    bar = None
    if progress and normalized.num_rows:
        from tqdm.auto import tqdm

        bar = tqdm(total=normalized.num_rows, desc=f"online {view}", unit="row", leave=False)
    try:
        online.write_normalized(
            store.config, spec, params, normalized, bar.update if bar is not None else None
        )
    except BaseException:
        if staged is not None:
            staged.discard()
        raise
    finally:
        if bar is not None:
            bar.close()
    online_s = time.perf_counter() - start
    files = staged.publish() if staged is not None else []
    return MaterializeResult(view, normalized.num_rows, files, offline_s, online_s)
