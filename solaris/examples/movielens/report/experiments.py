"""The model variants of one seed: Table 1, transfer ratios, coverage curve, tier value and
placeholder handling. One FM (and one autoencoder) per seed is reused by every VM variant.

Rows: the VM trains on the last ``vm_window_share`` of the training window, early-stops on
the validation period and is scored on the test period of the global time split. A VM task
is ``like`` (rating >= 4, an FM task), ``dislike`` (<= 2) or ``neutral`` (== 3), which the
FM never trains on; ``neutral`` is not monotone in liking, so no threshold of the FM's
like/love scores gives it.

Variance: one VM initialisation moves a test log-loss by about 0.005, the size of the
smaller gains, so the plain VM and the distilled VM are averaged over ``n_inits``
initialisations (:meth:`VariantRunner.run_inits`).
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
from solaris.examples.movielens.models.fm import FoundationModel
from solaris.examples.movielens.models.training import (
    TimeSplit,
    fit,
    predict_fm,
    predict_proba,
    predict_vm,
    task_targets,
)
from solaris.examples.movielens.report.stats import row_log_loss
from solaris.examples.movielens.report.tiers import Tier
from solaris.examples.movielens.train import (
    Distillation,
    TierInputs,
    TrainedModels,
    fm_examples,
    train_vm,
    vm_examples,
    vm_window_start,
)
from solaris.models.device import seed_everything
from solaris.pipeline.embed import encode_pairs

__all__ = [
    "PARTS",
    "VMRows",
    "VariantRunner",
    "distillation_sweep",
    "earlier_code_of_other_user",
    "earlier_code_of_same_user",
    "fm_logit_tier",
    "fm_probs",
    "init_row_losses",
    "init_scores",
    "masked",
    "offline_codes",
    "out_of_time_teacher",
    "scores",
    "shuffled_within_user",
    "stack",
    "train_task_fm",
    "untrained_codes",
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
        cut = vm_window_start(train["ts"].to_numpy(), window_share)
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


def _with_init(cfg: SolarisConfig, init: int) -> SolarisConfig:
    """The config of VM initialisation ``init`` (0 is the seed's own)."""
    if init == 0:
        return cfg
    seed = cfg.train.seed + 7_919 * init  # distinct from every other report seed
    return cfg.model_copy(update={"train": cfg.train.model_copy(update={"seed": seed})})


def init_scores(y: np.ndarray, probs: list[np.ndarray]) -> dict[str, float]:
    """:func:`scores` averaged over initialisations (the expected figure of one VM)."""
    each = [scores(y, p) for p in probs]
    return {k: float(np.mean([e[k] for e in each])) for k in each[0]}


def init_row_losses(y: np.ndarray, probs: list[np.ndarray]) -> np.ndarray:
    """Per-row log-loss averaged over initialisations (its mean is :func:`init_scores`')."""
    return np.mean([row_log_loss(y, p) for p in probs], axis=0)


def stack(tiers: list[Tier], index: np.ndarray) -> TierInputs:
    """``TierInputs`` of the rows ``index`` from a list of tiers (one slot each)."""
    z = np.stack([t.z[index] for t in tiers], axis=1)
    m = np.stack([t.present[index] for t in tiers], axis=1).astype(np.float32)
    return TierInputs(torch.from_numpy(np.ascontiguousarray(z, np.float32)), torch.from_numpy(m))


class VariantRunner:
    """Trains VM variants on fixed rows and returns validation and test probabilities.

    ``history > 0``: every variant is built on the user-aware VM (the user's rating
    statistics and last ``history`` items); ``0``: on the user-blind VM."""

    def __init__(
        self, ctx: FeatureContext, rows: VMRows, cfg: SolarisConfig, history: int = 0
    ) -> None:
        self.ctx, self.rows, self.cfg, self.history = ctx, rows, cfg, history
        self.index = {p: np.flatnonzero(rows.mask(p)) for p in PARTS}

    def run(
        self,
        task: str,
        tiers: list[Tier] | None = None,
        *,
        keep: float = 1.0,
        distill: Distillation | None = None,
        eval_tiers: list[Tier] | None = None,
        init: int = 0,
    ) -> dict[str, np.ndarray]:
        """Train on ``tiers`` (dropout keep rate ``keep``); score validation and test with
        ``eval_tiers`` (default: the same tiers). ``init`` picks the VM initialisation."""
        cfg = _with_init(with_keep(self.cfg, keep), init)
        frames = {p: self.rows.frame(p) for p in PARTS}
        eval_tiers = eval_tiers or tiers
        pair = None
        if tiers is not None:
            pair = (stack(tiers, self.index["train"]), stack(eval_tiers, self.index["val"]))
        vm, _ = train_vm(
            self.ctx,
            frames["train"],
            frames["val"],
            cfg,
            pair,
            task=task,
            distill=distill,
            history=self.history,
        )
        out = {}
        for part in ("val", "test"):
            ex = vm_examples(self.ctx, frames[part], task, self.history)
            if tiers is not None:
                ex = stack(eval_tiers, self.index[part]).attach(ex)
            out[part] = predict_proba(vm, ex, predict_vm)[:, 0]
        return out

    def run_inits(
        self,
        task: str,
        n_inits: int,
        tiers: list[Tier] | None = None,
        **options,
    ) -> list[dict[str, np.ndarray]]:
        """:meth:`run` (same ``options``) for VM initialisations ``0 … n_inits − 1``."""
        return [self.run(task, tiers, init=k, **options) for k in range(n_inits)]

    def test_probs(
        self, task: str, n_inits: int, tiers: list[Tier] | None = None, **options
    ) -> list[np.ndarray]:
        """The test probabilities of :meth:`run_inits`."""
        return [r["test"] for r in self.run_inits(task, n_inits, tiers, **options)]


def _new_fm(ctx: FeatureContext, cfg: SolarisConfig, tasks: tuple[str, ...]) -> FoundationModel:
    """An untrained FM of the configured architecture, initialised from the seed."""
    seed_everything(cfg.train.seed)
    return FoundationModel(
        spec=ctx.spec("fm"),
        embed_dim=cfg.model.embed_dim,
        cross_layers=cfg.model.cross_layers,
        shared_dim=cfg.model.shared_dim,
        tasks=tasks,
    )


def train_task_fm(
    ctx: FeatureContext,
    train_rows: pd.DataFrame,
    val_rows: pd.DataFrame,
    cfg: SolarisConfig,
    tasks: tuple[str, ...],
) -> FoundationModel:
    """An FM of the same architecture, features and window trained on ``tasks`` (the
    reference for a task the SOLARIS FM never saw)."""
    fm = _new_fm(ctx, cfg, tasks)
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
    runner: VariantRunner,
    task: str,
    teacher: np.ndarray,
    mode: str,
    grid: tuple[float, ...],
    n_inits: int,
) -> dict:
    """One VM per weight and initialisation; the weight with the lowest validation
    log-loss averaged over the initialisations is chosen (never on test).

    ``λ = 0`` is the plain VM: its runs are returned as ``vm_test`` and serve as the VM
    row, so "no distillation" competes on the same footing. ``test_by_weight`` holds every
    weight's test probabilities, for a choice pooled over seeds
    (:func:`solaris.examples.movielens.report.aggregate.pool_distillation`). ``at_edge``:
    the largest weight won, so the grid may be too narrow.
    """
    if 0.0 not in grid:
        raise ValueError(f"the distillation grid {grid} must hold 0 (the plain VM)")
    y_val = runner.rows.labels(task, "val")
    runs = {
        lam: runner.run_inits(
            task, n_inits, distill=None if lam == 0 else Distillation(teacher, lam, mode)
        )
        for lam in grid
    }
    val = {lam: float(np.mean([log_loss(y_val, r["val"]) for r in rs])) for lam, rs in runs.items()}
    best = min(val, key=val.__getitem__)
    return {
        "val_logloss": {str(k): v for k, v in val.items()},
        "chosen": best,
        "at_edge": bool(best == max(grid) and best > 0),
        "n_inits": n_inits,
        "test": [r["test"] for r in runs[best]],
        "vm_test": [r["test"] for r in runs[0.0]],
        "test_by_weight": {str(k): [r["test"] for r in rs] for k, rs in runs.items()},
    }


