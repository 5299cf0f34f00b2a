"""The SOLARIS page's query parameters: times by solaris.times' rule, naive times as UTC."""

from __future__ import annotations

import pytest

from solaris.dashboard.filters import FilterError, Filters, parse_filters, parse_time
from solaris.errors import SolarisError

T0 = 10_185 * 86_400  # 1997-11-20T00:00:00Z


@pytest.mark.parametrize(
    ("value", "end_of_day", "expected"),
    [
        (None, False, None),
        ("  ", True, None),
        (str(T0), False, T0),
        (str(T0), True, T0),  # epoch seconds are never widened to a day
        ("1997-11-20", False, T0),
        ("1997-11-20", True, T0 + 86_400 - 1),  # a bare date as "to": the whole day
        ("1997-11-20T01:30", False, T0 + 5400),  # no zone: UTC
        ("1997-11-20T01:30", True, T0 + 5400),
        ("1997-11-20T02:30+01:00", False, T0 + 5400),
        (" 1997-11-20T01:30:00Z ", False, T0 + 5400),
    ],
)
def test_parse_time_reads_what_the_form_and_a_person_send(
    value: str | None, end_of_day: bool, expected: int | None
) -> None:
    assert parse_time(value, "to", end_of_day=end_of_day) == expected


@pytest.mark.parametrize(
    "value", ["yesterday", "1997-13-01", "\u00b2", "--5", "-5", "9" * 5_000, "1969-12-31"]
)
def test_a_bad_time_is_a_filter_error_that_names_the_parameter(value: str) -> None:
    with pytest.raises(FilterError, match="query parameter 'from'") as refused:
        parse_time(value, "from")
    assert isinstance(refused.value, SolarisError) and isinstance(refused.value, ValueError)
    assert len(str(refused.value)) < 300  # a long value is shortened, not echoed whole


def test_parse_filters_strips_and_checks_the_range() -> None:
    filters = parse_filters(" live ", "", "1997-11-20", "1997-11-20")
    assert filters == Filters("live", None, T0, T0 + 86_400 - 1)
    assert filters.as_query() == {
        "namespace": "live",
        "from": "1997-11-20T00:00",
        "to": "1997-11-20T23:59",
    }
    assert parse_filters(None, None, None, None) == Filters()
    with pytest.raises(FilterError, match=r"'to' .* is before 'from'"):
        parse_filters(None, None, "1997-11-21", "1997-11-20")
