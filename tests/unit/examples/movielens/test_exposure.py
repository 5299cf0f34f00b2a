"""Tests for ``solaris.examples.movielens.exposure``: causal features, the exposure label,
the training window, the within-request AUC and the scorer's determinism; and the
``retrieval_score`` the request log now carries for every candidate.

Causality comes first: a row's features must be the same whatever happens at or after its
request's time (its own request's ratings included).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from solaris.evaluation.replay import interval_end, oracle_scores
from solaris.examples.movielens.exposure import (
    FEATURES,
    MODEL_FEATURES,
    ExposureScorer,
    exposure_features,
    exposure_labels,
    pooled_auc,
    train_exposure_scorer,
    train_mask,
    within_request_auc,
)
from solaris.examples.movielens.requests import HOUR, RequestLog, retrieve

TTL, CADENCE = 6 * HOUR, 900


# --- retrieval_score on every candidate --------------------------------------------------


def test_every_candidate_has_a_float32_retrieval_score(tiny_log):
    score = tiny_log.candidates["retrieval_score"]
    assert score.dtype == np.float32
    assert np.isfinite(score.to_numpy()).all()


def test_retrieval_score_matches_retrieve_for_retrieved_and_injected_rows(
    tiny_ml, tiny_log, log_cfg
):
    ratings = tiny_ml.ratings
    n_items = int(ratings["item_id"].max()) + 1
    cands = tiny_log.candidates
    labelled = cands[cands["label"].notna()]
    got = retrieve(
        ratings, tiny_log.requests, n_items, log_cfg, pairs=labelled[["request_id", "item_id"]]
    )
    top = retrieve(ratings, tiny_log.requests, n_items, log_cfg)
    # The top-K part is exactly what retrieve returns without pairs.
    pd.testing.assert_frame_equal(
        got[got["retrieved"]].drop(columns="retrieved").reset_index(drop=True), top
    )
    joined = cands.merge(got, on=["request_id", "item_id"], how="left", suffixes=("", "_r"))
    assert joined["retrieval_score_r"].notna().all()
    np.testing.assert_array_equal(
        joined["retrieval_score"].to_numpy(), joined["retrieval_score_r"].to_numpy(np.float32)
    )
    # Some labelled rows were injected (retrieval missed them), and they are scored too.
    injected = joined[~joined["retrieved"].astype(bool)]
    assert len(injected) > 0 and injected["label"].notna().all()


# --- causal features ---------------------------------------------------------------------


def _future_changed(log: RequestLog, t: int, seed: int = 3) -> RequestLog:
    """The log with everything at or after ``t`` changed: ratings (the requests at ``t``
    included) get other items and times, later requests lose or change candidates. Rows at
    ``t`` keep their candidate set (that is the input a selector sees)."""
    rng = np.random.default_rng(seed)
    imp = log.impressions.copy()
    late = imp["ts"].to_numpy() >= t
    n_items = int(log.candidates["item_id"].max())
    imp.loc[late, "item_id"] = rng.integers(1, n_items + 1, int(late.sum()))
    imp.loc[late, "rating_ts"] = imp.loc[late, "rating_ts"] + rng.integers(0, 50, int(late.sum()))
    cands = log.candidates
    after = cands["ts"].to_numpy() > t
    keep = ~after | (rng.random(len(cands)) < 0.5)
    cands = cands[keep].copy()
    later = cands["ts"].to_numpy() > t
    cands.loc[later, "retrieval_score"] = rng.random(int(later.sum())).astype(np.float32)
    cands.loc[later, "label"] = pd.NA
    return RequestLog(
        requests=log.requests, candidates=cands.reset_index(drop=True), impressions=imp
    )


def test_features_ignore_everything_at_or_after_the_request(tiny_log):
    ts = tiny_log.requests["ts"].to_numpy()
    t = int(np.sort(ts)[len(ts) // 2])
    before = exposure_features(tiny_log, cadence_seconds=CADENCE)
    after = exposure_features(_future_changed(tiny_log, t), cadence_seconds=CADENCE)
    upto = tiny_log.candidates["ts"].to_numpy() <= t
    assert upto.sum() > 0 and (~upto).sum() > 0
    pd.testing.assert_frame_equal(before[upto], after[: int(upto.sum())])


def test_features_are_float32_aligned_and_informative(tiny_log):
    feats = exposure_features(tiny_log, cadence_seconds=CADENCE)
    assert list(feats.columns) == list(FEATURES)
    assert set(MODEL_FEATURES) <= set(FEATURES)
    assert len(feats) == len(tiny_log.candidates)
    assert (feats.dtypes == np.float32).all()
    assert np.isfinite(feats.to_numpy()).all()
    np.testing.assert_array_equal(
        feats["retrieval_score"].to_numpy(), tiny_log.candidates["retrieval_score"].to_numpy()
    )
    # The session signals are not all zero (the fake users rate in sessions).
    assert (feats["session_sim_6h"] > 0).any() and (feats["history_sim_mean"] > 0).any()
    # The latent-factor signals too (the SVD snapshot exists once a day has ratings).
    assert (feats["svd_profile"] != 0).any() and (feats["svd_cos_hist"] != 0).any()


# --- labels and the training window ------------------------------------------------------


def test_labels_are_the_oracle_as_int8(tiny_log):
    got = exposure_labels(tiny_log.candidates, ttl_seconds=TTL, cadence_seconds=CADENCE)
    want = oracle_scores(tiny_log.candidates, ttl_seconds=TTL, cadence_seconds=CADENCE)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want.astype(np.int8))


def test_train_mask_keeps_only_rows_whose_label_horizon_ends_before_train_end():
    ts = np.array([0, 1000, 5000, 10_000, 20_000, 30_000], np.int64)
    cands = pd.DataFrame({"ts": ts})
    got = train_mask(
        cands, train_from=1000, train_end=30_000, ttl_seconds=10_000, cadence_seconds=900
    )
    horizon = interval_end(ts, 900) + 10_000
    np.testing.assert_array_equal(got, (ts >= 1000) & (horizon < 30_000))
    assert got.tolist() == [False, True, True, True, False, False]


def test_trained_scorer_does_not_read_past_train_end(tiny_log):
    feats = exposure_features(tiny_log, cadence_seconds=CADENCE)
    ts = tiny_log.candidates["ts"].to_numpy()
    start, end = int(ts.min()), int(np.quantile(ts, 0.8))
    kw = dict(train_from=start, train_end=end, ttl_seconds=TTL, cadence_seconds=CADENCE, seed=0)
    # Labelled impressions at or after train_end vanish: the fit must not change.
    cut = tiny_log.candidates.copy()
    cut.loc[cut["ts"].to_numpy() >= end, "label"] = pd.NA
    other = replace(tiny_log, candidates=cut)
    a = train_exposure_scorer(tiny_log, feats, **kw)
    b = train_exposure_scorer(other, feats, **kw)
    np.testing.assert_array_equal(a.score(feats), b.score(feats))


# --- AUC and the scorer ------------------------------------------------------------------


def test_within_request_auc_by_hand():
    # Request 1: positive ranked above both negatives (AUC 1). Request 2: the positive ties
    # one negative and is below the other (AUC 0.25). Request 3: one class only (skipped).
    scores = np.array([0.9, 0.1, 0.2, 0.5, 0.5, 0.8, 0.3, 0.4])
    labels = np.array([1, 0, 0, 1, 0, 0, 1, 1])
    request = np.array([1, 1, 1, 2, 2, 2, 3, 3])
    assert within_request_auc(scores, labels, request) == pytest.approx((1.0 + 0.25) / 2)
    assert np.isnan(within_request_auc(scores[6:], labels[6:], request[6:]))
    # Pooled: any real scores (not only probabilities), in the same argument order.
    assert pooled_auc(scores * 10, labels) == pytest.approx(pooled_auc(scores, labels))
    assert np.isnan(pooled_auc(scores[6:], labels[6:]))


def test_scorer_is_deterministic_for_a_seed(tiny_log):
    feats = exposure_features(tiny_log, cadence_seconds=CADENCE)
    # A 3-day TTL: the tiny fake log has few positives at 6 h.
    y = exposure_labels(tiny_log.candidates, ttl_seconds=3 * 86_400, cadence_seconds=CADENCE)
    req = tiny_log.candidates["request_id"].to_numpy()
    kw = dict(request_id=req, max_iter=20, min_samples_leaf=20)
    a = ExposureScorer.fit(feats, y, 7, **kw).score(feats)
    b = ExposureScorer.fit(feats, y, 7, **kw).score(feats)
    assert a.dtype == np.float32 and ((a >= 0) & (a <= 1)).all()
    np.testing.assert_array_equal(a, b)
    assert np.unique(a).size > 1  # it did learn something


def test_scorer_rejects_one_class_labels(tiny_log):
    feats = exposure_features(tiny_log, cadence_seconds=CADENCE)
    with pytest.raises(ValueError, match="both classes"):
        ExposureScorer.fit(feats, np.zeros(len(feats), np.int8), 0)


def test_timing_features_count_down_to_the_end_of_the_interval(tiny_log):
    feats = exposure_features(tiny_log, cadence_seconds=CADENCE)
    ts = tiny_log.candidates["ts"].to_numpy()
    to_ready = feats["seconds_to_ready"].to_numpy()
    np.testing.assert_array_equal(to_ready, (interval_end(ts, CADENCE) - ts).astype(np.float32))
    assert ((to_ready >= 1) & (to_ready <= CADENCE)).all()
    pace = feats["user_ratings_1h"].to_numpy() / HOUR
    np.testing.assert_allclose(feats["ratings_before_ready"].to_numpy(), to_ready * pace, rtol=1e-6)


def test_features_refuse_a_cadence_that_is_not_positive(tiny_log):
    with pytest.raises(ValueError, match="cadence_seconds must be positive"):
        exposure_features(tiny_log, cadence_seconds=0)
