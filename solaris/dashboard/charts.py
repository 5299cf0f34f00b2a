"""Small SVG charts over time for the SOLARIS page: lines and bars, no script, no library.

The page is served by the Airflow api-server, which should not load a plotting stack for
eight small charts; each chart here is a few hundred bytes of inline SVG with a
``<title>`` per point (the browser's tooltip). Pure functions of their arguments.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise

from solaris.dashboard.formatting import fmt_count, fmt_time

__all__ = ["MAX_MARKERS", "Chart", "Series", "fmt_tick", "nice_ticks", "svg_chart"]

# A line with more points than this is drawn without a marker (and tooltip) per point.
MAX_MARKERS = 400

_PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#6b6b6b")
_TIME_STEPS = (
    60,
    300,
    900,
    1800,
    3600,
    3 * 3600,
    6 * 3600,
    12 * 3600,
    86_400,
    2 * 86_400,
    7 * 86_400,
    30 * 86_400,
    91 * 86_400,
    365 * 86_400,
)


@dataclass(frozen=True)
class Series:
    """One line (or set of bars) of a chart: ``(epoch seconds, value)`` points."""

    name: str
    points: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class Chart:
    """A chart over time: its title (also the SVG's ``<title>``), series and tick format."""

    title: str
    series: tuple[Series, ...]
    fmt: Callable[[float], str]
    kind: str = "line"  # or "bar"
    y_max: float | None = None  # the axis reaches at least this far (100 for percentages)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten) covering ``[lo, hi]``."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw * 0.999)
    first = math.floor(lo / step) * step
    ticks = [first]
    while ticks[-1] < hi - step * 1e-9:
        ticks.append(first + len(ticks) * step)
    return ticks


def _time_ticks(t0: float, t1: float) -> tuple[list[int], str]:
    span = max(t1 - t0, 1.0)
    step = next((s for s in _TIME_STEPS if span / s <= 6), _TIME_STEPS[-1])
    first = math.ceil(t0 / step) * step
    ticks = list(range(int(first), int(t1) + 1, step))
    if step < 86_400:
        return ticks, "%m-%d %H:%M"
    return ticks, "%Y-%m-%d" if span > 300 * 86_400 else "%m-%d"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def fmt_tick(value: float) -> str:
    return fmt_count(round(value, 6))


def svg_chart(
    chart: Chart, x_range: tuple[int, int], *, width: int = 460, height: int = 230
) -> str:
    """``chart`` as an inline ``<svg>`` over the time range ``x_range`` (epoch seconds).

    Each point carries a ``<title>`` (the browser's tooltip) with its series, value and
    time; a chart without points says so instead of drawing axes.
    """
    left, right, top, bottom = 62, 26, 46, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    cid = f"chart-{_slug(chart.title)}"
    esc = html.escape
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{cid}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-labelledby="{cid}-title">',
        f'<title id="{cid}-title">{esc(chart.title)}</title>',
        f'<text class="chart-title" x="{left - 52}" y="17">{esc(chart.title)}</text>',
    ]
    x = left - 52
    for i, series in enumerate(chart.series):
        color = _PALETTE[i % len(_PALETTE)]
        out.append(
            f'<rect x="{x}" y="27" width="10" height="10" fill="{color}"/>'
            f'<text class="legend" x="{x + 14}" y="36">{esc(series.name)}</text>'
        )
        x += 14 + 7 * len(series.name) + 14
    values = [v for series in chart.series for _, v in series.points]
    if not values:
        out.append(
            f'<text class="empty-chart" x="{left + plot_w / 2}" y="{top + plot_h / 2}" '
            'text-anchor="middle">no data for this selection</text></svg>'
        )
        return "".join(out)

    lo = min(0.0, min(values))
    hi = max(max(values), chart.y_max if chart.y_max is not None else -math.inf)
    ticks = nice_ticks(lo, hi)
    y0, y1 = ticks[0], ticks[-1]
    t0, t1 = float(x_range[0]), float(x_range[1])
    if t1 <= t0:
        t0, t1 = t0 - 1800, t1 + 1800
    pad = (t1 - t0) * 0.03
    t0, t1 = t0 - pad, t1 + pad

    def px(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * plot_w

    def py(v: float) -> float:
        return top + plot_h - (v - y0) / (y1 - y0) * plot_h

    for tick in ticks:
        y = py(tick)
        out.append(
            f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="tick" x="{left - 5}" y="{y + 3.5:.1f}" text-anchor="end">'
            f"{esc(chart.fmt(tick))}</text>"
        )
    time_ticks, pattern = _time_ticks(t0, t1)
    for tick in time_ticks:
        x_tick = px(tick)
        label = datetime.fromtimestamp(tick, UTC).strftime(pattern)
        if not 3.3 * len(label) <= x_tick <= width - 3.3 * len(label):
            continue  # its label would be cut at the picture's edge
        out.append(
            f'<line class="axis" x1="{x_tick:.1f}" x2="{x_tick:.1f}" y1="{top + plot_h}" '
            f'y2="{top + plot_h + 4}"/><text class="tick" x="{x_tick:.1f}" '
            f'y="{top + plot_h + 16}" text-anchor="middle">{esc(label)}</text>'
        )
    out.append(
        f'<line class="axis" x1="{left}" x2="{left + plot_w}" y1="{py(max(y0, 0.0)):.1f}" '
        f'y2="{py(max(y0, 0.0)):.1f}"/>'
    )

    times = sorted({t for series in chart.series for t, _ in series.points})
    gaps = [b - a for a, b in pairwise(times)]
    slot = (min(gaps) if gaps else (t1 - t0) / 4) / (t1 - t0) * plot_w
    bar_w = max(1.5, min(18.0, slot * 0.8 / max(len(chart.series), 1)))
    for i, series in enumerate(chart.series):
        color = _PALETTE[i % len(_PALETTE)]
        points = sorted(series.points)
        marks = []
        for t, v in points:
            tip = f"{series.name}: {chart.fmt(v)} at {fmt_time(t)} UTC"
            if chart.kind == "bar":
                x_bar = px(t) - bar_w * len(chart.series) / 2 + i * bar_w
                top_y, base_y = sorted((py(v), py(max(y0, 0.0))))
                marks.append(
                    f'<rect x="{x_bar:.1f}" y="{top_y:.1f}" width="{bar_w:.1f}" '
                    f'height="{max(base_y - top_y, 0.5):.1f}" fill="{color}">'
                    f"<title>{esc(tip)}</title></rect>"
                )
            elif len(points) <= MAX_MARKERS:
                marks.append(
                    f'<circle cx="{px(t):.1f}" cy="{py(v):.1f}" r="2.6" fill="{color}">'
                    f"<title>{esc(tip)}</title></circle>"
                )
        if chart.kind != "bar" and len(points) > 1:
            path = " ".join(
                f"{'M' if k == 0 else 'L'}{px(t):.1f},{py(v):.1f}"
                for k, (t, v) in enumerate(points)
            )
            out.append(
                f'<path d="{path}" fill="none" stroke="{color}" stroke-width="1.6" '
                'stroke-linejoin="round"/>'
            )
        out.extend(marks)
    out.append("</svg>")
    return "".join(out)
