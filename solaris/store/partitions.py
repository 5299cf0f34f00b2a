"""The partition of a user: which share of the cycle's work, and of the store, is theirs.

Every per-user key of the online store carries the hash tag ``{u:<id>}``
(:func:`solaris.store.keys.partition_key`), so Redis Cluster puts all of one user's keys in
one of its 16,384 slots, ``CRC16("u:<id>") mod 16384``. A cycle of ``P`` partitions
(``cycle.partitions``) splits the slots into ``P`` contiguous ranges and gives a user the
range their slot falls in::

    partition(user) = slot(user) * P // 16384

So the cycle's partitions follow the store's own layout: a cluster whose nodes own
contiguous slot ranges (what ``redis-cli --cluster create`` assigns) receives one
partition's online writes on one node when ``P`` is a multiple of its node count, and a
partition's task never writes to a key of another partition. One user is in exactly one
partition for a given ``P``; with ``P = 1`` everyone is in partition 0.

This is the one home of that rule: the embedding plan, the enrichment, the benches and the
tests call :class:`Partitioning`; nothing else hashes a user id.

The slot is computed for a whole column of ids at once (numpy, a table-driven CRC over at
most 22 byte positions), about 40 ns per id; :func:`user_slot` is the scalar reference.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from solaris.errors import SolarisError
from solaris.store.contract import USER

if TYPE_CHECKING:
    from solaris.namespace import Namespace

__all__ = [
    "SLOTS",
    "Chunk",
    "PartitionCountError",
    "PartitionError",
    "Partitioning",
    "pack",
    "pack_within",
    "record_partition_count",
    "user_slot",
    "user_slots",
]

SLOTS = 16_384
"""Redis Cluster's hash slots."""

_MAX_DIGITS = 20  # decimal digits of |int64|, at most 9223372036854775808 (19) and uint64 (20)


class PartitionError(SolarisError, ValueError):
    """A partition count or index the cycle cannot use (the message names it)."""


class PartitionCountError(PartitionError):
    """A process configured with another partition count than the one its namespace
    recorded (:func:`record_partition_count`), or started while the namespace is being
    re-split; it wrote and read nothing partitioned."""


def record_partition_count(client: Any, namespace: Namespace, count: int, *, who: str) -> int:
    """Check ``count`` against the partition count ``namespace`` recorded (its
    :attr:`~solaris.namespace.Namespace.partitions_key`), recording it first when there is
    none (``SET NX``: the first process to use the namespace decides). Returns the count.

    Why one recorded fact: serving appends a request to its user's partition's stream and
    the cycle drains the streams of its own count; the ledgers and state files are split by
    partition too. A serving process with one count and a cycle with another leave requests
    in streams nobody drains, and a cycle whose count changed between intervals reads the
    old split's ledger ``k`` as the new partition ``k``, both without a word. The count is
    changed by ``solaris namespace repartition`` (:mod:`solaris.orchestration.repartition`),
    which re-splits what is in flight; while it runs (its
    :attr:`~solaris.namespace.Namespace.repartition_key` is set) every process is refused.

    Raises:
        PartitionCountError: the namespace records another count, or is being re-split
            (``who`` names the process, the message the setting and the key).
    """
    checked = Partitioning(count).count
    pipe = client.pipeline(transaction=False)
    pipe.set(namespace.partitions_key, checked, nx=True)
    pipe.get(namespace.partitions_key)
    pipe.get(namespace.repartition_key)
    _, raw, pending = pipe.execute()
    recorded = int(raw) if raw is not None else checked
    command = f"solaris namespace repartition {namespace.name} --partitions"
    if pending is not None:
        raise PartitionCountError(
            f"{who}: namespace {namespace.name!r} is being re-split into other partitions "
            f"(Redis key {namespace.repartition_key} holds {_text(pending)}): its request "
            "streams and files are moving, and nothing may read or write them until the "
            f're-split ends; finish it (`{command} N`, N the count "to" names), then start '
            "this process with cycle.partitions set to N"
        )
    if recorded != checked:
        raise PartitionCountError(
            f"{who}: cycle.partitions is {checked}, but the namespace records {recorded} "
            f"(Redis key {namespace.partitions_key}): its request streams, ledgers and state "
            f"files are split into {recorded}, and a process splitting them into {checked} "
            "would leave requests in streams no one drains and read other partitions' "
            f"ledgers; set cycle.partitions (SOLARIS_CYCLE__PARTITIONS) to {recorded}, or "
            f"change the namespace's count with `{command} {checked}` (it re-splits what is "
            "in flight; stop serving, the near-line embedders and the cycle first)"
        )
    return recorded


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _crc16_table() -> np.ndarray:
    """CRC-16/XMODEM (polynomial 0x1021, initial 0), Redis Cluster's key hash, by byte."""
    table = np.zeros(256, dtype=np.uint32)
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table[byte] = crc & 0xFFFF
    return table


