"""Feature-store benchmark of the SOLARIS online store (``solaris.store.online``).

Run: ``.venv/bin/python -m bench.feature_store`` (Redis at ``127.0.0.1:6379``, database 13;
override with ``--redis``; ``--quick`` for a smoke run). Every speed figure is a ratio of
variants measured side by side in this one run, because the machines are noisy: repetitions
are interleaved in a shuffled order after a warm-up, and p50/p99 are taken per variant.
Nothing here calls ``gc.freeze``.

Set-up: one user × ``N`` candidates (``--candidates``, 300; ``d`` = ``--dim``, 32) with all
four serving views (pair, nbr, uagg, iagg) written through ``SolarisOnlineStore.write_table``
in the bench's own Feast project ``bsol<pid>``; the same rows in Feast's own Redis online
store (``online_store: {type: redis}``) in project ``bstk<pid>`` with the previous per-pair
layout (vectors as float16/float32 ``Bytes``, :func:`stock_definitions`). Hash fields are
the store's 8-byte little-endian member ids (``keys.member_fields``). Every variant is
checked to return the written values before anything is timed.

1. **Fetch latency** (p50/p99 ms) on the ``--redis`` server: ``client``
   (``SolarisFeatures.fetch``, store opened by the client itself, after ``warm_up``) ·
   ``feast get_online_features`` on the SOLARIS store (the FeatureService, no ``to_dict``)
   and the same ``+ to_dict`` · ``stock feast + to_dict`` (one FeatureService call on the old
   layout) · ``raw pipeline``, the floor: a redis-py pipeline (``execute_command``, the
   fields as 8-byte ``bytes``) of exactly the commands the store sends, no decoding · ``raw
   packed``: the store's own bytes (``online._round_trip(client, online._pack(commands),
   count)``), i.e. the floor without redis-py's pipeline packing · ``wire``: the same bytes
   on a plain socket, every reply read back by hiredis, nothing else (:class:`Wire`; the
   serving issue's floor: client/wire ≤ 2 at p50, ≤ 2.5 at p99). The set-up captures what the
   store sends (``online._pack`` wrapped): its commands must equal the raw ones and its bytes
   the bytes redis-py packs for the raw pipeline. Targets: client/floor ≤ 2 at p50 and ≤ 3 at
   p99; stock/client ≥ 20. A **second block** times ``client``, ``feast
   get_online_features``, ``raw pipeline`` and ``raw packed`` on a private
   ``embedded_redis()``, which applies ``keys.SERVER_SETTINGS`` (hash-max-ziplist-value 256,
   -entries 512; the 300-field hashes are listpacks there), in a project of its own
   (``bemb<pid>``). **1c** times the client, the two redis-py floors and the wire
   interleaved with each other only. The Feast variants share the client's Registry object
   (:func:`share_registry`). **1b** times the client's fetch right after a
   ``get_online_features`` on a second FeatureStore (another Registry object) against right
   after the same call on its own store: the store caches its plan per Registry object, so
   little or no penalty is expected. Garbage collections during the timed runs are counted
   (``gc.callbacks``), not prevented.
2. **Concurrency**: ``--threads`` (16) threads calling ``fetch`` on one ``SolarisFeatures``
   for ``--concurrency-seconds`` (60): requests/s, share with full features, exceptions,
   client stats, latency under load; single-thread requests/s of the client and of stock
   Feast for ``--single-seconds`` (10). Target: aggregate / stock single-thread ≥ 5.
3. **Online writes** of ``--write-rows`` (50,000) pair rows, 50 per user, in shuffled row
   order, median of ``--write-reps`` (3) interleaved rounds, each round newer event times:
   ``bulk write_table`` (the whole call: validation, encoding, writing; per key the store
   sends one transaction: ``MULTI``, its ``HSET``s, ``HSETNX`` of the prune marker,
   ``PEXPIRE``, ``HGET`` of the marker, ``EXEC``) · ``feast
   write_to_online_store`` on the SOLARIS store · ``stock feast write_to_online_store`` ·
   ``raw pipeline``, the floor: a redis-py pipeline of ``HSET key <8-byte field, record>...``
   + ``PEXPIRE key ms`` per user key, records pre-encoded (``codec.encode_records``), 1,000
   keys per pipeline · ``raw + transaction`` (information: the store's transaction per key,
   i.e. exactly the commands of the store's write, checked byte for byte against them
   before timing). Target: bulk/raw ≥ 0.6.
4. **Redis bytes per cached pair**: ``solaris.store.footprint.view_footprint`` (``MEMORY
   USAGE key SAMPLES 0`` summed over the pair keys / rows; prune markers are not rows) against
   the record size, on the running Redis and on a private ``embedded_redis()`` (which applies
   ``keys.SERVER_SETTINGS``), for 1 user × 300, ``--memory-users`` (1,000) × 50 and × 120
   pairs (each population in a project of its own, ``bm0``/``bm1``/``bm2`` + pid), plus stock
   Feast's layout for 300 pairs. The servers' value and entries limits (``CONFIG GET``) and
   the keys' encodings are printed. Target: ≤ 1.5 × the record under the recommended setting.
5. **Where the time goes**: cProfile of ``--profile-calls`` (200) client fetches, top 15
   functions by own time.

Keys of the bench's projects (``bsol``, ``braw``, ``btch``, ``bm0``-``bm2``, ``bstk`` + pid,
the miss streams) are deleted at the start and the end; nothing else in the database is
touched, and no database is flushed. Repo copies live in a temporary directory.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import gc
import itertools
import json
import os
import pstats
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hiredis
import numpy as np
import pandas as pd
import pyarrow as pa

from bench.machine import machine_facts
from solaris.config import SolarisConfig
from solaris.pipeline.materialize import pair_rows
from solaris.serving.client import SolarisFeatures
from solaris.store import keys
from solaris.store import online as online_mod
from solaris.store.codec import decode_records, encode_records, f16_round, normalize
from solaris.store.connection import RedisTarget, redis_client, unlink_matching
from solaris.store.contract import EVENT_TS, FEATURE_SERVICE, PAIR, SERVING_VIEWS, ViewParams
from solaris.store.feast_store import (
    apply_definitions,
    delete_project_keys,
    online_store_of,
    open_feature_store,
    repo_config_dict,
)
from solaris.store.footprint import view_footprint
from solaris.store.local_redis import embedded_redis
from solaris.store.online import SolarisOnlineStore, view_params

if TYPE_CHECKING:
    import redis as redis_py
    from feast import FeatureStore
    from feast.repo_config import RepoConfig

REDIS_DEFAULT = "127.0.0.1:6379,db=13"
REPO = Path(__file__).resolve().parents[1] / "feature_repo"
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


# --------------------------------------------------------------------------------------------
# 1. Fetch latency
# --------------------------------------------------------------------------------------------

Command = tuple[bytes, str, np.ndarray | None]  # (command, key, member ids): _pack's input
Args = tuple[Any, ...]  # one command's arguments for redis-py's execute_command
Fetch = Callable[[], Any]

FLOOR = "raw pipeline (floor)"
WIRE = "wire (raw socket + hiredis)"


def read_commands(project: str, data: RequestData) -> list[Command]:
    """The commands the store sends for the request: one per serving view, in service
    order; the item ids are one array shared by the three HMGETs, as in the store (so
    ``_pack`` frames their fields once)."""
    out: list[Command] = []
    for spec in SERVING_VIEWS:
        prefix = keys.view_key(project, spec)
        key = keys.partition_key(prefix, spec, data.user) if spec.partition else prefix
        if spec.member is None:
            out.append((b"GET", key, None))
        else:
            out.append((b"HMGET", key, data.items))
    return out


def command_args(commands: Sequence[Command]) -> list[Args]:
    """redis-py arguments of ``commands``: each member id as its 8-byte hash field."""
    return [
        (command, key) if members is None else (command, key, *keys.member_fields(members).tolist())
        for command, key, members in commands
    ]


def store_commands(store: FeatureStore, rows: dict[str, list[int]]) -> tuple[list[Command], bytes]:
    """What the store really sends for the request: ``_pack``'s input and output, captured
    once by wrapping it."""
    captured: list[tuple[list[Command], bytes]] = []
    original = online_mod._pack

    def spy(commands: Sequence[Command]) -> list[bytes]:
        packed = original(commands)
        copies = [(c, k, None if m is None else np.array(m, copy=True)) for c, k, m in commands]
        captured.append((copies, b"".join(packed)))
        return packed

    online_mod._pack = spy
    try:
        store.get_online_features(
            features=store.get_feature_service(FEATURE_SERVICE),
            entity_rows=rows,
            full_feature_names=True,
        )
    finally:
        online_mod._pack = original
    if len(captured) != 1:
        raise RuntimeError(f"the store packed {len(captured)} batches for one request, not 1")
    return captured[0]


def pipeline_bytes(client: redis_py.Redis, args: Sequence[Args]) -> bytes:
    """The bytes a redis-py pipeline sends for ``args`` (its connection's own packer)."""
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        return b"".join(bytes(chunk) for chunk in conn.pack_commands(args))
    finally:
        pool.release(conn)


def checked_commands(
    client: redis_py.Redis, store: FeatureStore, project: str, data: RequestData
) -> list[Command]:
    """The raw variants' commands, after checking that they are the store's: the same
    commands and fields, and redis-py's pipeline packs them to the store's bytes."""
    commands = read_commands(project, data)
    actual, packed = store_commands(store, entity_rows(data))
    args = command_args(commands)
    if command_args(actual) != args:
        raise RuntimeError(f"the raw commands differ from the store's: {actual[:2]} ...")
    if pipeline_bytes(client, args) != packed:
        raise RuntimeError("redis-py packs the raw commands to other bytes than the store's")
    return commands


def entity_rows(data: RequestData) -> dict[str, list[int]]:
    items = data.items.tolist()
    return {"user_id": [data.user] * len(items), "item_id": items}


def open_client(cfg: SolarisConfig, redis_url: str) -> SolarisFeatures:
    """A ``SolarisFeatures`` that opens its own store (``store=None``), warmed up."""
    client = SolarisFeatures(cfg, redis=redis_url, fm_version=FM_VERSION)
    client.warm_up()
    return client


def client_fetch(data: RequestData, now: int, client: SolarisFeatures) -> Fetch:
    user, items = data.user, data.items.copy()
    return lambda: client.fetch(user, items, now=now)


def feast_fetch(store: FeatureStore, rows: dict[str, list[int]], *, to_dict: bool) -> Fetch:
    """One ``get_online_features`` through the serving FeatureService."""
    service = store.get_feature_service(FEATURE_SERVICE)

    def fetch() -> Any:
        response = store.get_online_features(
            features=service, entity_rows=rows, full_feature_names=True
        )
        return response.to_dict() if to_dict else response

    return fetch


def raw_pipeline(client: redis_py.Redis, args: Sequence[Args]) -> Fetch:
    """The floor: a redis-py pipeline of the store's commands (fields as 8-byte ``bytes``,
    built once), no decoding."""

    def fetch() -> list:
        pipe = client.pipeline(transaction=False)
        for command in args:
            pipe.execute_command(*command)
        return pipe.execute()

    return fetch


def raw_packed(client: redis_py.Redis, commands: Sequence[Command]) -> Fetch:
    """The store's own bytes, packed per call, on one pooled connection, no decoding."""
    count = len(commands)
    return lambda: online_mod._round_trip(client, online_mod._pack(commands), count)


class Wire:
    """The wire floor: the store's exact request bytes written on a plain TCP socket and
    every reply read back with hiredis until all are parsed, nothing else (no pool, no
    decoding). Plain TCP only: a TLS connection string has no such floor here."""

    def __init__(self, redis_url: str, packed: list[bytes], count: int) -> None:
        target = RedisTarget.parse(redis_url)
        if target.options.get("ssl"):
            raise RuntimeError("the wire floor needs a plain TCP connection string")
        (host, port), options = target.nodes[0], target.options
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        hello = []
        if options.get("password"):
            user = options.get("username")
            hello.append(("AUTH", *((user,) if user else ()), options["password"]))
        hello.append(("SELECT", int(options.get("db", 0))))
        for command in hello:
            self.sock.sendall(hiredis.pack_command(command))
            if self._replies(1)[0] is False:
                raise RuntimeError(f"{command[0]} refused by the server")
        self.payload = b"".join(packed)
        self.count = count

    def _replies(self, count: int) -> list:
        reader = hiredis.Reader()
        out: list = []
        while len(out) < count:
            reply = reader.gets()
            if reply is False:
                reader.feed(self.sock.recv(1 << 20))
            else:
                out.append(reply)
        return out

    def __call__(self) -> list:
        self.sock.sendall(self.payload)
        return self._replies(self.count)

    def close(self) -> None:
        self.sock.close()


def fetch_variants(b: Bench, client: SolarisFeatures) -> dict[str, Fetch]:
    """The timed variants on the ``--redis`` server. The Feast ones use the client's own
    FeatureStore (and stock Feast its Registry object, :func:`share_registry`), as one
    serving process would."""
    commands = checked_commands(b.redis, b.store, b.project, b.data)
    rows = entity_rows(b.data)
    share_registry(b.stock, client.store)
    return {
        "client": client_fetch(b.data, b.now, client),
        "feast get_online_features": feast_fetch(client.store, rows, to_dict=False),
        "feast + to_dict": feast_fetch(client.store, rows, to_dict=True),
        "stock feast + to_dict": feast_fetch(b.stock, rows, to_dict=True),
        FLOOR: raw_pipeline(b.redis, command_args(commands)),
        "raw packed": raw_packed(b.redis, commands),
        WIRE: b.wire(Wire(b.redis_url, online_mod._pack(commands), len(commands))),
    }


def check_values(b: Bench, variants: dict[str, Fetch]) -> None:
    """Every variant returns the written rows (so nobody benchmarks zeros); raises if not.
    Checks the variants present (the embedded block has no stock Feast, no ``to_dict``)."""
    n, d = b.n, b.d
    z_pair, z_item = f16_round(b.data.z_pair), b.data.z_item
    problems = []
    out = variants["client"]()
    if not (out.mask.shape == (n, 4) and out.mask.all()):
        problems.append(f"client: not every tier present ({out.counts()})")
    if not np.array_equal(out.tier_z[:, 0], z_pair):
        problems.append("client: pair z differs from what was written")
    feast: list[tuple[str, dict]] = [
        ("feast get_online_features", variants["feast get_online_features"]().to_dict())
    ]
    if "feast + to_dict" in variants:
        feast.append(("feast + to_dict", variants["feast + to_dict"]()))
    for name, cols in feast:
        if not np.array_equal(np.asarray(cols["pair__z"], np.float32), z_pair):
            problems.append(f"{name}: pair z differs")
        if not np.array_equal(np.asarray(cols["iagg__z_mean"], np.float32), z_item):
            problems.append(f"{name}: iagg z_mean differs")
        if any(v is None for v in cols["uagg__z_sum"] + cols["nbr__z_top1"]):
            problems.append(f"{name}: uagg or nbr rows missing")
    if "stock feast + to_dict" in variants:
        stock = variants["stock feast + to_dict"]()
        stock_z = np.frombuffer(b"".join(stock["pair__z"]), "<f2").reshape(n, d)
        if not np.array_equal(stock_z.astype(np.float32), z_pair):
            problems.append("stock feast: pair z differs")
        if not np.array_equal(
            np.frombuffer(b"".join(stock["iagg__z_mean"]), "<f4").reshape(n, d), z_item
        ):
            problems.append("stock feast: iagg z_mean differs")
    for name in (FLOOR, "raw packed", WIRE):
        replies = variants[name]()
        rows = decode_records(PAIR, b.pair_params, replies[0])
        if not (rows.found.all() and np.array_equal(rows.values["z"].astype(np.float32), z_pair)):
            problems.append(f"{name}: pair records differ")
        if replies[2] is None or any(v is None for v in replies[1] + replies[3]):
            problems.append(f"{name}: nbr, uagg or iagg records missing")
    if problems:
        raise RuntimeError("set-up check failed: " + "; ".join(problems))


def interleaved(
    variants: dict[str, Fetch], reps: int, warmup: int, seed: int
) -> dict[str, np.ndarray]:
    """Milliseconds per call; every repetition runs each variant once, in shuffled order."""
    for _ in range(warmup):
        for fetch in variants.values():
            fetch()
    order = list(variants)
    rng = random.Random(seed)
    times: dict[str, list[int]] = {k: [] for k in variants}
    clock = time.perf_counter_ns
    for _ in range(reps):
        rng.shuffle(order)
        for name in order:
            fetch = variants[name]
            t0 = clock()
            fetch()
            times[name].append(clock() - t0)
    return {k: np.asarray(v) / 1e6 for k, v in times.items()}


@contextmanager
def gc_counter() -> Iterator[list[int]]:
    """Garbage collections per generation while the block runs (counted, not changed)."""
    counts = [0, 0, 0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            counts[info["generation"]] += 1

    gc.callbacks.append(callback)
    try:
        yield counts
    finally:
        gc.callbacks.remove(callback)


def key_encodings(client: redis_py.Redis, project: str, data: RequestData) -> dict[str, str]:
    """``OBJECT ENCODING`` of the request's key of each serving view."""
    out = {}
    for spec in SERVING_VIEWS:
        prefix = keys.view_key(project, spec)
        key = keys.partition_key(prefix, spec, data.user) if spec.partition else prefix
        out[spec.name] = _text(client.object("encoding", key))
    return out


def server_line(client: redis_py.Redis, project: str, data: RequestData) -> dict[str, Any]:
    """The server's version, small-hash limits and the request keys' encodings."""
    return {
        "redis_version": _text(client.info("server")["redis_version"]),
        "config": hash_settings(client),
        "encodings": key_encodings(client, project, data),
    }


def say_block(title: str, server: dict[str, Any], collections: list[int]) -> None:
    """A fetch block's header: its title, the server, and the collections of its run."""
    say(title)
    say_server(server)
    gens = "/".join(map(str, collections))
    say(f"   garbage collections during the timed run (gen 0/1/2): {gens}")


def say_server(server: dict[str, Any]) -> None:
    config = ", ".join(f"{k} {v}" for k, v in server["config"].items())
    encodings = ", ".join(f"{k} {v}" for k, v in server["encodings"].items())
    say(f"   redis {server['redis_version']}; CONFIG GET: {config}")
    say(f"   encodings of the request's keys: {encodings}")


def _pct(a: np.ndarray | list[float], q: float) -> float:
    return float(np.percentile(a, q)) if len(a) else float("nan")


def _verdict(value: float, target: float, *, at_most: bool) -> str:
    met = value <= target if at_most else value >= target
    return "met" if met else "NOT MET"


def latency_table(times: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Print p50/p99/mean per variant and its p50 over the floor's; returns the figures."""
    f50 = _pct(times[FLOOR], 50)
    say(f"   {'variant':<28} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'/floor p50':>11}")
    out = {}
    for name, t in times.items():
        p50, p99 = _pct(t, 50), _pct(t, 99)
        out[name] = {"p50_ms": p50, "p99_ms": p99, "mean_ms": float(t.mean())}
        say(f"   {name:<28} {p50:8.3f} {p99:8.3f} {t.mean():8.3f} {p50 / f50:10.2f}x")
    return out


def floor_ratios(times: dict[str, np.ndarray]) -> dict[str, float]:
    """client/floor at p50 and p99 (printed with the targets) and raw packed/floor."""
    ratios = {
        "client_over_floor_p50": _pct(times["client"], 50) / _pct(times[FLOOR], 50),
        "client_over_floor_p99": _pct(times["client"], 99) / _pct(times[FLOOR], 99),
        "packed_over_floor_p50": _pct(times["raw packed"], 50) / _pct(times[FLOOR], 50),
    }
    say(
        f"   client/floor    p50 {ratios['client_over_floor_p50']:6.2f}x  (target <= 2: "
        f"{_verdict(ratios['client_over_floor_p50'], 2, at_most=True)})"
    )
    say(
        f"   client/floor    p99 {ratios['client_over_floor_p99']:6.2f}x  (target <= 3: "
        f"{_verdict(ratios['client_over_floor_p99'], 3, at_most=True)})"
    )
    if WIRE in times:
        ratios["client_over_wire_p50"] = _pct(times["client"], 50) / _pct(times[WIRE], 50)
        ratios["client_over_wire_p99"] = _pct(times["client"], 99) / _pct(times[WIRE], 99)
        say(
            f"   client/wire     p50 {ratios['client_over_wire_p50']:6.2f}x  (target <= 2: "
            f"{_verdict(ratios['client_over_wire_p50'], 2, at_most=True)})"
        )
        say(
            f"   client/wire     p99 {ratios['client_over_wire_p99']:6.2f}x  (target <= 2.5: "
            f"{_verdict(ratios['client_over_wire_p99'], 2.5, at_most=True)})"
        )
    return ratios


def report_fetch(
    b: Bench,
    times: dict[str, np.ndarray],
    stats: dict[str, int],
    collections: list[int],
    server: dict[str, Any],
) -> dict:
    say_block(
        f"\n1. Fetch latency: one user x N={b.n} candidates, d={b.d}, all four views present; "
        f"{len(times['client'])} interleaved reps per variant; the --redis server",
        server,
        collections,
    )
    out: dict[str, Any] = {"server": server, "variants": latency_table(times)}
    ratios = floor_ratios(times)
    c50, c99 = _pct(times["client"], 50), _pct(times["client"], 99)
    s50, s99 = _pct(times["stock feast + to_dict"], 50), _pct(times["stock feast + to_dict"], 99)
    ratios["stock_over_client_p50"] = s50 / c50
    ratios["stock_over_client_p99"] = s99 / c99
    worst = min(ratios["stock_over_client_p50"], ratios["stock_over_client_p99"])
    say(
        f"   stock/client    p50 {ratios['stock_over_client_p50']:6.1f}x, "
        f"p99 {ratios['stock_over_client_p99']:6.1f}x  (target >= 20: "
        f"{_verdict(worst, 20, at_most=False)})"
    )
    say(
        f"   raw packed/floor p50 {ratios['packed_over_floor_p50']:5.2f}x  (the floor's share "
        "that is redis-py's pipeline packing)"
    )
    say(f"   client stats after the run: {stats}")
    out["ratios"] = ratios
    out["client_stats"] = stats
    out["gc_collections"] = collections
    return out


def fetch_embedded(b: Bench, reps: int, warmup: int, seed: int, main: dict) -> dict:
    """Section 1's second block: the client, Feast and the raw floors on a private
    ``embedded_redis()`` (``keys.SERVER_SETTINGS``), in a project of its own there."""
    project = f"bemb{b.tag}"
    with embedded_redis() as url:
        raw = redis_client(url, timeout_s=30.0)
        client = None
        try:
            cfg, store = open_solaris_project(b.tmp, project, url, b.d)
            write_request(store, b.data)
            client = open_client(cfg, url)
            commands = checked_commands(raw, store, project, b.data)
            variants = {
                "client": client_fetch(b.data, b.now, client),
                "feast get_online_features": feast_fetch(
                    client.store, entity_rows(b.data), to_dict=False
                ),
                FLOOR: raw_pipeline(raw, command_args(commands)),
                "raw packed": raw_packed(raw, commands),
                WIRE: b.wire(Wire(url, online_mod._pack(commands), len(commands))),
            }
            check_values(b, variants)
            with gc_counter() as collections:
                times = interleaved(variants, reps, warmup, seed + 2)
            stats = client.stats.as_dict()
            server = server_line(raw, project, b.data)
        finally:
            if client is not None:
                client.close()
            raw.close()
    say_block(
        f"\n1, second block: the same request on a private embedded_redis() with "
        f"keys.SERVER_SETTINGS (project {project}); {reps} interleaved reps per variant",
        server,
        collections,
    )
    out: dict[str, Any] = {"server": server, "variants": latency_table(times)}
    ratios = floor_ratios(times)
    for label, name in (("client", "client"), ("raw", FLOOR)):
        ratios[f"{label}_over_main_block_p50"] = (
            out["variants"][name]["p50_ms"] / main["variants"][name]["p50_ms"]
        )
    say(
        f"   p50 here / on the --redis server: client {ratios['client_over_main_block_p50']:.2f}x,"
        f" raw pipeline {ratios['raw_over_main_block_p50']:.2f}x"
    )
    say(f"   client stats after the run: {stats}")
    out["ratios"] = ratios
    out["client_stats"] = stats
    out["gc_collections"] = collections
    return out


def client_and_wire(b: Bench, variants: dict[str, Fetch], reps: int, warmup: int, seed: int):
    """Section 1c: the client against the wire floor and redis-py's, interleaved with each
    other only. In section 1 every client call follows calls of the other variants (stock
    Feast's take 40-60x as long and allocate heavily), which leave the caches and the
    allocator to the next call; a serving process runs fetches back to back."""
    chosen = {name: variants[name] for name in ("client", FLOOR, "raw packed", WIRE)}
    with gc_counter() as collections:
        times = interleaved(chosen, reps, warmup, seed + 3)
    say(
        f"\n1c. The client against the wire only: {reps} interleaved reps of client, the "
        "redis-py floor, raw packed and the wire floor"
    )
    gcs = "/".join(map(str, collections))
    say(f"   garbage collections during the timed run (gen 0/1/2): {gcs}")
    table = latency_table(times)
    ratios = floor_ratios(times)
    return {"variants": table, "ratios": ratios, "gc_collections": collections}


def two_registries(b: Bench, client: SolarisFeatures, reps: int, seed: int) -> dict:
    """Section 1b: does a call on a second FeatureStore (its own Registry object) in the same
    process slow the client's next fetch? Each repetition times the client's fetch right
    after ``get_online_features`` on the second store and right after the same call on the
    client's own store, in shuffled order (the preceding calls are timed separately)."""
    rows = entity_rows(b.data)
    before = {
        "second store": feast_fetch(b.store, rows, to_dict=False),
        "own store": feast_fetch(client.store, rows, to_dict=False),
    }
    fetch = client_fetch(b.data, b.now, client)
    for _ in range(min(reps, 20)):
        for call in before.values():
            call()
            fetch()
    after: dict[str, list[int]] = {k: [] for k in before}
    calls: dict[str, list[int]] = {k: [] for k in before}
    order = list(before)
    rng = random.Random(seed + 1)
    clock = time.perf_counter_ns
    for _ in range(reps):
        rng.shuffle(order)
        for name in order:
            t0 = clock()
            before[name]()
            t1 = clock()
            fetch()
            t2 = clock()
            calls[name].append(t1 - t0)
            after[name].append(t2 - t1)
    ms = {k: np.asarray(v) / 1e6 for k, v in after.items()}
    pre = {k: np.asarray(v) / 1e6 for k, v in calls.items()}
    out: dict[str, Any] = {"reps": reps}
    for name in before:
        key = name.replace(" ", "_")
        out[f"client_after_{key}_p50_ms"] = _pct(ms[name], 50)
        out[f"client_after_{key}_p99_ms"] = _pct(ms[name], 99)
        out[f"{key}_call_p50_ms"] = _pct(pre[name], 50)
    out["penalty_p50"] = (
        out["client_after_second_store_p50_ms"] / out["client_after_own_store_p50_ms"]
    )
    out["penalty_p99"] = (
        out["client_after_second_store_p99_ms"] / out["client_after_own_store_p99_ms"]
    )
    say(
        f"\n1b. Two registries: the client's fetch right after get_online_features on a second "
        f"FeatureStore (another Registry object) vs right after the same call on its own store, "
        f"{reps} reps each, shuffled"
    )
    for name in before:
        key = name.replace(" ", "_")
        say(
            f"    client after the {name + ':':<14} p50 "
            f"{out[f'client_after_{key}_p50_ms']:.3f} ms, p99 "
            f"{out[f'client_after_{key}_p99_ms']:.3f} ms  (the {name}'s call itself: p50 "
            f"{out[f'{key}_call_p50_ms']:.3f} ms)"
        )
    say(
        f"    second/own: p50 {out['penalty_p50']:.2f}x, p99 {out['penalty_p99']:.2f}x (the "
        "store caches its plan per Registry object and load time; Feast's process-wide "
        "resolution cache, one registry, is consulted only on a miss)"
    )
    return out


# --------------------------------------------------------------------------------------------
# 2. Concurrency
# --------------------------------------------------------------------------------------------


@dataclass
class Worker:
    latencies_ns: list[int] = field(default_factory=list)
    full: int = 0
    errors: int = 0
    first_error: str = ""


def run_threads(
    client: SolarisFeatures, user: int, items: np.ndarray, now: int, threads: int, seconds: float
) -> tuple[list[Worker], float]:
    """``threads`` threads calling ``client.fetch`` until the deadline; returns the workers
    and the wall time from the common start to the last thread's end."""
    n = len(items)
    deadline = [0.0]
    start = [0.0]

    def arm() -> None:
        start[0] = time.perf_counter()
        deadline[0] = start[0] + seconds

    barrier = threading.Barrier(threads, action=arm)
    workers = [Worker() for _ in range(threads)]

    def loop(w: Worker) -> None:
        mine = items.copy()
        clock = time.perf_counter_ns
        barrier.wait()
        stop = deadline[0]
        while time.perf_counter() < stop:
            t0 = clock()
            try:
                out = client.fetch(user, mine, now=now)
            except Exception as exc:  # counted, never expected
                w.errors += 1
                w.first_error = w.first_error or f"{type(exc).__name__}: {exc}"
                continue
            w.latencies_ns.append(clock() - t0)
            if out.mask.shape[0] == n and out.mask.all():
                w.full += 1

    pool = [
        threading.Thread(target=loop, args=(w,), name=f"bench-{k}") for k, w in enumerate(workers)
    ]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return workers, time.perf_counter() - start[0]


def single_rate(fetch: Fetch, seconds: float) -> tuple[int, float]:
    """(calls, calls per second) of one thread calling ``fetch`` for ``seconds``."""
    calls = 0
    t0 = time.perf_counter()
    stop = t0 + seconds
    while time.perf_counter() < stop:
        fetch()
        calls += 1
    return calls, calls / (time.perf_counter() - t0)


def bench_concurrency(
    b: Bench, threads: int, seconds: float, single_seconds: float, stock: Fetch
) -> dict:
    """Aggregate throughput of ``threads`` threads on one fresh client, then single-thread
    rates of the client and of stock Feast."""
    client = open_client(b.cfg, b.redis_url)
    try:
        workers, wall = run_threads(client, b.data.user, b.data.items, b.now, threads, seconds)
        stats = client.stats.as_dict()
        single_client = single_rate(client_fetch(b.data, b.now, client), single_seconds)
    finally:
        client.close()
    single_stock = single_rate(stock, single_seconds)
    requests = sum(len(w.latencies_ns) + w.errors for w in workers)
    ok = np.concatenate([np.asarray(w.latencies_ns) for w in workers]) / 1e6
    full = sum(w.full for w in workers)
    errors = sum(w.errors for w in workers)
    first = next((w.first_error for w in workers if w.first_error), "")
    rps = requests / wall
    out = {
        "threads": threads,
        "seconds": wall,
        "requests": requests,
        "requests_per_s": rps,
        "full_features_share": full / max(requests, 1),
        "exceptions": errors,
        "first_exception": first,
        "stats": stats,
        "p50_ms": _pct(ok, 50),
        "p99_ms": _pct(ok, 99),
        "per_thread_requests": [len(w.latencies_ns) + w.errors for w in workers],
        "single_client_requests_per_s": single_client[1],
        "single_stock_requests_per_s": single_stock[1],
        "aggregate_over_stock_single": rps / single_stock[1],
        "aggregate_over_client_single": rps / single_client[1],
    }
    say(
        f"\n2. Concurrency: {threads} threads on one SolarisFeatures for {wall:.1f} s, "
        "healthy Redis"
    )
    per = out["per_thread_requests"]
    say(
        f"   requests {requests:,} ({rps:,.0f}/s aggregate; per thread min {min(per):,} "
        f"max {max(per):,}); full features {out['full_features_share']:.2%}; exceptions {errors}"
        + (f" (first: {first})" if first else "")
    )
    say(
        f"   stats: shed_open {stats['shed_open']}, shed_busy {stats['shed_busy']}, "
        f"failures {stats['failures']}, timeouts {stats['timeouts']}, requests "
        f"{stats['requests']}"
    )
    say(f"   latency under load: p50 {out['p50_ms']:.2f} ms, p99 {out['p99_ms']:.2f} ms")
    say(
        f"   single thread, {single_seconds:g} s each: client {single_client[1]:,.0f} req/s, "
        f"stock feast {single_stock[1]:,.0f} req/s"
    )
    say(
        f"   aggregate/stock single-thread {out['aggregate_over_stock_single']:.1f}x (target >= 5:"
        f" {_verdict(out['aggregate_over_stock_single'], 5, at_most=False)}); "
        f"aggregate/client single-thread {out['aggregate_over_client_single']:.2f}x"
    )
    return out


# --------------------------------------------------------------------------------------------
# 3. Online writes
# --------------------------------------------------------------------------------------------


@dataclass
class WriteData:
    """``rows`` pair rows: ``rows / 50`` users × 50 distinct items, in shuffled order."""

    users: np.ndarray
    items: np.ndarray
    z: np.ndarray

    @property
    def rows(self) -> int:
        return len(self.users)


def write_data(rows: int, d: int, seed: int) -> WriteData:
    rng = np.random.default_rng(seed + 1)
    k = np.arange(rows)
    users = WRITE_USER0 + k // WRITE_ITEMS_PER_USER
    items = 1 + (k % WRITE_ITEMS_PER_USER) * 1_000 + rng.integers(0, 1_000, rows)
    order = rng.permutation(rows)
    z = rng.standard_normal((rows, d)).astype(np.float32)
    return WriteData(users[order].astype(np.int64), items[order].astype(np.int64), z)


def generic_frame(w: WriteData, event_s: int) -> pd.DataFrame:
    """Input of ``write_to_online_store`` on the SOLARIS store (``z`` as float arrays)."""
    return pd.DataFrame(
        {
            "user_id": w.users,
            "item_id": w.items,
            "z": list(w.z),
            **_stamp(w.rows, event_s),  # Feast wants every feature, computed_at too
        }
    )


@dataclass(frozen=True)
class KeyWrite:
    """One user key of a raw write: its ``HSET`` arguments (field, record, ...; one list per
    ``write_fields_per_command`` rows) and the newest event time written to it (us)."""

    key: str
    hsets: list[list[bytes]]
    newest_us: int


RawBatch = list[KeyWrite]  # the keys of one pipeline


def raw_batches(
    w: WriteData, event_s: int, project: str, params: ViewParams, per_command: int
) -> list[RawBatch]:
    """Pre-encoded records (``codec.encode_records``) with their 8-byte fields, grouped by
    user key as the store groups them (rows sorted by user, stable), ``KEYS_PER_PIPELINE``
    keys per pipeline."""
    rows = normalize(PAIR, params, pair_input(w.users, w.items, w.z, event_s))
    records = encode_records(PAIR, params, rows)
    assert PAIR.partition is not None and PAIR.member is not None
    users = rows[PAIR.partition.join_key].combine_chunks().to_numpy()
    order = np.argsort(users, kind="stable")
    users = users[order]
    bounds = np.flatnonzero(np.r_[True, users[1:] != users[:-1], True])
    members = rows[PAIR.member.join_key].combine_chunks().to_numpy()[order]
    fields = keys.member_fields(members).tolist()
    ordered = [records[i] for i in order.tolist()]
    event_us = rows[EVENT_TS].combine_chunks().cast(pa.int64()).to_numpy()[order]
    newest = np.maximum.reduceat(event_us, bounds[:-1]).tolist()
    prefix = keys.view_key(project, PAIR)
    writes: list[KeyWrite] = []
    for (lo, hi), top in zip(itertools.pairwise(bounds.tolist()), newest, strict=True):
        hsets = []
        for start in range(lo, hi, per_command):
            stop = min(start + per_command, hi)
            args: list[bytes] = [b""] * (2 * (stop - start))
            args[0::2] = fields[start:stop]
            args[1::2] = ordered[start:stop]
            hsets.append(args)
        key = keys.partition_key(prefix, PAIR, int(users[lo]))
        writes.append(KeyWrite(key, hsets, int(top)))
    return [writes[i : i + KEYS_PER_PIPELINE] for i in range(0, len(writes), KEYS_PER_PIPELINE)]


def write_args(batch: RawBatch, retention_ms: int, store: bool) -> list[Args]:
    """The commands of one pipeline: per key its ``HSET``s, then ``PEXPIRE`` (the floor) or,
    with ``store``, the store's transaction per key (``MULTI``, the ``HSET``s, ``HSETNX key
    "" newest_us``, ``PEXPIRE``, ``HGET key ""``, ``EXEC``)."""
    out: list[Args] = []
    for write in batch:
        hsets = [("HSET", write.key, *args) for args in write.hsets]
        if not store:
            out.extend([*hsets, ("PEXPIRE", write.key, retention_ms)])
            continue
        out.extend(
            [
                ("MULTI",),
                *hsets,
                ("HSETNX", write.key, b"", write.newest_us),
                ("PEXPIRE", write.key, retention_ms),
                ("HGET", write.key, b""),
                ("EXEC",),
            ]
        )
    return out


def raw_write(
    client: redis_py.Redis, batches: list[RawBatch], retention_ms: int, store: bool
) -> None:
    for batch in batches:
        pipe = client.pipeline(transaction=False)
        for command in write_args(batch, retention_ms, store):
            pipe.execute_command(*command)
        pipe.execute()


Writer = Callable[[int], float]  # event time (s) -> seconds of the timed part
TOUCH = "raw + transaction (store's commands)"


def write_variants(b: Bench, w: WriteData) -> dict[str, Writer]:
    """Each variant builds its input for one event time untimed, then times the write."""
    fv = b.store.get_feature_view("pair")
    params = b.pair_params
    per_command = b.store.config.online_store.write_fields_per_command
    retention_ms = params.retention_s * 1000

    def bulk(event_s: int) -> float:
        table = pair_input(w.users, w.items, w.z, event_s)
        t0 = time.perf_counter()
        b.online.write_table(b.store.config, fv, table)
        return time.perf_counter() - t0

    def feast_generic(event_s: int) -> float:
        frame = generic_frame(w, event_s)
        t0 = time.perf_counter()
        b.store.write_to_online_store("pair", frame)
        return time.perf_counter() - t0

    def stock(event_s: int) -> float:
        frame = stock_pair_frame(w.users, w.items, w.z, event_s)
        t0 = time.perf_counter()
        b.stock.write_to_online_store("pair", frame)
        return time.perf_counter() - t0

    def raw(event_s: int) -> float:
        batches = raw_batches(w, event_s, b.raw_project, params, per_command)
        t0 = time.perf_counter()
        raw_write(b.redis, batches, retention_ms, False)
        return time.perf_counter() - t0

    def raw_touch(event_s: int) -> float:
        batches = raw_batches(w, event_s, b.touch_project, params, per_command)
        t0 = time.perf_counter()
        raw_write(b.redis, batches, retention_ms, True)
        return time.perf_counter() - t0

    return {
        "bulk write_table": bulk,
        "feast write_to_online_store": feast_generic,
        "stock feast write_to_online_store": stock,
        FLOOR: raw,
        TOUCH: raw_touch,
    }


def check_write_commands(b: Bench, w: WriteData, event_s: int) -> int:
    """Write the rows through ``write_table`` once, capturing what the store sends
    (``online._round_trip`` wrapped), and check that ``raw + transaction`` packs to the same
    bytes (so the floor's ``HSET``s are the store's too); returns the store's command
    count."""
    captured: list[tuple[bytes, int]] = []
    original = online_mod._round_trip

    def spy(client: Any, packed: Sequence[bytes], count: int, **kwargs: Any) -> list:
        captured.append((b"".join(packed), count))
        return original(client, packed, count, **kwargs)

    params = b.pair_params
    online_mod._round_trip = spy
    try:
        b.online.write_table(
            b.store.config,
            b.store.get_feature_view("pair"),
            pair_input(w.users, w.items, w.z, event_s),
        )
    finally:
        online_mod._round_trip = original
    # The store's first round trips ask each key's TYPE (a key of another type is refused
    # before anything is written); the transactions follow.
    type_query = hiredis.pack_command((b"TYPE", b"k"))[:13]  # *2 $4 TYPE
    writes = [(sent, n) for sent, n in captured if not sent.startswith(type_query)]
    if not writes:
        raise RuntimeError("write_table sent nothing through online._round_trip")
    sent = b"".join(chunk for chunk, _ in writes)
    per_command = b.store.config.online_store.write_fields_per_command
    batches = raw_batches(w, event_s, b.project, params, per_command)
    args = [a for batch in batches for a in write_args(batch, params.retention_s * 1000, True)]
    if pipeline_bytes(b.redis, args) != sent:
        raise RuntimeError("raw + transaction: its commands differ from what write_table sends")
    return sum(n for _, n in writes)


def check_writes(b: Bench, w: WriteData) -> None:
    """The bulk path and the raw variants left the same records for a sample user, each
    key with an expiry, and a prune marker where the touch script ran."""
    user = int(w.users[0])
    fields = keys.member_fields(np.sort(w.items[w.users == user])).tolist()
    sol_key = solaris_pair_keys(b.project, [user])[0]
    sol = b.redis.hmget(sol_key, fields)
    if None in sol:
        b.notes.append("writes: the bulk path's records are missing")
    for project, marker in ((b.raw_project, False), (b.touch_project, True)):
        key = solaris_pair_keys(project, [user])[0]
        if sol != b.redis.hmget(key, fields):
            b.notes.append(f"writes: the bulk path's records differ from {project}'s")
        if b.redis.pttl(key) <= 0:
            b.notes.append(f"writes: {project}'s key has no expiry")
        if b.redis.hexists(key, b"") != marker:
            b.notes.append(f"writes: {project}'s prune marker is not as expected")
    if b.redis.pttl(sol_key) <= 0 or not b.redis.hexists(sol_key, b""):
        b.notes.append("writes: the bulk path's key lacks its expiry or prune marker")


def bench_writes(b: Bench, rows: int, reps: int, seed: int) -> dict:
    """Median rows/s of interleaved rounds (after one untimed round that creates the keys)."""
    w = write_data(rows, b.d, seed)
    variants = write_variants(b, w)
    clock = iter(range(b.now - 3_600, b.now))  # every write newer than the last
    store_commands_sent = check_write_commands(b, w, next(clock))
    for writer in variants.values():
        writer(next(clock))
    seconds: dict[str, list[float]] = {k: [] for k in variants}
    rng = random.Random(seed)
    order = list(variants)
    for _ in range(reps):
        rng.shuffle(order)
        for name in order:
            seconds[name].append(variants[name](next(clock)))
    # The last rounds differ in event time: rewrite alike, then compare the records.
    same = next(clock)
    for name in ("bulk write_table", FLOOR, TOUCH):
        variants[name](same)
    check_writes(b, w)

    raw_rps = rows / float(np.median(seconds[FLOOR]))
    users = rows // WRITE_ITEMS_PER_USER
    say(
        f"\n3. Online writes: {rows:,} pair rows ({users:,} users x "
        f"{WRITE_ITEMS_PER_USER}, shuffled), median of {reps} interleaved rounds"
    )
    say(
        f"   set-up check: write_table sent {store_commands_sent:,} commands "
        "(one MULTI ... EXEC per key), byte-equal to raw + transaction's"
    )
    out: dict[str, Any] = {"rows": rows, "variants": {}}
    for name, s in seconds.items():
        rps = rows / float(np.median(s))
        out["variants"][name] = {"rows_per_s": rps, "seconds": s}
        say(f"   {name:<36} {rps:12,.0f} rows/s  {rps / raw_rps:7.1%} of raw")
    bulk = out["variants"]["bulk write_table"]["rows_per_s"]
    ratio = bulk / raw_rps
    out["bulk_over_raw"] = ratio
    out["bulk_over_raw_touch"] = bulk / out["variants"][TOUCH]["rows_per_s"]
    say(f"   bulk/raw {ratio:.2f}x (target >= 0.6: {_verdict(ratio, 0.6, at_most=False)})")
    say(
        "   raw = HSET key <8-byte field, record>... + PEXPIRE per user key, records "
        "pre-encoded, 1,000 keys per redis-py pipeline; raw + transaction = the store's "
        f"MULTI/HSET/HSETNX/PEXPIRE/HGET/EXEC per key (bulk/it {out['bulk_over_raw_touch']:.2f}x)"
    )
    return out


# --------------------------------------------------------------------------------------------
# 4. Redis bytes per cached pair
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Population:
    label: str
    user0: int
    users: int
    per_user: int

    @property
    def pairs(self) -> int:
        return self.users * self.per_user

    def rows(self, d: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        k = np.arange(self.pairs)
        users = self.user0 + k // self.per_user
        items = 1 + (k % self.per_user) * 97 + rng.integers(0, 97, self.pairs)
        z = rng.standard_normal((self.pairs, d)).astype(np.float32)
        return users.astype(np.int64), items.astype(np.int64), z


def populations(memory_users: int) -> list[Population]:
    return [
        Population("1 user x 300 (the request)", MEMORY_USER0, 1, 300),
        Population(f"{memory_users:,} users x 50", MEMORY_USER0 + 10_000, memory_users, 50),
        Population(f"{memory_users:,} users x 120", MEMORY_USER0 + 20_000, memory_users, 120),
    ]


def hash_settings(client: redis_py.Redis) -> dict[str, str]:
    """The server's small-hash limits (listpack names on Redis 7, ziplist on 6.2)."""
    out: dict[str, str] = {}
    for name in ("hash-max-listpack-value", "hash-max-listpack-entries"):
        out.update(client.config_get(name))
    if not out:
        for name in ("hash-max-ziplist-value", "hash-max-ziplist-entries"):
            out.update(client.config_get(name))
    return {_text(k): _text(v) for k, v in out.items()}


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def memory_of(
    client: redis_py.Redis, key_list: Sequence[str | bytes]
) -> tuple[int, dict[str, int]]:
    """(sum of MEMORY USAGE SAMPLES 0, key count per OBJECT ENCODING) of plain keys."""
    usage = 0
    encodings: dict[str, int] = {}
    for start in range(0, len(key_list), 1_000):
        pipe = client.pipeline(transaction=False)
        for key in key_list[start : start + 1_000]:
            pipe.memory_usage(key, samples=0)
            pipe.object("encoding", key)
        replies = pipe.execute()
        if None in replies[0::2]:
            raise RuntimeError("MEMORY USAGE: a measured key does not exist")
        usage += sum(replies[0::2])
        for encoding in replies[1::2]:
            encodings[_text(encoding)] = encodings.get(_text(encoding), 0) + 1
    return usage, encodings


def copy_hashes(source: redis_py.Redis, target: redis_py.Redis, key_list: Sequence[bytes]) -> None:
    pipe = source.pipeline(transaction=False)
    for key in key_list:
        pipe.hgetall(key)
    hashes = pipe.execute()
    pipe = target.pipeline(transaction=False)
    for key, mapping in zip(key_list, hashes, strict=True):
        pipe.hset(key, mapping=mapping)
    pipe.execute()


def repo_config(b: Bench, project: str, redis_url: str) -> RepoConfig:
    """Feast's ``RepoConfig`` of a bench project on ``redis_url``, built as
    ``open_feature_store`` builds it (the write path reads only its project and online-store
    settings; no registry is opened)."""
    from feast.repo_config import RepoConfig

    repo = Path(b.cfg.store.repo_path)
    config = RepoConfig(**repo_config_dict(bench_config(repo, project, redis_url, b.d), redis_url))
    config.repo_path = repo
    return config


def measure_server(
    label: str,
    client: redis_py.Redis,
    redis_url: str,
    b: Bench,
    pops: list[Population],
    stock: list[bytes],
    payload: int,
    seed: int,
    event_s: int,
) -> dict:
    """Write each population through ``SolarisOnlineStore.write_table`` in a project of its
    own on this server, and measure it with ``footprint.view_footprint``."""
    online = SolarisOnlineStore()
    fv = b.store.get_feature_view("pair")
    rng = np.random.default_rng(seed + 2)  # the same rows on every server
    out: dict[str, Any] = {
        "server": label,
        "redis_version": _text(client.info("server")["redis_version"]),
        "config": hash_settings(client),
    }
    rows = []
    for pop, project in zip(pops, b.memory_projects, strict=True):
        users, items, z = pop.rows(b.d, rng)
        config = repo_config(b, project, redis_url)
        online.write_table(config, fv, pair_input(users, items, z, event_s))
        fp = view_footprint(client, project, PAIR)
        if (fp.keys, fp.rows) != (pop.users, pop.pairs):
            raise RuntimeError(
                f"{project}: footprint of {fp.keys} keys and {fp.rows} rows, written "
                f"{pop.users} keys and {pop.pairs} rows"
            )
        rows.append(
            {
                "label": f"SOLARIS {pop.label}",
                "project": project,
                "keys": fp.keys,
                "pairs": fp.rows,
                "bytes": fp.bytes,
                "record_bytes": fp.record_bytes,
                "bytes_per_pair": fp.bytes_per_row,
                "over_record": fp.overhead,
                "encodings": fp.encodings,
            }
        )
        online.client(config).close()
    usage, encodings = memory_of(client, stock)
    rows.append(
        {
            "label": "stock Feast 1 user x 300 (pair only)",
            "keys": len(stock),
            "pairs": len(stock),
            "bytes": usage,
            "record_bytes": None,
            "bytes_per_pair": usage / len(stock),
            "over_record": usage / len(stock) / payload,
            "encodings": encodings,
        }
    )
    out["rows"] = rows
    return out


def bench_memory(b: Bench, memory_users: int, seed: int) -> dict:
    """Section 4 on the running Redis and on a private embedded one."""
    params = b.pair_params
    sample = pair_input(np.array([1]), np.array([1]), np.zeros((1, b.d), np.float32), b.now)
    payload = len(encode_records(PAIR, params, normalize(PAIR, params, sample))[0])
    pops = populations(memory_users)
    event_s = b.now - 120

    stock_user = MEMORY_USER0
    stock_items = np.arange(1, 301, dtype=np.int64) * 97
    b.stock.write_to_online_store(
        "pair",
        stock_pair_frame(
            np.full(300, stock_user, np.int64),
            stock_items,
            np.random.default_rng(seed + 3).standard_normal((300, b.d)).astype(np.float32),
            event_s,
        ),
    )
    stock = stock_keys(b.stock_project, [stock_user] * 300, stock_items.tolist())
    if b.redis.exists(*stock) != 300:
        raise RuntimeError("stock Feast keys not where expected (serialize_entity_key changed?)")

    args = (b, pops, stock, payload, seed, event_s)
    servers = [measure_server(f"running Redis {b.redis_url}", b.redis, b.redis_url, *args)]
    with embedded_redis() as url:
        private = redis_client(url, timeout_s=30.0)
        try:
            copy_hashes(b.redis, private, stock)
            label = "private embedded_redis() (keys.SERVER_SETTINGS)"
            servers.append(measure_server(label, private, url, *args))
        finally:
            private.close()

    say(
        f"\n4. Redis bytes per cached pair: footprint.view_footprint (MEMORY USAGE key SAMPLES 0 "
        f"summed over a population's pair keys / its rows); record (payload) {payload} B = "
        f"8 event + {2 * b.d} z (d={b.d} float16) + {len(FM_VERSION)} fm_version"
    )
    for s in servers:
        config = ", ".join(f"{k} {v}" for k, v in s["config"].items())
        say(f"   {s['server']}: redis {s['redis_version']}; CONFIG GET: {config}")
        say(f"     {'population':<38} {'keys':>6} {'B/pair':>7} {'x record':>9}  encoding")
        for r in s["rows"]:
            say(
                f"     {r['label']:<38} {r['keys']:6,} {r['bytes_per_pair']:7.1f} "
                f"{r['over_record']:8.2f}x  {_encodings(r['encodings'])}"
            )
    recommended = servers[1]["rows"][: len(pops)]
    worst = max(r["over_record"] for r in recommended)
    compact = [r["over_record"] for r in recommended if "hashtable" not in r["encodings"]]
    worst_compact = max(compact) if compact else float("nan")
    say(
        f"   SOLARIS under the recommended setting: worst {worst:.2f}x the record (target <= 1.5:"
        f" {_verdict(worst, 1.5, at_most=True)}); populations whose hashes stay compact (within"
        f" the entries limit): worst {worst_compact:.2f}x"
    )
    say(
        '   the bytes include each hash\'s prune marker (field ""), the rows do not; a hash over '
        "the entries limit (keys.SERVER_SETTINGS) is a hashtable"
    )
    return {
        "payload_bytes": payload,
        "servers": servers,
        "worst_recommended": worst,
        "worst_recommended_compact": worst_compact,
    }


def _encodings(counts: dict[str, int]) -> str:
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{name} {n:,}" for name, n in sorted(counts.items()))


# --------------------------------------------------------------------------------------------
# 5. Where the time goes
# --------------------------------------------------------------------------------------------


def _func_name(key: tuple[str, int, str]) -> str:
    filename, line, func = key
    if filename == "~":
        return func
    parts = Path(filename).parts
    return f"{'/'.join(parts[-2:])}:{line}({func})"


def bench_profile(fetch: Fetch, calls: int, top: int = 15) -> dict:
    fetch()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(calls):
        fetch()
    prof.disable()
    total_ms = (time.perf_counter() - t0) / calls * 1e3
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    entries = sorted(stats.items(), key=lambda kv: -kv[1][2])
    rows = [
        {
            "tottime_ms": v[2] / calls * 1e3,
            "cumtime_ms": v[3] / calls * 1e3,
            "calls": v[1] / calls,
            "function": _func_name(k),
        }
        for k, v in entries
        if not k[2].startswith("<method 'disable'")
    ][:top]
    say(
        f"\n5. Where the time goes: cProfile of {calls} client fetches, {total_ms:.3f} ms per "
        f"call under the profiler; top {top} by own time (per call)"
    )
    say(f"   {'own ms':>8} {'cum ms':>8} {'calls':>7}  function")
    for r in rows:
        say(f"   {r['tottime_ms']:8.4f} {r['cumtime_ms']:8.4f} {r['calls']:7.1f}  {r['function']}")
    return {"calls": calls, "ms_per_call_profiled": total_ms, "top": rows}


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def environment(b: Bench) -> dict[str, str]:
    import feast
    import redis as redis_pkg

    info = b.redis.info("server")
    return {
        **machine_facts(),
        "feast": feast.__version__,
        "redis-py": redis_pkg.__version__,
        "hiredis": hiredis.__version__,
        "numpy": np.__version__,
        "pyarrow": pa.__version__,
        "redis-server": f"{info['redis_version']} at {b.redis_url}",
        "request": f"1 user x {b.n} candidates, d={b.d}, fm_version {FM_VERSION!r}",
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.feature_store", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--redis", default=REDIS_DEFAULT, help="Feast connection string")
    parser.add_argument("--candidates", type=int, default=300)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    for name, value in FULL.items():
        kind = float if isinstance(value, float) else int
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=kind,
            default=None,
            help=f"default {value:,} ({QUICK[name]:,} with --quick)",
        )
    args = parser.parse_args(argv)
    for name in FULL:
        if getattr(args, name) is None:
            setattr(args, name, (QUICK if args.quick else FULL)[name])
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    report: dict[str, Any] = {"options": {k: str(v) for k, v in vars(args).items()}}
    with bench_context(args.redis, args.candidates, args.dim, args.seed) as b:
        report["environment"] = env = environment(b)
        say("SOLARIS feature-store benchmark" + (" (--quick)" if args.quick else ""))
        for k, v in env.items():
            say(f"   {k}: {v}")

        client = open_client(b.cfg, b.redis_url)
        variants = fetch_variants(b, client)
        check_values(b, variants)
        say(
            "   set-up check: every variant returns the written rows; the raw commands are the "
            "store's (same commands and 8-byte fields; redis-py packs them to the store's bytes)"
        )
        with gc_counter() as collections:
            times = interleaved(variants, args.reps, args.warmup, args.seed)
        server = server_line(b.redis, b.project, b.data)
        main_block = report_fetch(b, times, client.stats.as_dict(), collections, server)
        report["fetch"] = main_block
        report["fetch_wire"] = client_and_wire(b, variants, args.reps, args.warmup, args.seed)
        report["fetch_embedded"] = fetch_embedded(b, args.reps, args.warmup, args.seed, main_block)
        report["fetch_two_registries"] = two_registries(b, client, min(args.reps, 300), args.seed)

        report["concurrency"] = bench_concurrency(
            b,
            args.threads,
            args.concurrency_seconds,
            args.single_seconds,
            variants["stock feast + to_dict"],
        )
        report["writes"] = bench_writes(b, args.write_rows, args.write_reps, args.seed)
        report["memory"] = bench_memory(b, args.memory_users, args.seed)
        report["profile"] = bench_profile(variants["client"], args.profile_calls)
        client.close()
        for note in b.notes:
            say(f"   note: {note}")
        report["notes"] = b.notes
    elapsed = time.perf_counter() - started
    say(f"\ndone in {elapsed:.0f} s")
    report["elapsed_s"] = elapsed
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
        say(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
