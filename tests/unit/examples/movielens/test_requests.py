"""Tests for ``solaris.examples.movielens.requests``: bucketing, causal retrieval and the
request log.

The no-leakage rules come first: every candidate of a request must be explainable from the
ratings strictly before the request time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from solaris.config import RequestLogConfig
from solaris.examples.movielens.data import LIKE_THRESHOLD
from solaris.examples.movielens.requests import (
    RequestLog,
    bucket_requests,
    build_request_log,
    earlier_candidate_within,
    request_log_stats,
    retrieve,
)

HOUR = 3600


def _items_by_request(frame: pd.DataFrame) -> dict[int, set[int]]:
    return {int(r): set(g.tolist()) for r, g in frame.groupby("request_id")["item_id"]}


def _unlabelled(log: RequestLog) -> pd.DataFrame:
    return log.candidates[log.candidates["label"].isna()]


def _labelled(log: RequestLog) -> pd.DataFrame:
    return log.candidates[log.candidates["label"].notna()]


# --- (a) retrieval candidates come from data strictly before the request -----------------


def test_retrieval_candidates_recomputed_from_the_past_only(tiny_ml, tiny_log, log_cfg):
    ratings = tiny_ml.ratings
    n_items = int(ratings["item_id"].max()) + 1
    unlabelled = _items_by_request(_unlabelled(tiny_log))
    labelled = _items_by_request(_labelled(tiny_log))
    requests = tiny_log.requests
    # From the very first request (no past at all) to the last.
    sample = requests.iloc[np.linspace(0, len(requests) - 1, 25).astype(int)]
    for request in sample.itertuples(index=False):
        past = ratings[ratings["ts"] < request.ts]
        again = retrieve(past, sample[sample["request_id"] == request.request_id], n_items, log_cfg)
        own = labelled[request.request_id]
        assert unlabelled.get(request.request_id, set()) == set(again["item_id"]) - own


def test_retrieval_ignores_the_future(tiny_ml, log_cfg):
    """Dropping or changing every rating at or after a request's time changes nothing."""
    ratings = tiny_ml.ratings
    n_items = int(ratings["item_id"].max()) + 1
    requests = build_request_log(ratings, log_cfg).requests
    t = int(requests["ts"].iloc[len(requests) // 2])
    now = requests[requests["ts"] == t]
    future = ratings["ts"] >= t
    scrambled = ratings.copy()
    rng = np.random.default_rng(1)
    scrambled.loc[future, "item_id"] = rng.integers(1, n_items, int(future.sum()))
    a = retrieve(ratings, now, n_items, log_cfg)
    b = retrieve(scrambled, now, n_items, log_cfg)
    c = retrieve(ratings[~future], now, n_items, log_cfg)
    for other in (b, c):
        pd.testing.assert_frame_equal(
            a.sort_values(["request_id", "item_id"], ignore_index=True),
            other.sort_values(["request_id", "item_id"], ignore_index=True),
        )


def test_no_candidate_was_rated_by_the_user_before_the_request(tiny_ml, tiny_log):
    first = tiny_ml.ratings.groupby(["user_id", "item_id"])["ts"].min().rename("first_ts")
    cands = tiny_log.candidates.join(first, on=["user_id", "item_id"])
    rated_before = cands["first_ts"].notna() & (cands["first_ts"] < cands["ts"])
    assert not rated_before.any()


def test_retrieve_never_returns_item_zero_or_rated_items(tiny_ml, log_cfg):
    ratings = tiny_ml.ratings
    log = build_request_log(ratings, log_cfg)
    got = retrieve(ratings, log.requests, int(ratings["item_id"].max()) + 1, log_cfg)
    assert list(got.columns) == ["request_id", "item_id", "retrieval_score"]
    assert (got["item_id"] > 0).all()
    assert np.isfinite(got["retrieval_score"]).all()
    got = got.merge(log.requests, on="request_id")
    before = ratings.merge(got, on=["user_id", "item_id"], suffixes=("_rating", ""))
    assert not (before["ts_rating"] < before["ts"]).any()


def test_retrieve_cold_start_user(tiny_ml, log_cfg):
    """A user with no past rating, and an id above every past user's, gets popularity."""
    ratings = tiny_ml.ratings
    n_items = int(ratings["item_id"].max()) + 1
    t = int(ratings["ts"].iloc[len(ratings) // 2])
    past = ratings[(ratings["ts"] < t) & (ratings["user_id"] < 20)]
    request = pd.DataFrame({"request_id": [0], "user_id": [25], "ts": [t]})
    got = retrieve(past, request, n_items, log_cfg)
    assert len(got) == log_cfg.retrieval_k
    assert (got["request_id"] == 0).all() and (got["item_id"] > 0).all()
    # Scores are trailing popularity only (normalised): the top-k most rated in the window.
    day = t // 86_400
    past_day = past["ts"] // 86_400
    window = past[(past_day < day) & (past_day >= day - log_cfg.popularity_window_days)]
    popularity = window["item_id"].value_counts().reindex(range(1, n_items), fill_value=0)
    popularity = popularity / popularity.max()
    kth = popularity.sort_values(ascending=False).iloc[log_cfg.retrieval_k - 1]
    assert got["retrieval_score"].max() == pytest.approx(1.0)
    assert (got["retrieval_score"] >= kth - 1e-6).all()
    assert np.allclose(got["retrieval_score"], popularity[got["item_id"]].to_numpy())


def test_retrieve_with_no_past_at_all(tiny_ml, log_cfg):
    n_items = int(tiny_ml.ratings["item_id"].max()) + 1
    request = pd.DataFrame({"request_id": [7], "user_id": [3], "ts": [10**9]})
    got = retrieve(tiny_ml.ratings.iloc[:0], request, n_items, log_cfg)
    assert len(got) == log_cfg.retrieval_k
    assert (got["retrieval_score"] == 0).all() and (got["item_id"] > 0).all()


# --- (b) labelled candidates = the items rated in the bucket -----------------------------


def test_labelled_candidates_are_exactly_the_bucket_ratings(tiny_ml, tiny_log, log_cfg):
    ratings = tiny_ml.ratings
    bucket = ratings["ts"] // log_cfg.bucket_seconds
    expected = {
        (int(u), int(b)): dict(zip(g["item_id"], g["rating"], strict=True))
        for (u, b), g in ratings.assign(bucket=bucket).groupby(["user_id", "bucket"])
    }
    labelled = _labelled(tiny_log)
    got: dict[tuple[int, int], dict[int, int]] = {}
    for (u, ts), g in labelled.groupby(["user_id", "ts"]):
        key = (int(u), int(ts) // log_cfg.bucket_seconds)
        got[key] = dict(zip(g["item_id"], g["label"].astype(int), strict=True))
    assert got.keys() == expected.keys()
    for key, items in expected.items():
        assert got[key] == {i: int(r >= LIKE_THRESHOLD) for i, r in items.items()}
    # Impressions are the labelled candidates, with their rating and rating time.
    imp = tiny_log.impressions
    assert len(imp) == len(labelled) == len(ratings)
    merged = imp.merge(ratings, left_on=["user_id", "item_id"], right_on=["user_id", "item_id"])
    assert (merged["rating_x"] == merged["rating_y"]).all()
    assert (merged["rating_ts"] == merged["ts_y"]).all()
    assert (merged["ts_x"] <= merged["rating_ts"]).all()
    assert (merged["rating_ts"] - merged["ts_x"] < log_cfg.bucket_seconds).all()
    assert (imp["label"] == (imp["rating"] >= LIKE_THRESHOLD)).all()


def test_label_dtype_is_nullable_and_only_unlabelled_are_null(tiny_log):
    cands = tiny_log.candidates
    assert cands["label"].dtype == pd.Int8Dtype()
    assert set(cands["label"].dropna().unique()) <= {0, 1}
    assert cands["label"].isna().any()
    assert list(cands.columns) == [
        "request_id",
        "user_id",
        "item_id",
        "ts",
        "label",
        "retrieval_score",
    ]
    assert cands["retrieval_score"].dtype == np.float32


# --- (c) one request per (user, bucket), at its first rating -----------------------------


def test_bucket_requests_by_hand():
    ratings = pd.DataFrame(
        {
            "user_id": [1, 1, 2, 1, 2, 1],
            "item_id": [10, 11, 10, 12, 13, 14],
            "rating": [5, 3, 4, 2, 1, 4],
            "ts": [125, 170, 120, 179, 181, 300],
        }
    )
    out = bucket_requests(ratings, bucket_seconds=60)
    got = {
        (u, i): (t, r)
        for u, i, t, r in out[["user_id", "item_id", "request_ts", "request_id"]].itertuples(
            index=False, name=None
        )
    }
    # buckets: user 1 -> [120, 180): 125, 170, 179; [300, 360): 300; user 2 -> 120; 181.
    # ids increase with (request_ts, user): (120, u2)=0, (125, u1)=1, (181, u2)=2, (300, u1)=3
    assert got == {
        (2, 10): (120, 0),
        (1, 10): (125, 1), (1, 11): (125, 1), (1, 12): (125, 1),
        (2, 13): (181, 2),
        (1, 14): (300, 3),
    }  # fmt: skip
    assert out["request_id"].is_monotonic_increasing
    assert (out["ts"] >= out["request_ts"]).all()
    assert len(out) == len(ratings)


def test_requests_one_per_user_bucket_at_first_rating(tiny_ml, tiny_log, log_cfg):
    ratings = tiny_ml.ratings
    bucket = ratings["ts"] // log_cfg.bucket_seconds
    first = ratings.assign(bucket=bucket).groupby(["user_id", "bucket"])["ts"].min()
    req = tiny_log.requests
    assert list(req.columns) == ["request_id", "user_id", "ts"]
    assert len(req) == len(first)
    got = req.set_index(["user_id", req["ts"] // log_cfg.bucket_seconds])["ts"]
    assert not got.index.duplicated().any()
    assert got.sort_index().to_dict() == first.to_dict()


def test_request_ids_increase_with_ts_then_user(tiny_log):
    req = tiny_log.requests
    assert req["request_id"].tolist() == list(range(len(req)))
    keys = list(zip(req["ts"], req["user_id"], strict=True))
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)


# --- (d) ordering and uniqueness ---------------------------------------------------------


def test_frames_sorted_by_ts_then_request(tiny_log):
    for frame in (tiny_log.requests, tiny_log.candidates, tiny_log.impressions):
        keys = list(zip(frame["ts"], frame["request_id"], strict=True))
        assert keys == sorted(keys)


def test_no_duplicate_request_item(tiny_log):
    cands = tiny_log.candidates
    assert not cands.duplicated(["request_id", "item_id"]).any()
    assert cands.index.equals(pd.RangeIndex(len(cands)))


def test_candidates_carry_their_request_user_and_ts(tiny_log):
    joined = tiny_log.candidates.merge(tiny_log.requests, on="request_id", suffixes=("", "_req"))
    assert len(joined) == len(tiny_log.candidates)
    assert (joined["user_id"] == joined["user_id_req"]).all()
    assert (joined["ts"] == joined["ts_req"]).all()


# --- (e) earlier_candidate_within --------------------------------------------------------


def test_earlier_candidate_within_by_hand():
    t0 = 1_000
    cands = pd.DataFrame(
        [  # request_id, user_id, item_id, ts
            (0, 1, 5, t0),
            (0, 1, 5, t0),  # same request (gap 0): not an earlier request
            (1, 2, 5, t0 + 50),  # another user's candidate does not count for user 1
            (2, 1, 5, t0 + 100),  # 100 s after request 0: hit
            (2, 1, 6, t0 + 100),  # another item: no
            (3, 1, 5, t0 + 100 + 7 * HOUR),  # 7 h after the previous one: no (6 h window)
            (4, 1, 5, t0 + 100 + 13 * HOUR),  # exactly 6 h later: hit (at most the window)
        ],
        columns=["request_id", "user_id", "item_id", "ts"],
    )
    expected = [False, False, False, True, False, False, True]
    assert earlier_candidate_within(cands, 6 * HOUR).tolist() == expected
    assert earlier_candidate_within(cands, 8 * HOUR).tolist() == [
        False, False, False, True, False, True, True,
    ]  # fmt: skip
    # Aligned with the input rows, whatever their order.
    shuffled = cands.iloc[[6, 2, 0, 5, 3, 1, 4]].reset_index(drop=True)
    assert earlier_candidate_within(shuffled, 6 * HOUR).tolist() == [
        expected[k] for k in (6, 2, 0, 5, 3, 1, 4)
    ]


# --- (f) request_log_stats ---------------------------------------------------------------


def _hand_log() -> RequestLog:
    requests = pd.DataFrame(
        [(0, 1, 0), (1, 2, 0), (2, 1, HOUR), (3, 1, 10 * HOUR), (4, 1, 10 * HOUR + 600)],
        columns=["request_id", "user_id", "ts"],
    )
    rows = [  # request_id, item_id, label
        (0, 1, 1), (0, 2, None),
        (1, 1, None), (1, 2, 1),
        (2, 1, None), (2, 2, 1), (2, 3, 0),
        (3, 1, None), (3, 3, 1),
        (4, 3, None),
    ]  # fmt: skip
    cands = pd.DataFrame(rows, columns=["request_id", "item_id", "label"]).merge(
        requests, on="request_id"
    )
    cands = cands[["request_id", "user_id", "item_id", "ts", "label"]].astype({"label": "Int8"})
    imp = cands[cands["label"].notna()].assign(rating=4, rating_ts=lambda f: f["ts"])
    return RequestLog(requests=requests, candidates=cands, impressions=imp)


def test_request_log_stats_by_hand():
    stats = request_log_stats(_hand_log(), window_hours=6.0)
    # recurred rows: (2, 1) and (2, 2) (1 h after request 0), (4, 3) (10 min after request 3).
    # per request: 0 -> 0, 1 -> 0, 2 -> 2/3, 3 -> 0 (9 h after request 2), 4 -> 1.
    assert stats.n_requests == 5
    assert stats.n_candidates == 10
    assert stats.mean_candidates == pytest.approx(2.0)
    assert stats.mean_impressions == pytest.approx(1.0)
    assert stats.recurrence == pytest.approx((2 / 3 + 1) / 5)
    # requests with an earlier one of the same user within 6 h: 2 and 4.
    assert stats.recurrence_with_prior == pytest.approx((2 / 3 + 1) / 2)
    # labelled rows: (0,1) (1,2) (2,2) (2,3) (3,3); only (2,2) was an earlier candidate.
    assert stats.retrieval_recall == pytest.approx(1 / 5)


def test_request_log_stats_window_by_hand():
    stats = request_log_stats(_hand_log(), window_hours=10.0)
    # Now request 3 (9 h after request 2) recurs fully: (3,1) and (3,3).
    assert stats.recurrence == pytest.approx((2 / 3 + 1 + 1) / 5)
    assert stats.recurrence_with_prior == pytest.approx((2 / 3 + 1 + 1) / 3)
    assert stats.retrieval_recall == pytest.approx(2 / 5)


def test_request_log_stats_no_prior():
    log = _hand_log()
    stats = request_log_stats(log, window_hours=0.1)  # 6 minutes: nothing recurs
    assert stats.recurrence == 0.0
    assert stats.recurrence_with_prior == 0.0
    assert stats.retrieval_recall == 0.0


def test_request_log_stats_on_fixture_are_consistent(tiny_log):
    stats = request_log_stats(tiny_log)
    assert stats.n_requests == len(tiny_log.requests)
    assert stats.n_candidates == len(tiny_log.candidates)
    for share in (stats.recurrence, stats.recurrence_with_prior, stats.retrieval_recall):
        assert 0.0 <= share <= 1.0
    assert stats.recurrence_with_prior >= stats.recurrence  # first requests cannot recur


# --- (g) determinism ---------------------------------------------------------------------


def test_build_request_log_is_deterministic(tiny_ml, log_cfg):
    a = build_request_log(tiny_ml.ratings, log_cfg)
    b = build_request_log(tiny_ml.ratings.copy(), log_cfg)
    for name in ("requests", "candidates", "impressions"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))


def test_build_request_log_ignores_input_row_order(tiny_ml, log_cfg):
    ratings = tiny_ml.ratings
    shuffled = ratings.sample(frac=1.0, random_state=3).reset_index(drop=True)
    a = build_request_log(ratings, log_cfg)
    b = build_request_log(shuffled, log_cfg)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.candidates, b.candidates)


# --- (h) retrieval_k ---------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3, 8])
def test_retrieval_k_caps_unlabelled_candidates(tiny_ml, k):
    cfg = RequestLogConfig(retrieval_k=k)
    log = build_request_log(tiny_ml.ratings, cfg)
    per_request = _unlabelled(log).groupby("request_id").size()
    assert per_request.max() <= k
    assert (per_request == k).mean() > 0.5  # the cap binds (40 items, few rated)
    n_labelled = _labelled(log).groupby("request_id").size()
    # Each request keeps at least k minus the retrieved items it rated in the bucket.
    lower = (k - n_labelled.reindex(log.requests["request_id"]).to_numpy()).clip(0)
    got = per_request.reindex(log.requests["request_id"], fill_value=0).to_numpy()
    assert (got >= lower).all()


def test_retrieval_k_larger_than_the_catalogue(tiny_ml):
    ratings = tiny_ml.ratings
    log = build_request_log(ratings, RequestLogConfig(retrieval_k=1_000))
    n_items = int(ratings["item_id"].max())  # ids 1..n_items
    per_request = log.candidates.groupby("request_id").size()
    assert per_request.max() <= n_items
    # With no cap, a request sees every item the user has not rated before it.
    first = log.requests.iloc[0]
    assert per_request[first["request_id"]] == n_items
