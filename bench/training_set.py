"""Training sets: one ``build_training_set`` call against the chunked ``solaris training-set``.

Run: ``.venv/bin/python -m bench.training_set`` (6 CPU minutes; 15 minutes of wall time on a
busy 2-core machine; ``--quick``: 2,000 and 4,000 impressions, about 2 minutes). Everything
lives in a temporary copy of ``feature_repo/`` (file registry, offline parquet) under a Feast
project of its own; no Redis is read.

It writes seeded synthetic offline rows of the four serving views over ``--days`` (3) days,
date-partitioned as :mod:`solaris.pipeline.materialize` lays them out (``--pairs`` pair rows,
a quarter as many neighbour-fill rows, user and item aggregates every 6 hours), and, per size
in ``--sizes`` (10^4 and 3×10^4), impressions drawn like ``bench.offline_join``'s: 90%
existing pairs up to 8 h after their computation (some outside the 6 h TTL), 10% pairs that
never existed. Each variant runs in a fresh process (so its peak RSS is its own), one at a
time:

* ``baseline``: imports, opens the store, reads the impressions; builds nothing;
* ``whole``: one ``build_training_set`` call on all impressions (the library function as
  it is called today, in memory; nothing is written);
* ``chunked``: ``write_training_set`` (what the command runs) with ``--chunk-rows``
  (5,000), writing the day-partitioned parquet.

Per variant: CPU seconds (user + system of the process), wall seconds of the work (after
the imports), peak RSS (``ru_maxrss``), and the same per impression (CPU ms; RSS above the
baseline's, KB). The chunked output is checked against the whole call's rows (features,
masks and tiers, byte for byte) before any figure is reported. Results go to
``--json`` (``bench/results/training_set.json``) and, as a Markdown table, into the block
between ``docs/training_set.md``'s ``bench.training_set`` markers (``--docs``): the docs'
figures come from the run, never copied by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.results import commit
from bench.results import write_block as results_block

REPO = Path(__file__).resolve().parents[1]
DAY = 86_400
H = 3_600
Z_DIM = 8
FM_VERSION = "bench-fm-1"
VARIANTS = ("baseline", "whole", "chunked")


# --------------------------------------------------------------------------------------------
# The world: settings, definitions, offline rows, impressions
# --------------------------------------------------------------------------------------------


def _cfg(repo: Path, project: str):
    from solaris.config import ModelConfig, SolarisConfig, StoreConfig

    return SolarisConfig(
        namespace=project,
        model=ModelConfig(z_dim=Z_DIM),
        store=StoreConfig(repo_path=repo),
    )


def _vectors(rng: np.random.Generator, n: int):
    import pyarrow as pa

    flat = rng.standard_normal(n * Z_DIM).astype(np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat), Z_DIM)


def _write_view(store, cfg, view: str, columns: dict[str, Any], t0: int, days: int) -> int:
    """``columns`` (with ``computed_at`` in epoch seconds) as the view's offline parquet,
    one file per day."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from solaris.store import contract
    from solaris.store.codec import normalize
    from solaris.store.offline import offline_dir

    computed = np.asarray(columns["computed_at"], np.int64)
    table = pa.table(
        {
            **columns,
            "fm_version": pa.array([FM_VERSION] * len(computed), pa.string()),
            contract.EVENT_TS: pa.array(computed * 1_000_000, pa.timestamp("us", tz="UTC")),
        }
    )
    spec = contract.view(view)
    table = normalize(spec, spec.params(cfg), table)
    folder = Path(offline_dir(store, view))
    day = (computed - t0) // DAY
    for k in range(days):
        date = datetime.fromtimestamp(t0 + k * DAY, UTC).strftime("%Y-%m-%d")
        part = folder / f"date={date}"
        part.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.filter(pa.array(day == k)), part / "batch-bench.parquet")
    return table.num_rows


