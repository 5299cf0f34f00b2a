"""The SVG charts of the SOLARIS page: round ticks, points, bars, escaping, long lines."""

from __future__ import annotations

from solaris.dashboard import charts

T0 = 10_185 * 86_400  # 1997-11-20T00:00:00Z


def test_nice_ticks_cover_the_range_with_round_steps() -> None:
    assert charts.nice_ticks(0, 100) == [0, 25, 50, 75, 100]
    assert charts.nice_ticks(0, 7) == [0, 2, 4, 6, 8]
    assert charts.nice_ticks(0, 0) == [0, 0.25, 0.5, 0.75, 1.0]
    ticks = charts.nice_ticks(-3, 1234)
    assert ticks[0] <= -3 and ticks[-1] >= 1234 and len(ticks) <= 7


def test_svg_chart_draws_points_bars_and_escapes_names() -> None:
    points = ((T0, 1.0), (T0 + 3600, 3.0))
    line = charts.svg_chart(
        charts.Chart("A <b>", (charts.Series("x&y", points),), str), (T0, T0 + 3600)
    )
    assert '<title id="chart-a-b-title">A &lt;b&gt;</title>' in line
    assert line.count("<circle") == 2 and '<path d="M' in line and "x&amp;y: 3.0 at" in line
    bars = charts.svg_chart(
        charts.Chart("B", (charts.Series("n", points),), str, kind="bar"), (T0, T0 + 3600)
    )
    assert bars.count("<rect") == 1 + 2 and "<circle" not in bars
    empty = charts.svg_chart(charts.Chart("C", (charts.Series("n", ()),), str), (0, 0))
    assert "no data for this selection" in empty and '<title id="chart-c-title">C</title>' in empty


def test_a_long_line_loses_its_markers_but_not_its_path() -> None:
    many = tuple((T0 + k * 60, float(k)) for k in range(charts.MAX_MARKERS + 1))
    line = charts.svg_chart(charts.Chart("D", (charts.Series("n", many),), str), (T0, T0 + 1))
    assert "<circle" not in line and '<path d="M' in line
