"""Argument checks of ``SolarisFeatures.fetch`` and ``log_request`` (only bad arguments raise,
as ``FetchArgumentError``: a SolarisError and a ValueError, naming the index of a list's bad
element) and the serving connection string's socket timeouts."""

from __future__ import annotations

import time

import numpy as np
import pytest

from solaris.connection import RedisTarget
from solaris.errors import SolarisError
from solaris.serving.client import (
    FetchArgumentError,
    _check_items,
    _check_now,
    _check_request_id,
    _check_scores,
    _check_user,
    serving_target,
)
from solaris.store.contract import MAX_EPOCH_S

INT64_MAX = 2**63 - 1
CAP = 10


# --------------------------------------------------------------------------------------------
# user_id
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [0, 1, 943, INT64_MAX, np.int64(7), np.int32(7), np.uint64(INT64_MAX), np.uint8(3)],
    ids=repr,
)
def test_check_user_accepts_python_and_numpy_integers_in_int64(value: object) -> None:
    out = _check_user(value)
    assert type(out) is int
    assert out == int(value)  # type: ignore[call-overload]


@pytest.mark.parametrize("value", [7.0, np.float64(7.0), float(2**53 - 1)], ids=repr)
def test_check_user_accepts_whole_floats_below_2_pow_53(value: float) -> None:
    assert _check_user(value) == int(value)


@pytest.mark.parametrize(
    "value",
    [
        True,
        False,
        np.bool_(True),
        -1,
        np.int64(-1),
        2**63,
        np.uint64(2**63),
        2**64,
        1.5,
        np.float32(0.5),
        float("nan"),
        float("inf"),
        -1.0,
        float(2**53),
        1e19,
        "42",
        b"42",
        None,
        [42],
        np.array([42]),
        complex(1, 0),
    ],
    ids=repr,
)
def test_check_user_rejects_anything_but_an_integer_in_int64(value: object) -> None:
    with pytest.raises(ValueError, match="user_id"):
        _check_user(value)


# --------------------------------------------------------------------------------------------
# item_ids
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "items",
    [
        [1, 2, 3],
        (0, INT64_MAX),
        np.array([5, 5, 0], np.int64),
        np.array([1, 2], np.int32),
        np.array([1, 2], np.uint16),
        np.array([1, INT64_MAX], np.uint64),
        [np.int64(4), np.int64(5)],
        np.array([1.0, 2.0, float(2**53 - 1)]),
    ],
    ids=["list", "tuple", "int64", "int32", "uint16", "uint64-in-range", "np-scalars", "whole"],
)
def test_check_items_accepts_integers_in_int64_as_int64(items: object) -> None:
    out = _check_items(items, CAP)  # type: ignore[arg-type]
    assert out.dtype == np.int64
    assert out.ndim == 1
    np.testing.assert_array_equal(out, np.asarray(items).astype(np.int64))


def test_check_items_returns_an_int64_array_unchanged() -> None:
    items = np.array([3, 1, 2], np.int64)
    assert _check_items(items, CAP) is items


@pytest.mark.parametrize("items", [[], np.zeros(0), np.zeros(0, np.int64), ()], ids=repr)
def test_check_items_accepts_no_items(items: object) -> None:
    out = _check_items(items, CAP)  # type: ignore[arg-type]
    assert out.dtype == np.int64
    assert out.shape == (0,)


def test_check_items_accepts_exactly_the_cap() -> None:
    assert len(_check_items(list(range(CAP)), CAP)) == CAP


@pytest.mark.parametrize(
    ("items", "reason"),
    [
        ([True, False], "integers"),
        (np.array([1, 0], bool), "integers"),
        ([1, -2, 3], ">= 0"),
        (np.array([-1], np.int64), ">= 0"),
        (np.array([-1], np.int8), ">= 0"),
        ([2**63], "outside int64"),
        (np.array([2**63], np.uint64), "outside int64"),
        (np.array([1, 2**64], dtype=object), "outside int64"),
        ([1, 2**70], "outside int64"),
        ([-1, 2**63], "item_ids"),  # numpy makes this float64
        ([1.5, 2.0], "whole numbers"),
        ([float("nan")], "NaN"),
        ([float("inf")], "NaN or inf"),
        ([float(2**53)], "below 2\\*\\*53"),
        ([1e19], "below 2\\*\\*53"),
        ([-1.0], ">= 0"),
        (["1", "2"], "integers"),
        ("123", "not a string"),
        (b"123", "not a string"),
        ([1, None], "integers"),
        ([1, "a"], "integers"),
        ([[1, 2], [3, 4]], "one-dimensional"),
        (np.zeros((2, 2), np.int64), "one-dimensional"),
        (np.int64(5), "one-dimensional"),
        (list(range(CAP + 1)), "exceed store.max_candidates"),
        (np.arange(CAP + 1), "exceed store.max_candidates"),
    ],
)
def test_check_items_rejects_anything_but_integers_in_int64_up_to_the_cap(
    items: object, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        _check_items(items, CAP)  # type: ignore[arg-type]


def test_check_items_accepts_an_object_array_of_small_integers() -> None:
    items = np.array([1, 2, 3], dtype=object)  # e.g. a pandas object column's values
    np.testing.assert_array_equal(_check_items(items, CAP), [1, 2, 3])


def test_check_items_accepts_an_object_array_of_numpy_integers_as_int64() -> None:
    out = _check_items(np.array([np.int64(3), np.uint8(4), 5], dtype=object), CAP)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [3, 4, 5])


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([10, 11, -12], r"item_ids must be >= 0, got -12 at index 2"),
        (np.array([0, -1, -2], np.int64), r"item_ids must be >= 0, got -1 at index 1"),
        (np.array([3, -1], np.int8), r"item_ids must be >= 0, got -1 at index 1"),
        ([1.0, -1.0], r"item_ids must be >= 0, got -1\.0 at index 1"),
        (
            np.array([1, 2**63 + 5], np.uint64),
            r"item_ids hold integers outside int64, got 9223372036854775813 at index 1",
        ),
        ([1.0, 2.0, 2.5], r"item_ids must be whole numbers below 2\*\*53, got 2\.5 at index 2"),
        ([1.0, float(2**53)], r"whole numbers below 2\*\*53, got 9007199254740992\.0 at index 1"),
        ([1.0, float("inf")], r"item_ids contain NaN or inf \(inf at index 1\)"),
        ([1, None], r"item_ids must be integers, got None at index 1"),
        (np.array([4, True], dtype=object), r"item_ids must be integers, got True at index 1"),
        (np.array([4, 1.0], dtype=object), r"item_ids must be integers, got 1\.0 at index 1"),
        (
            [5, 2**70, -1],
            r"item_ids hold integers outside int64, got 1180591620717411303424 at index 1",
        ),
        (np.array([5, -3], dtype=object), r"item_ids must be >= 0, got -3 at index 1"),
    ],
    ids=[
        "negative-list",
        "negative-int64",
        "negative-int8",
        "negative-float",
        "beyond-int64-uint64",
        "fraction",
        "float-at-2-pow-53",
        "inf",
        "none",
        "bool-in-object-array",
        "float-in-object-array",
        "huge-python-int",
        "negative-in-object-array",
    ],
)
def test_check_items_names_the_index_of_the_first_bad_element(items: object, message: str) -> None:
    with pytest.raises(FetchArgumentError, match=message):
        _check_items(items, CAP)  # type: ignore[arg-type]


