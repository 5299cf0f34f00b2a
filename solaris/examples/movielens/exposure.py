"""Exposure scoring: how likely a candidate pair is to become a labelled impression soon.

Selection spends the FM budget on pairs whose embedding will be *used*: an embedding
selected now is usable from the end of the current scheduling interval for ``ttl_seconds``,
so what selection needs is P(the pair has a labelled impression in that window), the label
:func:`solaris.evaluation.replay.oracle_scores` gives. The VM's P(like | rated) does not
predict it (it is conditioned on the pair being rated), so this module learns it directly
from logged candidates with a small gradient-boosted classifier over cheap causal signals.

Every feature of a candidate row uses data strictly before its request's time: ratings with
``rating_ts < ts``, snapshots of data before the request's day, the candidate sets of the
same user's earlier requests, and the schedule (when the interval's codes become usable).
Nothing of the row's own request (its ratings, its labels, which of its rows retrieval
returned) enters, so the scorer can run where selection runs.

Selection keeps the top share of each *request's* candidates, so ranking within a request is
what matters; :func:`within_request_auc` measures exactly that.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.linalg import svds
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import roc_auc_score

from solaris.evaluation.replay import interval_end, oracle_scores
from solaris.examples.movielens.requests import DAY, HOUR, RequestLog, flat_ranges

__all__ = [
    "FEATURES",
    "MODEL_FEATURES",
    "ExposureScorer",
    "exposure_features",
    "exposure_labels",
    "pooled_auc",
    "train_exposure_scorer",
    "train_mask",
    "within_request_auc",
]

_SPAN = 1 << 33  # composite (key, time) sort keys: epoch seconds fit below this
_GAP_CAP = 7 * DAY  # "never" for the time-since features
_RECURRENCE_WINDOW = 6 * HOUR
_HISTORY_ITEMS = 20  # the user's last items used by the history similarity
_TRANSITION_STEPS = 5  # an item "follows" another if rated within this many later ratings

# Item-item, latent-factor and transition similarities to the user's recent items
# (:func:`_session_features`).
_SESSION_FEATURES: tuple[str, ...] = (
    "session_sim_1h",
    "session_sim_1h_mean",
    "session_sim_6h",
    "history_sim_mean",
    "history_sim_pmax",
    "profile_sim_mean",
    "transition_1h",
    "transition_last",
    "cosession_1h",
    "cosession_hist",
    "ease_profile",
    "ease_hist",
    "svd_profile",
    "svd_hist",
    "svd_1h",
    "svd_cos_hist",
    "svd_cos_1h",
    "svd_pmax_hist",
)
_BASE_FEATURES: tuple[str, ...] = (
    "retrieval_score",
    "retrieval_rank",
    "retrieval_rank_share",
    "retrieval_gap_to_top",
    "pair_recent_requests",
    "pair_seen_before",
    "pair_since_last_s",
    *_SESSION_FEATURES,
    "item_pop_1h",
    "item_pop_24h",
    "item_pop_7d",
    "item_pop_share_1h",
    "item_id_gap_last",
    "user_ratings_1h",
    "user_ratings_total",
    "user_since_prev_request_s",
    "seconds_to_ready",
    "ratings_before_ready",
)
# What the scorer uses: within-request percentiles of the signals that rank a request's
# candidates the same way in every period (raw pair values let the trees learn which users
# were busy in the training weeks, which does not carry over), plus request-level context.
MODEL_FEATURES: tuple[str, ...] = (
    "ease_profile_pct",
    "ease_hist_pct",
    "cosession_1h_pct",
    "cosession_hist_pct",
    "retrieval_score_pct",
    "session_sim_1h_pct",
    "session_sim_6h_pct",
    "history_sim_pmax_pct",
    "history_sim_mean_pct",
    "profile_sim_mean_pct",
    "transition_1h_pct",
    "transition_last_pct",
    "svd_profile_pct",
    "svd_hist_pct",
    "svd_1h_pct",
    "svd_cos_hist_pct",
    "svd_cos_1h_pct",
    "svd_pmax_hist_pct",
    # Request-level context: constant within a request, so with request-balanced weights it
    # can only change how the pair signals are combined (e.g. a user deep in a session
    # against one just arriving), not rank requests against each other.
    "user_ratings_1h",
    "user_ratings_total",
    "user_since_prev_request_s",
    # When a code selected now becomes usable: what the user rates before then is lost to
    # any selection, and it is the items the pair signals rank highest that go first.
    "seconds_to_ready",
    "ratings_before_ready",
)
# The pair signals the scorer reads as their percentile within the request: selection ranks
# inside a request, and a tree fit on raw values spends itself on which requests have many
# positives (request-level variance no per-request budget can use).
RELATIVE: tuple[str, ...] = tuple(
    name.removesuffix("_pct") for name in MODEL_FEATURES if name.endswith("_pct")
)
FEATURES: tuple[str, ...] = _BASE_FEATURES + tuple(f"{name}_pct" for name in RELATIVE)

_EASE_LAMBDA = 300.0  # ridge of the EASE item-item model
_EASE_EVERY_DAYS = 7  # how often the EASE snapshot is refit (it is a matrix inverse)
_PMAX = 8.0  # power of the soft maximum of similarities (sum of sim**p)**(1/p)
_SVD_RANK = 48  # latent factors of the PureSVD snapshot (refit with the EASE one)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _ratings(log: RequestLog) -> pd.DataFrame:
    """Every rating with its own time (``rating_ts``), from the log's impressions."""
    imp = log.impressions
    return pd.DataFrame(
        {
            "user_id": imp["user_id"].to_numpy(np.int64),
            "item_id": imp["item_id"].to_numpy(np.int64),
            "ts": imp["rating_ts"].to_numpy(np.int64),
        }
    )


