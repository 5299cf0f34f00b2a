"""The Feast registry as Feast's SQL registry on a real PostgreSQL server.

Each test gets its own database (``solaris_reg_<uuid8>``, created with psycopg2 and dropped
after, connections included) on the PostgreSQL at ``127.0.0.1:5432`` (trust auth, user
``postgres``), its own Feast project and the test Redis database of ``conftest.py``, whose
keys of that project are deleted after. When PostgreSQL does not answer the tests skip,
except under ``CI``, where they fail: a missing service never passes as green there.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg2
import pyarrow as pa
import pytest

from solaris.config import ModelConfig, SolarisConfig, StoreConfig
from solaris.namespace import Namespace
from solaris.pipeline.materialize import materialize, pair_rows
from solaris.store import contract
from solaris.store.codec import f16_round
from solaris.store.feast_store import (
    FeatureStoreError,
    apply_definitions,
    delete_project_keys,
    open_feature_store,
)
from solaris.store.keys import project_pattern

pytestmark = pytest.mark.integration

PG_HOST, PG_PORT, PG_USER = "127.0.0.1", 5432, "postgres"
Z_DIM = 8  # as in conftest
EXPECTED_VIEWS = set(contract.VIEWS)
ENTITIES = sorted({contract.USER.name, contract.ITEM.name})


def _admin() -> psycopg2.extensions.connection:
    conn = psycopg2.connect(
        host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres", connect_timeout=3
    )
    conn.autocommit = True  # CREATE/DROP DATABASE cannot run in a transaction
    return conn


@pytest.fixture
def registry_url() -> Iterator[str]:
    """A ``postgresql+psycopg2://`` URL of a database made for this test, dropped after."""
    try:
        admin = _admin()
    except psycopg2.OperationalError as exc:
        reason = f"PostgreSQL at {PG_HOST}:{PG_PORT} (user {PG_USER}) does not answer: {exc}"
        if os.environ.get("CI"):
            pytest.fail(f"the SQL registry tests need it in CI; {reason}", pytrace=False)
        pytest.skip(reason)
    database = f"solaris_reg_{uuid.uuid4().hex[:8]}"
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{database}"')
    try:
        yield f"postgresql+psycopg2://{PG_USER}@{PG_HOST}:{PG_PORT}/{database}"
    finally:
        with admin.cursor() as cur:  # FORCE: the stores' pooled connections go too
            cur.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        admin.close()


def _cfg(repo: Path, namespace: str, registry: str) -> SolarisConfig:
    return SolarisConfig(
        namespace=namespace,
        model=ModelConfig(z_dim=Z_DIM),
        store=StoreConfig(repo_path=repo, registry=registry),
    )


@pytest.fixture
def sql_cfg(repo_copy: Path, feast_project: str, registry_url: str, redis_client):
    """Settings on the test's SQL registry; the project's Redis keys are deleted after."""
    cfg = _cfg(repo_copy, feast_project, registry_url)
    yield cfg
    namespace = Namespace.of(cfg)
    delete_project_keys(redis_client, namespace.project)
    redis_client.delete(namespace.miss_stream, namespace.request_stream)


def _registry_rows(url: str, table: str, project: str) -> list[str]:
    """Names of ``project``'s rows in one registry table, read straight from PostgreSQL."""
    database = url.rsplit("/", 1)[1]
    conn = psycopg2.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname=database)
    try:
        with conn.cursor() as cur:
            name_column = {"entities": "entity_name"}.get(table, "feature_view_name")
            cur.execute(
                f"SELECT {name_column} FROM {table} WHERE project_id = %s ORDER BY 1", (project,)
            )
            return [row[0] for row in cur.fetchall()]
    finally:
        conn.close()


def _view_names(store) -> set[str]:
    return {view.name for view in store.list_feature_views()}


def test_definitions_applied_to_the_sql_registry_are_seen_by_a_fresh_store(
    sql_cfg: SolarisConfig, redis_connection: str, registry_url: str
) -> None:
    applied = apply_definitions(open_feature_store(sql_cfg, redis_connection), sql_cfg)

    other = open_feature_store(sql_cfg, redis_connection)  # as another process would
    assert _view_names(other) == EXPECTED_VIEWS
    assert sorted(e.name for e in other.list_entities()) == ENTITIES
    assert [s.name for s in other.list_feature_services()] == [contract.FEATURE_SERVICE]
    assert applied == sorted([*EXPECTED_VIEWS, *ENTITIES, contract.FEATURE_SERVICE])
    # The rows are in PostgreSQL, and no file registry was written beside the repo.
    assert _registry_rows(registry_url, "feature_views", sql_cfg.namespace) == sorted(
        EXPECTED_VIEWS
    )
    assert not (Path(sql_cfg.store.repo_path) / "data" / "registry.db").exists()