def test_check_items_refuses_ragged_nesting_as_an_argument_error() -> None:
    with pytest.raises(FetchArgumentError, match="item_ids must be a sequence of numbers"):
        _check_items([[1, 2], [3]], CAP)  # type: ignore[list-item]


@pytest.mark.parametrize(
    "check",
    [
        lambda: _check_user(-1),
        lambda: _check_items([1, -1], CAP),
        lambda: _check_now(1e20),
        lambda: _check_request_id(True),
        lambda: _check_scores([0.5, float("nan")], 2),
    ],
    ids=["user", "items", "now", "request-id", "scores"],
)
def test_every_argument_check_raises_a_solaris_error_that_is_a_value_error(check) -> None:
    with pytest.raises(FetchArgumentError) as caught:
        check()
    assert isinstance(caught.value, SolarisError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        ([0.5, 0.1, float("nan")], r"scores contain NaN or inf \(as float32\), got nan at index 2"),
        ([0.5, 1e39, 0.1], r"scores contain NaN or inf \(as float32\), got 1e\+39 at index 1"),
        ([[0.5], [0.1, 0.2], [0.3]], r"scores must be a sequence of numbers"),
    ],
    ids=["nan", "beyond-float32", "ragged"],
)
def test_check_scores_names_the_index_of_the_first_non_finite_score(
    scores: object, message: str
) -> None:
    with pytest.raises(FetchArgumentError, match=message):
        _check_scores(scores, 3)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# now
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "now",
    [
        0,
        1_700_000_000,
        1_700_000_000.5,
        np.int64(1_700_000_000),
        np.float64(1.7e9),
        MAX_EPOCH_S - 1,
    ],
    ids=repr,
)
def test_check_now_accepts_epoch_seconds(now: float) -> None:
    assert _check_now(now) == now


def test_check_now_none_is_the_wall_clock_in_whole_seconds() -> None:
    before = int(time.time())
    now = _check_now(None)
    after = int(time.time())
    assert isinstance(now, int)
    assert before <= now <= after


@pytest.mark.parametrize(
    "now",
    [
        1.7e12,
        1_700_000_000_000,
        MAX_EPOCH_S,
        1e20,
        -1,
        -0.5,
        float("nan"),
        float("inf"),
        np.float64("nan"),
        True,
        False,
        "1700000000",
        [1_700_000_000],
    ],
    ids=repr,
)
def test_check_now_rejects_anything_but_epoch_seconds(now: object) -> None:
    with pytest.raises(ValueError, match="now must be epoch seconds"):
        _check_now(now)


# --------------------------------------------------------------------------------------------
# serving_target
# --------------------------------------------------------------------------------------------


def _serving(connection: str, timeout_s: float) -> str:
    """The string Feast gets, which a worker (or the Feast CLI) parses again."""
    return serving_target(RedisTarget.parse(connection), timeout_s).connection_string


def test_serving_target_adds_socket_and_connect_timeouts() -> None:
    out = _serving("h:6379,db=1", 0.2)
    assert out == "h:6379,db=1,socket_timeout=0.2,socket_connect_timeout=0.2"
    options = RedisTarget.parse(out).options
    assert options == {"db": 1, "socket_timeout": 0.2, "socket_connect_timeout": 0.2}
    assert serving_target(RedisTarget.parse("h:6379,db=1"), 0.2).options == options


def test_serving_target_keeps_explicit_timeouts() -> None:
    out = _serving("h:1,socket_timeout=1.5,password=x", 0.2)
    options = RedisTarget.parse(out).options
    assert options["socket_timeout"] == 1.5
    assert options["socket_connect_timeout"] == 0.2
    assert options["password"] == "x"
    both = "h:1,socket_timeout=1,socket_connect_timeout=2"
    assert _serving(both, 0.2) == both


def test_serving_target_keeps_every_node_and_small_timeouts_exact() -> None:
    out = _serving("a:1,b:2", 0.0005)
    target = RedisTarget.parse(out)
    assert target.nodes == (("a", 1), ("b", 2))
    assert target.options["socket_timeout"] == 0.0005
