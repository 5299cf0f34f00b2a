"""Incremental windows: the aggregates' sums carried from one interval to the next.

The enrichment's aggregates are sums over a sliding window of pair codes (``uagg`` per user
and ``iagg`` per item over ``store.uagg_window_hours``, the user embeddings over
``store.unn_ttl_hours``). Recomputing them reads the whole window every interval (96 to 192
intervals of codes for one interval's work). Carried forward instead, an interval adds its
own codes, subtracts the codes leaving the window, and subtracts the codes its own codes
supersede, and reads nothing else of the window's codes:

* **one code per pair, the latest**: when an interval embeds a pair that already has a code
  in the window, the older code is *retracted* (subtracted at once, and kept as a retraction
  of the interval it came from, so that it is not subtracted again when that interval
  leaves the window);
* **codes only within the window**: when an interval leaves a window its *live* codes (its
  codes less those retracted while it was in that window) are subtracted;
* **exact**: every summand is a float16 value and sums are float64, in which adding and
  subtracting such values is exact in any order (see
  :func:`~solaris.pipeline.aggregate.item_partial_sums`), so the carried sums are the bits
  a recomputation over the window gives.

Everything here is pure and vectorised: :class:`Sums` (per-key sums and counts),
:func:`interval_codes` (one interval's codes, one per pair), :func:`find_pairs` (which of an
interval's pairs an earlier interval holds), :func:`without_pairs` and
:func:`supersessions` (the retractions of a history rebuilt from scratch). The cycle's
state files and the order of the steps are :mod:`solaris.orchestration.windows`'.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from solaris.pipeline.aggregate import AggregateError, _group_sums, latest_per_pair
from solaris.pipeline.neighbors import CodeIndex, _ranges
from solaris.store.codec import f16_round

__all__ = [
    "PairIndex",
    "Retractions",
    "Sums",
    "find_pairs",
    "interval_codes",
    "latest_codes",
    "supersessions",
    "without_pairs",
]


@dataclass(frozen=True)
class Sums:
    """Per key (a user or an item): ``keys [K]`` int64 ascending, ``sums [K, d]`` float64
    of float16-rounded codes and ``counts [K]`` int64 (> 0: a key whose count falls to 0
    is dropped)."""

    keys: np.ndarray
    sums: np.ndarray
    counts: np.ndarray

    @classmethod
    def empty(cls, z_dim: int) -> Sums:
        return cls(np.zeros(0, np.int64), np.zeros((0, z_dim)), np.zeros(0, np.int64))

    @classmethod
    def of(cls, keys: np.ndarray, z16: np.ndarray) -> Sums:
        """The sums and counts of codes ``z16 [n, d]`` grouped by ``keys [n]``."""
        k, sums, counts = _group_sums(np.asarray(keys, np.int64), np.asarray(z16))
        return cls(k.astype(np.int64), sums, counts)

    def plus(self, keys: np.ndarray, z16: np.ndarray, *, sign: int = 1) -> Sums:
        """These sums with codes ``z16 [n, d]`` of ``keys [n]`` added (``sign`` 1) or
        subtracted (``sign`` −1)."""
        return self.plus_all([(keys, z16, sign)])

    def plus_all(self, parts: list[tuple[np.ndarray, np.ndarray, int]]) -> Sums:
        """These sums with every ``(keys, z16, sign)`` of ``parts`` applied. The parts are
        grouped first (the counts ride along as a last column, float64: exact below 2^53),
        then merged into the sorted keys: a pass over the state, no sort of it."""
        parts = [(k, z, s) for k, z, s in parts if len(k)]
        if not parts:
            return self
        d = self.sums.shape[1]
        keys = np.concatenate([np.asarray(k, np.int64) for k, _, _ in parts])
        values = np.concatenate(
            [np.c_[np.asarray(z, np.float64), np.ones(len(k))] * s for k, z, s in parts]
        )
        delta_keys, delta, _ = _group_sums(keys, values)
        at = np.searchsorted(self.keys, delta_keys)
        known = np.zeros(len(at), np.bool_)
        if len(self.keys):
            known = self.keys[np.minimum(at, len(self.keys) - 1)] == delta_keys
        sums, counts = self.sums.copy(), self.counts.copy()
        sums[at[known]] += delta[known, :d]
        counts[at[known]] += delta[known, d].astype(np.int64)
        new = ~known
        keys = np.insert(self.keys, at[new], delta_keys[new])
        sums = np.insert(sums, at[new], delta[new, :d], axis=0)
        counts = np.insert(counts, at[new], delta[new, d].astype(np.int64))
        if (counts < 0).any():
            raise AggregateError("a window's count fell below 0: a code was subtracted twice")
        live = counts > 0
        if live.all():
            return Sums(keys, sums, counts)
        return Sums(keys[live], sums[live], counts[live])

    def __len__(self) -> int:
        return len(self.keys)


@dataclass(frozen=True)
class PairIndex:
    """The interval of the latest code of every pair in the widest window: ``users [n]``
    and ``items [n]`` int64 sorted by (user, item), each pair once, ``origin [n]`` int64
    (the interval end). Carried with the sums, so that an interval finds the codes its own
    supersede with one look-up instead of one per earlier interval: 24 bytes a pair, no
    codes."""

    users: np.ndarray
    items: np.ndarray
    origin: np.ndarray

    @classmethod
    def empty(cls) -> PairIndex:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))

    @classmethod
    def of(cls, intervals: list[tuple[int, CodeIndex]]) -> PairIndex:
        """The index of a history of intervals ``(end, codes)``."""
        if not intervals:
            return cls.empty()
        ends = np.concatenate([np.full(len(c), end, np.int64) for end, c in intervals])
        users = np.concatenate([np.asarray(c.users, np.int64) for _, c in intervals])
        items = np.concatenate([np.asarray(c.items, np.int64) for _, c in intervals])
        won = latest_per_pair(users, items, ends)
        won = won[np.lexsort((items[won], users[won]))]
        return cls(users[won], items[won], ends[won])

    def after(self, end: int) -> PairIndex:
        """Only the pairs whose latest code is of an interval ending after ``end``."""
        keep = self.origin > end
        return PairIndex(self.users[keep], self.items[keep], self.origin[keep])

    def with_codes(
        self, codes: CodeIndex, end: int, found: tuple[np.ndarray, np.ndarray]
    ) -> PairIndex:
        """This index after interval ``end`` embedded ``codes``: ``found`` (``(k, rows)``
        of :func:`find_pairs`) are the codes whose pair it held, at those rows; their
        origin moves on, and the other pairs are inserted."""
        k, rows = found
        origin = self.origin.copy()
        origin[rows] = end
        new = np.ones(len(codes), np.bool_)
        new[k] = False
        add_users = np.asarray(codes.users, np.int64)[new]
        add_items = np.asarray(codes.items, np.int64)[new]
        keys = _packed(self.users, self.items, add_users, add_items)
        if keys is not None:  # both sorted by one int64: inserted, no sort
            at = np.searchsorted(keys[0], keys[1])
            return PairIndex(
                np.insert(self.users, at, add_users),
                np.insert(self.items, at, add_items),
                np.insert(origin, at, np.full(len(at), end, np.int64)),
            )
        users = np.r_[self.users, add_users]
        items = np.r_[self.items, add_items]
        origin = np.r_[origin, np.full(len(add_users), end, np.int64)]
        order = np.lexsort((items, users))
        return PairIndex(users[order], items[order], origin[order])

    def __len__(self) -> int:
        return len(self.users)


@dataclass(frozen=True)
class Retractions:
    """Codes superseded while their interval is in a window: ``users [n]``, ``items [n]``,
    ``origin [n]`` (the interval of the superseded code) and ``by [n]`` (the interval of
    the code that superseded it), int64. Carried with the sums, so that an interval leaving
    a window subtracts only its codes still in the sums."""

    users: np.ndarray
    items: np.ndarray
    origin: np.ndarray
    by: np.ndarray

    @classmethod
    def empty(cls) -> Retractions:
        return cls(*(np.zeros(0, np.int64) for _ in range(4)))

    def plus(self, users: np.ndarray, items: np.ndarray, origin: int, by: int) -> Retractions:
        """These and the codes of pairs ``(users, items)`` of interval ``origin``,
        superseded by interval ``by``."""
        n = len(users)
        return Retractions(
            np.r_[self.users, np.asarray(users, np.int64)],
            np.r_[self.items, np.asarray(items, np.int64)],
            np.r_[self.origin, np.full(n, origin, np.int64)],
            np.r_[self.by, np.full(n, by, np.int64)],
        )

    def of(self, origin: int, *, before: int) -> tuple[np.ndarray, np.ndarray]:
        """``(users, items)`` of interval ``origin``'s codes superseded by an interval
        ending before ``before``."""
        mine = (self.origin == origin) & (self.by < before)
        return self.users[mine], self.items[mine]

    def after(self, end: int) -> Retractions:
        """Only the codes of intervals ending after ``end`` (the others left every window)."""
        keep = self.origin > end
        return Retractions(self.users[keep], self.items[keep], self.origin[keep], self.by[keep])

    def __len__(self) -> int:
        return len(self.users)


def _packed(
    users_a: np.ndarray, items_a: np.ndarray, users_b: np.ndarray, items_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Pairs of two sets as int64 keys ordered as (user, item) is, when the ids' spans let
    one int64 hold both (else None)."""
    if not len(users_a) or not len(users_b):
        return None
    u_lo = min(int(users_a[0]), int(users_b.min()))
    u_hi = max(int(users_a[-1]), int(users_b.max()))
    i_lo = min(int(items_a.min()), int(items_b.min()))
    span = max(int(items_a.max()), int(items_b.max())) - i_lo + 1
    if (u_hi - u_lo + 1) * span >= 1 << 62:
        return None
    return (
        (users_a - u_lo) * span + (items_a - i_lo),
        (users_b - u_lo) * span + (items_b - i_lo),
    )


