"""Uncertainty of report figures: over seeds and users together, window by window.

A figure moves with the trained models (the seed: FM, autoencoder, VM initialisations) and
with the test period's users (a user rates many items in one session, so rows cluster by
user). An interval over one of them holds the other fixed and is too narrow, so
:func:`joint_bootstrap` resamples both in every draw: in each rolling-origin window, whole
test users with replacement and, independently, that window's seeds (runs) with
replacement. The statistic of each drawn run on the drawn users is averaged over the drawn
runs (the window's value) and then over the windows, which are fixed strata: consecutive
test periods of one log, each with its own trained models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Estimate",
    "WindowLosses",
    "estimate",
    "joint_bootstrap",
    "row_log_loss",
    "transfer_ratios",
    "user_weights",
]


@dataclass(frozen=True)
class Estimate:
    """A figure over windows × seeds: the mean of the windows' seed means, the std over
    every run, each window's mean, and the 95% interval of the joint seed × user
    bootstrap (``None`` without draws)."""

    mean: float
    std: float
    n_runs: int
    window_means: tuple[float, ...]
    ci: tuple[float, float] | None = None

    def as_dict(self) -> dict:
        return {
            "mean": self.mean,
            "std": self.std,
            "n_runs": self.n_runs,
            "window_means": list(self.window_means),
            "ci95": None if self.ci is None else list(self.ci),
        }


def estimate(by_window: Sequence[Sequence[float]], boot: np.ndarray | None = None) -> Estimate:
    """:class:`Estimate` of per-run values grouped by window, with the bootstrap draws
    ``boot`` (if any; non-finite draws are dropped, and an interval with no finite draw
    is NaN)."""
    means = tuple(float(np.mean(w)) for w in by_window)
    runs = [float(v) for w in by_window for v in w]
    ci = None
    if boot is not None:
        finite = boot[np.isfinite(boot)]
        ci = (
            (float(np.percentile(finite, 2.5)), float(np.percentile(finite, 97.5)))
            if len(finite)
            else (float("nan"), float("nan"))  # no draw defined the figure (tiny data)
        )
    std = float(np.std(runs, ddof=1)) if len(runs) > 1 else 0.0
    return Estimate(float(np.mean(means)), std, len(runs), means, ci)


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


@dataclass(frozen=True)
class WindowLosses:
    """One window's test rows: ``users`` ``[N]`` and, per name, ``[S, N]`` per-row values
    of each of the window's ``S`` runs (log-losses, or 0/1 hits for a coverage)."""

    users: np.ndarray
    losses: dict[str, np.ndarray]


def joint_bootstrap(
    windows: Sequence[WindowLosses],
    statistic: Callable[[dict[str, np.ndarray]], np.ndarray],
    *,
    n_boot: int = 1000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap draws of ``statistic`` with seeds and users resampled together.

    Args:
        windows: each window's rows and per-run values.
        statistic: maps name → ``[n_boot, S]`` mean values (each run on each draw of the
            window's users) to ``[n_boot, S]`` figures, e.g. a transfer ratio.

    Returns:
        ``([n_boot] draws of the mean over windows, [n_windows, n_boot] each window's)``.
        Each window's draw is the mean of its figure over a draw of its runs with
        replacement.
    """
    rng = np.random.default_rng(seed)
    per_window = []
    for k, w in enumerate(windows):
        row_user, weights = user_weights(w.users, n_boot, seed + 1 + k)
        n_users = weights.shape[1]
        counts = np.bincount(row_user, minlength=n_users).astype(np.float64)
        rows_per_draw = weights @ counts  # [B]
        means = {}
        for name, values in w.losses.items():
            arr = np.atleast_2d(np.asarray(values, dtype=np.float64))  # [S, N]
            per_user = np.stack([np.bincount(row_user, weights=a, minlength=n_users) for a in arr])
            means[name] = (weights @ per_user.T) / rows_per_draw[:, None]  # [B, S]
        figures = np.asarray(statistic(means), dtype=np.float64)  # [B, S]
        runs = rng.integers(0, figures.shape[1], size=figures.shape)  # seeds, with replacement
        per_window.append(np.take_along_axis(figures, runs, axis=1).mean(axis=1))
    stacked = np.stack(per_window)
    return stacked.mean(axis=0), stacked


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
