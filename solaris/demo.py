"""The offline SOLARIS cycle on MovieLens-100K, end to end: what ``make demo`` runs.

fetch → request log → FM / autoencoder / VM on a time split → verifier scores every
candidate → time-ordered replay with a TTL cache at the configured cadence → the FM embeds
the pairs the verifier selected during the test period → validated parquet.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from solaris.config import SolarisConfig
from solaris.data.fetch import fetch_movielens
from solaris.data.movielens import MovieLens
from solaris.data.requests import build_request_log, request_log_stats
from solaris.data.schemas import write_table
from solaris.evaluation.replay import oracle_scores, random_scores, replay
from solaris.models.features import FeatureContext
from solaris.models.training import resolve_device
from solaris.pipeline.embed import embed_pairs
from solaris.pipeline.train import save_models, score_candidates, train_models
from solaris.serving.tiers import TIERS

Printer = Callable[[str], None]


@contextmanager
def _timed(timings: dict[str, float], name: str) -> Iterator[None]:
    start = time.perf_counter()
    yield
    timings[name] = round(time.perf_counter() - start, 2)


def _publish(staging: Path, final: Path) -> None:
    """Move each staged artifact over its published counterpart, then drop the staging."""
    for item in sorted(staging.iterdir()):
        target = final / item.name
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(item, target)
    staging.rmdir()


def run_online_stage(
    cfg: SolarisConfig,
    candidates: pd.DataFrame,
    embeddings: pa.Table,
    *,
    eval_from: int,
    fm_version: str,
    echo: Printer = print,
) -> dict:
    """Materialize the replay's codes into Redis through Feast, build the enrichment views,
    and serve every test-period request through ``SolarisFeatures``."""
    from solaris.evaluation.online_replay import online_replay
    from solaris.pipeline.enrich import PairHistory
    from solaris.pipeline.materialize import pair_frame
    from solaris.serving.client import SolarisFeatures
    from solaris.store.feast_store import apply_definitions, delete_project_keys, open_feature_store
    from solaris.store.local_redis import client_from_connection_string, redis_for

    history = PairHistory.from_table(embeddings)
    pair_rows = pair_frame(embeddings, z_dim=cfg.model.z_dim)
    with redis_for(cfg.store.redis) as (redis, origin):
        echo(f"Redis: {redis} ({origin}); Feast project '{cfg.store.project}'")
        store = open_feature_store(cfg, redis)
        apply_definitions(store, cfg.store.repo_path)
        # Only this project's keys: a configured Redis is never flushed.
        removed = delete_project_keys(
            client_from_connection_string(redis),
            cfg.store.project,
            extra_keys=[cfg.store.miss_stream],
        )
        if removed:
            echo(f"removed {removed:,} keys of an earlier run of project '{cfg.store.project}'")
        client = SolarisFeatures(cfg, redis=redis, fm_version=fm_version, store=store)
        # Like a serving process after start-up: one warm read, and the heap frozen so a
        # full garbage collection of the Feast/pandas heap cannot stall a request.
        client.warm_up(freeze_gc=True)
        result = online_replay(
            cfg,
            store,
            client,
            candidates=candidates,
            history=history,
            pair_rows=pair_rows,
            eval_from=eval_from,
            fm_version=fm_version,
        )
        failures = client.stats.failures
    lat = result.latencies_ms
    echo(
        "online writes (rows): "
        + ", ".join(
            f"{v} {n:,} ({n / max(result.write_seconds[v], 1e-9):,.0f} rows/s)"
            for v, n in result.rows_written.items()
        )
    )
    ex = result.example
    if ex:
        echo(
            f"one served request: user {ex['user_id']} at {ex['ts']}, {ex['n_items']} candidates, "
            f"tiers {ex['tiers']}, fetch {ex['latency_ms']:.1f} ms"
        )
    echo(
        f"served {result.n_requests:,} test-period requests through Feast: fetch p50 "
        f"{np.percentile(lat, 50):.1f} ms, p99 {np.percentile(lat, 99):.1f} ms, "
        f"{failures} failures"
    )
    echo(f"coverage of {result.n_impressions:,} labelled impressions, from online reads:")
    for tier in (*TIERS,):
        echo(
            f"  {tier:<5} present {result.coverage(tier):6.1%}   main slot "
            f"{result.main_tier_counts[tier] / max(result.n_impressions, 1):6.1%}"
        )
    echo(
        f"  any tier {result.any_tier_coverage:.1%}; none "
        f"{result.main_tier_counts['none'] / max(result.n_impressions, 1):.1%}"
    )
    return {
        "redis_origin": origin,
        "n_requests": result.n_requests,
        "n_impressions": result.n_impressions,
        "coverage_present": {t: result.coverage(t) for t in TIERS},
        "main_tier_counts": result.main_tier_counts,
        "any_tier_coverage": result.any_tier_coverage,
        "fetch_ms_p50": float(np.percentile(lat, 50)),
        "fetch_ms_p99": float(np.percentile(lat, 99)),
        "fetch_failures": failures,
        "rows_written": result.rows_written,
        "write_seconds": result.write_seconds,
        "example": ex,
    }


def run_offline_cycle(cfg: SolarisConfig, echo: Printer = print) -> dict:
    """Run the offline cycle, print each figure with its label, return them all."""
    device = resolve_device(cfg.device)  # fail before any work, not after it
    timings: dict[str, float] = {}
    final = Path(cfg.artifacts_dir)
    # Everything is written to a staging folder and published only when the run succeeds,
    # so a failed run never leaves a new log beside old models or a stale summary.
    out = final / ".staging"
    shutil.rmtree(out, ignore_errors=True)
    sel = cfg.selection
    ttl_s, cadence_s = int(sel.ttl_hours * 3600), int(sel.cadence_minutes * 60)

    with _timed(timings, "fetch_and_load"):
        data = MovieLens.load(fetch_movielens(cfg.data))
    echo(
        f"MovieLens-100K: {len(data.ratings):,} ratings, {data.users.shape[0]} users, "
        f"{data.items.shape[0]} items"
    )

    with _timed(timings, "request_log"):
        log = build_request_log(data.ratings, cfg.requests)
        stats = request_log_stats(log, cfg.requests.recurrence_window_hours)
        write_table(
            pa.Table.from_pandas(log.requests, preserve_index=False),
            out / "log" / "requests.parquet",
            "requests",
        )
        write_table(
            pa.Table.from_pandas(log.candidates, preserve_index=False),
            out / "log" / "candidates.parquet",
            "candidates",
        )
    window = cfg.requests.recurrence_window_hours
    echo(f"requests ({cfg.requests.bucket_seconds} s buckets):      {stats.n_requests:,}")
    echo(
        f"mean candidates per request:        {stats.mean_candidates:.1f} "
        f"({stats.mean_impressions:.2f} labelled + retrieval top-{cfg.requests.retrieval_k})"
    )
    echo(f"recurrence ({window:g} h, all requests):     {stats.recurrence:.1%}   (paper: >60%)")
    echo(f"recurrence (requests with a prior one): {stats.recurrence_with_prior:.1%}")
    echo(
        f"retrieval recall ({window:g} h):            {stats.retrieval_recall:.1%}   "
        "(upper bound on native pair coverage)"
    )

    ctx = FeatureContext.from_config(data, cfg.model)
    with _timed(timings, "train"):
        models = train_models(log.impressions, ctx, cfg)
        save_models(models, out / "models")
    m = models.metrics
    task = cfg.model.tasks[0]
    echo(
        f"time split: train {m['n_train']:,} / val {m['n_val']:,} / test {m['n_test']:,} "
        f"impressions; VM trains on the last {m['n_vm_train']:,}"
    )
    echo(f"FM test log-loss ({task}):            {m['fm_logloss']:.4f}   AUC {m['fm_auc']:.4f}")
    echo(f"VM test log-loss ({task}):            {m['vm_logloss']:.4f}   AUC {m['vm_auc']:.4f}")
    echo(f"FM advantage (VM - FM log-loss):    {m['vm_logloss'] - m['fm_logloss']:.4f}")
    echo(
        f"fm_version {models.fm_version}, autoencoder MSE {m['ae_mse']:.4f} "
        f"(z_dim {cfg.model.z_dim})"
    )

    with _timed(timings, "verifier_scores"):
        scores = score_candidates(models.vm, ctx, log.candidates, progress=True)
    selectors = {
        "verifier": scores,
        "random": random_scores(len(scores), cfg.train.seed),
        "oracle": oracle_scores(log.candidates, ttl_seconds=ttl_s, cadence_seconds=cadence_s),
    }
    results = {}
    with _timed(timings, "replay"):
        for name, selector_scores in selectors.items():
            results[name] = replay(
                log.candidates,
                selector_scores,
                share=sel.share,
                ttl_seconds=ttl_s,
                cadence_seconds=cadence_s,
                eval_from=models.split.val_end,
                progress=True,
            )
    echo(
        f"native pair coverage of test-period labelled impressions "
        f"({sel.share:.0%} selection, {sel.ttl_hours:g} h TTL, "
        f"{sel.cadence_minutes:g} min cadence):"
    )
    for name, res in results.items():
        echo(
            f"  {name:<9} {res.coverage:.1%}  ({res.n_hits:,}/{res.n_eval_impressions:,}; "
            f"{res.fm_passes_per_1k_requests:,.0f} FM passes per 1,000 requests)"
        )

    verifier = results["verifier"]
    # The online stage also needs the codes that are still fresh (or in the 24 h aggregate
    # window) when the test period starts.
    lookback = max(ttl_s, int(cfg.store.uagg_window_hours * 3600))
    since = models.split.val_end - lookback
    eval_sel = verifier.selections[verifier.selections["computed_at"] >= since]
    with _timed(timings, "embed"):
        rows = embed_pairs(
            eval_sel,
            fm=models.fm,
            autoencoder=models.autoencoder,
            ctx=ctx,
            computed_at=eval_sel["computed_at"].to_numpy(),
            fm_version=models.fm_version,
            device=device,
            progress=True,
        )
        path = write_table(
            rows,
            out / "pair_embeddings" / "replay.parquet",
            "pair_embeddings",
            z_dim=cfg.model.z_dim,
        )
    rate = rows.num_rows / max(timings["embed"], 1e-9)
    echo(
        f"embedded {rows.num_rows:,} pairs (selected from {lookback / 3600:g} h before the "
        "test period on) "
        f"in {timings['embed']:.1f} s "
        f"({rate:,.0f} pairs/s) -> {final / path.relative_to(out)}"
    )

    with _timed(timings, "online"):
        online = run_online_stage(
            cfg,
            log.candidates,
            rows,
            eval_from=models.split.val_end,
            fm_version=models.fm_version,
            echo=echo,
        )
    online["pair_coverage_in_memory_replay"] = verifier.coverage

    summary = {
        "request_log": asdict(stats),
        "online": online,
        "models": {**m, "fm_version": models.fm_version, "vm_version": models.vm_version},
        "coverage": {name: r.coverage for name, r in results.items()},
        "fm_passes_per_1k_requests": {n: r.fm_passes_per_1k_requests for n, r in results.items()},
        "embedded_pairs": rows.num_rows,
        "timings_s": timings,
        "config": json.loads(cfg.model_dump_json()),
    }
    (out / "demo_summary.json").write_text(json.dumps(summary, indent=2, default=str))
    _publish(out, final)
    echo("timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
    return summary
