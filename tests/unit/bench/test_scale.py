"""bench.scale's pure helpers: the exponent fit, the --sizes parser, partitions and groups,
and its adapters' per-partition counters."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.scale import (
    PartitionLogs,
    compact_peaks,
    fit_exponent,
    group_shards,
    parse_sizes,
    partition_count,
    size_config,
    threads_per_task,
)


@pytest.mark.parametrize("b", [0.5, 1.0, 1.37, 2.0])
def test_fit_exponent_recovers_the_exponent_of_a_power_law(b: float) -> None:
    sizes = [1e4, 1e5, 1e6, 1e7]
    costs = [3.2 * n**b for n in sizes]
    assert fit_exponent(sizes, costs) == pytest.approx(b, abs=1e-9)


def test_fit_exponent_is_the_least_squares_slope_of_noisy_points() -> None:
    # log10 sizes 0, 1, 2 with log10 costs 0, 1, 3: slope (3 - 0) / 2 = 1.5 by least squares
    assert fit_exponent([1, 10, 100], [1, 10, 1000]) == pytest.approx(1.5)


def test_fit_exponent_needs_two_sizes_with_positive_costs() -> None:
    assert math.isnan(fit_exponent([1e5], [2.0]))
    assert math.isnan(fit_exponent([1e5, 1e5], [2.0, 3.0]))
    assert math.isnan(fit_exponent([1e5, 1e6], [2.0, 0.0]))
    assert fit_exponent([1e5, 1e6, 1e7], [1.0, 0.0, 100.0]) == pytest.approx(1.0)


def test_parse_sizes_accepts_exponents_and_underscores_sorted_and_distinct() -> None:
    assert parse_sizes("1e7, 100_000,1e5") == (100_000, 10_000_000)


@pytest.mark.parametrize("text", ["1.5", "0", "-10", "1e5,abc"])
def test_parse_sizes_rejects_what_is_not_a_positive_integer(text: str) -> None:
    with pytest.raises((argparse.ArgumentTypeError, ValueError)):
        parse_sizes(text)


def test_partition_count_keeps_the_rows_per_partition_about_constant() -> None:
    assert [partition_count(n, 625_000) for n in (10_000, 100_000, 1_000_000, 10**7, 10**8)] == [
        1,
        1,
        2,
        16,
        160,
    ]
    with pytest.raises(ValueError):
        partition_count(10, 0)


def test_group_shards_packs_consecutive_shards_up_to_the_rows_and_keeps_big_ones_alone() -> None:
    shards = [{"index": k, "rows": rows} for k, rows in enumerate([40, 50, 30, 200, 10])]
    groups = group_shards(shards, 100)
    assert [[s["index"] for s in g] for g in groups] == [[0, 1], [2], [3], [4]]
    assert group_shards([], 100) == []


def test_compact_peaks_names_each_step_with_its_count_and_range() -> None:
    text = compact_peaks([("plan", [210.4]), ("embed", [350.0, 420.2, 399.0]), ("none", [])])
    assert text == "plan 210 | embed×3 350–420"


def test_threads_per_task_shares_the_cores_among_the_processes_at_once() -> None:
    cores = os.cpu_count() or 1
    assert threads_per_task(None, 1) == cores
    assert threads_per_task(None, 2) == max(1, cores // 2)
    assert threads_per_task(None, 4 * cores) == 1
    assert threads_per_task(3, 2) == 3


def test_user_pool_grows_with_the_rows_and_refuses_a_rate_that_is_not_positive() -> None:
    from bench.scale import user_pool

    assert user_pool(10_000_000, 0.01) == 100_000
    assert user_pool(1_000_000, 0.01) == 10_000
    assert user_pool(10, 0.01) == 1
    with pytest.raises(ValueError, match="users per row"):
        user_pool(1_000, 0)


@pytest.mark.parametrize("per_task", [1, 10])
def test_size_config_groups_per_task_partitions_into_one_task(per_task: int) -> None:
    """200 partitions of a few percent different sizes, packed by the cycle's own units:
    one partition a task by default, ten with ``per_task`` = 10."""
    import numpy as np

    from solaris.config import SolarisConfig
    from solaris.store.partitions import pack

    cfg, partitions = size_config(SolarisConfig(), 10**8, 500_000, per_task)
    assert partitions == 200
    rng = np.random.default_rng(0)
    pairs = 100_000 * rng.uniform(0.95, 1.05, partitions)  # a partition's selected pairs
    units = pack(pairs.astype(np.int64), cfg.cycle.enrich_rows, split=False)
    assert {u.last - u.first + 1 for u in units} == {per_task}


def test_partition_logs_answer_each_row_from_its_users_partition_holding_one_at_a_time(
    tmp_path: Path,
) -> None:
    """A query over users of two partitions gets, row for row, what each partition's own
    counters answer; only one partition's counters are held; another task's partition is
    refused."""
    from solaris.examples.synthetic import LogFeatures
    from solaris.store.partitions import Partitioning

    rng = np.random.default_rng(0)
    parts = Partitioning(3)
    users = rng.integers(0, 300, 3_000)
    log = pa.table(
        {
            "user_id": users,
            "item_id": rng.integers(0, 50, 3_000),
            "ts": rng.integers(1_000, 2_000, 3_000),
            "label": pa.array(rng.integers(-1, 2, 3_000), pa.int8()),
        }
    )
    of = parts.of(users)
    own = {}
    for p in range(3):
        table = log.filter(pa.array(of == p))
        pq.write_table(table, tmp_path / f"{p:05d}.parquet")
        own[p] = LogFeatures.from_table(table)
    logs = PartitionLogs(tmp_path, range(0, 2), 3)
    q_users = np.array([u for u in range(300) if parts.of(np.array([u]))[0] < 2][:40])
    q_items, q_ts = rng.integers(0, 50, len(q_users)), np.full(len(q_users), 1_500)
    q_parts = parts.of(q_users)
    assert set(q_parts) == {0, 1}
    dense, score = logs.dense(q_users, q_items, q_ts), logs.score(q_users, q_items, q_ts)
    for p in (0, 1):
        rows = q_parts == p
        assert np.array_equal(dense[rows], own[p].dense(q_users[rows], q_items[rows], q_ts[rows]))
        assert np.array_equal(score[rows], own[p].score(q_users[rows], q_items[rows], q_ts[rows]))
    held = logs._held
    assert held is not None and held[0] in (0, 1)  # one partition's counters, not both
    other = np.array([u for u in range(300) if parts.of(np.array([u]))[0] == 2][:1])
    with pytest.raises(RuntimeError, match="partition 2"):
        logs.score(other, np.array([1]), np.array([1_500]))
