"""One partition count per namespace: serving, the cycle's tasks and the near-line embedder
that disagree with the count the namespace recorded are refused by name, before they read
or write anything partitioned, and nothing logged is lost.

Before the count was recorded, serving with 1 partition and the cycle with 4 drained 0 of 40
requests (they stayed in ``<ns>:requests`` for good), and a cycle whose count changed
between intervals read the old split's ledger ``k`` as the new partition ``k``, both
without a word.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from solaris.config import SolarisConfig
from solaris.namespace import Namespace
from solaris.orchestration.layout import Interval
from solaris.orchestration.resources import CycleInputError
from solaris.store.partitions import PartitionCountError

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


def _serve(cfg: SolarisConfig, redis_url: str, requests: int = REQUESTS):
    """``requests`` requests of as many users logged through the serving client."""
    from solaris.serving.client import SolarisFeatures

    with SolarisFeatures(cfg, redis=redis_url, fm_version="fm-1") as client:
        for k in range(requests):
            client.log_request(k, 1_000 + k, [1, 2, 3], [0.9, 0.5, 0.1], now=INTERVAL.start + k)
        assert client.flush()
        return client.stats


def _logged(redis_client, cfg: SolarisConfig) -> int:
    from solaris.store.partitions import Partitioning

    streams = Namespace.of(cfg).request_streams(Partitioning(cfg.cycle.partitions))
    return sum(redis_client.xlen(s) for s in streams)


def test_a_cycle_with_another_count_than_serving_drains_nothing_and_names_the_setting(
    tmp_path, namespace, redis_url, redis_client, snapshot_files, snapshot_redis
) -> None:
    """Serving (1 partition) logged 40 requests; a selection configured with 4 is refused
    before it reads a stream or writes a file, and the selection with the namespace's count
    then drains all 40."""
    from solaris.orchestration.candidates import prepare_interval, select_partitions

    served = _cfg(tmp_path, namespace, redis_url, 1)
    assert _serve(served, redis_url).requests_logged == REQUESTS
    cycle = _cfg(tmp_path, namespace, redis_url, 4)
    snap = snapshot_files(tmp_path / "artifacts")
    keys = snapshot_redis(redis_client, f"{namespace}:*")
    before = snap(), keys()
    for attempt in (
        lambda: prepare_interval(cycle, INTERVAL),
        lambda: select_partitions(cycle, INTERVAL, range(4)),
    ):
        with pytest.raises(PartitionCountError, match=r"cycle\.partitions is 4, .* records 1"):
            attempt()
        assert (snap(), keys()) == before
    assert _logged(redis_client, served) == REQUESTS
    figures = select_partitions(served.model_copy(update={"replay": False}), INTERVAL, [0])
    assert figures["requests"] == REQUESTS
    assert _logged(redis_client, served) == 0


def test_serving_with_another_count_appends_nothing_and_counts_what_it_refused(
    tmp_path, namespace, redis_url, redis_client, snapshot_redis
) -> None:
    """The namespace records 4 partitions (its cycle ran first); a serving process started
    with 1 appends no request to a stream the cycle would never drain: each is dropped and
    counted, and the namespace's streams are untouched."""
    from solaris.orchestration.resources import check_partition_count

    assert check_partition_count(_cfg(tmp_path, namespace, redis_url, 4), "the cycle") == 4
    keys = snapshot_redis(redis_client, f"{namespace}:requests*")
    before = keys()
    stats = _serve(_cfg(tmp_path, namespace, redis_url, 1), redis_url, requests=5)
    assert (stats.requests_logged, stats.requests_dropped) == (0, 5)
    assert keys() == before


def test_a_task_of_a_changed_count_is_refused_at_its_edge_before_any_work(
    tmp_path, namespace, redis_url, redis_client, monkeypatch, snapshot_files
) -> None:
    """The cycle ran with 4 partitions; a task started with 2 (a changed setting, a worker
    of a rolling restart) fails when it builds its run, naming the setting, and writes
    nothing; a reset of the namespace lets it start again with another count."""
    from solaris.orchestration.resources import check_partition_count, reset_namespace
    from solaris.orchestration.runs import task_run

    four = _cfg(tmp_path, namespace, redis_url, 4)
    assert check_partition_count(four, "the cycle") == 4
    monkeypatch.setenv("SOLARIS_STORE__REDIS", redis_url)
    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path / "artifacts"))
    monkeypatch.setenv("SOLARIS_CYCLE__PARTITIONS", "2")
    conf = {"namespace": namespace, **INTERVAL.as_dict()}
    snap = snapshot_files(tmp_path / "artifacts")
    before = snap()
    with pytest.raises(PartitionCountError, match=r"SOLARIS_CYCLE__PARTITIONS\) to 4"):
        task_run(conf)
    assert snap() == before
    assert redis_client.get(Namespace.of(four).partitions_key) == b"4"
    reset_namespace(four, redis_url, force=True)
    assert task_run(conf).cfg.cycle.partitions == 2
    assert redis_client.get(Namespace.of(four).partitions_key) == b"2"


