"""How the SOLARIS page writes a run record's figures: every formatter takes any JSON value
and never raises (a record is whatever a task wrote; the page must still render).

A figure's unit comes from its key (``*_share``/``coverage``: a share, ``*_s``/``seconds``:
a duration, ``*_ms``: milliseconds, ``*_at``/``interval_*``: a time).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from solaris.orchestration.layout import INTERVAL_END, INTERVAL_KEYS, INTERVAL_START

__all__ = [
    "MAX_FIGURE_DEPTH",
    "MISSING",
    "as_number",
    "figure_html",
    "fmt_age",
    "fmt_count",
    "fmt_figure",
    "fmt_interval",
    "fmt_ms",
    "fmt_share",
    "fmt_time",
]

MISSING = "–"  # a figure the record does not have


def as_number(value: Any) -> float | None:
    """``value`` as a finite float, or None (bools, strings, NaN and inf are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _guard(fmt: Callable[[Any], str]) -> Callable[[Any], str]:
    """``fmt``, except that a missing value shows as "–" and an unexpected one as itself."""

    def safe(value: Any) -> str:
        if value is None:
            return MISSING
        try:
            return fmt(value)
        except (TypeError, ValueError, OverflowError, OSError, AttributeError):
            return str(value)

    safe.__doc__ = fmt.__doc__
    return safe


@_guard
def fmt_time(value: Any) -> str:
    """Epoch seconds as UTC ``YYYY-MM-DD HH:MM`` (the page says it is UTC)."""
    seconds = as_number(value)
    if seconds is None:
        return str(value)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M")


@_guard
def fmt_count(value: Any) -> str:
    """A number with thousands separators; fractions to three significant digits."""
    number = as_number(value)
    if number is None:
        return str(value)
    if number.is_integer() or abs(number) >= 100:
        return f"{number:,.0f}"
    return f"{number:.3g}"


@_guard
def fmt_share(value: Any) -> str:
    """A fraction as a percentage."""
    share = as_number(value)
    return str(value) if share is None else f"{100 * share:.1f}%"


@_guard
def fmt_age(value: Any) -> str:
    """A duration or an age in seconds, in the unit that reads best."""
    seconds = as_number(value)
    if seconds is None:
        return str(value)
    if abs(seconds) < 120:
        return f"{seconds:.0f} s" if seconds.is_integer() else f"{seconds:.1f} s"
    if abs(seconds) < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if abs(seconds) < 2 * 86_400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:,.1f} d"


@_guard
def fmt_ms(value: Any) -> str:
    """Milliseconds."""
    ms = as_number(value)
    if ms is None:
        return str(value)
    return f"{ms:.1f} ms" if abs(ms) < 100 else f"{ms:,.0f} ms"


def _is_share_key(key: str) -> bool:
    return "share" in key or "coverage" in key


def _is_time_key(key: str) -> bool:
    return key in (*INTERVAL_KEYS, "as_of") or key.endswith("_at")


def _is_duration_key(key: str) -> bool:
    return key == "seconds" or key.endswith(("_seconds", "_s"))


def fmt_figure(key: str, value: Any, *, share: bool = False) -> str:
    """One scalar figure, formatted by what its key says it is (text, not HTML)."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    number = as_number(value)
    if number is None:
        return str(value)
    if (share or _is_share_key(key)) and 0.0 <= number <= 1.0:
        return fmt_share(number)
    if _is_time_key(key):
        return fmt_time(number)
    if key.endswith("_ms"):
        return fmt_ms(number)
    if _is_duration_key(key):
        return fmt_age(number)
    return fmt_count(number)


def _label(key: str) -> str:
    return key.replace("_", " ")


# Nesting a figure is shown to: a run record is the task's, but one written by hand (or a
# bug) nested hundreds deep must not exhaust the stack and take the whole page down.
MAX_FIGURE_DEPTH = 6


def figure_html(
    key: str,
    value: Any,
    *,
    share: bool = False,
    skip: Mapping[str, Any] | None = None,
    depth: int = 0,
) -> str:
    """A figure as HTML: a nested dict as a ``key: value`` list, a list item by item, down
    to :data:`MAX_FIGURE_DEPTH` levels (deeper: "…").

    ``skip`` holds key/value pairs a nested dict need not repeat (the record's own interval).
    """
    share = share or _is_share_key(key)
    skip = skip or {}
    if depth >= MAX_FIGURE_DEPTH and isinstance(value, Mapping | list | tuple):
        return "… (nested deeper)"
    if isinstance(value, Mapping):
        items = [(k, v) for k, v in value.items() if not (k in skip and skip[k] == v)]
        if not items:
            return MISSING
        lis = "".join(
            f'<li><span class="k">{html.escape(_label(str(k)))}:</span> '
            f"{figure_html(str(k), v, share=share, skip=skip, depth=depth + 1)}</li>"
            for k, v in items
        )
        return f'<ul class="kv">{lis}</ul>'
    if isinstance(value, list | tuple):
        if not value:
            return MISSING
        if all(isinstance(v, Mapping) and INTERVAL_END in v for v in value):
            shown = [html.escape(fmt_interval(v)) for v in value[:6]]
            more = f" … ({len(value)} in all)" if len(value) > 6 else ""
            return "; ".join(shown) + more
        shown = [figure_html(key, v, share=share, skip=skip, depth=depth + 1) for v in value[:12]]
        more = f", … ({len(value)} in all)" if len(value) > 12 else ""
        return ", ".join(shown) + more
    return html.escape(fmt_figure(key, value, share=share))


def fmt_interval(record: Mapping[str, Any]) -> str:
    """``start → end`` of a run (the end's date only when it differs), ``as of end``, or its
    key when it names no interval."""
    start, end = record.get(INTERVAL_START), record.get(INTERVAL_END)
    if start is None and end is None:
        return str(record.get("key", MISSING))
    if start is None:
        return f"as of {fmt_time(end)}"
    first, last = fmt_time(start), fmt_time(end)
    if first[:10] == last[:10] and len(last) == 16:
        last = last[11:]
    return f"{first} → {last}"
