"""The bench's constants, stores and projects, seeded rows and the context every section shares."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa

from solaris.config import SolarisConfig
from solaris.connection import redis_client, unlink_matching
from solaris.pipeline.materialize import pair_rows
from solaris.store import keys
from solaris.store.codec import f16_round
from solaris.store.contract import FEATURE_SERVICE, PAIR, ViewParams
from solaris.store.feast_store import (
    apply_definitions,
    delete_project_keys,
    online_store_of,
    open_feature_store,
)
from solaris.store.online import SolarisOnlineStore, view_params

if TYPE_CHECKING:
    import redis as redis_py
    from feast import FeatureStore

    from bench.feature_store.fetch import Wire


REDIS_DEFAULT = "127.0.0.1:6379,db=13"
REPO = Path(__file__).resolve().parents[2] / "feature_repo"
FM_VERSION = "fm-c8e291864d63"  # 15 characters, like a real version
USER = 42  # the user of the benchmarked request
FIRST_ITEM = 1_000
WRITE_USER0, WRITE_ITEMS_PER_USER = 100_000, 50
MEMORY_USER0 = 500_000
KEYS_PER_PIPELINE = 1_000  # user keys per pipeline of the raw write floors

FULL = {
    "reps": 2_000,
    "warmup": 200,
    "concurrency_seconds": 60.0,
    "single_seconds": 10.0,
    "write_rows": 50_000,
    "write_reps": 3,
    "memory_users": 1_000,
    "profile_calls": 200,
}
QUICK = {
    "reps": 200,
    "warmup": 20,
    "concurrency_seconds": 5.0,
    "single_seconds": 2.0,
    "write_rows": 5_000,
    "write_reps": 2,
    "memory_users": 200,
    "profile_calls": 50,
}

STOCK_YAML = """\
project: stock
provider: local
registry: data/registry.db
online_store:
  type: redis
  connection_string: >-
    ${SOLARIS_STORE__REDIS}
offline_store:
  type: file
entity_key_serialization_version: 3
"""


def say(text: str = "") -> None:
    print(text, flush=True)


# --------------------------------------------------------------------------------------------
# Stores and projects
# --------------------------------------------------------------------------------------------


def bench_config(
    repo: Path, project: str, redis: str, d: int, registry: Path | None = None
) -> SolarisConfig:
    """Settings of a bench project (the serving bounds are the defaults)."""
    store: dict[str, Any] = {"repo_path": repo, "redis": redis}
    if registry is not None:
        store["registry"] = str(registry)
    return SolarisConfig(namespace=project, model={"z_dim": d}, store=store)


def share_registry(store: FeatureStore, owner: FeatureStore) -> None:
    """Make ``store`` use ``owner``'s Registry object (both projects are in one registry
    file). Feast's feature-resolution cache (``feast.utils._get_cached_request_context``) is
    process-global and remembers one registry's load time: calls alternating between two
    Registry objects clear it every time, and every such call resolves its features again
    (section 1b). A serving process has one store; sharing the object gives every timed
    variant that condition."""
    store._registry = owner.registry


def stock_definitions(cfg: SolarisConfig) -> list[Any]:
    """The previous ``feature_repo/solaris_features.py`` (one hash per entity key, vectors
    as float16 / float32 ``Bytes``), built here with ``cfg``'s TTLs."""
    from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType
    from feast.types import Bytes, Float32, Int64, String

    pair_ttl = dt.timedelta(hours=max(cfg.selection.ttl_hours, cfg.store.uagg_window_hours))
    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.INT64)
    item = Entity(name="item", join_keys=["item_id"], value_type=ValueType.INT64)

    def view(name: str, entities: list, ttl: dt.timedelta, fields: dict) -> FeatureView:
        return FeatureView(
            name=name,
            entities=entities,
            ttl=ttl,
            schema=[Field(name=k, dtype=v) for k, v in fields.items()],
            source=FileSource(
                name=f"{name}_source", path=f"data/offline/{name}", timestamp_field="event_ts"
            ),
        )

    stamp = {"fm_version": String, "computed_at": Int64}
    pair = view("pair", [user, item], pair_ttl, {"z": Bytes, **stamp})
    nbr = view(
        "nbr",
        [user, item],
        pair_ttl,
        {
            "z_top1": Bytes,
            "src_user": Int64,
            "similarity": Float32,
            "z_mean": Bytes,
            "n_nbrs": Int64,
            **stamp,
        },
    )
    uagg = view(
        "uagg",
        [user],
        dt.timedelta(hours=cfg.store.uagg_ttl_hours),
        {"z_sum": Bytes, "count": Int64, "window_start": Int64, **stamp},
    )
    iagg = view(
        "iagg",
        [item],
        dt.timedelta(hours=cfg.store.iagg_ttl_hours),
        {"z_mean": Bytes, "count": Int64, **stamp},
    )
    service = FeatureService(name=FEATURE_SERVICE, features=[pair, nbr, uagg, iagg])
    return [user, item, pair, nbr, uagg, iagg, service]


