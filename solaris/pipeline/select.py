"""Verifier selection: which (user, item) pairs are worth an FM forward pass.

The VM is the verifier. For each request it keeps the top ``share`` of its candidates by VM
score, after skipping pairs whose embedding is still fresh in the cache or already pending
(selected by an earlier request of the same batch). Skipping is what lets a deterministic
selector spend its budget on new pairs instead of re-picking the same ones every request.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

PAIR_KEY_SHIFT = 32  # pair key = user_id << 32 | item_id


def pair_keys(user_id: np.ndarray, item_id: np.ndarray) -> np.ndarray:
    """One int64 per (user, item); ids must be in [0, 2**31) (a ``ValueError`` names the
    first one that is not: larger ids would collide)."""
    users, items = np.asarray(user_id, np.int64), np.asarray(item_id, np.int64)
    for name, ids in (("user_id", users), ("item_id", items)):
        bad = (ids < 0) | (ids >= 1 << 31)
        if bad.any():
            raise ValueError(
                f"{name} {int(ids[np.argmax(bad)])} is outside [0, 2**31): selection keys a "
                "pair by both ids in 64 bits (map larger ids into 31 bits)"
            )
    return (users << PAIR_KEY_SHIFT) | items


def request_budget(n_candidates: np.ndarray, share: float) -> np.ndarray:
    """Pairs each request may select: ``ceil(share * n)``, so every request gets at least one."""
    if not 0 < share <= 1:
        raise ValueError(f"selection share must be in (0, 1], got {share}")
    return np.ceil(np.asarray(n_candidates) * share - 1e-9).astype(np.int64)


def select_mask(
    request_id: np.ndarray,
    user_id: np.ndarray,
    item_id: np.ndarray,
    ts: np.ndarray,
    score: np.ndarray,
    skip: np.ndarray,
    share: float,
) -> np.ndarray:
    """Boolean mask of the selected rows of one batch of candidate rows.

    Each request's budget is ``request_budget(its candidate count, share)``; it is filled
    with its highest-scoring rows that are not ``skip`` (fresh or pending before the batch)
    and not selected by an earlier request (by ``ts``, then ``request_id``) of the same user
    in this batch. Ties in score go to the lower item id. Requests are processed in rounds by
    their rank among the same user's requests, so the work is vectorised over users.
    """
    n = len(request_id)
    selected = np.zeros(n, dtype=bool)
    if n == 0:
        return selected
    req_codes, req_of_row, req_counts = np.unique(
        request_id, return_inverse=True, return_counts=True
    )
    budget = request_budget(req_counts, share)
    # Rank of each request among its user's requests in this batch, by time.
    _, req_first_row = np.unique(request_id, return_index=True)
    req_user = np.asarray(user_id)[req_first_row]
    req_ts = np.asarray(ts)[req_first_row]
    order = np.lexsort((req_codes, req_ts, req_user))
    rank_sorted = np.arange(len(order)) - np.searchsorted(req_user[order], req_user[order])
    req_rank = np.empty(len(order), dtype=np.int64)
    req_rank[order] = rank_sorted
    row_rank = req_rank[req_of_row]

    _, pair_of_row = np.unique(pair_keys(user_id, item_id), return_inverse=True)
    taken = np.zeros(pair_of_row.max() + 1, dtype=bool)  # selected earlier in this batch
    skip = np.asarray(skip, dtype=bool)  # per row: fresh at that row's own time
    score = np.asarray(score, dtype=np.float64)
    item_id = np.asarray(item_id)
    for rank in range(int(row_rank.max()) + 1):
        rows = np.flatnonzero((row_rank == rank) & ~skip & ~taken[pair_of_row])
        if len(rows) == 0:
            continue
        rows = rows[np.lexsort((item_id[rows], -score[rows], req_of_row[rows]))]
        # A pair listed twice in one request (or by two same-rank requests) costs one pass.
        _, first = np.unique(pair_of_row[rows], return_index=True)
        rows = rows[np.sort(first)]
        reqs = req_of_row[rows]
        position = np.arange(len(rows)) - np.searchsorted(reqs, reqs)
        chosen = rows[position < budget[reqs]]
        selected[chosen] = True
        taken[pair_of_row[chosen]] = True
    return selected


def _epoch_seconds(column: pd.Series) -> np.ndarray:
    """Integer epoch seconds from an integer or datetime column; anything else is an error."""
    if pd.api.types.is_datetime64_any_dtype(column):
        utc = pd.to_datetime(column, utc=True)
        return (utc - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(seconds=1)
    if pd.api.types.is_integer_dtype(column):
        return column.to_numpy(np.int64)
    raise TypeError(
        f"cache column 'expires_at' must be epoch seconds or datetimes, got {column.dtype}"
    )


def select_candidates(
    candidates: pd.DataFrame,
    scores: np.ndarray,
    *,
    share: float,
    cache: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The candidates worth precomputing, from one batch (e.g. one scheduling interval).

    Args:
        candidates: ``request_id, user_id, item_id, ts`` rows.
        scores: verifier (VM) score of each row, aligned with ``candidates``.
        share: share of each request's candidates to select (the FM budget).
        cache: ``user_id, item_id, expires_at`` of cached or pending pairs; a pair is
            skipped when ``expires_at`` (its last fresh second) is at or after the
            request's ``ts``. ``expires_at`` is
            epoch seconds (integer) or a datetime column (converted to epoch seconds).

    Returns:
        The selected rows of ``candidates`` (original columns plus ``score``), in input order.
    """
    scores = np.asarray(scores)
    if len(scores) != len(candidates):
        raise ValueError(f"{len(scores)} scores for {len(candidates)} candidates")
    skip = np.zeros(len(candidates), dtype=bool)
    if cache is not None and len(cache):
        keys = pair_keys(candidates["user_id"].to_numpy(), candidates["item_id"].to_numpy())
        expiry = pd.Series(
            _epoch_seconds(cache["expires_at"]),
            index=pair_keys(cache["user_id"].to_numpy(), cache["item_id"].to_numpy()),
        )
        expiry = expiry.groupby(level=0).max()
        expires_at = expiry.reindex(keys).to_numpy(dtype=np.float64, na_value=-np.inf)
        skip = expires_at >= candidates["ts"].to_numpy()
    mask = select_mask(
        candidates["request_id"].to_numpy(),
        candidates["user_id"].to_numpy(),
        candidates["item_id"].to_numpy(),
        candidates["ts"].to_numpy(),
        scores,
        skip,
        share,
    )
    return candidates.assign(score=scores)[mask]
