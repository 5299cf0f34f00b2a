"""Train the FM, its autoencoder and the verifier VM on a global time split.

The FM's advantage is what a foundation model really has over a vertical one: the whole
training window (the VM sees only its last ``vm_window_share``), a history that carries the
user's past ratings, KG entities and user rating statistics. Everything is causal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from solaris.config import SolarisConfig
from solaris.evaluation.metrics import auc, log_loss
from solaris.examples.movielens.features import FeatureContext
from solaris.examples.movielens.models.fm import FoundationModel
from solaris.examples.movielens.models.training import (
    Examples,
    TimeSplit,
    fit,
    predict_fm,
    predict_proba,
    predict_vm,
    task_targets,
)
from solaris.examples.movielens.models.vm import VerticalModel, tier_dropout
from solaris.files import atomic_write_json
from solaris.models.autoencoder import Autoencoder
from solaris.models.checkpoints import load_checkpoint, save_checkpoint, weights_digest
from solaris.models.device import seed_everything
from solaris.pipeline.codes import CODES_MANIFEST, CodesManifest, fit_autoencoder_on

__all__ = [
    "Distillation",
    "TierInputs",
    "TrainedModels",
    "fm_examples",
    "load_models",
    "load_split",
    "save_models",
    "score_candidates",
    "train_autoencoder",
    "train_models",
    "train_vm",
    "vm_examples",
    "vm_window_start",
]


@dataclass(frozen=True)
class TierInputs:
    """SOLARIS tier inputs of N rows: ``z`` ``[N, n_tiers, d]`` and ``mask`` ``[N, n_tiers]``."""

    z: torch.Tensor
    mask: torch.Tensor

    def attach(self, ex: Examples) -> Examples:
        if len(self.z) != len(ex):
            raise ValueError(f"tier inputs have {len(self.z)} rows for {len(ex)} examples")
        return Examples(ex.batch, ex.targets, self.z * self.mask.unsqueeze(-1), self.mask)


@dataclass
class TrainedModels:
    fm: FoundationModel
    autoencoder: Autoencoder
    vm: VerticalModel
    fm_version: str
    vm_version: str
    split: TimeSplit
    init: dict[str, dict] = field(default_factory=dict)  # constructor args, for checkpoints
    metrics: dict[str, float] = field(default_factory=dict)


def fm_examples(ctx: FeatureContext, rows: pd.DataFrame, tasks: tuple[str, ...]) -> Examples:
    batch = ctx.fm_batch(
        rows["user_id"].to_numpy(), rows["item_id"].to_numpy(), rows["ts"].to_numpy()
    )
    return Examples(batch, task_targets(rows["rating"].to_numpy(), tasks))


def vm_examples(ctx: FeatureContext, rows: pd.DataFrame, task: str, history: int = 0) -> Examples:
    """The VM's examples; ``history > 0`` is the user-aware VM (``FeatureContext.vm_batch``)."""
    batch = ctx.vm_batch(
        rows["user_id"].to_numpy(), rows["item_id"].to_numpy(), rows["ts"].to_numpy(), history
    )
    return Examples(batch, task_targets(rows["rating"].to_numpy(), (task,)))


def train_autoencoder(
    fm: FoundationModel, train: Examples, cfg: SolarisConfig
) -> tuple[Autoencoder, float]:
    """Fit ``h -> z`` on reconstruction of the FM's last shared layer; returns (ae, mse)."""
    with torch.inference_mode():
        h = torch.cat([fm.shared(train.batch[i : i + 8192]) for i in range(0, len(train), 8192)])
    return fit_autoencoder_on(h.clone(), cfg)


@dataclass(frozen=True)
class Distillation:
    """Soft labels of a teacher (the FM) for the VM's training rows.

    ``probs`` is ``[N_train, k]`` teacher probabilities, ``weight`` the loss weight ``λ``.
    ``mode="task"`` (``k == 1``, the teacher's head for the VM's own task): the loss is
    ``BCE(y) + λ·BCE(p_teacher)`` on the VM's head, i.e. a BCE on the blended target
    ``(y + λ·p) / (1 + λ)``; ``λ = inf`` trains on ``p`` alone. ``mode="auxiliary"`` (a
    task the teacher never trained on): the VM gets ``k`` extra heads that fit the
    teacher's probabilities, weighted ``λ / k`` each; only the task head is validated and
    served.
    """

    probs: np.ndarray
    weight: float
    mode: Literal["task", "auxiliary"] = "task"


