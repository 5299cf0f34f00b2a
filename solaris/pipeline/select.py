"""Verifier selection: which (user, item) pairs are worth an FM forward pass.

The VM is the verifier. For each request it keeps the top ``share`` of its candidates by VM
score, after skipping pairs whose embedding is still fresh in the cache or already pending
(selected by an earlier request of the same batch). Skipping is what lets a deterministic
selector spend its budget on new pairs instead of re-picking the same ones every request.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from solaris.files import ArgumentTypeError
from solaris.selection import SelectionError, request_budget

__all__ = [
    "PAIR_KEY_SHIFT",
    "SelectionError",
    "pair_keys",
    "request_budget",
    "select_candidates",
    "select_mask",
]

PAIR_KEY_SHIFT = 32  # pair key = user_id << 32 | item_id
_CANDIDATE_COLUMNS = ("request_id", "user_id", "item_id", "ts")
_CACHE_COLUMNS = ("user_id", "item_id", "expires_at")


def pair_keys(user_id: np.ndarray, item_id: np.ndarray, *, source: str = "") -> np.ndarray:
    """One int64 per (user, item); ids must be in [0, 2**31) (a :class:`SelectionError`
    names the first one that is not, and its row: larger ids would collide). ``source``
    (e.g. ``"candidates"``) prefixes the message."""
    users, items = np.asarray(user_id, np.int64), np.asarray(item_id, np.int64)
    for name, ids in (("user_id", users), ("item_id", items)):
        bad = (ids < 0) | (ids >= 1 << 31)
        if bad.any():
            row = int(np.argmax(bad))
            raise SelectionError(
                f"{source + ': ' if source else ''}{name} {int(ids[row])} is outside "
                f"[0, 2**31) (first at row {row}): selection keys a pair by both ids in "
                "64 bits (map larger ids into 31 bits)"
            )
    return (users << PAIR_KEY_SHIFT) | items


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
    raise ArgumentTypeError(
        f"cache column 'expires_at' must be epoch seconds or datetimes, got {column.dtype}"
    )


def _check_columns(frame: object, columns: tuple[str, ...], source: str) -> pd.DataFrame:
    if not isinstance(frame, pd.DataFrame):
        raise SelectionError(f"{source}: expected a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise SelectionError(
            f"{source}: missing columns {missing}; columns present: {list(frame.columns)}"
        )
    return frame


def _check_integers(frame: pd.DataFrame, columns: tuple[str, ...], source: str) -> None:
    """Integer columns without nulls (ids and epoch seconds)."""
    for name in columns:
        column = frame[name]
        if pd.api.types.is_bool_dtype(column) or not pd.api.types.is_integer_dtype(column):
            raise SelectionError(f"{source}: column '{name}' must be integers, got {column.dtype}")
        if column.hasnans:  # a nullable Int64 column with <NA>
            row = int(np.flatnonzero(column.isna().to_numpy())[0])
            raise SelectionError(f"{source}: column '{name}' is null at row {row}")


def _check_requests(candidates: pd.DataFrame, source: str) -> None:
    """Each ``request_id`` is one request: one user at one time. A reused id would merge
    two requests' budgets and rank one of them at the other's time."""
    rid = candidates["request_id"].to_numpy(np.int64)
    order = np.argsort(rid, kind="stable")
    same = rid[order][1:] == rid[order][:-1]
    for name in ("user_id", "ts"):
        values = candidates[name].to_numpy(np.int64)[order]
        clash = same & (values[1:] != values[:-1])
        if clash.any():
            k = int(np.argmax(clash))
            row, first = int(order[k + 1]), int(order[k])
            raise SelectionError(
                f"{source}: request_id {int(rid[row])} has rows of different {name} "
                f"(row {first}: {values[k]}, row {row}: {values[k + 1]}); a request is one "
                "user at one time"
            )


def _check_scores(scores: object, n: int) -> np.ndarray:
    scores = np.asarray(scores)
    if scores.ndim != 1 or len(scores) != n:
        raise SelectionError(
            f"scores: {scores.size} values (shape {scores.shape}) for {n} candidates; "
            "one score per candidate row"
        )
    if scores.dtype == np.bool_ or not (
        np.issubdtype(scores.dtype, np.floating) or np.issubdtype(scores.dtype, np.integer)
    ):
        raise SelectionError(f"scores: must be numbers, got dtype {scores.dtype}")
    nan = np.isnan(scores.astype(np.float64, copy=False))
    if nan.any():
        raise SelectionError(
            f"scores: {int(nan.sum())} NaN (first at row {int(np.argmax(nan))}); a verifier "
            "without a score for a row gives it -inf"
        )
    return scores


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

    Raises:
        SelectionError: a missing or non-integer column, an id outside ``[0, 2**31)``, a
            ``request_id`` with rows of several users or times, scores that are not one
            number per row or are NaN, a share outside ``(0, 1]``; the message names the
            input, the column and the first offending row.
    """
    _check_columns(candidates, _CANDIDATE_COLUMNS, "candidates")
    _check_integers(candidates, _CANDIDATE_COLUMNS, "candidates")
    scores = _check_scores(scores, len(candidates))
    request_budget(np.zeros(0), share)  # the share is checked before any work
    keys = pair_keys(
        candidates["user_id"].to_numpy(), candidates["item_id"].to_numpy(), source="candidates"
    )
    _check_requests(candidates, "candidates")
    skip = np.zeros(len(candidates), dtype=bool)
    if cache is not None:
        _check_columns(cache, _CACHE_COLUMNS, "cache")
    if cache is not None and len(cache):
        _check_integers(cache, _CACHE_COLUMNS[:2], "cache")
        expiry = pd.Series(
            _epoch_seconds(cache["expires_at"]),
            index=pair_keys(
                cache["user_id"].to_numpy(), cache["item_id"].to_numpy(), source="cache"
            ),
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
