"""Time-ordered offline replay of the request log against an in-memory TTL cache.

It models the asynchronous pipeline honestly: requests are grouped into scheduling
intervals of ``cadence_seconds`` (the candidates DAG's schedule interval, aligned to epoch
multiples like a cron schedule). Pairs selected from the requests of one interval are
embedded and usable only from the end of that interval, never by the request that selected
them, and stay fresh for ``ttl_seconds`` (both ends inclusive: usable on
``[computed_at, computed_at + ttl]``, the rule the serving client and Feast's point-in-time
join apply). A labelled impression is covered when its pair's embedding is available and
fresh at the impression's time.

With ``latency_seconds`` it models the near-line path instead (``solaris nearline``): a pair
selected by a request at ``ts`` is usable from ``ts + latency_seconds`` (the measured
request → code time), and is *pending* until then (neither served nor selected again).
Requests are walked in slices of ``latency_seconds``: nothing selected in a slice becomes
usable inside it, so the walk is exact.

With ``refresh_after_requests`` = ``K`` it models *refresh on activity* (the event trigger,
``nearline.refresh_after_requests``): a cached code that the user's own requests have passed
``K`` times since it became usable is stale, and each request first selects again its
highest-scoring stale codes, up to ``ceil(refresh_share · n)`` of its ``n`` candidates (a
budget of its own: the main one goes to pairs with no code, as without refresh); the old code
keeps serving until the new one is usable. The count is of the user's requests strictly after
the code was written and strictly before the selecting request, the rule
:class:`~solaris.serving.nearline.NearlineSelector` applies online.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from solaris.evaluation.metrics import EvaluationError
from solaris.pipeline.select import pair_keys, select_mask

__all__ = [
    "ReplayResult",
    "interval_end",
    "oracle_scores",
    "random_scores",
    "ready_time",
    "replay",
]

_NEVER = np.iinfo(np.int64).min
_TIME_SPAN = 1 << 33  # epoch seconds fit below this until the year 2242


@dataclass(frozen=True)
class ReplayResult:
    """What a replay measured. Coverage is over labelled impressions at ``ts >= eval_from``."""

    coverage: float
    n_eval_impressions: int
    n_hits: int
    n_selected: int  # FM passes over the whole replay
    n_selected_eval: int  # FM passes selected by eval-period requests
    n_eval_requests: int
    n_refreshed_eval: int  # of n_selected_eval: pairs selected again while their code was held
    hit: np.ndarray  # per candidate row: pair fresh at the row's time (aligned with input)
    selections: pd.DataFrame  # user_id, item_id, request_ts, computed_at, expires_at, refresh

    @property
    def fm_passes_per_1k_requests(self) -> float:
        return 1000.0 * self.n_selected_eval / max(self.n_eval_requests, 1)


def interval_end(ts: np.ndarray, cadence_seconds: int) -> np.ndarray:
    """End of the scheduling interval containing ``ts``: when its selections become usable."""
    return (np.asarray(ts, np.int64) // cadence_seconds + 1) * cadence_seconds


def ready_time(
    ts: np.ndarray, cadence_seconds: int, latency_seconds: int | None = None
) -> np.ndarray:
    """When a pair selected by a request at ``ts`` becomes usable: the end of its
    scheduling interval, or ``ts + latency_seconds`` on the near-line path."""
    if latency_seconds is not None:
        return np.asarray(ts, np.int64) + int(latency_seconds)
    return interval_end(ts, cadence_seconds)


def replay(
    candidates: pd.DataFrame,
    scores: np.ndarray,
    *,
    share: float,
    ttl_seconds: int | np.ndarray,
    cadence_seconds: int,
    latency_seconds: int | None = None,
    refresh_after_requests: int | None = None,
    refresh_share: float = 0.02,
    eval_from: int | None = None,
    progress: bool = False,
) -> ReplayResult:
    """Walk ``candidates`` (``request_id, user_id, item_id, ts, label``; sorted by ``ts``) in
    scheduling intervals, select with ``scores`` and report native pair coverage.

    ``ttl_seconds`` is one TTL, or one per candidate row (an activity-aware TTL: a pair
    selected by that row stays fresh for that row's TTL). ``latency_seconds``: the near-line
    path (see the module docstring); ``cadence_seconds`` is then unused.
    ``refresh_after_requests``, ``refresh_share``: refresh on activity (the module
    docstring); ``None`` is off."""
    if len(scores) != len(candidates):
        raise EvaluationError(f"{len(scores)} scores for {len(candidates)} candidates")
    ttl = np.broadcast_to(np.asarray(ttl_seconds, dtype=np.int64), (len(candidates),))
    if cadence_seconds <= 0 or (ttl <= 0).any():
        raise EvaluationError("cadence_seconds and ttl_seconds must be positive")
    if latency_seconds is not None and latency_seconds <= 0:
        raise EvaluationError(f"latency_seconds must be positive, got {latency_seconds}")
    if refresh_after_requests is not None and refresh_after_requests < 1:
        raise EvaluationError(
            f"refresh_after_requests must be at least 1, got {refresh_after_requests}"
        )
    ts = candidates["ts"].to_numpy(np.int64)
    if len(ts) > 1 and (np.diff(ts) < 0).any():
        raise EvaluationError("candidates must be sorted by ts")
    request_id = candidates["request_id"].to_numpy()
    user_id = candidates["user_id"].to_numpy()
    item_id = candidates["item_id"].to_numpy()
    labelled = candidates["label"].notna().to_numpy()
    scores = np.asarray(scores, dtype=np.float64)
    eval_from = int(ts.min()) if eval_from is None else eval_from

    _, pair = np.unique(pair_keys(user_id, item_id), return_inverse=True)
    expires = np.full(pair.max() + 1 if len(pair) else 0, _NEVER, dtype=np.int64)
    usable = np.zeros_like(expires)  # when the pair's latest code becomes usable
    previous = np.full_like(expires, _NEVER)  # a refreshed pair's old code serves until then
    # Refresh on activity: the user's requests before a time, as positions in one sorted
    # array of (user, request time) keys, so "requests between two times" is a difference.
    if refresh_after_requests is not None:
        requests = _UserRequests(user_id, ts, request_id)
        before_row = requests.count_before(user_id, ts)
        code_mark = np.zeros_like(expires)  # the user's requests up to the code's usable time
    interval = ts // (cadence_seconds if latency_seconds is None else int(latency_seconds))
    bounds = np.flatnonzero(np.diff(interval)) + 1
    starts = np.concatenate([[0], bounds])
    stops = np.concatenate([bounds, [len(ts)]])
    hit = np.zeros(len(ts), dtype=bool)
    chosen = np.zeros(len(ts), dtype=bool)
    refreshed = np.zeros(len(ts), dtype=bool)
    bar = tqdm(
        zip(starts, stops, strict=True),
        total=len(starts),
        desc="replay",
        unit="interval",
        disable=not progress,
        leave=False,
    )
    for a, b in bar:
        rows = slice(a, b)
        # The cache holds what earlier slices computed (or have pending); nothing from this one.
        p, t = pair[rows], ts[rows]
        held = expires[p] >= t
        current = held & (usable[p] <= t)
        hit[rows] = current | (previous[p] >= t)
        args = (request_id[rows], user_id[rows], item_id[rows], t, scores[rows])
        skip = held
        if refresh_after_requests is not None:
            # First the refresh budget over the stale codes; a pair refreshed in this slice
            # is pending for the later requests of the slice.
            stale = current & (before_row[rows] - code_mark[p] >= refresh_after_requests)
            again = select_mask(*args, ~stale, refresh_share)
            refreshed[rows] = again
            skip = held | np.isin(p, p[again])
        sel = select_mask(*args, skip, share) | refreshed[rows]
        chosen[rows] = sel
        ready = ready_time(t[sel], cadence_seconds, latency_seconds)
        previous[p[sel]] = np.where(current[sel], expires[p[sel]], _NEVER)
        usable[p[sel]] = ready
        expires[p[sel]] = ready + ttl[rows][sel]
        if refresh_after_requests is not None:
            code_mark[p[sel]] = requests.count_until(user_id[rows][sel], ready)

    in_eval = ts >= eval_from
    eval_impressions = labelled & in_eval
    computed_at = ready_time(ts[chosen], cadence_seconds, latency_seconds)
    selections = pd.DataFrame(
        {
            "user_id": user_id[chosen],
            "item_id": item_id[chosen],
            "request_ts": ts[chosen],
            "computed_at": computed_at,
            "expires_at": computed_at + ttl[chosen],
            "refresh": refreshed[chosen],
        }
    )
    n_eval = int(eval_impressions.sum())
    return ReplayResult(
        coverage=float(hit[eval_impressions].mean()) if n_eval else 0.0,
        n_eval_impressions=n_eval,
        n_hits=int(hit[eval_impressions].sum()),
        n_selected=int(chosen.sum()),
        n_selected_eval=int((chosen & in_eval).sum()),
        n_eval_requests=int(pd.unique(request_id[in_eval]).shape[0]),
        n_refreshed_eval=int((refreshed & in_eval).sum()),
        hit=hit,
        selections=selections,
    )


class _UserRequests:
    """Each user's request times, sorted, for counting a user's requests before a time."""

    def __init__(self, user_id: np.ndarray, ts: np.ndarray, request_id: np.ndarray) -> None:
        _, first = np.unique(request_id, return_index=True)
        self._users = np.unique(user_id)
        self._keys = np.sort(self._key(user_id[first], ts[first]))

    def _key(self, user_id: np.ndarray, ts: np.ndarray) -> np.ndarray:
        dense = np.searchsorted(self._users, user_id).astype(np.int64)
        return dense * _TIME_SPAN + np.asarray(ts, np.int64)

    def count_before(self, user_id: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Per row: requests (of any user) ordered before the user's requests at ``ts``;
        differences between two times of one user count that user's requests."""
        return np.searchsorted(self._keys, self._key(user_id, ts), side="left")

    def count_until(self, user_id: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """As :meth:`count_before`, with the user's requests at ``ts`` itself counted."""
        return np.searchsorted(self._keys, self._key(user_id, ts), side="right")


def random_scores(n: int, seed: int) -> np.ndarray:
    """Scores of the random selector (the baseline the verifier must beat)."""
    return np.random.default_rng(seed).random(n)


def oracle_scores(
    candidates: pd.DataFrame,
    *,
    ttl_seconds: int,
    cadence_seconds: int,
    latency_seconds: int | None = None,
) -> np.ndarray:
    """1 for a row whose pair has a labelled impression inside the window in which an
    embedding selected now would be usable, else 0: the best any selector can do at a budget.
    """
    _, pair = np.unique(
        pair_keys(candidates["user_id"].to_numpy(), candidates["item_id"].to_numpy()),
        return_inverse=True,
    )
    pair = pair.astype(np.int64)
    ts = candidates["ts"].to_numpy(np.int64)
    labelled = candidates["label"].notna().to_numpy()
    # Composite (pair, time) keys: the next labelled impression of the row's pair at or
    # after the moment its embedding would become usable.
    if not labelled.any():
        return np.zeros(len(ts))
    label_keys = np.sort(pair[labelled] * _TIME_SPAN + ts[labelled])
    ready = ready_time(ts, cadence_seconds, latency_seconds)
    pos = np.searchsorted(label_keys, pair * _TIME_SPAN + ready, side="left")
    next_key = label_keys[np.minimum(pos, len(label_keys) - 1)]
    same_pair = (pos < len(label_keys)) & (next_key // _TIME_SPAN == pair)
    return (same_pair & (next_key % _TIME_SPAN <= ready + ttl_seconds)).astype(np.float64)
