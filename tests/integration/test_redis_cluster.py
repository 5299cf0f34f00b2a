"""SOLARIS on a real Redis Cluster on loopback: 3 masters and 3 replicas.

The cluster is started for the module by ``scripts/redis_cluster.sh`` (the script a
developer runs by hand) on a free port range, and stopped after it. On it: the online store
(reads, writes, pruning, teardown), the miss stream and the request log (written by the
serving client, drained by the candidates DAG's functions), the health check the cycle's
tasks run, and serving with all four tiers present. Without ``redis-server`` the module is
skipped on a developer's machine and fails in CI (``CI`` set), where the cluster must run.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import redis as redis_py
from redis.cluster import RedisCluster

from solaris.config import ModelConfig, SolarisConfig, StoreConfig
from solaris.connection import RedisTarget, answers, redis_client
from solaris.namespace import Namespace
from solaris.orchestration.resources import CycleInputError, cycle_redis
from solaris.serving.client import SolarisFeatures
from solaris.serving.misses import drain_misses
from solaris.serving.request_log import delete_entries, read_request_log
from solaris.store import keys
from solaris.store.contract import PAIR, UAGG
from solaris.store.feast_store import apply_definitions, online_store_of, open_feature_store
from solaris.store.local_redis import _free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "redis_cluster.sh"
Z_DIM = 8
NOW = 1_700_000_000
NODES = 6


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_base_port() -> int:
    """A base port whose six node ports and six bus ports (+10000) are all free."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20_000, 45_000)
        ports = [base + k for k in range(NODES)]
        if all(_free(p) and _free(p + 10_000) for p in ports):
            return base
    pytest.fail("no free port range for the test Redis Cluster")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A 3-master/3-replica Redis Cluster started by the script; yields its connection
    string."""
    if not (shutil.which("redis-server") and shutil.which("redis-cli")):
        message = "redis-server/redis-cli not installed: the Redis Cluster tests need them"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    folder = tmp_path_factory.mktemp("redis-cluster") / "nodes"
    args = ["--base-port", str(_free_base_port()), "--dir", str(folder)]
    started = subprocess.run(
        [str(SCRIPT), "start", *args], capture_output=True, text=True, timeout=120
    )
    try:
        assert started.returncode == 0, started.stderr
        connection = started.stdout.splitlines()[0]
        assert re.fullmatch(r"(127\.0\.0\.1:\d+,){5}127\.0\.0\.1:\d+", connection)
        yield connection
    finally:
        subprocess.run([str(SCRIPT), "stop", *args], capture_output=True, timeout=60)
    assert not folder.exists()


def _cluster_cfg(namespace: str, repo: Path) -> SolarisConfig:
    return SolarisConfig(
        namespace=namespace,
        model=ModelConfig(z_dim=Z_DIM),
        store=StoreConfig(repo_path=repo, redis_type="redis_cluster"),
    )


def _repo_copy(tmp: Path) -> Path:
    repo = tmp / "feature_repo"
    shutil.copytree(
        REPO / "feature_repo", repo, ignore=shutil.ignore_patterns("data", "__pycache__")
    )
    return repo


def _z(seed: float) -> np.ndarray:
    return (np.arange(Z_DIM, dtype=np.float32) + seed) * 0.5


def test_reads_writes_expiry_misses_and_teardown_work_across_the_cluster(
    cluster: str, tmp_path: Path
) -> None:
    cfg = _cluster_cfg("tcl", _repo_copy(tmp_path))
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
    # windows written on close) and its recorded partition count (serving's warm-up) are the
    # namespace's, removed by `solaris namespace reset`.
    streams = {b"tcl:misses", b"tcl:serving_metrics", b"tcl:partitions"}
    assert [k for k in client.scan_iter(match="tcl:*") if k not in streams] == []
    client.delete(*streams)
    client.close()


USER = 5
ITEMS = np.arange(1_000, 1_300, dtype=np.int64)
FM = "v1"


def _stamp(n: int) -> dict[str, object]:
    return {
        "fm_version": [FM] * n,
        "event_ts": pd.to_datetime(np.full(n, NOW - 60), unit="s", utc=True),
    }


def _write_all_views(store) -> None:
    """One user's rows in the four serving views (pair, nbr, uagg, iagg) for ``ITEMS``."""
    n = len(ITEMS)
    online = online_store_of(store)
    frames = {
        "pair": {"user_id": USER, "item_id": ITEMS, "z": [_z(1)] * n},
        "nbr": {
            "user_id": USER,
            "item_id": ITEMS,
            "z_top1": [_z(2)] * n,
            "z_mean": [_z(3)] * n,
            "src_user": np.full(n, 77, np.int64),
            "similarity": np.full(n, 0.5, np.float32),
            "n_nbrs": np.full(n, 4, np.int64),
        },
        "uagg": {
            "user_id": [USER],
            "z_sum": [_z(1) * (n + 5)],
            "count": [n + 5],
            "window_start": [NOW - 86_400],
        },
        "iagg": {"item_id": ITEMS, "z_mean": [_z(4)] * n, "count": np.full(n, 9, np.int64)},
    }
    for view, columns in frames.items():
        rows = len(columns["z_sum"]) if view == "uagg" else n
        online.write_table(
            store.config, store.get_feature_view(view), pd.DataFrame({**columns, **_stamp(rows)})
        )


