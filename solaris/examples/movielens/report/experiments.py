"""The model variants of one seed: Table 1, transfer ratios, coverage curve, tier value and
placeholder handling. One FM (and one autoencoder) per seed is reused by every VM variant.

Rows: the VM trains on the last ``vm_window_share`` of the training window, early-stops on
the validation period and is scored on the test period of the global time split. A VM task
is one of ``like`` (rating >= 4), ``love`` (== 5), both FM tasks, and ``dislike`` (<= 2),
which the FM never trains on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from solaris.config import SolarisConfig
from solaris.evaluation.metrics import auc, log_loss, normalized_entropy
from solaris.examples.movielens.adapters import MovieLensFoundationModel
from solaris.examples.movielens.features import FeatureContext
from solaris.examples.movielens.report.tiers import Tier
from solaris.examples.movielens.train import (
    Distillation,
    TierInputs,
    TrainedModels,
    fm_examples,
    train_vm,
    vm_examples,
)
from solaris.models.fm import FoundationModel
from solaris.models.training import (
    TimeSplit,
    fit,
    predict_fm,
    predict_proba,
    predict_vm,
    seed_everything,
    task_targets,
)
from solaris.pipeline.embed import encode_pairs

__all__ = [
    "PARTS",
    "VMRows",
    "VariantRunner",
    "distillation_sweep",
    "fm_probs",
    "masked",
    "offline_codes",
    "scores",
    "stack",
    "train_task_fm",
    "with_keep",
]

PARTS = ("train", "val", "test")


@dataclass(frozen=True)
class VMRows:
    """The VM's rows (train window tail, validation, test) in one frame, with ``part``."""

    rows: pd.DataFrame

    @classmethod
    def from_split(cls, impressions: pd.DataFrame, split: TimeSplit, window_share: float) -> VMRows:
        ts = impressions["ts"].to_numpy()
        train = impressions[split.part(ts, "train")]
        cut = np.quantile(train["ts"].to_numpy(), 1 - window_share)
        parts = [
            train[train["ts"].to_numpy() >= cut].assign(part="train"),
            impressions[split.part(ts, "val")].assign(part="val"),
            impressions[split.part(ts, "test")].assign(part="test"),
        ]
        return cls(pd.concat(parts, ignore_index=True))

    def mask(self, part: str) -> np.ndarray:
        return (self.rows["part"] == part).to_numpy()

    def frame(self, part: str) -> pd.DataFrame:
        return self.rows[self.mask(part)]

    def labels(self, task: str, part: str = "test") -> np.ndarray:
        return task_targets(self.frame(part)["rating"].to_numpy(), (task,)).numpy()[:, 0]


