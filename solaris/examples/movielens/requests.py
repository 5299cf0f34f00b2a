"""Turn ratings into ranking requests with causal retrieval candidates.

A request is one user's ratings within a short time bucket (a minute by default), so that a
browsing session yields many requests, as in production. Its labelled impressions are the
items rated in it; its candidates are those plus the top-K items of a retrieval stage that
sees only data strictly before the request time: trailing popularity and co-occurrence with
the user's recent history, from a daily snapshot (data before the start of the request's day)
plus the user's own history up to the request.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp
from tqdm.auto import tqdm

from solaris.config import RequestLogConfig
from solaris.examples.movielens.data import LIKE_THRESHOLD

__all__ = [
    "DAY",
    "HOUR",
    "RequestLog",
    "RequestLogStats",
    "bucket_requests",
    "build_request_log",
    "earlier_candidate_within",
    "flat_ranges",
    "request_log_stats",
    "retrieve",
]

HOUR = 3_600
DAY = 24 * HOUR


@dataclass(frozen=True)
class RequestLog:
    """``requests`` (request_id, user_id, ts), ``candidates`` (request_id, user_id, item_id,
    ts, label: nullable Int8, retrieval_score: float32) and ``impressions`` (the labelled
    candidates with their rating). All three are sorted by ``ts`` then ``request_id``.

    ``retrieval_score`` is the causal retrieval score of every candidate, the labelled ones
    that retrieval did not return included (scored by the same snapshot), so that a
    selector may rank on it without knowing which rows retrieval returned. It is not part of
    the ``candidates``/``request_log`` table schemas; schema-checked writes drop it."""

    requests: pd.DataFrame
    candidates: pd.DataFrame
    impressions: pd.DataFrame


def bucket_requests(ratings: pd.DataFrame, bucket_seconds: int) -> pd.DataFrame:
    """Assign each rating to a request: one per (user, time bucket).

    Returns the ratings with ``request_id`` and ``request_ts`` (the first rating time in the
    bucket). Request ids increase with (request_ts, user_id).
    """
    bucket = ratings["ts"].to_numpy() // bucket_seconds
    keyed = ratings.assign(_bucket=bucket)
    first_ts = keyed.groupby(["user_id", "_bucket"])["ts"].transform("min")
    keyed = keyed.assign(request_ts=first_ts)
    order = (
        keyed[["request_ts", "user_id"]]
        .drop_duplicates()
        .sort_values(["request_ts", "user_id"], kind="stable")
    )
    order = order.assign(request_id=np.arange(len(order), dtype=np.int64))
    out = keyed.merge(order, on=["request_ts", "user_id"], how="left").drop(columns="_bucket")
    return out.sort_values(["request_ts", "request_id", "item_id"], ignore_index=True)


def _history_index(
    ratings: pd.DataFrame, n_users: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ratings sorted by (user, ts): composite keys for searchsorted, items, user starts."""
    by_user = ratings.sort_values(["user_id", "ts", "item_id"], kind="stable")
    users = by_user["user_id"].to_numpy()
    keys = users * (1 << 32) + by_user["ts"].to_numpy()
    starts = np.searchsorted(users, np.arange(n_users + 1))
    return keys, by_user["item_id"].to_numpy(), starts


