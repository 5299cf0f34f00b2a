"""Chunking, partitions, input checks and the out folder of ``write_training_set``.

The point-in-time join is replaced by a stand-in whose rows depend only on each impression
(as ``build_training_set``'s do); tests/integration/test_training_set_export.py runs Feast.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris.config import SolarisConfig
from solaris.data.schemas import SchemaError
from solaris.serving import training_export
from solaris.serving.tiers import TIERS, TierFeatures
from solaris.serving.training_export import (
    MANIFEST,
    TrainingSetError,
    chunk_bounds,
    date_parts,
    read_impressions,
    read_training_set,
    write_training_set,
)

DAY = 86_400
T0 = 1_700_000_000 - 1_700_000_000 % DAY  # a UTC midnight: 2023-11-14
D = 2


def _fake_build(impressions: pd.DataFrame, store, cfg, *, fm_version: str) -> TierFeatures:
    """Rows that depend on each impression alone, as the real join's do."""
    u, i, t = (impressions[c].to_numpy(np.int64) for c in ("user_id", "item_id", "ts"))
    n = len(impressions)
    base = (u * 1_000 + i + (t % 997)).astype(np.float32)[:, None]
    features = base + np.arange(len(TIERS) * D, dtype=np.float32)[None, :]
    mask = np.stack([(u + i + k) % 3 == 0 for k in range(len(TIERS))], axis=1)
    tier = np.array([TIERS[int(x) % len(TIERS)] for x in u + i], dtype=object)
    calls.append(n)
    return TierFeatures(features=features, mask=mask, tier=tier)


calls: list[int] = []


@pytest.fixture
def fake_join(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls.clear()
    monkeypatch.setattr(training_export, "build_training_set", _fake_build)
    monkeypatch.setattr("solaris.store.feast_store.require_applied", lambda cfg, redis: None)
    return calls


def _impressions(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "user_id": rng.integers(0, 50, n),
            "item_id": rng.integers(0, 80, n),
            "ts": T0 + rng.integers(0, 3 * DAY, n),  # three days, shuffled
            "label": rng.integers(0, 2, n).astype(np.int8),
            "row": np.arange(n),
        }
    )


def _write(tmp_path: Path, frame: pd.DataFrame, name: str = "imp.parquet") -> Path:
    path = tmp_path / name
    frame.to_parquet(path, index=False)
    return path


def _cfg() -> SolarisConfig:
    return SolarisConfig(namespace="unit_ts")


def _tree(folder: Path) -> list[str]:
    return (
        sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
        if folder.exists()
        else []
    )


def test_chunk_bounds_cover_every_row_once() -> None:
    assert list(chunk_bounds(10, 4)) == [(0, 4), (4, 8), (8, 10)]
    assert list(chunk_bounds(3, 7)) == [(0, 3)]
    assert list(chunk_bounds(0, 7)) == []
    for bad in (0, -1, 1.5, True):
        with pytest.raises(TrainingSetError, match="chunk_rows"):
            list(chunk_bounds(10, bad))  # type: ignore[arg-type]


def test_date_parts_split_sorted_times_by_utc_day() -> None:
    ts = np.array([T0, T0 + 5, T0 + DAY - 1, T0 + DAY, T0 + 3 * DAY + 1])
    assert date_parts(ts) == [
        ("2023-11-14", 0, 3),
        ("2023-11-15", 3, 4),
        ("2023-11-17", 4, 5),
    ]
    assert date_parts(np.array([], np.int64)) == []