def fm_logit_tier(fm: FoundationModel, ctx: FeatureContext, rows: VMRows, z_dim: int) -> Tier:
    """The FM's task logits of every VM row as a tier (zero-padded to the code width, so
    the VM reads them through the same projection as a code): the baseline that ``z``
    must beat to show more than the FM's predictions in disguise."""
    p = np.clip(fm_probs(fm, ctx, rows.rows), 1e-6, 1 - 1e-6)
    logits = np.log(p) - np.log1p(-p)  # [N, n_fm_tasks]
    if logits.shape[1] > z_dim:
        raise ValueError(f"{logits.shape[1]} FM logits do not fit a code of width {z_dim}")
    z = np.zeros((len(p), z_dim), np.float32)
    z[:, : logits.shape[1]] = logits
    return Tier(z, np.ones(len(p), dtype=bool))


def shuffled_within_user(tier: Tier, rows: VMRows, seed: int) -> Tier:
    """Placebo: each user's codes permuted among that user's rows of the same part. What
    the user's codes say on average survives; what they say about the item does not."""
    r = rows.rows
    rng = np.random.default_rng(seed)
    group = r["user_id"].to_numpy(np.int64) * len(PARTS) + r["part"].map(
        {p: k for k, p in enumerate(PARTS)}
    ).to_numpy(np.int64)
    order = np.lexsort((rng.random(len(r)), group))  # random order within each group
    by_group = np.argsort(group, kind="stable")  # the same groups, in row order
    perm = np.empty(len(r), np.int64)
    perm[by_group] = order
    return Tier(tier.z[perm], tier.present[perm])