@pytest.fixture(scope="module")
def served(cluster: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SolarisConfig]:
    """Namespace ``tcs`` on the cluster with all four views written for ``USER``; its keys
    and streams are removed after the module."""
    cfg = _cluster_cfg("tcs", _repo_copy(tmp_path_factory.mktemp("served")))
    store = open_feature_store(cfg, cluster)
    apply_definitions(store, cfg)
    _write_all_views(store)
    yield cfg
    store.teardown()
    ns = Namespace.of(cfg)
    client = redis_client(cluster, redis_type="redis_cluster")
    # Serving logged requests on live traffic: the namespace's live marker is on the cluster.
    assert client.exists(ns.live_key) == 1
    client.delete(ns.miss_stream, ns.request_stream, ns.serving_metrics_stream, ns.live_key)
    client.delete(ns.partitions_key)  # recorded by serving's warm-up (one slot a key)
    assert list(client.scan_iter(match="tcs:*")) == []
    client.close()


def test_serving_fetches_all_four_tiers_from_the_cluster(cluster: str, served) -> None:
    with SolarisFeatures(served, redis=cluster, fm_version=FM, metrics_publish_s=None) as f:
        f.warm_up()
        out = f.fetch(USER, ITEMS, now=NOW)
        stats = f.stats.as_dict()
    assert out.mask.all() and out.tier.tolist() == ["pair"] * len(ITEMS)
    np.testing.assert_array_equal(out.tier_z[:, 0], np.tile(_z(1), (len(ITEMS), 1)))
    np.testing.assert_array_equal(out.tier_z[:, 1], np.tile(_z(2), (len(ITEMS), 1)))
    np.testing.assert_array_equal(out.tier_z[:, 3], np.tile(_z(4), (len(ITEMS), 1)))
    assert stats["requests"] == 1 and stats["failures"] == 0


def test_miss_stream_and_request_log_each_live_on_one_node_and_drain_on_the_cluster(
    cluster: str, served
) -> None:
    ns = Namespace.of(served)
    client = redis_client(cluster, redis_type="redis_cluster")
    try:
        client.delete(ns.miss_stream, ns.request_stream)
        with SolarisFeatures(served, redis=cluster, fm_version=FM, metrics_publish_s=None) as f:
            assert not f.fetch(USER + 1, [3, 4], now=NOW).mask.any()  # a miss: no rows
            f.log_request(11, USER, ITEMS[:3], [0.5, 0.25, 0.125], now=NOW)
            f.log_request(12, USER + 1, [3, 4], [1.0, 2.0], now=NOW + 1)
            assert f.flush()
            stats = f.stats.as_dict()
        assert (stats["misses_logged"], stats["requests_logged"]) == (1, 2)
        assert stats["misses_dropped"] == stats["requests_dropped"] == 0
        # Each stream is one key: all its entries sit on the one master owning its slot.
        for stream, entries in ((ns.miss_stream, 1), (ns.request_stream, 2)):
            owner = client.get_node_from_key(stream)
            node = redis_py.Redis(host=owner.host, port=owner.port)
            assert node.xlen(stream) == entries
            assert node.cluster("countkeysinslot", client.keyslot(stream)) >= 1
            node.close()

        misses = drain_misses(client, ns.miss_stream)
        assert misses[["user_id", "item_id", "ts"]].values.tolist() == [
            [USER + 1, 3, NOW],
            [USER + 1, 4, NOW],
        ]
        assert client.xlen(ns.miss_stream) == 0 and drain_misses(client, ns.miss_stream).empty

        batch = read_request_log(client, ns.request_stream, before=NOW + 1)
        assert batch.rows["request_id"].tolist() == [11, 11, 11] and batch.later == 1
        assert batch.rows["score"].tolist() == [0.5, 0.25, 0.125]
        assert delete_entries(client, ns.request_stream, batch.ids) == 1
        left = read_request_log(client, ns.request_stream, before=NOW + 2)
        assert left.rows["request_id"].tolist() == [12, 12] and left.later == 0
    finally:
        client.delete(ns.miss_stream, ns.request_stream)
        client.close()


