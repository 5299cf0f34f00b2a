"""The bench's report: the tables of seconds, wall, memory, workload, the embedding ratio,
the pool, and the targets' verdicts."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from bench.scale.common import B_BOUND, RSS_BOUND_MB, STAGES, TITLES, fit_exponent, say
from bench.scale.jobs import StageRun

__all__ = [
    "memory_table",
    "pool_table",
    "ratio_table",
    "targets",
    "time_table",
    "wall_table",
    "workload_table",
]


def _fmt_s(seconds: float) -> str:
    return f"{seconds:9.2f}" if seconds < 1000 else f"{seconds:9.0f}"


def _fmt_b(b: float) -> str:
    return "    -" if not math.isfinite(b) else f"{b:5.2f}"


def _fmt_rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds:12,.0f}" if seconds > 0 else f"{'-':>12}"


def _exponents(sizes: Sequence[int], values: Sequence[float | None]) -> tuple[float, float]:
    """b over every size with a value, and over the last two."""
    pairs = [(n, v) for n, v in zip(sizes, values, strict=True) if v is not None]
    every = fit_exponent([n for n, _ in pairs], [v for _, v in pairs])
    last = fit_exponent([n for n, _ in pairs[-2:]], [v for _, v in pairs[-2:]])
    return every, last


def time_table(
    sizes: Sequence[int], runs: dict[tuple[str, int], StageRun], cpu: bool = False
) -> list[dict]:
    """Seconds (or CPU seconds) and rows per second of it, per stage and call, per N, with
    b; printed and returned."""
    label_w = 54
    unit = "cpu s" if cpu else "s"
    head = "".join(f"{'N=' + format(n, ','):>22}" for n in sizes)
    say(f"   {'stage / call (summed over its tasks)':<{label_w}}{head}      b  b(last 2)")
    say(
        f"   {'':<{label_w}}" + f"{unit:>9} {'rows/' + unit:>12}" * len(sizes) + f"  ({unit} ~ N^b)"
    )
    out = []
    for stage in STAGES:
        present = [n for n in sizes if (stage, n) in runs]
        if not present:
            continue
        names: list[str] = []
        for n in present:
            found = runs[(stage, n)].parts(cpu)
            names += [k for k, (_, within) in found.items() if k not in names]
            if cpu:  # a figure within a call has no CPU time of its own
                names = [k for k in names if not found.get(k, (0.0, False))[1]]
        for label in [None, *names]:
            cells, secs = [], []
            within = False
            for n in sizes:
                run = runs.get((stage, n))
                if run is None or (label is not None and label not in run.parts(cpu)):
                    cells.append(f"{'':>22}")
                    secs.append(None)
                    continue
                if label is None:
                    s = run.cpu_s if cpu else run.seconds
                else:
                    s, within = run.parts(cpu)[label]
                cells.append(f"{_fmt_s(s)} {_fmt_rate(n, s)}")
                secs.append(s)
            b, b2 = _exponents(sizes, secs)
            name = TITLES[stage] if label is None else ("      " if within else "   ") + label
            say(f"   {name[:label_w]:<{label_w}}{''.join(cells)}  {_fmt_b(b)}  {_fmt_b(b2)}")
            out.append({"stage": stage, "call": label, unit: secs, "b": b, "b_last2": b2})
    return out


def wall_table(sizes: Sequence[int], runs: dict[tuple[str, int], StageRun]) -> list[dict]:
    head = "".join(f"{'N=' + format(n, ','):>24}" for n in sizes)
    say(f"   {'stage':<10}{head}      b  b(last 2)")
    say(
        f"   {'':<10}"
        + f"{'wall s':>10}{'procs':>6}{'load':>8}" * len(sizes)
        + "  (wall ~ N^b; load: mean 1-min load average, the bench's own task included)"
    )
    out = []
    totals: list[float | None] = [0.0 for _ in sizes]
    for stage in STAGES:
        cells, walls = [], []
        for k, n in enumerate(sizes):
            run = runs.get((stage, n))
            if run is None:
                cells.append(f"{'':>24}")
                walls.append(None)
                totals[k] = None
                continue
            cells.append(f"{_fmt_s(run.wall_s):>10}{len(run.tasks):>6}{run.load:>8.1f}")
            walls.append(run.wall_s)
            if totals[k] is not None:
                totals[k] += run.wall_s
        b, b2 = _exponents(sizes, walls)
        say(f"   {stage:<10}{''.join(cells)}  {_fmt_b(b)}  {_fmt_b(b2)}")
        out.append(
            {
                "stage": stage,
                "wall_s": walls,
                "load": [runs[(stage, n)].load if (stage, n) in runs else None for n in sizes],
                "b": b,
                "b_last2": b2,
            }
        )
    b, b2 = _exponents(sizes, totals)
    cells = [f"{_fmt_s(t):>10}{'':>14}" if t is not None else f"{'':>24}" for t in totals]
    say(f"   {'interval':<10}{''.join(cells)}  {_fmt_b(b)}  {_fmt_b(b2)}")
    return out


def memory_table(
    sizes: Sequence[int], runs: dict[tuple[str, int], StageRun], others: dict[int, dict]
) -> list[dict]:
    head = "".join(f"{'N=' + format(n, ','):>14}" for n in sizes)
    say(f"   {'process (peak RSS, MB)':<28}{head}   b(peak)")
    out = []
    rows: list[tuple[str, list[float | None]]] = []
    for name in ("generator", "history", "serving"):
        rows.append((name, [others.get(n, {}).get(name) for n in sizes]))
    for stage in STAGES:
        rows.append(
            (
                f"{stage} (max of its tasks)",
                [runs[(stage, n)].peak_mb if (stage, n) in runs else None for n in sizes],
            )
        )
    rows.append(("embedding ratio", [others.get(n, {}).get("ratio") for n in sizes]))
    for name, peaks in rows:
        cells = "".join(f"{p:14,.0f}" if p is not None else f"{'':>14}" for p in peaks)
        b, _ = _exponents(sizes, peaks)
        say(f"   {name:<28}{cells}   {_fmt_b(b)}")
        out.append({"process": name, "peak_mb": peaks, "b": b})
    say("   per task (MB), step by step:")
    for n in sizes:
        for stage in STAGES:
            run = runs.get((stage, n))
            if run is not None:
                say(f"      N={n:<12,} {stage:<7} {run.peaks()}")
    return out


def workload_table(sizes: Sequence[int], data: dict[int, dict], runs: dict) -> None:
    def extra(stage: str, n: int, key: str) -> str:
        run = runs.get((stage, n))
        value = run.extra(key) if run else None
        return f"{value:>22,}" if isinstance(value, int) else f"{'-':>22}"

    head = "".join(f"{'N=' + format(n, ','):>22}" for n in sizes)
    say(f"   {'':<46}{head}")
    rows = [
        ("partitions (cycle.partitions)", lambda n: f"{data[n]['partitions']:>22,}"),
        (
            "candidate rows per partition (min-max)",
            lambda n: _cell(min(data[n]["partition_rows"]), max(data[n]["partition_rows"]), "-"),
        ),
        ("requests", lambda n: f"{data[n]['requests']:>22,}"),
        ("distinct users / items", lambda n: _cell(data[n]["users"], data[n]["items"])),
        ("ledger-cache rows (earlier intervals)", lambda n: f"{data[n]['cache_rows']:>22,}"),
        ("selected rows (the budget)", lambda n: extra("select", n, "selected")),
        ("distinct pairs embedded and written", lambda n: extra("embed", n, "pairs")),
        ("shards (embedding tasks)", lambda n: _shards(runs, n)),
        ("uagg rows", lambda n: extra("enrich", n, "uagg_rows")),
        ("iagg rows", lambda n: extra("enrich", n, "iagg_rows")),
        ("users in the KNN index (unn rows)", lambda n: extra("enrich", n, "unn_rows")),
        ("nbr targets / rows", lambda n: _nbr(runs, n)),
        (
            "neighbour codes behind the nbr rows (n_nbrs)",
            lambda n: extra("enrich", n, "nbr_matches"),
        ),
    ]
    for label, cell in rows:
        say(f"   {label:<46}{''.join(cell(n) for n in sizes)}")


def _cell(a: int, b: int, sep: str = "/") -> str:
    return f"{f'{a:,}{sep}{b:,}':>22}"


def _shards(runs: dict, n: int) -> str:
    run = runs.get(("embed", n))
    if run is None:
        return f"{'-':>22}"
    return _cell(run.extra("shard_count"), len(run.steps[1][1]))


def _nbr(runs: dict, n: int) -> str:
    run = runs.get(("enrich", n))
    if run is None or run.extra("nbr_rows") is None:
        return f"{'-':>22}"
    return _cell(run.extra("nbr_targets"), run.extra("nbr_rows"))


def ratio_table(ratios: dict[int, dict], reps: int) -> list[dict]:
    say(
        f"   {'N':>12} {'pairs':>10} {'cycle rows/s':>14} {'bare FM rows/s':>15} "
        f"{'cycle/bare':>11} {'forward-only rows/s':>20} {'cycle/fwd':>10}"
    )
    out = []
    for n, extra in ratios.items():
        pairs = extra["pairs"]
        rate = {k: pairs / v for k, v in extra["ratio"].items()}
        cyc, bare, fwd = rate["cycle embed_pairs"], rate["bare FM pass"], rate["forward only"]
        verdict = "ok" if cyc / bare >= 0.7 else "BELOW 0.7"
        say(
            f"   {n:>12,} {pairs:>10,} {cyc:>14,.0f} {bare:>15,.0f} "
            f"{cyc / bare:>7.2f} {verdict:<3} {fwd:>20,.0f} {cyc / fwd:>10.3f}"
        )
        out.append({"size": n, "pairs": pairs, "rows_per_s": rate, "cycle_over_bare": cyc / bare})
    say(
        f"   the first shard's pairs; medians of {reps} interleaved runs per variant (shuffled, "
        "after a warm-up); target cycle/bare >= 0.7"
    )
    return out


def pool_table(
    size: int, one: dict[str, StageRun], two: dict[str, StageRun], threads: tuple[int, int]
) -> dict[str, Any]:
    say(
        f"   N={size:,}; every stage's task processes run with a pool of 1, then of 2 at once "
        f"({threads[0]} and {threads[1]} OpenMP threads per task)"
    )
    say(f"   {'stage':<12}{'1 worker s':>12}{'2 workers s':>13}{'1/2':>8}{'load 1 / 2':>14}")
    for stage in STAGES:
        a, b = one[stage].wall_s, two[stage].wall_s
        loads = f"{one[stage].load:.1f} / {two[stage].load:.1f}"
        say(f"   {stage:<12}{a:>12.1f}{b:>13.1f}{a / b:>8.2f}{loads:>14}")
    wall1 = sum(r.wall_s for r in one.values())
    wall2 = sum(r.wall_s for r in two.values())
    ratio = wall1 / wall2
    verdict = "met" if ratio >= 1.7 else "NOT met"
    say(f"   {'interval':<12}{wall1:>12.1f}{wall2:>13.1f}{ratio:>8.2f}  (target >= 1.7: {verdict})")
    peak2 = max(r.peak_mb for r in two.values())
    say(f"   peak RSS of a task process with 2 at once: {peak2:,.0f} MB")
    say(
        "   load: the machine's mean 1-minute load average during the run (1 or 2 of it are "
        f"the bench's own tasks; {os.cpu_count()} cores): other work on the machine slows "
        "either run"
    )
    return {
        "size": size,
        "one_worker_s": wall1,
        "two_workers_s": wall2,
        "ratio": ratio,
        "load": {s: [one[s].load, two[s].load] for s in STAGES},
    }


def targets(
    sizes: Sequence[int],
    runs: dict[tuple[str, int], StageRun],
    others: dict[int, dict],
    parent_mb: float,
) -> dict[str, Any]:
    largest = sizes[-1]
    peaks = [others[largest].get(k) for k in ("generator", "history", "serving", "ratio")]
    peaks += [runs[(s, largest)].peak_mb for s in STAGES if (s, largest) in runs]
    worst = max([p for p in peaks if p is not None] + [parent_mb])
    verdict = "met" if worst <= RSS_BOUND_MB else "NOT met"
    say(
        f"   every process at N={largest:,} <= {RSS_BOUND_MB:,.0f} MB: largest {worst:,.0f} MB "
        f"(parent {parent_mb:,.0f} MB) — {verdict}"
    )
    out: dict[str, Any] = {"largest_process_mb": worst, "rss_met": worst <= RSS_BOUND_MB}
    top = [n for n in sizes if n >= 1_000_000]
    if len(top) >= 2:
        for stage in STAGES:
            secs = [runs[(stage, n)].seconds for n in top if (stage, n) in runs]
            cpus = [runs[(stage, n)].cpu_s for n in top if (stage, n) in runs]
            b = fit_exponent(top[: len(secs)], secs)
            b_cpu = fit_exponent(top[: len(cpus)], cpus)
            verdict = "met" if b <= B_BOUND else "NOT met"
            say(
                f"   b of {stage} over N >= 10^6 ({len(secs)} sizes) = {b:.2f} "
                f"<= {B_BOUND} — {verdict} (of its CPU seconds: {b_cpu:.2f})"
            )
            out[f"b_{stage}"] = b
            out[f"b_cpu_{stage}"] = b_cpu
    return out