def scores(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    return {"logloss": log_loss(y, p), "ne": normalized_entropy(y, p), "auc": auc(y, p)}


def with_keep(cfg: SolarisConfig, keep: float) -> SolarisConfig:
    return cfg.model_copy(update={"train": cfg.train.model_copy(update={"vm_tier_coverage": keep})})


def stack(tiers: list[Tier], index: np.ndarray) -> TierInputs:
    """``TierInputs`` of the rows ``index`` from a list of tiers (one slot each)."""
    z = np.stack([t.z[index] for t in tiers], axis=1)
    m = np.stack([t.present[index] for t in tiers], axis=1).astype(np.float32)
    return TierInputs(torch.from_numpy(np.ascontiguousarray(z, np.float32)), torch.from_numpy(m))


class VariantRunner:
    """Trains VM variants on fixed rows and returns validation and test probabilities."""

    def __init__(self, ctx: FeatureContext, rows: VMRows, cfg: SolarisConfig) -> None:
        self.ctx, self.rows, self.cfg = ctx, rows, cfg
        self.index = {p: np.flatnonzero(rows.mask(p)) for p in PARTS}

    def run(
        self,
        task: str,
        tiers: list[Tier] | None = None,
        *,
        keep: float = 1.0,
        distill: Distillation | None = None,
        eval_tiers: list[Tier] | None = None,
    ) -> dict[str, np.ndarray]:
        """Train on ``tiers`` (dropout keep rate ``keep``); score validation and test with
        ``eval_tiers`` (default: the same tiers)."""
        cfg = with_keep(self.cfg, keep)
        frames = {p: self.rows.frame(p) for p in PARTS}
        eval_tiers = eval_tiers or tiers
        pair = None
        if tiers is not None:
            pair = (stack(tiers, self.index["train"]), stack(eval_tiers, self.index["val"]))
        vm, _ = train_vm(
            self.ctx, frames["train"], frames["val"], cfg, pair, task=task, distill=distill
        )
        out = {}
        for part in ("val", "test"):
            ex = vm_examples(self.ctx, frames[part], task)
            if tiers is not None:
                ex = stack(eval_tiers, self.index[part]).attach(ex)
            out[part] = predict_proba(vm, ex, predict_vm)[:, 0]
        return out


def train_task_fm(
    ctx: FeatureContext,
    train_rows: pd.DataFrame,
    val_rows: pd.DataFrame,
    cfg: SolarisConfig,
    tasks: tuple[str, ...],
) -> FoundationModel:
    """An FM of the same architecture, features and window trained on ``tasks`` (the
    reference for a task the SOLARIS FM never saw)."""
    seed_everything(cfg.train.seed)
    fm = FoundationModel(
        spec=ctx.spec("fm"),
        embed_dim=cfg.model.embed_dim,
        cross_layers=cfg.model.cross_layers,
        shared_dim=cfg.model.shared_dim,
        tasks=tasks,
    )
    fit(
        fm,
        fm_examples(ctx, train_rows, tasks),
        fm_examples(ctx, val_rows, tasks),
        predict_fm,
        cfg.train,
        desc="FM " + "+".join(tasks),
    )
    return fm


def fm_probs(fm: FoundationModel, ctx: FeatureContext, frame: pd.DataFrame) -> np.ndarray:
    return predict_proba(fm, fm_examples(ctx, frame, tuple(fm.task_heads)), predict_fm)


def offline_codes(models: TrainedModels, ctx: FeatureContext, rows: VMRows) -> Tier:
    """100% offline coverage: every VM row's pair code computed as of the row's own time."""
    r = rows.rows
    z = encode_pairs(
        r["user_id"].to_numpy(np.int64),
        r["item_id"].to_numpy(np.int64),
        r["ts"].to_numpy(np.int64),
        fm=MovieLensFoundationModel(models.fm, ctx, models.fm_version),
        autoencoder=models.autoencoder,
    )
    return Tier(z, np.ones(len(r), dtype=bool))


def masked(tier: Tier, present: np.ndarray) -> Tier:
    return Tier(np.where(present[:, None], tier.z, 0.0).astype(np.float32), present)


def distillation_sweep(
    runner: VariantRunner, task: str, teacher: np.ndarray, mode: str, grid: tuple[float, ...]
) -> dict:
    """Trains one VM per weight; the weight is chosen on validation log-loss, never on test."""
    y_val = runner.rows.labels(task, "val")
    if mode == "task":
        grid = (*grid, float("inf"))  # the limit: soft labels alone (the domain's boundary)
    results = {}
    for lam in grid:
        out = runner.run(task, distill=Distillation(teacher, lam, mode))
        results[lam] = (log_loss(y_val, out["val"]), out["test"])
    best = min(results, key=lambda lam: results[lam][0])
    return {
        "val_logloss": {str(k): v[0] for k, v in results.items()},
        "chosen": best,
        # An edge of the grid (not the λ = inf boundary of the weight's domain).
        "at_edge": best == grid[0] or (best == grid[-1] and np.isfinite(best)),
        "at_domain_boundary": bool(np.isinf(best)),
        "test": results[best][1],
    }
