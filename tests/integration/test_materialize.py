"""Materialization into the real store: offline then online, idempotent, validated first."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from solaris.data.schemas import SchemaError
from solaris.pipeline.materialize import materialize, offline_dir, pair_frame

pytestmark = pytest.mark.integration
Z_DIM = 8  # as in conftest


def _embeddings(n: int = 6, version: str = "fm-test-1") -> pa.Table:
    rng = np.random.default_rng(0)
    z = rng.normal(size=(n, Z_DIM)).astype(np.float32)
    computed = np.array([1_000_000 + 3_600 * k for k in range(n)], dtype=np.int64)
    return pa.table(
        {
            "user_id": pa.array(np.arange(n) + 1, pa.int64()),
            "item_id": pa.array(np.arange(n) + 10, pa.int64()),
            "z": pa.FixedSizeListArray.from_arrays(pa.array(z.ravel(), pa.float32()), Z_DIM),
            "fm_version": pa.array([version] * n),
            "computed_at": pa.array(computed * 1_000_000, pa.timestamp("us", tz="UTC")),
        }
    )


def _online_state(store, n: int) -> dict:
    rows = [{"user_id": int(u), "item_id": int(u) + 9} for u in range(1, n + 1)]
    return store.get_online_features(
        features=["pair:z", "pair:fm_version", "pair:computed_at"], entity_rows=rows
    ).to_dict(include_event_timestamps=True)


def test_rerunning_a_batch_leaves_exactly_the_same_state(feast_store, solaris_cfg) -> None:
    store = feast_store
    repo = solaris_cfg.store.repo_path
    frame = pair_frame(_embeddings(), z_dim=Z_DIM)
    first = materialize(store, repo, "pair", frame, batch_id="b1", chunk_rows=4)
    files = sorted(p.relative_to(repo) for p in offline_dir(repo, "pair").rglob("*.parquet"))
    contents = {f: pd.read_parquet(repo / f) for f in files}
    online = _online_state(store, 6)

    second = materialize(store, repo, "pair", frame, batch_id="b1", chunk_rows=4)
    assert first.offline_files == second.offline_files
    assert (
        sorted(p.relative_to(repo) for p in offline_dir(repo, "pair").rglob("*.parquet")) == files
    )
    for f, before in contents.items():
        pd.testing.assert_frame_equal(pd.read_parquet(repo / f), before)
    assert _online_state(store, 6) == online
    assert online["z"][0] == frame["z"][0]  # float16 bytes served as written
    assert not list(offline_dir(repo, "pair").rglob(".*.tmp"))


def test_offline_rows_are_partitioned_by_event_date(feast_store, solaris_cfg) -> None:
    store = feast_store
    repo = solaris_cfg.store.repo_path
    frame = pair_frame(_embeddings(30), z_dim=Z_DIM)  # 30 hours: two calendar days
    result = materialize(store, repo, "pair", frame, batch_id="b2")
    dates = sorted(p.parent.name for p in result.offline_files)
    assert dates == sorted(set(frame["event_ts"].dt.strftime("date=%Y-%m-%d")))
    assert sum(len(pd.read_parquet(p)) for p in result.offline_files) == 30


def test_a_bad_embedding_table_is_rejected_before_anything_is_written(solaris_cfg) -> None:
    table = _embeddings()
    z = table["z"].combine_chunks().flatten().to_numpy().copy()
    z[3] = np.nan
    bad = table.set_column(2, "z", pa.FixedSizeListArray.from_arrays(pa.array(z), Z_DIM))
    with pytest.raises(SchemaError, match="z"):
        pair_frame(bad, z_dim=Z_DIM)
    assert not offline_dir(solaris_cfg.store.repo_path, "pair").exists()