def interval_codes(
    users: np.ndarray, items: np.ndarray, z: np.ndarray, *, keep: np.ndarray | None = None
) -> CodeIndex:
    """One interval's codes, one per pair (the later row when a pair is there twice, as
    :func:`~solaris.pipeline.aggregate.select_window` picks), float16-rounded, sorted by
    (user, item). ``keep``: the rows to use (the serving FM version's)."""
    users = np.asarray(users, np.int64)
    items = np.asarray(items, np.int64)
    rows = np.flatnonzero(keep) if keep is not None else np.arange(len(users))
    won = rows[latest_per_pair(users[rows], items[rows], np.zeros(len(rows), np.int64))]
    frame = pd.DataFrame({"user_id": users[won], "item_id": items[won]})
    return CodeIndex.of(frame, f16_round(np.asarray(z, np.float32)[won]))


def find_pairs(
    new_users: np.ndarray, new_items: np.ndarray, earlier: CodeIndex | PairIndex
) -> tuple[np.ndarray, np.ndarray]:
    """Which pairs ``(new_users[k], new_items[k])`` (each pair once) ``earlier`` holds:
    ``(k, rows)``, positions in the new pairs and the matching rows of ``earlier``. Only
    the rows of the new pairs' users are visited (a binary search per user in the sorted
    ``earlier.users``: a memory-mapped file is read only there)."""
    if not len(new_users) or not len(earlier):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    users = np.unique(new_users)
    lo = np.searchsorted(earlier.users, users, side="left")
    hi = np.searchsorted(earlier.users, users, side="right")
    rows = _ranges(lo, hi)
    if not len(rows):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    have_users = np.asarray(earlier.users[rows])
    have_items = np.asarray(earlier.items[rows])
    low = min(int(have_items.min()), int(np.min(new_items)))
    span = max(int(have_items.max()), int(np.max(new_items))) - low + 1
    if len(users) * span < 1 << 62:
        # One int64 per pair, ordered as the rows are (users by rank, then items): the
        # candidate rows' keys are sorted, and each new pair is one binary search.
        have_key = np.searchsorted(users, have_users) * span + (have_items - low)
        want_key = np.searchsorted(users, new_users) * span + (np.asarray(new_items) - low)
        at = np.minimum(np.searchsorted(have_key, want_key), len(have_key) - 1)
        k = np.flatnonzero(have_key[at] == want_key)
        return k.astype(np.int64), rows[at[k]].astype(np.int64)
    have = pd.DataFrame({"user_id": have_users, "item_id": have_items})
    have["row"] = rows
    want = pd.DataFrame({"user_id": new_users, "item_id": new_items})
    want["k"] = np.arange(len(want))
    hit = want.merge(have, on=["user_id", "item_id"], how="inner", sort=False)
    order = np.argsort(hit["k"].to_numpy(), kind="stable")
    return hit["k"].to_numpy(np.int64)[order], hit["row"].to_numpy(np.int64)[order]


