"""Materialization into the real store: offline then online, idempotent, validated first.

Each test runs three times: with the offline rows in the feature repo's folder, in a folder
elsewhere and in a bucket of the local S3 endpoint (both ``store.offline_uri``), which
Feast's own offline join then reads.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from solaris.config import ModelConfig, SolarisConfig, StoreConfig
from solaris.data.schemas import SchemaError
from solaris.pipeline.materialize import materialize, pair_rows
from solaris.store.codec import f16_round
from solaris.store.contract import InvalidWriteError
from solaris.store.keys import project_pattern
from solaris.store.offline import offline_dir

pytestmark = pytest.mark.integration
Z_DIM = 8  # as in conftest


@pytest.fixture(params=["repo", "folder", "s3"])
def solaris_cfg(request, repo_copy, feast_project, tmp_path) -> SolarisConfig:
    """conftest's settings, with the offline rows in the repo, in a folder outside it or in
    a fresh S3 bucket."""
    store = {"repo_path": repo_copy, "miss_stream_maxlen": 50}
    if request.param == "folder":
        store["offline_uri"] = str(tmp_path / "offline-elsewhere")
    if request.param == "s3":
        store["offline_uri"] = f"{request.getfixturevalue('s3_bucket')}/offline"
        store["offline_s3_endpoint"] = request.getfixturevalue("s3_endpoint").url
    return SolarisConfig(
        namespace=feast_project, model=ModelConfig(z_dim=Z_DIM), store=StoreConfig(**store)
    )


def _read(path) -> pd.DataFrame:
    return pd.read_parquet(str(path))  # a local path or an s3:// URL


def _embeddings(n: int = 6, version: str = "fm-test-1") -> pa.Table:
    rng = np.random.default_rng(0)
    z = rng.normal(size=(n, Z_DIM)).astype(np.float32)
    computed = np.array([1_000_000 + 3_600 * k for k in range(n)], dtype=np.int64)
    return pa.table(
        {
            "user_id": pa.array(np.arange(n) + 1, pa.int64()),
            "item_id": pa.array(np.arange(n) + 10, pa.int64()),
            "z": pa.FixedSizeListArray.from_arrays(pa.array(z.ravel(), pa.float32()), Z_DIM),
            "fm_version": pa.array([version] * n),
            "computed_at": pa.array(computed * 1_000_000, pa.timestamp("us", tz="UTC")),
        }
    )


def _online_state(store, n: int) -> dict:
    rows = {
        "user_id": list(range(1, n + 1)),
        "item_id": [u + 9 for u in range(1, n + 1)],
        "request_ts": 1_000_000 + 3_600 * n,
    }
    return store.get_online_features(
        features=["pair:z", "pair:fm_version", "pair:computed_at"], entity_rows=rows
    ).to_dict(include_event_timestamps=True)


def _keys(redis_client, project: str) -> list[bytes]:
    return sorted(redis_client.scan_iter(match=project_pattern(project), count=1000))


def test_rerunning_a_batch_leaves_exactly_the_same_state(feast_store, solaris_cfg) -> None:
    store = feast_store
    folder = offline_dir(store, "pair")
    table = _embeddings()
    rows = pair_rows(table, z_dim=Z_DIM)
    first = materialize(store, "pair", rows, batch_id="b1")
    files = sorted(str(p) for p in folder.rglob("*.parquet"))
    contents = {f: _read(f) for f in files}
    online = _online_state(store, 6)

    second = materialize(store, "pair", rows, batch_id="b1")
    assert first.offline_files == second.offline_files
    assert sorted(str(p) for p in folder.rglob("*.parquet")) == files
    for f, before in contents.items():
        pd.testing.assert_frame_equal(_read(f), before)
    assert _online_state(store, 6) == online
    written = table["z"].combine_chunks().flatten().to_numpy().reshape(-1, Z_DIM)
    # Served and stored offline as float16-rounded values, the same on both sides.
    np.testing.assert_array_equal(np.asarray(online["z"][0], np.float32), f16_round(written[0]))
    offline = pd.concat(contents.values(), ignore_index=True).sort_values("user_id")
    np.testing.assert_array_equal(np.stack(offline["z"]), f16_round(written))
    assert [p.name for p in folder.rglob("*") if p.name.startswith(".")] == []


def test_offline_rows_are_partitioned_by_event_date(feast_store, solaris_cfg) -> None:
    rows = pair_rows(_embeddings(30), z_dim=Z_DIM)  # 30 hours: two calendar days
    result = materialize(feast_store, "pair", rows, batch_id="b2")
    dates = sorted(p.parent.name for p in result.offline_files)
    expected = rows["event_ts"].to_pandas().dt.strftime("date=%Y-%m-%d")
    assert dates == sorted(set(expected))
    assert sum(len(_read(p)) for p in result.offline_files) == 30


def test_a_bad_embedding_table_is_rejected_before_anything_is_written(feast_store) -> None:
    table = _embeddings()
    z = table["z"].combine_chunks().flatten().to_numpy().copy()
    z[3] = np.nan
    bad = table.set_column(2, "z", pa.FixedSizeListArray.from_arrays(pa.array(z), Z_DIM))
    with pytest.raises(SchemaError, match="z"):
        pair_rows(bad, z_dim=Z_DIM)
    assert not offline_dir(feast_store, "pair").exists()


def _bad_rows(kind: str) -> pd.DataFrame:
    n = 4
    frame = pd.DataFrame(
        {
            "user_id": np.arange(n) + 1,
            "item_id": np.arange(n) + 10,
            "z": [np.ones(Z_DIM, np.float32)] * n,
            "fm_version": ["fm-test-1"] * n,
            "event_ts": pd.to_datetime(np.full(n, 1_000_000), unit="s", utc=True),
        }
    )
    if kind == "short z":
        frame.at[2, "z"] = np.ones(Z_DIM - 1, np.float32)
    elif kind == "missing z":
        frame = frame.drop(columns="z")
    elif kind == "negative id":
        frame.loc[3, "item_id"] = -5
    elif kind == "id beyond int64":
        frame["item_id"] = np.array([1, 2, 3, 2**63], dtype=np.uint64)
    elif kind == "fm_version not a string":
        frame["fm_version"] = [1, 2, 3, 4]
    return frame


@pytest.mark.parametrize(
    "kind",
    ["short z", "missing z", "negative id", "id beyond int64", "fm_version not a string"],
)
def test_a_bad_row_writes_nothing_offline_or_online(
    kind: str, feast_store, solaris_cfg, redis_client
) -> None:
    before = _keys(redis_client, solaris_cfg.namespace)
    with pytest.raises(InvalidWriteError, match="view 'pair'") as err:
        materialize(feast_store, "pair", _bad_rows(kind), batch_id="bad")
    column = {"short z": "z", "missing z": "z", "fm_version not a string": "fm_version"}
    assert column.get(kind, "item_id") in str(err.value)
    assert _keys(redis_client, solaris_cfg.namespace) == before
    assert not offline_dir(feast_store, "pair").exists()


@pytest.mark.parametrize("view", ["nope", "../../etc", "pair/../../x", 3])
def test_an_unknown_view_is_refused_and_never_becomes_a_path(view, feast_store, solaris_cfg):
    data = solaris_cfg.store.repo_path / "data"
    before = sorted(data.rglob("*")) if data.exists() else []
    with pytest.raises(InvalidWriteError, match="unknown view"):
        materialize(feast_store, view, _bad_rows("none"), batch_id="x")
    with pytest.raises(InvalidWriteError, match="unknown view"):
        offline_dir(feast_store, view)
    assert (sorted(data.rglob("*")) if data.exists() else []) == before


def test_a_bad_batch_id_is_refused_before_writing(feast_store, solaris_cfg, redis_client) -> None:
    with pytest.raises(InvalidWriteError, match="batch_id"):
        materialize(feast_store, "pair", _bad_rows("none"), batch_id="../escape")
    assert not offline_dir(feast_store, "pair").exists()
    assert _keys(redis_client, solaris_cfg.namespace) == []


# -- an online write that fails leaves nothing offline for training -------------------------

T1 = 1_700_000_000


def _pair_table(user: int, item: int, computed_at: int, seed: float) -> pa.Table:
    z = (np.arange(Z_DIM, dtype=np.float32) + seed) * 0.25
    return pair_rows(
        pa.table(
            {
                "user_id": pa.array([user], pa.int64()),
                "item_id": pa.array([item], pa.int64()),
                "z": pa.FixedSizeListArray.from_arrays(pa.array(z, pa.float32()), Z_DIM),
                "fm_version": pa.array(["fm-test-1"]),
                "computed_at": pa.array([computed_at * 1_000_000], pa.timestamp("us", tz="UTC")),
            }
        ),
        z_dim=Z_DIM,
    )


def _historical_computed_at(store, user: int, item: int, ts: int) -> object:
    """What Feast's own offline join (``get_historical_features``) gives for the pair."""
    entity_df = pd.DataFrame(
        {
            "user_id": [user],
            "item_id": [item],
            "event_timestamp": pd.to_datetime([ts], unit="s", utc=True),
        }
    )
    frame = store.get_historical_features(
        entity_df=entity_df, features=["pair:computed_at"]
    ).to_df()
    return frame["computed_at"].iloc[0]


