"""The cycle's steady state against its first interval, through Airflow DAG runs.

Run: ``.venv/bin/python -m bench.steady`` (about 22 minutes on 2 cores; ``--quick`` for a
smoke run of about 8 minutes: 300 rows, 60-minute intervals). Redis at ``127.0.0.1:6379``,
database 7 (``--redis``), under a namespace of its own (``bsteady<pid>``), reset before and
deleted after; everything else in a temporary directory.

Why: ``make bench-scale`` measures the first interval of an empty deployment. A deployment
that has run longer than its longest window holds a full window of codes, ledgers, request
logs and neighbour tables, and every stage that reads a window reads all of it. This bench
runs the cycle's own DAGs (``dag.test()``, every task in this process, as ``make demo`` and
``solaris cycle`` do) over the synthetic example's traffic, interval after interval, from an
empty namespace until it has run ``--days`` after a warm-up day (default 2.2: past the
longest window the cycle reads, ``store.unn_ttl_hours`` = 48 h with the per-interval
neighbour index), at a constant ``--rows`` candidate rows per interval (default 10,000),
with the production windows (15-minute
cadence, 6 h TTL, 24 h user aggregates, 48 h neighbour window). So every interval's inputs
are what the cycle wrote before it, and the last intervals are the steady state.

Per interval and stage it records the task work the run records report (``seconds``: the
stage's calls, without Airflow's per-task overhead; ``codes_read``: the codes the stage read),
the DAG run's wall seconds, the bytes this process read through ``read()`` (``rchar`` of
``/proc/self/io``: the parquet and Arrow files of the cycle's state; memory-mapped reads are
not in it) and the CPU seconds of the process, and each DAG run's peak resident set (``VmHWM``
reset before each run). It prints, per stage, the first interval, the steady state (median
of the last ``--steady`` intervals) and their ratio, and writes everything as JSON
(``--json``, default ``bench/results/steady.json``) and the summary as a Markdown table into
the block between ``docs/scaling.md``'s two ``bench.steady`` markers (``--docs``): the docs'
figures come from the run, never copied by hand.

With the carried windows on (``cycle.incremental_windows``, the default), the steady
intervals' aggregates are also recomputed from the window's codes right after each run
(:func:`~solaris.orchestration.enrichment.aggregate_partitions` with the setting off: the
same bytes written again), so the two are measured side by side in one run.

With ``--object-store``, the cycle's state (``cycle.state_uri``) lives in a bucket of a local
S3 endpoint (moto's server, :mod:`bench.object_store`) that counts every request and every
byte it serves: each interval also records the object-store requests (by method) and bytes
of its three DAG runs, into ``bench/results/steady_s3.json`` and the ``bench.steady.s3`` block.

What it does not measure: several
processes (every task runs in this one, so the peak RSS is this process's, imports included),
and sizes past what one process replays in minutes. The ratio is the point: the cycle's
per-interval cost at the same rows, after and before its windows fill.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest.mock import patch

from bench import results

REPO = Path(__file__).resolve().parents[1]
DAY = 86_400
START = 1_699_920_000  # 2023-11-14T00:00:00Z, the synthetic example's default start
STAGES = ("selection", "embedding", "aggregates", "neighbour fill")


@dataclass
class IntervalFigures:
    """One interval's figures, per stage (see the module docstring)."""

    end: int
    candidates: int
    wall_s: dict[str, float] = field(default_factory=dict)  # DAG run wall, per DAG
    task_s: dict[str, float] = field(default_factory=dict)  # run records' seconds, per stage
    codes_read: dict[str, int] = field(default_factory=dict)
    read_bytes: int = 0
    cpu_s: float = 0.0
    peak_rss_mb: float = 0.0
    # The same interval's aggregates recomputed from the window's codes, after the run (the
    # steady intervals only): the carried windows against the path without them, side by side.
    recomputed: dict[str, float] = field(default_factory=dict)
    # With --object-store: the requests (by method) and bytes the store served the DAG runs.
    store_requests: dict[str, int] = field(default_factory=dict)
    store_bytes: int = 0
    store_by_folder: dict[str, int] = field(default_factory=dict)  # "METHOD folder": count