def without_pairs(codes: CodeIndex, users: np.ndarray, items: np.ndarray) -> CodeIndex:
    """``codes`` less the rows of the pairs ``(users[k], items[k])`` (a retraction list)."""
    if not len(users):
        return codes
    _, rows = find_pairs(np.asarray(users, np.int64), np.asarray(items, np.int64), codes)
    keep = np.ones(len(codes), np.bool_)
    keep[rows] = False
    return CodeIndex(
        np.asarray(codes.users)[keep], np.asarray(codes.items)[keep], np.asarray(codes.z16)[keep]
    )


def latest_codes(intervals: list[tuple[int, CodeIndex]]) -> CodeIndex:
    """The latest code of each pair over intervals ``(end, codes)`` (any order), sorted by
    (user, item): what :func:`~solaris.pipeline.aggregate.select_window` keeps of a window
    whose codes are those intervals'."""
    if not intervals:
        return CodeIndex(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 0)))
    ends = np.concatenate([np.full(len(c), end, np.int64) for end, c in intervals])
    users = np.concatenate([np.asarray(c.users) for _, c in intervals])
    items = np.concatenate([np.asarray(c.items) for _, c in intervals])
    z16 = np.concatenate([np.asarray(c.z16) for _, c in intervals])
    won = latest_per_pair(users, items, ends)
    won = won[np.lexsort((items[won], users[won]))]
    return CodeIndex(users[won], items[won], np.ascontiguousarray(z16[won], np.float16))


