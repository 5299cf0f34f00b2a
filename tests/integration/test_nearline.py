"""The near-line path end to end: serving selects, embedders consume, one is killed.

Real Redis, a real Feast store, the synthetic example's FM and autoencoder, and a real
``solaris nearline`` process that is SIGKILLed holding a batch it has read but not written.
Two consumers in this process then split the stream, reclaim the killed one's entries
(``XAUTOCLAIM``) and skip the malformed ones.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import redis as redis_py
import yaml

from solaris.config import SolarisConfig
from solaris.model_versions import pin_version, versions
from solaris.namespace import Namespace
from solaris.orchestration.nearline import NearlineEmbedder, read_status
from solaris.orchestration.resources import feature_store
from solaris.pipeline.codes import read_manifest
from solaris.serving.client import SolarisFeatures
from solaris.serving.nearline import activity_key, parse_entry, pending_key
from solaris.serving.request_log import read_request_log
from solaris.store.feast_store import delete_project_keys

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
HOURS_6 = 6 * 3600
N_REQUESTS, CANDIDATES = 30, 50  # 10 pairs selected per request at share 0.2


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic example's FM and an autoencoder trained on its ``h``."""
    from solaris.examples.synthetic import SyntheticWorld, prepare
    from solaris.pipeline.codes import fit_autoencoder_from_traffic

    cfg = _cfg(tmp_path_factory.mktemp("models"), "models", Path("unused"), "unused")
    prepare(cfg)
    start = SyntheticWorld().spec.start_ts
    fit_autoencoder_from_traffic(cfg, start, start + 4 * HOURS_6, max_pairs=2_000)
    return Path(cfg.artifacts_dir)


def _cfg(artifacts: Path, namespace: str, repo: Path, redis: str, **nearline) -> SolarisConfig:
    made = SolarisConfig(
        namespace=namespace,
        artifacts_dir=artifacts,
        device="cpu",
        model={
            "foundation": "solaris.examples.synthetic:foundation_model",
            "trainer": None,
            "z_dim": 8,
        },
        requests={"source": "solaris.examples.synthetic:traffic"},
        store={"redis": redis, "repo_path": repo},
        train={"ae_epochs": 1},
        nearline={"enabled": True, **nearline},
    )
    # The module's models were trained once: every namespace of the module reads them.
    root = Namespace.of(made).models_root
    if versions(root):
        pin_version(root, namespace, versions(root)[-1], live=None)
    return made


@pytest.fixture
def cfg(models, repo_copy, feast_project, redis_connection, redis_client):
    made = _cfg(models, feast_project, repo_copy, redis_connection, batch_ms=50, claim_idle_ms=500)
    feature_store(made, redis_connection)
    yield made
    delete_project_keys(redis_client, feast_project)


def _log_requests(cfg: SolarisConfig, redis: str, version: str) -> dict[int, np.ndarray]:
    """Serve and log ``N_REQUESTS`` requests of users 0.. on wall-clock time; returns each
    user's candidates."""
    rng = np.random.default_rng(7)
    candidates = {}
    with SolarisFeatures(cfg, redis=redis, fm_version=version, metrics_publish_s=None) as client:
        for user in range(N_REQUESTS):
            items = rng.choice(300, CANDIDATES, replace=False).astype(np.int64)
            client.fetch(user, items)
            client.log_request(user, user, items, rng.random(CANDIDATES))
            candidates[user] = items
        assert client.flush()
        assert client.stats.nearline_logged == N_REQUESTS
    return candidates


