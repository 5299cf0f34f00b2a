"""The user KNN index on its own schedule: built over every user once per
``cycle.neighbour_index_hours``, grown by the users it lacks in the intervals between."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from solaris.config import SolarisConfig
from solaris.files import atomic_write_parquet
from solaris.namespace import Namespace
from solaris.orchestration.enrichment import build_neighbour_index
from solaris.orchestration.layout import CycleLayout
from solaris.pipeline.neighbors import UserIndex

HOUR = 3_600
START = 1_700_000_000 - 1_700_000_000 % HOUR


def _embeddings(layout: CycleLayout, as_of: int, users: np.ndarray, partitions: int) -> None:
    """Every partition's user embeddings as of ``as_of`` (users split by parity here: the
    index must not depend on how)."""
    rng = np.random.default_rng(as_of)
    emb = rng.standard_normal((len(users), 4)).astype(np.float32)
    for p in range(partitions):
        mine = users % partitions == p
        flat = pa.array(emb[mine].reshape(-1))
        table = pa.table(
            {
                "user_id": pa.array(users[mine], pa.int64()),
                "emb": pa.FixedSizeListArray.from_arrays(flat, 4),
            }
        )
        atomic_write_parquet(layout.user_embeddings(as_of, p), table)


def test_the_index_is_built_daily_and_grown_by_new_users_in_between(tmp_path) -> None:
    cfg = SolarisConfig(
        namespace="t_knn",
        artifacts_dir=tmp_path,
        model={"z_dim": 4},
        cycle={"partitions": 2, "neighbour_index_hours": 24.0},
    )
    layout = CycleLayout(Namespace.of(cfg))
    built = []
    for hour in range(0, 30, 6):  # 0 h, 6 h, ..., 24 h
        as_of = START + hour * HOUR
        users = np.arange(100 + 10 * hour, dtype=np.int64)  # 60 new users every 6 h
        _embeddings(layout, as_of, users, 2)
        assert build_neighbour_index(cfg, as_of) == len(users)
        record = json.loads(layout.neighbour_index_built(as_of).read_text())
        built.append((record["built_at"] - START) // HOUR)
        index = UserIndex.from_bytes(layout.neighbour_index(as_of).read_bytes())
        assert sorted(index.user_ids.tolist()) == users.tolist()
        assert record["added"] == (len(users) if hour in (0, 24) else 60)
    assert built == [0, 0, 0, 0, 24]  # built over everyone at 0 h and again 24 h later
    assert not layout.neighbour_index(START).exists()  # older blobs are removed


def test_a_zero_period_builds_the_index_every_interval(tmp_path) -> None:
    cfg = SolarisConfig(
        namespace="t_knn0",
        artifacts_dir=tmp_path,
        model={"z_dim": 4},
        cycle={"neighbour_index_hours": 0.0},
    )
    layout = CycleLayout(Namespace.of(cfg))
    for hour in (0, 1):
        as_of = START + hour * HOUR
        _embeddings(layout, as_of, np.arange(50, dtype=np.int64), 1)
        build_neighbour_index(cfg, as_of)
        assert json.loads(layout.neighbour_index_built(as_of).read_text())["built_at"] == as_of


def test_a_torn_previous_index_is_built_again_over_every_user(tmp_path, caplog) -> None:
    """The index kept by the previous interval is derived state: torn, the next interval
    builds over every user (logged), instead of raising a raw zip error."""
    cfg = SolarisConfig(
        namespace="t_knn_torn",
        artifacts_dir=tmp_path,
        model={"z_dim": 4},
        cycle={"neighbour_index_hours": 24.0},
    )
    layout = CycleLayout(Namespace.of(cfg))
    _embeddings(layout, START, np.arange(50, dtype=np.int64), 1)
    build_neighbour_index(cfg, START)
    kept = layout.neighbour_index(START)
    kept.write_bytes(kept.read_bytes()[: kept.stat().st_size // 2])
    later = START + HOUR
    _embeddings(layout, later, np.arange(60, dtype=np.int64), 1)
    assert build_neighbour_index(cfg, later) == 60
    record = json.loads(layout.neighbour_index_built(later).read_text())
    assert (record["built_at"], record["added"]) == (later, 60)
    assert str(kept) in caplog.text
