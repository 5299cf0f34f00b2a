"""train_vm with SOLARIS tiers and feature dropout; checkpoints of trained models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from solaris.config import SolarisConfig
from solaris.evaluation.metrics import log_loss
from solaris.examples.movielens.data import MovieLens
from solaris.examples.movielens.features import FeatureContext
from solaris.examples.movielens.models.training import (
    Examples,
    TimeSplit,
    predict_proba,
    predict_vm,
)
from solaris.examples.movielens.train import (
    TierInputs,
    load_models,
    load_split,
    save_models,
    train_models,
    train_vm,
)

Z_DIM = 4


def _cfg(tmp_path: Path, **train: object) -> SolarisConfig:
    return SolarisConfig(
        artifacts_dir=tmp_path,
        model={
            "history_len": 4,
            "embed_dim": 4,
            "shared_dim": 8,
            "z_dim": Z_DIM,
            "kg_buckets": 32,
            "kg_entities_per_item": 4,
            "vm_hidden": 8,
        },
        train={
            "max_epochs": 30,
            "patience": 30,
            "ae_epochs": 2,
            "batch_size": 32,
            "lr": 1e-2,
            **train,
        },
    )


def _label_tier(rows: pd.DataFrame, present: float) -> TierInputs:
    """A tier whose z carries the label: the VM can only use it through the tier slot."""
    y = (rows["rating"].to_numpy() >= 4).astype(np.float32)
    z = torch.zeros(len(rows), 1, Z_DIM)
    z[:, 0, 0] = torch.from_numpy(2 * y - 1)
    return TierInputs(z, torch.full((len(rows), 1), present))


def test_vm_learns_from_a_tier_and_falls_back_when_it_is_missing(tiny_ml: MovieLens, tmp_path):
    cfg = _cfg(tmp_path, vm_tier_coverage=0.5)
    ctx = FeatureContext(tiny_ml, history_len=4, kg_per_item=4, kg_buckets=32)
    rows = tiny_ml.ratings
    train, val = rows.iloc[:450], rows.iloc[450:]
    vm, init = train_vm(ctx, train, val, cfg, tiers=(_label_tier(train, 1), _label_tier(val, 1)))
    assert init["n_tiers"] == 1
    y = (val["rating"].to_numpy() >= 4).astype(float)
    plain = Examples(ctx.vm_batch(val.user_id, val.item_id, val.ts), torch.zeros(len(val), 1))
    present = _label_tier(val, 1).attach(plain)
    missing = _label_tier(val, 0).attach(plain)
    ll_present = log_loss(y, predict_proba(vm, present, predict_vm)[:, 0])
    ll_missing = log_loss(y, predict_proba(vm, missing, predict_vm)[:, 0])
    assert ll_present < 0.5 * ll_missing
    # Trained with dropout, the missing-tier score stays a sane prior, not a confident guess.
    assert ll_missing < 1.0


def test_trained_models_round_trip_through_checkpoints(tiny_ml: MovieLens, tmp_path):
    cfg = _cfg(tmp_path, max_epochs=2)
    ctx = FeatureContext(tiny_ml, history_len=4, kg_per_item=4, kg_buckets=32)
    impressions = tiny_ml.ratings
    models = train_models(impressions, ctx, cfg)
    assert models.fm_version.startswith("fm-")
    save_models(models, tmp_path / "models")
    fm, ae, vm, version = load_models(tmp_path / "models")
    assert version == models.fm_version
    batch = ctx.fm_batch(impressions.user_id[:20], impressions.item_id[:20], impressions.ts[:20])
    with torch.inference_mode():
        torch.testing.assert_close(
            ae.encode(fm.shared(batch)), models.autoencoder.encode(models.fm.shared(batch))
        )
        vbatch = ctx.vm_batch(
            impressions.user_id[:20], impressions.item_id[:20], impressions.ts[:20]
        )
        torch.testing.assert_close(vm(vbatch), models.vm(vbatch))


def test_a_saved_split_reads_back_with_its_test_end_and_without_one(tmp_path):
    (tmp_path / "split.json").write_text('{"train_end": 10, "val_end": 20, "test_end": 30}')
    assert load_split(tmp_path) == TimeSplit(10, 20, 30)
    # Saved before rolling windows: the test period ran to the end of the log.
    (tmp_path / "split.json").write_text('{"train_end": 10, "val_end": 20}')
    assert load_split(tmp_path) == TimeSplit(10, 20)
