"""The SOLARIS page's plots, built from run records (no Airflow)."""

from __future__ import annotations

from solaris.dashboard.plots import build_charts

T0 = 10_185 * 86_400  # 1997-11-20T00:00:00Z


def test_coverage_leaves_out_unlabelled_intervals_and_plots_servings_shares_where_none_is() -> None:
    """The drill's chart: an interval with no labelled impression plotted "any tier 100%";
    the live namespace, which labels nothing, plotted no coverage though serving knows it."""
    share = {"pair": 0.25, "nbr": 0.125, "uagg": 0.0, "iagg": 0.5, "none": 0.125}
    labelled = {"interval_end": T0, "coverage": {"pair": 0.5, "any": 0.9}, "labelled": 10}
    quiet = {"interval_end": T0 + 900, "coverage": None, "labelled": 0}
    [coverage, *_] = build_charts({"solaris_candidates": [labelled, quiet]})
    assert dict(coverage.series[0].points) == {T0: 50.0}  # the quiet interval: no point

    live = [{"interval_end": T0 + 900 * k, "serving": {"main_tier_share": share}} for k in (1, 2)]
    [coverage, *_] = build_charts({"solaris_candidates": live})
    by_name = {s.name: s.points for s in coverage.series}
    assert by_name["pair (served rows, main slot)"] == ((T0 + 900, 25.0), (T0 + 1800, 25.0))
    assert by_name["iagg (served rows, main slot)"][0] == (T0 + 900, 50.0)


def test_the_near_line_figures_of_the_candidates_runs_are_plotted() -> None:
    runs = [
        {"interval_end": T0, "nearline": {"pairs_per_s": 3954.0, "lag_p95_s": 1.1, "backlog": 0}},
        {"interval_end": T0 + 900, "nearline": None},  # no embedder published: no point
    ]
    (chart,) = [c for c in build_charts({"solaris_candidates": runs}) if "Near-line" in c.title]
    points = {s.name: s.points for s in chart.series}
    assert points == {
        "pairs/s": ((T0, 3954.0),),
        "lag p95 (s)": ((T0, 1.1),),
        "backlog (entries)": ((T0, 0.0),),
    }


def test_every_plot_is_there_even_without_figures() -> None:
    titles = [c.title for c in build_charts({})]
    assert len(titles) == 9 and titles[0] == "Coverage per serving tier"
    assert all(not s.points for c in build_charts({"d": [{"error": "x"}]}) for s in c.series)
