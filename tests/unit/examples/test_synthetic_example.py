"""The synthetic worked example: a non-MovieLens FM, traffic and verifier behind the adapters."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from solaris import adapters
from solaris.config import SolarisConfig
from solaris.examples import synthetic
from solaris.examples.synthetic import (
    FEATURE_NAMES,
    ITEM_WINDOW_SECONDS,
    PAIR_WINDOW_SECONDS,
    POPULARITY_WEIGHT,
    LogFeatures,
    SyntheticFoundationModel,
    SyntheticWorld,
)

LOG_COLUMNS = ["request_id", "user_id", "item_id", "ts", "label"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> SolarisConfig:
    cfg = SolarisConfig(artifacts_dir=tmp_path_factory.mktemp("synthetic"))
    synthetic.prepare(cfg)
    return cfg


@pytest.fixture(scope="module")
def log(prepared: SolarisConfig) -> pd.DataFrame:
    return synthetic.traffic(prepared).requests(0, 2**40)


def _queries(log: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` log rows plus a few unknown users and items, at their own times."""
    rows = log.sample(n, random_state=seed)[["user_id", "item_id", "ts"]]
    extra = rows.head(3).assign(user_id=[10**12, 7, 10**12], item_id=[5, 10**9, -4])
    return pd.concat([rows, extra], ignore_index=True)


def test_prepare_is_deterministic(prepared: SolarisConfig, tmp_path: Path) -> None:
    other = SolarisConfig(artifacts_dir=tmp_path)
    folder = synthetic.prepare(other)
    assert folder == tmp_path / "synthetic"
    first = synthetic.synthetic_dir(prepared)
    for name in (synthetic.LOG_FILE, synthetic.FM_FILE, f"{synthetic.FM_FILE}.json"):
        assert (folder / name).read_bytes() == (first / name).read_bytes()
    # The FM's weights are tensors only: they load without trusting a pickle.
    weights = torch.load(folder / synthetic.FM_FILE, weights_only=True)
    assert weights and all(isinstance(t, torch.Tensor) for t in weights.values())
    version = synthetic.foundation_model(other).version
    assert version == synthetic.foundation_model(prepared).version
    assert version.startswith("synthfm-") and len(version) == len("synthfm-") + 12
    synthetic.prepare(other)  # again, in place
    assert synthetic.foundation_model(other).version == version
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temp files left


def test_another_seed_gives_another_version(prepared: SolarisConfig, tmp_path: Path) -> None:
    other = SolarisConfig(artifacts_dir=tmp_path)
    synthetic.prepare(other, SyntheticWorld(seed=1))
    assert synthetic.foundation_model(other).version != synthetic.foundation_model(prepared).version


def test_log_spec(log: pd.DataFrame) -> None:
    assert len(log) == synthetic.SyntheticWorld().spec.n_pairs
    assert log["ts"].is_monotonic_increasing
    assert log["ts"].min() >= 1_699_920_000 and 1_699_920_000 % 86_400 == 0
    span_h = (log["ts"].max() - log["ts"].min()) / 3_600
    assert 48 < span_h < 96
    assert 0.03 < log["label"].notna().mean() < 0.07
    assert (log["score"] >= 1).mean() > 0.2  # many pairs recur within 6 hours


