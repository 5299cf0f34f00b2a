"""Uncertainty of report figures: over seeds, and over users by a cluster bootstrap.

Test rows cluster by user (a user rates many items in one session), so resampling rows
would understate the variance; :func:`user_bootstrap` resamples whole users instead. All
seeds are evaluated on the same test rows, so one draw of users applies to every seed and
the statistic is the mean over seeds of each seed's value on that draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from solaris.evaluation.metrics import summarize

__all__ = [
    "Estimate",
    "estimate",
    "row_log_loss",
    "seed_interval",
    "transfer_ratios",
    "user_bootstrap",
    "user_weights",
]


@dataclass(frozen=True)
class Estimate:
    """Mean ± std over seeds, a 95% t-interval over seeds, and (optionally) a 95% user
    bootstrap interval."""

    mean: float
    std: float
    n: int
    seed_ci: tuple[float, float]
    boot_ci: tuple[float, float] | None = None

    def as_dict(self) -> dict:
        return {
            "mean": self.mean,
            "std": self.std,
            "n_seeds": self.n,
            "seed_ci95": list(self.seed_ci),
            "user_bootstrap_ci95": None if self.boot_ci is None else list(self.boot_ci),
        }


def seed_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean over seeds; a single seed gives a zero-width interval."""
    mean, std = summarize(values)
    n = len(values)
    if n < 2:
        return mean, mean
    half = float(sps.t.ppf(0.5 + level / 2, n - 1)) * std / math.sqrt(n)
    return mean - half, mean + half


def estimate(values: Sequence[float], boot: np.ndarray | None = None) -> Estimate:
    """:class:`Estimate` of per-seed ``values`` with the bootstrap draws ``boot`` (if any)."""
    mean, std = summarize(values)
    ci = None
    if boot is not None:
        finite = boot[np.isfinite(boot)]
        ci = (float(np.percentile(finite, 2.5)), float(np.percentile(finite, 97.5)))
    return Estimate(mean, std, len(values), seed_interval(values), ci)


def user_weights(users: np.ndarray, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Cluster-bootstrap weights: ``(row_user [N] dense ids, W [n_boot, U])`` where ``W[b, u]``
    is how many times user ``u`` was drawn (users drawn with replacement, ``U`` per draw)."""
    _, row_user = np.unique(np.asarray(users), return_inverse=True)
    n_users = int(row_user.max()) + 1
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n_users, size=(n_boot, n_users))
    weights = np.zeros((n_boot, n_users), dtype=np.float64)
    np.add.at(weights, (np.repeat(np.arange(n_boot), n_users), draws.ravel()), 1.0)
    return row_user, weights


def user_bootstrap(
    users: np.ndarray,
    losses: dict[str, np.ndarray],
    statistic: Callable[[dict[str, np.ndarray]], np.ndarray],
    *,
    n_boot: int = 1000,
    seed: int = 0,
) -> np.ndarray:
    """Bootstrap draws of ``statistic`` over users.

    Args:
        users: ``[N]`` user id of each test row.
        losses: name → ``[S, N]`` per-row losses of each seed (or ``[N]`` for one seed).
        statistic: maps name → ``[n_boot, S]`` mean losses to ``[n_boot, S]`` values, e.g.
            a transfer ratio; the draws are averaged over seeds.

    Returns:
        ``[n_boot]`` seed-mean values of the statistic, one per draw of users.
    """
    row_user, w = user_weights(users, n_boot, seed)
    n_users = w.shape[1]
    counts = np.bincount(row_user, minlength=n_users).astype(np.float64)
    rows_per_draw = w @ counts  # [B]
    means = {}
    for name, loss in losses.items():
        arr = np.atleast_2d(np.asarray(loss, dtype=np.float64))  # [S, N]
        per_user = np.stack([np.bincount(row_user, weights=a, minlength=n_users) for a in arr])
        means[name] = (w @ per_user.T) / rows_per_draw[:, None]  # [B, S]
    return np.asarray(statistic(means), dtype=np.float64).mean(axis=1)


def transfer_ratios(vm: np.ndarray, x: np.ndarray, fm: np.ndarray) -> np.ndarray:
    """Elementwise ``(vm − x) / (vm − fm)``; NaN where the FM has no advantage (``vm == fm``)."""
    gap = vm - fm
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(gap != 0, (vm - x) / np.where(gap != 0, gap, 1.0), np.nan)


def row_log_loss(y: np.ndarray, p: np.ndarray, eps: float = 1e-7) -> np.ndarray:
    """Per-row binary cross-entropy (the terms :func:`solaris.evaluation.metrics.log_loss`
    averages)."""
    p = np.clip(np.asarray(p, dtype=np.float64), eps, 1 - eps)
    y = np.asarray(y, dtype=np.float64)
    return -(y * np.log(p) + (1 - y) * np.log1p(-p))
