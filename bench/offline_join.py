"""Point-in-time join benchmark: ``get_historical_features`` on the ``pair`` view.

Run: ``.venv/bin/python -m bench.offline_join``. It writes ``--rows`` synthetic pair rows
(seeded; default 1,000,000 over ``--days`` 3 days of ``computed_at``) as parquet partitioned by
date, exactly as :mod:`solaris.pipeline.materialize` lays them out
(``data/offline/pair/date=YYYY-MM-DD/batch-<id>.parquet``), draws ``--entities`` entity rows
(default 100,000: mostly pairs that exist, at times up to 8 h after a computation so that
some fall outside the 6 h TTL, plus pairs that never existed), and times
``get_historical_features(...).to_df()`` with Feast's offline stores:

* ``file`` (dask over parquet, what ``feature_repo/feature_store.yaml`` uses), always;
* ``duckdb``, when ``duckdb`` is importable. It is not a dependency of the project; to
  measure it anyway, give ``--duckdb-python`` an interpreter of a scratch virtualenv with
  ``feast[duckdb]==0.67.0`` (outside the repository): the same data files are then joined
  in a subprocess of that interpreter and reported side by side.

Each result is checked against a pandas ``merge_asof`` reference of the same
point-in-time rule (latest row with ``event_ts <= t`` and ``event_ts >= t - ttl``), whose
time is printed as a floor. This module needs only feast, pandas, numpy and pyarrow (not
the ``solaris`` package), so the scratch interpreter can run it; its ``pair`` view mirrors
``feature_repo/solaris_features.py``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

TTL = dt.timedelta(hours=6)  # SelectionConfig.ttl_hours default: the pair view's read TTL
FEATURES = ["pair:z", "pair:fm_version", "pair:computed_at"]
DAY = 86_400


# --------------------------------------------------------------------------------------------
# Synthetic data (seeded)
# --------------------------------------------------------------------------------------------


def write_pairs(folder: Path, rows: int, days: int, d: int, seed: int) -> tuple[int, int]:
    """Pair rows as date-partitioned parquet; returns ``(t0, t1)`` epoch seconds.

    20 k users, 5 k items (Zipf-like popularity); a pair may be recomputed several times.
    """
    rng = np.random.default_rng(seed)
    t0 = 1_700_000_000 - 1_700_000_000 % DAY
    t1 = t0 + days * DAY
    users = rng.integers(1, 20_001, size=rows, dtype=np.int64)
    items = np.minimum(rng.zipf(1.3, size=rows), 5_000).astype(np.int64)
    computed = np.sort(rng.integers(t0, t1, size=rows, dtype=np.int64))
    z = rng.integers(0, 256, size=(rows, 2 * d), dtype=np.uint8)
    z_col = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(2 * d), rows, [None, pa.py_buffer(z.tobytes())]
    )
    table = pa.table(
        {
            "user_id": users,
            "item_id": items,
            "z": z_col.cast(pa.binary()),
            "fm_version": pa.array(np.full(rows, "bench-v1", dtype=object), pa.string()),
            "computed_at": computed,
            "event_ts": pa.array(computed * 1_000_000, pa.timestamp("us", tz="UTC")),
        }
    )
    day_index = (computed - t0) // DAY
    for k in range(days):
        date = dt.datetime.fromtimestamp(t0 + k * DAY, tz=dt.UTC).strftime("%Y-%m-%d")
        part = folder / f"date={date}"
        part.mkdir(parents=True, exist_ok=True)
        mask = pa.array(day_index == k)
        pq.write_table(table.filter(mask), part / "batch-bench.parquet")
    return t0, t1


def entity_rows(folder: Path, n: int, seed: int) -> pd.DataFrame:
    """90% existing pairs at ``computed_at + U(0, 8 h)``, 10% pairs that never existed."""
    rng = np.random.default_rng(seed + 1)
    pairs = pq.read_table(folder, columns=["user_id", "item_id", "computed_at"]).to_pandas()
    hit = rng.choice(len(pairs), size=int(n * 0.9), replace=False)
    sample = pairs.iloc[hit]
    ts = sample["computed_at"].to_numpy() + rng.integers(0, 8 * 3600, size=len(sample))
    n_miss = n - len(sample)
    miss = pd.DataFrame(
        {
            "user_id": rng.integers(30_000, 40_000, size=n_miss),
            "item_id": rng.integers(1, 5_000, size=n_miss),
            "computed_at": 0,
        }
    )
    miss_ts = rng.integers(int(pairs["computed_at"].min()), int(pairs["computed_at"].max()), n_miss)
    frame = pd.DataFrame(
        {
            "user_id": np.concatenate([sample["user_id"].to_numpy(), miss["user_id"].to_numpy()]),
            "item_id": np.concatenate([sample["item_id"].to_numpy(), miss["item_id"].to_numpy()]),
            "event_timestamp": pd.to_datetime(np.concatenate([ts, miss_ts]), unit="s", utc=True),
        }
    )
    return frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# Reference: pandas merge_asof with the same rule
# --------------------------------------------------------------------------------------------


def reference_join(folder: Path, entities: pd.DataFrame) -> tuple[pd.Series, float]:
    """``computed_at`` per entity row (NaN when none is fresh) and the seconds it took."""
    start = time.perf_counter()
    pairs = pq.read_table(folder, columns=["user_id", "item_id", "computed_at", "event_ts"])
    pairs = pairs.to_pandas()
    pairs["event_ts"] = pairs["event_ts"].astype("datetime64[ns, UTC]")
    pairs = pairs.sort_values("event_ts", kind="stable")
    left = entities.reset_index()
    left["event_timestamp"] = left["event_timestamp"].astype("datetime64[ns, UTC]")
    left = left.sort_values("event_timestamp", kind="stable")
    joined = pd.merge_asof(
        left,
        pairs,
        left_on="event_timestamp",
        right_on="event_ts",
        by=["user_id", "item_id"],
        direction="backward",
        tolerance=pd.Timedelta(TTL),
    )
    out = joined.set_index("index")["computed_at"].sort_index()
    return out, time.perf_counter() - start


# --------------------------------------------------------------------------------------------
# Feast
# --------------------------------------------------------------------------------------------


def pair_source(file_source: Any, parquet: Any, repo: Path, offline: str) -> Any:
    """The ``pair`` FileSource for one offline store.

    The file store reads the partitioned folder as ``feature_repo`` declares it (a directory,
    no file format). DuckDB's store returns nothing for a source that has no
    ``ParquetFormat`` and whose path does not end in ``.parquet``, and it reads through
    ``read_parquet``, so it gets a glob over the partitions with the format set.
    """
    folder = repo / "data/offline/pair"
    if offline == "duckdb":
        return file_source(
            name="pair_source",
            path=str(folder / "*" / "*.parquet"),
            file_format=parquet(),
            timestamp_field="event_ts",
        )
    return file_source(name="pair_source", path=str(folder), timestamp_field="event_ts")


def open_store(repo: Path, offline: str) -> Any:
    """A FeatureStore over ``repo`` with the ``pair`` view applied (online store unused)."""
    from feast import Entity, FeatureStore, FeatureView, Field, FileSource, ValueType
    from feast.data_format import ParquetFormat
    from feast.repo_config import RepoConfig
    from feast.types import Bytes, Int64, String

    config = RepoConfig(
        project="bench_offline",
        provider="local",
        registry=str(repo / f"registry_{offline}.db"),
        online_store={"type": "sqlite", "path": str(repo / "online.db")},
        offline_store={"type": offline},
        entity_key_serialization_version=3,
    )
    config.repo_path = repo
    store = FeatureStore(repo_path=str(repo), config=config)
    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.INT64)
    item = Entity(name="item", join_keys=["item_id"], value_type=ValueType.INT64)
    pair = FeatureView(
        name="pair",
        entities=[user, item],
        ttl=TTL,
        schema=[
            Field(name="z", dtype=Bytes),
            Field(name="fm_version", dtype=String),
            Field(name="computed_at", dtype=Int64),
        ],
        source=pair_source(FileSource, ParquetFormat, repo, offline),
    )
    store.apply([user, item, pair])
    return store


def time_join(repo: Path, offline: str, entities: pd.DataFrame, reps: int) -> dict[str, Any]:
    """Seconds of ``get_historical_features(...).to_df()``, per repetition, and the result."""
    store = open_store(repo, offline)
    seconds, result = [], None
    for _ in range(reps):
        start = time.perf_counter()
        result = store.get_historical_features(entity_df=entities, features=FEATURES).to_df()
        seconds.append(time.perf_counter() - start)
    return {"store": offline, "seconds": seconds, "result": result}


def check(result: pd.DataFrame, entities: pd.DataFrame, expected: pd.Series) -> dict[str, Any]:
    """Compare Feast's ``computed_at`` per entity row with the reference."""
    keyed = entities.reset_index().merge(
        result[["user_id", "item_id", "event_timestamp", "computed_at"]].drop_duplicates(
            ["user_id", "item_id", "event_timestamp"]
        ),
        on=["user_id", "item_id", "event_timestamp"],
        how="left",
    )
    got = keyed.set_index("index")["computed_at"].sort_index()
    exp = expected.reindex(got.index)
    both_null = got.isna() & exp.isna()
    equal = both_null | (got.astype("float64") == exp.astype("float64"))
    return {
        "rows_out": len(result),
        "matched": int(got.notna().sum()),
        "expected_matched": int(exp.notna().sum()),
        "agree": bool(equal.all()),
        "disagree_rows": int((~equal).sum()),
    }