def test_the_health_check_pings_the_cluster_through_any_live_start_node(
    cluster: str, served
) -> None:
    live = cluster.split(",")
    dead = f"127.0.0.1:{_free_port()}"  # nothing listens there
    assert answers(cluster, redis_type="redis_cluster")
    assert answers(",".join([dead, *live[1:]]), redis_type="redis_cluster")
    target = RedisTarget.parse(cluster)
    cfg = served.model_copy(update={"store": served.store.model_copy(update={"redis": target})})
    assert cycle_redis(cfg) == target


def test_the_health_check_says_no_when_no_cluster_node_answers(served) -> None:
    dead = f"127.0.0.1:{_free_port()}"  # nothing listens there
    assert not answers(dead, redis_type="redis_cluster")
    target = RedisTarget.parse(dead)
    cfg = served.model_copy(update={"store": served.store.model_copy(update={"redis": target})})
    with pytest.raises(CycleInputError, match="does not answer a PING"):
        cycle_redis(cfg)


def test_a_keys_write_on_the_cluster_is_one_script_call_with_its_expiry(
    cluster: str, tmp_path: Path
) -> None:
    """A hash of 1,200 rows (three HSETs of 500 pairs or fewer) is written as one EVALSHA on
    its node, so no connection lost between commands can leave the fields without the key's
    expiry: the node runs no HSET that a client sent, only the script's."""
    import threading

    cfg = _cluster_cfg("tcw", _repo_copy(tmp_path))
    store = open_feature_store(cfg, cluster)
    apply_definitions(store, cfg)
    online = online_store_of(store)
    client = RedisCluster.from_url(f"redis://{cluster.split(',')[0]}")
    key = keys.partition_key(keys.view_key("tcw", PAIR), PAIR, 11)
    node = client.get_node_from_key(key)
    direct = redis_py.Redis(host=node.host, port=node.port)
    seen: list[dict] = []
    ready = threading.Event()

    def watch() -> None:
        with direct.monitor() as monitor:
            ready.set()
            for command in monitor.listen():
                seen.append(command)
                if command["command"] == "ECHO end-of-write":
                    return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert ready.wait(5)
    items = np.arange(1_200)
    try:
        online.write_table(
            store.config,
            store.get_feature_view("pair"),
            pd.DataFrame(
                {
                    "user_id": 11,
                    "item_id": items,
                    "z": [_z(1)] * len(items),
                    "fm_version": "v1",
                    "event_ts": pd.to_datetime(np.full(len(items), NOW), unit="s", utc=True),
                }
            ),
        )
        redis_py.Redis(host=node.host, port=node.port).echo("end-of-write")
        watcher.join(10)
        sent = [c["command"].split()[0].upper() for c in seen if c["client_type"] != "lua"]
        scripted = [c["command"].split()[0].upper() for c in seen if c["client_type"] == "lua"]
        assert "HSET" not in sent and sent.count("EVALSHA") == 1
        assert scripted.count("HSET") == 3 and scripted.count("PEXPIRE") == 1
        assert client.hlen(key) == 1_201  # the rows and the prune marker
        assert client.pttl(key) > 0
    finally:
        store.teardown()
        client.close()
        direct.close()
