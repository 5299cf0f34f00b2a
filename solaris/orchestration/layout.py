"""Where the Airflow cycle keeps its state, and the small file formats it uses.

Everything lives under the namespace's folder, ``artifacts_dir/namespaces/<name>``
(:mod:`solaris.namespace`; one folder a kind, one file an interval, named by epoch seconds so
that names sort by time)::

    request_log/<start>-<end>.parquet  the requests serving logged in that interval (drained)
    selections/<start>-<end>.parquet   the verifier's selection of one interval (the ledger)
    misses/<start>-<end>.parquet       miss-stream entries drained by that interval's run
    shards/<start>-<end>/shard-K.parquet          the ledger split for the mapped tasks
    pair_embeddings/<start>-<end>/shard-K.parquet the codes those tasks computed (_SUCCESS: all in)
    neighbours/<as_of>.parquet         the clustering DAG's user-neighbour table
    training/<as_of>/                  the training DAG's set, candidate VM and metrics
    verifier/<as_of>.json              each VM the training DAG published, in force from as_of
    runs/<dag_id>/<key>.json           one record per DAG run, read by the SOLARIS UI page

Every file appears atomically (:mod:`solaris.files`), so a retried or killed task never
leaves half a file for the next one to read. This module imports nothing heavy: the Airflow
plugin reads run records through it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solaris.files import atomic_write_json
from solaris.namespace import Namespace

_INTERVAL = re.compile(r"^(\d+)-(\d+)$")


@dataclass(frozen=True, order=True)
class Interval:
    """One scheduling interval ``[start, end)`` in epoch seconds."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not (isinstance(self.start, int) and isinstance(self.end, int)):
            raise TypeError(f"interval bounds must be int epoch seconds, got {self!r}")
        if self.end <= self.start:
            raise ValueError(f"interval end {self.end} must be after its start {self.start}")

    @property
    def key(self) -> str:
        return f"{self.start:011d}-{self.end:011d}"

    @classmethod
    def from_key(cls, key: str) -> Interval:
        match = _INTERVAL.match(key)
        if not match:
            raise ValueError(f"not an interval key: {key!r}")
        return cls(int(match[1]), int(match[2]))

    def as_dict(self) -> dict[str, int]:
        return {"interval_start": self.start, "interval_end": self.end}


@dataclass(frozen=True)
class CycleLayout:
    """Paths of one namespace's cycle state, and of the models it reads."""

    namespace: Namespace

    @property
    def root(self) -> Path:
        return self.namespace.cycle_root

    @property
    def models_dir(self) -> Path:
        return self.namespace.models_dir

    def request_log(self, interval: Interval) -> Path:
        """The requests serving logged in ``interval``, drained from the request stream."""
        return self.root / "request_log" / f"{interval.key}.parquet"

    def selections(self, interval: Interval) -> Path:
        return self.root / "selections" / f"{interval.key}.parquet"

    def misses(self, interval: Interval) -> Path:
        return self.root / "misses" / f"{interval.key}.parquet"

    def shard(self, interval: Interval, index: int) -> Path:
        return self.root / "shards" / interval.key / f"shard-{index:04d}.parquet"

    def embeddings(self, interval: Interval, index: int) -> Path:
        return self.root / "pair_embeddings" / interval.key / f"shard-{index:04d}.parquet"

    def embeddings_done(self, interval: Interval) -> Path:
        """Written by the embeddings run once every shard of ``interval`` is in: readers
        take an interval's codes only with it, never a half-embedded interval."""
        return self.root / "pair_embeddings" / interval.key / "_SUCCESS"

    def neighbours(self, as_of: int) -> Path:
        return self.root / "neighbours" / f"{as_of:011d}.parquet"

    def training(self, as_of: int) -> Path:
        return self.root / "training" / f"{as_of:011d}"

    def verifier_publication(self, as_of: int) -> Path:
        """The training run of ``as_of`` published its VM as the verifier from then on."""
        return self.root / "verifier" / f"{as_of:011d}.json"

    def verifier_in_force(self, as_of: int) -> Path | None:
        """The newest publication at or before ``as_of`` (None: the VM trained with the FM).

        Looked up by time, not "the latest", so a backfill or a rerun of an old interval
        never scores with a VM trained on labels from after it.
        """
        return _newest_at_or_before(self.root / "verifier", ".json", as_of)

    def run_record(self, dag_id: str, key: str) -> Path:
        return self.root / "runs" / dag_id / f"{key}.json"

    # -- listing ----------------------------------------------------------------------------

    def intervals(self, kind: str, *, ending_after: int, ending_by: int) -> list[Interval]:
        """Intervals of ``kind`` (``request_log``, ``selections``, ``pair_embeddings``) whose
        end is in ``(ending_after, ending_by]``, oldest first."""
        folder = self.root / kind
        if not folder.is_dir():
            return []
        found = []
        for entry in folder.iterdir():
            name = entry.name.removesuffix(".parquet").removesuffix(".json")
            if entry.name.startswith(".") or not _INTERVAL.match(name):
                continue
            interval = Interval.from_key(name)
            if ending_after < interval.end <= ending_by:
                found.append(interval)
        return sorted(found)

    def recorded_intervals(self, dag_id: str, *, ending_by: int) -> list[Interval]:
        """The intervals ending at or before ``ending_by`` whose ``dag_id`` run finished (its
        run record is written last), oldest first."""
        return self.intervals(f"runs/{dag_id}", ending_after=-1, ending_by=ending_by)

    def embedded_intervals(self, *, ending_after: int, ending_by: int) -> list[Interval]:
        """The completely embedded intervals (marker written) ending in
        ``(ending_after, ending_by]``: what readers of the codes may use."""
        return [
            i
            for i in self.intervals(
                "pair_embeddings", ending_after=ending_after, ending_by=ending_by
            )
            if self.embeddings_done(i).is_file()
        ]

    def latest_neighbours(self, as_of: int) -> Path | None:
        """The newest neighbour table built at or before ``as_of``."""
        return _newest_at_or_before(self.root / "neighbours", ".parquet", as_of)


