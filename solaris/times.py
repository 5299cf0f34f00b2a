"""A time as a person writes it, parsed by one rule into epoch seconds.

A run's conf, an asset event's intervals and a command's ``--start``/``--end`` all take a
time the same way: whole epoch seconds (an int, a whole float or a string of ASCII digits)
or ISO 8601 with a zone (or an aware ``datetime``), in ``[0, MAX_EPOCH_S)`` (1970 to 2286,
what the online store records). Everything else is a :class:`TimeInputError` whose message
says what was wrong; the caller names where the time came from. A naive ISO time is refused
rather than read in the local zone of whichever machine parses it; so are NaN, infinities,
booleans, fractions of a second and times in milliseconds. The one exception is asked for by
name: ``assume_utc=True`` reads a naive time (or a bare date) as UTC, for a form that says its
times are UTC (the SOLARIS page's ``from``/``to``: a browser's ``datetime-local`` has no zone).

Times inside the system (a request's ``now``, a table's ``ts``) are already epoch seconds
and are checked by :func:`solaris.store.contract.epoch_seconds`'s rule.
"""

from __future__ import annotations

import math
import numbers
import re
from datetime import UTC, datetime

from solaris.errors import SolarisError, shown

__all__ = ["MAX_EPOCH_S", "TimeInputError", "epoch_of", "iso_utc"]

MAX_EPOCH_S = 10**10
"""Upper bound (exclusive) of an epoch-seconds time anywhere in SOLARIS (year 2286): a larger
value is milliseconds or garbage, not seconds."""

# ASCII digits only (str.isdigit() also takes '²' and other scripts' digits), and short
# enough for int() (which refuses over 4,300 digits).
_DIGITS = re.compile(r"[+-]?[0-9]{1,20}")


class TimeInputError(SolarisError, ValueError):
    """A time that is not whole epoch seconds or ISO 8601 with a zone, or out of range."""


def epoch_of(value: object, *, assume_utc: bool = False) -> int:
    """``value`` in whole epoch seconds (see the module docstring); with ``assume_utc``, a
    naive time is read as UTC instead of refused.

    Raises:
        TimeInputError: saying what is wrong with ``value`` (not where it came from).
    """
    expected = f"epoch seconds or ISO 8601 with a zone expected, got {shown(value)}"
    if isinstance(value, str):
        text = value.strip()
        if _DIGITS.fullmatch(text):
            value = int(text)
        else:
            try:
                value = datetime.fromisoformat(text)
            except ValueError:
                raise TimeInputError(expected) from None
    if isinstance(value, bool):
        raise TimeInputError(expected)
    if isinstance(value, numbers.Integral):
        seconds = int(value)
    elif isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number):
            raise TimeInputError(f"{shown(value)} is not a time")
        if not number.is_integer():
            raise TimeInputError(f"{shown(value)} is not whole epoch seconds")
        seconds = int(number)
    elif isinstance(value, datetime):  # pendulum's DateTime (Airflow's) is one too
        if value.utcoffset() is None and assume_utc:
            value = value.replace(tzinfo=UTC)
        if value.utcoffset() is None:
            raise TimeInputError(
                f"{value} has no time zone (it would be read in the local zone of whichever "
                "machine parses it); add one, e.g. +00:00"
            )
        seconds = math.floor(value.timestamp())
    else:
        raise TimeInputError(expected)
    if not 0 <= seconds < MAX_EPOCH_S:
        raise TimeInputError(
            f"{shown(seconds)} is outside [0, {MAX_EPOCH_S:.0e}) epoch seconds "
            "(1970 to 2286; milliseconds?)"
        )
    return seconds


def iso_utc(epoch_s: int) -> str:
    """Epoch seconds as ISO 8601 in UTC (``2023-11-15T00:00:00+00:00``): what
    :func:`epoch_of` reads back, for messages and printed commands."""
    return datetime.fromtimestamp(epoch_s, UTC).isoformat()
