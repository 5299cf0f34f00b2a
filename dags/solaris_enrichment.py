"""Coverage beyond the selected pairs, refreshed on every ``pair_embeddings`` event.

User aggregates (24 h code sum and count), item aggregates, and the neighbour fill for the
candidates the verifier did not select (from the clustering DAG's newest neighbour table),
each as of the newest interval end that triggered the run.
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
    @task(outlets=[USER_AGGREGATES])
    def user_aggregates(params=None, triggering_asset_events=None, outlet_events=None):
        outlet_events[USER_AGGREGATES].extra = enrichment.user_aggregates(
            params, triggering_asset_events
        )

    @task(outlets=[ITEM_AGGREGATES])
    def item_aggregates(params=None, triggering_asset_events=None, outlet_events=None):
        outlet_events[ITEM_AGGREGATES].extra = enrichment.item_aggregates(
            params, triggering_asset_events
        )

    @task(outlets=[NEIGHBOUR_FILL])
    def neighbour_fill(params=None, triggering_asset_events=None, outlet_events=None):
        outlet_events[NEIGHBOUR_FILL].extra = enrichment.neighbour_fill(
            params, triggering_asset_events
        )

    user_aggregates()
    item_aggregates()
    neighbour_fill()


solaris_enrichment()