def _earlier_donor(
    rows: VMRows, tier: Tier, seed: int, *, same_user: bool, tries: int = 20
) -> Tier:
    """Each row's code replaced by the code of a random row at or before its own time:
    of the same user and part (``same_user``) or of any other user. Every code was computed
    as of its own row's time, so the donor's code is as of this row's time or earlier
    (causal). A row with no donor after ``tries`` draws is missing."""
    r = rows.rows
    ts = r["ts"].to_numpy(np.int64)
    users = r["user_id"].to_numpy(np.int64)
    rng = np.random.default_rng(seed)
    if same_user:
        part = r["part"].map({p: k for k, p in enumerate(PARTS)}).to_numpy(np.int64)
        group = users * len(PARTS) + part
    else:
        group = np.zeros(len(r), np.int64)
    order = np.lexsort((np.arange(len(r)), ts, group))  # by group, then time
    g, t = group[order], ts[order]
    start = np.searchsorted(g, g, side="left")  # first row of the group
    stop = np.searchsorted(g * (1 << 40) + t, g * (1 << 40) + t, side="right")  # rows <= t
    sorted_users = users[order]
    donor = np.full(len(r), -1, np.int64)
    todo = np.arange(len(r))  # positions in ``order``
    for _ in range(tries):
        pick = start[todo] + (rng.random(len(todo)) * (stop[todo] - start[todo])).astype(np.int64)
        same = sorted_users[pick] == sorted_users[todo]
        ok = (pick != todo) & (same if same_user else ~same)  # never the row itself
        donor[todo[ok]] = pick[ok]
        todo = todo[~ok]
        if not len(todo):
            break
    present = np.zeros(len(r), bool)
    z = np.zeros_like(tier.z)
    found = donor >= 0
    z[order[found]] = tier.z[order[donor[found]]]
    present[order[found]] = tier.present[order[donor[found]]]
    return Tier(z, present)


def earlier_code_of_other_user(tier: Tier, rows: VMRows, seed: int) -> Tier:
    """Placebo (causal): each row gets the code of a random other user's row at or before
    its own time. It says nothing about this user or item, so its TR should be about 0."""
    return _earlier_donor(rows, tier, seed, same_user=False)


def earlier_code_of_same_user(tier: Tier, rows: VMRows, seed: int) -> Tier:
    """Control (causal): each row gets the code of a random other row of the same user in
    the same part at or before its time (often another item of the same request: the
    shuffle within user without its future codes). What the codes say about the user
    survives, what they say about the item does not; a row with no such donor (a user's
    first request of one item) is missing."""
    return _earlier_donor(rows, tier, seed, same_user=True)


def untrained_codes(
    models: TrainedModels, ctx: FeatureContext, rows: VMRows, cfg: SolarisConfig
) -> Tier:
    """Placebo: the codes of an FM of the same architecture that was never trained (its
    shared layer is a random function of the FM's inputs), through the trained
    autoencoder."""
    fm = _new_fm(ctx, cfg, tuple(cfg.model.tasks))
    r = rows.rows
    z = encode_pairs(
        r["user_id"].to_numpy(np.int64),
        r["item_id"].to_numpy(np.int64),
        r["ts"].to_numpy(np.int64),
        fm=MovieLensFoundationModel(fm, ctx, "untrained"),
        autoencoder=models.autoencoder,
    )
    return Tier(z, np.ones(len(r), dtype=bool))


def out_of_time_teacher(
    ctx: FeatureContext, fm_train: pd.DataFrame, rows: VMRows, cfg: SolarisConfig
) -> FoundationModel:
    """A teacher that never saw the VM's rows: the FM (same tasks, architecture and
    features) trained on the training window before the VM's window starts, early-stopped
    on the last tenth of that period."""
    start = int(rows.frame("train")["ts"].min())
    before = fm_train[fm_train["ts"].to_numpy() < start]
    cut = np.quantile(before["ts"].to_numpy(), 0.9)
    ts = before["ts"].to_numpy()
    return train_task_fm(ctx, before[ts < cut], before[ts >= cut], cfg, tuple(cfg.model.tasks))
