"""Offline metrics of SOLARIS experiments, as pure numpy functions.

Binary labels ``y`` must be 1-D, non-empty and in ``{0, 1}`` (bools are accepted);
probabilities ``p`` must be 1-D, of the same length, finite and in ``[0, 1]``. Violations
raise :class:`ValueError`. Logarithms are natural (nats).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from numpy.typing import ArrayLike
from sklearn.metrics import roc_auc_score

from solaris.errors import SolarisError

__all__ = [
    "EvaluationError",
    "auc",
    "coverage",
    "log_loss",
    "normalized_entropy",
    "summarize",
    "transfer_ratio",
]


class EvaluationError(SolarisError, ValueError):
    """Input that a metric or the replay cannot evaluate (bad labels, scores or settings)."""


def _labels(y: ArrayLike) -> np.ndarray:
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise EvaluationError(f"labels must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        raise EvaluationError("labels are empty")
    if arr.dtype == bool:
        return arr.astype(np.float64)
    if not np.issubdtype(arr.dtype, np.number):
        raise EvaluationError(f"labels must be numeric 0/1, got dtype {arr.dtype}")
    if not np.isin(arr, (0, 1)).all():
        bad = arr[~np.isin(arr, (0, 1))][:5]
        raise EvaluationError(f"labels must be in {{0, 1}}, found e.g. {bad.tolist()}")
    return arr.astype(np.float64)


def _probabilities(p: ArrayLike, n: int) -> np.ndarray:
    arr = np.asarray(p)
    if arr.ndim != 1:
        raise EvaluationError(f"probabilities must be 1-D, got shape {arr.shape}")
    if arr.size != n:
        raise EvaluationError(f"length mismatch: {n} labels but {arr.size} probabilities")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise EvaluationError(f"probabilities must be real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    outside = ~((arr >= 0.0) & (arr <= 1.0))  # NaN counts as outside
    if outside.any():
        raise EvaluationError(
            f"probabilities must be in [0, 1], found e.g. {arr[outside][:5].tolist()}"
        )
    return arr


def _inputs(y: ArrayLike, p: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    labels = _labels(y)
    return labels, _probabilities(p, labels.size)


def _binary_entropy(rate: float) -> float:
    return -(rate * math.log(rate) + (1.0 - rate) * math.log(1.0 - rate))


def log_loss(y: ArrayLike, p: ArrayLike, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy ``-mean(y ln p + (1 - y) ln(1 - p))`` in nats.

    ``p`` is clipped to ``[eps, 1 - eps]`` first, so a confident mistake costs at most
    ``-ln(eps)`` instead of infinity. ``eps`` must lie in ``(0, 0.5)``.
    """
    if not 0.0 < eps < 0.5:
        raise EvaluationError(f"eps must lie in (0, 0.5), got {eps!r}")
    labels, probs = _inputs(y, p)
    probs = np.clip(probs, eps, 1.0 - eps)
    return float(-np.mean(labels * np.log(probs) + (1.0 - labels) * np.log1p(-probs)))


def normalized_entropy(y: ArrayLike, p: ArrayLike, eps: float = 1e-7) -> float:
    """Normalised entropy: :func:`log_loss` divided by the entropy of the base rate.

    The base rate is ``mean(y)``; a predictor that always outputs it scores 1.0 and lower
    is better. Raises ``ValueError`` when all labels are equal (base-rate entropy 0).
    """
    labels, probs = _inputs(y, p)
    rate = float(labels.mean())
    if rate in (0.0, 1.0):
        raise EvaluationError(
            "normalized entropy is undefined when all labels are equal (base-rate entropy 0)"
        )
    return log_loss(labels, probs, eps=eps) / _binary_entropy(rate)


def auc(y: ArrayLike, p: ArrayLike) -> float:
    """Area under the ROC curve (``sklearn.metrics.roc_auc_score``); ties count one half.

    Raises ``ValueError`` unless both classes occur in ``y``.
    """
    labels, probs = _inputs(y, p)
    n_pos = int(labels.sum())
    if n_pos in (0, labels.size):
        raise EvaluationError(
            f"AUC is undefined with only one class in the labels (all {int(labels[0])})"
        )
    return float(roc_auc_score(labels, probs))


def transfer_ratio(ll_vm: float, ll_x: float, ll_fm: float) -> float:
    """Share of the FM's log-loss advantage over the VM that variant ``x`` recovers.

    ``(ll_vm - ll_x) / (ll_vm - ll_fm)``: 0 means no better than the VM, 1 as good as the
    FM. Raises ``ValueError`` when ``ll_vm == ll_fm`` (no FM advantage to transfer) or when
    an input is not finite. If the FM is worse than the VM (``ll_fm > ll_vm``) the ratio is
    still returned, but its sign then reads the other way.
    """
    values = {"ll_vm": ll_vm, "ll_x": ll_x, "ll_fm": ll_fm}
    for name, value in values.items():
        if not math.isfinite(value):
            raise EvaluationError(f"{name} must be finite, got {value!r}")
    gap = float(ll_vm) - float(ll_fm)
    if gap == 0.0:
        raise EvaluationError(
            f"transfer ratio is undefined: ll_vm == ll_fm == {ll_vm!r} "
            "(no FM advantage to transfer)"
        )
    return (float(ll_vm) - float(ll_x)) / gap


def coverage(hit: ArrayLike) -> float:
    """Share of ``True`` in the boolean array ``hit`` (any shape; 0/1 integers accepted).

    Raises ``ValueError`` on an empty array or values other than booleans / 0 / 1.
    """
    arr = np.asarray(hit)
    if arr.size == 0:
        raise EvaluationError("coverage of an empty array is undefined")
    if arr.dtype != bool:
        if not np.issubdtype(arr.dtype, np.number) or not np.isin(arr, (0, 1)).all():
            raise EvaluationError(f"hit must be boolean (or 0/1), got dtype {arr.dtype}")
        arr = arr.astype(bool)
    return float(np.count_nonzero(arr) / arr.size)


def summarize(values: Iterable[float] | ArrayLike) -> tuple[float, float]:
    """Mean and sample standard deviation (``ddof=1``) of ``values``, e.g. over seeds.

    The standard deviation of a single value is 0.0. Raises ``ValueError`` on empty or
    non-finite input.
    """
    if not isinstance(values, np.ndarray) and not hasattr(values, "__len__"):
        values = list(values)
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size == 0:
        raise EvaluationError("cannot summarize an empty sequence")
    if not np.isfinite(arr).all():
        raise EvaluationError("values must be finite")
    std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return float(arr.mean()), std
