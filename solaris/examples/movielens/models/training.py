"""Time-split training with early stopping, the rating tasks' targets and the example
models' predictions: how the MovieLens FM and VM are trained."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from solaris.config import TrainConfig
from solaris.examples.movielens.models.batch import FeatureBatch
from solaris.examples.movielens.tasks import LIKE_THRESHOLD, LOVE_RATING
from solaris.models import ModelInputError
from solaris.models.device import seed_everything

__all__ = [
    "TASK_RULES",
    "Examples",
    "Predict",
    "TimeSplit",
    "fit",
    "predict_fm",
    "predict_proba",
    "predict_vm",
    "task_targets",
]

TASK_RULES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "like": lambda r: r >= LIKE_THRESHOLD,
    "love": lambda r: r == LOVE_RATING,
    "dislike": lambda r: r <= 2,
    # Not monotone in liking (low at both ends): no threshold of the like/love scores.
    "neutral": lambda r: r == 3,
}


def task_targets(ratings: np.ndarray, tasks: tuple[str, ...]) -> torch.Tensor:
    """``[N, n_tasks]`` float32 binary targets from ratings."""
    unknown = [t for t in tasks if t not in TASK_RULES]
    if unknown:
        raise ModelInputError(f"unknown tasks {unknown}; known: {sorted(TASK_RULES)}")
    cols = [TASK_RULES[t](np.asarray(ratings)) for t in tasks]
    return torch.from_numpy(np.stack(cols, axis=1).astype(np.float32))


@dataclass(frozen=True)
class TimeSplit:
    """Rows with ``ts < train_end`` train, ``train_end <= ts < val_end`` validate, and
    ``val_end <= ts < test_end`` test (``test_end`` ``None``: everything after)."""

    train_end: int
    val_end: int
    test_end: int | None = None

    @classmethod
    def from_shares(cls, ts: np.ndarray, train_share: float, val_share: float) -> TimeSplit:
        ordered = np.sort(np.asarray(ts))
        n = len(ordered)
        return cls(
            train_end=int(ordered[int(n * train_share)]),
            val_end=int(ordered[int(n * (train_share + val_share))]),
        )

    @classmethod
    def ending_at(
        cls, ts: np.ndarray, end_share: float, val_share: float, test_share: float
    ) -> TimeSplit:
        """A rolling-origin window: its test period is the ``test_share`` of rows just
        before the ``end_share`` quantile of ``ts`` (``1.0``: the end of the log), its
        validation period the ``val_share`` before that, and training everything earlier."""
        if not 0 < val_share + test_share < end_share <= 1:
            raise ModelInputError(
                f"a window ending at {end_share} cannot hold {val_share} validation and "
                f"{test_share} test"
            )
        ordered = np.sort(np.asarray(ts))
        n = len(ordered)
        return cls(
            train_end=int(ordered[int(n * (end_share - test_share - val_share))]),
            val_end=int(ordered[int(n * (end_share - test_share))]),
            test_end=None if end_share >= 1 else int(ordered[int(n * end_share)]),
        )

    def part(self, ts: np.ndarray, name: str) -> np.ndarray:
        ts = np.asarray(ts)
        if name == "train":
            return ts < self.train_end
        if name == "val":
            return (ts >= self.train_end) & (ts < self.val_end)
        if name == "test":
            after = ts >= self.val_end
            return after if self.test_end is None else after & (ts < self.test_end)
        raise ModelInputError(f"unknown split part {name!r}")


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
    logits: torch.Tensor = model(ex.batch)
    return logits


def predict_vm(model: nn.Module, ex: Examples) -> torch.Tensor:
    logits: torch.Tensor = model(ex.batch, ex.tier_z, ex.tier_mask)
    return logits


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
