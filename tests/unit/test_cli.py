"""The ``solaris`` command's guards: a replay never lands in the live namespace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from solaris.cli import app


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SOLARIS_"):
            monkeypatch.delenv(name)


def test_cycle_refuses_to_replay_into_the_live_namespace() -> None:
    result = CliRunner().invoke(app, ["cycle", "--start", "2023-11-15T00:00:00+00:00"])
    assert result.exit_code == 1
    assert "will not replay into namespace 'live'" in result.output


def test_resetting_the_live_namespace_needs_force() -> None:
    result = CliRunner().invoke(app, ["namespace", "reset", "live"])
    assert result.exit_code == 1
    assert "will not reset namespace 'live'" in result.output and "--force" in result.output


def test_fit_autoencoder_rejects_a_time_without_a_zone() -> None:
    result = CliRunner().invoke(
        app, ["fit-autoencoder", "--start", "2023-11-14T00:00:00", "--end", "2023-11-15"]
    )
    assert result.exit_code == 2
    assert "time zone" in result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "no Redis to read"),
        (["--redis", "redis://localhost:6379"], "host:port"),
        (["--redis", "localhost:6379,colour=blue"], "colour"),
        (["--namespace", "Bad-Name", "--redis", "localhost:6379"], "not a namespace name"),
        (["--workers", "0", "--redis", "localhost:6379"], "--workers"),
    ],
)
def test_serve_refuses_bad_arguments_before_starting(args: list[str], says: str) -> None:
    result = CliRunner().invoke(app, ["serve", *args])
    assert result.exit_code == 2 and says in result.output, result.output


def test_serve_without_codes_names_what_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path))  # not a demo's models
    result = CliRunner().invoke(
        app, ["serve", "--namespace", "nocodes_here", "--redis", "localhost:6379"]
    )
    assert result.exit_code == 1 and "solaris fit-autoencoder" in result.output, result.output


@pytest.mark.parametrize(
    ("value", "why"), [("0", "refreshes nothing"), ("1.5", "less than or equal to 1")]
)
def test_replay_refuses_a_refresh_share_outside_zero_one(value: str, why: str) -> None:
    result = CliRunner().invoke(
        app, ["replay", "--refresh-after-requests", "1", "--refresh-share", value]
    )
    assert result.exit_code == 2
    assert "--refresh-share" in result.output and why in result.output


def test_report_without_the_report_extra_says_how_to_install_it_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """matplotlib is the report extra's, not a dependency of SOLARIS: without it the report
    stops at once (its seeds take tens of minutes) naming the extra, and writes nothing."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    result = CliRunner().invoke(app, ["report", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert ".[report]" in result.output and "matplotlib" in result.output
    assert list(tmp_path.iterdir()) == []
