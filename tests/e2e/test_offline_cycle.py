"""The whole offline cycle (what `make demo` runs) on the tiny fake MovieLens, via the CLI."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from solaris.cli import app
from solaris.connection import redis_client
from solaris.data.schemas import read_table
from solaris.store.feast_store import delete_project_keys

REPO_ROOT = Path(__file__).resolve().parents[2]


REDIS = "127.0.0.1:6379,db=14"  # this suite's own database number


@pytest.fixture
def config_file(tiny_movielens: Path, tmp_path: Path, tiny_config) -> Iterator[Path]:
    project = f"e2e_{uuid.uuid4().hex[:8]}"
    config = tiny_config(tmp_path, project, REDIS)  # tiny_movielens is tmp_path/ml-100k
    path = tmp_path / "solaris.yaml"
    path.write_text(yaml.safe_dump(config))
    yield path
    delete_project_keys(redis_client(REDIS), project, extra_keys=[f"{project}:misses"])


def test_demo_prints_every_figure_and_writes_valid_artifacts(config_file: Path) -> None:
    # The Airflow stage has its own end-to-end tests (tests/integration/test_dag_runs.py).
    result = CliRunner().invoke(app, ["demo", "--config", str(config_file), "--no-airflow"])
    assert result.exit_code == 0, result.output
    for label in (
        "requests (60 s buckets)",
        "mean candidates per request",
        "recurrence",
        "retrieval recall",
        "FM test log-loss",
        "VM test log-loss",
        "FM advantage",
        "native pair coverage",
        "verifier",
        "random",
        "oracle",
    ):
        assert label in result.output
    artifacts = Path(yaml.safe_load(config_file.read_text())["artifacts_dir"])
    summary = json.loads((artifacts / "demo_summary.json").read_text())
    assert all(0.0 <= c <= 1.0 for c in summary["coverage"].values())
    read_table(artifacts / "log" / "candidates.parquet", "candidates")
    assert "airflow" not in summary
    # The models are a new version, pinned for the demo's namespace, which reads them.
    version = summary["models"]["version"]
    listed = CliRunner().invoke(
        app, ["models", "list", "--config", str(config_file), "--namespace", "demo"]
    )
    assert listed.exit_code == 0, listed.output
    fm_version = summary["models"]["fm_version"]
    assert f"{version}  fm_version {fm_version}  pinned by: demo\n" in listed.output
    assert f"namespace 'demo' reads {artifacts / 'models' / 'versions' / version}" in listed.output

    # `solaris replay` reads the same artifacts back and reproduces the demo's coverage.
    replayed = CliRunner().invoke(app, ["replay", "--config", str(config_file)])
    assert replayed.exit_code == 0, replayed.output
    assert f"{summary['coverage']['verifier']:.1%}" in replayed.output


def test_demo_is_deterministic_under_a_fixed_seed(config_file: Path, tmp_path: Path) -> None:
    runs = []
    for name in ("a", "b"):
        config = yaml.safe_load(config_file.read_text())
        config["artifacts_dir"] = str(tmp_path / name)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        assert CliRunner().invoke(app, ["demo", "-c", str(path), "--no-airflow"]).exit_code == 0
        summary = json.loads((tmp_path / name / "demo_summary.json").read_text())
        runs.append((summary["models"]["fm_version"], summary["coverage"]))
    assert runs[0] == runs[1]


def test_replay_without_artifacts_says_what_to_run(config_file: Path) -> None:
    result = CliRunner().invoke(app, ["replay", "--config", str(config_file)])
    assert result.exit_code == 1  # a message, not a traceback
    assert "run `solaris demo` first" in result.output
    assert not isinstance(result.exception, FileNotFoundError)


def test_replay_rejects_a_bad_share_before_loading_anything(config_file: Path) -> None:
    result = CliRunner().invoke(app, ["replay", "-c", str(config_file), "--share", "1.5"])
    assert result.exit_code == 2  # a usage error, named, before MovieLens or torch load
    assert "--share" in result.output


def test_demo_asking_for_a_missing_gpu_fails_before_writing_anything(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    monkeypatch.setenv("SOLARIS_DEVICE", "cuda")
    result = CliRunner().invoke(app, ["demo", "-c", str(config_file)])
    # A DeviceError (a SolarisError): one "Error: ..." line and exit 1, no traceback.
    assert result.exit_code == 1
    assert "Error:" in result.output and "cuda" in result.output
    artifacts = Path(yaml.safe_load(config_file.read_text())["artifacts_dir"])
    assert not artifacts.exists() or not any(artifacts.iterdir())