@pytest.mark.parametrize("chunk_rows", [1, 7, 1_000])
def test_chunks_give_the_rows_of_one_call_in_time_order(
    tmp_path: Path, fake_join: list[int], chunk_rows: int
) -> None:
    frame = _impressions(60)
    out = tmp_path / "out"
    written = write_training_set(
        _cfg(), _write(tmp_path, frame), out, fm_version="v1", chunk_rows=chunk_rows, store=object()
    )
    assert max(fake_join) <= chunk_rows and sum(fake_join) == 60
    assert written.rows == 60 and written.chunks == -(-60 // chunk_rows)

    # One call on all impressions, in the input order, put in time order (ties: input order).
    whole = _fake_build(frame, None, None, fm_version="v1")
    order = np.argsort(frame["ts"].to_numpy(), kind="stable")
    table, tiers = read_training_set(out)
    assert table.column("row").to_pylist() == order.tolist()
    np.testing.assert_array_equal(tiers.features, whole.features[order])
    np.testing.assert_array_equal(tiers.mask, whole.mask[order])
    assert tiers.tier.tolist() == whole.tier[order].tolist()
    # The impressions' own columns are carried through, ids and times as int64.
    assert table.column("label").to_pylist() == frame["label"].to_numpy()[order].tolist()
    assert table.schema.field("ts").type == pa.int64()


def test_files_are_partitioned_by_day_and_the_manifest_comes_last(
    tmp_path: Path, fake_join: list[int]
) -> None:
    frame = _impressions(40)
    out = tmp_path / "out"
    written = write_training_set(
        _cfg(), _write(tmp_path, frame), out, fm_version="v1", chunk_rows=16, store=object()
    )
    days = {f"date={d}" for d in ("2023-11-14", "2023-11-15", "2023-11-16")}
    assert {f.split("/")[0] for f in written.files} == days
    assert list(written.files) == sorted(written.files)  # names sort in time order
    for name in written.files:
        part = pq.read_table(out / name)
        day = name.split("/")[0].removeprefix("date=")
        ts = np.array(part.column("ts").to_pylist())
        assert (ts // DAY == np.datetime64(day, "D").astype(np.int64)).all()
        assert (np.diff(ts) >= 0).all()
        assert part.schema.field("features").type == pa.list_(pa.float32(), len(TIERS) * D)
        assert part.schema.field("mask").type == pa.list_(pa.bool_(), len(TIERS))
    record = json.loads((out / MANIFEST).read_text())
    assert record == written.record()
    assert record["rows"] == 40 and record["fm_version"] == "v1"
    assert record["namespace"] == "unit_ts"
    assert not [p for p in out.rglob(".*")]  # no temp file left


def test_a_folder_of_impressions_and_timestamps_are_read(
    tmp_path: Path, fake_join: list[int]
) -> None:
    frame = _impressions(20)
    folder = tmp_path / "imp"
    folder.mkdir()
    stamped = frame.assign(ts=pd.to_datetime(frame["ts"], unit="s", utc=True))
    stamped.iloc[:10].to_parquet(folder / "a.parquet", index=False)
    stamped.iloc[10:].to_parquet(folder / "b.parquet", index=False)
    table = read_impressions(folder)
    assert table.column("ts").to_pylist() == frame["ts"].tolist()
    assert table.schema.field("user_id").type == pa.int64()


@pytest.mark.parametrize(
    ("change", "column", "problem"),
    [
        (lambda f: f.drop(columns="item_id"), "item_id", "missing column"),
        (lambda f: f.assign(user_id=f["user_id"].astype(float)), "user_id", "wrong type"),
        (lambda f: f.assign(user_id=-f["user_id"] - 1), "user_id", "negative ids"),
        (lambda f: f.assign(ts=f["ts"] * 1_000), "ts", "epoch seconds"),
        (lambda f: f.assign(ts=f["ts"].astype(str)), "ts", "wrong type"),
        (
            lambda f: f.assign(item_id=f["item_id"].astype("Int64").mask(f.index == 3)),
            "item_id",
            "null",
        ),
        (lambda f: f.assign(mask=1), "mask", "rename"),
    ],
)
def test_bad_impressions_are_refused_naming_file_and_column_and_write_nothing(
    tmp_path: Path, fake_join: list[int], change, column: str, problem: str
) -> None:
    path = _write(tmp_path, change(_impressions(10)))
    out = tmp_path / "out"
    with pytest.raises(SchemaError, match=problem) as caught:
        write_training_set(_cfg(), path, out, fm_version="v1", store=object())
    assert caught.value.column == column and str(path) in str(caught.value)
    assert not out.exists() and fake_join == []


def test_missing_impressions_are_a_schema_error(tmp_path: Path, fake_join: list[int]) -> None:
    with pytest.raises(SchemaError, match="no such file"):
        write_training_set(_cfg(), tmp_path / "nope", tmp_path / "out", fm_version="v")


def test_an_existing_training_set_needs_overwrite_and_other_files_are_never_removed(
    tmp_path: Path, fake_join: list[int]
) -> None:
    path = _write(tmp_path, _impressions(30))
    out = tmp_path / "out"
    first = write_training_set(_cfg(), path, out, fm_version="v1", chunk_rows=8, store=object())
    before = _tree(out)
    with pytest.raises(TrainingSetError, match="already holds a training set"):
        write_training_set(_cfg(), path, out, fm_version="v2", store=object())
    assert _tree(out) == before
    # With overwrite: replaced whole (no file of the old chunking is left).
    again = write_training_set(
        _cfg(), path, out, fm_version="v2", chunk_rows=100, overwrite=True, store=object()
    )
    assert len(again.files) < len(first.files)
    assert sorted(f for f in _tree(out) if f.endswith(".parquet")) == sorted(again.files)
    # A folder holding anything else is refused, overwrite or not.
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(TrainingSetError, match="not a training set"):
        write_training_set(_cfg(), path, other, fm_version="v1", overwrite=True, store=object())
    assert _tree(other) == ["notes.txt"]
    with pytest.raises(TrainingSetError, match="is a file"):
        write_training_set(_cfg(), path, other / "notes.txt", fm_version="v1", store=object())


def test_an_unfinished_folder_is_not_read_as_a_training_set(tmp_path: Path) -> None:
    (tmp_path / "date=2023-11-14").mkdir()
    with pytest.raises(TrainingSetError, match=MANIFEST):
        read_training_set(tmp_path)


def test_no_impressions_write_an_empty_training_set(tmp_path: Path, fake_join: list[int]) -> None:
    path = _write(tmp_path, _impressions(0))
    written = write_training_set(_cfg(), path, tmp_path / "out", fm_version="v", store=object())
    assert written.rows == 0 and written.files == () and fake_join == []
    table, tiers = read_training_set(tmp_path / "out")
    assert table.num_rows == 0 and len(tiers) == 0
