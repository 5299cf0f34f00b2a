"""The selection rule that the interval cycle and serving share.

A request may select ``ceil(share * n)`` of its ``n`` candidates (:func:`request_budget`,
at least one); it fills that budget with its highest-scoring candidates that are not
skipped (fresh in the cache or already pending), ties in score going to the lower item id
(:func:`top_share`). The cycle applies it to a whole interval's requests at once
(:func:`solaris.pipeline.select.select_mask`), serving to one request as it logs it
(:mod:`solaris.serving.nearline`); both call these two functions, so the rule has one home.
"""

from __future__ import annotations

import numbers

import numpy as np

from solaris.errors import SolarisError

__all__ = ["SelectionError", "request_budget", "top_share"]


class SelectionError(SolarisError, ValueError):
    """Candidates, scores, cache rows or a share that selection cannot use. The message
    names the input, its column and the first offending row; nothing was selected."""


def request_budget(n_candidates: np.ndarray, share: float) -> np.ndarray:
    """Pairs each request may select: ``ceil(share * n)``, so every request gets at least one."""
    if (
        isinstance(share, bool)
        or not isinstance(share, numbers.Real)
        or not 0 < share <= 1  # NaN fails too
    ):
        raise SelectionError(f"selection share must be in (0, 1], got {share!r}")
    return np.ceil(np.asarray(n_candidates) * share - 1e-9).astype(np.int64)


def top_share(item_id: np.ndarray, score: np.ndarray, skip: np.ndarray, share: float) -> np.ndarray:
    """Positions of the candidates one request selects: its budget (over all ``n``
    candidates) of the highest-scoring ones not ``skip``, ties to the lower item id, an
    item listed twice taken once. ``[k]`` int64, best first."""
    item_id = np.asarray(item_id, np.int64)
    budget = int(request_budget(np.array([len(item_id)]), share)[0])
    rows = np.flatnonzero(~np.asarray(skip, bool))
    if len(rows) == 0:
        return rows
    rows = rows[np.lexsort((item_id[rows], -np.asarray(score, np.float64)[rows]))]
    _, first = np.unique(item_id[rows], return_index=True)
    return rows[np.sort(first)][:budget]
