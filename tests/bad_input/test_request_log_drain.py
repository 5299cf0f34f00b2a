"""A drained request leaves its stream only once its file is durable and recorded, and the
selection checks every file it will read before it drains or writes anything.

Before, the drain deleted a partition's entries as soon as its ``request_log`` file was
written: an attempt that died after that, with the file lost before the retry, had its
requests only in the lost file, and the retry reported success with 69 of 80. And a torn
ledger of an earlier interval stopped the selection only at its partition, after the
partitions before it were drained and their ledgers written.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from solaris.config import SolarisConfig
from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, Interval
from solaris.orchestration.resources import CycleInputError, read_parquet

INTERVAL = Interval(1_700_000_100, 1_700_001_000)  # 900 s, on the 15-minute grid
REQUESTS = 40


@pytest.fixture
def namespace(redis_client) -> Iterator[str]:
    name = f"b_{uuid.uuid4().hex[:8]}"
    yield name
    for key in redis_client.scan_iter(match=f"{name}:*"):
        redis_client.delete(key)


def _cfg(tmp_path, namespace: str, redis_url: str, partitions: int) -> SolarisConfig:
    return SolarisConfig(
        namespace=namespace,
        artifacts_dir=tmp_path / "artifacts",
        store={"redis": redis_url, "repo_path": str(tmp_path / "feature_repo")},
        cycle={"partitions": partitions},
    )


def _serve(cfg: SolarisConfig, redis_url: str, first: int = 0, at: int = INTERVAL.start) -> None:
    """``REQUESTS`` requests of as many users, three candidates each, logged as serving does."""
    from solaris.serving.client import SolarisFeatures

    with SolarisFeatures(cfg, redis=redis_url, fm_version="fm-1") as client:
        for k in range(first, first + REQUESTS):
            client.log_request(k, 1_000 + k, [1, 2, 3], [0.9, 0.5, 0.1], now=at + k % 600)
        assert client.flush()


def _logged(redis_client, cfg: SolarisConfig) -> int:
    from solaris.store.partitions import Partitioning

    streams = Namespace.of(cfg).request_streams(Partitioning(cfg.cycle.partitions))
    return sum(redis_client.xlen(s) for s in streams)


def _selected_requests(layout: CycleLayout, interval: Interval) -> int:
    files, _ = layout.interval_files("selections", interval)
    return sum(read_parquet(path)["request_id"].nunique() for path in files)


@pytest.mark.parametrize("partitions", [1, 4])
def test_a_retry_whose_drained_file_was_lost_reads_the_entries_again_and_loses_none(
    tmp_path, namespace, redis_url, redis_client, partitions
) -> None:
    """The first attempt stored every partition's requests in its file and died before its
    ledgers were written; the files are lost before the retry. The entries are still in the
    streams, so the retry selects for all 40 requests, and only then are they deleted."""
    from solaris.orchestration.candidates import collect_request_log, select_partitions

    cfg = _cfg(tmp_path, namespace, redis_url, partitions)
    _serve(cfg, redis_url)
    layout = CycleLayout(Namespace.of(cfg))
    for partition in range(partitions):  # the first attempt's drains, then it died
        collect_request_log(cfg, redis_url, INTERVAL, partition)
    stored = layout.interval_files("request_log", INTERVAL)[0]
    assert stored and _logged(redis_client, cfg) == REQUESTS  # stored, not deleted
    for path in stored:
        path.unlink()

    figures = select_partitions(cfg, INTERVAL, range(partitions))

    assert figures["requests"] == REQUESTS
    assert _selected_requests(layout, INTERVAL) == REQUESTS  # one pair of each request
    assert _logged(redis_client, cfg) == 0
    held = sum(len(read_parquet(p)) for p in layout.interval_files("request_log", INTERVAL)[0])
    assert held == 3 * REQUESTS


def test_a_retry_whose_recorded_file_was_lost_stops_naming_it_and_writes_nothing(
    tmp_path, namespace, redis_url, redis_client, snapshot_files, snapshot_redis
) -> None:
    """The first attempt finished partition 2 (its entries deleted: the file is their only
    copy) and the file is lost: the retry would select partition 2 without its requests.
    It stops naming the file and the rows recorded, before any partition is drained or
    written; deleting the record, as the message says, lets the operator go on without
    them."""
    from solaris.orchestration.candidates import select_partitions

    cfg = _cfg(tmp_path, namespace, redis_url, 4)
    _serve(cfg, redis_url)
    layout = CycleLayout(Namespace.of(cfg))
    select_partitions(cfg, INTERVAL, [2])
    lost = layout.request_log(INTERVAL, 2)
    rows = len(read_parquet(lost))
    assert rows > 0
    lost.unlink()
    snap = snapshot_files(tmp_path / "artifacts")
    keys = snapshot_redis(redis_client, f"{namespace}:*")
    before = snap(), keys()

    with pytest.raises(CycleInputError, match=rf"00002\.parquet of partition 2 is missing.*{rows}"):
        select_partitions(cfg, INTERVAL, range(4))
    assert (snap(), keys()) == before

    layout.drained(INTERVAL, 2).unlink()
    figures = select_partitions(cfg, INTERVAL, range(4))
    assert figures["rows"] == 3 * REQUESTS - rows  # the lost ones, knowingly
    assert _logged(redis_client, cfg) == 0


def test_a_torn_earlier_ledger_stops_the_selection_before_any_partition_is_drained(
    tmp_path, namespace, redis_url, redis_client, snapshot_files, snapshot_redis
) -> None:
    """Partition 3's ledger of the previous interval was cut to half its bytes. Before, the
    selection drained and wrote partitions 0 to 2 and then failed on it; now it fails first,
    naming the file, with every stream and file as it was."""
    from solaris.orchestration.candidates import select_partitions

    cfg = _cfg(tmp_path, namespace, redis_url, 4)
    earlier = Interval(INTERVAL.start - 900, INTERVAL.start)
    _serve(cfg, redis_url, at=earlier.start)
    select_partitions(cfg, earlier, range(4))
    torn = CycleLayout(Namespace.of(cfg)).selections(earlier, 3)
    data = torn.read_bytes()
    torn.write_bytes(data[: len(data) // 2])
    _serve(cfg, redis_url, first=REQUESTS)
    snap = snapshot_files(tmp_path / "artifacts")
    keys = snapshot_redis(redis_client, f"{namespace}:*")
    before = snap(), keys()

    with pytest.raises(CycleInputError, match=r"cannot read the cycle file .*00003\.parquet"):
        select_partitions(cfg, INTERVAL, range(4))
    assert (snap(), keys()) == before
    assert _logged(redis_client, cfg) == REQUESTS
