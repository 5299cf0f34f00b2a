"""``solaris training-set`` on a real Feast store: the rows equal one ``build_training_set``
call on the same impressions, whatever the chunk size, and bad input writes nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from solaris.cli import app
from solaris.serving.training_export import MANIFEST, read_training_set
from solaris.serving.training_set import build_training_set

pytestmark = pytest.mark.integration

Z_DIM = 8  # tests/integration/conftest.py
FM_VERSION = "fm-test-1"
T0 = 1_700_000_000  # 2023-11-14 22:13:20 UTC: impressions fall on two days
H = 3600


def _z(seed: float) -> np.ndarray:
    return (np.arange(Z_DIM, dtype=np.float32) + seed) * 0.25


@pytest.fixture
def world(rows) -> None:
    """Every tier, stale and wrong-version rows and a rewrite (as test_training_set.py)."""
    own, a, b = _z(1), _z(2), _z(5)
    rows.offline = True
    rows.pair(1, 10, own, T0 - 2 * H)
    rows.pair(1, 10, _z(9), T0 + 1 * H)
    rows.pair(1, 11, _z(3), T0 - 30 * H)
    rows.pair(2, 10, _z(4), T0 - 60, version="fm-old")
    rows.pair(2, 11, _z(6), T0 - 60)
    rows.nbr(1, 12, _z(7), _z(8), T0 - 3 * H)
    rows.nbr(2, 12, _z(7), _z(8), T0 - 7 * H)
    rows.uagg(1, own + a + b, 3, window_start=T0 - 25 * H, computed_at=T0 - H)
    rows.uagg(2, a + b, 2, window_start=T0 - 25 * H, computed_at=T0 - H)
    rows.iagg(13, _z(10), 5, T0 - 2 * H)
    rows.iagg(14, _z(11), 5, T0 - 2 * H, version="fm-old")
    rows.flush_offline()


def _impressions(times: list[int], users: list[int], items: list[int]) -> pd.DataFrame:
    grid = pd.DataFrame(
        [(u, i, t) for t in times for u in users for i in items],
        columns=["user_id", "item_id", "ts"],
    )
    grid = pd.concat([grid, grid.iloc[:3]], ignore_index=True)  # repeated impressions too
    shuffled = grid.sample(frac=1.0, random_state=0).reset_index(drop=True)
    return shuffled.assign(row=np.arange(len(shuffled)), label=np.arange(len(shuffled)) % 2)


@pytest.fixture
def config_file(tmp_path: Path, solaris_cfg) -> Path:
    path = tmp_path / "solaris.yaml"
    settings = {
        "namespace": solaris_cfg.namespace,
        "model": {"z_dim": Z_DIM},
        "store": {"repo_path": str(solaris_cfg.store.repo_path)},
    }
    path.write_text(yaml.safe_dump(settings))
    return path


def _run(config_file: Path, *args: str):
    return CliRunner().invoke(app, ["training-set", "--config", str(config_file), *args])


def _tree(folder: Path) -> list[str]:
    if not folder.exists():
        return []
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def test_the_command_writes_what_one_call_gives_for_every_chunk_size(
    world, solaris_cfg, feast_store, config_file: Path, tmp_path: Path
) -> None:
    imp = _impressions([T0 + H, T0 + 3 * H, T0 + 30 * H], [1, 2, 3], [10, 11, 12, 13, 14])
    source = tmp_path / "impressions.parquet"
    imp.to_parquet(source, index=False)
    whole = build_training_set(imp, feast_store, solaris_cfg, fm_version=FM_VERSION)
    order = np.argsort(imp["ts"].to_numpy(), kind="stable")  # the output's time order
    assert {"pair", "nbr", "uagg", "iagg", "none"} <= set(whole.tier.tolist())

    for chunk_rows in (1, 7, len(imp)):
        out = tmp_path / f"out-{chunk_rows}"
        args = ["--impressions", str(source), "--out", str(out), "--fm-version", FM_VERSION]
        result = _run(config_file, *args, "--chunk-rows", str(chunk_rows))
        assert result.exit_code == 0, result.output
        line = result.stdout.strip().splitlines()[-1]
        assert line.startswith(f"wrote {len(imp)} training rows") and "peak RSS" in line
        table, tiers = read_training_set(out)
        assert table.column("row").to_pylist() == order.tolist(), chunk_rows
        assert tiers.features.tobytes() == whole.features[order].tobytes(), chunk_rows
        assert tiers.mask.tobytes() == whole.mask[order].tobytes(), chunk_rows
        assert tiers.tier.tolist() == whole.tier[order].tolist(), chunk_rows
        assert table.column("label").to_pylist() == imp["label"].to_numpy()[order].tolist()
        days = sorted({p.name for p in out.iterdir() if p.is_dir()})
        assert days == ["date=2023-11-14", "date=2023-11-15", "date=2023-11-16"], chunk_rows


def test_bad_input_is_one_error_line_and_writes_nothing(
    world, solaris_cfg, feast_store, config_file: Path, tmp_path: Path
) -> None:
    imp = _impressions([T0 + H], [1, 2], [10, 13])
    good = tmp_path / "good.parquet"
    imp.to_parquet(good, index=False)
    out = tmp_path / "out"
    version = ["--fm-version", FM_VERSION]

    def refused(impressions: Path, *extra: str, match: str) -> None:
        before = _tree(out)
        result = _run(config_file, "--impressions", str(impressions), "--out", str(out), *extra)
        assert result.exit_code == 1, result.output
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith("Error: ") and match in lines[-1], result.stderr
        assert "Traceback" not in result.output
        assert _tree(out) == before

    missing = tmp_path / "missing.parquet"
    imp.drop(columns="ts").to_parquet(missing, index=False)
    refused(missing, *version, match=f"{missing}: column 'ts': missing column")
    negative = tmp_path / "negative.parquet"
    imp.assign(item_id=-imp["item_id"]).to_parquet(negative, index=False)
    refused(negative, *version, match="column 'item_id': 7 negative ids")
    floats = tmp_path / "floats.parquet"
    imp.assign(user_id=imp["user_id"] + 0.5).to_parquet(floats, index=False)
    refused(floats, *version, match="column 'user_id': wrong type")
    refused(good, *version, "--namespace", "nobody_here", match="namespace 'nobody_here'")
    refused(good, match="autoencoder")  # no --fm-version and no codes in this namespace

    result = _run(config_file, "--impressions", str(good), "--out", str(out), *version)
    assert result.exit_code == 0, result.output
    written = _tree(out)
    assert MANIFEST in written
    refused(good, *version, match="already holds a training set")
    assert _tree(out) == written
    result = _run(
        config_file, "--impressions", str(good), "--out", str(out), *version, "--overwrite"
    )
    assert result.exit_code == 0, result.output