def train_vm(
    ctx: FeatureContext,
    train_rows: pd.DataFrame,
    val_rows: pd.DataFrame,
    cfg: SolarisConfig,
    tiers: tuple[TierInputs, TierInputs] | None = None,
    *,
    task: str | None = None,
    distill: Distillation | None = None,
    history: int = 0,
) -> tuple[VerticalModel, dict[str, Any]]:
    """Train a VM on its own features and, when ``tiers`` (train, val) are given, on the
    SOLARIS tiers with feature dropout at ``cfg.train.vm_tier_coverage``.

    Dropout makes the training rows meet missing tiers as often as serving will, so a zero
    placeholder does not shift the VM's scores. Validation uses the tiers as given (the
    caller masks them to the coverage it expects online). ``task`` defaults to the FM's
    first task; ``distill`` adds the teacher's soft labels; ``history > 0`` trains the
    user-aware VM (the user's rating statistics and last ``history`` items). Returns (vm,
    constructor args).
    """
    task = task or cfg.model.tasks[0]
    n_tiers = 0 if tiers is None else tiers[0].z.shape[1]
    init: dict[str, Any] = {
        "spec": ctx.spec("vm", history),
        "n_tiers": n_tiers,
        "z_dim": cfg.model.z_dim,
        "embed_dim": cfg.model.embed_dim,
        "hidden": cfg.model.vm_hidden,
    }
    if history > 0:  # the user-aware VM; the production VM's checkpoints stay as they were
        init["history_summary"] = True
    train = vm_examples(ctx, train_rows, task, history)
    val = vm_examples(ctx, val_rows, task, history)
    loss_weights = None
    if distill is not None:
        soft = torch.as_tensor(np.asarray(distill.probs, dtype=np.float32)).reshape(len(train), -1)
        lam = float(distill.weight)
        if distill.mode == "task":
            if soft.shape[1] != 1:
                raise ValueError("task distillation needs one teacher probability per row")
            # λ = inf is the limit: the teacher's soft labels alone.
            blended = soft if np.isinf(lam) else (train.targets + lam * soft) / (1.0 + lam)
            train = Examples(train.batch, blended)
        else:
            if not np.isfinite(lam):
                raise ValueError("auxiliary distillation needs a finite weight")
            k = soft.shape[1]
            init["n_tasks"] = 1 + k
            train = Examples(train.batch, torch.cat([train.targets, soft], dim=1))
            loss_weights = torch.tensor([1.0] + [lam / k] * k)
    augment = None
    if tiers is not None:
        train = tiers[0].attach(train)
        val = tiers[1].attach(val)
        keep = cfg.train.vm_tier_coverage

        def augment(ex: Examples, gen: torch.Generator) -> Examples:
            z, mask = tier_dropout(ex.tier_z, ex.tier_mask, keep, generator=gen)
            return Examples(ex.batch, ex.targets, z, mask)

    seed_everything(cfg.train.seed)
    vm = VerticalModel(**init)
    fit(
        vm, train, val, predict_vm, cfg.train, desc="VM", augment=augment, loss_weights=loss_weights
    )
    return vm, init


def vm_window_start(train_ts: np.ndarray, window_share: float) -> int:
    """Start of the VM's window: the last ``window_share`` of the training period's rows.
    The VM only sees that part of the training window, like a production model."""
    return int(np.quantile(np.asarray(train_ts), 1 - window_share))


def train_models(
    impressions: pd.DataFrame,
    ctx: FeatureContext,
    cfg: SolarisConfig,
    split: TimeSplit | None = None,
) -> TrainedModels:
    """FM (multi-task, whole training window), autoencoder, and the plain VM verifier.

    ``impressions`` needs ``user_id, item_id, ts, rating``. ``split`` defaults to the
    configured shares of ``impressions``. Metrics are on the test period for the VM's task
    (the FM's first task).
    """
    tasks = tuple(cfg.model.tasks)
    if split is None:
        split = TimeSplit.from_shares(
            impressions["ts"].to_numpy(), cfg.train.train_share, cfg.train.val_share
        )
    ts = impressions["ts"].to_numpy()
    train_rows = impressions[split.part(ts, "train")]
    val_rows = impressions[split.part(ts, "val")]
    test_rows = impressions[split.part(ts, "test")]

    seed_everything(cfg.train.seed)
    fm_init = {
        "spec": ctx.spec("fm"),
        "embed_dim": cfg.model.embed_dim,
        "cross_layers": cfg.model.cross_layers,
        "shared_dim": cfg.model.shared_dim,
        "tasks": tasks,
    }
    fm = FoundationModel(**fm_init)
    fm_train = fm_examples(ctx, train_rows, tasks)
    fit(fm, fm_train, fm_examples(ctx, val_rows, tasks), predict_fm, cfg.train, desc="FM")
    ae, ae_mse = train_autoencoder(fm, fm_train, cfg)
    fm_version = "fm-" + weights_digest(fm, ae, config=cfg.model.model_dump())

    cut = vm_window_start(train_rows["ts"].to_numpy(), cfg.train.vm_window_share)
    vm_rows = train_rows[train_rows["ts"].to_numpy() >= cut]
    vm, vm_init = train_vm(ctx, vm_rows, val_rows, cfg)
    vm_version = "vm-" + weights_digest(vm, config={"vm_hidden": cfg.model.vm_hidden})

    y = task_targets(test_rows["rating"].to_numpy(), (tasks[0],)).numpy()[:, 0]
    p_fm = predict_proba(fm, fm_examples(ctx, test_rows, tasks), predict_fm)[:, 0]
    p_vm = predict_proba(vm, vm_examples(ctx, test_rows, tasks[0]), predict_vm)[:, 0]
    metrics = {
        "n_train": len(train_rows),
        "n_vm_train": len(vm_rows),
        "n_val": len(val_rows),
        "n_test": len(test_rows),
        "fm_logloss": log_loss(y, p_fm),
        "fm_auc": auc(y, p_fm),
        "vm_logloss": log_loss(y, p_vm),
        "vm_auc": auc(y, p_vm),
        "ae_mse": ae_mse,
    }
    ae_init = {"in_dim": ae.in_dim, "z_dim": ae.z_dim, "hidden": ae.hidden}
    init = {"fm": fm_init, "autoencoder": ae_init, "vm": vm_init}
    return TrainedModels(fm, ae, vm, fm_version, vm_version, split, init, metrics)