def stock_keys(project: str, users: Sequence[int], items: Sequence[int]) -> list[bytes]:
    """Feast's Redis keys of (user, item) entity keys (``serialize_entity_key`` + project)."""
    from feast.infra.online_stores.helpers import _redis_key
    from feast.protos.feast.types.EntityKey_pb2 import EntityKey
    from feast.protos.feast.types.Value_pb2 import Value

    return [
        _redis_key(
            project,
            EntityKey(
                join_keys=["item_id", "user_id"],
                entity_values=[Value(int64_val=i), Value(int64_val=u)],
            ),
        )
        for u, i in zip(users, items, strict=True)
    ]


def solaris_pair_keys(project: str, users: Sequence[int]) -> list[str]:
    prefix = keys.view_key(project, PAIR)
    return [keys.partition_key(prefix, PAIR, int(u)) for u in users]


def delete_bench_keys(client: redis_py.Redis, solaris: Sequence[str], stock: str) -> int:
    """Delete the bench projects' keys: SOLARIS projects by prefix (and their miss streams),
    stock Feast's by its project suffix."""
    removed = sum(delete_project_keys(client, p, extra_keys=[f"{p}:misses"]) for p in solaris)
    return removed + unlink_matching(client, "*" + stock)


# --------------------------------------------------------------------------------------------
# Rows (seeded)
# --------------------------------------------------------------------------------------------


def _ts(event_s: int, n: int) -> pa.Array:
    return pa.array(np.full(n, event_s * 1_000_000, np.int64), pa.timestamp("us", tz="UTC"))


def _vectors(z: np.ndarray) -> pa.Array:
    return pa.FixedSizeListArray.from_arrays(
        pa.array(np.ascontiguousarray(z, np.float32).ravel(), pa.float32()), z.shape[1]
    )


def pair_input(users: np.ndarray, items: np.ndarray, z: np.ndarray, event_s: int) -> pa.Table:
    """``pair`` rows as the pipeline hands them to the store
    (:func:`solaris.pipeline.materialize.pair_rows` of a pair-embedding table)."""
    n = len(users)
    embeddings = pa.table(
        {
            "user_id": pa.array(users, pa.int64()),
            "item_id": pa.array(items, pa.int64()),
            "z": _vectors(z),
            "fm_version": pa.array([FM_VERSION] * n, pa.string()),
            "computed_at": _ts(event_s, n),
        }
    )
    return pair_rows(embeddings, z_dim=z.shape[1])


@dataclass
class RequestData:
    """One request's rows for the four serving views (float32; pair/nbr stored as f16)."""

    user: int
    items: np.ndarray
    z_pair: np.ndarray
    z_top1: np.ndarray
    z_mean: np.ndarray
    src_user: np.ndarray
    similarity: np.ndarray
    z_sum: np.ndarray  # [d]
    z_item: np.ndarray
    computed_at: int

    @property
    def window_start(self) -> int:
        return self.computed_at - 86_400


def request_data(n: int, d: int, computed_at: int, rng: np.random.Generator) -> RequestData:
    def codes() -> np.ndarray:
        return rng.standard_normal((n, d)).astype(np.float32)

    z_pair = codes()
    return RequestData(
        user=USER,
        items=np.arange(FIRST_ITEM, FIRST_ITEM + n, dtype=np.int64),
        z_pair=z_pair,
        z_top1=codes(),
        z_mean=codes(),
        src_user=rng.integers(20_000, 30_000, size=n).astype(np.int64),
        similarity=rng.uniform(0.2, 0.9, size=n).astype(np.float32),
        z_sum=f16_round(z_pair).sum(axis=0),
        z_item=codes(),
        computed_at=computed_at,
    )