_TABLE = _crc16_table()


def _update(crc: np.ndarray, byte: np.ndarray) -> np.ndarray:
    return ((crc << 8) & 0xFFFF) ^ _TABLE[((crc >> 8) ^ byte) & 0xFF]


_PREFIX = f"{USER.tag}:".encode()  # what precedes the id inside the braces: "u:"
_PREFIX_CRC = np.zeros(1, dtype=np.uint32)
for _byte in _PREFIX:
    _PREFIX_CRC = _update(_PREFIX_CRC, np.array([_byte], dtype=np.uint32))


def user_slot(user_id: int) -> int:
    """The Redis Cluster slot of user ``user_id``'s keys (the tag ``u:<id>``): the scalar
    reference :func:`user_slots` is tested against."""
    crc = 0
    for byte in _PREFIX + str(int(user_id)).encode():
        crc = ((crc << 8) & 0xFFFF) ^ int(_TABLE[((crc >> 8) ^ byte) & 0xFF])
    return crc % SLOTS


def user_slots(user_ids: np.ndarray) -> np.ndarray:
    """The slots of a column of user ids ``[N]`` (any integer dtype): ``uint16 [N]``.

    Ids of one decimal length go together: their digits are taken by integer division, most
    significant first, and the CRC advances one digit position for all of them at once (at
    most 20 positions, a few vector operations each; no per-id Python work).
    """
    ids = np.asarray(user_ids)
    if ids.ndim != 1:
        raise PartitionError(f"user ids must be 1-D, got shape {ids.shape}")
    if len(ids) and not np.issubdtype(ids.dtype, np.integer):
        raise PartitionError(f"user ids must be integers, got dtype {ids.dtype}")
    ids = ids.astype(np.int64, copy=False)
    crc = np.full(len(ids), _PREFIX_CRC[0], dtype=np.uint32)
    negative = ids < 0
    if negative.any():  # "-" comes first; |int64 min| still fits a uint64
        crc[negative] = _update(crc[negative], np.uint32(ord("-")))
    magnitude = np.where(negative, -(ids + 1), ids).astype(np.uint64) + negative
    digits = np.ones(len(ids), dtype=np.int8)
    for power in _POWERS[1:]:
        digits += magnitude >= power
    lengths = np.unique(digits).tolist()
    for length in lengths:
        rows = slice(None) if len(lengths) == 1 else np.flatnonzero(digits == length)
        v, c = magnitude[rows], crc[rows]
        for position in range(length - 1, -1, -1):  # most significant digit first
            c = _update(c, ((v // _POWERS[position]) % _TEN).astype(np.uint32) + _ZERO)
        crc[rows] = c
    return (crc % SLOTS).astype(np.uint16)


_POWERS = [np.uint64(10**k) for k in range(_MAX_DIGITS)]
_TEN = np.uint64(10)
_ZERO = np.uint32(ord("0"))


@dataclass(frozen=True)
class Partitioning:
    """``count`` partitions of the users, each a contiguous range of Redis Cluster slots.

    >>> parts = Partitioning(8)
    >>> parts.of(np.array([1, 2, 3]))  # doctest: +SKIP
    array([7, 2, 5], dtype=int32)
    >>> parts.slot_range(0)
    range(0, 2048)
    """

    count: int

    def __post_init__(self) -> None:
        count = self.count
        if isinstance(count, bool) or not isinstance(count, numbers.Integral):
            raise PartitionError(f"cycle.partitions must be an integer, got {count!r}")
        if not 1 <= count <= SLOTS:
            raise PartitionError(f"cycle.partitions must be in [1, {SLOTS}], got {count}")
        object.__setattr__(self, "count", int(count))

    def of(self, user_ids: np.ndarray) -> np.ndarray:
        """The partition of each user id ``[N]``: ``int32 [N]`` in ``[0, count)``."""
        if self.count == 1:
            ids = np.asarray(user_ids)
            if ids.ndim != 1:
                raise PartitionError(f"user ids must be 1-D, got shape {ids.shape}")
            return np.zeros(len(ids), dtype=np.int32)
        slots = user_slots(user_ids).astype(np.int64)
        return (slots * self.count // SLOTS).astype(np.int32)

    def holds(self, user_ids: np.ndarray, index: int) -> np.ndarray:
        """Which of ``user_ids [N]`` are in partition ``index``: ``bool [N]`` (all, with one
        partition, without hashing)."""
        if self.count == 1:
            return np.ones(len(np.asarray(user_ids)), dtype=bool)
        return self.of(user_ids) == self.check(index)

    def of_user(self, user_id: int) -> int:
        """The partition of one user (:meth:`of` for a scalar)."""
        return user_slot(user_id) * self.count // SLOTS

    def check(self, index: object) -> int:
        """``index`` as a partition of this partitioning, or :class:`PartitionError`."""
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise PartitionError(f"a partition index must be an integer, got {index!r}")
        if not 0 <= index < self.count:
            raise PartitionError(f"partition {index} is not in [0, {self.count})")
        return int(index)

    def slot_range(self, index: int) -> range:
        """The slots of partition ``index``: ``[ceil(index·S/P), ceil((index+1)·S/P))``."""
        index = self.check(index)
        return range(-(-index * SLOTS // self.count), -(-(index + 1) * SLOTS // self.count))

    def anchor(self, index: int) -> int:
        """The smallest non-negative user id in partition ``index``: a key tagged
        ``{u:<anchor>}`` (a partition's request stream) lives in the partition's slots, on
        the node that holds its users' keys."""
        index = self.check(index)
        slots = self.slot_range(index)
        return int(_first_ids()[slots.start : slots.stop].min())

    def split(self, user_ids: np.ndarray) -> list[np.ndarray]:
        """The row positions of ``user_ids`` in each partition, in row order: ``count``
        arrays of int64 positions (a stable sort by partition, one pass)."""
        parts = self.of(user_ids)
        order = np.argsort(parts, kind="stable")
        bounds = np.searchsorted(parts[order], np.arange(self.count + 1))
        return [order[bounds[k] : bounds[k + 1]] for k in range(self.count)]


@functools.cache
def _first_ids() -> np.ndarray:
    """The smallest non-negative user id of every slot ``[SLOTS]`` (ids below 2^18 reach
    every slot; checked)."""
    ids = np.arange(1 << 18, dtype=np.int64)
    slots, first = np.unique(user_slots(ids), return_index=True)
    if len(slots) != SLOTS:  # pragma: no cover - a property of CRC16 over these ids
        raise PartitionError("user ids below 2^18 do not reach every Redis Cluster slot")
    return ids[first]


@dataclass(frozen=True)
class Chunk:
    """Rows ``[start, stop)`` of a partition-ordered table, holding partitions ``first`` to
    ``last`` (one chunk never splits a partition unless it is the only one in it)."""

    start: int
    stop: int
    first: int
    last: int


def pack(
    sizes: np.ndarray, max_rows: int, *, split: bool, max_units: int | None = None
) -> list[Chunk]:
    """Units of work over partitions of ``sizes[k]`` rows, in partition order.

    Consecutive partitions share a unit while their rows add up to at most ``max_rows`` (so
    a quiet interval is one unit, one task start, whatever the partition count); a partition
    with more rows is a unit of its own, cut into pieces of ``max_rows`` rows when ``split``
    (embedding shards) or kept whole when not (a partition's enrichment). Units without rows
    are left out. ``start``/``stop`` count rows of the partition-ordered table.

    With ``max_units``, a plan that would need more units grows them: ``max_rows`` becomes
    the smallest bound that packs into ``max_units`` (:func:`pack_within`).
    """
    if max_units is None:
        return _pack(np.asarray(sizes, dtype=np.int64), _rows_bound(max_rows), split)
    return pack_within([sizes], max_rows, split=split, max_units=max_units)[0]


def pack_within(
    sizes: Sequence[np.ndarray], max_rows: int, *, split: bool, max_units: int
) -> list[list[Chunk]]:
    """:func:`pack` of several tables at once (one per interval of a run), with one row
    bound for all, the smallest at or above ``max_rows`` whose units add up to at most
    ``max_units`` (a run's mapped tasks: Airflow refuses a mapped task of more than
    ``[core] max_map_length``). A unit never holds two tables' rows, so a run of more
    tables with rows than ``max_units`` cannot fit: :class:`PartitionError`.

    The count of units falls as the bound grows (greedy packing of consecutive partitions,
    pieces of a split partition), so the bound is found by bisection: about log2 of the
    rows passes over the partitions.
    """
    if isinstance(max_units, bool) or not isinstance(max_units, numbers.Integral):
        raise PartitionError(f"max_units must be a positive integer, got {max_units!r}")
    if max_units <= 0:
        raise PartitionError(f"max_units must be a positive integer, got {max_units!r}")
    tables = [np.asarray(s, dtype=np.int64) for s in sizes]
    bound = _rows_bound(max_rows)

    def packed(rows: int) -> list[list[Chunk]]:
        return [_pack(table, rows, split) for table in tables]

    def count(plan: list[list[Chunk]]) -> int:
        return sum(len(units) for units in plan)

    plan = packed(bound)
    if count(plan) <= max_units:
        return plan
    busy = sum(1 for table in tables if table.sum() > 0)
    if busy > max_units:
        raise PartitionError(
            f"{busy} tables with rows need a unit each, more than max_units = {max_units}"
        )
    # count(packed(hi)) <= max_units: a bound of a table's whole rows packs it into one unit.
    low, high = bound, max(bound, max(int(t.sum()) for t in tables))
    while high - low > 1:
        middle = (low + high) // 2
        if count(packed(middle)) <= max_units:
            high = middle
        else:
            low = middle
    return packed(high)


def _rows_bound(max_rows: object) -> int:
    if isinstance(max_rows, bool) or not isinstance(max_rows, numbers.Integral) or max_rows <= 0:
        raise PartitionError(f"max_rows must be a positive integer, got {max_rows!r}")
    return int(max_rows)


def _pack(sizes: np.ndarray, max_rows: int, split: bool) -> list[Chunk]:
    bounds = np.r_[0, np.cumsum(sizes)].tolist()
    units: list[Chunk] = []

    def close(first: int, last: int) -> None:
        if last >= first and bounds[last + 1] > bounds[first]:
            units.append(Chunk(bounds[first], bounds[last + 1], first, last))

    first = 0
    for k, size in enumerate(sizes.tolist()):
        if size > max_rows:
            close(first, k - 1)
            step = max_rows if split else size
            units += [
                Chunk(bounds[k] + lo, bounds[k] + min(lo + step, size), k, k)
                for lo in range(0, size, step)
            ]
            first = k + 1
        elif bounds[k + 1] - bounds[first] > max_rows:
            close(first, k - 1)
            first = k
    close(first, len(sizes) - 1)
    return units
