"""The bench's adapters (``bench.scale:foundation_model``, ``bench.scale:verifier``): the
example's FM and verifier over the counters of the task's own partitions' traffic."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.scale.common import ENV_PARTITIONS, ENV_TRAFFIC, FM_NAME, LOG_COLUMNS
from solaris.config import SolarisConfig

if TYPE_CHECKING:
    from solaris.examples.synthetic import (
        LogFeatures,
        RecurrenceVerifier,
        SyntheticFoundationModel,
    )

__all__ = ["PartitionLogs", "fm_module", "foundation_model", "verifier"]


def _task_partitions() -> tuple[Path, range]:
    """The folder of the traffic files and the partitions the parent named for this task."""
    folder, named = os.environ.get(ENV_TRAFFIC), os.environ.get(ENV_PARTITIONS)
    if not folder or not named:
        raise RuntimeError(f"{ENV_TRAFFIC} and {ENV_PARTITIONS} name the task's traffic")
    first, last = (int(x) for x in named.split(","))
    return Path(folder), range(first, last + 1)


class PartitionLogs:
    """The counters of the task's partitions' traffic, one partition's in memory at a time.

    The cycle's tasks work one partition after the other (a shard holds whole partitions, in
    order), so an adapter of a task that runs K partitions need not hold K partitions'
    counters (1.6 GB with K = 10 at 10^8 rows): a query is split by its users' partition,
    and a partition's counters are built when first asked for and dropped for the next one.
    Item counters are those of a partition's traffic, as with one partition a task."""

    def __init__(self, folder: Path, partitions: range, count: int) -> None:
        from solaris.store.partitions import Partitioning

        self._folder, self._partitions = folder, partitions
        self._parts = Partitioning(count)
        self._held: tuple[int, LogFeatures] | None = None

    def _log(self, partition: int) -> LogFeatures:
        import pyarrow.parquet as pq

        from solaris.examples.synthetic import LogFeatures

        if self._held is None or self._held[0] != partition:
            self._held = None  # the old partition's counters go before the new ones are built
            path = self._folder / f"{partition:05d}.parquet"
            if partition not in self._partitions or not path.is_file():
                raise RuntimeError(f"no traffic of partition {partition} for this task in {path}")
            self._held = (
                partition,
                LogFeatures.from_table(pq.read_table(path, columns=LOG_COLUMNS)),
            )
        return self._held[1]

    def _each(self, method: str, users: Any, items: Any, ts: Any) -> np.ndarray:
        users, items, ts = (np.asarray(a, np.int64) for a in (users, items, ts))
        parts = self._parts.of(users)
        if not len(parts) or (parts == parts[0]).all():
            return getattr(self._log(int(parts[0]) if len(parts) else self._partitions[0]), method)(
                users, items, ts
            )
        out: np.ndarray | None = None
        for partition in dict.fromkeys(parts.tolist()):  # in the order the rows ask for them
            rows = np.flatnonzero(parts == partition)
            part = getattr(self._log(partition), method)(users[rows], items[rows], ts[rows])
            if out is None:
                out = np.empty((len(users), *part.shape[1:]), part.dtype)
            out[rows] = part
        assert out is not None
        return out

    def dense(self, users: Any, items: Any, ts: Any) -> np.ndarray:
        return self._each("dense", users, items, ts)

    def score(self, users: Any, items: Any, ts: Any) -> np.ndarray:
        return self._each("score", users, items, ts)


def fm_module():
    import torch

    from solaris.data.synthetic import SyntheticSpec
    from solaris.examples.synthetic import PairTowerFM

    torch.manual_seed(0)
    return PairTowerFM(user_buckets=64, n_items=SyntheticSpec(n_pairs=1).n_items)


def foundation_model(cfg: SolarisConfig) -> SyntheticFoundationModel:
    """``model.foundation`` of the bench: the example's seeded, untrained FM, its features
    the counters of the task's partitions' traffic."""
    from solaris.examples.synthetic import SyntheticFoundationModel

    logs = PartitionLogs(*_task_partitions(), cfg.cycle.partitions)
    return SyntheticFoundationModel(fm_module(), logs, FM_NAME)  # type: ignore[arg-type]


def verifier(cfg: SolarisConfig) -> RecurrenceVerifier:
    """``model.verifier`` of the bench: the example's recurrence score over the task's
    partitions' traffic."""
    from solaris.examples.synthetic import RecurrenceVerifier

    logs = PartitionLogs(*_task_partitions(), cfg.cycle.partitions)
    return RecurrenceVerifier(logs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
