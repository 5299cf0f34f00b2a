"""Section 5: where the time of a fetch goes (cProfile)."""

from __future__ import annotations

import cProfile
import pstats
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.feature_store.context import say
from bench.feature_store.fetch import Fetch

if TYPE_CHECKING:
    pass


# --------------------------------------------------------------------------------------------
# 5. Where the time goes
# --------------------------------------------------------------------------------------------


def _func_name(key: tuple[str, int, str]) -> str:
    filename, line, func = key
    if filename == "~":
        return func
    parts = Path(filename).parts
    return f"{'/'.join(parts[-2:])}:{line}({func})"


def bench_profile(fetch: Fetch, calls: int, top: int = 15) -> dict:
    fetch()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(calls):
        fetch()
    prof.disable()
    total_ms = (time.perf_counter() - t0) / calls * 1e3
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    entries = sorted(stats.items(), key=lambda kv: -kv[1][2])
    rows = [
        {
            "tottime_ms": v[2] / calls * 1e3,
            "cumtime_ms": v[3] / calls * 1e3,
            "calls": v[1] / calls,
            "function": _func_name(k),
        }
        for k, v in entries
        if not k[2].startswith("<method 'disable'")
    ][:top]
    say(
        f"\n5. Where the time goes: cProfile of {calls} client fetches, {total_ms:.3f} ms per "
        f"call under the profiler; top {top} by own time (per call)"
    )
    say(f"   {'own ms':>8} {'cum ms':>8} {'calls':>7}  function")
    for r in rows:
        say(f"   {r['tottime_ms']:8.4f} {r['cumtime_ms']:8.4f} {r['calls']:7.1f}  {r['function']}")
    return {"calls": calls, "ms_per_call_profiled": total_ms, "top": rows}