def test_a_lost_ledger_file_of_an_earlier_interval_stops_the_selection_before_any_drain(
    tmp_path, namespace, redis_url, redis_client, snapshot_files, snapshot_redis
) -> None:
    """An earlier interval was selected in 4 partitions; one partition's ledger file is
    gone. The next selection would take that partition's fresh pairs for stale and select
    them again: it is refused naming the file, before any stream is drained or file
    written."""
    from solaris.orchestration.candidates import select_partitions
    from solaris.orchestration.layout import CycleLayout

    cfg = _cfg(tmp_path, namespace, redis_url, 4)
    _serve(cfg, redis_url, requests=20)
    earlier = Interval(INTERVAL.start - 900, INTERVAL.start)
    select_partitions(cfg, earlier, range(4))  # writes the four ledgers (some empty)
    lost = CycleLayout(Namespace.of(cfg)).selections(earlier, 2)
    assert lost.is_file()
    lost.unlink()
    _serve(cfg, redis_url, requests=20)
    snap = snapshot_files(tmp_path / "artifacts")
    keys = snapshot_redis(redis_client, f"{namespace}:*")
    before = snap(), keys()
    with pytest.raises(CycleInputError, match=r"partition 2 .* is missing \(.*00002\.parquet\)"):
        select_partitions(cfg, INTERVAL, range(4))
    assert (snap(), keys()) == before


def test_a_refused_repartition_leaves_every_key_and_file_as_it_was(
    tmp_path, namespace, redis_url, redis_client, monkeypatch, snapshot_files, snapshot_redis
) -> None:
    """A namespace of 4 partitions with an interval selected and requests in flight: a
    re-split into an invalid count, into the count it records, of a namespace that records
    none, past a torn ledger or a drained request log that is gone, or while another
    re-split is under way, is refused naming what is wrong, and nothing is written; the
    command's refusals are one line (exit 1) and a bad --partitions a usage error (exit 2)."""
    from typer.testing import CliRunner

    from solaris.cli import app
    from solaris.orchestration.candidates import select_partitions
    from solaris.orchestration.layout import CycleLayout
    from solaris.orchestration.repartition import RepartitionError, repartition
    from solaris.store.partitions import PartitionError

    cfg = _cfg(tmp_path, namespace, redis_url, 4)
    _serve(cfg, redis_url, requests=20)
    earlier = Interval(INTERVAL.start - 900, INTERVAL.start)
    select_partitions(cfg, earlier, range(4))
    _serve(cfg, redis_url, requests=20)
    layout = CycleLayout(Namespace.of(cfg))
    ledger, log = layout.selections(earlier, 1), layout.request_log(earlier, 2)
    unknown = _cfg(tmp_path, f"{namespace}_x", redis_url, 4)
    snap = snapshot_files(tmp_path / "artifacts")
    keys = snapshot_redis(redis_client, f"{namespace}*")
    before = snap(), keys()
    cases = [
        (lambda: repartition(cfg, 0), PartitionError, r"must be in \[1, 16384\], got 0"),
        (lambda: repartition(cfg, 4), RepartitionError, r"already records 4 partitions"),
        (lambda: repartition(unknown, 2), RepartitionError, r"_x' records no partition count"),
    ]
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()
        assert (snap(), keys()) == before

    torn = ledger.read_bytes()
    ledger.write_bytes(torn[: len(torn) // 2])
    before = snap(), keys()
    with pytest.raises(RepartitionError, match=r"00001\.parquet is unreadable .* nothing was"):
        repartition(cfg, 2)
    assert (snap(), keys()) == before
    ledger.write_bytes(torn)

    kept = log.read_bytes()
    log.unlink()
    before = snap(), keys()
    with pytest.raises(CycleInputError, match=r"00002\.parquet of partition 2 is missing"):
        repartition(cfg, 2)
    assert (snap(), keys()) == before
    log.write_bytes(kept)

    pending = Namespace.of(cfg).repartition_key
    redis_client.set(pending, '{"from": 4, "to": 8}')
    before = snap(), keys()
    with pytest.raises(RepartitionError, match=r"from 4 to 8 partitions .* not 2"):
        repartition(cfg, 2)
    assert (snap(), keys()) == before
    redis_client.delete(pending)

    monkeypatch.setenv("SOLARIS_STORE__REDIS", redis_url)
    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path / "artifacts"))
    before = snap(), keys()
    runner = CliRunner()
    refused = runner.invoke(app, ["namespace", "repartition", namespace, "--partitions", "4"])
    assert (refused.exit_code, refused.output.count("\n")) == (1, 1), refused.output
    assert "Error: " in refused.output and "already records 4" in refused.output
    usage = runner.invoke(app, ["namespace", "repartition", namespace, "--partitions", "0"])
    assert usage.exit_code == 2 and "--partitions" in usage.output
    assert (snap(), keys()) == before
