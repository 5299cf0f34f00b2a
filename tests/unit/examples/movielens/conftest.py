"""Fixtures shared by the MovieLens example's tests: a request log over the tiny fixture."""

import pytest

from solaris.config import RequestLogConfig
from solaris.examples.movielens.requests import RequestLog, build_request_log


@pytest.fixture
def log_cfg() -> RequestLogConfig:
    # A small k so that retrieval really has to rank (the fixture has only 40 items).
    return RequestLogConfig(retrieval_k=8, popularity_window_days=5, cooccurrence_history=5)


@pytest.fixture
def tiny_log(tiny_ml, log_cfg) -> RequestLog:
    return build_request_log(tiny_ml.ratings, log_cfg)