def build_world(root: Path, pairs: int, days: int, seed: int) -> dict[str, Any]:
    """A repo copy with the definitions applied and the offline rows written."""
    from solaris.connection import LOCAL_REDIS
    from solaris.store.feast_store import apply_definitions, open_feature_store

    repo = root / "feature_repo"
    shutil.copytree(
        REPO / "feature_repo", repo, ignore=shutil.ignore_patterns("data", "__pycache__")
    )
    project = f"btrain{os.getpid()}"
    cfg = _cfg(repo, project)
    store = open_feature_store(cfg, LOCAL_REDIS)
    apply_definitions(store, cfg)

    rng = np.random.default_rng(seed)
    t0 = 1_700_000_000 - 1_700_000_000 % DAY
    users, items = 5_000, 2_000
    u = rng.integers(0, users, pairs)
    i = np.minimum(rng.zipf(1.3, pairs), items).astype(np.int64)
    c = np.sort(rng.integers(t0, t0 + days * DAY, pairs))
    rows = {"pair": _write_view(store, cfg, "pair", {
        "user_id": u, "item_id": i, "z": _vectors(rng, pairs), "computed_at": c,
    }, t0, days)}  # fmt: skip
    m = pairs // 4
    rows["nbr"] = _write_view(store, cfg, "nbr", {
        "user_id": rng.integers(0, users, m),
        "item_id": rng.integers(1, items, m),
        "z_top1": _vectors(rng, m),
        "z_mean": _vectors(rng, m),
        "src_user": rng.integers(0, users, m),
        "similarity": rng.random(m).astype(np.float32),
        "n_nbrs": np.full(m, 3),
        "computed_at": np.sort(rng.integers(t0, t0 + days * DAY, m)),
    }, t0, days)  # fmt: skip
    stamps = np.arange(t0 + 6 * H, t0 + days * DAY, 6 * H)
    uu, ut = np.repeat(np.arange(users), len(stamps)), np.tile(stamps, users)
    rows["uagg"] = _write_view(store, cfg, "uagg", {
        "user_id": uu,
        "z_sum": _vectors(rng, len(uu)),
        "count": rng.integers(1, 20, len(uu)),
        "window_start": ut - DAY,
        "computed_at": ut,
    }, t0, days)  # fmt: skip
    ii, it = np.repeat(np.arange(1, items + 1), len(stamps)), np.tile(stamps, items)
    rows["iagg"] = _write_view(store, cfg, "iagg", {
        "item_id": ii,
        "z_mean": _vectors(rng, len(ii)),
        "count": rng.integers(1, 50, len(ii)),
        "computed_at": it,
    }, t0, days)  # fmt: skip
    world = {
        "repo": str(repo),
        "project": project,
        "pairs": (u, i, c),
        "t0": t0,
        "offline_rows": rows,
        "users": users,
        "items": items,
    }
    return world


def write_impressions(world: Mapping[str, Any], n: int, path: Path, seed: int) -> None:
    """90% existing pairs at ``computed_at + U(0, 8 h)``, 10% pairs that never existed."""
    import pandas as pd

    rng = np.random.default_rng(seed + n)
    u, i, c = world["pairs"]
    hit = rng.choice(len(u), size=int(n * 0.9), replace=False)
    n_miss = n - len(hit)
    frame = pd.DataFrame(
        {
            "user_id": np.concatenate(
                [u[hit], rng.integers(world["users"], 2 * world["users"], n_miss)]
            ),
            "item_id": np.concatenate([i[hit], rng.integers(1, world["items"], n_miss)]),
            "ts": np.concatenate(
                [c[hit] + rng.integers(0, 8 * H, len(hit)), rng.integers(c.min(), c.max(), n_miss)]
            ),
            "label": rng.integers(0, 2, n).astype(np.int8),
        }
    )
    frame.sample(frac=1.0, random_state=seed).to_parquet(path, index=False)


# --------------------------------------------------------------------------------------------
# One variant, in a process of its own
# --------------------------------------------------------------------------------------------


def child(args: argparse.Namespace) -> int:
    began_cpu = time.process_time()
    import pandas as pd

    from solaris.connection import LOCAL_REDIS
    from solaris.serving.training_export import write_training_set
    from solaris.serving.training_set import build_training_set
    from solaris.store.feast_store import open_feature_store

    cfg = _cfg(Path(args.repo), args.project)
    imported_cpu = time.process_time() - began_cpu
    start = time.perf_counter()
    store = open_feature_store(cfg, LOCAL_REDIS)
    if args.variant == "chunked":
        written = write_training_set(
            cfg,
            args.impressions,
            args.out,
            fm_version=FM_VERSION,
            chunk_rows=args.chunk_rows,
            store=store,
        )
        files = len(written.files)
    else:
        impressions = pd.read_parquet(args.impressions)
        files = 0
        if args.variant == "whole":
            tiers = build_training_set(impressions, store, cfg, fm_version=FM_VERSION)
            order = np.argsort(impressions["ts"].to_numpy(), kind="stable")
            np.savez(
                args.out,
                features=tiers.features[order],
                mask=tiers.mask[order],
                tier=tiers.tier[order].astype(str),
            )
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "variant": args.variant,
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "import_cpu_s": imported_cpu,
                "wall_s": wall,
                "peak_rss_mb": usage.ru_maxrss / 1024,
                "files": files,
            }
        ),
        flush=True,
    )
    # Skip the interpreter's teardown: a library thread sometimes aborts it ("terminate
    # called without an active exception") after the work and its figures are done.
    os._exit(0)


