"""The candidates run drains its interval of the request log exactly once, on real Redis."""

from __future__ import annotations

import numpy as np
import pytest

from solaris.config import SolarisConfig
from solaris.connection import RedisTarget
from solaris.namespace import Namespace
from solaris.orchestration.candidates import drain_request_log
from solaris.orchestration.layout import CycleLayout, Interval
from solaris.serving.request_log import append_request

pytestmark = pytest.mark.integration

INTERVAL = Interval(86_400, 90_000)  # the default TTL is 6 h: 21,600 s


@pytest.fixture
def cfg(tmp_path, feast_project: str, redis_client) -> SolarisConfig:
    cfg = SolarisConfig(namespace=feast_project, artifacts_dir=tmp_path)
    yield cfg
    redis_client.delete(Namespace.of(cfg).request_stream)


def _log(client, cfg: SolarisConfig, request_id: int, ts: int, items: list[int]) -> None:
    scores = np.linspace(1.0, 0.5, len(items), dtype=np.float32)
    append_request(client, Namespace.of(cfg).request_stream, 100, request_id, 5, items, scores, ts)


def test_drain_keeps_its_interval_and_late_entries_leaves_later_ones_drops_stale_ones(
    cfg, redis_connection: str, redis_client
) -> None:
    _log(redis_client, cfg, 1, 86_400 - 21_601, [9])  # more than a TTL old: another time
    _log(redis_client, cfg, 5, 80_000, [8])  # late, e.g. its interval's run was skipped
    _log(redis_client, cfg, 2, 87_000, [1, 2, 3])
    _log(redis_client, cfg, 3, 90_000, [4])  # the next interval's
    rows, figures = drain_request_log(cfg, redis_connection, INTERVAL)
    assert rows["request_id"].tolist() == [5, 2, 2, 2]
    assert rows["item_id"].tolist() == [8, 1, 2, 3]
    assert rows["score"].tolist() == [1.0, 1.0, 0.75, 0.5]
    assert rows["label"].isna().all()
    assert figures["requests"] == 2 and figures["late"] == 1
    assert (figures["stale_dropped"], figures["left_for_later"]) == (1, 1)
    stream = Namespace.of(cfg).request_stream
    assert redis_client.xlen(stream) == 1  # only the next interval's entry is left
    assert CycleLayout(Namespace.of(cfg)).request_log(INTERVAL).is_file()


def test_a_retried_drain_keeps_what_it_stored_and_adds_nothing_twice(
    cfg, redis_connection: str, redis_client
) -> None:
    _log(redis_client, cfg, 2, 87_000, [1, 2, 3])
    first, _ = drain_request_log(cfg, redis_connection, INTERVAL)
    # The attempt died after storing the table but before deleting the entries: they are
    # read again by the retry, with one more request logged meanwhile.
    _log(redis_client, cfg, 2, 87_000, [1, 2, 3])
    _log(redis_client, cfg, 4, 88_000, [7])
    again, figures = drain_request_log(cfg, redis_connection, INTERVAL)
    assert len(first) == 3
    assert again["request_id"].tolist() == [2, 2, 2, 4]
    assert figures["requests"] == 2
    assert redis_client.xlen(Namespace.of(cfg).request_stream) == 0


def test_the_cycle_spends_no_budget_on_what_serving_selected_near_line_and_skips_its_pairs(
    cfg, redis_connection: str, redis_client
) -> None:
    """Serving selected item 1 near-line for request 2: the cycle selects nothing more for
    that request and skips the pair in later requests; and since no embedder wrote its
    code (none runs here: its embed-stream entry could have been trimmed), the cycle takes
    the pair back into its own selection rather than leave it marked fresh for a TTL."""
    import json

    from solaris.manifest import CODES_MANIFEST
    from solaris.orchestration.candidates import select_partitions
    from solaris.orchestration.resources import read_parquet

    target = RedisTarget.parse(redis_connection)
    cfg = cfg.model_copy(update={"store": cfg.store.model_copy(update={"redis": target})})
    models = Namespace.of(cfg).models_dir
    models.mkdir(parents=True)
    manifest = {"fm_version": "fm-1", "fm": "fm", "z_dim": 32, "shared_dim": 8}
    (models / CODES_MANIFEST).write_text(json.dumps(manifest))
    stream = Namespace.of(cfg).request_stream
    scores = [0.9, 0.8, 0.7, 0.6, 0.5]
    # Request 2 spent its budget (ceil(0.2 * 5) = 1) near-line on item 1; request 3 of the
    # same user comes later in the interval, with item 1 again.
    append_request(redis_client, stream, 100, 2, 5, [1, 2, 3, 4, 5], scores, 87_000, nearline=[1])
    append_request(redis_client, stream, 100, 3, 5, [1, 6], [0.9, 0.1], 87_100)

    figures = select_partitions(cfg, INTERVAL, [0])

    layout = CycleLayout(Namespace.of(cfg))
    ledger = read_parquet(layout.selections(INTERVAL))
    assert list(zip(ledger["request_id"], ledger["item_id"], strict=True)) == [(2, 1), (3, 6)]
    nearline = read_parquet(layout.nearline(INTERVAL))
    assert nearline[["user_id", "item_id", "computed_at", "expires_at"]].values.tolist() == [
        [5, 1, 87_000, 87_000 + 21_600]
    ]
    assert (figures["nearline_selected"], figures["nearline_taken_back"]) == (1, 1)
    assert figures["selected"] == 2

    # The next interval skips the near-line pair too, as a cached one.
    append_request(redis_client, stream, 100, 4, 5, [1, 7], [0.9, 0.1], 90_100)
    following = Interval(90_000, 93_600)
    select_partitions(cfg, following, [0])
    ledger = read_parquet(layout.selections(following))
    assert ledger["item_id"].tolist() == [7]


def test_the_drain_skips_an_entry_with_more_items_than_a_request_holds(
    tmp_path, feast_project: str, redis_connection: str, redis_client
) -> None:
    """The drill's 1,000,000-item entry: the drain is bounded by store.max_candidates, so an
    entry past it is skipped, counted and deleted, and the others are kept."""
    cfg = SolarisConfig(
        namespace=feast_project, artifacts_dir=tmp_path, store={"max_candidates": 5}
    )
    try:
        _log(redis_client, cfg, 2, 87_000, [1, 2, 3])
        _log(redis_client, cfg, 3, 87_100, list(range(10, 16)))  # 6 items: one too many
        rows, figures = drain_request_log(cfg, redis_connection, INTERVAL)
        assert rows["request_id"].tolist() == [2, 2, 2]
        assert figures["unreadable"] == 1
        assert redis_client.xlen(Namespace.of(cfg).request_stream) == 0
    finally:
        redis_client.delete(Namespace.of(cfg).request_stream)