def save_models(models: TrainedModels, folder: Path) -> dict[str, Path]:
    """Checkpoints of the three models (FM and autoencoder share ``fm_version``) and the
    time split they were evaluated on, so later replays use the same test period."""
    folder.mkdir(parents=True, exist_ok=True)
    split = {
        "train_end": models.split.train_end,
        "val_end": models.split.val_end,
        "test_end": models.split.test_end,
        "fm_version": models.fm_version,
        "vm_version": models.vm_version,
    }
    atomic_write_json(folder / "split.json", split)
    versions = {"fm": models.fm_version, "autoencoder": models.fm_version, "vm": models.vm_version}
    modules = {"fm": models.fm, "autoencoder": models.autoencoder, "vm": models.vm}
    paths = {
        kind: save_checkpoint(
            folder / f"{kind}.pt",
            modules[kind],
            kind=kind,
            version=versions[kind],
            init=models.init[kind],
        )
        for kind in modules
    }
    # The FM's own version is the codes' version here: FM and autoencoder are trained together.
    manifest = CodesManifest(
        models.fm_version, models.fm_version, models.autoencoder.z_dim, models.fm.shared_dim
    )
    atomic_write_json(folder / CODES_MANIFEST, manifest.__dict__)
    return paths


def load_split(folder: Path) -> TimeSplit:
    """The time split saved beside the checkpoints by ``save_models``."""
    saved = json.loads((folder / "split.json").read_text())
    end = saved.get("test_end")  # absent before rolling windows: the test ran to the end
    return TimeSplit(
        train_end=int(saved["train_end"]),
        val_end=int(saved["val_end"]),
        test_end=None if end is None else int(end),
    )


def load_models(folder: Path) -> tuple[FoundationModel, Autoencoder, VerticalModel, str]:
    fm, fm_version = load_checkpoint(folder / "fm.pt", FoundationModel, kind="fm")
    ae, ae_version = load_checkpoint(folder / "autoencoder.pt", Autoencoder, kind="autoencoder")
    if ae_version != fm_version:
        raise ValueError(f"autoencoder {ae_version} does not belong to FM {fm_version} in {folder}")
    vm, _ = load_checkpoint(folder / "vm.pt", VerticalModel, kind="vm")
    return fm, ae, vm, fm_version


@torch.inference_mode()
def score_candidates(
    vm: VerticalModel,
    ctx: FeatureContext,
    candidates: pd.DataFrame,
    batch_size: int = 65_536,
    progress: bool = False,
) -> np.ndarray:
    """Verifier score (VM probability of its task) of every candidate row, as of its time."""
    users = candidates["user_id"].to_numpy()
    items = candidates["item_id"].to_numpy()
    ts = candidates["ts"].to_numpy()
    out = np.empty(len(candidates), dtype=np.float32)
    vm.eval()
    steps = range(0, len(candidates), batch_size)
    for i in tqdm(steps, desc="verifier", unit="batch", disable=not progress, leave=False):
        batch = ctx.vm_batch(
            users[i : i + batch_size], items[i : i + batch_size], ts[i : i + batch_size]
        )
        out[i : i + batch_size] = torch.sigmoid(vm(batch))[:, 0].numpy()
    return out