def _proc_io() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # resets VmHWM to the current RSS
        f.write("5")


def _peak_mb() -> float:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def _settings(work: Path, args: argparse.Namespace, bucket: str | None) -> dict[str, Any]:
    """The bench's settings: the synthetic example's adapters, the production windows, the
    state in ``bucket`` when given."""
    repo = work / "feature_repo"
    shutil.copytree(REPO / "feature_repo", repo, ignore=shutil.ignore_patterns("data"))
    state = {"state_uri": f"s3://{bucket}/state"} if bucket else {}
    return {
        "namespace": f"bsteady{os.getpid()}",
        "replay": True,
        "artifacts_dir": str(work / "artifacts"),
        "model": {
            "foundation": "solaris.examples.synthetic:foundation_model",
            "trainer": None,
            "z_dim": 8,
        },
        "requests": {"source": "solaris.examples.synthetic:traffic"},
        "selection": {"share": 0.2, "ttl_hours": 6, "cadence_minutes": args.cadence_minutes},
        "store": {"redis": args.redis, "repo_path": str(repo)},
        "cycle": {
            "partitions": args.partitions,
            "dags_folder": str(REPO / "dags"),
            "airflow_home": str(work / "airflow"),
            "demo_days": args.days,
            "demo_cadence_minutes": args.cadence_minutes,
            **state,
        },
    }


