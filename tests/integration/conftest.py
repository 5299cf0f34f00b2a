"""Integration fixtures: a real Feast FeatureStore over a private copy of ``feature_repo/``.

Every test gets its own Feast project (``t_<uuid8>``), a ``tmp_path`` copy of the feature repo
(registry and offline parquet inside the copy), and Redis database 11 of the Redis at
``127.0.0.1:6379`` (override with ``SOLARIS_TEST_REDIS``). Teardown deletes every Redis key of
that project (Feast's keys end with the project name) and the test's miss stream, so tests
never see each other's rows and never touch other databases.

CI runs these against real services: when Redis does not answer, the fixtures *fail* (they
do not skip), so a missing service can never pass as green.

Cycle state in object storage is tested against a local S3 endpoint: moto's S3 server on a
free loopback port, reached over HTTP by s3fs exactly as a bucket would be (there is no
object store on this machine, and none may be reached from it). Its address and dummy
credentials are handed over the way a deployment hands them over, in ``AWS_*`` variables.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import redis as redis_py

from solaris.config import ModelConfig, SolarisConfig, StoreConfig
from solaris.connection import redis_client as make_redis_client
from solaris.namespace import Namespace
from solaris.store import contract
from solaris.store.codec import normalize
from solaris.store.feast_store import delete_project_keys, online_store_of
from solaris.store.offline import offline_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_REDIS = os.environ.get("SOLARIS_TEST_REDIS", "127.0.0.1:6379,db=11")
Z_DIM = 8
FM_VERSION = "fm-test-1"


@pytest.fixture(scope="session")
def redis_connection() -> str:
    """The test Redis connection string (database 11); fails loudly if Redis is down."""
    try:
        make_redis_client(TEST_REDIS, timeout_s=2.0).ping()
    except (redis_py.RedisError, OSError) as exc:
        pytest.fail(
            f"integration tests need a real Redis at {TEST_REDIS!r} (set SOLARIS_TEST_REDIS "
            f"to point elsewhere); it did not answer: {exc}",
            pytrace=False,
        )
    return TEST_REDIS


@pytest.fixture
def redis_client(redis_connection: str) -> Iterator[redis_py.Redis]:
    client = make_redis_client(redis_connection, timeout_s=2.0)
    yield client
    client.close()


@dataclass(frozen=True)
class S3Endpoint:
    url: str
    env: dict[str, str]  # what a process needs to reach it (AWS_ENDPOINT_URL, credentials)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    """A local S3 endpoint for the session, its settings in this process's environment."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    env = {
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "solaris-test",
        "AWS_SECRET_ACCESS_KEY": "solaris-test",  # moto accepts any; nothing secret
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    try:
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            yield S3Endpoint(url, env)
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_endpoint: S3Endpoint) -> Iterator[str]:
    """A fresh bucket of the local S3 endpoint, as ``s3://<name>``; emptied and removed after."""
    import s3fs

    name = f"solaris-{uuid.uuid4().hex[:12]}"
    fs = s3fs.S3FileSystem(endpoint_url=s3_endpoint.url, skip_instance_cache=True)
    fs.mkdir(name)
    yield f"s3://{name}"
    fs.rm(name, recursive=True)


@pytest.fixture
def feast_project() -> str:
    """A Feast project name unique to this test."""
    return f"t_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A copy of ``feature_repo/`` without its local data (registry, parquet)."""
    target = tmp_path / "feature_repo"
    shutil.copytree(
        REPO_ROOT / "feature_repo",
        target,
        ignore=shutil.ignore_patterns("data", "__pycache__"),
    )
    return target


@pytest.fixture
def solaris_cfg(repo_copy: Path, feast_project: str) -> SolarisConfig:
    """Default settings pointed at the repo copy, the test project and its own miss stream.

    TTLs are the defaults, which are also what ``solaris_features.py`` reads for its views.
    """
    return SolarisConfig(
        namespace=feast_project,
        model=ModelConfig(z_dim=Z_DIM),
        store=StoreConfig(repo_path=repo_copy, miss_stream_maxlen=50),
    )


@pytest.fixture
def feast_store(solaris_cfg: SolarisConfig, redis_connection: str, redis_client):
    """A real ``feast.FeatureStore`` with the repo's definitions applied; cleaned up after."""
    from solaris.store.feast_store import apply_definitions, open_feature_store

    store = open_feature_store(solaris_cfg, redis_connection)
    apply_definitions(store, solaris_cfg)
    yield store
    namespace = Namespace.of(solaris_cfg)
    delete_project_keys(redis_client, namespace.project)
    redis_client.delete(namespace.miss_stream, namespace.request_stream)