def duckdb_available() -> bool:
    try:
        import duckdb  # noqa: F401
    except ImportError:
        return False
    return True


def run_in_interpreter(python: str, repo: Path, reps: int) -> dict[str, Any]:
    """Run the DuckDB join in another interpreter on the same files; its JSON result."""
    out = repo / "duckdb_result.json"
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    cmd = [python, "-m", "bench.offline_join", "--only-duckdb", str(repo), "--reps", str(reps)]
    cmd += ["--result", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not out.is_file():
        tail = (proc.stderr or proc.stdout)[-600:]
        raise RuntimeError(f"{python} failed (rc {proc.returncode}): {tail}")
    return json.loads(out.read_text())


def versions() -> dict[str, str]:
    import feast

    info = {
        "python": platform.python_version(),
        "feast": feast.__version__,
        "pandas": pd.__version__,
        "pyarrow": pa.__version__,
    }
    try:
        import dask

        info["dask"] = dask.__version__
    except ImportError:
        pass
    try:
        import duckdb

        info["duckdb"] = duckdb.__version__
    except ImportError:
        pass
    return info


def only_duckdb(repo: Path, reps: int, result_path: Path) -> int:
    """Subprocess entry: join the files already in ``repo`` with DuckDB, write JSON."""
    entities = pd.read_parquet(repo / "entities.parquet")
    expected = pd.read_parquet(repo / "expected.parquet")["computed_at"]
    res = time_join(repo, "duckdb", entities, reps)
    payload = {
        "store": "duckdb",
        "seconds": res["seconds"],
        "check": check(res["result"], entities, expected),
        "versions": versions(),
    }
    result_path.write_text(json.dumps(payload))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.offline_join", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--reps", type=int, default=2, help="joins per store (first is cold)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--duckdb-python",
        default=os.environ.get("SOLARIS_BENCH_DUCKDB_PYTHON"),
        help="interpreter with feast[duckdb] (scratch venv) when duckdb is not importable here",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--only-duckdb", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.only_duckdb:
        return only_duckdb(args.only_duckdb, args.reps, args.result)

    started = time.perf_counter()
    repo = Path(tempfile.mkdtemp(prefix="solaris-offline-bench-"))
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "versions": versions(),
        "rows": args.rows,
        "entities": args.entities,
        "days": args.days,
    }
    try:
        folder = repo / "data/offline/pair"
        t = time.perf_counter()
        write_pairs(folder, args.rows, args.days, args.dim, args.seed)
        entities = entity_rows(folder, args.entities, args.seed)
        size = sum(p.stat().st_size for p in folder.rglob("*.parquet"))
        print(
            f"offline join benchmark  {report['date']}  cpus: {report['cpus']}  "
            + "  ".join(f"{k}: {v}" for k, v in report["versions"].items())
        )
        print(
            f"{args.rows:,} pair rows over {args.days} days ({size / 2**20:.0f} MiB parquet, "
            f"{args.days} date partitions), {len(entities):,} entity rows, TTL {TTL}; "
            f"data written in {time.perf_counter() - t:.1f} s"
        )
        expected, ref_s = reference_join(folder, entities)
        entities.to_parquet(repo / "entities.parquet")
        expected.to_frame("computed_at").to_parquet(repo / "expected.parquet")
        print(
            f"  pandas merge_asof reference (floor): {ref_s:6.1f} s, "
            f"{int(expected.notna().sum()):,} rows with a fresh pair"
        )
        report["reference_s"] = ref_s

        results = []
        res = time_join(repo, "file", entities, args.reps)
        results.append(
            {
                "store": "file",
                "seconds": res["seconds"],
                "check": check(res["result"], entities, expected),
            }
        )
        if duckdb_available():
            res = time_join(repo, "duckdb", entities, args.reps)
            results.append(
                {
                    "store": "duckdb",
                    "seconds": res["seconds"],
                    "check": check(res["result"], entities, expected),
                }
            )
        elif args.duckdb_python:
            print(f"  duckdb is not importable here; running it with {args.duckdb_python}")
            try:
                results.append(run_in_interpreter(args.duckdb_python, repo, args.reps))
            except RuntimeError as exc:
                print(f"  duckdb: not measured ({exc})")
        else:
            print(
                "  duckdb is not importable in this interpreter (not a project dependency): "
                "only the file store is measured; pass --duckdb-python to measure it"
            )
        for r in results:
            secs = ", ".join(f"{s:.1f}" for s in r["seconds"])
            c = r["check"]
            extra = f" [{r['versions'].get('duckdb', '?')}]" if "versions" in r else ""
            print(
                f"  {r['store']:<7}{extra} get_historical_features(...).to_df(): {secs} s "
                f"(best {min(r['seconds']):.1f} s, {min(r['seconds']) / ref_s:.1f}x the "
                f"reference); {c['rows_out']:,} of {len(entities):,} entity rows out, "
                f"{c['matched']:,} with a value; "
                f"agrees with the reference: {c['agree']} ({c['disagree_rows']} rows differ)"
            )
        report["results"] = results
    finally:
        shutil.rmtree(repo, ignore_errors=True)
    report["elapsed_s"] = time.perf_counter() - started
    print(f"done in {report['elapsed_s']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
