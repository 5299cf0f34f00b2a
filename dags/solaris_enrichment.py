"""Coverage beyond the selected pairs, refreshed on every ``pair_embeddings`` event.

User aggregates (24 h code sum and count) and item aggregates, partitioned by user: the
partitions (``SOLARIS_CYCLE__PARTITIONS``) are grouped by their codes in the window
(``plan_partitions``), each group is one mapped task that reads only its partitions' codes
and writes its users' ``uagg`` rows and its share of the item sums
(``partition_aggregates``), and one small task adds the shares up into ``iagg``
(``aggregates``). Beside them, the neighbour fill for the candidates the verifier did not
select (from a neighbour table rebuilt as of the interval, or the clustering DAG's newest).
Everything is as of the newest interval end that triggered the run.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import Asset, dag, task

from solaris.orchestration import enrichment, runs

SETTINGS = runs.settings()  # schedules only: no data, Redis or models at parse time
PAIR_EMBEDDINGS = Asset(runs.PAIR_EMBEDDINGS)
USER_AGGREGATES = Asset(runs.USER_AGGREGATES)
ITEM_AGGREGATES = Asset(runs.ITEM_AGGREGATES)
NEIGHBOUR_FILL = Asset(runs.NEIGHBOUR_FILL)


@dag(
    schedule=[PAIR_EMBEDDINGS],
    start_date=datetime.fromisoformat(SETTINGS.cycle.start),
    catchup=False,
    max_active_runs=1,  # intervals in order: a later write must not land before an earlier
    tags=["solaris"],
    doc_md=__doc__,
)
def solaris_enrichment():
    @task
    def plan_partitions(params=None, triggering_asset_events=None):
        return enrichment.plan_partitions(params, triggering_asset_events)

    @task
    def partition_aggregates(group):
        return enrichment.partition_aggregates(group)

    @task(outlets=[USER_AGGREGATES, ITEM_AGGREGATES])
    def aggregates(results, params=None, triggering_asset_events=None, outlet_events=None):
        (
            outlet_events[USER_AGGREGATES].extra,
            outlet_events[ITEM_AGGREGATES].extra,
        ) = enrichment.aggregates(params, results, triggering_asset_events)

    @task(outlets=[NEIGHBOUR_FILL])
    def neighbour_fill(params=None, triggering_asset_events=None, outlet_events=None):
        outlet_events[NEIGHBOUR_FILL].extra = enrichment.neighbour_fill(
            params, triggering_asset_events
        )

    aggregates(partition_aggregates.expand(group=plan_partitions()))
    neighbour_fill()


solaris_enrichment()
