"""The SOLARIS page's plots over time, built from the run records it shows.

:func:`build_charts` turns one namespace's filtered runs into
:class:`~solaris.dashboard.charts.Chart` values (drawn by
:func:`solaris.dashboard.charts.svg_chart`): coverage per serving tier, embedding freshness,
FM passes per 1,000 requests, selected vs candidates, rows written per view, fetch latency,
serving failures, the backlogs and the near-line path. A record without a figure is no point
of its plot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from solaris.dashboard.charts import Chart, Series, fmt_tick
from solaris.dashboard.formatting import as_number
from solaris.dashboard.records import TIERS, nested, record_time

__all__ = ["build_charts"]


def _duration_unit(max_seconds: float) -> tuple[float, str]:
    if max_seconds < 120:
        return 1.0, "s"
    if max_seconds < 2 * 3600:
        return 60.0, "min"
    if max_seconds < 2 * 86_400:
        return 3600.0, "h"
    return 86_400.0, "d"


def _points(
    records: Iterable[Mapping[str, Any]], value: Callable[[Mapping[str, Any]], Any]
) -> tuple[tuple[int, float], ...]:
    """``(time, value)`` of each record where both are numbers (a figure it lacks: no point)."""
    out = []
    for record in records:
        when = record_time(record)
        try:
            number = as_number(value(record))
        except (TypeError, KeyError, ZeroDivisionError, AttributeError):
            number = None
        if when is not None and number is not None:
            out.append((when, number))
    return tuple(sorted(out))


def _percent(value: Any) -> float | None:
    share = as_number(value)
    return None if share is None else 100 * share


def _per_1k_requests(record: Mapping[str, Any]) -> float | None:
    passes, requests = as_number(record.get("fm_passes")), as_number(record.get("requests"))
    if passes is None or not requests:
        return None
    return 1000 * passes / requests


def _nested_figure(
    key: str, sub: str, *, percent: bool = False
) -> Callable[[Mapping[str, Any]], Any]:
    """A record's ``record[key][sub]`` (as a percentage with ``percent``)."""

    def value(record: Mapping[str, Any]) -> Any:
        figure = nested(record, key, sub)
        return _percent(figure) if percent else figure

    return value


def _served_share(tier: str) -> Callable[[Mapping[str, Any]], float | None]:
    """The share of served rows whose main slot ``tier`` filled, as a percentage."""

    def value(record: Mapping[str, Any]) -> float | None:
        return _percent(nested(record.get("serving") or {}, "main_tier_share", tier))

    return value


def build_charts(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Chart]:
    """The page's plots from the shown runs (one namespace, filtered).

    A figure goes to a plot wherever a record has it: coverage, freshness, selection and
    serving figures come from the candidates runs, rows written from every run that wrote
    rows (embeddings, enrichment, clustering).
    """
    records = [r for rs in runs.values() for r in rs if "error" not in r]

    coverage = tuple(
        Series(tier, _points(records, _nested_figure("coverage", tier, percent=True)))
        for tier in TIERS
    )
    if not any(series.points for series in coverage):
        # No labelled impression (the live namespace): what serving knows instead, the
        # share of its served rows whose main slot each tier filled.
        coverage = tuple(
            Series(
                f"{tier} (served rows, main slot)",
                _points(records, _served_share(tier)),
            )
            for tier in TIERS
        )
    freshness = _points(records, lambda r: r.get("freshness_s"))
    divisor, unit = _duration_unit(max((v for _, v in freshness), default=0.0))
    views = sorted(
        {
            str(v)
            for r in records
            if isinstance(r.get("rows_written"), Mapping)
            for v in r["rows_written"]
        }
    )
    return [
        Chart(
            "Coverage per serving tier",
            coverage,
            lambda v: f"{v:.0f}%" if float(v).is_integer() else f"{v:.1f}%",
            y_max=100.0,
        ),
        Chart(
            "Embedding freshness",
            (
                Series(
                    f"age of the newest codes ({unit})",
                    tuple((t, v / divisor) for t, v in freshness),
                ),
            ),
            lambda v: f"{fmt_tick(v)} {unit}",
        ),
        Chart(
            "FM passes per 1,000 requests",
            (Series("FM passes / 1k requests", _points(records, _per_1k_requests)),),
            fmt_tick,
        ),
        Chart(
            "Selected vs candidates",
            (
                Series("candidates", _points(records, lambda r: r.get("candidates"))),
                Series("selected", _points(records, lambda r: r.get("selected"))),
            ),
            fmt_tick,
        ),
        Chart(
            "Rows written per view",
            tuple(
                Series(view, _points(records, _nested_figure("rows_written", view)))
                for view in views
            ),
            fmt_tick,
        ),
        Chart(
            "Fetch latency p50 / p99",
            (
                Series("p50", _points(records, lambda r: nested(r, "serving", "fetch_p50_ms"))),
                Series("p99", _points(records, lambda r: nested(r, "serving", "fetch_p99_ms"))),
            ),
            lambda v: f"{fmt_tick(v)} ms",
        ),
        Chart(
            "Serving failures",
            (
                Series(
                    "failed fetches", _points(records, lambda r: nested(r, "serving", "failures"))
                ),
            ),
            fmt_tick,
            kind="bar",
        ),
        Chart(
            "Miss-stream and request-log backlog",
            (
                Series(
                    "miss stream", _points(records, lambda r: nested(r, "serving", "miss_backlog"))
                ),
                Series(
                    "request log",
                    _points(records, lambda r: nested(r, "serving", "request_log_backlog")),
                ),
            ),
            fmt_tick,
        ),
        Chart(
            "Near-line path: pairs embedded per second, lag p95, backlog",
            (
                Series("pairs/s", _points(records, lambda r: nested(r, "nearline", "pairs_per_s"))),
                Series(
                    "lag p95 (s)", _points(records, lambda r: nested(r, "nearline", "lag_p95_s"))
                ),
                Series(
                    "backlog (entries)",
                    _points(records, lambda r: nested(r, "nearline", "backlog")),
                ),
            ),
            fmt_tick,
        ),
    ]
