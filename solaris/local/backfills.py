"""Stopping an earlier replay's backfills before a replay of the same namespace starts over.

``scripts/airflow_replay.sh`` creates one backfill of the clustering DAG and one of the
candidates DAG, each with the conf ``{"namespace": NAME, "replay": true}``. Airflow keeps at
most one active backfill per DAG: after an interrupted replay (Ctrl-C, a lost terminal) the
old backfills go on, a new ``backfill create`` fails with ``AlreadyRunningBackfill``, and the
namespace the script already wiped would be written by the old runs. So the script first
calls :func:`stop_replay`: it cancels the active backfills of that namespace as Airflow's
REST API does (pause, fail the runs still queued, mark the backfill completed), then waits
until their runs still going, and the embeddings and enrichment runs their events started,
have ended, so that nothing of the old replay writes after the reset. An active backfill of
*another* namespace is never touched: it is reported, and the replay stops before anything
is deleted.

Plain SQL on the PostgreSQL metadata DB (``backfill``, ``backfill_dag_run``, ``dag_run``), as
:mod:`solaris.local.scheduler` reads it: this process never imports Airflow.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence

from solaris.local.scheduler import ServicesError

__all__ = ["SOLARIS_DAGS", "stop_replay"]

SOLARIS_DAGS = (
    "solaris_candidates",
    "solaris_embeddings",
    "solaris_enrichment",
    "solaris_clustering",
    "solaris_training",
)


def _namespace_of(conf: object) -> str | None:
    data = json.loads(conf) if isinstance(conf, str) else conf
    return data.get("namespace") if isinstance(data, dict) else None


def stop_replay(
    db_url: str,
    namespace: str,
    *,
    dag_ids: Sequence[str] = SOLARIS_DAGS,
    timeout_s: float = 600.0,
    echo: Callable[[str], None] = print,
) -> int:
    """Cancel the active backfills of ``dag_ids`` whose conf names ``namespace`` and wait
    until their runs (and the asset-triggered runs of ``dag_ids``) have ended; returns the
    backfills cancelled (none active: 0, at once).

    Raises:
        ServicesError: an active backfill of another namespace holds one of the DAGs (a
            new backfill could not start), or runs still go on after ``timeout_s``.
    """
    import psycopg2

    dsn = db_url.replace("postgresql+psycopg2://", "postgresql://", 1)
    with psycopg2.connect(dsn, connect_timeout=10) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT id, dag_id, dag_run_conf FROM backfill "
            "WHERE dag_id = ANY(%s) AND completed_at IS NULL ORDER BY id",
            (list(dag_ids),),
        )
        active = cur.fetchall()
        others = [(i, d, _namespace_of(c)) for i, d, c in active if _namespace_of(c) != namespace]
        if others:
            shown = ", ".join(f"#{i} of {d} (namespace {n})" for i, d, n in others)
            raise ServicesError(
                f"active backfills of another namespace hold the DAGs: {shown}; Airflow runs "
                "one backfill per DAG at a time: let them finish (or cancel them in the UI, "
                "Browse > Backfills) and run the replay again. Nothing was deleted"
            )
        ours = [i for i, _, _ in active]
        for backfill in ours:
            cur.execute("UPDATE backfill SET is_paused = true WHERE id = %s", (backfill,))
            conn.commit()  # first, so that the scheduler starts no more of its runs
            cur.execute(
                "UPDATE dag_run SET state = 'failed' WHERE state = 'queued' AND id IN "
                "(SELECT dag_run_id FROM backfill_dag_run WHERE backfill_id = %s)",
                (backfill,),
            )
            cur.execute("UPDATE backfill SET completed_at = now() WHERE id = %s", (backfill,))
            conn.commit()
            echo(f"cancelled backfill #{backfill} of the earlier replay of {namespace}")
    if not ours:
        return 0
    deadline = time.monotonic() + timeout_s
    while True:
        with psycopg2.connect(dsn, connect_timeout=10) as conn, conn.cursor() as cur:
            # The cancelled backfills' runs still going, and the runs their asset events
            # started (embeddings, enrichment): a live cycle's scheduled runs are not waited for.
            cur.execute(
                "SELECT count(*) FROM dag_run WHERE state IN ('queued', 'running') AND ("
                "id IN (SELECT dag_run_id FROM backfill_dag_run WHERE backfill_id = ANY(%s)) "
                "OR (run_type = 'asset_triggered' AND dag_id = ANY(%s)))",
                (ours, list(dag_ids)),
            )
            (going,) = cur.fetchone()
        if not going:
            return len(ours)
        if time.monotonic() > deadline:
            raise ServicesError(
                f"{going} runs of the earlier replay still going after {timeout_s:.0f} s; "
                "nothing was deleted: wait for them and run the replay again"
            )
        echo(f"waiting for {going} runs of the earlier replay to end before the reset")
        time.sleep(5)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m solaris.local.backfills NAMESPACE``: :func:`stop_replay` on the metadata DB
    of ``$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``; exit status 1 with the reason on stderr."""
    import os

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("namespace")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    args = parser.parse_args(argv)
    db_url = os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "")
    if not db_url.startswith("postgresql"):
        print(
            "the metadata DB must be PostgreSQL (AIRFLOW__DATABASE__SQL_ALCHEMY_CONN)",
            file=sys.stderr,
        )
        return 1
    try:
        stop_replay(db_url, args.namespace, timeout_s=args.timeout_s)
    except ServicesError as exc:
        print(f"airflow_replay.sh: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
