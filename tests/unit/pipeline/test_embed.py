"""embed_pairs / embed_shard: schema, equivalence with the bare forward pass, causality;
encode_pairs' prefetching: the sequential codes in their order, errors, bounded memory."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

from solaris.data.schemas import SchemaError, pair_embeddings_schema, read_table, write_table
from solaris.examples.movielens.adapters import MovieLensFoundationModel
from solaris.examples.movielens.data import MovieLens
from solaris.examples.movielens.features import FeatureContext
from solaris.examples.movielens.models.fm import FoundationModel
from solaris.models.autoencoder import Autoencoder
from solaris.pipeline import embed
from solaris.pipeline.embed import embed_pairs, embed_shard, encode_pairs, prefetch_batches

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


# --------------------------------------------------------------------------------------------
# Prefetching (encode_pairs' worker threads): CUDA's default, selectable on CPU with prefetch
# --------------------------------------------------------------------------------------------


class _ThreadedFM:
    """A small adapter whose features come back as a dict with a nested tuple, built slowly
    for some batches so that worker threads finish out of order; optionally fails for one
    user, and counts the batches built but not yet encoded."""

    version = "threaded"
    shared_dim = 6

    def __init__(self, fail_user: int | None = None) -> None:
        torch.manual_seed(1)
        self.linear = torch.nn.Linear(3, self.shared_dim)
        self.fail_user = fail_user
        self.lock = threading.Lock()
        self.waiting = 0
        self.most_waiting = 0
        self.features_threads: set[str] = set()

    def features(self, users: np.ndarray, items: np.ndarray, ts: np.ndarray) -> dict[str, Any]:
        self.features_threads.add(threading.current_thread().name)
        if len(users) and users[0] % 3 == 0:
            time.sleep(0.02)  # this batch finishes after the ones queued behind it
        if self.fail_user is not None and self.fail_user in users:
            raise ValueError(f"no features for user {self.fail_user}")
        x = np.stack([users, items, ts % 1000], axis=1).astype(np.float32)
        with self.lock:
            self.waiting += 1
            self.most_waiting = max(self.most_waiting, self.waiting)
        return {"x": torch.from_numpy(x), "ids": (torch.from_numpy(users.copy()),)}

    def shared(self, batch: dict[str, Any]) -> torch.Tensor:
        with self.lock:
            self.waiting -= 1
        return torch.tanh(self.linear(batch["x"] / 100.0)) + batch["ids"][0][:, None] * 0

    def to(self, device: torch.device | str) -> _ThreadedFM:
        self.linear.to(device)
        return self


def _columns(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    users = np.arange(n, dtype=np.int64)
    return users, (users * 7) % 11, np.full(n, 10_000, dtype=np.int64)


def _embed_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("solaris-embed")]


def test_prefetch_defaults_to_sequential_on_cpu_and_several_threads_on_cuda() -> None:
    assert prefetch_batches("cpu") == 0
    assert prefetch_batches("cuda") >= 2
    assert prefetch_batches("cuda", 0) == 0
    assert prefetch_batches("cpu", 3) == 3
    with pytest.raises(ValueError, match="prefetch"):
        prefetch_batches("cpu", -1)


@pytest.mark.parametrize("prefetch", [1, 2, 5])
def test_prefetched_codes_are_the_sequential_codes_in_order(tiny_ml, models, prefetch) -> None:
    _ctx, fm, ae = models
    pairs = _pairs(tiny_ml)
    users, items = pairs["user_id"].to_numpy(np.int64), pairs["item_id"].to_numpy(np.int64)
    ts = np.arange(len(pairs), dtype=np.int64) * 3600 + int(tiny_ml.ratings["ts"].min())
    kw = {"fm": fm, "autoencoder": ae, "batch_size": 7}
    sequential = encode_pairs(users, items, ts, prefetch=0, **kw)
    np.testing.assert_array_equal(
        encode_pairs(users, items, ts, prefetch=prefetch, **kw), sequential
    )
    ae_small = Autoencoder(in_dim=_ThreadedFM.shared_dim, z_dim=Z_DIM, hidden=5)
    users, items, ts = _columns(61)  # batches 0, 3, 6 and 9 (of 7 rows) are built slowly
    kw = {"fm": _ThreadedFM(), "autoencoder": ae_small, "batch_size": 7}
    sequential = encode_pairs(users, items, ts, prefetch=0, **kw)
    np.testing.assert_array_equal(
        encode_pairs(users, items, ts, prefetch=prefetch, **kw), sequential
    )
    assert not _embed_threads()


def test_embed_pairs_passes_prefetch_and_gives_the_same_table(tiny_ml, models) -> None:
    _ctx, fm, ae = models
    pairs = _pairs(tiny_ml)
    at = int(tiny_ml.ratings["ts"].median())
    kw = {"fm": fm, "autoencoder": ae, "computed_at": at, "fm_version": "v", "batch_size": 9}
    assert embed_pairs(pairs, prefetch=3, **kw).equals(embed_pairs(pairs, **kw))


@pytest.mark.parametrize("fail_user", [0, 30, 60])
def test_a_failing_batch_raises_its_error_and_leaves_no_thread(fail_user: int) -> None:
    users, items, ts = _columns(61)
    ae = Autoencoder(in_dim=_ThreadedFM.shared_dim, z_dim=Z_DIM, hidden=5)
    with pytest.raises(ValueError, match=f"no features for user {fail_user}$"):
        encode_pairs(
            users, items, ts, fm=_ThreadedFM(fail_user), autoencoder=ae, batch_size=4, prefetch=3
        )
    assert not _embed_threads()


def test_a_failing_forward_pass_stops_the_workers() -> None:
    class Failing(_ThreadedFM):
        def shared(self, batch: dict[str, Any]) -> torch.Tensor:
            raise RuntimeError("device fell over")

    users, items, ts = _columns(100)
    ae = Autoencoder(in_dim=_ThreadedFM.shared_dim, z_dim=Z_DIM, hidden=5)
    with pytest.raises(RuntimeError, match="device fell over"):
        encode_pairs(users, items, ts, fm=Failing(), autoencoder=ae, batch_size=4, prefetch=3)
    assert not _embed_threads()


@pytest.mark.parametrize("n", [0, 1, 5, 8, 9])
@pytest.mark.parametrize("prefetch", [0, 1, 2])
def test_tiny_inputs(n: int, prefetch: int) -> None:
    users, items, ts = _columns(n)
    ae = Autoencoder(in_dim=_ThreadedFM.shared_dim, z_dim=Z_DIM, hidden=5)
    kw = {"fm": _ThreadedFM(), "autoencoder": ae, "batch_size": 8}
    z = encode_pairs(users, items, ts, prefetch=prefetch, **kw)
    assert z.shape == (n, Z_DIM) and z.dtype == np.float32
    np.testing.assert_array_equal(z, encode_pairs(users, items, ts, prefetch=0, **kw))


@pytest.mark.parametrize("prefetch", [1, 3])
def test_features_are_built_ahead_in_threads_and_memory_stays_bounded(prefetch: int) -> None:
    """While batch 0 is encoded the next one is being built; no more than ``prefetch + 1``
    batches are ever built and not yet encoded."""
    ahead = threading.Event()

    class Watched(_ThreadedFM):
        def features(self, users: np.ndarray, items: np.ndarray, ts: np.ndarray) -> Any:
            batch = super().features(users, items, ts)
            if users[0] == 4:
                ahead.set()
            return batch

        def shared(self, batch: dict[str, Any]) -> torch.Tensor:
            if int(batch["ids"][0][0]) == 0:  # encoding batch 0: batch 1 is built meanwhile
                assert ahead.wait(timeout=10), "batch 1 was not built while batch 0 ran"
            time.sleep(0.002)
            return super().shared(batch)

    fm = Watched()
    users, items, ts = _columns(80)
    ae = Autoencoder(in_dim=_ThreadedFM.shared_dim, z_dim=Z_DIM, hidden=5)
    encode_pairs(users, items, ts, fm=fm, autoencoder=ae, batch_size=4, prefetch=prefetch)
    assert 1 <= fm.most_waiting <= prefetch + 1
    assert fm.features_threads and all(n.startswith("solaris-embed") for n in fm.features_threads)
    assert len(fm.features_threads) <= prefetch


@dataclass(frozen=True)
class _Frozen:
    a: torch.Tensor
    rest: dict[str, Any]
    label: str = "x"


class _Pair(NamedTuple):
    left: torch.Tensor
    right: list[torch.Tensor]


class _OwnPin:
    def __init__(self) -> None:
        self.pinned = False

    def pin_memory(self) -> _OwnPin:
        self.pinned = True
        return self


def test_pinned_walks_nested_batches(monkeypatch) -> None:
    """Every CPU tensor of a nested batch is pinned (stand-in: pinning needs a CUDA
    device), containers keep their types, other leaves are left alone."""
    pinned: set[int] = set()

    def fake_pin(tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.clone()
        pinned.add(id(out))
        return out

    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    own = _OwnPin()
    batch = _Frozen(
        a=torch.ones(2),
        rest={"pair": _Pair(torch.zeros(3), [torch.arange(2), 7]), "own": own, "n": 3},
    )
    out = embed._pinned(batch)
    assert isinstance(out, _Frozen) and out.label == "x"
    assert isinstance(out.rest["pair"], _Pair) and isinstance(out.rest["pair"].right, list)
    for tensor in (out.a, out.rest["pair"].left, out.rest["pair"].right[0]):
        assert id(tensor) in pinned
    assert out.rest["pair"].right[1] == 7 and out.rest["n"] == 3
    assert out.rest["own"] is own and own.pinned
    torch.testing.assert_close(out.a, batch.a)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("prefetch", [1, 3])
def test_cuda_prefetched_codes_match_the_sequential_cuda_codes(tiny_ml, models, prefetch) -> None:
    """The pipelined CUDA loop (side streams, asynchronous copies back) gives the sequential
    CUDA loop's codes in their order (same bf16 kernels; cuBLAS may pick another algorithm
    on another stream, hence a tolerance well below bf16's against float32)."""
    _ctx, fm, ae = models
    pairs = _pairs(tiny_ml)
    users, items = pairs["user_id"].to_numpy(np.int64), pairs["item_id"].to_numpy(np.int64)
    ts = np.full(len(pairs), int(tiny_ml.ratings["ts"].median()), dtype=np.int64)
    kw = {"fm": fm, "autoencoder": ae, "batch_size": 7, "device": "cuda"}
    sequential = encode_pairs(users, items, ts, prefetch=0, **kw)
    pipelined = encode_pairs(users, items, ts, prefetch=prefetch, **kw)
    np.testing.assert_allclose(pipelined, sequential, rtol=1e-3, atol=1e-3)
    assert not _embed_threads()
