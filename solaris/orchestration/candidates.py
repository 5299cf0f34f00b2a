"""The candidates DAG's work: verifier selection for one scheduling interval.

The selection of an interval is written to a ledger file (``selections/<key>.parquet``);
the ledgers of earlier intervals are the cache the selection skips, exactly like the offline
replay's in-memory cache: a pair selected in ``[start, end)`` is computed at ``end`` and is
usable through ``end + ttl``. So a backfill over the log selects the same pairs as
:func:`solaris.evaluation.replay.replay`, whatever order the embedding runs finish in.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from solaris.config import SolarisConfig
from solaris.orchestration.layout import CycleLayout, Interval, write_run_record
from solaris.orchestration.resources import (
    current_verifier,
    cycle_redis,
    feature_context,
    feature_store,
    fm_version,
    read_parquet,
    read_requests,
    write_parquet,
)

if TYPE_CHECKING:
    from feast import FeatureStore

DAG_ID = "solaris_candidates"
PSEUDO_REQUEST_BASE = 1 << 48  # request ids of drained misses that are not in the log
_KEY = ["user_id", "item_id", "ts"]


def served_coverage(
    cfg: SolarisConfig, store: FeatureStore, redis: str, requests: pd.DataFrame, version: str
) -> dict[str, Any]:
    """Serve each request of the interval through ``SolarisFeatures`` at its own time and
    count its labelled impressions by tier: what the VM received during the interval."""
    from solaris.evaluation.served_coverage import ServedCoverage
    from solaris.serving.client import SolarisFeatures
    from solaris.serving.tiers import TIERS

    result = ServedCoverage()
    # This replays history to measure coverage: a fetch slowed by the replaying machine must
    # count as what the cache held, not as a miss, so the serving time bound is lifted.
    cfg = cfg.model_copy(update={"store": cfg.store.model_copy(update={"fetch_timeout_ms": 30e3})})
    with SolarisFeatures(cfg, redis=redis, fm_version=version, store=store) as client:
        client.warm_up()
        for (_, user_id, ts), rows in requests.groupby(["request_id", "user_id", "ts"], sort=True):
            served = client.fetch(int(user_id), rows["item_id"].to_numpy(), now=int(ts))
            result.count(served, rows["label"].notna().to_numpy())
        client.flush()
        failures = client.stats.failures
    n = max(result.n_impressions, 1)
    return {
        "labelled": result.n_impressions,
        "coverage": {
            **{tier: result.coverage(tier) for tier in TIERS},
            "any": result.any_tier_coverage,
        },
        "pair_hits": result.tier_present_counts["pair"],
        "main_tier_share": {k: v / n for k, v in result.main_tier_counts.items()},
        "fetch_failures": failures,
    }


def drain_interval_misses(cfg: SolarisConfig, redis: str, interval: Interval) -> pd.DataFrame:
    """Drain the miss stream; misses from after the interval go back for the next run.

    Nothing is lost on the way: the drained rows are added to ``misses/<key>.parquet``
    before anything else happens with them, and a retried run starts from that file, so
    misses a failed attempt drained are still selected from.
    """
    from solaris.serving.misses import append_misses, drain_misses
    from solaris.store.connection import redis_client

    path = CycleLayout(cfg.artifacts_dir).misses(interval)
    client = redis_client(redis, redis_type=cfg.store.redis_type, timeout_s=10.0)
    try:
        misses = drain_misses(client, cfg.store.miss_stream)
        if path.is_file():  # an earlier attempt of this run drained these
            earlier = read_parquet(path)
            misses = pd.concat([earlier, misses], ignore_index=True).drop_duplicates(
                _KEY, ignore_index=True
            )
        if len(misses):
            write_parquet(misses, path)
        later = misses[misses["ts"].to_numpy() >= interval.end]
        for (user_id, ts), rows in later.groupby(["user_id", "ts"], sort=True):
            append_misses(
                client,
                cfg.store.miss_stream,
                cfg.store.miss_stream_maxlen,
                int(user_id),
                rows["item_id"].to_numpy(),
                int(ts),
            )
    finally:
        client.close()
    return misses[misses["ts"].to_numpy() < interval.end].reset_index(drop=True)


def with_misses(requests: pd.DataFrame, misses: pd.DataFrame) -> pd.DataFrame:
    """The interval's candidates plus the missed pairs the log does not already hold.

    Each (user, ts) group of new misses becomes one pseudo-request (unlabelled), so the
    per-request selection budget applies to it as to any request.
    """
    if len(misses) == 0:
        return requests
    fresh = misses.drop_duplicates(_KEY).merge(
        requests[_KEY].drop_duplicates(), on=_KEY, how="left", indicator=True
    )
    fresh = fresh[fresh["_merge"] == "left_only"].drop(columns="_merge")
    if len(fresh) == 0:
        return requests
    group = fresh.groupby(["user_id", "ts"], sort=True).ngroup().to_numpy(np.int64)
    pseudo = fresh.assign(
        request_id=PSEUDO_REQUEST_BASE + group, label=pd.array([pd.NA] * len(fresh), "Int8")
    )[list(requests.columns)]
    combined = pd.concat([requests, pseudo], ignore_index=True)
    return combined.sort_values("ts", kind="stable", ignore_index=True)


def ledger_cache(layout: CycleLayout, interval: Interval, ttl_s: int) -> pd.DataFrame:
    """Pairs selected by earlier intervals that are still fresh at some point of this one:
    a code computed at ``end`` is fresh through ``end + ttl_s`` inclusive, so every interval
    with ``end >= interval.start - ttl_s`` counts."""
    earlier = layout.intervals(
        "selections", ending_after=interval.start - ttl_s - 1, ending_by=interval.start
    )
    frames = [
        read_parquet(layout.selections(i), ["user_id", "item_id", "expires_at"]) for i in earlier
    ]
    if not frames:
        return pd.DataFrame(
            {c: np.zeros(0, np.int64) for c in ("user_id", "item_id", "expires_at")}
        )
    return pd.concat(frames, ignore_index=True)


def select_interval(cfg: SolarisConfig, interval: Interval) -> dict[str, Any]:
    """One candidates run: measure what serving got, drain the misses, select, write the
    ledger. Returns the run's figures (also written as its run record)."""
    from solaris.pipeline.select import select_candidates
    from solaris.pipeline.train import score_candidates

    began = time.perf_counter()
    layout = CycleLayout(cfg.artifacts_dir)
    ttl_s = round(cfg.selection.ttl_hours * 3600)
    requests = read_requests(layout, interval.start, interval.end)
    redis = cycle_redis(cfg)
    version = fm_version(layout)
    record: dict[str, Any] = {
        **interval.as_dict(),
        "requests": int(requests["request_id"].nunique()),
    }
    if cfg.cycle.measure_coverage and len(requests):
        record.update(served_coverage(cfg, feature_store(cfg, redis), redis, requests, version))
    misses = drain_interval_misses(cfg, redis, interval)
    batch = with_misses(requests, misses)
    verifier = current_verifier(layout, as_of=interval.start)
    scores = (
        score_candidates(verifier.vm, feature_context(cfg), batch)
        if len(batch)
        else np.zeros(0, np.float32)
    )
    selected = select_candidates(
        batch, scores, share=cfg.selection.share, cache=ledger_cache(layout, interval, ttl_s)
    )
    ledger = selected.assign(
        computed_at=np.int64(interval.end), expires_at=np.int64(interval.end + ttl_s)
    )
    write_parquet(ledger, layout.selections(interval))
    embedded = layout.embedded_intervals(ending_after=-1, ending_by=interval.start)
    record.update(
        # How old the newest pair codes had grown by the end of the interval they served
        # (one cadence when the cycle keeps up; None before the first codes).
        freshness_s=interval.end - embedded[-1].end if embedded else None,
        candidates=len(batch),
        misses_drained=len(misses),
        miss_candidates_added=len(batch) - len(requests),
        selected=len(ledger),
        fm_passes=int(ledger[["user_id", "item_id"]].drop_duplicates().shape[0]),
        verifier=verifier.version,
        seconds=round(time.perf_counter() - began, 3),
    )
    write_run_record(layout, DAG_ID, interval.key, record)
    return record