# --------------------------------------------------------------------------------------------
# Writing test rows
# --------------------------------------------------------------------------------------------


def _ts(epoch_s) -> pd.Series:
    return pd.to_datetime(pd.Series(epoch_s, dtype="int64"), unit="s", utc=True)


def _vec(z) -> np.ndarray:
    return np.asarray(z, np.float32).reshape(-1)


@dataclass
class RowWriter:
    """Writes view rows to the online store and, with ``offline=True``, to the parquet sources.

    Each method takes one row (scalars; vectors as float arrays of ``Z_DIM``); the row's
    ``computed_at`` is its event time. Rows go through the online store's bulk path
    (``SolarisOnlineStore.write_table``), so they are validated and encoded as the pipeline
    writes them; :meth:`flush_offline` writes what was written, validated the same way.
    """

    store: object
    repo: Path
    cfg: SolarisConfig
    offline: bool = False
    written: dict[str, list[pd.DataFrame]] = field(default_factory=dict)

    def _write(self, view: str, row: dict, *, online: bool = True) -> None:
        frame = pd.DataFrame({k: [v] for k, v in row.items()})
        frame[contract.EVENT_TS] = _ts(frame.pop(contract.COMPUTED_AT))
        if online:
            online_store_of(self.store).write_table(
                self.store.config, self.store.get_feature_view(view), frame
            )
        self.written.setdefault(view, []).append(frame)

    def flush_offline(self) -> None:
        """Write everything written so far to ``data/offline/<view>/`` (one file per view)."""
        for view, frames in self.written.items():
            spec = contract.view(view)
            table = normalize(spec, spec.params(self.cfg), pd.concat(frames, ignore_index=True))
            folder = offline_dir(self.store, view)
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, folder / "rows.parquet")

    def pair(self, user, item, z, computed_at, version=FM_VERSION, *, online=True) -> None:
        row = dict(user_id=user, item_id=item, z=_vec(z), fm_version=version)
        self._write("pair", {**row, "computed_at": computed_at}, online=online)

    def nbr(self, user, item, z_top1, z_mean, computed_at, version=FM_VERSION, *, online=True):
        row = dict(
            user_id=user,
            item_id=item,
            z_top1=_vec(z_top1),
            src_user=user + 1000,
            similarity=np.float32(0.9),
            z_mean=_vec(z_mean),
            n_nbrs=3,
            fm_version=version,
        )
        self._write("nbr", {**row, "computed_at": computed_at}, online=online)

    def uagg(
        self, user, z_sum, count, window_start, computed_at, version=FM_VERSION, *, online=True
    ):
        row = dict(
            user_id=user,
            z_sum=_vec(z_sum),
            count=count,
            window_start=window_start,
            fm_version=version,
        )
        self._write("uagg", {**row, "computed_at": computed_at}, online=online)

    def iagg(self, item, z_mean, count, computed_at, version=FM_VERSION, *, online=True):
        row = dict(item_id=item, z_mean=_vec(z_mean), count=count, fm_version=version)
        self._write("iagg", {**row, "computed_at": computed_at}, online=online)


@pytest.fixture
def rows(feast_store, solaris_cfg: SolarisConfig) -> RowWriter:
    """A :class:`RowWriter` on the test's store."""
    return RowWriter(feast_store, Path(solaris_cfg.store.repo_path), solaris_cfg)


# The local PostgreSQL (trust auth) for Airflow metadata DBs; SOLARIS_TEST_POSTGRES overrides.
POSTGRES = os.environ.get("SOLARIS_TEST_POSTGRES", "postgresql+psycopg2://postgres@127.0.0.1:5432")


@pytest.fixture
def postgres_db() -> Iterator[str]:
    """A throwaway database on the local PostgreSQL; its SQLAlchemy URL. A PostgreSQL that
    does not answer fails the test."""
    import psycopg2

    server = POSTGRES.replace("postgresql+psycopg2://", "postgresql://")
    try:
        admin = psycopg2.connect(f"{server}/postgres", connect_timeout=5)
    except psycopg2.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL at {server} does not answer (start it or set SOLARIS_TEST_POSTGRES): {exc}"
        )
    admin.autocommit = True
    name = f"solaris_airflow_{uuid.uuid4().hex[:8]}"
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{POSTGRES}/{name}"
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()
