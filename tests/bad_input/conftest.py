"""Shared helpers of the bad-input drill: snapshots of files and Redis keys, and one real
Feast store on Redis for the modules that write to it or read from it.

Every case takes its snapshots before the bad call and compares them after::

    snap = snapshot_files(folder)
    keys = snapshot_redis(client, "proj:*")
    before = snap(), keys()
    with pytest.raises(SomeSolarisError, match="names the field"):
        bad_call()
    assert (snap(), keys()) == before

A file snapshot holds every path under the folders (files with their size and mtime in ns;
folders by name only, since a temp file created and removed again changes a folder's mtime
without writing anything); a Redis snapshot holds every matching key with its ``DUMP`` (type
and contents) and whether it expires.

Redis: database 15 of the Redis at 127.0.0.1:6379 is this suite's own (10 to 14 belong to
other suites); every key lives under the session's Feast project ``b_<uuid8>`` and is deleted
at teardown. When Redis does not answer, the fixtures *fail* (as the integration suite's do),
so a missing service never passes as green.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import redis as redis_py

from solaris.config import ModelConfig, SolarisConfig, StoreConfig
from solaris.connection import redis_client as make_redis_client
from solaris.namespace import Namespace

REPO_ROOT = Path(__file__).resolve().parents[2]
REDIS = "127.0.0.1:6379,db=15"  # this suite's own database number
Z_DIM = 8
FM_VERSION = "fm-bad-input-1"
NOW = 1_700_000_000  # 2023-11-14 22:13:20 UTC
MAX_CANDIDATES = 10

FileState = dict[str, tuple[str, int, int]]
RedisState = dict[bytes, tuple[bytes | None, bool]]


def files_state(*roots: Path) -> FileState:
    """Every path under ``roots``: ``(kind, size, mtime_ns)`` of files, ``("dir", 0, 0)`` of
    folders, ``("absent", 0, 0)`` of a root that does not exist."""
    state: FileState = {}
    for root in map(Path, roots):
        if not root.exists():
            state[str(root)] = ("absent", 0, 0)
            continue
        for path in [root, *root.rglob("*")]:
            if path.is_dir() and not path.is_symlink():
                state[str(path)] = ("dir", 0, 0)
            else:
                st = path.lstat()
                state[str(path)] = ("file", st.st_size, st.st_mtime_ns)
    return state


def redis_state(client: redis_py.Redis, pattern: str) -> RedisState:
    """Every key matching ``pattern`` (``SCAN``, never ``KEYS``): its ``DUMP`` and whether it
    has an expiry."""
    return {
        key: (client.dump(key), client.pttl(key) > 0)
        for key in sorted(client.scan_iter(match=pattern, count=1000))
    }


@pytest.fixture
def snapshot_files() -> Callable[..., Callable[[], FileState]]:
    """``snapshot_files(*folders)`` → a function that returns their :func:`files_state`."""

    def factory(*roots: Path) -> Callable[[], FileState]:
        return lambda: files_state(*roots)

    return factory


@pytest.fixture
def snapshot_redis() -> Callable[[redis_py.Redis, str], Callable[[], RedisState]]:
    """``snapshot_redis(client, pattern)`` → a function that returns its :func:`redis_state`."""

    def factory(client: redis_py.Redis, pattern: str) -> Callable[[], RedisState]:
        return lambda: redis_state(client, pattern)

    return factory


@pytest.fixture(autouse=True)
def _no_solaris_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own ``SOLARIS_*`` variables never reach a case."""
    for name in list(os.environ):
        if name.upper().startswith("SOLARIS_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The suite's Redis (database 15); fails loudly if Redis is down."""
    try:
        client = make_redis_client(REDIS, timeout_s=2.0)
        client.ping()
        client.close()
    except (redis_py.RedisError, OSError) as exc:
        pytest.fail(f"the bad-input suite needs a real Redis at {REDIS!r}: {exc}", pytrace=False)
    return REDIS


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis_py.Redis]:
    client = make_redis_client(redis_url, timeout_s=2.0)
    yield client
    client.close()


def vectors(n: int, seed: float = 1.0) -> list[np.ndarray]:
    """``n`` distinct, valid ``Z_DIM`` float32 codes."""
    return [(np.arange(Z_DIM, dtype=np.float32) + seed + k) * 0.25 for k in range(n)]


def event_ts(n: int, at: int = NOW) -> pd.Series:
    return pd.Series(pd.to_datetime([at] * n, unit="s", utc=True))


def pair_frame(n: int = 2, user: int = 1, first_item: int = 10, at: int = NOW) -> pd.DataFrame:
    """``n`` valid rows of the ``pair`` view (one user, consecutive items)."""
    return pd.DataFrame(
        {
            "user_id": [user] * n,
            "item_id": list(range(first_item, first_item + n)),
            "z": vectors(n),
            "fm_version": [FM_VERSION] * n,
            "event_ts": event_ts(n, at),
        }
    )


@dataclass
class FeastWorld:
    """A real Feast store (the repo's definitions applied) on the suite's Redis, in a Feast
    project of its own, holding a few valid rows online and offline."""

    cfg: SolarisConfig
    store: object  # feast.FeatureStore
    client: redis_py.Redis
    repo: Path

    @property
    def project(self) -> str:
        return self.cfg.namespace

    @property
    def key_pattern(self) -> str:
        """Every Redis key of the project: its views and its streams."""
        return f"{self.project}:*"

    @property
    def data_dir(self) -> Path:
        """The repo's data folder: registry and offline parquet of every view."""
        return self.repo / "data"


@pytest.fixture(scope="package")
def feast_world(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[FeastWorld]:
    """One store for the package (building it costs seconds); cases only ever fail to write,
    so they cannot disturb each other."""
    from solaris.pipeline.materialize import materialize
    from solaris.store.feast_store import (
        apply_definitions,
        delete_project_keys,
        open_feature_store,
    )

    tmp = tmp_path_factory.mktemp("bad_input_feast")
    repo = tmp / "feature_repo"
    shutil.copytree(
        REPO_ROOT / "feature_repo", repo, ignore=shutil.ignore_patterns("data", "__pycache__")
    )
    with pytest.MonkeyPatch.context() as mp:  # package scope: before the autouse fixture
        for name in list(os.environ):
            if name.upper().startswith("SOLARIS_"):
                mp.delenv(name)
        cfg = SolarisConfig(
            namespace=f"b_{uuid.uuid4().hex[:8]}",
            artifacts_dir=tmp / "artifacts",
            model=ModelConfig(z_dim=Z_DIM),
            store=StoreConfig(
                repo_path=repo,
                redis=redis_url,
                max_candidates=MAX_CANDIDATES,
                miss_stream_maxlen=50,
            ),
        )
    store = open_feature_store(cfg, redis_url)
    apply_definitions(store, cfg)
    client = make_redis_client(redis_url, timeout_s=2.0)
    world = FeastWorld(cfg, store, client, repo)
    try:
        materialize(store, "pair", pair_frame(3, user=1, first_item=10), batch_id="seed")
        uagg = pd.DataFrame(
            {
                "user_id": [1],
                "z_sum": vectors(1),
                "count": [3],
                "window_start": [NOW - 86_400],
                "fm_version": [FM_VERSION],
                "event_ts": event_ts(1),
            }
        )
        materialize(store, "uagg", uagg, batch_id="seed")
        assert client.exists(f"{cfg.namespace}:pair:{{u:1}}")  # the snapshots are not empty
        yield world
    finally:
        namespace = Namespace.of(cfg)
        delete_project_keys(client, namespace.project)
        client.close()
