"""One entry point per Airflow task: what each ``@task`` body in ``dags/`` calls.

Each entry point takes what Airflow hands the task (the run's ``params``, its data interval,
the asset events that triggered it), builds the :class:`~solaris.config.SolarisConfig`
from the environment (``SOLARIS_*``, ``SOLARIS_CONFIG``) at run time, never at DAG-parse
time, and calls the work function of :mod:`solaris.orchestration`. The run's "now" is its
data interval (or the interval its conf or triggering asset events name), never the wall
clock, so a backfill replays history.

Nothing here imports Airflow: the asset events are read through duck typing (any mapping of
asset → list of objects with an ``extra`` dict), so these functions are tested without a
scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from solaris.config import SolarisConfig

if TYPE_CHECKING:
    from solaris.orchestration.layout import Interval

# Asset URIs of the cycle; the DAG files wrap them in ``airflow.sdk.Asset``.
REQUEST_LOG = "solaris://request_log"
CANDIDATES = "solaris://candidates"
PAIR_EMBEDDINGS = "solaris://pair_embeddings"
USER_AGGREGATES = "solaris://uagg"
ITEM_AGGREGATES = "solaris://iagg"
NEIGHBOUR_FILL = "solaris://nbr"
USER_NEIGHBOURS = "solaris://unn"
VERIFIER = "solaris://verifier"

Params = Mapping[str, object] | None


def config() -> SolarisConfig:
    """The settings of this task run: ``$SOLARIS_CONFIG`` (YAML), then ``SOLARIS_*``."""
    return SolarisConfig.load()


def event_extras(events: Any, asset: object) -> list[Mapping[str, object]]:
    """The ``extra`` of each event of ``asset`` that triggered the run (none for a manual or
    scheduled run, or under ``dag.test``)."""
    if not events:
        return []
    try:
        found = events[asset]
    except (KeyError, TypeError):
        return []
    return [dict(e.extra or {}) for e in found]


def _run_intervals(
    cfg: SolarisConfig, params: Params, start: object, end: object, extras: Sequence[Mapping]
) -> list[Interval]:
    """A scheduled run's data interval; an asset-triggered run's intervals from the events
    (or its conf)."""
    from solaris.orchestration.resources import intervals_from, run_interval

    if extras or (params or {}).get("intervals"):
        return intervals_from(extras, params)
    return [run_interval(cfg, params, start, end)]


# -- solaris_candidates ---------------------------------------------------------------------


def select(params: Params, start: object, end: object, events: Any = None, asset: object = None):
    """Verifier selection for the run's interval(s); the record is the ``candidates``
    asset event's extra (row counts and the interval the embeddings DAG will read)."""
    from solaris.orchestration.candidates import select_interval
    from solaris.orchestration.resources import on_cadence_grid

    cfg = config()
    extras = event_extras(events, asset)
    named = bool(extras) or any(k in (params or {}) for k in ("interval_end", "intervals"))
    cadence = round(cfg.selection.cadence_minutes * 60)
    records = [
        select_interval(cfg, on_cadence_grid(interval, cadence, snap=not named))
        for interval in _run_intervals(cfg, params, start, end, extras)
    ]
    if len(records) == 1:
        return records[0]
    return {
        "interval_start": min(r["interval_start"] for r in records),
        "interval_end": max(r["interval_end"] for r in records),
        "intervals": [
            {"interval_start": r["interval_start"], "interval_end": r["interval_end"]}
            for r in records
        ],
        "selected": sum(r["selected"] for r in records),
        "candidates": sum(r["candidates"] for r in records),
    }


# -- solaris_embeddings ---------------------------------------------------------------------


def _triggered_intervals(params: Params, events: Any, asset: object) -> list[Interval]:
    from solaris.orchestration.resources import flatten_intervals, intervals_from

    return intervals_from(flatten_intervals(event_extras(events, asset)), params)


def plan_shards(params: Params, events: Any = None, asset: object = None) -> list[dict]:
    """The shards of the selections that triggered the run: one mapped task each."""
    from solaris.orchestration.embeddings import plan_shards as plan

    return plan(config(), _triggered_intervals(params, events, asset))


def embed_shard(shard: dict[str, int]) -> dict[str, Any]:
    """FM → autoencoder → ``pair`` view for one shard (a mapped task on the gpu pool)."""
    from solaris.orchestration.embeddings import embed_and_materialize

    return embed_and_materialize(config(), shard)


def summarize_embeddings(
    params: Params, shards: Sequence[dict[str, Any] | None], events: Any = None, asset=None
) -> dict[str, Any]:
    """The run's record: the ``pair_embeddings`` asset event's extra."""
    from solaris.orchestration.embeddings import summarize_embeddings as summarize

    # Indexing, not iterating: iterating Airflow's lazy sequence of mapped results probes one
    # past its end and logs that probe's 404 as an error.
    results = [shards[i] for i in range(len(shards))]
    return summarize(config(), _triggered_intervals(params, events, asset), results)


# -- solaris_enrichment ---------------------------------------------------------------------


def _enrichment_as_of(params: Params, events: Any, asset: object) -> int:
    from solaris.orchestration.enrichment import enrichment_as_of

    return enrichment_as_of(_triggered_intervals(params, events, asset))


def user_aggregates(params: Params, events: Any = None, asset: object = None) -> dict:
    from solaris.orchestration.enrichment import refresh_user_aggregates

    return refresh_user_aggregates(config(), _enrichment_as_of(params, events, asset))


def item_aggregates(params: Params, events: Any = None, asset: object = None) -> dict:
    from solaris.orchestration.enrichment import refresh_item_aggregates

    return refresh_item_aggregates(config(), _enrichment_as_of(params, events, asset))


def neighbour_fill(params: Params, events: Any = None, asset: object = None) -> dict:
    from solaris.orchestration.enrichment import refresh_neighbour_fill

    return refresh_neighbour_fill(config(), _enrichment_as_of(params, events, asset))


# -- solaris_clustering and solaris_training (daily) -----------------------------------------


def _as_of(cfg: SolarisConfig, params: Params, start: object, end: object) -> int:
    from solaris.orchestration.resources import run_interval

    return run_interval(cfg, params, start, end).end


def cluster_users(params: Params, start: object, end: object) -> dict[str, Any]:
    """User embeddings and cosine KNN as of the run's interval end (``unn``)."""
    from solaris.orchestration.enrichment import rebuild_user_neighbours

    cfg = config()
    return rebuild_user_neighbours(cfg, _as_of(cfg, params, start, end))


def retrain_verifier(params: Params, start: object, end: object) -> dict[str, Any]:
    """Retrain the VM on point-in-time features; publish it only if no worse."""
    from solaris.orchestration.training import retrain_verifier as retrain

    cfg = config()
    return retrain(cfg, _as_of(cfg, params, start, end))
