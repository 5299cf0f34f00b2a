"""``solaris report``: the replay experiments over rolling-origin windows and seeds →
``reports/solaris_report.md`` + PNGs.

Everything is recomputed on each run (no cache): the FM is trained once per run (one seed
in one window) and reused by every VM variant of that run. The runs' summaries (without
per-row arrays) are also written to ``artifacts/report/summary.json``.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import platform
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from solaris.config import SolarisConfig, redacted_settings
from solaris.examples.movielens.data import MovieLens
from solaris.examples.movielens.exposure import MODEL_FEATURES, exposure_features
from solaris.examples.movielens.features import FeatureContext
from solaris.examples.movielens.fetch import fetch_movielens
from solaris.examples.movielens.report.aggregate import pool_distillation, summarise
from solaris.examples.movielens.report.claims import claims
from solaris.examples.movielens.report.coverage import retrieval_bound
from solaris.examples.movielens.report.render import markdown, plots
from solaris.examples.movielens.report.seed import run_seed, window_split
from solaris.examples.movielens.report.settings import ReportSettings
from solaris.examples.movielens.report.shortfalls import shortfalls
from solaris.examples.movielens.requests import build_request_log, request_log_stats
from solaris.files import atomic_write_bytes

__all__ = ["bounds", "provenance", "run_report", "run_windows"]


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(cfg: SolarisConfig, st: ReportSettings, folder: Path) -> dict:
    data = {
        f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.glob("ml-100k.*"))
    }
    config = redacted_settings(cfg)  # never the Redis password
    config["data"].pop("cache_dir", None)
    return {
        "git_revision": _git("rev-parse", "HEAD"),
        "git_dirty": _git("status", "--porcelain") not in ("", "unknown"),
        "recbole_version": cfg.data.recbole_version,
        "data_sha256": data,
        "seeds": list(st.seeds),
        "windows": st.windows,
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "settings_json": st.model_dump_json(),
        "config_json": json.dumps(config, sort_keys=True),
    }


def _jsonable(seed_result: dict) -> dict:
    arrays = (
        "row_losses",
        "kd_row_losses",
        "tier_row_losses",
        "ladder_row_losses",
        "test_users",
        "selection_hits",
    )
    return {k: v for k, v in seed_result.items() if k not in arrays}


def run_report(
    cfg: SolarisConfig,
    st: ReportSettings,
    out_dir: Path = Path("reports"),
    echo: Callable[[str], None] = print,
) -> dict:
    start = time.perf_counter()
    folder = fetch_movielens(cfg.data)
    data = MovieLens.load(folder)
    log = build_request_log(data.ratings, cfg.requests)
    ctx = FeatureContext.from_config(data, cfg.model)
    # The same for every seed; only the scorer's columns travel to the seeds' processes.
    features = exposure_features(log, cadence_seconds=st.base_cadence_seconds)[list(MODEL_FEATURES)]
    # One distillation weight for all runs, so the runs' own rows say what the report uses.
    seeds = pool_distillation(run_windows(log, ctx, cfg, st, features))
    summary = summarise(seeds, st.n_boot)

    summary["bounds"] = bounds(log, cfg, st)
    summary["shortfalls"] = shortfalls(summary)
    summary["claims"] = claims(summary)
    prov = provenance(cfg, st, folder)
    prov["fm_versions"] = summary["fm_versions"]
    prov["runtime_s"] = time.perf_counter() - start

    out_dir.mkdir(parents=True, exist_ok=True)
    plots(summary, out_dir)
    atomic_write_bytes(out_dir / "solaris_report.md", markdown(summary, prov).encode())
    art = Path(cfg.artifacts_dir) / "report"
    art.mkdir(parents=True, exist_ok=True)
    payload = {"summary": summary, "provenance": prov, "seeds": [_jsonable(s) for s in seeds]}
    atomic_write_bytes(
        art / "summary.json", json.dumps(payload, indent=1, default=_default).encode()
    )
    echo(f"report: {out_dir / 'solaris_report.md'} ({prov['runtime_s']:.0f} s)")
    return payload


def _seed_in_process(args: tuple) -> dict:
    *seed_args, threads = args
    torch.set_num_threads(threads)
    return run_seed(*seed_args)


def run_windows(log, ctx: FeatureContext, cfg: SolarisConfig, st: ReportSettings, features):
    """Every run's measurements: each seed in each window, the latest window first (its
    runs are the longest). Runs are independent, so with ``st.processes > 1`` they run in
    that many spawned processes sharing the cores (small models use one torch thread
    better than two)."""
    runs = [(s, w) for w in reversed(range(st.windows)) for s in st.seeds]
    cores = os.cpu_count() or 1
    n = min(st.processes, len(runs))
    if n <= 1:
        torch.set_num_threads(max(1, min(2, cores)))
        return [
            run_seed(s, w, log, ctx, cfg, st, features)
            for s, w in tqdm(runs, desc="runs", unit="run")
        ]
    threads = max(1, cores // n)
    jobs = [(s, w, log, ctx, cfg, st, features, threads) for s, w in runs]
    with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_seed_in_process, jobs))


def bounds(log, cfg: SolarisConfig, st: ReportSettings) -> dict[str, float]:
    """What no selector can exceed, and the recurrence statistic, over the latest window's
    test period."""
    stats = request_log_stats(log, cfg.requests.recurrence_window_hours)
    eval_from = window_split(log, st.windows - 1, cfg, st).val_end
    out = {
        "recurrence": stats.recurrence,
        "recurrence_with_prior": stats.recurrence_with_prior,
        "retrieval_recall_all": stats.retrieval_recall,
        "retrieval_recall_base_ttl": retrieval_bound(
            log.candidates, eval_from, st.base_ttl_seconds
        ),
    }
    for h in st.ttls_hours:
        out[f"retrieval_recall_ttl_{h:g}h"] = retrieval_bound(
            log.candidates, eval_from, int(h * 3600)
        )
    return out


def _default(x: object) -> object:
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return str(x)
