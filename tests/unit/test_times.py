"""The one rule for a time a person writes (a conf, an asset event, a command option)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from solaris.errors import SolarisError
from solaris.store.contract import MAX_EPOCH_S
from solaris.times import TimeInputError, epoch_of

T = 1_700_000_000


@pytest.mark.parametrize(
    "value",
    [
        T,
        float(T),
        str(T),
        f" {T} ",
        "2023-11-14T22:13:20+00:00",
        "2023-11-14T23:13:20+01:00",
        datetime.fromtimestamp(T, UTC),
        datetime.fromtimestamp(T, timezone(timedelta(hours=-5))),
    ],
)
def test_every_accepted_spelling_gives_the_same_epoch_seconds(value: object) -> None:
    assert epoch_of(value) == T


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("yesterday", "epoch seconds or ISO 8601 with a zone expected"),
        ("2023-11-14T22:13:20", "has no time zone"),
        (datetime(2023, 11, 14), "has no time zone"),
        (True, "epoch seconds or ISO 8601 with a zone expected"),
        (float("nan"), "is not a time"),
        (float("inf"), "is not a time"),
        (T + 0.5, "is not whole epoch seconds"),
        (T * 1000, "outside"),  # milliseconds
        (MAX_EPOCH_S, "outside"),
        (-1, "outside"),
        ("²", "epoch seconds or ISO 8601"),  # a digit of another script
        ("9" * 5000, "epoch seconds or ISO 8601"),  # longer than int() reads
        (None, "epoch seconds or ISO 8601"),
    ],
)
def test_a_time_that_breaks_the_rule_is_an_error_saying_why(value: object, said: str) -> None:
    with pytest.raises(TimeInputError, match=said) as refused:
        epoch_of(value)
    assert isinstance(refused.value, SolarisError) and isinstance(refused.value, ValueError)
    assert len(str(refused.value)) < 200  # a long input is shortened, not echoed whole


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2023-11-14T22:13:20", T),  # naive: read as UTC
        ("2023-11-14", T - (22 * 3600 + 13 * 60 + 20)),  # a bare date: its midnight, UTC
        ("2023-11-14T23:13:20+01:00", T),  # a zone still counts
        (str(T), T),
    ],
)
def test_assume_utc_reads_a_naive_time_as_utc_and_nothing_else_changes(
    value: str, expected: int
) -> None:
    assert epoch_of(value, assume_utc=True) == expected
    with pytest.raises(TimeInputError, match="outside"):
        epoch_of("1969-12-31T23:59", assume_utc=True)
