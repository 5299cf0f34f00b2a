"""The near-line embedders' figures as a run record carries them."""

from __future__ import annotations

from solaris.orchestration.nearline import summarize_status


def test_only_consumers_that_published_recently_count_and_lags_take_the_worst() -> None:
    status = {
        "a": {
            "at": 1_000.0,
            "pairs_per_s": 100.0,
            "embedded": 10,
            "malformed": 1,
            "lag_p95_s": 0.5,
            "backlog": 3,
            "pending": 0,
        },
        "b": {
            "at": 990.0,
            "pairs_per_s": 50.5,
            "embedded": 5,
            "malformed": 0,
            "lag_p95_s": 1.5,
            "backlog": 2,
            "pending": 4,
        },
        "gone": {"at": 100.0, "pairs_per_s": 999.0, "embedded": 99, "lag_p95_s": 99.0},
    }
    assert summarize_status(status, now=1_010.0) == {
        "consumers": 2,
        "pairs_per_s": 150.5,
        "embedded": 15,
        "malformed": 1,
        "lag_p95_s": 1.5,
        "backlog": 3,
        "pending": 4,
    }


def test_no_recent_consumer_is_no_figure() -> None:
    assert summarize_status({}, now=1_000.0) is None
    assert summarize_status({"old": {"at": 0.0}}, now=1_000.0) is None
    idle = summarize_status({"new": {"at": 999.0, "lag_p95_s": None}}, now=1_000.0)
    assert idle is not None and idle["lag_p95_s"] is None and idle["pairs_per_s"] == 0
