"""Time-split training with early stopping, seeds, progress bars and versioned checkpoints."""

from __future__ import annotations

import copy
import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from solaris.config import TrainConfig
from solaris.data.tasks import LIKE_THRESHOLD, LOVE_RATING
from solaris.files import atomic_write
from solaris.models.batch import FeatureBatch

TASK_RULES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "like": lambda r: r >= LIKE_THRESHOLD,
    "love": lambda r: r == LOVE_RATING,
    "dislike": lambda r: r <= 2,
}


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but torch sees no CUDA device")
    return torch.device(name)


def seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def task_targets(ratings: np.ndarray, tasks: tuple[str, ...]) -> torch.Tensor:
    """``[N, n_tasks]`` float32 binary targets from ratings."""
    unknown = [t for t in tasks if t not in TASK_RULES]
    if unknown:
        raise ValueError(f"unknown tasks {unknown}; known: {sorted(TASK_RULES)}")
    cols = [TASK_RULES[t](np.asarray(ratings)) for t in tasks]
    return torch.from_numpy(np.stack(cols, axis=1).astype(np.float32))


@dataclass(frozen=True)
class TimeSplit:
    """Rows with ``ts < train_end`` train, ``train_end <= ts < val_end`` validate, rest test."""

    train_end: int
    val_end: int

    @classmethod
    def from_shares(cls, ts: np.ndarray, train_share: float, val_share: float) -> TimeSplit:
        ordered = np.sort(np.asarray(ts))
        n = len(ordered)
        return cls(
            train_end=int(ordered[int(n * train_share)]),
            val_end=int(ordered[int(n * (train_share + val_share))]),
        )

    def part(self, ts: np.ndarray, name: str) -> np.ndarray:
        ts = np.asarray(ts)
        if name == "train":
            return ts < self.train_end
        if name == "val":
            return (ts >= self.train_end) & (ts < self.val_end)
        if name == "test":
            return ts >= self.val_end
        raise ValueError(f"unknown split part {name!r}")


@dataclass
class Examples:
    """Features, targets and (for the VM) tier inputs of N rows."""

    batch: FeatureBatch
    targets: torch.Tensor  # [N, n_tasks]
    tier_z: torch.Tensor | None = None  # [N, n_tiers, d]
    tier_mask: torch.Tensor | None = None  # [N, n_tiers]

    def __len__(self) -> int:
        return len(self.batch)

    def take(self, index: torch.Tensor | slice) -> Examples:
        return Examples(
            self.batch[index],
            self.targets[index],
            None if self.tier_z is None else self.tier_z[index],
            None if self.tier_mask is None else self.tier_mask[index],
        )


Predict = Callable[[nn.Module, Examples], torch.Tensor]


def predict_fm(model: nn.Module, ex: Examples) -> torch.Tensor:
    return model(ex.batch)


def predict_vm(model: nn.Module, ex: Examples) -> torch.Tensor:
    return model(ex.batch, ex.tier_z, ex.tier_mask)


@torch.inference_mode()
def predict_proba(
    model: nn.Module, ex: Examples, predict: Predict, batch_size: int = 8192
) -> np.ndarray:
    """``[N, n_tasks]`` probabilities, in batches."""
    model.eval()
    out = [
        torch.sigmoid(predict(model, ex.take(slice(i, i + batch_size)))).float()
        for i in range(0, len(ex), batch_size)
    ]
    return torch.cat(out).numpy()


def _mean_loss(model: nn.Module, ex: Examples, predict: Predict, batch_size: int) -> float:
    loss_fn = nn.BCEWithLogitsLoss(reduction="sum")
    total = 0.0
    model.eval()
    with torch.inference_mode():
        for i in range(0, len(ex), batch_size):
            part = ex.take(slice(i, i + batch_size))
            # Only the heads that have validation targets (the task; not distillation heads).
            logits = predict(model, part)[:, : part.targets.shape[1]]
            total += float(loss_fn(logits, part.targets))
    return total / (len(ex) * ex.targets.shape[1])


def fit(
    model: nn.Module,
    train: Examples,
    val: Examples,
    predict: Predict,
    cfg: TrainConfig,
    *,
    desc: str,
    augment: Callable[[Examples, torch.Generator], Examples] | None = None,
    loss_weights: torch.Tensor | None = None,
) -> float:
    """Adam with early stopping on validation log-loss; restores the best weights.

    ``augment`` transforms each training mini-batch (the VM's tier dropout).
    ``loss_weights`` (``[n_tasks]``) weights the training loss per target column, e.g. the
    soft-label heads of distillation. Targets may be soft (probabilities). Validation reads
    only the first ``val.targets.shape[1]`` logits, unweighted. Returns the best validation
    log-loss.
    """
    gen = seed_everything(cfg.seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    loss_fn = nn.BCEWithLogitsLoss(weight=loss_weights)
    best, best_state, stale = float("inf"), copy.deepcopy(model.state_dict()), 0
    bar = tqdm(range(cfg.max_epochs), desc=desc, unit="epoch", leave=False)
    for _epoch in bar:
        model.train()
        order = torch.randperm(len(train), generator=gen)
        for i in range(0, len(train), cfg.batch_size):
            part = train.take(order[i : i + cfg.batch_size])
            if augment is not None:
                part = augment(part, gen)
            opt.zero_grad(set_to_none=True)
            loss_fn(predict(model, part), part.targets).backward()
            opt.step()
        val_loss = _mean_loss(model, val, predict, 8192)
        bar.set_postfix(val_logloss=f"{val_loss:.4f}")
        if val_loss < best - 1e-5:
            best, best_state, stale = val_loss, copy.deepcopy(model.state_dict()), 0
        else:
            stale += 1
            if stale > cfg.patience:
                break
    model.load_state_dict(best_state)
    model.eval()
    return best


def weights_digest(*models: nn.Module, config: dict | None = None) -> str:
    """A short hash of the models' weights and the config that built them."""
    h = hashlib.sha256(json.dumps(config or {}, sort_keys=True, default=str).encode())
    for model in models:
        for name, tensor in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:12]


def save_checkpoint(path: Path, model: nn.Module, *, kind: str, version: str, init: dict) -> Path:
    """Weights, constructor arguments and version in one file (written atomically)."""
    payload = {"kind": kind, "version": version, "init": init, "state": model.state_dict()}
    return atomic_write(path, lambda fh: torch.save(payload, fh))


def load_checkpoint(path: Path, factory: Callable[..., nn.Module]) -> tuple[nn.Module, str]:
    """Rebuild a model with ``factory(**init)`` and load its weights; returns (model, version)."""
    payload = torch.load(path, map_location="cpu", weights_only=False)
    model = factory(**payload["init"])
    model.load_state_dict(payload["state"])
    model.eval()
    return model, payload["version"]
