"""The demo's last stage: the SOLARIS cycle through Airflow DAG runs, then a served request.

It runs after the offline stage
(:func:`solaris.examples.movielens.demo.run_offline_cycle`) has written the request log and
the models; ``solaris cycle`` runs it on any adapters' traffic. The window starts one
warm-up day before the test period (the user aggregates need 24 h of codes) and covers
``cycle.demo_days`` of it at ``cycle.demo_cadence_minutes``. Coverage is counted over the
test-period part only, from what the candidates runs served through Feast at each
request's own time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from solaris.config import SolarisConfig
from solaris.connection import RedisTarget
from solaris.errors import SolarisError
from solaris.local.cycle import DAY, export_config, run_window, window_intervals
from solaris.namespace import Namespace
from solaris.orchestration.layout import Interval
from solaris.orchestration.resources import reset_namespace
from solaris.serving.tiers import TIERS
from solaris.times import iso_utc

__all__ = ["DagsFolderError", "library_replay", "run_airflow_stage", "served_example"]

Printer = Callable[[str], None]


class DagsFolderError(SolarisError, FileNotFoundError):
    """The DAGs folder the demo's Airflow run needs (cycle.dags_folder) does not exist."""


@contextmanager
def _environ(**values: str) -> Iterator[None]:
    """Set environment variables for the task runs of this process, restored afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def library_replay(cfg: SolarisConfig, start: int, end: int, eval_from: int):
    """:func:`solaris.evaluation.replay.replay` of the traffic in ``[start, end)`` with the
    scores it logged: what the candidates DAG runs over the same intervals must reproduce
    (pair coverage of impressions from ``eval_from`` on)."""
    from solaris import adapters
    from solaris.evaluation.replay import replay

    rows = adapters.traffic_requests(cfg, start, end)
    sel = cfg.selection
    return replay(
        rows,
        adapters.verifier(cfg).score(rows),
        share=sel.share,
        ttl_seconds=sel.ttl_seconds,
        cadence_seconds=sel.cadence_seconds,
        eval_from=eval_from,
    )


def served_example(
    cfg: SolarisConfig, redis: str | RedisTarget, fm_version: str, as_of: int, repeats: int = 200
) -> dict:
    """The last labelled request of the window, served through ``SolarisFeatures`` as if it
    came again at the window's end (the online store holds each key's latest row only), and
    served ``repeats`` more times to time it; with what the pair view costs in Redis."""
    from solaris import adapters
    from solaris.connection import redis_client
    from solaris.serving.client import SolarisFeatures
    from solaris.store.contract import PAIR
    from solaris.store.footprint import view_footprint

    rows = adapters.traffic_requests(cfg, as_of - DAY, as_of)
    if not rows["label"].notna().any():
        return {}
    request_id = rows.loc[rows["label"].notna(), "request_id"].iloc[-1]
    request = rows[rows["request_id"] == request_id]
    user_id, ts = int(request["user_id"].iloc[0]), int(request["ts"].iloc[0])
    items = request["item_id"].to_numpy()
    # A client of its own, as a serving process would open it (socket timeouts, no retries).
    with SolarisFeatures(cfg, redis=redis, fm_version=fm_version) as client:
        client.warm_up()
        served = client.fetch(user_id, items, now=as_of)
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            client.fetch(user_id, items, now=as_of)
            seconds.append(time.perf_counter() - start)
    tiers, counts = np.unique(served.tier, return_counts=True)
    redis_db = redis_client(redis, redis_type=cfg.store.redis_type, timeout_s=10.0)
    try:
        pairs = view_footprint(redis_db, Namespace.of(cfg).project, PAIR)
        setting = redis_db.config_get("hash-max-listpack-value") or redis_db.config_get(
            "hash-max-ziplist-value"
        )
    finally:
        redis_db.close()
    ms = np.asarray(seconds) * 1000
    return {
        "user_id": user_id,
        "ts": ts,
        "n_items": len(request),
        "tiers": dict(zip(tiers.tolist(), counts.tolist(), strict=True)),
        "fetch_ms": {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99))},
        "fetches": repeats,
        "pair_footprint": {
            "keys": pairs.keys,
            "rows": pairs.rows,
            "bytes_per_row": pairs.bytes_per_row,
            "record_bytes_per_row": pairs.record_bytes / max(pairs.rows, 1),
            "overhead": pairs.overhead,
            "encodings": pairs.encodings,
            "server_setting": setting,
        },
    }


def run_airflow_stage(
    cfg: SolarisConfig,
    *,
    eval_from: int,
    fm_version: str,
    echo: Printer = print,
    force: bool = False,
    config_file: str | Path | None = None,
) -> dict[str, Any]:
    """Replay a window of the test period through the five DAGs in ``cfg``'s namespace,
    reset first; print and return figures. A namespace holding live state is refused before
    anything is deleted (:func:`~solaris.orchestration.resources.live_state`) unless
    ``force``. ``config_file``: the settings file ``cfg`` came from (None: the defaults, the
    MovieLens example's), named in the printed command that replays the same window under
    Airflow's scheduler."""
    from solaris.connection import redacted
    from solaris.local.airflow import LocalAirflow, configure_airflow
    from solaris.store.local_redis import redis_for

    cadence_min = cfg.cycle.demo_cadence_minutes
    artifacts = Path(cfg.artifacts_dir).resolve()
    dags = Path(cfg.cycle.dags_folder).resolve()
    if not dags.is_dir():
        raise DagsFolderError(f"no DAGs folder at {dags} (cycle.dags_folder)")
    with redis_for(cfg.store.redis) as (redis, origin):
        # The task runs read their settings from the environment, like on a worker.
        cfg = cfg.model_copy(
            update={
                "artifacts_dir": artifacts,
                "replay": True,  # the demo's requests come from the traffic source
                "store": cfg.store.model_copy(update={"redis": redis}),
                "selection": cfg.selection.model_copy(update={"cadence_minutes": cadence_min}),
            }
        )
        # The task runs need the password: the file is the owner's only (0600).
        config_path = export_config(cfg, artifacts / "airflow" / "solaris.yaml")
        env = {
            "SOLARIS_CONFIG": str(config_path),
            "SOLARIS_STORE__REDIS": redis.connection_string,
            "SOLARIS_SELECTION__CADENCE_MINUTES": str(cadence_min),
            "SOLARIS_ARTIFACTS_DIR": str(artifacts),
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "ERROR",
        }
        with _environ(**env):
            reset_namespace(cfg, redis, force=force)
            home = Path(cfg.cycle.airflow_home or artifacts / "airflow").resolve()
            configure_airflow(home, dags)
            airflow = LocalAirflow(dags, gpu_pool=cfg.cycle.gpu_pool)
            cadence = cfg.cycle.demo_cadence_seconds
            warm_up = max(cfg.store.uagg_window_seconds, DAY)
            end = eval_from + cfg.cycle.demo_seconds
            intervals = window_intervals(eval_from - warm_up, end, cadence)
            since = -(-eval_from // cadence) * cadence  # first whole test-period interval
            echo(
                f"Airflow cycle: {len(intervals)} intervals of {cadence_min:g} min from "
                f"{warm_up / 3600:g} h before the test period through {cfg.cycle.demo_days:g} "
                f"days of it; Redis {redacted(redis)} ({origin}); AIRFLOW_HOME {home}"
            )
            echo(f"replay in {Namespace.of(cfg).describe()}")
            report = run_window(airflow, intervals, cfg)
            example = served_example(cfg, redis, fm_version, intervals[-1].end)
            library = library_replay(cfg, intervals[0].start, intervals[-1].end, since)

    echo("DAG runs (count, mean s, total s):")
    for dag_id, secs in report.seconds.items():
        echo(f"  {dag_id:<20} {len(secs):4d} {np.mean(secs):7.2f} {np.sum(secs):8.1f}")
    selected = sum(r["selected"] for r in report.candidates)
    passes = sum(r["fm_passes"] for r in report.embeddings)
    requests = sum(r["requests"] for r in report.candidates)
    echo(
        f"selected {selected:,} candidates, {passes:,} FM passes over {requests:,} requests "
        f"({1000 * passes / max(requests, 1):,.0f} per 1,000 requests)"
    )
    n, coverage = report.coverage(since=since)
    echo(f"coverage of {n:,} test-period labelled impressions, served through Feast:")
    for tier in (*TIERS, "any"):
        echo(f"  {tier:<5} {coverage[tier]:6.1%}")
    echo(
        f"library replay of the same intervals: pair {library.coverage:.1%} of "
        f"{library.n_eval_impressions:,} impressions (the DAG runs must match it)"
    )
    t = report.training
    if t and "reason" in t:
        echo(f"training run: kept the current verifier: {t['reason']}")
    elif t:
        echo(
            f"training run: candidate VM val log-loss {t['val_logloss']:.4f} vs current "
            f"{t['current_val_logloss']:.4f} -> "
            f"{'published' if t['published'] else 'kept the current verifier'}"
        )
    if example:
        echo(
            f"one served request: user {example['user_id']} at {example['ts']}, "
            f"{example['n_items']} candidates, served at the window's end: tiers {example['tiers']}"
        )
        ms = example["fetch_ms"]
        echo(
            f"  served {example['fetches']} more times: p50 {ms['p50']:.2f} ms, "
            f"p99 {ms['p99']:.2f} ms (make bench compares with Redis itself)"
        )
        fp = example["pair_footprint"]
        encodings = ", ".join(f"{v:,} {k}" for k, v in sorted(fp["encodings"].items()))
        echo(
            f"Redis: {fp['rows']:,} cached pairs in {fp['keys']:,} hashes ({encodings}), "
            f"{fp['bytes_per_row']:.0f} B per pair for {fp['record_bytes_per_row']:.0f} B "
            f"records ({fp['overhead']:.2f}x; server {fp['server_setting']})"
        )
    first, last = (iso_utc(intervals[0].start), iso_utc(intervals[-1].start))
    # make airflow loads SOLARIS_CONFIG (the MovieLens example's settings without it): the
    # command names the settings this window was replayed with.
    settings = f"SOLARIS_CONFIG={Path(config_file).resolve()} " if config_file else ""
    echo(
        "the same window under Airflow's scheduler (PostgreSQL metadata DB, see docs/airflow.md): "
        f"{settings}SOLARIS_SELECTION__CADENCE_MINUTES={cadence_min:g} make airflow, then "
        f"scripts/airflow_replay.sh replay {first} {last}"
    )
    return {
        "intervals": len(intervals),
        "cadence_minutes": cadence_min,
        "redis_origin": origin,
        "dag_seconds": {k: [round(v, 3) for v in s] for k, s in report.seconds.items()},
        "selected": selected,
        "fm_passes": passes,
        "requests": requests,
        "labelled_impressions": n,
        "coverage": coverage,
        "candidates_intervals": [Interval.from_dict(r).as_dict() for r in report.candidates],
        "library_replay_pair_coverage": library.coverage,
        "library_replay_impressions": library.n_eval_impressions,
        "training": report.training,
        "example": example,
    }
