"""The query parameters of the SOLARIS page and of its JSON route, parsed once.

``namespace``, ``dag_id``, ``from`` and ``to``: times by :func:`solaris.times.epoch_of`'s rule
(epoch seconds or ISO 8601), except that a time without a zone is UTC (the page says its times
are UTC, and a browser's ``datetime-local`` input sends none) and a bare date as ``to`` means
the end of that day. A bad parameter is a :class:`FilterError` that names it.
"""

from __future__ import annotations

from dataclasses import dataclass

from solaris.dashboard.formatting import fmt_time
from solaris.errors import SolarisError, shown
from solaris.times import TimeInputError, epoch_of

__all__ = ["FilterError", "Filters", "parse_filters", "parse_time"]


class FilterError(SolarisError, ValueError):
    """A query parameter of the page or of the JSON route is not usable; the message names it."""


@dataclass(frozen=True)
class Filters:
    """The query parameters of a request, parsed (times as epoch seconds, inclusive)."""

    namespace: str | None = None
    dag_id: str | None = None
    start: int | None = None
    end: int | None = None

    def as_query(self) -> dict[str, str]:
        query = {"namespace": self.namespace, "dag_id": self.dag_id}
        query["from"] = None if self.start is None else fmt_time(self.start).replace(" ", "T")
        query["to"] = None if self.end is None else fmt_time(self.end).replace(" ", "T")
        return {k: v for k, v in query.items() if v}


_DATE_ONLY = 10  # len("1998-03-30")


def parse_time(value: str | None, name: str, *, end_of_day: bool = False) -> int | None:
    """Epoch seconds from the query parameter ``name``: epoch seconds, or an ISO 8601 date or
    date and time (UTC unless it names a zone), by :func:`solaris.times.epoch_of`. A bare date
    with ``end_of_day`` (the ``to`` parameter) means the end of that day; empty means None.

    Raises:
        FilterError: naming the parameter and saying what is wrong with its value.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = epoch_of(text, assume_utc=True)
    except TimeInputError as exc:
        raise FilterError(
            f"query parameter {name!r}: {shown(value)} is not a time; give an ISO 8601 date or "
            "date and time in UTC (1998-03-30 or 1998-03-30T22:00) or epoch seconds"
        ) from exc
    if end_of_day and len(text) == _DATE_ONLY and not text.isdigit():  # a date: the whole day
        seconds += 86_400 - 1
    return seconds


def parse_filters(
    namespace: str | None, dag_id: str | None, start: str | None, end: str | None
) -> Filters:
    """:class:`Filters` from the raw query parameters; :class:`FilterError` names a bad one."""
    filters = Filters(
        namespace=(namespace or "").strip() or None,
        dag_id=(dag_id or "").strip() or None,
        start=parse_time(start, "from"),
        end=parse_time(end, "to", end_of_day=True),
    )
    if filters.start is not None and filters.end is not None and filters.end < filters.start:
        raise FilterError(
            f"query parameters 'from' and 'to': 'to' ({end}) is before 'from' ({start})"
        )
    return filters
