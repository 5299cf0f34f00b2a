"""SOLARIS tiers for labelled impressions, from the codes a replay computed (offline, exact).

The replay says which pairs were embedded and when (``computed_at``: the end of the
scheduling interval that selected them). For each impression ``(u, i, t)`` the tiers are
built only from codes with ``computed_at <= t``, and every code was itself computed from data
strictly before its ``computed_at`` (``FeatureContext``), so no tier sees the impression or
anything after it:

* ``pair``: the latest code of ``(u, i)``, present when ``t − computed_at <= ttl`` (the
  replay's hit rule, so its presence equals ``ReplayResult.hit``);
* ``uagg``: the mean of u's codes computed in ``(t − window, t]``, excluding every code of
  the pair ``(u, i)`` itself;
* ``iagg``: the mean of i's codes over users in ``(t − window, t]``, excluding ``(u, i)``;
* ``nbr_top1`` / ``nbr_weighted``: the fresh code ``z[v, i]`` of u's most similar neighbour
  ``v`` that has one (or the similarity-weighted mean over all such neighbours). Neighbours
  come from a daily KNN (:func:`solaris.pipeline.neighbors.nearest_users`) over user mean
  codes of the 48 h before the day starts. Like the serving ``nbr`` view, the tier is present
  only where the pair tier is not.

Aggregates are exact at the impression's time (serving rebuilds them hourly), and each code
in the window counts once (a pair re-embedded after its TTL counts once per embedding).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solaris.pipeline.neighbors import nearest_users
from solaris.pipeline.select import pair_keys

__all__ = [
    "DAY",
    "CodeLog",
    "Tier",
    "aggregate_tiers",
    "build_tiers",
    "daily_neighbours",
    "latest_pair_code",
    "neighbour_tiers",
]

DAY = 86_400
_SPAN = np.int64(1 << 33)  # epoch seconds fit below this


@dataclass(frozen=True)
class CodeLog:
    """Codes the replay computed: ``z[k]`` of ``(user_id[k], item_id[k])`` at ``computed_at[k]``."""

    user_id: np.ndarray
    item_id: np.ndarray
    computed_at: np.ndarray
    z: np.ndarray  # [K, d] float32

    def __post_init__(self) -> None:
        n = len(self.user_id)
        if not (len(self.item_id) == len(self.computed_at) == len(self.z) == n):
            raise ValueError("CodeLog columns must have equal lengths")


@dataclass(frozen=True)
class Tier:
    """One tier for N rows: ``z`` ``[N, d]`` (zeros where absent) and ``present`` ``[N]``."""

    z: np.ndarray
    present: np.ndarray


class _Sorted:
    """Codes sorted by (group, computed_at) with float64 prefix sums, for window sums."""

    def __init__(self, group: np.ndarray, computed_at: np.ndarray, z: np.ndarray) -> None:
        key = group.astype(np.int64) * _SPAN + computed_at.astype(np.int64)
        order = np.argsort(key, kind="stable")
        self.key = key[order]
        self.order = order
        self.prefix = np.zeros((len(order) + 1, z.shape[1]), dtype=np.float64)
        np.cumsum(z[order], axis=0, out=self.prefix[1:])

    def window(self, group: np.ndarray, lo: np.ndarray, hi: np.ndarray):
        """Sum and count of codes of ``group`` with ``lo < computed_at <= hi``."""
        g = group.astype(np.int64) * _SPAN
        a = np.searchsorted(self.key, g + lo, side="right")
        b = np.searchsorted(self.key, g + hi, side="right")
        return self.prefix[b] - self.prefix[a], (b - a).astype(np.int64)

    def latest(self, group: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Index (into the original codes) of the group's latest code at or before ``at``;
        -1 where there is none."""
        g = group.astype(np.int64) * _SPAN
        pos = np.searchsorted(self.key, g + at, side="right") - 1
        ok = (pos >= 0) & (self.key[np.maximum(pos, 0)] // _SPAN == group)
        return np.where(ok, self.order[np.maximum(pos, 0)], -1)


def _pair_ids(codes: CodeLog, users: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, ...]:
    """Dense pair ids for the codes and the query rows (shared numbering)."""
    ck = pair_keys(codes.user_id, codes.item_id)
    qk = pair_keys(users, items)
    _, inv = np.unique(np.concatenate([ck, qk]), return_inverse=True)
    return inv[: len(ck)], inv[len(ck) :]


def latest_pair_code(
    codes: CodeLog, users: np.ndarray, items: np.ndarray, ts: np.ndarray, ttl_seconds: int
) -> np.ndarray:
    """Per query row, the index of the fresh code of its own pair (``-1``: a miss)."""
    cp, qp = _pair_ids(codes, users, items)
    idx = _Sorted(cp, codes.computed_at, np.zeros((len(cp), 1))).latest(qp, ts)
    fresh = (idx >= 0) & (ts - codes.computed_at[np.maximum(idx, 0)] <= ttl_seconds)
    return np.where(fresh, idx, -1)


def _mean_tier(sums: np.ndarray, counts: np.ndarray) -> Tier:
    present = counts > 0
    z = np.where(present[:, None], sums / np.maximum(counts, 1)[:, None], 0.0)
    return Tier(z.astype(np.float32), present)


def aggregate_tiers(
    codes: CodeLog,
    users: np.ndarray,
    items: np.ndarray,
    ts: np.ndarray,
    *,
    window_seconds: int,
) -> dict[str, Tier]:
    """``uagg`` and ``iagg`` for query rows: window means that exclude the row's own pair."""
    cp, qp = _pair_ids(codes, users, items)
    lo = ts - window_seconds
    z = codes.z.astype(np.float64)
    own_sum, own_n = _Sorted(cp, codes.computed_at, z).window(qp, lo, ts)
    u_sum, u_n = _Sorted(codes.user_id, codes.computed_at, z).window(users, lo, ts)
    i_sum, i_n = _Sorted(codes.item_id, codes.computed_at, z).window(items, lo, ts)
    return {
        "uagg": _mean_tier(u_sum - own_sum, u_n - own_n),
        "iagg": _mean_tier(i_sum - own_sum, i_n - own_n),
    }


def daily_neighbours(
    codes: CodeLog, days: np.ndarray, *, window_seconds: int, k: int
) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per day: ``(user_ids, nbr_ids [U, k'], nbr_sims [U, k'])`` from the user mean codes
    computed in ``(day_start − window, day_start]`` (the daily clustering job)."""
    users_all = np.unique(codes.user_id)
    by_user = _Sorted(codes.user_id, codes.computed_at, codes.z.astype(np.float64))
    out = {}
    for day in np.unique(days):
        start = np.full(len(users_all), int(day) * DAY, dtype=np.int64)
        sums, counts = by_user.window(users_all, start - window_seconds, start)
        have = counts > 0
        users = users_all[have]
        if len(users) < 2:
            out[int(day)] = (users, np.zeros((len(users), 0), np.int64), np.zeros((len(users), 0)))
            continue
        emb = (sums[have] / counts[have, None]).astype(np.float32)
        table = nearest_users(users, emb, k)
        width = min(len(v) for v in table["nbr_ids"])
        ids = np.stack([np.asarray(v)[:width] for v in table["nbr_ids"]])
        sims = np.stack([np.asarray(v)[:width] for v in table["nbr_sims"]]).astype(np.float64)
        out[int(day)] = (users, ids, sims)
    return out


def neighbour_tiers(
    codes: CodeLog,
    users: np.ndarray,
    items: np.ndarray,
    ts: np.ndarray,
    *,
    ttl_seconds: int,
    neighbours: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]],
    own_present: np.ndarray,
) -> dict[str, Tier]:
    """``nbr_top1`` and ``nbr_weighted`` for query rows whose own pair tier is absent."""
    n, d = len(users), codes.z.shape[1]
    top1, weighted = np.zeros((n, d), np.float32), np.zeros((n, d), np.float32)
    present = np.zeros(n, dtype=bool)
    day = ts // DAY
    rows_all, nbr_all, sim_all = [], [], []
    for dd, (table_users, ids, sims) in neighbours.items():
        q = np.flatnonzero((day == dd) & ~own_present)
        if len(q) == 0 or ids.shape[1] == 0:
            continue
        pos = np.searchsorted(table_users, users[q])
        pos_c = np.minimum(pos, len(table_users) - 1)
        known = table_users[pos_c] == users[q]
        q, pos_c = q[known], pos_c[known]
        rows_all.append(np.repeat(q, ids.shape[1]))
        nbr_all.append(ids[pos_c].ravel())
        sim_all.append(sims[pos_c].ravel())
    if not rows_all:
        return {"nbr_top1": Tier(top1, present), "nbr_weighted": Tier(weighted, present.copy())}
    rows = np.concatenate(rows_all)
    nbr = np.concatenate(nbr_all)
    sim = np.concatenate(sim_all)
    idx = latest_pair_code(codes, nbr, items[rows], ts[rows], ttl_seconds)
    ok = idx >= 0
    rows, sim, idx = rows[ok], sim[ok], idx[ok]
    # Rows are grouped by query row, neighbours in descending similarity within each group.
    order = np.lexsort((-sim, rows))
    rows, sim, idx = rows[order], sim[order], idx[order]
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]]) if len(rows) else np.array([], int)
    if len(starts):
        q = rows[starts]
        present[q] = True
        top1[q] = codes.z[idx[starts]]
        w = np.maximum(sim, 0.0)
        zc = codes.z[idx].astype(np.float64)
        wsum = np.add.reduceat(w, starts)
        wz = np.add.reduceat(w[:, None] * zc, starts, axis=0)
        plain = np.add.reduceat(zc, starts, axis=0) / np.diff(np.r_[starts, len(rows)])[:, None]
        use_w = wsum > 0
        weighted[q] = np.where(use_w[:, None], wz / np.where(use_w, wsum, 1.0)[:, None], plain)
    return {"nbr_top1": Tier(top1, present), "nbr_weighted": Tier(weighted, present.copy())}


def build_tiers(
    codes: CodeLog,
    users: np.ndarray,
    items: np.ndarray,
    ts: np.ndarray,
    *,
    ttl_seconds: int,
    window_seconds: int = DAY,
    nbr_window_seconds: int = 2 * DAY,
    n_neighbors: int = 100,
) -> dict[str, Tier]:
    """Every tier (``pair``, ``nbr_top1``, ``nbr_weighted``, ``uagg``, ``iagg``) for query rows."""
    users = np.asarray(users, np.int64)
    items = np.asarray(items, np.int64)
    ts = np.asarray(ts, np.int64)
    idx = latest_pair_code(codes, users, items, ts, ttl_seconds)
    own = idx >= 0
    pair = Tier(np.where(own[:, None], codes.z[np.maximum(idx, 0)], 0.0).astype(np.float32), own)
    tables = daily_neighbours(codes, ts // DAY, window_seconds=nbr_window_seconds, k=n_neighbors)
    nbr = neighbour_tiers(
        codes, users, items, ts, ttl_seconds=ttl_seconds, neighbours=tables, own_present=own
    )
    return {
        "pair": pair,
        **nbr,
        **aggregate_tiers(codes, users, items, ts, window_seconds=window_seconds),
    }
