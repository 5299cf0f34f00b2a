"""The neighbour fill on object storage: requests and bytes per interval, against P.

Run: ``.venv/bin/python -m bench.fill_object_store`` (about 3 minutes; ``--quick``: P = 2
and 4 on a smaller world, under a minute). Nothing but a local S3 endpoint is used: moto's
server, started here behind a WSGI layer that counts every request (by method) and every
byte of every response body, so the figures are what the object store served, measured from
outside the code under test.

One seeded world per run: ``--users`` users (50,000), ``--codes`` fresh pair codes
(400,000, the fill codes of the TTL, ``z`` of 32 float16) over ``--items`` items (500),
``--targets`` target pairs (20,000) of a tenth of the users, each target user with
``--neighbours`` (20) neighbours drawn at random. For each P in ``--partitions`` (2, 4, 8,
16) the codes are split by the cycle's partitioning and written where the cycle writes them
(``fill_codes/<as_of>/<p>.arrow`` under ``cycle.state_uri``, by ``write_fill_codes``), and
the fill of every partition's targets runs in ``--tasks`` (2) tasks of consecutive
partitions (the grouping follows the rows, so at a fixed interval size the task count does
not follow P), two ways:

* ``per partition, whole files`` (the fill before ranged reads, kept here as the baseline):
  each partition of a task looks its targets up in every partition's file, each read whole
  (with today's whole-file reader, one ``GET`` a file; it used to add an existence check
  and the open's ``HEAD``);
* ``per task, ranged`` (:func:`solaris.orchestration.enrichment.lookup_fill`, as the
  cycle's fill task calls it): the task's targets looked up once, every partition's file
  opened once: its header (checked before the task writes), its key columns, then the codes
  of its matches by ranges (:mod:`solaris.data.fill_codes`).

Both give the same ``nbr`` rows, checked before any figure is reported. Per P and way: the
requests and bytes the store served for the interval (all tasks), requests per partition,
seconds, and the bytes beside three references: every fill code's bytes (the files), the
codes the fill visited (the rows of the targets' users and their neighbours, whose keys a
join must see) and the codes it matched (whose codes it gathers). Results go to ``--json``
(``bench/results/fill_object_store.json``) and, as a Markdown table, between the
``bench.fill_object_store`` markers of ``docs/scaling.md`` (``--docs``).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.results import commit, write_block

REPO = Path(__file__).resolve().parents[1]
Z_DIM = 32
AS_OF = 1_700_000_100
FM_VERSION = "bench-fm-1"
WAYS = ("per partition, whole files", "per task, ranged")


def _world(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    users = rng.choice(np.arange(1, 10 * args.users), args.users, replace=False)
    code_users = rng.choice(users, args.codes)
    code_items = rng.integers(1, args.items + 1, args.codes)
    pairs = pd.DataFrame({"user_id": code_users, "item_id": code_items}).drop_duplicates()
    z16 = rng.standard_normal((len(pairs), Z_DIM)).astype(np.float16)
    target_users = rng.choice(users, args.users // 10, replace=False)
    targets = pd.DataFrame(
        {
            "user_id": rng.choice(target_users, args.targets),
            "item_id": rng.integers(1, args.items + 1, args.targets),
        }
    ).drop_duplicates(ignore_index=True)
    k = args.neighbours
    neighbours = pd.DataFrame(
        {
            "user_id": target_users,
            "neighbors": [_others(rng, users, u, k) for u in target_users],
            "sims": [np.sort(rng.random(k).astype(np.float32))[::-1] for _ in target_users],
        }
    )
    return {
        "pairs": pairs.reset_index(drop=True),
        "z16": z16,
        "targets": targets,
        "nbrs": neighbours,
    }


def _others(rng: np.random.Generator, users: np.ndarray, user: int, k: int) -> np.ndarray:
    """``k`` distinct users other than ``user``, at random."""
    drawn = rng.choice(users, k + 1, replace=False)
    return drawn[drawn != user][:k]


def _config(bucket: str, partitions: int) -> Any:
    from solaris.config import SolarisConfig

    cfg = SolarisConfig.load(None, namespace=f"fillbench{partitions}")
    cycle = cfg.cycle.model_copy(
        update={"partitions": partitions, "state_uri": f"s3://{bucket}/state"}
    )
    model = cfg.model.model_copy(update={"z_dim": Z_DIM})
    return cfg.model_copy(update={"cycle": cycle, "model": model})


def _neighbour_column(neighbours: pd.DataFrame) -> pd.DataFrame:
    """The neighbour lists in the form the fill reads (the ``unn`` table's columns)."""
    from solaris.store.contract import NBR_IDS, NBR_SIMS

    return neighbours.rename(columns={"neighbors": NBR_IDS, "sims": NBR_SIMS})


def _whole_files(cfg: Any, targets: pd.DataFrame, nbrs: pd.DataFrame) -> pd.DataFrame:
    """The fill before ranged reads: this partition's targets against every partition's
    file, each read whole (the lookup as it was)."""
    from solaris.data.fill_codes import read_fill_codes
    from solaris.namespace import Namespace
    from solaris.orchestration.layout import CycleLayout
    from solaris.pipeline.neighbors import CodeIndex, NeighbourFill
    from solaris.store.partitions import Partitioning

    layout = CycleLayout(Namespace.of(cfg))
    fill = NeighbourFill(targets, nbrs, z_dim=Z_DIM)
    near = fill.near_users
    for partition, rows in enumerate(Partitioning(cfg.cycle.partitions).split(near)):
        if len(rows):
            path = layout.fill_codes(AS_OF, partition)
            fill.add_index(CodeIndex(*read_fill_codes(path, z_dim=Z_DIM)), near[rows])
    return fill.rows(as_of=AS_OF, fm_version=FM_VERSION)


def _run(cfg: Any, world: dict[str, Any], tasks: int, way: str) -> tuple[pd.DataFrame, dict]:
    from solaris.namespace import Namespace
    from solaris.orchestration.enrichment import _check_fill_inputs, lookup_fill
    from solaris.orchestration.layout import CycleLayout
    from solaris.store.partitions import Partitioning

    count = cfg.cycle.partitions
    parts = Partitioning(count)
    targets, nbrs = world["targets"], _neighbour_column(world["nbrs"])
    of_target = parts.of(targets["user_id"].to_numpy(np.int64))
    of_list = parts.of(nbrs["user_id"].to_numpy(np.int64))
    layout = CycleLayout(Namespace.of(cfg))
    out = []
    figures = {"codes_visited": 0}
    for group in np.array_split(np.arange(count), min(tasks, count)):
        mine = np.isin(of_target, group)
        lists = nbrs[np.isin(of_list, group)]
        if way == WAYS[0]:
            for partition in group:
                t = targets[of_target == partition]
                out.append(_whole_files(cfg, t, nbrs[of_list == partition]))
        else:
            rows = _check_fill_inputs(cfg, layout, AS_OF, group.tolist(), None)
            got, visited = lookup_fill(cfg, AS_OF, targets[mine], lists, FM_VERSION, rows)
            figures["codes_visited"] += visited
            out.append(got)
    rows = pd.concat(out, ignore_index=True).sort_values(["user_id", "item_id"])
    return rows.reset_index(drop=True), figures


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from bench import object_store
    from solaris.data.fill_codes import write_fill_codes
    from solaris.namespace import Namespace
    from solaris.orchestration.layout import CycleLayout
    from solaris.pipeline.neighbors import CodeIndex
    from solaris.store.partitions import Partitioning

    store = object_store.start("fillbench")
    bucket = store.bucket
    world = _world(args)
    codes = CodeIndex.of(world["pairs"], world["z16"])
    file_bytes_per_row = 16 + 2 * Z_DIM
    results = []
    for count in args.partitions:
        cfg = _config(bucket, count)
        layout = CycleLayout(Namespace.of(cfg))
        parts = Partitioning(count).of(np.asarray(codes.users))
        for p in range(count):
            keep = parts == p
            write_fill_codes(
                layout.fill_codes(AS_OF, p),
                np.asarray(codes.users)[keep],
                np.asarray(codes.items)[keep],
                np.asarray(codes.z16)[keep],
            )
        by_way: dict[str, Any] = {}
        answers = []
        for way in WAYS:
            store.reset()
            began = time.perf_counter()
            rows, figures = _run(cfg, world, args.tasks, way)
            seconds = time.perf_counter() - began
            answers.append(rows)
            methods, served = store.counts()
            by_way[way] = {
                "requests": sum(methods.values()),
                "by_method": methods,
                "bytes": served,
                "seconds": round(seconds, 3),
                **figures,
            }
        first, second = answers
        pd.testing.assert_frame_equal(first, second, check_exact=True)  # the same fill
        matched = int(first["n_nbrs"].sum())
        visited = by_way[WAYS[1]]["codes_visited"]
        entry = {
            "partitions": count,
            "tasks": min(args.tasks, count),
            "nbr_rows": len(first),
            "matches": matched,
            "file_bytes": len(codes) * file_bytes_per_row,
            "visited_bytes": visited * file_bytes_per_row,
            "matched_bytes": matched * file_bytes_per_row,
            "ways": by_way,
        }
        results.append(entry)
        print(_line(entry), flush=True)
    store.stop()
    return {
        "meta": {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit(),
            "machine": platform.machine(),
            "users": args.users,
            "codes": len(codes),
            "items": args.items,
            "targets": len(world["targets"]),
            "neighbours": args.neighbours,
            "z_dim": Z_DIM,
            "quick": args.quick,
        },
        "results": results,
    }


def _line(entry: dict[str, Any]) -> str:
    old, new = (entry["ways"][w] for w in WAYS)
    return (
        f"P={entry['partitions']:>3} tasks={entry['tasks']}: requests {old['requests']:,} -> "
        f"{new['requests']:,}, MB {old['bytes'] / 1e6:,.1f} -> {new['bytes'] / 1e6:,.1f} "
        f"(files {entry['file_bytes'] / 1e6:,.1f} MB), s {old['seconds']} -> {new['seconds']}"
    )


def table(data: dict[str, Any]) -> str:
    """The Markdown table of a run (what ``--docs`` writes into ``docs/scaling.md``)."""
    meta = data["meta"]
    lines = [
        f"`python -m bench.fill_object_store` at `{meta['commit']}` ({meta['date']}): "
        f"{meta['codes']:,} fill codes (z of {meta['z_dim']} float16, 80 bytes a code in a "
        f"file) of {meta['users']:,} users, {meta['targets']:,} targets with "
        f"{meta['neighbours']} random neighbours each, on moto's S3 server; every request "
        "and byte counted by the server.",
        "",
        "| P | tasks | way | requests | requests / P | MB read | ÷ files | ÷ visited "
        "| ÷ matched | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in data["results"]:
        for way in WAYS:
            got = entry["ways"][way]
            lines.append(
                f"| {entry['partitions']} | {entry['tasks']} | {way} | {got['requests']:,} "
                f"| {got['requests'] / entry['partitions']:,.1f} | {got['bytes'] / 1e6:,.1f} "
                f"| {got['bytes'] / entry['file_bytes']:.2f}× "
                f"| {got['bytes'] / max(entry['visited_bytes'], 1):.2f}× "
                f"| {got['bytes'] / max(entry['matched_bytes'], 1):.1f}× | {got['seconds']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--codes", type=int, default=400_000)
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--targets", type=int, default=20_000)
    parser.add_argument("--neighbours", type=int, default=20)
    parser.add_argument("--partitions", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="P = 2 and 4, a smaller world")
    parser.add_argument("--json", type=Path, default=REPO / "bench/results/fill_object_store.json")
    parser.add_argument("--docs", type=Path, default=None, help="docs/scaling.md to update")
    args = parser.parse_args(argv)
    if args.quick:
        args.users, args.codes, args.targets, args.partitions = 5_000, 40_000, 2_000, [2, 4]
    data = measure(args)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=1) + "\n")
    if args.docs is not None:
        write_block(args.docs, table(data) + "\n", "bench.fill_object_store")
    print(table(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
