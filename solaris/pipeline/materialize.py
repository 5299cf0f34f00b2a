"""Write feature rows offline (parquet history, for training) and then online (Redis).

Every batch is validated as a whole first (:func:`solaris.store.codec.normalize`: the view is
a SOLARIS view, every column is there with the right type, ids are in ``[0, 2**63)``,
vectors have ``d`` finite values, versions are non-empty strings), so a bad batch writes
nothing anywhere. Then:

* **offline**, append-only and partitioned by the date of the event timestamp:
  ``<repo>/data/offline/<view>/date=YYYY-MM-DD/batch-<batch_id>.parquet``, each file
  appearing atomically (temporary file + ``os.replace``); a batch always writes the same file
  names, so a rerun of the same batch leaves exactly the same state;
* **online**, through the SOLARIS online store's bulk Arrow path
  (:meth:`~solaris.store.online.SolarisOnlineStore.write_normalized`), where a rerun
  rewrites the same records.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from solaris.data.schemas import validate_pair_embeddings
from solaris.files import atomic_write
from solaris.store import contract
from solaris.store.codec import normalize
from solaris.store.contract import EVENT_TS, FM_VERSION, ITEM_ID, USER_ID, InvalidWriteError, Z

if TYPE_CHECKING:  # feast is heavy: imported where a store is really opened
    from feast import FeatureStore

__all__ = ["MaterializeResult", "materialize", "offline_dir", "pair_rows", "write_offline"]

_BATCH_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class MaterializeResult:
    view: str
    rows: int
    offline_files: list[Path]
    offline_seconds: float
    online_seconds: float

    @property
    def online_rows_per_second(self) -> float:
        return self.rows / max(self.online_seconds, 1e-9)


def offline_dir(repo_path: Path, view: str, project: str) -> Path:
    """Where the FileSource of ``view`` in Feast project ``project`` reads; only SOLARIS
    views, always under ``<repo>/data/`` (:class:`~solaris.store.contract.InvalidWriteError`
    otherwise)."""
    spec = contract.view(view)
    data = (Path(repo_path) / "data").resolve()
    folder = (Path(repo_path) / contract.offline_path(spec, project)).resolve()
    if not folder.is_relative_to(data):
        raise InvalidWriteError(f"view {view!r}: offline path {folder} is outside {data}")
    return folder


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


def write_offline(rows: pa.Table, folder: Path, batch_id: str) -> list[Path]:
    """One parquet file per event date for this batch; atomic per file, rerun-safe."""
    dates = pc.strftime(rows[EVENT_TS], format="%Y-%m-%d").to_numpy(zero_copy_only=False)
    written = []
    for date in np.unique(dates).tolist():
        part = rows.filter(pa.array(dates == date))
        target = folder / f"date={date}" / f"batch-{batch_id}.parquet"
        written.append(atomic_write(target, lambda fh, part=part: pq.write_table(part, fh)))
    return written


def materialize(
    store: FeatureStore,
    view: str,
    rows: pa.Table | object,
    *,
    batch_id: str,
    progress: bool = False,
) -> MaterializeResult:
    """Validate ``rows`` of ``view``, then write them offline, then online.

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
    """
    from solaris.store.feast_store import online_store_of
    from solaris.store.online import view_params

    if not isinstance(batch_id, str) or not _BATCH_ID.match(batch_id):
        raise InvalidWriteError(f"batch_id must match {_BATCH_ID.pattern}, got {batch_id!r}")
    folder = offline_dir(Path(store.repo_path), view, store.project)
    online = online_store_of(store)
    spec, params = view_params(store.get_feature_view(view))
    normalized = normalize(spec, params, rows)
    start = time.perf_counter()
    files = write_offline(normalized, folder, batch_id) if normalized.num_rows else []
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
    finally:
        if bar is not None:
            bar.close()
    return MaterializeResult(
        view, normalized.num_rows, files, offline_s, time.perf_counter() - start
    )