def _newest_at_or_before(folder: Path, suffix: str, as_of: int) -> Path | None:
    """The file ``<t>{suffix}`` of ``folder`` with the largest epoch ``t <= as_of``."""
    if not folder.is_dir():
        return None
    times = [
        int(p.stem) for p in folder.glob(f"*{suffix}") if p.stem.isdigit() and int(p.stem) <= as_of
    ]
    return folder / f"{max(times):011d}{suffix}" if times else None


def write_run_record(layout: CycleLayout, dag_id: str, key: str, record: dict[str, Any]) -> Path:
    """The figures of one DAG run, for the SOLARIS page (written by the task, not the UI)."""
    return atomic_write_json(
        layout.run_record(dag_id, key), {"dag_id": dag_id, "key": key, **record}
    )


def read_run_records(root: Path) -> dict[str, list[dict[str, Any]]]:
    """Every run record under ``root`` (a namespace's folder), by DAG id, newest first.

    A record that cannot be parsed is reported as such rather than dropped silently.
    """
    runs = Path(root) / "runs"
    out: dict[str, list[dict[str, Any]]] = {}
    if not runs.is_dir():
        return out
    for folder in sorted(p for p in runs.iterdir() if p.is_dir()):
        records = []
        for path in sorted(folder.glob("*.json"), reverse=True):
            try:
                records.append(json.loads(path.read_text()))
            except (OSError, ValueError) as exc:
                records.append({"dag_id": folder.name, "key": path.stem, "error": str(exc)})
        out[folder.name] = records
    return out


def read_all_run_records(artifacts_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """The run records of every namespace under ``artifacts_dir``, by DAG id, newest first;
    each record names its ``namespace`` (replays and the live cycle are told apart)."""
    folder = Path(artifacts_dir) / "namespaces"
    out: dict[str, list[dict[str, Any]]] = {}
    if not folder.is_dir():
        return out
    for root in sorted(p for p in folder.iterdir() if p.is_dir()):
        for dag_id, records in read_run_records(root).items():
            for record in records:
                if isinstance(record, dict):
                    record.setdefault("namespace", root.name)
            out.setdefault(dag_id, []).extend(records)
    for records in out.values():
        records.sort(
            key=lambda r: str(r.get("key", "")) if isinstance(r, dict) else "", reverse=True
        )
    return out
