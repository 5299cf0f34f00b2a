"""bench.steady's pure helpers: the first-against-steady summary, its table, the docs block
it rewrites, and the synthetic world sized to the rows an interval asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.steady import BEGIN, END, IntervalFigures, _world, markdown, summarize, write_block


def _interval(end: int, aggregates_s: float, codes: int) -> IntervalFigures:
    return IntervalFigures(
        end=end,
        candidates=1_000,
        wall_s={"solaris_candidates": 1.0, "solaris_enrichment": aggregates_s},
        task_s={"selection": 0.5, "aggregates": aggregates_s},
        codes_read={"aggregates": codes, "neighbour fill": codes // 10},
        read_bytes=codes * 100,
        cpu_s=1.0 + aggregates_s,
        peak_rss_mb=500.0,
    )


def test_the_steady_state_is_the_median_of_the_last_intervals_against_the_first() -> None:
    first = _interval(900, 0.2, 100)
    grown = [_interval(900 * k, 0.2 * k, 100 * k) for k in range(1, 11)]
    summary = summarize(first, grown, steady=3)
    aggregates = summary["stages"]["aggregates"]
    assert aggregates["codes_read"] == {"first": 100.0, "steady": 900.0, "ratio": 9.0}
    assert aggregates["task_s"]["ratio"] == pytest.approx(9.0)
    assert summary["stages"]["selection"]["task_s"]["ratio"] == 1.0
    assert summary["stages"]["embedding"]["task_s"]["ratio"] is None  # no figure: no ratio
    assert summary["interval"]["read_mb"]["steady"] == pytest.approx(0.09)


def test_the_table_names_every_stage_and_the_run_it_came_from() -> None:
    first = _interval(900, 0.2, 100)
    summary = summarize(first, [first, _interval(1_800, 0.4, 200)], steady=1)
    meta = {
        "date": "2026-12-07 12:00 UTC",
        "commit": "abc1234",
        "rows": 10_000,
        "days": 2.2,
        "cadence_minutes": 15.0,
        "partitions": 1,
        "steady": 1,
        "intervals": 2,
    }
    table = markdown(summary, meta)
    assert "abc1234" in table and "10,000 candidate rows an interval" in table
    assert "| aggregates: codes read | 100 | 200 | 2.0× |" in table
    for stage in ("selection", "embedding", "aggregates", "neighbour fill"):
        assert f"| {stage}: task seconds |" in table


def test_object_store_requests_and_bytes_are_summarised_when_the_state_was_counted() -> None:
    first = _interval(900, 0.2, 100)
    first.store_requests, first.store_bytes = {"GET": 40, "PUT": 10}, 2_000_000
    later = [_interval(900 * k, 0.2, 100) for k in range(2, 5)]
    for k, f in enumerate(later, start=2):
        f.store_requests, f.store_bytes = {"GET": 40 * k, "PUT": 10, "HEAD": k}, 2_000_000 * k
    summary = summarize(first, later, steady=3)
    assert summary["interval"]["store_requests"]["steady"] == 133  # median of 92, 133, 174
    assert summary["interval"]["store_heads"] == {"first": 0.0, "steady": 3.0, "ratio": None}
    assert summary["interval"]["store_mb"]["ratio"] == 3.0
    meta = {
        "date": "d",
        "commit": "c",
        "rows": 1,
        "days": 1,
        "cadence_minutes": 15,
        "partitions": 2,
        "steady": 3,
        "intervals": 4,
        "object_store": True,
    }
    table = markdown(summary, meta)
    assert "| interval: object-store requests | 50.00 | 133 | 2.66× |" in table
    assert "counted local S3 endpoint" in table
    # without the store, no store rows
    plain = [_interval(900 * k, 0.2, 100) for k in range(1, 4)]
    assert "object-store" not in markdown(summarize(plain[0], plain, steady=3), meta)


def test_the_docs_block_is_replaced_between_its_markers_and_nothing_else(tmp_path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"before\n{BEGIN}\nold table\n{END}\nafter\n")
    write_block(page, "| new |\n")
    assert page.read_text() == f"before\n{BEGIN}\n| new |\n{END}\nafter\n"
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    with pytest.raises(SystemExit, match=r"no <!\-\- bench\.steady"):
        write_block(bare, "| new |\n")
    assert bare.read_text() == "no markers\n"


def test_the_world_spreads_the_asked_rows_over_every_interval() -> None:
    world = _world(rows=10_000, days=2.0, cadence_minutes=15.0, seed=0)
    spec = world.spec
    intervals = 3 * 96  # the warm-up day and two days at 15 minutes
    assert spec.n_pairs == 10_000 * intervals
    requests_per_interval = 900 / spec.mean_gap_seconds
    assert requests_per_interval * spec.candidates_per_request == pytest.approx(10_000)


def test_the_docs_page_has_the_block_the_bench_rewrites() -> None:
    page = Path(__file__).resolve().parents[3] / "docs" / "scaling.md"
    text = page.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert text.index(BEGIN) < text.index(END)
