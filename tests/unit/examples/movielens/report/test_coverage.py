import numpy as np
import pandas as pd

from solaris.evaluation.replay import replay
from solaris.examples.movielens.report.coverage import (
    HOUR,
    activity_ttl,
    equal_cost_coverage,
    retrieval_bound,
)

NA = pd.NA


def _log(rows):
    frame = pd.DataFrame(rows, columns=["request_id", "user_id", "item_id", "ts", "label"])
    return frame.astype({"label": "Int8"})


def test_activity_ttl_is_shorter_for_active_users_and_counts_only_earlier_requests():
    # User 1 makes a request every hour; user 2 once. The first request of each user has
    # no earlier request (activity 1), so its TTL is the same for both.
    rows = [(k, 1, 10, k * HOUR, NA) for k in range(6)] + [(100, 2, 10, 5 * HOUR, NA)]
    log = _log(sorted(rows, key=lambda r: r[3]))
    ttl = activity_ttl(log, 6 * HOUR, power=1.0)
    by_req = pd.Series(ttl, index=log["request_id"].to_numpy())
    assert by_req[0] == by_req[100]
    assert by_req[5] < by_req[1] < by_req[0]  # more past requests, shorter TTL
    assert (ttl >= HOUR).all() and (ttl <= 48 * HOUR).all()


def test_replay_with_per_row_ttl_expires_each_pair_at_its_own_ttl():
    # cadence 600: both pairs selected at t=0, usable from 600; user 1's TTL 1000, user 2's 5000.
    log = _log(
        [
            (1, 1, 10, 0, NA),
            (2, 2, 10, 0, NA),
            (3, 1, 10, 2000, 1),  # 600 + 1000 < 2000: expired
            (4, 2, 10, 2000, 1),  # 600 + 5000 >= 2000: hit
        ]
    )
    ttl = np.array([1000, 5000, 1000, 5000])
    res = replay(log, np.ones(4), share=1.0, ttl_seconds=ttl, cadence_seconds=600)
    np.testing.assert_array_equal(res.hit, [False, False, False, True])
    assert res.selections["expires_at"].tolist()[:2] == [1600, 5600]


def test_equal_cost_coverage_interpolates_the_cost_curve():
    curve = pd.DataFrame({"fm_passes_per_1k_requests": [300.0, 100.0], "coverage": [0.5, 0.3]})
    assert equal_cost_coverage(curve, 200.0) == 0.4
    assert equal_cost_coverage(curve, 1000.0) == 0.5


def test_retrieval_bound_counts_impressions_with_an_earlier_candidate_in_the_window():
    log = _log(
        [
            (1, 1, 10, 0, NA),
            (2, 1, 10, 100, 1),  # earlier candidate 100 s before: bounded-in
            (3, 1, 11, 100, 1),  # never a candidate before
            (4, 1, 10, 10_000, 1),  # previous one 9,900 s before: outside a 3,600 s window
        ]
    )
    assert retrieval_bound(log, eval_from=0, window_seconds=3600) == 1 / 3
