"""Embedding generation: pairs → FM last shared layer ``h`` → autoencoder code ``z``.

A pure function of one shard of pairs plus the models, so it runs unchanged in a mapped
Airflow task on any worker. The device is chosen at run time; on CUDA it uses bf16 autocast
and pinned memory, on CPU full float32 (so CPU runs are bit-for-bit repeatable).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import torch
from tqdm.auto import tqdm

from solaris.adapters import FoundationModel
from solaris.data.schemas import pair_embeddings_schema, read_table, write_table
from solaris.models.autoencoder import Autoencoder

__all__ = ["embed_pairs", "embed_shard", "encode_pairs"]


@torch.inference_mode()
def encode_pairs(
    users: np.ndarray,
    items: np.ndarray,
    ts: np.ndarray,
    *,
    fm: FoundationModel,
    autoencoder: Autoencoder,
    batch_size: int = 8192,
    device: torch.device | str = "cpu",
    progress: bool = False,
) -> np.ndarray:
    """``[N, z_dim]`` float32 codes of the FM's last shared layer for rows as of ``ts``.

    Moves ``fm`` and ``autoencoder`` to ``device`` (the FM through its adapter's ``to``)
    and leaves the autoencoder in eval mode there.
    """
    device = torch.device(device)
    cuda = device.type == "cuda"
    fm.to(device)
    autoencoder.eval().to(device)
    out = np.empty((len(users), autoencoder.z_dim), dtype=np.float32)
    starts = range(0, len(users), batch_size)
    for start in tqdm(starts, desc="embed", unit="batch", disable=not progress, leave=False):
        stop = start + batch_size
        batch = fm.features(users[start:stop], items[start:stop], ts[start:stop])
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            z = autoencoder.encode(fm.shared(batch))
        out[start:stop] = z.float().cpu().numpy()
    return out


def embed_pairs(
    pairs: pd.DataFrame,
    *,
    fm: FoundationModel,
    autoencoder: Autoencoder,
    computed_at: int | np.ndarray,
    fm_version: str,
    batch_size: int = 8192,
    device: torch.device | str = "cpu",
    progress: bool = False,
) -> pa.Table:
    """Pair-embedding rows for ``pairs`` (``user_id, item_id``), computed at ``computed_at``.

    ``computed_at`` is epoch seconds, one value for the shard or one per pair. Features are
    taken as of that time: the FM sees the user's history strictly before it, never the
    requests that will read the embedding later. Returns ``pair_embeddings_schema(z_dim)``.
    """
    users = pairs["user_id"].to_numpy(np.int64)
    items = pairs["item_id"].to_numpy(np.int64)
    ts = np.broadcast_to(np.asarray(computed_at, dtype=np.int64), (len(pairs),)).copy()
    z = encode_pairs(
        users,
        items,
        ts,
        fm=fm,
        autoencoder=autoencoder,
        batch_size=batch_size,
        device=device,
        progress=progress,
    )
    z_dim = z.shape[1]
    schema = pair_embeddings_schema(z_dim)
    return pa.table(
        {
            "user_id": pa.array(users, pa.int64()),
            "item_id": pa.array(items, pa.int64()),
            "z": pa.FixedSizeListArray.from_arrays(pa.array(z.reshape(-1), pa.float32()), z_dim),
            "fm_version": pa.repeat(pa.scalar(fm_version, pa.string()), len(pairs)),
            "computed_at": pa.array(
                ts * 1_000_000,
                pa.timestamp("us", tz="UTC"),
            ),
        },
        schema=schema,
    )


def embed_shard(
    shard: Path,
    out: Path,
    *,
    fm: FoundationModel,
    autoencoder: Autoencoder,
    computed_at: int,
    fm_version: str,
    batch_size: int = 8192,
    device: torch.device | str = "cpu",
) -> int:
    """Read one validated candidates shard, embed its distinct pairs, write ``out``.

    The output file appears atomically, so a retried task never leaves half a shard.
    Returns the number of rows written.
    """
    # Rows at computed_at belong to the next interval: the shard must end strictly before it.
    table = read_table(shard, "candidates", as_of=computed_at - 1)
    pairs = table.select(["user_id", "item_id"]).to_pandas().drop_duplicates(ignore_index=True)
    rows = embed_pairs(
        pairs,
        fm=fm,
        autoencoder=autoencoder,
        computed_at=computed_at,
        fm_version=fm_version,
        batch_size=batch_size,
        device=device,
    )
    write_table(rows, out, "pair_embeddings", z_dim=autoencoder.z_dim)
    return rows.num_rows
