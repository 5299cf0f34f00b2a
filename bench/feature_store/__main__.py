"""``python -m bench.feature_store``: every section in one run, and the report."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hiredis
import numpy as np
import pyarrow as pa

from bench.feature_store.concurrency import bench_concurrency
from bench.feature_store.context import (
    FM_VERSION,
    FULL,
    QUICK,
    REDIS_DEFAULT,
    Bench,
    bench_context,
    say,
)
from bench.feature_store.fetch import (
    check_values,
    client_and_wire,
    fetch_embedded,
    fetch_variants,
    gc_counter,
    interleaved,
    open_client,
    report_fetch,
    server_line,
    two_registries,
)
from bench.feature_store.memory import bench_memory
from bench.feature_store.profiling import bench_profile
from bench.feature_store.writes import bench_writes
from bench.machine import machine_facts

if TYPE_CHECKING:
    pass


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def environment(b: Bench) -> dict[str, str]:
    import feast
    import redis as redis_pkg

    info = b.redis.info("server")
    return {
        **machine_facts(),
        "feast": feast.__version__,
        "redis-py": redis_pkg.__version__,
        "hiredis": hiredis.__version__,
        "numpy": np.__version__,
        "pyarrow": pa.__version__,
        "redis-server": f"{info['redis_version']} at {b.redis_url}",
        "request": f"1 user x {b.n} candidates, d={b.d}, fm_version {FM_VERSION!r}",
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.feature_store", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--redis", default=REDIS_DEFAULT, help="Feast connection string")
    parser.add_argument("--candidates", type=int, default=300)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    for name, value in FULL.items():
        kind = float if isinstance(value, float) else int
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=kind,
            default=None,
            help=f"default {value:,} ({QUICK[name]:,} with --quick)",
        )
    args = parser.parse_args(argv)
    for name in FULL:
        if getattr(args, name) is None:
            setattr(args, name, (QUICK if args.quick else FULL)[name])
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    report: dict[str, Any] = {"options": {k: str(v) for k, v in vars(args).items()}}
    with bench_context(args.redis, args.candidates, args.dim, args.seed) as b:
        report["environment"] = env = environment(b)
        say("SOLARIS feature-store benchmark" + (" (--quick)" if args.quick else ""))
        for k, v in env.items():
            say(f"   {k}: {v}")

        client = open_client(b.cfg, b.redis_url)
        variants = fetch_variants(b, client)
        check_values(b, variants)
        say(
            "   set-up check: every variant returns the written rows; the raw commands are the "
            "store's (same commands and 8-byte fields; redis-py packs them to the store's bytes)"
        )
        with gc_counter() as collections:
            times = interleaved(variants, args.reps, args.warmup, args.seed)
        server = server_line(b.redis, b.project, b.data)
        main_block = report_fetch(b, times, client.stats.as_dict(), collections, server)
        report["fetch"] = main_block
        report["fetch_wire"] = client_and_wire(b, variants, args.reps, args.warmup, args.seed)
        report["fetch_embedded"] = fetch_embedded(b, args.reps, args.warmup, args.seed, main_block)
        report["fetch_two_registries"] = two_registries(b, client, min(args.reps, 300), args.seed)

        report["concurrency"] = bench_concurrency(
            b,
            args.threads,
            args.concurrency_seconds,
            args.single_seconds,
            variants["stock feast + to_dict"],
        )
        report["writes"] = bench_writes(b, args.write_rows, args.write_reps, args.seed)
        report["memory"] = bench_memory(b, args.memory_users, args.seed)
        report["profile"] = bench_profile(variants["client"], args.profile_calls)
        client.close()
        for note in b.notes:
            say(f"   note: {note}")
        report["notes"] = b.notes
    elapsed = time.perf_counter() - started
    say(f"\ndone in {elapsed:.0f} s")
    report["elapsed_s"] = elapsed
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
        say(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