def flat_ranges(starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row index and flat positions of the concatenated ranges [starts[r], stops[r])."""
    lengths = np.maximum(stops - starts, 0)
    rows = np.repeat(np.arange(len(starts)), lengths)
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return rows, np.repeat(starts, lengths) + offsets


def retrieve(
    ratings: pd.DataFrame,
    requests: pd.DataFrame,
    n_items: int,
    cfg: RequestLogConfig,
    *,
    pairs: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Top-``cfg.retrieval_k`` retrieval candidates per request, from data strictly before it.

    Score = trailing popularity + ``cooccurrence_weight`` x co-occurrence with the user's
    last ``cooccurrence_history`` items (popularity normalised to [0, 1] per day,
    co-occurrence per request); items the
    user already rated before the request are excluded. Popularity and co-occurrence come
    from a snapshot at the start of the request's day; the user's history is exact.

    Returns ``request_id, item_id, retrieval_score``. With ``pairs`` (``request_id,
    item_id`` of requests in ``requests``), those pairs are scored too, by the same snapshot
    and before the exclusion of already-rated items (so their score is always finite), and
    the result is the union of the top-K rows and ``pairs`` (each pair once) with a bool
    ``retrieved`` column, False for a pair of ``pairs`` outside the top-K. This is how the
    request log scores the labelled impressions it injects as candidates.
    """
    # Users with no past rating (cold start) still get popularity candidates.
    n_users = (
        int(
            max(
                ratings["user_id"].to_numpy().max(initial=0),
                requests["user_id"].to_numpy().max(initial=0),
            )
        )
        + 1
    )
    hist_keys, hist_items, user_starts = _history_index(ratings, n_users)
    rating_day = ratings["ts"].to_numpy() // DAY
    req_day = requests["ts"].to_numpy() // DAY
    window_days = cfg.popularity_window_days
    cooc = sp.csr_matrix((n_items, n_items), dtype=np.float32)
    ratings_users = ratings["user_id"].to_numpy()
    ratings_items = ratings["item_id"].to_numpy()
    seen = sp.csr_matrix((n_users, n_items), dtype=np.float32)
    k = min(cfg.retrieval_k, n_items - 1)
    # Each request's row within its day's batch, and the extra pairs grouped by day.
    in_batch = np.zeros(len(requests), np.int64)
    order = np.argsort(req_day, kind="stable")
    day_starts = np.searchsorted(req_day[order], req_day[order], "left")
    in_batch[order] = np.arange(len(requests)) - day_starts
    if pairs is not None:
        at = pd.Index(requests["request_id"].to_numpy()).get_indexer(pairs["request_id"])
        if (at < 0).any():
            raise ValueError("pairs name requests that are not in requests")
        extra_items = pairs["item_id"].to_numpy(np.int64)
        extra_day = req_day[at]
    out = []
    extra_out = []
    days = np.unique(req_day)
    done_day = np.iinfo(np.int64).min  # ratings before this day are in the snapshot
    for day in tqdm(days, desc="retrieval", unit="day", leave=False):
        # Advance the co-occurrence snapshot with every rating before this day.
        new = (rating_day < day) & (rating_day >= done_day)
        if new.any():
            fresh = sp.csr_matrix(
                (np.ones(new.sum(), np.float32), (ratings_users[new], ratings_items[new])),
                shape=(n_users, n_items),
            )
            cooc = cooc + fresh.T @ seen + seen.T @ fresh + fresh.T @ fresh
            seen = seen + fresh
        done_day = day
        in_window = (rating_day < day) & (rating_day >= day - window_days)
        popularity = np.bincount(ratings_items[in_window], minlength=n_items).astype(np.float32)
        popularity /= max(popularity.max(), 1.0)

        batch = requests[req_day == day]
        users = batch["user_id"].to_numpy()
        pos = np.searchsorted(hist_keys, users * (1 << 32) + batch["ts"].to_numpy(), "left")
        n = len(batch)
        # Everything the user rated strictly before the request is excluded.
        rows, flat = flat_ranges(user_starts[users], pos)
        rated = sp.csr_matrix(
            (np.ones(len(rows), np.float32), (rows, hist_items[flat])), shape=(n, n_items)
        )
        recent_rows, recent_flat = flat_ranges(
            np.maximum(user_starts[users], pos - cfg.cooccurrence_history), pos
        )
        recent = sp.csr_matrix(
            (np.ones(len(recent_rows), np.float32), (recent_rows, hist_items[recent_flat])),
            shape=(n, n_items),
        )
        co = np.asarray((recent @ cooc).todense(), dtype=np.float32)
        co /= np.maximum(co.max(axis=1, keepdims=True), 1.0)
        score = popularity[None, :] + cfg.cooccurrence_weight * co
        if pairs is not None:
            mine = np.flatnonzero(extra_day == day)
            extra_out.append(
                pd.DataFrame(
                    {
                        "request_id": pairs["request_id"].to_numpy()[mine],
                        "item_id": extra_items[mine],
                        "retrieval_score": score[in_batch[at[mine]], extra_items[mine]],
                    }
                )
            )
        score[:, 0] = -np.inf  # item 0 does not exist
        score[rated.nonzero()] = -np.inf
        top = np.argpartition(-score, k - 1, axis=1)[:, :k]
        top_score = np.take_along_axis(score, top, axis=1)
        keep = np.isfinite(top_score)
        out.append(
            pd.DataFrame(
                {
                    "request_id": np.repeat(batch["request_id"].to_numpy(), k)[keep.ravel()],
                    "item_id": top.ravel()[keep.ravel()].astype(np.int64),
                    "retrieval_score": top_score.ravel()[keep.ravel()],
                }
            )
        )
    top = pd.concat(out, ignore_index=True)
    if pairs is None:
        return top
    both = pd.concat(
        [top.assign(retrieved=True), *(f.assign(retrieved=False) for f in extra_out)],
        ignore_index=True,
    )
    return both.drop_duplicates(["request_id", "item_id"], ignore_index=True)


def build_request_log(ratings: pd.DataFrame, cfg: RequestLogConfig) -> RequestLog:
    """Requests, candidates and labelled impressions from a ratings table.

    ``ratings`` needs ``user_id, item_id, rating, ts``.
    """
    rated = bucket_requests(ratings, cfg.bucket_seconds)
    requests = (
        rated[["request_id", "user_id", "request_ts"]]
        .drop_duplicates("request_id")
        .rename(columns={"request_ts": "ts"})
        .reset_index(drop=True)
    )
    impressions = rated.rename(columns={"ts": "rating_ts", "request_ts": "ts"})[
        ["request_id", "user_id", "item_id", "ts", "rating", "rating_ts"]
    ].assign(label=lambda f: (f["rating"] >= LIKE_THRESHOLD).astype("int8"))
    n_items = int(ratings["item_id"].max()) + 1
    labelled = impressions[["request_id", "user_id", "item_id", "ts", "label"]]
    # The labelled impressions are scored too, whether or not retrieval returned them.
    scored = retrieve(ratings, requests, n_items, cfg, pairs=labelled[["request_id", "item_id"]])
    scored = scored.astype({"retrieval_score": np.float32})
    labelled = labelled.merge(
        scored[["request_id", "item_id", "retrieval_score"]],
        on=["request_id", "item_id"],
        how="left",
        validate="one_to_one",
    )
    retrieved = scored[scored["retrieved"].to_numpy()].merge(requests, on="request_id")
    unlabelled = retrieved.merge(
        labelled[["request_id", "item_id"]],
        on=["request_id", "item_id"],
        how="left",
        indicator=True,
    )
    unlabelled = unlabelled[unlabelled["_merge"] == "left_only"]
    columns = ["request_id", "user_id", "item_id", "ts", "label", "retrieval_score"]
    candidates = pd.concat(
        [
            labelled.astype({"label": "Int8"})[columns],
            unlabelled[["request_id", "user_id", "item_id", "ts"]].assign(
                label=pd.arrays.IntegerArray(
                    np.zeros(len(unlabelled), np.int8), np.ones(len(unlabelled), bool)
                ),
                retrieval_score=unlabelled["retrieval_score"].to_numpy(np.float32),
            )[columns],
        ],
        ignore_index=True,
    ).sort_values(["ts", "request_id", "item_id"], kind="stable", ignore_index=True)
    return RequestLog(requests=requests, candidates=candidates, impressions=impressions)


def earlier_candidate_within(candidates: pd.DataFrame, window_seconds: float) -> np.ndarray:
    """For each candidate row: was the same (user, item) a candidate of an earlier request
    of that user at most ``window_seconds`` before? Aligned with ``candidates`` rows."""
    users = candidates["user_id"].to_numpy()
    items = candidates["item_id"].to_numpy()
    ts = candidates["ts"].to_numpy()
    order = np.lexsort((ts, items, users))
    u, i, t = users[order], items[order], ts[order]
    same_pair = np.zeros(len(order), bool)
    same_pair[1:] = (u[1:] == u[:-1]) & (i[1:] == i[:-1])
    gap = np.full(len(order), np.inf)
    gap[1:] = t[1:] - t[:-1]
    hit_sorted = same_pair & (gap > 0) & (gap <= window_seconds)
    hit = np.empty(len(order), bool)
    hit[order] = hit_sorted
    return hit


@dataclass(frozen=True)
class RequestLogStats:
    n_requests: int
    n_candidates: int
    mean_candidates: float
    mean_impressions: float
    recurrence: float  # mean share of a request's candidates ranked for the user in the window
    recurrence_with_prior: float  # same, over requests with an earlier request in the window
    retrieval_recall: float  # share of impressions whose item was an earlier candidate


def request_log_stats(log: RequestLog, window_hours: float = 6.0) -> RequestLogStats:
    """The recurrence statistic and retrieval recall, next to the paper's >60% recurrence."""
    window = window_hours * 3600
    cands = log.candidates
    recurred = earlier_candidate_within(cands, window)
    per_request = pd.Series(recurred).groupby(cands["request_id"].to_numpy()).mean()
    req = log.requests.sort_values(["user_id", "ts"], kind="stable")
    gap = req.groupby("user_id")["ts"].diff()
    has_prior = pd.Series((gap <= window).to_numpy(), index=req["request_id"].to_numpy())
    prior = has_prior.reindex(per_request.index).to_numpy()
    labelled = cands["label"].notna().to_numpy()
    return RequestLogStats(
        n_requests=len(log.requests),
        n_candidates=len(cands),
        mean_candidates=len(cands) / len(log.requests),
        mean_impressions=len(log.impressions) / len(log.requests),
        recurrence=float(per_request.mean()),
        recurrence_with_prior=float(per_request[prior].mean()) if prior.any() else 0.0,
        retrieval_recall=float(recurred[labelled].mean()),
    )
