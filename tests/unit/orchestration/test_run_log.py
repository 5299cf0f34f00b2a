"""Each run's task log says what the run did: rows in, rows out, seconds, where it wrote."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, describe_run, write_run_record


def test_a_candidates_run_is_described_by_its_counts_seconds_and_files(tmp_path: Path) -> None:
    record = {"requests": 12, "candidates": 3000, "misses_drained": 4, "selected": 600,
              "fm_passes": 590, "seconds": 1.234}  # fmt: skip
    line = describe_run("live", "solaris_candidates", "k", record, (tmp_path / "ledger.pq",))

    assert line == (
        "solaris_candidates k in namespace live: in requests 12, candidates 3,000, "
        f"misses_drained 4; out selected 600; 1.23 s; wrote {tmp_path / 'ledger.pq'}"
    )


def test_an_enrichment_run_names_the_view_it_wrote_and_the_codes_it_read() -> None:
    record = {"codes_read": 1500, "rows_written": {"uagg": 40}, "seconds": 0.5}
    line = describe_run("demo", "solaris_enrichment", "k", record, ())

    assert "in codes_read 1,500" in line
    assert "out uagg 40 rows (online store and offline files)" in line


def test_figures_that_are_not_counts_are_left_out() -> None:
    record = {"requests": None, "selected": True, "rows_written": {"pair": 1.5}}
    line = describe_run("live", "d", "k", record, ())

    assert "in nothing; out nothing; ? s" in line


def test_writing_a_run_record_logs_its_description_with_the_record_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    layout = CycleLayout(Namespace("live", tmp_path / "artifacts", tmp_path / "repo"))
    record = {"candidates": 10, "selected": 2, "seconds": 0.1}

    with caplog.at_level(logging.INFO, logger="solaris.orchestration.layout"):
        path = write_run_record(layout, "solaris_candidates", "k1", record)

    assert path.is_file()
    assert f"in candidates 10; out selected 2; 0.10 s; wrote {path}" in caplog.text
