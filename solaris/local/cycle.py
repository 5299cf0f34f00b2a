"""The SOLARIS cycle as Airflow DAG runs over a window of the request log (``make demo``).

For each refresh interval of the window, in order: ``solaris_candidates`` (serve the
interval's requests, select), ``solaris_embeddings`` (triggered by the candidates asset
event) and ``solaris_enrichment`` (triggered by the pair-embeddings event); at each midnight
``solaris_clustering``; at the window's end ``solaris_training``. Every run's "now" is its
interval, so the window replays history exactly as a backfill would.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solaris.config import SolarisConfig
from solaris.local.airflow import LocalAirflow
from solaris.orchestration import runs
from solaris.orchestration.candidates import DAG_ID as CANDIDATES_DAG
from solaris.orchestration.embeddings import DAG_ID as EMBEDDINGS_DAG
from solaris.orchestration.enrichment import CLUSTERING_DAG_ID, ENRICHMENT_DAG_ID
from solaris.orchestration.handoff import Scope
from solaris.orchestration.layout import Interval, LayoutError
from solaris.orchestration.training import DAG_ID as TRAINING_DAG
from solaris.serving.tiers import TIERS

__all__ = [
    "DAY",
    "CycleReport",
    "downstream_conf",
    "export_config",
    "run_window",
    "window_intervals",
]

DAY = 86_400


def window_intervals(start: int, end: int, cadence_s: int) -> list[Interval]:
    """The cadence-aligned intervals covering ``[start, end)`` (epoch-aligned, as the
    scheduler's ``DeltaDataIntervalTimetable`` and the library replay's cadence are)."""
    if cadence_s <= 0:
        raise LayoutError(f"cadence must be positive, got {cadence_s} s")
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
        rows = [
            r for r in self.candidates if Interval.from_dict(r).start >= since and r.get("labelled")
        ]
        n = sum(r["labelled"] for r in rows)
        names = (*TIERS, "any")
        return n, {
            t: sum(r["coverage"][t] * r["labelled"] for r in rows) / max(n, 1) for t in names
        }


def export_config(cfg: SolarisConfig, path: Path) -> Path:
    """Write ``cfg`` as YAML for the task runs (``SOLARIS_CONFIG``) to read back.

    The task runs need the whole connection, password included, so the file is written
    atomically with mode 0600 (:func:`solaris.files.atomic_write_private`), and as
    ``yaml.safe_dump`` output, which quotes any character a password may hold."""
    import yaml

    from solaris.files import atomic_write_private

    text = yaml.safe_dump(json.loads(cfg.model_dump_json()))
    return atomic_write_private(Path(path), text.encode())


def downstream_conf(extra: dict[str, Any]) -> dict[str, Any]:
    """The conf that starts a downstream run as the scheduler would from the asset event
    with ``extra``: its namespace and intervals."""
    items = extra.get("intervals") or [extra]
    return {
        **Scope.from_json(extra).to_json(),
        "intervals": [Interval.from_dict(i).as_dict() for i in items],
    }


def run_window(
    airflow: LocalAirflow,
    intervals: list[Interval],
    cfg: SolarisConfig,
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

    where = Scope.of(cfg).to_json()
    for interval in tqdm(intervals, desc="airflow cycle", unit="interval", disable=not progress):
        cand = run(CANDIDATES_DAG, {**where, **interval.as_dict()})
        [record] = cand.asset_extras[runs.CANDIDATES]
        report.candidates.append(record)
        emb = run(EMBEDDINGS_DAG, downstream_conf(record))
        [embedded] = emb.asset_extras[runs.PAIR_EMBEDDINGS]
        report.embeddings.append(embedded)
        run(ENRICHMENT_DAG_ID, downstream_conf(embedded))
        if interval.end % DAY == 0:  # the daily clustering run, after midnight's enrichment
            run(CLUSTERING_DAG_ID, {**where, **interval.as_dict()})
    if train_at_end and intervals:
        last = intervals[-1]
        result = run(TRAINING_DAG, {**where, **last.as_dict()})
        [report.training] = result.asset_extras[runs.VERIFIER]
    return report