def solaris_tables(r: RequestData) -> dict[str, pa.Table]:
    """The request's rows in the SOLARIS views' input schema."""
    n = len(r.items)
    users = np.full(n, r.user, np.int64)
    version = pa.array([FM_VERSION] * n, pa.string())
    return {
        "pair": pair_input(users, r.items, r.z_pair, r.computed_at),
        "nbr": pa.table(
            {
                "user_id": users,
                "item_id": r.items,
                "z_top1": _vectors(r.z_top1),
                "z_mean": _vectors(r.z_mean),
                "src_user": r.src_user,
                "similarity": r.similarity,
                "n_nbrs": np.full(n, 7, np.int64),
                "fm_version": version,
                "event_ts": _ts(r.computed_at, n),
            }
        ),
        "uagg": pa.table(
            {
                "user_id": [r.user],
                "z_sum": _vectors(r.z_sum[None, :]),
                "count": [n],
                "window_start": [r.window_start],
                "fm_version": [FM_VERSION],
                "event_ts": _ts(r.computed_at, 1),
            }
        ),
        "iagg": pa.table(
            {
                "item_id": r.items,
                "z_mean": _vectors(r.z_item),
                "count": np.full(n, 250, np.int64),
                "fm_version": version,
                "event_ts": _ts(r.computed_at, n),
            }
        ),
    }


def _f16_bytes(z: np.ndarray) -> list[bytes]:
    return [row.tobytes() for row in z.astype(np.float16)]


def _stamp(n: int, computed_at: int) -> dict[str, Any]:
    return {
        "fm_version": [FM_VERSION] * n,
        "computed_at": np.full(n, computed_at, np.int64),
        "event_ts": pd.Series([pd.Timestamp(computed_at, unit="s", tz="UTC")] * n),
    }


def stock_pair_frame(
    users: np.ndarray, items: np.ndarray, z: np.ndarray, computed_at: int
) -> pd.DataFrame:
    return pd.DataFrame(
        {"user_id": users, "item_id": items, "z": _f16_bytes(z), **_stamp(len(users), computed_at)}
    )


def stock_frames(r: RequestData) -> dict[str, pd.DataFrame]:
    """The request's rows in the old layout: vectors as float16 / float32 bytes."""
    n = len(r.items)
    users = np.full(n, r.user, np.int64)
    return {
        "pair": stock_pair_frame(users, r.items, r.z_pair, r.computed_at),
        "nbr": pd.DataFrame(
            {
                "user_id": users,
                "item_id": r.items,
                "z_top1": _f16_bytes(r.z_top1),
                "src_user": r.src_user,
                "similarity": r.similarity,
                "z_mean": _f16_bytes(r.z_mean),
                "n_nbrs": np.full(n, 7, np.int64),
                **_stamp(n, r.computed_at),
            }
        ),
        "uagg": pd.DataFrame(
            {
                "user_id": [r.user],
                "z_sum": [r.z_sum.astype("<f4").tobytes()],
                "count": [n],
                "window_start": [r.window_start],
                **_stamp(1, r.computed_at),
            }
        ),
        "iagg": pd.DataFrame(
            {
                "item_id": r.items,
                "z_mean": [row.tobytes() for row in r.z_item.astype("<f4")],
                "count": np.full(n, 250, np.int64),
                **_stamp(n, r.computed_at),
            }
        ),
    }


# --------------------------------------------------------------------------------------------
# The benchmark context
# --------------------------------------------------------------------------------------------


@dataclass
class Bench:
    """Everything the sections share."""

    redis_url: str
    redis: redis_py.Redis
    tmp: Path
    tag: str  # the pid part of the bench's project names
    n: int
    d: int
    now: int
    cfg: SolarisConfig
    store: FeatureStore  # SOLARIS store, project bsol<pid>
    online: SolarisOnlineStore
    stock: FeatureStore  # Feast's Redis store, project bstk<pid>
    stock_project: str
    raw_project: str  # section 3's raw pipeline floor
    touch_project: str  # section 3's raw + transaction
    memory_projects: list[str]  # section 4, one per population
    data: RequestData
    pair_params: ViewParams
    notes: list[str] = field(default_factory=list)
    sockets: list[Wire] = field(default_factory=list)  # closed with the bench

    @property
    def project(self) -> str:
        return self.cfg.namespace

    def wire(self, floor: Wire) -> Wire:
        self.sockets.append(floor)
        return floor


