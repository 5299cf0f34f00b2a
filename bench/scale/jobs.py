"""One size's job, its tasks and what their runs measured: what the parent writes for a
task process and reads back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.scale.common import compact_peaks
from bench.scale.meter import Part
from solaris.config import SolarisConfig

if TYPE_CHECKING:
    from solaris.orchestration.layout import Interval

__all__ = ["Job", "StageRun", "Task", "TaskRun", "json_default"]


@dataclass(frozen=True)
class Job:
    """One size: everything a task process needs, written as JSON by the parent."""

    size: int
    seed: int
    partitions: int
    rows_per_partition: int
    cache_intervals: int
    reps: int
    redis: str
    settings: dict[str, Any]  # the SolarisConfig, as JSON
    work: str  # this size's folder: traffic, task files
    start: int  # the interval [start, end)
    end: int
    users_per_row: float | None = None  # the user pool: N x this (None: the default 100,000)
    partitions_per_task: int = 1  # the partitions one mapped task runs, one after the other

    @property
    def folder(self) -> Path:
        return Path(self.work)

    @property
    def traffic(self) -> Path:
        return self.folder / "traffic"

    def config(self) -> SolarisConfig:
        return SolarisConfig.model_validate(self.settings)

    def interval(self) -> Interval:
        from solaris.orchestration.layout import Interval

        return Interval(self.start, self.end)


@dataclass(frozen=True)
class Task:
    """One task process: what it runs (``kind``), its step's name, its arguments (the XCom
    it gets) and the partitions its adapters index."""

    kind: str
    step: str
    args: dict[str, Any] = field(default_factory=dict)
    partitions: tuple[int, int] | None = None


@dataclass
class TaskRun:
    task: Task
    parts: list[Part]
    extra: dict[str, Any]
    wall_s: float
    peak_mb: float  # the process's peak RSS over its whole life
    imports_s: float = 0.0  # what it imported before its timed calls

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.parts if not p.within)

    @property
    def cpu_s(self) -> float:
        return sum(p.cpu_s for p in self.parts if not p.within)


@dataclass
class StageRun:
    """One stage at one size: its steps in order, each a list of task runs."""

    stage: str
    size: int
    workers: int
    steps: list[tuple[str, list[TaskRun]]] = field(default_factory=list)
    wall_s: float = 0.0
    load_s: float = 0.0  # the 1-minute load average integrated over the wall time

    @property
    def load(self) -> float:
        """The machine's mean 1-minute load average while the stage ran (its own tasks
        included: 1 or 2 of it are the bench's)."""
        return self.load_s / self.wall_s if self.wall_s else float("nan")

    @property
    def cpu_s(self) -> float:
        return sum(run.cpu_s for run in self.tasks)

    @property
    def tasks(self) -> list[TaskRun]:
        return [run for _, runs in self.steps for run in runs]

    @property
    def seconds(self) -> float:
        return sum(run.seconds for run in self.tasks)

    @property
    def peak_mb(self) -> float:
        return max(run.peak_mb for run in self.tasks)

    def parts(self, cpu: bool = False) -> dict[str, tuple[float, bool]]:
        """Seconds (or CPU seconds) per call name, summed over the stage's tasks (and
        whether within)."""
        out: dict[str, tuple[float, bool]] = {}
        for run in self.tasks:
            for p in run.parts:
                s, _ = out.get(p.name, (0.0, p.within))
                out[p.name] = (s + (p.cpu_s if cpu else p.seconds), p.within)
        return out

    def peaks(self) -> str:
        return compact_peaks([(name, [r.peak_mb for r in runs]) for name, runs in self.steps])

    def extra(self, key: str) -> Any:
        """The first task result holding ``key``."""
        return next((r.extra[key] for r in self.tasks if key in r.extra), None)


# --------------------------------------------------------------------------------------------


def json_default(value: object) -> object:
    """``json.dumps``' ``default`` for a job's, a task's and a result's files."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return str(value)