def test_features_are_causal(prepared: SolarisConfig, log: pd.DataFrame) -> None:
    fm = synthetic.foundation_model(prepared)
    full = fm.log
    for t in np.quantile(log["ts"], [0.3, 0.7]).astype(np.int64):
        before = log[log["ts"] < t]
        truncated = LogFeatures.from_table(before)
        # Queries at t: every log pair (incl. those of requests at t itself) and an unknown one.
        users = np.append(log["user_id"].to_numpy(), 10**12)
        items = np.append(log["item_id"].to_numpy(), 3)
        ts = np.full(users.size, t)
        np.testing.assert_array_equal(
            full.dense(users, items, ts), truncated.dense(users, items, ts)
        )
        np.testing.assert_array_equal(
            full.score(users, items, ts), truncated.score(users, items, ts)
        )
        cut = SyntheticFoundationModel(fm.module, truncated, fm.version)
        torch.testing.assert_close(
            cut.shared(cut.features(users, items, ts)), fm.shared(fm.features(users, items, ts))
        )
    # ...and rows at t do change features after t.
    t = int(log["ts"].iloc[len(log) // 2])
    at_t = log.loc[log["ts"] == t, ["user_id", "item_id"]].to_numpy()[:1]
    seen = FEATURE_NAMES.index("pair_seen")
    now, later = (full.dense(at_t[:, 0], at_t[:, 1], [when])[0, seen] for when in (t, t + 1))
    assert later > now


def test_features_match_a_brute_force_count(log: pd.DataFrame) -> None:
    counters = LogFeatures.from_table(log)
    queries = _queries(log, 60)
    dense = counters.dense(queries["user_id"], queries["item_id"], queries["ts"])
    score = counters.score(queries["user_id"], queries["item_id"], queries["ts"])
    assert dense.shape == (len(queries), len(FEATURE_NAMES)) and dense.dtype == np.float32
    labelled = log["label"].notna()
    positive = log["label"].fillna(0).astype(int) == 1
    for k, q in enumerate(queries.itertuples()):
        past = log["ts"] < q.ts
        item, user = past & (log["item_id"] == q.item_id), past & (log["user_id"] == q.user_id)
        pair = item & (log["user_id"] == q.user_id)
        item_24h = item & (log["ts"] >= q.ts - ITEM_WINDOW_SECONDS)
        pair_6h = pair & (log["ts"] >= q.ts - PAIR_WINDOW_SECONDS)
        expected = [
            np.log1p(item.sum()),
            np.log1p(item_24h.sum()),
            np.log1p((item & labelled).sum()),
            ((item & positive).sum() + 1) / ((item & labelled).sum() + 2),
            np.log1p(user.sum()),
            ((user & positive).sum() + 1) / ((user & labelled).sum() + 2),
            np.log1p(pair_6h.sum()),
            np.log1p(pair.sum()),
        ]
        np.testing.assert_allclose(dense[k], np.float32(expected), rtol=1e-6)
        expected_score = pair_6h.sum() + POPULARITY_WEIGHT * np.log1p(item_24h.sum())
        assert score[k] == np.float32(expected_score)


def test_shared_is_b_by_24_float(prepared: SolarisConfig, log: pd.DataFrame) -> None:
    fm = synthetic.foundation_model(prepared)
    assert fm.shared_dim == 24
    queries = _queries(log, 100)
    batch = fm.features(
        queries["user_id"].to_numpy(), queries["item_id"].to_numpy(), queries["ts"].to_numpy()
    )
    assert len(batch) == len(queries) and batch.dense.device.type == "cpu"
    assert int(batch.item_index[-1]) == fm.module.n_items  # an unknown item
    h = fm.shared(batch)
    assert h.shape == (len(queries), 24) and h.dtype == torch.float32
    assert torch.isfinite(h).all() and not h.requires_grad
    assert fm.to(torch.device("cpu")) is fm
    empty = fm.features(np.array([], np.int64), np.array([], np.int64), np.array([], np.int64))
    assert fm.shared(empty).shape == (0, 24)


def test_adapters_satisfy_the_protocols(prepared: SolarisConfig) -> None:
    fm = synthetic.foundation_model(prepared)
    source = synthetic.traffic(prepared)
    check = synthetic.verifier(prepared)
    assert isinstance(fm, adapters.FoundationModel)
    assert isinstance(source, adapters.TrafficSource)
    assert isinstance(check, adapters.Verifier)
    assert check.version == "synthetic-recurrence"
    for name, protocol in (
        ("foundation_model", adapters.FoundationModel),
        ("traffic", adapters.TrafficSource),
        ("verifier", adapters.Verifier),
    ):
        path = f"solaris.examples.synthetic:{name}"
        assert isinstance(adapters.load(path, prepared, protocol, name), protocol)


def test_requests_respect_bounds_and_dtypes(prepared: SolarisConfig, log: pd.DataFrame) -> None:
    source = synthetic.traffic(prepared)
    start, end = (int(t) for t in np.quantile(log["ts"], [0.25, 0.5]))
    frame = source.requests(start, end)
    assert list(frame.columns) == [*LOG_COLUMNS, "score"]
    assert frame.dtypes.astype(str).to_dict() == {
        "request_id": "int64",
        "user_id": "int64",
        "item_id": "int64",
        "ts": "int64",
        "label": "Int8",
        "score": "float32",
    }
    assert frame["ts"].min() >= start and frame["ts"].max() < end
    assert frame["ts"].is_monotonic_increasing and frame.index.equals(pd.RangeIndex(len(frame)))
    expected = log[(log["ts"] >= start) & (log["ts"] < end)].reset_index(drop=True)
    pd.testing.assert_frame_equal(frame, expected)
    assert frame["label"].isna().any() and frame["label"].notna().any()
    assert source.requests(end, end).empty
    assert source.requests(end, start).empty


def test_verifier_recomputes_the_logged_score(prepared: SolarisConfig, log: pd.DataFrame) -> None:
    rescored = synthetic.verifier(prepared).score(log)
    logged = adapters.LoggedScores().score(log)
    np.testing.assert_array_equal(rescored, logged)


def test_missing_artifacts_name_prepare(tmp_path: Path) -> None:
    cfg = SolarisConfig(artifacts_dir=tmp_path)
    for factory in (synthetic.foundation_model, synthetic.traffic, synthetic.verifier):
        with pytest.raises(
            FileNotFoundError, match=r"solaris\.examples\.synthetic\.prepare\(cfg\)"
        ):
            factory(cfg)


def test_fm_refuses_a_log_it_was_not_trained_on(prepared: SolarisConfig, tmp_path: Path) -> None:
    other = SolarisConfig(artifacts_dir=tmp_path)
    folder = synthetic.prepare(other)
    table = pq.read_table(folder / synthetic.LOG_FILE)
    pq.write_table(table.slice(0, table.num_rows - 1), folder / synthetic.LOG_FILE)
    with pytest.raises(ValueError, match="prepare"):
        synthetic.foundation_model(other)


def test_import_has_no_movielens() -> None:
    code = (
        "import sys, solaris.examples.synthetic\n"
        "bad = sorted(m for m in sys.modules if 'movielens' in m or m in "
        "('solaris.examples.movielens.features', 'solaris.examples.movielens.models.fm'))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
