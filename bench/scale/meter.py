"""What a task process measures of itself: its timed calls' seconds, CPU seconds and peak
resident set (``VmHWM``, reset through ``/proc/self/clear_refs`` before each call)."""

from __future__ import annotations

import contextlib
import resource
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Meter", "Part", "maxrss_mb"]


def _status_mb(name: str) -> float | None:
    """``VmRSS`` / ``VmHWM`` of this process in MB (Linux), else None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Part:
    """One timed call of a task: seconds, CPU seconds (user + system, every thread of the
    process) and memory (MB). ``within`` marks a figure that is part of the previous call's
    time (not summed)."""

    name: str
    rows: int
    seconds: float = 0.0
    cpu_s: float = 0.0
    rss_start_mb: float | None = None
    peak_mb: float | None = None
    within: bool = False


class Meter:
    """Times the calls of one task process and the peak RSS of each, and keeps the process's
    own peak across the resets (a reset of ``VmHWM`` also lowers what ``ru_maxrss`` would
    report at exit)."""

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self.process_peak_mb = 0.0
        self.resettable = self._reset()

    def _reset(self) -> bool:
        self.process_peak_mb = max(self.process_peak_mb, _status_mb("VmHWM") or maxrss_mb())
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            return False
        return True

    def peak(self) -> float:
        return max(self.process_peak_mb, _status_mb("VmHWM") or maxrss_mb())

    @contextlib.contextmanager
    def part(self, name: str, rows: int) -> Iterator[Part]:
        p = Part(name, int(rows))
        self.resettable = self._reset() and self.resettable
        p.rss_start_mb = _status_mb("VmRSS")
        cpu = _cpu_s()
        start = time.perf_counter()
        yield p
        p.seconds = time.perf_counter() - start
        p.cpu_s = _cpu_s() - cpu
        p.peak_mb = _status_mb("VmHWM") or maxrss_mb()
        self.parts.append(p)

    def note(self, name: str, rows: int, seconds: float) -> None:
        """A figure measured inside the previous part (e.g. its online seconds)."""
        self.parts.append(Part(name, int(rows), float(seconds), within=True))


# --------------------------------------------------------------------------------------------