def supersessions(intervals: list[tuple[int, CodeIndex]]) -> list[tuple[int, int, np.ndarray]]:
    """For a history of intervals ``(end, codes)`` (each interval's codes one per pair):
    every code a later interval's code of the same pair supersedes, as
    ``(origin end, superseding end, rows of the origin's codes)``: the retractions an
    interval-by-interval replay of the same history would have recorded."""
    if len(intervals) < 2:
        return []
    ordered = sorted(intervals, key=lambda x: x[0])
    ends = np.concatenate([np.full(len(c), end, np.int64) for end, c in ordered])
    rows = np.concatenate([np.arange(len(c)) for _, c in ordered])
    users = np.concatenate([np.asarray(c.users) for _, c in ordered])
    items = np.concatenate([np.asarray(c.items) for _, c in ordered])
    order = np.lexsort((ends, items, users))
    u, i, e, r = users[order], items[order], ends[order], rows[order]
    same_next = np.r_[(u[1:] == u[:-1]) & (i[1:] == i[:-1]), False]
    old = np.flatnonzero(same_next)
    if not len(old):
        return []
    frame = pd.DataFrame({"origin": e[old], "by": e[old + 1], "row": r[old]})
    return [
        (int(origin), int(by), np.sort(group["row"].to_numpy(np.int64)))
        for (origin, by), group in frame.groupby(["origin", "by"], sort=True)
    ]
