"""The SOLARIS online store on a real three-node Redis Cluster on loopback.

The cluster's three nodes are embedded Redis servers (``embedded_redis`` with
``--cluster-enabled yes`` and a free bus port: ``--cluster-port`` needs redis-server 7,
Debian's), formed with CLUSTER ADDSLOTS / MEET for the test module and shut down after it.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import redis as redis_py
from redis.cluster import RedisCluster

from solaris.config import ModelConfig, SolarisConfig, StoreConfig
from solaris.serving.client import SolarisFeatures
from solaris.store import keys
from solaris.store.contract import PAIR, UAGG
from solaris.store.feast_store import apply_definitions, online_store_of, open_feature_store
from solaris.store.local_redis import _free_port, embedded_redis

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Z_DIM = 8
NOW = 1_700_000_000
SLOTS = 16384


def _cluster_ok(node: redis_py.Redis) -> bool:
    info = node.execute_command("CLUSTER INFO")
    if isinstance(info, dict):
        return str(info.get("cluster_state")) == "ok"
    return b"cluster_state:ok" in info


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A three-primary Redis Cluster on free loopback ports; yields its connection string."""
    with ExitStack() as stack:
        # The cluster bus port defaults to port + 10000, past 65535 for a high free port.
        buses = [_free_port() for _ in range(3)]
        nodes = [
            stack.enter_context(
                embedded_redis(extra_args=("--cluster-enabled", "yes", "--cluster-port", str(bus)))
            )
            for bus in buses
        ]
        clients = [redis_py.Redis.from_url(f"redis://{node}", socket_timeout=2) for node in nodes]
        share = SLOTS // len(clients)
        for k, client in enumerate(clients):
            hi = SLOTS if k == len(clients) - 1 else (k + 1) * share
            client.execute_command("CLUSTER ADDSLOTS", *range(k * share, hi))
        for node, bus in zip(nodes[1:], buses[1:], strict=True):
            host, port = node.split(":")
            clients[0].execute_command("CLUSTER MEET", host, int(port), bus)
        deadline = time.monotonic() + 30
        while not all(_cluster_ok(c) for c in clients):
            if time.monotonic() > deadline:
                pytest.fail("the test Redis Cluster did not form")
            time.sleep(0.1)
        yield ",".join(nodes)


def _z(seed: float) -> np.ndarray:
    return (np.arange(Z_DIM, dtype=np.float32) + seed) * 0.5


def test_reads_writes_expiry_misses_and_teardown_work_across_the_cluster(
    cluster: str, tmp_path: Path
) -> None:
    repo = tmp_path / "feature_repo"
    shutil.copytree(
        Path(__file__).resolve().parents[2] / "feature_repo",
        repo,
        ignore=shutil.ignore_patterns("data", "__pycache__"),
    )
    cfg = SolarisConfig(
        namespace="tcl",
        model=ModelConfig(z_dim=Z_DIM),
        store=StoreConfig(repo_path=repo, redis_type="redis_cluster"),
    )
    store = open_feature_store(cfg, cluster)
    apply_definitions(store, cfg)
    online = online_store_of(store)
    items = np.arange(100, 400)
    ts = pd.to_datetime(np.full(len(items), NOW - 60), unit="s", utc=True)
    for user in (1, 2, 3):
        online.write_table(
            store.config,
            store.get_feature_view("pair"),
            pd.DataFrame(
                {
                    "user_id": user,
                    "item_id": items,
                    "z": [_z(user)] * len(items),
                    "fm_version": "v1",
                    "event_ts": ts,
                }
            ),
        )
    online.write_table(
        store.config,
        store.get_feature_view("uagg"),
        pd.DataFrame(
            {
                "user_id": [2],
                "z_sum": [_z(1)],
                "count": [3],
                "window_start": [NOW - 86_400],
                "fm_version": ["v1"],
                "event_ts": ts[:1],
            }
        ),
    )
    client = RedisCluster.from_url(f"redis://{cluster.split(',')[0]}")
    # One user's keys share a hash slot, whichever node holds it.
    prefix = keys.view_key("tcl", PAIR)
    assert client.keyslot(keys.partition_key(prefix, PAIR, 2)) == client.keyslot(
        keys.partition_key(keys.view_key("tcl", UAGG), UAGG, 2)
    )
    slots = {client.keyslot(keys.partition_key(prefix, PAIR, u)) for u in (1, 2, 3)}
    assert len(slots) == 3

    features = SolarisFeatures(cfg, redis=cluster, fm_version="v1")
    try:
        features.warm_up()
        out = features.fetch(2, items, now=NOW)
        assert out.tier.tolist() == ["pair"] * len(items) and out.mask[:, 2].all()
        np.testing.assert_array_equal(out.tier_z[0, 0], _z(2))
        assert not features.fetch(9, [1, 2], now=NOW).mask.any()  # a miss, logged
        assert features.flush()
        assert client.xlen("tcl:misses") == 1
    finally:
        features.close()

    # Several users in one call; a later write prunes the old rows of a user's hash.
    mixed = store.get_online_features(
        features=["pair:z"],
        entity_rows={"user_id": [1, 3, 3], "item_id": [100, 399, 5], "request_ts": NOW},
    ).to_dict()
    assert mixed["z"] == [_z(1).tolist(), _z(3).tolist(), None]
    online.write_table(
        store.config,
        store.get_feature_view("pair"),
        pd.DataFrame(
            {
                "user_id": [1],
                "item_id": [7],
                "z": [_z(7)],
                "fm_version": ["v1"],
                "event_ts": pd.to_datetime([NOW + 2 * 86_400], unit="s", utc=True),
            }
        ),
    )
    assert client.hlen(keys.partition_key(prefix, PAIR, 1)) == 2  # the new row + the marker

    store.teardown()
    # Teardown removes the views' rows; the namespace's streams (misses, serving's metric
    # windows written on close) are the namespace's, removed by `solaris namespace reset`.
    streams = {b"tcl:misses", b"tcl:serving_metrics"}
    assert [k for k in client.scan_iter(match="tcl:*") if k not in streams] == []
    client.delete(*streams)
    client.close()