def test_rows_written_through_one_store_are_read_through_another(
    sql_cfg: SolarisConfig, redis_connection: str, redis_client
) -> None:
    writer = open_feature_store(sql_cfg, redis_connection)
    apply_definitions(writer, sql_cfg)
    z = np.random.default_rng(1).normal(size=(3, Z_DIM)).astype(np.float32)
    table = pa.table(
        {
            "user_id": pa.array([1, 2, 3], pa.int64()),
            "item_id": pa.array([11, 12, 13], pa.int64()),
            "z": pa.FixedSizeListArray.from_arrays(pa.array(z.ravel(), pa.float32()), Z_DIM),
            "fm_version": pa.array(["fm-sql-1"] * 3),
            "computed_at": pa.array([1_000_000_000_000] * 3, pa.timestamp("us", tz="UTC")),
        }
    )
    assert not list(redis_client.scan_iter(match=project_pattern(sql_cfg.namespace)))
    result = materialize(writer, contract.PAIR.name, pair_rows(table, z_dim=Z_DIM), batch_id="sql1")
    assert result.rows == 3

    reader = open_feature_store(sql_cfg, redis_connection)
    out = reader.get_online_features(
        features=["pair:z", "pair:fm_version"],
        entity_rows={"user_id": [1, 2, 3, 4], "item_id": [11, 12, 13, 14], "request_ts": 1_000_001},
    ).to_dict()
    assert out["fm_version"] == ["fm-sql-1"] * 3 + [None]
    np.testing.assert_array_equal(np.asarray(out["z"][:3], np.float32), f16_round(z))
    assert out["z"][3] is None


def _apply_in_process(repo: str, namespace: str, url: str, redis: str, barrier, results):
    """One process's apply (spawned: a fresh interpreter, as another worker would be)."""
    try:
        cfg = _cfg(Path(repo), namespace, url)
        barrier.wait(timeout=120)  # both open the new registry (and create its tables) at once
        store = open_feature_store(cfg, redis)
        barrier.wait(timeout=120)  # and both apply at once
        results.put(("ok", apply_definitions(store, cfg)))
    except BaseException:  # reported to the parent, which fails the test
        results.put(("error", traceback.format_exc()))


def test_two_processes_applying_at_once_leave_one_consistent_set_of_views(
    sql_cfg: SolarisConfig, redis_connection: str, registry_url: str
) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    args = (str(sql_cfg.store.repo_path), sql_cfg.namespace, registry_url, redis_connection)
    workers = [
        ctx.Process(target=_apply_in_process, args=(*args, barrier, results)) for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert [kind for kind, _ in outcomes] == ["ok", "ok"], outcomes
    assert outcomes[0][1] == outcomes[1][1]

    store = open_feature_store(sql_cfg, redis_connection)
    assert _view_names(store) == EXPECTED_VIEWS
    assert _registry_rows(registry_url, "feature_views", sql_cfg.namespace) == sorted(
        EXPECTED_VIEWS
    )
    entities = _registry_rows(registry_url, "entities", sql_cfg.namespace)
    assert [e for e in entities if not e.startswith("__")] == ENTITIES  # Feast's __dummy


def test_an_unreachable_registry_is_a_feature_store_error_without_the_password(
    repo_copy: Path, feast_project: str, redis_connection: str
) -> None:
    password = "s3cret-Pw"
    url = f"postgresql+psycopg2://postgres:{password}@127.0.0.1:1/solaris_missing"
    cfg = _cfg(repo_copy, feast_project, url)
    with pytest.raises(FeatureStoreError) as caught:
        open_feature_store(cfg, redis_connection)
    message = str(caught.value)
    assert "registry" in message
    assert "postgresql+psycopg2://postgres:***@127.0.0.1:1/solaris_missing" in message
    assert "Connection refused" in message
    shown = "".join(traceback.format_exception(caught.value))
    assert password not in shown
    assert not (repo_copy / "data").exists()


def test_a_registry_database_that_does_not_exist_is_named_in_the_error(
    repo_copy: Path, feast_project: str, redis_connection: str, registry_url: str
) -> None:
    url = registry_url.rsplit("/", 1)[0] + "/solaris_no_such_db"
    with pytest.raises(FeatureStoreError, match='database "solaris_no_such_db" does not exist'):
        open_feature_store(_cfg(repo_copy, feast_project, url), redis_connection)


def test_a_driver_that_is_not_installed_is_named_with_the_one_to_use(
    repo_copy: Path, feast_project: str, redis_connection: str, registry_url: str
) -> None:
    url = registry_url.replace("postgresql+psycopg2://", "postgresql+psycopg://")
    with pytest.raises(FeatureStoreError, match=r"psycopg.*postgresql\+psycopg2://"):
        open_feature_store(_cfg(repo_copy, feast_project, url), redis_connection)


def test_a_bare_postgresql_url_uses_the_installed_psycopg2_driver(
    sql_cfg: SolarisConfig, redis_connection: str, registry_url: str
) -> None:
    bare = registry_url.replace("postgresql+psycopg2://", "postgresql://")
    cfg = sql_cfg.model_copy(update={"store": sql_cfg.store.model_copy(update={"registry": bare})})
    store = open_feature_store(cfg, redis_connection)
    assert store.config.registry.path == registry_url
    apply_definitions(store, cfg)
    assert _view_names(open_feature_store(sql_cfg, redis_connection)) == EXPECTED_VIEWS