def solaris_projects(tag: str) -> list[str]:
    """The bench's SOLARIS projects on the ``--redis`` server: the store's, section 3's raw
    floors and section 4's populations."""
    return [f"bsol{tag}", f"braw{tag}", f"btch{tag}", *(f"bm{k}{tag}" for k in range(3))]


def write_request(store: FeatureStore, data: RequestData) -> None:
    """The request's rows, all four views, through the store's bulk path."""
    online = online_store_of(store)
    for name, table in solaris_tables(data).items():
        online.write_table(store.config, store.get_feature_view(name), table)


def open_solaris_project(
    tmp: Path, project: str, redis_url: str, d: int
) -> tuple[SolarisConfig, FeatureStore]:
    """A SOLARIS Feast project in a repo copy of its own under ``tmp``, definitions
    applied: its settings and its store."""
    repo = tmp / f"{project}_repo"
    shutil.copytree(REPO, repo, ignore=shutil.ignore_patterns("data", "__pycache__"))
    cfg = bench_config(repo, project, redis_url, d)
    store = open_feature_store(cfg, redis_url)
    apply_definitions(store, cfg)
    return cfg, store


@contextmanager
def bench_context(redis_url: str, n: int, d: int, seed: int) -> Iterator[Bench]:
    """Open both projects and write one request's rows to all four views of each."""
    tag = f"{os.getpid() % 100_000:05d}"
    projects = solaris_projects(tag)
    sol, raw, touch, memory = projects[0], projects[1], projects[2], projects[3:]
    stock = f"bstk{tag}"
    tmp = Path(tempfile.mkdtemp(prefix="solaris-bench-"))
    client = redis_client(redis_url, timeout_s=30.0)
    delete_bench_keys(client, projects, stock)
    try:
        cfg, store = open_solaris_project(tmp, sol, redis_url, d)

        stock_repo = tmp / "stock_repo"
        stock_repo.mkdir()
        (stock_repo / "feature_store.yaml").write_text(STOCK_YAML)
        # The stock project lives in the SOLARIS registry file (see share_registry).
        registry = (Path(cfg.store.repo_path) / cfg.store.registry).resolve()
        stock_cfg = bench_config(stock_repo, stock, redis_url, d, registry)
        stock_store = open_feature_store(stock_cfg, redis_url)
        stock_store.apply(stock_definitions(stock_cfg))

        now = int(time.time())
        data = request_data(n, d, now - 60, np.random.default_rng(seed))
        write_request(store, data)
        for name, frame in stock_frames(data).items():
            stock_store.write_to_online_store(name, frame)
        bench = Bench(
            redis_url=redis_url,
            redis=client,
            tmp=tmp,
            tag=tag,
            n=n,
            d=d,
            now=now,
            cfg=cfg,
            store=store,
            online=online_store_of(store),
            stock=stock_store,
            stock_project=stock,
            raw_project=raw,
            touch_project=touch,
            memory_projects=memory,
            data=data,
            pair_params=view_params(store.get_feature_view("pair"))[1],
        )
        try:
            yield bench
        finally:
            for floor in bench.sockets:
                floor.close()
    finally:
        delete_bench_keys(client, projects, stock)
        client.close()
        shutil.rmtree(tmp, ignore_errors=True)


# -- helpers the sections share -----------------------------------------------------------


def percentile(a: np.ndarray | list[float], q: float) -> float:
    return float(np.percentile(a, q)) if len(a) else float("nan")


def verdict(value: float, target: float, *, at_most: bool) -> str:
    met = value <= target if at_most else value >= target
    return "met" if met else "NOT MET"


def hash_settings(client: redis_py.Redis) -> dict[str, str]:
    """The server's small-hash limits (listpack names on Redis 7, ziplist on 6.2)."""
    out: dict[str, str] = {}
    for name in ("hash-max-listpack-value", "hash-max-listpack-entries"):
        out.update(client.config_get(name))
    if not out:
        for name in ("hash-max-ziplist-value", "hash-max-ziplist-entries"):
            out.update(client.config_get(name))
    return {as_text(k): as_text(v) for k, v in out.items()}


def as_text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