def _start_killable_consumer(cfg: SolarisConfig, tmp_path: Path) -> subprocess.Popen:
    """``solaris nearline`` that reads everything, then holds it for a minute (a batch of
    at most 100,000 pairs or 60 s), so it can be killed with the batch unwritten."""
    holding = cfg.model_copy(
        update={"nearline": cfg.nearline.model_copy(update={"batch_ms": 60_000.0})}
    )
    path = tmp_path / "nearline.yaml"
    path.write_text(yaml.safe_dump(holding.model_dump(mode="json")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLARIS_")}
    return subprocess.Popen(
        [str(BIN / "solaris"), "nearline", "--config", str(path), "--consumer", "killed"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _run_until_drained(
    consumers: list[NearlineEmbedder], client, namespace: Namespace, group: str, close=True
) -> None:
    """Run ``consumers`` in threads until every entry of the stream is acknowledged and
    deleted (at most 60 s), then stop them."""
    threads = [threading.Thread(target=c.run, kwargs={"max_seconds": 60.0}) for c in consumers]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while (
        client.xlen(namespace.embed_stream)
        or client.xpending(namespace.embed_stream, group)["pending"]
    ):
        assert time.monotonic() < deadline, [c.stats.figures() for c in consumers]
        time.sleep(0.05)
    for consumer in consumers:
        consumer.stop()
    for thread in threads:
        thread.join()
    if close:
        for consumer in consumers:
            consumer.close()


def test_every_selected_pair_is_embedded_once_despite_a_kill_and_malformed_entries(
    cfg: SolarisConfig, redis_connection: str, redis_client, tmp_path: Path
) -> None:
    namespace = Namespace.of(cfg)
    version = read_manifest(namespace.models_dir).fm_version
    candidates = _log_requests(cfg, redis_connection, version)
    logged = read_request_log(redis_client, namespace.request_stream, before=2**33).rows
    selected = logged[logged["nearline"]]
    assert len(selected) == N_REQUESTS * 10  # ceil(0.2 * 50) each, none fresh before
    for bad in (
        {"user": b"1", "ts": b"100"},  # no items
        {"user": b"-1", "ts": b"100", "items": np.int64([3]).tobytes()},
        {"user": b"2", "ts": b"100", "items": b"12345"},
    ):
        redis_client.xadd(namespace.embed_stream, bad)

    killed = _start_killable_consumer(cfg, tmp_path)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                summary = redis_client.xpending(namespace.embed_stream, cfg.nearline.group)
            except redis_py.ResponseError:  # NOGROUP: the consumer has not started yet
                summary = {"pending": 0}
            if summary["pending"] == N_REQUESTS + 3:
                break
            assert killed.poll() is None, killed.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the consumer never read the stream"
            time.sleep(0.2)
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
    assert redis_client.hgetall(pending_key(namespace.name, 0))  # marks wait for the codes

    # Two consumers split what is left: small batches, so both get some.
    splitting = cfg.model_copy(
        update={"nearline": cfg.nearline.model_copy(update={"batch_pairs": 20})}
    )
    consumers = [NearlineEmbedder(splitting, redis_connection, consumer=c) for c in "bc"]
    _run_until_drained(consumers, redis_client, namespace, cfg.nearline.group)

    stats = [c.stats for c in consumers]
    assert sum(s.malformed for s in stats) == 3
    assert sum(s.reclaimed for s in stats) == N_REQUESTS + 3  # all the killed one held
    assert sum(s.embedded for s in stats) == len(selected)  # each pair once
    assert all(s.embedded > 0 for s in stats)  # the stream was split
    assert redis_client.xlen(namespace.embed_stream) == 0
    assert redis_client.xpending(namespace.embed_stream, cfg.nearline.group)["pending"] == 0
    assert not list(redis_client.scan_iter(match=f"{namespace.name}:nlpend:*"))
    assert set(read_status(redis_client, namespace)) == {"b", "c"}
    assert consumers[0].backlog() == {"backlog": 0, "pending": 0}

    # Every selected pair is served, with its own code: the FM's as of its request.
    from solaris import adapters
    from solaris.pipeline.codes import load_autoencoder
    from solaris.pipeline.embed import encode_pairs

    fm = adapters.foundation_model(cfg)
    autoencoder, _ = load_autoencoder(namespace.models_dir, fm)
    with SolarisFeatures(cfg, redis=redis_connection, fm_version=version) as client:
        for user, rows in selected.groupby("user_id"):
            items = rows["item_id"].to_numpy(np.int64)
            out = client.fetch(int(user), items)
            assert out.mask[:, 0].all(), f"user {user}: a selected pair has no code"
            expected = encode_pairs(
                np.full(len(items), user, np.int64),
                items,
                rows["ts"].to_numpy(np.int64),
                fm=fm,
                autoencoder=autoencoder,
            )
            served = out.features[:, : cfg.model.z_dim]
            np.testing.assert_allclose(served, expected, rtol=2e-3, atol=2e-3)
            others = np.setdiff1d(candidates[int(user)], items)
            assert not client.fetch(int(user), others).mask[:, 0].any()


def test_a_pair_with_a_fresh_code_is_not_selected_again(
    cfg: SolarisConfig, redis_connection: str, redis_client
) -> None:
    namespace = Namespace.of(cfg)
    version = read_manifest(namespace.models_dir).fm_version
    _log_requests(cfg, redis_connection, version)
    embedder = NearlineEmbedder(cfg, redis_connection, consumer="one")
    assert embedder.backlog() == {"backlog": N_REQUESTS, "pending": 0}
    _run_until_drained([embedder], redis_client, namespace, cfg.nearline.group, close=False)
    first = embedder.stats.embedded
    redis_client.delete(namespace.request_stream)

    # The same requests again, after every pending mark has gone: the cycle's rule spends
    # each request's budget on the next candidates, never on a fresh pair.
    candidates = _log_requests(cfg, redis_connection, version)
    again = read_request_log(redis_client, namespace.request_stream, before=2**33).rows
    assert again["nearline"].sum() == N_REQUESTS * 10
    again_embedder = NearlineEmbedder(cfg, redis_connection, consumer="two")
    _run_until_drained([again_embedder], redis_client, namespace, cfg.nearline.group)
    embedder.close()
    second = again_embedder.stats.embedded
    assert first == second == N_REQUESTS * 10
    with SolarisFeatures(cfg, redis=redis_connection, fm_version=version) as client:
        covered = sum(int(client.fetch(u, c).mask[:, 0].sum()) for u, c in candidates.items())
    assert covered == 2 * N_REQUESTS * 10


def _pair_event_seconds(client, cfg: SolarisConfig, user: int, items) -> np.ndarray:
    """The event seconds of ``user``'s codes of ``items`` (0 where none)."""
    from solaris.store.codec import decode_records
    from solaris.store.contract import PAIR
    from solaris.store.keys import member_field_list, partition_key, view_key

    key = partition_key(view_key(Namespace.of(cfg).project, PAIR), PAIR, user)
    rows = decode_records(PAIR, PAIR.params(cfg), client.hmget(key, member_field_list(items)))
    return np.where(rows.found, rows.event_us // 1_000_000, 0)


def test_refresh_on_activity_selects_a_users_codes_again_after_k_requests(
    models, repo_copy, feast_project, redis_connection, redis_client
) -> None:
    cfg = _cfg(
        models,
        feast_project,
        repo_copy,
        redis_connection,
        batch_ms=50,
        refresh_after_requests=2,
        refresh_share=0.2,  # 10 of 50 candidates: all of items[:10]
    )
    feature_store(cfg, redis_connection)
    namespace = Namespace.of(cfg)
    version = read_manifest(namespace.models_dir).fm_version
    items = np.arange(100, 150, dtype=np.int64)
    scores = np.linspace(1.0, 0.0, len(items))  # items[:10] first, then items[10:20], ...
    try:
        with SolarisFeatures(cfg, redis=redis_connection, fm_version=version) as client:
            client.log_request(0, 0, items, scores)
            assert client.flush()
        embedder = NearlineEmbedder(cfg, redis_connection, consumer="one")
        _run_until_drained([embedder], redis_client, namespace, cfg.nearline.group)
        first = _pair_event_seconds(redis_client, cfg, 0, items[:10])
        assert (first > 0).all()
        written = int(first.max())

        # Three later requests of user 0 (request times after the codes were written): the
        # first two find items[:10] fresh (fewer than 2 requests since them) and take the
        # next tens; the third has 2 requests since the codes: it selects them again on the
        # refresh budget, and the next ten on the main one.
        with SolarisFeatures(cfg, redis=redis_connection, fm_version=version) as client:
            for request, later in ((1, 2), (2, 3), (3, 4)):
                client.log_request(request, 0, items, scores, now=written + later)
            assert client.flush()
        entries = redis_client.xrange(namespace.embed_stream)
        chosen = [sorted(parse_entry(fields).items.tolist()) for _, fields in entries]
        assert chosen == [
            items[10:20].tolist(),
            items[20:30].tolist(),
            [*items[:10].tolist(), *items[30:40].tolist()],
        ]
        activity = activity_key(namespace.name, 0)
        assert redis_client.llen(activity) == 2 and redis_client.ttl(activity) > 0

        time.sleep(1.1)  # the refreshed codes are stamped with a later wall-clock second
        again = NearlineEmbedder(cfg, redis_connection, consumer="two")
        _run_until_drained([again], redis_client, namespace, cfg.nearline.group)
        assert again.stats.embedded == 40 and again.stats.skipped_fresh == 0
        refreshed = _pair_event_seconds(redis_client, cfg, 0, items[:10])
        assert (refreshed > first).all()
    finally:
        delete_project_keys(redis_client, feast_project)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _redis_server(port: int, folder: Path) -> subprocess.Popen:
    """A private Redis that appends every write to its AOF, so a restart keeps the stream."""
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(folder),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ],
        stdout=subprocess.DEVNULL,
    )
    client = redis_py.Redis(port=port)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            return server
        except redis_py.ConnectionError:
            assert time.monotonic() < deadline and server.poll() is None, "redis-server failed"
            time.sleep(0.05)


def test_the_embedder_rides_out_a_redis_restart_and_embeds_what_came_after(
    models, repo_copy, feast_project, tmp_path: Path
) -> None:
    port = _free_port()
    server = _redis_server(port, tmp_path)
    redis = f"127.0.0.1:{port}"
    try:
        cfg = _cfg(models, feast_project, repo_copy, redis, batch_ms=50, claim_idle_ms=500)
        feature_store(cfg, redis)
        version = read_manifest(Namespace.of(cfg).models_dir).fm_version
        embedder = NearlineEmbedder(cfg, redis, consumer="steady")
        thread = threading.Thread(target=embedder.run, kwargs={"max_seconds": 60.0})
        thread.start()

        def wait_for(embedded: int) -> None:
            deadline = time.monotonic() + 30
            while embedder.stats.embedded < embedded:
                assert time.monotonic() < deadline, embedder.stats.figures()
                time.sleep(0.1)

        _log_requests(cfg, redis, version)
        wait_for(N_REQUESTS * 10)
        server.terminate()
        server.wait(timeout=30)
        time.sleep(1.5)  # the embedder meets a closed port meanwhile
        server = _redis_server(port, tmp_path)
        candidates = _log_requests(cfg, redis, version)  # the next best 10 of each request
        wait_for(2 * N_REQUESTS * 10)
        embedder.stop()
        thread.join(timeout=30)
        embedder.close()
        assert embedder.stats.faults >= 1
        with SolarisFeatures(cfg, redis=redis, fm_version=version) as client:
            covered = sum(int(client.fetch(u, c).mask[:, 0].sum()) for u, c in candidates.items())
        assert covered == 2 * N_REQUESTS * 10  # both rounds' codes survived the restart
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_sigterm_finishes_the_batch_in_hand_and_exits_cleanly(
    cfg: SolarisConfig, redis_connection: str, redis_client, tmp_path: Path
) -> None:
    namespace = Namespace.of(cfg)
    version = read_manifest(namespace.models_dir).fm_version
    _log_requests(cfg, redis_connection, version)
    holding = _start_killable_consumer(cfg, tmp_path)  # reads all, then waits up to 60 s
    deadline = time.monotonic() + 120
    while True:
        try:
            pending = redis_client.xpending(namespace.embed_stream, cfg.nearline.group)["pending"]
        except redis_py.ResponseError:
            pending = 0
        if pending == N_REQUESTS:
            break
        assert holding.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    holding.send_signal(signal.SIGTERM)
    out, _ = holding.communicate(timeout=60)
    assert holding.returncode == 0, out.decode()[-3000:]
    assert "stopped:" in out.decode()
    assert redis_client.xlen(namespace.embed_stream) == 0  # written, acknowledged, deleted
    with SolarisFeatures(cfg, redis=redis_connection, fm_version=version) as client:
        logged = read_request_log(redis_client, namespace.request_stream, before=2**33).rows
        chosen = logged[logged["nearline"]]
        for user, rows in chosen.groupby("user_id"):
            assert client.fetch(int(user), rows["item_id"].to_numpy()).mask[:, 0].all()


def test_an_embed_stream_key_of_another_type_is_an_error_naming_it(
    cfg: SolarisConfig, redis_connection: str, redis_client
) -> None:
    from solaris.serving.streams import StreamError

    stream = Namespace.of(cfg).embed_stream
    redis_client.set(stream, "not a stream")
    with pytest.raises(StreamError, match=f"{stream}: cannot be read as a stream"):
        NearlineEmbedder(cfg, redis_connection, consumer="one")
    redis_client.delete(stream)

    embedder = NearlineEmbedder(cfg, redis_connection, consumer="one")
    redis_client.delete(stream)
    redis_client.rpush(stream, "a list now")  # replaced while the embedder runs
    with pytest.raises(StreamError, match=f"{stream}: cannot be read as a stream"):
        embedder.run(max_seconds=10)
    embedder.close()
    assert redis_client.lrange(stream, 0, -1) == [b"a list now"]  # left as it was
    redis_client.delete(stream)


def test_pairs_whose_embed_entries_were_trimmed_are_taken_back_by_the_cycle(
    models, repo_copy, feast_project, redis_connection, redis_client
) -> None:
    """The embedders are behind and the embed stream keeps 5 entries: of 30 requests' near-
    line selections, 25 entries are trimmed before any embedder reads them. The cycle's
    selection of the interval then finds no code for those pairs and selects them itself
    (counted as ``nearline_taken_back``), instead of marking them fresh for a whole TTL;
    the pairs the embedder did write are not selected again."""
    from solaris.orchestration.candidates import select_partitions
    from solaris.orchestration.layout import CycleLayout, Interval
    from solaris.orchestration.resources import read_parquet

    cfg = _cfg(models, feast_project, repo_copy, redis_connection, stream_maxlen=5, batch_ms=50)
    feature_store(cfg, redis_connection)
    namespace = Namespace.of(cfg)
    try:
        version = read_manifest(namespace.models_dir).fm_version
        _log_requests(cfg, redis_connection, version)
        assert redis_client.xlen(namespace.embed_stream) == 5  # 25 entries trimmed
        embedder = NearlineEmbedder(cfg, redis_connection, consumer="behind")
        _run_until_drained([embedder], redis_client, namespace, cfg.nearline.group)
        embedded = embedder.stats.embedded
        assert embedded == 5 * 10

        now = int(time.time()) + 1
        interval = Interval(now - 900, now)
        figures = select_partitions(cfg, interval, [0])
        ledger = read_parquet(CycleLayout(namespace).selections(interval))
        marks = read_parquet(CycleLayout(namespace).nearline(interval))
        assert figures["nearline_selected"] == len(marks) == N_REQUESTS * 10
        assert figures["nearline_taken_back"] == N_REQUESTS * 10 - embedded
        # Every near-line pair is either written by the embedder or in the cycle's ledger,
        # never both, and the ledger holds nothing else (every request spent its budget).
        taken = set(zip(ledger["user_id"], ledger["item_id"], strict=True))
        marked = set(zip(marks["user_id"], marks["item_id"], strict=True))
        assert taken < marked and len(taken) == N_REQUESTS * 10 - embedded
        for user in {u for u, _ in marked}:
            items = np.array(sorted(i for u, i in marked if u == user), dtype=np.int64)
            written = _pair_event_seconds(redis_client, cfg, user, items) > 0
            assert all(((user, int(i)) in taken) != w for i, w in zip(items, written, strict=True))
    finally:
        delete_project_keys(redis_client, feast_project)
