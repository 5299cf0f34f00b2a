"""Changing a namespace's partition count re-splits what is in flight, on real Redis and files:
the cycle of the new count drains every logged request once and selects none of the pairs
an earlier interval left fresh, and a re-split stopped midway finishes on a rerun in the
state an uninterrupted one reaches.

Before the command, a count changed between intervals drained 20 of 40 requests (4 and 2)
and read the old split's ledger ``k`` as the new partition ``k``, selecting 11-13 of 80
still-fresh pairs again.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris.config import SolarisConfig
from solaris.namespace import Namespace
from solaris.orchestration import repartition as rp
from solaris.orchestration.layout import CycleLayout, Interval
from solaris.store.partitions import PartitionCountError, Partitioning

pytestmark = pytest.mark.integration

INTERVAL = Interval(1_700_000_100, 1_700_001_000)  # on the 15-minute grid
EARLIER = Interval(INTERVAL.start - 900, INTERVAL.start)
REQUESTS = 40
FRESH_USERS = 20  # the earlier interval's users, whose selected pairs are still fresh
BUILT_AT = EARLIER.end


@pytest.fixture
def namespaces(redis_client) -> Iterator[Callable[[], str]]:
    made: list[str] = []

    def make() -> str:
        made.append(f"t_{uuid.uuid4().hex[:8]}")
        return made[-1]

    yield make
    for name in made:
        for key in redis_client.scan_iter(match=f"{name}:*"):
            redis_client.delete(key)


def _cfg(root: Path, namespace: str, redis: str, partitions: int) -> SolarisConfig:
    return SolarisConfig(
        namespace=namespace,
        artifacts_dir=root / "artifacts",
        store={"redis": redis, "repo_path": str(root / "feature_repo")},
        cycle={"partitions": partitions},
    )


def _serve(cfg: SolarisConfig, redis: str, users: range, interval: Interval) -> None:
    """One request a user, logged through the serving client (into its partition's stream)."""
    from solaris.serving.client import SolarisFeatures

    with SolarisFeatures(cfg, redis=redis, fm_version="fm-1") as client:
        for k, user in enumerate(users):
            rid = interval.start * 100 + k
            client.log_request(rid, user, [1, 2, 3], [0.9, 0.5, 0.1], now=interval.start + k)
        assert client.flush()
        assert client.stats.requests_logged == len(users)


def _in_flight(root: Path, namespace: str, redis: str, old: int) -> SolarisConfig:
    """A namespace of ``old`` partitions: an earlier interval selected (its request logs,
    ledgers and drain records written), neighbour lists kept per partition, a carried
    window state, and 40 requests of the next interval logged and not drained yet."""
    from solaris.orchestration.candidates import select_partitions

    cfg = _cfg(root, namespace, redis, old)
    _serve(cfg, redis, range(1_000, 1_000 + FRESH_USERS), EARLIER)
    assert select_partitions(cfg, EARLIER, range(old))["requests"] == FRESH_USERS
    layout = CycleLayout(Namespace.of(cfg))
    users = np.arange(1_000, 1_000 + REQUESTS, dtype=np.int64)
    for k, rows in enumerate(Partitioning(old).split(users)):
        table = pa.table({"user_id": users[rows], "neighbours": users[rows] + 1})
        path = layout.neighbour_lists(BUILT_AT, k)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
    state = layout.window_state(EARLIER.end, old - 1)
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_bytes(b"carried sums of the old split")
    _serve(cfg, redis, range(1_000, 1_000 + REQUESTS), INTERVAL)
    return cfg


def _pairs(frame: pd.DataFrame) -> set[tuple[int, int]]:
    return set(zip(frame["user_id"].tolist(), frame["item_id"].tolist(), strict=True))


def _ledger(layout: CycleLayout, interval: Interval) -> pd.DataFrame:
    files = layout.interval_files("selections", interval)[0]
    return pd.concat([pd.read_parquet(p) for p in files], ignore_index=True)


@pytest.mark.parametrize(("old", "new"), [(4, 2), (3, 4), (2, 1), (1, 3)])
def test_the_cycle_of_the_new_count_drains_every_request_and_selects_no_fresh_pair_again(
    tmp_path, namespaces, redis_connection, redis_client, old, new
) -> None:
    from solaris.orchestration.candidates import check_drained, select_partitions

    cfg = _in_flight(tmp_path, namespaces(), redis_connection, old)
    namespace, layout = Namespace.of(cfg), CycleLayout(Namespace.of(cfg))
    fresh = _pairs(_ledger(layout, EARLIER))
    assert len(fresh) >= FRESH_USERS

    report = rp.repartition(cfg, new)

    assert (report.old, report.new, report.moved > 0, report.resumed) == (old, new, True, False)
    assert redis_client.get(namespace.partitions_key) == str(new).encode()
    assert redis_client.get(namespace.repartition_key) is None
    streams = namespace.request_streams(Partitioning(new))
    assert sum(redis_client.xlen(s) for s in streams) == REQUESTS
    leftover = set(namespace.request_streams(Partitioning(old))) - set(streams)
    assert all(redis_client.xlen(s) == 0 for s in leftover)
    # The earlier interval's files follow the new split, row for row.
    expected = [f"{k:05d}.parquet" for k in range(new)] if new > 1 else []
    for kind in ("request_log", "selections"):
        files, _ = layout.interval_files(kind, EARLIER)
        names = [p.name for p in files] if new > 1 else []
        assert names == expected
    assert _pairs(_ledger(layout, EARLIER)) == fresh
    for k in range(new):
        ledger = pd.read_parquet(layout.interval_files("selections", EARLIER, k)[0][0])
        assert (Partitioning(new).of(ledger["user_id"].to_numpy()) == k).all()
    drained = sorted(p.name for p in layout.drained(EARLIER, 0).parent.glob("*.json"))
    assert drained == [f"{k:05d}.json" for k in range(new)]
    check_drained(layout, EARLIER, new, range(new))  # a retry of it finds every row
    records = [json.loads(layout.drained(EARLIER, k).read_text()) for k in range(new)]
    assert sum(r["requests"] for r in records) == FRESH_USERS
    lists = [layout.neighbour_lists(BUILT_AT, k) for k in range(new)]
    users = pd.concat([pd.read_parquet(p) for p in lists if p.is_file()])["user_id"]
    assert sorted(users) == list(range(1_000, 1_000 + REQUESTS))
    for k, path in enumerate(lists):
        if path.is_file():
            assert (Partitioning(new).of(pd.read_parquet(path)["user_id"].to_numpy()) == k).all()
    assert not (layout.root / "window_state").exists()
    assert report.removed == ["window_state"]

    cycle = _cfg(tmp_path, namespace.name, redis_connection, new)
    figures = select_partitions(cycle, INTERVAL, range(new))

    assert figures["requests"] == REQUESTS
    assert sum(redis_client.xlen(s) for s in streams) == 0
    selected = _pairs(_ledger(layout, INTERVAL))
    assert selected and not selected & fresh  # 0 of the still-fresh pairs selected again
    assert {user for user, _ in selected} == set(range(1_000, 1_000 + REQUESTS))


def _half_published(layout: CycleLayout, interval: Interval, count: int) -> None:
    """What a re-split stopped while publishing an interval's ledgers leaves: every new
    file written under its staging name (``_repartition-<name>``), the first published over
    the old file of its name, the old others still there."""
    folder = layout.selections(interval, 0).parent
    old = sorted(folder.glob("[0-9]*.parquet"))
    table = pa.concat_tables([pq.read_table(path) for path in old])
    rows = Partitioning(count).split(table["user_id"].to_numpy())
    for k, taken in enumerate(rows):
        name = f"{k:05d}.parquet" if k == 0 else f"_repartition-{k:05d}.parquet"
        pq.write_table(table.take(pa.array(taken)), folder / name)


def _of(fields: dict, count: int) -> int:
    return Partitioning(count).of_user(int(fields[b"user"]))


def _state(root: Path, redis_client, namespace: str, count: int) -> dict:
    """Everything the re-split leaves, by content: every file below the namespace's cycle
    root (parquet as sorted rows, JSON parsed), every request stream's entries (fields,
    ids left out), and the namespace's keys."""
    cycle_root = root / "artifacts" / "namespaces" / namespace
    files: dict[str, object] = {}
    for path in sorted(p for p in cycle_root.rglob("*") if p.is_file()):
        name = str(path.relative_to(cycle_root))
        if path.suffix == ".parquet":
            frame = pd.read_parquet(path)
            files[name] = sorted(map(tuple, frame.astype(str).to_numpy().tolist()))
        elif path.suffix == ".json" and "runs" not in path.parts:
            files[name] = json.loads(path.read_text())
    ns = Namespace(namespace, root / "artifacts", root / "feature_repo")
    streams = {
        s.removeprefix(namespace): sorted(sorted(f.items()) for _, f in redis_client.xrange(s))
        for s in ns.request_streams(Partitioning(count))
    }
    keys = sorted(
        k.decode().removeprefix(namespace) for k in redis_client.scan_iter(f"{namespace}:*")
    )
    return {"files": files, "streams": streams, "keys": keys}


@pytest.mark.parametrize(
    "stopped_after",
    ["a copy of one entry", "the streams", "one ledger half published", "the intervals"],
)
def test_a_re_split_stopped_midway_refuses_every_process_and_a_rerun_finishes_it(
    tmp_path, namespaces, redis_connection, redis_client, stopped_after
) -> None:
    """Two namespaces in the same state, re-split from 3 to 4 partitions: one at once, one
    stopped midway (an entry copied to its new stream but not yet deleted from its old one;
    the streams moved; the interval files re-split too), then rerun. Meanwhile every process
    is refused; after the rerun both hold the same files, entries and keys."""
    from solaris.orchestration.resources import check_partition_count

    whole, stopped = namespaces(), namespaces()
    for name in (whole, stopped):
        _in_flight(tmp_path, name, redis_connection, 3)
    rp.repartition(_cfg(tmp_path, whole, redis_connection, 3), 4)

    cfg = _cfg(tmp_path, stopped, redis_connection, 3)
    plan = rp.begin(cfg, 4)
    if stopped_after == "a copy of one entry":
        # What a move stopped between adding an entry to its new stream and deleting it
        # from its old one leaves (an entry whose new stream is another).
        namespace = Namespace.of(cfg)
        moving = [
            (fields, target)
            for source in namespace.request_streams(Partitioning(3))
            for _, fields in redis_client.xrange(source)
            if (target := namespace.request_stream_of(_of(fields, 4), Partitioning(4))) != source
        ]
        redis_client.xadd(moving[0][1], moving[0][0])
    else:
        rp.move_streams(plan)
    if stopped_after == "the intervals":
        rp.resplit_intervals(plan)
    if stopped_after == "one ledger half published":
        _half_published(CycleLayout(Namespace.of(cfg)), EARLIER, 4)
    for count in (3, 4):
        with pytest.raises(PartitionCountError, match="is being re-split"):
            check_partition_count(_cfg(tmp_path, stopped, redis_connection, count), "a task")
    with pytest.raises(rp.RepartitionError, match=r"being re-split from 3 to 4 .* not 2"):
        rp.begin(cfg, 2)

    report = rp.repartition(cfg, 4)

    assert report.resumed
    assert _state(tmp_path, redis_client, stopped, 4) == _state(tmp_path, redis_client, whole, 4)
    assert check_partition_count(_cfg(tmp_path, stopped, redis_connection, 4), "a task") == 4