def _files(folder) -> list:
    return sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())


def test_a_failed_online_write_leaves_no_offline_row_for_training(
    feast_store, solaris_cfg, redis_client
) -> None:
    from solaris.serving.training_set import build_training_set
    from solaris.store.feast_store import open_feature_store

    folder = offline_dir(feast_store, "pair")
    # (1, 10) served since T1; the failed write would replace it at T1 + 1 h and add (2, 11).
    materialize(feast_store, "pair", _pair_table(1, 10, T1, 1.0), batch_id="ok")
    files, keys = _files(folder), _keys(redis_client, solaris_cfg.namespace)
    refusing = open_feature_store(solaris_cfg, "127.0.0.1:1")  # same repo; nothing listens
    for user, item, seed in ((1, 10, 9.0), (2, 11, 5.0)):
        with pytest.raises(Exception, match=r"(?i)connect|refused"):
            materialize(refusing, "pair", _pair_table(user, item, T1 + 3600, seed), batch_id="bad")
    assert _files(folder) == files  # no staged, temporary or published file of the batch
    assert _keys(redis_client, solaris_cfg.namespace) == keys

    impressions = pd.DataFrame({"user_id": [1, 2], "item_id": [10, 11], "ts": [T1 + 7200] * 2})
    served = build_training_set(impressions, feast_store, solaris_cfg, fm_version="fm-test-1")
    assert served.mask[:, 0].tolist() == [True, False]  # (2, 11) was never served
    old = (np.arange(Z_DIM, dtype=np.float32) + 1.0) * 0.25
    np.testing.assert_array_equal(served.tier_z[0, 0], old)  # the served code, not the failed one
    assert _historical_computed_at(feast_store, 1, 10, T1 + 7200) == T1

    # The same batch, written while Redis answers, becomes visible to both readers.
    for user, item, seed in ((1, 10, 9.0), (2, 11, 5.0)):
        batch = f"b{user}"
        materialize(feast_store, "pair", _pair_table(user, item, T1 + 3600, seed), batch_id=batch)
    served = build_training_set(impressions, feast_store, solaris_cfg, fm_version="fm-test-1")
    assert served.mask[:, 0].tolist() == [True, True]
    assert _historical_computed_at(feast_store, 1, 10, T1 + 7200) == T1 + 3600


def test_a_staged_batch_is_invisible_to_feast_until_published(feast_store, solaris_cfg) -> None:
    """The staged name is skipped by Feast's reader (dask) and by pyarrow: a batch whose
    online write is still running, or whose process was killed before publishing, is never
    read for training."""
    from solaris.pipeline.materialize import stage_offline
    from solaris.store.codec import normalize
    from solaris.store.offline import published_files
    from solaris.store.online import view_params

    folder = offline_dir(feast_store, "pair")
    materialize(feast_store, "pair", _pair_table(1, 10, T1, 1.0), batch_id="ok")
    spec, params = view_params(feast_store.get_feature_view("pair"))
    rows = normalize(spec, params, _pair_table(1, 10, T1 + 3600, 9.0))  # as materialize does
    staged = stage_offline(rows, folder, "later")
    assert all(s.is_file() for s, _ in staged.files)
    assert [p.name for p in published_files(folder)] == ["batch-ok.parquet"]
    assert _historical_computed_at(feast_store, 1, 10, T1 + 7200) == T1
    staged.publish()
    assert _historical_computed_at(feast_store, 1, 10, T1 + 7200) == T1 + 3600