def _count_in(keys_sorted: np.ndarray, key: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """How many of ``keys_sorted`` (composite key * _SPAN + time) lie in [lo, hi) per row."""
    base = key * _SPAN
    return np.searchsorted(keys_sorted, base + hi, "left") - np.searchsorted(
        keys_sorted, base + lo, "left"
    )


def _rank_within(values: np.ndarray, group: np.ndarray, ascending: bool) -> np.ndarray:
    """Average rank (1 = first) of ``values`` within each ``group``."""
    return (
        pd.Series(values)
        .groupby(group)
        .rank(method="average", ascending=ascending)
        .to_numpy(np.float64)
    )


# --------------------------------------------------------------------------------------------
# Features
# --------------------------------------------------------------------------------------------


def _retrieval_features(cands: pd.DataFrame) -> dict[str, np.ndarray]:
    """The retrieval score and its place within the request (what retrieval believed)."""
    score = cands["retrieval_score"].to_numpy(np.float64)
    req = cands["request_id"].to_numpy()
    rank = _rank_within(score, req, ascending=False)
    n = pd.Series(req).groupby(req).transform("size").to_numpy(np.float64)
    top = pd.Series(score).groupby(req).transform("max").to_numpy(np.float64)
    return {
        "retrieval_score": score,
        "retrieval_rank": rank,
        "retrieval_rank_share": rank / n,
        "retrieval_gap_to_top": top - score,
    }


def _recurrence_features(cands: pd.DataFrame) -> dict[str, np.ndarray]:
    """Was the pair a candidate of the same user's earlier requests (a pair retrieval keeps
    returning is one the cache may serve again)?"""
    users = cands["user_id"].to_numpy(np.int64)
    items = cands["item_id"].to_numpy(np.int64)
    ts = cands["ts"].to_numpy(np.int64)
    _, pair = np.unique(users * (1 << 32) + items, return_inverse=True)
    keys = np.sort(pair * _SPAN + ts)
    recent = _count_in(keys, pair, ts - _RECURRENCE_WINDOW, ts)
    before = np.searchsorted(keys, pair * _SPAN + ts, "left")
    first = np.searchsorted(keys, pair * _SPAN, "left")
    seen = before > first
    last = np.where(seen, keys[np.maximum(before - 1, 0)] % _SPAN, 0)
    return {
        "pair_recent_requests": recent.astype(np.float64),
        "pair_seen_before": (before - first).astype(np.float64),
        "pair_since_last_s": np.where(seen, np.minimum(ts - last, _GAP_CAP), _GAP_CAP),
    }


def _popularity_features(cands: pd.DataFrame, ratings: pd.DataFrame) -> dict[str, np.ndarray]:
    """Trailing item popularity (what everyone is rating right now) and the user's pace."""
    items = cands["item_id"].to_numpy(np.int64)
    users = cands["user_id"].to_numpy(np.int64)
    ts = cands["ts"].to_numpy(np.int64)
    r_items = ratings["item_id"].to_numpy(np.int64)
    r_users = ratings["user_id"].to_numpy(np.int64)
    r_ts = ratings["ts"].to_numpy(np.int64)
    item_keys = np.sort(r_items * _SPAN + r_ts)
    time_keys = np.sort(r_ts)
    pop_1h = _count_in(item_keys, items, ts - HOUR, ts)
    all_1h = np.searchsorted(time_keys, ts, "left") - np.searchsorted(time_keys, ts - HOUR, "left")
    user_keys = np.sort(r_users * _SPAN + r_ts)
    return {
        "item_pop_1h": pop_1h.astype(np.float64),
        "item_pop_24h": _count_in(item_keys, items, ts - DAY, ts).astype(np.float64),
        "item_pop_7d": _count_in(item_keys, items, ts - 7 * DAY, ts).astype(np.float64),
        "item_pop_share_1h": pop_1h / np.maximum(all_1h, 1),
        "user_ratings_1h": _count_in(user_keys, users, ts - HOUR, ts).astype(np.float64),
        "user_ratings_total": _count_in(user_keys, users, np.zeros_like(ts), ts).astype(np.float64),
    }


def _request_features(log: RequestLog) -> dict[str, np.ndarray]:
    """Time since the user's previous request (how far into a session the request is)."""
    req = log.requests.sort_values(["user_id", "ts", "request_id"], kind="stable")
    gap = req.groupby("user_id")["ts"].diff().fillna(_GAP_CAP).clip(upper=_GAP_CAP)
    per_request = pd.Series(gap.to_numpy(np.float64), index=req["request_id"].to_numpy())
    at = per_request.reindex(log.candidates["request_id"].to_numpy()).to_numpy()
    return {"user_since_prev_request_s": at}


def _timing_features(
    cands: pd.DataFrame, user_ratings_1h: np.ndarray, cadence_seconds: int
) -> dict[str, np.ndarray]:
    """How long until a code selected by this request is usable (the end of its scheduling
    interval), and how many ratings the user makes in that time at the pace of their last
    hour. An exposure before then counts for nothing (:func:`oracle_scores`), so the pairs
    a busy user is about to rate are poor picks early in an interval and good ones late."""
    ts = cands["ts"].to_numpy(np.int64)
    to_ready = (interval_end(ts, cadence_seconds) - ts).astype(np.float64)
    return {
        "seconds_to_ready": to_ready,
        "ratings_before_ready": to_ready * user_ratings_1h / HOUR,
    }


def _session_features(cands: pd.DataFrame, ratings: pd.DataFrame) -> dict[str, np.ndarray]:
    """Session item-kNN: how close the candidate is to what the user has just rated.

    Item-item cosine similarity over the user x item incidence of ratings before the
    request's day (a daily snapshot, as retrieval uses), summed over the items the user rated
    in the last hour / six hours strictly before the request, and averaged over the user's
    last ``_HISTORY_ITEMS`` items. ``transition_*`` use the same snapshot of "j was rated
    within ``_TRANSITION_STEPS`` ratings after i by the same user" (row-normalised), from the
    user's items of the last hour and their very last item: users rate in sequences, and the
    sequences of earlier users say what comes next. ``item_id_gap_last`` is the id distance
    to the user's last rated item (MovieLens ids follow catalogue order).

    ``svd_*`` use latent factors: a rank-``_SVD_RANK`` truncated SVD of the same incidence
    (PureSVD, refit with the EASE snapshot), folded in from the user's items (whole profile,
    last ``_HISTORY_ITEMS``, last hour: score ``x_u V V^T``, which also serves users new that
    day through their session items), and the factor cosine of the candidate to those items
    (mean over the history, sum over the last hour, soft maximum over the history).
    """
    n_items = int(max(cands["item_id"].max(), ratings["item_id"].to_numpy().max(initial=0))) + 1
    n_users = int(max(cands["user_id"].max(), ratings["user_id"].to_numpy().max(initial=0))) + 1
    by_user = ratings.sort_values(["user_id", "ts", "item_id"], kind="stable")
    h_users = by_user["user_id"].to_numpy(np.int64)
    h_items = by_user["item_id"].to_numpy(np.int64)
    h_ts = by_user["ts"].to_numpy(np.int64)
    h_keys = h_users * _SPAN + h_ts
    user_starts = np.searchsorted(h_users, np.arange(n_users + 1))

    # Transition events (i -> j, at the time of j), from each user's rating sequence.
    src, dst, at = [], [], []
    for step in range(1, _TRANSITION_STEPS + 1):
        same = h_users[step:] == h_users[:-step]
        src.append(h_items[:-step][same])
        dst.append(h_items[step:][same])
        at.append(h_ts[step:][same])
    t_src, t_dst, t_day = np.concatenate(src), np.concatenate(dst), np.concatenate(at) // DAY
    r_day = h_ts // DAY

    req = (
        cands[["request_id", "user_id", "ts"]].drop_duplicates("request_id").reset_index(drop=True)
    )
    req_pos = pd.Index(req["request_id"].to_numpy()).get_indexer(cands["request_id"].to_numpy())
    req_users = req["user_id"].to_numpy(np.int64)
    req_ts = req["ts"].to_numpy(np.int64)
    req_day = req_ts // DAY
    stop = np.searchsorted(h_keys, req_users * _SPAN + req_ts, "left")
    start = user_starts[req_users]
    last_item = np.where(stop > start, h_items[np.maximum(stop - 1, 0)], -1)

    cand_items = cands["item_id"].to_numpy(np.int64)
    out = {name: np.zeros(len(cands)) for name in _SESSION_FEATURES}
    row_order = np.argsort(req_day[req_pos], kind="stable")
    row_days = req_day[req_pos][row_order]

    seen = sp.csr_matrix((n_users, n_items), dtype=np.float32)
    # Sessions (user, day): items rated together in one sitting, not just by one person.
    h_session = h_users * int(r_day.max() - r_day.min() + 1) + (r_day - r_day.min())
    _, h_session = np.unique(h_session, return_inverse=True)
    n_sessions = int(h_session.max()) + 1 if len(h_session) else 0
    sessions = sp.csr_matrix((n_sessions, n_items), dtype=np.float32)
    trans = sp.csr_matrix((n_items, n_items), dtype=np.float32)
    done = np.iinfo(np.int64).min
    ease = np.zeros((n_items, n_items))
    ease_day: int | None = None
    factor_dot = factor_cos = factor_cos_p = np.zeros((n_items, n_items))
    for day in np.unique(req_day):
        new = (r_day < day) & (r_day >= done)
        if new.any():
            seen = seen + sp.csr_matrix(
                (np.ones(new.sum(), np.float32), (h_users[new], h_items[new])),
                shape=(n_users, n_items),
            )
            sessions = sessions + sp.csr_matrix(
                (np.ones(new.sum(), np.float32), (h_session[new], h_items[new])),
                shape=(n_sessions, n_items),
            )
        new_t = (t_day < day) & (t_day >= done)
        if new_t.any():
            trans = trans + sp.csr_matrix(
                (np.ones(new_t.sum(), np.float32), (t_src[new_t], t_dst[new_t])),
                shape=(n_items, n_items),
            )
        done = day
        co = (seen.T @ seen).toarray()
        norm = np.sqrt(np.maximum(np.diag(co), 1.0))
        cosine = co / norm[:, None] / norm[None, :]
        np.fill_diagonal(cosine, 0.0)
        cosine_p = cosine**_PMAX
        if ease_day is None or day - ease_day >= _EASE_EVERY_DAYS:
            # EASE (Steck 2019): the ridge regression of each item on all others.
            inverse = np.linalg.inv(co + _EASE_LAMBDA * np.eye(n_items))
            ease = -inverse / np.diag(inverse)[None, :]
            np.fill_diagonal(ease, 0.0)
            ease_day = day
            factor_dot, factor_cos, factor_cos_p = _svd_snapshot(seen)
        co_s = (sessions.T @ sessions).toarray()
        norm_s = np.sqrt(np.maximum(np.diag(co_s), 1.0))
        cosine_s = co_s / norm_s[:, None] / norm_s[None, :]
        np.fill_diagonal(cosine_s, 0.0)
        out_deg = np.asarray(trans.sum(axis=1)).ravel()
        trans_p = sp.diags(1.0 / np.maximum(out_deg, 1.0)).astype(np.float32) @ trans

        batch = np.flatnonzero(req_day == day)
        n = len(batch)
        u, t = req_users[batch], req_ts[batch]

        def recent(lo: np.ndarray, batch=batch, n=n) -> sp.csr_matrix:
            rows, flat = flat_ranges(lo, stop[batch])
            return sp.csr_matrix(
                (np.ones(len(rows), np.float32), (rows, h_items[flat])), shape=(n, n_items)
            )

        lo_1h = np.searchsorted(h_keys, u * _SPAN + t - HOUR, "left")
        lo_6h = np.searchsorted(h_keys, u * _SPAN + t - 6 * HOUR, "left")
        lo_hist = np.maximum(start[batch], stop[batch] - _HISTORY_ITEMS)
        m_1h, m_6h, m_hist = recent(lo_1h), recent(lo_6h), recent(lo_hist)
        m_all = recent(start[batch])
        n_all = np.maximum(stop[batch] - start[batch], 1)
        last = sp.csr_matrix(
            (
                np.ones(int((last_item[batch] >= 0).sum()), np.float32),
                (np.flatnonzero(last_item[batch] >= 0), last_item[batch][last_item[batch] >= 0]),
            ),
            shape=(n, n_items),
        )
        n_1h = np.maximum(stop[batch] - lo_1h, 1)
        n_hist = np.maximum(stop[batch] - lo_hist, 1)

        a, b = np.searchsorted(row_days, [day, day + 1])
        rows = row_order[a:b]
        local = np.searchsorted(batch, req_pos[rows])
        items = cand_items[rows]
        s_1h = np.asarray(m_1h @ cosine)[local, items]
        out["session_sim_1h"][rows] = s_1h
        out["session_sim_1h_mean"][rows] = s_1h / n_1h[local]
        out["session_sim_6h"][rows] = np.asarray(m_6h @ cosine)[local, items]
        out["history_sim_mean"][rows] = np.asarray(m_hist @ cosine)[local, items] / n_hist[local]
        out["history_sim_pmax"][rows] = np.asarray(m_hist @ cosine_p)[local, items] ** (1 / _PMAX)
        out["profile_sim_mean"][rows] = np.asarray(m_all @ cosine)[local, items] / n_all[local]
        out["cosession_1h"][rows] = np.asarray(m_1h @ cosine_s)[local, items]
        out["cosession_hist"][rows] = np.asarray(m_hist @ cosine_s)[local, items] / n_hist[local]
        out["ease_profile"][rows] = np.asarray(m_all @ ease)[local, items]
        out["ease_hist"][rows] = np.asarray(m_hist @ ease)[local, items]
        out["svd_profile"][rows] = np.asarray(m_all @ factor_dot)[local, items]
        out["svd_hist"][rows] = np.asarray(m_hist @ factor_dot)[local, items]
        out["svd_1h"][rows] = np.asarray(m_1h @ factor_dot)[local, items]
        out["svd_cos_hist"][rows] = np.asarray(m_hist @ factor_cos)[local, items] / n_hist[local]
        out["svd_cos_1h"][rows] = np.asarray(m_1h @ factor_cos)[local, items]
        pmax = np.asarray(m_hist @ factor_cos_p)[local, items]
        out["svd_pmax_hist"][rows] = pmax ** (1 / _PMAX)
        out["transition_1h"][rows] = np.asarray((m_1h @ trans_p).todense())[local, items]
        out["transition_last"][rows] = np.asarray((last @ trans_p).todense())[local, items]

    gap = np.abs(cand_items - last_item[req_pos]).astype(np.float64)
    out["item_id_gap_last"] = np.where(last_item[req_pos] >= 0, gap, float(n_items))
    return out


def _svd_snapshot(seen: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Item x item PureSVD scores ``V V^T``, factor cosine and its positive part to the
    power ``_PMAX`` (zero diagonals) of a rank-``_SVD_RANK`` SVD of the 0/1 incidence."""
    n_items = seen.shape[1]
    # Only the users and items with ratings, so that the result does not depend on the
    # matrix's shape (which later users and items set).
    users = np.flatnonzero(seen.getnnz(axis=1))
    active = np.flatnonzero(seen.getnnz(axis=0))
    rank = min(_SVD_RANK, len(users) - 1, len(active) - 1)
    zero = np.zeros((n_items, n_items))
    if rank < 1:
        return zero, zero, zero
    incidence = seen[users][:, active].astype(np.float64)
    incidence.data[:] = 1.0
    _, _, vt = svds(incidence, k=rank, random_state=0)
    factors = np.zeros((n_items, rank))
    factors[active] = vt.T
    dot = factors @ factors.T
    unit = factors / np.maximum(np.linalg.norm(factors, axis=1), 1e-9)[:, None]
    cos = unit @ unit.T
    np.fill_diagonal(dot, 0.0)
    np.fill_diagonal(cos, 0.0)
    return dot, cos, np.maximum(cos, 0.0) ** _PMAX


def exposure_features(log: RequestLog, *, cadence_seconds: int) -> pd.DataFrame:
    """Causal features of every row of ``log.candidates`` (float32, same row order).

    ``log.candidates`` needs ``retrieval_score`` (as :func:`build_request_log` gives);
    ``cadence_seconds`` is the candidates DAG's interval (selections become usable at its
    end). Columns are :data:`FEATURES`; see the ``_*_features`` helpers for what each means.
    """
    if cadence_seconds <= 0:
        raise ValueError(f"cadence_seconds must be positive, got {cadence_seconds}")
    cands = log.candidates
    ratings = _ratings(log)
    parts: dict[str, np.ndarray] = {}
    parts.update(_retrieval_features(cands))
    parts.update(_recurrence_features(cands))
    parts.update(_popularity_features(cands, ratings))
    parts.update(_request_features(log))
    parts.update(_timing_features(cands, parts["user_ratings_1h"], cadence_seconds))
    parts.update(_session_features(cands, ratings))
    req = cands["request_id"].to_numpy()
    n = pd.Series(req).groupby(req).transform("size").to_numpy(np.float64)
    for name in RELATIVE:
        parts[f"{name}_pct"] = _rank_within(parts[name], req, ascending=True) / n
    return pd.DataFrame({name: parts[name].astype(np.float32) for name in FEATURES})


# --------------------------------------------------------------------------------------------
# Labels, training window and the scorer
# --------------------------------------------------------------------------------------------


def exposure_labels(
    candidates: pd.DataFrame, *, ttl_seconds: int, cadence_seconds: int
) -> np.ndarray:
    """0/1 (int8) per candidate row: does its pair get a labelled impression while an
    embedding selected now would be fresh (:func:`oracle_scores`, the selection target)."""
    return oracle_scores(
        candidates, ttl_seconds=ttl_seconds, cadence_seconds=cadence_seconds
    ).astype(np.int8)


def train_mask(
    candidates: pd.DataFrame,
    *,
    train_from: int,
    train_end: int,
    ttl_seconds: int,
    cadence_seconds: int,
) -> np.ndarray:
    """Rows usable for training: ``train_from <= ts`` and the label's horizon (the end of
    the row's interval plus the TTL) ends strictly before ``train_end``, so no label looks
    at an impression at or after ``train_end``."""
    ts = candidates["ts"].to_numpy(np.int64)
    horizon = interval_end(ts, cadence_seconds) + ttl_seconds
    return (ts >= train_from) & (horizon < train_end)


@dataclass
class ExposureScorer:
    """A gradient-boosted P(exposure within the TTL) over :data:`MODEL_FEATURES`.

    Fit with request-balanced weights when ``request_id`` is given (each request's positives
    and its negatives weigh the same, requests with one class not at all): selection ranks
    within a request, and an unweighted fit spends itself on telling busy requests from idle
    ones, which on MovieLens also overfits the training weeks (within-request AUC 0.60 on
    test against 0.66 weighted). The score is then a probability under that balanced
    weighting: right for ranking a request's candidates, not calibrated across requests.
    Negatives are thinned to ``neg_per_pos`` per positive for speed (weights undo it).
    """

    model: HistGradientBoostingClassifier
    features: tuple[str, ...]
    negative_rate: float  # share of negatives kept when fitting
    fit_seconds: float = field(default=0.0, compare=False)

    @classmethod
    def fit(
        cls,
        features: pd.DataFrame,
        labels: np.ndarray,
        seed: int,
        *,
        request_id: np.ndarray | None = None,
        neg_per_pos: float = 3.0,
        max_iter: int = 100,
        min_samples_leaf: int = 2000,
    ) -> ExposureScorer:
        """Fit on ``features`` (with the :data:`MODEL_FEATURES` columns) and 0/1 ``labels``;
        deterministic for a ``seed``."""
        start = time.perf_counter()
        y = np.asarray(labels, dtype=np.int8)
        if len(y) != len(features):
            raise ValueError(f"{len(y)} labels for {len(features)} feature rows")
        if y.min(initial=1) == y.max(initial=0):
            raise ValueError("exposure labels need both classes to fit")
        weight = np.ones(len(y))
        if request_id is not None:
            weight = _request_balanced_weights(y, np.asarray(request_id))
        rng = np.random.default_rng(seed)
        n_pos, n_neg = int(y.sum()), int((y == 0).sum())
        rate = min(1.0, neg_per_pos * n_pos / max(n_neg, 1))
        keep = ((y == 1) | (rng.random(len(y)) < rate)) & (weight > 0)
        weight = np.where(y == 1, weight, weight / rate)
        names = tuple(MODEL_FEATURES)
        model = HistGradientBoostingClassifier(
            learning_rate=0.1,
            max_iter=max_iter,
            max_leaf_nodes=15,
            min_samples_leaf=min_samples_leaf,
            l2_regularization=1.0,
            early_stopping=False,
            random_state=seed,
        )
        x = features.loc[keep, list(names)].to_numpy(np.float32)
        # Mean weight 1, so that the L2 penalty and leaf sizes mean what they say.
        weight = weight[keep] / max(weight[keep].mean(), 1e-12)
        model.fit(x, y[keep], sample_weight=weight)
        return cls(model, names, rate, time.perf_counter() - start)

    def score(self, features: pd.DataFrame) -> np.ndarray:
        """P(exposure) per row (float32), under the fitting weights (see the class)."""
        x = features[list(self.features)].to_numpy(np.float32)
        return self.model.predict_proba(x)[:, 1].astype(np.float32)


def _request_balanced_weights(y: np.ndarray, request_id: np.ndarray) -> np.ndarray:
    """1 / (number of rows of the same class in the request); 0 in one-class requests."""
    frame = pd.DataFrame({"req": request_id, "y": y.astype(np.int64)})
    n_pos = frame.groupby("req")["y"].transform("sum").to_numpy()
    n_neg = frame.groupby("req")["y"].transform("size").to_numpy() - n_pos
    weight = np.where(y == 1, 1.0 / np.maximum(n_pos, 1), 1.0 / np.maximum(n_neg, 1))
    return np.where((n_pos > 0) & (n_neg > 0), weight, 0.0)


def train_exposure_scorer(
    log: RequestLog,
    features: pd.DataFrame,
    *,
    train_from: int,
    train_end: int,
    ttl_seconds: int,
    cadence_seconds: int,
    seed: int,
) -> ExposureScorer:
    """Fit an :class:`ExposureScorer` on the candidate rows of :func:`train_mask`, labelled by
    :func:`exposure_labels` (computed on the whole log, but only for rows whose horizon ends
    before ``train_end``, so no label reads past it)."""
    mask = train_mask(
        log.candidates,
        train_from=train_from,
        train_end=train_end,
        ttl_seconds=ttl_seconds,
        cadence_seconds=cadence_seconds,
    )
    # Label from the rows before train_end only: the mask keeps rows whose window ends
    # before it, so their labels are the same as on the whole log, and nothing later is read.
    visible = log.candidates["ts"].to_numpy() < train_end
    labels = np.zeros(len(mask), np.int8)
    labels[visible] = exposure_labels(
        log.candidates[visible], ttl_seconds=ttl_seconds, cadence_seconds=cadence_seconds
    )
    return ExposureScorer.fit(
        features[mask].reset_index(drop=True),
        labels[mask],
        seed,
        request_id=log.candidates["request_id"].to_numpy()[mask],
    )


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------


def within_request_auc(scores: np.ndarray, labels: np.ndarray, request_id: np.ndarray) -> float:
    """Mean over requests with both classes of the ROC AUC of ``scores`` inside the request
    (ties count one half): the ranking quality per-request selection depends on. NaN when no
    request has both classes. :func:`pooled_auc` is the AUC over all rows at once."""
    y = np.asarray(labels).astype(np.float64)
    req = np.asarray(request_id)
    ranks = _rank_within(np.asarray(scores, dtype=np.float64), req, ascending=True)
    frame = pd.DataFrame({"req": req, "pos": y, "rank_pos": ranks * y})
    g = frame.groupby("req", sort=False)
    n_pos = g["pos"].sum().to_numpy()
    n = g["pos"].size().to_numpy()
    r_pos = g["rank_pos"].sum().to_numpy()
    n_neg = n - n_pos
    both = (n_pos > 0) & (n_neg > 0)
    if not both.any():
        return float("nan")
    per = (r_pos[both] - n_pos[both] * (n_pos[both] + 1) / 2) / (n_pos[both] * n_neg[both])
    return float(per.mean())


def pooled_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC over all rows at once (arguments in :func:`within_request_auc`'s order; any
    real scores, not only probabilities, unlike :func:`solaris.evaluation.metrics.auc`).
    NaN when ``labels`` has one class only. It also rewards telling busy requests from idle
    ones, which per-request selection cannot use."""
    y = np.asarray(labels).astype(np.int8)
    if y.min(initial=1) == y.max(initial=0):
        return float("nan")
    return float(roc_auc_score(y, np.asarray(scores, dtype=np.float64)))
