"""The partition of a user follows the Redis Cluster slot of the store's ``{u:<id>}`` tag."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from redis.crc import key_slot

from solaris.store.contract import PAIR
from solaris.store.keys import partition_key, view_key
from solaris.store.partitions import (
    SLOTS,
    Chunk,
    PartitionError,
    Partitioning,
    pack,
    pack_within,
    user_slot,
    user_slots,
)

IDS = np.array(
    [0, 1, 7, 42, 943, 1682, 99_999, 10**9, -1, -42, 2**62, -(2**63), 2**63 - 1], dtype=np.int64
)


def test_a_users_slot_is_the_cluster_slot_of_their_online_keys() -> None:
    for user in IDS.tolist():
        key = partition_key(view_key("proj", PAIR), PAIR, user)
        assert user_slot(user) == key_slot(key.encode())


def test_the_vectorised_slots_equal_the_scalar_reference() -> None:
    rng = np.random.default_rng(0)
    ids = np.concatenate([IDS, rng.integers(-(2**62), 2**62, 5_000), np.arange(2_000)])
    assert user_slots(ids).tolist() == [user_slot(u) for u in ids.tolist()]
    assert user_slots(ids.astype(np.int32)[-2_000:]).tolist() == list(map(user_slot, range(2_000)))


def test_partitions_are_contiguous_slot_ranges_that_cover_every_slot() -> None:
    for count in (1, 2, 3, 8, 7, 16_384):
        parts = Partitioning(count)
        ranges = [parts.slot_range(k) for k in range(count)]
        assert ranges[0].start == 0 and ranges[-1].stop == SLOTS
        assert all(a.stop == b.start for a, b in itertools.pairwise(ranges))
        ids = np.arange(20_000)
        of = parts.of(ids)
        slots = user_slots(ids)
        for k in {0, count - 1, count // 2}:
            assert np.all((slots[of == k] >= ranges[k].start) & (slots[of == k] < ranges[k].stop))


def test_each_user_is_in_exactly_one_partition_and_split_keeps_row_order() -> None:
    parts = Partitioning(8)
    ids = np.random.default_rng(1).integers(0, 10**6, 10_000)
    split = parts.split(ids)
    assert sorted(np.concatenate(split).tolist()) == list(range(len(ids)))
    for k, rows in enumerate(split):
        assert np.all(np.diff(rows) > 0)
        assert np.all(parts.of(ids[rows]) == k)
        assert all(parts.of_user(int(u)) == k for u in ids[rows[:20]])
    sizes = np.array([len(r) for r in split])
    assert sizes.min() > 0.8 * sizes.mean()  # the slot hash spreads users evenly


def test_one_partition_holds_everyone() -> None:
    assert Partitioning(1).of(IDS).tolist() == [0] * len(IDS)
    assert Partitioning(1).slot_range(0) == range(SLOTS)


@pytest.mark.parametrize("count", [0, -1, SLOTS + 1, 1.5, True, "8", None])
def test_a_bad_partition_count_is_refused_by_name(count: object) -> None:
    with pytest.raises(PartitionError, match=r"cycle\.partitions"):
        Partitioning(count)  # type: ignore[arg-type]


def test_bad_indices_and_ids_are_refused() -> None:
    parts = Partitioning(4)
    with pytest.raises(PartitionError, match=r"partition 4 is not in \[0, 4\)"):
        parts.slot_range(4)
    with pytest.raises(PartitionError, match="must be an integer"):
        parts.check("1")
    with pytest.raises(PartitionError, match="integers"):
        parts.of(np.array([1.5]))
    with pytest.raises(PartitionError, match="1-D"):
        parts.of(np.zeros((2, 2), np.int64))


def test_the_setting_is_validated_with_the_configuration() -> None:
    from pydantic import ValidationError

    from solaris.config import CycleConfig

    assert CycleConfig().partitions == 1
    assert CycleConfig(partitions=8).partitions == 8
    with pytest.raises(ValidationError):
        CycleConfig(partitions=0)


def test_pack_puts_quiet_partitions_together_and_cuts_busy_ones() -> None:
    sizes = np.array([3, 0, 4, 12, 1, 1, 0, 0])
    shards = pack(sizes, 5, split=True)
    assert [(c.start, c.stop, c.first, c.last) for c in shards] == [
        (0, 3, 0, 1),
        (3, 7, 2, 2),
        (7, 12, 3, 3),
        (12, 17, 3, 3),
        (17, 19, 3, 3),
        (19, 21, 4, 7),
    ]
    groups = pack(sizes, 5, split=False)
    assert [(c.first, c.last) for c in groups] == [(0, 1), (2, 2), (3, 3), (4, 7)]
    assert pack(np.array([2, 2, 2]), 100, split=True) == [Chunk(0, 6, 0, 2)]
    assert pack(np.zeros(4, np.int64), 10, split=True) == []
    with pytest.raises(PartitionError, match="max_rows"):
        pack(sizes, 0, split=True)


def test_pack_covers_every_row_once_in_order() -> None:
    rng = np.random.default_rng(2)
    for _ in range(50):
        sizes = rng.integers(0, 30, rng.integers(1, 20))
        for split in (True, False):
            units = pack(sizes, int(rng.integers(1, 40)), split=split)
            rows = [r for u in units for r in range(u.start, u.stop)]
            assert rows == list(range(int(sizes.sum())))
            bounds = np.r_[0, np.cumsum(sizes)]
            for u in units:  # a unit's rows are exactly those of its partitions (or a piece)
                assert bounds[u.first] <= u.start < u.stop <= bounds[u.last + 1]


def test_a_plan_over_the_unit_cap_grows_its_units_to_the_smallest_bound_that_fits() -> None:
    """Airflow refuses a mapped task of more than ``max_map_length``: a plan whose rows need
    more units than ``max_units`` gets bigger units (every row still once, in order), with
    the smallest bound that fits; one that fits already is the plan without a cap."""
    rng = np.random.default_rng(5)
    for _ in range(60):
        sizes = rng.integers(0, 50, rng.integers(1, 30))
        max_rows = int(rng.integers(1, 20))
        cap = int(rng.integers(1, 12))
        for split in (True, False):
            plain = pack(sizes, max_rows, split=split)
            units = pack(sizes, max_rows, split=split, max_units=cap)
            assert len(units) <= max(cap, 0 if not sizes.sum() else 1)
            assert [r for u in units for r in range(u.start, u.stop)] == list(
                range(int(sizes.sum()))
            )
            if len(plain) <= cap:
                assert units == plain
                continue
            # The plan of the smallest bound that fits, found by brute force.
            smallest = next(
                b
                for b in range(max_rows, int(sizes.sum()) + 1)
                if len(pack(sizes, b, split=split)) <= cap
            )
            assert units == pack(sizes, smallest, split=split)


def test_pack_within_shares_one_bound_and_refuses_more_busy_tables_than_units() -> None:
    busy = np.array([40, 0, 40])
    plans = pack_within([busy, busy, np.zeros(3, np.int64)], 10, split=True, max_units=4)
    assert [len(p) for p in plans] == [2, 2, 0]
    assert {u.stop - u.start for p in plans for u in p} == {40}  # whole partitions: 4 units
    with pytest.raises(PartitionError, match="3 tables with rows need a unit each"):
        pack_within([busy, busy, busy], 10, split=True, max_units=2)
    with pytest.raises(PartitionError, match="max_units"):
        pack(busy, 10, split=True, max_units=0)
