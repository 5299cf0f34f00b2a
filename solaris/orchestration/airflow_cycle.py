"""The SOLARIS cycle as Airflow DAG runs over a window of the request log (``make demo``).

For each refresh interval of the window, in order: ``solaris_candidates`` (serve the
interval's requests, select), ``solaris_embeddings`` (triggered by the candidates asset
event) and ``solaris_enrichment`` (triggered by the pair-embeddings event); at each midnight
``solaris_clustering``; at the window's end ``solaris_training``. Every run's "now" is its
interval, so the window replays history exactly as a backfill would.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solaris.config import SolarisConfig
from solaris.orchestration import tasks
from solaris.orchestration.candidates import DAG_ID as CANDIDATES_DAG
from solaris.orchestration.embeddings import DAG_ID as EMBEDDINGS_DAG
from solaris.orchestration.enrichment import CLUSTERING_DAG_ID, ENRICHMENT_DAG_ID
from solaris.orchestration.layout import CycleLayout, Interval
from solaris.orchestration.local_airflow import LocalAirflow
from solaris.orchestration.resources import flatten_intervals
from solaris.orchestration.training import DAG_ID as TRAINING_DAG
from solaris.serving.tiers import TIERS

DAY = 86_400


def window_intervals(start: int, end: int, cadence_s: int) -> list[Interval]:
    """The cadence-aligned intervals covering ``[start, end)`` (epoch-aligned, as the
    scheduler's ``DeltaDataIntervalTimetable`` and the library replay's cadence are)."""
    if cadence_s <= 0:
        raise ValueError(f"cadence must be positive, got {cadence_s} s")
    first = start // cadence_s * cadence_s
    return [Interval(t, t + cadence_s) for t in range(first, end, cadence_s)]


@dataclass
class CycleReport:
    """What the DAG runs did: seconds per DAG, candidates records, the training record."""

    seconds: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    candidates: list[dict[str, Any]] = field(default_factory=list)
    embeddings: list[dict[str, Any]] = field(default_factory=list)
    training: dict[str, Any] | None = None

    def coverage(self, since: int) -> tuple[int, dict[str, float]]:
        """Labelled impressions served in intervals starting at or after ``since``, and
        the share that had each tier (and any tier), weighted by impressions."""
        rows = [r for r in self.candidates if r["interval_start"] >= since and r.get("labelled")]
        n = sum(r["labelled"] for r in rows)
        names = (*TIERS, "any")
        return n, {
            t: sum(r["coverage"][t] * r["labelled"] for r in rows) / max(n, 1) for t in names
        }


def reset_cycle(cfg: SolarisConfig, redis: str) -> None:
    """Forget an earlier cycle: its state folder, the Feast project's Redis keys and the
    feature repo's offline parquet (``<repo_path>/data/offline``, which is not namespaced by
    project: point ``store.repo_path`` at a repo of the demo's own). Other Redis data is
    never touched."""
    from solaris.store.connection import redis_client
    from solaris.store.feast_store import delete_project_keys

    shutil.rmtree(CycleLayout(cfg.artifacts_dir).root, ignore_errors=True)
    shutil.rmtree(Path(cfg.store.repo_path) / "data" / "offline", ignore_errors=True)
    client = redis_client(redis, redis_type=cfg.store.redis_type, timeout_s=10.0)
    try:
        delete_project_keys(client, cfg.store.project, extra_keys=[cfg.store.miss_stream])
    finally:
        client.close()


def export_config(cfg: SolarisConfig, path: Path) -> Path:
    """Write ``cfg`` as YAML for the task runs (``SOLARIS_CONFIG``) to read back."""
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json())))
    return path


def run_window(
    airflow: LocalAirflow,
    intervals: list[Interval],
    *,
    train_at_end: bool = True,
    progress: bool = True,
) -> CycleReport:
    """Run the cycle's DAGs over ``intervals`` (oldest first), chaining each downstream run
    on the asset events of its upstream run."""
    from tqdm.auto import tqdm

    report = CycleReport()

    def run(dag_id: str, conf: dict[str, Any]):
        result = airflow.run(dag_id, conf)
        report.seconds[dag_id].append(result.seconds)
        return result

    for interval in tqdm(intervals, desc="airflow cycle", unit="interval", disable=not progress):
        cand = run(CANDIDATES_DAG, interval.as_dict())
        [record] = cand.asset_extras[tasks.CANDIDATES]
        report.candidates.append(record)
        emb = run(EMBEDDINGS_DAG, {"intervals": flatten_intervals([record])})
        [embedded] = emb.asset_extras[tasks.PAIR_EMBEDDINGS]
        report.embeddings.append(embedded)
        run(ENRICHMENT_DAG_ID, {"intervals": flatten_intervals([embedded])})
        if interval.end % DAY == 0:  # the daily clustering run, after midnight's enrichment
            run(CLUSTERING_DAG_ID, {"interval_end": interval.end})
    if train_at_end and intervals:
        result = run(TRAINING_DAG, {"interval_end": intervals[-1].end})
        [report.training] = result.asset_extras[tasks.VERIFIER]
    return report
