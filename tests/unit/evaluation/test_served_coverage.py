"""ServedCoverage: labelled impressions of served requests, by tier."""

from __future__ import annotations

import numpy as np

from solaris.evaluation.served_coverage import ServedCoverage
from solaris.serving.tiers import TIERS, empty_tiers


def test_without_a_labelled_impression_coverage_is_none_not_100_percent() -> None:
    result = ServedCoverage()
    result.count(empty_tiers(3, 4), np.zeros(3, bool))  # served, nothing labelled
    assert result.n_requests == 1 and result.n_impressions == 0
    assert result.any_tier_coverage is None
    assert all(result.coverage(tier) is None for tier in TIERS)


def test_coverage_is_the_share_of_labelled_impressions() -> None:
    result = ServedCoverage()
    result.count(empty_tiers(4, 4), np.array([True, True, False, False]))
    assert result.any_tier_coverage == 0.0 and result.coverage("pair") == 0.0
