"""Write feature rows offline (parquet history, for training) and then online (Redis).

Offline files are append-only and partitioned by the date of the event timestamp:
``<repo>/data/offline/<view>/date=YYYY-MM-DD/batch-<batch_id>.parquet``. Each file appears
atomically (temporary file + ``os.replace``), and a batch always writes the same file names,
so a rerun of the same batch leaves exactly the same state offline; online, the rows are
rewritten with the same values and event timestamps.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

if TYPE_CHECKING:  # feast is heavy: imported where a store is really opened
    from feast import FeatureStore

from solaris.data.schemas import pair_codes, validate_pair_embeddings

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


def offline_dir(repo_path: Path, view: str) -> Path:
    """Where the FileSource of ``view`` reads (see feature_repo/solaris_features.py)."""
    return Path(repo_path) / "data" / "offline" / view


def pair_frame(table: pa.Table, *, z_dim: int, source: str = "pair_embeddings") -> pd.DataFrame:
    """``pair`` view rows from a pair-embedding table, validated first.

    ``z`` becomes float16 bytes (the serving format); ``computed_at`` becomes both the event
    timestamp and an int64 feature, so training and serving see the same value.
    """
    table = validate_pair_embeddings(table, source, z_dim=z_dim)
    z, computed = pair_codes(table)
    z16 = np.ascontiguousarray(z.astype(np.float16))
    row_bytes = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(2 * z_dim), len(z16), [None, pa.py_buffer(z16.tobytes())]
    )
    return pd.DataFrame(
        {
            "user_id": table["user_id"].to_numpy(),
            "item_id": table["item_id"].to_numpy(),
            "z": row_bytes.to_pandas(),
            "fm_version": table["fm_version"].to_pandas(),
            "computed_at": computed,
            "event_ts": pd.to_datetime(computed, unit="s", utc=True),
        }
    )


def write_offline(frame: pd.DataFrame, folder: Path, batch_id: str) -> list[Path]:
    """One parquet file per event date for this batch; atomic per file, rerun-safe."""
    if not _BATCH_ID.match(batch_id):
        raise ValueError(f"batch_id must match {_BATCH_ID.pattern}, got {batch_id!r}")
    if "event_ts" not in frame.columns:
        raise ValueError("offline rows need an 'event_ts' column")
    dates = frame["event_ts"].dt.strftime("%Y-%m-%d")
    written = []
    for date, part in frame.groupby(dates, sort=True):
        target = folder / f"date={date}" / f"batch-{batch_id}.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        try:
            pq.write_table(pa.Table.from_pandas(part, preserve_index=False), tmp)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        written.append(target)
    return written


def write_online(
    store: FeatureStore, view: str, frame: pd.DataFrame, chunk_rows: int, progress: bool
) -> None:
    """``write_to_online_store`` in chunks (bounded memory for the protobuf conversion)."""
    steps = range(0, len(frame), chunk_rows)
    for start in tqdm(
        steps, desc=f"online {view}", unit="chunk", disable=not progress, leave=False
    ):
        store.write_to_online_store(view, frame.iloc[start : start + chunk_rows])


def materialize(
    store: FeatureStore,
    repo_path: Path,
    view: str,
    frame: pd.DataFrame,
    *,
    batch_id: str,
    chunk_rows: int = 10_000,
    progress: bool = False,
) -> MaterializeResult:
    """Offline first (the training history must hold everything served), then online."""
    start = time.perf_counter()
    files = write_offline(frame, offline_dir(repo_path, view), batch_id) if len(frame) else []
    offline_s = time.perf_counter() - start
    start = time.perf_counter()
    if len(frame):
        write_online(store, view, frame, chunk_rows, progress)
    return MaterializeResult(view, len(frame), files, offline_s, time.perf_counter() - start)
