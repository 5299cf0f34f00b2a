"""SOLARIS tiers for labelled impressions, from the codes a replay computed (offline).

The replay says which pairs were embedded and when (``computed_at``: the end of the
scheduling interval that selected them). For each impression ``(u, i, t)`` every tier is
built only from codes with ``computed_at <= t``, and every code was itself computed from data
strictly before its ``computed_at`` (``FeatureContext``), so no tier sees the impression or
anything after it.

``pair`` (:func:`latest_pair_code`): the latest code of ``(u, i)``, present when
``t − computed_at <= ttl`` (the replay's hit rule, so its presence equals
``ReplayResult.hit``).

Two rules for the fallback tiers:

**Exact at t** (the upper bound; :func:`aggregate_tiers`, :func:`neighbour_tiers` with
:func:`daily_neighbours`; what :func:`build_tiers` returns):

* ``uagg``: the mean of u's codes computed in ``(t − window, t]``, excluding every code of
  the pair ``(u, i)`` itself; each code in the window counts once (a pair re-embedded after
  its TTL counts once per embedding);
* ``iagg``: the mean of i's codes over users in ``(t − window, t]``, excluding ``(u, i)``;
* ``nbr_top1`` / ``nbr_weighted``: the code ``z[v, i]`` fresh at t of u's most similar
  neighbour ``v`` that has one (or the similarity-weighted mean over all such neighbours).
  Neighbours come from a daily KNN (:func:`solaris.pipeline.neighbors.nearest_users`) over
  user mean codes of the 48 h before the day starts. Present only where ``pair`` is not.

**Served** (the cycle's cadence rule, what the enrichment DAG and the serving client do;
interval ends ``e`` are multiples of ``cadence``, and a row at ``t`` sees the views built
at interval ends ``e <= t``):

* ``uagg`` / ``iagg`` (:func:`served_aggregate_tiers`): the snapshot built at
  ``e = ⌊t / cadence⌋·cadence`` (read TTL 24 h, so always fresh) from the codes with
  ``e − window < computed_at <= e``, one code per pair (its latest, as
  :func:`solaris.pipeline.aggregate.select_window`). ``uagg`` is the sum and count of u's
  codes less the pair's own code when that code (the latest of ``(u, i)`` at ``t``) lies in
  the snapshot's window, ``(sum − z[u,i]) / (count − 1)``
  (:func:`solaris.serving.tiers.mean_excluding`); ``iagg`` is the item's mean as built,
  the own pair's code included (the serving client removes nothing from it;
  ``iagg_excludes_own=True`` removes it like ``uagg``);
* ``nbr_top1`` / ``nbr_weighted`` (:func:`interval_neighbour_tiers`): at each interval end
  ``e`` a KNN table over the user mean codes computed in ``(e − nbr_window, e]`` (so users
  whose first code is in this session are in it) and a fill as of ``e``
  (:func:`solaris.pipeline.neighbors.neighbour_fill`): for each target ``(u, i)`` without a
  code of its own fresh at ``e``, the most similar neighbour ``v`` with a code of ``(v, i)``
  fresh at ``e`` (``e − ttl < computed_at <= e``). The targets are the candidates of the
  requests of the intervals ending in ``(e − ttl, e]`` (``fill_partitions``), or
  every query pair (the upper bound). A row reads the latest fill at ``e <= t`` that holds
  its pair, if ``t − e <= ttl`` (the ``nbr`` read TTL), and only where its ``pair`` tier is
  absent.

Codes are used as given (no float16 rounding: presence, the point of these tiers here, does
not depend on it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from solaris.evaluation.replay import interval_end
from solaris.pipeline.neighbors import nearest_users
from solaris.pipeline.select import pair_keys

__all__ = [
    "DAY",
    "CodeLog",
    "Tier",
    "aggregate_tiers",
    "build_tiers",
    "daily_neighbours",
    "interval_neighbour_tiers",
    "latest_pair_code",
    "neighbour_diagnostics",
    "neighbour_tiers",
    "served_aggregate_tiers",
    "snapshot_end",
]

DAY = 86_400
_SPAN = np.int64(1 << 33)  # epoch seconds fit below this
_FAR = _SPAN - 1  # a time after every code


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

    def __init__(
        self, group: np.ndarray, computed_at: np.ndarray, z: np.ndarray | None = None
    ) -> None:
        key = group.astype(np.int64) * _SPAN + computed_at.astype(np.int64)
        order = np.argsort(key, kind="stable")
        self.key = key[order]
        self.order = order
        if z is not None:  # lookups only (latest, bounds) need no sums
            self.prefix = np.zeros((len(order) + 1, z.shape[1]), dtype=np.float64)
            np.cumsum(z[order], axis=0, out=self.prefix[1:])

    def bounds(self, group: np.ndarray, lo: np.ndarray, hi: np.ndarray):
        """``[a, b)`` in sorted order: the codes of ``group`` with ``lo < computed_at <= hi``
        (``self.order[a:b]`` are their indices)."""
        g = group.astype(np.int64) * _SPAN
        return (
            np.searchsorted(self.key, g + lo, side="right"),
            np.searchsorted(self.key, g + hi, side="right"),
        )

    def window(self, group: np.ndarray, lo: np.ndarray, hi: np.ndarray):
        """Sum and count of codes of ``group`` with ``lo < computed_at <= hi``."""
        g = group.astype(np.int64) * _SPAN
        a = np.searchsorted(self.key, g + lo, side="right")
        b = np.searchsorted(self.key, g + hi, side="right")
        return self.prefix[b] - self.prefix[a], (b - a).astype(np.int64)

    def latest(self, group: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Index (into the original codes) of the group's latest code at or before ``at``;
        -1 where there is none."""
        if len(self.key) == 0:
            return np.full(len(group), -1, dtype=np.int64)
        g = group.astype(np.int64) * _SPAN
        pos = np.searchsorted(self.key, g + at, side="right") - 1
        ok = (pos >= 0) & (self.key[np.maximum(pos, 0)] // _SPAN == group)
        return np.where(ok, self.order[np.maximum(pos, 0)], -1)


def _take(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``values[idx]`` where ``idx >= 0``, anything (zeros) at ``-1`` (also when empty)."""
    if len(values) == 0:
        return np.zeros((len(idx), *values.shape[1:]), dtype=values.dtype)
    return values[np.maximum(idx, 0)]


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
    idx = _Sorted(cp, codes.computed_at).latest(qp, ts)
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


# --------------------------------------------------------------------------------------------
# The served rule: snapshots and fills at interval ends
# --------------------------------------------------------------------------------------------


def snapshot_end(ts: np.ndarray, cadence_seconds: int) -> np.ndarray:
    """The latest interval end at or before ``ts`` (interval ends are the multiples of
    ``cadence_seconds``, as in :func:`solaris.evaluation.replay.interval_end`)."""
    if cadence_seconds <= 0:
        raise ValueError(f"cadence_seconds must be > 0, got {cadence_seconds}")
    return np.asarray(ts, np.int64) // cadence_seconds * cadence_seconds


def _next_of_pair(pair: np.ndarray, computed_at: np.ndarray) -> np.ndarray:
    """Per code, the ``computed_at`` of its pair's next code (``_FAR`` for the last).

    Code ``k`` is its pair's latest at ``e`` exactly when ``computed_at[k] <= e < next[k]``.
    Codes of a pair computed at the same time are ordered as given, the later row winning,
    as in :func:`solaris.pipeline.aggregate.select_window`."""
    order = np.lexsort((computed_at, pair))
    nxt = np.full(len(order), _FAR, dtype=np.int64)
    if len(order) > 1:
        p, c = pair[order], computed_at[order]
        nxt[order[:-1]] = np.where(p[1:] == p[:-1], c[1:], _FAR)
    return nxt


def _pair_numbering(codes: CodeLog, users: np.ndarray, items: np.ndarray):
    """``(keys, code pair ids, query pair ids)``: dense pair ids over codes and queries."""
    ck = pair_keys(codes.user_id, codes.item_id)
    qk = pair_keys(users, items)
    keys = np.unique(np.concatenate([ck, qk]))
    return keys, np.searchsorted(keys, ck), np.searchsorted(keys, qk)


def served_aggregate_tiers(
    codes: CodeLog,
    users: np.ndarray,
    items: np.ndarray,
    ts: np.ndarray,
    *,
    cadence_seconds: int,
    window_seconds: int,
    read_ttl_seconds: int = DAY,
    iagg_excludes_own: bool = False,
) -> dict[str, Tier]:
    """``uagg`` and ``iagg`` as served: the snapshot built at ``e = snapshot_end(t)``.

    The enrichment DAG builds the views as of each interval end ``e`` from the codes with
    ``e − window < computed_at <= e``, one code per pair (its latest;
    :func:`solaris.pipeline.aggregate.user_aggregate` / ``item_aggregate``), and a row at
    ``t`` reads the newest snapshot, present while ``t − e <= read_ttl`` (24 h, so always
    for ``t < e + cadence``). ``uagg``: the user's sum and count less the row's own pair code
    when it was summed: the latest code of ``(u, i)`` at ``t`` with
    ``e − window < computed_at <= e`` (:func:`solaris.serving.tiers.assemble_tiers`);
    present when the count left is > 0. ``iagg``: the item's mean, own pair included as the
    serving client reads it (``iagg_excludes_own=True``: removed like ``uagg``'s).
    """
    users = np.asarray(users, np.int64)
    items = np.asarray(items, np.int64)
    ts = np.asarray(ts, np.int64)
    e = snapshot_end(ts, cadence_seconds)
    _, cp, qp = _pair_numbering(codes, users, items)
    start = codes.computed_at.astype(np.int64)
    # Code k is in the snapshot at e iff start[k] <= e < stop[k]: summed = (codes started by
    # e) − (codes stopped by e), each a prefix-sum window per user or item.
    stop = np.minimum(_next_of_pair(cp, start), start + window_seconds)
    z = codes.z.astype(np.float64)
    everything = np.full(len(ts), -1, dtype=np.int64)  # every code of the group at or before e

    def snapshot(group: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s_in, n_in = _Sorted(group, start, z).window(query, everything, e)
        s_out, n_out = _Sorted(group, stop, z).window(query, everything, e)
        return s_in - s_out, n_in - n_out

    own = _Sorted(cp, start).latest(qp, ts)
    own_c = _take(start, own)
    summed = (own >= 0) & (own_c > e - window_seconds) & (own_c <= e)
    own_z = np.where(summed[:, None], _take(z, own), 0.0)
    fresh = ts - e <= read_ttl_seconds

    u_sum, u_n = snapshot(codes.user_id, users)
    i_sum, i_n = snapshot(codes.item_id, items)
    u_sum, u_n = u_sum - own_z, u_n - summed
    if iagg_excludes_own:
        i_sum, i_n = i_sum - own_z, i_n - summed
    return {
        "uagg": _mean_tier(u_sum, np.where(fresh, u_n, 0)),
        "iagg": _mean_tier(i_sum, np.where(fresh, i_n, 0)),
    }


@dataclass(frozen=True)
class _Table:
    """One KNN table: dense user ids (ascending) and their neighbours (dense ids, ``-1``
    padded for a user without any) with similarities."""

    users: np.ndarray
    nbr: np.ndarray  # [m, k'] int64
    sim: np.ndarray  # [m, k'] float64


class _NeighbourIndex:
    """Codes indexed for the per-interval tables and fills (built once per call)."""

    def __init__(
        self,
        codes: CodeLog,
        users: np.ndarray,
        items: np.ndarray,
        *,
        ttl_seconds: int,
        nbr_window_seconds: int,
        n_neighbors: int,
    ) -> None:
        self.codes = codes
        self.ttl = int(ttl_seconds)
        self.nbr_window = int(nbr_window_seconds)
        self.k = int(n_neighbors)
        self.ca = codes.computed_at.astype(np.int64)
        self.keys, self.cp, self.qp = _pair_numbering(codes, users, items)
        self.user_ids = np.unique(np.concatenate([codes.user_id, users]).astype(np.int64))
        self.cu = np.searchsorted(self.user_ids, codes.user_id)  # dense user of each code
        self.qu = np.searchsorted(self.user_ids, users)
        self.qi = items
        self.next = _next_of_pair(self.cp, self.ca)
        self.by_pair = _Sorted(self.cp, self.ca)
        self.by_item = _Sorted(codes.item_id, self.ca)
        self.by_time = np.argsort(self.ca, kind="stable")
        self.ca_sorted = self.ca[self.by_time]
        self.tables: dict[int, _Table] = {}

    def own_fresh(self, rows: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Whether the row's own pair has a code fresh at ``at`` (the fill skips it)."""
        idx = self.by_pair.latest(self.qp[rows], at)
        return (idx >= 0) & (_take(self.ca, idx) > at - self.ttl)

    def signature(self, at: np.ndarray) -> np.ndarray:
        """One integer per distinct set of codes in ``(at − nbr_window, at]``: the table's
        input (its codes are a contiguous run of the codes sorted by time)."""
        lo = np.searchsorted(self.ca_sorted, at - self.nbr_window, side="right")
        hi = np.searchsorted(self.ca_sorted, at, side="right")
        return lo.astype(np.int64) * (len(self.ca) + 1) + hi

    def table(self, sig: int, at: int) -> _Table:
        """The KNN table as of ``at`` (cached by signature)."""
        if sig in self.tables:
            return self.tables[sig]
        lo, hi = divmod(sig, len(self.ca) + 1)
        idx = self.by_time[lo:hi]
        idx = idx[self.next[idx] > at]  # the latest code of each pair, as select_window
        dense, inv = np.unique(self.cu[idx], return_inverse=True)
        sums = np.zeros((len(dense), self.codes.z.shape[1]))
        np.add.at(sums, inv, self.codes.z[idx].astype(np.float64))
        emb = (sums / np.bincount(inv, minlength=len(dense))[:, None]).astype(np.float32)
        nbr = np.full((len(dense), 0), -1, dtype=np.int64)
        sim = np.zeros((len(dense), 0))
        if len(dense) >= 2:
            rows = nearest_users(self.user_ids[dense], emb, self.k)
            lens = np.fromiter(map(len, rows["nbr_ids"]), dtype=np.int64, count=len(rows))
            width = int(lens.max())
            nbr = np.full((len(dense), width), -1, dtype=np.int64)
            sim = np.zeros((len(dense), width))
            full = np.flatnonzero(lens == width)  # the others have no neighbour at all
            if width and len(full):
                ids = np.stack(rows["nbr_ids"].to_numpy()[full])
                nbr[full] = np.searchsorted(self.user_ids, ids)
                sim[full] = np.stack(rows["nbr_sims"].to_numpy()[full]).astype(np.float64)
        out = _Table(dense, nbr, sim)
        self.tables[sig] = out
        return out

    def matches(self, rows: np.ndarray, at: np.ndarray):
        """For query rows ``rows`` read as of ``at``: ``in_table`` (the user has neighbours
        in the table as of ``at``), ``any_fresh`` (another user has a code of the item fresh
        at ``at``) and the matches: ``(p, v, sim, code)`` = position in ``rows``, a
        neighbour ``v`` (dense) and its fresh code ``code`` of the item."""
        n = len(rows)
        u = self.qu[rows]
        a, b = self.by_item.bounds(self.qi[rows], at - self.ttl, at)
        count = b - a
        p = np.repeat(np.arange(n), count)
        pos = a[p] + np.arange(len(p)) - np.repeat(np.cumsum(count) - count, count)
        code = self.by_item.order[pos]
        keep = (self.next[code] > at[p]) & (self.cu[code] != u[p])  # latest, another user
        p, code = p[keep], code[keep]
        any_fresh = np.bincount(p, minlength=n) > 0

        in_table = np.zeros(n, dtype=bool)
        sim = np.full(len(p), np.nan)
        sig = self.signature(at)
        sigs, first, inv = np.unique(sig, return_index=True, return_inverse=True)
        row_order = np.argsort(inv, kind="stable")
        row_cuts = np.searchsorted(inv[row_order], np.arange(len(sigs) + 1))
        m_inv = inv[p]
        m_order = np.argsort(m_inv, kind="stable")
        m_cuts = np.searchsorted(m_inv[m_order], np.arange(len(sigs) + 1))
        for t in range(len(sigs)):
            tab = self.table(int(sigs[t]), int(at[first[t]]))
            if len(tab.users) == 0:
                continue
            q = row_order[row_cuts[t] : row_cuts[t + 1]]
            pos_u = np.minimum(np.searchsorted(tab.users, u[q]), len(tab.users) - 1)
            in_table[q] = (tab.users[pos_u] == u[q]) & (tab.nbr[pos_u, :1] >= 0).any(axis=1)
            mm = m_order[m_cuts[t] : m_cuts[t + 1]]
            if len(mm) == 0 or tab.nbr.shape[1] == 0:
                continue
            uu = u[p[mm]]
            r = np.minimum(np.searchsorted(tab.users, uu), len(tab.users) - 1)
            known = tab.users[r] == uu
            hit = (tab.nbr[r] == self.cu[code[mm]][:, None]) & known[:, None]
            found = hit.any(axis=1)
            sim[mm[found]] = tab.sim[r[found], hit[found].argmax(axis=1)]
        ok = ~np.isnan(sim)
        return in_table, any_fresh, (p[ok], self.cu[code[ok]], sim[ok], code[ok])


class _Targets:
    """The fill's targets: per query pair, the ends of the intervals whose requests had it
    as a candidate (``interval_end(ts)`` of each candidate row)."""

    def __init__(self, ix: _NeighbourIndex, fill_targets, cadence_seconds: int) -> None:
        tk = pair_keys(
            np.asarray(fill_targets["user_id"], np.int64),
            np.asarray(fill_targets["item_id"], np.int64),
        )
        pos = np.minimum(np.searchsorted(ix.keys, tk), max(len(ix.keys) - 1, 0))
        queried = np.zeros(len(ix.keys), dtype=bool)
        queried[ix.qp] = True
        keep = (ix.keys[pos] == tk) & queried[pos] if len(ix.keys) else np.zeros(len(tk), bool)
        self.ttl = ix.ttl
        self.end = interval_end(np.asarray(fill_targets["ts"], np.int64)[keep], cadence_seconds)
        self.by_pair = _Sorted(pos[keep], self.end)

    def holds(self, pair: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Whether the fill as of ``at`` targets ``pair``: a request of an interval ending in
        ``(at − ttl, at]`` had it as a candidate."""
        idx = self.by_pair.latest(pair, at)
        return (idx >= 0) & (_take(self.end, idx) > at - self.ttl)


def _first_and_weighted(
    p: np.ndarray, v: np.ndarray, sim: np.ndarray, zc: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group ``p``: ``(groups, top1 z, weighted z)`` with the rules of
    :func:`solaris.pipeline.neighbors.neighbour_fill` (top1: highest similarity, ties the
    smaller user; weighted: ``max(sim, 0)`` weights, the plain mean when they are all 0)."""
    order = np.lexsort((v, -sim, p))
    p, sim, zc = p[order], sim[order], zc[order].astype(np.float64)
    starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])
    w = np.maximum(sim, 0.0)
    wsum = np.add.reduceat(w, starts)
    wz = np.add.reduceat(w[:, None] * zc, starts, axis=0)
    plain = np.add.reduceat(zc, starts, axis=0) / np.diff(np.r_[starts, len(p)])[:, None]
    use_w = wsum > 0
    weighted = np.where(use_w[:, None], wz / np.where(use_w, wsum, 1.0)[:, None], plain)
    return p[starts], zc[starts], weighted


def interval_neighbour_tiers(
    codes: CodeLog,
    users: np.ndarray,
    items: np.ndarray,
    ts: np.ndarray,
    *,
    cadence_seconds: int,
    ttl_seconds: int,
    nbr_window_seconds: int,
    n_neighbors: int,
    own_present: np.ndarray,
    fill_targets=None,
) -> dict[str, Tier]:
    """``nbr_top1`` and ``nbr_weighted`` as served: per-interval KNN tables and fills.

    At each interval end ``e`` (a multiple of ``cadence_seconds``): the table
    (:func:`~solaris.pipeline.neighbors.nearest_users`, ``n_neighbors``) over the user mean
    codes computed in ``(e − nbr_window, e]`` (one code per pair, its latest), and the fill
    as of ``e``: for each target ``(u, i)`` with no code of its own fresh at ``e``, the
    neighbours ``v`` of ``u`` with a code of ``(v, i)`` fresh at ``e``
    (``e − ttl < computed_at <= e``; its latest): the most similar one's code (``nbr_top1``)
    and the ``max(sim, 0)``-weighted mean (``nbr_weighted``).

    ``fill_targets`` (columns or keys ``user_id``, ``item_id``, ``ts``: the candidate rows
    of the request log): the fill at ``e`` targets the pairs of the rows whose interval ends
    (``interval_end(ts)``) in ``(e − ttl, e]``, the enrichment DAG's recent candidates;
    ``None``: every query pair at every ``e`` (the upper bound of any target choice).

    A row at ``t`` whose pair tier is absent (``~own_present``) reads the latest fill at an
    ``e <= t`` that holds its pair, if ``t − e <= ttl`` (the ``nbr`` read TTL). Only the
    tables those fills need are built (one per distinct set of codes in the window).
    """
    users = np.asarray(users, np.int64)
    items = np.asarray(items, np.int64)
    ts = np.asarray(ts, np.int64)
    own_present = np.asarray(own_present, dtype=bool)
    n, d = len(users), codes.z.shape[1]
    top1, weighted = np.zeros((n, d), np.float32), np.zeros((n, d), np.float32)
    present = np.zeros(n, dtype=bool)
    ix = _NeighbourIndex(
        codes,
        users,
        items,
        ttl_seconds=ttl_seconds,
        nbr_window_seconds=nbr_window_seconds,
        n_neighbors=n_neighbors,
    )
    targets = None if fill_targets is None else _Targets(ix, fill_targets, cadence_seconds)
    rows = np.flatnonzero(~own_present)
    e0 = snapshot_end(ts[rows], cadence_seconds)
    depth = (e0 - (ts[rows] - ttl_seconds)) // cadence_seconds  # fills e0 − j·cadence, j <= depth
    pending = np.ones(len(rows), dtype=bool)
    for j in range(int(depth.max()) + 1 if len(rows) else 0):
        cand = np.flatnonzero(pending & (depth >= j))
        at = e0[cand] - j * cadence_seconds
        ok = ~ix.own_fresh(rows[cand], at)
        if targets is not None:
            ok &= targets.holds(ix.qp[rows[cand]], at)
        cand, at = cand[ok], at[ok]
        if len(cand) == 0:
            continue
        _, _, (p, v, sim, code) = ix.matches(rows[cand], at)
        if len(p) == 0:
            continue
        got, z1, zw = _first_and_weighted(p, v, sim, codes.z[code])
        q = rows[cand[got]]
        present[q] = True
        top1[q] = z1
        weighted[q] = zw
        pending[cand[got]] = False
    return {"nbr_top1": Tier(top1, present), "nbr_weighted": Tier(weighted, present.copy())}


def neighbour_diagnostics(
    codes: CodeLog,
    users: np.ndarray,
    items: np.ndarray,
    ts: np.ndarray,
    *,
    cadence_seconds: int,
    ttl_seconds: int,
    nbr_window_seconds: int,
    n_neighbors: int,
    own_present: np.ndarray,
    fill_targets=None,
) -> pd.DataFrame:
    """Why the neighbour tier reaches or misses the rows whose pair tier is absent.

    One row per query row with ``~own_present`` (``row``: its position), as of
    ``e = snapshot_end(t)`` under the per-interval rule:

    * ``user_in_table``: the user has neighbours in the table as of ``e``;
    * ``item_fresh_any``: another user (any, not only a neighbour) has a code of the item
      fresh at ``e`` (the most any neighbour rule can reach at ``e``);
    * ``item_fresh_nbr``: one of the user's neighbours has one (what the fill at ``e``
      reaches for a target);
    * ``own_fresh_at_e``: the pair's own code is fresh at ``e`` (the fill skips the pair);
    * ``target_at_e``: the fill at ``e`` targets the pair (always True without
      ``fill_targets``);

    and under the old daily rule (:func:`daily_neighbours`, fresh at ``t``):
    ``user_in_daily_table``, ``item_fresh_any_at_t`` and ``item_fresh_daily_nbr`` (the
    :func:`neighbour_tiers` presence).
    """
    users = np.asarray(users, np.int64)
    items = np.asarray(items, np.int64)
    ts = np.asarray(ts, np.int64)
    rows = np.flatnonzero(~np.asarray(own_present, dtype=bool))
    ix = _NeighbourIndex(
        codes,
        users,
        items,
        ttl_seconds=ttl_seconds,
        nbr_window_seconds=nbr_window_seconds,
        n_neighbors=n_neighbors,
    )
    e = snapshot_end(ts[rows], cadence_seconds)
    in_table, any_fresh, (p, *_) = ix.matches(rows, e)
    target = np.ones(len(rows), dtype=bool)
    if fill_targets is not None:
        target = _Targets(ix, fill_targets, cadence_seconds).holds(ix.qp[rows], e)

    # The daily rule: tables of the day's start, codes fresh at t (t − ttl <= c <= t).
    t = ts[rows]
    day = t // DAY
    tables = daily_neighbours(codes, day, window_seconds=nbr_window_seconds, k=n_neighbors)
    in_daily = np.zeros(len(rows), dtype=bool)
    for dd, (table_users, ids, _) in tables.items():
        at = np.flatnonzero(day == dd)
        if len(table_users) == 0 or ids.shape[1] == 0:
            continue
        pos = np.minimum(np.searchsorted(table_users, users[rows[at]]), len(table_users) - 1)
        in_daily[at] = table_users[pos] == users[rows[at]]
    a, b = ix.by_item.bounds(items[rows], t - ttl_seconds - 1, t)
    a_own, b_own = ix.by_pair.bounds(ix.qp[rows], t - ttl_seconds - 1, t)
    daily_nbr = neighbour_tiers(
        codes,
        users[rows],
        items[rows],
        t,
        ttl_seconds=ttl_seconds,
        neighbours=tables,
        own_present=np.zeros(len(rows), dtype=bool),
    )["nbr_top1"].present
    return pd.DataFrame(
        {
            "row": rows,
            "e": e,
            "user_in_table": in_table,
            "item_fresh_any": any_fresh,
            "item_fresh_nbr": np.bincount(p, minlength=len(rows)) > 0,
            "own_fresh_at_e": ix.own_fresh(rows, e),
            "target_at_e": target,
            "user_in_daily_table": in_daily,
            "item_fresh_any_at_t": (b - a) - (b_own - a_own) > 0,
            "item_fresh_daily_nbr": daily_nbr,
        }
    )
