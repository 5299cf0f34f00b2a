"""embed_pairs / embed_shard: schema, equivalence with the bare forward pass, causality."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

from solaris.data.schemas import SchemaError, pair_embeddings_schema, read_table, write_table
from solaris.examples.movielens.adapters import MovieLensFoundationModel
from solaris.examples.movielens.data import MovieLens
from solaris.examples.movielens.features import FeatureContext
from solaris.models.autoencoder import Autoencoder
from solaris.models.fm import FoundationModel
from solaris.pipeline.embed import embed_pairs, embed_shard

Z_DIM = 8


@pytest.fixture
def models(
    tiny_ml: MovieLens,
) -> tuple[FeatureContext, MovieLensFoundationModel, Autoencoder]:
    """The MovieLens FM through its adapter (what the embeddings DAG gets)."""
    torch.manual_seed(0)
    ctx = FeatureContext(tiny_ml, history_len=6, kg_per_item=4, kg_buckets=64)
    fm = FoundationModel(ctx.spec("fm"), embed_dim=4, shared_dim=16).eval()
    ae = Autoencoder(in_dim=16, z_dim=Z_DIM, hidden=12).eval()
    return ctx, MovieLensFoundationModel(fm, ctx, "fm-x"), ae


def _pairs(ml: MovieLens, n: int = 50) -> pd.DataFrame:
    return ml.ratings[["user_id", "item_id"]].drop_duplicates().head(n).reset_index(drop=True)


def test_embed_pairs_returns_the_pair_embeddings_schema(tiny_ml, models) -> None:
    _ctx, fm, ae = models
    pairs = _pairs(tiny_ml)
    at = int(tiny_ml.ratings["ts"].median())
    rows = embed_pairs(pairs, fm=fm, autoencoder=ae, computed_at=at, fm_version="fm-x")
    assert rows.schema == pair_embeddings_schema(Z_DIM)
    assert rows.num_rows == len(pairs)
    assert set(rows["fm_version"].to_pylist()) == {"fm-x"}
    stamps = rows["computed_at"].cast(pa.int64()).to_numpy() // 1_000_000
    assert (stamps == at).all()


def test_embed_pairs_equals_bare_forward_pass_regardless_of_batch_size(tiny_ml, models) -> None:
    ctx, fm, ae = models
    pairs = _pairs(tiny_ml)
    at = np.arange(len(pairs)) * 3600 + int(tiny_ml.ratings["ts"].min())
    rows = embed_pairs(pairs, fm=fm, autoencoder=ae, computed_at=at, fm_version="v", batch_size=7)
    got = np.stack(rows["z"].to_numpy(zero_copy_only=False))
    with torch.inference_mode():
        batch = ctx.fm_batch(pairs["user_id"].to_numpy(), pairs["item_id"].to_numpy(), at)
        expected = ae.encode(fm.shared(batch)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_embedding_ignores_ratings_at_or_after_computed_at(tiny_ml, models) -> None:
    _ctx, fm, ae = models
    pairs = _pairs(tiny_ml)
    at = int(tiny_ml.ratings["ts"].quantile(0.5))
    before = tiny_ml.ratings[tiny_ml.ratings["ts"] < at].reset_index(drop=True)
    truncated = MovieLens(before, tiny_ml.users, tiny_ml.items, tiny_ml.kg_links, tiny_ml.kg)
    ctx_past = FeatureContext(truncated, history_len=6, kg_per_item=4, kg_buckets=64)
    now = embed_pairs(pairs, fm=fm, autoencoder=ae, computed_at=at, fm_version="v")
    past = embed_pairs(
        pairs,
        fm=MovieLensFoundationModel(fm.module, ctx_past, "v"),
        autoencoder=ae,
        computed_at=at,
        fm_version="v",
    )
    assert now.equals(past)


def test_embed_shard_writes_validated_parquet(tiny_ml, models, tmp_path: Path) -> None:
    _ctx, fm, ae = models
    pairs = _pairs(tiny_ml, 20)
    at = int(tiny_ml.ratings["ts"].max()) + 1
    shard = pa.table(
        {
            "request_id": np.arange(40, dtype=np.int64) // 4,
            "user_id": np.tile(pairs["user_id"].to_numpy(), 2),
            "item_id": np.tile(pairs["item_id"].to_numpy(), 2),
            "ts": np.full(40, at - 10, dtype=np.int64),
            "label": pa.nulls(40, pa.int8()),
        }
    )
    write_table(shard, tmp_path / "shard.parquet", "candidates")
    n = embed_shard(
        tmp_path / "shard.parquet",
        tmp_path / "out.parquet",
        fm=fm,
        autoencoder=ae,
        computed_at=at,
        fm_version="v",
    )
    assert n == 20  # distinct pairs only: each pair appears twice in the shard
    table = read_table(tmp_path / "out.parquet", "pair_embeddings", z_dim=Z_DIM)
    assert table.num_rows == 20


def test_embed_shard_rejects_a_bad_shard_and_writes_nothing(models, tmp_path: Path) -> None:
    _ctx, fm, ae = models
    import pyarrow.parquet as pq

    bad = pa.table(
        {
            "request_id": [1],
            "user_id": [-3],
            "item_id": [2],
            "ts": [5],
            "label": pa.array([None], pa.int8()),
        }
    )
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(SchemaError, match="user_id"):
        embed_shard(
            tmp_path / "bad.parquet",
            tmp_path / "out.parquet",
            fm=fm,
            autoencoder=ae,
            computed_at=10,
            fm_version="v",
        )
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_bf16_embeddings_match_cpu(tiny_ml, models) -> None:
    _ctx, fm, ae = models
    pairs = _pairs(tiny_ml)
    at = int(tiny_ml.ratings["ts"].median())
    cpu = embed_pairs(pairs, fm=fm, autoencoder=ae, computed_at=at, fm_version="v")
    gpu = embed_pairs(pairs, fm=fm, autoencoder=ae, computed_at=at, fm_version="v", device="cuda")
    a = np.stack(cpu["z"].to_numpy(zero_copy_only=False))
    b = np.stack(gpu["z"].to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(a, b, rtol=0.05, atol=0.05)


def test_embed_shard_rejects_rows_of_the_next_interval(tiny_ml, models, tmp_path: Path) -> None:
    _ctx, fm, ae = models
    at = int(tiny_ml.ratings["ts"].max()) + 1
    shard = pa.table(
        {
            "request_id": [1],
            "user_id": [1],
            "item_id": [2],
            "ts": [at],
            "label": pa.array([None], pa.int8()),
        }
    )
    write_table(shard, tmp_path / "shard.parquet", "candidates")
    with pytest.raises(SchemaError, match="ts"):
        embed_shard(
            tmp_path / "shard.parquet",
            tmp_path / "out.parquet",
            fm=fm,
            autoencoder=ae,
            computed_at=at,
            fm_version="v",
        )
    assert not (tmp_path / "out.parquet").exists()
