"""Steps that read the artifacts an earlier run left (request log with its logged scores,
the time split of the model version trained with it)."""

from __future__ import annotations

import json
from pathlib import Path

from solaris.adapters import LoggedScores
from solaris.config import SelectionConfig, SolarisConfig
from solaris.data.schemas import read_table
from solaris.evaluation.replay import ReplayResult, oracle_scores, random_scores, replay
from solaris.examples.movielens.train import load_split
from solaris.model_versions import version_folder
from solaris.namespace import Namespace

__all__ = ["SELECTORS", "replay_from_artifacts"]

SELECTORS = ("verifier", "random", "oracle")


def _demo_models(cfg: SolarisConfig) -> Path:
    """The model version the last demo trained with the request log beside it (its summary
    names it; the older flat models folder when it names none)."""
    root = Namespace.of(cfg).models_root
    summary = Path(cfg.artifacts_dir) / "demo_summary.json"
    try:
        version = json.loads(summary.read_text())["models"].get("version")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        version = None
    return version_folder(root, version) if isinstance(version, str) else root


def replay_from_artifacts(
    cfg: SolarisConfig,
    selection: SelectionConfig,
    selector: str = "verifier",
    latency_seconds: int | None = None,
    refresh_after_requests: int | None = None,
    refresh_share: float = 0.02,
) -> ReplayResult:
    """Replay the saved request log with ``selector`` under ``selection`` settings; with
    ``latency_seconds``, on the near-line path (codes usable that long after the request);
    with ``refresh_after_requests``, refreshing on activity (each request's best stale
    codes, up to ``refresh_share`` of its candidates)."""
    if selector not in SELECTORS:
        raise ValueError(f"unknown selector {selector!r}; choose one of {SELECTORS}")
    log_path = Path(cfg.artifacts_dir) / "log" / "candidates.parquet"
    models_dir = _demo_models(cfg)
    if not log_path.is_file() or not (models_dir / "split.json").is_file():
        raise FileNotFoundError(
            f"no request log or models under {cfg.artifacts_dir}: run `solaris demo` first"
        )
    candidates = read_table(log_path, "request_log").to_pandas()
    ttl_s, cadence_s = int(selection.ttl_hours * 3600), int(selection.cadence_minutes * 60)
    if selector == "verifier":  # the verifier's scores, logged with the request log
        scores = LoggedScores().score(candidates)
    elif selector == "random":
        scores = random_scores(len(candidates), cfg.train.seed)
    else:
        scores = oracle_scores(
            candidates,
            ttl_seconds=ttl_s,
            cadence_seconds=cadence_s,
            latency_seconds=latency_seconds,
        )
    split = load_split(models_dir)  # the models' own test period, whatever cfg says now
    return replay(
        candidates,
        scores,
        share=selection.share,
        ttl_seconds=ttl_s,
        cadence_seconds=cadence_s,
        latency_seconds=latency_seconds,
        refresh_after_requests=refresh_after_requests,
        refresh_share=refresh_share,
        eval_from=split.val_end,
        progress=True,
    )
