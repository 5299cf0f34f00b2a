"""Selection and cost sweeps: native pair coverage from the replay, against the FM budget.

Each point is one :func:`solaris.evaluation.replay.replay` of the whole request log, with
coverage measured on the test period's labelled impressions. Selectors share the budget
(share of each request's candidates) and the skipping of fresh or pending pairs.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from solaris.evaluation.replay import ReplayResult, oracle_scores, random_scores, replay
from solaris.examples.movielens.requests import HOUR, earlier_candidate_within

__all__ = [
    "HOUR",
    "activity_ttl",
    "equal_cost_coverage",
    "retrieval_bound",
    "selection_sweeps",
    "selector_scores",
]


def _point(res: ReplayResult, **labels: object) -> dict:
    return {
        **labels,
        "coverage": res.coverage,
        "fm_passes_per_1k_requests": res.fm_passes_per_1k_requests,
        "n_hits": res.n_hits,
        "n_impressions": res.n_eval_impressions,
    }


def selector_scores(
    name: str,
    candidates: pd.DataFrame,
    scores: dict[str, np.ndarray],
    seed: int,
    ttl: int,
    cadence: int,
) -> np.ndarray:
    """The scores of selector ``name``: one of the given ``scores`` (the verifier and its
    baselines), ``random`` or ``oracle``."""
    if name in scores:
        return scores[name]
    if name == "random":
        return random_scores(len(candidates), seed)
    if name == "oracle":
        return oracle_scores(candidates, ttl_seconds=ttl, cadence_seconds=cadence)
    raise ValueError(f"unknown selector {name!r}; known: {sorted(scores)} + random, oracle")


def retrieval_bound(candidates: pd.DataFrame, eval_from: int, window_seconds: int) -> float:
    """Share of test-period labelled impressions whose item was a candidate of an earlier
    request of the same user within the window: no selector can cover more."""
    earlier = earlier_candidate_within(candidates, window_seconds)
    rows = candidates["label"].notna().to_numpy() & (candidates["ts"].to_numpy() >= eval_from)
    return float(earlier[rows].mean())


def activity_ttl(
    candidates: pd.DataFrame, base_ttl: int, *, window_seconds: int = 7 * 86_400, power: float
) -> np.ndarray:
    """Per-row TTL ``base · (median_activity / activity)^power``, clipped to [1 h, 48 h].

    Activity is the number of the user's requests in the ``window_seconds`` strictly
    before the row's request (causal), plus one. ``power > 0`` refreshes active users sooner.
    """
    req = candidates.drop_duplicates("request_id")[["request_id", "user_id", "ts"]]
    req = req.sort_values(["user_id", "ts", "request_id"], kind="stable")
    u = req["user_id"].to_numpy(np.int64)
    t = req["ts"].to_numpy(np.int64)
    key = u * (1 << 33) + t
    before = np.searchsorted(key, key, side="left") - np.searchsorted(
        key, u * (1 << 33) + t - window_seconds, side="left"
    )
    activity = pd.Series(before + 1.0, index=req["request_id"].to_numpy())
    act = activity.reindex(candidates["request_id"].to_numpy()).to_numpy()
    ttl = base_ttl * (np.median(activity.to_numpy()) / act) ** power
    return np.clip(ttl, HOUR, 48 * HOUR).astype(np.int64)


def selection_sweeps(
    candidates: pd.DataFrame,
    scores: dict[str, np.ndarray],
    *,
    eval_from: int,
    seed: int,
    shares: Iterable[float],
    ttls_hours: Iterable[float],
    cadences_minutes: Iterable[float],
    base_share: float,
    base_ttl_hours: float,
    base_cadence_minutes: float,
    activity_powers: Iterable[float] = (0.5, 1.0),
    nearline_seconds: int | None = None,
    hits_from: int | None = None,
) -> tuple[pd.DataFrame, dict[float, ReplayResult], dict[str, dict[float, np.ndarray]]]:
    """Every sweep of one seed as a long table (``sweep``, ``selector``, the swept value,
    ``coverage``, ``fm_passes_per_1k_requests``), and the verifier's replays by share at the
    base TTL and cadence (reused by the coverage curve with real misses).

    ``scores`` holds ``verifier`` (what selection uses) and any baselines; every selector
    runs the share sweep, the verifier and random also the TTL and cadence sweeps and, with
    ``nearline_seconds``, the near-line path (codes usable that long after the request).

    The third value holds, per selector and share of the share sweep, the hit (0/1) of
    every labelled impression at ``ts >= hits_from`` (default ``eval_from``), in the
    candidates' order: what a bootstrap over users resamples."""
    if "verifier" not in scores:
        raise ValueError("scores must hold the 'verifier'")
    given = list(scores)
    base_ttl, base_cad = int(base_ttl_hours * HOUR), int(base_cadence_minutes * 60)
    jobs: list[tuple[str, str, float, int, int, float]] = []
    for s in shares:
        jobs += [("share", sel, s, base_ttl, base_cad, s) for sel in (*given, "random", "oracle")]
    for h in ttls_hours:
        jobs += [
            ("ttl", sel, h, int(h * HOUR), base_cad, base_share) for sel in ("verifier", "random")
        ]
    for m in cadences_minutes:
        jobs += [
            ("cadence", sel, m, base_ttl, int(m * 60), base_share) for sel in ("verifier", "random")
        ]
    if nearline_seconds is not None:
        jobs += [
            ("nearline", sel, nearline_seconds, base_ttl, base_cad, base_share)
            for sel in ("verifier", "random")
        ]
    points, by_share = [], {}
    hits: dict[str, dict[float, np.ndarray]] = {}
    ts = candidates["ts"].to_numpy()
    labelled = candidates["label"].notna().to_numpy()
    rows = labelled & (ts >= (eval_from if hits_from is None else hits_from))
    oracle_cache: dict[tuple[int, int], np.ndarray] = {}
    for sweep, sel, value, ttl, cad, share in tqdm(jobs, desc="selection sweeps", leave=False):
        if sel == "oracle":
            key = (ttl, cad)
            if key not in oracle_cache:
                oracle_cache[key] = oracle_scores(candidates, ttl_seconds=ttl, cadence_seconds=cad)
            chosen = oracle_cache[key]
        else:
            chosen = selector_scores(sel, candidates, scores, seed, ttl, cad)
        res = replay(
            candidates,
            chosen,
            share=share,
            ttl_seconds=ttl,
            cadence_seconds=cad,
            latency_seconds=int(value) if sweep == "nearline" else None,
            eval_from=eval_from,
        )
        points.append(_point(res, sweep=sweep, selector=sel, value=value))
        if sweep == "share":
            hits.setdefault(sel, {})[value] = res.hit[rows]
            if sel == "verifier":
                by_share[value] = res
    for power in activity_powers:
        ttl_rows = activity_ttl(candidates, base_ttl, power=power)
        res = replay(
            candidates,
            scores["verifier"],
            share=base_share,
            ttl_seconds=ttl_rows,
            cadence_seconds=base_cad,
            eval_from=eval_from,
        )
        points.append(_point(res, sweep="activity_ttl", selector="verifier", value=power))
    return pd.DataFrame(points), by_share, hits


def equal_cost_coverage(curve: pd.DataFrame, passes: float) -> float:
    """Coverage of a cost curve (``fm_passes_per_1k_requests``, ``coverage``) interpolated at
    ``passes`` (linear; clamped at the ends)."""
    c = curve.sort_values("fm_passes_per_1k_requests")
    return float(np.interp(passes, c["fm_passes_per_1k_requests"], c["coverage"]))