def _run_child(
    world: Mapping[str, Any], variant: str, impressions: Path, out: Path, chunk_rows: int
) -> dict:
    command = [
        sys.executable, "-m", "bench.training_set", "--child", variant,
        "--repo", world["repo"], "--project", world["project"],
        "--impressions", str(impressions), "--out", str(out), "--chunk-rows", str(chunk_rows),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SOLARIS_CONFIG", None)
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check_same(whole: Path, chunked: Path) -> None:
    from solaris.serving.training_export import read_training_set

    expected = np.load(whole)
    _, tiers = read_training_set(chunked)
    if not (
        tiers.features.tobytes() == expected["features"].tobytes()
        and tiers.mask.tobytes() == expected["mask"].tobytes()
        and tiers.tier.astype(str).tolist() == expected["tier"].tolist()
    ):
        raise SystemExit(f"{chunked} differs from one build_training_set call: nothing reported")


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def summarize(results: Mapping[int, Mapping[str, Mapping[str, float]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n, by_variant in results.items():
        base = by_variant["baseline"]
        rows = {}
        for variant in ("whole", "chunked"):
            r = by_variant[variant]
            rows[variant] = {
                **r,
                "cpu_ms_per_impression": 1e3 * (r["cpu_s"] - base["cpu_s"]) / n,
                "rss_kb_per_impression": 1024 * (r["peak_rss_mb"] - base["peak_rss_mb"]) / n,
            }
        w, c = rows["whole"], rows["chunked"]
        rows["chunked ÷ whole"] = {
            key: round(c[key] / w[key], 3) if w[key] else None
            for key in ("cpu_s", "wall_s", "peak_rss_mb")
        }
        out[str(n)] = {"baseline": base, **rows}
    return out


def markdown(summary: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    rows = meta["offline_rows"]
    lines = [
        f"<!-- generated by `python -m bench.training_set` on {meta['date']} at "
        f"{meta['commit']}; do not edit -->",
        "",
        f"{meta['days']} days of synthetic offline rows (pair {rows['pair']:,}, nbr "
        f"{rows['nbr']:,}, uagg {rows['uagg']:,}, iagg {rows['iagg']:,}); chunked: "
        f"`--chunk-rows {meta['chunk_rows']:,}`; each variant a process of its own on "
        f"{meta['cpus']} CPUs. Per impression: CPU and peak RSS above the baseline process "
        "(imports, store opened, impressions read).",
        "",
        "| impressions | variant | CPU s | wall s | peak RSS | CPU ms / impression "
        "| RSS KB / impression |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, by_variant in summary.items():
        for variant in ("baseline", "whole", "chunked"):
            r = by_variant[variant]
            per = (
                f"{r['cpu_ms_per_impression']:.2f} | {r['rss_kb_per_impression']:.1f}"
                if variant != "baseline"
                else "| "
            )
            lines.append(
                f"| {int(n):,} | {variant} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | "
                f"{r['peak_rss_mb']:,.0f} MB | {per} |"
            )
        ratio = by_variant["chunked ÷ whole"]
        lines.append(
            f"| {int(n):,} | chunked ÷ whole | {ratio['cpu_s']}× | {ratio['wall_s']}× | "
            f"{ratio['peak_rss_mb']}× | | |"
        )
    return "\n".join(lines) + "\n"


def write_block(page: Path, table: str) -> None:
    """Replace what lies between the page's ``bench.training_set`` markers with ``table``."""
    results_block(page, table, "bench.training_set")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.training_set", description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000])
    parser.add_argument("--pairs", type=int, default=50_000, help="offline pair rows")
    parser.add_argument("--days", type=int, default=3, help="days of offline rows")
    parser.add_argument("--chunk-rows", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="2,000 and 4,000 impressions")
    parser.add_argument(
        "--json", type=Path, default=REPO / "bench" / "results" / "training_set.json"
    )
    parser.add_argument("--docs", type=Path, default=REPO / "docs" / "training_set.md")
    # A child process: one variant.
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--repo", help=argparse.SUPPRESS)
    parser.add_argument("--project", help=argparse.SUPPRESS)
    parser.add_argument("--impressions", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.variant = args.child
        return child(args)
    if args.quick:
        args.sizes, args.pairs = [2_000, 4_000], 20_000

    results: dict[int, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_training_set_") as tmp:
        root = Path(tmp)
        world = build_world(root, args.pairs, args.days, args.seed)
        print(f"offline rows: {world['offline_rows']}", flush=True)
        for n in args.sizes:
            impressions = root / f"impressions-{n}.parquet"
            write_impressions(world, n, impressions, args.seed)
            results[n] = {}
            for variant in VARIANTS:
                out = root / (f"whole-{n}.npz" if variant == "whole" else f"out-{n}-{variant}")
                results[n][variant] = _run_child(world, variant, impressions, out, args.chunk_rows)
                print(f"{n:>7,} {variant:<9} {results[n][variant]}", flush=True)
            _check_same(root / f"whole-{n}.npz", root / f"out-{n}-chunked")
        offline_rows = world["offline_rows"]
    summary = summarize(results)
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "sizes": args.sizes,
        "pairs": args.pairs,
        "days": args.days,
        "chunk_rows": args.chunk_rows,
        "offline_rows": offline_rows,
        "quick": args.quick,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    table = markdown(summary, meta)
    print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "summary": summary}, indent=1))
    if not args.quick:
        write_block(args.docs, table)
    print(f"wrote {args.json}" + ("" if args.quick else f" and the table in {args.docs}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