def _world(rows: int, days: float, cadence_minutes: float, seed: int):
    """A synthetic world of ``rows`` candidate rows per interval over the warm-up day and
    ``days`` (25 candidates a request; users and items in proportion to the rows)."""
    from solaris.data.synthetic import SyntheticSpec
    from solaris.examples.synthetic import SyntheticWorld

    per_request = 25
    intervals = (1 + days) * DAY / (cadence_minutes * 60)
    spec = SyntheticSpec(
        n_pairs=int(rows * intervals),
        n_users=max(200, rows // 4),
        n_items=max(300, rows // 2),
        candidates_per_request=per_request,
        recurrence=0.7,
        label_rate=0.05,
        start_ts=START,
        mean_gap_seconds=cadence_minutes * 60 * per_request / rows,
        seed=seed,
    )
    return SyntheticWorld(spec=spec, seed=seed, epochs=2, batch_size=1024)


def _stage_figures(layout, interval_end: int, key: str) -> tuple[dict, dict]:
    """Task seconds and codes read per stage, from the interval's run records."""
    from solaris.orchestration.candidates import DAG_ID as CANDIDATES_DAG
    from solaris.orchestration.embeddings import DAG_ID as EMBEDDINGS_DAG
    from solaris.orchestration.enrichment import ENRICHMENT_DAG_ID

    def record(dag_id: str, name: str) -> dict[str, Any]:
        path = layout.run_record(dag_id, name)
        return json.loads(path.read_text()) if path.is_file() else {}

    selection = record(CANDIDATES_DAG, key)
    embedding = record(EMBEDDINGS_DAG, key)
    uagg = record(ENRICHMENT_DAG_ID, f"{interval_end:011d}-uagg")
    nbr = record(ENRICHMENT_DAG_ID, f"{interval_end:011d}-nbr")
    seconds = {
        "selection": float(selection.get("seconds", 0.0)),
        "embedding": float(embedding.get("seconds", 0.0)),
        "aggregates": float(uagg.get("seconds", 0.0)),
        "neighbour fill": float(nbr.get("seconds", 0.0)),
    }
    codes = {
        "aggregates": int(uagg.get("codes_read", 0)),
        "neighbour fill": int(nbr.get("codes_read", 0)),
    }
    return seconds, codes


def replay(
    args: argparse.Namespace, work: Path, echo=print, store: Any = None
) -> tuple[IntervalFigures, list[IntervalFigures]]:
    """The cycle over the synthetic traffic, one interval at a time, measured; then its
    first interval again on the emptied namespace (the baseline: a warm process). ``store``:
    a :class:`bench.object_store.CountingStore` holding the state, counted per interval."""
    import yaml

    from solaris.config import SolarisConfig
    from solaris.examples.synthetic import prepare
    from solaris.local.airflow import LocalAirflow, configure_airflow
    from solaris.local.cycle import export_config, run_window, window_intervals
    from solaris.model_versions import pin_version
    from solaris.namespace import Namespace
    from solaris.orchestration.layout import CycleLayout
    from solaris.orchestration.resources import reset_namespace
    from solaris.pipeline.codes import fit_autoencoder_from_traffic

    path = work / "solaris.yaml"
    path.write_text(yaml.safe_dump(_settings(work, args, store.bucket if store else None)))
    cfg = SolarisConfig.load(path)
    began = time.perf_counter()
    prepare(cfg, _world(args.rows, args.days, args.cadence_minutes, args.seed))
    _, _, version = fit_autoencoder_from_traffic(cfg, START, START + DAY)
    pin_version(Namespace.of(cfg).models_root, cfg.namespace, version, live=None)
    echo(f"set-up (traffic, FM, autoencoder): {time.perf_counter() - began:.1f} s")
    config_path = export_config(cfg, Path(cfg.artifacts_dir) / "airflow" / "solaris.yaml")
    env = {
        "SOLARIS_CONFIG": str(config_path),
        "SOLARIS_ARTIFACTS_DIR": str(cfg.artifacts_dir),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "ERROR",
    }
    figures: list[IntervalFigures] = []
    with patch.dict(os.environ, env):  # the task runs read their settings from it
        reset_namespace(cfg, cfg.store.redis, force=True)
        configure_airflow(Path(cfg.cycle.airflow_home), Path(cfg.cycle.dags_folder))
        airflow = LocalAirflow(Path(cfg.cycle.dags_folder), gpu_pool=cfg.cycle.gpu_pool)
        layout = CycleLayout(Namespace.of(cfg))
        cadence = cfg.cycle.demo_cadence_seconds
        intervals = window_intervals(START, START + DAY + cfg.cycle.demo_seconds, cadence)
        echo(f"{len(intervals)} intervals of {args.cadence_minutes:g} min, {args.rows:,} rows each")

        def measure(interval) -> IntervalFigures:
            io0, cpu0 = _proc_io(), _cpu_s()
            _reset_peak()
            if store is not None:
                store.reset()
            report = run_window(airflow, [interval], cfg, train_at_end=False, progress=False)
            requests, served = store.counts() if store is not None else ({}, 0)
            by_folder = store.by_folder() if store is not None else {}
            seconds, codes = _stage_figures(layout, interval.end, interval.key)
            [candidates] = report.candidates
            return IntervalFigures(
                store_requests=requests,
                store_bytes=served,
                store_by_folder=by_folder,
                end=interval.end,
                candidates=int(candidates.get("candidates", 0)),
                wall_s={d: round(sum(s), 3) for d, s in report.seconds.items()},
                task_s=seconds,
                codes_read=codes,
                read_bytes=_proc_io() - io0,
                cpu_s=round(_cpu_s() - cpu0, 3),
                peak_rss_mb=round(_peak_mb(), 1),
            )

        recompute = SolarisConfig.load(config_path)
        recompute = recompute.model_copy(
            update={"cycle": recompute.cycle.model_copy(update={"incremental_windows": False})}
        )

        def recomputed(end: int) -> dict[str, float]:
            """The interval's aggregates again, recomputed from the window's codes (they
            write the bytes the carried windows wrote: nothing the next interval reads
            changes)."""
            from solaris.orchestration.enrichment import aggregate_partitions

            began = time.perf_counter()
            done = aggregate_partitions(recompute, end, range(recompute.cycle.partitions))
            return {"task_s": time.perf_counter() - began, "codes_read": done["codes_read"]}

        for k, interval in enumerate(intervals):
            figures.append(measure(interval))
            if k >= len(intervals) - args.steady and cfg.cycle.incremental_windows:
                figures[-1].recomputed = recomputed(interval.end)
            if k % 24 == 0 or k == len(intervals) - 1:
                last = figures[-1]
                echo(
                    f"  interval {k + 1:>3}/{len(intervals)} "
                    f"({datetime.fromtimestamp(interval.end, UTC):%m-%d %H:%M}): "
                    f"{sum(last.wall_s.values()):.1f} s wall, aggregates read "
                    f"{last.codes_read['aggregates']:,} codes, {last.read_bytes / 1e6:.1f} MB"
                )
        # The first interval again, on an empty namespace but in a warm process: the one
        # above also paid this process's imports and first connections.
        reset_namespace(cfg, cfg.store.redis, force=True)
        first = measure(intervals[0])
        echo(f"  the first interval again, warm: {sum(first.wall_s.values()):.1f} s wall")
        reset_namespace(cfg, cfg.store.redis, force=True)
    return first, figures


def summarize(
    first: IntervalFigures, figures: Sequence[IntervalFigures], steady: int
) -> dict[str, Any]:
    """Per stage: the first interval, the median of the last ``steady``, and the ratio."""
    last = figures[-steady:]

    def row(get) -> dict[str, float]:
        a, b = float(get(first)), float(statistics.median(get(f) for f in last))
        return {"first": a, "steady": b, "ratio": round(b / a, 2) if a else None}

    out: dict[str, Any] = {"stages": {}}
    for stage in STAGES:
        out["stages"][stage] = {"task_s": row(lambda f, s=stage: f.task_s.get(s, 0.0))}
        if stage in first.codes_read:
            out["stages"][stage]["codes_read"] = row(lambda f, s=stage: f.codes_read[s])
    if all(f.recomputed for f in last):  # the carried windows against recomputing them
        out["recomputed aggregates"] = {
            key: {
                "recomputed": statistics.median(f.recomputed[key] for f in last),
                "carried": statistics.median(
                    f.task_s["aggregates"] if key == "task_s" else f.codes_read["aggregates"]
                    for f in last
                ),
            }
            for key in ("task_s", "codes_read")
        }
        for r in out["recomputed aggregates"].values():
            r["ratio"] = round(r["carried"] / r["recomputed"], 3) if r["recomputed"] else None
    out["interval"] = {
        "wall_s": row(lambda f: sum(f.wall_s.values())),
        "cpu_s": row(lambda f: f.cpu_s),
        "read_mb": row(lambda f: f.read_bytes / 1e6),
        "peak_rss_mb": row(lambda f: f.peak_rss_mb),
        "candidates": row(lambda f: f.candidates),
    }
    if first.store_requests:  # the state on the counted object store
        out["interval"]["store_requests"] = row(lambda f: sum(f.store_requests.values()))
        out["interval"]["store_gets"] = row(lambda f: f.store_requests.get("GET", 0))
        out["interval"]["store_heads"] = row(lambda f: f.store_requests.get("HEAD", 0))
        out["interval"]["store_mb"] = row(lambda f: f.store_bytes / 1e6)
    return out


def markdown(summary: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    """The summary as the Markdown table of ``docs/scaling.md``'s generated block."""
    lines = [
        f"<!-- generated by `python -m bench.steady` on {meta['date']} at {meta['commit']}; "
        "do not edit -->",
        "",
        f"{meta['rows']:,} candidate rows an interval, {meta['intervals']} intervals of "
        f"{meta['cadence_minutes']:g} min ({meta['days']:g} days after a warm-up day), P = "
        f"{meta['partitions']}; steady state = median of the last {meta['steady']} intervals"
        + ("; the state on a counted local S3 endpoint" if meta.get("object_store") else "")
        + (" (`--quick`: a smaller run than the default)." if meta.get("quick") else "."),
        "",
        "| per interval | first interval (empty namespace) | steady state | steady ÷ first |",
        "|---|---|---|---|",
    ]

    def fmt(value: float, unit: str) -> str:
        return f"{value:,.0f}{unit}" if value >= 100 else f"{value:,.2f}{unit}"

    for stage, rows in summary["stages"].items():
        t = rows["task_s"]
        lines.append(
            f"| {stage}: task seconds | {fmt(t['first'], ' s')} | "
            f"{fmt(t['steady'], ' s')} | {t['ratio']}× |"
        )
        if "codes_read" in rows:
            c = rows["codes_read"]
            lines.append(
                f"| {stage}: codes read | {c['first']:,.0f} | {c['steady']:,.0f} | {c['ratio']}× |"
            )
    names = {
        "wall_s": ("interval: DAG runs' wall", " s"),
        "cpu_s": ("interval: CPU seconds", " s"),
        "read_mb": ("interval: bytes read (rchar)", " MB"),
        "peak_rss_mb": ("interval: peak RSS of the process", " MB"),
        "candidates": ("interval: candidate rows served", ""),
        "store_requests": ("interval: object-store requests", ""),
        "store_gets": ("interval: object-store GETs", ""),
        "store_heads": ("interval: object-store HEADs", ""),
        "store_mb": ("interval: bytes the object store served", " MB"),
    }
    for key, (name, unit) in names.items():
        if key not in summary["interval"]:
            continue
        r = summary["interval"][key]
        lines.append(
            f"| {name} | {fmt(r['first'], unit)} | {fmt(r['steady'], unit)} | {r['ratio']}× |"
        )
    if "recomputed aggregates" in summary:
        r = summary["recomputed aggregates"]
        t, c = r["task_s"], r["codes_read"]
        lines += [
            "",
            "The steady intervals' aggregates again, recomputed from the window's codes "
            "(`cycle.incremental_windows` off) right after each run, side by side:",
            "",
            "| aggregates, steady state | carried windows | recomputed | carried ÷ recomputed |",
            "|---|---|---|---|",
            f"| task seconds | {fmt(t['carried'], ' s')} | {fmt(t['recomputed'], ' s')} | "
            f"{t['ratio']}× |",
            f"| codes read | {c['carried']:,.0f} | {c['recomputed']:,.0f} | {c['ratio']}× |",
        ]
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- bench.steady: begin -->", "<!-- bench.steady: end -->"


def write_block(page: Path, table: str, block: str = "bench.steady") -> None:
    """Replace what lies between the page's two ``block`` markers with ``table``."""
    results.write_block(page, table, block)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.steady", description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000, help="candidate rows an interval")
    parser.add_argument("--days", type=float, default=2.2, help="days replayed after warm-up")
    parser.add_argument("--cadence-minutes", type=float, default=15.0)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--steady", type=int, default=8, help="intervals of the steady state")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--redis", default="127.0.0.1:6379,db=7")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 300 rows, 60-minute intervals"
    )
    parser.add_argument(
        "--object-store",
        action="store_true",
        help="the cycle's state in a counted local S3 bucket (requests and bytes per interval)",
    )
    parser.add_argument("--json", type=Path, default=None, help="default bench/results/steady.json")
    parser.add_argument(
        "--docs",
        type=Path,
        default=REPO / "docs" / "scaling.md",
        help="the page whose generated block (between its steady-state markers) is rewritten",
    )
    parser.add_argument(
        "--render",
        type=Path,
        default=None,
        help="write the docs block of an earlier run's JSON (a smoke run's included), run nothing",
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        data = json.loads(args.render.read_text())
        table = markdown(data["summary"], data["meta"])
        block = "bench.steady.s3" if data["meta"].get("object_store") else "bench.steady"
        write_block(args.docs, table, block)
        print(table)
        return 0
    if args.quick:
        args.rows, args.cadence_minutes = 300, 60.0
    folder = REPO / "bench" / "results"
    args.json = args.json or folder / ("steady_s3.json" if args.object_store else "steady.json")
    store = None
    if args.object_store:
        from bench import object_store

        store = object_store.start("bsteady")
    with tempfile.TemporaryDirectory(prefix="bench_steady_") as tmp:
        first, figures = replay(args, Path(tmp), store=store)
    if store is not None:
        store.stop()
    summary = summarize(first, figures, args.steady)
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": results.commit(),
        "rows": args.rows,
        "days": args.days,
        "cadence_minutes": args.cadence_minutes,
        "partitions": args.partitions,
        "steady": args.steady,
        "intervals": len(figures),
        "quick": args.quick,
        "object_store": args.object_store,
    }
    table = markdown(summary, meta)
    print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "meta": meta,
                "summary": summary,
                "first_warm": asdict(first),
                "intervals": [asdict(f) for f in figures],
            },
            indent=1,
        )
    )
    if not args.quick:
        write_block(args.docs, table, "bench.steady.s3" if args.object_store else "bench.steady")
    print(f"wrote {args.json}" + ("" if args.quick else f" and the table in {args.docs}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
